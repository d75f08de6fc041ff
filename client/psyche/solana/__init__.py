"""The Solana chain client as its own layer (docs/architecture.md, "Layers"): the programs' IDL
codec and instruction builders, account records and layouts, JSON-RPC and sessions, compute
budgets, one client per program (:mod:`psyche.solana.programs`: what the ``psyche-solana-client``
commands do) and the errors they raise.

It knows the chain and the protocol's types, never the ``Backend`` seam: the Solana backend
(:mod:`psyche.backends.solana`: ``backend``, ``discovery``, ``ticker``, ``peers``), the CLI, the
testnets and the explorer build on it, so a tool that only reads or writes accounts does not
bring in a transport.

Errors: this layer raises :class:`~psyche.solana.errors.ChainError` and its subclasses, never the
seam's ``BackendError`` (it may not import ``psyche.backends``). Its callers catch ``ChainError``
(the CLI's ``run_async`` prints ``error: …`` and exits with the error's ``exit_code``, else 1);
the Solana backend turns a chain error met inside it into a ``BackendError`` with the same
message (:func:`psyche.backends.solana.backend.backend_error`), so only ``BackendError`` leaves a
backend.
"""
