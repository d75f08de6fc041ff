"""Can a run config run? Answered by driving the real coordinator, not by the config rules.

A run "can run" when honest clients that are as slow as the config allows (Warmup and every
round end by their time limits, never early; every elected witness reports when RoundWitness
begins) take the coordinator from WaitingForMembers to Finished, and every counter the program
stores keeps within its on-chain type along the way (the state must survive the strict state
loader, ``from_obj_state``, which reads ``step``/``last_step`` as u32, ``epoch`` as u16, ...).
The Rust program saturates where Python would grow, so a config whose run leaves those ranges
makes the two coordinators disagree.

Runs of many epochs are not simulated epoch by epoch: under this schedule every epoch but the
last is the same, so after two identical epochs the state is moved forward by whole epochs (the
counters advanced as those epochs would have advanced them) and the last ones are simulated.
"""

from __future__ import annotations

import functools

from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.scripted_clients import Sim, sim_identity
from psyche.coordinator.state_json import from_obj_state, to_obj_state
from psyche.coordinator.types import CoordinatorException, RunState, Witness
from psyche.protocol.bloom import Bloom
from psyche.protocol.coordinator_config import CoordinatorConfig
from psyche.protocol.model import LLM
from psyche.protocol.run_file import RunConfig
from psyche.protocol.strict_obj import ConfigError

RS = RunState
U64_MAX = 2**64 - 1
CLOCK = 2**32
"""A unix time late enough for any run that starts before 2106: where a phase's deadline lies."""
MAX_SIMULATED_EPOCHS = 8


class QuietSim(Sim):
    """A Sim that does not record every call (the recording dominates the cost)."""

    def _run(self, event: object, call: object) -> object:  # type: ignore[override]
        try:
            return call()  # type: ignore[operator]
        except CoordinatorException as e:
            return e


def _fits(coord: Coordinator) -> str | None:
    obj = to_obj_state(coord)
    # The simulated clock runs through every limit in full, run after run of years; only the
    # counters are judged here (a limit the clock cannot reach is judged in _wait).
    obj["run_state_start_unix_timestamp"] = CLOCK
    obj["epoch_state"]["start_timestamp"] = CLOCK
    try:
        from_obj_state(obj)
    except ConfigError as e:
        return f"the state no longer fits the program's counters: {e}"
    return None


def _witness(sim: QuietSim) -> None:
    """Every elected witness reports (empty blooms: only their number moves the coordinator)."""
    c = sim.coord
    sel = c.committee_selection(c.current_round())
    for i, who in sim.healthy_clients():
        proof = sel.get_witness(i)
        if proof.witness:
            sim.witness(who, Witness(proof, Bloom.empty(), Bloom.empty()))


class Unreachable(Exception):
    """A time limit whose deadline lies beyond the u64 clock: the phase can never time out."""


def _wait(sim: QuietSim, seconds: int) -> None:
    if CLOCK + seconds > U64_MAX:
        raise Unreachable(f"a time limit of {seconds} s ends after the u64 clock does")
    # check_timeout needs now != the phase's start: a phase lasts at least one second.
    sim.advance(max(seconds, 1))
    sim.tick()


def _skip_rounds(sim: QuietSim) -> None:
    """Long epochs: jump over rounds that are all alike (each lasts the same time and adds one
    step), stopping 3 rounds short of the epoch's timeout or of total_steps, which are then
    simulated. The round ring moves as those rounds would have moved it."""
    c = sim.coord
    cfg = c.config
    rnd = c.current_round()
    if rnd.height < 3 or c.last_step_set():
        return
    round_time = cfg.max_round_train_time + cfg.round_witness_time
    deadline = c.epoch_state.start_timestamp + cfg.epoch_time
    to_timeout = -(-(deadline - sim.now) // round_time)
    m = min(to_timeout, cfg.total_steps - c.progress.step) - 3
    if m <= 0:
        return
    batch = cfg.global_batch_size_end
    sim.now += m * round_time
    c.run_state_start_unix_timestamp = sim.now
    c.progress.step += m
    for r in c.epoch_state.rounds:
        r.height += m
        r.data_index += m * batch


def _epoch(sim: QuietSim, pool: list) -> str | None:
    """One epoch from WaitingForMembers to its end; an error text if the run breaks."""
    c = sim.coord
    if CLOCK + c.config.epoch_time > U64_MAX:
        raise Unreachable(f"an epoch_time of {c.config.epoch_time} s ends after the u64 clock")
    sim.advance(max(c.config.waiting_for_members_extra_time, 1))
    sim.tick(pool)
    if c.run_state is not RS.Warmup:
        return f"WaitingForMembers did not start an epoch ({c.run_state.name})"
    _wait(sim, c.config.warmup_time)
    while c.run_state is RS.RoundTrain:
        _skip_rounds(sim)
        _wait(sim, c.config.max_round_train_time)
        if c.run_state is not RS.RoundWitness:
            return f"RoundTrain did not time out ({c.run_state.name})"
        _witness(sim)
        _wait(sim, c.config.round_witness_time)
        if c.progress.step > 2**32 - 1 or c.epoch_state.last_step > 2**32 - 1:
            return "the step counter passed u32"
    if c.run_state is not RS.Cooldown:
        return f"the epoch ended in {c.run_state.name}, not Cooldown"
    _wait(sim, c.config.cooldown_time)
    if c.run_state not in (RS.WaitingForMembers, RS.Finished):
        return f"Cooldown led to {c.run_state.name}"
    return _fits(c)


def cannot_run(rc: RunConfig) -> str | None:
    """Why the run of ``rc`` cannot run (see the module doc), or None when it finishes."""
    assert isinstance(rc.model, LLM)
    try:
        return _cannot_run(rc.config, rc.model)
    except CoordinatorException as e:
        return f"the coordinator fails: {e}"
    except Unreachable as e:
        return str(e)


@functools.lru_cache(maxsize=4096)
def _cannot_run(cfg: CoordinatorConfig, model: LLM) -> str | None:
    sim = QuietSim(Coordinator(run_id="sim", config=cfg, model=model))
    sim.resume()
    if sim.coord.run_state is RS.Finished:
        return None  # total_steps = 1: done at once, as the protocol says (an advisory warns)
    pool = [sim_identity(i) for i in range(cfg.init_min_clients)]
    c = sim.coord
    shapes: list[tuple[int, int]] = []  # (steps, data) per epoch
    for _ in range(MAX_SIMULATED_EPOCHS):
        before = (c.progress.step, c.progress.epoch_start_data_index)
        why = _epoch(sim, pool)
        if why is not None:
            return why
        if c.run_state is RS.Finished:
            return None
        shapes.append((c.progress.step - before[0], c.progress.epoch_start_data_index - before[1]))
        if len(shapes) >= 2 and shapes[-1] == shapes[-2]:
            steps, data = shapes[-1]
            # Jump whole epochs, leaving two epochs' worth to simulate to the end.
            skip = max(0, (cfg.total_steps - c.progress.step) // steps - 2)
            c.progress.step += skip * steps
            c.progress.epoch += skip
            c.progress.epoch_start_data_index += skip * data
            why = _fits(c)
            if why is not None:
                return why
            shapes.clear()
    return f"not Finished after {MAX_SIMULATED_EPOCHS} simulated epochs"
