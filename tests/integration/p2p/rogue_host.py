"""A rogue libp2p peer (test harness, not product code): gossip our own nodes never send.

Usage: ``python rogue_host.py --run-id R --key-hex K --connect ADDR --count N --size BYTES``.
It builds a host with the product's libp2p settings (:func:`psyche.p2p.host.main._build`), joins the
run's topic, dials ``ADDR`` and, once that peer is in its mesh, publishes ``N`` messages of
``BYTES`` bytes straight through pubsub: :class:`~psyche.p2p.node.P2PNode` and the control
protocol refuse anything over 4096 bytes, so only a raw host can send an oversized message.
It prints ``published`` and then reads gossip until killed, so the messages are not cut off by
its exit.
"""

from __future__ import annotations

import argparse

import multiaddr
import trio
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.tools.anyio_service import background_trio_service

from psyche.p2p.control import Init
from psyche.p2p.host.main import _build
from psyche.p2p.messages import gossip_topic


async def main(args: argparse.Namespace) -> None:
    init = Init(
        secret_key=bytes.fromhex(args.key_hex),
        run_id=args.run_id,
        listen_host="127.0.0.1",
        listen_port=0,
        blob_dir="/nonexistent",
    )
    host, pubsub, gossipsub = _build(init)
    topic = gossip_topic(args.run_id)
    listen = multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")
    async with (
        host.run(listen_addrs=[listen]),
        background_trio_service(pubsub),
        background_trio_service(gossipsub),
    ):
        await pubsub.wait_until_ready()
        subscription = await pubsub.subscribe(topic)
        await host.connect(info_from_p2p_addr(multiaddr.Multiaddr(args.connect)))
        with trio.fail_after(60):
            while not gossipsub.mesh.get(topic):
                await trio.sleep(0.1)
        for i in range(args.count):
            await pubsub.publish(topic, bytes([i % 256]) * args.size)
        print("published", flush=True)
        while True:  # read what others forward, so py-libp2p never reports a full queue
            await subscription.get()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--key-hex", required=True)
    parser.add_argument("--connect", required=True)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--size", type=int, default=5000)
    trio.run(main, parser.parse_args())
