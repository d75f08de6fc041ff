"""The run explorer: an indexer that follows runs (a centralized server's status endpoint, or a
Solana cluster's accounts and transactions) into a database, and a web page and JSON API over it.

Modules: :mod:`.schema` (tables and versioned migrations), :mod:`.store` (idempotent writes and
bounded reads), :mod:`.observe` (a coordinator state → what is stored), :mod:`.centralized` and
:mod:`.solana` (the two sources), :mod:`.indexer` (following with back-off), :mod:`.web` (the
Starlette app: pages, ``/api/``, server-sent events), :mod:`.serve` (one process running both)
and :mod:`.cost` (measuring what indexing costs). docs/explorer.md describes them.
"""
