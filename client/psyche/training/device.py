"""Where and in which precision a model trains, and the switches that make training repeatable.

Honest clients must end every round with bit-identical weights (docs/architecture.md, "Invariants"),
which needs two things from this module:

- the same dtype on every client: a run's weights are held in its checkpoint's stored dtype on
  every device (`loading.checkpoint_dtype`, used by the daemon's loader), so a CPU and a GPU
  client hold the same bits; `default_dtype` below is only for models built from scratch on a
  device (benches);
- deterministic kernels. `torch.use_deterministic_algorithms` is enabled in warn-only mode, so an
  op without a deterministic implementation logs a warning instead of failing a run; cuBLAS needs
  its workspace setting before the first CUDA matmul, hence the environment variable.
"""

from __future__ import annotations

import os
from typing import Literal

import torch

__all__ = ["DEFAULT_SEED", "DeviceKind", "default_dtype", "enable_determinism", "pick_device"]

DeviceKind = Literal["auto", "cpu", "cuda", "mps"]

DEFAULT_SEED = 1337
"""The reference client seeds torch with this before building its trainers.

See docs/protocol.md, "Warmup".
"""


def pick_device(kind: str = "auto") -> torch.device:
    """`auto`: the first CUDA device if one is usable, else CPU; `cpu`; `cuda` or `cuda:N`;
    `mps` (Apple GPUs) where torch has it. `auto` does not pick mps, so what it means on a
    machine does not depend on whether torch was built with MPS; mps must be asked for."""
    if kind == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    if kind == "cpu":
        return torch.device("cpu")
    if kind == "cuda" or kind.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {kind!r} requested but CUDA is not available; use 'cpu' or 'auto'"
            )
        return torch.device(kind)
    if kind == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError("device 'mps' requested but MPS is not available; use 'cpu' or 'auto'")
        return torch.device("mps")
    raise ValueError(f"unknown device {kind!r}: expected 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'")


def default_dtype(device: torch.device) -> torch.dtype:
    """bf16 on CUDA, fp32 everywhere else: for a model built from scratch on this device. A run's
    clients never use it: they hold the checkpoint's dtype (`loading.checkpoint_dtype`)."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def enable_determinism(seed: int = DEFAULT_SEED) -> None:
    """Seed torch's global generators and ask for deterministic kernels (process-wide).

    Training itself draws no random numbers (no dropout in our models); the seed makes any
    stray draw repeatable across clients rather than a hidden source of divergence.
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
