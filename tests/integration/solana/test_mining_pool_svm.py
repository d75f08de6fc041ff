"""The Mining Pool (docs/rewards.md) on its SBF build in the local SVM (``local_svm``), driven as
a pool authority and its lenders would: ``psyche-solana-client mining-pool-*`` and
``json-dump-user`` run as subprocesses with keypair files, as
tests/integration/solana/test_documented_commands.py runs the documented commands.

One pool, one flow; each test runs the steps before its own once per module (so any test can
also run alone) and checks the state right after its own step (so the module runs in file
order): two classic SPL mints and funded token accounts (``create-test-mint``), pool create,
three lenders deposit awkward amounts up to the cap exactly, the authority withdraws, freezes,
deposits earnings (a prime number of base units) in two pieces; each lender claims (one in
pieces), and every balance is checked against the floor share worked out here, to the base
unit. The client's refusals before sending (cap, frozen, not frozen, nothing claimable) are
checked against the program's own: the same instruction sent anyway is rejected with the named
program error.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from psyche.solana.programs.mining_pool import (
    MiningPoolInstructions,
    lender_pda,
    pool_collateral_pda,
    pool_pda,
    pool_redeemable_pda,
)
from psyche.solana.rpc import ProgramRejectedError
from psyche.solana.session import Endpoints, Session
from psyche.solana.tokens import associated_token_address

ROOT = Path(__file__).resolve().parents[3]
VENV_BIN = ROOT / ".venv" / "bin"
SOL = 10**9
INDEX = 7
DEPOSITS = (333_337, 500_001, 166_665)  # sum 1_000_003 (a prime), the cap
CAP = sum(DEPOSITS)
EARNINGS = (600_000_000, 399_999_937)  # sum 999_999_937 (a prime)
WITHDRAWN = 999_000

T = TypeVar("T")


def run_async(coro: Awaitable[T], timeout: float = 60) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def write_keypair(path: Path) -> Keypair:
    kp = Keypair()
    path.write_text(json.dumps(list(bytes(kp))))
    return kp


def _cli_env_names() -> set[str]:
    from psyche.cli.solana import solana
    from psyche.cli.solana_options import DIRECT_ENV, envvars

    names = set(DIRECT_ENV)
    for cmd in solana.commands.values():
        names |= envvars(cmd)
    return names


@dataclass
class Pool:
    """The flow against one node, each step run once and remembered."""

    node: Any
    work: Path
    authority: Keypair = field(init=False)
    lenders: list[Keypair] = field(init=False)
    stranger: Keypair = field(init=False)
    collateral: Pubkey = field(init=False)
    redeemable: Pubkey = field(init=False)
    done: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self.authority = write_keypair(self.work / "authority.json")
        self.lenders = [write_keypair(self.work / f"lender{i}.json") for i in (1, 2, 3)]
        self.stranger = write_keypair(self.work / "stranger.json")
        for kp in (self.authority, *self.lenders, self.stranger):
            self.node.airdrop(kp.pubkey(), 10 * SOL)

    # --- running ------------------------------------------------------------------------------

    def env(self, wallet: str | None) -> dict[str, str]:
        drop = _cli_env_names()
        env = {k: v for k, v in os.environ.items() if k not in drop}
        env["PATH"] = os.pathsep.join([str(VENV_BIN), env.get("PATH", "")])
        env["RPC"] = self.node.url
        if wallet is not None:
            env["WALLET_PRIVATE_KEY_PATH"] = str(self.work / wallet)
        return env

    def cli(
        self, wallet: str | None, *args: str, ok: bool = True
    ) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            ["psyche-solana-client", *args],
            cwd=self.work, env=self.env(wallet), capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert "Traceback" not in res.stderr, res.stderr
        if ok:
            assert res.returncode == 0, f"{args}\nstdout: {res.stdout}\nstderr: {res.stderr}"
        else:
            assert res.returncode == 1, f"{args}\nstdout: {res.stdout}\nstderr: {res.stderr}"
        return res

    def out(self, wallet: str | None, *args: str) -> Any:
        return json.loads(self.cli(wallet, *args).stdout)

    def refused(self, wallet: str, *args: str) -> str:
        return self.cli(wallet, *args, ok=False).stderr

    def once(self, name: str, step: Any) -> Any:
        if name not in self.done:
            self.done[name] = step()
        return self.done[name]

    def session(self, wallet: Keypair) -> Session:
        return Session(Endpoints(self.node.url), wallet)

    def send(self, wallet: Keypair, ixs: list[Instruction], *signers: Keypair) -> str:
        async def go() -> str:
            s = self.session(wallet)
            try:
                return await s.sender(s.mining_pool).send(ixs, signers, label="test")
            finally:
                await s.close()

        return run_async(go())

    def program_refuses(self, wallet: Keypair, ix: Instruction) -> str:
        """Send ``ix`` anyway (no client-side check): the program's error name."""
        with pytest.raises(ProgramRejectedError) as e:
            self.send(wallet, [ix])
        assert e.value.name is not None, str(e.value)
        return e.value.name

    def ixs(self) -> MiningPoolInstructions:
        s = self.session(self.authority)
        return MiningPoolInstructions(s.mining_pool)

    def balance(self, owner: Pubkey, mint: Pubkey) -> int | None:
        return self.token_amount(associated_token_address(owner, mint))

    def token_amount(self, account: Pubkey) -> int | None:
        async def go() -> int | None:
            s = self.session(self.authority)
            try:
                info = await s.token_account(account)
                return None if info is None else info.amount
            finally:
                await s.close()

        return run_async(go())

    def user(self, kp: Keypair, *extra: str) -> Any:
        return self.out(None, "json-dump-user", "--address", str(kp.pubkey()),
                        "--pool-index", str(INDEX), *extra)  # fmt: skip

    # --- the steps, in order -----------------------------------------------------------------

    def mints(self) -> None:
        """Two mints made with ``create-test-mint`` (the authority's wallet is their mint
        authority): each lender holds its deposit + 10 of collateral, the authority the
        earnings."""

        def step() -> None:
            holders = [
                f"{kp.pubkey()}={amount + 10}"
                for kp, amount in zip(self.lenders, DEPOSITS, strict=True)
            ]
            args = ["create-test-mint", "--decimals", "6"]
            collateral = self.out(
                "authority.json", *args, *[x for h in holders for x in ("--mint-to", h)]
            )
            assert [h["balance"] for h in collateral["holders"]] == [d + 10 for d in DEPOSITS]
            redeemable = self.out(
                "authority.json", *args, "--mint-to", f"{self.authority.pubkey()}={sum(EARNINGS)}"
            )
            self.collateral = Pubkey.from_string(collateral["mint"])
            self.redeemable = Pubkey.from_string(redeemable["mint"])

        self.once("mints", step)

    def create(self) -> Any:
        self.mints()
        return self.once("create", lambda: self.out(
            "authority.json", "mining-pool-create",
            "--pool-index", str(INDEX),
            "--collateral-mint", str(self.collateral),
            "--redeemable-mint", str(self.redeemable),
            "--max-deposit", str(CAP),
        ))  # fmt: skip

    def deposits(self) -> list[Any]:
        self.create()

        def step() -> list[Any]:
            outs = []
            # Lender 1 in two pieces (the second finds its lender account), through env twins.
            first = self.cli("lender1.json", "mining-pool-deposit",
                             "--pool-index", str(INDEX), "--amount", "300000")  # fmt: skip
            assert json.loads(first.stdout)["lender"]["deposited_collateral_amount"] == 300_000
            env = self.env("lender1.json") | {"POOL_INDEX": str(INDEX), "AMOUNT": "33337"}
            res = subprocess.run(
                ["psyche-solana-client", "mining-pool-deposit"],
                cwd=self.work, env=env, capture_output=True, text=True, timeout=180,
            )  # fmt: skip
            assert res.returncode == 0, res.stderr
            outs.append(json.loads(res.stdout))
            for i in (2, 3):
                outs.append(self.out(f"lender{i}.json", "mining-pool-deposit",
                                     "--pool-index", str(INDEX),
                                     "--amount", str(DEPOSITS[i - 1])))  # fmt: skip
            return outs

        return self.once("deposits", step)

    def withdraw(self) -> Any:
        self.deposits()
        return self.once("withdraw", lambda: self.out(
            "authority.json", "mining-pool-withdraw",
            "--pool-index", str(INDEX), "--amount", str(WITHDRAWN),
        ))  # fmt: skip

    def freeze(self) -> Any:
        self.withdraw()
        return self.once("freeze", lambda: self.out(
            "authority.json", "mining-pool-update", "--pool-index", str(INDEX), "--freeze",
        ))  # fmt: skip

    def earnings(self) -> list[Any]:
        self.freeze()
        return self.once("earnings", lambda: [
            self.out("authority.json", "mining-pool-redeemable-deposit",
                     "--pool-index", str(INDEX), "--amount", str(e))
            for e in EARNINGS
        ])  # fmt: skip

    def claims(self) -> list[Any]:
        self.earnings()

        def step() -> list[Any]:
            # Lender 1 in pieces: 1, then 1000, then the rest (the default: all claimable).
            for amount in ("1", "1000"):
                self.cli("lender1.json", "mining-pool-claim", "--pool-index", str(INDEX),
                         "--amount", amount)  # fmt: skip
            return [
                self.out(f"lender{i}.json", "mining-pool-claim", "--pool-index", str(INDEX))
                for i in (1, 2, 3)
            ]

        return self.once("claims", step)


def share(i: int) -> int:
    return sum(EARNINGS) * DEPOSITS[i] // CAP


@pytest.fixture(scope="module")
def pool(local_svm: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    yield Pool(local_svm, tmp_path_factory.mktemp("mining-pool") / "user")


def test_create(pool: Pool) -> None:
    out = pool.create()["pool"]
    program = pool.ixs().program_id
    address = pool_pda(program, INDEX)
    assert out == {
        "index": INDEX,
        "address": str(address),
        "authority": str(pool.authority.pubkey()),
        "collateral_mint": str(pool.collateral),
        "redeemable_mint": str(pool.redeemable),
        "pool_collateral": str(pool_collateral_pda(program, address)),
        "pool_redeemable": str(pool_redeemable_pda(program, address)),
        "max_deposit_collateral_amount": CAP,
        "total_deposited_collateral_amount": 0,
        "total_extracted_collateral_amount": 0,
        "total_deposited_redeemable_amount": 0,
        "total_claimed_redeemable_amount": 0,
        "unclaimed_redeemable_amount": 0,
        "frozen": False,
    }
    # The program made the two token accounts, empty, at the PDAs.
    assert pool.token_amount(pool_collateral_pda(program, address)) == 0
    assert pool.token_amount(pool_redeemable_pda(program, address)) == 0
    err = pool.refused("authority.json", "mining-pool-create", "--pool-index", str(INDEX),
                       "--collateral-mint", str(pool.collateral),
                       "--redeemable-mint", str(pool.redeemable), "--max-deposit", "1")  # fmt: skip
    assert f"mining pool {INDEX} already exists at {address}" in err


def test_three_lenders_deposit_up_to_the_cap(pool: Pool) -> None:
    outs = pool.deposits()
    assert outs[-1]["pool"]["total_deposited_collateral_amount"] == CAP
    program = pool.ixs().program_id
    address = pool_pda(program, INDEX)
    for i, kp in enumerate(pool.lenders):
        lender = pool.user(kp)["pools"][0]["lender"]
        assert lender["address"] == str(lender_pda(program, address, kp.pubkey()))
        assert lender["deposited_collateral_amount"] == DEPOSITS[i]
        assert pool.balance(kp.pubkey(), pool.collateral) == 10  # funded with deposit + 10
    assert pool.token_amount(pool_collateral_pda(program, address)) == CAP


def test_a_deposit_over_the_cap_is_refused_by_client_and_program(pool: Pool) -> None:
    pool.deposits()
    err = pool.refused("lender2.json", "mining-pool-deposit", "--pool-index", str(INDEX),
                       "--amount", "1")  # fmt: skip
    assert (
        f"mining pool {INDEX}: depositing 1 would exceed the cap of {CAP} ({CAP} deposited, 0 left)"
        in err
    )
    kp = pool.lenders[1]
    ata = associated_token_address(kp.pubkey(), pool.collateral)
    ix = pool.ixs().lender_deposit(kp.pubkey(), INDEX, ata, 1)
    assert pool.program_refuses(kp, ix) == "PoolCapExceeded"
    # Nor may the cap go below the deposits.
    err = pool.refused("authority.json", "mining-pool-update", "--pool-index", str(INDEX),
                       "--max-deposit", str(CAP - 1))  # fmt: skip
    assert f"a cap of {CAP - 1} is below the {CAP} already deposited" in err
    ix = pool.ixs().pool_update(pool.authority.pubkey(), INDEX, CAP - 1, None)
    assert pool.program_refuses(pool.authority, ix) == "PoolCapBelowDeposits"


def test_earnings_before_the_freeze_are_refused(pool: Pool) -> None:
    pool.deposits()
    err = pool.refused("authority.json", "mining-pool-redeemable-deposit",
                       "--pool-index", str(INDEX), "--amount", "5")  # fmt: skip
    assert f"mining pool {INDEX} is not frozen: freeze it first" in err
    me = pool.authority.pubkey()
    ata = associated_token_address(me, pool.redeemable)
    ix = pool.ixs().pool_redeemable_deposit(me, INDEX, ata, 5)
    assert pool.program_refuses(pool.authority, ix) == "PoolNotFrozen"
    err = pool.refused("lender1.json", "mining-pool-claim", "--pool-index", str(INDEX))
    assert f"mining pool {INDEX} is not frozen yet" in err


def test_only_the_authority_withdraws(pool: Pool) -> None:
    out = pool.withdraw()
    assert out["pool"]["total_extracted_collateral_amount"] == WITHDRAWN
    assert out["to"] == str(associated_token_address(pool.authority.pubkey(), pool.collateral))
    assert pool.balance(pool.authority.pubkey(), pool.collateral) == WITHDRAWN
    program = pool.ixs().program_id
    assert pool.token_amount(pool_collateral_pda(program, pool_pda(program, INDEX))) == (
        CAP - WITHDRAWN
    )
    err = pool.refused("stranger.json", "mining-pool-withdraw", "--pool-index", str(INDEX),
                       "--amount", "1")  # fmt: skip
    assert f"only mining pool {INDEX}'s authority {pool.authority.pubkey()} may" in err
    kp = pool.lenders[0]
    ata = associated_token_address(kp.pubkey(), pool.collateral)
    ix = pool.ixs().pool_extract(kp.pubkey(), INDEX, ata, 1)
    assert pool.program_refuses(kp, ix) == "NotPoolAuthority"


def test_freeze_closes_deposits(pool: Pool) -> None:
    out = pool.freeze()["pool"]
    assert out["frozen"] is True and out["max_deposit_collateral_amount"] == CAP
    err = pool.refused("lender3.json", "mining-pool-deposit", "--pool-index", str(INDEX),
                       "--amount", "1")  # fmt: skip
    assert f"mining pool {INDEX} is frozen: deposits are closed ({CAP} deposited in all)" in err
    kp = pool.lenders[2]
    ata = associated_token_address(kp.pubkey(), pool.collateral)
    ix = pool.ixs().lender_deposit(kp.pubkey(), INDEX, ata, 1)
    assert pool.program_refuses(kp, ix) == "PoolFrozen"
    err = pool.refused("authority.json", "mining-pool-update", "--pool-index", str(INDEX),
                       "--max-deposit", str(2 * CAP))  # fmt: skip
    assert f"mining pool {INDEX} is frozen: its cap stays {CAP}" in err
    ix = pool.ixs().pool_update(pool.authority.pubkey(), INDEX, None, False)
    assert pool.program_refuses(pool.authority, ix) == "PoolUnfreezeRefused"


def test_earnings_deposit(pool: Pool) -> None:
    outs = pool.earnings()
    assert [o["pool"]["total_deposited_redeemable_amount"] for o in outs] == [
        EARNINGS[0],
        sum(EARNINGS),
    ]
    assert pool.balance(pool.authority.pubkey(), pool.redeemable) == 0
    program = pool.ixs().program_id
    redeemable = pool_redeemable_pda(program, pool_pda(program, INDEX))
    assert pool.token_amount(redeemable) == sum(EARNINGS)
    # Before any claim, json-dump-user shows each lender's floor share as claimable.
    for i, kp in enumerate(pool.lenders):
        lender = pool.user(kp)["pools"][0]["lender"]
        assert lender["claimable_redeemable_amount"] == share(i)
        assert lender["can_claim_now"] is True


def test_each_lender_claims_exactly_its_floor_share(pool: Pool) -> None:
    outs = pool.claims()
    shares = [share(i) for i in range(3)]
    # Worked out with exact fractions: 999_999_937 × d mod 1_000_003 sums to 2 × 1_000_003.
    assert shares == [333_335_978, 499_999_468, 166_664_489]
    assert sum(EARNINGS) - sum(shares) == 2
    assert [o["claimed"] for o in outs] == [shares[0] - 1001, shares[1], shares[2]]
    for i, kp in enumerate(pool.lenders):
        assert pool.balance(kp.pubkey(), pool.redeemable) == shares[i]
        lender = pool.user(kp)["pools"][0]["lender"]
        assert lender["claimed_redeemable_amount"] == shares[i]
        assert lender["claimable_redeemable_amount"] == 0
    program = pool.ixs().program_id
    redeemable = pool_redeemable_pda(program, pool_pda(program, INDEX))
    left = pool.token_amount(redeemable)
    assert left == 2
    assert sum(shares) + left == sum(EARNINGS)  # no token lost or made
    final = outs[-1]["pool"]
    assert final["total_claimed_redeemable_amount"] == sum(shares)
    assert final["unclaimed_redeemable_amount"] == 2


def test_a_second_claim_is_refused_by_client_and_program(pool: Pool) -> None:
    pool.claims()
    err = pool.refused("lender2.json", "mining-pool-claim", "--pool-index", str(INDEX))
    assert (
        f"nothing claimable in mining pool {INDEX}: 500001 of {CAP} deposited entitles to 499999468"
        in err
    )
    kp = pool.lenders[1]
    ata = associated_token_address(kp.pubkey(), pool.redeemable)
    ix = pool.ixs().lender_claim(kp.pubkey(), INDEX, ata, 1)
    assert pool.program_refuses(kp, ix) == "ClaimExceedsShare"
    err = pool.refused("stranger.json", "mining-pool-claim", "--pool-index", str(INDEX))
    assert f"{pool.stranger.pubkey()} never deposited in mining pool {INDEX}" in err


def test_json_dump_user(pool: Pool) -> None:
    pool.claims()
    kp = pool.lenders[0]
    program = pool.ixs().program_id
    address = pool_pda(program, INDEX)
    out = pool.user(kp, "--pool-index", "99")
    assert out["address"] == str(kp.pubkey())
    first, missing = out["pools"]
    assert missing == {"index": 99, "address": str(pool_pda(program, 99)), "pool": None}
    assert first["pool"]["frozen"] is True
    assert first["lender"] == {
        "address": str(lender_pda(program, address, kp.pubkey())),
        "pool": str(address),
        "user": str(kp.pubkey()),
        "deposited_collateral_amount": DEPOSITS[0],
        "claimed_redeemable_amount": share(0),
        "entitled_redeemable_amount": share(0),
        "claimable_redeemable_amount": 0,
        "can_claim_now": False,
    }
    assert first["balances"] == {
        "collateral": {
            "mint": str(pool.collateral),
            "token_account": str(associated_token_address(kp.pubkey(), pool.collateral)),
            "amount": 10,
        },
        "redeemable": {
            "mint": str(pool.redeemable),
            "token_account": str(associated_token_address(kp.pubkey(), pool.redeemable)),
            "amount": share(0),
        },
    }
    # With --run-id: the user's registration in that run (none: this wallet never joined), and
    # for a run created through the Treasurer, its standing there (nothing earned, nothing paid).
    pool.cli("authority.json", "create-run", "--run-id", "pool-run")
    run = pool.user(kp, "--run-id", "pool-run")["run"]
    assert run["run_id"] == "pool-run" and run["registered"] is False
    assert run["treasurer"] is None  # a plain run: its main authority is a wallet
    pool.cli("authority.json", "create-run", "--run-id", "pool-paid-run",
             "--treasurer-collateral-mint", str(pool.redeemable))  # fmt: skip
    run = pool.user(kp, "--run-id", "pool-paid-run")["run"]
    assert run["registered"] is False and "earned" not in run
    t = run["treasurer"]
    assert t["user"] == str(kp.pubkey()) and t["registered"] is False
    assert (t["earned"], t["slashed"], t["claimed_points"], t["claimable_points"]) == (0, 0, 0, 0)
    assert t["participant"] is None and t["escrow_balance"] == 0
    # The stranger: no lender, no token accounts.
    other = pool.user(pool.stranger)["pools"][0]
    assert other["lender"] is None
    assert other["balances"]["redeemable"]["amount"] is None
