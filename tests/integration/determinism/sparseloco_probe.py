"""Run SparseLoCo's `outer_apply` on saved inputs in a process of its own; print a hash.

`test_sparseloco_across_kernels.py` starts this with different thread counts and CPU kernel sets
(`ATEN_CPU_CAPABILITY`) and compares the hashes.

    python sparseloco_probe.py IN_DIR THREADS

IN_DIR holds `inputs.pt` (`{"shapes", "params", "settings", "outer_lr", "rounds"}`, where
`rounds` is a list of lists of payload byte tensors, one list per round, in client order).
Prints the SHA-256 of the final parameters and outer momentum, in order.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import torch

from psyche.distro import sparseloco as sl


def main() -> None:
    src, threads = Path(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(threads)
    data = torch.load(src / "inputs.pt", weights_only=True)
    shapes = [tuple(s) for s in data["shapes"]]
    settings = sl.SparseLoCoSettings(**data["settings"])
    params = [p.clone() for p in data["params"]]
    state = sl.SparseLoCoState(shapes, settings)
    for wires in data["rounds"]:
        decoded = [sl.decode_payload(w.numpy().tobytes(), shapes, settings) for w in wires]
        sl.outer_apply(params, decoded, state, settings, data["outer_lr"])
    h = hashlib.sha256()
    for t in [*params, *(state.momentum or [])]:
        h.update(t.contiguous().numpy().tobytes())
    print(h.hexdigest())


if __name__ == "__main__":
    main()
