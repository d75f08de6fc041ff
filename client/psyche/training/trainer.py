"""One client's train step: forward/backward over micro-batches wrapped in DisTrO.

See docs/distro.md, "Train step".

A round for the trainer is `train_step` (produce this client's payload for its batch) and, at the
start of a later round, `apply_step` (the sign-SGD step on the consensus payloads, run by every
client alike). Between the two the weights are the same on every honest client, and everything
here is arranged to keep them so:

- the lookahead is undone by the optimizer restoring a saved copy, and a cancelled or failed step
  restores it too, so a client that gives up on a round is bit-identical to before the step (the
  reference left the lookahead applied; docs/protocol.md, "Known flaws of the reference", flaw 13);
- micro-batches are processed in order with the loss scaled by `1/#micro-batches`, so the
  gradient does not depend on how a batch is split beyond float rounding;
- with `grad_accum_fp32`, bf16 gradients are summed in fp32 buffers and rounded once at the end;
- gradient clipping uses the DisTrO config and happens inside `Distro.generate`, after the
  non-finite check, so one bad batch cannot poison the residual.

The optimizer is injected (anything with `Distro`'s methods, see `StepOptimizer`), which keeps
this class testable with fakes and independent of how the residual is stored.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from psyche.distro import DistroConfig, Payload, encode_payload
from psyche.distro.result_format import sent_fingerprint
from psyche.distro.sample_commit import (
    NO_LOOKAHEAD,
    MicroBatchFingerprints,
    Probe,
    SampleCommitments,
    probe_seed,
)
from psyche.protocol.optimizers import DistroOptimizer
from psyche.training.device import DEFAULT_SEED, enable_determinism
from psyche.training.errors import NonFiniteGradient, TrainingCancelled
from psyche.training.micro_batch import chunk_share

__all__ = ["StepOptimizer", "TrainOutput", "Trainer", "distro_config", "evaluate_loss"]


class StepOptimizer(Protocol):
    """The part of `psyche.distro.Distro` a trainer drives."""

    payload_version: int
    """The payload format the trainer encodes its results in."""

    def lookahead(
        self,
        prev_lr: float,
        public: Payload | None = None,
        *,
        verifiable: bool = False,
        decay_lr: float | None = None,
    ) -> None: ...

    def cancel(self, lr: float | None = None) -> None: ...

    def zero_residual(self) -> None: ...

    def generate(
        self,
        lr: float,
        prev_lr: float,
        prev_self: Payload | None = None,
        *,
        step: int = 0,
        batch_start: int = 0,
        batch_end: int = 0,
        trainer_nonce: int = 0,
    ) -> Payload: ...

    def apply(self, payloads: Sequence[Payload], lr: float) -> None: ...


def distro_config(optimizer: DistroOptimizer, *, residual_fp32: bool = False) -> DistroConfig:
    """The run config's `[model.LLM.optimizer.Distro]` as the optimizer's own config."""
    return DistroConfig(
        compression_decay=optimizer.compression_decay,
        compression_topk=optimizer.compression_topk,
        compression_chunk=optimizer.compression_chunk,
        quantize_1bit=optimizer.quantize_1bit,
        clip_grad_norm=optimizer.clip_grad_norm,
        weight_decay=optimizer.weight_decay,
        residual_fp32=residual_fp32,
    )


@dataclass(frozen=True, slots=True)
class TrainOutput:
    """The result of one `train_step`."""

    payload: bytes
    """The canonical wire bytes to commit to and publish (1-bit when the run quantizes)."""
    self_result: Payload | None
    """The unquantized payload; pass it as `prev_self_results` to this client's next step
    (None from an optimizer without a lookahead: SparseLoCo)."""
    loss: float
    """Mean token cross-entropy over the batch (before the lookahead is undone)."""
    tokens: int
    """Tokens in the batch (samples × sequence length)."""
    seconds: float
    """Wall time of the step."""


class Trainer:
    """Trains `model` (already on `device`) with an injected DisTrO optimizer over its weights."""

    def __init__(
        self,
        model: torch.nn.Module,
        distro: StepOptimizer,
        *,
        micro_batch_size: int,
        device: torch.device,
        grad_accum_fp32: bool = False,
        seed: int = DEFAULT_SEED,
        commit_samples: bool = False,
    ) -> None:
        """`commit_samples`: look ahead by the previous result sent (a point a verifier can
        rebuild) and attach per-micro-batch gradient fingerprints to every payload
        (`psyche.distro.sample_commit`; what a run with verification needs)."""
        if micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be ≥ 1, got {micro_batch_size}")
        for name, p in model.named_parameters():
            if p.device.type != device.type or device.index not in (None, p.device.index):
                raise ValueError(f"parameter {name!r} is on {p.device}, expected {device}")
        enable_determinism(seed)
        self.model = model
        self.distro = distro
        self.micro_batch_size = micro_batch_size
        self.device = device
        self.grad_accum_fp32 = grad_accum_fp32
        self.commit_samples = commit_samples
        self.verifiable_lookahead = commit_samples
        """Whether the lookahead follows the previous result sent (with `commit_samples`; False
        only to measure commitments at the private lookahead, bench/free_rider_commitments.py)."""
        self.trainer_nonce = 0
        """Train steps started since this trainer was built, sent in payloads.

        See docs/distro.md, "Payload format".
        """
        self.last_commitments: SampleCommitments | None = None
        """The per-micro-batch fingerprints of the last `accumulate_gradients` given a probe
        (`psyche.distro.sample_commit`); None after one without."""

    def _check_batch(self, batch: torch.Tensor) -> torch.Tensor:
        return check_batch(batch, self.device)

    def _loss(self, input_ids: torch.Tensor) -> torch.Tensor:
        # The model shifts labels by one and averages over the predicted tokens.
        loss: torch.Tensor = self.model(input_ids=input_ids, labels=input_ids, use_cache=False).loss
        return loss

    def accumulate_gradients(
        self,
        batch: torch.Tensor,
        cancel: threading.Event | None = None,
        probe: Probe | None = None,
    ) -> float:
        """Forward/backward `batch` in micro-batches into `.grad`; returns the mean loss.

        Each micro-batch's loss is weighted by its share of the samples (`chunk_share`), so the
        gradient is the batch's mean whatever the split. `cancel` is checked
        before every micro-batch; when set, `TrainingCancelled` is raised (the caller restores).
        With `probe`, each micro-batch's own gradient is fingerprinted into `last_commitments`.
        """
        batch = self._check_batch(batch)
        self.model.train()
        chunks = batch.split(self.micro_batch_size)
        params = [p for p in self.model.parameters() if p.requires_grad]
        use_buffers = self.grad_accum_fp32 and any(p.dtype != torch.float32 for p in params)
        buffers = [torch.zeros_like(p, dtype=torch.float32) for p in params] if use_buffers else []
        fingerprints = MicroBatchFingerprints(self.model, probe) if probe is not None else None
        self.last_commitments = None
        total = 0.0
        for chunk in chunks:
            if cancel is not None and cancel.is_set():
                raise TrainingCancelled("training was cancelled between micro-batches")
            share = chunk_share(chunk.shape[0], batch.shape[0])
            loss = self._loss(chunk) / share
            loss.backward()
            total += float(loss.detach())
            if fingerprints is not None:
                fingerprints.record(fresh=use_buffers, scale=share)
            if use_buffers:
                for p, buf in zip(params, buffers, strict=True):
                    if p.grad is not None:
                        buf.add_(p.grad.float())
                        p.grad = None
        if use_buffers:
            for p, buf in zip(params, buffers, strict=True):
                p.grad = buf.to(p.dtype)
        if fingerprints is not None:
            self.last_commitments = SampleCommitments(self.micro_batch_size, fingerprints.values())
        return total

    def probe(self, step: int) -> Probe:
        """The public probe of `step` for this model (`psyche.distro.sample_commit`)."""
        shapes = [tuple(p.shape) for _, p in sorted(self.model.named_parameters(), key=_name)]
        return Probe.for_shapes(shapes, probe_seed(step))

    def train_step(
        self,
        batch: torch.Tensor,
        *,
        step: int,
        lr: float,
        prev_lr: float,
        prev_self_results: Payload | None,
        zero_optim: bool,
        cancel: threading.Event | None = None,
        batch_id: tuple[int, int] = (0, 0),
    ) -> TrainOutput:
        """Train on `batch` ([samples, seq] token ids) and return this client's payload.

        `lr`/`prev_lr` are this step's and the previous step's LR (cold-start factor included);
        `zero_optim` clears the residual first (round 0 of a cold-start epoch); `batch_id` is the
        closed sample interval the payload header names. On cancellation or a non-finite gradient
        the weights are restored bit for bit and `TrainingCancelled`/`NonFiniteGradient` raised.
        """
        started = time.perf_counter()
        nonce = self.trainer_nonce
        self.trainer_nonce += 1
        self.model.zero_grad(set_to_none=True)
        if zero_optim:
            self.distro.zero_residual()
        probe = self._look_ahead(step, lr, prev_lr, prev_self_results)
        try:
            loss = self.accumulate_gradients(batch, cancel, probe)
            if cancel is not None and cancel.is_set():
                raise TrainingCancelled("training was cancelled before the payload was built")
            result = self.distro.generate(
                lr,
                prev_lr,
                prev_self_results,
                step=step,
                batch_start=batch_id[0],
                batch_end=batch_id[1],
                trainer_nonce=nonce,
            )
        except FloatingPointError as e:
            self._abandon(lr)
            raise NonFiniteGradient(f"step {step}: {e}; the round was dropped") from e
        except BaseException:
            self._abandon(lr)
            raise
        result = self._with_commitments(result, prev_self_results)
        return TrainOutput(
            payload=encode_payload(result, self.distro.payload_version),
            self_result=result,
            loss=loss,
            tokens=batch.numel(),
            seconds=time.perf_counter() - started,
        )

    def _look_ahead(
        self, step: int, lr: float, prev_lr: float, prev_self: Payload | None
    ) -> Probe | None:
        """The lookahead; and with `commit_samples` the step's probe, or None."""
        probe = self.probe(step) if self.commit_samples else None
        if probe is not None and self.verifiable_lookahead:
            # The commitments are taken where the gradient is, and a verifier must rebuild that
            # point exactly: the private lookahead sign(δ) moves every weight, and the gradient
            # there agrees with the pre-round one no better than another sample's does
            # (bench/README.md, "Per-sample commitments"), so the lookahead follows the
            # previous result sent instead, from the weights after this round's weight decay
            # (what the verifier holds).
            self.distro.lookahead(prev_lr, prev_self, verifiable=True, decay_lr=lr)
        else:
            self.distro.lookahead(prev_lr)
        return probe

    def _with_commitments(self, result: Payload, prev_self: Payload | None) -> Payload:
        """`result` carrying the fingerprints just taken, and which result it looked ahead by."""
        if self.last_commitments is None:
            return result
        ahead = NO_LOOKAHEAD if prev_self is None else sent_fingerprint(prev_self)
        commitments = dataclasses.replace(self.last_commitments, lookahead=ahead)
        return dataclasses.replace(result, commitments=commitments)

    def _abandon(self, lr: float) -> None:
        # With `lr` the decoupled weight decay is applied as `generate` would have: every client
        # of a training round decays once whether it finished, was cancelled or had no batch,
        # or its weights would drift from the others' whenever `weight_decay` is set.
        self.distro.cancel(lr)
        self.model.zero_grad(set_to_none=True)

    def sit_out(self, *, lr: float) -> None:
        """This client has no batch in a training round: apply only that round's weight decay
        (what `train_step` does to the weights besides the payload), so it stays bit-identical
        to the clients that trained."""
        self._abandon(lr)

    def apply_step(self, payloads: Sequence[Payload], *, lr: float) -> None:
        """Apply the consensus payloads of an earlier round (`Distro.apply`); none: no change."""
        self.distro.apply(payloads, lr)

    def evaluate(self, batches: Iterable[torch.Tensor]) -> float:
        """Mean token cross-entropy over `batches`, weighted by predicted tokens; no gradients."""
        return evaluate_loss(self.model, batches, self.micro_batch_size, self.device)


def _name(item: tuple[str, torch.nn.Parameter]) -> str:
    return item[0]


def check_batch(batch: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`batch` as int64 token ids on `device`; ValueError unless it is [samples ≥ 1, seq ≥ 2]."""
    if batch.ndim != 2 or batch.shape[0] < 1 or batch.shape[1] < 2:
        raise ValueError(f"batch must be [samples ≥ 1, seq ≥ 2], got {tuple(batch.shape)}")
    if batch.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"batch must hold integer token ids, got {batch.dtype}")
    return batch.to(device, torch.int64)


@torch.no_grad()
def evaluate_loss(
    model: torch.nn.Module,
    batches: Iterable[torch.Tensor],
    micro_batch_size: int,
    device: torch.device,
) -> float:
    """Mean token cross-entropy of `model` over `batches`, weighted by predicted tokens."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        for batch in batches:
            for chunk in check_batch(batch, device).split(micro_batch_size):
                n = chunk.shape[0] * (chunk.shape[1] - 1)
                loss = model(input_ids=chunk, labels=chunk, use_cache=False).loss
                total += float(loss) * n
                count += n
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError("evaluate needs at least one non-empty batch")
    return total / count
