"""The SparseLoCo audit on the wire (issue 39 item 2): a trainer in a run that verifies appends
its chain's hashes to its payload (the result hash covers them), serves the blobs for two rounds,
and a verifier's audit of any link accepts an honest chain and rejects a free rider's, a blob
that is not the committed one, and a payload that is not the chain's encoding."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import time
from collections.abc import Awaitable
from pathlib import Path

import pytest
import torch

from psyche.daemon.audit_serving import AuditBlobs
from psyche.daemon.sparseloco_checks import audit_link, wanted
from psyche.daemon.sparseloco_verifying import AUDIT_DIGEST, link_of, served, state_bound
from psyche.distro.audit_probe import probe_bytes
from psyche.distro.audit_trailer import (
    AuditCommitments,
    decode_trailer,
    encode_trailer,
    trailer_bytes,
)
from psyche.distro.payload import PayloadError
from psyche.p2p.errors import P2PError
from psyche.p2p.memory import MemoryNetwork, MemoryTransport
from psyche.protocol.identity import SecretKey
from psyche.protocol.optimizers import SparseLoCoOptimizer
from psyche.training import init_model, llama_config
from psyche.training.sparseloco_audit import AuditTrail, state_hash
from psyche.training.sparseloco_trainer import SparseLoCoTrainer

from .helpers import TINY, batch_of

H = 3
LR = 4e-3


def config() -> SparseLoCoOptimizer:
    return SparseLoCoOptimizer(
        betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8, clip_grad_norm=1.0, inner_steps=H,
        outer_lr=0.7, outer_momentum=0.0, topk_chunk=64, topk=2, value_bits=2, error_decay=0.95,
    )  # fmt: skip


def trainer(audit: bool = True) -> SparseLoCoTrainer:
    t = SparseLoCoTrainer(init_model(llama_config(TINY), seed=0), config(), micro_batch_size=2)
    t.set_audit(audit)
    return t


def audited_round(t: SparseLoCoTrainer, batch: torch.Tensor) -> tuple[bytes, AuditTrail]:
    """A warm-up round (moments and error buffers not zero), then the audited one's result."""
    t.train_step(batch_of(7, samples=6), step=1, lr=LR, prev_lr=LR, prev_self_results=None,
                 zero_optim=False)  # fmt: skip
    out = t.train_step(batch, step=2, lr=LR, prev_lr=LR, prev_self_results=None, zero_optim=False)
    assert t.last_trail is not None
    return out.payload, t.last_trail


def blobs_for(trail: AuditTrail, link: int) -> dict[bytes, bytes]:
    """What the trainer serves for an audit of inner step ``link``: every blob it committed to,
    by hash, of which the audit asks :func:`wanted`'s."""
    served = dict(zip(trail.hashes, trail.states, strict=True))
    served.update(zip(trail.error_hashes, trail.errors, strict=True))
    return served


def test_the_trailer_round_trips_and_only_its_canonical_form_decodes() -> None:
    c = AuditCommitments(
        (b"\x01" * 32, b"\x02" * 32), b"\x03" * 32, b"\x04" * 32, b"\x05" * 32, b"p" * 8
    )
    data = encode_trailer(c, 4)
    assert len(data) == trailer_bytes(4, 8) and decode_trailer(data, 4, 8) == c
    assert c.links == 1
    bad = {
        "size": data[:-1],
        "magic": b"XXXX" + data[4:],
        "too few states": data[:4] + b"\x01" + data[5:],
        "too many states": data[:4] + b"\x06" + data[5:],
        "padding": data[: 5 + 64] + b"\x01" + data[5 + 65 :],
    }
    for why, d in bad.items():
        with pytest.raises(PayloadError):
            decode_trailer(d, 4, 8)
        assert why
    with pytest.raises(PayloadError):
        encode_trailer(
            AuditCommitments((b"\x01" * 32,), b"\x03" * 32, b"\x04" * 32, b"\x05" * 32), 4
        )


def test_an_auditing_trainer_commits_to_its_chain_in_the_result() -> None:
    t = trainer()
    payload, trail = audited_round(t, batch_of(1, samples=6))
    probe = probe_bytes(t.shapes)
    assert len(payload) == t.format.max_bytes == t.payload_bytes + trailer_bytes(H, probe)
    decoded = t.format.decode(payload)
    assert decoded.audit is not None
    assert decoded.audit.states == tuple(trail.hashes) and len(trail.hashes) == H + 1
    assert (decoded.audit.error_before, decoded.audit.error_after) == tuple(trail.error_hashes)
    # The fingerprint (copy check) is of what the payload says, the trailer left out.
    plain = dataclasses.replace(decoded, audit=None)
    assert t.format.fingerprint(decoded) == t.format.fingerprint(plain)
    with pytest.raises(PayloadError):
        t.format.decode(payload[: t.payload_bytes])  # a run that verifies needs the trailer
    t.set_audit(False)
    assert t.format.max_bytes == t.payload_bytes
    with pytest.raises(PayloadError):
        t.format.decode(payload)
    out = t.train_step(batch_of(2, samples=6), step=3, lr=LR, prev_lr=LR,
                       prev_self_results=None, zero_optim=False)  # fmt: skip
    assert len(out.payload) == t.payload_bytes and t.last_trail is None


def test_a_smaller_batch_commits_fewer_states() -> None:
    t = trainer()
    payload, trail = audited_round(t, batch_of(1, samples=2))
    audit = t.format.decode(payload).audit
    assert audit is not None and audit.links == 2 and len(trail.hashes) == 3


def test_every_audit_of_an_honest_chain_passes_and_every_one_of_a_free_riders_fails() -> None:
    batch = batch_of(1, samples=6)
    honest, rider, verifier = trainer(), trainer(), trainer()
    payload, trail = audited_round(honest, batch)
    audit = honest.format.decode(payload).audit
    assert audit is not None
    base = payload[: honest.payload_bytes]
    assert audit.links == H
    for link in range(H):
        assert len(wanted(audit, link)) == (4 if link == H - 1 else 5)
        ok, why = audit_link(verifier, link, audit, blobs_for(trail, link), batch, LR, base)
        assert ok, (link, why)

    def half_step(part: torch.Tensor, lr: float, cancel: object) -> float:
        return SparseLoCoTrainer._inner_step(rider, part[: max(1, part.shape[0] // 2)], lr, None)

    rider._inner_step = half_step  # type: ignore[method-assign]
    r_payload, r_trail = audited_round(rider, batch)
    r_audit = rider.format.decode(r_payload).audit
    assert r_audit is not None
    r_base = r_payload[: rider.payload_bytes]
    for link in range(H):
        ok, why = audit_link(verifier, link, r_audit, blobs_for(r_trail, link), batch, LR, r_base)
        # Its encode link holds (the payload is its chain's): the inner step is what fails.
        assert not ok and why.startswith(f"inner step {link} replayed off"), why


def test_a_wrong_blob_start_or_payload_fails_its_link() -> None:
    batch = batch_of(1, samples=6)
    t, verifier = trainer(), trainer()
    payload, trail = audited_round(t, batch)
    audit = t.format.decode(payload).audit
    assert audit is not None
    base = payload[: t.payload_bytes]
    swapped = {**blobs_for(trail, 0), trail.hashes[0]: trail.states[1]}
    ok, why = audit_link(verifier, 0, audit, swapped, batch, LR, base)
    assert not ok and "commitment" in why
    # Another round's payload under this chain: the encode link refuses it.
    other, _ = audited_round(trainer(), batch_of(3, samples=6))
    ok, why = audit_link(
        verifier, 1, audit, blobs_for(trail, 1), batch, LR, other[: t.payload_bytes]
    )
    assert not ok and "encoding" in why
    # A chain that did not start at the round's start weights (S_0 carries none: a verifier
    # takes its own), here a verifier's that differ: the payload is not their encoding.
    kept = verifier.params[0].detach().clone()
    with torch.no_grad():
        verifier.params[0].add_(1.0)
    ok, why = audit_link(verifier, 0, audit, blobs_for(trail, 0), batch, LR, base)
    assert not ok and "encoding" in why
    with torch.no_grad():
        verifier.params[0].copy_(kept)
    # A last state whose moments are not the ones the result commits to after the round.
    other_audit = dataclasses.replace(audit, moments_after=bytes(32))
    ok, why = audit_link(verifier, 1, other_audit, blobs_for(trail, 1), batch, LR, base)
    assert not ok and "moments are not those committed" in why, why
    ok, why = audit_link(verifier, 1, audit, blobs_for(trail, 1), batch, LR, base)
    assert ok, why


def test_every_verifier_of_a_slot_draws_the_same_step_and_every_step_is_drawn() -> None:
    seen = {link_of(bytes([s]) * 32, 3, b"trainer", 4) for s in range(64)}
    assert seen == {0, 1, 2, 3}
    assert link_of(b"s" * 32, 1, b"t", 4) == link_of(b"s" * 32, 1, b"t", 4)


def _server_and_client() -> tuple[MemoryTransport, MemoryTransport]:
    """A trainer's node and a verifier's, on an in-memory network; the verifier may fetch."""
    net = MemoryNetwork()
    server, client = net.node(SecretKey.generate()), net.node(SecretKey.generate())
    client.set_allowed_peers([server.peer_id])
    return server, client


def _made_up_trail(height: int) -> AuditTrail:
    """A chain of 3 states and 2 error buffers whose bytes name ``height`` (distinct per height)."""
    trail = AuditTrail()
    trail.states = [bytes([height, i]) * 16 for i in range(3)]
    trail.errors = [bytes([height, 9]) * 16, bytes([height, 8]) * 16]
    trail.hashes = [state_hash(b) for b in trail.states]
    trail.error_hashes = [state_hash(b) for b in trail.errors]
    return trail


def test_the_trainer_serves_two_rounds_of_chains_and_withdraws_older_ones() -> None:
    async def run() -> None:
        server, client = _server_and_client()
        served = AuditBlobs()
        trails = []
        for height in (1, 2, 3):
            trail = _made_up_trail(height)
            trails.append(trail)
            await served.publish(server, height, trail)
        assert served.rounds == (2, 3)
        got = await client.fetch(
            state_hash(trails[1].states[0]), from_any_of=[server.peer_id],
            max_size=1024, timeout=2.0, digest=AUDIT_DIGEST,
        )  # fmt: skip
        assert got == trails[1].states[0]
        with pytest.raises(P2PError):
            await client.fetch(
                state_hash(trails[0].states[0]), from_any_of=[server.peer_id],
                max_size=1024, timeout=0.5, digest=AUDIT_DIGEST,
            )  # fmt: skip

    asyncio.run(run())


def test_a_chain_stays_whole_while_the_next_two_are_published() -> None:
    """A round's error buffers before it are the previous round's after it (the same blob), so
    withdrawing the older chain must not withdraw them: verifiers still audit the newer chain
    while its trainer publishes the one after it. Before, they got "not found" and the audit
    was left unchecked."""

    async def run() -> None:
        server, client = _server_and_client()
        t, served, trails = trainer(), AuditBlobs(), []
        for height in (1, 2, 3):
            t.train_step(batch_of(height, samples=6), step=height, lr=LR, prev_lr=LR,
                         prev_self_results=None, zero_optim=False)  # fmt: skip
            assert t.last_trail is not None
            trails.append(t.last_trail)
            await served.publish(server, height, t.last_trail)
        audited = trails[1]
        assert audited.errors[0] == trails[0].errors[-1]  # the blob both chains name
        for blob in (*audited.states, *audited.errors):
            got = await client.fetch(
                state_hash(blob), from_any_of=[server.peer_id],
                max_size=len(blob), timeout=2.0, digest=AUDIT_DIGEST,
            )  # fmt: skip
            assert got == blob
        gone = [b for b in trails[0].states if b not in (*audited.states, *trails[2].states)]
        assert gone
        with pytest.raises(P2PError):
            await client.fetch(
                state_hash(gone[0]), from_any_of=[server.peer_id],
                max_size=len(gone[0]), timeout=0.5, digest=AUDIT_DIGEST,
            )  # fmt: skip

    asyncio.run(run())


def test_a_new_epoch_withdraws_the_last_epochs_chains() -> None:
    """Heights restart at 0 each epoch: the chains of the previous epoch's last rounds go when
    two of the new epoch's are served, as any older chain does."""

    async def run() -> None:
        server, client = _server_and_client()
        served, first = AuditBlobs(), {}
        for height in (20, 21, 0, 1):
            trail = _made_up_trail(height)
            first[height] = state_hash(trail.states[0])
            await served.publish(server, height, trail)
        assert served.rounds == (0, 1)
        for height in (0, 1):
            await client.fetch(
                first[height], from_any_of=[server.peer_id], max_size=64, timeout=1.0,
                digest=AUDIT_DIGEST,
            )  # fmt: skip
        for height in (20, 21):
            with pytest.raises(P2PError):
                await client.fetch(
                    first[height], from_any_of=[server.peer_id], max_size=64, timeout=0.5,
                    digest=AUDIT_DIGEST,
                )  # fmt: skip

    asyncio.run(run())


def test_a_trainer_that_denies_its_committed_states_is_told_from_a_slow_one() -> None:
    """A trainer must serve what it committed to: ``served`` is True once every blob came;
    False when by the deadline the trainer denied holding one (served nothing, or only part of
    the chain) or offered blobs larger than a state can be; None when it did not answer in
    time, which a slow link explains as well as a cheat. (Before, every fetch failure left the
    audit unchecked, so a free rider escaped every audit by serving nothing.)"""

    async def run() -> None:
        server, client = _server_and_client()
        trail = _made_up_trail(1)
        blobs = (*trail.states, *trail.errors)
        need = [state_hash(b) for b in blobs]

        def ask(bound: int, within: float) -> Awaitable[bool | None]:
            return served(client, server.peer_id, need, bound, time.monotonic() + within)

        assert await ask(64, 0.6) is False  # nothing served: "not found"
        for b in trail.states:
            await server.serve_known(b, state_hash(b), handoff=False)
        assert await ask(64, 0.6) is False  # the states but not the error buffers
        await AuditBlobs().publish(server, 1, trail)
        assert await ask(len(blobs[0]) - 1, 2.0) is False  # larger than a state can be
        client.stall_fetches = True  # no answer before the deadline
        assert await ask(64, 0.3) is None
        client.stall_fetches = False
        assert await ask(64, 2.0) is True

    asyncio.run(run())


def test_the_state_bound_holds_an_honest_state() -> None:
    t = trainer()
    _, trail = audited_round(t, batch_of(1, samples=6))
    bound = state_bound(tuple(t.shapes))
    assert all(len(s) == bound for s in trail.states[1:])
    assert len(trail.states[0]) < bound  # S_0: its moments alone
    assert all(len(e) < state_bound(tuple(t.shapes)) for e in trail.errors)


def test_the_wire_bench_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/sparseloco_audit_wire.py (figures in bench/README.md) still runs on this code and
    prints its table with the recording's own share and the sum a client pays."""
    path = Path(__file__).resolve().parents[3] / "bench" / "sparseloco_audit_wire.py"
    spec = importlib.util.spec_from_file_location("bench_sparseloco_audit_wire", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--rounds", "2", "--batch", "1", "--seq", "16"]) == 0
    out = capsys.readouterr().out
    assert "the trail's own CPU / plain" in out and "recording + verifier" in out
    *_, row, probe = out.strip().splitlines()
    assert row.startswith("| ") and row.count("%") == 3, row
    assert probe.startswith("probe of inner step 0") and "nothing fetched" in probe, probe
