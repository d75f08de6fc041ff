"""Counting what the client refuses from peers, and saying so once per peer (both processes).

Every piece of peer input the client drops — gossip the host's validator refuses, an
announcement the daemon cannot use, a blob whose bytes do not hash to what was asked — is
recorded here by :class:`Rejection` kind. A drop used to be silent (or, for bad announcements,
one warning per message, so a rogue peer could flood the log); now each is counted, and the
first of each kind from each peer is logged as a warning naming the peer and the reason. Later
ones from that peer are only counted, so a burst costs one line, not one line per message.

The host process (:mod:`psyche.p2p.host.service`) and the daemon (:mod:`psyche.daemon.gossip`) keep
one :class:`Rejections` each; the host's counts reach the daemon in its periodic ``PeerStats``
(``Counters.rejections``), and the daemon writes the combined counts to its event log, from which
the testnet summary reads them (``rejections`` per client and in total).
"""

from __future__ import annotations

import enum
import logging
from collections import Counter
from collections.abc import Iterable, Mapping

__all__ = ["MAX_WARNED_PEERS", "Rejection", "Rejections", "merge_counts"]

MAX_WARNED_PEERS = 256
"""Peers warned about per kind. Peer ids cost nothing to make, so beyond this many offenders of
one kind the log says once that further ones are only counted: the log stays bounded."""


class Rejection(enum.Enum):
    """Why peer input was dropped (the value is the name used in counts and the summary)."""

    # In the host process.
    oversized_gossip = "oversized_gossip"
    non_member_gossip = "non_member_gossip"
    blob_hash_mismatch = "blob_hash_mismatch"
    blob_oversize = "blob_oversize"
    relay_not_member = "relay_not_member"
    relay_impersonation = "relay_impersonation"
    relay_over_limit = "relay_over_limit"
    tell_over_limit = "tell_over_limit"
    # In the daemon.
    bad_announcement = "bad_announcement"
    not_epoch_client = "not_epoch_client"
    stale_result = "stale_result"
    future_result = "future_result"
    other_batch = "other_batch"
    bad_commitment = "bad_commitment"
    bad_payload = "bad_payload"
    copy_payload = "copy_payload"
    forged_model_available = "forged_model_available"


DESCRIPTION = {
    Rejection.oversized_gossip: "gossip message over the size limit",
    Rejection.non_member_gossip: "gossip from a peer outside the allow-list",
    Rejection.blob_hash_mismatch: "blob whose bytes do not match the requested hash",
    Rejection.blob_oversize: "blob announced larger than the size asked for",
    Rejection.relay_not_member: "relay reservation or circuit from or to a non-member",
    Rejection.relay_impersonation: "relay reservation claiming another peer's id",
    Rejection.relay_over_limit: "relay reservation or circuit beyond the relay's limits",
    Rejection.tell_over_limit: "direct announcement beyond the peer's budget",
    Rejection.bad_announcement: "malformed or badly signed announcement",
    Rejection.not_epoch_client: "announcement signed by a key that is not a client of the epoch",
    Rejection.stale_result: "training result for a round this client no longer holds",
    Rejection.future_result: "training result for a round not started here that cannot be held",
    Rejection.other_batch: "training result for a batch not assigned to its sender",
    Rejection.bad_commitment: "training result with a bad commitment signature",
    Rejection.bad_payload: "training payload that does not match its commitment or chain",
    Rejection.copy_payload: "training payload that copies a result of this or the last round",
    Rejection.forged_model_available: "ModelAvailable offer that cannot be trusted",
}


class Rejections:
    """Counts by kind; a warning for the first rejection of each kind from each peer."""

    def __init__(self, logger: logging.Logger, *, max_warned_peers: int = MAX_WARNED_PEERS) -> None:
        self._log = logger
        self._max = max_warned_peers
        self._counts: Counter[Rejection] = Counter()
        self._warned: dict[Rejection, set[str]] = {}

    def record(self, kind: Rejection, peer: str, reason: str = "") -> None:
        """Count one rejection of ``kind`` from ``peer`` (a libp2p peer id); ``reason`` is the
        detail shown in the first warning for this peer and kind."""
        self._counts[kind] += 1
        warned = self._warned.setdefault(kind, set())
        if peer in warned or len(warned) > self._max:
            return
        warned.add(peer)
        if len(warned) > self._max:
            self._log.warning(
                "rejected %s from more than %d peers; further offenders are only counted",
                kind.value,
                self._max,
            )
            return
        self._log.warning(
            "rejected %s from peer %s: %s%s (further ones from this peer are only counted)",
            kind.value,
            peer,
            DESCRIPTION[kind],
            f" ({reason})" if reason else "",
        )

    def count(self, kind: Rejection) -> int:
        return self._counts[kind]

    def counts(self) -> dict[str, int]:
        """Non-zero counts by kind name, in :class:`Rejection` order."""
        return {k.value: self._counts[k] for k in Rejection if self._counts[k]}


def merge_counts(parts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """The sum of several ``{kind: count}`` maps (non-zero entries, sorted by kind)."""
    total: Counter[str] = Counter()
    for part in parts:
        total.update({k: int(v) for k, v in part.items()})
    return {k: v for k, v in sorted(total.items()) if v}
