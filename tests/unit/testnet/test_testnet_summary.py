"""The testnet summary's per-epoch entries, built from hand-written event files."""

from __future__ import annotations

from pathlib import Path

import msgspec

from psyche.events import AnyEvent, ModelLoadedEvent, StateEvent
from psyche.testnet.summary import ClientTally, build_summary


def _write(path: Path, events: list[AnyEvent]) -> Path:
    path.write_bytes(b"".join(msgspec.json.encode(e) + b"\n" for e in events))
    return path


def _state(
    t: float, epoch: int, step: int, run_state: str, ck: str, clients: list[str]
) -> StateEvent:
    return StateEvent(
        t=t,
        client="server",
        run_state=run_state,
        epoch=epoch,
        step=step,
        height=0,
        witnesses=0,
        witness_target=1,
        clients={c: "Healthy" for c in clients},
        checkpoint=ck,
        retries=[],
        lost=0,
    )


def _loaded(
    t: float, client: str, source: str, peers: list[str], seconds: float | None = None
) -> ModelLoadedEvent:
    return ModelLoadedEvent(
        t=t,
        client=client,
        step=0,
        source=source,
        peers=peers,
        seconds=seconds,
        model_hash="00",
    )


def test_epochs_list_checkpoint_sources_joiners_and_kills(tmp_path: Path) -> None:
    hub, p2p = "Hub:runs/model", "P2P:runs/model"
    states = [
        _state(100, 0, 1, "WaitingForMembers", hub, []),
        _state(101, 0, 1, "Warmup", hub, ["a", "b"]),
        _state(105, 0, 1, "RoundTrain", hub, ["a", "b"]),
        _state(110, 0, 2, "RoundTrain", hub, ["a", "b"]),
        _state(115, 0, 4, "Cooldown", hub, ["a", "b"]),
        _state(120, 1, 4, "WaitingForMembers", p2p, []),
        _state(121, 1, 4, "Warmup", p2p, ["a", "b", "c"]),
        _state(130, 1, 4, "RoundTrain", p2p, ["a", "b", "c"]),
    ]
    server = _write(tmp_path / "server.jsonl", states)
    a = _write(tmp_path / "a.jsonl", [_loaded(102, "a", "Hub", [])])
    b = _write(
        tmp_path / "b.jsonl",
        [_loaded(102.5, "b", "Hub", []), _loaded(124, "b", "p2p", ["a", "c"], 0.8)],
    )
    c = _write(tmp_path / "c.jsonl", [_loaded(126, "c", "p2p", ["a"], 1.5)])
    tallies = {
        "client-a": ClientTally(joins=1, started_at=[99.0]),
        "client-b": ClientTally(joins=2, kills=1, started_at=[99.0, 112.0], killed_at=[112.0]),
        "client-c": ClientTally(joins=1, started_at=[118.0]),
    }
    logs = {"client-a": a, "client-b": b, "client-c": c}
    s = build_summary(server, logs, tallies).to_json()
    e0, e1 = s["epochs"]
    assert e0["epoch"] == 0 and e0["duration_s"] == 20 and e0["clients"] == ["client-a", "client-b"]
    assert e0["checkpoint"] == hub and e0["checkpoint_after"] == p2p
    assert e0["model_sources"] == {"client-a": "Hub", "client-b": "Hub"}
    assert e0["joiners"] == [] and e0["kills"] == [{"client": "client-b", "after_s": 12.0}]
    assert e1["checkpoint"] == p2p and e1["checkpoint_after"] is None and e1["duration_s"] is None
    assert e1["clients"] == ["client-a", "client-b", "client-c"]
    # The restarted client and the late joiner, with the time from their process start.
    assert [(j["client"], j["source"], j["peers"], j["ready_s"]) for j in e1["joiners"]] == [
        ("client-b", "p2p", 2, 12.0),
        ("client-c", "p2p", 1, 8.0),
    ]
    assert e1["joiners"][0]["ready_after_warmup_s"] == 3.0 and e1["kills"] == []
    assert s["clients"]["client-b"]["killed_at"] == [112.0]


def test_a_client_restarted_before_the_first_warmup_is_a_joiner(tmp_path: Path) -> None:
    """Issue 12, finding 12: on a loaded machine the first kill can land while the run still
    waits for members. The restarted process came back before the first Warmup, so it used to be
    counted as a founder: its kill was in epoch 0 but no load of it was a join anywhere."""
    hub = "Hub:runs/model"
    states = [
        _state(100, 0, 1, "WaitingForMembers", hub, []),
        _state(150, 0, 1, "Warmup", hub, ["a", "b"]),
        _state(155, 0, 1, "RoundTrain", hub, ["a", "b"]),
    ]
    server = _write(tmp_path / "server.jsonl", states)
    a = _write(tmp_path / "a.jsonl", [_loaded(152, "a", "Hub", [])])
    b = _write(tmp_path / "b.jsonl", [_loaded(153, "b", "Hub", [])])
    tallies = {
        "client-a": ClientTally(joins=1, started_at=[99.0]),
        "client-b": ClientTally(joins=2, kills=1, started_at=[99.0, 145.0], killed_at=[145.0]),
    }
    s = build_summary(server, {"client-a": a, "client-b": b}, tallies).to_json()
    (e0,) = s["epochs"]
    assert e0["kills"] == [{"client": "client-b", "after_s": 45.0}]
    assert [j["client"] for j in e0["joiners"]] == ["client-b"]


def test_rebuilding_the_summary_counts_a_drop_once(tmp_path: Path) -> None:
    """The launcher rebuilds the summary while the run goes on, from its live tallies."""
    hub = "Hub:runs/model"
    states = [
        _state(101, 0, 1, "RoundTrain", hub, ["a", "b"]),
        msgspec.structs.replace(
            _state(102, 0, 2, "RoundTrain", hub, ["a", "b"]),
            clients={"a": "Healthy", "b": "Ejected"},
        ),
    ]
    server = _write(tmp_path / "server.jsonl", states)
    logs = {
        label: _write(tmp_path / f"{c}.jsonl", [_loaded(100, c, "Hub", [])])
        for label, c in (("client-a", "a"), ("client-b", "b"))
    }
    tallies = {"client-a": ClientTally(joins=1), "client-b": ClientTally(joins=1)}
    for _ in range(3):
        s = build_summary(server, logs, tallies).to_json()
    assert s["clients"]["client-b"]["drops"] == 1 and s["clients"]["client-a"]["drops"] == 0
    assert tallies["client-b"].drops == 0
