"""Helpers shared by the explorer's tests."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from psyche.explorer.store import Store
from unit.backends.support import make_coordinator

__all__ = ["count", "make_coordinator"]


def count(store: Store, table: Any) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())
