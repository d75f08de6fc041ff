"""Everything a Solana command needs, assembled once: wallet, endpoints, IDLs, the run's accounts.

Used by ``psyche-solana-client`` (every subcommand) and by ``train`` to build a
:class:`~psyche.backends.solana.backend.SolanaBackend`. Wallets are read in the two forms Solana
tools use: a ``solana-keygen`` JSON array of 64 bytes (file), or the same array / base58 text in
``RAW_WALLET_PRIVATE_KEY``. Endpoints are URLs or the cluster monikers of the Solana tools
(``devnet``, ``mainnet-beta``, ``testnet``, ``localnet``); a websocket URL left out is derived from
its RPC URL as those tools do (:func:`websocket_url`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from psyche.solana.errors import ChainError
from psyche.solana.idl import IdlCodec
from psyche.solana.instructions import (
    JOIN_RUN_SCOPE,
    ProgramClient,
    RunAccounts,
    RunInstructions,
    authorization_pda,
    default_idl_dir,
    instance_pda,
)
from psyche.solana.layout import CoordinatorLayout
from psyche.solana.rpc import (
    COMMITMENT,
    RpcError,
    SolanaRpc,
    TxSender,
    decode_account_data,
)
from psyche.solana.snapshot import RunSnapshot
from psyche.solana.tokens import (
    MintInfo,
    TokenAccountInfo,
    decode_mint,
    decode_token_account,
)

__all__ = [
    "CLUSTERS",
    "Endpoints",
    "Session",
    "WalletError",
    "load_keypair_file",
    "load_wallet",
    "resolve_rpc_url",
    "websocket_url",
]

CLUSTERS = {
    "devnet": "https://api.devnet.solana.com",
    "mainnet-beta": "https://api.mainnet-beta.solana.com",
    "testnet": "https://api.testnet.solana.com",
    "localnet": "http://127.0.0.1:8899",
    "localhost": "http://127.0.0.1:8899",
}
"""The monikers ``solana config set --url`` accepts, and the RPC URLs they stand for."""


class WalletError(ValueError):
    """The wallet key could not be read."""


class RunNotFoundError(ChainError):
    """No run of that id on this cluster (under this coordinator program): the user's to fix,
    so the command exits 2 (``exit_code``) and the image's entry point does not restart it."""

    exit_code = 2

    def __init__(self, run_id: str, detail: str = "") -> None:
        super().__init__(f"run {run_id!r} does not exist{detail}")
        self.run_id = run_id


def _keypair_from_text(text: str, source: str) -> Keypair:
    text = text.strip()
    try:
        if text.startswith("["):
            raw = bytes(json.loads(text))
            return Keypair.from_bytes(raw) if len(raw) == 64 else Keypair.from_seed(raw)
        return Keypair.from_base58_string(text)
    except Exception as e:
        raise WalletError(
            f"{source}: not a Solana keypair (JSON byte array or base58): {e}"
        ) from None


def load_keypair_file(path: str) -> Keypair:
    """A ``solana-keygen`` keypair file (JSON array of 64 bytes; base58 text also accepted)."""
    try:
        return _keypair_from_text(Path(path).expanduser().read_text(), path)
    except OSError as e:
        raise WalletError(f"{path}: cannot read the keypair: {e.strerror}") from None
    except UnicodeDecodeError:
        raise WalletError(
            f"{path}: not a Solana keypair file (it is binary; solana-keygen writes a JSON byte "
            "array)"
        ) from None


def load_wallet(path: str | None, raw: str | None) -> Keypair:
    """``raw`` (env ``RAW_WALLET_PRIVATE_KEY``) wins over the key file at ``path``."""
    if raw:
        return _keypair_from_text(raw, "RAW_WALLET_PRIVATE_KEY")
    if path:
        return load_keypair_file(path)
    raise WalletError("no wallet: pass --wallet-private-key-path or set RAW_WALLET_PRIVATE_KEY")


def resolve_rpc_url(value: str) -> str:
    """A cluster moniker's RPC URL, or ``value`` itself if it is an http(s) URL."""
    if value in CLUSTERS:
        return CLUSTERS[value]
    parts = urlsplit(value)
    if parts.scheme in ("http", "https") and parts.netloc:
        return value
    raise ValueError(f"{value!r} is neither an http(s) URL nor a cluster ({', '.join(CLUSTERS)})")


def websocket_url(rpc_url: str) -> str:
    """The websocket URL of an RPC URL, as the Solana CLI computes it: http→ws, https→wss, and
    an explicit port is incremented (a validator serves websockets on its RPC port + 1)."""
    parts = urlsplit(rpc_url)
    scheme = "wss" if parts.scheme == "https" else "ws"
    netloc = parts.netloc
    if parts.port is not None:
        host = netloc.rsplit(":", 1)[0]
        netloc = f"{host}:{parts.port + 1}"
    return urlunsplit((scheme, netloc, parts.path, parts.query, parts.fragment))


@dataclass(frozen=True, slots=True)
class Endpoints:
    rpc: str
    ws_rpc: str | None = None
    rpc_2: str | None = None
    ws_rpc_2: str | None = None
    rpc_3: str | None = None
    ws_rpc_3: str | None = None

    @property
    def rpc_urls(self) -> list[str]:
        return [u for u in (self.rpc, self.rpc_2, self.rpc_3) if u]

    @property
    def ws_urls(self) -> list[str]:
        out = []
        pairs = ((self.rpc, self.ws_rpc), (self.rpc_2, self.ws_rpc_2), (self.rpc_3, self.ws_rpc_3))
        for http, ws in pairs:
            if ws:
                out.append(ws)
            elif http:
                out.append(websocket_url(http))
        return out


@dataclass
class Session:
    endpoints: Endpoints
    wallet: Keypair
    idl_dir: Path = field(default_factory=default_idl_dir)
    coordinator_program_id: Pubkey | None = None
    authorizer_program_id: Pubkey | None = None
    treasurer_program_id: Pubkey | None = None
    mining_pool_program_id: Pubkey | None = None
    compute_unit_price: int = 0
    """Priority fee of every transaction sent, micro-lamports per compute unit (0: none)."""

    @cached_property
    def rpcs(self) -> list[SolanaRpc]:
        return [SolanaRpc(u) for u in self.endpoints.rpc_urls]

    @cached_property
    def coordinator(self) -> ProgramClient:
        idl = IdlCodec.load(self.idl_dir / "psyche_coordinator.json")
        return ProgramClient(idl, self.coordinator_program_id)

    @cached_property
    def authorizer(self) -> ProgramClient:
        idl = IdlCodec.load(self.idl_dir / "psyche_authorizer.json")
        return ProgramClient(idl, self.authorizer_program_id)

    @cached_property
    def treasurer(self) -> ProgramClient:
        idl = IdlCodec.load(self.idl_dir / "psyche_treasurer.json")
        return ProgramClient(idl, self.treasurer_program_id)

    @cached_property
    def mining_pool(self) -> ProgramClient:
        idl = IdlCodec.load(self.idl_dir / "psyche_mining_pool.json")
        return ProgramClient(idl, self.mining_pool_program_id)

    @cached_property
    def layout(self) -> CoordinatorLayout:
        return CoordinatorLayout(self.coordinator.idl)

    def sender(self, program: ProgramClient) -> TxSender:
        from psyche.solana.budget import ComputeBudget

        # Every transaction asks for the compute its instructions need at their worst case.
        budget = ComputeBudget(
            [self.coordinator, self.authorizer, self.treasurer, self.mining_pool],
            price=self.compute_unit_price,
        )
        return TxSender(self.rpcs, self.wallet, error_names=program.idl.error_name, prepare=budget)

    async def close(self) -> None:
        for r in self.rpcs:
            await r.close()

    async def read(self, key: Pubkey) -> bytes | None:
        last: Exception | None = None
        for rpc in self.rpcs:
            try:
                return await rpc.get_account(key)
            except ChainError as e:
                last = e
        raise ChainError(f"no RPC endpoint answered: {last}")

    async def read_with_owner(self, key: Pubkey) -> tuple[Pubkey, bytes] | None:
        """(owner, data) of the account at ``key``, None if there is none."""
        last: Exception | None = None
        params = [str(key), {"encoding": "base64", "commitment": COMMITMENT}]
        for rpc in self.rpcs:
            try:
                res = await rpc.call("getAccountInfo", params)
                value = res.get("value") if isinstance(res, dict) else None
                if value is None:
                    return None
                try:
                    owner = Pubkey.from_string(str(value.get("owner")))
                except ValueError:
                    raise RpcError(f"{rpc.url}: getAccountInfo: bad owner") from None
                return owner, decode_account_data(value)
            except ChainError as e:
                last = e
        raise RpcError(f"no RPC endpoint answered: {last}")

    async def token_account(self, key: Pubkey) -> TokenAccountInfo | None:
        """An SPL token account, or None if there is no account at ``key``."""
        data = await self.read(key)
        return None if data is None else decode_token_account(data)

    async def mint(self, key: Pubkey) -> MintInfo:
        data = await self.read(key)
        if data is None:
            raise ChainError(f"mint {key} does not exist")
        return decode_mint(data)

    async def run_accounts(self, run_id: str) -> RunAccounts:
        instance = instance_pda(self.coordinator.program_id, run_id)
        data = await self.read(instance)
        if data is None:
            raise RunNotFoundError(run_id, f" (no account at {instance})")
        inst = self.coordinator.idl.decode_account("CoordinatorInstance", data)
        return RunAccounts(instance, Pubkey.from_bytes(inst["coordinator_account"]))

    async def run(self, run_id: str) -> tuple[RunInstructions, RunSnapshot]:
        accounts = await self.run_accounts(run_id)
        data = await self.read(accounts.account)
        if data is None:
            raise ChainError(f"coordinator account {accounts.account} does not exist")
        return RunInstructions(self.coordinator, accounts), self.layout.decode_account(data)

    async def instance(self, run_id: str) -> dict[str, Any]:
        data = await self.read(instance_pda(self.coordinator.program_id, run_id))
        if data is None:
            raise RunNotFoundError(run_id)
        value: dict[str, Any] = self.coordinator.idl.decode_account("CoordinatorInstance", data)
        return value

    def join_authorization(self, join_authority: Pubkey, grantee: Pubkey | None) -> Pubkey:
        """The authorization PDA a client presents to ``join_run`` (docs/solana.md, "Programs")."""
        return authorization_pda(
            self.authorizer.program_id, join_authority, grantee or Pubkey.default(), JOIN_RUN_SCOPE
        )
