"""What the Solana local testnet is asked to do (:class:`SolanaTestnetOptions`, the CLI's flags
beyond those every testnet takes): the chain to use, how the clients find each other, the extra
joiners' wallets, and the run's terms (the Treasurer, the epoch rates) that the run creator's flow
sets up (:meth:`psyche.testnet.solana.SolanaTestnet.create_run`).
"""

from __future__ import annotations

from dataclasses import dataclass

from psyche.testnet.base import NetOptions
from psyche.testnet.internet import InternetOptions

__all__ = ["DEFAULT_EARNING_RATE", "TEST_MINT_DECIMALS", "SolanaTestnetOptions"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SolanaTestnetOptions(NetOptions):
    rpc_port: int = 0
    """The SVM's JSON-RPC port; 0 picks a free one."""
    ws_port: int = 0
    """Its websocket port; 0 is the RPC port + 1, as a validator's (with ``rpc_port`` 0 the SVM
    picks a free pair)."""
    p2p_base_port: int = 0
    """Client N listens for P2P on base + N; 0 picks a free port per client."""
    rpc: str | None = None
    """An existing chain's JSON-RPC URL (e.g. ``solana-test-validator``, which must hold both
    programs at their ids): no local SVM is started and the wallets are funded by
    ``requestAirdrop``."""
    ws_rpc: str | None = None
    """Its websocket URL; default: derived from ``rpc`` as the Solana tools do."""
    validator: str = "local-svm"
    """The chain started here when ``rpc`` is not given: ``local-svm`` (``psyche-local-svm``) or
    ``real`` (agave's ``solana-test-validator``, :mod:`psyche.testnet.validator`)."""
    run_id: str | None = None
    """Default: the config's run_id."""
    bootstrap_peers: bool = False
    """Also hand every client the others' multiaddrs (``PSYCHE_BOOTSTRAP_PEERS``); by default the
    clients find each other only through their peer records on the chain."""
    internet: InternetOptions | None = None
    """Run every client in its own network namespace of an emulated internet (some behind NAT,
    shaped links; :mod:`psyche.testnet.internet`); the local SVM listens on its gateway."""
    joiners: int = 0
    """Extra wallets (``keys/joinerK.json``), funded and named delegates like the clients', for
    clients started by hand (``just start-training-localnet-client``); not started here."""
    name: str = "local testnet"
    description: str = "psyche-solana-local-testnet"
    treasurer: bool = False
    """Create the run through the Treasurer, paying a test SPL mint (made by the run creator with
    ``create-test-mint``) per point; the escrow is topped up with ``treasurer_top_up`` base units
    and the mint and Run are written to ``<out>/treasurer.json``."""
    earning_rate: int | None = None
    """Points the Healthy clients share per successful epoch (``set-future-epoch-rates`` before
    the run starts); default: none set, or with the Treasurer ``DEFAULT_EARNING_RATE``."""
    slashing_rate: int | None = None
    """Points slashed from each client ejected in an epoch (``set-future-epoch-rates
    --slashing-rate-per-client``); default: the run's (0). Not a launcher flag: tests set it."""
    collateral_per_point: int = 1
    """With the Treasurer: token base units paid per point."""
    treasurer_top_up: int = 10**12
    """With the Treasurer: base units the run creator puts into the escrow."""


DEFAULT_EARNING_RATE = 3_000
"""Points per epoch with ``--treasurer`` and no ``--earning-rate``: 1000 each for 3 clients."""
TEST_MINT_DECIMALS = 6
