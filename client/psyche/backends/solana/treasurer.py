"""The Treasurer program (docs/rewards.md, "Treasurer") from the client's side: the run that pays
its coordinator points in an SPL token, and the commands around it.

* PDAs: :func:`run_pda` (``["Run", index u64 LE]``), :func:`run_collateral_pda`
  (``["RunCollateral", run]``), :func:`participant_pda` (``["Participant", run, user]``);
  :func:`default_treasurer_index` is the index ``create-run`` uses without ``--treasurer-index``.
* :func:`treasurer_run` tells whether a run is the Treasurer's: its coordinator's
  ``main_authority`` is an account owned by the Treasurer that decodes as a ``Run`` of this very
  coordinator instance. :mod:`psyche.backends.solana.admin` routes the owner's commands through
  ``run_update`` when it is.
* Coroutines the CLI calls (:mod:`psyche.cli.solana_treasurer`, ``create-run
  --treasurer-collateral-mint``), each taking a
  :class:`~psyche.backends.solana.session.Session` and returning JSON-able results:
  :func:`create_run_via_treasurer`, :func:`claim_rewards`, :func:`top_up_rewards`,
  :func:`rewards_json`, :func:`create_test_mint`, :func:`wind_down_run`, :func:`close_run`.

Instruction bytes and account order come from the Treasurer's IDL through
:meth:`~psyche.solana.instructions.ProgramClient.build`; only the meaning of each account
is written here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from psyche.backends.base import BackendError
from psyche.backends.solana.budget import ComputeBudget
from psyche.backends.solana.rpc import COMMITMENT, RpcError, TxSender, decode_account_data
from psyche.backends.solana.run_account import (
    create_coordinator_account_ix,
    default_local_run,
    metadata_arg,
)
from psyche.backends.solana.session import Session
from psyche.backends.solana.tokens import (
    MINT_LEN,
    TOKEN_PROGRAM_ID,
    associated_token_address,
    create_associated_account_ix,
    create_mint_ixs,
    mint_to_ix,
    transfer_ix,
)
from psyche.solana.idl import IdlError
from psyche.solana.instructions import ProgramClient, instance_pda

__all__ = [
    "RUN_CLOSE_GRACE_SECONDS",
    "TREASURER_PARTICIPANT_SEED",
    "TREASURER_RUN_COLLATERAL_SEED",
    "TREASURER_RUN_SEED",
    "Claimable",
    "TreasurerRun",
    "claim_rewards",
    "claimable",
    "close_run",
    "create_run_via_treasurer",
    "create_test_mint",
    "default_treasurer_index",
    "participant_claim_ix",
    "participant_create_ix",
    "participant_pda",
    "rewards_json",
    "run_close_ix",
    "run_collateral_pda",
    "run_create_ix",
    "run_pda",
    "run_update_ix",
    "run_wind_down_ix",
    "top_up_rewards",
    "treasurer_run",
    "wind_down_run",
]

TREASURER_RUN_SEED = b"Run"
TREASURER_RUN_COLLATERAL_SEED = b"RunCollateral"
TREASURER_PARTICIPANT_SEED = b"Participant"
RUN_CLOSE_GRACE_SECONDS = 7 * 24 * 3600
"""Seconds between ``run_wind_down`` and the first allowed ``run_close`` (the program's
constant, checked against the IDL by the tests)."""
U64_MAX = 2**64 - 1


# --- addresses ----------------------------------------------------------------------------------


def run_pda(program: Pubkey, index: int) -> Pubkey:
    """The Treasurer's ``Run`` of ``index``: ``["Run", index u64 LE]``."""
    return Pubkey.find_program_address(
        [TREASURER_RUN_SEED, _u64(index).to_bytes(8, "little")], program
    )[0]


def run_collateral_pda(program: Pubkey, run: Pubkey) -> Pubkey:
    """The run's escrow (an SPL token account): ``["RunCollateral", run]``."""
    return Pubkey.find_program_address([TREASURER_RUN_COLLATERAL_SEED, bytes(run)], program)[0]


def participant_pda(program: Pubkey, run: Pubkey, user: Pubkey) -> Pubkey:
    """What ``user`` was paid from ``run``: ``["Participant", run, user]``."""
    seeds = [TREASURER_PARTICIPANT_SEED, bytes(run), bytes(user)]
    return Pubkey.find_program_address(seeds, program)[0]


def default_treasurer_index(run_id: str) -> int:
    """The ``Run`` index ``create-run`` uses for ``run_id``: the first 8 bytes of
    ``sha256(run_id)``, little-endian."""
    return int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:8], "little")


def _u64(value: int) -> int:
    if not 0 <= value <= U64_MAX:
        raise BackendError(f"{value} is not a u64")
    return value


# --- the Run account ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TreasurerRun:
    """A decoded ``Run`` account and its address."""

    address: Pubkey
    index: int
    main_authority: Pubkey
    join_authority: Pubkey
    coordinator_instance: Pubkey
    coordinator_account: Pubkey
    collateral_mint: Pubkey
    collateral_per_point: int
    total_claimed_points: int
    total_claimed_collateral: int
    wind_down_at: int = 0
    """Cluster unix time of ``run_wind_down``; 0 while the run is not winding down."""

    @classmethod
    def decode(cls, program: ProgramClient, address: Pubkey, data: bytes) -> TreasurerRun:
        raw = program.idl.decode_account("Run", data)

        def key(name: str) -> Pubkey:
            return Pubkey.from_bytes(bytes(raw[name]))

        return cls(
            address=address,
            index=int(raw["index"]),
            main_authority=key("main_authority"),
            join_authority=key("join_authority"),
            coordinator_instance=key("coordinator_instance"),
            coordinator_account=key("coordinator_account"),
            collateral_mint=key("collateral_mint"),
            collateral_per_point=int(raw["collateral_per_point"]),
            total_claimed_points=int(raw["total_claimed_points"]),
            total_claimed_collateral=int(raw["total_claimed_collateral"]),
            wind_down_at=int(raw["wind_down_at"]),
        )

    def collateral(self, program: Pubkey) -> Pubkey:
        return run_collateral_pda(program, self.address)

    def to_json(self, program: Pubkey) -> dict[str, Any]:
        return {
            "run": str(self.address),
            "index": self.index,
            "main_authority": str(self.main_authority),
            "join_authority": str(self.join_authority),
            "coordinator_instance": str(self.coordinator_instance),
            "coordinator_account": str(self.coordinator_account),
            "collateral_mint": str(self.collateral_mint),
            "run_collateral": str(self.collateral(program)),
            "collateral_per_point": self.collateral_per_point,
            "total_claimed_points": self.total_claimed_points,
            "total_claimed_collateral": self.total_claimed_collateral,
            "wind_down_at": self.wind_down_at or None,
            "closable_at": self.wind_down_at + RUN_CLOSE_GRACE_SECONDS
            if self.wind_down_at
            else None,
        }


async def _read_with_owner(s: Session, key: Pubkey) -> tuple[Pubkey, bytes] | None:
    """(owner, data) of the account at ``key``, None if there is none."""
    last: Exception | None = None
    params = [str(key), {"encoding": "base64", "commitment": COMMITMENT}]
    for rpc in s.rpcs:
        try:
            res = await rpc.call("getAccountInfo", params)
            value = res.get("value") if isinstance(res, dict) else None
            if value is None:
                return None
            try:
                owner = Pubkey.from_string(str(value.get("owner")))
            except ValueError:
                raise RpcError(f"{rpc.url}: getAccountInfo: bad owner") from None
            return owner, decode_account_data(value)
        except BackendError as e:
            last = e
    raise RpcError(f"no RPC endpoint answered: {last}")


async def treasurer_run(
    s: Session, run_id: str, instance: Mapping[str, Any] | None = None
) -> TreasurerRun | None:
    """The Treasurer's ``Run`` that owns ``run_id``'s coordinator, or None when the run's
    ``main_authority`` is not one (a wallet, as for a run made by plain ``create-run``).
    ``instance``: the decoded ``CoordinatorInstance`` if the caller has read it already."""
    inst = instance if instance is not None else await s.instance(run_id)
    authority = Pubkey.from_bytes(bytes(inst["main_authority"]))
    if authority.is_on_curve():
        return None  # a wallet's key: PDAs are off the curve
    found = await _read_with_owner(s, authority)
    if found is None or found[0] != s.treasurer.program_id:
        return None
    try:
        run = TreasurerRun.decode(s.treasurer, authority, found[1])
    except (IdlError, ValueError, KeyError, IndexError):
        return None
    if run.coordinator_instance != instance_pda(s.coordinator.program_id, run_id):
        return None
    return run


async def _require_run(s: Session, run_id: str) -> TreasurerRun:
    run = await treasurer_run(s, run_id)
    if run is None:
        raise BackendError(
            f"run {run_id!r} was not created through the Treasurer (its coordinator's "
            "main_authority is not a Treasurer Run): it pays no rewards"
        )
    return run


# --- compute budget -----------------------------------------------------------------------------


def _cpi_sender(s: Session) -> TxSender:
    """The sender for ``run_create`` and ``run_update``: a refusal's custom code is the
    Treasurer's (from 7000) or the coordinator's (from 6000, passed on from its CPI)."""

    def name(code: int) -> str | None:
        theirs = s.coordinator.idl.error_name(code)
        return s.treasurer.idl.error_name(code) or (theirs and f"{theirs} (coordinator)")

    budget = ComputeBudget([s.coordinator, s.authorizer, s.treasurer, s.mining_pool])
    return TxSender(s.rpcs, s.wallet, error_names=name, prepare=budget)


# --- instructions -------------------------------------------------------------------------------


def run_update_fields(program: ProgramClient) -> list[str]:
    """The fields of ``RunUpdateParams`` in the IDL."""
    ix = program.idl.instruction("run_update")
    (name, tp), *_ = ix.args
    if name != "params":
        return [a for a, _ in ix.args]
    type_name = tp["defined"]["name"] if isinstance(tp.get("defined"), dict) else tp["defined"]
    return [f["name"] for f in program.idl.types[type_name]["type"]["fields"]]


def run_update_ix(
    program: ProgramClient,
    run: TreasurerRun,
    authority: Pubkey,
    coordinator_program: Pubkey,
    fields: Mapping[str, Any],
) -> Instruction:
    """``run_update`` with ``fields`` set (every other field None); ``authority`` signs."""
    names = run_update_fields(program)
    unknown = set(fields) - set(names)
    if unknown:
        raise IdlError(f"run_update has no field(s) {sorted(unknown)}")
    params = {n: fields.get(n) for n in names}
    accounts = {
        "authority": authority,
        "run": run.address,
        "coordinator_instance": run.coordinator_instance,
        "coordinator_account": run.coordinator_account,
        "coordinator_program": coordinator_program,
    }
    return program.build("run_update", {"params": params}, accounts)


def run_create_ix(
    program: ProgramClient,
    coordinator_program: Pubkey,
    *,
    payer: Pubkey,
    main_authority: Pubkey,
    index: int,
    run_id: str,
    client_version: str,
    join_authority: Pubkey,
    collateral_per_point: int,
    collateral_mint: Pubkey,
    coordinator_account: Pubkey,
    local_run: bool = False,
) -> Instruction:
    """``run_create``: the ``Run`` of ``index``, its escrow and (by CPI) the coordinator run
    ``run_id`` in ``coordinator_account`` (created just before, owned by the coordinator)."""
    run = run_pda(program.program_id, index)
    params = {
        "index": index,
        "run_id": run_id,
        "client_version": client_version,
        "join_authority": join_authority,
        "collateral_per_point": collateral_per_point,
        "local_run": local_run,
    }
    accounts = {
        "payer": payer,
        "main_authority": main_authority,
        "run": run,
        "collateral_mint": collateral_mint,
        "run_collateral": run_collateral_pda(program.program_id, run),
        "coordinator_instance": instance_pda(coordinator_program, run_id),
        "coordinator_account": coordinator_account,
        "coordinator_program": coordinator_program,
        "token_program": TOKEN_PROGRAM_ID,
    }
    return program.build("run_create", {"params": params}, accounts)


def participant_create_ix(
    program: ProgramClient, payer: Pubkey, user: Pubkey, run: Pubkey
) -> Instruction:
    """``participant_create``: ``user``'s claim record in ``run`` (``payer`` pays the rent)."""
    accounts = {
        "payer": payer,
        "user": user,
        "run": run,
        "participant": participant_pda(program.program_id, run, user),
    }
    return program.build("participant_create", {}, accounts)


def participant_claim_ix(
    program: ProgramClient, run: TreasurerRun, user: Pubkey, user_collateral: Pubkey, points: int
) -> Instruction:
    """``participant_claim`` of ``points``, paid into ``user_collateral``."""
    accounts = {
        "user": user,
        "user_collateral": user_collateral,
        "run": run.address,
        "run_collateral": run.collateral(program.program_id),
        "participant": participant_pda(program.program_id, run.address, user),
        "coordinator_account": run.coordinator_account,
        "token_program": TOKEN_PROGRAM_ID,
    }
    return program.build("participant_claim", {"params": {"claim_points": points}}, accounts)


def run_wind_down_ix(
    program: ProgramClient, run: TreasurerRun, coordinator_program: Pubkey
) -> Instruction:
    """``run_wind_down``, signed by the run's main authority."""
    accounts = {
        "authority": run.main_authority,
        "run": run.address,
        "coordinator_instance": run.coordinator_instance,
        "coordinator_account": run.coordinator_account,
        "coordinator_program": coordinator_program,
    }
    return program.build("run_wind_down", {}, accounts)


def run_close_ix(
    program: ProgramClient,
    run: TreasurerRun,
    coordinator_program: Pubkey,
    authority_collateral: Pubkey,
) -> Instruction:
    """``run_close``: the escrow's remainder to ``authority_collateral`` (a token account of the
    main authority), the rent to the main authority, which signs."""
    accounts = {
        "authority": run.main_authority,
        "authority_collateral": authority_collateral,
        "run": run.address,
        "run_collateral": run.collateral(program.program_id),
        "coordinator_instance": run.coordinator_instance,
        "coordinator_account": run.coordinator_account,
        "coordinator_program": coordinator_program,
        "token_program": TOKEN_PROGRAM_ID,
    }
    return program.build("run_close", {}, accounts)


# --- creating a run -----------------------------------------------------------------------------


async def _new_run_addresses(s: Session, run_id: str, index: int, run: Pubkey) -> Pubkey:
    """The run's coordinator instance, once neither it nor the Treasurer's Run exists yet."""
    instance = instance_pda(s.coordinator.program_id, run_id)
    if await s.read(instance) is not None:
        raise BackendError(f"run {run_id!r} exists already (coordinator instance {instance})")
    if await s.read(run) is not None:
        raise BackendError(
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
    ``local_run`` as in :func:`~psyche.backends.solana.admin.create_run`."""
    local = default_local_run(s) if local_run is None else local_run

    if collateral_per_point <= 0:
        raise BackendError("collateral per point must be at least 1 base unit")
    index = default_treasurer_index(run_id) if index is None else _u64(index)
    _u64(collateral_per_point)
    mint = await s.mint(collateral_mint)  # refuses a missing or non-SPL mint before paying
    me = s.wallet.pubkey()
    program = s.treasurer.program_id
    run = run_pda(program, index)
    instance = await _new_run_addresses(s, run_id, index, run)
    account = Keypair()
    size = s.layout.size
    create = await create_coordinator_account_ix(s, account)
    init = run_create_ix(
        s.treasurer,
        s.coordinator.program_id,
        payer=me,
        main_authority=me,
        index=index,
        run_id=run_id,
        client_version=client_version,
        join_authority=join_authority or me,
        collateral_per_point=collateral_per_point,
        collateral_mint=collateral_mint,
        coordinator_account=account.pubkey(),
        local_run=local,
    )
    ixs = [create, init]
    if name is not None or description is not None:
        created = TreasurerRun(
            run, index, me, join_authority or me, instance,
            account.pubkey(), collateral_mint, collateral_per_point, 0, 0, 0,
        )  # fmt: skip
        meta = metadata_arg(name or "", description or "")
        update = run_update_ix(
            s.treasurer, created, me, s.coordinator.program_id, {"metadata": meta}
        )
        ixs.append(update)
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


async def send_run_update(
    s: Session, run: TreasurerRun, fields: Mapping[str, Any], label: str
) -> str:
    """One ``run_update`` signed by the wallet (which must be the Run's main authority)."""
    me = s.wallet.pubkey()
    if me != run.main_authority:
        raise BackendError(
            f"the run is the Treasurer's ({run.address}); only its main authority "
            f"{run.main_authority} can update it, not {me}"
        )
    ix = run_update_ix(s.treasurer, run, me, s.coordinator.program_id, fields)
    return await _cpi_sender(s).send([ix], label=label)


# --- points and payments ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Claimable:
    """A wallet's standing in a Treasurer run."""

    registered: bool
    earned: int
    slashed: int
    claimed_points: int
    claimed_collateral: int

    @property
    def points(self) -> int:
        """``earned − slashed − claimed_points``, at least 0 (as the program computes it)."""
        return max(0, self.earned - self.slashed - self.claimed_points)


def claimable(
    coordinator_account: Mapping[str, Any], participant: Mapping[str, Any] | None, user: Pubkey
) -> Claimable:
    """What ``user`` may still claim, from the IDL-decoded coordinator account and its
    ``Participant`` (None before its first claim). The registration is the first entry whose
    signer is the wallet, as the program finds it."""
    cs = coordinator_account["state"]["clients_state"]
    entry = next(
        (c for c in cs["clients"][: cs["num_clients"]] if bytes(c["id"]["signer"]) == bytes(user)),
        None,
    )
    return Claimable(
        registered=entry is not None,
        earned=int(entry["earned"]) if entry is not None else 0,
        slashed=int(entry["slashed"]) if entry is not None else 0,
        claimed_points=int(participant["claimed_points"]) if participant else 0,
        claimed_collateral=int(participant["claimed_collateral"]) if participant else 0,
    )


async def _standing(
    s: Session, run: TreasurerRun, user: Pubkey
) -> tuple[Claimable, dict[str, Any] | None]:
    data = await s.read(run.coordinator_account)
    if data is None:
        raise BackendError(f"coordinator account {run.coordinator_account} does not exist")
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
    run = await _require_run(s, run_id)
    me = s.wallet.pubkey()
    program = s.treasurer.program_id
    c, participant = await _standing(s, run, me)
    available = c.points
    if available == 0:
        raise BackendError(
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
        raise BackendError(f"cannot claim {points} points: {available} are claimable")
    rate = run.collateral_per_point
    needed = points * rate
    escrow = run.collateral(program)
    held = await _balance(s, escrow)
    if held < needed:
        raise BackendError(
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
        raise BackendError("the amount must be at least 1 base unit")
    run = await _require_run(s, run_id)
    me = s.wallet.pubkey()
    source = associated_token_address(me, run.collateral_mint)
    have = await _balance(s, source)
    if have < amount:
        raise BackendError(
            f"the wallet's token account {source} of mint {run.collateral_mint} holds {have} "
            f"base units; {amount} asked"
        )
    escrow = run.collateral(s.treasurer.program_id)
    ix = transfer_ix(source, escrow, me, _u64(amount))
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
        raise BackendError(
            f"only the run's main authority {run.main_authority} can {what} it, not {me}"
        )
    return me


async def wind_down_run(s: Session, run_id: str) -> dict[str, Any]:
    """``run_wind_down``: the coordinator pauses for good (``run_update`` is refused from then
    on), participants keep claiming, and ``close-run`` is allowed
    :data:`RUN_CLOSE_GRACE_SECONDS` later."""
    run = await _require_run(s, run_id)
    _require_main_authority(s, run, "wind down")
    if run.wind_down_at:
        raise BackendError(
            f"run {run_id!r} has been winding down since unix time {run.wind_down_at}; "
            f"treasurer-close-run is allowed from {run.wind_down_at + RUN_CLOSE_GRACE_SECONDS}"
        )
    ix = run_wind_down_ix(s.treasurer, run, s.coordinator.program_id)
    sig = await _cpi_sender(s).send([ix], label="treasurer-wind-down")
    after = await _require_run(s, run_id)
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
    run = await _require_run(s, run_id)
    me = _require_main_authority(s, run, "close")
    if not run.wind_down_at:
        raise BackendError(
            f"run {run_id!r} is not winding down: run treasurer-wind-down first, then wait "
            f"{RUN_CLOSE_GRACE_SECONDS // 86400} days"
        )
    opens = run.wind_down_at + RUN_CLOSE_GRACE_SECONDS
    now = await _cluster_time(s)
    if now is not None and now < opens:
        raise BackendError(
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
        raise BackendError(f"decimals must be 0..=255, not {decimals}")
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
            ixs.append(mint_to_ix(mint.pubkey(), dest, me, _u64(amount)))
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
