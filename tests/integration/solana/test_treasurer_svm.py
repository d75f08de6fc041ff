"""A run that pays its points, against the real SBF programs (coordinator, authorizer,
treasurer) in the local SVM (``local_svm``): the Treasurer's commands run as subprocesses, as a
run creator and its clients would type them.

create-test-mint → create-run --treasurer-collateral-mint → update-config (config/tiny) →
set-future-epoch-rates → join-authorization-create → set-paused resume → json-dump-run (the
coordinator's main authority is the Treasurer's Run) → one whole epoch (``svm_epoch``: three
clients join, witnesses, ticks with the chain's clock moved ahead) credits 1000 points each →
treasurer-claim-rewards against an empty escrow fails and says what is needed →
treasurer-top-up-rewards from another wallet → claims pay points × rate → a second claim is
refused → a partial claim, a short escrow, a top-up and the rest. The program's own refusals
(more than claimable, a short escrow) are checked by sending ``participant_claim`` directly.

:class:`Flow` runs each step once per module, so any test also runs alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from psyche.localsvm import LocalSvmThread
from psyche.solana.programs import treasurer_commands as treasurer
from psyche.solana.rpc import ProgramRejectedError
from psyche.solana.tokens import associated_token_address, decode_token_account

from . import svm_epoch
from .test_documented_commands import _cli_env_names, write_keypair

ROOT = Path(__file__).resolve().parents[3]
VENV_BIN = ROOT / ".venv" / "bin"
TINY = ROOT / "config" / "tiny" / "state.toml"
RUN_ID = "paid-run"
RATE = 7
EARNING = 3000
"""Points shared per epoch: 1000 for each of the 3 clients."""
FUNDS = 1_000_000
LAMPORTS = 100 * 10**9

T = TypeVar("T")


def run(coro: Awaitable[T], timeout: float = 120) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def treasurer_program_id() -> str:
    return str(json.loads((ROOT / "idl" / "psyche_treasurer.json").read_text())["address"])


@dataclass
class Flow:
    node: LocalSvmThread
    work: Path
    owner: Keypair = field(init=False)
    funder: Keypair = field(init=False)
    clients: list[Keypair] = field(init=False)
    done: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self.owner = write_keypair(self.work / "owner.json")
        self.funder = write_keypair(self.work / "funder.json")
        self.clients = [write_keypair(self.work / f"client{i}.json") for i in (1, 2, 3)]
        for kp in (self.owner, self.funder, *self.clients):
            self.node.airdrop(kp.pubkey(), LAMPORTS)

    def wallet(self, kp: Keypair) -> Path:
        for path in self.work.glob("*.json"):
            if json.loads(path.read_text()) == list(bytes(kp)):
                return path
        raise KeyError(kp.pubkey())

    def cli(
        self, kp: Keypair | None, *args: str, ok: bool = True, **env: str
    ) -> subprocess.CompletedProcess[str]:
        drop = _cli_env_names()
        full = {k: v for k, v in os.environ.items() if k not in drop}
        full["PATH"] = f"{VENV_BIN}:{full.get('PATH', '')}"
        full.update(RPC=self.node.url, WS_RPC=self.node.ws_url, **env)
        if kp is not None:
            full["WALLET_PRIVATE_KEY_PATH"] = str(self.wallet(kp))
        res = subprocess.run(
            ["psyche-solana-client", *args],
            cwd=self.work,
            env=full,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert "Traceback" not in res.stderr, res.stderr
        if ok:
            assert res.returncode == 0, f"{args}\nstdout: {res.stdout}\nstderr: {res.stderr}"
        else:
            assert res.returncode == 1, f"{args}\nstdout: {res.stdout}\nstderr: {res.stderr}"
        return res

    def json(self, kp: Keypair | None, *args: str, **env: str) -> Any:
        return json.loads(self.cli(kp, *args, **env).stdout)

    def once(self, name: str, step: Callable[[], Any]) -> Any:
        if name not in self.done:
            self.done[name] = step()
        return self.done[name]

    def balance(self, owner: Pubkey) -> int:
        account = self.node.get_account(associated_token_address(owner, self.mint()))
        return 0 if account is None else decode_token_account(bytes(account.data)).amount

    def escrow(self) -> int:
        key = Pubkey.from_string(self.created()["run_collateral"])
        account = self.node.get_account(key)
        assert account is not None
        return decode_token_account(bytes(account.data)).amount

    def units(self, signature: str) -> list[int]:
        """Compute units of each Treasurer instruction of a successful transaction."""
        record = self.node.transaction(signature)
        assert record is not None and record.err is None, record
        return _consumed(record, treasurer_program_id())

    # --- the steps ------------------------------------------------------------------------------

    def mint(self) -> Pubkey:
        out = self.once(
            "mint",
            lambda: self.json(
                self.owner, "create-test-mint", "--decimals", "6",
                "--mint-to", f"{self.funder.pubkey()}={FUNDS}",
            ),
        )  # fmt: skip
        return Pubkey.from_string(out["mint"])

    def created(self) -> dict[str, Any]:
        mint = self.mint()
        return self.once(  # type: ignore[no-any-return]
            "create-run",
            lambda: self.json(
                self.owner, "create-run", "--run-id", RUN_ID,
                "--treasurer-collateral-mint", str(mint),
                "--name", "Paid run", "--description", "points paid in a test token",
                TREASURER_COLLATERAL_PER_POINT=str(RATE),
            ),
        )  # fmt: skip

    def configured(self) -> dict[str, Any]:
        self.created()
        return self.once(  # type: ignore[no-any-return]
            "update-config",
            lambda: self.json(
                self.owner, "update-config", "--run-id", RUN_ID, "--config-path", str(TINY)
            ),
        )

    def rates(self) -> str:
        self.configured()
        return self.once(  # type: ignore[no-any-return]
            "rates",
            lambda: self.cli(
                self.owner, "set-future-epoch-rates", "--run-id", RUN_ID,
                "--earning-rate-total-shared", str(EARNING), "--slashing-rate-per-client", "0",
            ).stdout.strip(),
        )  # fmt: skip

    def resumed(self) -> str:
        self.rates()

        def go() -> str:
            self.cli(self.owner, "join-authorization-create")
            return self.cli(self.owner, "set-paused", "--run-id", RUN_ID, "resume").stdout.strip()

        return self.once("resume", go)  # type: ignore[no-any-return]

    def epoch(self) -> dict[str, Any]:
        self.resumed()

        def go() -> dict[str, Any]:
            run(svm_epoch.join(self.node, RUN_ID, self.clients))
            run(svm_epoch.run_epoch(self.node, RUN_ID, self.clients))
            return self.json(None, "json-dump-run", "--run-id", RUN_ID)  # type: ignore[no-any-return]

        return self.once("epoch", go)  # type: ignore[no-any-return]

    def top_up(self, amount: int) -> dict[str, Any]:
        return self.json(  # type: ignore[no-any-return]
            self.funder, "treasurer-top-up-rewards", "--run-id", RUN_ID, "--amount", str(amount)
        )


@pytest.fixture(scope="module")
def flow(local_svm: LocalSvmThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flow]:
    yield Flow(local_svm, tmp_path_factory.mktemp("treasurer"))


def test_create_test_mint_mints_to_the_holders(flow: Flow) -> None:
    mint = flow.mint()
    assert flow.balance(flow.funder.pubkey()) == FUNDS
    data = flow.node.get_account(mint)
    assert data is not None and len(data.data) == 82 and data.data[44] == 6


def test_create_run_through_the_treasurer(flow: Flow) -> None:
    out = flow.created()
    run_key = Pubkey.from_string(out["treasurer_run"])
    index = treasurer.default_treasurer_index(RUN_ID)
    assert out["treasurer_index"] == index and out["collateral_per_point"] == RATE
    program = Pubkey.from_string(treasurer_program_id())
    assert run_key == treasurer.run_pda(program, index)
    assert out["run_collateral"] == str(treasurer.run_collateral_pda(program, run_key))
    dump = flow.json(None, "json-dump-run", "--run-id", RUN_ID)
    assert dump["main_authority"] == out["treasurer_run"]
    assert dump["join_authority"] == str(flow.owner.pubkey())
    assert dump["metadata"]["name"] == "Paid run"  # in the same transaction
    t = dump["treasurer"]
    assert t["run"] == out["treasurer_run"] and t["index"] == index
    assert t["main_authority"] == str(flow.owner.pubkey())
    assert t["collateral_mint"] == str(flow.mint()) and t["collateral_per_point"] == RATE
    assert t["coordinator_account"] == out["coordinator_account"]
    assert flow.escrow() == 0
    run_create, metadata = flow.units(out["signature"])
    print(f"create-run: run_create {run_create}, run_update (metadata) {metadata} CU")


def test_update_config_rates_and_resume_go_through_run_update(flow: Flow) -> None:
    sigs = flow.configured()["signatures"]
    assert len(sigs) == 1
    rates_sig = flow.rates()
    resume_sig = flow.resumed()
    for what, sig in (("update", sigs[0]), ("rates", rates_sig), ("resume", resume_sig)):
        record = flow.node.transaction(sig)
        assert record is not None
        assert "Program log: Instruction: RunUpdate" in record.logs, record.logs
        (units,) = flow.units(sig)
        print(f"run_update ({what}): {units} compute units")
    dump = flow.json(None, "json-dump-run", "--run-id", RUN_ID)
    assert dump["coordinator"]["run_state"] == "WaitingForMembers"
    assert dump["future_epoch_rates"]["earning_rate_total_shared"] == EARNING
    assert dump["coordinator"]["config"]["min_clients"] == 2
    # The wallet is not the coordinator's authority: the coordinator's own set_paused is refused.
    res = flow.cli(flow.funder, "set-paused", "--run-id", RUN_ID, "pause", ok=False)
    assert f"only its main authority {flow.owner.pubkey()}" in res.stderr


def test_an_epoch_credits_points(flow: Flow) -> None:
    dump = flow.epoch()
    earned = {c["signer"]: (c["earned"], c["slashed"]) for c in dump["clients"]}
    for kp in flow.clients:
        assert earned[bytes(kp.pubkey()).hex()] == (EARNING // 3, 0)  # signers in hex


def test_claims_pay_points_times_the_rate(flow: Flow) -> None:
    flow.epoch()
    c1, c2, c3 = flow.clients
    # Nothing in the escrow yet: refused before sending, with what is needed.
    res = flow.cli(c1, "treasurer-claim-rewards", "--run-id", RUN_ID, ok=False)
    assert f"holds 0 base units; 1000 points × {RATE} need 7000 (7000 short)" in res.stderr
    assert flow.balance(c1.pubkey()) == 0
    topped = flow.top_up(10_000)
    assert topped["escrow_balance_after"] == 10_000 == flow.escrow()
    assert flow.balance(flow.funder.pubkey()) == FUNDS - 10_000

    out = flow.json(c1, "treasurer-claim-rewards", "--run-id", RUN_ID)
    assert out["points_claimed"] == 1000 and out["amount_paid"] == 7000
    assert out["balance_after"] == 7000 == flow.balance(c1.pubkey())
    assert flow.escrow() == 3000
    create, claim = flow.units(out["signature"])
    print(f"first claim: participant_create {create}, participant_claim {claim} CU")
    again = flow.cli(c1, "treasurer-claim-rewards", "--run-id", RUN_ID, ok=False)
    assert "nothing to claim" in again.stderr and "already paid for 1000" in again.stderr
    assert flow.balance(c1.pubkey()) == 7000

    # A part, then the rest after the escrow ran short.
    part = flow.json(c2, "treasurer-claim-rewards", "--run-id", RUN_ID, "--points", "400")
    assert part["amount_paid"] == 2800 and flow.balance(c2.pubkey()) == 2800
    assert flow.escrow() == 200
    short = flow.cli(c2, "treasurer-claim-rewards", "--run-id", RUN_ID, ok=False)
    assert f"holds 200 base units; 600 points × {RATE} need 4200 (4000 short)" in short.stderr
    flow.top_up(4000)
    rest = flow.json(c2, "treasurer-claim-rewards", "--run-id", RUN_ID)
    assert rest["points_claimed"] == 600 and flow.balance(c2.pubkey()) == 7000
    print(f"participant_claim: {flow.units(rest['signature'])} CU")
    assert flow.escrow() == 0

    # The program checks the escrow itself: c3's participant, token account and claim in one
    # transaction, refused as a whole (EscrowShort), so nothing of it remains.
    c3_participant = run(_escrow_short(flow, c3))
    assert flow.node.get_account(c3_participant) is None
    flow.top_up(7000)
    out3 = flow.json(
        c3, "treasurer-claim-rewards", "--run-id", RUN_ID, TREASURER_CLAIM_POINTS="1000"
    )
    assert out3["points_claimed"] == 1000 and flow.balance(c3.pubkey()) == 7000
    t = flow.json(None, "json-dump-run", "--run-id", RUN_ID)["treasurer"]
    assert t["total_claimed_points"] == 3000 and t["total_claimed_collateral"] == 21_000


async def _escrow_short(flow: Flow, kp: Keypair) -> Pubkey:
    from psyche.solana.session import Endpoints, Session
    from psyche.solana.tokens import create_associated_account_ix

    s = Session(Endpoints(flow.node.url, flow.node.ws_url), kp)
    try:
        found = await treasurer.treasurer_run(s, RUN_ID)
        assert found is not None
        me = s.wallet.pubkey()
        dest = associated_token_address(me, found.collateral_mint)
        ixs = [
            treasurer.participant_create_ix(s.treasurer, me, me, found.address),
            create_associated_account_ix(me, me, found.collateral_mint),
            treasurer.participant_claim_ix(s.treasurer, found, me, dest, 1000),
        ]
        with pytest.raises(ProgramRejectedError) as e:
            await s.sender(s.treasurer).send(ixs, label="claim")
        assert e.value.name == "EscrowShort", e.value
        return treasurer.participant_pda(s.treasurer.program_id, found.address, me)
    finally:
        await s.close()


def test_the_program_refuses_what_the_client_checks(flow: Flow) -> None:
    """The client checks before sending; the program checks again: more than claimable, and a
    wallet the coordinator never registered, each refused with its IDL name."""
    flow.epoch()
    stranger = Keypair()
    flow.node.airdrop(stranger.pubkey(), LAMPORTS)

    async def go() -> None:
        from psyche.solana.session import Endpoints, Session
        from psyche.solana.tokens import create_associated_account_ix

        s = Session(Endpoints(flow.node.url, flow.node.ws_url), flow.clients[0])
        try:
            found = await treasurer.treasurer_run(s, RUN_ID)
            assert found is not None
            me = s.wallet.pubkey()
            dest = associated_token_address(me, found.collateral_mint)
            ixs = [
                treasurer.participant_create_ix(s.treasurer, me, me, found.address),
                create_associated_account_ix(me, me, found.collateral_mint),
                treasurer.participant_claim_ix(s.treasurer, found, me, dest, 10**6),
            ]
            if await s.read(treasurer.participant_pda(s.treasurer.program_id, found.address, me)):
                ixs = ixs[2:]
            with pytest.raises(ProgramRejectedError) as e:
                await s.sender(s.treasurer).send(ixs, label="claim")
            assert e.value.name == "ClaimExceedsEarned", e.value
        finally:
            await s.close()
        # A wallet the run never registered.
        s = Session(Endpoints(flow.node.url, flow.node.ws_url), stranger)
        try:
            found = await treasurer.treasurer_run(s, RUN_ID)
            assert found is not None
            me = s.wallet.pubkey()
            create = treasurer.participant_create_ix(s.treasurer, me, me, found.address)
            ata = create_associated_account_ix(me, me, found.collateral_mint)
            await s.sender(s.treasurer).send([create, ata], label="participant")
            dest = associated_token_address(me, found.collateral_mint)
            claim = treasurer.participant_claim_ix(s.treasurer, found, me, dest, 1)
            with pytest.raises(ProgramRejectedError) as e:
                await s.sender(s.treasurer).send([claim], label="claim")
            assert e.value.name == "ParticipantNotRegistered", e.value
        finally:
            await s.close()

    run(go())


def test_rewards_json_reports_points_and_payments(flow: Flow) -> None:
    flow.epoch()

    async def go() -> dict[str, Any]:
        from psyche.solana.session import Endpoints, Session

        s = Session(Endpoints(flow.node.url, flow.node.ws_url), Keypair())
        try:
            return await treasurer.rewards_json(s, RUN_ID, flow.clients[0].pubkey())
        finally:
            await s.close()

    out = run(go())
    assert out["treasurer"]["run"] == flow.created()["treasurer_run"]
    assert out["registered"] is True and out["earned"] == EARNING // 3 and out["slashed"] == 0
    paid = out["claimed_points"]
    assert out["claimable_points"] == EARNING // 3 - paid
    assert out["claimable_amount"] == out["claimable_points"] * RATE
    assert out["claimed_collateral"] == paid * RATE
    assert out["escrow_balance"] == flow.escrow()


def _consumed(record: Any, program: str) -> list[int]:
    """Compute units each top-level invocation of ``program`` used (its CPIs included)."""
    out = []
    depth = 0
    for line in record.logs:
        if line.startswith("Program ") and " invoke [" in line:
            depth += 1
            continue
        if line.startswith(f"Program {program} consumed ") and depth == 1:
            out.append(int(line.split()[3]))
        if line.startswith("Program ") and (line.endswith(" success") or " failed" in line):
            depth -= 1
    return out


def test_pause_client_version_and_resume_through_run_update(flow: Flow) -> None:
    """A paused run takes a new client version; resuming it is the Treasurer's heaviest
    run_update (the coordinator's set_paused through CPI)."""
    flow.epoch()
    pause = flow.cli(flow.owner, "set-paused", "--run-id", RUN_ID, "pause").stdout.strip()
    dump = flow.json(None, "json-dump-run", "--run-id", RUN_ID)
    assert dump["coordinator"]["run_state"] == "Paused"
    version = flow.json(flow.owner, "update-config", "--run-id", RUN_ID, "--client-version", "v2")[
        "signatures"
    ]
    assert flow.json(None, "json-dump-run", "--run-id", RUN_ID)["client_version"] == "v2"
    resume = flow.cli(flow.owner, "set-paused", "--run-id", RUN_ID, "resume").stdout.strip()
    dump = flow.json(None, "json-dump-run", "--run-id", RUN_ID)
    assert dump["coordinator"]["run_state"] == "WaitingForMembers"
    # A refusal inside the CPI carries the coordinator's code (from 6000; the Treasurer's own
    # start at 7000), so it is named unambiguously.
    again = flow.cli(flow.owner, "set-paused", "--run-id", RUN_ID, "resume", ok=False)
    assert "CannotResume (coordinator) (6008)" in again.stderr
    for what, sig in (("pause", pause), ("client version", version[0]), ("resume", resume)):
        (units,) = flow.units(sig)
        print(f"run_update ({what}): {units} compute units")


def test_the_owner_winds_the_run_down_and_closes_it(flow: Flow) -> None:
    """Issue 26, finding 2 (last: it ends the run). Only the run's main authority winds down;
    the run stops for good; closing waits for the grace period, then the escrow's remainder and
    the rent of the escrow and of the coordinator's accounts go to the owner."""
    flow.epoch()
    created = flow.created()
    refused = flow.cli(flow.clients[0], "treasurer-wind-down", "--run-id", RUN_ID, ok=False)
    assert "only the run's main authority" in refused.stderr
    early = flow.cli(flow.owner, "treasurer-close-run", "--run-id", RUN_ID, ok=False)
    assert "not winding down" in early.stderr
    down = flow.json(flow.owner, "treasurer-wind-down", "--run-id", RUN_ID)
    assert down["closable_at"] == down["wind_down_at"] + treasurer.RUN_CLOSE_GRACE_SECONDS
    dump = flow.json(None, "json-dump-run", "--run-id", RUN_ID)
    assert dump["coordinator"]["run_state"] == "Paused"
    assert dump["treasurer"]["wind_down_at"] == down["wind_down_at"]
    resume = flow.cli(flow.owner, "set-paused", "--run-id", RUN_ID, "resume", ok=False)
    assert "RunWindingDown" in resume.stderr
    too_soon = flow.cli(flow.owner, "treasurer-close-run", "--run-id", RUN_ID, ok=False)
    assert "can be closed from" in too_soon.stderr

    flow.node.advance_time(treasurer.RUN_CLOSE_GRACE_SECONDS)
    remainder = flow.escrow()
    before = flow.balance(flow.owner.pubkey())
    rent = sum(
        acc.lamports
        for key in (created["coordinator_account"], created["coordinator_instance"])
        if (acc := flow.node.get_account(Pubkey.from_string(key))) is not None
    )
    assert rent > 10**9, rent  # the ≈ 1.16 SOL of the coordinator account comes back
    closed = flow.json(flow.owner, "treasurer-close-run", "--run-id", RUN_ID)
    assert closed["remainder_paid"] == remainder
    assert flow.balance(flow.owner.pubkey()) == before + remainder
    for key in ("coordinator_account", "coordinator_instance", "run_collateral"):
        assert flow.node.get_account(Pubkey.from_string(created[key])) is None, key
    assert flow.node.get_account(Pubkey.from_string(created["treasurer_run"])) is not None
