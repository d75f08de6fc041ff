"""What indexing costs: database bytes per 1,000 rounds (a synthetic run written through the
real store) and RPC/HTTP calls per minute (a real source followed for a while).

``psyche explorer cost`` runs both (docs/explorer.md has the figures).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from psyche.explorer.observe import ClientRow, MetricObs, StateObs
from psyche.explorer.store import Store, TxRow

__all__ = ["calls_per_minute", "database_bytes"]


def _state(seq: int, phase: str, height: int, clients: list[ClientRow]) -> StateObs:
    return StateObs(
        seq=seq, observed_at=time.time(), run_id="cost", name="cost", phase=phase,
        phase_since=1_700_000_000 + seq, epoch=height // 100, step=height, total_steps=10**6,
        height=height, witnesses=0, witness_target=2, tokens=height * 6 * 2048,
        checkpoint="Hub:org/model", clients=clients,
    )  # fmt: skip


def database_bytes(
    rounds: int = 1000, clients: int = 3, witnesses: int = 2, solana: bool = True
) -> dict[str, Any]:
    """Bytes a fresh SQLite database grows by while ``rounds`` rounds are indexed: per round a
    RoundTrain and a RoundWitness state (plus one more per witness transaction on Solana, whose
    every transaction changes the account nonce), one metric per witness, and on Solana one row
    per transaction (two ticks and the witnesses)."""
    from psyche.explorer.schema import open_engine

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cost.sqlite"
        engine = open_engine(str(path))
        store = Store(engine)
        run = store.run("cost", "solana" if solana else "centralized", "cost", "cost")
        rows = [
            ClientRow(f"{i:064x}", "Healthy", True, earned=0, slashed=0) for i in range(clients)
        ]
        engine.dispose()
        before = _size(path)
        store = Store(open_engine(str(path)))
        seq = 0
        for height in range(1, rounds + 1):
            phases = ["RoundTrain", *(["RoundTrain"] * witnesses if solana else []), "RoundWitness"]
            for i, phase in enumerate(phases):
                seq += 1
                store.record_state(run, replace(_state(seq, phase, height, rows), witnesses=i))
            metrics = [
                MetricObs(f"{height}:{w}:{'x' * 80}", time.time(), f"{w:064x}", height, 3.0,
                          1000.0, 0.0, 0.0, [[0, 0.5]])
                for w in range(witnesses)
            ]  # fmt: skip
            txs = [
                TxRow(signature=f"{height}:{t}:{'s' * 80}", slot=height * 10 + t, block_time=0,
                      instruction="witness" if t < witnesses else "tick", signer="p" * 44,
                      ok=True, error=None)
                for t in range(witnesses + 2)
            ] if solana else []  # fmt: skip
            store.record_transactions(run, txs, metrics, ("coordinator", f"{height}"))
        store.engine.dispose()
        grown = _size(path) - before
    return {"rounds": rounds, "clients": clients, "witnesses": witnesses, "solana": solana,
            "bytes": grown, "bytes_per_1000_rounds": round(grown * 1000 / rounds)}  # fmt: skip


def _size(path: Path) -> int:
    return sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if os.path.exists(p))


async def calls_per_minute(source: Any, seconds: float, interval: float = 1.0) -> dict[str, Any]:
    """Follow ``source`` (a real one: it counts its own calls) for ``seconds``."""
    from psyche.explorer.indexer import follow

    stop = asyncio.Event()
    task = asyncio.create_task(follow(source, interval, stop=stop))
    await asyncio.sleep(seconds)
    stop.set()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await source.close()
    calls = int(source.calls)
    return {"seconds": seconds, "calls": calls, "calls_per_minute": round(calls * 60 / seconds, 1)}
