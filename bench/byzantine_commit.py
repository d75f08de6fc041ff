"""Per-sample commitments in `bench/byzantine.py` (`--commitments`; issue 39 items 1 and 4).

With `--commitments` every client trains as a client of a verifying run does: through the real
`Trainer` with `commit_samples` (micro-batches of one sample, so one fingerprint per sample), the
verifiable lookahead (its previous result sent) and a `Distro` that sends the commitment section.
A free rider (`fr2`/`fr4`/`fr8`, `repeat`) trains on its cheap batch and fills the fingerprints of
the samples it skipped with those it computed, in turn (the best fake measured in
bench/README.md, "Per-sample commitments, measured": another sample's fingerprint of the same
batch).

Each honest verifier of a sampled result then also does what the daemon's
`psyche.daemon.verifying._Recompute._commitment` does: it finds the lookahead the result claims
(none, or the trainer's result of the step before as held; a claim naming anything else while it
holds that result is a mismatch), sets that point on the pre-step weights, recomputes the
micro-batch holding its first seed-chosen sample and compares fingerprints
(`psyche.daemon.commit_check.commitment_agreement`). Below `MATCH_THRESHOLD` it votes mismatch
without escalating, as the daemon does; otherwise the captured-mass vote stands.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from typing import Any

__all__ = ["CommitVerifier", "committing_trainer", "faked_commitments"]


def committing_trainer(client: Any, seed: int) -> Any:
    """The real `Trainer` over a bench client's model and its committing `Distro`, one sample
    per micro-batch."""
    import torch

    from psyche.training.trainer import Trainer

    return Trainer(client.model, client.distro, micro_batch_size=1, device=torch.device("cpu"),
                   seed=seed, commit_samples=True)  # fmt: skip


def faked_commitments(wire: Any, batch_size: int) -> Any:
    """`wire` with one fingerprint per sample of a batch of `batch_size`: those it computed
    repeated in turn over the samples it skipped (unchanged when it computed them all)."""
    import torch

    c = wire.commitments
    if c is None or c.values.shape[0] >= batch_size:
        return wire
    fill = c.values[torch.arange(batch_size) % c.values.shape[0]]
    return dataclasses.replace(wire, commitments=dataclasses.replace(c, values=fill))


class CommitVerifier:
    """A verifier's commitment check over its own model (the bench's `verifier_model`).

    `at_point` moves the verifier's weights to the judged trainer's lookahead point, where its
    one recomputed gradient serves both the commitment (`agreement`) and, with `--score-at-point`,
    the captured-mass score: the point is where the trainer's gradient was taken."""

    def __init__(self, model: Any, dcfg: Any, seed: int) -> None:
        import torch

        from psyche.distro import Distro
        from psyche.training.trainer import Trainer

        self.trainer = Trainer(model, Distro(model.named_parameters(), dcfg), micro_batch_size=1,
                               device=torch.device("cpu"), seed=seed)  # fmt: skip

    def point(self, payload: Any, before: Sequence[tuple[int, Any]], trainer: int
              ) -> tuple[str, Any]:  # fmt: skip
        """("ok", public result or None), "mismatch" or "unknown" for the lookahead that
        `payload` claims, among `before` (the (client, result) sent the step before), as the
        daemon's `commit_check.lookahead_of`; "none" when it carries no commitments."""
        from psyche.daemon.rounds import result_fingerprint
        from psyche.distro.sample_commit import NO_LOOKAHEAD

        c = payload.commitments
        if c is None:
            return "none", None
        if c.lookahead == NO_LOOKAHEAD:
            return "ok", None
        own = [w for i, w in before if i == trainer]
        found = [w for w in own if result_fingerprint(w) == c.lookahead]
        if found:
            return "ok", found[0]
        return ("mismatch" if own else "unknown"), None

    def at_point(self, public: Any, prev_lr: float) -> contextlib.AbstractContextManager[None]:
        """The verifier's weights (already the pre-step ones) at the lookahead by `public`
        (`psyche.daemon.commit_check.at_point`)."""
        from psyche.daemon.commit_check import at_point

        return at_point(self.trainer, public, prev_lr)

    def agreement(self, payload: Any, grads: Sequence[Any], row: int, batch_size: int) -> float:
        """Cosine between the committed fingerprint of the sample `row` and that of `grads`, the
        gradient of that sample alone at the trainer's point; `MISMATCH` when the commitments do
        not fit a batch of `batch_size` in micro-batches of one (the bench recomputes one)."""
        from psyche.daemon.commit_check import MISMATCH, committed_rows, fingerprint_agreement

        if committed_rows(payload, batch_size, row) != (row,):
            return MISMATCH
        return fingerprint_agreement(self.trainer, payload, row, grads)
