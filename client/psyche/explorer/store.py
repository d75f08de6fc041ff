"""The explorer's writes (idempotent, each one transaction) and reads (bounded).

Writes are keyed so that a state, a witness report or a transaction seen twice (after a restart,
a reconnect, or a crash between storing and moving a cursor) is stored once: ``states`` by (run,
sequence number or account nonce), ``metrics`` by (run, ref), ``transactions`` by (run,
signature). A source stores its rows and moves its cursor in the same transaction, so a crash
leaves either both or neither. There is one writer (the indexer); the web app only reads.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

from sqlalchemy import Connection, Engine, and_, func, select

from psyche.explorer.observe import MetricObs, StateObs, progress
from psyche.explorer.schema import (
    accounts,
    checkpoints,
    cursors,
    metrics,
    rounds,
    runs,
    states,
    transactions,
)

__all__ = ["MAX_LIMIT", "Store", "TxRow"]

MAX_LIMIT = 1000
"""The most rows one read returns; the API refuses a larger ``limit``."""

_IN_ROUND = ("RoundTrain", "RoundWitness")


class TxRow(dict[str, Any]):
    """A ``transactions`` row to insert: signature, slot, block_time, instruction, signer, ok,
    error."""


class Store:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # --- writes ---------------------------------------------------------------------------------

    def run(self, key: str, backend: str, cluster: str, run_id: str) -> int:
        """The id of the run ``key`` (created on first sight)."""
        with self.engine.begin() as conn:
            found = conn.execute(select(runs.c.id).where(runs.c.key == key)).scalar()
            if found is not None:
                return int(found)
            now = time.time()
            res = conn.execute(
                runs.insert().values(
                    key=key,
                    backend=backend,
                    cluster=cluster,
                    run_id=run_id,
                    name=run_id,
                    first_seen=now,
                    last_update=now,
                )
            )
            key_row = res.inserted_primary_key
            assert key_row is not None
            return int(key_row[0])

    def record_state(
        self,
        run: int,
        obs: StateObs,
        found: Iterable[MetricObs] = (),
        earlier: Iterable[StateObs] = (),
    ) -> int:
        """Store the states ``earlier`` (oldest first) and then ``obs``, each unless this run
        already has its sequence number, and the witness reports ``found`` with them that are
        new, in one transaction; returns the rows stored."""
        with self.engine.begin() as conn:
            stored = sum(self._state(conn, run, e) for e in earlier if e.seq < obs.seq)
            stored += self._state(conn, run, obs)
            return stored + self._metrics(conn, run, found)

    def _state(self, conn: Connection, run: int, obs: StateObs) -> int:
        seen = conn.execute(
            select(states.c.id).where(and_(states.c.run == run, states.c.seq == obs.seq))
        ).scalar()
        if seen is not None:
            # The same state; what the source knows beside it (claims, connections, server
            # events) may have moved on.
            detail = json.dumps(obs.detail())
            conn.execute(
                runs.update()
                .where(and_(runs.c.id == run, runs.c.seq == obs.seq, runs.c.detail != detail))
                .values(detail=detail)
            )
            return 0
        # What a state row and the run's latest-state columns share.
        common = {
            "seq": obs.seq,
            "phase": obs.phase,
            "phase_since": obs.phase_since,
            "epoch": obs.epoch,
            "step": obs.step,
            "height": obs.height,
            "clients": len(obs.clients),
        }
        conn.execute(
            states.insert().values(
                run=run,
                observed_at=obs.observed_at,
                witnesses=obs.witnesses,
                witness_target=obs.witness_target,
                **common,
            )
        )
        conn.execute(
            runs.update()
            .where(runs.c.id == run)
            .values(
                name=obs.name,
                last_update=obs.observed_at,
                total_steps=obs.total_steps,
                tokens=obs.tokens,
                detail=json.dumps(obs.detail()),
                **common,
            )
        )
        self._rounds(conn, run, obs)
        if obs.checkpoint:
            self._checkpoint(conn, run, obs)
        return 1

    @staticmethod
    def _rounds(conn: Connection, run: int, obs: StateObs) -> None:
        key = and_(rounds.c.run == run, rounds.c.epoch == obs.epoch, rounds.c.height == obs.height)
        at = float(obs.phase_since)
        open_other = and_(rounds.c.run == run, rounds.c.end_at.is_(None))
        if obs.phase in _IN_ROUND:
            open_other = and_(open_other, ~key)
        conn.execute(rounds.update().where(open_other).values(end_at=at))
        if obs.last_step:
            # The coordinator's round_trained rule, on every round of this epoch.
            epoch = and_(rounds.c.run == run, rounds.c.epoch == obs.epoch)
            conn.execute(
                rounds.update().where(epoch).values(trained=rounds.c.step + 2 < obs.last_step)
            )
        if obs.phase not in _IN_ROUND:
            return
        row = conn.execute(
            select(rounds.c.id, rounds.c.witness_at, rounds.c.train_at).where(key)
        ).first()
        if row is None:
            conn.execute(
                rounds.insert().values(
                    run=run,
                    epoch=obs.epoch,
                    height=obs.height,
                    step=obs.step,
                    train_at=at,
                    witnesses=obs.witnesses,
                    witness_target=obs.witness_target,
                    trained=not (obs.last_step and obs.step + 2 >= obs.last_step),
                )
            )
        values: dict[str, Any] = {"witnesses": obs.witnesses}
        if obs.phase == "RoundWitness" and (row is None or row.witness_at is None):
            # Opportunistic: the witnesses ended training before its time limit (the state seen
            # first may be later than the phase change, so its witness count cannot tell).
            started = at if row is None else float(row.train_at)
            values.update(
                witness_at=at, opportunistic=at - started < max(1, obs.max_round_train_time)
            )
        conn.execute(
            rounds.update().where(and_(key, rounds.c.witnesses <= obs.witnesses)).values(**values)
        )

    @staticmethod
    def _checkpoint(conn: Connection, run: int, obs: StateObs) -> None:
        cond = and_(checkpoints.c.run == run, checkpoints.c.label == obs.checkpoint)
        if conn.execute(select(checkpoints.c.id).where(cond)).first() is None:
            conn.execute(
                checkpoints.insert().values(
                    run=run,
                    label=obs.checkpoint,
                    epoch=obs.epoch,
                    step=obs.step,
                    at=obs.observed_at,
                )
            )

    def record_metrics(self, run: int, items: Iterable[MetricObs]) -> int:
        with self.engine.begin() as conn:
            return self._metrics(conn, run, items)

    @staticmethod
    def _metrics(conn: Connection, run: int, items: Iterable[MetricObs]) -> int:
        items = list(items)
        if not items:
            return 0
        refs = [m.ref for m in items]
        have = set(
            conn.execute(
                select(metrics.c.ref).where(and_(metrics.c.run == run, metrics.c.ref.in_(refs)))
            ).scalars()
        )
        new = [m for m in items if m.ref not in have]
        for m in new:
            row = asdict(m)
            row["evals"] = json.dumps(row["evals"])
            conn.execute(metrics.insert().values(run=run, **row))
            have.add(m.ref)
        return len(new)

    def record_transactions(
        self,
        run: int,
        rows: Sequence[TxRow],
        found: Iterable[MetricObs],
        cursor: tuple[str, str] | None,
    ) -> int:
        """Transactions, the witness reports decoded from them and the cursor, together."""
        with self.engine.begin() as conn:
            sigs = [r["signature"] for r in rows]
            have = (
                set(
                    conn.execute(
                        select(transactions.c.signature).where(
                            and_(transactions.c.run == run, transactions.c.signature.in_(sigs))
                        )
                    ).scalars()
                )
                if sigs
                else set()
            )
            new = [r for r in rows if r["signature"] not in have]
            for r in new:
                conn.execute(transactions.insert().values(run=run, **r))
            self._metrics(conn, run, found)
            if cursor is not None:
                self._set_cursor(conn, run, *cursor)
            return len(new)

    def set_account(self, run: int, kind: str, address: str, data: dict[str, Any]) -> None:
        cond = and_(accounts.c.run == run, accounts.c.kind == kind, accounts.c.address == address)
        text = json.dumps(data, sort_keys=True)
        with self.engine.begin() as conn:
            row = conn.execute(select(accounts.c.id, accounts.c.data).where(cond)).first()
            if row is None:
                conn.execute(
                    accounts.insert().values(
                        run=run, kind=kind, address=address, observed_at=time.time(), data=text
                    )
                )
            elif row.data != text:
                conn.execute(
                    accounts.update().where(cond).values(observed_at=time.time(), data=text)
                )

    def cursor(self, run: int, name: str) -> str | None:
        with self.engine.connect() as conn:
            value = conn.execute(
                select(cursors.c.value).where(and_(cursors.c.run == run, cursors.c.name == name))
            ).scalar()
            return None if value is None else str(value)

    @staticmethod
    def _set_cursor(conn: Connection, run: int, name: str, value: str) -> None:
        cond = and_(cursors.c.run == run, cursors.c.name == name)
        if conn.execute(select(cursors.c.id).where(cond)).first() is None:
            conn.execute(cursors.insert().values(run=run, name=name, value=value))
        else:
            conn.execute(cursors.update().where(cond).values(value=value))

    # --- reads ----------------------------------------------------------------------------------

    def version(self) -> tuple[int, float]:
        """Changes to watch for live updates: (states stored, latest update)."""
        with self.engine.connect() as conn:
            n = conn.execute(select(func.count()).select_from(states)).scalar_one()
            m = conn.execute(select(func.count()).select_from(metrics)).scalar_one()
            t = conn.execute(select(func.max(runs.c.last_update))).scalar()
            return int(n) + int(m), float(t or 0.0)

    def runs(self, limit: int, offset: int = 0) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(runs).order_by(runs.c.last_update.desc()).limit(limit).offset(offset)
            ).mappings()
            return [_run_obj(r) for r in rows]

    def get_run(self, run: int) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(runs).where(runs.c.id == run)).mappings().first()
            return None if row is None else _run_obj(row, detail=True)

    def steps(self, run: int, limit: int, after: int = -1) -> list[dict[str, Any]]:
        """Per trained step: mean loss, tokens/s and evals over the witnesses that reported."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(
                    metrics.c.step,
                    func.avg(metrics.c.loss).label("loss"),
                    func.avg(metrics.c.tokens_per_sec).label("tokens_per_sec"),
                    func.avg(metrics.c.bandwidth_per_sec).label("bandwidth_per_sec"),
                    func.count().label("reports"),
                )
                .where(
                    and_(
                        metrics.c.run == run,
                        metrics.c.step > after,
                        metrics.c.loss > 0,
                        ~metrics.c.step.in_(
                            select(rounds.c.step).where(
                                and_(rounds.c.run == run, rounds.c.trained.is_(False))
                            )
                        ),
                    )
                )
                .group_by(metrics.c.step)
                .order_by(metrics.c.step)
                .limit(limit)
            ).mappings()
            out = [dict(r) for r in rows]
            if not out:
                return out
            evals: dict[int, dict[int, list[float]]] = {}
            for step, text in conn.execute(
                select(metrics.c.step, metrics.c.evals).where(
                    and_(
                        metrics.c.run == run,
                        metrics.c.step >= out[0]["step"],
                        metrics.c.step <= out[-1]["step"],
                    )
                )
            ):
                for task, value in json.loads(text):
                    evals.setdefault(step, {}).setdefault(int(task), []).append(float(value))
            for r in out:
                per = evals.get(r["step"], {})
                r["evals"] = {str(t): sum(v) / len(v) for t, v in sorted(per.items())}
            return out

    def _rows(self, table: Any, run: int, order: Any, limit: int) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(table).where(table.c.run == run).order_by(order).limit(limit)
            ).mappings()
            return [{k: v for k, v in r.items() if k not in ("id", "run")} for r in rows]

    def rounds(self, run: int, limit: int) -> list[dict[str, Any]]:
        return self._rows(rounds, run, rounds.c.id.desc(), limit)[::-1]

    def states(self, run: int, limit: int) -> list[dict[str, Any]]:
        return self._rows(states, run, states.c.id.desc(), limit)[::-1]

    def transactions(self, run: int, limit: int) -> list[dict[str, Any]]:
        return self._rows(transactions, run, transactions.c.id.desc(), limit)

    def checkpoints(self, run: int, limit: int) -> list[dict[str, Any]]:
        return self._rows(checkpoints, run, checkpoints.c.id, limit)

    def accounts(self, kind: str | None, limit: int) -> list[dict[str, Any]]:
        q = select(accounts).order_by(accounts.c.id).limit(limit)
        if kind is not None:
            q = q.where(accounts.c.kind == kind)
        with self.engine.connect() as conn:
            return [
                {**{k: v for k, v in r.items() if k != "data"}, "data": json.loads(r["data"])}
                for r in conn.execute(q).mappings()
            ]


def _run_obj(r: Any, detail: bool = False) -> dict[str, Any]:
    out = {k: v for k, v in r.items() if k != "detail"}
    more = json.loads(r["detail"] or "{}")
    last_step = int(more.get("last_step", 0) or 0)
    out["progress"] = progress(
        int(r["step"] or 0), int(r["total_steps"] or 0), str(r["phase"]), last_step
    )
    if detail:
        out["detail"] = more
    return out
