"""The libp2p host: everything that runs in the child process ``python -m psyche.p2p.host``.

This package is the only place in the client that imports trio or libp2p, and nothing outside it
imports it (tests/unit/test_layering.py). py-libp2p is a pure-Python trio program: inside the
daemon, whose training thread holds the GIL for long stretches, it starved (gossip round trips
above a second, blobs at a few MB/s) and trio's guest mode inside asyncio failed under load
(docs/p2p-nat.md, "The libp2p host process"). So :class:`psyche.p2p.node.P2PNode` spawns
this package as its own process and drives it over a Unix socket pair with the frames of
:mod:`psyche.p2p.control`; blobs cross as files in a shared directory. The asyncio parent names
the package only on the child's command line.

* ``main``: the entry point, the libp2p settings, logging and dying with the parent;
* ``service``: :class:`~.service.HostService`, the host's state and tasks once libp2p runs,
  its blob transfers and stats, and the control loop serving the parent's requests; its other
  concerns each have a module: ``channel`` (the trio end of the control socket), ``gossip``
  (topic validation, deliveries, publishes), ``dialing`` (dials, circuit dials, redials),
  ``reservations`` (ours, on the relays the parent names), ``nat_status`` (where peers see us);
* ``relay`` (circuit relay v2 for members) and ``hole_punch`` (DCUtR, members only);
* ``blobs`` (blob protocol and server), ``fetch`` (downloads) and ``peers`` (peer measurements,
  download order and the stats report, pure).

Modules both processes share stay in :mod:`psyche.p2p` (``control``, ``messages``, ``nat``,
``rejections``, ``peer_id``).
"""
