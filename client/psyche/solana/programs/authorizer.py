"""What the ``psyche-solana-client`` join-authorization commands do, one coroutine each: the
authorizer program's accounts that let a wallet join a run (created by the run's join authority,
delegated by the grantee) and the check ``join_run`` makes against them (``can-join``).

See docs/solana.md, "Python side". Like :mod:`psyche.solana.programs.coordinator_commands`,
these take a :class:`~psyche.solana.session.Session` and return JSON-able results.
"""

from __future__ import annotations

from typing import Any

from solders.pubkey import Pubkey

from psyche.solana.errors import ChainError
from psyche.solana.instructions import JOIN_RUN_SCOPE
from psyche.solana.session import Session

__all__ = [
    "can_join",
    "join_authorization_create",
    "join_authorization_delegate",
    "join_authorization_delete",
    "join_authorization_read",
]


# Delegates added per authorization_grantee_update: 32 bytes each, and a transaction holds
# 1232 bytes of which ~250 are the signature, accounts and header.
DELEGATES_PER_TRANSACTION = 24
MAX_DELEGATES = 64


async def can_join(
    s: Session, run_id: str, address: Pubkey, grantee: Pubkey | None
) -> dict[str, Any]:
    """Would ``address`` pass ``join_run``'s authorization check (docs/solana.md, "Programs")?"""
    inst = await s.instance(run_id)
    join_authority = Pubkey.from_bytes(bytes(inst["join_authority"]))
    pda = s.join_authorization(join_authority, grantee)
    auth = await _read_authorization(s, pda)
    reasons = []
    if auth is None:
        whom = grantee if grantee is not None else "everyone"
        reasons.append(
            f"the run's join authority {join_authority} has not authorized {whom} "
            f"(no authorization account at {pda})"
        )
    else:
        if not auth["active"]:
            reasons.append("the authorization is not active")
        if auth["grantor"] != bytes(join_authority) or auth["scope"] != JOIN_RUN_SCOPE:
            reasons.append("the authorization is for another grantor or scope")
        who = bytes(address)
        if not (auth["grantee"] == bytes(32) or auth["grantee"] == who or who in auth["delegates"]):
            reasons.append(f"{address} is neither the grantee nor one of its delegates")
    return {"can_join": not reasons, "authorization": str(pda), "reasons": reasons}


async def _read_authorization(s: Session, pda: Pubkey) -> dict[str, Any] | None:
    data = await s.read(pda)
    if data is None:
        return None
    value: dict[str, Any] = s.authorizer.idl.decode_account("Authorization", data)
    return value


def _authorization_json(pda: Pubkey, a: dict[str, Any]) -> dict[str, Any]:
    return {
        "address": str(pda),
        "grantor": str(Pubkey.from_bytes(a["grantor"])),
        "grantee": str(Pubkey.from_bytes(a["grantee"])),
        "scope": a["scope"].decode(errors="replace"),
        "active": a["active"],
        "delegates": [str(Pubkey.from_bytes(d)) for d in a["delegates"]],
        "grantor_update_unix_timestamp": a["grantor_update_unix_timestamp"],
    }


async def join_authorization_create(s: Session, grantee: Pubkey | None) -> dict[str, Any]:
    """The wallet (a run's join authority) authorizes ``grantee`` (everyone if None) to join
    its runs: create and activate the authorization in one transaction."""
    me = s.wallet.pubkey()
    grantee = grantee or Pubkey.default()
    pda = s.join_authorization(me, grantee)
    accounts = {"payer": me, "grantor": me, "authorization": pda}
    create = s.authorizer.build(
        "authorization_create", {"grantee": grantee, "scope": JOIN_RUN_SCOPE}, accounts
    )
    activate = s.authorizer.build("authorization_grantor_update", {"active": True}, accounts)
    sig = await s.sender(s.authorizer).send([create, activate], label="join-authorization-create")
    return {"authorization": str(pda), "signature": sig}


async def join_authorization_delegate(
    s: Session, join_authority: Pubkey, delegates_clear: bool, delegates_added: list[Pubkey]
) -> list[str]:
    """The wallet (a grantee) sets the delegates that may join in its place: one transaction per
    :data:`DELEGATES_PER_TRANSACTION` delegates (the clear, if asked, goes with the first)."""
    if len(delegates_added) > MAX_DELEGATES:
        raise ChainError(
            f"{len(delegates_added)} delegates: an authorization holds at most {MAX_DELEGATES}"
        )
    me = s.wallet.pubkey()
    pda = s.join_authorization(join_authority, me)
    accounts = {"payer": me, "grantee": me, "authorization": pda}
    sender = s.sender(s.authorizer)
    chunks = [
        delegates_added[i : i + DELEGATES_PER_TRANSACTION]
        for i in range(0, len(delegates_added), DELEGATES_PER_TRANSACTION)
    ] or [[]]
    sigs = []
    for n, chunk in enumerate(chunks):
        args = {"delegates_clear": delegates_clear and n == 0, "delegates_added": chunk}
        ix = s.authorizer.build("authorization_grantee_update", args, accounts)
        sigs.append(await sender.send([ix], label="join-authorization-delegate"))
    return sigs


async def join_authorization_read(
    s: Session, join_authority: Pubkey, grantee: Pubkey | None
) -> dict[str, Any]:
    pda = s.join_authorization(join_authority, grantee)
    auth = await _read_authorization(s, pda)
    if auth is None:
        raise ChainError(f"no authorization account at {pda}")
    return _authorization_json(pda, auth)


async def join_authorization_delete(s: Session, grantee: Pubkey | None) -> str:
    """Deactivate, then close the wallet's authorization of ``grantee`` (rent back to it)."""
    me = s.wallet.pubkey()
    pda = s.join_authorization(me, grantee)
    accounts = {"grantor": me, "authorization": pda, "spill": me}
    off = s.authorizer.build("authorization_grantor_update", {"active": False}, accounts)
    close = s.authorizer.build("authorization_close", {}, accounts)
    return await s.sender(s.authorizer).send([off, close], label="join-authorization-delete")
