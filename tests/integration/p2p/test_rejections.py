"""Rogue peers over real libp2p sockets: every refusal is counted by kind and logged once per
peer and kind, and an honest result still gets through (issue 12, finding 8).

The victim is a real :class:`P2PNode` (with its own host child process) feeding a real
:class:`RoundEngine`'s gossip router; the daemon's view is a simulated first training round whose
clients are the victim, an honest peer and a rogue peer (real keys). Around it:

* the rogue, a client of the epoch, sends bursts of announcements no honest client sends
  (badly signed, stale, future, another client's batch, a bad commitment, a forged
  ``ModelAvailable``), serves wrong bytes under its own result's blob hash and, for a second
  round, a payload that does not match its commitment;
* an outsider, not in the victim's allow-list, sends well-formed announcements;
* a raw libp2p host (``rogue_host.py``) sends oversized gossip, which no ``P2PNode`` can send;
* the honest peer announces its batch and serves the payload, which the victim must fetch.

Before this change every one of these was dropped with no count, and bad announcements logged
one warning per message (a burst of N made N lines).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from psyche.daemon.engine import RoundEngine
from psyche.daemon.epoch import EpochView
from psyche.daemon.kit import ModelKit
from psyche.daemon.parts import client_parts
from psyche.daemon.rounds import RoundState, round_lrs, round_state_for
from psyche.distro import (
    DistroConfig,
    DistroResult,
    Payload,
    PayloadSpec,
    compress,
    encode,
    encode_payload,
    payload_hash,
)
from psyche.distro.result_format import DistroFormat
from psyche.events import EventLog, RejectionsEvent, read_events
from psyche.p2p.messages import (
    Finished,
    ModelAvailable,
    TrainingResult,
    WireCommitment,
    sign_announcement,
)
from psyche.p2p.node import P2PNode
from psyche.p2p.peer_id import peer_id_for
from psyche.protocol.commitment import make_commitment
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import SecretKey
from psyche.protocol.run_file import load_run_config
from support.rounds import first_round
from support.waiting import eventually

pytestmark = pytest.mark.slow

RUN = "rejections-run"
BURST = 10
TINY = Path(__file__).resolve().parents[3] / "config" / "tiny" / "state.toml"
ROGUE_HOST = Path(__file__).with_name("rogue_host.py")
SHAPES = {"b.weight": (4, 6), "a.bias": (8,)}
CFG = DistroConfig(
    compression_decay=0.999, compression_topk=2, compression_chunk=4, quantize_1bit=False
)
SPEC = PayloadSpec.from_model(SHAPES, CFG)
WARNING = re.compile(r"rejected (\w+) from peer (\w+):")


def _payload(step: int, batch: BatchId, seed: int) -> bytes:
    g = torch.Generator().manual_seed(seed)
    results = []
    for name in sorted(SHAPES):
        r = compress(encode(torch.randn(SHAPES[name], generator=g), CFG.compression_chunk), 2)
        results.append(DistroResult(r.idx, r.val.to(torch.bfloat16), r.xshape, r.totalk))
    return encode_payload(Payload(step, batch.start, batch.end, 0, False, tuple(results)))


def _result(
    key: SecretKey,
    step: int,
    batch: BatchId,
    payload: bytes,
    *,
    blob: bytes | None = None,
    commit_with: SecretKey | None = None,
) -> TrainingResult:
    """``key``'s result for ``batch``: the commitment covers ``payload`` (signed by
    ``commit_with``, default ``key``); the blob served is ``blob`` (default ``payload``)."""
    digest = payload_hash(step, batch.start, batch.end, payload)
    blob = payload if blob is None else blob
    return TrainingResult(
        step=step,
        batch_start=batch.start,
        batch_end=batch.end,
        commitment=WireCommitment.of(make_commitment(commit_with or key, digest)),
        blob_hash=hashlib.sha256(blob).digest(),
        blob_size=len(blob),
        nonce=0,
    )


class _Unused:
    """Backend and peer directory: the gossip path under test never calls them."""


def _warnings(lines: list[str]) -> Counter[tuple[str, str]]:
    return Counter(m.groups() for line in lines if (m := WARNING.search(line)))


def test_rogue_peers_are_counted_by_kind_warned_once_each_and_honest_results_still_arrive(
    tmp_path: Path,
    reap_children: list[subprocess.Popen[bytes]],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.WARNING, logger="psyche.daemon")
    names = ("victim", "honest", "rogue", "outsider")
    keys = {n: SecretKey.generate() for n in names}
    flooder = SecretKey.generate()
    peer = {n: peer_id_for(k.public_key()) for n, k in keys.items()}
    peer["flooder"] = peer_id_for(flooder.public_key())
    rc = load_run_config(TINY)
    ids = [keys[n].node_identity() for n in ("victim", "honest", "rogue")]
    coord = first_round(ids, run_id=RUN, config=rc.config, model=rc.model, wait=2)
    state = round_state_for(coord)
    by_client = {who: batch for batch, who in state.assignment.items()}
    honest_batch = by_client[keys["honest"].node_identity()]
    rogue_batch = by_client[keys["rogue"].node_identity()]
    # A second round in the view gives the rogue a second batch to lie about.
    later_batch = BatchId(10_000, 10_009)
    later = RoundState(
        state.height + 1,
        state.step + 1,
        True,
        {later_batch: keys["rogue"].node_identity()},
        round_lrs(coord, state.step + 1, state.height + 1),
    )
    step = state.step

    async def main() -> dict[str, Any]:
        nodes = {n: P2PNode() for n in names}
        await asyncio.gather(*(nodes[n].start(keys[n], run_id=RUN) for n in names))
        victim, honest, rogue, outsider = (nodes[n] for n in names)
        gossip: asyncio.Task[None] | None = None
        try:
            victim.set_allowed_peers([peer["honest"], peer["rogue"], peer["flooder"]])
            for n in ("honest", "rogue", "outsider"):
                nodes[n].set_allowed_peers([peer["victim"]])
                await nodes[n].connect(victim.listen_addrs)
            for n in ("honest", "rogue", "outsider"):
                await nodes[n].wait_for_gossip_peers(1, 30)
            parts = client_parts(
                key=keys["victim"],
                backend=_Unused(),  # type: ignore[arg-type]
                transport=victim,
                load=lambda c, r: None,  # type: ignore[arg-type,return-value]
                events=EventLog(tmp_path / "victim.jsonl", keys["victim"].public_key().hex()),
            )
            daemon = RoundEngine(parts, _Unused())  # type: ignore[arg-type]
            daemon.held.coord = coord
            daemon.held.epoch = EpochView(
                coord.progress.epoch, rounds={state.height: state, later.height: later}
            )
            daemon.held.kit = ModelKit(trainer=None, format=DistroFormat(SPEC), data=None)  # type: ignore[arg-type]
            gossip = asyncio.create_task(daemon.gossip.run())

            # Oversized gossip, from a raw host (a P2PNode refuses to send it).
            proc = subprocess.Popen(
                [
                    sys.executable,
                    str(ROGUE_HOST),
                    "--run-id",
                    RUN,
                    "--key-hex",
                    flooder.to_bytes().hex(),
                    "--connect",
                    victim.listen_addrs[0],
                    "--count",
                    str(BURST),
                    "--size",
                    "5000",
                ],
                stdout=subprocess.PIPE,
            )
            reap_children.append(proc)
            assert proc.stdout is not None
            line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 90)
            assert line.strip() == b"published"

            def count(kind: str) -> int:
                return daemon.rejection_counts().get(kind, 0)

            async def send(
                kind: str, node: P2PNode, signer: SecretKey, payload: Any, n: int = BURST
            ) -> None:
                """Announce ``payload`` ``n`` times, until the victim has counted ``n`` of
                ``kind``. Gossip can be lost in transit (py-libp2p drops RPCs that a peer's
                bounded outbound queue cannot hold; one run on a loaded machine lost part of a
                burst), so a burst that did not arrive whole is sent again: what is under test
                is what a burst costs in counts and log lines, not the transport."""
                for _ in range(3):
                    for _ in range(n):
                        await node.announce(sign_announcement(signer, payload))
                    if await eventually(lambda: count(kind) >= n, 15, interval=0.2):
                        return
                raise AssertionError(f"{kind} never counted: {daemon.rejection_counts()}")

            # The raw host sends its burst once (at least two must arrive to make it a burst).
            assert await eventually(lambda: count("oversized_gossip") >= 2, 30, interval=0.2)
            ok, rk = keys["outsider"], keys["rogue"]
            junk = _payload(step, rogue_batch, seed=9)
            await send("non_member_gossip", outsider, ok, _result(ok, step, rogue_batch, junk))
            foreign = Finished(step=step, warmup=False)
            await send("bad_announcement", rogue, SecretKey.generate(), foreign)
            await send("stale_result", rogue, rk, _result(rk, step - 1, rogue_batch, junk))
            await send("future_result", rogue, rk, _result(rk, step + 50, rogue_batch, junk))
            await send("other_batch", rogue, rk, _result(rk, step, honest_batch, junk))
            offer = ModelAvailable(
                step=step + 98, manifest_hash=bytes(32), manifest_size=9, nonce=0
            )
            await send("forged_model_available", rogue, rk, offer)
            bad_sig = _result(rk, step, rogue_batch, junk, commit_with=SecretKey.generate())
            await send("bad_commitment", rogue, rk, bad_sig)
            # Wrong bytes under the hash of the payload it committed to (a repeat of a result
            # already taken is ignored, so re-sending cannot count twice)...
            forged = tmp_path / "forged.bin"
            forged.write_bytes(bytes(len(junk)))
            rogue.serve_file(forged, blob_hash=hashlib.sha256(junk).digest(), size=len(junk))
            mismatch = _result(rk, step, rogue_batch, junk)
            await send("blob_hash_mismatch", rogue, rk, mismatch, n=1)
            # ...and, for the later round, bytes that match their hash but not the commitment.
            garbage = b"\xff" * len(junk)
            rogue.serve(garbage)
            lie = _result(rk, later.step, later_batch, junk, blob=garbage)
            await send("bad_payload", rogue, rk, lie, n=1)

            honest_payload = _payload(step, honest_batch, seed=1)
            honest.serve(honest_payload)
            hk = keys["honest"]
            good = sign_announcement(hk, _result(hk, step, honest_batch, honest_payload))

            def fetched() -> bool:
                res = state.results.get(honest_batch)
                return res is not None and res.payload is not None

            for _ in range(3):
                await honest.announce(good)
                if await eventually(fetched, 15, interval=0.2):
                    break
            else:
                raise AssertionError("the honest result was never fetched")
            daemon.report_rejections()
            return {
                "counts": daemon.rejection_counts(),
                "honest": state.results[honest_batch].payload,
                "host_pid": victim.pid,
            }
        finally:
            if gossip is not None:
                gossip.cancel()
            for node in nodes.values():
                with contextlib.suppress(Exception):
                    await node.stop()

    out = asyncio.run(main())
    counts = out["counts"]
    assert out["honest"] == _payload(step, honest_batch, seed=1), "the honest result got lost"
    bursts = [
        k for k in counts if k not in ("blob_hash_mismatch", "bad_payload", "oversized_gossip")
    ]
    assert len(bursts) == 7 and all(counts[k] >= BURST for k in bursts), counts
    assert counts["oversized_gossip"] >= 2
    assert counts["blob_hash_mismatch"] == 1 and counts["bad_payload"] == 1

    # One warning per peer and kind, however long the burst: the daemon's in this process...
    daemon_lines = [r.getMessage() for r in caplog.records if r.name == "psyche.daemon"]
    assert _warnings(daemon_lines) == {
        (kind, peer["rogue"]): 1
        for kind in (
            "bad_announcement",
            "stale_result",
            "future_result",
            "other_batch",
            "forged_model_available",
            "bad_commitment",
            "bad_payload",
        )
    }
    # ...and the victim's host process's on the stderr it inherited.
    host = [
        ln for ln in capfd.readouterr().err.splitlines() if f"p2p-host[{out['host_pid']}]" in ln
    ]
    assert _warnings(host) == {
        ("oversized_gossip", peer["flooder"]): 1,
        ("non_member_gossip", peer["outsider"]): 1,
        ("blob_hash_mismatch", peer["rogue"]): 1,
    }
    assert not any(peer["honest"] in ln for ln in [*daemon_lines, *host])

    # The counts reach the event log the testnet summary is built from.
    events = [e for e in read_events(tmp_path / "victim.jsonl") if isinstance(e, RejectionsEvent)]
    assert events and events[-1].counts == counts
