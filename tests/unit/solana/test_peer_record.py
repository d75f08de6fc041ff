"""Peer records on the Python side (``psyche.solana.peer_record``): decoding the account
the program writes (and refusing anything else as ``PeerRecordError``), the address rules
mirrored from the program (``programs/psyche-coordinator/src/core/peer_addrs.rs``), the limits
against the IDL's constants, and the two instruction builders.

The records here are the ones the program wrote in ``tests/vectors/solana/peer_records.json``
(``program_scenario.rs``); the SVM test (tests/integration/solana/test_peer_record_svm.py) sends
the instructions to the SBF build.
"""

from __future__ import annotations

import json
import random
from functools import cache
from typing import Any

import pytest
from solders.pubkey import Pubkey

from psyche.solana.idl import IdlCodec
from psyche.solana.instructions import (
    PEER_RECORD_SEED,
    SYSTEM_PROGRAM,
    ProgramClient,
    RunAccounts,
    RunInstructions,
    peer_record_pda,
)
from psyche.solana.peer_record import (
    MAX_PEER_ADDR_LEN,
    MAX_PEER_ADDRS,
    PEER_RECORD_SPACE,
    PeerAddrError,
    PeerRecord,
    PeerRecordError,
    check_peer_addrs,
    decode_peer_record,
)

from .idl_support import IDL_DIR, VECTORS

ADDR = "/ip4/203.0.113.7/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"


@cache
def idl() -> IdlCodec:
    return IdlCodec.load(IDL_DIR / "psyche_coordinator.json")


@cache
def vectors() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((VECTORS / "solana" / "peer_records.json").read_text())
    return doc


def _record_bytes(i: int = 0) -> bytes:
    return bytes.fromhex(vectors()["records"][i]["data"])


def _encode(**fields: Any) -> bytes:
    """A PeerRecord account as the program would lay it out, padded to its allocated size."""
    value = {
        "coordinator_instance": bytes(range(32)),
        "signer": bytes(range(32, 64)),
        "bump": 254,
        "updated_at": 1_700_000_000,
        "updated_slot": 1_000,
        "addrs": [ADDR],
        **fields,
    }
    data = idl().encode_account("PeerRecord", value)
    return data.ljust(PEER_RECORD_SPACE, b"\0")


def _longest(n: int) -> list[str]:
    # Public targets: valid in any run (as program_peer_record.rs's longest_addrs).
    return [f"/ip4/203.0.113.{i}/" + "x" * (MAX_PEER_ADDR_LEN - 17) for i in range(n)]


# --- limits, one place ------------------------------------------------------------------------


def test_limits_are_the_programs() -> None:
    consts = {c["name"]: c for c in idl().idl["constants"]}
    assert int(consts["MAX_PEER_ADDRS"]["value"]) == MAX_PEER_ADDRS
    assert int(consts["MAX_PEER_ADDR_LEN"]["value"]) == MAX_PEER_ADDR_LEN
    assert bytes(json.loads(consts["PEER_RECORD_SEEDS_PREFIX"]["value"])) == PEER_RECORD_SEED
    v = vectors()
    assert (v["max_peer_addrs"], v["max_peer_addr_len"]) == (MAX_PEER_ADDRS, MAX_PEER_ADDR_LEN)
    assert v["space"] == PEER_RECORD_SPACE == 621
    assert v["rent"] == (128 + PEER_RECORD_SPACE) * 6960 == 5_213_040
    # The largest record fills the allocated space exactly.
    assert len(idl().encode_account("PeerRecord", _largest_value())) == PEER_RECORD_SPACE


def _largest_value() -> dict[str, Any]:
    return {
        "coordinator_instance": bytes(32),
        "signer": bytes(32),
        "bump": 255,
        "updated_at": -1,
        "updated_slot": 2**64 - 1,
        "addrs": _longest(MAX_PEER_ADDRS),
    }


# --- decoding ------------------------------------------------------------------------------------


def test_decodes_what_the_program_wrote() -> None:
    for rec in vectors()["records"]:
        data = bytes.fromhex(rec["data"])
        assert data[:8].hex() == rec["discriminator"]
        got = decode_peer_record(idl(), data)
        assert got == PeerRecord(
            coordinator_instance=Pubkey.from_string(rec["coordinator_instance"]),
            signer=Pubkey.from_string(rec["signer"]),
            bump=rec["bump"],
            updated_at=rec["updated_at"],
            updated_slot=rec["updated_slot"],
            addrs=tuple(rec["addrs"]),
        )
        program = Pubkey.from_string(idl().address)
        pda = peer_record_pda(program, got.coordinator_instance, got.signer)
        assert str(pda) == rec["address"]
        assert Pubkey.find_program_address(
            [b"peer", bytes(got.coordinator_instance), bytes(got.signer)], program
        ) == (pda, got.bump)


def test_bytes_after_the_record_are_ignored() -> None:
    # The overwrite with one short address left the first record's second address behind.
    first, second = vectors()["records"]
    data = bytes.fromhex(second["data"])
    used = len(idl().encode_account("PeerRecord", _raw(second)))
    assert data[used:].strip(b"\0"), "the vectors should hold a stale tail"
    assert decode_peer_record(idl(), data).addrs == tuple(second["addrs"])
    assert decode_peer_record(idl(), data[:used].ljust(PEER_RECORD_SPACE, b"\0")) == (
        decode_peer_record(idl(), data)
    )
    assert len(first["addrs"]) > len(second["addrs"])


def _raw(rec: dict[str, Any]) -> dict[str, Any]:
    return {
        "coordinator_instance": bytes(Pubkey.from_string(rec["coordinator_instance"])),
        "signer": bytes(Pubkey.from_string(rec["signer"])),
        "bump": rec["bump"],
        "updated_at": rec["updated_at"],
        "updated_slot": rec["updated_slot"],
        "addrs": rec["addrs"],
    }


def test_round_trip_of_edge_values() -> None:
    for addrs in ([], ["/"], _longest(MAX_PEER_ADDRS)):
        got = decode_peer_record(idl(), _encode(addrs=addrs, updated_at=-5))
        assert got.addrs == tuple(addrs) and got.updated_at == -5
    assert decode_peer_record(idl(), bytearray(_encode())).addrs == (ADDR,)
    assert decode_peer_record(idl(), memoryview(_encode())).bump == 254


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "0 bytes"),
        (_encode()[:-1], "620 bytes"),
        (_encode() + b"\0", "622 bytes"),
        (bytes(PEER_RECORD_SPACE), "discriminator"),
    ],
)
def test_rejects_wrong_size_or_discriminator(data: bytes, match: str) -> None:
    with pytest.raises(PeerRecordError, match=match):
        decode_peer_record(idl(), data)


def test_rejects_another_account_of_the_program() -> None:
    disc = idl().account_discriminators["CoordinatorInstance"]
    with pytest.raises(PeerRecordError, match="discriminator"):
        decode_peer_record(idl(), disc + _encode()[8:])


def test_rejects_garbage_content() -> None:
    disc = idl().account_discriminators["PeerRecord"]
    head = _encode(addrs=[])[: 8 + 81]  # everything up to the addrs count
    cases = {
        "a count past the data": head + (2**32 - 1).to_bytes(4, "little"),
        "a string past the data": head + b"\1\0\0\0" + (10_000).to_bytes(4, "little"),
        "invalid UTF-8": head + b"\1\0\0\0\2\0\0\0/\xff",
        "five addresses": _encode(addrs=["/a"] * 5),
        "an empty address": _encode(addrs=[""]),
        "no leading slash": _encode(addrs=["ip4/1.2.3.4"]),
        "a space": _encode(addrs=["/ip4/1.2.3.4 /tcp/1"]),
        "a 129-byte address": head + b"\1\0\0\0" + (129).to_bytes(4, "little") + b"/" * 129,
    }
    for what, data in cases.items():
        data = data.ljust(PEER_RECORD_SPACE, b"\0")[:PEER_RECORD_SPACE]
        assert data[:8] == disc
        try:
            decode_peer_record(idl(), data)
        except PeerRecordError:
            continue
        raise AssertionError(f"{what}: decoded instead of refused")


def test_random_corruption_is_a_peer_record_error_or_a_valid_record() -> None:
    """Untrusted bytes: whatever they hold, the decoder returns a valid record or raises
    PeerRecordError, never another exception."""
    rng = random.Random(15)
    base = _record_bytes(0)
    outcomes = {"record": 0, "error": 0}
    for _ in range(3000):
        data = bytearray(base)
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(8, len(data))] = rng.randrange(256)
        if rng.random() < 0.2:
            data = bytearray(data[:8]) + bytearray(rng.randbytes(len(data) - 8))
        try:
            rec = decode_peer_record(idl(), bytes(data))
        except PeerRecordError:
            outcomes["error"] += 1
        else:
            check_peer_addrs(rec.addrs, local=True)
            assert 0 <= rec.bump <= 255
            outcomes["record"] += 1
    assert outcomes["record"] and outcomes["error"], outcomes


def test_an_idl_without_peer_records_is_a_clear_error() -> None:
    old = dict(idl().idl)
    old["accounts"] = [a for a in old["accounts"] if a["name"] != "PeerRecord"]
    with pytest.raises(PeerRecordError, match="no PeerRecord"):
        decode_peer_record(IdlCodec(old), _record_bytes())


# --- the address rules, as the program applies them ----------------------------------------------

# (addresses, the program's error or None). The same cases as core/peer_addrs.rs's unit tests and
# the program test (program_peer_record.rs), which sends them to the program.
RULES: list[tuple[list[str], str | None]] = [
    ([], None),
    ([ADDR], None),
    ([ADDR] * MAX_PEER_ADDRS, None),
    (["/"], None),
    (["/!~"], None),
    (["/" + "a" * (MAX_PEER_ADDR_LEN - 1)], None),
    (_longest(MAX_PEER_ADDRS), None),
    ([ADDR] * (MAX_PEER_ADDRS + 1), "TooManyPeerAddrs"),
    ([""] * (MAX_PEER_ADDRS + 1), "TooManyPeerAddrs"),
    ([""], "PeerAddrBadLength"),
    (["/" + "a" * MAX_PEER_ADDR_LEN], "PeerAddrBadLength"),
    (["/" + "é" * 64], "PeerAddrBadLength"),  # 129 bytes: length in bytes, not characters
    (["/ip4/1.2.3.4 /tcp/1"], "PeerAddrNotPrintable"),
    (["/a\tb"], "PeerAddrNotPrintable"),
    (["/a\nb"], "PeerAddrNotPrintable"),
    (["/a\0b"], "PeerAddrNotPrintable"),
    (["/a\x7fb"], "PeerAddrNotPrintable"),
    (["/é"], "PeerAddrNotPrintable"),
    (["a b"], "PeerAddrNotPrintable"),  # the byte rule comes before the slash rule
    (["ip4/1.2.3.4/tcp/1"], "PeerAddrNoLeadingSlash"),
    (["~/x"], "PeerAddrNoLeadingSlash"),
    (["/ok", "x", "/" + "a" * MAX_PEER_ADDR_LEN], "PeerAddrNoLeadingSlash"),  # the first bad one
    (["/ok", "/" + "a" * MAX_PEER_ADDR_LEN, "x"], "PeerAddrBadLength"),
    # Issue 26, finding 5: targets no peer can be at (the program's core/peer_addrs.rs cases).
    (["/ip4/169.254.169.254/tcp/80"], "PeerAddrUnroutable"),
    ([ADDR, "/ip4/255.255.255.255/udp/9"], "PeerAddrUnroutable"),
    (["/ip4/0.1.2.3/tcp/1"], "PeerAddrUnroutable"),
    (["/ip4/240.0.0.1/tcp/1"], "PeerAddrUnroutable"),
    (["/ip4/1.2.3/tcp/1"], "PeerAddrUnroutable"),
    (["/ip4"], "PeerAddrUnroutable"),
    (["/ip6/fe80::1/tcp/1"], "PeerAddrUnroutable"),
    (["/ip6/2001:db8::1%eth0/tcp/1"], "PeerAddrUnroutable"),
    (["/ip6/::ffff:169.254.169.254/tcp/1"], "PeerAddrUnroutable"),
    (["/ip4/169.254.1.1/tcp/1/p2p/x/p2p-circuit"], "PeerAddrUnroutable"),
    (["/ip6/2001:db8::1/tcp/1", "/ip4/203.0.113.7/tcp/4001/p2p/x/p2p-circuit"], None),
    (["/ip4/172.32.0.1/tcp/1", "/ip4/100.128.0.1/tcp/1", "/ip6/fe00::1/tcp/1"], None),
    # A DNS protocol's value is not skipped: the IP after it is still judged.
    (["/dns4/ip4/169.254.169.254/tcp/1"], "PeerAddrUnroutable"),
]

# Loopback, private, CGNAT, unique-local and DNS targets (a relay's included): refused in a public
# run, accepted in a local one (CoordinatorInstance.local_run; program_peer_record.rs's
# local_targets_only_in_a_local_run sends the same kinds).
LOCAL_ONLY: list[list[str]] = [
    ["/ip4/127.0.0.1/tcp/1"],
    ["/ip4/10.0.0.1/tcp/1"],
    ["/ip4/172.16.5.4/tcp/1"],
    ["/ip4/192.168.1.20/tcp/1"],
    ["/ip4/100.64.0.1/tcp/1"],
    ["/ip6/::1/tcp/1"],
    ["/ip6/fd00::7/tcp/1"],
    ["/ip6/fec0::1/tcp/1"],
    ["/ip6/::ffff:192.168.0.1/tcp/1"],
    ["/dns/a.example/tcp/1"],
    ["/dns4/a.example/tcp/1"],
    ["/dns6/a.example/tcp/1"],
    ["/dnsaddr/a.example"],
    [ADDR, "/ip4/127.0.0.1/tcp/4001/p2p/x/p2p-circuit"],
    [ADDR, "/dns4/relay.example/tcp/4001/p2p/x/p2p-circuit"],
]


@pytest.mark.parametrize("local", [False, True])
@pytest.mark.parametrize(("addrs", "error"), RULES)
def test_check_peer_addrs_mirrors_the_program(
    addrs: list[str], error: str | None, local: bool
) -> None:
    if error is None:
        check_peer_addrs(addrs, local=local)
        check_peer_addrs(tuple(addrs), local=local)
        return
    with pytest.raises(PeerAddrError) as e:
        check_peer_addrs(addrs, local=local)
    assert e.value.error == error
    assert isinstance(e.value, ValueError)
    assert error in idl().errors.values(), "the name must be one of the program's errors"


@pytest.mark.parametrize("addrs", LOCAL_ONLY)
def test_local_targets_only_in_a_local_run(addrs: list[str]) -> None:
    check_peer_addrs(addrs, local=True)
    with pytest.raises(PeerAddrError, match="only in a local run") as e:
        check_peer_addrs(addrs, local=False)
    assert e.value.error == "PeerAddrUnroutable"


def test_error_codes_follow_the_existing_ones() -> None:
    codes = {name: code for code, name in idl().errors.items()}
    assert codes["P2PIdentityTaken"] == 6035
    assert {n: codes[n] for _, n in RULES if n} == {
        "TooManyPeerAddrs": 6036,
        "PeerAddrBadLength": 6037,
        "PeerAddrNotPrintable": 6038,
        "PeerAddrNoLeadingSlash": 6039,
        "PeerAddrUnroutable": 6040,
    }


def test_check_peer_addrs_messages_and_types() -> None:
    with pytest.raises(PeerAddrError, match=r"5 peer addresses, at most 4"):
        check_peer_addrs(["/a"] * 5, local=False)
    with pytest.raises(PeerAddrError, match=r"peer address 1 does not start with '/'"):
        check_peer_addrs(["/a", "b"], local=False)
    with pytest.raises(PeerAddrError, match=r"byte 0x20"):
        check_peer_addrs(["/a b"], local=False)
    with pytest.raises(TypeError):
        check_peer_addrs(ADDR, local=False)
    with pytest.raises(TypeError):
        check_peer_addrs([b"/ip4"], local=False)  # type: ignore[list-item]


# --- instructions ------------------------------------------------------------------------------


def test_builders() -> None:
    program = ProgramClient(idl())
    instance, account = Pubkey.new_unique(), Pubkey.new_unique()
    user = Pubkey.new_unique()
    ixs = RunInstructions(program, RunAccounts(instance, account))
    pda = peer_record_pda(program.program_id, instance, user)
    assert ixs.peer_record(user) == pda

    ix = ixs.set_peer_addrs(user, (ADDR, "/ip6/::1/tcp/1"))
    assert ix.program_id == program.program_id
    assert [(m.pubkey, m.is_signer, m.is_writable) for m in ix.accounts] == [
        (user, True, True),
        (instance, False, False),
        (pda, False, True),
        (SYSTEM_PROGRAM, False, False),
    ]
    name, args = idl().decode_instruction(bytes(ix.data))
    assert (name, args) == ("set_peer_addrs", {"params": {"addrs": [ADDR, "/ip6/::1/tcp/1"]}})
    assert idl().decode_instruction(bytes(ixs.set_peer_addrs(user, []).data))[1] == {
        "params": {"addrs": []}
    }
    with pytest.raises(TypeError):
        ixs.set_peer_addrs(user, ADDR)

    ix = ixs.close_peer_record(user)
    assert [(m.pubkey, m.is_signer, m.is_writable) for m in ix.accounts] == [
        (user, True, True),
        (pda, False, True),
    ]
    assert idl().decode_instruction(bytes(ix.data)) == ("close_peer_record", {})
    # Another wallet's record is another address; another run's too.
    assert peer_record_pda(program.program_id, instance, Pubkey.new_unique()) != pda
    assert peer_record_pda(program.program_id, Pubkey.new_unique(), user) != pda
