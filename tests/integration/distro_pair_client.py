"""One client of a two-process DisTrO run, for `test_apply_determinism.py`.

Each process is a real client minus the network: it loads the same model directory, trains its own
batch every round with the real `Trainer` (lookahead, error feedback, 1-bit payloads), publishes
the payload bytes in a shared directory, and at the start of round `h` applies the payloads of
round `h−2` from every client in client order, as the consensus apply does. After every apply it
records `model_hash`. Clients differ only in how they compute (thread count, CPU kernel set,
device), so honest clients must record the same hashes; what they train on differs by design.

    python distro_pair_client.py --index I --clients N --dir D --model M --rounds R
        [--threads T] [--device cpu|cuda]

Writes `D/client{I}.json`: `{"hashes": [...], "threads": T, "device": ..., "capability": ...}`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

import torch

from psyche.distro import Distro, DistroConfig, decode_payload
from psyche.training import Trainer, load_model, model_hash

LR = 4e-3
SEQ = 32
SAMPLES = 4
WAIT_S = 120.0


def tokens_for(round_: int, index: int, samples: int = SAMPLES) -> torch.Tensor:
    """The batch of client `index` in `round_`, from Python's RNG so it is the same everywhere."""
    rng = random.Random(round_ * 1000 + index)
    ids = [[rng.randrange(3, 259) for _ in range(SEQ)] for _ in range(samples)]
    return torch.tensor(ids, dtype=torch.int64)


def wait_for(path: Path) -> bytes:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no payload at {path}")
        time.sleep(0.005)
    return path.read_bytes()


def pair_arguments(default_rounds: int) -> argparse.Namespace:
    """The command line every pair client takes (see the module docstring)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", type=int, required=True)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=default_rounds)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    return ap.parse_args()


def main() -> None:
    args = pair_arguments(default_rounds=20)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    # fp32 on every device: the comparison is about how apply computes, not about dtypes.
    model, _ = load_model(args.model, device=device, dtype=torch.float32)
    config = DistroConfig(
        compression_decay=0.999,
        compression_topk=8,
        compression_chunk=64,
        quantize_1bit=True,
        clip_grad_norm=1.0,
    )
    distro = Distro(model.named_parameters(), config)
    trainer = Trainer(model, distro, micro_batch_size=2, device=device)
    spec = distro.payload_spec
    hashes: list[str] = []
    prev_self = None
    for r in range(args.rounds):
        step = r + 1
        if r >= 2:
            payloads = [
                decode_payload(wait_for(args.dir / f"r{r - 2}_c{i}.bin"), spec)
                for i in range(args.clients)
            ]
            trainer.apply_step(payloads, lr=LR)
        hashes.append(model_hash(model))
        out = trainer.train_step(
            tokens_for(r, args.index),
            step=step,
            lr=LR,
            prev_lr=LR if r > 0 else 0.0,
            prev_self_results=prev_self,
            zero_optim=r == 0,
            batch_id=(r * args.clients + args.index, r * args.clients + args.index),
        )
        prev_self = out.self_result
        tmp = args.dir / f".r{r}_c{args.index}.tmp"
        tmp.write_bytes(out.payload)
        os.replace(tmp, args.dir / f"r{r}_c{args.index}.bin")
    result = {
        "hashes": hashes,
        "threads": torch.get_num_threads(),
        "device": str(device),
        "capability": torch.backends.cpu.get_cpu_capability(),
    }
    (args.dir / f"client{args.index}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
