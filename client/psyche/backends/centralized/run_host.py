"""The server's coordinator host: membership, message dispatch and change detection, no I/O.

:class:`RunHost` (the host every client of the run connects through) owns the
:class:`~psyche.coordinator.Coordinator` and everything the pure state machine deliberately leaves
to its host (docs/protocol.md, "Server loop"): who is waiting to join, who is kicked, when the state
counts as changed, what happens at an epoch end. The network layer
(:mod:`psyche.backends.centralized.server`) only authenticates peers, decodes frames, calls one
method here per event and broadcasts when a method returns ``True``. Keeping this free of sockets
and clocks (``now`` and ``seed`` are arguments) is what makes the membership rules unit-testable.

Membership rules, and where they differ from the reference:

* ``pending`` is a dict in join order, so the epoch's client order is the order clients joined (the
  reference used a HashSet: arbitrary order; docs/protocol.md, "Known flaws of the reference",
  flaw 21). It persists across epochs: a connected client is offered to every new epoch without
  joining again.
* A disconnect removes the client from ``pending`` and, with ``withdraw_on_disconnect``, withdraws
  it from the running epoch. When it reconnects and joins again it is pending again and takes part
  in the next epoch. The reference removed every non-healthy exited client from ``pending`` on
  every tick, which also hit withdrawn clients that had reconnected, so they could never come
  back (upstream nousnet#25).
* Only *ejected* clients (failed health checks) are kicked: they stay joined but are left out of
  the pending list until the next epoch has started without them, i.e. they sit out one epoch.
* ``--init-warmup-time`` replaces ``warmup_time`` until the run is first active, so a fresh run
  can wait long for its first members to load the model while later warmups stay short.

"Changed" means the coordinator's serde JSON changed, so time passing inside a phase does not
cause a broadcast but every field change does (the reference broadcast all ~119 KB every 500 ms).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from psyche.coordinator import state_json as serde
from psyche.coordinator.coordinator import Coordinator
from psyche.coordinator.types import ClientState, RunState, TickResult, Witness, WitnessMetadata
from psyche.protocol.committee import CommitteeProof
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import Checkpoint
from psyche.protocol.strict_obj import ConfigError

__all__ = ["Event", "RunHost"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Event:
    """One line of the server's recent history (shown by the status view)."""

    at: float
    text: str


class RunHost:
    """Hosts one coordinator for the TCP server; every mutating method returns "changed"."""

    def __init__(
        self,
        coordinator: Coordinator,
        *,
        withdraw_on_disconnect: bool = True,
        init_warmup_time: int | None = None,
        on_epoch_end: Callable[[Coordinator], object] | None = None,
        first_seq: int = 0,
        max_events: int = 20,
        max_history: int = 64,
    ) -> None:
        self._coord = coordinator
        self.withdraw_on_disconnect = withdraw_on_disconnect
        self._on_epoch_end = on_epoch_end
        self.pending: dict[NodeIdentity, None] = {}
        self.kicked: set[NodeIdentity] = set()
        self.events: deque[Event] = deque(maxlen=max_events)
        self._real_warmup: int | None = None
        if init_warmup_time is not None and not coordinator.run_state.active:
            cfg = dataclasses.replace(coordinator.config, warmup_time=init_warmup_time)
            if cfg.warmup_time >= cfg.epoch_time:
                raise ConfigError(
                    f"--init-warmup-time ({init_warmup_time}) must be less than "
                    f"config.epoch_time ({cfg.epoch_time})"
                )
            self._real_warmup = coordinator.config.warmup_time
            coordinator.config = cfg
        self._json = serde.to_json(coordinator)
        self._run_state = coordinator.run_state
        self.first_seq = self.seq = first_seq
        # The last published states with their sequence numbers, so that a reader polling less
        # often than states change (the explorer's indexer, ``GET /status?since=N``) sees every
        # phase of a round instead of one state per poll.
        self.history: deque[tuple[int, bytes]] = deque(maxlen=max_history)

    @property
    def coordinator(self) -> Coordinator:
        return self._coord

    def snapshot(self) -> tuple[int, bytes]:
        """The latest published state: its sequence number and serde JSON."""
        return self.seq, self._json.encode()

    def states_between(self, after: int, before: int) -> list[tuple[int, bytes]]:
        """The published states with ``after < seq < before`` still held, oldest first."""
        return [(n, t) for n, t in self.history if after < n < before]

    def note(self, text: str, level: int = logging.INFO) -> None:
        """Record ``text`` for the status view and the log."""
        self.events.append(Event(time.time(), text))
        log.log(level, "%s", text)

    # --- membership -----------------------------------------------------------------------------

    def join(self, who: NodeIdentity) -> None:
        """Add ``who`` to the pending list, applying the coordinator's P2P key rule
        (:meth:`Coordinator.claim_p2p_key`); a refused join raises
        :class:`~psyche.coordinator.types.P2PIdentityTakenError` and changes nothing."""
        for rival in self._coord.claim_p2p_key(who, self.pending):
            del self.pending[rival]
            self.note(
                f"{rival.hex()} no longer pending: {who.hex()} joined with its own P2P key, "
                "which that wallet had claimed",
                logging.WARNING,
            )
        known = next((p for p in self.pending if p == who), None)
        if known is None:
            self.pending[who] = None
            self.note(f"{who.hex()} joined ({len(self.pending)} pending)")
        elif known.p2p_identity != who.p2p_identity:
            # Identities compare by wallet: replace the entry so the pending list holds the new
            # key (the rule above reads it), keeping the wallet's place in the join order.
            self.pending = {(who if p == who else p): None for p in self.pending}

    def disconnect(self, who: NodeIdentity) -> bool:
        self.pending.pop(who, None)
        c = self._coord
        index = c.index_of(who)
        withdrawn = (
            self.withdraw_on_disconnect and index is not None and c.is_healthy_member(index, who)
        )
        if withdrawn:
            assert index is not None
            c.withdraw(index)
        self.note(f"{who.hex()} disconnected" + (", withdrawn" if withdrawn else ""))
        return self._commit()

    def pending_for_tick(self) -> list[NodeIdentity]:
        return [p for p in self.pending if p not in self.kicked]

    def _update_kicked(self) -> None:
        es = self._coord.epoch_state
        for c in (*es.clients, *es.exited_clients):
            if c.state is ClientState.Ejected and c.id not in self.kicked:
                self.kicked.add(c.id)
                self.note(f"{c.id.hex()} ejected: sits out the next epoch")

    # --- coordinator calls ----------------------------------------------------------------------

    def tick(self, now: int, seed: int) -> bool:
        c = self._coord
        if c.run_state.halted:
            return False
        self._update_kicked()
        before = c.run_state
        result = c.tick(self.pending_for_tick(), now, seed)
        if before is RunState.WaitingForMembers and c.run_state is RunState.Warmup:
            self.kicked.clear()
        return self._commit(result)

    def warmup_witness(self, who: NodeIdentity, witness: Witness, now: int, seed: int) -> bool:
        self._coord.warmup_witness(who, witness, now, seed)
        return self._commit()

    def witness(
        self, who: NodeIdentity, witness: Witness, metadata: WitnessMetadata, now: int
    ) -> bool:
        self._coord.witness(who, witness, now)
        log.debug("witness from %s: %s", who.hex(), metadata)
        return self._commit()

    def health_check(
        self, who: NodeIdentity, checks: Sequence[tuple[NodeIdentity, CommitteeProof]]
    ) -> bool:
        dropped = self._coord.health_check(who, checks)
        self.note(f"health check from {who.hex()}: {dropped} ejected")
        return self._commit()

    def checkpoint(self, who: NodeIdentity, index: int, ck: Checkpoint, now: int) -> bool:
        result = self._coord.checkpoint(who, index, ck, now)
        self.note(f"checkpoint {type(ck).TAG} from {who.hex()}")
        return self._commit(result)

    # --- change detection -----------------------------------------------------------------------

    def _commit(self, result: TickResult | None = None) -> bool:
        c = self._coord
        if self._real_warmup is not None and c.run_state.active:
            c.config = dataclasses.replace(c.config, warmup_time=self._real_warmup)
            self._real_warmup = None
            self.note(f"run active: warmup_time back to {c.config.warmup_time} s")
        if c.run_state is not self._run_state:
            p = c.progress
            self.note(
                f"{self._run_state.name} → {c.run_state.name} "
                f"(epoch {p.epoch}, step {p.step}, {len(c.epoch_state.clients)} clients)"
            )
            self._run_state = c.run_state
        if result is not None and result.epoch_end is not None:
            self.note(f"epoch end ({'success' if result.epoch_end else 'failed'})")
            if result.epoch_end and self._on_epoch_end is not None:
                try:
                    self._on_epoch_end(c)
                except Exception:
                    # Saving is best effort; a full disk must not stop the run.
                    log.exception("epoch-end hook failed")
        text = serde.to_json(c)
        if text == self._json:
            return False
        self._json = text
        self.seq += 1
        self.history.append((self.seq, text.encode()))  # encoded once, not per reader
        return True
