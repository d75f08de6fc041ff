"""What recording one SparseLoCo inner state costs, part by part (CPU time, one thread).

A trainer in a run that verifies records H + 1 inner states per round
(``psyche.training.sparseloco_audit.AuditTrail.record``): it captures the weights and AdamW
moments, encodes them to the canonical bytes and hashes those; a verifier decodes two or three of
them. This times each part on the tiny preset's state after one round (median of ``--repeat``)
and prints one line. Compare two trees by running it under each's ``PYTHONPATH``, one after the
other:

    .venv/bin/python bench/audit_record.py
    PYTHONPATH=<old tree>/client .venv/bin/python bench/audit_record.py
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    return ap.parse_args(argv)


def _ms(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return 1e3 * statistics.median(times)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    from psyche.protocol.optimizers import SparseLoCoOptimizer
    from psyche.training import init_model, llama_config
    from psyche.training.presets import PRESETS
    from psyche.training.sparseloco_audit import (
        AuditTrail,
        capture_state,
        decode_state,
        encode_state,
        state_hash,
    )
    from psyche.training.sparseloco_trainer import SparseLoCoTrainer

    torch.set_num_threads(1)
    opt = SparseLoCoOptimizer(
        betas=(0.9, 0.95), weight_decay=0.0, eps=1e-8, clip_grad_norm=1.0, inner_steps=2,
        outer_lr=1.0, outer_momentum=0.0, topk_chunk=256, topk=8, value_bits=2, error_decay=0.95,
    )  # fmt: skip
    model = init_model(llama_config(PRESETS["tiny"]), seed=0)
    t = SparseLoCoTrainer(model, opt, micro_batch_size=4)
    batch = torch.randint(3, 259, (8, 128), generator=torch.Generator().manual_seed(0))
    t.train_round(batch, step=1, lr=3e-3)
    live = capture_state(t.params, t._inner, copy=False)
    blob = encode_state(live)
    shapes = list(t.shapes)
    n = args.repeat
    parts = {
        "capture": _ms(lambda: capture_state(t.params, t._inner, copy=False), n),
        "encode": _ms(lambda: encode_state(live), n),
        "hash": _ms(lambda: state_hash(blob), n),
        # A trail past S_0 (which is its moments alone): a whole state, as every later one.
        "record": _ms(lambda: AuditTrail(hashes=[bytes(32)]).record(t.params, t._inner), n),
        "decode": _ms(lambda: decode_state(blob, shapes), n),
    }
    mb = len(blob) / 1e6
    print(f"one state of {mb:.1f} MB, ms (median of {n}): "
          + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()))  # fmt: skip


if __name__ == "__main__":
    main()
