"""The copy check: is a downloaded result a copy of one this client holds?

An exact copy (equal content fingerprints) or a near-duplicate (the run format's rule, for DisTrO
``psyche.distro.overlap.near_duplicate``) of a result held from the same round or the previous one
is refused (docs/protocol.md, "Copy checks" and "Near-duplicates"). Candidates come from each
round's index (:attr:`RoundState.copies`) in O(1) whatever the round's size; a near-duplicate is
measured against a reference result of its own round, since honest results of a round can all
be alike, and one checked before any reference was held is settled when this client witnesses.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from psyche.daemon.rounds import ReceivedResult, RoundState, decode_verified
from psyche.distro.copy_index import COUNTS, CopySketch
from psyche.distro.overlap import CLOSER, NEAR_DUPLICATE
from psyche.distro.result_format import ResultFormat
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import NodeIdentity

__all__ = [
    "REFERENCE_SLACK",
    "copied_from",
    "copied_from_reference",
    "reference_for",
    "settle_copies",
]


REFERENCE_SLACK = 0.02
"""How far below the line of :data:`psyche.distro.overlap.CLOSER` a candidate's estimated
similarity (its share of agreeing MinHash bins, a Jaccard estimate with a standard error of
about 0.013 near 0.8) may be and still be measured exactly: in a round whose honest results
converge, every held result is a band candidate, and measuring each would cost O(K) decodes
per download."""


def copied_from(
    sk: CopySketch,
    rounds: Iterable[RoundState],
    payload: Any | None = None,
    fmt: ResultFormat | None = None,
    *,
    within: RoundState | None = None,
    me: NodeIdentity | None = None,
    unsure: list[ReceivedResult] | None = None,
) -> ReceivedResult | None:
    """A verified result held in ``rounds`` (this round and the previous one) whose content
    repeats the result sketched by ``sk``: an honest trainer subtracts what it sent from its
    residual, so no two honest results (nor one trainer's two rounds) carry the same content.
    Given the decoded ``payload`` and the run's format ``fmt``, also one that ``payload`` nearly
    duplicates (for DisTrO ``psyche.distro.overlap.near_duplicate``: a copy with a few
    coefficients changed).

    Given ``within``, the round the checked result belongs to, a near-duplicate must also be
    closer to its original than to a **reference** result of that round (:func:`reference_for`:
    this client's own result, ``me``'s, else the first one held), since honest results of a
    round can all be alike (``psyche.distro.overlap.CLOSER``). Where no reference is held yet, a
    near-duplicate that the absolute rule alone would refuse is put in ``unsure`` (if given)
    instead of returned, for :func:`settle_copies` to decide once a reference is held.

    The rounds' indexes (:attr:`RoundState.copies`) name the candidates in O(1) whatever the
    number of held results; each candidate is then decoded and measured exactly, so the decision
    is :func:`copied_from_reference`'s but for the probabilities in ``psyche.distro.copy_index``
    (a copy at the threshold escapes with probability ≤ 1.7·10⁻⁷)."""
    rounds = list(rounds)
    COUNTS.checks += 1
    for state in rounds:
        for other in state.copies.exact(sk):
            if state.results.get(other.batch) is other:
                return other
    if payload is None or fmt is None:
        return None
    refs = _References(within, me, payload, fmt)
    for state in rounds:
        for other, share in state.copies.near_scored(sk):
            if state.results.get(other.batch) is not other:
                continue
            ref = refs.against(other)
            if ref is not None and share is not None and share < ref.line - REFERENCE_SLACK:
                continue  # too far from the line to be closer than the reference: not decoded
            COUNTS.confirmations += 1
            held = _decoded(state, other, fmt)
            if _near(payload, held, ref, fmt, unsure, other):
                return other
    return None


def copied_from_reference(
    fingerprint: bytes,
    rounds: Iterable[RoundState],
    payload: Any | None = None,
    fmt: ResultFormat | None = None,
    *,
    within: RoundState | None = None,
    me: NodeIdentity | None = None,
    unsure: list[ReceivedResult] | None = None,
) -> ReceivedResult | None:
    """REFERENCE ONLY, for the tests: the copy check as it was, comparing with every held result
    (O(K) decodes per result, O(K²) per round). :func:`copied_from` must agree with it."""
    rounds = list(rounds)
    for state in rounds:
        for other in state.results.values():
            if other.fingerprint == fingerprint:
                return other
    if payload is None or fmt is None:
        return None
    refs = _References(within, me, payload, fmt)
    for state in rounds:
        for other in state.results.values():
            held = decode_verified(other, state.step, fmt) if other.fingerprint else None
            if _near(payload, held, refs.against(other), fmt, unsure, other):
                return other
    return None


@dataclass(frozen=True, slots=True)
class _Reference:
    decoded: Any
    line: float
    """The Jaccard share a candidate must reach to be closer than this reference."""


class _References:
    """The reference results one check compares its candidates with, decoded once each."""

    def __init__(
        self, within: RoundState | None, me: NodeIdentity | None, payload: Any, fmt: ResultFormat
    ) -> None:
        self.within, self.me, self.payload, self.fmt = within, me, payload, fmt
        self._made: dict[BatchId, _Reference | None] = {}

    def against(self, candidate: ReceivedResult) -> _Reference | None:
        if self.within is None:
            return None
        found = reference_for(self.within, self.me, (candidate.batch,))
        if found is None:
            return None
        if found.batch not in self._made:
            decoded = _decoded(self.within, found, self.fmt)
            self._made[found.batch] = None if decoded is None else self._line(decoded)
        return self._made[found.batch]

    def _line(self, decoded: Any) -> _Reference:
        o = max(NEAR_DUPLICATE, 1.0 - CLOSER * (1.0 - self.fmt.overlap(self.payload, decoded)))
        return _Reference(decoded, o / (2.0 - o))


def reference_for(
    state: RoundState, me: NodeIdentity | None, exclude: Collection[BatchId]
) -> ReceivedResult | None:
    """The result of ``state``'s round a near-duplicate is measured against: this client's own
    (trusted: it did that work) unless excluded, else the first held one not excluded. O(1):
    at most ``len(exclude) + 1`` held results are looked at."""
    mine = state.batch_of(me) if me is not None else None
    if mine is not None and mine not in exclude:
        own = state.results.get(mine)
        if own is not None and own.payload is not None and own.fingerprint:
            return own
    for res in state.copies.entries:  # the held results, in the order they were held
        if res.batch not in exclude and state.results.get(res.batch) is res:
            return res
    return None


def _decoded(state: RoundState, res: ReceivedResult, fmt: ResultFormat) -> Any | None:
    """``res``, held in ``state``, decoded: the payload kept when held, else decoded again."""
    kept = state.kept_decoded(res)
    return kept if kept is not None else decode_verified(res, state.step, fmt)


def _near(
    payload: Any,
    held: Any | None,
    ref: _Reference | None,
    fmt: ResultFormat,
    unsure: list[ReceivedResult] | None,
    other: ReceivedResult,
) -> bool:
    """Whether ``payload`` is refused as a near-duplicate of ``held`` (``other``'s decode)."""
    if held is None:
        return False
    if ref is not None:
        return fmt.near_duplicate(payload, held, ref.decoded)
    if not fmt.near_duplicate(payload, held):
        return False
    if unsure is not None:
        unsure.append(other)  # nothing of its round to compare with yet: settled later
        return False
    return True


def settle_copies(state: RoundState, me: NodeIdentity | None) -> list[tuple[BatchId, BatchId]]:
    """Decide the near-duplicates of ``state`` that were held unsettled (no reference result of
    the round was held when they were checked) now that more of the round is held: each one
    still near its original and closer to it than to a reference is added to
    :attr:`RoundState.refused`; one with no reference even now stays held (silence is not
    evidence). Returns the refused (copy, original) batches."""
    found: list[tuple[BatchId, BatchId]] = []
    for batch, u in list(state.unsettled.items()):
        del state.unsettled[batch]
        res = state.results.get(batch)
        ref_res = reference_for(state, me, (batch, u.original.batch))
        if res is None or ref_res is None:
            continue
        payload = _decoded(state, res, u.fmt)
        original = decode_verified(u.original, u.step, u.fmt)
        ref = _decoded(state, ref_res, u.fmt)
        if payload is None or original is None or ref is None:
            continue
        if u.fmt.near_duplicate(payload, original, ref):
            state.refused.add(batch)
            found.append((batch, u.original.batch))
    return found
