"""Peer discovery from chain records: what a reader accepts, and what a client publishes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from solders.pubkey import Pubkey

from psyche.backends.solana.discovery import (
    PEER_RECORD_TTL_S,
    ChainDirectory,
    target_refusal,
)
from psyche.p2p.peer_id import peer_id_for
from psyche.protocol.identity import NodeIdentity
from psyche.solana.peer_record import check_peer_addrs, rpcs_are_local

PROGRAM = Pubkey.new_unique()
INSTANCE = Pubkey.new_unique()
NOW = 1_800_000_000


@dataclass(frozen=True)
class Record:
    coordinator_instance: Pubkey
    signer: Pubkey
    updated_at: int
    addrs: tuple[str, ...]


RECORDS: dict[bytes, Record] = {}


def encode(r: Record) -> bytes:
    key = b"R" + bytes(r.signer)
    RECORDS[key] = r
    return key


def decode(data: bytes) -> Record:
    if data not in RECORDS:
        raise ValueError("not a peer record")
    return RECORDS[data]


def pda(wallet: Pubkey) -> Pubkey:
    return Pubkey.find_program_address([b"peer", bytes(INSTANCE), bytes(wallet)], PROGRAM)[0]


def directory(**kw: Any) -> ChainDirectory:
    """A reader in a local run (the addresses below are private) unless ``local=False``."""
    kw.setdefault("local", True)
    return ChainDirectory(
        program_id=PROGRAM,
        instance=INSTANCE,
        record_address=pda,
        decode=decode,
        clock=lambda: NOW,
        **kw,
    )


def member(i: int) -> NodeIdentity:
    key = bytes([i]) * 32
    return NodeIdentity(key, key)


def record(m: NodeIdentity, addrs: tuple[str, ...], **kw: Any) -> Record:
    values: dict[str, Any] = {
        "coordinator_instance": INSTANCE,
        "signer": Pubkey.from_bytes(m.signer),
        "updated_at": NOW - 5,
        "addrs": addrs,
    }
    values.update(kw)
    return Record(**values)


def test_a_good_record_gives_its_owners_addresses() -> None:
    d, m = directory(), member(1)
    got = d.accept(m, PROGRAM, encode(record(m, ("/ip4/10.0.0.1/tcp/4001",))))
    assert got == [f"/ip4/10.0.0.1/tcp/4001/p2p/{peer_id_for(m.p2p_identity)}"]
    assert d.rejected.total() == 0


@pytest.mark.parametrize(
    ("reason", "owner", "change"),
    [
        ("owner", Pubkey.new_unique(), {}),
        ("signer", PROGRAM, {"signer": Pubkey.new_unique()}),
        ("run", PROGRAM, {"coordinator_instance": Pubkey.new_unique()}),
        ("stale", PROGRAM, {"updated_at": NOW - PEER_RECORD_TTL_S - 1}),
    ],
)
def test_forged_or_stale_records_are_rejected(
    reason: str, owner: Pubkey, change: dict[str, Any]
) -> None:
    d, m = directory(), member(2)
    data = encode(record(m, ("/ip4/10.0.0.1/tcp/4001",), **change))
    assert d.accept(m, owner, data) == []
    assert d.rejected == {reason: 1}


def test_undecodable_bytes_are_rejected_not_raised() -> None:
    d = directory()
    assert d.accept(member(3), PROGRAM, b"\x00garbage") == []
    assert d.rejected == {"undecodable": 1}


def test_one_bad_address_drops_only_itself() -> None:
    d, m = directory(), member(4)
    other = peer_id_for(member(5).p2p_identity)
    addrs = (f"/ip4/10.0.0.1/tcp/1/p2p/{other}", "/ip4/10.0.0.1/tcp/2")
    got = d.accept(m, PROGRAM, encode(record(m, addrs)))
    assert got == [f"/ip4/10.0.0.1/tcp/2/p2p/{peer_id_for(m.p2p_identity)}"]
    assert d.rejected == {"address": 1}


class FakeRpc:
    def __init__(self, accounts: dict[Pubkey, tuple[Pubkey, bytes]]) -> None:
        self.accounts = accounts
        self.calls: list[int] = []

    async def get_multiple_accounts(self, keys: list[Pubkey]) -> list[tuple[Pubkey, bytes] | None]:
        assert len(keys) <= 100
        self.calls.append(len(keys))
        return [self.accounts.get(k) for k in keys]


def test_refresh_reads_every_member_in_chunks_and_skips_those_without_a_record() -> None:
    members = [member(i) for i in range(1, 151)]
    accounts = {
        pda(Pubkey.from_bytes(m.signer)): (PROGRAM, encode(record(m, (f"/ip4/10.0.1.{i}/tcp/9",))))
        for i, m in enumerate(members[:120])
    }
    rpc = FakeRpc(accounts)
    d = directory(bootstrap={member(200).p2p_identity: ["/ip4/1.2.3.4/tcp/1/p2p/x"]})
    found = asyncio.run(d.refresh(rpc, members))  # type: ignore[arg-type]
    assert found == 120 and rpc.calls == [100, 50]
    peers = d.peer_addrs()
    assert len(peers) == 121  # the bootstrap peer stays
    assert d.known(members[0].p2p_identity) and not d.known(members[130].p2p_identity)


def test_what_a_client_publishes() -> None:
    d, me = directory(max_addrs=2), member(9)
    pid = peer_id_for(me.p2p_identity)
    relay = peer_id_for(member(8).p2p_identity)
    circuit = f"/ip4/10.0.0.8/tcp/5/p2p/{relay}/p2p-circuit"
    got = d.record_addrs(
        [f"/ip4/192.168.1.2/tcp/4001/p2p/{pid}", f"{circuit}/p2p/{pid}", "/ip4/10.0.0.3/tcp/7"],
        me.p2p_identity,
    )
    # Relayed first (behind a NAT they are what works), at most max_addrs.
    assert got == [circuit, "/ip4/192.168.1.2/tcp/4001"]
    assert d.my_addrs == [f"{circuit}/p2p/{pid}", f"/ip4/192.168.1.2/tcp/4001/p2p/{pid}"]
    long = "/dns4/" + "a" * 130 + "/tcp/1"
    assert directory().record_addrs([long], me.p2p_identity) == []


def test_announced_addresses_come_first() -> None:
    me = member(9)
    d = directory(announce=["/ip4/203.0.113.7/tcp/4001"])
    got = d.record_addrs(["/ip4/192.168.1.2/tcp/4001"], me.p2p_identity)
    assert got == ["/ip4/203.0.113.7/tcp/4001", "/ip4/192.168.1.2/tcp/4001"]


# Issue 26, finding 5: records that make every reader dial where no peer can be.
RELAY = "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
NEVER = (
    "/ip4/169.254.169.254/tcp/80",
    "/ip4/255.255.255.255/tcp/9",
    "/ip4/224.0.0.1/tcp/9",
    "/ip6/fe80::1/tcp/9",
    "/ip6/::ffff:169.254.169.254/tcp/9",
    f"/ip4/169.254.169.254/tcp/4001/p2p/{RELAY}/p2p-circuit",
)
LOCAL_ONLY = (
    "/ip4/127.0.0.1/tcp/4001",
    "/ip4/10.0.0.1/tcp/4001",
    "/ip4/172.16.5.4/tcp/4001",
    "/ip4/192.168.1.2/tcp/4001",
    "/ip4/100.64.0.9/tcp/4001",
    "/ip6/::1/tcp/4001",
    "/ip6/fd00::7/tcp/4001",
    "/dns4/metadata.google.internal/tcp/80",
    f"/ip4/10.0.0.8/tcp/5/p2p/{RELAY}/p2p-circuit",
)
PUBLIC = ("/ip4/203.0.113.7/tcp/4001", "/ip6/2001:db8::1/tcp/4001")


@pytest.mark.parametrize("local", [False, True])
def test_targets_no_peer_can_be_at_are_never_dialed(local: bool) -> None:
    d = directory(local=local)
    m = member(11)
    got = d.accept(m, PROGRAM, encode(record(m, NEVER[:4])))
    assert got == []
    # Multicast was already dropped as not dialable; the others for their target.
    assert (d.rejected["target"], d.rejected["address"]) == (3, 1)
    for addr in NEVER:
        assert target_refusal(addr, local) is not None, addr


def test_loopback_private_and_dns_targets_only_in_a_local_run() -> None:
    m = member(12)
    pid = peer_id_for(m.p2p_identity)
    addrs = (*LOCAL_ONLY[:3], PUBLIC[0])
    public_run = directory(local=False)
    assert public_run.accept(m, PROGRAM, encode(record(m, addrs))) == [f"{PUBLIC[0]}/p2p/{pid}"]
    assert public_run.rejected["target"] == 3
    local_run = directory(local=True)
    assert local_run.accept(m, PROGRAM, encode(record(m, addrs))) == [
        f"{a}/p2p/{pid}" for a in addrs
    ]
    for addr in LOCAL_ONLY:
        assert target_refusal(addr, local=False) is not None, addr
        assert target_refusal(addr, local=True) is None, addr
    for addr in PUBLIC:
        assert target_refusal(addr, local=False) is None, addr


def test_a_run_is_local_when_every_rpc_endpoint_is_on_this_machine_or_lan() -> None:
    assert rpcs_are_local(["http://127.0.0.1:8899"])
    assert rpcs_are_local(["http://localhost:8899", "http://10.77.3.1:8899"])
    assert rpcs_are_local(["http://[::1]:8899"])
    assert not rpcs_are_local(["https://api.mainnet-beta.solana.com"])
    assert not rpcs_are_local(["http://127.0.0.1:8899", "http://203.0.113.9:8899"])
    assert not rpcs_are_local([])


def test_a_public_run_publishes_only_what_its_program_accepts() -> None:
    """In a public run (``local_run`` false) the client leaves loopback, private and DNS
    addresses out of its record: the program would refuse the whole ``set_peer_addrs``."""
    me = member(13)
    pid = peer_id_for(me.p2p_identity)
    listen = [*(f"{a}/p2p/{pid}" for a in LOCAL_ONLY), *PUBLIC]
    public_run = directory(local=False, max_addrs=8, announce=["/dns4/me.example/tcp/1"])
    got = public_run.record_addrs(listen, me.p2p_identity)
    assert got == list(PUBLIC)
    check_peer_addrs(got, local=False)
    local_run = directory(local=True, max_addrs=16)
    got = local_run.record_addrs(listen, me.p2p_identity)
    assert set(got) == {*LOCAL_ONLY, *PUBLIC}
    check_peer_addrs(got[:4], local=True)
