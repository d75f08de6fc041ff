"""SPL Token accounts and instructions that the Treasurer and Mining Pool commands need.

Instructions come from solana-py's ``spl.token`` (the classic Token program only, as the
programs accept; docs/rewards.md). What is written here is reading the two account layouts the
commands show (a token account's mint, owner and amount; a mint's supply and decimals): a fixed
offset read each, where solana-py's own readers need its synchronous RPC client.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import CreateAccountParams, create_account
from spl.token.constants import ACCOUNT_LEN, ASSOCIATED_TOKEN_PROGRAM_ID, MINT_LEN, TOKEN_PROGRAM_ID
from spl.token.instructions import (
    InitializeMintParams,
    MintToParams,
    TransferParams,
    create_idempotent_associated_token_account,
    get_associated_token_address,
    initialize_mint,
    mint_to,
    transfer,
)

from psyche.solana.errors import ChainError

__all__ = [
    "ACCOUNT_LEN",
    "ASSOCIATED_TOKEN_PROGRAM_ID",
    "MINT_LEN",
    "TOKEN_PROGRAM_ID",
    "MintInfo",
    "TokenAccountInfo",
    "associated_token_address",
    "create_associated_account_ix",
    "create_mint_ixs",
    "decode_mint",
    "decode_token_account",
    "mint_to_ix",
    "transfer_ix",
]


@dataclass(frozen=True, slots=True)
class TokenAccountInfo:
    mint: Pubkey
    owner: Pubkey
    amount: int


@dataclass(frozen=True, slots=True)
class MintInfo:
    supply: int
    decimals: int


def decode_token_account(data: bytes) -> TokenAccountInfo:
    """A classic SPL token account (165 bytes: mint, owner, amount, …)."""
    if len(data) != ACCOUNT_LEN:
        raise ChainError(f"not an SPL token account: {len(data)} bytes, expected {ACCOUNT_LEN}")
    (amount,) = struct.unpack_from("<Q", data, 64)
    return TokenAccountInfo(Pubkey.from_bytes(data[:32]), Pubkey.from_bytes(data[32:64]), amount)


def decode_mint(data: bytes) -> MintInfo:
    """A classic SPL mint (82 bytes: authority option, supply, decimals, initialized, …)."""
    if len(data) != MINT_LEN or data[45] != 1:
        raise ChainError(f"not an initialized SPL mint ({len(data)} bytes)")
    (supply,) = struct.unpack_from("<Q", data, 36)
    return MintInfo(supply, data[44])


def associated_token_address(owner: Pubkey, mint: Pubkey) -> Pubkey:
    """The wallet's associated token account of ``mint`` (off-curve owners, PDAs, work too)."""
    return get_associated_token_address(owner, mint)


def create_associated_account_ix(payer: Pubkey, owner: Pubkey, mint: Pubkey) -> Instruction:
    """Creates ``owner``'s associated token account, or does nothing if it exists."""
    return create_idempotent_associated_token_account(payer, owner, mint)


def transfer_ix(source: Pubkey, dest: Pubkey, owner: Pubkey, amount: int) -> Instruction:
    return transfer(
        TransferParams(
            program_id=TOKEN_PROGRAM_ID, source=source, dest=dest, owner=owner, amount=amount
        )
    )


def create_mint_ixs(
    payer: Pubkey, mint: Keypair, authority: Pubkey, decimals: int, rent_lamports: int
) -> list[Instruction]:
    """A new mint account (``mint`` signs) with ``authority`` as mint authority, no freeze
    authority."""
    create = create_account(
        CreateAccountParams(
            from_pubkey=payer,
            to_pubkey=mint.pubkey(),
            lamports=rent_lamports,
            space=MINT_LEN,
            owner=TOKEN_PROGRAM_ID,
        )
    )
    init = initialize_mint(
        InitializeMintParams(
            decimals=decimals,
            program_id=TOKEN_PROGRAM_ID,
            mint=mint.pubkey(),
            mint_authority=authority,
            freeze_authority=None,
        )
    )
    return [create, init]


def mint_to_ix(mint: Pubkey, dest: Pubkey, authority: Pubkey, amount: int) -> Instruction:
    return mint_to(
        MintToParams(
            program_id=TOKEN_PROGRAM_ID,
            mint=mint,
            dest=dest,
            mint_authority=authority,
            amount=amount,
        )
    )
