"""Committee and witness selection, and verification of committee and witness proofs."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psyche.protocol.commitment import sha256, sha256v
from psyche.protocol.committee import (
    MAX_WITNESSES,
    Committee,
    CommitteeProof,
    CommitteeSelection,
    CommitteeSelectionError,
    WitnessProof,
)
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.shuffle import compute_shuffled_index

U64_MAX = (1 << 64) - 1


def make(
    total: int, *, tb: int = 0, wn: int = 0, vp: int = 0, seed: int = 1234
) -> CommitteeSelection:
    return CommitteeSelection(
        tie_breaker_nodes=tb,
        witness_nodes=wn,
        verification_percent=vp,
        total_nodes=total,
        seed=seed,
    )


def clients(n: int) -> list[NodeIdentity]:
    return [NodeIdentity.from_single_key(sha256(b"client %d" % i)) for i in range(n)]


def test_committee_enum_values() -> None:
    assert [(c.name, int(c)) for c in Committee] == [
        ("TieBreaker", 0),
        ("Verifier", 1),
        ("Trainer", 2),
    ]
    assert MAX_WITNESSES == 32


@pytest.mark.parametrize(
    ("tb", "wn", "vp", "total", "seed", "message"),
    [
        (5, 0, 0, 4, 0, "tie_breaker_nodes"),
        (0, 10, 0, 9, 0, "witness_nodes"),
        (0, 0, 101, 10, 0, "verification_percent"),
        (1, 0, 0, 0, 0, "tie_breaker_nodes"),
        (0, 1, 0, 0, 0, "witness_nodes"),
        (-1, 0, 0, 4, 0, "tie_breaker_nodes"),
        (0, 0, 0, 4, U64_MAX + 1, "seed"),
        (0, 0, 0, 4, -1, "seed"),
    ],
)
def test_invalid_selections_raise(
    tb: int, wn: int, vp: int, total: int, seed: int, message: str
) -> None:
    with pytest.raises(CommitteeSelectionError, match=message):
        make(total, tb=tb, wn=wn, vp=vp, seed=seed)


def test_selection_error_is_a_value_error() -> None:
    assert issubclass(CommitteeSelectionError, ValueError)


@pytest.mark.parametrize(
    ("total", "tb", "vp", "verifiers"),
    [(10, 0, 0, 0), (10, 0, 50, 5), (10, 2, 50, 4), (9, 0, 33, 2), (7, 7, 100, 0), (3, 0, 100, 3)],
)
def test_verifier_count(total: int, tb: int, vp: int, verifiers: int) -> None:
    assert make(total, tb=tb, vp=vp).verifier_nodes == verifiers


@pytest.mark.parametrize(("total", "tb", "vp"), [(1, 0, 0), (20, 2, 50), (64, 3, 10), (9, 1, 100)])
def test_committee_counts(total: int, tb: int, vp: int) -> None:
    sel = make(total, tb=tb, vp=vp)
    proofs = [sel.get_committee(i) for i in range(total)]
    counts = Counter(p.committee for p in proofs)
    assert counts[Committee.TieBreaker] == tb
    assert counts[Committee.Verifier] == sel.verifier_nodes
    assert counts[Committee.Trainer] == total - tb - sel.verifier_nodes
    assert sorted(p.position for p in proofs) == list(range(total))
    assert [p.index for p in proofs] == list(range(total))


@pytest.mark.parametrize("total", [1, 5, 31, 32, 33, 100, 256])
@pytest.mark.parametrize("wn", [0, 1, 3, None])
def test_witness_count(total: int, wn: int | None) -> None:
    witness_nodes = total if wn is None else min(wn, total)
    sel = make(total, wn=witness_nodes, seed=total)
    proofs = [sel.get_witness(i) for i in range(total)]
    expected = min(total, witness_nodes or MAX_WITNESSES)
    assert sum(p.witness for p in proofs) == expected
    assert all(p.witness == (p.position < expected) for p in proofs)


def test_positions_come_from_the_salted_seeds() -> None:
    seed, total = 987654321, 40
    sel = make(total, seed=seed)
    seed32 = sha256(seed.to_bytes(8, "little"))
    for i in range(total):
        c = compute_shuffled_index(i, total, sha256v(seed32, b"committee"))
        w = compute_shuffled_index(i, total, sha256v(seed32, b"witness"))
        assert sel.get_committee(i).position == c
        assert sel.get_witness(i).position == w


@settings(max_examples=20, deadline=None)
@given(
    total=st.integers(min_value=1, max_value=40),
    seed=st.integers(min_value=0, max_value=U64_MAX),
)
def test_same_seed_same_roles(total: int, seed: int) -> None:
    a, b = make(total, seed=seed, vp=30), make(total, seed=seed, vp=30)
    assert [a.get_committee(i) for i in range(total)] == [b.get_committee(i) for i in range(total)]
    assert [a.get_witness(i) for i in range(total)] == [b.get_witness(i) for i in range(total)]


def test_different_seeds_give_different_witnesses() -> None:
    a, b = make(64, seed=1), make(64, seed=2)
    assert [a.get_witness(i).position for i in range(64)] != [
        b.get_witness(i).position for i in range(64)
    ]


def test_properties() -> None:
    sel = make(20, tb=2, wn=4, vp=50, seed=77)
    assert (sel.total_nodes, sel.tie_breaker_nodes, sel.witness_nodes) == (20, 2, 4)
    assert (sel.verifier_nodes, sel.seed) == (9, 77)
    assert "total_nodes=20" in repr(sel)


@pytest.mark.parametrize("index", [5, 6, -1])
def test_get_out_of_range_index_raises(index: int) -> None:
    sel = make(5)
    with pytest.raises(CommitteeSelectionError):
        sel.get_committee(index)
    with pytest.raises(CommitteeSelectionError):
        sel.get_witness(index)


def test_empty_selection_is_valid_but_has_no_indices() -> None:
    sel = make(0)
    with pytest.raises(CommitteeSelectionError):
        sel.get_committee(0)


def test_proofs_are_frozen() -> None:
    proof = make(3).get_committee(0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        proof.index = 1  # type: ignore[misc]


# --- verification ------------------------------------------------------------------------

N = 12
CLIENTS = clients(N)
SEL = make(N, tb=1, wn=4, vp=20, seed=55)


@pytest.mark.parametrize("index", range(N))
def test_honest_proofs_verify(index: int) -> None:
    me = CLIENTS[index]
    assert SEL.verify_committee(SEL.get_committee(index), me, CLIENTS)
    assert SEL.verify_witness(SEL.get_witness(index), me, CLIENTS)


def test_verification_ignores_p2p_key() -> None:
    me = NodeIdentity(signer=CLIENTS[3].signer, p2p_identity=b"\x01" * 32)
    assert SEL.verify_committee(SEL.get_committee(3), me, CLIENTS)


def _bad_committee_proofs() -> list[tuple[str, CommitteeProof, int]]:
    good = SEL.get_committee(2)
    other_role = next(c for c in Committee if c != good.committee)
    return [
        ("wrong index", dataclasses.replace(good, index=3), 2),
        ("wrong position", dataclasses.replace(good, position=(good.position + 1) % N), 2),
        ("wrong committee", dataclasses.replace(good, committee=other_role), 2),
        ("wrong id", good, 3),
        ("index past clients", dataclasses.replace(good, index=N), 2),
        ("index past u64", dataclasses.replace(good, index=1 << 70), 2),
        ("negative index", dataclasses.replace(good, index=-1), 2),
        ("bool index", dataclasses.replace(good, index=True), 1),
    ]


@pytest.mark.parametrize(("name", "proof", "who"), _bad_committee_proofs())
def test_bad_committee_proofs_are_rejected(name: str, proof: CommitteeProof, who: int) -> None:
    assert not SEL.verify_committee(proof, CLIENTS[who], CLIENTS), name


def _bad_witness_proofs() -> list[tuple[str, WitnessProof, int]]:
    good = SEL.get_witness(4)
    return [
        ("wrong index", dataclasses.replace(good, index=5), 4),
        ("wrong position", dataclasses.replace(good, position=(good.position + 1) % N), 4),
        ("flipped flag", dataclasses.replace(good, witness=not good.witness), 4),
        ("wrong id", good, 5),
        ("index past clients", dataclasses.replace(good, index=N + 3), 4),
        ("negative index", dataclasses.replace(good, index=-2), 4),
    ]


@pytest.mark.parametrize(("name", "proof", "who"), _bad_witness_proofs())
def test_bad_witness_proofs_are_rejected(name: str, proof: WitnessProof, who: int) -> None:
    assert not SEL.verify_witness(proof, CLIENTS[who], CLIENTS), name


def test_verification_with_a_shorter_client_list_is_false() -> None:
    proof = SEL.get_committee(N - 1)
    assert not SEL.verify_committee(proof, CLIENTS[N - 1], CLIENTS[: N - 1])
    assert not SEL.verify_witness(SEL.get_witness(N - 1), CLIENTS[N - 1], [])


def test_verification_when_clients_outnumber_total_nodes_is_false() -> None:
    sel = make(3, seed=9)
    many = clients(5)
    forged = CommitteeProof(Committee.Trainer, 0, 4)
    assert not sel.verify_committee(forged, many[4], many)


def test_verification_rejects_wrong_proof_types() -> None:
    witness = SEL.get_witness(0)
    committee = SEL.get_committee(0)
    assert not SEL.verify_committee(witness, CLIENTS[0], CLIENTS)  # type: ignore[arg-type]
    assert not SEL.verify_witness(committee, CLIENTS[0], CLIENTS)  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(
    total=st.integers(min_value=1, max_value=300),
    tb=st.integers(min_value=0, max_value=3),
    vp=st.sampled_from([0, 25, 100]),
    seed=st.integers(min_value=0, max_value=(1 << 64) - 1),
)
def test_every_committee_at_once_matches_one_at_a_time(
    total: int, tb: int, vp: int, seed: int
) -> None:
    sel = CommitteeSelection(
        tie_breaker_nodes=min(tb, total),
        witness_nodes=0,
        verification_percent=vp,
        total_nodes=total,
        seed=seed,
    )
    assert sel.get_committees(total) == [sel.get_committee(i) for i in range(total)]
    assert sel.get_committees(total // 2) == [sel.get_committee(i) for i in range(total // 2)]
    with pytest.raises(CommitteeSelectionError):
        sel.get_committees(total + 1)
