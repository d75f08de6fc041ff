"""What a real cluster does to a client's connections: the validator's RPC and websocket go away
(the process stops) and come back on the same ports with the same ledger. The client's account
subscription (``psyche.solana.rpc.account_updates``, what every client and the explorer follow a
run with) reconnects and resubscribes by itself, and sees the changes made after the restart."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest
from solders.keypair import Keypair

from psyche.localsvm import deploy_programs
from psyche.solana.rpc import account_updates
from psyche.testnet.solana_chain import request_airdrop
from psyche.testnet.validator import (
    ValidatorPorts,
    find_validator,
    validator_command,
    wait_until_ready,
)

ROOT = Path(__file__).resolve().parents[2]
SOL = 10**9
pytestmark = pytest.mark.slow


def test_an_account_subscription_survives_a_validator_restart(tmp_path: Path) -> None:
    programs = {str(k): v for k, v in deploy_programs(ROOT / "target" / "deploy").items()}
    ports = ValidatorPorts.pick()
    binary, ledger = find_validator(), tmp_path / "ledger"

    def start(reset: bool) -> subprocess.Popen[bytes]:
        argv = validator_command(binary, ledger, ports, programs, reset=reset)
        with (tmp_path / "validator.log").open("ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
        wait_until_ready(ports.rpc_url, list(programs), proc)
        return proc

    watched = Keypair().pubkey()
    node = start(reset=True)
    try:
        request_airdrop(ports.rpc_url, str(watched), SOL)
        connects: list[float] = []

        first_confirmed = asyncio.Event()

        async def restart_then_change() -> None:
            nonlocal node
            await first_confirmed.wait()
            # Down and back: the same ports and ledger; the socket is gone meanwhile.
            node.terminate()
            await asyncio.to_thread(node.wait, 30)
            node = await asyncio.to_thread(start, False)
            while len(connects) < 2:  # the subscription came back by itself
                await asyncio.sleep(0.1)
            await asyncio.to_thread(request_airdrop, ports.rpc_url, str(watched), SOL)

        async def follow() -> int:
            loop = asyncio.get_running_loop()
            updates = account_updates(
                ports.ws_url,
                watched,
                delay=lambda retries: 1.0,
                on_connect=lambda: connects.append(loop.time()),
            )
            seen = 0
            restarting: asyncio.Task[None] | None = None
            async for _ in updates:
                seen += 1
                if seen == 1:
                    restarting = asyncio.create_task(restart_then_change())
                else:
                    break
            assert restarting is not None
            await restarting
            return seen

        async def bounded() -> int:
            task = asyncio.create_task(follow())
            while not connects:
                await asyncio.sleep(0.1)
            # The first notification: an airdrop after subscribing.
            await asyncio.to_thread(request_airdrop, ports.rpc_url, str(watched), SOL)
            first_confirmed.set()
            return await asyncio.wait_for(task, 180)

        assert asyncio.run(bounded()) == 2
        assert len(connects) >= 2  # subscribed again after the restart
    finally:
        node.terminate()
        node.wait(timeout=30)
