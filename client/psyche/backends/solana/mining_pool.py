"""What the ``psyche-solana-client mining-pool-*`` commands do: the Mining Pool program
(docs/rewards.md, "Mining Pool"). Lenders deposit collateral into a pool; the pool's authority
withdraws it to buy compute, freezes the pool, deposits what it earned (the redeemable token),
and each lender claims ``floor(total_redeemable × deposited / total_deposited) − claimed``.

:class:`MiningPoolInstructions` builds each instruction from the IDL (``ProgramClient.build``)
with every account spelled out, so the cross-language vectors rebuild them with the same code;
the coroutines (one per command, taking a :class:`~psyche.backends.solana.session.Session`) read
the pool first and refuse, with the numbers, what the program would refuse (a frozen pool, a cap,
nothing to claim), then send. The wallet's own token accounts are its associated token accounts
(created idempotently where it receives tokens).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from solders.instruction import Instruction
from solders.pubkey import Pubkey

from psyche.backends.base import BackendError
from psyche.backends.solana.instructions import ProgramClient
from psyche.backends.solana.session import Session
from psyche.backends.solana.tokens import (
    TOKEN_PROGRAM_ID,
    associated_token_address,
    create_associated_account_ix,
)

__all__ = [
    "LENDER_SEED",
    "POOL_COLLATERAL_SEED",
    "POOL_REDEEMABLE_SEED",
    "POOL_SEED",
    "U64_MAX",
    "LenderState",
    "MiningPoolInstructions",
    "PoolRefusal",
    "PoolState",
    "claim",
    "claim_refusal",
    "claimable",
    "deposit",
    "deposit_refusal",
    "dump_user",
    "entitlement",
    "extract_refusal",
    "lender_json",
    "lender_pda",
    "pool_collateral_pda",
    "pool_create",
    "pool_json",
    "pool_pda",
    "pool_redeemable_pda",
    "pool_update",
    "read_lender",
    "read_pool",
    "redeemable_deposit",
    "redeemable_deposit_refusal",
    "run_registration_json",
    "treasurer_participant_json",
    "update_refusal",
    "user_json",
    "withdraw",
]

POOL_SEED = b"Pool"
POOL_COLLATERAL_SEED = b"PoolCollateral"
POOL_REDEEMABLE_SEED = b"PoolRedeemable"
LENDER_SEED = b"Lender"
U64_MAX = 2**64 - 1


# --- addresses ----------------------------------------------------------------------------------


def pool_pda(program: Pubkey, index: int) -> Pubkey:
    """The ``Pool`` of ``index``: ``["Pool", index: u64 LE]``."""
    return Pubkey.find_program_address([POOL_SEED, struct.pack("<Q", index)], program)[0]


def pool_collateral_pda(program: Pubkey, pool: Pubkey) -> Pubkey:
    """The pool's collateral token account: ``["PoolCollateral", pool]``."""
    return Pubkey.find_program_address([POOL_COLLATERAL_SEED, bytes(pool)], program)[0]


def pool_redeemable_pda(program: Pubkey, pool: Pubkey) -> Pubkey:
    """The pool's redeemable token account: ``["PoolRedeemable", pool]``."""
    return Pubkey.find_program_address([POOL_REDEEMABLE_SEED, bytes(pool)], program)[0]


def lender_pda(program: Pubkey, pool: Pubkey, user: Pubkey) -> Pubkey:
    """``user``'s ``Lender`` in ``pool``: ``["Lender", pool, user]``."""
    return Pubkey.find_program_address([LENDER_SEED, bytes(pool), bytes(user)], program)[0]


# --- the program's share arithmetic -------------------------------------------------------------


def entitlement(total_redeemable: int, deposited: int, total_deposited: int) -> int:
    """What a lender that deposited ``deposited`` of ``total_deposited`` is owed of
    ``total_redeemable``: ``floor(total_redeemable × deposited / total_deposited)`` (the
    program's u128 arithmetic; Python's integers are exact). 0 when nothing was deposited."""
    if total_deposited == 0:
        return 0
    return total_redeemable * deposited // total_deposited


def claimable(total_redeemable: int, deposited: int, total_deposited: int, claimed: int) -> int:
    """Entitlement minus what was already claimed (never negative)."""
    return max(0, entitlement(total_redeemable, deposited, total_deposited) - claimed)


# --- accounts -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PoolState:
    """A decoded ``Pool`` account (docs/rewards.md, "Mining Pool", "Accounts")."""

    address: Pubkey
    bump: int
    index: int
    authority: Pubkey
    collateral_mint: Pubkey
    redeemable_mint: Pubkey
    max_deposit_collateral_amount: int
    total_deposited_collateral_amount: int
    total_extracted_collateral_amount: int
    total_deposited_redeemable_amount: int
    total_claimed_redeemable_amount: int
    frozen: bool

    @classmethod
    def decode(cls, program: ProgramClient, address: Pubkey, data: bytes) -> PoolState:
        v = program.idl.decode_account("Pool", data)
        return cls(
            address=address,
            bump=v["bump"],
            index=v["index"],
            authority=Pubkey.from_bytes(bytes(v["authority"])),
            collateral_mint=Pubkey.from_bytes(bytes(v["collateral_mint"])),
            redeemable_mint=Pubkey.from_bytes(bytes(v["redeemable_mint"])),
            max_deposit_collateral_amount=v["max_deposit_collateral_amount"],
            total_deposited_collateral_amount=v["total_deposited_collateral_amount"],
            total_extracted_collateral_amount=v["total_extracted_collateral_amount"],
            total_deposited_redeemable_amount=v["total_deposited_redeemable_amount"],
            total_claimed_redeemable_amount=v["total_claimed_redeemable_amount"],
            frozen=bool(v["frozen"]),
        )

    @property
    def room(self) -> int:
        """Collateral that can still be deposited before the cap."""
        return max(0, self.max_deposit_collateral_amount - self.total_deposited_collateral_amount)


@dataclass(frozen=True, slots=True)
class LenderState:
    """A decoded ``Lender`` account."""

    address: Pubkey
    bump: int
    pool: Pubkey
    user: Pubkey
    deposited_collateral_amount: int
    claimed_redeemable_amount: int

    @classmethod
    def decode(cls, program: ProgramClient, address: Pubkey, data: bytes) -> LenderState:
        v = program.idl.decode_account("Lender", data)
        return cls(
            address=address,
            bump=v["bump"],
            pool=Pubkey.from_bytes(bytes(v["pool"])),
            user=Pubkey.from_bytes(bytes(v["user"])),
            deposited_collateral_amount=v["deposited_collateral_amount"],
            claimed_redeemable_amount=v["claimed_redeemable_amount"],
        )

    def entitled(self, pool: PoolState) -> int:
        return entitlement(
            pool.total_deposited_redeemable_amount,
            self.deposited_collateral_amount,
            pool.total_deposited_collateral_amount,
        )

    def claimable(self, pool: PoolState) -> int:
        return claimable(
            pool.total_deposited_redeemable_amount,
            self.deposited_collateral_amount,
            pool.total_deposited_collateral_amount,
            self.claimed_redeemable_amount,
        )


async def read_pool(s: Session, index: int) -> PoolState | None:
    address = pool_pda(s.mining_pool.program_id, index)
    data = await s.read(address)
    return None if data is None else PoolState.decode(s.mining_pool, address, data)


async def read_lender(s: Session, pool: Pubkey, user: Pubkey) -> LenderState | None:
    address = lender_pda(s.mining_pool.program_id, pool, user)
    data = await s.read(address)
    return None if data is None else LenderState.decode(s.mining_pool, address, data)


async def _pool(s: Session, index: int) -> PoolState:
    pool = await read_pool(s, index)
    if pool is None:
        where = pool_pda(s.mining_pool.program_id, index)
        raise BackendError(f"mining pool {index} does not exist (no account at {where})")
    return pool


def _check_authority(s: Session, pool: PoolState, what: str) -> None:
    me = s.wallet.pubkey()
    if me != pool.authority:
        raise BackendError(
            f"only mining pool {pool.index}'s authority {pool.authority} may {what}; "
            f"the wallet is {me}"
        )


def _check_amount(amount: int, what: str) -> None:
    if not 1 <= amount <= U64_MAX:
        raise BackendError(f"{what} must be 1..{U64_MAX} base units, not {amount}")


async def _balance(s: Session, account: Pubkey) -> int:
    info = await s.token_account(account)
    return 0 if info is None else info.amount


# --- what the program would refuse, said before sending ------------------------------------------


class PoolRefusal(BackendError):
    """What the client refuses before sending, because the program would: ``error`` is the
    program error (IDL name) the transaction would fail with; the message says the numbers."""

    def __init__(self, error: str, message: str) -> None:
        self.error = error
        super().__init__(message)


def update_refusal(
    pool: PoolState, max_deposit: int | None, freeze: bool | None
) -> PoolRefusal | None:
    """``pool_update``'s checks, in the program's order (the cap against the state before the
    update, then the freeze)."""
    if max_deposit is not None:
        if pool.frozen:
            return PoolRefusal(
                "PoolFrozen",
                f"mining pool {pool.index} is frozen: its cap stays "
                f"{pool.max_deposit_collateral_amount}",
            )
        if max_deposit < pool.total_deposited_collateral_amount:
            return PoolRefusal(
                "PoolCapBelowDeposits",
                f"mining pool {pool.index}: a cap of {max_deposit} is below the "
                f"{pool.total_deposited_collateral_amount} already deposited",
            )
    if freeze is False and pool.frozen:
        return PoolRefusal(
            "PoolUnfreezeRefused", f"mining pool {pool.index} is frozen, and freezing is one-way"
        )
    return None


def deposit_refusal(pool: PoolState, amount: int) -> PoolRefusal | None:
    """``lender_deposit``'s checks: unfrozen pools only, the total within the cap."""
    if pool.frozen:
        return PoolRefusal(
            "PoolFrozen",
            f"mining pool {pool.index} is frozen: deposits are closed "
            f"({pool.total_deposited_collateral_amount} deposited in all)",
        )
    if amount > pool.room:
        return PoolRefusal(
            "PoolCapExceeded",
            f"mining pool {pool.index}: depositing {amount} would exceed the cap of "
            f"{pool.max_deposit_collateral_amount} ({pool.total_deposited_collateral_amount} "
            f"deposited, {pool.room} left)",
        )
    return None


def extract_refusal(pool: PoolState, held: int, amount: int) -> PoolRefusal | None:
    """``pool_extract``: at most what the pool's collateral account ``held``."""
    if amount > held:
        return PoolRefusal(
            "ExtractExceedsCollateral",
            f"mining pool {pool.index}'s collateral account holds {held}, less than the "
            f"{amount} to withdraw",
        )
    return None


def redeemable_deposit_refusal(pool: PoolState) -> PoolRefusal | None:
    """``pool_redeemable_deposit``: frozen pools only."""
    if not pool.frozen:
        return PoolRefusal(
            "PoolNotFrozen",
            f"mining pool {pool.index} is not frozen: freeze it first (mining-pool-update "
            "--freeze), so every share is fixed before earnings arrive",
        )
    return None


def claim_refusal(pool: PoolState, lender: LenderState, amount: int | None) -> PoolRefusal | None:
    """``lender_claim``: frozen pools only, ``amount`` (None: all that is left) within
    1..=claimable."""
    if not pool.frozen:
        return PoolRefusal(
            "PoolNotFrozen",
            f"mining pool {pool.index} is not frozen yet: claims open once its authority "
            "freezes it",
        )
    left = lender.claimable(pool)
    numbers = (
        f"{lender.deposited_collateral_amount} of {pool.total_deposited_collateral_amount} "
        f"deposited entitles to {lender.entitled(pool)} of the "
        f"{pool.total_deposited_redeemable_amount} redeemable, "
        f"{lender.claimed_redeemable_amount} already claimed"
    )
    if left == 0:
        return PoolRefusal(
            "ClaimExceedsShare", f"nothing claimable in mining pool {pool.index}: {numbers}"
        )
    if amount is not None and amount > left:
        return PoolRefusal(
            "ClaimExceedsShare",
            f"mining pool {pool.index}: {amount} is more than the {left} claimable ({numbers})",
        )
    return None


def _refuse(refusal: PoolRefusal | None) -> None:
    if refusal is not None:
        raise refusal


# --- instructions -------------------------------------------------------------------------------


class MiningPoolInstructions:
    """The Mining Pool's instructions, every account given (docs/rewards.md lists them); the
    bytes and account order come from the IDL."""

    def __init__(self, program: ProgramClient) -> None:
        self.p = program

    @property
    def program_id(self) -> Pubkey:
        return self.p.program_id

    def pool(self, index: int) -> Pubkey:
        return pool_pda(self.program_id, index)

    def _pool_accounts(self, index: int) -> dict[str, Pubkey]:
        pool = self.pool(index)
        return {
            "pool": pool,
            "pool_collateral": pool_collateral_pda(self.program_id, pool),
            "pool_redeemable": pool_redeemable_pda(self.program_id, pool),
            "token_program": TOKEN_PROGRAM_ID,
        }

    def pool_create(
        self,
        payer: Pubkey,
        authority: Pubkey,
        index: int,
        collateral_mint: Pubkey,
        redeemable_mint: Pubkey,
        max_deposit: int,
    ) -> Instruction:
        accounts = {
            **self._pool_accounts(index),
            "payer": payer,
            "authority": authority,
            "collateral_mint": collateral_mint,
            "redeemable_mint": redeemable_mint,
        }
        args = {"index": index, "max_deposit_collateral_amount": max_deposit}
        return self.p.build("pool_create", args, accounts)

    def pool_update(
        self, authority: Pubkey, index: int, max_deposit: int | None, freeze: bool | None
    ) -> Instruction:
        args = {"max_deposit_collateral_amount": max_deposit, "freeze": freeze}
        return self.p.build("pool_update", args, {"authority": authority, "pool": self.pool(index)})

    def pool_extract(
        self, authority: Pubkey, index: int, authority_collateral: Pubkey, amount: int
    ) -> Instruction:
        accounts = {
            **self._pool_accounts(index),
            "authority": authority,
            "authority_collateral": authority_collateral,
        }
        return self.p.build("pool_extract", {"collateral_amount": amount}, accounts)

    def pool_redeemable_deposit(
        self, authority: Pubkey, index: int, authority_redeemable: Pubkey, amount: int
    ) -> Instruction:
        accounts = {
            **self._pool_accounts(index),
            "authority": authority,
            "authority_redeemable": authority_redeemable,
        }
        return self.p.build("pool_redeemable_deposit", {"redeemable_amount": amount}, accounts)

    def lender(self, index: int, user: Pubkey) -> Pubkey:
        return lender_pda(self.program_id, self.pool(index), user)

    def lender_create(self, payer: Pubkey, user: Pubkey, index: int) -> Instruction:
        accounts = {
            "payer": payer,
            "user": user,
            "pool": self.pool(index),
            "lender": self.lender(index, user),
        }
        return self.p.build("lender_create", {}, accounts)

    def lender_deposit(
        self, user: Pubkey, index: int, user_collateral: Pubkey, amount: int
    ) -> Instruction:
        accounts = {
            **self._pool_accounts(index),
            "user": user,
            "user_collateral": user_collateral,
            "lender": self.lender(index, user),
        }
        return self.p.build("lender_deposit", {"collateral_amount": amount}, accounts)

    def lender_claim(
        self, user: Pubkey, index: int, user_redeemable: Pubkey, amount: int
    ) -> Instruction:
        accounts = {
            **self._pool_accounts(index),
            "user": user,
            "user_redeemable": user_redeemable,
            "lender": self.lender(index, user),
        }
        return self.p.build("lender_claim", {"redeemable_amount": amount}, accounts)


def _ixs(s: Session) -> MiningPoolInstructions:
    return MiningPoolInstructions(s.mining_pool)


async def _send(s: Session, ixs: list[Instruction], label: str) -> str:
    # The sender prepends the compute-unit limit (budget.py, compute_units.json).
    return await s.sender(s.mining_pool).send(ixs, label=label)


# --- the commands -------------------------------------------------------------------------------


async def pool_create(
    s: Session, index: int, collateral_mint: Pubkey, redeemable_mint: Pubkey, max_deposit: int
) -> dict[str, Any]:
    """Create pool ``index`` with the wallet as payer and authority."""
    if not 0 <= index <= U64_MAX:
        raise BackendError(f"the pool index must be 0..{U64_MAX}, not {index}")
    if not 0 <= max_deposit <= U64_MAX:
        raise BackendError(f"the maximum deposit must be 0..{U64_MAX}, not {max_deposit}")
    existing = await read_pool(s, index)
    if existing is not None:
        raise BackendError(
            f"mining pool {index} already exists at {existing.address} "
            f"(authority {existing.authority})"
        )
    for role, mint in (("collateral", collateral_mint), ("redeemable", redeemable_mint)):
        try:
            await s.mint(mint)
        except BackendError as e:
            raise BackendError(f"{role} mint {mint}: {e}") from None
    me = s.wallet.pubkey()
    ix = _ixs(s).pool_create(me, me, index, collateral_mint, redeemable_mint, max_deposit)
    sig = await _send(s, [ix], "mining-pool-create")
    return {"pool": pool_json(await _pool(s, index), s.mining_pool.program_id), "signature": sig}


async def pool_update(
    s: Session, index: int, max_deposit: int | None = None, freeze: bool | None = None
) -> dict[str, Any]:
    """Set the cap and/or freeze (one-way) pool ``index``; the wallet must be its authority."""
    if max_deposit is None and freeze is None:
        raise BackendError("nothing to update: give a new maximum deposit or freeze")
    pool = await _pool(s, index)
    _check_authority(s, pool, "update it")
    if max_deposit is not None and not 0 <= max_deposit <= U64_MAX:
        raise BackendError(f"the maximum deposit must be 0..{U64_MAX}, not {max_deposit}")
    _refuse(update_refusal(pool, max_deposit, freeze))
    ix = _ixs(s).pool_update(s.wallet.pubkey(), index, max_deposit, freeze)
    sig = await _send(s, [ix], "mining-pool-update")
    return {"pool": pool_json(await _pool(s, index), s.mining_pool.program_id), "signature": sig}


async def deposit(s: Session, index: int, amount: int) -> dict[str, Any]:
    """Deposit ``amount`` collateral from the wallet's associated token account (creating the
    wallet's ``Lender`` first if it has none)."""
    _check_amount(amount, "the deposit")
    pool = await _pool(s, index)
    _refuse(deposit_refusal(pool, amount))
    me = s.wallet.pubkey()
    source = associated_token_address(me, pool.collateral_mint)
    held = await _balance(s, source)
    if held < amount:
        raise BackendError(
            f"the wallet's collateral account {source} holds {held} of mint "
            f"{pool.collateral_mint}, less than the {amount} to deposit"
        )
    ixs = _ixs(s)
    out: list[Instruction] = []
    if await read_lender(s, pool.address, me) is None:
        out.append(ixs.lender_create(me, me, index))
    out.append(ixs.lender_deposit(me, index, source, amount))
    sig = await _send(s, out, "mining-pool-deposit")
    return await _after(s, index, me, sig)


async def withdraw(s: Session, index: int, amount: int) -> dict[str, Any]:
    """The authority takes ``amount`` collateral out of the pool (``pool_extract``) into its
    associated token account (created if missing)."""
    _check_amount(amount, "the withdrawal")
    pool = await _pool(s, index)
    _check_authority(s, pool, "withdraw its collateral")
    pid = s.mining_pool.program_id
    _refuse(
        extract_refusal(pool, await _balance(s, pool_collateral_pda(pid, pool.address)), amount)
    )
    me = s.wallet.pubkey()
    dest = associated_token_address(me, pool.collateral_mint)
    ixs = [
        create_associated_account_ix(me, me, pool.collateral_mint),
        _ixs(s).pool_extract(me, index, dest, amount),
    ]
    sig = await _send(s, ixs, "mining-pool-withdraw")
    return {"pool": pool_json(await _pool(s, index), pid), "to": str(dest), "signature": sig}


async def redeemable_deposit(s: Session, index: int, amount: int) -> dict[str, Any]:
    """The authority deposits ``amount`` of earnings (redeemable tokens) from its associated
    token account into the frozen pool."""
    _check_amount(amount, "the redeemable deposit")
    pool = await _pool(s, index)
    _check_authority(s, pool, "deposit its earnings")
    _refuse(redeemable_deposit_refusal(pool))
    me = s.wallet.pubkey()
    source = associated_token_address(me, pool.redeemable_mint)
    held = await _balance(s, source)
    if held < amount:
        raise BackendError(
            f"the wallet's redeemable account {source} holds {held} of mint "
            f"{pool.redeemable_mint}, less than the {amount} to deposit"
        )
    ix = _ixs(s).pool_redeemable_deposit(me, index, source, amount)
    sig = await _send(s, [ix], "mining-pool-redeemable-deposit")
    pid = s.mining_pool.program_id
    return {"pool": pool_json(await _pool(s, index), pid), "signature": sig}


async def claim(s: Session, index: int, amount: int | None = None) -> dict[str, Any]:
    """The wallet claims ``amount`` (default: all it can) of its share of the pool's earnings
    into its associated token account of the redeemable mint (created if missing)."""
    if amount is not None:
        _check_amount(amount, "the claim")
    pool = await _pool(s, index)
    me = s.wallet.pubkey()
    lender = await read_lender(s, pool.address, me)
    if lender is None:
        raise BackendError(f"{me} never deposited in mining pool {index}: nothing to claim")
    _refuse(claim_refusal(pool, lender, amount))
    if amount is None:
        amount = lender.claimable(pool)
    dest = associated_token_address(me, pool.redeemable_mint)
    ixs = [
        create_associated_account_ix(me, me, pool.redeemable_mint),
        _ixs(s).lender_claim(me, index, dest, amount),
    ]
    sig = await _send(s, ixs, "mining-pool-claim")
    out = await _after(s, index, me, sig)
    out["claimed"] = amount
    out["to"] = str(dest)
    return out


async def _after(s: Session, index: int, user: Pubkey, sig: str) -> dict[str, Any]:
    pool = await _pool(s, index)
    lender = await read_lender(s, pool.address, user)
    return {
        "pool": pool_json(pool, s.mining_pool.program_id),
        "lender": None if lender is None else lender_json(lender, pool),
        "signature": sig,
    }


# --- JSON ---------------------------------------------------------------------------------------


def pool_json(pool: PoolState, program: Pubkey) -> dict[str, Any]:
    """A pool as the commands print it: its fields, its token accounts and what rounding left
    unclaimable so far (``total_deposited_redeemable − total_claimed_redeemable``)."""
    return {
        "index": pool.index,
        "address": str(pool.address),
        "authority": str(pool.authority),
        "collateral_mint": str(pool.collateral_mint),
        "redeemable_mint": str(pool.redeemable_mint),
        "pool_collateral": str(pool_collateral_pda(program, pool.address)),
        "pool_redeemable": str(pool_redeemable_pda(program, pool.address)),
        "max_deposit_collateral_amount": pool.max_deposit_collateral_amount,
        "total_deposited_collateral_amount": pool.total_deposited_collateral_amount,
        "total_extracted_collateral_amount": pool.total_extracted_collateral_amount,
        "total_deposited_redeemable_amount": pool.total_deposited_redeemable_amount,
        "total_claimed_redeemable_amount": pool.total_claimed_redeemable_amount,
        "unclaimed_redeemable_amount": (
            pool.total_deposited_redeemable_amount - pool.total_claimed_redeemable_amount
        ),
        "frozen": pool.frozen,
    }


def lender_json(lender: LenderState, pool: PoolState) -> dict[str, Any]:
    """A lender with its entitlement and what it can still claim, computed as the program does
    (claims open only once the pool is frozen; before, ``claimable`` is what it would be)."""
    return {
        "address": str(lender.address),
        "pool": str(lender.pool),
        "user": str(lender.user),
        "deposited_collateral_amount": lender.deposited_collateral_amount,
        "claimed_redeemable_amount": lender.claimed_redeemable_amount,
        "entitled_redeemable_amount": lender.entitled(pool),
        "claimable_redeemable_amount": lender.claimable(pool),
        "can_claim_now": pool.frozen and lender.claimable(pool) > 0,
    }


async def user_json(s: Session, user: Pubkey, indexes: list[int]) -> list[dict[str, Any]]:
    """``user`` in each pool of ``indexes``: the pool, the user's lender (or None) and the
    user's associated token account balances of the pool's two mints."""
    out = []
    pid = s.mining_pool.program_id
    for index in indexes:
        pool = await read_pool(s, index)
        if pool is None:
            out.append({"index": index, "address": str(pool_pda(pid, index)), "pool": None})
            continue
        lender = await read_lender(s, pool.address, user)
        balances = {}
        for role, mint in (
            ("collateral", pool.collateral_mint),
            ("redeemable", pool.redeemable_mint),
        ):
            ata = associated_token_address(user, mint)
            info = await s.token_account(ata)
            balances[role] = {
                "mint": str(mint),
                "token_account": str(ata),
                "amount": None if info is None else info.amount,
            }
        out.append(
            {
                "index": index,
                "address": str(pool.address),
                "pool": pool_json(pool, pid),
                "lender": None if lender is None else lender_json(lender, pool),
                "balances": balances,
            }
        )
    return out


# --- json-dump-user -----------------------------------------------------------------------------


async def run_registration_json(s: Session, run_id: str, user: Pubkey) -> dict[str, Any]:
    """``user``'s registration in run ``run_id``'s coordinator account: points earned and
    slashed (docs/protocol.md, "Rewards"), or ``registered: false``. Read from the raw account,
    so a run created but never configured answers too."""
    accounts = await s.run_accounts(run_id)
    data = await s.read(accounts.account)
    if data is None:
        raise BackendError(f"coordinator account {accounts.account} does not exist")
    raw = s.coordinator.idl.decode_account("CoordinatorAccount", data)
    cs = raw["state"]["clients_state"]
    me = bytes(user)
    entry = next(
        (c for c in cs["clients"][: cs["num_clients"]] if bytes(c["id"]["signer"]) == me), None
    )
    out: dict[str, Any] = {
        "run_id": run_id,
        "coordinator_instance": str(accounts.instance),
        "coordinator_account": str(accounts.account),
        "registered": entry is not None,
    }
    if entry is not None:
        out |= {
            "earned": entry["earned"],
            "slashed": entry["slashed"],
            "points": max(0, entry["earned"] - entry["slashed"]),
            "active": entry["active"],
        }
    return out


async def treasurer_participant_json(
    s: Session, run_id: str, user: Pubkey
) -> dict[str, Any] | None:
    """``user``'s standing with the Treasurer in run ``run_id`` (its ``Participant``: points
    claimed and still claimable, what they are worth; :func:`treasurer.rewards_json`), or None
    when the run was not created through the Treasurer."""
    from psyche.backends.solana import treasurer

    rewards = await treasurer.rewards_json(s, run_id, user)
    return None if rewards.get("treasurer") is None else rewards


async def dump_user(
    s: Session, user: Pubkey, run_id: str | None, indexes: list[int]
) -> dict[str, Any]:
    """What ``json-dump-user`` prints: ``user``'s lender state in each pool of ``indexes`` (with
    what it can claim) and, with ``run_id``, its coordinator registration and, for a run created
    through the Treasurer, its Treasurer participant (``run.treasurer``; None otherwise)."""
    out: dict[str, Any] = {"address": str(user), "pools": await user_json(s, user, indexes)}
    if run_id is not None:
        run = await run_registration_json(s, run_id, user)
        run["treasurer"] = await treasurer_participant_json(s, run_id, user)
        out["run"] = run
    return out
