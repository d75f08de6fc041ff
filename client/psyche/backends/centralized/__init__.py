"""The centralized backend: a TCP server hosting the coordinator, and the client that follows it.

``protocol`` is the wire format, ``run_host`` the server's membership and dispatch logic around
the coordinator (no I/O), ``server`` the network layer with ``connection`` its per-client send
queue, ``state_store`` saved states, ``status`` the TUI view, ``app`` the assembly behind
``psyche-centralized-server run``, and ``backend`` the :class:`~psyche.backends.base.Backend` a
daemon uses. Import the submodules directly; this package
imports nothing so that ``psyche.backends.centralized.protocol`` stays cheap for tools.
"""
