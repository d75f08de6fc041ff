"""How a micro-batch's loss is weighted in a batch's gradient (trainer, SparseLoCo's inner
steps, the data-parallel ranks alike)."""

from __future__ import annotations

__all__ = ["chunk_share"]


def chunk_share(rows: int, batch_rows: int) -> float:
    """What a micro-batch of `rows` of a batch of `batch_rows` divides its mean loss by, so that
    the micro-batches' gradients sum to the batch's mean: `batch_rows / rows`. It is the number
    of micro-batches exactly when they are even (the same float, so the same bits as dividing
    by that count). Dividing by the count instead weighed a short last micro-batch as much as a
    full one: the ninth sample of a batch of 9 in micro-batches of 8 made half the gradient."""
    return batch_rows / rows
