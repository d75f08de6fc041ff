"""The DisTrO optimizer: one per client, driving a model's parameters through a round.

See docs/distro.md, "Train step" and "Apply".

A round, seen from one client:

1. `lookahead(prev_lr)` moves the weights by the client's own update that is still in flight
   (`p ← p − prev_lr·sign(δ)`), so the gradient is taken roughly where the weights will be;
2. the trainer runs forward/backward;
3. `generate(lr, prev_lr, prev_self)` undoes the lookahead, takes the previous round's transmitted
   part out of the residual δ, applies decoupled weight decay, folds the gradient into δ
   (`δ ← β·δ + lr·g`) and returns the top-k of DCT(δ) as a `Payload`;
4. at the start of the next round every client runs `apply(results, lr)` on the same consensus set:
   scatter-mean of the coefficients, inverse DCT, sign, `p ← p − lr·sign`.

Departures from the reference, each chosen so honest clients stay bit-identical:

- The lookahead is undone by restoring a saved copy of the weights, not by adding the step back.
  `(p − a) + a` is not `p` in bf16, and since `a` depends on each client's private δ, the
  reference's weights drift apart between clients by rounding. The copy costs one parameter-sized
  buffer while a lookahead is pending.
- `cancel()` undoes a pending lookahead when a round's training is abandoned (the reference leaves
  it applied and the model silently diverges; docs/protocol.md, "Known flaws of the reference",
  flaw 13). `cancel(lr)` also applies the weight decay the finished clients applied, so a client cut
  short stays identical to them.
- `generate` refuses a non-finite gradient norm before changing anything, so one bad batch cannot
  poison the residual for the rest of the run; the caller then cancels the round.
- Transforms run in fp32 even for bf16 models, and `residual_fp32` optionally keeps δ in fp32
  (docs/protocol.md, "Known flaws of the reference", flaw 23); values go on the wire in the
  parameter dtype, so the payload is unchanged.
- `apply` aggregates peer by peer in payload order (see `compress.aggregate`), in fp32, which is
  deterministic on accelerators where `scatter_reduce` is not.
- `apply` takes the sign of the inverse DCT with `dct.decode_sign`, an exact evaluation of the
  same sum, instead of `sign(decode(·))` through a float matmul: the matmul's rounding (and with it
  the sign of sums that are zero or tiny) depends on the CPU kernel, the GPU and the thread count,
  so two honest clients could move a weight in opposite directions. A sum that is exactly zero
  gives no update (docs/distro.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from psyche.distro.compress import DistroResult, aggregate, compress, sign_values
from psyche.distro.config import DistroConfig
from psyche.distro.dct import decode, decode_sign_many, encode
from psyche.distro.payload import PAYLOAD_VERSION, Payload, PayloadError, PayloadSpec, TensorSpec

__all__ = ["STATE_FORMAT", "Distro", "clip_grad_norm_", "wire_dtype"]

STATE_FORMAT = 1
_APPLY_WINDOW = 1 << 24
"""Parameters whose aggregates `apply` decodes per call (64 MiB of float32): enough tensors to
pay the fast sign's fixed costs once, without holding a second copy of a large model."""
"""Version of the `state_dict` layout: `{"format": 1, "residual": {name: tensor}}`."""


def wire_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a parameter's values travel in: its own if bf16/f16/f32, otherwise f32."""
    return dtype if dtype in (torch.bfloat16, torch.float16, torch.float32) else torch.float32


@torch.no_grad()
def clip_grad_norm_(params: Iterable[torch.Tensor], max_norm: float | None) -> float:
    """Global L2 gradient norm `N`; if `max_norm = c > 0` and `N > c`, scale grads by `c/(N+1e−6)`.

    Parameters without a gradient are skipped. Returns `N` (computed in fp32), before clipping.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    device = grads[0].device
    norms = torch.stack([torch.linalg.vector_norm(g.float()).to(device) for g in grads])
    total = float(torch.linalg.vector_norm(norms))
    if max_norm is not None and max_norm > 0 and total > max_norm:
        scale = max_norm / (total + 1e-6)
        for g in grads:
            g.mul_(scale)
    return total


def add_scaled(target: torch.Tensor, x: torch.Tensor, alpha: float) -> None:
    """`target ← target + alpha·x`, evaluated in float32 and rounded once to `target`'s dtype.

    Where `alpha·x` is exact (x a sign, as in the apply) this is the same bits on every device:
    torch's `add_(x, alpha=)` on a CPU bfloat16 tensor rounds `alpha` itself to bfloat16 first,
    where CUDA keeps it in float32, so a CPU and a GPU client holding the same bf16 weights
    stepped them differently (bench/apply_across_devices.py). For other `x` (the residual's
    gradient) a device may still fuse the multiply and add; that state is the client's own.
    """
    if target.dtype == torch.float32:
        target.add_(x.to(torch.float32), alpha=alpha)
    else:
        target.copy_(target.to(torch.float32).add_(x.to(torch.float32), alpha=alpha))


class Distro:
    """DisTrO state for one client: the residual δ of every parameter, in parameter-name order."""

    def __init__(
        self,
        named_parameters: Iterable[tuple[str, torch.Tensor]],
        config: DistroConfig,
        *,
        payload_version: int = PAYLOAD_VERSION,
        commitments: bool = False,
    ) -> None:
        """`payload_version` is the wire format this client sends and accepts; clients of one
        protocol version agree on it (docs/protocol.md, "Payload formats"), and tests and the
        bench pick 1 to compare with the v1 format."""
        items = sorted(named_parameters, key=lambda item: item[0])
        names = tuple(name for name, _ in items)
        if not items:
            raise ValueError("Distro needs at least one parameter")
        if len(set(names)) != len(names):
            raise ValueError("parameter names must be unique")
        for name, param in items:
            if not param.is_floating_point():
                raise ValueError(f"parameter {name!r} is {param.dtype}, not floating point")
        self.config = config
        self.payload_version = payload_version
        self.commitments = commitments
        """Whether this run's payloads carry per-sample commitments (a run that verifies)."""
        self.names = names
        self._params = tuple(param for _, param in items)
        self._residual = [
            torch.zeros_like(p, dtype=torch.float32 if config.residual_fp32 else p.dtype)
            for p in self._params
        ]
        self._specs = tuple(
            TensorSpec.for_parameter(name, tuple(p.shape), config, wire_dtype(p.dtype))
            for name, p in items
        )
        self._backup: list[torch.Tensor] | None = None
        self._lookahead_lr: float | None = None
        self.last_grad_norm: float | None = None
        """Global gradient norm seen by the last `generate` (before clipping)."""

    @property
    def payload_spec(self) -> PayloadSpec:
        """The layout this client's payloads have, and that peers' payloads must have."""
        return PayloadSpec(
            tensors=self._specs,
            quantized=self.config.quantize_1bit,
            version=self.payload_version,
            commitments=self.commitments,
        )

    @property
    def lookahead_pending(self) -> bool:
        """True between `lookahead` and the `generate` or `cancel` that undoes it."""
        return self._backup is not None

    @torch.no_grad()
    def lookahead(
        self,
        prev_lr: float,
        public: Payload | None = None,
        *,
        verifiable: bool = False,
        decay_lr: float | None = None,
    ) -> None:
        """`p ← p − prev_lr·sign(δ)`; call before forward/backward.

        This is step 2 of docs/distro.md, "Train step". With `verifiable` the direction is
        instead that of `public`, the result this client sent last (`p ← p − prev_lr·sign(decode
        (public))`, exactly as `apply` would step on it alone; no step when None): a point of
        gradient a verifier can rebuild from public data, which per-sample commitments need
        (docs/protocol.md, "Free riders: per-sample commitments"). `decay_lr` (with `verifiable`)
        first applies the weight decay `generate(decay_lr)` will apply after restoring, so the
        point is that of the weights every client holds once the round is done: what the
        verifier of the next round starts from.
        """
        if self._backup is not None:
            raise RuntimeError("a lookahead is already applied: call generate() or cancel() first")
        self._backup = [p.detach().clone() for p in self._params]
        self._lookahead_lr = prev_lr
        if verifiable:
            if decay_lr is not None:
                self._weight_decay(decay_lr)
            if public is not None:
                self._check_results(public, "public")
                self._sign_step([public], prev_lr)
            return
        for p, delta in zip(self._params, self._residual, strict=True):
            add_scaled(p, torch.sign(delta), -prev_lr)

    @torch.no_grad()
    def cancel(self, lr: float | None = None) -> None:
        """Abandon this round's training: restore the weights from before `lookahead`, exactly.

        With `lr`, also apply the decoupled weight decay `generate(lr, …)` would have applied, so
        the weights match those of clients that finished the round. Gradients are dropped.
        """
        self._restore()
        if lr is not None:
            self._weight_decay(lr)
        for p in self._params:
            p.grad = None

    def _restore(self) -> None:
        if self._backup is None:
            return
        for p, saved in zip(self._params, self._backup, strict=True):
            p.copy_(saved)
        self._backup = None
        self._lookahead_lr = None

    def _weight_decay(self, lr: float) -> None:
        decay = self.config.decay
        if decay != 0:
            for p in self._params:
                p.mul_(1.0 - lr * decay)

    @torch.no_grad()
    def zero_residual(self) -> None:
        """δ ← 0 (cold start, `zero_optim`)."""
        for delta in self._residual:
            delta.zero_()

    @torch.no_grad()
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
    ) -> Payload:
        """Turn this round's gradients into a payload; consumes `.grad`.

        Steps 4–5 of docs/distro.md, "Train step".

        `prev_lr` must be what `lookahead` got. `prev_self` is the payload this client's previous
        `generate` returned (unquantized: never a decoded 1-bit payload), or None. Raises
        `FloatingPointError` on a non-finite gradient norm before changing any state.
        """
        if self._lookahead_lr is not None and prev_lr != self._lookahead_lr:
            raise ValueError(f"prev_lr {prev_lr} differs from the lookahead's {self._lookahead_lr}")
        if prev_self is not None:
            self._check_results(prev_self, "prev_self")
        clip = self.config.clip_grad_norm if self.config.clip_enabled else None
        norm = clip_grad_norm_(self._params, clip)
        self.last_grad_norm = norm
        if not math.isfinite(norm):
            raise FloatingPointError(f"gradient norm is {norm}; call cancel() to drop this round")
        self._restore()
        self._weight_decay(lr)
        chunk, topk, beta = (
            self.config.compression_chunk,
            self.config.compression_topk,
            self.config.compression_decay,
        )
        results = []
        for n, (p, delta) in enumerate(zip(self._params, self._residual, strict=True)):
            if prev_self is not None:
                sent = prev_self.results[n]
                dense = aggregate([sent], torch.float32, delta.device, distinct=True)
                delta.sub_(decode(dense).reshape(delta.shape).to(delta.dtype))
            if beta != 1.0:
                delta.mul_(beta)
            if p.grad is not None:
                add_scaled(delta, p.grad, lr)
            result = compress(encode(delta.float(), chunk), topk)
            results.append(
                DistroResult(
                    result.idx, result.val.to(wire_dtype(p.dtype)), result.xshape, result.totalk
                )
            )
            p.grad = None
        return Payload(
            step=step,
            batch_start=batch_start,
            batch_end=batch_end,
            trainer_nonce=trainer_nonce,
            quantized=self.config.quantize_1bit,
            results=tuple(results),
        )

    @torch.no_grad()
    def apply(self, payloads: Sequence[Payload], lr: float) -> None:
        """One sign-SGD step from the consensus results: `p ← p − lr·sign(decode(mean))`.

        `payloads` are peers' payloads from `decode_payload` (and this client's own, decoded or as
        `generate` returned it), in the consensus order every client uses. All are checked against
        this model before any weight changes; a mismatch raises `PayloadError`. No payloads means
        no update. The result is the same bits on every device and thread count: the mean is
        summed peer by peer in payload order and the sign comes from `decode_sign_many` (sign 0, no
        update, where the exact sum is 0).
        """
        if self._backup is not None:
            raise RuntimeError("apply() while a lookahead is pending: generate() or cancel() first")
        for n, payload in enumerate(payloads):
            self._check_results(payload, f"payload {n}")
        if not payloads:
            return
        self._sign_step(payloads, lr)

    def _sign_step(self, payloads: Sequence[Payload], lr: float) -> None:
        window: list[tuple[torch.Tensor, torch.Tensor]] = []
        size = 0
        for n, p in enumerate(self._params):
            results = [payload.results[n] for payload in payloads]
            if self.config.quantize_1bit:
                # Own payloads still hold magnitudes; peers' are already ±1 (idempotent).
                results = [
                    DistroResult(r.idx, sign_values(r.val, torch.float32), r.xshape, r.totalk)
                    for r in results
                ]
            window.append((p, aggregate(results, torch.float32, p.device, distinct=True)))
            size += p.numel()
            if size >= _APPLY_WINDOW or n == len(self._params) - 1:
                # Several tensors per call: the fast sign's exact recomputation is paid once.
                updates = decode_sign_many([dense for _, dense in window], overwrite=True)
                for (param, _), update in zip(window, updates, strict=True):
                    # `update` is −1, 0 or 1, so `lr·update` is exact and a fused multiply-add
                    # (the CPU's vector kernels) rounds `p − lr·update` like a separate multiply
                    # and add.
                    add_scaled(param, update.reshape(param.shape), -lr)
                window, size = [], 0

    def _check_results(self, payload: Payload, what: str) -> None:
        if payload.quantized != self.config.quantize_1bit:
            raise PayloadError(f"{what}: quantized={payload.quantized}, the run uses the opposite")
        if len(payload.results) != len(self._specs):
            raise PayloadError(
                f"{what}: {len(payload.results)} tensors, the model has {len(self._specs)}"
            )
        for result, spec in zip(payload.results, self._specs, strict=True):
            if result.xshape != spec.xshape or result.totalk != spec.totalk:
                raise PayloadError(
                    f"{what}: tensor {spec.name!r} has xshape {result.xshape} / totalk "
                    f"{result.totalk}, expected {spec.xshape} / {spec.totalk}"
                )
            grid = spec.xshape[:-2] if len(spec.xshape) > 2 else spec.xshape[:-1]
            if tuple(result.idx.shape[:-1]) != grid or result.idx.shape != result.val.shape:
                raise PayloadError(f"{what}: tensor {spec.name!r} idx/val do not fit grid {grid}")

    def state_dict(self) -> dict[str, Any]:
        """`{"format": STATE_FORMAT, "residual": {name: δ}}` (copies, on the residual's device)."""
        return {
            "format": STATE_FORMAT,
            "residual": {
                name: delta.detach().clone()
                for name, delta in zip(self.names, self._residual, strict=True)
            },
        }

    @torch.no_grad()
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore δ from `state_dict()` output; names and shapes must match exactly."""
        if set(state) != {"format", "residual"}:
            raise ValueError(f"state keys {sorted(state)}, expected ['format', 'residual']")
        if state["format"] != STATE_FORMAT:
            raise ValueError(f"state format {state['format']!r}, expected {STATE_FORMAT}")
        residual = state["residual"]
        if set(residual) != set(self.names):
            missing = sorted(set(self.names) - set(residual))
            extra = sorted(set(residual) - set(self.names))
            raise ValueError(f"residual names differ: missing {missing}, unexpected {extra}")
        for name, delta in zip(self.names, self._residual, strict=True):
            value = residual[name]
            if not isinstance(value, torch.Tensor) or value.shape != delta.shape:
                raise ValueError(
                    f"residual {name!r} must be a tensor of shape {tuple(delta.shape)}"
                )
        for name, delta in zip(self.names, self._residual, strict=True):
            delta.copy_(residual[name])
