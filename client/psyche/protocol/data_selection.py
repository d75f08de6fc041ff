"""Which samples each trainer trains in a round (docs/protocol.md, "Data assignment").

Assignment is a pure function of public round data (clients, seed, data index, batch size), so
every client, the data server and the witnesses agree on it without messages. The round's samples
``[data_index, data_index + batch_size)`` are cut into one contiguous interval per trainer, sizes
differing by at most one; trainers are ordered by an LCG Fisher–Yates shuffle of their epoch
order, so who gets the larger first intervals rotates from round to round.

Trade-offs and deliberate limits:

* Tie-breakers and verifiers are not implemented (the reference ``assert``-panics on them).
  ``assign_data_for_state`` raises ``ValueError`` if the selection yields one; the coordinator
  never gives the committee selection a verifier share (``verification_percent`` samples results
  instead) and validation forbids tie-breakers, so this cannot happen in a valid run.
* When ``batch_size`` is smaller than the number of trainers, the last trainers in the shuffled
  order get no interval and no entry (they then look unhealthy to witnesses: docs/protocol.md,
  "Known flaws of the reference", flaw 7).
* With zero trainers the result is empty instead of the reference's division by zero.

**Retries** (docs/protocol.md, "no lost work"): a round may re-assign up to a few intervals of
earlier rounds whose results never reached consensus. The first ``k = len(retries)`` trainers in
the shuffled order each get one retry whole (in order); the other ``n - k`` share the
``fresh = batch_size - sum(retry sizes)`` new samples from ``data_index`` by the rule above. The
round's ``batch_size`` therefore counts retried and fresh samples together. Preconditions (else
``ValueError``): ``k <= n``, ``sum(retry sizes) <= batch_size``, and ``k == n`` only when
``fresh == 0`` (no fresh samples may be left without a trainer). With no retries the result is
exactly the assignment without them.

``BatchId`` is a closed interval ``[start, end]`` as in the reference: ``size = end - start + 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from psyche.protocol.committee import Committee, CommitteeSelection
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.shuffle import deterministic_shuffle

__all__ = [
    "BatchId",
    "assign_data_for_state",
    "fresh_size",
    "get_batch_ids_for_round",
    "slot_intervals",
    "trainer_order",
]

_U64_MAX = (1 << 64) - 1


def _check_u64(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= value <= _U64_MAX:
        raise ValueError(f"{name} must be an unsigned 64-bit integer, got {value}")


@dataclass(frozen=True, slots=True, order=True)
class BatchId:
    """A closed interval ``[start, end]`` of global sample indices; orders by start."""

    start: int
    """First sample index (inclusive)."""
    end: int
    """Last sample index (inclusive)."""

    def __post_init__(self) -> None:
        _check_u64("BatchId.start", self.start)
        _check_u64("BatchId.end", self.end)
        if self.end < self.start:
            raise ValueError(f"BatchId end {self.end} is before start {self.start}")

    @property
    def size(self) -> int:
        """Number of samples in the interval (always at least 1)."""
        return self.end - self.start + 1

    def contains(self, index: int) -> bool:
        return self.start <= index <= self.end

    def __str__(self) -> str:
        return f"[{self.start}, {self.end}]"


def _interval_sizes(batch_size: int, n_trainers: int) -> list[int]:
    if n_trainers == 0:
        return []
    base, rem = divmod(batch_size, n_trainers)
    return [base + (1 if i < rem else 0) for i in range(n_trainers)]


def _intervals(data_index: int, batch_size: int, n_trainers: int) -> list[BatchId | None]:
    """One entry per shuffled trainer slot; ``None`` where the slot's size is zero."""
    _check_u64("data_index", data_index)
    _check_u64("batch_size", batch_size)
    _check_u64("n_trainers", n_trainers)
    if batch_size > 0 and data_index + batch_size - 1 > _U64_MAX:
        raise ValueError(f"samples from {data_index} (+{batch_size}) overflow a u64 index")
    out: list[BatchId | None] = []
    start = data_index
    for size in _interval_sizes(batch_size, n_trainers):
        if size == 0:
            out.append(None)
            continue
        out.append(BatchId(start, start + size - 1))
        start += size
    return out


def fresh_size(batch_size: int, n_trainers: int, retries: Sequence[BatchId] = ()) -> int:
    """New samples of a round: ``batch_size`` minus the retried ones; checks the preconditions
    of a round with ``retries`` (``ValueError`` when they fail)."""
    _check_u64("batch_size", batch_size)
    _check_u64("n_trainers", n_trainers)
    k = len(retries)
    retried = sum(b.size for b in retries)
    if k > n_trainers:
        raise ValueError(f"{k} retried intervals for only {n_trainers} trainers")
    if retried > batch_size:
        raise ValueError(f"retried intervals hold {retried} samples, more than the batch size")
    fresh = batch_size - retried
    if k > 0 and k == n_trainers and fresh > 0:
        raise ValueError(f"every trainer has a retried interval but {fresh} fresh samples remain")
    return fresh


def get_batch_ids_for_round(
    data_index: int, batch_size: int, n_trainers: int, retries: Sequence[BatchId] = ()
) -> list[BatchId]:
    """The round's intervals (retries and fresh ones) in ascending order of start, without
    saying who trains them."""
    fresh = fresh_size(batch_size, n_trainers, retries)
    out = list(retries)
    out += [b for b in _intervals(data_index, fresh, n_trainers - len(retries)) if b is not None]
    return sorted(out)


def trainer_order(n_trainers: int, random_seed: int) -> list[int]:
    """Trainer indices (into the round's client list) in slot order: the LCG Fisher–Yates
    shuffle of ``range(n_trainers)`` by the round seed."""
    _check_u64("n_trainers", n_trainers)
    return deterministic_shuffle(list(range(n_trainers)), random_seed)


def slot_intervals(
    n_trainers: int, data_index: int, batch_size: int, retries: Sequence[BatchId] = ()
) -> list[BatchId | None]:
    """One interval per shuffled trainer slot (None: that slot has no samples): the retries
    first, then the fresh samples. ``ValueError`` when the round's parameters break the
    preconditions."""
    fresh = fresh_size(batch_size, n_trainers, retries)
    return [*retries, *_intervals(data_index, fresh, n_trainers - len(retries))]


def assign_data_for_state(
    clients: Sequence[NodeIdentity],
    selection: CommitteeSelection,
    data_index: int,
    batch_size: int,
    random_seed: int,
    retries: Sequence[BatchId] = (),
) -> dict[BatchId, NodeIdentity]:
    """Map each of the round's intervals to the trainer that must train it.

    ``clients`` is the epoch's client list (index order); ``selection`` is the round's
    committee selection, whose ``total_nodes`` must cover every index in ``clients``;
    ``retries`` the round's re-assigned intervals (``Round.retries``). The dict is
    insertion-ordered by ``start``. Raises ``ValueError`` if any client is a tie-breaker or
    verifier (not supported; config validation forbids them) or the retries break the
    preconditions in the module docstring.
    """
    trainers: list[NodeIdentity] = []
    proofs = selection.get_committees(len(clients))
    for index, client in enumerate(clients):
        committee = proofs[index].committee
        if committee is not Committee.Trainer:
            raise ValueError(
                f"client {index} ({client.hex()}) was selected as {committee.name}, which is not "
                "supported: build the selection with verification_percent = 0 and no tie-breakers"
            )
        trainers.append(client)
    slots = slot_intervals(len(trainers), data_index, batch_size, retries)
    shuffled = deterministic_shuffle(trainers, random_seed)
    pairs = [(b, node) for b, node in zip(slots, shuffled, strict=True) if b is not None]
    return dict(sorted(pairs, key=lambda p: p[0]))
