"""The public half of the SparseLoCo audit, on arrival: a trainer's error buffers carry over.

In a run that verifies, a SparseLoCo result commits to the hashes of its trainer's error-feedback
buffers before and after its round (``psyche.distro.audit_trailer``), and a trainer's buffers
change only in its own rounds, so the hash before a round is the hash after its previous one
(docs/protocol.md, "SparseLoCo: the inner-step audit"). Both are in results every client
downloads, so every client compares them as each result arrives, at the cost of two 32-byte
hashes, rather than only a sampled verifier a round later: a result that breaks its chain is
refused like a payload that does not decode (not attested, so a quorum of witnesses leaves it
out and its trainer is ejected by the health checks). Without that, a trainer that did the work
could choose its "before" buffers to shape its payload, and only audits caught it.
"""

from __future__ import annotations

from psyche.daemon.epoch import EpochView
from psyche.daemon.rounds import ReceivedResult, RoundState
from psyche.distro.audit_trailer import decode_trailer
from psyche.distro.result_format import SparseLoCoFormat
from psyche.distro.sparseloco_payload import SparseLoCoPayload

__all__ = ["breaks_chain"]


def breaks_chain(
    view: EpochView, state: RoundState, full: ReceivedResult, decoded: object, fmt: object
) -> bool:
    """Whether ``full`` (its payload ``decoded``, of round ``state``) commits to error buffers
    before its round that are not those its trainer's result of the previous round of this epoch,
    held here, committed to after it. False when either carries no trailer or that result is
    not held here (not received, or refused): nothing to compare."""
    if not isinstance(fmt, SparseLoCoFormat) or not fmt.audit_steps:
        return False
    if not isinstance(decoded, SparseLoCoPayload) or decoded.audit is None:
        return False
    prev = view.rounds.get(state.height - 1)
    if prev is None:
        return False  # the epoch's first round: its buffers may start anew
    batch = prev.batch_of(full.trainer)
    held = prev.results.get(batch) if batch is not None else None
    if held is None or held.trainer != full.trainer or held.fingerprint is None:
        return False
    if held.payload is None or len(held.payload) != fmt.max_bytes:
        return False
    # Held means hash-checked and decoded on its own arrival: its trailer is read, not checked.
    before = decode_trailer(held.payload[fmt.payload_bytes :], fmt.audit_steps)
    return before.error_after != decoded.audit.error_before
