"""DisTrO configuration: the run-wide knobs every client must agree on.

The values come from the run config (`OptimizerDefinition::Distro` in the reference; docs/distro.md,
"Configuration") and are shared by all peers: the payload format is derived from them, so two
clients with different `compression_chunk` or `compression_topk` cannot exchange results at all
(their payloads fail validation instead of being silently mis-decoded).

`residual_fp32` is local to each client and never reaches the wire: it only changes the precision
in which the client accumulates its own residual. It is off by default to match the reference
(residual in the parameter dtype, bf16), and costs one extra fp32 copy of the model when on.
"""

from __future__ import annotations

from dataclasses import dataclass

from psyche.protocol.optimizers import DistroOptimizer

__all__ = ["DistroConfig"]

MAX_CHUNK = 65_535


@dataclass(frozen=True, slots=True, kw_only=True)
class DistroConfig:
    """Settings of the DisTrO optimizer; validated on construction."""

    compression_decay: float
    """Residual decay β: `δ ← β·δ` each step, before the new gradient is added (0.999 shipped)."""

    compression_topk: int
    """Coefficients kept per DCT tile; clamped to `[1, tile size]` per parameter."""

    compression_chunk: int
    """Target DCT tile edge; each dimension uses its largest divisor not above this value."""

    quantize_1bit: bool
    """Send only the sign of each kept coefficient (1 bit, packed); indices are unchanged."""

    clip_grad_norm: float | None = None
    """Global L2 gradient-norm limit applied before `generate` (finite, > 0); `None` disables it."""

    weight_decay: float | None = None
    """Decoupled weight decay `p ← p·(1 − lr·wd)`, applied by each trainer; `None` means 0."""

    residual_fp32: bool = False
    """Keep the residual δ in fp32 instead of the parameter dtype (local only, not on the wire)."""

    def __post_init__(self) -> None:
        # Python ints are unbounded; the run config's U16 fields are bounded by their decoder.
        if not 1 <= self.compression_topk <= MAX_CHUNK:
            raise ValueError(
                f"compression_topk must be in [1, {MAX_CHUNK}] (u16 on the wire), "
                f"got {self.compression_topk}"
            )
        if not 1 <= self.compression_chunk <= MAX_CHUNK:
            raise ValueError(
                f"compression_chunk must be in [1, {MAX_CHUNK}] (u16 on the wire), "
                f"got {self.compression_chunk}"
            )
        # The run config's own rules, so a config that passed validate-config always builds,
        # and one that would not build never passes it.
        DistroOptimizer.check_fields(
            "",
            compression_decay=self.compression_decay,
            compression_topk=self.compression_topk,
            compression_chunk=self.compression_chunk,
            clip_grad_norm=self.clip_grad_norm,
            weight_decay=self.weight_decay,
        )

    @property
    def clip_enabled(self) -> bool:
        """True when gradients are clipped (`clip_grad_norm` is set)."""
        return self.clip_grad_norm is not None

    @property
    def decay(self) -> float:
        """The effective weight decay (0 when unset)."""
        return self.weight_decay or 0.0
