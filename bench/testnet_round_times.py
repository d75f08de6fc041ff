"""Round times of the Solana local testnet against the centralized one, on the same config.

Method. The script runs, one after the other and each as its own subprocess with the TUI off:

1. ``psyche-centralized-local-testnet start --config-path config/tiny`` (one server with its TCP
   data server, N client processes);
2. ``psyche-solana-local-testnet start --config-path config/tiny-solana`` (a local SVM running the
   SBF programs behind an RPC front, the run creator's flow, N ``psyche-solana-client train``
   processes that send every join, tick, witness and health check as a transaction).

The two configs have the same training parameters (config/tiny-solana differs only in its run id
and its data location: ``Local`` token files instead of the server's, the same files), the same
model, ``--num-clients`` clients and ``--epochs`` epochs (default 1: the whole 10-step run). Each
launcher writes its ``summary.json`` (rounds with ``duration_s``: RoundTrain start to the next
RoundTrain start, from the coordinator's states as the launcher saw them: the server's event
file, or the coordinator account over the SVM's websocket).

Figures: over the *trained* rounds of each run (rounds with losses), the mean and median round
time and the share that ended opportunistically; ``ratio`` = Solana mean / centralized mean.
Both runs share this machine's cores with each other's leftovers (none: they run in sequence)
and with whatever else runs here, so compare only figures from one invocation.

Usage (about 4 min on 2 CPU cores):

    .venv/bin/python bench/testnet_round_times.py [--num-clients 3] [--epochs 1]
        [--workdir runs/bench-round-times] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run_testnet(
    name: str, script: str, config: Path, out: Path, args: argparse.Namespace
) -> dict[str, Any]:
    summary = out / "summary.json"
    cmd = [
        str(BIN / script),
        "start",
        "--config-path",
        str(config),
        "--num-clients",
        str(args.num_clients),
        "--epochs",
        str(args.epochs),
        "--tui",
        "false",
        "--out",
        str(out),
        "--summary",
        str(summary),
        "--timeout",
        str(args.timeout),
    ]
    print(f"== {name}: {' '.join(cmd)}", flush=True)
    started = time.monotonic()
    # Its own session, so an interrupt here can stop the launcher and everything it started.
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)
    try:
        code = proc.wait()
    except BaseException:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        raise
    if code != 0:
        raise SystemExit(f"{name} testnet failed (exit {code}); logs in {out}/logs")
    s = json.loads(summary.read_text())
    trained = [r for r in s["rounds"] if r["loss"]]
    if not trained:
        raise SystemExit(f"{name}: no trained round in {summary}")
    times = [r["duration_s"] for r in trained]
    return {
        "testnet": name,
        "rounds": len(trained),
        "mean_round_s": round(statistics.fmean(times), 3),
        "median_round_s": round(statistics.median(times), 3),
        "opportunistic_share": round(
            sum(r["end_reason"] == "opportunistic" for r in trained) / len(trained), 3
        ),
        "weights_identical": all(len(set(r["model_hash"].values())) <= 1 for r in s["rounds"]),
        "epochs_completed": s["epochs_completed"],
        "wall_s": round(time.monotonic() - started, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-clients", type=int, default=3)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--workdir", type=Path, default=ROOT / "runs" / "bench-round-times")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    rows = [
        run_testnet(
            "centralized",
            "psyche-centralized-local-testnet",
            ROOT / "config" / "tiny",
            args.workdir / "centralized",
            args,
        ),
        run_testnet(
            "solana",
            "psyche-solana-local-testnet",
            ROOT / "config" / "tiny-solana",
            args.workdir / "solana",
            args,
        ),
    ]
    print()
    print(
        f"{'testnet':12} {'rounds':>6} {'mean s':>7} {'median s':>8} {'opport.':>7} {'wall s':>7}"
    )
    for r in rows:
        print(
            f"{r['testnet']:12} {r['rounds']:6d} {r['mean_round_s']:7.2f} "
            f"{r['median_round_s']:8.2f} {r['opportunistic_share']:7.0%} {r['wall_s']:7.1f}"
        )
    ratio = rows[1]["mean_round_s"] / rows[0]["mean_round_s"]
    print(f"mean round time, solana / centralized: {ratio:.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps({"runs": rows, "ratio": round(ratio, 3)}, indent=1) + "\n")


if __name__ == "__main__":
    main()
