"""One client per Solana program: addresses, account records, instruction builders and the
programs' pure rules (``coordinator``, ``treasurer``, the pure modules of ``mining_pool``), and
beside them the coroutines that read the chain and send, each taking a
:class:`~psyche.solana.session.Session` (``coordinator_commands``, ``authorizer``,
``treasurer_commands``, ``mining_pool``'s ``reads``, ``commands`` and ``views``): what the
``psyche-solana-client`` commands do.
"""
