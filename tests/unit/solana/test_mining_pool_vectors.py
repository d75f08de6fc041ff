"""Cross-language Mining Pool vectors: what the Rust program's scenario sent
(``tests/vectors/solana/mining_pool.json``, format of ``whole_epoch.json``: steps → instructions
with program, name, args, data hex and account metas) against what the Python client sends.

Every mining-pool instruction of the file is rebuilt from its recorded ``args`` by
:class:`~psyche.solana.programs.mining_pool.MiningPoolInstructions` (the builders the
``mining-pool-*`` commands send through) and must equal the recorded one byte for byte: program
id, data, account metas. The pool's addresses are derived here from the index of its
``pool_create`` (the pool, its two token accounts, each lender); only what a user chooses (payer,
signers, mints, the user's own token accounts) is taken from the file. The reverse direction
too: the IDL decodes the Rust bytes to the recorded arguments.

And the client's checks before sending: replaying the scenario on the client's own
``PoolState`` / ``LenderState``, the refusal functions the commands use refuse exactly the steps
the program refused, naming the same error, and let every accepted step through.

The file is written by the Rust side; a missing file fails (never skips).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from solders.instruction import Instruction
from solders.pubkey import Pubkey

from psyche.solana.idl import IdlCodec
from psyche.solana.instructions import ProgramClient
from psyche.solana.programs.mining_pool import (
    LenderState,
    MiningPoolInstructions,
    PoolRefusal,
    PoolState,
    claim_refusal,
    deposit_refusal,
    extract_refusal,
    lender_pda,
    pool_collateral_pda,
    pool_pda,
    pool_redeemable_pda,
    redeemable_deposit_refusal,
    update_refusal,
)

from .idl_support import IDL_DIR, VECTORS

FILE = VECTORS / "solana" / "mining_pool.json"
PROGRAM_NAME = "psyche_mining_pool"


@cache
def scenario() -> dict[str, Any]:
    assert FILE.is_file(), f"{FILE} is missing (written and committed by the Rust side)"
    doc: dict[str, Any] = json.loads(FILE.read_text())
    return doc


@cache
def idl() -> IdlCodec:
    return IdlCodec.load(IDL_DIR / "psyche_mining_pool.json")


def _pk(text: str) -> Pubkey:
    return Pubkey.from_string(text)


def _metas(ix: Instruction) -> list[dict[str, Any]]:
    return [
        {"pubkey": str(m.pubkey), "is_signer": m.is_signer, "is_writable": m.is_writable}
        for m in ix.accounts
    ]


def _params(rec: dict[str, Any]) -> dict[str, Any]:
    args: dict[str, Any] = rec["args"]
    return args.get("params", args)


@dataclass
class Context:
    ixs: MiningPoolInstructions
    pools: dict[Pubkey, int] = field(default_factory=dict)
    """Pool address → its index, from each ``pool_create`` (derived, then checked)."""
    checks: Counter[str] = field(default_factory=Counter)

    def account(self, rec: dict[str, Any], name: str) -> Pubkey:
        """The recorded key of the IDL account ``name`` (for what a user chooses)."""
        names = [a.name for a in idl().instruction(rec["name"]).accounts]
        return _pk(rec["accounts"][names.index(name)]["pubkey"])

    def index(self, rec: dict[str, Any]) -> int:
        pool = self.account(rec, "pool")
        assert pool in self.pools, f"{rec['name']}: pool {pool} was not created by pool_create"
        return self.pools[pool]


def _pool_create(ctx: Context, rec: dict[str, Any]) -> Instruction:
    p = _params(rec)
    index = p["index"]
    ctx.pools[pool_pda(ctx.ixs.program_id, index)] = index
    return ctx.ixs.pool_create(
        ctx.account(rec, "payer"),
        ctx.account(rec, "authority"),
        index,
        ctx.account(rec, "collateral_mint"),
        ctx.account(rec, "redeemable_mint"),
        p["max_deposit_collateral_amount"],
    )


def _pool_update(ctx: Context, rec: dict[str, Any]) -> Instruction:
    p = _params(rec)
    return ctx.ixs.pool_update(
        ctx.account(rec, "authority"),
        ctx.index(rec),
        p["max_deposit_collateral_amount"],
        p["freeze"],
    )


def _pool_extract(ctx: Context, rec: dict[str, Any]) -> Instruction:
    return ctx.ixs.pool_extract(
        ctx.account(rec, "authority"),
        ctx.index(rec),
        ctx.account(rec, "authority_collateral"),
        _params(rec)["collateral_amount"],
    )


def _pool_redeemable_deposit(ctx: Context, rec: dict[str, Any]) -> Instruction:
    return ctx.ixs.pool_redeemable_deposit(
        ctx.account(rec, "authority"),
        ctx.index(rec),
        ctx.account(rec, "authority_redeemable"),
        _params(rec)["redeemable_amount"],
    )


def _lender_create(ctx: Context, rec: dict[str, Any]) -> Instruction:
    assert rec["args"] == {}
    return ctx.ixs.lender_create(
        ctx.account(rec, "payer"), ctx.account(rec, "user"), ctx.index(rec)
    )


def _lender_deposit(ctx: Context, rec: dict[str, Any]) -> Instruction:
    return ctx.ixs.lender_deposit(
        ctx.account(rec, "user"),
        ctx.index(rec),
        ctx.account(rec, "user_collateral"),
        _params(rec)["collateral_amount"],
    )


def _lender_claim(ctx: Context, rec: dict[str, Any]) -> Instruction:
    return ctx.ixs.lender_claim(
        ctx.account(rec, "user"),
        ctx.index(rec),
        ctx.account(rec, "user_redeemable"),
        _params(rec)["redeemable_amount"],
    )


BUILDERS: dict[str, Callable[[Context, dict[str, Any]], Instruction]] = {
    "pool_create": _pool_create,
    "pool_update": _pool_update,
    "pool_extract": _pool_extract,
    "pool_redeemable_deposit": _pool_redeemable_deposit,
    "lender_create": _lender_create,
    "lender_deposit": _lender_deposit,
    "lender_claim": _lender_claim,
}


def _records() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for n, step in enumerate(scenario()["steps"]):
        for rec in step["instructions"]:
            if rec["program"] == PROGRAM_NAME:
                out.append((f"step {n} ({step['label']})", rec))
    return out


def test_program_id_is_the_committed_idls_address() -> None:
    assert scenario()["programs"][PROGRAM_NAME] == idl().address


def test_every_mining_pool_instruction_is_built_byte_identical() -> None:
    program_id = _pk(scenario()["programs"][PROGRAM_NAME])
    ctx = Context(MiningPoolInstructions(ProgramClient(idl(), program_id)))
    checked: Counter[str] = Counter()
    for where, rec in _records():
        at = f"{where}: {rec['name']}"
        assert rec["name"] in BUILDERS, f"{at}: no Python builder"
        ix = BUILDERS[rec["name"]](ctx, rec)
        assert rec["program_id"] == str(program_id), at
        assert str(ix.program_id) == rec["program_id"], at
        assert bytes(ix.data).hex() == rec["data"], at
        assert _metas(ix) == rec["accounts"], at
        checked[rec["name"]] += 1
    # Every instruction of the program appears at least once.
    assert set(checked) == set(BUILDERS), f"not in the scenario: {set(BUILDERS) - set(checked)}"
    print(f"\n{sum(checked.values())} mining pool instructions: {dict(checked)}")


def test_the_pool_accounts_are_the_derived_pdas() -> None:
    """Each recorded pool, pool token account and lender is at the address Python derives."""
    program_id = _pk(scenario()["programs"][PROGRAM_NAME])
    ctx = Context(MiningPoolInstructions(ProgramClient(idl(), program_id)))
    n = 0
    for _, rec in _records():
        if rec["name"] == "pool_create":
            _pool_create(ctx, rec)
        pool = ctx.account(rec, "pool")
        index = ctx.index(rec)
        assert pool == pool_pda(program_id, index)
        names = {a.name for a in idl().instruction(rec["name"]).accounts}
        if "pool_collateral" in names:
            assert ctx.account(rec, "pool_collateral") == pool_collateral_pda(program_id, pool)
        if "pool_redeemable" in names:
            assert ctx.account(rec, "pool_redeemable") == pool_redeemable_pda(program_id, pool)
        if "lender" in names:
            user = ctx.account(rec, "user")
            assert ctx.account(rec, "lender") == lender_pda(program_id, pool, user)
        n += 1
    assert n == len(_records()) > 0


def test_every_instruction_decodes_back_to_its_recorded_args() -> None:
    n = 0
    for where, rec in _records():
        name, args = idl().decode_instruction(bytes.fromhex(rec["data"]))
        assert name == rec["name"], where
        assert set(args) == set(rec["args"]), where
        n += 1
    assert n > 0


def test_refused_steps_name_the_idls_errors() -> None:
    """A step the program refused records ``{"error": name, "code": n}``; the IDL agrees."""
    for step in scenario()["steps"]:
        result = step["result"]
        if result == "ok" or step["instructions"][-1]["program"] != PROGRAM_NAME:
            continue
        assert idl().error_name(result["code"]) == result["error"], step["label"]


def test_the_client_refuses_exactly_what_the_program_refused() -> None:
    program_id = _pk(scenario()["programs"][PROGRAM_NAME])
    ctx = Context(MiningPoolInstructions(ProgramClient(idl(), program_id)))
    pools: dict[Pubkey, PoolState] = {}
    lenders: dict[Pubkey, LenderState] = {}
    seen: Counter[str] = Counter()
    for step in scenario()["steps"]:
        recs = [r for r in step["instructions"] if r["program"] == PROGRAM_NAME]
        if not recs:
            continue
        (rec,) = recs
        name, p, at = rec["name"], _params(rec), step["label"]
        refusal: PoolRefusal | None = None
        if name == "pool_create":
            _pool_create(ctx, rec)
            address = ctx.account(rec, "pool")
            pools[address] = PoolState(
                address, 0, p["index"], ctx.account(rec, "authority"),
                ctx.account(rec, "collateral_mint"), ctx.account(rec, "redeemable_mint"),
                p["max_deposit_collateral_amount"], 0, 0, 0, 0, False,
            )  # fmt: skip
            assert step["result"] == "ok", at
            continue
        address = ctx.account(rec, "pool")
        pool = pools[address]
        accounts = {a.name for a in idl().instruction(name).accounts}
        lender = lenders.get(ctx.account(rec, "lender")) if "lender" in accounts else None
        if name == "lender_create":
            user = ctx.account(rec, "user")
            key = lender_pda(program_id, address, user)
            lenders[key] = LenderState(key, 0, address, user, 0, 0)
        elif name == "pool_update":
            cap, freeze = p["max_deposit_collateral_amount"], p["freeze"]
            refusal = update_refusal(pool, cap, freeze)
            if refusal is None:
                pool = replace(pool, max_deposit_collateral_amount=(
                    pool.max_deposit_collateral_amount if cap is None else cap
                ), frozen=pool.frozen if freeze is None else freeze)  # fmt: skip
        elif name == "lender_deposit":
            amount = p["collateral_amount"]
            refusal = deposit_refusal(pool, amount)
            if refusal is None:
                assert lender is not None, at
                pool = replace(pool, total_deposited_collateral_amount=(
                    pool.total_deposited_collateral_amount + amount
                ))  # fmt: skip
                lender = replace(lender, deposited_collateral_amount=(
                    lender.deposited_collateral_amount + amount
                ))  # fmt: skip
        elif name == "pool_extract":
            # What the pool's collateral account holds: nothing else moves tokens into it here.
            amount = p["collateral_amount"]
            held = pool.total_deposited_collateral_amount - pool.total_extracted_collateral_amount
            refusal = extract_refusal(pool, held, amount)
            if refusal is None:
                pool = replace(pool, total_extracted_collateral_amount=(
                    pool.total_extracted_collateral_amount + amount
                ))  # fmt: skip
        elif name == "pool_redeemable_deposit":
            amount = p["redeemable_amount"]
            refusal = redeemable_deposit_refusal(pool)
            if refusal is None:
                pool = replace(pool, total_deposited_redeemable_amount=(
                    pool.total_deposited_redeemable_amount + amount
                ))  # fmt: skip
        elif name == "lender_claim":
            amount = p["redeemable_amount"]
            assert lender is not None, at
            refusal = claim_refusal(pool, lender, amount)
            if refusal is None:
                pool = replace(pool, total_claimed_redeemable_amount=(
                    pool.total_claimed_redeemable_amount + amount
                ))  # fmt: skip
                lender = replace(lender, claimed_redeemable_amount=(
                    lender.claimed_redeemable_amount + amount
                ))  # fmt: skip
        else:
            raise AssertionError(f"{at}: {name} not modelled")
        pools[address] = pool
        if lender is not None and name != "lender_create":
            lenders[lender.address] = lender
        theirs = step["result"]
        if theirs == "ok":
            assert refusal is None, f"{at}: the client would refuse: {refusal}"
        else:
            assert refusal is not None, f"{at}: the program refused {theirs}, the client would send"
            assert refusal.error == theirs["error"], f"{at}: {refusal}"
            print(f"\n{at}: {refusal}")
        seen[str(theirs if theirs == "ok" else theirs["error"])] += 1
    assert seen["ok"] > 0 and len(seen) > 1, seen
    # What the replay ends with is the program's arithmetic: each lender got its floor share.
    for lender in lenders.values():
        pool = pools[lender.pool]
        assert lender.claimable(pool) == 0
        assert lender.claimed_redeemable_amount == lender.entitled(pool)
    print(dict(seen))
