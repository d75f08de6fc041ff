"""Per result: the payload decode and the copy check's sketch, old code against new, interleaved.

Issue 38 (bench/README.md, "Scale"). ``--capture FILE`` runs a 4-client simulated run of the tiny
preset (``bench/scale.py``'s) for 2 trained rounds and keeps every v2 payload a client decoded,
with the run's ``PayloadSpec`` (pickled to FILE). The benchmark then loads the old modules
(``payload_v2``, ``elias_fano``, ``copy_index`` as they are at ``--old``, a git revision, under
other names) beside the working tree's, checks that both decode every captured payload to the
same bits and sketch it to the same sketch, and times, alternating old and new per repeat:

- ``decode``: ``decode_v2(data, spec)`` per payload;
- ``sketch``: ``result_sketch`` of the decoded payload (the daemon's call, one per result), the
  old sketch on the old decode's payload and the new on the new's;
- ``both``: the two in sequence, as a client handles a download.

Reported per part: µs per result (median over repeats of the mean over payloads) and new/old.

    .venv/bin/python bench/decode_sketch.py --capture /tmp/payloads.pkl
    nice .venv/bin/python bench/decode_sketch.py --payloads /tmp/payloads.pkl --old HEAD~1

``--sketch-changed``: the old revision's sketch is of another scheme (its hash or fingerprint
layout changed), so sketches are timed but not compared; decodes still are.
"""

from __future__ import annotations

import argparse
import importlib.util
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
OLD_MODULES = ("elias_fano", "payload_v2", "copy_index")


def capture(path: Path) -> None:
    """Every distinct v2 payload decoded during a short 4-client run, with its spec."""
    sys.path.insert(0, str(ROOT / "bench"))
    import scale
    from psyche.distro import payload as payload_mod

    seen: dict[bytes, Any] = {}
    inner = payload_mod.decode_v2

    def recording(data: bytes, spec: Any) -> Any:
        seen.setdefault(bytes(data), spec)
        return inner(data, spec)

    payload_mod.decode_v2 = recording  # type: ignore[assignment]
    work = Path(tempfile.mkdtemp(prefix="decode-sketch-"))
    scale.prepare_inputs(work, 300_000)
    scale.sim_one(4, 2, 2, work, profile=False)
    specs = {id(s): s for s in seen.values()}
    assert len(specs) == 1 or len({repr(s) for s in specs.values()}) == 1, "one spec expected"
    spec = next(iter(seen.values()))
    path.write_bytes(pickle.dumps({"spec": spec, "payloads": list(seen)}))
    print(f"{len(seen)} payloads of {len(next(iter(seen)))} bytes to {path}")


def load_old(rev: str) -> dict[str, ModuleType]:
    """The old modules, from ``git show REV:…``, as ``_old_<name>``, importing each other."""
    out: dict[str, ModuleType] = {}
    for name in OLD_MODULES:
        src = subprocess.run(
            ["git", "show", f"{rev}:client/psyche/distro/{name}.py"],
            cwd=ROOT, check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        for other in OLD_MODULES:
            src = src.replace(f"from psyche.distro.{other} import", f"from _old_{other} import")
        # The old module must not replace the live format's size bound.
        src = src.replace("register_size_bound(VERSION, max_bytes_v2)", "")
        spec = importlib.util.spec_from_loader(f"_old_{name}", loader=None)
        assert spec is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[f"_old_{name}"] = mod
        exec(compile(src, f"<{rev}:{name}.py>", "exec"), mod.__dict__)
        out[name] = mod
    return out


def _same_payload(a: Any, b: Any) -> None:
    assert (a.step, a.batch_start, a.batch_end, a.trainer_nonce, a.quantized) == (
        b.step, b.batch_start, b.batch_end, b.trainer_nonce, b.quantized,
    )  # fmt: skip
    assert a.commitments == b.commitments
    assert len(a.results) == len(b.results)
    for x, y in zip(a.results, b.results, strict=True):
        assert (x.xshape, x.totalk) == (y.xshape, y.totalk)
        assert x.idx.dtype == y.idx.dtype and x.val.dtype == y.val.dtype
        assert x.idx.shape == y.idx.shape and x.val.shape == y.val.shape
        assert torch.equal(x.idx, y.idx)
        assert (
            torch.equal(x.val.view(torch.uint8), y.val.view(torch.uint8))
            if (x.val.dtype == torch.float32 and x.val.is_contiguous() and y.val.is_contiguous())
            else torch.equal(x.val, y.val)
        )


def _same_sketch(a: Any, b: Any) -> None:
    assert (a.fingerprint, a.scheme, a.bands, a.tensors) == (
        b.fingerprint, b.scheme, b.bands, b.tensors,
    )  # fmt: skip
    assert np.array_equal(a.bins, b.bins)


def bench(
    payloads: list[bytes],
    spec: Any,
    old: dict[str, ModuleType],
    repeats: int,
    same_sketch: bool = True,
) -> None:
    from psyche.daemon import rounds
    from psyche.distro import payload_v2 as new_pv
    from psyche.distro.result_format import DistroFormat

    fmt = DistroFormat(spec)
    salt = 12345
    old_pv, old_ci = old["payload_v2"], old["copy_index"]

    def old_sketch(p: Any) -> Any:
        return old_ci.distro_sketch(p, salt)

    def new_sketch(p: Any) -> Any:
        return rounds.result_sketch(p, fmt, salt)

    for data in payloads:
        a, b = old_pv.decode_v2(data, spec), new_pv.decode_v2(data, spec)
        _same_payload(a, b)
        if same_sketch:
            _same_sketch(old_sketch(a), new_sketch(b))
    what = "agree bit for bit" if same_sketch else "decode alike (sketches not compared)"
    print(f"{len(payloads)} payloads ({len(payloads[0])} bytes): old and new {what}")
    arms = {
        "old": (old_pv.decode_v2, old_sketch),
        "new": (new_pv.decode_v2, new_sketch),
    }
    times: dict[str, dict[str, list[float]]] = {
        arm: {"decode": [], "sketch": [], "both": []} for arm in arms
    }
    for r in range(repeats):
        for arm in arms if r % 2 == 0 else reversed(list(arms)):
            dec, sk = arms[arm]
            t0 = time.thread_time()
            decoded = [dec(d, spec) for d in payloads]
            t1 = time.thread_time()
            for p in decoded:
                sk(p)
            t2 = time.thread_time()
            for d in payloads:
                sk(dec(d, spec))
            t3 = time.thread_time()
            n = len(payloads)
            for part, dt in (("decode", t1 - t0), ("sketch", t2 - t1), ("both", t3 - t2)):
                times[arm][part].append(dt / n * 1e6)
    print("| part | old µs/result | new µs/result | new/old |")
    print("|---|---|---|---|")
    for part in ("decode", "sketch", "both"):
        o, n = (float(np.median(times[a][part])) for a in ("old", "new"))
        print(f"| {part} | {o:.0f} | {n:.0f} | {n / o:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capture", default=None, help="run 4 clients, write payloads here")
    parser.add_argument("--payloads", default=None, help="captured payloads (pickle)")
    parser.add_argument("--old", default="HEAD", help="git revision of the old code")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument(
        "--sketch-changed",
        action="store_true",
        help="the old revision sketches by another scheme: time it, do not compare sketches",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.capture:
        capture(Path(args.capture))
        return
    got = pickle.loads(Path(args.payloads).read_bytes())
    bench(got["payloads"], got["spec"], load_old(args.old), args.repeats, not args.sketch_changed)


if __name__ == "__main__":
    main()
