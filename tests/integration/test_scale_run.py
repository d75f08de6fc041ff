"""64 clients train together and each one's work per round grows linearly with the round's results.

Real round engines, coordinator and run host, real DisTrO training of a very small model
(``psyche.simulation``: in-memory network, simulated clock, one process). Every client handles
every result of a round (its own and N − 1 downloads: signature, decode, copy check, witness,
apply), so the whole process does about N² result handlings per round. The test counts the
operations whose count would grow faster if a client's work per result grew with the round: a
per-round loop over pairs of results (issue 38: the copy check compared each download with every
held result) makes the process's count about N³, 64 times the bound asserted here. Counting
operations, not seconds, keeps the test meaningful on a loaded machine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import psyche.distro.payload as payload_mod
import psyche.distro.result_format as result_format
import psyche.p2p.messages as messages
import psyche.p2p.peer_id as peer_id
from psyche.daemon.kit import ModelKit
from psyche.distro.copy_index import COUNTS
from psyche.protocol.model import LLM
from psyche.protocol.run_file import RunConfig, load_run_config
from psyche.simulation.run import RoundReport, SimulatedRun
from psyche.training.hashing import model_hash
from psyche.training.presets import PRESETS, write_model_dir

TINY = Path(__file__).resolve().parents[2] / "config" / "tiny" / "state.toml"
N = 64
SAMPLES_PER_CLIENT = 2
ROUNDS = 3
"""Trained rounds: a round's results are applied two rounds later (DisTrO's one-step lag behind
the witnesses' consensus), so the third is the first whose client handles a full round: N
downloads, N copy checks, N results applied."""


def _config() -> RunConfig:
    rc = load_run_config(TINY)
    assert isinstance(rc.model, LLM)
    steps = ROUNDS + 4
    return dataclasses.replace(
        rc,
        config=dataclasses.replace(
            rc.config,
            init_min_clients=N,
            min_clients=N,
            global_batch_size_start=SAMPLES_PER_CLIENT * N,
            global_batch_size_end=SAMPLES_PER_CLIENT * N,
            total_steps=steps,
            epoch_time=100_000,
            max_round_train_time=600,
        ),
        model=dataclasses.replace(
            rc.model,
            lr_schedule=dataclasses.replace(rc.model.lr_schedule, total_steps=steps),  # type: ignore[type-var]
        ),
    )


def _counting(counts: Counter[str], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kw: Any) -> Any:
        counts[name] += 1
        return fn(*args, **kw)

    return counted


def test_64_clients_agree_and_each_ones_work_is_linear_in_the_round(
    tiny_corpus: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tiny preset (2 layers, 21 tensors), not the fixture's smaller model: in a model that
    # small, honest results of different trainers share most of their top coefficients, which
    # the copy index must then compare bin by bin (it is built for results that differ).
    _, data = tiny_corpus
    model = tmp_path / "model"
    write_model_dir(model, preset=PRESETS["tiny"], seed=0)
    counts: Counter[str] = Counter()
    # Looked up by name at call time, so wrapping the module attribute counts every call.
    for mod, name in (
        (payload_mod, "decode_v2"),
        (messages, "verify_signature"),
        (peer_id, "_b58encode"),
        (result_format, "near_duplicate"),
    ):
        monkeypatch.setattr(mod, name, _counting(counts, name, getattr(mod, name)))
    peer_id._peer_id.cache_clear()  # a warm cache from another test would hide encodings
    kits: dict[int, ModelKit] = {}

    def keep(index: int, kit: ModelKit) -> ModelKit:
        kits[index] = kit
        return kit

    sim = SimulatedRun(
        _config(), model, data, tmp_path / "run", n_clients=N, checkpoint=False, on_kit=keep
    )
    reports: list[RoundReport] = []
    marks: list[dict[str, int]] = []

    def on_round(r: RoundReport) -> None:
        reports.append(r)
        if r.trained:
            marks.append(
                {
                    **counts,
                    **{k: getattr(COUNTS, k) for k in ("checks", "band_candidates", "candidates")},
                    "confirmations": COUNTS.confirmations,
                }
            )

    def until(_: SimulatedRun) -> bool:
        return len(marks) >= ROUNDS

    t0 = time.monotonic()
    asyncio.run(sim.run(on_round, max_epochs=1, until=until))
    elapsed = time.monotonic() - t0

    trained = [r for r in reports if r.trained]
    assert len(trained) >= ROUNDS, [(r.step, r.end_reason) for r in reports]
    assert all(r.hashes_agree for r in reports), "clients' weights differ"
    assert all(r.clients_hashed == N for r in reports), [r.clients_hashed for r in reports]
    # And the parameters themselves, hashed here at the end: every client's are the same bits.
    assert len(kits) == N
    assert len({model_hash(k.trainer.model) for k in kits.values()}) == 1, "weights differ"
    last = trained[ROUNDS - 1]
    assert last.applied_batches == N, last
    assert last.end_reason == "opportunistic", last

    # The last round, from the end of the one before to its own end: N results, each handled
    # by all N clients.
    before, after = marks[ROUNDS - 2], marks[ROUNDS - 1]
    per_round = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    handled = N * N
    assert N * (N - 1) <= per_round["checks"] <= handled, per_round
    # Honest results of different trainers seldom share a band; a pairwise scan would be N³.
    assert per_round["band_candidates"] <= handled, per_round
    # What the index hands back for the exact measure, each decoded and compared: O(1) per
    # check (none at all for honest results unless two happen to be alike).
    assert per_round["candidates"] <= per_round["checks"], per_round
    assert per_round["confirmations"] <= per_round["checks"], per_round
    assert per_round.get("near_duplicate", 0) <= per_round["confirmations"], per_round
    # Decodes: each result once per client (a download to verify and sketch it, one's own to
    # sketch it), kept decoded for its apply; a few more for the verifiers' samples.
    assert handled <= per_round["decode_v2"] <= handled + 2 * N, per_round
    # Every announcement's signature is checked once per receiving client (the in-memory
    # network delivers each to every other client), not once per held result.
    assert per_round["verify_signature"] <= 2 * handled, per_round
    # A member's peer id is encoded once per key (cached), not once per download and member.
    assert per_round.get("_b58encode", 0) <= 2 * N, per_round
    assert counts["_b58encode"] <= 4 * N, counts
    print(f"\n{N} clients, {len(reports)} rounds in {elapsed:.0f} s; last round: {per_round}")
