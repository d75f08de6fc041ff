"""The Mining Pool program's client without a session (docs/rewards.md, "Mining Pool"), split
by concern: :mod:`.addresses` (PDAs), :mod:`.shares` (the program's share arithmetic),
:mod:`.accounts` (``Pool`` and ``Lender``) and :mod:`.instructions` (the builders, bytes and
account order from the IDL). Reading, refusing and sending are
:mod:`psyche.backends.solana.mining_pool`.
"""
