"""A Solana run on emulated home links: 4 clients, 2 behind NAT, no bootstrap peers.

Method. For each model preset, the Solana local testnet (a local SVM running the SBF programs,
the run creator's flow, ``psyche-solana-client train`` joiners configured by env files) runs with
``--emulate-internet``: every client in its own network namespace (:mod:`psyche.testnet.internet`),
clients ``--nat`` of them behind their own NAT router (MASQUERADE; nothing can dial in), every
access link shaped with ``tc tbf`` (``--uplink-mbps``, ``--downlink-mbps``). No client is given
another's address: they find each other from their peer records on the chain, and the NAT'd ones
are reached through circuit relays on the public ones. The last client is a *joiner*: it starts
once epoch 0 is training, so it joins epoch 1 and loads the model from its peers. There is no
latency on the links (the kernel here has no netem); the figures are bandwidth-bound only.

Figures (per preset; the JSON holds them all):

* ``epochs_completed``, ``hashes_agree`` (every client's weights hash equal after every apply);
* ``round_time_over_bandwidth_bound``: for each trained round, the time from the first result
  published to the last result downloaded by the last client, over the bound
  ``(N-1) · payload / min(uplink, downlink)`` (each of N clients must receive N-1 payloads, and
  what is received, someone uploaded: on average N-1 payloads per client); the median;
* ``producer_upload_over_payload``: how many times a producer uploaded its own result (from the
  clients' download events: downloads served by the producer itself; the rest were re-served by
  peers that already had it); the median over producers and rounds. Also
  ``wire_upload_per_round_over_payload``: everything a client sent on its link during training
  rounds (all payloads it served, gossip, transactions) per round, over one payload, from the
  interface counters;
* ``joiner_sync_over_bound``: the joiner's P2P model download time over
  ``model bytes / min(its downlink, peers' uplinks summed)``.

Usage (needs root, ``ip``, ``tc``, ``iptables``; the SBF programs built by scripts/build-sbf.sh):

    .venv/bin/python bench/internet.py --quick --json runs/bench-internet.json   # tiny, < 15 min
    .venv/bin/python bench/internet.py --presets tiny,medium                        # + ≈ 51 M
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from psyche.events import DownloadEvent, ModelLoadedEvent, TrainEvent, read_events
from psyche.testnet.envfile import read_env_file
from psyche.testnet.internet import InternetOptions, available
from psyche.testnet.solana import SolanaTestnet, SolanaTestnetOptions, make_solana_testnet

ROOT = Path(__file__).resolve().parents[1]

STATE = """run_id = "{run_id}"
run_state = "WaitingForMembers"

[config]
warmup_time = {warmup}
cooldown_time = 10
epoch_time = {epoch_time}
max_round_train_time = {round_time}
round_witness_time = 1
min_clients = 3
init_min_clients = 3
global_batch_size_start = 8
global_batch_size_end = 8
global_batch_size_warmup_tokens = 0
verification_percent = 0
witness_nodes = 2
total_steps = {steps}
waiting_for_members_extra_time = 1

[model.LLM]
architecture = "HfLlama"
data_type = "Pretraining"
max_seq_len = 64
cold_start_warmup_steps = 0

[model.LLM.checkpoint.Hub]
repo_id = "{model}"

[model.LLM.data_location]
Local = "runs/tiny/data"

[model.LLM.lr_schedule.Cosine]
base_lr = 4.0e-3
warmup_steps = 2
warmup_init_lr = 0.0
total_steps = {steps}
final_lr = 4.0e-4

[model.LLM.optimizer.Distro]
clip_grad_norm = 1.0
compression_decay = 0.999
compression_chunk = 64
compression_topk = 8
quantize_1bit = true
"""

# Per preset: run length and timeouts that fit its compute on 2 CPU cores.
PLANS: dict[str, dict[str, int]] = {
    "tiny": {"steps": 100, "epoch_time": 40, "round_time": 30, "warmup": 30},
    "medium": {"steps": 400, "epoch_time": 130, "round_time": 60, "warmup": 100},
}


def write_config(work: Path, preset: str) -> Path:
    from psyche.training.presets import PRESETS, write_model_dir

    model = work / preset / "model"
    if not (model / "config.json").exists():
        write_model_dir(model, preset=PRESETS[preset], seed=0)
    cfg = work / preset / "config"
    cfg.mkdir(parents=True, exist_ok=True)
    plan = PLANS[preset]
    (cfg / "state.toml").write_text(
        STATE.format(run_id=f"inet-{preset}", model=model.relative_to(ROOT), **plan)
    )
    return cfg


def model_bytes(work: Path, preset: str) -> int:
    return sum(p.stat().st_size for p in (work / preset / "model").glob("*.safetensors"))


class LinkCounters:
    """Each client's bytes sent on its access link, sampled at every coordinator state."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, str, dict[str, int]]] = []
        self._seen = 0

    def tick(self, net: SolanaTestnet) -> bool:
        states = net.states()
        if len(states) == self._seen or net.internet is None:
            return False
        self._seen = len(states)
        sent: dict[str, int] = {}
        for label in net.clients:
            ns = net.internet.namespace(label)
            out = subprocess.run(
                ["ip", "netns", "exec", ns, "cat", "/sys/class/net/eth0/statistics/tx_bytes"],
                capture_output=True,
                text=True,
                check=False,
            )
            if out.returncode == 0 and out.stdout.strip().isdigit():
                sent[label] = int(out.stdout)
        self.samples.append((time.time(), states[-1].run_state, sent))
        return False

    def training_upload(self) -> dict[str, int]:
        """Bytes each client sent while the run was in RoundTrain/RoundWitness."""
        out: dict[str, int] = defaultdict(int)
        for (_, state, a), (_, _, b) in zip(self.samples, self.samples[1:], strict=False):
            if state in ("RoundTrain", "RoundWitness"):
                for label in a.keys() & b.keys():
                    out[label] += max(0, b[label] - a[label])
        return dict(out)


def analyse(
    net: SolanaTestnet, counters: LinkCounters, opts: argparse.Namespace, preset: str, work: Path
) -> dict[str, Any]:
    summary = net.summary().to_json()
    up, down = opts.uplink_mbps * 1e6 / 8, opts.downlink_mbps * 1e6 / 8
    logs = {label: read_events(net.client_log(label)) for label in sorted(net.tallies)}
    trains: dict[int, list[TrainEvent]] = defaultdict(list)
    downloads: dict[int, list[DownloadEvent]] = defaultdict(list)
    peer_label: dict[str, str] = {}
    loads: list[tuple[str, ModelLoadedEvent]] = []
    for label, events in logs.items():
        for e in events:
            if isinstance(e, TrainEvent):
                trains[e.step].append(e)
            elif isinstance(e, DownloadEvent):
                downloads[e.step].append(e)
                peer_label.setdefault(e.producer, "")
            elif isinstance(e, ModelLoadedEvent):
                loads.append((label, e))
    ratios, own_serves, rounds = [], [], []
    for step, ts in sorted(trains.items()):
        dls = downloads.get(step, [])
        n = len(ts)
        if n < 2 or not dls:
            continue
        payload = statistics.median(t.payload_bytes for t in ts)
        first = min(t.t for t in ts)
        spread = max(d.t for d in dls) - first
        bound = (n - 1) * payload / min(up, down)
        ratios.append(spread / bound)
        by_producer: dict[str, int] = defaultdict(int)
        for d in dls:
            if d.from_peer == d.producer:
                by_producer[d.producer] += 1
        own_serves += list(by_producer.values())
        rounds.append(
            {
                "step": step,
                "trainers": n,
                "payload_bytes": payload,
                "distribution_s": round(spread, 3),
                "bound_s": round(bound, 4),
                "own_uploads": dict(by_producer),
                "downloads": len(dls),
            }
        )
    wire = counters.training_upload()
    trained_rounds: dict[str, int] = defaultdict(int)
    payloads: dict[str, list[int]] = defaultdict(list)
    for label, events in logs.items():
        for e in events:
            if isinstance(e, TrainEvent):
                trained_rounds[label] += 1
                payloads[label].append(e.payload_bytes)
    wire_ratios = [
        wire[label] / trained_rounds[label] / statistics.median(payloads[label])
        for label in wire
        if trained_rounds.get(label)
    ]
    joiner = f"client-{opts.clients}"
    mbytes = model_bytes(work, preset)
    joiner_loads = [e for label, e in loads if label == joiner and e.source == "p2p"]
    sync = None
    if joiner_loads and joiner_loads[0].seconds:
        serving = max(1, len(joiner_loads[0].peers))
        bound = mbytes / min(down, serving * up)
        sync = {
            "seconds": joiner_loads[0].seconds,
            "bound_s": round(bound, 3),
            "peers": len(joiner_loads[0].peers),
            "model_bytes": mbytes,
        }
    # A round agrees only if at least two clients reported its hash: one reporter proves nothing.
    hashes = [set(r["model_hash"].values()) for r in summary["rounds"] if len(r["model_hash"]) > 1]
    return {
        "preset": preset,
        "clients": opts.clients,
        "nat_clients": opts.nat,
        "bootstrap_peers_given": bootstrap_peers_given(net, opts.clients),
        "uplink_mbps": opts.uplink_mbps,
        "downlink_mbps": opts.downlink_mbps,
        "epochs_completed": summary["epochs_completed"],
        "hashes_agree": bool(hashes) and all(len(h) == 1 for h in hashes),
        "final_state": summary["final_state"],
        "round_time_over_bandwidth_bound": round(statistics.median(ratios), 2) if ratios else None,
        "producer_upload_over_payload": (
            round(statistics.median(own_serves), 2) if own_serves else None
        ),
        "wire_upload_per_round_over_payload": (
            round(statistics.median(wire_ratios), 2) if wire_ratios else None
        ),
        "joiner_sync_over_bound": round(sync["seconds"] / sync["bound_s"], 2) if sync else None,
        "joiner_sync": sync,
        "joiner_model_source": [e.source for label, e in loads if label == joiner],
        "rounds": rounds,
        "round_duration_s_median": (
            statistics.median(r["duration_s"] for r in summary["rounds"] if r["loss"])
            if any(r["loss"] for r in summary["rounds"])
            else None
        ),
        "rejections": summary["rejections"],
    }


def bootstrap_peers_given(net: SolanaTestnet, clients: int) -> int:
    """Clients whose env file hands them other clients' addresses (read, not assumed)."""
    envs = (read_env_file(net.env_file(slot), {}) for slot in range(1, clients + 1))
    # Values are kept as docker's --env-file keeps them, quotes included.
    return sum(1 for env in envs if env.get("PSYCHE_BOOTSTRAP_PEERS", "").strip(" '\""))


def run_preset(opts: argparse.Namespace, preset: str, work: Path) -> dict[str, Any]:
    cfg = write_config(work, preset)
    out = work / preset / "run"
    shutil.rmtree(out, ignore_errors=True)
    nat = tuple(range(opts.clients - opts.nat + 1, opts.clients + 1))
    joiner = opts.clients
    options = SolanaTestnetOptions(
        config_path=cfg,
        num_clients=opts.clients,
        out_dir=out,
        epochs=opts.epochs,
        timeout_s=opts.timeout,
        internet=InternetOptions(nat, opts.uplink_mbps, opts.downlink_mbps),
        delayed_clients=(joiner,),
    )
    net = make_solana_testnet(options, lambda m: print(f"[{preset}] {m}", flush=True))
    counters = LinkCounters()
    started = time.monotonic()

    def on_tick(n: Any) -> bool:
        counters.tick(n)
        states = n.states()
        if f"client-{joiner}" not in n.clients and any(s.run_state == "RoundTrain" for s in states):
            print(
                f"[{preset}] epoch 0 is training: starting the joiner client-{joiner}", flush=True
            )
            n.start_client(joiner)
        return False

    net.run(on_tick)
    result = analyse(net, counters, opts, preset, work)
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny preset only (< 15 min here)")
    ap.add_argument("--presets", default="tiny,medium")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--nat", type=int, default=2, help="the last N clients are behind NAT")
    ap.add_argument("--uplink-mbps", type=float, default=20.0)
    ap.add_argument("--downlink-mbps", type=float, default=100.0)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="per preset, seconds (default 840 with --quick, so it ends within 15 min; else 1500)",
    )
    ap.add_argument("--workdir", type=Path, default=ROOT / "runs" / "bench-internet")
    ap.add_argument("--json", type=Path, default=None)
    opts = ap.parse_args()
    opts.workdir = opts.workdir.resolve()
    if not opts.workdir.is_relative_to(ROOT):
        ap.error(f"--workdir must be inside the repository ({ROOT}): the run config names the "
                 "model and token files by paths relative to it")  # fmt: skip
    os.chdir(ROOT)  # the config names the model and token files relative to the repository
    ok, why = available()
    if not ok:
        print(f"cannot emulate an internet here: {why}", file=sys.stderr)
        return 2
    if opts.timeout is None:
        opts.timeout = 840.0 if opts.quick else 1500.0
    presets = ["tiny"] if opts.quick else [p for p in opts.presets.split(",") if p]
    results = [run_preset(opts, p, opts.workdir) for p in presets]
    for r in results:
        print(json.dumps({k: v for k, v in r.items() if k != "rounds"}, indent=1))
    if opts.json is not None:
        doc: dict[str, Any] = dict(results[0]) if len(results) == 1 else {"presets": results}
        if len(results) > 1:
            doc.update({k: v for k, v in results[0].items() if k != "rounds"})
        opts.json.parent.mkdir(parents=True, exist_ok=True)
        opts.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
