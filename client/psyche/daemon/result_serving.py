"""How long a client serves the round results it holds: its own and those it downloaded.

Every result is a blob its producer serves, and a fetched blob is served by the fetcher from then
on, so a result's copies spread as a tree (``psyche.p2p.host.blobs``). Nobody withdrew them:
each client served every payload of every round it had seen for the life of the process, one
file per member per round on tmpfs and an entry in its host's table (at 64 clients of a 1 B
model that is gigabytes an hour). A round's payloads are wanted until every member has
applied it: this client applies round h−2 at the start of round h (``APPLY_LAG``), and a member
one round behind it applies h−3 then, so the results of the last ``KEEP_ROUNDS`` rounds
(h−3 … h) stay served and older ones are withdrawn when a round starts here. A member still
waiting for a result of h−4 then (its apply held up by a slow download) has missed the start
of a round since, so it sits the epoch out whatever it fetches (docs/protocol.md, "Applying
results"): keeping more would serve nobody.
"""

from __future__ import annotations

from collections import Counter

from psyche.daemon.rounds import APPLY_LAG
from psyche.p2p.transport import Transport

__all__ = ["KEEP_ROUNDS", "ResultBlobs"]

KEEP_ROUNDS = APPLY_LAG + 2
"""Rounds whose results stay served: the one training, the two this client has not applied
yet, and the one a member a round behind it applies now."""

Round = tuple[int, int]
"""``(epoch, height)``: heights restart at 0 each epoch."""


class ResultBlobs:
    """The result payloads this client serves, by the round they belong to."""

    def __init__(self) -> None:
        self._by_round: dict[Round, list[bytes]] = {}
        self._uses: Counter[bytes] = Counter()
        """Rounds naming each blob: a replayed payload is the same blob in two rounds."""
        self._floor: Round = (-1, 0)

    def add(self, transport: Transport, at: Round, blob_hash: bytes) -> None:
        """``blob_hash`` (served by ``transport`` now) is a result of round ``at``; one of a
        round already withdrawn (a download that finished late) is withdrawn at once."""
        blob_hash = bytes(blob_hash)
        if at < self._floor:
            if blob_hash not in self._uses:
                transport.unserve(blob_hash)
            return
        self._by_round.setdefault(at, []).append(blob_hash)
        self._uses[blob_hash] += 1

    def keep_from(self, transport: Transport, floor: Round) -> int:
        """Withdraw the results of every round before ``floor``; returns how many blobs."""
        self._floor = max(self._floor, floor)
        withdrawn = 0
        for at in [at for at in self._by_round if at < self._floor]:
            for blob_hash in self._by_round.pop(at):
                self._uses[blob_hash] -= 1
                if not self._uses[blob_hash]:
                    del self._uses[blob_hash]
                    transport.unserve(blob_hash)
                    withdrawn += 1
        return withdrawn

    def round_started(self, transport: Transport, epoch: int, height: int) -> int:
        """Round ``height`` of ``epoch`` started here: keep the last ``KEEP_ROUNDS`` rounds'."""
        return self.keep_from(transport, (epoch, height - KEEP_ROUNDS + 1))

    @property
    def held(self) -> int:
        """Distinct result blobs served now."""
        return len(self._uses)
