"""A per-client JSON-lines event log (``train``, ``apply`` with the model hash, ``checkpoint``…).

The local testnet and the integration tests read these files to build the run summary and to
prove that every client held the same weights after every apply; humans can ``tail -f`` them.
Each line is one JSON object: ``event`` (the kind), ``t`` (unix seconds), ``client`` and the
kind's fields.

Every kind is a struct below, and writers and readers share them: a field renamed on one side
only fails at the first read (an unknown kind, a missing or an unknown field raise
:class:`EventLogError`) instead of leaving a summary silently empty.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from psyche.coordinator import Coordinator


class EventLogError(ValueError):
    """A line that is JSON but no known event: a writer and a reader disagree."""


class Event(msgspec.Struct, frozen=True, tag_field="event", forbid_unknown_fields=True):
    """What every record carries; :meth:`EventLog.write` stamps both."""

    t: float = 0.0
    """Unix seconds when it was written."""
    client: str = ""
    """The writer: a client's node identity (hex), ``server`` or ``chain``."""


# --- a client's daemon --------------------------------------------------------------------------


class ModelLoadedEvent(Event, frozen=True, kw_only=True, tag="model_loaded"):
    """The client holds the model it will train from this epoch on."""

    step: int
    source: str
    """``p2p``, or the checkpoint kind it loaded (``Hub``, ``Gcs``, ``Dummy``…)."""
    peers: list[str]
    """The peers a P2P fetch got parts from (empty otherwise)."""
    seconds: float | None
    """How long a P2P fetch took (``None`` otherwise)."""
    model_hash: str


class ApplyEvent(Event, frozen=True, kw_only=True, tag="apply"):
    """Right after the apply at the start of a round, every round (even with nothing applied),
    so that the clients' weights can be compared at every step."""

    step: int
    height: int
    applied_step: int | None
    """The step whose results were applied, ``None`` when there were none."""
    batches: int
    model_hash: str


class TrainEvent(Event, frozen=True, kw_only=True, tag="train"):
    step: int
    batch: tuple[int, int]
    """The closed interval of sample indices trained."""
    loss: float
    seconds: float
    """From the batch request to the payload built (data fetch included)."""
    compute_s: float
    """The training alone."""
    payload_bytes: int


class RejectionsEvent(Event, frozen=True, kw_only=True, tag="rejections"):
    """Peer input refused so far, by kind; cumulative per process, which ``pid`` and ``since``
    (the process's start) tell apart when a restarted client appends to the same log."""

    pid: int
    since: float
    counts: dict[str, int]


class FinishedEvent(Event, frozen=True, kw_only=True, tag="finished"):
    step: int


class CheckpointEvent(Event, frozen=True, kw_only=True, tag="checkpoint"):
    step: int
    path: str


class UploadEvent(Event, frozen=True, kw_only=True, tag="upload"):
    step: int
    repo: str
    revision: str


class TransactionEvent(Event, frozen=True, kw_only=True, tag="transaction"):
    """A Solana transaction the client sent and saw confirmed (looked up after the run)."""

    label: str
    signature: str


# --- the coordinator side -----------------------------------------------------------------------


# omit_defaults: the centralized server's lines have no nonce, as before.
class StateEvent(Event, frozen=True, kw_only=True, omit_defaults=True, tag="state"):
    """A published coordinator state (the centralized server's events file, the Solana
    testnet's chain follower): enough to rebuild rounds and their end reasons."""

    run_state: str
    epoch: int
    step: int
    height: int
    witnesses: int
    witness_target: int
    clients: dict[str, str]
    """Node identity (hex) → client state name."""
    checkpoint: str | None
    """:func:`checkpoint_label` of the run's checkpoint."""
    retries: list[tuple[int, int]]
    """The intervals re-assigned in this round."""
    lost: int
    nonce: int | None = None
    """The coordinator account's nonce (the chain follower only)."""


AnyEvent = (
    ModelLoadedEvent
    | ApplyEvent
    | TrainEvent
    | RejectionsEvent
    | FinishedEvent
    | CheckpointEvent
    | UploadEvent
    | TransactionEvent
    | StateEvent
)

_decoder = msgspec.json.Decoder(AnyEvent)
_encoder = msgspec.json.Encoder()


class EventLog:
    def __init__(self, path: str | Path | None, client: str) -> None:
        self.path = Path(path) if path is not None else None
        self.client = client
        self._lock = threading.Lock()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: AnyEvent) -> None:
        if self.path is None:
            return
        stamped = msgspec.structs.replace(record, t=round(time.time(), 3), client=self.client)
        line = _encoder.encode(stamped) + b"\n"
        # One write per line: a reader (or a SIGKILL) can only ever cut the last line short.
        with self._lock, self.path.open("ab") as f:
            f.write(line)


_START = b'{"event":'
"""How every line :meth:`EventLog.write` makes begins (the tag is encoded first)."""


def _decode_line(line: bytes, where: str) -> AnyEvent | None:
    try:
        return _decoder.decode(line)
    except msgspec.ValidationError as e:
        raise EventLogError(f"{where}: not a known event record: {e}") from e
    except msgspec.DecodeError:
        return None


def _decode(lines: Iterable[bytes], path: Path, first_line: int) -> list[AnyEvent]:
    """A line that is not JSON is a writer killed in the middle of it: skipped. It is the last
    line, or a restarted client appended its first record to it, which is kept. JSON that is
    no known event raises."""
    out: list[AnyEvent] = []
    for n, line in enumerate(lines, first_line):
        if not line.strip():
            continue
        record = _decode_line(line, f"{path}:{n}")
        if record is None and (cut := line.rfind(_START)) > 0:
            record = _decode_line(line[cut:], f"{path}:{n}")
        if record is not None:
            out.append(record)
    return out


def read_events(path: str | Path) -> list[AnyEvent]:
    """All events of one log (none if it does not exist yet)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        return []
    return _decode(data.splitlines(), p, 1)


class EventTail:
    """Follows a growing event log, decoding only what was appended since the last ``poll`` (a
    launcher polling every 0.5 s must not re-read the whole file each time)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.events: list[AnyEvent] = []
        self._offset = 0
        self._lines = 0

    def poll(self) -> list[AnyEvent]:
        """The events appended since the last call (a torn last line waits for the next)."""
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        lines = data[:end].splitlines()
        new = _decode(lines, self.path, self._lines + 1)
        self._offset += end
        self._lines += len(lines)
        self.events.extend(new)
        return new


def state_event(c: Coordinator, nonce: int | None = None) -> StateEvent:
    """The record of a published coordinator state (``nonce``: the Solana account's)."""
    rnd = c.current_round()
    return StateEvent(
        run_state=c.run_state.name,
        epoch=c.progress.epoch,
        step=c.progress.step,
        height=rnd.height,
        witnesses=len(rnd.witnesses),
        witness_target=c.witness_count(),
        clients={x.id.hex(): x.state.name for x in c.epoch_state.clients},
        checkpoint=checkpoint_label(c),
        retries=[(b.start, b.end) for b in rnd.retries],
        lost=len(c.epoch_state.lost),
        nonce=nonce,
    )


def checkpoint_label(c: Coordinator) -> str | None:
    """``Kind`` or ``Kind:repo`` for the run's checkpoint (the summary's checkpoint source)."""
    ck = getattr(c.model, "checkpoint", None)
    if ck is None:
        return None
    repo = getattr(ck, "repo", None)
    name = getattr(repo, "repo_id", None) or getattr(repo, "bucket", None)
    return f"{ck.TAG}:{name}" if name else str(ck.TAG)
