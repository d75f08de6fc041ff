"""Scale: a simulated run of N clients, per round, per result; the witness blooms; many real hosts.

Issue 38, item 3. Two parts, each optional.

**Simulated run** (``--clients 4,16,64``): for each N, in a fresh child process (so that its peak
RSS is its own), the run ``psyche demo`` builds (:class:`psyche.simulation.run.SimulatedRun`: real
round engines, coordinator and run host, real DisTrO training of the tiny model; in-memory
network, simulated clock) with ``init_min_clients = min_clients = N``, a global batch of 2 × N
(2 samples per client, the same slice whatever N), ``witness_nodes`` from ``--witnesses``
(default 2, the tiny config's) and enough steps. The run stops after ``--rounds`` + 2 trained
rounds have ended (a round ends when the coordinator publishes its RoundWitness phase); the
first two are warm-up (model load, the first apply) and are dropped. Per measured round, from the
timestamps of consecutive round ends:

- ``round s``: wall seconds;
- ``cpu s``: the process's CPU seconds (all threads; the N clients and the coordinator share it);
- ``µs/result``: CPU seconds / (N × results per client), where a client handles every result of
  the round (its own and N − 1 downloads: verify, decode, copy check, witness, apply), i.e. N;
- ``copy %``: the copy check's share of that CPU: the thread CPU time inside
  ``psyche.daemon.copy_check.copied_from`` and ``result_sketch`` (wrapped here, where ``gossip`` and
  ``training`` call them; they run synchronously on the event loop's thread) over the round's
  CPU seconds; the same per result in µs (``copy µs/result``: over N², the results every client
  sketches), split into the sketch's (``sketch µs``, per result) and the lookup's (``lookup
  µs/check``, per ``copied_from`` call); ``hold µs``: inserting a result's sketch in the round's
  index (``RoundState.hold``), per result, not counted in ``copy %`` (so that it compares with
  the figures before it was measured) but in ``+hold %`` (the check's whole share: sketch,
  lookup and the index insert, which exists only for the check); with the copy check's
  operation counts (``psyche.distro.copy_index.COUNTS``: checks, band candidates, exact
  confirmations) per round;
- the event loop thread's CPU seconds per round (``loop cpu s``: the clients' handling of
  results and coordinator states, without training and the apply's worker threads) and per
  result (``loop µs/result``), the copy check's share of it, and the v2 payload decodes
  (``psyche.distro.payload.decode_v2``, wrapped): per round, µs each, share of the loop; and
  the cyclic garbage collector's passes (``gc %`` of the process's CPU, per result, full passes
  per round), timed by ``gc.callbacks`` in whichever thread ran them;
- peak RSS of the child, and over N (``RSS/client``: (peak − RSS before the run) / N). Per held
  result: a client holds the results of two rounds (2 N), so the N² part of the peak RSS over
  the runs is ``bytes per held result × 2 N²``; fitted (least squares, ``a + b N + c 2N²``) over the
  measured N and printed with the fit's residual;
- the blobs the busiest client serves at each round end (its own and downloaded results, which
  ``psyche.daemon.result_serving`` withdraws after ``KEEP_ROUNDS`` rounds), and the growth of the
  process's RSS per measured round;
- the witness blooms of the run's rounds (every participant bloom the coordinator stored; its
  members are the clients it finds, since broadcast blooms hold payload hashes this process does
  not track): their members (must all be found) and 200,000 random non-members per bloom, tested
  with a numpy copy of ``Bloom.contains`` (checked against it on a sample): the measured
  false-positive rate against the bound ``(1 − (1 − 1/m)^(k n))^k`` (m = 3072 bits, k = 8 keys,
  n = the bloom's entries).

``--decoded-mib M``: each client keeps at most M MiB of decoded results per round for their apply
(default: the client's ``DECODED_BUDGET``, 32; 0: every result decoded again at its apply, as
before; N clients share the process, so at 256 the default costs several GB).

``--profile`` runs the largest N under cProfile (timed by the event loop thread's CPU time) and
prints the top entries by own time
(``--profile-out FILE``: its statistics also written to FILE, for ``pstats``).

Separately, blooms built as a witness builds them (``Bloom.empty(seed)`` with a random seed,
``participant_item`` of 256 random identities) for the largest witness quorum: 32 witnesses
(``MAX_WITNESSES``), quorum ``⌊2·32/3⌋`` = 21. A non-member counts as healthy only if at least
21 of the 32 blooms hold it by mistake: measured over 200,000 non-members, with the binomial tail
it implies.

**Real hosts** (``--p2p-hosts 64 --p2p-rounds 20``): H :class:`psyche.p2p.node.P2PNode` s (each its
own libp2p host process, as a client has; no torch) on 127.0.0.1, full mesh, each allowing the
others; round 1 starts once every host is connected to every other (the time is printed). Each
round every host serves one payload (``--p2p-size`` random bytes, default the tiny
model's 5,534) and announces it (a signed ``TrainingResult``, as a trainer does); every host
fetches every other host's payload as the daemon does (``fetch_detailed`` from the announcer
first, then every other member; the hosts hand a blob off after two uploads). The round ends when
every fetch has finished. Each announcement is sent again on the daemon's schedule
(``psyche.daemon.resending``; ``--p2p-no-resend``: once). Reported: every host holds every
payload at the end, per-host CPU seconds of the host process per round (``/proc/PID/stat``),
payload bytes each host uploaded per round (from which peer each fetch came; gossip bytes are
not counted: the host has no byte counter, and ``/proc/PID/io`` does not see its socket sends),
and per (producer, round) how many copies the producer itself sent (target ≤ 2 whatever H);
also the requests each fetch made and its failed attempts by reason (busy, lacking the blob,
timed out, transfer failed), how long after its announcement each host first heard a
result, and per round the commonest reasons of failed fetches.

    .venv/bin/python bench/scale.py --clients 4,16,64 --rounds 4 --json scale.json
    .venv/bin/python bench/scale.py --clients 64 --rounds 2 --profile
    .venv/bin/python bench/scale.py --p2p-hosts 64 --p2p-rounds 20 --json p2p.json
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import cProfile
import dataclasses
import gc
import io
import json
import math
import os
import pstats
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from psyche.p2p.node import P2PNode

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "config" / "tiny" / "state.toml"
SAMPLES_PER_CLIENT = 2
NON_MEMBERS = 200_000


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# --- blooms -------------------------------------------------------------------------------------

_FNV_PRIME = np.uint64(0x100000001B3)


def bloom_contains_many(bloom: Any, items: np.ndarray) -> np.ndarray:
    """``bloom.contains`` for each row of ``items`` (uint8, M × L), in numpy."""
    words = np.array(bloom.words, dtype=np.uint64)
    ok = np.ones(items.shape[0], dtype=bool)
    cols = items.astype(np.uint64)
    with np.errstate(over="ignore"):
        for key in bloom.keys:
            h = np.full(items.shape[0], key, dtype=np.uint64)
            for j in range(items.shape[1]):
                h = (h ^ cols[:, j]) * _FNV_PRIME
            pos = h % np.uint64(bloom.BITS)
            ok &= ((words[pos >> np.uint64(6)] >> (pos & np.uint64(63))) & np.uint64(1)).astype(
                bool
            )
    return ok


def bloom_bound(n: int) -> float:
    from psyche.protocol.bloom import Bloom

    m, k = Bloom.BITS, Bloom.KEYS
    return (1.0 - (1.0 - 1.0 / m) ** (k * n)) ** k


def binomial_tail(n: int, p: float, at_least: int) -> float:
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(at_least, n + 1))


def _check_numpy_bloom(bloom: Any, rng: np.random.Generator) -> None:
    sample = rng.integers(0, 256, size=(300, 32), dtype=np.uint8)
    fast = bloom_contains_many(bloom, sample)
    slow = [bloom.contains(bytes(row)) for row in sample]
    assert fast.tolist() == slow, "numpy bloom check disagrees with Bloom.contains"


def measure_blooms(blooms: list[tuple[Any, list[bytes]]], seed: int = 1) -> dict[str, Any]:
    """Blooms with their members: members found, FP rate over random non-members vs the bound."""
    rng = np.random.default_rng(seed)
    out = []
    for bloom, members in blooms:
        if not members:
            continue
        _check_numpy_bloom(bloom, rng)
        mem = np.frombuffer(b"".join(members), dtype=np.uint8).reshape(len(members), -1)
        found = int(bloom_contains_many(bloom, mem).sum())
        non = rng.integers(0, 256, size=(NON_MEMBERS, mem.shape[1]), dtype=np.uint8)
        fp = int(bloom_contains_many(bloom, non).sum())
        out.append((len(members), found, fp))
    if not out:
        return {"blooms": 0}
    entries = [n for n, _, _ in out]
    tests = NON_MEMBERS * len(out)
    return {
        "blooms": len(out),
        "entries_max": max(entries),
        "entries_mean": sum(entries) / len(entries),
        "members_missing": sum(n - f for n, f, _ in out),
        "non_member_tests": tests,
        "false_positives": sum(fp for _, _, fp in out),
        "fp_rate": sum(fp for _, _, fp in out) / tests,
        "fp_bound_mean": sum(bloom_bound(n) for n in entries) / len(entries),
        "fp_bound_at_max": bloom_bound(max(entries)),
    }


def quorum_blooms(entries: int = 256, witnesses: int = 32, seed: int = 2) -> dict[str, Any]:
    """``witnesses`` participant blooms of ``entries`` random trainers, built as a witness builds
    them; how often a non-member reaches the quorum of sightings."""
    from psyche.coordinator.consensus import participant_item
    from psyche.protocol.bloom import Bloom
    from psyche.protocol.identity import SecretKey

    rng = np.random.default_rng(seed)
    trainers = [SecretKey.generate().node_identity() for _ in range(entries)]
    items = [participant_item(t) for t in trainers]
    blooms = []
    for _ in range(witnesses):
        b = Bloom.empty(int(rng.integers(0, 2**63)))
        b.add_all(items)
        blooms.append((b, items))
    per = measure_blooms(blooms, seed)
    non = rng.integers(0, 256, size=(NON_MEMBERS, 32), dtype=np.uint8)
    hits = sum(bloom_contains_many(b, non).astype(np.int64) for b, _ in blooms)
    quorum = max(1, (2 * witnesses) // 3)
    p = bloom_bound(entries)
    return {
        **per,
        "witnesses": witnesses,
        "quorum": quorum,
        "non_members": NON_MEMBERS,
        "max_sightings_of_a_non_member": int(hits.max()),
        "non_members_at_quorum": int((hits >= quorum).sum()),
        "quorum_fp_bound": binomial_tail(witnesses, p, quorum),
    }


# --- the simulated run --------------------------------------------------------------------------


def prepare_inputs(work: Path, tokens: int) -> tuple[Path, Path]:
    from psyche.data.prepare import ByteTokenizer, prepare_corpus
    from psyche.data.synth import synth_corpus
    from psyche.protocol.run_file import load_run_config
    from psyche.training.presets import PRESETS, write_model_dir

    model_dir, text_dir, data_dir = work / "model", work / "text", work / "data"
    if not (model_dir / "config.json").exists():
        write_model_dir(model_dir, preset=PRESETS["tiny"], seed=0)
    if not data_dir.exists():
        rc = load_run_config(TINY, require_run_id=True)
        synth_corpus(text_dir, tokens, seed=0)
        prepare_corpus([text_dir], ByteTokenizer(), data_dir, seq_len=rc.model.max_seq_len)  # type: ignore[union-attr]
    return model_dir, data_dir


class GcTimer:
    """The cyclic garbage collector's passes in this process: CPU seconds of the thread that
    ran them (whichever call's allocation made one fall due pays it, so the wrapped parts above
    include any that fell in them) and passes per generation."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.passes = [0, 0, 0]
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.thread_time()
        else:
            self.seconds += time.thread_time() - self._t0
            self.passes[info["generation"]] += 1


class CopyTimer:
    """Wraps the copy check where the daemon calls it; sums its time, in all (``seconds``: the
    sketch and the lookup, what ``copy %`` has always counted) and per part (``parts``:
    ``result_sketch``, ``copied_from``, and ``hold``, the index insert, which ``copy %`` leaves
    out so that its figures compare with the earlier ones)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self.parts: dict[str, float] = {"result_sketch": 0.0, "copied_from": 0.0, "hold": 0.0}
        self.counts: dict[str, int] = dict.fromkeys(self.parts, 0)

    def install(self) -> None:
        from psyche.daemon import gossip, rounds, training

        for mod, name in ((gossip, "copied_from"), (gossip, "result_sketch"),
                          (training, "result_sketch")):  # fmt: skip
            setattr(mod, name, self._wrap(getattr(mod, name), name, True))
        rounds.RoundState.hold = self._wrap(rounds.RoundState.hold, "hold", False)  # type: ignore[method-assign]
        from psyche.distro import payload

        self.parts["decode"], self.counts["decode"] = 0.0, 0
        payload.decode_v2 = self._wrap(payload.decode_v2, "decode", False)  # type: ignore[assignment]

    def _wrap(self, fn: Any, name: str, counted: bool) -> Any:
        # The event loop's thread runs the check synchronously, so its thread CPU time is the
        # check's own; wall time would count the other jobs of a loaded machine.
        def timed(*args: Any, **kw: Any) -> Any:
            t0 = time.thread_time()
            try:
                return fn(*args, **kw)
            finally:
                spent = time.thread_time() - t0
                self.parts[name] += spent
                self.counts[name] += 1
                if counted:
                    self.seconds += spent
                    self.calls += 1

        return timed


def sim_one(
    n: int, rounds: int, witnesses: int, work: Path, profile: bool, profile_out: str | None = None
) -> dict[str, Any]:
    """One simulated run of ``n`` clients (in this process); its figures. With ``profile``, the
    run under cProfile, its statistics also written to ``profile_out`` if given (for pstats)."""
    from psyche.distro.copy_index import COUNTS
    from psyche.protocol.model import LLM
    from psyche.protocol.run_file import load_run_config
    from psyche.simulation.run import RoundReport, SimulatedRun

    model_dir, data_dir = work / "model", work / "data"
    rc = load_run_config(TINY, require_run_id=True)
    assert isinstance(rc.model, LLM)
    steps = rounds + 6
    rc = dataclasses.replace(
        rc,
        config=dataclasses.replace(
            rc.config,
            init_min_clients=n,
            min_clients=n,
            global_batch_size_start=SAMPLES_PER_CLIENT * n,
            global_batch_size_end=SAMPLES_PER_CLIENT * n,
            witness_nodes=witnesses,
            total_steps=steps,
            epoch_time=100_000,
            max_round_train_time=600,
        ),
        model=dataclasses.replace(
            rc.model,
            lr_schedule=dataclasses.replace(rc.model.lr_schedule, total_steps=steps),  # type: ignore[call-arg]
        ),
    )
    timer = CopyTimer()
    timer.install()
    gc_timer = GcTimer()
    gc.callbacks.append(gc_timer)
    out = Path(tempfile.mkdtemp(prefix=f"scale-{n}-", dir=work))
    sim = SimulatedRun(rc, model_dir, data_dir, out, n_clients=n, checkpoint=False)
    blooms: dict[bytes, tuple[Any, int]] = {}
    inner = sim.host.on_publish

    def on_publish(c: Any) -> None:
        assert inner is not None
        inner(c)
        for w in c.current_round().witnesses:
            for b in (w.participant_bloom, w.broadcast_bloom):
                blooms.setdefault(b.to_bytes(), (b.copy(), c.current_round().height))

    sim.host.on_publish = on_publish
    marks: list[dict[str, Any]] = []
    reports: list[RoundReport] = []

    def on_round(r: RoundReport) -> None:
        reports.append(r)
        if r.trained:
            marks.append(
                {
                    "t": time.perf_counter(),
                    "cpu": time.process_time(),
                    "loop_cpu": time.thread_time(),
                    "decode_s": timer.parts["decode"],
                    "decodes": timer.counts["decode"],
                    "copy_s": timer.seconds,
                    "sketch_s": timer.parts["result_sketch"],
                    "hold_s": timer.parts["hold"],
                    "gc_s": gc_timer.seconds,
                    "gc_full": gc_timer.passes[2],
                    "checks": COUNTS.checks,
                    "band_candidates": COUNTS.band_candidates,
                    "confirmations": COUNTS.confirmations,
                    "step": r.step,
                    "served": max(len(c.transport.served()) for c in sim.clients.values()),
                    "rss": _rss_kb() * 1024,
                }
            )
            print(f"  N={n} step {r.step} ended {time.perf_counter() - t_start:.1f} s "
                  f"(cpu {time.process_time():.1f} s)", file=sys.stderr, flush=True)  # fmt: skip

    def until(_: SimulatedRun) -> bool:
        return len(marks) >= rounds + 2

    rss_before = _rss_kb() * 1024
    t_start = time.perf_counter()
    # The event loop's thread CPU time, not wall time: on a machine shared with other jobs wall
    # time charges their time to whatever this thread was running (the loop's functions run
    # here; training and the apply's worker threads are not profiled either way).
    prof = cProfile.Profile(time.thread_time) if profile else None

    async def main() -> Any:
        if prof is not None:
            prof.enable()
        try:
            return await sim.run(on_round, max_epochs=1, until=until)
        finally:
            if prof is not None:
                prof.disable()

    asyncio.run(main())
    total_s = time.perf_counter() - t_start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    m = marks[1:]
    assert len(m) >= 2, f"only {len(marks)} trained rounds ended"
    k = len(m) - 1

    def per_round(key: str) -> float:
        return (m[-1][key] - m[0][key]) / k

    cpu = per_round("cpu")
    # Blooms of the rounds measured: entries = what the witness attested (members unknown to
    # us here, so the trainers of the round: the participant items of every client).
    from psyche.coordinator.consensus import participant_item

    clients = [participant_item(SimulatedRun.key_of(i).node_identity()) for i in range(n)]
    part_blooms = []
    for b, _h in blooms.values():
        members = [x for x in clients if b.contains(x)]
        part_blooms.append((b, members))
    bloom_fig = measure_blooms([(b, mem) for b, mem in part_blooms if len(mem) >= n // 2])
    result: dict[str, Any] = {
        "n": n,
        "rounds_measured": k,
        "round_s": per_round("t"),
        "cpu_s": cpu,
        "results_per_client": n,
        "us_per_result": cpu / (n * n) * 1e6,
        "copy_s": per_round("copy_s"),
        "copy_share": per_round("copy_s") / cpu if cpu else 0.0,
        "copy_hold_share": (per_round("copy_s") + per_round("hold_s")) / cpu if cpu else 0.0,
        "copy_checks": per_round("checks"),
        "copy_us_per_result": per_round("copy_s") / (n * n) * 1e6,
        "sketch_us_per_result": per_round("sketch_s") / (n * n) * 1e6,
        "loop_cpu_s": per_round("loop_cpu"),
        "loop_us_per_result": per_round("loop_cpu") / (n * n) * 1e6,
        "copy_share_of_loop": per_round("copy_s") / per_round("loop_cpu"),
        "decodes": per_round("decodes"),
        "decode_us": per_round("decode_s") / max(1.0, per_round("decodes")) * 1e6,
        "decode_share_of_loop": per_round("decode_s") / per_round("loop_cpu"),
        "lookup_us_per_check": (per_round("copy_s") - per_round("sketch_s"))
        / max(1.0, per_round("checks"))
        * 1e6,
        "hold_us_per_result": per_round("hold_s") / (n * n) * 1e6,
        "gc_share": per_round("gc_s") / cpu if cpu else 0.0,
        "gc_us_per_result": per_round("gc_s") / (n * n) * 1e6,
        "gc_full_passes": per_round("gc_full"),
        "band_candidates": per_round("band_candidates"),
        "confirmations": per_round("confirmations"),
        "rss_before": rss_before,
        "rss_peak": peak,
        "rss_per_client": (peak - rss_before) / n,
        "served_per_client": [x["served"] for x in marks],
        "rss_mb_by_round": [round(x["rss"] / 1e6, 1) for x in marks],
        "rss_growth_per_round": per_round("rss"),
        "run_s": total_s,
        "hashes_agree": all(r.hashes_agree for r in reports),
        "end_reasons": sorted({r.end_reason for r in reports}),
        "applied_batches": max((r.applied_batches for r in reports), default=0),
        "payload_bytes": max((r.payload_bytes for r in reports), default=0),
        "run_blooms": bloom_fig,
    }
    if prof is not None:
        if profile_out:
            prof.dump_stats(profile_out)
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
        result["profile_tottime"] = s.getvalue()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(40)
        result["profile_cumulative"] = s.getvalue()
    return result


def fit_per_held_result(rows: list[dict[str, Any]]) -> dict[str, float] | None:
    """Least squares of peak RSS on (1, N, 2N²): the last coefficient is bytes per held result."""
    if len(rows) < 3:
        return None
    ns = np.array([r["n"] for r in rows], dtype=float)
    a = np.stack([np.ones_like(ns), ns, 2 * ns**2], axis=1)
    y = np.array([r["rss_peak"] for r in rows], dtype=float)
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    resid = float(np.abs(a @ coef - y).max())
    return {"base": coef[0], "per_client": coef[1], "per_held_result": coef[2], "max_resid": resid}


def run_sim(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    ns = [int(x) for x in args.clients.split(",") if x]
    prepare_inputs(work, max(300_000, 64 * SAMPLES_PER_CLIENT * max(ns) * (args.rounds + 10) * 2))
    rows = []
    for n in ns:
        profile = args.profile and n == max(ns)
        cmd = [sys.executable, __file__, "--_one", str(n), "--rounds", str(args.rounds),
               "--witnesses", str(args.witnesses), "--_work", str(work)]  # fmt: skip
        if args.decoded_mib is not None:
            cmd += ["--decoded-mib", str(args.decoded_mib)]
        if profile:
            cmd.append("--profile")
            if args.profile_out:
                cmd += ["--profile-out", args.profile_out]
        print(f"N={n}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
        res = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True)
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
    print()
    hdr = (
        "| N | rounds | round s | cpu s | µs/result | copy % | +hold % | copy µs/result "
        "| sketch µs "
        "| lookup µs/check | hold µs | checks | band cand. | confirm. "
        "| peak RSS MB | RSS/client MB | weights | run blooms: n, FP measured / bound |"
    )
    print(hdr)
    print("|" + "---|" * 18)
    for r in rows:
        b = r["run_blooms"]
        bl = (f"{b['entries_max']}, {b['fp_rate']:.2e} / {b['fp_bound_at_max']:.2e}"
              if b.get("blooms") else "-")  # fmt: skip
        print(
            f"| {r['n']} | {r['rounds_measured']} | {r['round_s']:.2f} | {r['cpu_s']:.2f} "
            f"| {r['us_per_result']:.0f} | {100 * r['copy_share']:.1f} "
            f"| {100 * r.get('copy_hold_share', 0.0):.1f} | {r['copy_us_per_result']:.0f} "
            f"| {r['sketch_us_per_result']:.0f} "
            f"| {r['lookup_us_per_check']:.0f} | {r['hold_us_per_result']:.0f} "
            f"| {r['copy_checks']:.0f} "
            f"| {r['band_candidates']:.0f} | {r['confirmations']:.0f} "
            f"| {r['rss_peak'] / 1e6:.0f} | {r['rss_per_client'] / 1e6:.1f} "
            f"| {'identical' if r['hashes_agree'] else 'DIVERGED'} | {bl} |"
        )
    print(
        "\nThe event loop's thread (the clients' handling of results, without training):\n\n"
        "| N | loop cpu s | loop µs/result | copy % of loop | decodes | decode µs "
        "| decode % of loop | gc % | gc µs/result | full gc passes |\n|" + "---|" * 10
    )
    for r in rows:
        print(
            f"| {r['n']} | {r['loop_cpu_s']:.2f} | {r['loop_us_per_result']:.0f} "
            f"| {100 * r['copy_share_of_loop']:.1f} | {r['decodes']:.0f} | {r['decode_us']:.0f} "
            f"| {100 * r['decode_share_of_loop']:.1f} | {100 * r.get('gc_share', 0.0):.1f} "
            f"| {r.get('gc_us_per_result', 0.0):.0f} | {r.get('gc_full_passes', 0.0):.1f} |"
        )
    print()
    for r in rows:
        print(
            f"N={r['n']}: blobs served by the busiest client at each round end "
            f"{r.get('served_per_client')}; RSS growth {r.get('rss_growth_per_round', 0) / 1e6:.1f}"
            " MB per measured round"
        )
    if len(rows) >= 2:
        lo, hi = rows[0], rows[-1]
        print(f"\nwork per result N={hi['n']} / N={lo['n']}: "
              f"{hi['us_per_result'] / lo['us_per_result']:.2f}x (target ≤ 1.5x)")  # fmt: skip
    fit = fit_per_held_result(rows)
    if fit:
        print(
            f"peak RSS fit a + b·N + c·2N²: per held result c = "
            f"{fit['per_held_result'] / 1e3:.1f} kB, per client b = {fit['per_client'] / 1e6:.2f}"
            f" MB, base {fit['base'] / 1e6:.0f} MB (max residual {fit['max_resid'] / 1e6:.1f} MB)"
        )
    for r in rows:
        if "profile_tottime" in r:
            print(f"\ncProfile, N={r['n']}, whole run, by own time:\n{r['profile_tottime']}")
    q = quorum_blooms()
    print(
        f"\nquorum blooms: {q['witnesses']} witnesses × {q['entries_max']} entries: per-bloom FP "
        f"{q['fp_rate']:.2e} (bound {q['fp_bound_at_max']:.2e}, {q['false_positives']} of "
        f"{q['non_member_tests']}); non-members seen by ≥ quorum {q['quorum']}: "
        f"{q['non_members_at_quorum']} of {q['non_members']} (most sightings "
        f"{q['max_sightings_of_a_non_member']}; bound {q['quorum_fp_bound']:.1e})"
    )
    return {"sim": rows, "rss_fit": fit, "quorum_blooms": q}


# --- real hosts ---------------------------------------------------------------------------------


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def full_mesh(nodes: list[P2PNode]) -> None:
    """Allow every node every other, connect each pair (16 dials at a time) and wait until each
    has gossip peers (4, or all the others when fewer) and a connection to every other node
    (at most 10 minutes)."""
    ids = [n.peer_id for n in nodes]
    for n in nodes:
        n.set_allowed_peers(p for p in ids if p != n.peer_id)
    sem = asyncio.Semaphore(16)

    async def connect(a: P2PNode, b: P2PNode) -> None:
        async with sem:
            await a.connect(b.listen_addrs)

    await asyncio.gather(*(connect(a, b) for i, a in enumerate(nodes) for b in nodes[i + 1 :]))
    await asyncio.gather(*(n.wait_for_gossip_peers(min(len(nodes) - 1, 4), 120) for n in nodes))
    # A failed dial is retried by the host's redial loop; the rounds measure a connected run,
    # as a run's members are once its epoch has started (the mesh's time is printed).
    want = len(nodes) * (len(nodes) - 1)
    deadline = time.monotonic() + 600
    while (have := sum(len(n.direct_peers()) for n in nodes)) < want:
        if time.monotonic() > deadline:
            print(f"mesh incomplete: {have} of {want} connections", file=sys.stderr, flush=True)
            break
        await asyncio.sleep(1)


def _reason_kind(reason: str) -> str:
    """A failed attempt's reason (``psyche.p2p.host.fetch``) without its peer-specific details."""
    for kind in ("busy", "does not have", "no complete blob", "transfer failed"):
        if kind in reason:
            return kind
    return "other"


def _p2p_round_row(
    step: int,
    seconds: float,
    want: int,
    got: dict[tuple[str, str, int], str],
    failed: list[tuple[str, str, int, str]],
    hosts: int,
) -> dict[str, Any]:
    own: dict[str, int] = {}
    for (_me, producer, s), src in got.items():
        if s == step and src == producer:
            own[producer] = own.get(producer, 0) + 1
    return {
        "step": step,
        "round_s": seconds,
        "want": want,
        "fetched": sum(1 for (_, _, s) in got if s == step),
        "failed": sum(1 for f in failed if f[2] == step),
        "failed_why": dict(
            collections.Counter(
                re.sub(r"12D3KooW\w+", "<peer>", f[3])[:160] for f in failed if f[2] == step
            ).most_common(5)
        ),
        "own_max": max(own.values(), default=0),
        "own_mean": sum(own.values()) / hosts,
    }


async def p2p(
    hosts: int,
    rounds: int,
    size: int,
    json_path: str | None = None,
    resend: bool = True,
    resend_all: bool = False,
    gossip_resends: bool = False,
) -> dict[str, Any]:
    from psyche.daemon.resending import Outbox
    from psyche.p2p.messages import (
        TrainingResult,
        WireCommitment,
        open_announcement,
        sign_announcement,
    )
    from psyche.p2p.node import P2PNode
    from psyche.protocol.commitment import make_commitment
    from psyche.protocol.identity import SecretKey

    keys = [SecretKey.generate() for _ in range(hosts)]
    nodes = [P2PNode() for _ in range(hosts)]
    t0 = time.monotonic()
    for i in range(0, hosts, 8):
        await asyncio.gather(*(n.start(k, run_id="scale") for n, k in
                               zip(nodes[i:i + 8], keys[i:i + 8], strict=True)))  # fmt: skip
    print(f"{hosts} hosts started in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
    try:
        ids = [n.peer_id for n in nodes]
        t0 = time.monotonic()
        await full_mesh(nodes)
        print(f"full mesh in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)

        by_id = dict(zip(ids, nodes, strict=True))
        # (fetcher, producer, step) -> from_peer; per step, the blob hashes
        got: dict[tuple[str, str, int], str] = {}
        failed: list[tuple[str, str, int, str]] = []
        refusals: dict[str, int] = {}  # failed attempts before each successful fetch, by reason
        blobs: dict[int, dict[str, bytes]] = {}
        pending: set[asyncio.Task[None]] = set()

        async def fetch(me: str, producer: str, step: int, blob: bytes) -> None:
            others = [p for p in ids if p not in (me, producer)]
            try:
                res = await by_id[me].fetch_detailed(
                    blob, from_any_of=[producer, *others], max_size=size, timeout=120
                )
                got[(me, producer, step)] = res.from_peer
                for _peer, reason in res.failures:
                    kind = _reason_kind(reason)
                    refusals[kind] = refusals.get(kind, 0) + 1
            except Exception as e:
                failed.append((me, producer, step, repr(e)))

        started: set[tuple[str, str, int]] = set()
        announced: dict[tuple[str, int], float] = {}  # (producer, step) -> when it announced
        heard: list[float] = []  # seconds from an announcement to each host's first hearing of it
        boxes = {i: Outbox() for i in ids}
        step_now = 0

        async def resender() -> None:
            # As the daemon does (psyche.daemon.resending): each announcement again 4, 12 and
            # 28 s after the first while its round can still be witnessed, unless every other
            # host has asked for its payload, and then straight to the hosts that have not
            # asked (``resend_all``: every resend through gossip to
            # everyone, as until 2026-12-06; ``gossip_resends``: through gossip, as until
            # 2026-12-07).
            while True:
                await asyncio.sleep(0.5)
                for i, box in boxes.items():

                    def not_asked(blob: bytes, node: P2PNode = by_id[i]) -> frozenset[str]:
                        others = frozenset(p for p in ids if p != node.peer_id)
                        return others if resend_all else others - node.askers(blob)

                    due = box.due(
                        now=time.monotonic(), height=step_now, training=True, not_asked=not_asked,
                    )  # fmt: skip
                    for r in due:
                        if r.to is None or resend_all or gossip_resends:
                            await by_id[i].announce(r.data)
                        else:
                            await by_id[i].tell(r.to, r.data)

        async def consume(me: str) -> None:
            async for peer, data in by_id[me].announcements():
                ann = open_announcement(data, from_peer=peer)
                p = ann.payload
                if isinstance(p, TrainingResult) and (me, peer, p.step) not in started:
                    started.add((me, peer, p.step))  # a resend of a result already taken
                    heard.append(time.monotonic() - announced.get((peer, p.step), time.monotonic()))
                    task = asyncio.create_task(fetch(me, peer, p.step, p.blob_hash))
                    pending.add(task)
                    task.add_done_callback(pending.discard)

        consumers = [asyncio.create_task(consume(i)) for i in ids]
        if resend:
            consumers.append(asyncio.create_task(resender()))
        cpu0 = {i: _proc_cpu(by_id[i].pid) for i in ids}
        parent0 = time.process_time()
        t_rounds = time.monotonic()
        round_s: list[float] = []
        per_round: list[dict[str, Any]] = []
        for step in range(1, rounds + 1):
            step_now = step
            t = time.monotonic()
            blobs[step] = {}
            for i, k in zip(ids, keys, strict=True):
                blob = by_id[i].serve(os.urandom(size), report_askers=True)
                blobs[step][i] = blob
                ann = TrainingResult(step=step, batch_start=step, batch_end=step,
                                     commitment=WireCommitment.of(make_commitment(k, blob)),
                                     blob_hash=blob, blob_size=size, nonce=0)  # fmt: skip
                signed = sign_announcement(k, ann)
                announced[(i, step)] = time.monotonic()
                await by_id[i].announce(signed)
                boxes[i].sent_result(signed, height=step, now=time.monotonic(), blob_hash=blob)
            want = hosts * (hosts - 1)
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                done = sum(1 for (_, _, s) in got if s == step)
                done += sum(1 for f in failed if f[2] == step)
                if done >= want:
                    break
                await asyncio.sleep(0.05)
            round_s.append(time.monotonic() - t)
            row = _p2p_round_row(step, round_s[-1], want, got, failed, hosts)
            # Who never heard whose announcement (nor a resend): one receiver missing many
            # producers points at its mesh, one producer missed by many at its publishing.
            unheard = [(me[-6:], pr[-6:]) for me in ids for pr in ids
                       if me != pr and (me, pr, step) not in started]  # fmt: skip
            row["unheard"] = unheard
            if unheard:
                print(f"  round {step}: never heard (receiver, producer): {unheard}",
                      file=sys.stderr, flush=True)  # fmt: skip
            per_round.append(row)
            print(f"  round {step}: {row['round_s']:.2f} s, fetched {row['fetched']} of {want} "
                  f"(failed {row['failed']}), own copies a producer sent max {row['own_max']}",
                  file=sys.stderr, flush=True)  # fmt: skip
            for why, count in row["failed_why"].items():
                print(f"    failed {count}: {why}", file=sys.stderr, flush=True)
            if json_path:
                # A run stopped by a time limit still leaves what its rounds measured.
                Path(json_path).write_text(json.dumps({"partial": True, "hosts": hosts,
                                                       "rounds": per_round}, indent=1))  # fmt: skip
        elapsed = time.monotonic() - t_rounds
        cpu = {i: (_proc_cpu(by_id[i].pid) - cpu0[i]) / rounds for i in ids}
        await asyncio.sleep(1.5)  # the hosts send their counters every second
        requests = sum(n.counters.blobs_served + n.counters.blob_requests_refused
                       for n in nodes)  # fmt: skip
        parent_cpu = (time.process_time() - parent0) / rounds
        for task in [*consumers, *pending]:
            task.cancel()
        held_all = all(
            set(b.values()) <= set(by_id[i].served()) for b in blobs.values() for i in ids
        )
        missing = sum(
            len(set(b.values()) - set(by_id[i].served())) for b in blobs.values() for i in ids
        )
        uploads: dict[str, int] = dict.fromkeys(ids, 0)
        own: dict[tuple[str, int], int] = {}
        for (_me, producer, step), src in got.items():
            uploads[src] = uploads.get(src, 0) + 1
            if src == producer:
                own[(producer, step)] = own.get((producer, step), 0) + 1
        own_counts = [own.get((i, s), 0) for i in ids for s in blobs]
        up = [uploads[i] * size / rounds for i in ids]
        return {
            "hosts": hosts,
            "rounds": rounds,
            "payload_bytes": size,
            "fetches_ok": len(got),
            "fetches_failed": len(failed),
            "failures": failed[:10],
            "every_host_holds_every_payload": held_all,
            "payloads_missing": missing,
            "round_s_median": sorted(round_s)[len(round_s) // 2],
            "rounds_s": elapsed,
            "host_cpu_s_per_round_mean": sum(cpu.values()) / hosts,
            "host_cpu_s_per_round_max": max(cpu.values()),
            "parent_cpu_s_per_round": parent_cpu,
            "uploaded_bytes_per_round_mean": sum(up) / hosts,
            "uploaded_bytes_per_round_max": max(up),
            "producer_sends_max": max(own_counts),
            "producer_sends_mean": sum(own_counts) / len(own_counts),
            "producer_sends_le_2": max(own_counts) <= 2,
            "blob_requests_per_fetch": requests / max(1, len(got) + len(failed)),
            "failed_attempts_per_fetch": {
                k: v / max(1, len(got)) for k, v in sorted(refusals.items())
            },
            "resend": resend,
            "heard_s_median": float(np.median(heard)) if heard else 0.0,
            "heard_s_p99": float(np.percentile(heard, 99)) if heard else 0.0,
            "heard_s_max": max(heard, default=0.0),
            "heard_after_3s": sum(1 for h in heard if h > 3.0),
            "resent": sum(b.resent for b in boxes.values()),
            "resend_all": resend_all,
            "gossip_resends": gossip_resends,
            "told": sum(n.counters.told for n in nodes),
            "told_failed": sum(n.counters.told_failed for n in nodes),
            "told_received": sum(n.counters.told_received for n in nodes),
            "not_resent_every_host_asked": sum(b.settled for b in boxes.values()),
            "per_round": per_round,
        }
    finally:
        await asyncio.gather(*(n.stop() for n in nodes), return_exceptions=True)


def print_p2p(r: dict[str, Any]) -> None:
    print(
        f"\n{r['hosts']} hosts, {r['rounds']} rounds, one {r['payload_bytes']} B payload per host "
        f"per round: fetches ok {r['fetches_ok']}, failed {r['fetches_failed']}; every host holds "
        f"every payload: {r['every_host_holds_every_payload']} (missing {r['payloads_missing']})"
    )
    print(
        f"round (announce → all fetched) median {r['round_s_median']:.2f} s; host CPU s/round "
        f"mean {r['host_cpu_s_per_round_mean']:.3f}, max {r['host_cpu_s_per_round_max']:.3f}; "
        f"parent (all {r['hosts']} P2PNodes) CPU s/round {r['parent_cpu_s_per_round']:.3f}"
    )
    print(
        f"payload bytes uploaded per host per round mean {r['uploaded_bytes_per_round_mean']:.0f}"
        f", max {r['uploaded_bytes_per_round_max']:.0f} (payloads only, not gossip)"
    )
    print(
        f"copies a producer sent of its own payload: max {r['producer_sends_max']}, mean "
        f"{r['producer_sends_mean']:.2f} (≤ 2: {r['producer_sends_le_2']}); blob requests "
        f"answered per fetch (every host's served + refused) "
        f"{r['blob_requests_per_fetch']:.2f}; announcements resent {r['resent']}, not resent "
        f"as every host had asked for the payload {r.get('not_resent_every_host_asked', 0)}"
    )
    fails = ", ".join(f"{k} {v:.2f}" for k, v in r.get("failed_attempts_per_fetch", {}).items())
    print(f"failed attempts before a fetch's copy, per fetch: {fails or 'none'}")
    if "heard_s_max" in r:
        results = r["fetches_ok"] + r["fetches_failed"]
        print(
            f"a result first heard, from its announcement: median {r['heard_s_median']:.2f} s, "
            f"p99 {r['heard_s_p99']:.2f} s, max {r['heard_s_max']:.2f} s; after 3 s (from a "
            f"resend or gossip repair) {r['heard_after_3s']} of {results}"
        )
    if "told" in r:
        print(
            f"resends sent straight to hosts that had not asked: {r['told']} messages "
            f"({r['told_failed']} not delivered), {r['told_received']} received"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", default=None, help="N list, e.g. 4,16,64 (default 4,16,64)")
    parser.add_argument("--rounds", type=int, default=4, help="trained rounds measured per N")
    parser.add_argument("--witnesses", type=int, default=2, help="witness_nodes (0: up to 32)")
    parser.add_argument(
        "--decoded-mib",
        type=float,
        default=None,
        help="decoded results a client keeps per round for its apply, MiB (default: the "
        "client's DECODED_BUDGET; 0 decodes every result again at its apply)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the largest N")
    parser.add_argument("--profile-out", default=None, help="with --profile: pstats file")
    parser.add_argument("--p2p-hosts", type=int, default=0)
    parser.add_argument("--p2p-rounds", type=int, default=20)
    parser.add_argument("--p2p-size", type=int, default=5534)
    parser.add_argument(
        "--p2p-no-resend",
        action="store_true",
        help="announce each result once (before 2026-12-05 the daemon did)",
    )
    parser.add_argument(
        "--p2p-resend-all",
        action="store_true",
        help="resend each result on schedule even once every host asked for its payload "
        "(the daemon did until 2026-12-06)",
    )
    parser.add_argument(
        "--p2p-gossip-resends",
        action="store_true",
        help="send every resend through gossip, none straight to the hosts that have not asked "
        "(the daemon did until 2026-12-07)",
    )
    parser.add_argument("--json", default=None)
    parser.add_argument("--_one", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--_work", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._one:
        if args.decoded_mib is not None:
            # Each client of the run keeps up to this much per round; N clients share one
            # process here, so at 256 the default may not fit in this machine's memory.
            from psyche.daemon import rounds

            rounds.DECODED_BUDGET = int(args.decoded_mib * 2**20)
        r = sim_one(
            args._one, args.rounds, args.witnesses, Path(args._work), args.profile, args.profile_out
        )
        print(json.dumps(r))
        return
    out: dict[str, Any] = {"commit": _commit()}
    if args.clients is None and not args.p2p_hosts:
        args.clients = "4,16,64"
    if args.clients:
        with tempfile.TemporaryDirectory(prefix="psyche-scale-") as d:
            out.update(run_sim(args, Path(d)))
    if args.p2p_hosts:
        r = asyncio.run(
            p2p(
                args.p2p_hosts,
                args.p2p_rounds,
                args.p2p_size,
                args.json,
                not args.p2p_no_resend,
                args.p2p_resend_all,
                args.p2p_gossip_resends,
            )
        )
        print_p2p(r)
        out["p2p"] = r
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str) + "\n")


def _commit() -> str:
    with contextlib.suppress(Exception):
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    return ""


if __name__ == "__main__":
    main()
