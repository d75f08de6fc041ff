"""Node identities, ed25519 secret keys, key files and signature verification."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psyche.protocol.identity import (
    NodeIdentity,
    SecretKey,
    secret_key_from_env_or_file,
    verify_signature,
)

KEY_A = bytes(range(32))
KEY_B = bytes(range(1, 33))
KEY_C = b"\xaa" * 32

# RFC 8032 §7.1, tests 1 and 2: (secret seed, public key, message, signature).
RFC8032 = [
    (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bac"
        "c61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e"
        "458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    ),
]


# --- NodeIdentity ------------------------------------------------------------------------


def test_equality_and_hash_use_signer_only() -> None:
    a = NodeIdentity(signer=KEY_A, p2p_identity=KEY_B)
    same_signer = NodeIdentity(signer=KEY_A, p2p_identity=KEY_C)
    other = NodeIdentity(signer=KEY_B, p2p_identity=KEY_B)
    assert a == same_signer
    assert hash(a) == hash(same_signer)
    assert a != other
    assert len({a, same_signer, other}) == 2
    assert {a: 1}[same_signer] == 1


def test_identity_is_not_equal_to_other_types() -> None:
    a = NodeIdentity.from_single_key(KEY_A)
    assert a != KEY_A
    assert a != "x"


def test_from_single_key_uses_the_key_twice() -> None:
    ident = NodeIdentity.from_single_key(KEY_A)
    assert ident.signer == KEY_A
    assert ident.p2p_identity == KEY_A


@pytest.mark.parametrize(
    ("signer", "p2p", "error"),
    [
        (b"\x00" * 31, KEY_A, ValueError),
        (KEY_A, b"\x00" * 33, ValueError),
        (b"", KEY_A, ValueError),
        ("00" * 32, KEY_A, TypeError),
        (KEY_A, None, TypeError),
    ],
)
def test_identity_validates_key_lengths_and_types(signer: object, p2p: object, error: type) -> None:
    with pytest.raises(error):
        NodeIdentity(signer=signer, p2p_identity=p2p)  # type: ignore[arg-type]


def test_identity_normalises_bytes_likes_and_is_frozen() -> None:
    ident = NodeIdentity(signer=bytearray(KEY_A), p2p_identity=memoryview(KEY_B))  # type: ignore[arg-type]
    assert type(ident.signer) is bytes
    assert type(ident.p2p_identity) is bytes
    with pytest.raises(dataclasses.FrozenInstanceError):
        ident.signer = KEY_B  # type: ignore[misc]


def test_identity_hex_is_short_and_repr_is_full() -> None:
    ident = NodeIdentity(signer=KEY_A, p2p_identity=KEY_B)
    assert ident.hex() == "00010203"
    assert KEY_A.hex() in repr(ident)
    assert KEY_B.hex() in repr(ident)


def test_identity_bytes_round_trip() -> None:
    ident = NodeIdentity(signer=KEY_A, p2p_identity=KEY_B)
    raw = ident.to_bytes()
    assert raw == KEY_A + KEY_B
    back = NodeIdentity.from_bytes(raw)
    assert back.signer == KEY_A
    assert back.p2p_identity == KEY_B
    with pytest.raises(ValueError):
        NodeIdentity.from_bytes(raw[:-1])


# --- SecretKey and signatures ------------------------------------------------------------


@pytest.mark.parametrize(("seed", "pub", "msg", "sig"), RFC8032)
def test_rfc8032_vectors(seed: str, pub: str, msg: str, sig: str) -> None:
    key = SecretKey.from_bytes(bytes.fromhex(seed))
    assert key.public_key().hex() == pub
    assert key.sign(bytes.fromhex(msg)).hex() == sig
    assert verify_signature(bytes.fromhex(pub), bytes.fromhex(msg), bytes.fromhex(sig))


def test_generated_keys_differ_and_round_trip() -> None:
    a, b = SecretKey.generate(), SecretKey.generate()
    assert a.public_key() != b.public_key()
    assert len(a.public_key()) == 32
    assert SecretKey.from_bytes(a.to_bytes()).public_key() == a.public_key()
    assert a.node_identity() == NodeIdentity.from_single_key(a.public_key())


@pytest.mark.parametrize("length", [0, 31, 33, 64])
def test_secret_key_needs_32_bytes(length: int) -> None:
    with pytest.raises(ValueError):
        SecretKey.from_bytes(b"\x01" * length)


def test_secret_key_repr_hides_the_secret() -> None:
    key = SecretKey.from_bytes(KEY_A)
    assert KEY_A.hex() not in repr(key)
    assert key.public_key().hex() in repr(key)


@settings(max_examples=25, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32), msg=st.binary(max_size=200))
def test_signatures_round_trip_and_tampering_fails(seed: bytes, msg: bytes) -> None:
    key = SecretKey.from_bytes(seed)
    pub = key.public_key()
    sig = key.sign(msg)
    assert len(sig) == 64
    assert key.sign(msg) == sig  # ed25519 is deterministic
    assert verify_signature(pub, msg, sig)
    assert not verify_signature(pub, msg + b"\x00", sig)
    flipped = bytes([sig[0] ^ 1]) + sig[1:]
    assert not verify_signature(pub, msg, flipped)
    other = SecretKey.from_bytes(bytes([seed[0] ^ 1]) + seed[1:]).public_key()
    assert not verify_signature(other, msg, sig)


@pytest.mark.parametrize(
    ("pub", "msg", "sig"),
    [
        (b"", b"m", b"\x00" * 64),
        (b"\x00" * 31, b"m", b"\x00" * 64),
        (b"\xff" * 32, b"m", b"\x00" * 64),
        (KEY_A, b"m", b""),
        (KEY_A, b"m", b"\x00" * 65),
        (None, b"m", b"\x00" * 64),
        (KEY_A, "not bytes", b"\x00" * 64),
        (KEY_A, b"m", 12345),
    ],
)
def test_verify_signature_never_raises(pub: object, msg: object, sig: object) -> None:
    assert verify_signature(pub, msg, sig) is False  # type: ignore[arg-type]


# --- Key files and the environment -------------------------------------------------------


def test_save_and_load_round_trip_with_private_mode(tmp_path: Path) -> None:
    key = SecretKey.from_bytes(KEY_A)
    path = tmp_path / "id.key"
    path.write_bytes(b"old")
    os.chmod(path, 0o644)
    key.save(path)
    assert path.read_bytes() == KEY_A
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert SecretKey.load(path).public_key() == key.public_key()
    assert SecretKey.load(str(path)).public_key() == key.public_key()


@pytest.mark.parametrize("text", [KEY_A.hex(), KEY_A.hex() + "\n", KEY_A.hex().upper() + "\r\n"])
def test_load_accepts_a_hex_text_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "id.hex"
    path.write_text(text)
    assert SecretKey.load(path).to_bytes() == KEY_A


@pytest.mark.parametrize("content", [b"", b"\x00" * 31, b"\x00" * 33, b"zz" * 32, b"\xff" * 64])
def test_load_rejects_malformed_files(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.key"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"bad\.key"):
        SecretKey.load(path)


def test_env_value_wins_over_file(tmp_path: Path) -> None:
    path = tmp_path / "id.key"
    SecretKey.from_bytes(KEY_B).save(path)
    key = secret_key_from_env_or_file(str(path), KEY_A.hex())
    assert key.to_bytes() == KEY_A


@pytest.mark.parametrize("env_value", [None, "", "   "])
def test_file_used_when_env_absent_or_blank(tmp_path: Path, env_value: str | None) -> None:
    path = tmp_path / "id.key"
    SecretKey.from_bytes(KEY_B).save(path)
    assert secret_key_from_env_or_file(str(path), env_value).to_bytes() == KEY_B


def test_random_key_when_nothing_given() -> None:
    a = secret_key_from_env_or_file(None, None)
    b = secret_key_from_env_or_file(None, "")
    assert a.public_key() != b.public_key()


@pytest.mark.parametrize("env_value", ["abc", "zz" * 32, "00" * 33])
def test_bad_env_hex_raises(env_value: str) -> None:
    with pytest.raises(ValueError):
        secret_key_from_env_or_file(None, env_value)
