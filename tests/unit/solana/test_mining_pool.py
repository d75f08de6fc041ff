"""The Mining Pool client (docs/rewards.md, "Mining Pool"): its PDAs (derived independently here,
from the address derivation's definition, and seeded with the IDL's constants), the share
arithmetic (the program's floor shares, with many lenders and awkward numbers), and the
``mining-pool-*`` / ``json-dump-user`` commands against the RPC test double with the committed
IDL: flags and their environment twins, the transactions they send, and the clear refusals
(with the numbers) they make before sending anything. Against the real program in the local SVM:
tests/integration/solana/test_mining_pool_svm.py."""

from __future__ import annotations

import hashlib
import json
import random
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from psyche.cli.solana import solana
from psyche.solana.idl import IdlCodec
from psyche.solana.programs.mining_pool import (
    LENDER_SEED,
    POOL_COLLATERAL_SEED,
    POOL_REDEEMABLE_SEED,
    POOL_SEED,
    U64_MAX,
    claimable,
    entitlement,
    lender_pda,
    pool_collateral_pda,
    pool_pda,
    pool_redeemable_pda,
)
from psyche.solana.tokens import (
    ACCOUNT_LEN,
    ASSOCIATED_TOKEN_PROGRAM_ID,
    MINT_LEN,
    TOKEN_PROGRAM_ID,
    associated_token_address,
)

from ..backends.solana.test_cli_e2e import Node
from .idl_support import IDL_DIR

PROGRAM = Pubkey.from_string("3t2pGdtAW3UPetWp5aQhBQa8iZ7vokYP6mJGsbHVAYGR")
COMPUTE_BUDGET = Pubkey.from_string("ComputeBudget111111111111111111111111111111")


def mining_pool_idl() -> IdlCodec:
    return IdlCodec.load(IDL_DIR / "psyche_mining_pool.json")


# --- addresses ----------------------------------------------------------------------------------


def _create_program_address(seeds: list[bytes], program: Pubkey) -> Pubkey | None:
    """Solana's ``create_program_address``: sha256(seeds ‖ program ‖ "ProgramDerivedAddress"),
    valid only off the ed25519 curve."""
    digest = hashlib.sha256(b"".join(seeds) + bytes(program) + b"ProgramDerivedAddress").digest()
    key = Pubkey.from_bytes(digest)
    return None if key.is_on_curve() else key


def _find(seeds: list[bytes], program: Pubkey = PROGRAM) -> Pubkey:
    for bump in range(255, -1, -1):
        key = _create_program_address([*seeds, bytes([bump])], program)
        if key is not None:
            return key
    raise AssertionError("no bump")


@pytest.mark.parametrize("index", [0, 1, 7, 256, 2**56, U64_MAX])
def test_pdas_are_the_documented_seeds(index: int) -> None:
    pool = pool_pda(PROGRAM, index)
    assert pool == _find([b"Pool", index.to_bytes(8, "little")])
    assert pool_collateral_pda(PROGRAM, pool) == _find([b"PoolCollateral", bytes(pool)])
    assert pool_redeemable_pda(PROGRAM, pool) == _find([b"PoolRedeemable", bytes(pool)])
    user = Keypair().pubkey()
    assert lender_pda(PROGRAM, pool, user) == _find([b"Lender", bytes(pool), bytes(user)])


def test_pdas_are_distinct_per_index_and_user() -> None:
    # Little-endian: 1 and 2**56 are different seeds (a big-endian slip would still differ, but
    # 1 LE = 01 00.. and 2**56 BE = 01 00.. would collide).
    assert pool_pda(PROGRAM, 1) == _find([b"Pool", b"\x01" + bytes(7)])
    assert pool_pda(PROGRAM, 1) != pool_pda(PROGRAM, 2**56)
    pool = pool_pda(PROGRAM, 1)
    a, b = Keypair().pubkey(), Keypair().pubkey()
    assert lender_pda(PROGRAM, pool, a) != lender_pda(PROGRAM, pool, b)
    assert lender_pda(PROGRAM, pool, a) != lender_pda(PROGRAM, pool_pda(PROGRAM, 2), a)
    assert pool_collateral_pda(PROGRAM, pool) != pool_redeemable_pda(PROGRAM, pool)


def test_seeds_are_the_idls_constants() -> None:
    idl = json.loads((IDL_DIR / "psyche_mining_pool.json").read_text())
    consts = {c["name"]: c for c in idl.get("constants", [])}

    def value(name: str) -> bytes:
        c = consts[name]
        assert c["type"] == "bytes", c
        return bytes(json.loads(c["value"]))

    assert value("POOL_SEEDS_PREFIX") == POOL_SEED == b"Pool"
    assert value("POOL_COLLATERAL_SEEDS_PREFIX") == POOL_COLLATERAL_SEED
    assert value("POOL_REDEEMABLE_SEEDS_PREFIX") == POOL_REDEEMABLE_SEED
    assert value("LENDER_SEEDS_PREFIX") == LENDER_SEED
    assert idl["address"] == str(PROGRAM)


# --- shares -------------------------------------------------------------------------------------


def test_entitlement_is_the_floor_share() -> None:
    # The program's own cases (programs/psyche-mining-pool/src/shares.rs).
    assert entitlement(100, 1, 3) == 33
    assert entitlement(100, 2, 3) == 66
    assert entitlement(100, 3, 3) == 100
    assert entitlement(0, 3, 3) == 0
    assert entitlement(100, 0, 3) == 0
    assert entitlement(U64_MAX, U64_MAX - 1, U64_MAX) == U64_MAX - 1  # product > u64, < u128
    assert entitlement(U64_MAX, U64_MAX, U64_MAX) == U64_MAX
    assert entitlement(5, 1, 0) == 0  # nothing deposited: no shares
    assert claimable(100, 1, 3, 10) == 23
    assert claimable(100, 1, 3, 33) == 0
    assert claimable(100, 2, 3, 60) == 6


def _pool_run(rng: random.Random, n: int) -> tuple[list[int], list[int], int]:
    """``n`` lenders with awkward deposits; earnings in rounds; claims in random order and
    pieces (each 1..=claimable, as the program allows); at the end everyone claims the rest."""
    bits = rng.choice([7, 20, 57])
    deposits = [max(1, rng.getrandbits(rng.randint(1, bits))) for _ in range(n)]
    total_deposited = sum(deposits)
    assert total_deposited <= U64_MAX
    claimed = [0] * n
    total_redeemable = 0
    for _ in range(rng.randint(1, 3)):
        total_redeemable += max(1, rng.getrandbits(rng.choice([3, 16, 61])))
        total_redeemable = min(total_redeemable, U64_MAX)
        for _ in range(rng.randint(0, 3 * n)):
            i = rng.randrange(n)
            left = claimable(total_redeemable, deposits[i], total_deposited, claimed[i])
            if left:
                claimed[i] += rng.choice([left, rng.randint(1, left)])
                assert sum(claimed) <= total_redeemable
    for i in rng.sample(range(n), n):
        claimed[i] += claimable(total_redeemable, deposits[i], total_deposited, claimed[i])
    return deposits, claimed, total_redeemable


def test_any_claim_order_pays_every_lender_its_floor_share() -> None:
    rng = random.Random(0x5EED)
    for n in (1, 2, 3, 7, 13, 50, 97):
        for _ in range(30):
            deposits, claimed, total_redeemable = _pool_run(rng, n)
            total = sum(deposits)
            for d, c in zip(deposits, claimed, strict=True):
                assert c == total_redeemable * d // total
                assert claimable(total_redeemable, d, total, c) == 0
            leftover = total_redeemable - sum(claimed)
            assert 0 <= leftover < n, (n, leftover)


def test_awkward_three_lenders() -> None:
    # 3 deposits summing to 1_000_003, 999_999_937 redeemable (a prime): the floors and what
    # rounding leaves (checked with exact fractions: 999_999_937 × d mod 1_000_003).
    deposits = [333_337, 500_001, 166_665]
    total = sum(deposits)
    assert total == 1_000_003
    shares = [entitlement(999_999_937, d, total) for d in deposits]
    assert shares == [333_335_978, 499_999_468, 166_664_489]
    # The remainders 991_835 + 501_533 + 506_638 = 2 × 1_000_003: two units stay in the pool.
    assert 999_999_937 - sum(shares) == 2


# --- the commands against the RPC test double ---------------------------------------------------


def _mint() -> bytes:
    data = bytearray(MINT_LEN)
    data[44] = 6  # decimals
    data[45] = 1  # initialized
    return bytes(data)


def _token_account(mint: Pubkey, owner: Pubkey, amount: int) -> bytes:
    data = bytearray(ACCOUNT_LEN)
    data[0:32] = bytes(mint)
    data[32:64] = bytes(owner)
    data[64:72] = struct.pack("<Q", amount)
    data[108] = 1  # initialized
    return bytes(data)


class Pools:
    """Pools, lenders and token accounts served by the RPC test double."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.idl = mining_pool_idl()
        self.collateral = Keypair().pubkey()
        self.redeemable = Keypair().pubkey()
        self.set(self.collateral, _mint())
        self.set(self.redeemable, _mint())

    def set(self, key: Pubkey, data: bytes) -> None:
        self.node.call(self.node.double.set_account(key, data))

    def pool(self, index: int, authority: Pubkey, **fields: Any) -> Pubkey:
        address = pool_pda(PROGRAM, index)
        value = {
            "bump": 255,
            "index": index,
            "authority": bytes(authority),
            "collateral_mint": bytes(self.collateral),
            "redeemable_mint": bytes(self.redeemable),
            "max_deposit_collateral_amount": 1000,
            "total_deposited_collateral_amount": 0,
            "total_extracted_collateral_amount": 0,
            "total_deposited_redeemable_amount": 0,
            "total_claimed_redeemable_amount": 0,
            "frozen": False,
        } | fields
        self.set(address, self.idl.encode_account("Pool", value))
        return address

    def lender(self, index: int, user: Pubkey, deposited: int, claimed: int = 0) -> Pubkey:
        pool = pool_pda(PROGRAM, index)
        address = lender_pda(PROGRAM, pool, user)
        value = {
            "bump": 255,
            "pool": bytes(pool),
            "user": bytes(user),
            "deposited_collateral_amount": deposited,
            "claimed_redeemable_amount": claimed,
        }
        self.set(address, self.idl.encode_account("Lender", value))
        return address

    def balance(self, owner: Pubkey, mint: Pubkey, amount: int) -> Pubkey:
        ata = associated_token_address(owner, mint)
        self.set(ata, _token_account(mint, owner, amount))
        return ata


@pytest.fixture
def node() -> Iterator[Node]:
    n = Node()
    yield n
    n.stop()


@pytest.fixture
def pools(node: Node) -> Pools:
    return Pools(node)


def run(node: Node, wallet: Keypair | None, *args: str, **env: str) -> Any:
    base: dict[str, str | None] = {
        "RPC": node.double.url,
        "RAW_WALLET_PRIVATE_KEY": json.dumps(list(bytes(wallet))) if wallet else None,
        "WALLET_PRIVATE_KEY_PATH": None,
        "PSYCHE_IDL_DIR": str(IDL_DIR),
        **{k: None for k in ("POOL_INDEX", "AMOUNT", "MAX_DEPOSIT", "FREEZE", "ADDRESS")},
        **{k: None for k in ("COLLATERAL_MINT", "REDEEMABLE_MINT", "RUN_ID")},
    }
    return CliRunner().invoke(solana, list(args), env=base | env)


def sent(node: Node) -> list[tuple[str, dict[str, Any], list[tuple[Pubkey, bool, bool]]]]:
    """Every instruction of every sent transaction but the compute budget's: (name, args,
    metas); the mining pool's decoded with its IDL, others named by program. The flags are the
    message's (a key written by any instruction is writable in all; per instruction, the IDL's
    flags are checked byte for byte in test_mining_pool_vectors.py)."""
    idl = mining_pool_idl()
    out = []
    for tx in node.double.transactions:
        msg = tx.message
        h = msg.header
        n_keys, n_sig = len(msg.account_keys), h.num_required_signatures

        def writable(i: int, n_sig: int = n_sig, n_keys: int = n_keys, h: Any = h) -> bool:
            if i < n_sig:
                return i < n_sig - h.num_readonly_signed_accounts
            return i - n_sig < n_keys - n_sig - h.num_readonly_unsigned_accounts

        for cix in msg.instructions:
            program = msg.account_keys[cix.program_id_index]
            if program == COMPUTE_BUDGET:
                continue
            metas = [(msg.account_keys[i], msg.is_signer(i), writable(i)) for i in cix.accounts]
            if program == PROGRAM:
                name, args = idl.decode_instruction(bytes(cix.data))
            elif program == ASSOCIATED_TOKEN_PROGRAM_ID:
                name, args = f"ata:{bytes(cix.data).hex()}", {}
            else:
                name, args = str(program), {}
            out.append((name, args, metas))
    return out


def refused(res: Any, node: Node, *parts: str) -> None:
    assert res.exit_code != 0, res.output
    for p in parts:
        assert p in res.output, res.output
    assert not node.double.transactions, "nothing may be sent"


def test_every_command_and_flag_has_an_env_twin() -> None:
    from psyche.cli.solana_mining_pool import COMMANDS

    names = {c.name for c in COMMANDS}
    assert names == {
        "mining-pool-create",
        "mining-pool-update",
        "mining-pool-deposit",
        "mining-pool-withdraw",
        "mining-pool-redeemable-deposit",
        "mining-pool-claim",
        "json-dump-user",
    }
    for c in COMMANDS:
        assert solana.commands[c.name] is c
        for p in c.params:
            assert p.envvar, f"{c.name} {p.name} has no environment twin"


def test_create_sends_pool_create_with_the_documented_accounts(node: Node, pools: Pools) -> None:
    wallet = Keypair()
    res = run(
        node, wallet, "mining-pool-create", "--pool-index", "42",
        "--collateral-mint", str(pools.collateral), "--redeemable-mint", str(pools.redeemable),
        "--max-deposit", "18446744073709551615",
    )  # fmt: skip
    # The double runs no program: the pool is not there afterwards, so the read-back fails.
    assert "mining pool 42 does not exist" in res.output
    ((name, args, metas),) = sent(node)
    assert name == "pool_create"
    assert args == {"params": {"index": 42, "max_deposit_collateral_amount": U64_MAX}}
    pool = pool_pda(PROGRAM, 42)
    me = wallet.pubkey()
    assert metas == [
        (me, True, True),
        (me, True, True),  # payer and authority: the same key, so writable in the message
        (pool, False, True),
        (pools.collateral, False, False),
        (pools.redeemable, False, False),
        (pool_collateral_pda(PROGRAM, pool), False, True),
        (pool_redeemable_pda(PROGRAM, pool), False, True),
        (TOKEN_PROGRAM_ID, False, False),
        (Pubkey.from_string("11111111111111111111111111111111"), False, False),
    ]


def test_create_refuses_an_existing_pool_and_a_missing_mint(node: Node, pools: Pools) -> None:
    wallet = Keypair()
    pools.pool(1, wallet.pubkey())
    env = {"COLLATERAL_MINT": str(pools.collateral), "REDEEMABLE_MINT": str(pools.redeemable)}
    res = run(node, wallet, "mining-pool-create", "--pool-index", "1", "--max-deposit", "5", **env)
    refused(res, node, "mining pool 1 already exists", str(pool_pda(PROGRAM, 1)))
    missing = Keypair().pubkey()
    env["REDEEMABLE_MINT"] = str(missing)
    res = run(node, wallet, "mining-pool-create", "--pool-index", "2", "--max-deposit", "5", **env)
    refused(res, node, f"redeemable mint {missing}", "does not exist")


def test_flags_are_checked_before_anything_is_read(node: Node) -> None:
    wallet = Keypair()
    res = run(node, wallet, "mining-pool-deposit", "--amount", "5")
    refused(res, node, "--pool-index")
    res = run(node, wallet, "mining-pool-deposit", "--pool-index", "1", "--amount", "0")
    refused(res, node, "0 is not in the range 1<=x<=18446744073709551615")
    res = run(node, wallet, "mining-pool-deposit", "--pool-index", "-1", "--amount", "1")
    refused(res, node, "--pool-index")
    res = run(node, wallet, "mining-pool-update", "--pool-index", "1")
    refused(res, node, "nothing to update: give --max-deposit and/or --freeze")
    res = run(node, wallet, "mining-pool-withdraw", "--pool-index", "1", "--amount", str(2**64))
    refused(res, node, "--amount")
    assert not node.double.requests


def test_deposit_creates_the_lender_then_deposits_env_twins(node: Node, pools: Pools) -> None:
    wallet = Keypair()
    me = wallet.pubkey()
    pool = pools.pool(3, Keypair().pubkey(), total_deposited_collateral_amount=400)
    ata = pools.balance(me, pools.collateral, 1_000)
    res = run(node, wallet, "mining-pool-deposit", POOL_INDEX="3", AMOUNT="600")
    assert res.exit_code == 0, res.output
    (create, c_args, c_metas), (dep, d_args, d_metas) = sent(node)
    lender = lender_pda(PROGRAM, pool, me)
    assert (create, c_args) == ("lender_create", {})
    assert c_metas == [
        (me, True, True),
        (me, True, True),
        (pool, False, True),  # read-only in lender_create, written by lender_deposit
        (lender, False, True),
        (Pubkey.from_string("11111111111111111111111111111111"), False, False),
    ]
    assert (dep, d_args) == ("lender_deposit", {"params": {"collateral_amount": 600}})
    assert d_metas == [
        (me, True, True),
        (ata, False, True),
        (pool, False, True),
        (pool_collateral_pda(PROGRAM, pool), False, True),
        (lender, False, True),
        (TOKEN_PROGRAM_ID, False, False),
    ]
    # A second deposit with the lender in place: no lender_create.
    node.double.transactions.clear()
    pools.pool(3, Keypair().pubkey(), total_deposited_collateral_amount=999)
    pools.lender(3, me, 600)
    res = run(node, wallet, "mining-pool-deposit", "--pool-index", "3", "--amount", "1")
    assert res.exit_code == 0, res.output
    assert [n for n, _, _ in sent(node)] == ["lender_deposit"]


def test_deposit_refusals_say_the_numbers(node: Node, pools: Pools) -> None:
    wallet = Keypair()
    pools.balance(wallet.pubkey(), pools.collateral, 10**6)
    pools.pool(5, Keypair().pubkey(), total_deposited_collateral_amount=997)
    res = run(node, wallet, "mining-pool-deposit", "--pool-index", "5", "--amount", "4")
    refused(
        res, node,
        "mining pool 5: depositing 4 would exceed the cap of 1000 (997 deposited, 3 left)",
    )  # fmt: skip
    pools.pool(6, Keypair().pubkey(), total_deposited_collateral_amount=20, frozen=True)
    res = run(node, wallet, "mining-pool-deposit", "--pool-index", "6", "--amount", "1")
    refused(res, node, "mining pool 6 is frozen: deposits are closed (20 deposited in all)")
    res = run(node, wallet, "mining-pool-deposit", "--pool-index", "7", "--amount", "1")
    refused(res, node, "mining pool 7 does not exist", str(pool_pda(PROGRAM, 7)))
    poor = Keypair()
    pools.pool(8, Keypair().pubkey())
    pools.balance(poor.pubkey(), pools.collateral, 2)
    res = run(node, poor, "mining-pool-deposit", "--pool-index", "8", "--amount", "3")
    refused(res, node, "holds 2 of mint", "less than the 3 to deposit")


def test_authority_commands_refuse_others_and_check_the_state(node: Node, pools: Pools) -> None:
    owner, other = Keypair(), Keypair()
    pools.pool(9, owner.pubkey(), total_deposited_collateral_amount=700)
    for args in (
        ["mining-pool-update", "--pool-index", "9", "--freeze"],
        ["mining-pool-withdraw", "--pool-index", "9", "--amount", "1"],
        ["mining-pool-redeemable-deposit", "--pool-index", "9", "--amount", "1"],
    ):
        res = run(node, other, *args)
        refused(res, node, f"only mining pool 9's authority {owner.pubkey()} may")
    res = run(node, owner, "mining-pool-update", "--pool-index", "9", "--max-deposit", "699")
    refused(res, node, "a cap of 699 is below the 700 already deposited")
    res = run(node, owner, "mining-pool-redeemable-deposit", "--pool-index", "9", "--amount", "1")
    refused(res, node, "mining pool 9 is not frozen: freeze it first")
    pools.set(pool_collateral_pda(PROGRAM, pool_pda(PROGRAM, 9)),
              _token_account(pools.collateral, pool_pda(PROGRAM, 9), 650))  # fmt: skip
    res = run(node, owner, "mining-pool-withdraw", "--pool-index", "9", "--amount", "651")
    refused(res, node, "collateral account holds 650, less than the 651 to withdraw")
    pools.pool(9, owner.pubkey(), total_deposited_collateral_amount=700, frozen=True)
    res = run(node, owner, "mining-pool-update", "--pool-index", "9", "--max-deposit", "800")
    refused(res, node, "mining pool 9 is frozen: its cap stays 1000")
    res = run(node, owner, "mining-pool-redeemable-deposit", "--pool-index", "9", "--amount", "5")
    refused(res, node, "redeemable account", "holds 0", "less than the 5 to deposit")


def test_withdraw_and_update_send_what_the_program_expects(node: Node, pools: Pools) -> None:
    owner = Keypair()
    me = owner.pubkey()
    pool = pools.pool(10, me, total_deposited_collateral_amount=700)
    pools.set(pool_collateral_pda(PROGRAM, pool), _token_account(pools.collateral, pool, 700))
    res = run(node, owner, "mining-pool-withdraw", "--pool-index", "10", "--amount", "650")
    assert res.exit_code == 0, res.output
    (ata_name, _, ata_metas), (name, args, metas) = sent(node)
    ata = associated_token_address(me, pools.collateral)
    assert ata_name == "ata:01"  # CreateIdempotent
    assert ata_metas[1][0] == ata
    assert (name, args) == ("pool_extract", {"params": {"collateral_amount": 650}})
    assert metas == [
        (me, True, True),
        (ata, False, True),
        (pool, False, True),
        (pool_collateral_pda(PROGRAM, pool), False, True),
        (TOKEN_PROGRAM_ID, False, False),
    ]
    node.double.transactions.clear()
    res = run(node, owner, "mining-pool-update", "--max-deposit", "900", "--freeze",
              POOL_INDEX="10")  # fmt: skip
    assert res.exit_code == 0, res.output
    ((name, args, metas),) = sent(node)
    assert name == "pool_update"
    assert args == {"params": {"max_deposit_collateral_amount": 900, "freeze": True}}
    assert metas == [(me, True, True), (pool, False, True)]
    node.double.transactions.clear()
    res = run(node, owner, "mining-pool-update", "--pool-index", "10", FREEZE="1")
    assert res.exit_code == 0, res.output
    ((name, args, _),) = sent(node)
    assert args == {"params": {"max_deposit_collateral_amount": None, "freeze": True}}


def test_claim_takes_all_claimable_by_default_and_says_why_not(node: Node, pools: Pools) -> None:
    wallet = Keypair()
    me = wallet.pubkey()
    fields = {
        "total_deposited_collateral_amount": 1_000_003,
        "total_deposited_redeemable_amount": 999_999_937,
        "frozen": True,
    }
    pool = pools.pool(11, Keypair().pubkey(), **fields)
    lender = pools.lender(11, me, 333_337, claimed=5)
    res = run(node, wallet, "mining-pool-claim", "--pool-index", "11")
    assert res.exit_code == 0, res.output
    (ata_name, _, _), (name, args, metas) = sent(node)
    assert ata_name == "ata:01"
    assert (name, args) == ("lender_claim", {"params": {"redeemable_amount": 333_335_973}})
    ata = associated_token_address(me, pools.redeemable)
    assert metas == [
        (me, True, True),
        (ata, False, True),
        (pool, False, True),
        (pool_redeemable_pda(PROGRAM, pool), False, True),
        (lender, False, True),
        (TOKEN_PROGRAM_ID, False, False),
    ]
    assert json.loads(res.output)["claimed"] == 333_335_973
    node.double.transactions.clear()

    res = run(node, wallet, "mining-pool-claim", "--pool-index", "11", "--amount", "333335974")
    refused(
        res, node,
        "mining pool 11: 333335974 is more than the 333335973 claimable (333337 of 1000003 "
        "deposited entitles to 333335978 of the 999999937 redeemable, 5 already claimed)",
    )  # fmt: skip
    pools.lender(11, me, 333_337, claimed=333_335_978)
    res = run(node, wallet, "mining-pool-claim", "--pool-index", "11")
    refused(res, node, "nothing claimable in mining pool 11", "333335978 already claimed")
    stranger = Keypair()
    res = run(node, stranger, "mining-pool-claim", "--pool-index", "11")
    refused(res, node, f"{stranger.pubkey()} never deposited in mining pool 11")
    pools.pool(12, Keypair().pubkey(), total_deposited_collateral_amount=5)
    pools.lender(12, me, 5)
    res = run(node, wallet, "mining-pool-claim", "--pool-index", "12")
    refused(res, node, "mining pool 12 is not frozen yet")


def test_json_dump_user_reads_without_a_wallet(node: Node, pools: Pools) -> None:
    user = Keypair().pubkey()
    fields = {
        "total_deposited_collateral_amount": 1_000_003,
        "total_deposited_redeemable_amount": 999_999_937,
        "total_claimed_redeemable_amount": 100,
        "frozen": True,
    }
    pools.pool(11, Keypair().pubkey(), **fields)
    lender = pools.lender(11, user, 500_001, claimed=100)
    pools.balance(user, pools.redeemable, 100)
    res = run(node, None, "json-dump-user", "--address", str(user), POOL_INDEX="11 12")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["address"] == str(user) and "run" not in out
    first, second = out["pools"]
    assert second == {"index": 12, "address": str(pool_pda(PROGRAM, 12)), "pool": None}
    assert first["pool"]["unclaimed_redeemable_amount"] == 999_999_837
    assert first["lender"] == {
        "address": str(lender),
        "pool": str(pool_pda(PROGRAM, 11)),
        "user": str(user),
        "deposited_collateral_amount": 500_001,
        "claimed_redeemable_amount": 100,
        "entitled_redeemable_amount": 499_999_468,
        "claimable_redeemable_amount": 499_999_368,
        "can_claim_now": True,
    }
    assert first["balances"]["redeemable"]["amount"] == 100
    assert first["balances"]["collateral"]["amount"] is None  # no token account
    res = run(node, None, "json-dump-user", "--pool-index", "11")
    refused(res, node, "no user: pass --address")


def test_each_transaction_asks_for_the_compute_its_instructions_need() -> None:
    """The session's sender prepends compute_units.json's rows for the pool's instructions and
    budget.py's allowance for an associated token account's creation (the 20,000 default is
    less than pool_create, a claim or that creation needs)."""
    from psyche.solana.budget import ASSOCIATED_TOKEN_UNITS, ComputeBudget, load_limits
    from psyche.solana.programs.mining_pool import MiningPoolInstructions
    from psyche.solana.session import Endpoints, Session
    from psyche.solana.tokens import create_associated_account_ix

    s = Session(Endpoints("http://127.0.0.1:9"), Keypair(), idl_dir=IDL_DIR)  # never contacted
    me, mint = Keypair().pubkey(), Keypair().pubkey()
    ixs = MiningPoolInstructions(s.mining_pool)
    table = load_limits()
    budget = ComputeBudget([s.coordinator, s.authorizer, s.treasurer, s.mining_pool])
    for name, ix in (
        ("pool_create", ixs.pool_create(me, me, 1, mint, mint, 10)),
        ("lender_claim", ixs.lender_claim(me, 1, me, 5)),
    ):
        limit, *rest = budget([create_associated_account_ix(me, me, mint), ix])
        assert rest[1] == ix and bytes(limit.data)[0] == 2  # SetComputeUnitLimit
        units = int.from_bytes(bytes(limit.data)[1:5], "little")
        assert units == ASSOCIATED_TOKEN_UNITS + table[name]
        assert units > 40_000


def test_refusals_name_the_program_errors_in_the_programs_order() -> None:
    from psyche.solana.programs.mining_pool import (
        LenderState,
        PoolState,
        claim_refusal,
        deposit_refusal,
        extract_refusal,
        redeemable_deposit_refusal,
        update_refusal,
    )

    def error(r: Any) -> str | None:
        return None if r is None else r.error

    k = Pubkey.default()
    pool = PoolState(k, 255, 4, k, k, k, 100, 60, 0, 0, 0, False)
    frozen = PoolState(k, 255, 4, k, k, k, 100, 60, 10, 7, 0, True)
    assert error(update_refusal(pool, 60, True)) is None  # the cap first, then the freeze
    assert error(update_refusal(pool, 59, True)) == "PoolCapBelowDeposits"
    assert error(update_refusal(pool, None, False)) is None  # unfreezing an unfrozen pool
    assert error(update_refusal(frozen, None, True)) is None  # idempotent
    assert error(update_refusal(frozen, 100, None)) == "PoolFrozen"
    assert error(update_refusal(frozen, None, False)) == "PoolUnfreezeRefused"
    assert error(deposit_refusal(pool, 40)) is None
    assert error(deposit_refusal(pool, 41)) == "PoolCapExceeded"
    assert error(deposit_refusal(frozen, 1)) == "PoolFrozen"
    assert error(extract_refusal(pool, 60, 60)) is None
    assert error(extract_refusal(pool, 60, 61)) == "ExtractExceedsCollateral"
    assert error(redeemable_deposit_refusal(pool)) == "PoolNotFrozen"
    assert error(redeemable_deposit_refusal(frozen)) is None
    lender = LenderState(k, 255, k, k, 20, 0)  # 20 of 60: floor(7 × 20 / 60) = 2
    assert error(claim_refusal(pool, lender, 1)) == "PoolNotFrozen"
    assert error(claim_refusal(frozen, lender, 2)) is None
    assert error(claim_refusal(frozen, lender, None)) is None
    assert error(claim_refusal(frozen, lender, 3)) == "ClaimExceedsShare"
    paid = LenderState(k, 255, k, k, 20, 2)
    assert str(claim_refusal(frozen, paid, None)) == (
        "nothing claimable in mining pool 4: 20 of 60 deposited entitles to 2 of the 7 "
        "redeemable, 2 already claimed"
    )
