"""A sign-flipped result is left out of every client's apply even where no verifier judges it.

Real round engines, coordinator and run host, real models trained with DisTrO
(``psyche.simulation``: in-memory network, simulated clock), ``verification_percent = 0`` so that
nothing but the apply's agreement filter (``psyche.distro.agreement``) stands between the rogue's
results and the honest clients' weights. Client 0 trains honestly and sends its result with every
sign flipped, every round. Before the filter every client applied it (the bench's 1-of-4 flipper:
1.093× the all-honest loss undefended); now each client leaves out exactly the rogue's results,
says so in its ``ApplyEvent``, and the clients' weights stay identical.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from psyche.daemon.training import TrainingStep
from psyche.distro import DistroResult, Payload, decode_payload, encode_payload
from psyche.events import ApplyEvent, read_events
from psyche.protocol.data_selection import BatchId
from psyche.protocol.run_file import load_run_config
from psyche.simulation.run import SimulatedRun

TINY = Path(__file__).resolve().parents[2] / "config" / "tiny" / "state.toml"
CLIENTS = 4
ROGUE = 0


def flipped(p: Payload) -> Payload:
    results = tuple(DistroResult(r.idx, -r.val, r.xshape, r.totalk) for r in p.results)
    return dataclasses.replace(p, results=results)


def test_a_sign_flipped_result_is_left_out_of_every_apply(
    tiny_corpus: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rogue = SimulatedRun.key_of(ROGUE).node_identity()
    honest_publish = TrainingStep._publish

    async def publish(self: TrainingStep, batch: BatchId, payload: bytes) -> None:
        if self.parts.identity == rogue:
            distro = self.kit.trainer.distro  # type: ignore[attr-defined]
            wire = decode_payload(payload, distro.payload_spec)
            payload = encode_payload(flipped(wire), distro.payload_version)
        await honest_publish(self, batch, payload)

    monkeypatch.setattr(TrainingStep, "_publish", publish)
    run = load_run_config(TINY)
    config = dataclasses.replace(run.config, total_steps=6, init_min_clients=CLIENTS)
    assert config.verification_percent == 0
    run = dataclasses.replace(run, config=config)
    model, data = tiny_corpus
    sim = SimulatedRun(run, model, data, tmp_path / "run", n_clients=CLIENTS, checkpoint=False)
    summary = asyncio.run(sim.run(max_epochs=1))

    assert summary.final_state == "Finished"
    assert summary.rounds and all(r.hashes_agree for r in summary.rounds)
    applies = {
        i: [
            e
            for e in read_events(tmp_path / "run" / "events" / f"client-{i}.jsonl")
            if isinstance(e, ApplyEvent) and e.applied_step is not None
        ]
        for i in range(CLIENTS)
    }
    # Every apply of a round the rogue trained in left its result out, and nothing else.
    left_out = {i: [(e.applied_step, e.left_out, e.batches) for e in a] for i, a in applies.items()}
    for i, ev in applies.items():
        assert len(ev) >= 3, left_out[i]
        for e in ev:
            assert e.left_out == (rogue.hex(),), left_out[i]
            assert e.batches == CLIENTS - 1, left_out[i]
    assert len({tuple(v) for v in left_out.values()}) == 1, left_out
