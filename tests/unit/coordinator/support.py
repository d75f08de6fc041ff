"""Shared helpers for the coordinator tests: small configs and a Sim driven into each phase."""

from __future__ import annotations

import dataclasses

from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.scripted_clients import Sim, sim_identity
from psyche.coordinator.state_json import to_obj_state
from psyche.coordinator.types import RunState, Witness
from psyche.protocol.bloom import Bloom
from psyche.protocol.committee import Committee, CommitteeProof, WitnessProof
from psyche.protocol.coordinator_config import CoordinatorConfig
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import Checkpoint, HubCheckpoint, HubRepo, ServerData
from psyche.protocol.lr_schedules import CosineLR
from psyche.protocol.model import LLM, LLMArchitecture, LLMDataType
from psyche.protocol.optimizers import DistroOptimizer
from support.configs import four_client_config

RS = RunState
N_CLIENTS = 4
SILENT = 3
"""Index of the client that stops delivering results in the phase fixtures (from round 1)."""


def make_model(checkpoint: Checkpoint | None = None) -> LLM:
    return LLM(
        max_seq_len=8,
        cold_start_warmup_steps=0,
        architecture=LLMArchitecture.HfLlama,
        checkpoint=checkpoint or HubCheckpoint(HubRepo(repo_id="psyche/test")),
        data_type=LLMDataType.Pretraining,
        data_location=ServerData("127.0.0.1:20001"),
        lr_schedule=CosineLR(
            base_lr=1e-3, warmup_steps=1, warmup_init_lr=0.0, total_steps=100, final_lr=1e-4
        ),
        optimizer=DistroOptimizer(
            compression_decay=0.999, compression_topk=8, compression_chunk=64, quantize_1bit=True
        ),
    )


def make_sim(config: CoordinatorConfig | None = None, model: LLM | None = None) -> Sim:
    cfg = config or four_client_config()
    cfg.check()
    return Sim(Coordinator(run_id="test", config=cfg, model=model or make_model()))


def pool(n: int = N_CLIENTS) -> list[NodeIdentity]:
    return [sim_identity(i) for i in range(n)]


def timeout_of(sim: Sim) -> int:
    """Seconds after which a tick in the current phase changes it (0 where time plays no role)."""
    cfg = sim.coord.config
    return {
        RS.WaitingForMembers: cfg.waiting_for_members_extra_time,
        RS.Warmup: cfg.warmup_time,
        RS.RoundTrain: cfg.max_round_train_time,
        RS.RoundWitness: cfg.round_witness_time,
        RS.Cooldown: cfg.cooldown_time,
    }.get(sim.coord.run_state, 0)


def finish_round(sim: Sim) -> None:
    """Elected (non-silent) witnesses report, then RoundTrain/RoundWitness time out as needed."""
    c = sim.coord
    assert c.run_state is RS.RoundTrain, c.run_state
    sim.send_round_witnesses()
    if c.run_state is RS.RoundTrain:
        sim.advance(c.config.max_round_train_time)
        sim.tick()
    assert c.run_state is RS.RoundWitness, c.run_state
    sim.advance(c.config.round_witness_time)
    sim.tick()


def verifying_sim(vp: int = 25, run_id: str = "test") -> Sim:
    """Four clients in round 0's RoundTrain of a run that samples ``vp`` % of results for
    verification (three witnesses, so a verdict quorum of two exists)."""
    cfg = four_client_config(witness_nodes=3, min_clients=3, init_min_clients=4)
    cfg.check()
    sim = Sim(Coordinator(run_id=run_id, config=cfg, model=make_model()))
    sim.coord.config = dataclasses.replace(cfg, verification_percent=vp)
    sim.resume()
    sim.advance(cfg.waiting_for_members_extra_time)
    sim.tick(pool(4))
    sim.send_warmup_witnesses()
    assert sim.coord.run_state is RS.RoundTrain
    return sim


def end_round(sim: Sim) -> None:
    """Whatever witnesses were sent, let RoundTrain (if still there) and RoundWitness time out."""
    if sim.coord.run_state is RS.RoundTrain:
        sim.advance(sim.coord.config.max_round_train_time)
        sim.tick()
    sim.advance(sim.coord.config.round_witness_time)
    sim.tick()


def to_warmup(sim: Sim, n: int = N_CLIENTS) -> None:
    if sim.coord.run_state in (RS.Uninitialized, RS.Paused):
        sim.resume()
    sim.advance(sim.coord.config.waiting_for_members_extra_time)
    sim.tick(pool(n))
    assert sim.coord.run_state is RS.Warmup


def to_round_train(sim: Sim) -> None:
    """Warmup → round 0 → round 1 (client SILENT goes silent) → RoundTrain of round 2."""
    to_warmup(sim)
    sim.send_warmup_witnesses()
    assert sim.coord.run_state is RS.RoundTrain
    finish_round(sim)
    sim.silent.add(sim_identity(SILENT))
    finish_round(sim)
    assert sim.coord.run_state is RS.RoundTrain and sim.coord.current_round().height == 2


def phase(name: str) -> Sim:
    """A Sim whose coordinator just entered ``name`` (no time has passed since)."""
    if name == "Finished":
        sim = make_sim(four_client_config(total_steps=3))
        to_warmup(sim)
        sim.send_warmup_witnesses()
        while sim.coord.run_state is not RS.Cooldown:
            finish_round(sim)
        sim.advance(sim.coord.config.cooldown_time)
        sim.tick()
        assert sim.coord.run_state is RS.Finished
        return sim
    sim = make_sim()
    if name == "Uninitialized":
        return sim
    if name == "Paused":
        sim.resume()
        sim.pause()
    elif name == "WaitingForMembers":
        sim.resume()
    elif name == "Warmup":
        to_warmup(sim)
    elif name == "RoundTrain":
        to_round_train(sim)
    elif name == "RoundWitness":
        to_round_train(sim)
        sim.send_round_witnesses(2)
        sim.advance(sim.coord.config.max_round_train_time)
        sim.tick()
    elif name == "Cooldown":
        to_round_train(sim)
        for _ in range(30):
            if sim.coord.run_state is RS.Cooldown:
                break
            finish_round(sim)
    else:
        raise ValueError(name)
    assert sim.coord.run_state.name == name, sim.coord.run_state
    return sim


def plain_witness(index: int, witness: bool = False) -> Witness:
    proof = WitnessProof(position=index, index=index, witness=witness)
    return Witness(proof, Bloom.empty(), Bloom.empty())


def trainer_proof(index: int, position: int | None = None) -> CommitteeProof:
    return CommitteeProof(Committee.Trainer, index if position is None else position, index)


def state_of(sim: Sim) -> dict[str, object]:
    return to_obj_state(sim.coord)
