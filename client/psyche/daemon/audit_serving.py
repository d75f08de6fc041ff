"""The trainer's side of the SparseLoCo audit: serving its committed inner states to verifiers.

A SparseLoCo result in a run that verifies commits to the hashes of its round's inner states and
error buffers (``psyche.distro.audit_trailer``). The verifiers of the next round fetch two or three
of them by hash from this client (docs/protocol.md, "SparseLoCo: the inner-step audit"), so the
blobs are served from the moment the result is published until the round after next starts, when
every audit of it is over; older ones are withdrawn, which bounds what a client holds to two
rounds' chains. A chain recorded into the blob directory (``AuditTrail.spool``) is served
from the files the trainer wrote, which this then owns; a withdrawn chain's files go to the
transport's ``recycle_dir``, where the trainer writes its next chain over them
(``psyche.training.audit_files``).
"""

from __future__ import annotations

from collections import Counter, deque

from psyche.p2p.transport import Transport
from psyche.training import audit_files
from psyche.training.sparseloco_audit import AuditTrail

__all__ = ["KEEP_ROUNDS", "AuditBlobs"]

KEEP_ROUNDS = 2
"""Rounds whose chains stay served: the one just trained and the one its verifiers now audit."""


class AuditBlobs:
    """The chains this client serves, oldest first.

    Consecutive chains share blobs: a round's error buffers before it are its previous round's
    after it (the continuity every audit checks), so withdrawing a chain stops serving only the
    blobs no chain still served names. Withdrawing them all let a trainer that had finished its
    next round answer "not found" for the chain its verifiers were still auditing, which left
    the audit unchecked (a free rider went unjudged for rounds)."""

    def __init__(self) -> None:
        self._served: deque[tuple[int, tuple[bytes, ...]]] = deque()
        self._uses: Counter[bytes] = Counter()

    async def publish(self, transport: Transport, height: int, trail: AuditTrail) -> None:
        """Serve ``trail``'s states and error buffers (by their BLAKE3, the committed hashes,
        which the trail already took), the chain of the round at ``height``, and take over its
        files; withdraw all but the newest ``KEEP_ROUNDS`` chains. By count, not by height:
        heights restart at 0 each epoch, and comparing them kept the previous epoch's last
        chains served through most of the next one."""
        kept = trail.kept()
        trail.files.clear()  # this chain's files are ours now
        hashes: list[bytes] = []
        try:
            for h, blob in kept:
                if isinstance(blob, bytes):
                    # handoff=False: only this trainer holds them, and verifiers ask it by name.
                    await transport.serve_known(blob, h, handoff=False)
                elif self._uses[h]:
                    # An earlier chain's file serves these bytes (the error buffers before
                    # this round are the last round's after it).
                    audit_files.recycle(blob, transport.recycle_dir)
                else:
                    # Written into the blob directory as it was recorded: nothing to copy.
                    transport.serve_file(blob, blob_hash=h, size=blob.stat().st_size, handoff=False)
                hashes.append(h)
        finally:
            for _, blob in kept[len(hashes) :]:
                if not isinstance(blob, bytes):
                    blob.unlink(missing_ok=True)  # never served (cancelled part-way)
            self._uses.update(hashes)
            self._served.append((height, tuple(hashes)))
        while len(self._served) > KEEP_ROUNDS:
            for h in self._served.popleft()[1]:
                self._uses[h] -= 1
                if self._uses[h] == 0:
                    del self._uses[h]
                    transport.unserve(h, recycle=True)  # the next chain is written over it

    @property
    def rounds(self) -> tuple[int, ...]:
        return tuple(h for h, _ in self._served)
