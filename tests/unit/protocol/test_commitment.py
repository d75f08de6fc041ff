"""SHA-256 helpers and signed payload commitments."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psyche.protocol.commitment import (
    COMMITMENT_LEN,
    Commitment,
    make_commitment,
    sha256,
    sha256v,
    verify_commitment,
)
from psyche.protocol.identity import SecretKey

KEY = SecretKey.from_bytes(bytes(range(32)))
OTHER = SecretKey.from_bytes(bytes(range(1, 33)))
HASH = hashlib.sha256(b"payload").digest()


@pytest.mark.parametrize(
    ("parts", "digest"),
    [
        ((), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ((b"",), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ((b"abc",), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ((b"a", b"bc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        (
            (b"a", b"", b"b", b"c"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        ),
    ],
)
def test_sha256v_is_sha256_of_the_concatenation(parts: tuple[bytes, ...], digest: str) -> None:
    assert sha256v(*parts).hex() == digest
    assert sha256(b"".join(parts)).hex() == digest


@settings(max_examples=50, deadline=None)
@given(parts=st.lists(st.binary(max_size=64), max_size=6))
def test_sha256v_property(parts: list[bytes]) -> None:
    assert sha256v(*parts) == hashlib.sha256(b"".join(parts)).digest()


def test_commitment_round_trips_through_96_bytes() -> None:
    c = make_commitment(KEY, HASH)
    raw = c.to_bytes()
    assert len(raw) == COMMITMENT_LEN == 96
    assert raw[:32] == HASH
    assert raw[32:] == c.signature
    assert Commitment.from_bytes(raw) == c
    assert Commitment.from_bytes(bytearray(raw)) == c  # type: ignore[arg-type]


@pytest.mark.parametrize("length", [0, 32, 95, 97, 128])
def test_commitment_from_bytes_rejects_wrong_length(length: int) -> None:
    with pytest.raises(ValueError, match="96"):
        Commitment.from_bytes(b"\x00" * length)


@pytest.mark.parametrize(
    ("data_hash", "signature", "error"),
    [
        (b"\x00" * 31, b"\x00" * 64, ValueError),
        (b"\x00" * 32, b"\x00" * 63, ValueError),
        (b"\x00" * 33, b"\x00" * 64, ValueError),
        ("00" * 32, b"\x00" * 64, TypeError),
    ],
)
def test_commitment_validates_fields(data_hash: object, signature: object, error: type) -> None:
    with pytest.raises(error):
        Commitment(data_hash=data_hash, signature=signature)  # type: ignore[arg-type]


def test_commitment_is_frozen() -> None:
    c = make_commitment(KEY, HASH)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.data_hash = HASH  # type: ignore[misc]


def test_make_commitment_rejects_non_hash_input() -> None:
    with pytest.raises(ValueError):
        make_commitment(KEY, b"not a 32-byte hash")


def test_commitment_verifies_only_with_the_signing_key() -> None:
    c = make_commitment(KEY, HASH)
    assert verify_commitment(KEY.public_key(), c)
    assert not verify_commitment(OTHER.public_key(), c)


def test_tampered_commitments_fail() -> None:
    c = make_commitment(KEY, HASH)
    other_hash = Commitment(data_hash=sha256(b"other"), signature=c.signature)
    flipped = bytearray(c.signature)
    flipped[10] ^= 0x40
    bad_sig = Commitment(data_hash=c.data_hash, signature=bytes(flipped))
    assert not verify_commitment(KEY.public_key(), other_hash)
    assert not verify_commitment(KEY.public_key(), bad_sig)


@pytest.mark.parametrize("pub", [b"", b"\x00" * 31, b"\xff" * 32, None])
def test_verify_commitment_never_raises_on_bad_keys(pub: object) -> None:
    c = make_commitment(KEY, HASH)
    assert verify_commitment(pub, c) is False  # type: ignore[arg-type]


def test_verify_commitment_rejects_non_commitments() -> None:
    assert verify_commitment(KEY.public_key(), b"\x00" * 96) is False  # type: ignore[arg-type]


def test_commitments_are_deterministic() -> None:
    assert make_commitment(KEY, HASH) == make_commitment(KEY, HASH)
