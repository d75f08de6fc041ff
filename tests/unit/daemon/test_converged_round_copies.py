"""Honest results of one round can all be alike (the first rounds from one model, large batches:
the tiny model's honest pairs share 0.88–0.91 of their choices in the first trained round at 160
samples per client, bench/honest_overlap.py), so the copy check measures a near-duplicate against
a reference result of its round: refused only if it is near its original rather than near every
result of the round (psyche.distro.overlap.CLOSER; docs/protocol.md, "Near-duplicates").
Before, the absolute line (0.75) refused such honest results and the local testnet ejected two
honest clients of four in its first round."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from psyche.coordinator.scripted_clients import sim_identity
from psyche.daemon.copy_check import copied_from, copied_from_reference, settle_copies
from psyche.daemon.rounds import (
    ReceivedResult,
    RoundLRs,
    RoundState,
    Unsettled,
    build_witness,
    result_sketch,
)
from psyche.distro import Distro, DistroResult, Payload, encode_payload
from psyche.distro.overlap import (
    NEAR_DUPLICATE,
    closer_than_reference,
    near_duplicate,
    repeated_tensors,
    signed_overlap,
    tensor_overlaps,
)
from psyche.distro.payload import payload_hash
from psyche.distro.result_format import DistroFormat
from psyche.protocol.committee import WitnessProof
from psyche.protocol.data_selection import BatchId
from psyche.protocol.identity import NodeIdentity
from psyche.training import init_model, llama_config

from ..training.helpers import TINY, batch_of, distro_cfg

LRS = RoundLRs(lr=1e-3, prev_lr=1e-3, zero_optim=False)
STEP = 2


@pytest.fixture(scope="module")
def base() -> tuple[Payload, DistroFormat]:
    model = init_model(llama_config(TINY), seed=0)
    distro = Distro(model.named_parameters(), distro_cfg())
    tokens = batch_of(5, samples=8)
    model(input_ids=tokens, labels=tokens, use_cache=False).loss.backward()
    p = distro.generate(1e-3, 1e-3, None, step=STEP, batch_start=0, batch_end=7)
    return p, DistroFormat(distro.payload_spec)


def flipped(p: Payload, share: float, seed: int, batch: BatchId) -> Payload:
    """``p`` with ``share`` of its value signs flipped, as the result of ``batch``."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for r in p.results:
        val = r.val.clone()
        flip = torch.rand(val.shape, generator=gen) < share
        val[flip] = -val[flip]
        out.append(DistroResult(r.idx, val, r.xshape, r.totalk))
    return dataclasses.replace(p, results=tuple(out), batch_start=batch.start, batch_end=batch.end)


def received(who: NodeIdentity, batch: BatchId, p: Payload, fmt: DistroFormat) -> ReceivedResult:
    data = encode_payload(p, fmt.spec.version)
    digest = payload_hash(STEP, batch.start, batch.end, data)
    return ReceivedResult(who, batch, digest, data, fmt.fingerprint(p))


BATCHES = [BatchId(8 * i, 8 * i + 7) for i in range(5)]
WHO = [sim_identity(i) for i in range(5)]


def converged(base: tuple[Payload, DistroFormat]) -> list[Payload]:
    """Four honest results of one round, each the common direction with 6 % of its signs
    flipped its own way: pairwise signed overlap about 0.88, as measured in a first round."""
    p, _ = base
    return [flipped(p, 0.06, 100 + i, BATCHES[i]) for i in range(4)]


def state_holding(fmt: DistroFormat, held: list[tuple[int, Payload]]) -> RoundState:
    state = RoundState(1, STEP, True, {BATCHES[i]: WHO[i] for i in range(5)}, LRS)
    for i, p in held:
        state.hold(received(WHO[i], BATCHES[i], p, fmt), result_sketch(p, fmt), p)
    return state


def check(
    fmt: DistroFormat, state: RoundState, p: Payload, me: NodeIdentity | None
) -> tuple[ReceivedResult | None, list[ReceivedResult]]:
    """The indexed check and the reference one, which must agree."""
    unsure: list[ReceivedResult] = []
    sk = result_sketch(p, fmt)
    new = copied_from(sk, [state], p, fmt, within=state, me=me, unsure=unsure)
    again: list[ReceivedResult] = []
    old = copied_from_reference(sk.fingerprint, [state], p, fmt, within=state, me=me, unsure=again)
    assert new is old and unsure == again
    return new, unsure


def test_honest_results_of_a_converged_round_are_not_refused(
    base: tuple[Payload, DistroFormat],
) -> None:
    _, fmt = base
    honest = converged(base)
    assert min(signed_overlap(a, b) for a in honest for b in honest if a is not b) > 0.8
    # This client (WHO[0]) holds its own result and the second one; the others arrive.
    state = state_holding(fmt, [(0, honest[0]), (1, honest[1])])
    for i in (2, 3):
        # The absolute line alone (no round to compare with) refuses it: the old check.
        sk = result_sketch(honest[i], fmt)
        assert copied_from(sk, [state], honest[i], fmt) is not None
        assert check(fmt, state, honest[i], WHO[0]) == (None, [])
    # A client that trains nothing this round compares with the first result it held.
    assert check(fmt, state, honest[2], None) == (None, [])


@pytest.mark.parametrize("share", [0.0, 0.02, 0.05])
def test_a_copy_in_a_converged_round_is_still_refused(
    base: tuple[Payload, DistroFormat], share: float
) -> None:
    _, fmt = base
    honest = converged(base)
    state = state_holding(fmt, [(0, honest[0]), (1, honest[1]), (2, honest[2])])
    copy = (
        flipped(honest[1], share, 7, BATCHES[3])
        if share
        else dataclasses.replace(honest[1], batch_start=BATCHES[3].start, batch_end=BATCHES[3].end)
    )
    found, unsure = check(fmt, state, copy, WHO[0])
    assert found is not None and found.batch == BATCHES[1] and unsure == []
    # A copy of this client's own result is measured against another held result.
    mine = flipped(honest[0], share, 8, BATCHES[3])
    found, _ = check(fmt, state, mine, WHO[0])
    assert found is not None and found.batch == BATCHES[0]


def test_without_a_reference_a_near_duplicate_waits_for_the_witness(
    base: tuple[Payload, DistroFormat],
) -> None:
    _, fmt = base
    honest = converged(base)
    copy = flipped(honest[1], 0.02, 9, BATCHES[3])
    # This client trains nothing and holds one result when a near one arrives: it cannot tell.
    for arriving, batch in ((honest[2], BATCHES[2]), (copy, BATCHES[3])):
        state = state_holding(fmt, [(1, honest[1])])
        found, unsure = check(fmt, state, arriving, None)
        assert found is None and [u.batch for u in unsure] == [BATCHES[1]]
        who = WHO[BATCHES.index(batch)]
        state.hold(received(who, batch, arriving, fmt), result_sketch(arriving, fmt), arriving)
        state.unsettled[batch] = Unsettled(unsure[0], STEP, fmt)
        # Nothing more held by the witness: not refused (silence is not evidence).
        kept = dict(state.unsettled)
        assert settle_copies(state, None) == [] and not state.refused
        state.unsettled = kept
        # Once a third result is held, the witness decides.
        state.hold(received(WHO[4], BATCHES[4], honest[3], fmt), result_sketch(honest[3], fmt))
        settled = settle_copies(state, None)
        blooms = build_witness(WitnessProof(0, 0, True), state, bloom_seed=3)
        attested = blooms.broadcast_bloom.contains(state.results[batch].data_hash)
        if arriving is copy:
            assert settled == [(BATCHES[3], BATCHES[1])] and state.refused == {BATCHES[3]}
            assert not attested and batch in state.results  # held for the apply, not attested
        else:
            assert settled == [] and not state.refused and attested
        assert not state.unsettled


def with_tensor_of(p: Payload, source: Payload, n: int, batch: BatchId) -> Payload:
    """``p`` as the result of ``batch``, its tensor ``n`` exactly ``source``'s."""
    res = list(p.results)
    res[n] = source.results[n]
    return dataclasses.replace(p, results=tuple(res), batch_start=batch.start, batch_end=batch.end)


def large_tensor(p: Payload) -> int:
    """A tensor the exact-repeat rule covers (at least ``REPEAT_MIN_TILES`` tiles)."""
    return max(range(len(p.results)), key=lambda n: p.results[n].idx.numel())


def test_an_honest_exact_repeat_of_a_converged_tensor_is_not_refused(
    base: tuple[Payload, DistroFormat],
) -> None:
    """At 440 samples of 128 tokens per client the tiny model's honest results of the first
    trained round shared 0.92–0.94 of their choices, and some pairs chose one large tensor's
    coefficients exactly alike while a third result differed there in a few: the repeat rule
    ("unless the reference repeats it too") refused them, and on the Solana testnet at 440
    samples per client the witnesses' blooms then lacked honest trainers, rounds timed out and
    health checks ejected them. A repeat now counts only where the reference's tensor is not
    near it (``psyche.distro.overlap.repeat_counts``)."""
    p, fmt = base
    honest = [flipped(p, 0.03, 200 + i, BATCHES[i]) for i in range(4)]
    n = large_tensor(p)
    # The second honest result chose tensor n exactly as the first did.
    honest[1] = with_tensor_of(honest[1], honest[0], n, BATCHES[1])
    assert n in repeated_tensors(honest[1], honest[0])
    ref = honest[2]
    assert 0.9 < tensor_overlaps(honest[1], ref)[n] < 1.0
    assert near_duplicate_old(honest[1], honest[0], ref)  # the rule before: refused
    assert not near_duplicate(honest[1], honest[0], ref)
    # Through the client's check: this client (WHO[2]) holds its own result and the first.
    state = state_holding(fmt, [(2, honest[2]), (0, honest[0])])
    assert check(fmt, state, honest[1], WHO[2]) == (None, [])


def test_a_tensor_copied_into_a_round_that_differs_there_is_still_refused(
    base: tuple[Payload, DistroFormat],
) -> None:
    """A result whose own tensor would differ from the round's (the reference's far from it)
    but which carries another result's tensor exactly is still refused: the push on one
    weight matrix, or a partial copy."""
    p, fmt = base
    n = large_tensor(p)
    honest = [flipped(p, 0.03, 300 + i, BATCHES[i]) for i in range(3)]
    # Results that differ on tensor n: each with half of that tensor's signs its own way.
    spread = [with_tensor_of(h, flipped(h, 0.5, 400 + i, BATCHES[i]), n, BATCHES[i])
              for i, h in enumerate(honest)]  # fmt: skip
    copier = with_tensor_of(spread[2], spread[0], n, BATCHES[3])
    ref = spread[1]
    assert tensor_overlaps(copier, ref)[n] < 0.75
    assert near_duplicate(copier, spread[0], ref)
    state = state_holding(fmt, [(1, spread[1]), (0, spread[0])])
    found, _ = check(fmt, state, copier, WHO[1])
    assert found is not None and found.batch == BATCHES[0]


def near_duplicate_old(a: Payload, b: Payload, ref: Payload) -> bool:
    """The repeat rule before 2026-12-04 (with the same overlap rule), for the comparison."""
    o = signed_overlap(a, b)
    if o >= NEAR_DUPLICATE and closer_than_reference(o, signed_overlap(a, ref)):
        return True
    return bool(set(repeated_tensors(a, b)) - set(repeated_tensors(a, ref)))
