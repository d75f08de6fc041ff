"""The coordinator account through the committed IDL: size, round trip of every vector state,
error names, decode speed (ours vs anchorpy's coder)."""

from __future__ import annotations

import struct
import time

import pytest

from psyche.coordinator import CoordinatorErrorCode
from psyche.coordinator.state_json import to_obj_state
from psyche.protocol.identity import NodeIdentity
from psyche.solana.layout import ACCOUNT_VERSION, CoordinatorLayout
from psyche.solana.snapshot import AccountLayoutError, RegisteredClient, RunSnapshot

from .idl_support import coordinator_idl, needs_coordinator_idl, vector_states

pytestmark = needs_coordinator_idl


def _snap(coord, nonce: int = 3) -> RunSnapshot:  # type: ignore[no-untyped-def]
    ids = [NodeIdentity(bytes([i]) * 32, bytes([i + 100]) * 32) for i in range(1, 4)]
    return RunSnapshot(
        nonce=nonce,
        coordinator=coord,
        clients=[RegisteredClient(i, 5, earned=7, slashed=0) for i in ids],
        next_active=5,
        client_version="v1.2",
        extra={
            "metadata": {"name": "n", "description": "d", "num_parameters": 9, "vocab_size": 256}
        },
    )


def _f32(obj: object) -> object:
    """The account stores the model's floats as f32 (the Rust type); Python keeps f64."""
    if isinstance(obj, float):
        return struct.unpack("<f", struct.pack("<f", obj))[0]
    if isinstance(obj, dict):
        return {k: _f32(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_f32(v) for v in obj]
    return obj


def test_account_size_matches_the_idl() -> None:
    layout = CoordinatorLayout(coordinator_idl())
    assert layout.size > 100_000  # the ~170 KB zero-copy account, discriminator included


def test_every_vector_state_round_trips() -> None:
    layout = CoordinatorLayout(coordinator_idl())
    states = vector_states()
    assert len(states) > 50
    for name, coord in states:
        data = layout.encode_account(_snap(coord))
        assert len(data) == layout.size, name
        back = layout.decode_account(data)
        assert _f32(to_obj_state(back.coordinator)) == _f32(to_obj_state(coord)), name
        assert back.nonce == 3 and back.next_active == 5 and back.client_version == "v1.2"
        assert [c.id for c in back.clients] == [c.id for c in _snap(coord).clients]
        assert back.extra["metadata"]["vocab_size"] == 256  # type: ignore[index]


def test_wrong_size_discriminator_or_version_is_rejected() -> None:
    layout = CoordinatorLayout(coordinator_idl())
    _, coord = vector_states(1)[0]
    data = layout.encode_account(_snap(coord))
    with pytest.raises(AccountLayoutError, match="bytes"):
        layout.decode_account(data[:-1])
    with pytest.raises(AccountLayoutError, match="discriminator"):
        layout.decode_account(bytes(8) + data[8:])
    with pytest.raises(AccountLayoutError, match="version"):
        layout.decode_account(layout.encode_account(_snap(coord), version=ACCOUNT_VERSION + 1))


def test_every_coordinator_error_has_an_idl_error() -> None:
    names = set(coordinator_idl().errors.values())
    for e in CoordinatorErrorCode:
        assert any(e.name in n for n in names), e.name


def test_decode_speed_ours_and_anchorpys(capsys: pytest.CaptureFixture[str]) -> None:
    idl = coordinator_idl()
    layout = CoordinatorLayout(idl)
    _, coord = max(vector_states(), key=lambda s: len(s[1].epoch_state.clients))
    data = layout.encode_account(_snap(coord))
    t = time.perf_counter()
    for _ in range(5):
        idl.decode_account("CoordinatorAccount", data)
    ours = (time.perf_counter() - t) / 5
    t = time.perf_counter()
    for _ in range(5):
        layout.decode_account(data)
    full = (time.perf_counter() - t) / 5
    line = (
        f"decode {len(data)} B: IDL codec {ours * 1e3:.1f} ms, to Coordinator {full * 1e3:.1f} ms"
    )
    try:
        from anchorpy import AccountsCoder, Idl

        raw = (idl.idl,)[0]
        import json

        coder = AccountsCoder(Idl.from_json(json.dumps(raw)))
        t = time.perf_counter()
        coder.decode(data)
        line += f", anchorpy {(time.perf_counter() - t) * 1e3:.1f} ms"
    except Exception as e:  # anchorpy may not read every IDL; the measurement is informative
        line += f", anchorpy failed: {type(e).__name__}: {str(e)[:80]}"
    with capsys.disabled():
        print("\n" + line)
    assert full < 1.0
