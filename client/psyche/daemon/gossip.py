"""Peers' announcements, routed to the round they belong to; their results downloaded.

Nothing a peer sends is dropped silently: every announcement the client cannot use (malformed
or badly signed, from a key outside the epoch, a result for a round it no longer holds or has
not started, for a batch not assigned to its sender, with a bad commitment or payload, a forged
``ModelAvailable``) is a :class:`~psyche.p2p.rejections.Rejection`, counted and logged once per
peer and kind (docs/protocol.md, "Client: refused peer input is counted").

A download is a task in :attr:`EpochView.downloads`; the apply of its round awaits it (up to the
apply deadline) instead of polling for a flag.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from psyche.daemon.epoch import EpochView
from psyche.daemon.gradients import write_gradient
from psyche.daemon.parts import ClientParts, Holdings
from psyche.daemon.rounds import ReceivedResult, RoundState, verify_result
from psyche.events import DownloadEvent
from psyche.p2p.messages import Finished, ModelAvailable, TrainingResult, open_announcement
from psyche.p2p.peer_id import peer_id_for
from psyche.p2p.rejections import Rejection
from psyche.protocol.commitment import verify_commitment
from psyche.protocol.data_selection import BatchId

__all__ = ["GossipRouter"]

log = logging.getLogger("psyche.daemon")

DOWNLOAD_TIMEOUT_S = 120.0


class GossipRouter:
    def __init__(self, parts: ClientParts, held: Holdings) -> None:
        self.parts = parts
        self.held = held

    async def run(self) -> None:
        async for peer, data in self.parts.transport.announcements():
            try:
                ann = open_announcement(data, from_peer=peer)
            except Exception as e:  # AnnouncementError and anything a hostile peer triggers
                # Counted, and logged once per peer: one line per message let a peer flood the log.
                self.parts.rejections.record(Rejection.bad_announcement, peer, str(e))
                continue
            self.on_announcement(ann.sender, ann.payload, peer)

    def on_announcement(self, sender: bytes, payload: Any, peer: str) -> None:
        coord, view = self.held.coord, self.held.epoch
        if coord is None or view is None:
            return
        rejections = self.parts.rejections
        # Coordinators refuse a P2P key held by two wallets, but should an epoch list it twice
        # (a coordinator from before that rule), list order must not decide whose it is: a
        # result counts for the holder its batch is assigned to (docs/protocol.md item 16).
        holders = [c.id for c in coord.epoch_state.clients if c.id.p2p_identity == sender]
        if not holders:
            rejections.record(Rejection.not_epoch_client, peer, type(payload).__name__)
            return
        if isinstance(payload, ModelAvailable):
            self.parts.sharing.on_offer(sender, payload, coord)
            return
        if isinstance(payload, Finished):
            if payload.warmup:
                view.ready.add(sender)
            else:
                view.stragglers.difference_update(holders)
                for st in view.rounds.values():
                    if st.step == payload.step:
                        st.finished.update(holders)
            self.parts.wake()
            return
        if not isinstance(payload, TrainingResult) or view.dropped:
            return  # a client sitting the epoch out takes no results, and refuses none either
        state = next((s for s in view.rounds.values() if s.step == payload.step), None)
        batch = BatchId(payload.batch_start, payload.batch_end)
        if state is None:
            # A result that arrives before this client starts its round is lost (counted as
            # future), and so is one for a round already forgotten.
            kind = (
                Rejection.future_result
                if payload.step >= coord.progress.step
                else Rejection.stale_result
            )
            detail = f"step {payload.step}; this client is at step {coord.progress.step}"
            rejections.record(kind, peer, detail)
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

    async def _download(
        self,
        view: EpochView,
        state: RoundState,
        res: ReceivedResult,
        ann: TrainingResult,
        peer: str,
    ) -> None:
        coord, kit = self.held.coord, self.held.kit
        assert coord is not None and kit is not None
        me = self.parts.identity
        others = [peer_id_for(c.id.p2p_identity) for c in coord.epoch_state.clients if c.id != me]
        peers = [peer, *[p for p in others if p != peer]]
        size = min(ann.blob_size, kit.spec.max_bytes)
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
            return
        finally:
            if view.downloads.get((state.height, res.batch)) is asyncio.current_task():
                del view.downloads[(state.height, res.batch)]
        data = got.data
        self.parts.events.write(
            DownloadEvent(
                step=state.step,
                height=state.height,
                producer=peer,
                from_peer=got.from_peer,
                bytes=len(data),
                seconds=round(got.seconds, 4),
            )
        )
        full = ReceivedResult(res.trainer, res.batch, res.data_hash, data)
        if not verify_result(full, state.step, kit.spec):
            detail = f"batch {res.batch} of step {state.step}"
            self.parts.rejections.record(Rejection.bad_payload, peer, detail)
            return
        state.results[res.batch] = full
        write_gradient(self.parts, state.step, res.batch, res.trainer.p2p_identity, data)
        self.parts.wake()
