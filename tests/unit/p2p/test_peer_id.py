"""Peer ids from ed25519 keys, computed without libp2p (vectors produced by libp2p 0.8.1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from psyche.p2p.peer_id import ENV_SECRET_KEY, peer_id_for, public_key_for, show_identity
from psyche.protocol.identity import SecretKey

# (seed, libp2p's ID.from_pubkey(create_new_key_pair(seed).public_key).to_base58())
VECTORS = [
    (bytes(32), "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"),
    (bytes([1]) * 32, "12D3KooWK99VoVxNE7XzyBwXEzW7xhK7Gpv85r9F3V3fyKSUKPH5"),
    (bytes(range(32)), "12D3KooWA4Xop1JaT3MHxwYMkCepYsv4iPVopMXwCz5iHYdBfeSB"),
]


@pytest.mark.parametrize(("seed", "peer_id"), VECTORS)
def test_peer_id_matches_libp2p_and_round_trips(seed: bytes, peer_id: str) -> None:
    pub = SecretKey.from_bytes(seed).public_key()
    assert peer_id_for(pub) == peer_id
    assert public_key_for(peer_id) == pub


def test_peer_id_is_stable_for_random_keys() -> None:
    for _ in range(20):
        pub = SecretKey.generate().public_key()
        pid = peer_id_for(pub)
        assert pid.startswith("12D3KooW") and len(pid) == 52
        assert peer_id_for(pub) == pid and public_key_for(pid) == pub


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N",  # sha256 multihash (RSA-style) id
        "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXT0",  # '0' is not base58
        "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTNN",  # one character too many
        "1" * 10_000,
    ],
)
def test_public_key_for_rejects_non_ed25519_ids(bad: str) -> None:
    with pytest.raises(ValueError):
        public_key_for(bad)


def test_peer_id_for_rejects_wrong_key_length() -> None:
    with pytest.raises(ValueError):
        peer_id_for(bytes(31))


def test_show_identity_prefers_env_then_file(tmp_path: Path) -> None:
    file_key, env_key = SecretKey.from_bytes(bytes([7]) * 32), SecretKey.from_bytes(bytes(32))
    path = tmp_path / "key"
    file_key.save(path)
    assert show_identity(str(path), {}) == peer_id_for(file_key.public_key())
    env = {ENV_SECRET_KEY: env_key.to_bytes().hex()}
    assert show_identity(str(path), env) == VECTORS[0][1]
    with pytest.raises(ValueError, match="no identity"):
        show_identity(None, {ENV_SECRET_KEY: "  "})


def test_a_members_peer_id_is_encoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every download names each member's peer id: the base58 encoding runs once per key, not
    once per download (issue 38)."""
    import psyche.p2p.peer_id as pid

    calls = []
    real = pid._b58encode
    monkeypatch.setattr(pid, "_b58encode", lambda data: calls.append(data) or real(data))
    pid._peer_id.cache_clear()
    key = bytes(range(32))
    first = pid.peer_id_for(key)
    assert all(pid.peer_id_for(key) == first for _ in range(100))
    assert pid.peer_id_for(bytearray(key)) == first
    assert len(calls) == 1
