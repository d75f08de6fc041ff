"""The blocking checks of a SparseLoCo audit, on what a verifier already holds: one inner step and
the encode link of a trainer's committed chain (:func:`audit_link`), or the probe of inner step 0
its result carries (:func:`audit_probe`). ``psyche.daemon.sparseloco_verifying`` fetches the
states, runs these in a worker thread and votes; docs/protocol.md, "SparseLoCo: the inner-step
audit"."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from psyche.distro.audit_probe import decode_probe, probe_positions
from psyche.distro.audit_trailer import AuditCommitments
from psyche.training.sparseloco_audit import (
    AuditError,
    decode_error,
    decode_state,
    inner_batches,
    moments_hash,
    replay_encode,
    replay_link,
)
from psyche.training.sparseloco_probe import replay_probe
from psyche.training.sparseloco_trainer import SparseLoCoTrainer

__all__ = ["audit_link", "audit_probe", "wanted"]


def wanted(audit: AuditCommitments, link: int) -> tuple[bytes, ...]:
    """The committed blobs an audit of inner step ``link`` needs, each once: S_j and S_{j+1}
    for the step, S_n and both error buffers for the encode link."""
    n = audit.links
    need = (audit.states[link], audit.states[link + 1], audit.states[n])
    return (*dict.fromkeys(need), audit.error_before, audit.error_after)


def audit_link(
    trainer: SparseLoCoTrainer,
    link: int,
    audit: AuditCommitments,
    blobs: Mapping[bytes, bytes],
    samples: torch.Tensor,
    lr: float,
    payload: bytes,
    *,
    hashed: bool = False,
) -> tuple[bool, str]:
    """Blocking: whether the encode link and inner step ``link`` of the committed chain hold,
    and why not. ``blobs`` maps each of :func:`wanted`'s hashes to the bytes the trainer served
    for it (``hashed``: already checked against them, as a P2P fetch by hash does, so they are
    not hashed again); ``trainer`` is the verifier's own, its weights the judged round's start
    weights (put back as they were)."""
    n = audit.links

    def state(j: int) -> dict[str, torch.Tensor]:
        h, start = audit.states[j], trainer.params if j == 0 else None
        return decode_state(blobs[h], shapes, None if hashed else h, start=start)

    def error(h: bytes) -> list[torch.Tensor]:
        return decode_error(blobs[h], numels, None if hashed else h)

    shapes = list(trainer.shapes)
    numels = [int(p.numel()) for p in trainer.params]
    try:
        before, after = state(link), state(link + 1)
        last = after if link + 1 == n else state(n)
        before_e, after_e = error(audit.error_before), error(audit.error_after)
    except AuditError as e:
        return False, str(e)
    if moments_hash(last) != audit.moments_after:
        return False, "the last state's moments are not those committed after the round"
    if not replay_encode(trainer, before_e, last, payload, after_e):
        return False, "the payload is not the encoding of the committed last state"
    parts = inner_batches(samples, trainer.config.inner_steps)
    if len(parts) != n:
        return False, f"{n} inner steps committed for {len(parts)} inner batches"
    verdict = replay_link(trainer, link, before, after, parts[link], lr)
    if verdict.ok:
        return True, ""
    return False, (
        f"inner step {link} replayed off by {verdict.weight_error:.3g} (weights), "
        f"{verdict.moment_error:.3g} (moments), counts ok {verdict.step_ok}, "
        f"{verdict.hidden:.3g} of the gradient hidden by the committed moments, "
        f"moments {verdict.moments_scale:.3g}× the clip bound"
    )


def audit_probe(
    trainer: SparseLoCoTrainer, audit: AuditCommitments, samples: torch.Tensor, lr: float, step: int
) -> tuple[bool, str]:
    """Blocking: whether the result's probe of inner step 0 (``psyche.distro.audit_probe``)
    holds on ``samples`` (the trainer's assigned batch) at the round's ``lr``, and why not;
    ``trainer`` is the verifier's own, its weights the judged round's start weights."""
    parts = inner_batches(samples, trainer.config.inner_steps)
    if len(parts) != audit.links:
        return False, f"{audit.links} inner steps committed for {len(parts)} inner batches"
    probe = decode_probe(audit.probe, trainer.shapes)
    verdict = replay_probe(trainer, probe, probe_positions(trainer.shapes, step), parts[0], lr)
    if verdict.ok:
        return True, ""
    return False, (
        f"its probe of inner step 0 is off by {verdict.weight_error:.3g} (weights), "
        f"{verdict.moment_error:.3g} (moments), {verdict.hidden:.3g} of the gradient hidden, "
        f"moments {verdict.moments_scale:.3g}× the clip bound"
    )
