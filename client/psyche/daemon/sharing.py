"""The daemon's part in P2P model sharing: serve after cooldown, fetch when joining.

See docs/protocol.md, "P2P model sharing".

* At every cooldown the daemon hands its weights to :meth:`ModelSharing.snapshot`, which serves
  them (:class:`psyche.checkpoint.p2p.SnapshotServer`) until the next epoch's first round starts.
* While the next epoch warms up, :meth:`announce` re-announces ``ModelAvailable`` about once a
  second until every epoch client is ready, so a joiner that connects late still hears it.
* A client that has no model when a P2P-checkpoint epoch warms up calls :meth:`fetch`: it waits
  for offers from the previous epoch's clients (the members it saw when that epoch ended; all
  other epoch clients if it did not watch it), takes the majority manifest and fetches it.
* An offer no honest client sends — from a client that was not in the previous epoch, for
  another step than the run's, or (when fetching) naming a manifest the majority does not — is
  a ``forged_model_available`` rejection: counted, and logged once per peer.

Membership is remembered here (:meth:`observe`) because the coordinator forgets the previous
epoch's clients when a new epoch starts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from psyche.checkpoint.manifest import build_snapshot
from psyche.checkpoint.p2p import (
    PeerFetchError,
    ReceivedModel,
    SnapshotServer,
    choose_offer,
    fetch_snapshot,
)
from psyche.coordinator import ClientState, Coordinator, RunState
from psyche.p2p.messages import ModelAvailable, sign_announcement
from psyche.p2p.peer_id import peer_id_for
from psyche.p2p.rejections import Rejection, Rejections
from psyche.p2p.transport import Transport
from psyche.protocol.identity import SecretKey

__all__ = ["ModelSharing", "SharingOptions"]

log = logging.getLogger("psyche.daemon")

ANNOUNCE_EVERY_S = 1.0
OFFER_SETTLE_S = 3.0
"""After the first offer, how long to wait for the other previous-epoch peers' offers."""

_ACTIVE = (RunState.RoundTrain, RunState.RoundWitness, RunState.Cooldown)


@dataclass(frozen=True, slots=True, kw_only=True)
class SharingOptions:
    max_concurrent_requests: int = 8
    """Parameter pieces requested at once (``--max-concurrent-parameter-requests``)."""
    request_timeout_s: float = 30.0
    """Per-request deadline; a request that misses it is retried on another peer."""
    max_peer_errors: int = 5
    """Failures after which a peer is no longer asked."""
    offer_timeout_s: float = 60.0
    """How long a joiner waits for any previous-epoch peer to offer the model."""


class ModelSharing:
    def __init__(
        self,
        key: SecretKey,
        node: Transport,
        options: SharingOptions,
        rejections: Rejections | None = None,
    ) -> None:
        self.key = key
        self.node = node
        self.options = options
        self.rejections = rejections if rejections is not None else Rejections(log)
        self.sharer = SnapshotServer(node)
        self._members: dict[int, frozenset[bytes]] = {}
        self._offers: dict[bytes, ModelAvailable] = {}
        self._offers_epoch = -1
        self._last_announce = 0.0

    # --- membership and offers ----------------------------------------------------------------

    def observe(self, coord: Coordinator) -> None:
        """Remember who is in the epoch (the last view of an epoch is the one that counts)."""
        if coord.run_state in _ACTIVE:
            epoch = coord.progress.epoch
            self._members[epoch] = frozenset(
                c.id.p2p_identity
                for c in coord.epoch_state.clients
                if c.state is ClientState.Healthy
            )
            for old in [e for e in self._members if e < epoch - 2]:
                del self._members[old]
        if coord.progress.epoch != self._offers_epoch:
            self._offers_epoch = coord.progress.epoch
            self._offers = {}

    def on_offer(self, sender: bytes, offer: ModelAvailable, coord: Coordinator) -> None:
        """Keep an offer a joiner may count. Honest offers come only from the previous epoch's
        clients and name the run's step (offers are sent while the next epoch warms up, when
        the step does not change), so anything else is refused as forged."""
        if sender not in self.trusted_peers(coord):
            reason = "its sender is not a client of the previous epoch"
        elif offer.step != coord.progress.step:
            reason = f"it offers step {offer.step}, the run is at step {coord.progress.step}"
        else:
            self._offers[sender] = offer
            return
        self.rejections.record(Rejection.forged_model_available, peer_id_for(sender), reason)

    # --- serving ------------------------------------------------------------------------------

    async def snapshot(self, model: torch.nn.Module, files: Mapping[str, bytes], step: int) -> None:
        config = files.get("config.json")
        if config is None:
            log.warning("no config.json known for this model; not serving it to joiners")
            return
        params = [(n, p.detach()) for n, p in model.named_parameters()]
        snap = await asyncio.to_thread(
            build_snapshot, params, config_json=config.decode(), files=files, step=step
        )
        self.sharer.share(snap)
        log.info(
            "serving the model of step %d to joiners (%d pieces, %d bytes)",
            step,
            len(snap.pieces),
            snap.manifest.total_bytes,
        )

    def clear(self) -> None:
        if self.sharer.snapshot is not None:
            self.sharer.clear()

    async def announce(self, step: int) -> None:
        now = time.monotonic()
        if now - self._last_announce < ANNOUNCE_EVERY_S:
            return
        offer = self.sharer.offer(step)
        if offer is None:
            return
        self._last_announce = now
        await self.node.announce(sign_announcement(self.key, offer))

    # --- joining ------------------------------------------------------------------------------

    def trusted_peers(self, coord: Coordinator) -> frozenset[bytes]:
        me = self.key.public_key()
        current = {c.id.p2p_identity for c in coord.epoch_state.clients} - {me}
        previous = self._members.get(coord.progress.epoch - 1)
        return frozenset(current & previous if previous is not None else current)

    async def fetch(self, coord: Coordinator) -> ReceivedModel:
        """Agree on the previous epoch's manifest and fetch it (raises :class:`PeerFetchError`)."""
        step = coord.progress.step
        trusted = self.trusted_peers(coord)
        if not trusted:
            raise PeerFetchError("no client of the previous epoch is in this epoch to ask")
        t0 = time.monotonic()
        first: float | None = None
        while True:
            answered = {k for k, o in self._offers.items() if k in trusted and o.step == step}
            now = time.monotonic()
            if answered and first is None:
                first = now
            if answered == trusted or (first is not None and now - first > OFFER_SETTLE_S):
                break
            if now - t0 > self.options.offer_timeout_s:
                raise PeerFetchError(
                    f"no previous-epoch peer offered the model of step {step} within "
                    f"{self.options.offer_timeout_s:g} s"
                )
            await asyncio.sleep(0.1)
        choice = choose_offer(self._offers, trusted, step)
        for sender, offer in self._offers.items():
            named = (offer.manifest_hash, offer.manifest_size)
            agreed = (choice.manifest_hash, choice.manifest_size)
            if sender in trusted and offer.step == step and named != agreed:
                self.rejections.record(
                    Rejection.forged_model_available,
                    peer_id_for(sender),
                    f"it names manifest {offer.manifest_hash.hex()[:16]}, the majority "
                    f"{choice.manifest_hash.hex()[:16]}",
                )
        log.info(
            "fetching the model of step %d from %d peers (%d of %d offers agree)",
            step,
            len(choice.peers),
            choice.votes,
            choice.answers,
        )
        keep = set(self.sharer.blobs())
        return await fetch_snapshot(
            self.node,
            choice,
            step=step,
            max_concurrent=self.options.max_concurrent_requests,
            request_timeout=self.options.request_timeout_s,
            max_peer_errors=self.options.max_peer_errors,
            keep=keep,
        )
