"""Regression tests for coordinator bugs found while writing this suite (all fixed): exact
previous-round lists after Warmup exits and at the last boundary, negative proof indices, deeply
nested JSON/TOML, over-long run ids."""

from __future__ import annotations

import pytest

from psyche.coordinator import state_json
from psyche.coordinator.scripted_clients import Sim, sim_identity
from psyche.coordinator.types import ClientState, CoordinatorException
from psyche.protocol.committee import Committee, CommitteeProof
from psyche.protocol.run_file import parse_toml
from psyche.protocol.strict_obj import ConfigError
from support.configs import four_client_config

from .support import RS, finish_round, make_sim, pool

PREVIOUS_ROUND_CLIENTS_FIX = (
    "previous_round_clients re-inserts every exited client whose exited_height equals the "
    "previous round's height; Warmup exits also carry height 0, and exits at the last boundary "
    "(height = current) are never re-inserted. Fix in client/psyche/coordinator/queries.py "
    "previous_round_clients: undo exactly the removals made since the previous round started, "
    "i.e. the last k = prev.clients_len - len(clients) entries of exited_clients, newest "
    "boundary first (group by exited_height descending, each group ascending by exited_index)"
)


def _round_lists_sim(n: int) -> Sim:
    sim = make_sim(four_client_config(init_min_clients=n, min_clients=2, witness_nodes=0))
    sim.resume()
    sim.advance(2)
    sim.tick(pool(n))
    return sim


def test_previous_round_clients_after_warmup_withdrawal() -> None:
    """A client leaves during Warmup (exited_height 0); in round 1 the previous round (0) did not
    contain it, but it is inserted back at its old index."""
    sim = _round_lists_sim(4)
    c = sim.coord
    c.withdraw(1)
    sim.advance(1)
    sim.tick()  # Warmup tick before the timeout: client 1 moves to exited_clients (height 0)
    sim.send_warmup_witnesses()
    assert c.run_state is RS.RoundTrain
    round0 = [x.id for x in c.epoch_state.clients]
    finish_round(sim)
    assert c.run_state is RS.RoundTrain and c.current_round().height == 1
    assert c.previous_round_clients() == round0


def test_health_check_in_cooldown_after_last_boundary_exit() -> None:
    """A client withdraws in the last round before Cooldown and leaves at that boundary; a
    correct health check in Cooldown (against the previous round's list, which still held it)
    is rejected with InvalidCommitteeProof because the rebuilt list is one entry short."""
    sim = make_sim(
        four_client_config(init_min_clients=5, min_clients=1, witness_nodes=0, total_steps=4)
    )
    sim.resume()
    sim.advance(2)
    sim.tick(pool(5))
    sim.send_warmup_witnesses()
    c = sim.coord
    silent = sim_identity(4)
    finish_round(sim)
    sim.silent.add(silent)
    while c.run_state is not RS.Cooldown:
        if c.epoch_state.last_step and c.progress.step == c.epoch_state.last_step - 1:
            c.withdraw(1)  # leaves at the boundary into Cooldown
        finish_round(sim)
    prev = c.previous_round()
    assert prev is not None and prev.clients_len == 5 and len(c.epoch_state.clients) == 4
    proof = c.committee_selection(prev).get_committee(4)  # the silent client's round-(h-1) proof
    assert c.health_check(sim_identity(0), [(silent, proof)]) == 1  # today: InvalidCommitteeProof
    i = c.index_of(silent)
    assert i is not None and c.epoch_state.clients[i].state is ClientState.Ejected
    assert c.previous_round_clients() == pool(5)


def test_health_check_negative_index_is_a_coordinator_error() -> None:
    sim = make_sim(four_client_config(witness_nodes=0))
    sim.resume()
    sim.advance(2)
    sim.tick(pool())
    sim.send_warmup_witnesses()
    finish_round(sim)
    finish_round(sim)
    c = sim.coord
    assert c.current_round().height == 2
    with pytest.raises(CoordinatorException):
        c.health_check(pool()[0], [(pool()[1], CommitteeProof(Committee.Trainer, 0, -1))])


def test_from_json_deeply_nested_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        state_json.from_json("[" * 100_000)


def test_parse_toml_deeply_nested_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        parse_toml("a = " + "[" * 5_000)


def test_from_obj_state_rejects_overlong_run_id() -> None:
    sim = make_sim()
    obj = state_json.to_obj_state(sim.coord)
    obj["run_id"] = "r" * 33
    with pytest.raises(ConfigError, match=r"^run_id"):
        state_json.from_obj_state(obj)
