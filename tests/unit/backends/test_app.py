"""Server assembly: state.toml loading, restore on start, data-server wiring, status view, CLI."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console

from integration.centralized.helpers import write_state
from psyche.backends.centralized.app import (
    ServerSettings,
    build,
    data_authorization,
    load_coordinator,
    verifier_grants,
)
from psyche.backends.centralized.run_host import RunHost
from psyche.backends.centralized.server import CentralizedServer
from psyche.backends.centralized.state_store import StateStore
from psyche.backends.centralized.status import render_status
from psyche.cli.server import server as server_cli
from psyche.coordinator.scripted_clients import sim_identity
from psyche.coordinator.types import ClientState, RunState
from psyche.protocol.strict_obj import ConfigError

from .support import Clock, make_coordinator

A, B, C = (sim_identity(i) for i in range(3))
SERVER_DATA = '{ Server = "127.0.0.1:20321" }'


@pytest.fixture
def keep_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _data_toml(tmp_path: Path, seq_len: int = 16) -> Path:
    (tmp_path / "tokens").mkdir()
    (tmp_path / "tokens" / "a.bin").write_bytes(np.arange(64 * 16, dtype="<u2").tobytes())
    path = tmp_path / "data.toml"
    path.write_text(f'dir = "tokens"\ntoken_size = "TwoBytes"\nseq_len = {seq_len}\n')
    return path


def test_state_toml_becomes_a_waiting_coordinator(tmp_path: Path) -> None:
    path = write_state(tmp_path / "state.toml")
    path.write_text(path.read_text() + "\n[progress]\nepoch = 3\nstep = 9\n")
    c = load_coordinator(path)
    assert (c.run_id, c.run_state, c.progress.epoch, c.progress.step) == (
        "tiny",
        RunState.WaitingForMembers,
        3,
        9,
    )
    path.write_text(path.read_text().replace('"WaitingForMembers"', '"Paused"'))
    with pytest.raises(ConfigError, match="WaitingForMembers"):
        load_coordinator(path)


def test_start_restores_the_newest_saved_state(tmp_path: Path) -> None:
    saved = make_coordinator()
    saved.progress.epoch, saved.progress.step = 4, 17
    StateStore(tmp_path / "saved", "tiny").save(saved)
    settings = ServerSettings(
        state=write_state(tmp_path / "state.toml"), save_state_dir=tmp_path / "saved"
    )
    c = build(settings).server.hub.coordinator
    assert (c.progress.epoch, c.progress.step, c.run_state) == (4, 17, RunState.WaitingForMembers)


def test_server_data_location_needs_a_matching_data_config(tmp_path: Path) -> None:
    state = write_state(tmp_path / "state.toml", data_location=SERVER_DATA)
    with pytest.raises(ConfigError, match="--data-config"):
        build(ServerSettings(state=state))
    with pytest.raises(ConfigError, match="seq_len"):
        build(ServerSettings(state=state, data_config=_data_toml(tmp_path, seq_len=8)))


def test_data_server_is_built_on_the_configured_port(tmp_path: Path) -> None:
    state = write_state(tmp_path / "state.toml", data_location=SERVER_DATA)
    built = build(ServerSettings(state=state, data_config=_data_toml(tmp_path)))
    assert built.data_server is not None and built.data_port == 20321
    assert built.server.on_state is not None
    assert build(ServerSettings(state=write_state(tmp_path / "s2.toml"))).data_server is None


def test_data_authorization_follows_members_and_rounds() -> None:
    hub = RunHost(make_coordinator(init_min_clients=3, max_round_train_time=3))
    clock = Clock(hub)
    for who in (A, B, C):
        hub.join(who)
    assert data_authorization(hub.coordinator) == ([], {})
    clock.until(RunState.Warmup)
    keys, assigned = data_authorization(hub.coordinator)
    assert keys == [A.p2p_identity, B.p2p_identity, C.p2p_identity] and assigned == {}
    clock.warm_up([A])
    c = hub.coordinator
    c.epoch_state.clients[2].state = ClientState.Withdrawn
    keys, assigned = data_authorization(c)
    assert keys == [A.p2p_identity, B.p2p_identity]
    start = c.current_round().data_index
    intervals = sorted((b.start - start, b.end - start) for b in assigned)
    assert intervals == [(0, 1), (2, 2), (3, 3)], "4 samples for 3 trainers"
    clock.until(RunState.RoundWitness)
    clock.until(RunState.Cooldown)
    _, assigned = data_authorization(hub.coordinator)
    assert {b.start for b in assigned} <= set(range(start, start + 4))


def test_verifiers_may_fetch_the_batches_they_recompute() -> None:
    """The verifiers of round 1 may fetch the round-0 batches sampled for verification, on top
    of their own assignment; nobody else gets more, and nothing is granted without sampling."""
    from psyche.data.tcp_server import RoundAuthorizer

    from ..coordinator.support import end_round, verifying_sim

    for vp in (0, 100):
        sim = verifying_sim(vp=vp, run_id="grants")
        assert verifier_grants(sim.coord) == {}  # round 0: nothing to judge
        sim.send_round_witnesses()
        end_round(sim)
        c = sim.coord
        prev = c.previous_round()
        assert prev is not None
        grants = verifier_grants(c)
        if vp == 0:
            assert grants == {}
            continue
        sel = c.committee_selection(c.current_round())
        verifiers = {
            x.id.p2p_identity
            for i, x in enumerate(c.epoch_state.clients)
            if sel.get_witness(i).witness and sel.get_witness(i).position < 3
        }
        assert set(grants) == verifiers and len(verifiers) == 3
        start = prev.data_index
        size = c.batch_size_for_round(prev)
        for batches in grants.values():  # all four results sampled: the whole round-0 batch
            assert sorted((b.start, b.end) for b in batches)[0][0] == start
            assert sum(b.size for b in batches) == size
        keys, assigned = data_authorization(c)
        auth = RoundAuthorizer()
        auth.update(keys, assigned, grants)
        outsider = next(k for k in keys if k not in verifiers)
        v = next(iter(verifiers))
        b = next(b for b in grants[v] if assigned.get(b) != v)
        assert auth(v, b) is None
        assert auth(outsider, b) is not None or assigned.get(b) == outsider


def test_status_view_shows_run_members_and_events() -> None:
    hub = RunHost(make_coordinator())
    server = CentralizedServer(hub)
    hub.join(A)
    hub.note("something happened")
    console = Console(record=True, width=120)
    console.print(render_status(server, now=hub.coordinator.run_state_start_unix_timestamp + 5))
    text = console.export_text()
    for expected in (
        "tiny",
        "WaitingForMembers for 5 s",
        A.hex(),
        "something happened",
        "1 pending",
    ):
        assert expected in text


def test_run_command_explains_a_bad_setup(tmp_path: Path, keep_logging: None) -> None:
    state = write_state(tmp_path / "state.toml", data_location=SERVER_DATA)
    result = CliRunner().invoke(server_cli, ["run", "--state", str(state), "--tui", "false"])
    assert result.exit_code == 1
    assert "cannot start the server" in result.output and "--data-config" in result.output
