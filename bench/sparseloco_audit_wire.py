"""What the SparseLoCo audit costs on the wire, per round, measured side by side (issue 39).

One process, one torch thread, the tiny preset (1.18 M parameters) and the product's classes:
for each of ``--rounds`` rounds, a trainer takes the round once without the audit and once with
it (``SparseLoCoTrainer.set_audit``, the same start: the second from a copy of the first's state),
and a verifier runs the daemon's check of one inner step and the encode link
(``psyche.daemon.sparseloco_checks.audit_link``) on the audited result. Printed: the CPU
seconds of each (medians; the two rounds' order alternates), the recording overhead (the two
rounds' ratio, and the trail's own CPU time, which is less noisy), an audit's cost as a share
of a plain round, the bytes an audit fetches, and what a client then spends per round at
``verification_percent`` p with 3 verifiers per sampled result (each audits every sampled
result but its own, so about 3·p/100 audits per client and round), recording included; and
what the probe of inner step 0 costs a verifier (``audit_probe``, run only when a trainer's
states do not come) and adds to a result.

    .venv/bin/python bench/sparseloco_audit_wire.py              # H = 2, as config/tiny-sparseloco
    .venv/bin/python bench/sparseloco_audit_wire.py --inner-steps 4 --batch 8
    .venv/bin/python bench/sparseloco_audit_wire.py --in-memory  # the chain held in the heap

The audited trainer records its chain into files in a temporary blob directory (where the
client's P2P node keeps it: ``/dev/shm`` with room, as ``psyche.p2p.node.default_blob_root``),
as the client does, over the files of the chain it gave up before (``--new-files``: new files each
round, as before 2026-12-06); ``--in-memory`` keeps it in the heap, as before 2026-12-05.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--inner-steps", type=int, default=2, help="H")
    p.add_argument("--batch", type=int, default=4, help="samples per inner step")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--percent", type=int, default=25, help="verification_percent for the share")
    p.add_argument(
        "--in-memory",
        action="store_true",
        help="keep the chain in memory (before 2026-12-05) instead of recording it into files "
        "in a blob directory, as the client does",
    )
    p.add_argument(
        "--new-files",
        action="store_true",
        help="write each chain into new files (before 2026-12-06) instead of over the files of "
        "the chain given up before it, as the client does",
    )
    p.add_argument("--json", type=Path)
    return p.parse_args(argv)


def _cpu(fn: Any) -> tuple[Any, float]:
    t0 = time.process_time()
    out = fn()
    return out, time.process_time() - t0


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from psyche.daemon.sparseloco_checks import audit_link, audit_probe, wanted
    from psyche.p2p.node import RECYCLED, default_blob_root
    from psyche.protocol.optimizers import SparseLoCoOptimizer
    from psyche.training import init_model, llama_config
    from psyche.training.presets import PRESETS
    from psyche.training.sparseloco_trainer import SparseLoCoTrainer

    torch.set_num_threads(1)
    h = args.inner_steps
    opt = SparseLoCoOptimizer(
        betas=(0.9, 0.95), weight_decay=0.0, eps=1e-8, clip_grad_norm=1.0, inner_steps=h,
        outer_lr=1.0, outer_momentum=0.0, topk_chunk=256, topk=8, value_bits=2, error_decay=0.95,
    )  # fmt: skip
    cfg = llama_config(PRESETS["tiny"])

    def trainer() -> SparseLoCoTrainer:
        return SparseLoCoTrainer(init_model(cfg, seed=0), opt, micro_batch_size=args.batch)

    plain, audited, verifier = trainer(), trainer(), trainer()
    audited.set_audit(True)
    spool = None if args.in_memory else tempfile.TemporaryDirectory(dir=default_blob_root())
    audited.audit_spool = None if spool is None else Path(spool.name)
    if spool is not None and not args.new_files:
        # A round's chain, given up at the next round's start, is written over by that round's,
        # as a client's withdrawn chains are (``psyche.training.audit_files``).
        audited.audit_pool = Path(spool.name) / RECYCLED
    gen = torch.Generator().manual_seed(0)
    rows: list[dict[str, float]] = []
    for r in range(args.rounds):
        batch = torch.randint(3, 259, (h * args.batch, args.seq), generator=gen)
        kw: dict[str, Any] = {
            "step": r + 1, "lr": 3e-3, "prev_lr": 3e-3, "prev_self_results": None,
            "zero_optim": False,
        }  # fmt: skip
        audited.state = copy.deepcopy(plain.state)
        audited._inner.load_state_dict(copy.deepcopy(plain._inner.state_dict()))
        # Alternated, so neither kind always runs second (on caches the other one warmed).
        if r % 2:
            out, t_audit = _cpu(partial(audited.train_step, batch, **kw))
            _, t_plain = _cpu(partial(plain.train_step, batch, **kw))
        else:
            _, t_plain = _cpu(partial(plain.train_step, batch, **kw))
            out, t_audit = _cpu(partial(audited.train_step, batch, **kw))
        trail = audited.last_trail
        assert trail is not None
        decoded = audited.format.decode(out.payload)
        assert decoded.audit is not None
        served = {h: trail.read(h) for h in (*trail.hashes, *trail.error_hashes)}
        link = r % h
        need = wanted(decoded.audit, link)
        base = out.payload[: audited.payload_bytes]
        check = partial(audit_link, verifier, link, decoded.audit, served, batch, 3e-3, base)
        (ok, why), t_check = _cpu(partial(check, hashed=True))
        assert ok, why
        probe = partial(audit_probe, verifier, decoded.audit, batch, 3e-3, r + 1)
        (ok, why), t_probe = _cpu(probe)
        assert ok, why
        rows.append(
            {
                "plain_s": t_plain,
                "audited_s": t_audit,
                "recording_s": trail.cpu_s,
                "audit_s": t_check,
                "probe_s": t_probe,
                "fetched_bytes": sum(len(served[x]) for x in need),
                "served_bytes": sum(len(b) for b in served.values()),
            }
        )
        print(
            f"round {r + 1}: plain {t_plain:.3f} s, recording {t_audit:.3f} s "
            f"(its trail {trail.cpu_s:.3f} s), audit of step {link} + encode {t_check:.3f} s",
            file=sys.stderr,
        )
    audited.discard_trail()
    if spool is not None:
        spool.cleanup()
    med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
    audits_per_client = 3 * args.percent / 100
    return {
        "inner_steps": h,
        "samples_per_step": args.batch,
        "params": sum(p.numel() for p in plain.params),
        "rounds": args.rounds,
        "recorded_into": "memory"
        if args.in_memory
        else "new files"
        if args.new_files
        else "the files of the chain before",
        "median": med,
        "recording_over_plain": med["audited_s"] / med["plain_s"],
        "recording_share": med["recording_s"] / med["plain_s"],
        "audit_over_plain": med["audit_s"] / med["plain_s"],
        "percent": args.percent,
        "verifier_share_per_round": audits_per_client * med["audit_s"] / med["plain_s"],
        "fetched_bytes_per_param": med["fetched_bytes"] / sum(p.numel() for p in plain.params),
        "probe_over_plain": med["probe_s"] / med["plain_s"],
        "payload_bytes": audited.payload_bytes,
        "probe_bytes": audited.format.probe_bytes,
        "result_bytes": audited.format.max_bytes,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    res = run(args)
    m = res["median"]
    print(
        f"H = {res['inner_steps']}, {res['samples_per_step']} samples per step, "
        f"{res['params']:,} parameters, {res['rounds']} rounds (medians, CPU s, 1 thread), "
        f"the chain recorded into {res['recorded_into']}"
    )
    total = res["recording_share"] + res["verifier_share_per_round"]
    print(
        "| plain round | recording round | ratio | the trail's own CPU / plain "
        "| audit (step + encode) | audit / round "
        f"| verifier share at {res['percent']} % | recording + verifier "
        "| fetched per audit | served per round |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {m['plain_s']:.3f} | {m['audited_s']:.3f} | {res['recording_over_plain']:.2f} "
        f"| {100 * res['recording_share']:.1f} % "
        f"| {m['audit_s']:.3f} | {res['audit_over_plain']:.2f} "
        f"| {100 * res['verifier_share_per_round']:.1f} % | {100 * total:.1f} % "
        f"| {m['fetched_bytes'] / 1e6:.1f} MB ({res['fetched_bytes_per_param']:.0f} B/param) "
        f"| {m['served_bytes'] / 1e6:.1f} MB |"
    )
    print(
        f"probe of inner step 0 (checked when the states do not come): {m['probe_s']:.3f} s "
        f"({res['probe_over_plain']:.2f} of a plain round, nothing fetched); "
        f"{res['probe_bytes']:,} bytes of a {res['result_bytes']:,}-byte result "
        f"(payload {res['payload_bytes']:,})"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
