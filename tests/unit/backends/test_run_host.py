"""The server's membership rules and change detection, on a simulated clock (no sockets)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from psyche.backends.centralized.run_host import RunHost
from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.scripted_clients import sim_identity
from psyche.coordinator.types import (
    ClientState,
    CoordinatorErrorCode,
    CoordinatorException,
    RunState,
)
from psyche.protocol.strict_obj import ConfigError

from .support import Clock, make_coordinator

RS = RunState
A, B, C = (sim_identity(i) for i in range(3))


def _hub(
    *,
    withdraw_on_disconnect: bool = True,
    init_warmup_time: int | None = None,
    on_epoch_end: Callable[[Coordinator], object] | None = None,
    **config: int,
) -> tuple[RunHost, Clock]:
    hub = RunHost(
        make_coordinator(**config),
        withdraw_on_disconnect=withdraw_on_disconnect,
        init_warmup_time=init_warmup_time,
        on_epoch_end=on_epoch_end,
    )
    return hub, Clock(hub)


def _finish_epoch(clock: Clock) -> None:
    """Let the running epoch time out (no witnesses) until members are awaited again."""
    clock.until(RS.Cooldown)
    clock.until(RS.WaitingForMembers)


def test_epoch_clients_are_in_join_order() -> None:
    hub, clock = _hub(init_min_clients=3)
    for who in (C, A, B, A):
        hub.join(who)
    clock.until(RS.Warmup)
    assert clock.epoch_ids() == [C, A, B]


def test_only_changes_are_published() -> None:
    hub, clock = _hub()
    seq0, json0 = hub.snapshot()
    assert not clock.tick(), "nothing changes while members are missing"
    hub.join(A)
    hub.join(B)
    assert hub.snapshot() == (seq0, json0), "joining alone does not change the coordinator"
    assert clock.tick()
    assert hub.coordinator.run_state is RS.Warmup
    assert hub.snapshot()[0] == seq0 + 1
    assert not clock.tick()
    assert hub.snapshot()[0] == seq0 + 1


def test_rejected_message_changes_nothing() -> None:
    hub, clock = _hub()
    hub.join(A)
    seq = hub.seq
    clock.warm_up([A])  # not in Warmup: nothing sent
    with pytest.raises(CoordinatorException) as info:
        hub.checkpoint(A, 0, hub.coordinator.llm.checkpoint, clock.now)
    assert info.value.code is CoordinatorErrorCode.InvalidRunState
    assert hub.seq == seq


@pytest.mark.parametrize("withdraw", [True, False])
def test_disconnect_leaves_pending_and_withdraws_when_asked(withdraw: bool) -> None:
    hub, clock = _hub(withdraw_on_disconnect=withdraw)
    hub.join(A)
    hub.join(B)
    clock.until(RS.Warmup)
    clock.warm_up([A])
    assert hub.coordinator.run_state is RS.RoundTrain
    seq = hub.seq
    assert hub.disconnect(B) is withdraw
    assert list(hub.pending) == [A]
    state = hub.coordinator.epoch_state.clients[1].state
    assert state is (ClientState.Withdrawn if withdraw else ClientState.Healthy)
    assert hub.seq == seq + int(withdraw)


def test_reconnected_client_takes_part_in_the_next_epoch() -> None:
    # Regression for upstream nousnet#25: the reference's kick list removed a withdrawn client
    # from pending on every tick, so after reconnecting it never got back into a run.
    hub, clock = _hub()
    hub.join(A)
    hub.join(B)
    clock.until(RS.Warmup)
    clock.warm_up([A, B])
    hub.disconnect(B)
    hub.join(B)
    assert hub.coordinator.epoch_state.clients[1].state is ClientState.Withdrawn
    _finish_epoch(clock)
    clock.until(RS.Warmup)
    assert clock.epoch_ids() == [A, B]
    assert all(c.state is ClientState.Healthy for c in hub.coordinator.epoch_state.clients)


def test_ejected_client_sits_out_exactly_one_epoch() -> None:
    hub, clock = _hub()
    for who in (A, B, C):
        hub.join(who)
    clock.until(RS.Warmup)
    clock.warm_up([A])
    # What an accepted health check does to the accused (see Coordinator.health_check).
    hub.coordinator.epoch_state.clients[2].state = ClientState.Ejected
    _finish_epoch(clock)
    assert C in hub.kicked and C in hub.pending
    clock.until(RS.Warmup)
    assert clock.epoch_ids() == [A, B], "the ejected client is left out of the next epoch"
    assert not hub.kicked
    clock.until(RS.RoundTrain)
    _finish_epoch(clock)
    clock.until(RS.Warmup)
    assert clock.epoch_ids() == [A, B, C], "and is back, in join order, in the one after"


def test_init_warmup_time_applies_until_the_run_is_first_active() -> None:
    hub, clock = _hub(init_warmup_time=3, warmup_time=10)
    assert hub.coordinator.config.warmup_time == 3
    hub.join(A)
    hub.join(B)
    clock.until(RS.Warmup)
    for _ in range(3):
        clock.tick()
    assert hub.coordinator.run_state is RS.RoundTrain, "warmup ended after the initial 3 s"
    assert hub.coordinator.config.warmup_time == 10
    _finish_epoch(clock)
    clock.until(RS.Warmup)
    start = clock.now
    clock.until(RS.RoundTrain)
    assert clock.now - start == 10, "later warmups use the configured time"


def test_init_warmup_time_must_fit_the_epoch() -> None:
    with pytest.raises(ConfigError, match="--init-warmup-time"):
        RunHost(make_coordinator(), init_warmup_time=30)


def test_successful_epoch_end_runs_the_hook_with_the_new_state() -> None:
    seen: list[tuple[RunState, int, int]] = []

    def hook(c: Coordinator) -> None:
        seen.append((c.run_state, c.progress.epoch, c.progress.step))

    hub, clock = _hub(on_epoch_end=hook)
    hub.join(A)
    hub.join(B)
    clock.until(RS.Warmup)
    assert not seen, "a failed warmup is no epoch end worth saving"
    clock.warm_up([A])
    _finish_epoch(clock)
    assert seen == [(RS.WaitingForMembers, 1, 2)]


def test_failing_hook_does_not_stop_the_run() -> None:
    def hook(c: Coordinator) -> None:
        raise OSError("disk full")

    hub, clock = _hub(on_epoch_end=hook)
    hub.join(A)
    hub.join(B)
    clock.until(RS.Warmup)
    clock.warm_up([A])
    _finish_epoch(clock)
    assert hub.coordinator.progress.epoch == 1


def test_halted_run_ticks_quietly() -> None:
    hub, clock = _hub()
    hub.coordinator.pause(clock.now)
    assert hub.coordinator.run_state is RS.Paused
    assert not clock.tick()
