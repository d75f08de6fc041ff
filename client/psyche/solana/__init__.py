"""The Solana chain client as its own layer: the programs' IDL codec, account records and the
errors they raise (docs/architecture.md, "Layers").

It knows the chain and the protocol's types, never the ``Backend`` seam: the Solana backend
(``psyche.backends.solana``), the CLI, the testnets and the explorer build on it, so a tool that
only reads or writes accounts does not bring in a transport.
"""
