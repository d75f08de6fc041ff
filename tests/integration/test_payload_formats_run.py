"""Payload v2 is lossless in a real run: the same in-process run (``psyche.simulation``: real
engines, coordinator and DisTrO training over an in-memory network) with every client sending
v1 and with every client sending v2 logs bit-identical weights and losses at every step, while
v2's payloads are smaller. Only the wire format differs between the two runs."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from pathlib import Path

import pytest

import psyche.daemon.loader as loader
from psyche.distro import Distro
from psyche.events import ApplyEvent, read_events
from psyche.protocol.model import LLM
from psyche.protocol.run_file import RunConfig, load_run_config
from psyche.simulation.run import RunSummary, SimulatedRun

TINY = Path(__file__).resolve().parents[2] / "config" / "tiny" / "state.toml"
CLIENTS = 3


def _config() -> RunConfig:
    rc = load_run_config(TINY)
    assert isinstance(rc.model, LLM)
    return dataclasses.replace(rc, config=dataclasses.replace(rc.config, total_steps=5))


def _run(model: Path, data: Path, out: Path) -> RunSummary:
    sim = SimulatedRun(_config(), model, data, out, n_clients=CLIENTS)
    return asyncio.run(asyncio.wait_for(sim.run(), 150))


def _hashes(out: Path) -> dict[tuple[int, int], str]:
    return {
        (i, e.step): e.model_hash
        for i in range(CLIENTS)
        for e in read_events(out / "events" / f"client-{i}.jsonl")
        if isinstance(e, ApplyEvent)
    }


def test_v1_and_v2_runs_are_bit_identical(
    tiny_corpus: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, data = tiny_corpus
    v2 = _run(model, data, tmp_path / "v2")
    monkeypatch.setattr(loader, "Distro", functools.partial(Distro, payload_version=1))
    v1 = _run(model, data, tmp_path / "v1")
    assert v1.final_state == v2.final_state == "Finished"
    assert all(r.hashes_agree for r in v1.rounds + v2.rounds)
    assert [(r.step, r.model_hash, r.loss) for r in v1.rounds] == [
        (r.step, r.model_hash, r.loss) for r in v2.rounds
    ]
    assert _hashes(tmp_path / "v1") == _hashes(tmp_path / "v2") != {}
    sent = [(a.payload_bytes, b.payload_bytes) for a, b in zip(v1.rounds, v2.rounds, strict=True)]
    assert all(b < a for a, b in sent if a)
