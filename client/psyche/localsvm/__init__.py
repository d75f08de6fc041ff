"""A local Solana environment for tests and development: **an SVM behind an RPC front, not a
validator.**

The repository's programs (their SBF ``.so`` files) run on ``solders.litesvm.LiteSVM`` — the
real program runtime — and a validator's HTTP JSON-RPC (port 8899) and websocket pubsub (port
8900) fronts serve them, so the project's unchanged Solana client talks to it as to a
``solana-test-validator``. What makes a chain around the runtime is added with a validator's
rules (:mod:`psyche.localsvm.chain`): signature verification, a 150-slot recent-blockhash window,
duplicate refusal, fees, the rent-state rule, a clock and slots that follow wall time.

It is one process with one in-memory bank: no consensus, no gossip, no leader schedule, no
forks, no votes, no snapshots or ledger on disk, nothing persisted across restarts. Every
commitment level reads the same, latest state. See ``docs/localsvm.md``.

Modules: :mod:`~psyche.localsvm.chain` (LiteSVM and the rules), :mod:`~psyche.localsvm.execution` (a
transaction's outcome), :mod:`~psyche.localsvm.clock` (slots, clock sysvar, blockhashes),
:mod:`~psyche.localsvm.fees`, :mod:`~psyche.localsvm.rent`, :mod:`~psyche.localsvm.history`
(statuses, duplicate check), :mod:`~psyche.localsvm.errors` (error texts),
:mod:`~psyche.localsvm.accounts` (account encodings), :mod:`~psyche.localsvm.protocol` (JSON-RPC
framing), :mod:`~psyche.localsvm.params`, :mod:`~psyche.localsvm.jsonrpc` (HTTP methods),
:mod:`~psyche.localsvm.transactions` (transaction JSON shapes), :mod:`~psyche.localsvm.pubsub`
(websocket), :mod:`~psyche.localsvm.http_server`, :mod:`~psyche.localsvm.server` (lifecycle),
:mod:`~psyche.localsvm.programs` (which ``.so`` to load), :mod:`~psyche.localsvm.cli`
(``psyche-local-svm``).
"""

from __future__ import annotations

from psyche.localsvm.chain import Chain
from psyche.localsvm.execution import Execution
from psyche.localsvm.history import TxRecord
from psyche.localsvm.programs import MissingProgramError, deploy_programs
from psyche.localsvm.server import AirdropError, LocalSvm, LocalSvmThread

__all__ = [
    "AirdropError",
    "Chain",
    "Execution",
    "LocalSvm",
    "LocalSvmThread",
    "MissingProgramError",
    "TxRecord",
    "deploy_programs",
]
