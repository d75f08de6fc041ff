"""Generate the shared test vectors for the byte-exact protocol primitives.

The JSON files in ``tests/vectors/primitives/`` are the contract between the Python package and
the Rust program: both replay them, and ``tests/unit/protocol/test_vectors_primitives.py`` fails
when the committed files differ from what this script produces. Regenerate after an intentional
change with::

    .venv/bin/python tests/vectors/gen_primitives.py

Every input is fixed (seeds derived from SHA-256 of ASCII labels), so the output is identical on
every machine. Encoding: bytes as lowercase hex strings, u64 as JSON integers.
"""

from __future__ import annotations

import json
from pathlib import Path

from psyche.protocol.bloom import Bloom
from psyche.protocol.commitment import Commitment, make_commitment, sha256, sha256v
from psyche.protocol.committee import CommitteeSelection, CommitteeSelectionError
from psyche.protocol.data_selection import BatchId, assign_data_for_state, get_batch_ids_for_round
from psyche.protocol.identity import NodeIdentity, SecretKey
from psyche.protocol.shuffle import Lcg, compute_shuffled_index, deterministic_shuffle

OUT_DIR = Path(__file__).resolve().parent / "primitives"
U64_MAX = (1 << 64) - 1


def label(text: str) -> bytes:
    return sha256(text.encode("ascii"))


def dumps(obj: object) -> str:
    return json.dumps(obj, indent=1, sort_keys=True) + "\n"


def swap_or_not() -> dict[str, object]:
    seeds = [bytes(32), b"\xff" * 32] + [label(f"psyche swap-or-not {i}") for i in range(6)]
    sizes = [1, 2, 3, 7, 100, 256, 1000, (1 << 32) + 5, 1 << 40, U64_MAX]
    cases = []
    for seed in seeds:
        for n in sizes:
            for index in sorted({0, n // 2, n - 1}):
                result = compute_shuffled_index(index, n, seed)
                cases.append({"seed": seed.hex(), "n": n, "index": index, "result": result})
    permutations = []
    for seed in seeds[:4]:
        for n in (1, 5, 17, 64):
            perm = [compute_shuffled_index(i, n, seed) for i in range(n)]
            permutations.append({"seed": seed.hex(), "n": n, "positions": perm})
    return {"rounds": 90, "cases": cases, "permutations": permutations}


def lcg() -> dict[str, object]:
    cases = []
    for seed in (0, 1, 42, 1 << 63, U64_MAX, 0x0123456789ABCDEF):
        rng = Lcg(seed)
        cases.append({"seed": seed, "outputs": [rng.next() for _ in range(12)]})
    return {"cases": cases}


def shuffle_cases() -> dict[str, object]:
    cases = []
    for seed in (0, 1, 42, U64_MAX, 0xFEEDFACECAFEBEEF):
        for n in (0, 1, 2, 3, 10, 37):
            items = list(range(n))
            cases.append(
                {"seed": seed, "items": items, "result": deterministic_shuffle(items, seed)}
            )
    return {"cases": cases}


def committee_selection() -> dict[str, object]:
    # (tie_breaker_nodes, witness_nodes, verification_percent, total_nodes, seed)
    configs = [
        (0, 0, 0, 0, 9),
        (0, 0, 0, 1, 0),
        (0, 0, 0, 5, 1),
        (0, 3, 0, 10, 42),
        (0, 0, 0, 40, 7),
        (2, 4, 50, 20, 123456789),
        (1, 0, 100, 9, U64_MAX),
        (3, 3, 33, 3, 5),
        (0, 16, 0, 64, 0xDEADBEEF),
        (0, 0, 0, 256, 1 << 63),
    ]
    cases = []
    for tb, wn, vp, total, seed in configs:
        sel = CommitteeSelection(
            tie_breaker_nodes=tb,
            witness_nodes=wn,
            verification_percent=vp,
            total_nodes=total,
            seed=seed,
        )
        committee = []
        witness = []
        for i in range(total):
            c = sel.get_committee(i)
            w = sel.get_witness(i)
            committee.append({"committee": int(c.committee), "position": c.position})
            witness.append({"position": w.position, "witness": w.witness})
        seed32 = sha256(seed.to_bytes(8, "little"))
        cases.append(
            {
                "tie_breaker_nodes": tb,
                "witness_nodes": wn,
                "verification_percent": vp,
                "total_nodes": total,
                "seed": seed,
                "verifier_nodes": sel.verifier_nodes,
                "committee_seed": sha256v(seed32, b"committee").hex(),
                "witness_seed": sha256v(seed32, b"witness").hex(),
                "committee": committee,
                "witness": witness,
            }
        )
    errors = []
    for tb, wn, vp, total in ((5, 0, 0, 4), (0, 10, 0, 9), (0, 0, 101, 10)):
        try:
            CommitteeSelection(
                tie_breaker_nodes=tb,
                witness_nodes=wn,
                verification_percent=vp,
                total_nodes=total,
                seed=0,
            )
        except CommitteeSelectionError:
            pass
        else:  # pragma: no cover - generator sanity
            raise AssertionError("expected an invalid committee selection")
        errors.append(
            {
                "tie_breaker_nodes": tb,
                "witness_nodes": wn,
                "verification_percent": vp,
                "total_nodes": total,
            }
        )
    return {"cases": cases, "errors": errors}


def data_assignment() -> dict[str, object]:
    # (n_clients, random_seed, data_index, batch_size, retries)
    configs: list[tuple[int, int, int, int, list[tuple[int, int]]]] = [
        (0, 3, 0, 8, []),
        (1, 0, 0, 1, []),
        (3, 42, 0, 10, []),
        (5, 7, 17, 3, []),
        (7, 11, 5, 0, []),
        (8, 1, 1000, 64, []),
        (16, U64_MAX, 123, 100, []),
        (32, 0xABCDEF, 1 << 40, 256, []),
        # Retried intervals (no lost work): the first k shuffled trainers get them whole.
        (4, 9, 100, 12, [(3, 5), (40, 41)]),
        (3, 5, 50, 10, [(0, 4), (10, 14)]),  # k = n - 1, no fresh samples: one gets nothing
        (2, 77, 7, 5, [(0, 2), (20, 21)]),  # k = n, no fresh samples
        (5, U64_MAX, 1000, 7, [(1, 1)]),
        (9, 123456789, 4096, 20, [(7, 8), (0, 1), (30, 30), (12, 13), (2, 3), (9, 9), (4, 5)]),
    ]
    cases = []
    for n, seed, data_index, batch_size, pairs in configs:
        clients = [NodeIdentity.from_single_key(label(f"psyche client {i}")) for i in range(n)]
        sel = CommitteeSelection(
            tie_breaker_nodes=0, witness_nodes=0, verification_percent=0, total_nodes=n, seed=seed
        )
        retries = [BatchId(a, b) for a, b in pairs]
        assignment = assign_data_for_state(clients, sel, data_index, batch_size, seed, retries)
        cases.append(
            {
                "clients": [c.signer.hex() for c in clients],
                "random_seed": seed,
                "data_index": data_index,
                "batch_size": batch_size,
                "retries": [{"start": b.start, "end": b.end} for b in retries],
                "batch_ids": [
                    {"start": b.start, "end": b.end}
                    for b in get_batch_ids_for_round(data_index, batch_size, n, retries)
                ],
                "assignment": [
                    {"start": b.start, "end": b.end, "signer": node.signer.hex()}
                    for b, node in assignment.items()
                ],
            }
        )
    # Retries that break the preconditions: more than n, more samples than the batch, or one
    # per trainer while fresh samples remain. Both sides refuse them.
    bad: list[tuple[int, int, list[tuple[int, int]]]] = [
        (1, 4, [(0, 0), (1, 1)]),
        (0, 4, [(0, 0)]),
        (3, 2, [(0, 2)]),
        (2, 8, [(0, 1), (2, 3)]),
    ]
    errors = []
    for n, batch_size, pairs in bad:
        try:
            get_batch_ids_for_round(0, batch_size, n, [BatchId(a, b) for a, b in pairs])
        except ValueError:
            pass
        else:
            raise AssertionError(f"retry precondition not enforced: {n, batch_size, pairs}")
        errors.append(
            {
                "n_clients": n,
                "batch_size": batch_size,
                "retries": [{"start": a, "end": b} for a, b in pairs],
            }
        )
    return {
        "selection": {"tie_breaker_nodes": 0, "witness_nodes": 0, "verification_percent": 0},
        "cases": cases,
        "retry_errors": errors,
    }


def bloom() -> dict[str, object]:
    # (seed, number of sha256 items); the last case also covers odd-length raw items.
    configs = [(0, 0), (1, 1), (0xDEADBEEF, 5), (U64_MAX, 64), (12345678901234567890, 256)]
    cases = []
    for seed, count in configs:
        items = [label(f"psyche bloom item {seed} {i}") for i in range(count)]
        if count == 5:
            items += [b"", b"a", b"foobar"]
        f = Bloom(seed)
        for item in items:
            f.add(item)
        probes = items[:8] + [label(f"psyche bloom probe {seed} {i}") for i in range(8)]
        cases.append(
            {
                "seed": seed,
                "keys": list(f.keys),
                "items": [i.hex() for i in items],
                "positions": [list(f.positions(i)) for i in items],
                "words": list(f.words),
                "bytes": f.to_bytes().hex(),
                "probes": [{"item": p.hex(), "contains": f.contains(p)} for p in probes],
            }
        )
    return {"bits": Bloom.BITS, "words": Bloom.WORDS, "keys": Bloom.KEYS, "cases": cases}


def commitments() -> dict[str, object]:
    parts_cases: list[list[bytes]] = [
        [],
        [b""],
        [b"abc"],
        [b"a", b"bc"],
        [label("seed32"), b"committee"],
        [label("seed32"), b"\x07", (3).to_bytes(4, "little")],
        [b"psyche gossip", b"my-run"],
        [bytes(range(256))],
    ]
    sha = [
        {"parts": [p.hex() for p in parts], "digest": sha256v(*parts).hex()}
        for parts in parts_cases
    ]
    seeds = [
        bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"),
        *(label(f"psyche ed25519 {i}") for i in range(3)),
    ]
    messages = [b"", b"abc", label("a data hash"), bytes(range(256)) * 4]
    ed = []
    commits = []
    for seed in seeds:
        key = SecretKey.from_bytes(seed)
        ed.append(
            {
                "seed": seed.hex(),
                "public_key": key.public_key().hex(),
                "signatures": [
                    {"message": m.hex(), "signature": key.sign(m).hex()} for m in messages
                ],
            }
        )
        data_hash = label(f"payload for {seed.hex()}")
        c: Commitment = make_commitment(key, data_hash)
        commits.append(
            {
                "seed": seed.hex(),
                "public_key": key.public_key().hex(),
                "data_hash": data_hash.hex(),
                "commitment": c.to_bytes().hex(),
            }
        )
    return {"sha256v": sha, "ed25519": ed, "commitments": commits}


def build() -> dict[str, object]:
    """File name → JSON-able content of every vector file."""
    return {
        "swap_or_not.json": swap_or_not(),
        "lcg.json": lcg(),
        "deterministic_shuffle.json": shuffle_cases(),
        "committee_selection.json": committee_selection(),
        "data_assignment.json": data_assignment(),
        "bloom.json": bloom(),
        "commitments.json": commitments(),
    }


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name, obj in build().items():
        (OUT_DIR / name).write_text(dumps(obj), encoding="utf-8")
        print(f"wrote {OUT_DIR / name}")


if __name__ == "__main__":
    main()
