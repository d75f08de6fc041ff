"""The public half of the SparseLoCo audit, on arrival: a trainer's private state carries over.

In a run that verifies, a SparseLoCo result commits to the hashes of its trainer's error-feedback
buffers before and after its round, and to the hashes of its inner AdamW moments before it (S_0,
whose weights are public) and after it (``psyche.distro.audit_trailer``). A trainer's buffers
and moments change only in its own rounds, so the hashes before a round are the hashes after its
previous one (docs/protocol.md, "SparseLoCo: the inner-step audit"). All are in results every
client downloads, so every client compares them as each result arrives (the hashes after a round
are noted per trainer in its ``RoundState.chain_ends``), at the cost of four 32-byte hashes,
rather than only a sampled verifier a round later: a result that breaks its chain is refused
like a payload that does not decode (not attested, so a quorum of witnesses leaves it out and
its trainer is ejected by the health checks). Without that, a trainer that did the work could
choose its "before" buffers or moments to shape its payload, and only audits caught the one
(the moments, not at all: protocol version 6 and earlier).
"""

from __future__ import annotations

from psyche.daemon.epoch import EpochView
from psyche.daemon.rounds import ReceivedResult, RoundState
from psyche.distro.sparseloco_payload import SparseLoCoPayload

__all__ = ["breaks_chain"]


def breaks_chain(view: EpochView, state: RoundState, full: ReceivedResult, decoded: object) -> bool:
    """Whether ``full`` (its payload ``decoded``, of round ``state``) commits to error buffers
    or moments before its round that are not those its trainer's result of the previous round
    of this epoch committed to after it. Either way this result's own ends of the chain are
    noted for the next round. False when it carries no trailer or no result of its trainer's
    arrived here in the previous round: nothing to compare."""
    if not isinstance(decoded, SparseLoCoPayload) or decoded.audit is None:
        return False
    audit = decoded.audit
    # The first that arrived, held or refused: a refused result's trailer is still its
    # trainer's signed word for where its state stands, so one that breaks its chain every
    # round is refused every round, not every other one.
    state.chain_ends.setdefault(full.trainer, (audit.error_after, audit.moments_after))
    prev = view.rounds.get(state.height - 1)
    if prev is None:
        return False  # the epoch's first round: its state may start anew
    before = prev.chain_ends.get(full.trainer)
    return before is not None and before != (audit.error_before, audit.states[0])
