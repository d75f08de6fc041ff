"""The explorer's tables (SQLAlchemy Core, one definition for SQLite and PostgreSQL) and its
versioned migrations.

``schema_version`` holds one row; :func:`migrate` applies every migration above it, each in its
own transaction, so a database is always at a version some release wrote. A new column or table is
a new entry at the end of :data:`MIGRATIONS`, never an edit of an old one. SQLite databases are
put in WAL mode (readers never block the writer, and a killed writer loses at most its open
transaction) with ``synchronous=NORMAL``.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    Engine,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import make_url

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "metadata", "migrate", "open_engine"]

metadata = MetaData()

version_table = Table("schema_version", metadata, Column("version", Integer, nullable=False))

runs = Table(
    "runs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("key", String(200), nullable=False, unique=True),
    Column("backend", String(20), nullable=False),
    Column("cluster", String(200), nullable=False),
    Column("run_id", String(64), nullable=False),
    Column("name", String(200), nullable=False, default=""),
    Column("first_seen", Float, nullable=False),
    Column("last_update", Float, nullable=False),
    Column("seq", BigInteger),
    Column("phase", String(32), nullable=False, default=""),
    Column("phase_since", BigInteger, nullable=False, default=0),
    Column("epoch", Integer, nullable=False, default=0),
    Column("step", Integer, nullable=False, default=0),
    Column("total_steps", Integer, nullable=False, default=0),
    Column("height", Integer, nullable=False, default=0),
    Column("clients", Integer, nullable=False, default=0),
    Column("tokens", BigInteger, nullable=False, default=0),
    Column("detail", Text, nullable=False, default="{}"),
)

states = Table(
    "states",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run", ForeignKey("runs.id"), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("observed_at", Float, nullable=False),
    Column("phase", String(32), nullable=False),
    Column("phase_since", BigInteger, nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("step", Integer, nullable=False),
    Column("height", Integer, nullable=False),
    Column("witnesses", Integer, nullable=False),
    Column("witness_target", Integer, nullable=False),
    Column("clients", Integer, nullable=False),
    UniqueConstraint("run", "seq"),
)

rounds = Table(
    "rounds",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run", ForeignKey("runs.id"), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("height", Integer, nullable=False),
    Column("step", Integer, nullable=False),
    Column("train_at", Float, nullable=False),
    Column("witness_at", Float),
    Column("end_at", Float),
    Column("witnesses", Integer, nullable=False, default=0),
    Column("witness_target", Integer, nullable=False, default=0),
    Column("opportunistic", Boolean, nullable=False, default=False),
    Column("trained", Boolean),
    UniqueConstraint("run", "epoch", "height"),
)

metrics = Table(
    "metrics",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run", ForeignKey("runs.id"), nullable=False),
    Column("ref", String(100), nullable=False),
    Column("at", Float, nullable=False),
    Column("client", String(200), nullable=False),
    Column("step", Integer, nullable=False),
    Column("loss", Float, nullable=False),
    Column("tokens_per_sec", Float, nullable=False),
    Column("bandwidth_per_sec", Float, nullable=False),
    Column("efficiency", Float, nullable=False),
    Column("evals", Text, nullable=False, default="[]"),
    UniqueConstraint("run", "ref"),
)

transactions = Table(
    "transactions",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run", ForeignKey("runs.id"), nullable=False),
    Column("signature", String(100), nullable=False),
    Column("slot", BigInteger, nullable=False),
    Column("block_time", BigInteger),
    Column("instruction", String(64), nullable=False),
    Column("signer", String(64), nullable=False),
    Column("ok", Boolean, nullable=False),
    Column("error", Text),
    UniqueConstraint("run", "signature"),
)

checkpoints = Table(
    "checkpoints",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run", ForeignKey("runs.id"), nullable=False),
    Column("label", String(300), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("step", Integer, nullable=False),
    Column("at", Float, nullable=False),
    UniqueConstraint("run", "label"),
)

accounts = Table(
    "accounts",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run", ForeignKey("runs.id"), nullable=False),
    Column("kind", String(20), nullable=False),
    Column("address", String(64), nullable=False),
    Column("observed_at", Float, nullable=False),
    Column("data", Text, nullable=False),
    UniqueConstraint("run", "kind", "address"),
)

cursors = Table(
    "cursors",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run", ForeignKey("runs.id"), nullable=False),
    Column("name", String(64), nullable=False),
    Column("value", Text, nullable=False),
    UniqueConstraint("run", "name"),
)

V1_TABLES = (version_table, runs, states, rounds, metrics, transactions, checkpoints, accounts)


def _v1(conn: Connection) -> None:
    metadata.create_all(conn, tables=list(V1_TABLES))


def _v2(conn: Connection) -> None:
    # The transaction cursor moved out of the runs row: one per followed address.
    metadata.create_all(conn, tables=[cursors])
    # Plain DDL: an Index object would attach itself to the tables, and v1 would then make it.
    conn.execute(text("CREATE INDEX ix_metrics_run_step ON metrics (run, step)"))
    conn.execute(text("CREATE INDEX ix_transactions_run_slot ON transactions (run, slot)"))


def _v3(conn: Connection) -> None:
    # Whether a round trained or only drained the epoch's pipeline (the coordinator's
    # round_trained rule): a witness of a drain round reports its last, stale loss.
    if "trained" not in {c["name"] for c in inspect(conn).get_columns("rounds")}:
        conn.execute(text("ALTER TABLE rounds ADD COLUMN trained BOOLEAN"))


MIGRATIONS: list[Callable[[Connection], None]] = [_v1, _v2, _v3]
SCHEMA_VERSION = len(MIGRATIONS)


def current_version(conn: Connection) -> int:
    if not conn.dialect.has_table(conn, "schema_version"):
        return 0
    return int(conn.execute(select(version_table.c.version)).scalar_one_or_none() or 0)


def migrate(engine: Engine, upto: int = SCHEMA_VERSION) -> int:
    """Bring the database to version ``upto``; returns the version found before."""
    with engine.begin() as conn:
        found = current_version(conn)
    if found > SCHEMA_VERSION:
        raise RuntimeError(
            f"the database is at schema version {found}; this explorer knows {SCHEMA_VERSION}"
        )
    for version in range(found + 1, upto + 1):
        with engine.begin() as conn:
            MIGRATIONS[version - 1](conn)
            conn.execute(version_table.delete())
            conn.execute(version_table.insert().values(version=version))
    return found


def open_engine(url: str) -> Engine:
    """An engine for ``url`` (a ``sqlite:///path`` or ``postgresql://…``; a bare path is a SQLite
    file), migrated to the current schema."""
    if "://" not in url:
        url = f"sqlite:///{url}"
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    engine = create_engine(parsed)
    if engine.dialect.name == "sqlite":

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=5000")
            cur.close()

    migrate(engine)
    return engine


def integrity_ok(engine: Engine) -> bool:
    """SQLite's own check of the file (True on other databases)."""
    if engine.dialect.name != "sqlite":
        return True
    with engine.connect() as conn:
        return conn.execute(text("PRAGMA integrity_check")).scalar_one() == "ok"
