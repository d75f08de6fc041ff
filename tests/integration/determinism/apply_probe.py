"""Run `Distro.apply` and the apply-time inverse DCT on saved inputs, in a process of its own.

`test_apply_across_kernels.py` starts this with different thread counts and CPU kernel sets
(`ATEN_CPU_CAPABILITY`, `MKL_CBWR`) and compares what it writes bit for bit.

    python apply_probe.py IN.pt OUT.pt THREADS [--matmul]

IN.pt: `{"params": {name: tensor}, "payloads": [uint8 tensor of payload bytes], "lr": float,
"chunk": int, "topk": int, "dense": [encoded tensors]}`.
OUT.pt: `{"params": {name: tensor}, "signs": [tensor]}`. The signs are `decode_sign(dense)`; with
`--matmul` they are `sign(decode(dense))` through the float matmul, and `apply` is patched to use
that too (the apply of the code before `decode_sign`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch

import psyche.distro.optimizer as optimizer
from psyche.distro import Distro, DistroConfig, decode, decode_payload, decode_sign


def matmul_sign(encoded: torch.Tensor) -> torch.Tensor:
    return torch.sign(decode(encoded))


def main() -> None:
    src, dst, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.set_num_threads(threads)
    sign_of: Callable[[torch.Tensor], torch.Tensor] = decode_sign
    if "--matmul" in sys.argv:
        sign_of = matmul_sign
        optimizer.decode_sign_many = lambda xs, overwrite=False: [matmul_sign(x) for x in xs]  # type: ignore[assignment]
    data = torch.load(src, weights_only=True)
    params = {name: torch.nn.Parameter(t.clone()) for name, t in data["params"].items()}
    config = DistroConfig(
        compression_decay=1.0,
        compression_topk=data["topk"],
        compression_chunk=data["chunk"],
        quantize_1bit=False,
    )
    distro = Distro(params.items(), config)
    payloads = [decode_payload(b.numpy().tobytes(), distro.payload_spec) for b in data["payloads"]]
    distro.apply(payloads, data["lr"])
    out = {
        "params": {name: p.detach().clone() for name, p in params.items()},
        "signs": [sign_of(x) for x in data["dense"]],
    }
    torch.save(out, dst)


if __name__ == "__main__":
    main()
