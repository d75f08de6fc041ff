"""A verifier's verdict crosses the centralized backend's wire inside its witness
(docs/protocol.md, "Threat model and result verification")."""

from __future__ import annotations

import msgspec
import pytest

from psyche.backends.centralized.protocol import (
    ProtocolError,
    WitnessMsg,
    decode_client,
    encode,
)
from psyche.coordinator.types import Verdict, Witness, WitnessMetadata
from psyche.protocol.bloom import Bloom
from psyche.protocol.committee import WitnessProof


def _witness(verdict: Verdict) -> Witness:
    return Witness(WitnessProof(1, 2, True), Bloom.empty(7), Bloom.empty(6), verdict)


def test_verdict_survives_the_wire() -> None:
    v = Verdict(checked=0b101, mismatch=0b100)
    msg = decode_client(encode(WitnessMsg.of(_witness(v), WitnessMetadata(step=3))))
    assert isinstance(msg, WitnessMsg)
    w, _ = msg.to_witness()
    assert w.verdict == v


def test_witness_without_verdict_encodes_without_the_fields() -> None:
    raw = encode(WitnessMsg.of(_witness(Verdict()), WitnessMetadata()))
    obj = msgspec.msgpack.decode(raw)
    assert isinstance(obj, dict) and "verdict_checked" not in obj
    assert "verdict_mismatch" not in obj


def test_verdict_out_of_range_is_refused() -> None:
    good = msgspec.msgpack.decode(encode(WitnessMsg.of(_witness(Verdict(1, 1)), WitnessMetadata())))
    good["verdict_checked"] = 1 << 16
    with pytest.raises(ProtocolError):
        decode_client(msgspec.msgpack.encode(good))
