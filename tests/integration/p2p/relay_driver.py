"""One P2P node for the NAT traversal tests, run inside a host of the emulated internet.

``ip netns exec`` moves a whole process into a namespace, so each node is its own process:
``python relay_driver.py --run-id R --key-hex K --listen-host IP --port P``. It speaks the
JSON-lines protocol of ``node_runner.py`` (whose commands it inherits: ``connect``, ``allow``,
``wait_peers``, ``announce``, ``serve``, ``fetch``, ``info``…) and adds:

* ``reserve {relays}`` → ``{"circuits": [...]}``: :meth:`P2PNode.reserve`;
* ``nat`` → reachability, observed addresses, circuit addresses, per-peer ``relayed`` flags and
  the counters, as of the host's last report.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

from node_runner import Runner, serve  # a sibling script, run from this directory

from psyche.p2p.node import P2PNode
from psyche.protocol.identity import SecretKey


class RelayRunner(Runner):
    async def op_reserve(self, relays: list[str]) -> dict[str, Any]:
        return {"circuits": await self.node.reserve(relays)}

    async def op_nat(self) -> dict[str, Any]:
        node: P2PNode = self.node
        c = node.counters
        return {
            "reachability": node.reachability(),
            "observed": node.observed_addrs(),
            "circuits": node.circuit_addrs,
            "peers": {
                p: {"connected": r.connected, "relayed": r.relayed, "latency_s": r.latency_s}
                for p, r in node.peer_stats().items()
            },
            "gossip_peers": node.gossip_peers(),
            "counters": {f: getattr(c, f) for f in c.__struct_fields__},
        }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--key-hex", required=True)
    parser.add_argument("--listen-host", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log-level", default="WARNING", help="INFO shows relay and DCUtR steps")
    args = parser.parse_args()
    # The host child takes its level from the "psyche.p2p" logger; logs go to stderr.
    logging.basicConfig(level=args.log_level)
    secret = SecretKey.from_hex(args.key_hex)
    node = P2PNode()
    await node.start(
        secret, run_id=args.run_id, listen_host=args.listen_host, listen_port=args.port
    )
    await serve(RelayRunner(node, secret))


if __name__ == "__main__":
    asyncio.run(main())
