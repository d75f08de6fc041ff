"""The Treasurer program (docs/rewards.md, "Treasurer") from the client's side: the run that pays
its coordinator points in an SPL token, and the commands around it. Its addresses, ``Run``
account, instruction builders and claim arithmetic are :mod:`psyche.solana.programs.treasurer`;
this module reads the chain and sends.

* :func:`treasurer_run` tells whether a run is the Treasurer's (re-exported from
  :mod:`psyche.solana.programs.treasurer_runs`, with the checks the commands share).
* Coroutines the CLI calls (:mod:`psyche.cli.solana_treasurer`, ``create-run
  --treasurer-collateral-mint``), each taking a
  :class:`~psyche.solana.session.Session` and returning JSON-able results:
  :func:`create_run_via_treasurer`, :func:`claim_rewards`, :func:`top_up_rewards`,
  :func:`rewards_json`, :func:`create_test_mint`, :func:`wind_down_run`, :func:`close_run`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from psyche.solana.budget import ComputeBudget
from psyche.solana.errors import ChainError
from psyche.solana.instructions import instance_pda
from psyche.solana.programs.coordinator import (
    create_coordinator_account_ix,
    default_local_run,
    metadata_arg,
)
from psyche.solana.programs.treasurer import (
    RUN_CLOSE_GRACE_SECONDS,
    Claimable,
    TreasurerRun,
    claimable,
    default_treasurer_index,
    participant_claim_ix,
    participant_create_ix,
    participant_pda,
    run_close_ix,
    run_collateral_pda,
    run_create_ix,
    run_update_ix,
    run_wind_down_ix,
)
from psyche.solana.programs.treasurer_runs import as_u64, require_run, run_pda, treasurer_run
from psyche.solana.rpc import TxSender
from psyche.solana.session import Session
from psyche.solana.tokens import (
    MINT_LEN,
    associated_token_address,
    create_associated_account_ix,
    create_mint_ixs,
    mint_to_ix,
    transfer_ix,
)

__all__ = [
    "RUN_CLOSE_GRACE_SECONDS",
    "TreasurerRun",
    "claim_rewards",
    "close_run",
    "create_run_via_treasurer",
    "create_test_mint",
    "default_treasurer_index",
    "rewards_json",
    "run_collateral_pda",
    "run_pda",
    "top_up_rewards",
    "treasurer_run",
    "wind_down_run",
]


# --- compute budget -----------------------------------------------------------------------------


def _cpi_sender(s: Session) -> TxSender:
    """The sender for ``run_create`` and ``run_update``: a refusal's custom code is the
    Treasurer's (from 7000) or the coordinator's (from 6000, passed on from its CPI)."""

    def name(code: int) -> str | None:
        theirs = s.coordinator.idl.error_name(code)
        return s.treasurer.idl.error_name(code) or (theirs and f"{theirs} (coordinator)")

    budget = ComputeBudget(
        [s.coordinator, s.authorizer, s.treasurer, s.mining_pool], price=s.compute_unit_price
    )
    return TxSender(s.rpcs, s.wallet, error_names=name, prepare=budget)


# --- creating a run -----------------------------------------------------------------------------


async def _new_run_addresses(s: Session, run_id: str, index: int, run: Pubkey) -> Pubkey:
    """The run's coordinator instance, once neither it nor the Treasurer's Run exists yet."""
    instance = instance_pda(s.coordinator.program_id, run_id)
    if await s.read(instance) is not None:
        raise ChainError(f"run {run_id!r} exists already (coordinator instance {instance})")
    if await s.read(run) is not None:
        raise ChainError(
            f"the Treasurer's Run of index {index} ({run}) exists already: "
            "choose another --treasurer-index"
        )
    return instance


async def create_run_via_treasurer(
    s: Session,
    run_id: str,
    client_version: str,
    collateral_mint: Pubkey,
    *,
    index: int | None = None,
    join_authority: Pubkey | None = None,
    collateral_per_point: int = 1,
    name: str | None = None,
    description: str | None = None,
    local_run: bool | None = None,
) -> dict[str, Any]:
    """Create the zero-copy coordinator account (system ``create_account``) and ``run_create``
    in one transaction: the Treasurer's ``Run`` becomes the coordinator's main authority and the
    wallet the Run's. A name or description goes in the same transaction (``run_update``).
    ``local_run`` as in :func:`~psyche.solana.programs.coordinator_commands.create_run`."""
    local = default_local_run(s) if local_run is None else local_run

    if collateral_per_point <= 0:
        raise ChainError("collateral per point must be at least 1 base unit")
    index = default_treasurer_index(run_id) if index is None else as_u64(index)
    as_u64(collateral_per_point)
    mint = await s.mint(collateral_mint)  # refuses a missing or non-SPL mint before paying
    me = s.wallet.pubkey()
    program = s.treasurer.program_id
    run = run_pda(program, index)
    instance = await _new_run_addresses(s, run_id, index, run)
    account = Keypair()
    size = s.layout.size
    created = TreasurerRun(
        run, index, me, join_authority or me, instance,
        account.pubkey(), collateral_mint, collateral_per_point, 0, 0, 0,
    )  # fmt: skip
    metadata = None
    if name is not None or description is not None:
        metadata = metadata_arg(name or "", description or "")
    ixs = await _create_run_ixs(s, created, account, run_id, client_version, local, metadata)
    sig = await _cpi_sender(s).send(ixs, [account], label="create-run (treasurer)")
    return {
        "run_id": run_id,
        "coordinator_instance": str(instance),
        "coordinator_account": str(account.pubkey()),
        "account_size": size,
        "treasurer_run": str(run),
        "treasurer_index": index,
        "collateral_mint": str(collateral_mint),
        "collateral_decimals": mint.decimals,
        "collateral_per_point": collateral_per_point,
        "run_collateral": str(run_collateral_pda(program, run)),
        "local_run": local,
        "signature": sig,
    }


async def _create_run_ixs(
    s: Session,
    created: TreasurerRun,
    account: Keypair,
    run_id: str,
    client_version: str,
    local_run: bool,
    metadata: dict[str, Any] | None,
) -> list[Instruction]:
    """The one transaction that creates the Run ``created`` describes: the coordinator account,
    ``run_create`` and, for a name or description (``metadata``), ``run_update``."""
    me = created.main_authority
    init = run_create_ix(
        s.treasurer,
        s.coordinator.program_id,
        payer=me,
        main_authority=me,
        index=created.index,
        run_id=run_id,
        client_version=client_version,
        join_authority=created.join_authority,
        collateral_per_point=created.collateral_per_point,
        collateral_mint=created.collateral_mint,
        coordinator_account=account.pubkey(),
        local_run=local_run,
    )
    ixs = [await create_coordinator_account_ix(s, account), init]
    if metadata is not None:
        fields = {"metadata": metadata}
        ixs.append(run_update_ix(s.treasurer, created, me, s.coordinator.program_id, fields))
    return ixs


async def send_run_update(
    s: Session, run: TreasurerRun, fields: Mapping[str, Any], label: str
) -> str:
    """One ``run_update`` signed by the wallet (which must be the Run's main authority)."""
    me = s.wallet.pubkey()
    if me != run.main_authority:
        raise ChainError(
            f"the run is the Treasurer's ({run.address}); only its main authority "
            f"{run.main_authority} can update it, not {me}"
        )
    ix = run_update_ix(s.treasurer, run, me, s.coordinator.program_id, fields)
    return await _cpi_sender(s).send([ix], label=label)


async def _standing(
    s: Session, run: TreasurerRun, user: Pubkey
) -> tuple[Claimable, dict[str, Any] | None]:
    data = await s.read(run.coordinator_account)
    if data is None:
        raise ChainError(f"coordinator account {run.coordinator_account} does not exist")
    account = s.coordinator.idl.decode_account("CoordinatorAccount", data)
    pdata = await s.read(participant_pda(s.treasurer.program_id, run.address, user))
    participant = None if pdata is None else s.treasurer.idl.decode_account("Participant", pdata)
    return claimable(account, participant, user), participant


async def _balance(s: Session, key: Pubkey) -> int:
    acc = await s.token_account(key)
    return 0 if acc is None else acc.amount


async def rewards_json(s: Session, run_id: str, user: Pubkey) -> dict[str, Any]:
    """``user``'s rewards in a Treasurer run (for ``json-dump-user``): points earned, slashed,
    paid and claimable, what they are worth, and what the escrow holds. A run that is not the
    Treasurer's gives ``{"treasurer": None}``."""
    run = await treasurer_run(s, run_id)
    if run is None:
        return {"treasurer": None}
    c, participant = await _standing(s, run, user)
    program = s.treasurer.program_id
    return {
        "treasurer": run.to_json(program),
        "user": str(user),
        "registered": c.registered,
        "earned": c.earned,
        "slashed": c.slashed,
        "participant": str(participant_pda(program, run.address, user))
        if participant is not None
        else None,
        "claimed_points": c.claimed_points,
        "claimed_collateral": c.claimed_collateral,
        "claimable_points": c.points,
        "claimable_amount": c.points * run.collateral_per_point,
        "escrow_balance": await _balance(s, run.collateral(program)),
    }


async def claim_rewards(s: Session, run_id: str, points: int | None = None) -> dict[str, Any]:
    """Claim ``points`` (everything claimable if None) for the wallet, paid into its associated
    token account of the run's collateral mint. Creates the ``Participant`` and that token
    account first if they are missing, in the same transaction."""
    run = await require_run(s, run_id)
    me = s.wallet.pubkey()
    program = s.treasurer.program_id
    c, participant = await _standing(s, run, me)
    available = c.points
    if available == 0:
        raise ChainError(
            f"nothing to claim in run {run_id!r} for {me}: "
            + (
                f"earned {c.earned}, slashed {c.slashed}, already paid for {c.claimed_points}"
                if c.registered
                else "the wallet is not registered in the run"
            )
        )
    if points is None:
        points = available
    if not 1 <= points <= available:
        raise ChainError(f"cannot claim {points} points: {available} are claimable")
    rate = run.collateral_per_point
    needed = points * rate
    escrow = run.collateral(program)
    held = await _balance(s, escrow)
    if held < needed:
        raise ChainError(
            f"the run's escrow {escrow} holds {held} base units; {points} points × {rate} "
            f"need {needed} ({needed - held} short): top it up (treasurer-top-up-rewards) "
            "and claim again"
        )
    dest = associated_token_address(me, run.collateral_mint)
    ixs: list[Instruction] = []
    if participant is None:
        ixs.append(participant_create_ix(s.treasurer, me, me, run.address))
    ixs.append(create_associated_account_ix(me, me, run.collateral_mint))
    ixs.append(participant_claim_ix(s.treasurer, run, me, dest, points))
    sig = await s.sender(s.treasurer).send(ixs, label="treasurer-claim-rewards")
    return {
        "run_id": run_id,
        "user": str(me),
        "points_claimed": points,
        "amount_paid": needed,
        "token_account": str(dest),
        "balance_after": await _balance(s, dest),
        "claimable_points_after": available - points,
        "escrow_balance_after": await _balance(s, escrow),
        "signature": sig,
    }


async def top_up_rewards(s: Session, run_id: str, amount: int) -> dict[str, Any]:
    """Move ``amount`` base units from the wallet's associated token account of the run's
    collateral mint into the run's escrow (a plain SPL ``transfer``)."""
    if amount <= 0:
        raise ChainError("the amount must be at least 1 base unit")
    run = await require_run(s, run_id)
    me = s.wallet.pubkey()
    source = associated_token_address(me, run.collateral_mint)
    have = await _balance(s, source)
    if have < amount:
        raise ChainError(
            f"the wallet's token account {source} of mint {run.collateral_mint} holds {have} "
            f"base units; {amount} asked"
        )
    escrow = run.collateral(s.treasurer.program_id)
    ix = transfer_ix(source, escrow, me, as_u64(amount))
    sig = await s.sender(s.treasurer).send([ix], label="treasurer-top-up-rewards")
    return {
        "run_id": run_id,
        "amount": amount,
        "run_collateral": str(escrow),
        "escrow_balance_after": await _balance(s, escrow),
        "signature": sig,
    }


# --- winding a run down -------------------------------------------------------------------------


def _require_main_authority(s: Session, run: TreasurerRun, what: str) -> Pubkey:
    me = s.wallet.pubkey()
    if me != run.main_authority:
        raise ChainError(
            f"only the run's main authority {run.main_authority} can {what} it, not {me}"
        )
    return me


async def wind_down_run(s: Session, run_id: str) -> dict[str, Any]:
    """``run_wind_down``: the coordinator pauses for good (``run_update`` is refused from then
    on), participants keep claiming, and ``close-run`` is allowed
    :data:`RUN_CLOSE_GRACE_SECONDS` later."""
    run = await require_run(s, run_id)
    _require_main_authority(s, run, "wind down")
    if run.wind_down_at:
        raise ChainError(
            f"run {run_id!r} has been winding down since unix time {run.wind_down_at}; "
            f"treasurer-close-run is allowed from {run.wind_down_at + RUN_CLOSE_GRACE_SECONDS}"
        )
    ix = run_wind_down_ix(s.treasurer, run, s.coordinator.program_id)
    sig = await _cpi_sender(s).send([ix], label="treasurer-wind-down")
    after = await require_run(s, run_id)
    return {
        "run_id": run_id,
        "treasurer_run": str(run.address),
        "wind_down_at": after.wind_down_at,
        "closable_at": after.wind_down_at + RUN_CLOSE_GRACE_SECONDS,
        "signature": sig,
    }


CLOCK_SYSVAR = Pubkey.from_string("SysvarC1ock11111111111111111111111111111111")


async def _cluster_time(s: Session) -> int | None:
    """The cluster clock's ``unix_timestamp`` (the Clock sysvar: slot, epoch start, epoch,
    leader schedule epoch, then the i64 at byte 32), None if it cannot be read."""
    data = await s.read(CLOCK_SYSVAR)
    if data is None or len(data) < 40:
        return None
    return int.from_bytes(data[32:40], "little", signed=True)


async def close_run(s: Session, run_id: str) -> dict[str, Any]:
    """``run_close``: once the grace period has passed, the escrow's remainder goes to the main
    authority's associated token account (created if missing) and the rent of the escrow and of
    the coordinator's accounts to the main authority. Points not claimed by then are no longer
    payable."""
    run = await require_run(s, run_id)
    me = _require_main_authority(s, run, "close")
    if not run.wind_down_at:
        raise ChainError(
            f"run {run_id!r} is not winding down: run treasurer-wind-down first, then wait "
            f"{RUN_CLOSE_GRACE_SECONDS // 86400} days"
        )
    opens = run.wind_down_at + RUN_CLOSE_GRACE_SECONDS
    now = await _cluster_time(s)
    if now is not None and now < opens:
        raise ChainError(
            f"run {run_id!r} can be closed from unix time {opens} ({opens - now} s from now)"
        )
    escrow = run.collateral(s.treasurer.program_id)
    remainder = await _balance(s, escrow)
    dest = associated_token_address(me, run.collateral_mint)
    ixs = [
        create_associated_account_ix(me, me, run.collateral_mint),
        run_close_ix(s.treasurer, run, s.coordinator.program_id, dest),
    ]
    sig = await _cpi_sender(s).send(ixs, label="treasurer-close-run")
    return {
        "run_id": run_id,
        "treasurer_run": str(run.address),
        "remainder_paid": remainder,
        "token_account": str(dest),
        "signature": sig,
    }


# --- local testnets -----------------------------------------------------------------------------

HOLDERS_PER_TRANSACTION = 4


async def create_test_mint(
    s: Session, decimals: int, mint_to: Sequence[tuple[Pubkey, int]] = ()
) -> dict[str, Any]:
    """A new classic SPL mint with the wallet as mint authority (no freeze authority), and
    ``amount`` base units minted to each holder's associated token account (created if needed).
    For local testnets: whoever holds the wallet can mint more."""
    if not 0 <= decimals <= 255:
        raise ChainError(f"decimals must be 0..=255, not {decimals}")
    me = s.wallet.pubkey()
    mint = Keypair()
    rent = await s.rpcs[0].minimum_balance(MINT_LEN)
    sender = s.sender(s.treasurer)
    sigs = [
        await sender.send(
            create_mint_ixs(me, mint, me, decimals, rent), [mint], label="create-test-mint"
        )
    ]
    holders = []
    for i in range(0, len(mint_to), HOLDERS_PER_TRANSACTION):
        ixs: list[Instruction] = []
        for owner, amount in mint_to[i : i + HOLDERS_PER_TRANSACTION]:
            dest = associated_token_address(owner, mint.pubkey())
            ixs.append(create_associated_account_ix(me, owner, mint.pubkey()))
            ixs.append(mint_to_ix(mint.pubkey(), dest, me, as_u64(amount)))
            holders.append((owner, dest))
        sigs.append(await sender.send(ixs, label="create-test-mint: mint-to"))
    return {
        "mint": str(mint.pubkey()),
        "decimals": decimals,
        "mint_authority": str(me),
        "holders": [
            {"owner": str(o), "token_account": str(d), "balance": await _balance(s, d)}
            for o, d in holders
        ],
        "signatures": sigs,
    }
