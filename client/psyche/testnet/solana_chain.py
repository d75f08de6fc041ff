"""The Solana testnet's chain: which programs it needs and where their ids come from, what each
funded wallet gets, and funding a wallet through a chain's faucet (an existing chain's
``requestAirdrop``; the local SVM funds its wallets at start instead).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

__all__ = ["LAMPORTS", "PROGRAMS", "ROOT", "program_ids", "request_airdrop"]

ROOT = Path(__file__).resolve().parents[3]
PROGRAMS = ("psyche_coordinator", "psyche_authorizer", "psyche_treasurer", "psyche_mining_pool")
LAMPORTS = 1_000 * 10**9
"""Each funded wallet's airdrop (1000 SOL): the run creator pays ~1.2 SOL of rent for the
coordinator account; a client pays 5000 lamports per transaction."""


def program_ids() -> dict[str, str]:
    """Program name → the id the clients address (the committed IDLs' ``address``)."""
    return {
        name: json.loads((ROOT / "idl" / f"{name}.json").read_text())["address"]
        for name in PROGRAMS
    }


def request_airdrop(rpc_url: str, pubkey: str, lamports: int, timeout: float = 60.0) -> None:
    """Fund ``pubkey`` from the chain's faucet and wait until the airdrop is confirmed."""
    from psyche.solana.errors import ChainError
    from psyche.solana.rpc import SolanaRpc

    async def go() -> None:
        rpc = SolanaRpc(rpc_url)
        try:
            sig = await rpc.call("requestAirdrop", [pubkey, lamports])
            await rpc.confirm(str(sig), timeout)
        finally:
            await rpc.close()

    try:
        asyncio.run(go())
    except ChainError as e:  # the launcher reports start-up failures as RuntimeError
        raise RuntimeError(f"the airdrop to {pubkey} failed: {e}") from None
