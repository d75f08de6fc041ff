"""One client's SparseLoCo round (issue 30; docs/distro.md, "SparseLoCo: how the client runs it").

The run config's ``[model.LLM.optimizer.SparseLoCo]`` turned into what a client does with a
round, on top of the math in :mod:`psyche.distro.sparseloco`:

- :meth:`SparseLoCoTrainer.train_round`: the round's assigned batch is split into ``H`` equal
  inner batches (``torch.tensor_split``: the first ones one sample larger when ``H`` does not
  divide it; fewer than ``H`` samples give one inner step per sample); each is one AdamW step at
  the round's learning rate (the run's lr_schedule). The pseudo-gradient is encoded with the
  error feedback (``encode_round``) and the weights go back to the round's start, bit for bit:
  between rounds every honest client holds the same weights, and only the outer step moves them.
- :meth:`SparseLoCoTrainer.apply_round`: the consensus payloads of a round, in client-index
  order, decoded strictly and applied by ``outer_apply`` with ``outer_lr`` (bit-identical on
  every client and CPU kernel set).

State: the inner AdamW moments and the error-feedback buffers are this client's own (a joiner and
a cold start begin them at zero, :meth:`reset_private`); the outer momentum, when the run has one,
is run-global and is what :meth:`state_dict` gives a checkpoint or a peer fetching the model.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from psyche.distro.audit_probe import encode_probe, probe_positions
from psyche.distro.audit_trailer import AuditCommitments, encode_trailer
from psyche.distro.payload import Payload, PayloadError
from psyche.distro.result_format import SparseLoCoFormat
from psyche.distro.sparseloco import (
    SparseLoCoPayload,
    SparseLoCoSettings,
    SparseLoCoState,
    decode_payload,
    encode_round,
    max_payload_bytes,
    outer_apply,
)
from psyche.protocol.optimizers import SparseLoCoOptimizer
from psyche.training.device import DEFAULT_SEED, enable_determinism
from psyche.training.errors import NonFiniteGradient, TrainingCancelled
from psyche.training.micro_batch import chunk_share
from psyche.training.sparseloco_audit import AuditTrail, capture_state, inner_batches, load_state
from psyche.training.trainer import TrainOutput, evaluate_loss

__all__ = [
    "OPTIMIZER_STATE_FILE",
    "SparseLoCoRoundOutput",
    "SparseLoCoTrainer",
    "sparseloco_settings",
]

OPTIMIZER_STATE_FILE = "optimizer_state.safetensors"
"""The run-global optimizer state beside a checkpoint's weights, and in a P2P model fetch."""


def sparseloco_settings(optimizer: SparseLoCoOptimizer) -> SparseLoCoSettings:
    """The run config's SparseLoCo fields that the payload and the outer step depend on."""
    return SparseLoCoSettings(
        topk_chunk=optimizer.topk_chunk,
        topk=optimizer.topk,
        value_bits=optimizer.value_bits,
        error_decay=optimizer.error_decay,
        outer_momentum=optimizer.outer_momentum,
    )


@dataclass(frozen=True, slots=True)
class SparseLoCoRoundOutput:
    payload: bytes
    """The canonical wire bytes (always ``max_payload_bytes`` long)."""
    loss: float
    """Mean loss over the inner steps (each inner step's mean token cross-entropy)."""
    inner_steps: int
    tokens: int
    seconds: float


class SparseLoCoTrainer:
    """SparseLoCo over ``model``'s trainable parameters, in canonical order (ascending name)."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: SparseLoCoOptimizer,
        *,
        micro_batch_size: int,
        seed: int = DEFAULT_SEED,
    ) -> None:
        if micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be ≥ 1, got {micro_batch_size}")
        enable_determinism(seed)
        self.model = model
        self.config = optimizer
        self.settings = sparseloco_settings(optimizer)
        named = sorted((n, p) for n, p in model.named_parameters() if p.requires_grad)
        self.params = [p for _, p in named]
        self.shapes = [tuple(p.shape) for p in self.params]
        self.state = SparseLoCoState(self.shapes, self.settings)
        self.micro_batch_size = micro_batch_size
        self.payload_bytes = max_payload_bytes(self.shapes, self.settings)
        """Every payload's exact size, known before the run (the download bound)."""
        self.format = SparseLoCoFormat.of(self.shapes, self.settings)
        self.device = self.params[0].device
        self.nonce = 0
        self._inner = self._new_inner()
        self.audit = False
        """Whether results carry the audit trailer (a run that verifies): see :meth:`set_audit`."""
        self.last_trail: AuditTrail | None = None
        """The chain of the last result :meth:`train_step` made while auditing, blobs kept, for
        the client to serve to its verifiers (:meth:`take_trail`)."""
        self.audit_spool: Path | None = None
        """Where the kept chain's blobs are written as they are recorded (the client's P2P blob
        directory, from which it serves them); None keeps them in memory."""
        self.audit_pool: Path | None = None
        """Withdrawn chains' files to write the next chains into (``Transport.recycle_dir``)."""

    def take_trail(self) -> AuditTrail | None:
        """The last result's chain, now the caller's (its files with it)."""
        trail, self.last_trail = self.last_trail, None
        return trail

    def discard_trail(self) -> None:
        """Drop a chain nobody took (its round's result was not published)."""
        if self.last_trail is not None:
            self.last_trail.discard()
            self.last_trail = None

    def set_audit(self, on: bool) -> None:
        """Commit to each round's chain of inner states (``psyche.distro.audit_trailer``) exactly
        when the run verifies; :attr:`format` follows, so a client's payloads and its decoder
        agree with its peers'."""
        self.audit = on
        steps = self.config.inner_steps if on else 0
        self.format = SparseLoCoFormat.of(self.shapes, self.settings, steps)

    def _new_inner(self) -> torch.optim.AdamW:
        c = self.config
        # foreach=False: one kernel path on every machine; the inner steps are private, but a
        # client's own results should not depend on which fused path torch picks.
        return torch.optim.AdamW(
            self.params,
            lr=0.0,
            betas=c.betas,
            eps=c.eps,
            weight_decay=c.weight_decay,
            foreach=False,
        )

    def reset_private(self) -> None:
        """Zero this client's own state: a joiner, a cold start, a client that missed rounds."""
        self.state.reset_error()
        self._inner = self._new_inner()

    def _inner_step(self, batch: torch.Tensor, lr: float, cancel: threading.Event | None) -> float:
        total = self._backward(batch, cancel)
        for group in self._inner.param_groups:
            group["lr"] = lr
        self._inner.step()
        return total

    def _backward(self, batch: torch.Tensor, cancel: threading.Event | None) -> float:
        """An inner step's gradient in each ``p.grad`` (clipped), its loss returned."""
        self.model.zero_grad(set_to_none=True)
        chunks = batch.split(self.micro_batch_size)
        total = 0.0
        for chunk in chunks:
            if cancel is not None and cancel.is_set():
                raise TrainingCancelled("training was cancelled between micro-batches")
            out = self.model(input_ids=chunk, labels=chunk, use_cache=False)
            loss = out.loss / chunk_share(chunk.shape[0], batch.shape[0])
            loss.backward()
            total += float(loss.detach())
        clip = self.config.clip_grad_norm
        if clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(self.params, clip, error_if_nonfinite=False)
            if not bool(torch.isfinite(norm)):
                raise FloatingPointError("the inner gradient is not finite")
        return total

    def train_round(
        self,
        batch: torch.Tensor,
        *,
        step: int,
        lr: float,
        cancel: threading.Event | None = None,
        trail: AuditTrail | None = None,
    ) -> SparseLoCoRoundOutput:
        """H inner steps over ``batch`` ([samples, seq] token ids), then this round's payload.
        The weights are restored to the round's start whatever happens (cancel, non-finite).
        ``trail`` records the inner state before each inner step and after the last
        (:mod:`psyche.training.sparseloco_audit`)."""
        if batch.ndim != 2 or batch.shape[0] < 1 or batch.shape[1] < 2:
            raise ValueError(f"batch must be [samples ≥ 1, seq ≥ 2], got {tuple(batch.shape)}")
        started = time.perf_counter()
        device = self.params[0].device
        batch = batch.to(device, torch.int64)
        parts = inner_batches(batch, self.config.inner_steps)
        start = [p.detach().to("cpu", copy=True) for p in self.params]
        self.model.train()
        losses = []
        if trail is not None:
            trail.record_error(self.state.error)
        try:
            for part in parts:
                if trail is not None:
                    trail.record(self.params, self._inner)
                losses.append(self._inner_step(part, lr, cancel))
            if trail is not None:
                trail.record(self.params, self._inner, last=True)
            if cancel is not None and cancel.is_set():
                raise TrainingCancelled("training was cancelled before the payload was built")
            end = [p.detach().to("cpu", copy=True) for p in self.params]
            nonce = self.nonce
            self.nonce += 1
            payload = encode_round(self.state, start, end, step=step, nonce=nonce)
            if trail is not None:
                trail.record_error(self.state.error)
        except (FloatingPointError, PayloadError) as e:
            # encode_round refuses a non-finite pseudo-gradient part-way through its tensors:
            # the buffers it touched are no longer meaningful.
            self.state.reset_error()
            raise NonFiniteGradient(f"step {step}: {e}; the round was dropped") from e
        finally:
            self._restore(start)
        return SparseLoCoRoundOutput(
            payload=payload,
            loss=sum(losses) / len(losses),
            inner_steps=len(parts),
            tokens=batch.numel(),
            seconds=time.perf_counter() - started,
        )

    def replay_inner_step(
        self, before: dict[str, torch.Tensor], part: torch.Tensor, lr: float
    ) -> tuple[dict[str, torch.Tensor], list[torch.Tensor | None]]:
        """A verifier's replay of another trainer's inner step from its committed state
        ``before`` (:mod:`psyche.training.sparseloco_audit`): the state it leads to, and the
        (clipped) gradient it took. This trainer's weights and own inner state are put back
        exactly, whatever happens."""
        own_weights = [p.detach().clone() for p in self.params]
        own_inner = self._inner
        try:
            self._inner = self._new_inner()
            load_state(self.params, self._inner, before)
            self.model.train()
            self._inner_step(part.to(self.device, torch.int64), lr, None)
            grads = [None if p.grad is None else p.grad.detach().clone() for p in self.params]
            return capture_state(self.params, self._inner), grads
        finally:
            self._inner = own_inner
            self._restore(own_weights)

    def gradient(self, part: torch.Tensor) -> list[torch.Tensor | None]:
        """A verifier's gradient of one inner batch at this trainer's current weights, clipped
        as an inner step clips it (``sparseloco_probe.replay_probe``); nothing is stepped."""
        try:
            self.model.train()
            self._backward(part.to(self.device, torch.int64), None)
            return [None if p.grad is None else p.grad.detach().clone() for p in self.params]
        finally:
            self.model.zero_grad(set_to_none=True)

    @torch.no_grad()
    def _restore(self, start: Sequence[torch.Tensor]) -> None:
        for p, s in zip(self.params, start, strict=True):
            p.copy_(s)
        self.model.zero_grad(set_to_none=True)

    def decode(self, data: bytes) -> object:
        """Strict decoding of a peer's payload (``PayloadError`` on anything malformed)."""
        return decode_payload(data, self.shapes, self.settings)

    @torch.no_grad()
    def apply_round(self, payloads: Sequence[bytes]) -> None:
        """The outer step of a round's consensus payloads (client-index order). None: only the
        outer momentum, if any, moves the weights, as on every other client."""
        self._apply_decoded([decode_payload(d, self.shapes, self.settings) for d in payloads])

    @torch.no_grad()
    def _apply_decoded(self, decoded: Sequence[SparseLoCoPayload]) -> None:
        on_cpu = all(p.device.type == "cpu" for p in self.params)
        targets = self.params if on_cpu else [p.detach().to("cpu", copy=True) for p in self.params]
        outer_apply(targets, decoded, self.state, self.settings, self.config.outer_lr)
        if not on_cpu:
            for p, t in zip(self.params, targets, strict=True):
                p.copy_(t)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The run-global optimizer state a checkpoint and a P2P model fetch carry."""
        return self.state.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Load a checkpoint's or a peer's global state; this client's own state restarts."""
        self.state.load_state_dict(state)
        self.reset_private()

    # --- the round engine's trainer interface (what ``psyche.daemon`` calls) ------------------

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
        """:meth:`train_round` under the DisTrO trainer's signature. ``zero_optim`` (round 0 of
        a cold-start epoch) restarts this client's own state; SparseLoCo has no lookahead, so
        ``prev_lr``/``prev_self_results`` are unused and there is no self-result."""
        del prev_lr, prev_self_results, batch_id
        if zero_optim:
            self.reset_private()
        self.discard_trail()
        trail = None
        if self.audit:
            at = probe_positions(self.shapes, step)
            trail = AuditTrail(spool=self.audit_spool, pool=self.audit_pool, probe_at=at)
        try:
            out = self.train_round(batch, step=step, lr=lr, cancel=cancel, trail=trail)
        except BaseException:
            if trail is not None:
                trail.discard()
            raise
        finally:
            if trail is not None:
                trail.close()
        payload = out.payload
        if trail is not None:
            commitments = AuditCommitments(
                tuple(trail.hashes),
                trail.error_hashes[0],
                trail.error_hashes[1],
                trail.moments_after,
                encode_probe(trail.probe()),
            )
            payload += encode_trailer(commitments, self.config.inner_steps)
            self.last_trail = trail
        return TrainOutput(
            payload=payload,
            self_result=None,
            loss=out.loss,
            tokens=out.tokens,
            seconds=out.seconds,
        )

    def sit_out(self, *, lr: float) -> None:
        """No batch this round: nothing changes (the weights move only by the outer step)."""

    def apply_step(self, payloads: Sequence[SparseLoCoPayload], *, lr: float) -> None:
        """The outer step of a round's consensus (decoded, client-index order); the round's LR
        drives only the inner steps."""
        del lr
        self._apply_decoded(payloads)

    def evaluate(self, batches: Iterable[torch.Tensor]) -> float:
        """Mean token cross-entropy over ``batches``, weighted by predicted tokens."""
        return evaluate_loss(self.model, batches, self.micro_batch_size, self.device)

    def state_file(self) -> bytes | None:
        """:meth:`state_dict` as safetensors bytes; None when the run has no global state."""
        from safetensors.torch import save

        state = self.state_dict()
        return save(state) if state else None

    def load_state_file(self, data: bytes) -> None:
        """Load :meth:`state_file`'s bytes (``ValueError`` on anything else)."""
        from safetensors import SafetensorError
        from safetensors.torch import load

        try:
            state = load(data)
        except (SafetensorError, ValueError) as e:
            raise ValueError(f"{OPTIMIZER_STATE_FILE} is not a safetensors file: {e}") from None
        self.load_state_dict(state)
