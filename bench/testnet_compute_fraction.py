"""The round's compute fraction on the centralized local testnet: DisTrO against SparseLoCo.

Method. Two runs of ``psyche-centralized-local-testnet start`` one after the other, each its own
subprocess with the TUI off, the same model (``--preset``, written here), the same token files,
``--num-clients`` clients and ``--steps`` rounds:

1. **distro**: config/tiny, ``--samples`` samples per client per round (one optimizer step);
2. **sparseloco**: config/tiny-sparseloco with ``inner_steps = H`` and H × ``--samples`` per
   client per round, so each of its H inner steps sees a DisTrO step's batch, and a round trains
   H times the tokens with one payload.

Figures, over the trained rounds of each run (the launcher's ``summary.json``): compute per
round (the median over clients of the train step's ``compute_s``), round wall (RoundTrain start
to the next RoundTrain start), **compute fraction** = mean compute / mean wall, tokens per second
of the run, and bytes each client sends per token (payload bytes from the clients' train events
over the tokens of its round). ``ratio`` columns are sparseloco / distro from the same
invocation; the two runs share this machine's cores only with whatever else runs here.

Usage (about 3 min for tiny on 2 CPU cores; small takes longer):

    .venv/bin/python bench/testnet_compute_fraction.py [--preset tiny|small] [--num-clients 4]
        [--steps 8] [--samples 2] [--inner-steps 16] [--topk-chunk 4096] [--topk 32]
        [--value-bits 2] [--outer-lr 4] [--workdir runs/bench-compute] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _set(text: str, key: str, value: object) -> str:
    out, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
    if n == 0:
        raise SystemExit(f"no {key} in the base config")
    return out


def write_config(
    out: Path, base: str, model: Path, data: Path, args: argparse.Namespace, batch: int
) -> Path:
    """``base``'s state.toml with the bench's model, data, client count, batch and length."""
    text = (ROOT / "config" / base / "state.toml").read_text()
    for key, value in {
        "run_id": f'"bench-{base}"',
        "init_min_clients": args.num_clients,
        "min_clients": args.num_clients,
        "global_batch_size_start": batch,
        "global_batch_size_end": batch,
        "total_steps": args.steps,
        "epoch_time": 100_000,
        "max_round_train_time": args.round_time,
    }.items():
        text = _set(text, key, value)
    if base.endswith("sparseloco"):
        for key in (
            "inner_steps",
            "topk_chunk",
            "topk",
            "value_bits",
            "outer_lr",
            "outer_momentum",
        ):
            text = _set(text, key, getattr(args, key))
    text = text.replace('repo_id = "runs/tiny/model"', f'repo_id = "{model}"')
    out.mkdir(parents=True, exist_ok=True)
    (out / "state.toml").write_text(text)
    data_toml = (ROOT / "config" / "tiny" / "data.toml").read_text()
    (out / "data.toml").write_text(re.sub(r"(?m)^dir = .*$", f'dir = "{data}"', data_toml))
    return out


def run_testnet(name: str, config: Path, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    summary = out / "summary.json"
    cmd = [
        str(BIN / "psyche-centralized-local-testnet"),
        "start",
        "--config-path",
        str(config),
        "--num-clients",
        str(args.num_clients),
        "--epochs",
        "1",
        "--tui",
        "false",
        "--out",
        str(out / "net"),
        "--summary",
        str(summary),
        "--timeout",
        str(args.timeout),
    ]
    print(f"== {name}: {' '.join(cmd)}", flush=True)
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)
    try:
        code = proc.wait()
    except BaseException:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        raise
    if code != 0:
        raise SystemExit(f"{name} testnet failed (exit {code}); logs in {out}/net/logs")
    s = json.loads(summary.read_text())
    trained = [r for r in s["rounds"] if r["loss"]]
    if not trained:
        raise SystemExit(f"{name}: no trained round in {summary}")
    trains = []
    for f in sorted((out / "net" / "events").glob("client-*.jsonl")):
        for line in f.read_text().splitlines():
            e = json.loads(line)
            if e.get("event") == "train":
                trains.append(e)
    compute = statistics.fmean(r["compute_s"] for r in trained)
    wall = statistics.fmean(r["duration_s"] for r in trained)
    tokens = sum(e["tokens"] for e in trains)
    return {
        "optimizer": name,
        "rounds": len(trained),
        "compute_s": round(compute, 4),
        "round_wall_s": round(wall, 4),
        "compute_fraction": round(compute / wall, 4),
        "tokens_per_s": round(tokens / sum(r["duration_s"] for r in trained), 1),
        "payload_bytes": statistics.median(e["payload_bytes"] for e in trains),
        "bytes_per_token": round(sum(e["payload_bytes"] for e in trains) / tokens, 2),
        "final_loss": s["final_loss"],
        "weights_identical": all(len(set(r["model_hash"].values())) <= 1 for r in s["rounds"]),
        "wall_s": round(time.monotonic() - started, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="tiny", choices=("tiny", "small"))
    p.add_argument("--num-clients", type=int, default=4)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--samples", type=int, default=2, help="per client per optimizer step")
    # SparseLoCo's settings: bench/optimizers.py's arm F (H 16, top-32 of 4,096, 2 bits,
    # outer LR 4), the one that sends 4x fewer bytes per token than DisTrO.
    p.add_argument("--inner-steps", type=int, default=16, help="SparseLoCo H")
    p.add_argument("--topk-chunk", type=int, default=4096)
    p.add_argument("--topk", type=int, default=32)
    p.add_argument("--value-bits", type=int, default=2, choices=(1, 2))
    p.add_argument("--outer-lr", type=float, default=4.0)
    p.add_argument("--outer-momentum", type=float, default=0.0)
    p.add_argument("--round-time", type=int, default=30, help="max_round_train_time")
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--workdir", type=Path, default=ROOT / "runs" / "bench-compute")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()

    from psyche.data.prepare import ByteTokenizer, prepare_corpus
    from psyche.data.synth import synth_corpus
    from psyche.training.presets import PRESETS, write_model_dir

    work = args.workdir.resolve()
    model, data = work / f"model-{args.preset}", work / "data"
    if not (model / "config.json").is_file():
        write_model_dir(model, preset=PRESETS[args.preset], seed=0)
    if not data.is_dir():
        synth_corpus(work / "text", 400_000, seed=0)
        prepare_corpus([work / "text"], ByteTokenizer(), data, seq_len=64)
    per_step = args.num_clients * args.samples
    runs = []
    for name, base, batch in (
        ("distro", "tiny", per_step),
        ("sparseloco", "tiny-sparseloco", per_step * args.inner_steps),
    ):
        cfg = write_config(work / name / "cfg", base, model, data, args, batch)
        runs.append(run_testnet(name, cfg, work / name, args))
    d, s = runs
    ratios = {
        k: round(s[k] / d[k], 3)
        for k in ("compute_fraction", "tokens_per_s", "bytes_per_token", "round_wall_s")
    }
    print(f"\n{args.preset}, {args.num_clients} clients, {args.steps} rounds, H {args.inner_steps}")
    cols = ("compute_s", "round_wall_s", "compute_fraction", "tokens_per_s", "bytes_per_token")
    print(f"{'':12}" + "".join(f"{c:>18}" for c in cols))
    for r in runs:
        print(f"{r['optimizer']:12}" + "".join(f"{r[c]:>18}" for c in cols))
    print(f"{'ratio s/d':12}" + "".join(f"{ratios.get(c, ''):>18}" for c in cols))
    if not all(r["weights_identical"] for r in runs):
        raise SystemExit("weights differed between clients")
    if args.json is not None:
        out = {"preset": args.preset, "inner_steps": args.inner_steps, "runs": runs, **ratios}
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
