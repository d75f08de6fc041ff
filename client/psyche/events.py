"""A per-client JSON-lines event log (``train``, ``apply`` with the model hash, ``checkpoint``…).

The local testnet and the integration tests read these files to build the run summary and to
prove that every client held the same weights after every apply; humans can ``tail -f`` them.
Each line is one JSON object: ``event`` (the kind), ``t`` (unix seconds), ``client`` and the
kind's fields.

Every kind is a struct below, and writers and readers share them: a field renamed on one side
only fails at the first read (an unknown kind, a missing or an unknown field raise
:class:`EventLogError`) instead of leaving a summary silently empty. A field added later has a
default, so that logs written before it still read.

An :class:`EventLog` also hands every record it writes to its sinks (``psyche.metrics``: the
status line, W&B), with or without a file: one place where a client's events are made, several
places they go.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import msgspec

if TYPE_CHECKING:
    from psyche.coordinator import Coordinator


log = logging.getLogger("psyche.events")


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
    left_out: tuple[str, ...] = ()
    """Trainers whose results of ``applied_step`` the consensus held but the apply left out
    for pointing against the rest of their round (``psyche.distro.agreement``)."""
    served_blobs: int | None = None
    """Blobs this client serves then (its and its peers' results of the last rounds, audit
    states, a snapshot for joiners): bounded however long it runs."""


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
    lr: float | None = None
    """This step's learning rate (``None`` in logs written before it was recorded)."""
    tokens: int = 0
    """Tokens trained (samples × sequence length; 0 in logs written before it was recorded)."""


class EvalEvent(Event, frozen=True, kw_only=True, tag="eval"):
    """One task's score after an eval pass (one record per task and pass)."""

    step: int
    """The coordinator step whose weights were evaluated."""
    task: str
    index: int
    """The task's position in the client's eval task list (what witness metadata reports)."""
    accuracy: float
    accuracy_norm: float
    """Accuracy with choices scored by length-normalised log-likelihood."""
    docs: int
    """Documents scored."""
    complete: bool
    """False when the pass was cut short (the weights were about to change)."""


class OptimStatsEvent(Event, frozen=True, kw_only=True, tag="optim_stats"):
    """Optimizer and weight statistics right after a train step (``psyche.metrics.optim_stats``:
    norms by parameter kind, the gradient norm, non-finite fractions)."""

    step: int
    stats: dict[str, float]


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


class DownloadEvent(Event, frozen=True, kw_only=True, tag="download"):
    """A peer's training result fetched and verified (``t``: when it arrived)."""

    step: int
    height: int
    producer: str
    """Peer id of the client that trained it."""
    from_peer: str
    """Peer id it came from (the producer, or a client re-serving it)."""
    bytes: int
    seconds: float


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
    | EvalEvent
    | OptimStatsEvent
    | RejectionsEvent
    | FinishedEvent
    | CheckpointEvent
    | UploadEvent
    | DownloadEvent
    | TransactionEvent
    | StateEvent
)

_decoder = msgspec.json.Decoder(AnyEvent)
_encoder = msgspec.json.Encoder()


class EventSink(Protocol):
    """Where an :class:`EventLog` also sends every record (``psyche.metrics`` has the sinks)."""

    def on_event(self, event: AnyEvent) -> None:
        """One record, already stamped with ``t`` and ``client``."""

    def close(self) -> None:
        """The log is closing: flush and release what the sink holds."""


class EventLog:
    """Appends records to ``path`` (none: no file) and hands each one to every sink.

    A sink that raises never reaches the writer, which is the daemon in the middle of a round:
    its first failure is logged with the traceback, later ones are counted and reported once at
    :meth:`close`, and the sink keeps getting records (its trouble may pass, W&B's network).
    """

    def __init__(
        self, path: str | Path | None, client: str, sinks: Iterable[EventSink] = ()
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.client = client
        self.sinks = tuple(sinks)
        self._lock = threading.Lock()
        # A separate lock: sinks see records in one order, and a slow sink never holds up the
        # file (both locks are held only briefly, never one inside the other).
        self._sink_lock = threading.Lock()
        self._failures = [0] * len(self.sinks)
        self._closed = False
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: AnyEvent) -> None:
        """Stamp ``record`` with the time and this client, append it, then pass it to the sinks."""
        if self.path is None and not self.sinks:
            return
        stamped = msgspec.structs.replace(record, t=round(time.time(), 3), client=self.client)
        if self.path is not None:
            line = _encoder.encode(stamped) + b"\n"
            # One write per line: a reader (or a SIGKILL) can only ever cut the last line short.
            with self._lock, self.path.open("ab") as f:
                f.write(line)
        if self.sinks:
            with self._sink_lock:
                if not self._closed:
                    for n, sink in enumerate(self.sinks):
                        self._guard(n, sink, "on_event", partial(sink.on_event, stamped))

    def close(self) -> None:
        """Close every sink (once); the file needs no closing, each write opens it."""
        with self._sink_lock:
            if self._closed:
                return
            self._closed = True
            for n, sink in enumerate(self.sinks):
                self._guard(n, sink, "close", sink.close)
                if self._failures[n] > 1:
                    log.warning(
                        "event sink %s failed %d times in all",
                        type(sink).__name__,
                        self._failures[n],
                    )

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _guard(self, n: int, sink: EventSink, method: str, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception:
            self._failures[n] += 1
            if self._failures[n] == 1:
                log.warning(
                    "event sink %s failed in %s; the event log goes on without it",
                    type(sink).__name__,
                    method,
                    exc_info=True,
                )


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
