"""One client of a two-process SparseLoCo run, for `test_sparseloco_pair_run.py`.

Like `distro_pair_client.py` for DisTrO: each process loads the same model directory, trains its
own batch every round with the real `SparseLoCoTrainer` (H inner AdamW steps, error feedback,
2-bit payloads, outer momentum), publishes the payload bytes in a shared directory, and at the
start of round `h` applies the payloads of round `h−2` from every client in client order (the
daemon's apply lag). After every apply it records `model_hash`.

    python sparseloco_pair_client.py --index I --clients N --dir D --model M --rounds R
        [--threads T] [--device cpu|cuda]

Writes `D/client{I}.json`: `{"hashes": [...], "threads": T, "capability": ..., "bytes": B}`.
"""

from __future__ import annotations

import json
import os

import torch
from distro_pair_client import pair_arguments, tokens_for, wait_for  # this script's folder

from psyche.protocol.optimizers import SparseLoCoOptimizer
from psyche.training import load_model, model_hash
from psyche.training.sparseloco_trainer import SparseLoCoTrainer

LR = 4e-3
SAMPLES = 8
OPTIMIZER = SparseLoCoOptimizer(
    betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8, clip_grad_norm=1.0, inner_steps=4,
    outer_lr=0.7, outer_momentum=0.5, topk_chunk=64, topk=2, value_bits=2, error_decay=0.95,
)  # fmt: skip


def main() -> None:
    args = pair_arguments(default_rounds=10)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    model, _ = load_model(args.model, device=device, dtype=torch.float32)
    trainer = SparseLoCoTrainer(model, OPTIMIZER, micro_batch_size=2)
    hashes: list[str] = []
    sizes: set[int] = set()
    for r in range(args.rounds):
        if r >= 2:
            payloads = [wait_for(args.dir / f"r{r - 2}_c{i}.bin") for i in range(args.clients)]
            trainer.apply_round(payloads)
        hashes.append(model_hash(model))
        out = trainer.train_round(tokens_for(r, args.index, SAMPLES), step=r + 1, lr=LR)
        sizes.add(len(out.payload))
        tmp = args.dir / f".r{r}_c{args.index}.tmp"
        tmp.write_bytes(out.payload)
        os.replace(tmp, args.dir / f"r{r}_c{args.index}.bin")
    result = {
        "hashes": hashes,
        "threads": torch.get_num_threads(),
        "device": str(device),
        "capability": torch.backends.cpu.get_cpu_capability(),
        "sizes": sorted(sizes),
        "bound": trainer.payload_bytes,
        "global_state_keys": sorted(trainer.state_dict()),
    }
    (args.dir / f"client{args.index}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
