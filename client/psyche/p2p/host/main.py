"""The libp2p host process: ``python -m psyche.p2p.host --control-fd N --parent-pid P``.

This package (:mod:`psyche.p2p.host`) is the only place that imports libp2p, and the only trio
program in the client. The daemon (asyncio plus a GIL-heavy training thread) would starve an
in-process host (docs/p2p-nat.md, "The libp2p host process"), so
:class:`psyche.p2p.node.P2PNode` spawns this process and drives it over one end of a Unix socket
pair (:mod:`psyche.p2p.control`); blobs are exchanged as files in a shared directory. The process
exits when the parent says ``Shutdown``, when the control socket reaches EOF (the parent died or
closed it), or, as a backstop for a wedged event loop, through ``PR_SET_PDEATHSIG`` (SIGTERM,
handled outside the event loop) when the parent thread that spawned it dies; in every case it
deletes a blob dir the parent created for it. It ignores SIGINT so a Ctrl-C in the terminal is
handled by the parent, which then stops it in order.

The host follows the measured settings of docs/p2p-nat.md, "The libp2p host process", exactly:

* Noise is the only security transport (the default list also offers plaintext, which lets a
  dialer impersonate any peer id on stream protocols) and Yamux the only muxer (Mplex is ~7×
  slower; no QUIC).
* GossipSub with a 1 s heartbeat, this host's own messages flooded to every peer on the topic
  while its mesh is thin (:mod:`.flood_publish`), adaptive gossip off (it stretches
  the heartbeat to 60 s and memory then grows) and spam protection off (it silently drops
  beyond 10 msg/s per topic, our own publishes included). Strict signing, and the pubsub
  sequence counter starts from ``time.time_ns()`` instead of ``int(time.time())``, so a
  restarted peer's first messages are not dropped as duplicates of its previous life.
* The pubsub services run before any dial: py-libp2p's pubsub connection notifee writes to an
  unbuffered channel, so a connect made while pubsub is not running blocks forever.
* Yamux credits the peer once 16 KiB (or half a window) is consumed, instead of after nearly
  every read (:mod:`.yamux_credit`).
* A topic validator drops gossip from peers outside the allow-list or over the size bound, a
  redial loop replaces the missing automatic redial, and every blob transfer has a deadline
  (:mod:`.service`, :mod:`.blobs`, :mod:`.fetch`).
* NAT traversal (docs/p2p-nat.md): every host is a circuit relay v2 for the run's members, with
  small limits (:class:`psyche.p2p.nat.RelayLimits`), accepts relayed connections from members,
  and runs DCUtR to replace a relayed connection with a hole-punched direct one; the relay
  protocol runs before ``Ready``, so a reservation can be made as soon as the parent knows our
  address. Identify runs on every connection (py-libp2p's default), and the addresses peers
  observe us at tell whether we are behind a NAT.

The topic is :func:`~psyche.p2p.messages.gossip_topic`, so runs never share a mesh.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import time
from typing import Any

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair as create_ed25519_key_pair
from libp2p.crypto.keys import KeyPair
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11
from libp2p.pubsub.pubsub import Pubsub
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux
from libp2p.tools.anyio_service import background_trio_service

from psyche.p2p.control import Failed, Init, Ready, decode_parent
from psyche.p2p.host import handled_failures
from psyche.p2p.host.blobs import BLOB_PROTOCOL, PING_PROTOCOL, serve_ping
from psyche.p2p.host.channel import ControlChannel
from psyche.p2p.host.direct import TELL_PROTOCOL
from psyche.p2p.host.flood_publish import FloodPublishGossipSub
from psyche.p2p.host.peerstore import make_cleanup_safe
from psyche.p2p.host.prune_backoff import PruneBackoffGossipSub
from psyche.p2p.host.service import HostService
from psyche.p2p.host.yamux_credit import send_credit_in_steps
from psyche.protocol.identity import SecretKey

__all__ = ["libp2p_key_pair", "main"]

log = logging.getLogger("psyche.p2p.host")

_PR_SET_PDEATHSIG = 1


def libp2p_key_pair(secret: SecretKey) -> KeyPair:
    """The libp2p key pair for ``secret``: the peer id is :func:`psyche.p2p.peer_id.peer_id_for`
    of its public key."""
    return create_ed25519_key_pair(secret.to_bytes())


class _GossipSub(FloodPublishGossipSub, PruneBackoffGossipSub):
    """py-libp2p's GossipSub with two of its defects mended (docs/p2p-nat.md, "py-libp2p
    defects", items 12 and 13)."""


def _build(init: Init) -> tuple[Any, Pubsub, _GossipSub]:
    key_pair = libp2p_key_pair(SecretKey.from_bytes(init.secret_key))
    host = new_host(
        key_pair=key_pair,
        sec_opt={
            NOISE_PROTOCOL_ID: NoiseTransport(
                key_pair, noise_privkey=create_x25519_key_pair().private_key
            )
        },
        muxer_opt={TProtocol(YAMUX_PROTOCOL_ID): Yamux},
    )
    make_cleanup_safe(host.get_peerstore())
    gossipsub = _GossipSub(
        protocols=[PROTOCOL_ID_V11, PROTOCOL_ID],
        degree=6,
        degree_low=4,
        degree_high=12,
        heartbeat_interval=1,
        adaptive_gossip_enabled=False,
        spam_protection_enabled=False,
    )
    pubsub = Pubsub(host, gossipsub, strict_signing=True)
    pubsub.counter = time.time_ns()
    return host, pubsub, gossipsub


async def _serve(control: ControlChannel, init: Init) -> None:
    host, pubsub, gossipsub = _build(init)
    listen = multiaddr.Multiaddr(f"/ip4/{init.listen_host}/tcp/{init.listen_port}")
    state = HostService(control, init, host, pubsub)
    async with (
        host.run(listen_addrs=[listen]),
        trio.open_nursery() as nursery,
        background_trio_service(pubsub),
        background_trio_service(gossipsub),
        background_trio_service(state.relay),
    ):
        await pubsub.wait_until_ready()
        pubsub.set_topic_validator(state.gossip.topic, state.gossip.validate, False)
        subscription = await pubsub.subscribe(state.gossip.topic)
        host.set_stream_handler(TProtocol(BLOB_PROTOCOL), state.handle_blob_stream)
        host.set_stream_handler(TProtocol(PING_PROTOCOL), serve_ping)
        host.set_stream_handler(TProtocol(TELL_PROTOCOL), state.handle_tell_stream)
        suffix = f"/p2p/{state.me}"
        addrs = [str(a) + suffix for a in host.get_transport_addrs()]
        await control.send(Ready(peer_id=state.me, listen_addrs=addrs))
        tasks = (
            state.gossip.forward_deliveries,
            state.gossip.publish_loop,
            state.dialer.redial_loop,
            state.ping_loop,
            state.stats_loop,
            state.reservations.relay_loop,
            state.run_dcutr,
        )
        for task in tasks:
            nursery.start_soon(task)
        nursery.start_soon(state.gossip.read_gossip, subscription)
        nursery.start_soon(host.get_peerstore().start_cleanup_task, 60)
        await state.control_loop(nursery)
        nursery.cancel_scope.cancel()


async def _main(sock: socket.socket) -> int:
    control = ControlChannel(trio.SocketStream(trio.socket.from_stdlib_socket(sock)))
    frame = None
    with trio.move_on_after(30):
        frame = await control.receive()
    if frame is None or not isinstance(init := decode_parent(frame), Init):
        return 2
    _setup_logging(init.log_level)
    send_credit_in_steps()
    if init.owns_blob_dir:
        _dirs_to_remove_on_exit.append(init.blob_dir)
    try:
        await _serve(control, init)
    except Exception as e:
        log.exception("p2p host failed")
        with contextlib.suppress(Exception):
            await control.send(Failed(error=f"{type(e).__name__}: {e}"[:4000]))
        return 1
    finally:
        if init.owns_blob_dir:
            # /dev/shm is RAM: if the daemon died without stopping us, nobody else cleans up.
            shutil.rmtree(init.blob_dir, ignore_errors=True)
    return 0


def _setup_logging(level: int) -> None:
    # This process is its own program: its logs go to the stderr it inherited from the daemon.
    logging.basicConfig(
        level=level, format="%(asctime)s p2p-host[%(process)d] %(levelname)s %(name)s: %(message)s"
    )
    handled_failures.install(level)
    logging.getLogger("multiaddr").setLevel(max(level, logging.WARNING))


_dirs_to_remove_on_exit: list[str] = []


def _exit_now(signum: int, frame: object) -> None:
    # A plain handler runs between bytecodes even when the event loop is wedged, so SIGTERM
    # (also our parent-death signal) always ends the process and frees its /dev/shm blobs.
    for path in _dirs_to_remove_on_exit:
        shutil.rmtree(path, ignore_errors=True)
    os._exit(0)


def _die_with_parent(parent_pid: int) -> None:
    signal.signal(signal.SIGTERM, _exit_now)
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(0)


def main(argv: list[str] | None = None) -> int:
    # Run as ``python -m psyche.p2p.host``, argparse would name the program ``__main__.py``; the
    # usage line keeps the name the host had as a single module.
    parser = argparse.ArgumentParser(
        prog="host.py", description="psyche libp2p host (started by P2PNode)"
    )
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    args = parser.parse_args(argv)
    _die_with_parent(args.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=args.control_fd)
    try:
        return trio.run(_main, sock)
    finally:
        sock.close()


if __name__ == "__main__":
    raise SystemExit(main())
