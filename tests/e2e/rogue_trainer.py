"""A malicious trainer for the verification tests: a normal client process (any backend's
``train`` command) that trains honestly, keeps its honest DisTrO history, and sends another
result in its place, chosen by ``PSYCHE_ROGUE_ATTACK``:

- ``flip`` (default): its honest result with every sign flipped;
- ``random``: random well-formed coefficients and signs;
- ``replay``: its previous round's result bytes again (the first round's is honest);
- ``half``: a DisTrO **free rider** (issue 39): it trains, through the real ``Trainer``, on the
  first half of its batch only, reports the whole batch, and fills the per-sample commitments of
  the samples it skipped with those it computed, in turn (the best it can do without the
  compute; ``tests/unit/daemon/test_commit_check.py``);
- ``sparse-replay``: a **SparseLoCo** trainer (``SparseLoCoTrainer``) that trains honestly and
  sends, from its second round on, its previous round's result under this round's header with 5 %
  of the kept signs flipped: the fingerprint differs, so only the near-duplicate rule (signed
  overlap ≥ 0.75, ``psyche.distro.sparseloco_overlap``) can refuse it;
- ``sparse-half``: a **SparseLoCo free rider**: each of its inner AdamW steps trains on the first
  half of that step's samples only, and it reports the whole batch. It commits to the chain of
  inner states it really went through and serves it, and its payload is that chain's honest
  encoding, so only the replay of an inner step (``psyche.daemon.sparseloco_verifying``) can
  tell; as a verifier it replays honestly (it saves its own work, not its judgement);
- ``sparse-silent``: the SparseLoCo free rider of ``sparse-half``, but honest in the first inner
  step of each round (so the probe of inner step 0 its result carries holds), that serves none of
  the states it commits to, so no verifier can replay its chain: only the rule that a trainer
  must serve what it committed to (its verifiers vote against it when the states never come)
  catches it (a ``sparse-half`` that serves nothing is caught by its probe first);
- ``sparse-reset``: a SparseLoCo trainer that does all its work but zeroes its error-feedback
  buffers before every round (standing in for one that picks its "before" buffers to shape its
  payload): its chain and encoding are honest from the buffers it commits to, so only the
  continuity check (a round's buffers before are its previous round's after) catches it.

It lives in the tests, not in the product: the daemon has no switch for misbehaving. Run it as
``python rogue_trainer.py <the client's usual arguments>`` (``psyche``'s, or with
``PSYCHE_ROGUE_CLI=solana`` ``psyche-solana-client``'s); it prints one ``rogue:`` line per
result it forged, which the tests read from the client's log.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

import numpy as np
import torch

from psyche.daemon.audit_serving import AuditBlobs
from psyche.distro import DistroResult, Payload, decode_payload, encode_payload
from psyche.distro import sparseloco_payload as slp
from psyche.training.sparseloco_trainer import SparseLoCoTrainer
from psyche.training.trainer import Trainer, TrainOutput

ATTACKS = (
    "flip",
    "random",
    "replay",
    "half",
    "sparse-replay",
    "sparse-half",
    "sparse-silent",
    "sparse-reset",
)
FLIPPED_SIGNS = 0.05

_honest_train_step = Trainer.train_step
_last: dict[int, bytes] = {}


def forged(attack: str, wire: Payload, gen: torch.Generator) -> Payload:
    """``wire`` (the honest result as sent) changed by ``attack`` (flip or random)."""
    results = []
    for r in wire.results:
        if attack == "flip":
            results.append(DistroResult(r.idx, -r.val, r.xshape, r.totalk))
            continue
        keys = torch.rand((*r.idx.shape[:-1], r.totalk), generator=gen)
        idx = keys.argsort(dim=-1)[..., : r.k].to(r.idx.dtype)
        val = torch.where(torch.rand(r.val.shape, generator=gen) < 0.5, 1.0, -1.0).to(r.val.dtype)
        results.append(DistroResult(idx, val, r.xshape, r.totalk))
    return Payload(
        wire.step,
        wire.batch_start,
        wire.batch_end,
        wire.trainer_nonce,
        wire.quantized,
        tuple(results),
        wire.commitments,  # its honest per-sample commitments: the score must catch the rest
    )


def _rogue_train_step(self: Trainer, batch: torch.Tensor, **kwargs: Any) -> TrainOutput:
    out = _honest_train_step(self, batch, **kwargs)
    attack = os.environ.get("PSYCHE_ROGUE_ATTACK", "flip")
    step = kwargs["step"]
    if attack == "replay":
        payload = _last.get(id(self), out.payload)
        _last[id(self)] = out.payload
    else:
        spec = self.distro.payload_spec  # type: ignore[attr-defined]
        wire = decode_payload(out.payload, spec)
        gen = torch.Generator().manual_seed(step)
        payload = encode_payload(forged(attack, wire, gen), self.distro.payload_version)
    print(f"rogue: {attack} result step={step}", flush=True)
    return TrainOutput(payload, out.self_result, out.loss, out.tokens, out.seconds)


def _free_ride(self: Trainer, batch: torch.Tensor, **kwargs: Any) -> TrainOutput:
    """The ½ free rider: the real train step on the first half of ``batch``, reported as the
    whole, with the skipped samples' commitments copied from the computed ones."""
    trained = max(1, batch.shape[0] // 2)
    out = _honest_train_step(self, batch[:trained], **kwargs)
    result = out.self_result
    assert result is not None and result.commitments is not None, "no commitments to fake"
    c = result.commitments
    groups = -(-batch.shape[0] // c.group)
    fill = c.values[torch.arange(groups) % c.values.shape[0]]
    result = dataclasses.replace(result, commitments=dataclasses.replace(c, values=fill))
    payload = encode_payload(result, self.distro.payload_version)
    print(
        f"rogue: half result step={kwargs['step']} trained={trained}/{batch.shape[0]}", flush=True
    )
    return TrainOutput(payload, result, out.loss, batch.numel(), out.seconds)


_honest_sparse_step = SparseLoCoTrainer.train_step


def _flip_some(t: slp.SparseTensor, rng: np.random.Generator) -> slp.SparseTensor:
    """``t`` with ``FLIPPED_SIGNS`` of its non-zero values' signs flipped (a zero value's sign
    bit must stay 0: the canonical form)."""
    signs = []
    for s, m, sc in zip(t.signs, t.mags, t.scales, strict=True):
        levels = (sc.astype(np.uint32) << 16).view(np.float32)
        level = np.take_along_axis(levels, m, axis=1) if levels.shape[1] > 1 else levels
        flip = (rng.random(s.shape) < FLIPPED_SIGNS) & (np.broadcast_to(level, s.shape) != 0)
        signs.append(s ^ flip)
    return dataclasses.replace(t, signs=tuple(signs))


def _sparse_replay(self: SparseLoCoTrainer, batch: torch.Tensor, **kwargs: Any) -> TrainOutput:
    """Its previous SparseLoCo result, re-headed, with ``FLIPPED_SIGNS`` of its signs flipped."""
    out = _honest_sparse_step(self, batch, **kwargs)
    previous = _last.get(id(self))
    _last[id(self)] = out.payload
    if previous is None:
        return out
    step = kwargs["step"]
    now = slp.decode_payload(out.payload, self.shapes, self.settings)
    old = slp.decode_payload(previous, self.shapes, self.settings)
    rng = np.random.default_rng(step)
    tensors = tuple(_flip_some(t, rng) for t in old.tensors)
    forged_payload = slp.SparseLoCoPayload(now.step, now.trainer_nonce, tensors)
    payload = slp.encode_payload(forged_payload, self.shapes, self.settings)
    print(f"rogue: sparse-replay result step={step}", flush=True)
    return TrainOutput(payload, None, out.loss, out.tokens, out.seconds)


_honest_inner_step = SparseLoCoTrainer._inner_step


def _half_inner_step(self: SparseLoCoTrainer, batch: torch.Tensor, lr: float, cancel: Any) -> float:
    if getattr(self, "_rogue_riding", False):
        if getattr(self, "_rogue_first_honest", False):
            self._rogue_first_honest = False  # type: ignore[attr-defined]
        else:
            batch = batch[: max(1, batch.shape[0] // 2)]
    return _honest_inner_step(self, batch, lr, cancel)


def _sparse_half(self: SparseLoCoTrainer, batch: torch.Tensor, **kwargs: Any) -> TrainOutput:
    """The SparseLoCo ½ free rider: every inner step on half its samples, or every one but the
    first (``sparse-silent``; see the module)."""
    attack = os.environ.get("PSYCHE_ROGUE_ATTACK")  # sparse-half or sparse-silent
    self._rogue_riding = True  # type: ignore[attr-defined]
    self._rogue_first_honest = attack == "sparse-silent"  # type: ignore[attr-defined]
    try:
        out = _honest_sparse_step(self, batch, **kwargs)
    finally:
        self._rogue_riding = False  # type: ignore[attr-defined]
    print(f"rogue: {attack} result step={kwargs['step']}", flush=True)
    return out


async def _serve_nothing(self: AuditBlobs, *args: Any, **kwargs: Any) -> None:
    """``sparse-silent``: the committed states are never served (verifiers hear "not found")."""


def _sparse_reset(self: SparseLoCoTrainer, batch: torch.Tensor, **kwargs: Any) -> TrainOutput:
    self.state.reset_error()
    out = _honest_sparse_step(self, batch, **kwargs)
    print(f"rogue: sparse-reset result step={kwargs['step']}", flush=True)
    return out


if __name__ == "__main__":
    attack = os.environ.get("PSYCHE_ROGUE_ATTACK", "flip")
    if attack not in ATTACKS:
        sys.exit(f"PSYCHE_ROGUE_ATTACK must be one of {', '.join(ATTACKS)}")
    if attack == "sparse-replay":
        SparseLoCoTrainer.train_step = _sparse_replay  # type: ignore[method-assign]
    elif attack == "sparse-reset":
        SparseLoCoTrainer.train_step = _sparse_reset  # type: ignore[method-assign]
    elif attack in ("sparse-half", "sparse-silent"):
        SparseLoCoTrainer._inner_step = _half_inner_step  # type: ignore[method-assign]
        SparseLoCoTrainer.train_step = _sparse_half  # type: ignore[method-assign]
        if attack == "sparse-silent":
            AuditBlobs.publish = _serve_nothing  # type: ignore[method-assign]
    elif attack == "half":
        Trainer.train_step = _free_ride  # type: ignore[method-assign]
    else:
        Trainer.train_step = _rogue_train_step  # type: ignore[method-assign]
    if os.environ.get("PSYCHE_ROGUE_CLI") == "solana":
        from psyche.cli.solana import main as solana_main

        solana_main(sys.argv[1:], prog_name="psyche-solana-client")
    else:
        from psyche.cli.main import main

        main(sys.argv[1:], prog_name="psyche")
