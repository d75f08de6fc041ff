"""SolanaBackend against the RPC test double: nonce gating, joining, exits, version gate,
reconnects, fallback, retries and tick prediction (JSON fakes stand in for the IDL layout)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from solders.keypair import Keypair
from solders.transaction import Transaction

from psyche.backends.base import Backend, BackendError, BackendProtocolError
from psyche.backends.solana.backend import (
    ClientVersionMismatchError,
    LeftRunError,
    SolanaBackend,
)
from psyche.coordinator import ClientState, Coordinator, RunState
from psyche.protocol.identity import NodeIdentity
from psyche.protocol.locations import HubCheckpoint, HubRepo
from psyche.solana.errors import ChainError
from psyche.solana.rpc import ProgramRejectedError, RpcError, SolanaRpc, TxSender
from psyche.solana.snapshot import AccountLayoutError, RegisteredClient
from support.configs import two_client_config

from ...solana.rpc_double import SolanaRpcDouble
from ..support import make_model
from .support import (
    ACCOUNT,
    AUTH,
    FakeCodec,
    FakeInstructions,
    decode_ix,
    encode,
    snapshot,
)

T0 = 1_700_000_000
P2P_KEY = bytes(range(32))


def wfm(epoch: int = 0, **cfg: int) -> Coordinator:
    c = Coordinator(run_id="test", config=two_client_config(**cfg), model=make_model())
    c.run_state = RunState.WaitingForMembers
    c.run_state_start_unix_timestamp = T0
    c.progress.epoch = epoch
    return c


def warmup_with(ids: list[NodeIdentity], epoch: int = 0) -> Coordinator:
    c = wfm(epoch, init_min_clients=len(ids) or 1, min_clients=1)
    c.tick(ids, T0 + 100, 1)
    assert c.run_state is RunState.Warmup
    return c


def run(coro_fn: Callable[..., Awaitable[Any]], *args: Any, timeout: float = 20) -> Any:
    return asyncio.run(asyncio.wait_for(coro_fn(*args), timeout))


class Env:
    def __init__(self, nodes: list[SolanaRpcDouble], **kw: Any) -> None:
        self.nodes = nodes
        self.wallet = Keypair()
        self.me = NodeIdentity(bytes(self.wallet.pubkey()), P2P_KEY)
        self.now = float(T0)
        kw.setdefault("client_version", "v1")
        rpcs = [SolanaRpc(n.url, timeout=2) for n in nodes]
        self.backend = SolanaBackend(
            rpcs=rpcs,
            ws_urls=[n.ws_url for n in nodes],
            coordinator_account=ACCOUNT,
            codec=FakeCodec(),
            instructions=FakeInstructions(),
            wallet=self.wallet,
            p2p_identity=P2P_KEY,
            authorization=AUTH,
            sender=kw.pop("sender", None)
            or TxSender(rpcs, self.wallet, backoff=0.01, confirm_timeout=2),
            clock=lambda: self.now,
            tick_interval=0.05,
            ws_delay=lambda retries: 0.05,
            **kw,
        )

    def sent(self, name: str) -> list[tuple[dict[str, Any], Transaction]]:
        out = []
        for node in self.nodes:
            for tx in node.transactions:
                args, _, _ = decode_ix(tx)
                if args["ix"] == name:
                    out.append((args, tx))
        return out


async def paused_run(
    node: SolanaRpcDouble, *, nonce: int = 1, version: str = "v1", **env_kw: Any
) -> tuple[Coordinator, Env]:
    """A paused run's account on ``node`` and a connected backend following it."""
    c = wfm()
    c.run_state = RunState.Paused
    await node.set_account(ACCOUNT, encode(snapshot(c, nonce, client_version=version)))
    env = Env([node], **env_kw)
    await env.backend.connect()
    return c, env


async def until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.01)


def test_backend_satisfies_the_seam() -> None:
    assert issubclass(SolanaBackend, Backend)


def test_initial_state_by_rpc_then_only_newer_nonces_from_the_subscription() -> None:
    async def go() -> None:
        async with SolanaRpcDouble() as node:
            c, env = await paused_run(node, nonce=5)
            assert (await env.backend.wait_for_new_state()).run_state is RunState.Paused
            await until(lambda: node.subscribers == 1)
            for nonce in (5, 4, 6):
                c.progress.step = nonce
                await node.set_account(ACCOUNT, encode(snapshot(c, nonce, client_version="v1")))
            got = await env.backend.wait_for_new_state()
            assert got.progress.step == 6
            assert env.backend.latest is not None and env.backend.latest.nonce == 6
            await env.backend.close()

    run(go)


def test_joins_once_per_epoch_in_waiting_for_members() -> None:
    async def go() -> None:
        async with SolanaRpcDouble() as node:
            await node.set_account(ACCOUNT, encode(snapshot(wfm(0), 1, client_version="v1")))
            env = Env([node])
            await env.backend.connect()
            await until(lambda: len(env.sent("join_run")) == 1)
            args, tx = env.sent("join_run")[0]
            _, keys, payer = decode_ix(tx)
            assert payer == env.wallet.pubkey() and keys[0] == env.wallet.pubkey()
            assert keys[1] == ACCOUNT and keys[2] == AUTH
            assert args["client_id"]["signer"] == bytes(env.wallet.pubkey()).hex()
            assert args["client_id"]["p2p_identity"] == P2P_KEY.hex()
            # A newer snapshot of the same epoch does not join again; the next epoch does.
            await node.set_account(ACCOUNT, encode(snapshot(wfm(0), 2, client_version="v1")))
            await asyncio.sleep(0.3)
            assert len(env.sent("join_run")) == 1
            await node.set_account(ACCOUNT, encode(snapshot(wfm(1), 3, client_version="v1")))
            await until(lambda: env.backend.joined_epoch == 1)
            assert len(env.sent("join_run")) == 2
            await env.backend.close()

    run(go)


@pytest.mark.parametrize("case", ["omitted", "dropped", "paused"])
def test_exit_conditions_after_joining(case: str, caplog: pytest.LogCaptureFixture) -> None:
    async def go() -> None:
        async with SolanaRpcDouble() as node:
            await node.set_account(ACCOUNT, encode(snapshot(wfm(0), 1, client_version="v1")))
            env = Env([node])
            await env.backend.connect()
            await until(lambda: env.backend.joined_epoch == 0)
            other = NodeIdentity(bytes([9]) * 32, bytes([9]) * 32)
            c = warmup_with([other] if case == "omitted" else [env.me, other])
            if case == "dropped":
                c.epoch_state.clients[0].state = ClientState.Dropped
            if case == "paused":
                c.pause(T0 + 101)
            await node.set_account(ACCOUNT, encode(snapshot(c, 2, client_version="v1")))
            first = await env.backend.wait_for_new_state()  # the WFM state
            assert first.run_state is RunState.WaitingForMembers
            delivered = await env.backend.wait_for_new_state()  # still delivered before exiting
            assert delivered.progress.epoch == 0
            with pytest.raises(LeftRunError) as err:
                await env.backend.wait_for_new_state()
            assert err.value.exit_code == 3
            await env.backend.close()

    run(go)
    assert_not_logged_as_error(caplog)


def assert_not_logged_as_error(caplog: pytest.LogCaptureFixture) -> None:
    """The backend raises its verdict and does not log it: the client logs it once, with its
    exit code (issue 42, item 5: each refusal appeared twice)."""
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_selected_client_keeps_running() -> None:
    async def go() -> None:
        async with SolanaRpcDouble() as node:
            await node.set_account(ACCOUNT, encode(snapshot(wfm(0), 1, client_version="v1")))
            env = Env([node])
            await env.backend.connect()
            await until(lambda: env.backend.joined_epoch == 0)
            c = warmup_with([env.me])
            await node.set_account(ACCOUNT, encode(snapshot(c, 2, client_version="v1")))
            await env.backend.wait_for_new_state()
            assert (await env.backend.wait_for_new_state()).run_state is RunState.Warmup
            assert env.backend._inbox.fatal is None
            await env.backend.close()

    run(go)


@pytest.mark.parametrize(
    ("mine", "theirs", "ok"), [("v1", "v1", True), ("v1", "test", True), ("v1", "v2", False)]
)
def test_client_version_gate(
    mine: str, theirs: str, ok: bool, caplog: pytest.LogCaptureFixture
) -> None:
    async def go() -> None:
        async with SolanaRpcDouble() as node:
            c, env = await paused_run(node, version=theirs, client_version=mine)
            await env.backend.wait_for_new_state()
            if ok:
                assert env.backend._inbox.fatal is None
                # The version changing while the run is paused also ends the client.
                await node.set_account(ACCOUNT, encode(snapshot(c, 2, client_version="v9")))
            with pytest.raises(ClientVersionMismatchError) as err:
                await env.backend.wait_for_new_state()
                await env.backend.wait_for_new_state()
            assert err.value.exit_code == 10
            await env.backend.close()

    run(go)
    assert_not_logged_as_error(caplog)


def test_websocket_reconnects_after_a_drop() -> None:
    async def go() -> None:
        async with SolanaRpcDouble() as node:
            c, env = await paused_run(node)
            await env.backend.wait_for_new_state()
            await until(lambda: node.subscribers == 1)
            await node.drop_websockets()
            await until(lambda: node.subscribers == 1)
            c.progress.step = 7
            await node.set_account(ACCOUNT, encode(snapshot(c, 2, client_version="v1")))
            assert (await env.backend.wait_for_new_state()).progress.step == 7
            await env.backend.close()

    run(go)


def test_second_rpc_is_the_fallback_for_reads_subscriptions_and_sends() -> None:
    async def go() -> None:
        async with SolanaRpcDouble() as dead, SolanaRpcDouble() as node:
            await dead.stop()  # the primary endpoint is down (HTTP and websocket)
            c = wfm()
            await node.set_account(ACCOUNT, encode(snapshot(c, 1, client_version="v1")))
            env = Env([dead, node])
            await env.backend.connect()
            await env.backend.wait_for_new_state()
            await until(lambda: len(env.sent("join_run")) == 1)
            c.progress.step = 3
            await node.set_account(ACCOUNT, encode(snapshot(c, 2, client_version="v1")))
            assert (await env.backend.wait_for_new_state()).progress.step == 3
            await env.backend.close()

    run(go)


def test_sender_retries_three_times_per_endpoint_then_moves_on() -> None:
    async def go() -> None:
        async with SolanaRpcDouble() as a, SolanaRpcDouble() as b:
            a.fail_next_http = 100
            b.fail_next_http = 2  # two failures, the third attempt works
            wallet = Keypair()
            sleeps: list[float] = []
            sender = TxSender(
                [SolanaRpc(a.url), SolanaRpc(b.url)], wallet, backoff=0.5, max_backoff=0.6
            )
            real_sleep = asyncio.sleep

            async def fake_sleep(d: float) -> None:
                sleeps.append(d)
                await real_sleep(0)

            asyncio_sleep, asyncio.sleep = asyncio.sleep, fake_sleep  # type: ignore[assignment]
            try:
                ix = FakeInstructions().tick(wallet.pubkey())
                await sender.send([ix], label="tick")
            finally:
                asyncio.sleep = asyncio_sleep  # type: ignore[assignment]
            assert a.requests == [] and len(b.transactions) == 1
            # 3 attempts on a (2 sleeps: 0.5, 0.6 capped), then b: 2 failures, 2 sleeps.
            assert sleeps == [0.5, 0.6, 0.5, 0.6]

    run(go)


def test_program_rejection_is_not_retried_and_is_named() -> None:
    async def go() -> None:
        async with SolanaRpcDouble(program=lambda tx: 6003) as node:
            wallet = Keypair()
            names = {6003: "CoordinatorErrorInvalidRunState"}.get
            sender = TxSender([SolanaRpc(node.url)], wallet, error_names=names, backoff=0.01)
            with pytest.raises(ProgramRejectedError) as err:
                await sender.send([FakeInstructions().tick(wallet.pubkey())], label="tick")
            assert err.value.name == "CoordinatorErrorInvalidRunState"
            assert len(node.rejected) == 1

    run(go)


def test_all_endpoints_down_raises_rpc_error() -> None:
    async def go() -> None:
        async with SolanaRpcDouble() as node:
            node.fail_next_http = 100
            wallet = Keypair()
            sender = TxSender([SolanaRpc(node.url)], wallet, backoff=0.001)
            with pytest.raises(RpcError):
                await sender.send([FakeInstructions().tick(wallet.pubkey())], label="tick")

    run(go)


def test_chain_errors_cross_the_seam_as_backend_errors() -> None:
    """The chain layer raises ChainError; what leaves the backend is a BackendError with the same
    message (an unreadable account: a BackendProtocolError)."""

    async def go() -> None:
        async with SolanaRpcDouble() as node:
            await node.set_account(ACCOUNT, b"not a coordinator account")
            env = Env([node])
            with pytest.raises(BackendProtocolError, match="not JSON") as e:
                await env.backend.connect()
            assert not isinstance(e.value, ChainError)
            assert isinstance(e.value.__cause__, AccountLayoutError)
            node.fail_next_http = 100
            with pytest.raises(BackendError, match="no RPC endpoint answered") as e2:
                await env.backend.refresh()
            assert not isinstance(e2.value, ChainError)
            await env.backend.close()

    assert not issubclass(RpcError, BackendError) and issubclass(RpcError, ChainError)
    run(go)


def test_sends_witness_health_check_and_checkpoint_transactions() -> None:
    from psyche.coordinator import Witness, WitnessMetadata
    from psyche.protocol.bloom import Bloom
    from psyche.protocol.committee import Committee, CommitteeProof, WitnessProof

    async def go() -> None:
        async with SolanaRpcDouble() as node:
            _, env = await paused_run(node)
            w = Witness(WitnessProof(3, 1, True), Bloom.empty(1), Bloom.empty(2))
            await env.backend.send_witness(w, WitnessMetadata(step=4))
            await env.backend.send_warmup_witness(w)
            other = NodeIdentity(bytes([7]) * 32, bytes([8]) * 32)
            await env.backend.send_health_check(
                [(other, CommitteeProof(Committee.Trainer, 0, 2))] * 2
            )
            await env.backend.send_checkpoint(2, HubCheckpoint(HubRepo(repo_id="me/model")))
            await until(lambda: len(node.transactions) == 5)
            ((args, tx),) = env.sent("witness")
            assert args["step"] == 4 and args["witness"]["proof"]["position"] == 3
            assert decode_ix(tx)[2] == env.wallet.pubkey()
            assert len(env.sent("warmup_witness")) == 1
            assert [a["index"] for a, _ in env.sent("health_check")] == [2, 2]
            ((args, _),) = env.sent("checkpoint")
            assert args == {
                "ix": "checkpoint",
                "index": 2,
                "checkpoint": {"Hub": {"repo_id": "me/model", "revision": None}},
            }
            await env.backend.close()

    run(go)


def test_rejected_send_is_reported_not_raised() -> None:
    async def go() -> None:
        async with SolanaRpcDouble() as node:
            _, env = await paused_run(node)
            node.program = lambda tx: 6001
            await env.backend.send_checkpoint(0, HubCheckpoint(HubRepo(repo_id="x")))
            assert "checkpoint" in await env.backend.next_rejection()
            await env.backend.close()

    run(go)


class ScriptedRng(random.Random):
    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


@pytest.mark.parametrize(("draw", "sends"), [(0.0, True), (0.99, False)])
def test_tick_sent_when_the_prediction_changes_phase(draw: float, sends: bool) -> None:
    async def go() -> None:
        async with SolanaRpcDouble() as node:
            env = Env([node], rng=ScriptedRng(draw))
            others = [NodeIdentity(bytes([i]) * 32, bytes([i]) * 32) for i in (5, 6, 7)]
            c = wfm(0, init_min_clients=4, min_clients=1, waiting_for_members_extra_time=3)
            regs = [RegisteredClient(i, 1) for i in [*others, env.me]]
            snap = snapshot(c, 1, client_version="v1", clients=regs, next_active=1)
            await node.set_account(ACCOUNT, encode(snap))
            env.now = T0 + 1  # extra time (3 s) not over yet: no tick
            await env.backend.connect()
            await asyncio.sleep(0.4)
            assert env.sent("tick") == []
            env.now = T0 + 5  # 4 pending >= init_min_clients and the grace has passed
            if sends:
                await until(lambda: len(env.sent("tick")) == 1)
                await asyncio.sleep(0.3)  # same nonce: not resent before tick_resend_s
                assert len(env.sent("tick")) == 1
            else:
                await asyncio.sleep(0.4)  # p = min(1, 2/4) = 0.5 and the draw is 0.99
                assert env.sent("tick") == []
            await env.backend.close()

    run(go)
