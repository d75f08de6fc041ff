"""One P2P node in its own OS process, driven by JSON lines (test harness, not product code).

Usage: ``python node_runner.py --run-id R --key-hex K``. It starts a :class:`P2PNode` (which
spawns its own libp2p host child) and prints ``{"event": "ready", ...}``. Then each stdin line
``{"id": n, "op": ..., ...}`` gets exactly one stdout reply ``{"id": n, ...}`` (``"error"`` set
on failure); commands run concurrently, so a slow fetch does not block the others. Gossip
received is decoded with :func:`open_announcement` and printed as ``announcement`` events.
Blob contents are derived from a seed (``seeded_blob``) so the test can name a blob without
shipping megabytes through JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from psyche.daemon.resending import Outbox
from psyche.p2p.errors import P2PError
from psyche.p2p.messages import (
    Finished,
    TrainingResult,
    WireCommitment,
    open_announcement,
    sign_announcement,
)
from psyche.p2p.node import P2PNode
from psyche.protocol.commitment import make_commitment
from psyche.protocol.identity import SecretKey


def seeded_blob(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Runner:
    def __init__(self, node: P2PNode, secret: SecretKey) -> None:
        self.node = node
        self.secret = secret
        self.scratch = Path(tempfile.mkdtemp(prefix="p2p-runner-"))
        self.outbox = Outbox()
        self.resender: asyncio.Task[None] | None = None

    async def op_connect(self, addrs: list[str]) -> dict[str, Any]:
        return {"errors": await self.node.connect(addrs)}

    async def op_allow(self, peers: list[str]) -> dict[str, Any]:
        self.node.set_allowed_peers(peers)
        return {}

    async def op_wait_peers(self, n: int, timeout: float) -> dict[str, Any]:
        await self.node.wait_for_gossip_peers(n, timeout)
        return {"gossip_peers": self.node.gossip_peers()}

    async def op_announce(
        self, step: int, foreign: bool = False, resend: bool = False, tell: list[str] | None = None
    ) -> dict[str, Any]:
        # ``foreign`` signs with a key that is not this node's: receivers must reject it.
        # ``resend`` sends it again as a trainer does (the daemon's ``Outbox`` schedule).
        # ``tell``: straight to these peers, not through gossip (``Transport.tell``).
        key = SecretKey.generate() if foreign else self.secret
        blob_hash = hashlib.sha256(step.to_bytes(4, "big")).digest()
        payload = TrainingResult(
            step=step,
            batch_start=step * 10,
            batch_end=step * 10 + 9,
            commitment=WireCommitment.of(make_commitment(key, blob_hash)),
            blob_hash=blob_hash,
            blob_size=123,
            nonce=0,
        )
        data = sign_announcement(key, payload)
        if tell is not None:
            await self.node.tell(tell, data)
            return {"sent_at": time.time()}
        await self.node.announce(data)
        if resend:
            self.outbox.sent_result(data, height=step, now=time.monotonic())
            self.resender = self.resender or asyncio.create_task(self._resend(step))
        return {"sent_at": time.time()}

    async def _resend(self, height: int) -> None:
        while True:
            await asyncio.sleep(0.5)
            for resend in self.outbox.due(now=time.monotonic(), height=height, training=True):
                await self.node.announce(resend.data)

    async def op_announce_finished(self, step: int) -> dict[str, Any]:
        await self.node.announce(sign_announcement(self.secret, Finished(step=step, warmup=True)))
        return {}

    async def op_announce_raw(self, size: int) -> dict[str, Any]:
        await self.node.announce(b"x" * size)
        return {}

    async def op_serve(self, seed: int, size: int) -> dict[str, Any]:
        return {"hash": self.node.serve(seeded_blob(seed, size)).hex()}

    async def op_serve_reported(self, seed: int, size: int) -> dict[str, Any]:
        """Serve blob ``seed`` as a trainer serves its result's payload: its askers reported."""
        return {"hash": self.node.serve(seeded_blob(seed, size), report_askers=True).hex()}

    async def op_askers(self, hash: str) -> dict[str, Any]:
        return {"peers": sorted(self.node.askers(bytes.fromhex(hash)))}

    async def op_serve_known(self, seed: int, size: int) -> dict[str, Any]:
        blob = seeded_blob(seed, size)
        blob_hash = hashlib.sha256(blob).digest()
        await self.node.serve_known(blob, blob_hash, handoff=False)
        return {"hash": blob_hash.hex()}

    async def op_serve_forged(self, hash: str, size: int) -> dict[str, Any]:
        path = self.scratch / f"forged-{hash[:8]}"
        path.write_bytes(os.urandom(size))
        self.node.serve_file(path, blob_hash=bytes.fromhex(hash), size=size)
        return {}

    async def op_serve_fifo(self, seed: int, size: int, prefix: int) -> dict[str, Any]:
        """Serve blob ``seed`` from a pipe that yields its first ``prefix`` bytes, then stalls."""
        data = seeded_blob(seed, size)
        path = self.scratch / f"fifo-{seed}"
        os.mkfifo(path)
        loop = asyncio.get_running_loop()

        def feed() -> None:
            with open(path, "wb") as f:  # blocks until the host opens the pipe for a request
                f.write(data[:prefix])
                f.flush()
                loop.call_soon_threadsafe(emit, {"event": "fifo_written", "bytes": prefix})
                threading.Event().wait()  # keep the pipe open: the reader stalls, no EOF

        threading.Thread(target=feed, daemon=True).start()
        blob_hash = hashlib.sha256(data).digest()
        self.node.serve_file(path, blob_hash=blob_hash, size=size)
        return {"hash": blob_hash.hex()}

    async def op_fetch(
        self,
        hash: str,
        peers: list[str],
        max_size: int,
        timeout: float = 20.0,
        attempt_timeout: float = 10.0,
        reshare: bool = True,
    ) -> dict[str, Any]:
        t0 = time.monotonic()
        try:
            r = await self.node.fetch_detailed(
                bytes.fromhex(hash),
                from_any_of=peers,
                max_size=max_size,
                timeout=timeout,
                attempt_timeout=attempt_timeout,
                reshare=reshare,
            )
        except P2PError as e:
            failures = getattr(e, "failures", [])
            return {
                "ok": False,
                "error_type": type(e).__name__,
                "message": str(e),
                "failures": failures,
                "elapsed": time.monotonic() - t0,
            }
        return {
            "ok": True,
            "from_peer": r.from_peer,
            "sha256": hashlib.sha256(r.data).hexdigest(),
            "failures": r.failures,
            "elapsed": time.monotonic() - t0,
        }

    async def op_info(self) -> dict[str, Any]:
        c = self.node.counters
        return {
            "rss": self.node.memory_rss(),
            "counters": {f: getattr(c, f) for f in c.__struct_fields__},
            "gossip_peers": self.node.gossip_peers(),
            "served": [h.hex() for h in self.node.served()],
            "blob_dir": str(self.node.blob_dir),
        }

    async def handle(self, line: str) -> None:
        req = json.loads(line)
        req_id = req.pop("id")
        op = req.pop("op")
        try:
            result = await getattr(self, f"op_{op}")(**req)
            emit({"id": req_id, **result})
        except Exception as e:
            emit({"id": req_id, "error": f"{type(e).__name__}: {e}"})

    async def watch_gossip(self) -> None:
        async for peer, data in self.node.announcements():
            event: dict[str, Any] = {"event": "announcement", "from": peer, "at": time.time()}
            try:
                ann = open_announcement(data, from_peer=peer)
                event["kind"] = type(ann.payload).__name__
                event["step"] = ann.payload.step
            except P2PError as e:
                event["error"] = str(e)
            emit(event)


async def serve(runner: Runner) -> None:
    """Announce the started node, answer requests from stdin until ``stop`` or EOF, then stop
    the node and remove its scratch directory."""
    node = runner.node
    emit({"event": "ready", "peer_id": node.peer_id, "addrs": node.listen_addrs, "pid": node.pid})
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    gossip = asyncio.create_task(runner.watch_gossip())
    tasks: set[asyncio.Task[None]] = set()
    try:
        while line := await reader.readline():
            if json.loads(line).get("op") == "stop":
                break
            task = asyncio.create_task(runner.handle(line.decode()))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    finally:
        gossip.cancel()
        await node.stop()
        shutil.rmtree(runner.scratch, ignore_errors=True)
    emit({"event": "stopped"})


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--key-hex", required=True)
    args = parser.parse_args()
    secret = SecretKey.from_hex(args.key_hex)
    node = P2PNode()
    await node.start(secret, run_id=args.run_id)
    await serve(Runner(node, secret))


if __name__ == "__main__":
    asyncio.run(main())
