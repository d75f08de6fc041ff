"""P2P reachability of a Solana run's clients, as the run page's clients table shows it, from
the peer record each client publishes (``PeerRecord``, decoded by the client's own
:func:`~psyche.solana.peer_record.decode_peer_record`).

One word per client: ``no record`` (it published none), ``no address`` (its record is empty),
``direct`` (every address is dialled straight), ``relayed`` (every address goes through a
relay's ``/p2p-circuit``), ``direct + relayed``, or ``bad record`` (an account at the PDA that is
not the coordinator program's, or does not decode, or names another run or wallet). This is
what the client announced, not a probe: the explorer dials nobody."""

from __future__ import annotations

import logging
from typing import Any

from solders.pubkey import Pubkey

from psyche.solana.errors import ChainError
from psyche.solana.idl import IdlCodec
from psyche.solana.peer_record import PeerRecordError, decode_peer_record
from psyche.solana.rpc import decode_account_data

__all__ = ["classify", "reachability"]

log = logging.getLogger(__name__)

CIRCUIT = "/p2p-circuit"


def classify(addrs: tuple[str, ...] | list[str]) -> str:
    """``direct``, ``relayed``, ``direct + relayed`` or ``no address``."""
    relayed = [a for a in addrs if CIRCUIT in a]
    if not addrs:
        return "no address"
    if not relayed:
        return "direct"
    return "relayed" if len(relayed) == len(addrs) else "direct + relayed"


def reachability(idl: IdlCodec, program: Pubkey, run: Pubkey, signer: bytes, value: Any) -> str:
    """The word for ``signer`` given ``value``, its peer record PDA's ``getMultipleAccounts``
    entry (``None`` when the account does not exist)."""
    if value is None:
        return "no record"
    try:
        if not isinstance(value, dict) or value.get("owner") != str(program):
            raise PeerRecordError("not owned by the coordinator program")
        record = decode_peer_record(idl, decode_account_data(value))
        if record.coordinator_instance != run or bytes(record.signer) != signer:
            raise PeerRecordError("names another run or wallet")
    except (ChainError, ValueError) as e:  # PeerRecordError is a ChainError
        log.debug("peer record of %s: %s", signer.hex(), e)
        return "bad record"
    return classify(record.addrs)
