"""One client module per Solana program, without a session: addresses, account records,
instruction builders and the programs' pure rules. The coroutines that read the chain and send
are in :mod:`psyche.backends.solana`.
"""
