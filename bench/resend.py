"""Late peers: does every host get every round's result when some connect after it went out?

H real hosts (:class:`psyche.p2p.node.P2PNode`, each its own libp2p host process as a client
has; no torch) on 127.0.0.1. All but K form a full mesh; the K *late* hosts are up but connect
only ``--late-s`` seconds after round 1's announcements went out (a slow dial, a relay circuit
still being set up, a reconnect mid-epoch). Each round every host serves one payload and
announces it (a signed ``TrainingResult``); every host fetches every payload it hears of, as
the daemon does. The run is made twice side by side, the announcements **sent once** and then
**resent** on the daemon's schedule (``psyche.daemon.resending.Outbox``: 4, 12 and 28 s after
the first send, while the result can still be witnessed, and not once every other host has
asked for its payload). A round ends when every host holds
every payload of it, or after ``--wait`` seconds.

Reported per mode: payloads of round 1 that some host never got (the late hosts' loss), whether
every later round was complete, the median round time, and what resending costs: gossip
messages delivered per host per round (each host's ``announcements()``; gossipsub delivers
each distinct message once) and host CPU seconds per round (``/proc/PID/stat``).

    .venv/bin/python bench/resend.py                         # 12 hosts, 3 late by 8 s, 3 rounds
    .venv/bin/python bench/resend.py --hosts 16 --late 4 --json resend.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run_mode(args: argparse.Namespace, resend: bool) -> dict[str, Any]:
    from psyche.daemon.resending import Outbox
    from psyche.p2p.messages import (
        TrainingResult,
        WireCommitment,
        open_announcement,
        sign_announcement,
    )
    from psyche.p2p.node import P2PNode
    from psyche.protocol.commitment import make_commitment
    from psyche.protocol.identity import SecretKey

    n, late = args.hosts, args.late
    keys = [SecretKey.generate() for _ in range(n)]
    nodes = [P2PNode() for _ in range(n)]
    for i in range(0, n, 8):
        await asyncio.gather(*(nd.start(k, run_id="resend") for nd, k in
                               zip(nodes[i:i + 8], keys[i:i + 8], strict=True)))  # fmt: skip
    try:
        ids = [nd.peer_id for nd in nodes]
        for nd in nodes:
            nd.set_allowed_peers(p for p in ids if p != nd.peer_id)
        early = nodes[: n - late]
        await asyncio.gather(*(a.connect(b.listen_addrs) for i, a in enumerate(early)
                               for b in early[i + 1:]))  # fmt: skip
        await asyncio.gather(*(nd.wait_for_gossip_peers(min(len(early) - 1, 4), 120)
                               for nd in early))  # fmt: skip
        print(f"  {len(early)} hosts in a mesh; {late} late", file=sys.stderr, flush=True)

        held: dict[tuple[int, int], set[int]] = {}  # (step, producer) -> hosts holding it
        delivered = [0] * n
        started: set[tuple[int, int, int]] = set()  # (fetcher, producer, step)
        tasks: set[asyncio.Task[None]] = set()

        async def fetch(me: int, producer: int, step: int, blob: bytes) -> None:
            others = [ids[producer], *[p for j, p in enumerate(ids) if j not in (me, producer)]]
            try:
                await nodes[me].fetch_detailed(
                    blob, from_any_of=others, max_size=args.size, timeout=120
                )
                held.setdefault((step, producer), set()).add(me)
            except Exception as e:
                print(f"  fetch failed: {e!r}", file=sys.stderr)

        async def consume(me: int) -> None:
            async for peer, data in nodes[me].announcements():
                delivered[me] += 1
                p = open_announcement(data, from_peer=peer).payload
                key = (me, ids.index(peer), p.step)
                if isinstance(p, TrainingResult) and key not in started:
                    started.add(key)  # a repeat of a result already taken: nothing to do
                    t = asyncio.create_task(fetch(me, key[1], p.step, p.blob_hash))
                    tasks.add(t)
                    t.add_done_callback(tasks.discard)

        boxes = [Outbox() for _ in range(n)]
        step_now = 0

        async def resender() -> None:
            while True:
                await asyncio.sleep(0.5)
                for i, box in enumerate(boxes):
                    # As the daemon does: not again once every other host asked for the
                    # payload, and then straight to the hosts that did not.
                    others = frozenset(p for j, p in enumerate(ids) if j != i)
                    due = box.due(
                        now=time.monotonic(), height=step_now, training=True,
                        not_asked=lambda h, nd=nodes[i], o=others: o - nd.askers(h),
                    )  # fmt: skip
                    for r in due:
                        if r.to is None:
                            await nodes[i].announce(r.data)
                        else:
                            await nodes[i].tell(r.to, r.data)

        bg = [asyncio.create_task(consume(i)) for i in range(n)]
        if resend:
            bg.append(asyncio.create_task(resender()))
        cpu0 = [_proc_cpu(nd.pid) for nd in nodes]
        delivered0 = list(delivered)
        rounds: list[dict[str, Any]] = []
        for step in range(1, args.rounds + 1):
            step_now = step
            t = time.monotonic()
            for i, (nd, k) in enumerate(zip(nodes, keys, strict=True)):
                blob = nd.serve(os.urandom(args.size), report_askers=True)
                held[(step, i)] = {i}
                ann = TrainingResult(step=step, batch_start=step, batch_end=step,
                                     commitment=WireCommitment.of(make_commitment(k, blob)),
                                     blob_hash=blob, blob_size=args.size, nonce=0)  # fmt: skip
                data = sign_announcement(k, ann)
                await nd.announce(data)
                boxes[i].sent_result(data, height=step, now=time.monotonic(), blob_hash=blob)
            if step == 1 and late:
                await asyncio.sleep(args.late_s)
                await asyncio.gather(*(nd.connect([a for e in early for a in e.listen_addrs])
                                       for nd in nodes[n - late:]))  # fmt: skip
            deadline = t + args.wait
            while time.monotonic() < deadline:
                if all(len(held[(step, i)]) == n for i in range(n)):
                    break
                await asyncio.sleep(0.1)
            missing = sum(n - len(held[(step, i)]) for i in range(n))
            rounds.append({"step": step, "seconds": time.monotonic() - t, "missing": missing})
            print(f"  round {step}: {rounds[-1]['seconds']:.1f} s, {missing} payload copies "
                  f"missing", file=sys.stderr, flush=True)  # fmt: skip
        cpu = [(_proc_cpu(nd.pid) - c) / args.rounds for nd, c in zip(nodes, cpu0, strict=True)]
        msgs = [(d - d0) / args.rounds for d, d0 in zip(delivered, delivered0, strict=True)]
        for task in [*bg, *tasks]:
            task.cancel()
        secs = sorted(r["seconds"] for r in rounds)
        return {
            "resend": resend,
            "round1_missing": rounds[0]["missing"],
            "later_rounds_complete": all(r["missing"] == 0 for r in rounds[1:]),
            "round_s_median": secs[len(secs) // 2],
            "messages_per_host_round": sum(msgs) / n,
            "host_cpu_s_per_round": sum(cpu) / n,
            "resent": sum(b.resent for b in boxes),
            "rounds": rounds,
        }
    finally:
        await asyncio.gather(*(nd.stop() for nd in nodes), return_exceptions=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=12)
    parser.add_argument("--late", type=int, default=3, help="hosts that connect late")
    parser.add_argument("--late-s", type=float, default=8.0, help="how late, after round 1")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wait", type=float, default=45.0, help="a round's longest wait, s")
    parser.add_argument("--size", type=int, default=5534, help="payload bytes")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if not 0 <= args.late < args.hosts - 1:
        parser.error("--late must leave at least two hosts in the mesh")
    out = {}
    for resend in (False, True):
        print(f"{'resent' if resend else 'sent once'}:", file=sys.stderr, flush=True)
        out["resent" if resend else "sent_once"] = asyncio.run(run_mode(args, resend))
    print(f"\n{args.hosts} hosts, {args.late} connecting {args.late_s:.0f} s after round 1's "
          f"announcements, {args.rounds} rounds")  # fmt: skip
    print("| mode | round 1: payload copies missing | later rounds complete | round s (median) "
          "| gossip messages / host / round | host CPU s / round | resent |")  # fmt: skip
    print("|---|---:|---|---:|---:|---:|---:|")
    for name, r in out.items():
        print(f"| {name.replace('_', ' ')} | {r['round1_missing']} | {r['later_rounds_complete']} "
              f"| {r['round_s_median']:.1f} | {r['messages_per_host_round']:.1f} "
              f"| {r['host_cpu_s_per_round']:.3f} | {r['resent']} |")  # fmt: skip
    a, b = out["sent_once"], out["resent"]
    msgs = b["messages_per_host_round"] / max(a["messages_per_host_round"], 1e-9)
    cpu = b["host_cpu_s_per_round"] / max(a["host_cpu_s_per_round"], 1e-9)
    print(f"resent / sent once: messages {msgs:.2f}×, host CPU {cpu:.2f}×")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
