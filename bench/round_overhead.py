"""Round overhead on loopback: round wall time over pure training compute, and bytes per round.

Method. For each client count N in ``--clients`` (default 2, 4, 8) the script writes a temporary
copy of the shipped run config (``config/tiny/state.toml`` + ``data.toml``) with

- ``init_min_clients = min_clients = N`` and ``witness_nodes = min(2, N)``;
- ``global_batch_size_start = global_batch_size_end = N × --samples-per-client`` (default 4
  samples of 64 tokens per client and round, i.e. every client trains the same non-trivial
  slice whatever N is; the per-client work is constant, so an ideal system's round time does not
  grow with N);
- ``total_steps = --steps`` (default 10, also the cosine schedule's length),
  ``round_witness_time = 1`` and ``waiting_for_members_extra_time = 1``;
- the same model (``runs/tiny/model``) and token files (``data.toml``'s ``dir`` rewritten to the
  absolute path of the prepared data directory; :func:`make_testnet` creates both if missing);
- its own ports: the server listens on ``--base-port + 10·i`` and the data server on the next
  port (the ``Server`` address in the copied ``state.toml``), so runs never collide with each
  other or with a default testnet on 20000/20001.

It then starts the local testnet (:class:`psyche.testnet.launcher.Testnet`: one server and N
client processes, TUI off) and reads its summary (:mod:`psyche.testnet.summary`), the server's
state events and the clients' event logs. Figures, over the *trained* rounds (rounds whose step
has ``train`` events), excluding the first two trained rounds of each epoch (model load, JIT and
allocator warm-up, and the first apply that has nothing to apply):

- ``median_round_s``: median round wall time (``duration_s``: RoundTrain start to the next
  RoundTrain start);
- ``median_compute_s``: median over rounds of ``compute_s`` (itself the median over the round's
  clients of pure training time: forward, backward and DisTrO compression of the client's slice);
- ``ratio`` = ``median_round_s / median_compute_s`` (the issue's figure, target ≤ 1.3);
- ``ratio_excl_witness_phase`` = median RoundTrain phase (RoundTrain start to RoundWitness start,
  from the server's state events) over ``median_compute_s``: the round time without the fixed
  witness phase (see below); ``median_witness_phase_s`` is what was taken out;
- the RoundTrain phase split further: ``median_start_lag_s`` (round start to the first client
  starting its training: state broadcast, apply of round h−2, data fetch) and
  ``median_exchange_s`` (the last client finishing its training to RoundWitness: ``Finished``
  gossip, payload downloads, witness message); the rest is the slowest client's training;
- ``opportunistic_share``: share of those rounds whose RoundTrain ended because the full witness
  set arrived (not by ``max_round_train_time``);
- ``bytes_per_client_round``: mean over clients of the ``payload_bytes`` of the client's ``train``
  events, per measured round, i.e. what each client produces and serves per round. It does *not*
  count re-serving: a client that downloaded a peer's payload serves that copy to others as well,
  and the P2P layer's framing, gossip announcements and coordinator messages are not counted
  either. On a full mesh each client downloads about (N−1) payloads per round.

Trade-offs and caveats:

- Time floors that do not depend on the model. (1) RoundWitness lasts until the coordinator's
  whole-unix-second clock has passed ``round_witness_time`` (1 s, the smallest non-zero value)
  and a server tick (every 0.5 s) sees it: it ends at the first tick in a later whole second,
  0–1.5 s after it began, depending on where in the second the last witness arrived. (2) Rounds
  start on server ticks and, after the witness timeout, end on one, so round times are
  multiples of 0.5 s. (3) Clients take their opportunistic steps (announce ``Finished``, send
  the witness) in a 0.5 s poll loop (``POLL_S`` in :mod:`psyche.daemon.engine`), so the
  exchange costs up to two poll intervals after the last client finished training, even on
  loopback. The tiny model trains a 4-sample slice in ~0.1–0.5 s, so ``ratio`` is dominated by
  these floors and cannot approach 1.3 on this config; ``ratio_excl_witness_phase`` shows what
  the rest of the round costs, and ``--samples-per-client`` (a bigger slice per client) makes
  compute dominate instead.
- Clients share this machine's cores: with more clients than cores, compute time grows (every
  process gets a share of the CPUs) and so does everything else; the ratio stays meaningful as
  long as all numbers come from the same run.
- Medians, not means: a single slow round (GC, a late reconnect) should not move the figure.
- One run per N with few rounds (``--steps``): the figures are indicative, not precise.

Usage (about 10 min on 2 busy CPU cores with the defaults; see bench/README.md for figures):

    .venv/bin/python bench/round_overhead.py [--clients 2,4,8] [--steps 10]
        [--samples-per-client 4] [--json out.json] [--workdir DIR]

With ``--backend solana`` the same runs go through ``psyche-solana-local-testnet`` instead
(:mod:`psyche.testnet.solana`: the local SVM running the SBF programs, every join, tick and
witness a transaction, clients reading the token files themselves): the config defaults to
``config/tiny-solana`` (the same training parameters; ``Local`` data instead of the server's),
there is no server and no data port, and the phases come from the coordinator account's states as
the launcher's chain follower saw them (``chain-events.jsonl``) instead of the server's events.
Needs ``target/deploy/*.so`` (``scripts/build-sbf.sh``).

Ctrl-C (or SIGTERM) stops the current testnet and kills every process it started.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console
from rich.table import Table

from psyche.events import StateEvent, TrainEvent, read_events
from psyche.protocol.locations import HubCheckpoint, LocalData
from psyche.protocol.model import LLM
from psyche.protocol.run_file import load_data_config, load_run_config
from psyche.testnet.base import LocalTestnet
from psyche.testnet.launcher import TestnetOptions, make_testnet
from psyche.testnet.summary import Summary

REPO = Path(__file__).resolve().parents[1]
WARMUP_ROUNDS = 2


@dataclass(frozen=True, slots=True)
class Figures:
    rounds_measured: int
    median_round_s: float
    median_compute_s: float
    ratio: float
    median_train_phase_s: float
    median_start_lag_s: float
    median_exchange_s: float
    median_witness_phase_s: float
    ratio_excl_witness_phase: float
    opportunistic_share: float
    bytes_per_client_round: float
    wall_s: float


# --- config ---------------------------------------------------------------------------------


def _set(text: str, key: str, value: str) -> str:
    """Set every ``key = …`` line of a TOML text (``total_steps`` is in two tables)."""
    pattern = re.compile(rf"^(\s*){re.escape(key)}\s*=.*$", re.MULTILINE)
    new, n = pattern.subn(lambda m: f"{m.group(1)}{key} = {value}", text)
    if n == 0:
        raise ValueError(f"{key!r} not found in the run config")
    return new


def write_config(
    src: Path,
    dst: Path,
    *,
    n: int,
    steps: int,
    samples_per_client: int,
    data_port: int | None,
) -> None:
    """A copy of ``src`` (state.toml + data.toml) for N clients, with absolute paths. Without
    ``data_port`` (a Solana run) the config's ``Local`` token files are made absolute instead and
    there is no data.toml to copy."""
    dst.mkdir(parents=True, exist_ok=True)
    text = (src / "state.toml").read_text()
    run = load_run_config(src / "state.toml", require_run_id=True)
    assert isinstance(run.model, LLM) and isinstance(run.model.checkpoint, HubCheckpoint)
    # The shipped repo_id is relative to the repository root (where the CLI is run from).
    model_dir = str((REPO / run.model.checkpoint.repo.repo_id).resolve())
    batch = n * samples_per_client
    for key, value in (
        ("init_min_clients", str(n)),
        ("min_clients", str(n)),
        ("witness_nodes", str(min(2, n))),
        ("global_batch_size_start", str(batch)),
        ("global_batch_size_end", str(batch)),
        ("total_steps", str(steps)),
        ("round_witness_time", "1"),
        ("waiting_for_members_extra_time", "1"),
        ("repo_id", json.dumps(model_dir)),
    ):
        text = _set(text, key, value)
    if data_port is None:
        assert isinstance(run.model.data_location, LocalData)
        local = (REPO / run.model.data_location.path).resolve()
        (dst / "state.toml").write_text(_set(text, "Local", json.dumps(str(local))))
        load_run_config(dst / "state.toml", require_run_id=True)
        return
    text = _set(text, "Server", json.dumps(f"127.0.0.1:{data_port}"))
    (dst / "state.toml").write_text(text)
    data_src = src / "data.toml"
    data_dir = load_data_config(data_src).resolved_dir(data_src)
    data_text = _set(data_src.read_text(), "dir", json.dumps(str(data_dir)))
    (dst / "data.toml").write_text(data_text)
    load_run_config(dst / "state.toml", require_run_id=True)  # validate the result
    load_data_config(dst / "data.toml")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As asyncio's servers do: a port with connections in TIME_WAIT is still usable.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# --- figures --------------------------------------------------------------------------------


def _phases(states: Path) -> dict[tuple[int, int], tuple[float, float]]:
    """(epoch, step) → (RoundTrain start, RoundWitness start) from the coordinator's states as the
    testnet recorded them (the server's events, or the chain follower's)."""
    train: dict[tuple[int, int], float] = {}
    witness: dict[tuple[int, int], float] = {}
    for e in read_events(states):
        if not isinstance(e, StateEvent):
            continue
        key = (e.epoch, e.step)
        if e.run_state == "RoundTrain":
            train.setdefault(key, e.t)
        elif e.run_state == "RoundWitness" and key in train:
            witness.setdefault(key, e.t)
    return {k: (t, witness[k]) for k, t in train.items() if k in witness}


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 3) if xs else float("nan")


def figures(net: LocalTestnet, summary: Summary, wall_s: float) -> Figures:
    trained = [r for r in summary.rounds if r["loss"] and r["compute_s"] > 0]
    measured: list[dict[str, Any]] = []
    for epoch in sorted({r["epoch"] for r in trained}):
        rounds = sorted((r for r in trained if r["epoch"] == epoch), key=lambda r: r["step"])
        measured += rounds[WARMUP_ROUNDS:]
    if not measured:
        raise RuntimeError(f"no trained rounds after the first {WARMUP_ROUNDS} of an epoch")
    steps = {r["step"] for r in measured}
    per_client: list[float] = []
    spans: dict[int, list[tuple[float, float]]] = {}  # step → (train start, train end) per client
    for label in sorted(net.tallies):
        events = [
            e
            for e in read_events(net.client_log(label))
            if isinstance(e, TrainEvent) and e.step in steps
        ]
        per_client.append(sum(e.payload_bytes for e in events) / len(measured))
        for e in events:
            spans.setdefault(e.step, []).append((e.t - e.seconds, e.t))
    phases = _phases(net.states_file)
    train_phase: list[float] = []
    witness_phase: list[float] = []
    start_lag: list[float] = []
    exchange: list[float] = []
    for r in measured:
        if (r["epoch"], r["step"]) not in phases:
            continue
        start, witness_start = phases[(r["epoch"], r["step"])]
        train_phase.append(witness_start - start)
        witness_phase.append(r["duration_s"] - (witness_start - start))
        if r["step"] in spans:
            start_lag.append(min(a for a, _ in spans[r["step"]]) - start)
            exchange.append(witness_start - max(b for _, b in spans[r["step"]]))
    round_s = statistics.median(r["duration_s"] for r in measured)
    compute_s = statistics.median(r["compute_s"] for r in measured)
    train_s = statistics.median(train_phase) if train_phase else float("nan")
    return Figures(
        rounds_measured=len(measured),
        median_round_s=round(round_s, 3),
        median_compute_s=round(compute_s, 4),
        ratio=round(round_s / compute_s, 2),
        median_train_phase_s=round(train_s, 3),
        median_start_lag_s=_median(start_lag),
        median_exchange_s=_median(exchange),
        median_witness_phase_s=_median(witness_phase),
        ratio_excl_witness_phase=round(train_s / compute_s, 2),
        opportunistic_share=round(
            sum(r["end_reason"] == "opportunistic" for r in measured) / len(measured), 3
        ),
        bytes_per_client_round=round(statistics.fmean(per_client), 1) if per_client else 0.0,
        wall_s=round(wall_s, 1),
    )


# --- running --------------------------------------------------------------------------------


def _make(
    args: argparse.Namespace, n: int, index: int, work: Path, console: Console
) -> LocalTestnet:
    """The testnet of one run: its config written for ``n`` clients, its ports chosen."""
    cfg = work / f"n{n}" / "config"
    out = work / f"n{n}" / "testnet"
    log = lambda m: console.print(f"  {m}")  # noqa: E731
    settings = {"n": n, "steps": args.steps, "samples_per_client": args.samples_per_client}
    common: dict[str, Any] = {
        "config_path": cfg,
        "num_clients": n,
        "out_dir": out,
        "micro_batch_size": args.micro_batch_size,
        "timeout_s": args.timeout,
    }
    if args.backend == "solana":
        from psyche.testnet.solana import make_solana_testnet
        from psyche.testnet.solana_options import SolanaTestnetOptions

        write_config(args.config, cfg, data_port=None, **settings)
        console.print(f"[bold]{n} clients[/] on the local SVM, batch "
                      f"{n * args.samples_per_client}, logs in {out}")  # fmt: skip
        return make_solana_testnet(SolanaTestnetOptions(**common), log)
    server_port = args.base_port + 10 * index
    data_port = server_port + 1
    for port in (server_port, data_port):
        if not _port_free(port):
            raise RuntimeError(f"port {port} is in use; pick another --base-port")
    write_config(args.config, cfg, data_port=data_port, **settings)
    console.print(
        f"[bold]{n} clients[/]: server :{server_port}, data :{data_port}, "
        f"batch {n * args.samples_per_client}, logs in {out}"
    )
    return make_testnet(TestnetOptions(server_port=server_port, **common), log)


def run_one(args: argparse.Namespace, n: int, index: int, work: Path, console: Console) -> Figures:
    net = _make(args, n, index, work, console)
    out = net.out
    seen: set[tuple[int, int]] = set()

    def on_tick(t: LocalTestnet) -> None:
        for r in t.summary().rounds[:-1]:
            key = (r["epoch"], r["step"])
            if key not in seen:
                seen.add(key)
                console.print(
                    f"  step {r['step']:3d}: {r['duration_s']:5.2f} s, compute "
                    f"{r['compute_s']:.3f} s, {r['end_reason']}"
                )

    started = time.monotonic()
    try:
        summary = net.run(on_tick)
    finally:
        # Testnet.run starts the server and clients before its own try/finally: make sure an
        # interrupt during start-up does not leave them running. stop_all is idempotent.
        net.stop_all()
    wall = time.monotonic() - started
    (out / "summary.json").write_text(json.dumps(summary.to_json(), indent=1) + "\n")
    return figures(net, summary, wall)


COLUMNS = (
    ("N", "clients"),
    ("rounds", "trained rounds measured"),
    ("round s", "median round wall time"),
    ("compute s", "median pure training time"),
    ("ratio", "round / compute"),
    ("train s", "RoundTrain phase"),
    ("lag s", "round start → first client starts training"),
    ("exch. s", "last client done training → RoundWitness"),
    ("witn. s", "RoundWitness phase"),
    ("ratio −w", "train phase / compute"),
    ("opport.", "share of opportunistic ends"),
    ("B/cl/rd", "payload bytes sent per client per round"),
)


def render(results: dict[int, Figures], console: Console) -> None:
    table = Table(title="round overhead on loopback (medians over measured rounds)")
    for name, _ in COLUMNS:
        table.add_column(name, justify="right")
    for n, f in results.items():
        table.add_row(
            str(n),
            str(f.rounds_measured),
            f"{f.median_round_s:.2f}",
            f"{f.median_compute_s:.3f}",
            f"{f.ratio:.2f}",
            f"{f.median_train_phase_s:.2f}",
            f"{f.median_start_lag_s:.2f}",
            f"{f.median_exchange_s:.2f}",
            f"{f.median_witness_phase_s:.2f}",
            f"{f.ratio_excl_witness_phase:.2f}",
            f"{f.opportunistic_share:.0%}",
            f"{f.bytes_per_client_round:,.0f}",
        )
    console.print(table)
    console.print("; ".join(f"{name}: {what}" for name, what in COLUMNS[2:]))


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.replace(" ", "").split(",") if x]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--clients", type=_ints, default=[2, 4, 8], help="comma-separated counts")
    p.add_argument("--steps", type=int, default=10, help="total_steps of each run")
    p.add_argument(
        "--samples-per-client",
        type=int,
        default=4,
        help="64-token samples each client trains per round (global batch = N × this)",
    )
    p.add_argument("--micro-batch-size", type=int, default=2, help="client micro-batch size")
    p.add_argument(
        "--backend",
        choices=("centralized", "solana"),
        default="centralized",
        help="the TCP server's testnet, or the Solana one on the local SVM",
    )
    p.add_argument(
        "--config", type=Path, help="default: config/tiny (config/tiny-solana with solana)"
    )
    p.add_argument("--base-port", type=int, default=23400, help="server port of the first run")
    p.add_argument("--timeout", type=float, default=900.0, help="per-run limit in seconds")
    p.add_argument("--workdir", type=Path, help="keep configs and logs here (default: temp)")
    p.add_argument("--json", type=Path, help="write the figures to this file")
    args = p.parse_args(argv)
    if args.config is None:
        args.config = REPO / "config" / ("tiny-solana" if args.backend == "solana" else "tiny")
    if not args.clients or min(args.clients) < 1:
        p.error("--clients needs positive counts")
    if args.steps < WARMUP_ROUNDS + 2:
        p.error(f"--steps must be at least {WARMUP_ROUNDS + 2}")
    return args


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 120)
    signal.signal(signal.SIGTERM, _sigterm)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="round-overhead-"))
    results: dict[int, Figures] = {}
    try:
        for i, n in enumerate(args.clients):
            results[n] = run_one(args, n, i, work, console)
            console.print(f"  → {asdict(results[n])}")
    except KeyboardInterrupt:
        console.print("[red]interrupted[/]: every testnet process was stopped")
        return 130
    except (RuntimeError, TimeoutError) as e:
        console.print(f"[bold red]failed[/]: {e}")
        return 1
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
        if results:
            render(results, console)
    if args.json is not None:
        fig = {
            "settings": {
                "backend": args.backend,
                "steps": args.steps,
                "samples_per_client": args.samples_per_client,
                "micro_batch_size": args.micro_batch_size,
                "warmup_rounds_excluded": WARMUP_ROUNDS,
            },
            "clients": {str(n): asdict(f) for n, f in results.items()},
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(fig, indent=2) + "\n")
        console.print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
