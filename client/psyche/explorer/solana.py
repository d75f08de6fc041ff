"""The Solana source: a run's accounts and transactions, read through a cluster's JSON-RPC.

Per poll: the coordinator account (decoded with the project's IDL layout into the same
:class:`~psyche.coordinator.Coordinator` a client follows; stored under the account's nonce, so a
state seen twice is stored once), the run's Treasurer ``Run`` account when there is one, each
followed Mining Pool and its lenders, and every transaction that named the coordinator account
since the last signature stored (``getSignaturesForAddress`` paged back to that signature with
``until``, then ``getTransaction``, oldest first). A ``witness`` instruction's metadata (loss,
tokens/s, bandwidth, evals) becomes a metric row keyed by its signature; the transactions, their
metrics and the new cursor are stored in one database transaction.

Changes are followed by ``accountSubscribe`` on the coordinator account (a notification wakes the
indexer at once); without a websocket, or while it is down, the indexer polls.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction

from psyche.explorer import peers
from psyche.explorer.observe import ClientRow, MetricObs, observe
from psyche.explorer.sources import BadInput, SourceUnavailable
from psyche.explorer.store import Store, TxRow
from psyche.solana.errors import ChainError
from psyche.solana.idl import IdlCodec, IdlError
from psyche.solana.instructions import (
    ProgramClient,
    default_idl_dir,
    instance_pda,
    peer_record_pda,
)
from psyche.solana.layout import CoordinatorLayout
from psyche.solana.programs.mining_pool.accounts import LenderState, PoolState
from psyche.solana.programs.mining_pool.addresses import lender_pda, pool_pda
from psyche.solana.programs.treasurer import (
    TreasurerRun,
    default_treasurer_index,
    participant_pda,
    run_pda,
)
from psyche.solana.rpc import SolanaRpc, account_updates, decode_account_data
from psyche.solana.snapshot import AccountLayoutError

__all__ = ["SolanaSource", "SolanaTarget"]

log = logging.getLogger(__name__)

PAGE = 1000
TX_CONFIG = {"encoding": "base64", "maxSupportedTransactionVersion": 0, "commitment": "confirmed"}
"""``getTransaction``'s options: at ``confirmed``, where the signatures were listed (a
validator's default, ``finalized``, answers null for about 13 s after that)."""
MAX_NEW_PER_POLL = 2000
"""Transactions read per poll at most (a long backlog is read over several polls)."""


@dataclass(frozen=True, slots=True)
class SolanaTarget:
    rpc: str
    run_id: str
    ws: str | None = None
    pools: tuple[int, ...] = ()
    idl_dir: Path = field(default_factory=default_idl_dir)
    cluster: str = ""
    """A name for the cluster in the runs list (default: the RPC URL's host)."""


def _program(idl_dir: Path, name: str) -> ProgramClient:
    return ProgramClient(IdlCodec.load(idl_dir / f"{name}.json"))


class SolanaSource:
    def __init__(self, store: Store, target: SolanaTarget) -> None:
        self.store = store
        self.t = target
        self.name = f"solana {target.run_id} at {target.rpc}"
        self.rpc = SolanaRpc(target.rpc)
        self.coordinator = _program(target.idl_dir, "psyche_coordinator")
        self.treasurer = _program(target.idl_dir, "psyche_treasurer")
        self.pool_program = _program(target.idl_dir, "psyche_mining_pool")
        self.layout = CoordinatorLayout(self.coordinator.idl)
        self.calls = 0
        self.account: Pubkey | None = None
        self._run: int | None = None
        self._changed = asyncio.Event()
        self._ws_task: asyncio.Task[None] | None = None
        self._treasurer: Pubkey | None = None

    async def close(self) -> None:
        if self._ws_task is not None:
            self._ws_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._ws_task
        await self.rpc.close()

    async def _call(self, method: str, params: list[Any]) -> Any:
        self.calls += 1
        try:
            return await self.rpc.call(method, params)
        except ChainError as e:
            raise SourceUnavailable(str(e)) from None

    async def _read(self, key: Pubkey) -> bytes | None:
        res = await self._call(
            "getAccountInfo", [str(key), {"encoding": "base64", "commitment": "confirmed"}]
        )
        value = res.get("value") if isinstance(res, dict) else None
        if value is None:
            return None
        try:
            return decode_account_data(value)
        except ChainError as e:
            raise BadInput(str(e)) from None

    # --- live updates ---------------------------------------------------------------------------

    async def wait_for_change(self, timeout: float) -> None:
        if self.t.ws and self.account is not None and self._ws_task is None:
            self._ws_task = asyncio.create_task(self._follow(self.t.ws, self.account))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._changed.wait()
        self._changed.clear()

    async def _follow(self, ws: str, account: Pubkey) -> None:
        async for _ in account_updates(ws, account):
            self._changed.set()

    # --- one poll -------------------------------------------------------------------------------

    async def poll(self) -> int:
        if self.account is None:
            data = await self._read(instance_pda(self.coordinator.program_id, self.t.run_id))
            if data is None:
                raise SourceUnavailable(f"run {self.t.run_id!r} does not exist (yet)")
            try:
                inst = self.coordinator.idl.decode_account("CoordinatorInstance", data)
                self.account = Pubkey.from_bytes(bytes(inst["coordinator_account"]))
            except (IdlError, ValueError, KeyError) as e:
                raise BadInput(f"coordinator instance: {e}") from None
            host = self.t.cluster or self.t.rpc.split("://", 1)[-1].split("/", 1)[0]
            key = f"solana:{host}:{self.account}"
            self._run = self.store.run(key, "solana", host, self.t.run_id)
        assert self._run is not None
        stored = await self._state(self._run, self.account)
        stored += await self._transactions(self._run, self.account)
        await self._rewards(self._run)
        return stored

    async def _state(self, run: int, account: Pubkey) -> int:
        data = await self._read(account)
        if data is None:
            raise SourceUnavailable(f"coordinator account {account} is gone")
        try:
            snap = self.layout.decode_account(data)
        except AccountLayoutError as e:
            # Logged once per nonce by the indexer, which skips this poll's state.
            raise BadInput(f"coordinator account {account}: {e}") from None
        points = {c.id.signer: c for c in snap.clients}
        signers = [c.id.signer for c in snap.coordinator.epoch_state.clients]
        claimed = await self._claimed(signers)
        p2p = await self._p2p(signers)
        rows = []
        for x in snap.coordinator.epoch_state.clients:
            reg = points.get(x.id.signer)
            rows.append(
                ClientRow(
                    x.id.hex(),
                    x.state.name,
                    x.state.name == "Healthy",
                    earned=None if reg is None else reg.earned,
                    slashed=None if reg is None else reg.slashed,
                    claimed=claimed.get(x.id.signer),
                    p2p=p2p.get(x.id.signer, "unknown"),
                )
            )
        meta = snap.extra.get("metadata")
        name = meta.get("name", "") if isinstance(meta, dict) else ""
        extra = {"registered": len(snap.clients), "account": str(account)}
        obs = observe(snap.coordinator, snap.nonce, name=str(name), clients=rows, extra=extra)
        return self.store.record_state(run, obs)

    async def _signatures(self, address: Pubkey, until: str | None) -> list[dict[str, Any]]:
        """New signatures of ``address`` since ``until``, oldest first (bounded per poll)."""
        out: list[dict[str, Any]] = []
        before: str | None = None
        while len(out) < MAX_NEW_PER_POLL:
            cfg: dict[str, Any] = {"limit": PAGE, "commitment": "confirmed"}
            if until:
                cfg["until"] = until
            if before:
                cfg["before"] = before
            page = await self._call("getSignaturesForAddress", [str(address), cfg])
            if not isinstance(page, list):
                raise BadInput("getSignaturesForAddress: not a list")
            out += [p for p in page if isinstance(p, dict) and isinstance(p.get("signature"), str)]
            if len(page) < PAGE:
                break
            before = out[-1]["signature"]
        return out[::-1][-MAX_NEW_PER_POLL:] if until is None else out[::-1][:MAX_NEW_PER_POLL]

    async def _transactions(self, run: int, account: Pubkey) -> int:
        cursor = self.store.cursor(run, "coordinator")
        sigs = await self._signatures(account, cursor)
        if not sigs:
            return 0
        rows: list[TxRow] = []
        found: list[MetricObs] = []
        for entry in sigs:
            sig = entry["signature"]
            tx = await self._call("getTransaction", [sig, TX_CONFIG])
            if tx is None:
                # Not yet visible at this node: read it next poll (the cursor stays before it).
                break
            try:
                row, metric = self.decode_transaction(sig, tx)
            except BadInput as e:
                log.warning("%s: transaction %s: %s", self.name, sig, e)
                row, metric = _undecodable(sig, entry), None
            rows.append(row)
            if metric is not None:
                found.append(metric)
        if not rows:
            return 0
        return self.store.record_transactions(
            run, rows, found, ("coordinator", rows[-1]["signature"])
        )

    def decode_transaction(self, sig: str, tx: Any) -> tuple[TxRow, MetricObs | None]:
        try:
            wire = base64.b64decode(tx["transaction"][0])
            vt = VersionedTransaction.from_bytes(wire)
            meta = tx.get("meta") or {}
            slot, block_time = int(tx["slot"]), tx.get("blockTime")
        except Exception as e:
            raise BadInput(f"undecodable transaction: {type(e).__name__}: {e}") from None
        keys = vt.message.account_keys
        name, metric = "other", None
        for ix in vt.message.instructions:
            if keys[ix.program_id_index] != self.coordinator.program_id:
                continue
            try:
                name, args = self.coordinator.idl.decode_instruction(bytes(ix.data))
            except (IdlError, ValueError, IndexError) as e:
                raise BadInput(f"a coordinator instruction this IDL cannot decode: {e}") from None
            if name == "witness" and meta.get("err") is None:
                metric = _metric(sig, block_time, keys[0], args.get("metadata") or {})
            break
        err = meta.get("err")
        row = TxRow(
            signature=sig,
            slot=slot,
            block_time=int(block_time) if isinstance(block_time, int) else None,
            instruction=name[:64],
            signer=str(keys[0]),
            ok=err is None,
            error=None if err is None else str(err)[:500],
        )
        return row, metric

    async def _p2p(self, signers: list[bytes]) -> dict[bytes, str]:
        """Each signer's P2P reachability from its peer record, in one ``getMultipleAccounts``
        (:func:`psyche.explorer.peers.reachability`)."""
        if not signers:
            return {}
        program, run = (
            self.coordinator.program_id,
            instance_pda(self.coordinator.program_id, self.t.run_id),
        )
        keys = [peer_record_pda(program, run, Pubkey.from_bytes(s)) for s in signers[:100]]
        res = await self._call(
            "getMultipleAccounts",
            [[str(k) for k in keys], {"encoding": "base64", "commitment": "confirmed"}],
        )
        values = res.get("value") if isinstance(res, dict) else None
        out: dict[bytes, str] = {}
        for signer, value in zip(signers, values if isinstance(values, list) else [], strict=False):
            out[signer] = peers.reachability(self.coordinator.idl, program, run, signer, value)
        return out

    # --- rewards --------------------------------------------------------------------------------

    async def _claimed(self, signers: list[bytes]) -> dict[bytes, int]:
        """Points each signer was paid by the run's Treasurer (its ``Participant`` account), in
        one ``getMultipleAccounts``; empty when the run has no Treasurer."""
        if self._treasurer is None or not signers:
            return {}
        program = self.treasurer.program_id
        keys = [
            participant_pda(program, self._treasurer, Pubkey.from_bytes(s)) for s in signers[:100]
        ]
        res = await self._call(
            "getMultipleAccounts",
            [[str(k) for k in keys], {"encoding": "base64", "commitment": "confirmed"}],
        )
        values = res.get("value") if isinstance(res, dict) else None
        out: dict[bytes, int] = {}
        for signer, value in zip(signers, values if isinstance(values, list) else [], strict=False):
            if not isinstance(value, dict):
                continue
            with contextlib.suppress(Exception):
                data = decode_account_data(value)
                p = self.treasurer.idl.decode_account("Participant", data)
                out[signer] = int(p["claimed_points"])
        return out

    async def _rewards(self, run: int) -> None:
        tr = run_pda(self.treasurer.program_id, default_treasurer_index(self.t.run_id))
        data = await self._read(tr)
        if data is not None:
            try:
                value = TreasurerRun.decode(self.treasurer, tr, data)
                obj = value.to_json(self.treasurer.program_id)
            except Exception as e:
                log.warning("%s: treasurer run %s: %s", self.name, tr, e)
            else:
                self._treasurer = tr
                self.store.set_account(run, "treasurer", str(tr), obj)
        for index in self.t.pools:
            await self._pool(run, index)

    async def _pool(self, run: int, index: int) -> None:
        program = self.pool_program
        address = pool_pda(program.program_id, index)
        data = await self._read(address)
        if data is None:
            return
        try:
            pool = PoolState.decode(program, address, data)
        except Exception as e:
            log.warning("%s: pool %d: %s", self.name, index, e)
            return
        lenders = await self._lenders(run, pool)
        obj = {
            "index": index,
            "authority": str(pool.authority),
            "collateral_mint": str(pool.collateral_mint),
            "redeemable_mint": str(pool.redeemable_mint),
            "cap": pool.max_deposit_collateral_amount,
            "deposited": pool.total_deposited_collateral_amount,
            "extracted": pool.total_extracted_collateral_amount,
            "redeemable": pool.total_deposited_redeemable_amount,
            "claimed": pool.total_claimed_redeemable_amount,
            "frozen": pool.frozen,
            "lenders": [
                {
                    "user": str(lender.user),
                    "deposited": lender.deposited_collateral_amount,
                    "share": (
                        lender.deposited_collateral_amount / pool.total_deposited_collateral_amount
                        if pool.total_deposited_collateral_amount
                        else 0.0
                    ),
                    "entitled": lender.entitled(pool),
                    "claimed": lender.claimed_redeemable_amount,
                    "claimable": lender.claimable(pool),
                }
                for lender in lenders
            ],
        }
        self.store.set_account(run, "pool", str(address), obj)

    async def _lenders(self, run: int, pool: PoolState) -> list[LenderState]:
        """Every lender of ``pool``: the signers of the pool's transactions whose lender account
        exists (the signer set is kept as a cursor, so each transaction is read once)."""
        program = self.pool_program
        name = f"pool:{pool.address}"
        known_text = self.store.cursor(run, name + ":users") or ""
        users = [u for u in known_text.split(",") if u]
        sigs = await self._signatures(pool.address, self.store.cursor(run, name))
        read = 0
        for entry in sigs:
            tx = await self._call("getTransaction", [entry["signature"], TX_CONFIG])
            if tx is None:
                # Not yet visible at this node: read it next poll (the cursor stays before it;
                # skipping it lost its lender for good on a real validator).
                break
            read += 1
            with contextlib.suppress(Exception):
                vt = VersionedTransaction.from_bytes(base64.b64decode(tx["transaction"][0]))
                signer = str(vt.message.account_keys[0])
                if signer not in users:
                    users.append(signer)
        if read:
            self.store.record_transactions(run, [], [], (name, sigs[read - 1]["signature"]))
            self.store.record_transactions(
                run, [], [], (name + ":users", ",".join(users)[:200_000])
            )
        out = []
        for user in users:
            key = lender_pda(program.program_id, pool.address, Pubkey.from_string(user))
            data = await self._read(key)
            if data is None:
                continue
            with contextlib.suppress(Exception):
                out.append(LenderState.decode(program, key, data))
        return out


def _metric(sig: str, block_time: Any, signer: Pubkey, m: dict[str, Any]) -> MetricObs | None:
    try:
        return MetricObs(
            ref=sig,
            at=float(block_time or 0),
            client=str(signer),
            step=int(m["step"]),
            loss=float(m["loss"]),
            tokens_per_sec=float(m["tokens_per_sec"]),
            bandwidth_per_sec=float(m["bandwidth_per_sec"]),
            efficiency=float(m["efficiency"]),
            evals=[[int(e["task"]), float(e["value"])] for e in m.get("evals", [])],
        )
    except (KeyError, TypeError, ValueError):
        return None


def _undecodable(sig: str, entry: dict[str, Any]) -> TxRow:
    slot = entry.get("slot")
    bt = entry.get("blockTime")
    return TxRow(
        signature=sig,
        slot=slot if isinstance(slot, int) else 0,
        block_time=bt if isinstance(bt, int) else None,
        instruction="undecodable",
        signer="",
        ok=entry.get("err") is None,
        error=None,
    )
