"""The SparseLoCo audit core (issue 39 item 2): a trainer's round leaves a chain of committed
inner states; a verifier replays one link and accepts an honest one (exactly, on the same
kernels), rejects a free rider's, a tampered or malformed blob, and a payload not encoded from
the committed states; the verifier's own weights and inner state are untouched by a replay."""

from __future__ import annotations

import importlib.util
import math
import re
import tempfile
import threading
from pathlib import Path

import blake3
import pytest
import torch

from psyche.protocol.optimizers import SparseLoCoOptimizer
from psyche.training import init_model, llama_config, model_hash
from psyche.training.errors import AuditRecordingError, TrainingCancelled
from psyche.training.sparseloco_audit import (
    ERROR_MAGIC,
    STATE_MAGIC,
    AuditError,
    AuditTrail,
    capture_state,
    decode_error,
    decode_state,
    encode_moments,
    encode_state,
    inner_batches,
    link_for,
    moments_hash,
    replay_encode,
    replay_link,
    state_hash,
)
from psyche.training.sparseloco_trainer import SparseLoCoTrainer

from .helpers import TINY, batch_of

H = 3


def config() -> SparseLoCoOptimizer:
    return SparseLoCoOptimizer(
        betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8, clip_grad_norm=1.0, inner_steps=H,
        outer_lr=0.7, outer_momentum=0.0, topk_chunk=64, topk=2, value_bits=2, error_decay=0.95,
    )  # fmt: skip


def trainer() -> SparseLoCoTrainer:
    return SparseLoCoTrainer(init_model(llama_config(TINY), seed=0), config(), micro_batch_size=2)


def two_rounds(t: SparseLoCoTrainer, batch: torch.Tensor) -> tuple[AuditTrail, bytes]:
    """A warm-up round (so the moments and error buffers are not zero), then the audited one."""
    t.train_round(batch_of(7, samples=6), step=1, lr=4e-3)
    trail = AuditTrail()
    out = t.train_round(batch, step=2, lr=4e-3, trail=trail)
    return trail, out.payload


def states(t: SparseLoCoTrainer, trail: AuditTrail, j: int) -> tuple[dict, dict]:
    shapes = list(t.shapes)
    start = t.params if j == 0 else None
    before = decode_state(trail.states[j], shapes, trail.hashes[j], start=start)
    after = decode_state(trail.states[j + 1], shapes, trail.hashes[j + 1])
    return before, after


def test_an_honest_round_passes_every_link_exactly_and_the_verifier_is_untouched() -> None:
    trainer_, verifier = trainer(), trainer()
    batch = batch_of(1, samples=6)
    trail, payload = two_rounds(trainer_, batch)
    assert len(trail.hashes) == H + 1 and len(trail.error_hashes) == 2
    verifier.train_round(batch_of(9, samples=6), step=1, lr=4e-3)  # its own, different state
    own = capture_state(verifier.params, verifier._inner)
    weights = model_hash(verifier.model)
    parts = inner_batches(batch, H)
    for j in range(H):
        before, after = states(verifier, trail, j)
        verdict = replay_link(verifier, j, before, after, parts[j], 4e-3)
        assert verdict.ok and verdict.weight_error == 0.0 and verdict.moment_error == 0.0
    assert model_hash(verifier.model) == weights
    again = capture_state(verifier.params, verifier._inner)
    assert all(torch.equal(own[k], again[k]) for k in own)
    # S_0 is its moments alone: decoded, its weights are the verifier's (the public start).
    first, second = states(verifier, trail, 0)
    assert all(torch.equal(first[f"w.{i}"], p.detach()) for i, p in enumerate(verifier.params))
    assert not all(torch.equal(second[f"w.{i}"], p.detach()) for i, p in enumerate(verifier.params))
    with pytest.raises(AuditError, match="S_0"):
        decode_state(trail.states[1], list(verifier.shapes), start=verifier.params)
    numels = [int(torch.tensor(s).prod()) for s in verifier.shapes]
    last = decode_state(trail.states[H], list(verifier.shapes), trail.hashes[H])
    e0 = decode_error(trail.errors[0], numels, trail.error_hashes[0])
    e1 = decode_error(trail.errors[1], numels, trail.error_hashes[1])
    assert replay_encode(verifier, e0, last, payload, e1)


def test_a_free_rider_fails_every_link_it_cheated_on() -> None:
    honest, rider, verifier = trainer(), trainer(), trainer()
    batch = batch_of(1, samples=6)
    two_rounds(honest, batch)
    # It reports the 6-sample batch but trains each inner step on the first sample of it.
    rider.train_round(batch_of(7, samples=6), step=1, lr=4e-3)
    trail = AuditTrail()
    cheap = torch.cat([p[:1].repeat(p.shape[0], 1) for p in inner_batches(batch, H)])
    rider.train_round(cheap, step=2, lr=4e-3, trail=trail)
    parts = inner_batches(batch, H)
    for j in range(H):
        before, after = states(verifier, trail, j)
        verdict = replay_link(verifier, j, before, after, parts[j], 4e-3)
        assert not verdict.ok and verdict.weight_error > 0.1, verdict


def test_a_payload_not_encoded_from_the_committed_states_fails_the_encode_link() -> None:
    t, other, verifier = trainer(), trainer(), trainer()
    trail, _ = two_rounds(t, batch_of(1, samples=6))
    _, foreign = two_rounds(other, batch_of(2, samples=6))
    numels = [int(torch.tensor(s).prod()) for s in verifier.shapes]
    last = decode_state(trail.states[H], list(verifier.shapes))
    e0, e1 = (decode_error(d, numels) for d in trail.errors)
    assert not replay_encode(verifier, e0, last, foreign, e1)
    assert not replay_encode(verifier, e0, last, b"garbage", e1)


def test_tampered_or_malformed_blobs_are_the_trainers_fault() -> None:
    t = trainer()
    trail, _ = two_rounds(t, batch_of(1, samples=6))
    shapes = list(t.shapes)
    state = decode_state(trail.states[1], shapes)
    state["w.0"] = state["w.0"] + 1e-3
    with pytest.raises(AuditError, match="commitment"):
        decode_state(encode_state(state), shapes, trail.hashes[1])
    with pytest.raises(AuditError, match="not a psyche-sparseloco-inner-state-v2 blob"):
        decode_state(b"not a state", shapes)
    blob = encode_state(state)
    for wrong in (blob[:-4], blob + bytes(4), ERROR_MAGIC + blob[len(ERROR_MAGIC) :]):
        with pytest.raises(AuditError, match=f"blob of {len(blob)} bytes"):
            decode_state(wrong, shapes)
    with pytest.raises(AuditError, match="error-buffers-v2 blob"):
        decode_error(blob, [math.prod(s) for s in shapes])
    state["w.0"] = state["w.0"] * float("nan")
    with pytest.raises(AuditError, match="finite"):
        decode_state(encode_state(state), shapes)
    assert state_hash(trail.states[0]) == trail.hashes[0]


def test_a_state_blob_is_its_values_in_canonical_order() -> None:
    """The wire format (docs/protocol.md): the magic, then per parameter w, m, v and the step
    count as little-endian float32; decoding gives back the captured tensors bit for bit."""
    t = trainer()
    t.train_round(batch_of(2, samples=6), step=1, lr=4e-3)
    state = capture_state(t.params, t._inner)
    blob = encode_state(state)
    n = len(t.shapes)
    values = [state[f"{k}.{i}"].reshape(-1) for i in range(n) for k in "wmvt"]
    assert blob == STATE_MAGIC + torch.cat(values).numpy().astype("<f4").tobytes()
    back = decode_state(blob, list(t.shapes))
    assert set(back) == set(state)
    assert all(torch.equal(back[k], state[k]) and back[k].shape == state[k].shape for k in state)


def test_a_round_without_a_trail_is_unchanged_by_auditing() -> None:
    a, b = trainer(), trainer()
    batch = batch_of(3, samples=6)
    pa = a.train_round(batch, step=1, lr=4e-3).payload
    pb = b.train_round(batch, step=1, lr=4e-3, trail=AuditTrail(keep=False)).payload
    assert pa == pb


def test_the_link_is_uniform_and_fixed_by_the_seed() -> None:
    counts = [0] * 4
    for i in range(4000):
        counts[link_for(i.to_bytes(4, "big"), 4)] += 1
    assert link_for(b"seed", 4) == link_for(b"seed", 4)
    assert all(900 < c < 1100 for c in counts), counts
    with pytest.raises(ValueError):
        link_for(b"seed", 0)


def test_recording_without_a_copy_commits_the_same_bytes() -> None:
    """`AuditTrail.record` serializes the live tensors (`copy=False`); the blob is the copied
    state's, and stepping on afterwards leaves the recorded blob as it was."""
    t = trainer()
    t.train_round(batch_of(7, samples=6), step=1, lr=4e-3)  # moments exist
    captured = capture_state(t.params, t._inner)
    copied, moments = encode_state(captured), encode_moments(captured)
    trail = AuditTrail()
    trail.record(t.params, t._inner)  # S_0: its moments alone (its weights are public)
    trail.record(t.params, t._inner, last=True)
    assert trail.states[0] == moments and trail.hashes[0] == state_hash(moments)
    assert trail.states[1] == copied and trail.hashes[1] == state_hash(copied)
    assert trail.moments_after == moments_hash(captured) == state_hash(moments)
    assert state_hash(copied) == blake3.blake3(copied).digest()  # the protocol's commitment
    assert trail.cpu_s > 0.0  # what the wire bench reports as the recording's own cost
    t.train_round(batch_of(8, samples=6), step=2, lr=4e-3)
    assert encode_state(capture_state(t.params, t._inner)) != copied
    assert trail.states[1] == copied


def test_a_spooled_trail_writes_the_blobs_it_commits_to_and_holds_none() -> None:
    """With a ``spool`` directory the trail streams each blob into its own file while hashing
    it: the same commitments as a trail kept in memory, the files hold exactly the committed
    bytes, nothing is held in memory, and ``discard`` deletes what nobody took."""
    with tempfile.TemporaryDirectory() as tmp:
        spool = Path(tmp)
        held, spooled = trainer(), trainer()
        mem, _ = two_rounds(held, batch_of(1, samples=6))
        t = spooled
        t.train_round(batch_of(7, samples=6), step=1, lr=4e-3)
        trail = AuditTrail(spool=spool)
        t.train_round(batch_of(1, samples=6), step=2, lr=4e-3, trail=trail)
        assert trail.hashes == mem.hashes and trail.error_hashes == mem.error_hashes
        assert trail.states == [] and trail.errors == []
        assert set(trail.files) == {*mem.hashes, *mem.error_hashes}
        assert {p.parent for p in trail.files.values()} == {spool}
        for h, blob in mem.kept():
            assert isinstance(blob, bytes) and trail.files[h].read_bytes() == blob
            assert trail.read(h) == blob
        trail.discard()
        assert list(spool.iterdir()) == [] and trail.files == {}


def test_a_trainer_leaves_no_spooled_chain_behind() -> None:
    """A round that fails deletes its spooled blobs at once; a chain nobody took is deleted
    by the next round; a taken one is the taker's."""
    with tempfile.TemporaryDirectory() as tmp:
        spool = Path(tmp)
        t = trainer()
        t.set_audit(True)
        t.audit_spool = spool

        def step(n: int, cancel: threading.Event | None = None) -> None:
            t.train_step(batch_of(n, samples=6), step=n, lr=4e-3, prev_lr=4e-3,
                         prev_self_results=None, zero_optim=False, cancel=cancel)  # fmt: skip

        cancel = threading.Event()
        cancel.set()
        with pytest.raises(TrainingCancelled):
            step(1, cancel)
        assert list(spool.iterdir()) == []
        step(2)
        first = t.last_trail
        assert first is not None and len(list(spool.iterdir())) == H + 3
        step(3)  # the first chain was not taken: deleted
        assert not any(p.exists() for p in first.files.values())
        assert len(list(spool.iterdir())) == H + 3
        taken = t.take_trail()
        assert taken is not None and t.last_trail is None
        step(4)
        assert all(p.exists() for p in taken.files.values())
        assert len(list(spool.iterdir())) == 2 * (H + 3)


def test_a_chain_that_cannot_be_written_drops_the_round_with_one_error() -> None:
    """A blob directory that is gone (or full) is an ``AuditRecordingError`` naming it, which
    the daemon logs as a dropped round; nothing of the round is left behind."""
    with tempfile.TemporaryDirectory() as tmp:
        t = trainer()
        t.set_audit(True)
        t.audit_spool = Path(tmp) / "gone"
        with pytest.raises(AuditRecordingError, match="cannot write the audit chain into"):
            t.train_step(batch_of(1, samples=6), step=1, lr=4e-3, prev_lr=4e-3,
                         prev_self_results=None, zero_optim=False)  # fmt: skip
        assert t.last_trail is None and list(Path(tmp).iterdir()) == []


def test_the_record_bench_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/audit_record.py (its figures are in bench/README.md) still runs on this code."""
    path = Path(__file__).resolve().parents[3] / "bench" / "audit_record.py"
    spec = importlib.util.spec_from_file_location("bench_audit_record", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--repeat", "1"])
    line = capsys.readouterr().out
    parts = ", ".join(rf"{k} [\d.]+" for k in ("capture", "encode", "hash", "record", "decode"))
    assert re.fullmatch(rf"one state of 14\.2 MB, ms \(median of 1\): {parts}\n", line), line
