"""Networking plumbing shared by every TCP protocol of the client.

``framing`` cuts byte streams into length-prefixed frames under a size and time limit, ``codec``
turns frames into typed messages and back (hostile bytes end as the caller's error type),
``handshake`` is the challenge–response that proves which ed25519 key a peer holds, ``service``
a bounded asyncio TCP server (connection and handshake budgets, task tracking, graceful close),
``faults`` the counting and rate-limited logging of what peers do wrong, and ``address`` the
``host:port`` parser. Nothing here knows a protocol's messages beyond the handshake answer; this
package imports only :mod:`psyche.protocol` and libraries, and this file imports nothing so
that importing one module stays cheap.
"""
