"""No lost work, end to end on the pure pieces: the real coordinator driven by honest simulated
clients (``psyche.coordinator.scripted_clients``) and the daemon's own round decisions
(``round_state_for`` assigns, ``results_to_apply`` applies by witness consensus). One client dies
mid-epoch; honest clients eject it by health check; every sample index that some training round
handed out as fresh data must end up applied at least once, in this epoch or (queued) in the
next.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

from psyche.coordinator import Coordinator, RunState
from psyche.coordinator.scripted_clients import Sim, sim_identity, sim_result_hash
from psyche.daemon.rounds import ReceivedResult, RoundState, results_to_apply, round_state_for
from psyche.protocol.coordinator_config import CoordinatorConfig
from support.configs import four_client_config

from ..coordinator.support import make_model

RS = RunState
VICTIM = sim_identity(1)


@dataclass
class Outcome:
    applied: Counter[int] = field(default_factory=Counter)
    """How often each sample index was applied (by consensus, at the start of round h + 2)."""
    fresh: list[tuple[int, int]] = field(default_factory=list)
    """Per epoch: [epoch start, end of the last fresh interval handed out by a training round)."""
    lost_at_epoch_end: list[int] = field(default_factory=list)
    retried: int = 0


def _config() -> CoordinatorConfig:
    # Batch 8 over 4 clients; every client is a witness (witness_nodes = 0), so rounds end
    # early (2 s) while all deliver and by the train timeout (8 s) once one is dead: 6 to 12
    # training rounds per epoch, then the two drain rounds.
    return four_client_config(epoch_time=24, max_round_train_time=6, round_witness_time=2)


def _play(die_round: int, epochs: int = 2) -> Outcome:
    cfg = _config()
    cfg.check()
    sim = Sim(Coordinator(run_id="lost", config=cfg, model=make_model()))
    c = sim.coord
    out = Outcome()
    pending = [sim_identity(i) for i in range(4)]
    sim.resume()
    for epoch in range(epochs):
        sim.advance(cfg.waiting_for_members_extra_time)
        sim.tick(pending)
        assert c.run_state is RS.Warmup
        start = c.progress.epoch_start_data_index
        end_fresh = start
        sim.send_warmup_witnesses()
        rounds: dict[int, RoundState] = {}
        while c.run_state is RS.RoundTrain:
            rnd = c.current_round()
            h = rnd.height
            if epoch == 0 and h == die_round:
                sim.silent.add(VICTIM)
            state = round_state_for(c)
            rounds[h] = state
            if state.trains:
                fresh = c.batch_size_for_round(rnd) - sum(b.size for b in rnd.retries)
                end_fresh = rnd.data_index + fresh
                out.retried += len(rnd.retries)
                assert sum(b.size for b in state.assignment) == c.batch_size_for_round(rnd)
            else:
                assert not rnd.retries
            # Round h − 1's results arrive from the trainers still alive...
            before = rounds.get(h - 1)
            if before is not None:
                for batch, who in before.assignment.items():
                    if who not in sim.silent:
                        digest = sim_result_hash(before.step, batch.start, batch.end)
                        before.results[batch] = ReceivedResult(who, batch, digest, b"ok")
            # ...and round h − 2 is applied by round h − 1's witnesses' consensus.
            applied = rounds.get(h - 2)
            prev = c.previous_round()
            if h >= 2 and applied is not None and prev is not None:
                for res in results_to_apply(applied, prev.witnesses, c):
                    out.applied.update(range(res.batch.start, res.batch.end + 1))
            if h >= 2:
                report = sim.unhealthy_report()
                if report:
                    reporter = next(w for _, w in sim.healthy_clients() if w not in sim.silent)
                    sim.health_check(reporter, report)
            sim.send_round_witnesses()
            if c.run_state is RS.RoundTrain:
                sim.advance(cfg.max_round_train_time)
                sim.tick()
            assert c.run_state is RS.RoundWitness
            sim.advance(cfg.round_witness_time)
            sim.tick()
        assert c.run_state is RS.Cooldown, c.run_state
        assert c.epoch_state.last_step != 0, "the epoch must end through its drain rounds"
        out.fresh.append((start, end_fresh))
        out.lost_at_epoch_end.append(len(c.epoch_state.lost))
        sim.advance(cfg.cooldown_time)
        sim.tick()
        assert c.run_state is RS.WaitingForMembers
        pending = [p for p in pending if p != VICTIM]
        pending += [sim_identity(10 + epoch)] * (4 - len(pending))
    return out


@pytest.mark.parametrize("die_round", [1, 2, 4, 8, 11])
def test_every_fresh_sample_is_applied_when_a_client_dies(die_round: int) -> None:
    out = _play(die_round)
    assert out.retried > 0, "the dead client's intervals were never re-assigned"
    want = {i for a, b in out.fresh for i in range(a, b)}
    missing = sorted(want - set(out.applied))
    assert not missing, f"samples never applied: {missing}"
    # Nothing outside the handed-out ranges is applied (retries are old fresh intervals).
    assert set(out.applied) <= want
    assert out.lost_at_epoch_end[-1] == 0


def test_work_lost_at_the_end_of_an_epoch_is_trained_in_the_next() -> None:
    """A death late in epoch 0 leaves intervals queued when it ends; epoch 1 trains them."""
    carried = []
    for die_round in range(3, 13):
        out = _play(die_round)
        if out.lost_at_epoch_end[0] == 0:
            continue
        carried.append(die_round)
        want = {i for a, b in out.fresh for i in range(a, b)}
        assert want <= set(out.applied), sorted(want - set(out.applied))
    assert carried, "no death late enough to carry lost work into the next epoch"
