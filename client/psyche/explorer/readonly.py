"""Opening a stored explorer database read-only: ``psyche explorer serve`` with no source serves
the history a run left behind, and must neither write the database nor create a missing one.

SQLite is opened through a URI, never through a path that SQLite could create: ``immutable=1``
when no ``-wal`` file lies beside the database (its writer stopped and checkpointed, so the file
holds everything and nothing at all is written, not even the ``-shm`` index SQLite keeps beside a
WAL database), ``mode=ro`` while one does (a writer at work, or one killed before it checkpointed:
its last transactions are only in the WAL, which SQLite then reads; the main file is not
written). Every connection also sets ``query_only``. PostgreSQL sessions are
``default_transaction_read_only``. A database that is missing, is not an explorer database, or is
at another schema version than this explorer's is refused with :class:`NotServable`, whose message
is the user's one line.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import QueuePool

from psyche.explorer.schema import SCHEMA_VERSION, current_version

__all__ = ["NotServable", "open_read_only", "shown_url"]


class NotServable(Exception):
    """The database cannot be served read-only; the message says why, for the user."""


def shown_url(url: str) -> str:
    """``url`` as an error message may show it: a PostgreSQL password hidden."""
    if "://" not in url:
        return url
    return make_url(url).render_as_string(hide_password=True)


def open_read_only(url: str) -> Engine:
    """An engine that cannot write ``url`` (a SQLite path or ``sqlite:///path``, or a
    ``postgresql://`` URL), checked to hold an explorer database at this explorer's schema
    version; raises :class:`NotServable` otherwise."""
    if "://" not in url:
        url = f"sqlite:///{url}"
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = _sqlite(parsed.database or "")
    else:
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        options = {"options": "-c default_transaction_read_only=on"}
        engine = create_engine(parsed, connect_args=options)
    try:
        _check_schema(engine)
    except BaseException:
        engine.dispose()
        raise
    return engine


def _sqlite(name: str) -> Engine:
    if name in ("", ":memory:"):
        raise NotServable("no database file named")
    path = Path(name).absolute()
    if not path.exists():
        raise NotServable(
            "no such file; to follow a run into a new database, give --centralized URL, or --rpc"
            " URL and --run-id ID"
        )
    if not path.is_file():
        raise NotServable("not a file")
    wal = path.with_name(path.name + "-wal")
    uri = path.as_uri() + ("?mode=ro" if wal.exists() else "?immutable=1")

    def connect() -> sqlite3.Connection:
        # check_same_thread off as SQLAlchemy's own file engines have it: the page's reads run in
        # a thread pool, one connection at a time.
        return sqlite3.connect(uri, uri=True, check_same_thread=False)

    # A queue pool, as SQLAlchemy gives file databases: the "sqlite://" URL alone would pick the
    # in-memory database's SingletonThreadPool, which closes other threads' connections once
    # more threads than its size have read (the page's five parallel reads in Starlette's thread
    # pool), even mid-query: HTTP 500s, and a segfault with 16 threads.
    engine = create_engine("sqlite://", creator=connect, poolclass=QueuePool)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA query_only=ON")
        cur.execute("PRAGMA busy_timeout=5000")
        cur.close()

    return engine


def _check_schema(engine: Engine) -> None:
    try:
        with engine.connect() as conn:
            if not conn.dialect.has_table(conn, "schema_version"):
                raise NotServable("not an explorer database (it has no schema_version table)")
            found = current_version(conn)
    except SQLAlchemyError as e:
        reason = str(getattr(e, "orig", None) or e).splitlines()[0]
        raise NotServable(f"cannot read it as an explorer database ({reason})") from None
    if found > SCHEMA_VERSION:
        raise NotServable(
            f"schema version {found}, written by a newer explorer (this one reads {SCHEMA_VERSION})"
        )
    if found < SCHEMA_VERSION:
        raise NotServable(
            f"schema version {found}, written by an older explorer; serving it read-only cannot"
            f" migrate it to version {SCHEMA_VERSION} (following a run into it does)"
        )
