"""Shapes and data shared by the training tests: tiny enough for a 2-core CPU."""

from __future__ import annotations

import torch

from psyche.distro import Distro, DistroConfig
from psyche.training import Preset, Trainer

TINY = Preset(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, max_seq_len=32)
"""hidden 64, 2 layers, 4 heads, seq 32; vocab 264 (byte tokenizer)."""

SEQ = 32
CPU = torch.device("cpu")


def batch_of(seed: int, samples: int = 4, seq: int = SEQ) -> torch.Tensor:
    """Deterministic token ids in the byte range of the vocabulary."""
    return torch.randint(3, 259, (samples, seq), generator=torch.Generator().manual_seed(seed))


def distro_cfg(*, quantize_1bit: bool = True, weight_decay: float | None = None) -> DistroConfig:
    """The shipped DisTrO settings (decay 0.999, chunk 64, top-k 8, clip 1.0), tiny-friendly."""
    return DistroConfig(
        compression_decay=0.999,
        compression_topk=8,
        compression_chunk=64,
        quantize_1bit=quantize_1bit,
        clip_grad_norm=1.0,
        weight_decay=weight_decay,
    )


def make_trainer(
    model: torch.nn.Module, *, micro_batch_size: int = 2, config: DistroConfig | None = None
) -> Trainer:
    distro = Distro(model.named_parameters(), config or distro_cfg())
    return Trainer(model, distro, micro_batch_size=micro_batch_size, device=CPU)
