"""SIGTERM to a client's process group while its P2P node starts: the libp2p host child dies and
the client's task is cancelled in the same moment. The stop must leave no unread error behind
(issue 28: "shut down cleanly" followed by ``ERROR Future exception was never retrieved …
NodeStopped('the p2p host process exited')``).

The cause was ``HostProcess.spawn`` waiting on ``asyncio.shield(ready)``: cancelling the wait
dropped the shield's reader of ``ready``, and the dying host then set its ``NodeStopped`` there
for nobody. Each case here is made deterministic by signalling the child only once it is running
and the parent is waiting for its ``Ready``."""

from __future__ import annotations

import asyncio
import gc
import signal
from typing import Any

import pytest

from psyche.p2p.node import P2PNode
from psyche.protocol.identity import SecretKey


async def _stop_while_starting(kill_host: bool, cancel: bool) -> None:
    node = P2PNode()
    start = asyncio.create_task(node.start(SecretKey.generate(), run_id="r"))
    host = node._host
    while host._proc is None or host._ready is None:
        await asyncio.sleep(0.01)
    assert not host._ready.done()
    if kill_host:
        host._proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0)
    if cancel:
        start.cancel()
    try:
        await start
    except asyncio.CancelledError:
        assert cancel
    except Exception:
        assert kill_host and not cancel
    await node.stop()


@pytest.mark.parametrize(
    ("kill_host", "cancel"),
    [(True, True), (False, True), (True, False)],
    ids=["sigterm-to-group", "cancelled-only", "host-died-only"],
)
def test_a_stop_while_the_node_starts_leaves_no_unread_error(kill_host: bool, cancel: bool) -> None:
    unread: list[dict[str, Any]] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: unread.append(ctx))
        await _stop_while_starting(kill_host, cancel)
        # Give the host's exit and the read loop's end their loop turns, then collect.
        await asyncio.sleep(0.2)
        gc.collect()

    asyncio.run(main())
    gc.collect()
    assert unread == [], [c.get("message") for c in unread]
