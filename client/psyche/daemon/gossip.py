"""Peers' announcements, routed to the round they belong to; their results downloaded.

Nothing a peer sends is dropped silently: every announcement the client cannot use (malformed
or badly signed, from a key outside the epoch, a result for a round it no longer holds or has
not started, for a batch not assigned to its sender, with a bad commitment or payload, a forged
``ModelAvailable``) is a :class:`~psyche.p2p.rejections.Rejection`, counted and logged once per
peer and kind (docs/protocol.md, "Client: refused peer input is counted").

A download is a task in :attr:`EpochView.downloads`; the apply of its round awaits it (up to the
apply deadline) instead of polling for a flag.

A ``TrainingResult`` or ``Finished`` for a round this client has not started yet (its peers saw
the round's state first, or its state loop is still busy with the previous one) is held in
:attr:`EpochView.early` — bounded per sender and in total, and only a few steps ahead — and
taken when the round starts here (:meth:`GossipRouter.round_opened`). Every honest client must
apply exactly the results the witnesses agreed on; dropping such a result made this client
apply fewer than its peers, and its weights diverged for good.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

from psyche.coordinator import Coordinator
from psyche.daemon.chain_check import breaks_chain
from psyche.daemon.copy_check import copied_from
from psyche.daemon.epoch import EARLY_STEPS_AHEAD, Early, EpochView
from psyche.daemon.gradients import write_gradient
from psyche.daemon.parts import ClientParts, Holdings
from psyche.daemon.rounds import (
    ReceivedResult,
    RoundState,
    Unsettled,
    decode_verified,
    result_sketch,
)
from psyche.events import DownloadEvent
from psyche.p2p.messages import (
    Announcement,
    Finished,
    ModelAvailable,
    TrainingResult,
    open_announcement,
)
from psyche.p2p.peer_id import peer_id_for
from psyche.p2p.rejections import Rejection
from psyche.protocol.commitment import verify_commitment
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import NodeIdentity

__all__ = ["GossipRouter"]

log = logging.getLogger("psyche.daemon")

DOWNLOAD_TIMEOUT_S = 120.0
OPENED_KEPT = 4 * 256
"""Distinct announcements kept opened: a round's results and ``Finished`` of up to 256 clients
(``MAX_CLIENTS``), for two rounds; under 1 MB."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Members:
    """The epoch's clients as an announcement and a download look them up, made once per
    coordinator state: each announcement and download scanned the whole list (and encoded every
    member's peer id), O(N) per result and O(N²) per client and round (issue 38)."""

    holders: dict[bytes, list[NodeIdentity]]
    """P2P key → the clients listing it, in list order."""
    others: tuple[str, ...]
    """Every other client's peer id, in list order: where a blob may also be fetched."""

    @classmethod
    def of(cls, coord: Coordinator, me: NodeIdentity) -> _Members:
        holders: dict[bytes, list[NodeIdentity]] = {}
        for c in coord.epoch_state.clients:
            holders.setdefault(c.id.p2p_identity, []).append(c.id)
        others = tuple(
            peer_id_for(c.id.p2p_identity) for c in coord.epoch_state.clients if c.id != me
        )
        return cls(holders, others)


class GossipRouter:
    def __init__(self, parts: ClientParts, held: Holdings) -> None:
        self.parts = parts
        self.held = held
        self._members: tuple[Coordinator, _Members] | None = None
        self._opened: dict[tuple[str, bytes], Announcement] = {}
        """Announcements already opened, oldest first (at most ``OPENED_KEPT``)."""

    def members(self, coord: Coordinator) -> _Members:
        """``coord``'s clients, looked up (a new state object is a new list, and may differ)."""
        if self._members is None or self._members[0] is not coord:
            self._members = (coord, _Members.of(coord, self.parts.identity))
        return self._members[1]

    async def run(self) -> None:
        async for peer, data in self.parts.transport.announcements():
            data = bytes(data)
            ann = self._opened.get((peer, data))
            if ann is None:
                try:
                    ann = open_announcement(data, from_peer=peer)
                except Exception as e:  # AnnouncementError and anything a hostile peer triggers
                    # Counted, and logged once per peer: one line per message let a peer flood
                    # the log.
                    self.parts.rejections.record(Rejection.bad_announcement, peer, str(e))
                    continue
                self._remember(peer, data, ann)
            self.on_announcement(ann.sender, ann.payload, peer)

    def _remember(self, peer: str, data: bytes, ann: Announcement) -> None:
        """Keep ``ann`` opened: peers send their round announcements again
        (``psyche.daemon.resending``), and a repeat costs a lookup, not a signature check."""
        self._opened[(peer, data)] = ann
        if len(self._opened) > OPENED_KEPT:
            del self._opened[next(iter(self._opened))]

    def on_announcement(self, sender: bytes, payload: Any, peer: str) -> None:
        coord, view = self.held.coord, self.held.epoch
        if coord is None or view is None:
            return
        # Coordinators refuse a P2P key held by two wallets, but should an epoch list it twice
        # (a coordinator from before that rule), list order must not decide whose it is: a
        # result counts for the holder its batch is assigned to (docs/protocol.md item 16).
        holders = self.members(coord).holders.get(sender, [])
        if not holders:
            self.parts.rejections.record(Rejection.not_epoch_client, peer, type(payload).__name__)
            return
        if isinstance(payload, ModelAvailable):
            self.parts.sharing.on_offer(sender, payload, coord)
        elif isinstance(payload, Finished):
            self._on_finished(view, holders, sender, payload, peer)
            self.parts.wake()
        elif isinstance(payload, TrainingResult) and not view.dropped:
            # A client sitting the epoch out takes no results, and refuses none either.
            self._on_result(coord, view, holders, sender, payload, peer)

    def _on_finished(
        self,
        view: EpochView,
        holders: list[NodeIdentity],
        sender: bytes,
        payload: Finished,
        peer: str,
    ) -> None:
        if payload.warmup:
            view.ready.add(sender)
            return
        view.stragglers.difference_update(holders)
        state = _round_of(view, payload.step)
        if state is not None:
            state.finished.update(holders)
        elif not view.dropped:
            # Its round has not started here yet: kept for it (over the bounds, or for a round
            # already gone, it is ignored as before).
            self._hold_early(view, Early(sender, payload, peer))

    def _on_result(
        self,
        coord: Coordinator,
        view: EpochView,
        holders: list[NodeIdentity],
        sender: bytes,
        payload: TrainingResult,
        peer: str,
    ) -> None:
        """Take a peer's ``TrainingResult`` for its round and start its download, or hold it
        for a round not started here yet, or refuse it."""
        rejections = self.parts.rejections
        state = _round_of(view, payload.step)
        batch = BatchId(payload.batch_start, payload.batch_end)
        if state is None:
            self._early_result(coord, view, Early(sender, payload, peer))
            return
        assigned = state.assignment.get(batch)
        if assigned is None or assigned not in holders:
            rejections.record(Rejection.other_batch, peer, f"batch {batch} of step {payload.step}")
            return
        if batch in state.results:
            return  # a repeat of a result already taken: nothing is lost
        commitment = payload.commitment.to_commitment()
        if not verify_commitment(sender, commitment):
            detail = f"batch {batch} of step {payload.step}"
            rejections.record(Rejection.bad_commitment, peer, detail)
            return
        if self.held.kit is None:
            return  # no model loaded (sitting this epoch out): nothing to verify payloads with
        res = ReceivedResult(assigned, batch, commitment.data_hash, None)
        state.results[batch] = res
        task = asyncio.create_task(self._download(view, state, res, payload, peer))
        view.downloads[(state.height, batch)] = task

    def _early_result(self, coord: Coordinator, view: EpochView, item: Early) -> None:
        """A result for a round this client has not started yet is held until it starts (a few
        steps ahead at most, bounded per sender and in total); one further ahead or over the
        bounds is refused (future), and so is one for a round already forgotten (stale)."""
        if self._hold_early(view, item):
            return
        newest = max((s.step for s in view.rounds.values()), default=-1)
        kind = Rejection.future_result if item.step > newest else Rejection.stale_result
        detail = f"step {item.step}; this client is at step {coord.progress.step}"
        if kind is Rejection.future_result:
            detail += f" (results are held up to {EARLY_STEPS_AHEAD} steps ahead, bounded)"
        self.parts.rejections.record(kind, item.peer, detail)

    def _hold_early(self, view: EpochView, item: Early) -> bool:
        """Keep ``item`` for its round if that round may still start here: later than every
        round this client holds, at most ``EARLY_STEPS_AHEAD`` steps past the newer of that and
        the newest coordinator state, and within the bounds (``EpochView.early``)."""
        coord = self.held.coord
        assert coord is not None
        newest = max((s.step for s in view.rounds.values()), default=None)
        if newest is not None and item.step <= newest:
            return False  # a round this client skipped or already forgot: it will not start
        base = max(coord.progress.step, newest if newest is not None else 0)
        if item.step > base + EARLY_STEPS_AHEAD:
            return False
        return view.early.hold(item)

    def round_opened(self, view: EpochView, state: RoundState) -> None:
        """Round ``state`` starts here (its ``RoundState`` is now in ``view.rounds``): take the
        announcements held for it, as if they arrived now. Those held for earlier rounds, which
        never started here, are dropped; their results count as ``future_result``."""
        ready, dropped = view.early.take(state.step)
        for e in dropped:
            if isinstance(e.payload, TrainingResult):
                detail = f"step {e.step}; its round never started on this client"
                self.parts.rejections.record(Rejection.future_result, e.peer, detail)
        for e in ready:
            self.on_announcement(e.sender, e.payload, e.peer)

    def epoch_ended(self, view: EpochView) -> None:
        """``view``'s epoch is over here: results still held for its rounds are lost."""
        for e in view.early.clear():
            if isinstance(e.payload, TrainingResult) and not view.dropped:
                detail = f"step {e.step}; the epoch ended before its round started here"
                self.parts.rejections.record(Rejection.future_result, e.peer, detail)

    async def _download(
        self,
        view: EpochView,
        state: RoundState,
        res: ReceivedResult,
        ann: TrainingResult,
        peer: str,
    ) -> None:
        data = await self._fetch(view, state, res, ann, peer)
        if data is not None:
            self._take(
                view, state, ReceivedResult(res.trainer, res.batch, res.data_hash, data), peer
            )

    async def _fetch(
        self,
        view: EpochView,
        state: RoundState,
        res: ReceivedResult,
        ann: TrainingResult,
        peer: str,
    ) -> bytes | None:
        """The announced blob's bytes, from its publisher or another member; None
        (and the result forgotten, so a repeat announcement may try again) when it fails."""
        coord, kit = self.held.coord, self.held.kit
        assert coord is not None and kit is not None
        peers = [peer, *[p for p in self.members(coord).others if p != peer]]
        size = min(ann.blob_size, kit.format.max_bytes)
        try:
            async with self.parts.downloads:
                got = await self.parts.transport.fetch_detailed(
                    ann.blob_hash, from_any_of=peers, max_size=size, timeout=DOWNLOAD_TIMEOUT_S
                )
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("download of %s (step %d) failed: %s", res.batch, state.step, e)
            state.results.pop(res.batch, None)
            return None
        finally:
            if view.downloads.get((state.height, res.batch)) is asyncio.current_task():
                del view.downloads[(state.height, res.batch)]
        self.parts.result_blobs.add(self.parts.transport, (view.epoch, state.height), ann.blob_hash)
        self.parts.events.write(
            DownloadEvent(
                step=state.step,
                height=state.height,
                producer=peer,
                from_peer=got.from_peer,
                bytes=len(got.data),
                seconds=round(got.seconds, 4),
            )
        )
        return got.data

    def _take(self, view: EpochView, state: RoundState, full: ReceivedResult, peer: str) -> None:
        """Hold a downloaded result if its payload verifies against its commitment and copies
        no result held for this round or the previous one; refuse it otherwise."""
        kit = self.held.kit
        assert kit is not None and full.payload is not None
        decoded = decode_verified(full, state.step, kit.format)
        if decoded is None:
            detail = f"batch {full.batch} of step {state.step}"
            self._turn_away(state, full, Rejection.bad_payload, peer, detail)
            return
        if breaks_chain(view, state, full, decoded):
            detail = (
                f"batch {full.batch} of step {state.step}: its error buffers or inner moments "
                "before the round are not those after its previous round"
            )
            self._turn_away(state, full, Rejection.bad_payload, peer, detail)
            return
        # Sketched once here, looked up once against the held results' index (O(1) whatever
        # the round's size; psyche.distro.copy_index).
        sk = result_sketch(decoded, kit.format)
        recent = [s for s in view.rounds.values() if state.height - 1 <= s.height <= state.height]
        # At LR 0 (a cold-start epoch's first round) every residual is empty, so honest results
        # are alike: nothing is checked for copies then.
        zero_lr = state.lrs.lr == 0
        unsure: list[ReceivedResult] = []
        original = None
        if not zero_lr:
            me = self.parts.identity
            original = copied_from(
                sk, recent, decoded, kit.format, within=state, me=me, unsure=unsure
            )
        if original is not None:
            # Not attested, so a quorum of witnesses leaves it out and its trainer is accused;
            # docs/protocol.md, "Threat model and result verification".
            detail = f"batch {full.batch} of step {state.step} repeats batch {original.batch}"
            self._turn_away(state, full, Rejection.copy_payload, peer, detail)
            return
        state.hold(dataclasses.replace(full, fingerprint=sk.fingerprint), sk, decoded)
        if unsure:
            # Near a held result, but nothing else of its round is held to tell a copy from a
            # round whose honest results are all alike: decided when this client witnesses.
            held_in = next(s for s in recent if s.results.get(unsure[0].batch) is unsure[0])
            state.unsettled[full.batch] = Unsettled(unsure[0], held_in.step, kit.format)
        write_gradient(self.parts, state.step, full.batch, full.trainer.p2p_identity, full.payload)
        self.parts.wake()

    def _turn_away(
        self, state: RoundState, full: ReceivedResult, kind: Rejection, peer: str, detail: str
    ) -> None:
        """Refuse a downloaded result for what it holds. Its announcement was signed by the
        batch's trainer and its bytes are the blob that trainer named, so the fault is the
        trainer's and nothing better will come: the round is not held for it (its witnesses go
        out as soon as everything else is in, rather than at the train limit: one bad result
        cost every client the rest of the round's time)."""
        self.parts.rejections.record(kind, peer, detail)
        state.turned_away.add(full.batch)
        self.parts.wake()


def _round_of(view: EpochView, step: int) -> RoundState | None:
    return next((s for s in view.rounds.values() if s.step == step), None)
