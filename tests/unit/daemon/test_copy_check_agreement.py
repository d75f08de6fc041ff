"""The indexed copy check (psyche.daemon.rounds.copied_from over RoundState.copies) decides as the
old compare-with-everything one (copied_from_reference) did, on the cases the copy tests build and
on random near copies at the threshold; and a check's exact work does not grow with the number of
held results (issue 38 item 1)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psyche.coordinator.scripted_clients import sim_identity
from psyche.daemon import copy_check as check_module
from psyche.daemon import rounds as rounds_module
from psyche.daemon.copy_check import copied_from
from psyche.daemon.rounds import ReceivedResult, RoundLRs, RoundState
from psyche.distro import Distro, DistroResult, Payload, decode_payload, encode_payload
from psyche.distro.copy_index import COUNTS
from psyche.distro.overlap import REPEAT_MIN_TILES, near_duplicate, signed_overlap
from psyche.distro.payload import payload_hash
from psyche.distro.result_format import DistroFormat
from psyche.protocol.data_selection import BatchId
from psyche.training import init_model, llama_config

from ..training.helpers import TINY, batch_of, distro_cfg
from .copy_helpers import copied, hold

LRS = RoundLRs(lr=1e-3, prev_lr=1e-3, zero_optim=False)
CLIENTS = 3


@dataclasses.dataclass
class Run:
    fmt: DistroFormat
    sent: list[list[Payload]]
    """Wire-decoded payloads of ``CLIENTS`` honest trainers per round."""

    def states(self, r: int, skip: tuple[int, int] | None = None) -> list[RoundState]:
        """Rounds ``r − 1`` and ``r`` holding every result but ``skip`` (round, client)."""
        return [self.state(h, skip) for h in (r - 1, r)]

    def state(self, h: int, skip: tuple[int, int] | None = None) -> RoundState:
        st = RoundState(height=h, step=h + 1, trains=True, assignment={}, lrs=LRS)
        for i, p in enumerate(self.sent[h]):
            if (h, i) != skip:
                b = BatchId(10 * h + 2 * i, 10 * h + 2 * i + 1)
                data = encode_payload(p, self.fmt.spec.version)
                digest = payload_hash(st.step, b.start, b.end, data)
                fp = self.fmt.fingerprint(p)
                hold(st, ReceivedResult(sim_identity(i), b, digest, data, fp), p, self.fmt)
        return st

    def wire(self, p: Payload) -> Payload:
        """``p`` as a receiver decodes it (the encoder refuses repeated indices)."""
        return decode_payload(encode_payload(p, self.fmt.spec.version), self.fmt.spec)


@pytest.fixture(scope="module")
def run() -> Run:
    torch.manual_seed(0)
    models = [init_model(llama_config(TINY), seed=0) for _ in range(CLIENTS)]
    distros = [Distro(m.named_parameters(), distro_cfg()) for m in models]
    spec = distros[0].payload_spec
    prev: list[Payload | None] = [None] * CLIENTS
    out = []
    for r in range(4):
        sent = []
        for i, (m, d) in enumerate(zip(models, distros, strict=True)):
            tokens = batch_of(100 * r + i)
            m.zero_grad(set_to_none=True)
            m(input_ids=tokens, labels=tokens, use_cache=False).loss.backward()
            made = d.generate(1e-3, 1e-3, prev[i], step=r)
            prev[i] = made
            sent.append(decode_payload(encode_payload(made, spec.version), spec))
        for d in distros:
            d.apply(sent, 1e-3)
        out.append(sent)
    return Run(DistroFormat(spec), out)


def _check(run: Run, p: Payload, states: list[RoundState]) -> ReceivedResult | None:
    return copied(run.fmt.fingerprint(p), states, p, run.fmt)


def _changed(p: Payload, picks: list[int], seed: int) -> Payload:
    """``p`` with the coefficients at the flat positions ``picks`` (over all tensors, in order)
    changed: half sign-flipped, half moved to an index their tile does not use."""
    g = np.random.default_rng(seed)
    out, start = [], 0
    chosen = set(picks)
    for r in p.results:
        idx = r.idx.reshape(-1, r.k).clone()
        val = r.val.reshape(-1, r.k).clone()
        for flat in range(start, start + idx.numel()):
            if flat not in chosen:
                continue
            tile, j = divmod(flat - start, r.k)
            if g.random() < 0.5:
                val[tile, j] = -val[tile, j]
            else:
                # Neither an index the tile uses now nor one it used (that key may be p's).
                used = set(idx[tile].tolist()) | set(r.idx.reshape(-1, r.k)[tile].tolist())
                free = [x for x in g.permutation(r.totalk)[:64].tolist() if x not in used]
                idx[tile, j] = free[0]
        start += idx.numel()
        res = DistroResult(idx.reshape(r.idx.shape), val.reshape(r.val.shape), r.xshape, r.totalk)
        out.append(res)
    return dataclasses.replace(p, results=tuple(out), trainer_nonce=seed)


def _cases(run: Run) -> Iterator[tuple[str, Payload, list[RoundState]]]:
    """What the copy tests build (tests/unit/daemon/test_copy_check.py,
    test_near_copy_check.py, tests/unit/distro/test_overlap.py), as arriving results."""
    for r in (1, 2, 3):
        for i in range(CLIENTS):
            mine = run.sent[r][i]
            others = run.states(r, skip=(r, i))
            yield f"honest {r}/{i}", mine, others
            yield f"replay of own previous {r}/{i}", run.sent[r - 1][i], others
            relabelled = dataclasses.replace(run.sent[r][(i + 1) % CLIENTS], step=9, batch_start=40)
            yield f"relabelled copy {r}/{i}", relabelled, others
            mixed = run.sent[r][i].results[:1] + run.sent[r][(i + 1) % CLIENTS].results[1:]
            yield f"mixed tensors {r}/{i}", dataclasses.replace(mine, results=mixed), others
    a, b = run.sent[2][1], run.sent[3][1]
    held = run.states(3, skip=(3, 1))
    for n, ra in enumerate(a.results):
        pushed = list(b.results)
        pushed[n] = ra
        tiles = ra.idx.numel() // ra.k
        yield (
            f"push tensor {n} ({tiles} tiles)",
            dataclasses.replace(b, results=tuple(pushed)),
            held,
        )
    original = run.sent[2][0]
    total = sum(r.idx.numel() for r in original.results)
    for share in (0.01, 0.1, 0.2, 0.24, 0.26, 0.5):
        picks = np.random.default_rng(3).choice(total, round(share * total), replace=False)
        near = run.wire(_changed(original, sorted(picks.tolist()), 3))
        yield f"perturbed {share}", near, run.states(3)
    flipped = [0]
    for tensor in original.results[:-1]:
        flipped.append(flipped[-1] + tensor.idx.numel())
    yield "one sign per tensor", run.wire(_changed(original, flipped, 0)), run.states(2)


def test_the_checks_agree_on_every_case_the_tests_build(run: Run) -> None:
    caught = {name: _check(run, p, held) is not None for name, p, held in _cases(run)}
    assert not any(v for k, v in caught.items() if k.startswith("honest"))
    # A peer's result with one tensor swapped is no exact copy but a near one.
    assert all(v for k, v in caught.items() if k.startswith(("replay", "relabelled", "mixed")))
    assert all(caught[f"perturbed {share}"] for share in (0.01, 0.1, 0.2, 0.24))
    assert not caught["perturbed 0.26"] and not caught["perturbed 0.5"]
    assert caught["one sign per tensor"]
    big = [k for k in caught if k.startswith("push") and int(k.split("(")[1].split()[0]) >= 4]
    assert big and all(caught[k] for k in big)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    delta=st.integers(-6, 6),
    keep=st.booleans(),
    seed=st.integers(0, 2**16),
    held_round=st.sampled_from([2, 3]),
)
def test_random_near_copies_at_the_threshold(
    run: Run, delta: int, keep: bool, seed: int, held_round: int
) -> None:
    """A held result changed in 25 % of its coefficients ± ``delta`` (just above or below
    0.75), with or without one large tensor left untouched (the repeat rule): both checks
    decide alike, and as the measure says."""
    original = run.sent[2][1]
    sizes = [r.idx.numel() for r in original.results]
    total, starts = sum(sizes), np.cumsum([0, *sizes[:-1]])
    big = [n for n, r in enumerate(original.results) if r.idx.numel() // r.k >= REPEAT_MIN_TILES]
    intact = big[seed % len(big)] if keep else None
    g = np.random.default_rng(seed)
    # One change in every other large tensor, so only ``intact`` can repeat.
    picks = {int(starts[n] + g.integers(sizes[n])) for n in big if n != intact}
    pool = [f for n, s in enumerate(sizes) if n != intact for f in range(starts[n], starts[n] + s)]
    want = total // 4 + delta
    rest = g.permutation([f for f in pool if f not in picks])[: want - len(picks)]
    copy = run.wire(_changed(original, sorted(picks | set(rest.tolist())), seed))
    overlap = signed_overlap(copy, original)
    assert overlap == pytest.approx((total - want) / total)
    expected = overlap >= 0.75 or keep
    assert near_duplicate(copy, original) == expected
    found = _check(run, copy, run.states(held_round))
    assert (found is not None) == expected


@pytest.fixture(scope="module")
def many(run: Run) -> list[Payload]:
    """264 honest-like results: each takes about 30 % of its coefficients from one shared
    result (pairwise signed overlap about 0.1, as honest trainers once training has moved), the
    rest at random."""
    base, g, out = run.sent[3][0], np.random.default_rng(5), []
    for n in range(264):
        results = []
        for r in base.results:
            idx = r.idx.reshape(-1, r.k).clone()
            val = r.val.reshape(-1, r.k).clone()
            for tile in range(idx.shape[0]):
                keep = g.random(r.k) < 0.3
                used = set(idx[tile].tolist())
                sample = g.choice(r.totalk, min(r.totalk, 4 * r.k), replace=False).tolist()
                fresh = [x for x in sample if x not in used]
                for j in range(r.k):
                    if not keep[j]:
                        idx[tile, j] = fresh[j]
                        val[tile, j] = 1.0 if g.random() < 0.5 else -1.0
            shaped = DistroResult(
                idx.reshape(r.idx.shape), val.reshape(r.val.shape), r.xshape, r.totalk
            )
            results.append(shaped)
        out.append(run.wire(dataclasses.replace(base, results=tuple(results), trainer_nonce=n)))
    return out


def _held(run: Run, payloads: list[Payload]) -> list[RoundState]:
    """The previous round and this one, holding ``payloads`` half each."""
    states = [RoundState(height=h, step=h + 1, trains=True, assignment={}, lrs=LRS) for h in (4, 5)]
    for n, p in enumerate(payloads):
        st = states[n % 2]
        b = BatchId(2 * n, 2 * n + 1)
        data = encode_payload(p, run.fmt.spec.version)
        res = ReceivedResult(sim_identity(n), b, payload_hash(st.step, b.start, b.end, data), data)
        hold(st, dataclasses.replace(res, fingerprint=run.fmt.fingerprint(p)), p, run.fmt)
    return states


def test_a_check_decodes_as_many_held_results_at_256_as_at_4(
    run: Run, many: list[Payload], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With K held results, a fresh result's check decodes none of them and a near copy's
    decodes one, at K = 4 as at K = 256; the reference decodes all K."""
    decodes = [0]
    real = check_module.decode_verified

    def counting(*args: object) -> object:
        decodes[0] += 1
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(check_module, "decode_verified", counting)
    fresh_payloads, copies = many[256:], []
    seen = {}
    for k in (4, 256):
        states = _held(run, many[:k])
        near = run.wire(_changed(many[k // 2], list(range(0, 296, 10)), k))
        for name, p in [("fresh", fresh_payloads[k % 8]), ("near", near)]:
            sk = rounds_module.result_sketch(p, run.fmt)
            decodes[0], before = 0, COUNTS.confirmations
            found = copied_from(sk, states, p, run.fmt)
            seen[(k, name)] = (decodes[0], COUNTS.confirmations - before)
            decodes[0] = 0
            reference = check_module.copied_from_reference(sk.fingerprint, states, p, run.fmt)
            assert reference is found
            assert decodes[0] == k or name == "near"  # it stops at the copy's original
        copies.append(found)
    assert seen[(4, "fresh")] == seen[(256, "fresh")] == (0, 0)
    assert seen[(4, "near")] == seen[(256, "near")] == (1, 1)
    assert all(c is not None for c in copies)
