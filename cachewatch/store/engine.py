"""Engines, sessions and the schema check for SQL stores.

One cached engine per URL; ``connection`` gives a transaction that commits, rolls back,
and turns driver errors into :class:`StoreError`. An empty database is migrated on first use; a
database at an older revision is refused with the command that upgrades it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from ..core import process


class StoreError(RuntimeError):
    """The store could not be reached or refused an operation."""

    retryable = True


class SchemaOutdated(StoreError):
    """The database schema is older (or newer) than this cachewatch."""

    retryable = False


class InvalidStoreURL(StoreError, ValueError):
    retryable = False


_engines: dict[str, Engine] = {}
_engine_lock = threading.Lock()
_verified: set[str] = set()


def normalize_url(url: str) -> str:
    """Accept the URLs people type and name the driver cachewatch ships with."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    if not (url.startswith("sqlite:") or url.startswith("postgresql+")):
        raise InvalidStoreURL(
            f"unsupported store URL {url!r}: use sqlite:///path/to/file.db or postgresql://user@host/db"
        )
    return url


def get_engine(url: str) -> Engine:
    url = normalize_url(url)
    with _engine_lock:
        engine = _engines.get(url)
        if engine is None or engine.pool is None:
            engine = _engines[url] = _create_engine(url)
        return engine


def ping(url: str) -> None:
    """Ask the store for nothing (``SELECT 1``); raises whatever keeps it from answering."""
    with get_engine(url).connect() as conn:
        conn.execute(sa.text("SELECT 1"))


def upsert_insert(dialect: str, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
    """The dialect's own INSERT for ``table``, the one that has ON CONFLICT clauses."""
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise InvalidStoreURL(f"unsupported dialect {dialect}")  # pragma: no cover - only these two


JSON_OPTIONS = orjson.OPT_NON_STR_KEYS


def json_dumps(value: Any) -> str:
    """JSON text for the store's JSON columns. orjson: the standard library's encoder
    was most of the Python time spent writing an event."""
    return orjson.dumps(value, option=JSON_OPTIONS).decode()


def json_loads(text: str | bytes) -> Any:
    """The store's JSON columns read back. orjson: the standard library's decoder (and
    its sniffing of the bytes' encoding) was a third of a storm listing's time over a
    fleet's store. Text orjson refuses (a NaN or an integer past 64 bits written by an
    older writer into SQLite's text) is read as the standard library reads it."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _create_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = sa.engine.make_url(url).database
        if path and path != ":memory:":
            Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(
            url,
            connect_args={"timeout": 30, "check_same_thread": False},
            json_serializer=json_dumps,
            json_deserializer=json_loads,
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record):
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA busy_timeout=30000")
            # WAL lets the server read while a training process writes; NORMAL sync is
            # durable across application crashes, which is what telemetry needs.
            _enable_wal(cursor)
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    return sa.create_engine(
        url,
        pool_pre_ping=True,
        pool_size=5,
        max_overflow=5,
        json_serializer=json_dumps,
        json_deserializer=json_loads,
    )


def _enable_wal(cursor: Any, deadline_seconds: float = 30.0) -> None:
    """Switch a SQLite database to WAL. The switch takes an exclusive lock and SQLite may
    refuse it at once while another process creates the same new file (its busy handler
    is not consulted), so a refusal is retried until the deadline."""
    deadline = time.monotonic() + deadline_seconds
    delay = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() + delay > deadline:
                raise
            time.sleep(delay + random.uniform(0, delay))
            delay = min(delay * 2, 0.25)


def dispose_engines() -> None:
    with _engine_lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()
        _verified.clear()


def _forget_connections() -> None:
    _engines.clear()
    _verified.clear()


# A forked child must not share its parent's connections.
process.on_fork_in_child(process.Concern.CONNECTIONS, _forget_connections)


@contextlib.contextmanager
def connection(url: str, *, ensure: bool = True) -> Iterator[sa.Connection]:
    """A transaction on the store (migrated if it is empty and ``ensure`` is set)."""
    if ensure:
        ensure_schema(url)
    try:
        with get_engine(url).begin() as conn:
            yield conn
    except SQLAlchemyError as exc:
        raise StoreError(f"{type(exc).__name__}: {getattr(exc, 'orig', None) or exc}") from exc


@contextlib.contextmanager
def snapshot(url: str) -> Iterator[sa.Connection]:
    """A read transaction that sees one consistent state of the store from its first read on.

    PostgreSQL: REPEATABLE READ. SQLite: an explicit BEGIN (the driver starts none for
    reads, so each SELECT would otherwise see the store as of its own moment).
    """
    try:
        with get_engine(url).connect() as raw:
            conn = raw.execution_options(isolation_level="REPEATABLE READ") if raw.dialect.name == "postgresql" else raw
            with conn.begin():
                if conn.dialect.name == "sqlite":
                    conn.exec_driver_sql("BEGIN")
                yield conn
    except SQLAlchemyError as exc:
        raise StoreError(f"{type(exc).__name__}: {getattr(exc, 'orig', None) or exc}") from exc


# Advisory lock keys (PostgreSQL): one bigint each, apart from the two-int keys of the
# ``hashtext`` locks of ``lock_run``.
LABELS_LOCK = 0x6361636865_01  # "cache", 1: held while /metrics decides functions' labels
SCHEMA_LOCK = 0x6361636865_02  # held while an empty store's schema is created


def lock_run(conn: sa.Connection, run_id: str) -> None:
    """Hold the run's write lock until the transaction ends: every write of a batch
    (store/writes.py) and a prune of the run take it. An advisory lock on PostgreSQL;
    SQLite has one writer at a time already."""
    if conn.dialect.name == "postgresql":
        # The key the service's ingest has always taken: older services and newer libraries agree.
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": "cachewatch-ingest:" + run_id})


@contextlib.contextmanager
def exclusive(url: str, lock: int) -> Iterator[sa.Connection]:
    """A write transaction that no other holder of ``lock`` runs beside (on SQLite, no
    other writer at all: BEGIN IMMEDIATE)."""
    try:
        with _locked_transaction(url, lock, "IMMEDIATE") as conn:
            yield conn
    except SQLAlchemyError as exc:
        raise StoreError(f"{type(exc).__name__}: {getattr(exc, 'orig', None) or exc}") from exc


# ------------------------------------------------------------------ migrations


def migrations_dir() -> str:
    return str(resources.files("cachewatch.migrations"))


@contextlib.contextmanager
def quiet_alembic():
    """Alembic reports its plugins and each migration step at INFO; in a training program whose
    root logger is at INFO (absl sets that up) those lines would land in the user's stderr."""
    alembic_logger = logging.getLogger("alembic")
    level = alembic_logger.level
    alembic_logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        alembic_logger.setLevel(level)


def alembic_config(url: str):
    with quiet_alembic():
        from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", migrations_dir())
    cfg.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return cfg


def head_revision() -> str:
    with quiet_alembic():
        from alembic.script import ScriptDirectory

    with quiet_alembic():
        heads = ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads()
    if len(heads) != 1:
        raise StoreError(f"cachewatch migrations must have one head, found {heads}")
    return heads[0]


def current_revision(url: str) -> str | None:
    with quiet_alembic():
        from alembic.runtime.migration import MigrationContext

    with quiet_alembic(), get_engine(url).connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(url: str, revision: str = "head") -> str:
    """Bring the store to ``revision`` (the latest by default); returns the new revision."""
    with _schema_transaction(url) as conn:
        _run_upgrade(url, conn, revision)
    _verified.discard(normalize_url(url))
    return current_revision(url) or ""


def _run_upgrade(url: str, conn: sa.Connection, revision: str) -> None:
    with quiet_alembic():
        from alembic import command

        cfg = alembic_config(url)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


@contextlib.contextmanager
def _schema_transaction(url: str) -> Iterator[sa.Connection]:
    """One transaction that no other process changing or creating the schema runs beside:
    an advisory lock on PostgreSQL, an exclusive transaction on SQLite. Processes that
    open one empty store at once so create its schema once, and the others then find it."""
    with _locked_transaction(url, SCHEMA_LOCK, "EXCLUSIVE") as conn:
        yield conn


@contextlib.contextmanager
def _locked_transaction(url: str, lock: int, sqlite_begin: str) -> Iterator[sa.Connection]:
    """A transaction holding PostgreSQL's advisory lock ``lock``, or SQLite's write lock
    (``BEGIN IMMEDIATE``: no other writer; ``BEGIN EXCLUSIVE``: no reader either)."""
    with get_engine(url).connect() as conn:
        with conn.begin():
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql(f"BEGIN {sqlite_begin}")
            else:
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({int(lock)})")
            yield conn


def upgrade_command(url: str) -> str:
    return f"cachewatch db upgrade --store '{redact_url(url)}'"


def redact_url(url: str) -> str:
    """The URL with its password hidden, fit to print or show."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):  # ValueError: a port that is no number
        # Not a URL SQLAlchemy reads: drop any user:password@ part by hand.
        return re.sub(r"//[^/@]*@", "//***@", url)


def ensure_schema(url: str, *, migrate_empty: bool = True) -> None:
    """Migrate an empty store; refuse one at another revision with the fixing command.

    The empty case is decided again under the schema lock: of several processes that
    find the store empty at once, one creates the schema and the others find it done.
    """
    key = normalize_url(url)
    if key in _verified:
        return
    try:
        head = head_revision()
        current = current_revision(url)
        if current is None:
            if not migrate_empty and not sa.inspect(get_engine(url)).get_table_names():
                raise SchemaOutdated(f"the store at {redact_url(url)} is empty; run: {upgrade_command(url)}")
            with _schema_transaction(url) as conn, quiet_alembic():
                from alembic.runtime.migration import MigrationContext

                current = MigrationContext.configure(conn).get_current_revision()
                if current is None:
                    if sa.inspect(conn).get_table_names():
                        raise SchemaOutdated(
                            f"the store at {redact_url(url)} has tables but no cachewatch schema "
                            f"revision; point cachewatch at an empty database, or run: "
                            f"{upgrade_command(url)}"
                        )
                    if not migrate_empty:
                        raise SchemaOutdated(f"the store at {redact_url(url)} is empty; run: {upgrade_command(url)}")
                    _run_upgrade(url, conn, "head")
                    current = head
        if current != head:
            raise SchemaOutdated(
                f"the store at {redact_url(url)} is at schema revision {current}, this "
                f"cachewatch needs {head}; run: {upgrade_command(url)}"
            )
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot open store {redact_url(url)}: {getattr(exc, 'orig', None) or exc}") from exc
    _verified.add(key)


# PostgreSQL's work memory for a grouping by computed time buckets: the planner cannot tell
# how few groups such a bucket makes (it guesses about one per row), so past its default
# of 4 MB it sorts a busy function's events on disk instead of hashing their few hundred
# groups. A hash of that size is what the guess asks for, never what the groups use.
GROUPING_WORK_MEM = "16MB"


def room_to_group(conn: sa.Connection) -> None:
    """Let this transaction's groupings by time bucket hash in memory (PostgreSQL; the
    setting ends with the transaction, and SQLite has none)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SET LOCAL work_mem = '{GROUPING_WORK_MEM}'")


@contextlib.contextmanager
def driver_cursor(conn: sa.Connection) -> Iterator[Any]:
    """A cursor of the driver itself, inside ``conn``'s transaction.

    For the few statements where building SQLAlchemy's rows or parameters costs more
    than the database's work. Driver errors come out as SQLAlchemy's own, as they would
    from ``conn.execute``.
    """
    driver_connection = conn.connection.dbapi_connection
    assert driver_connection is not None  # conn is open
    cursor = driver_connection.cursor()
    try:
        yield cursor
    except conn.dialect.loaded_dbapi.Error as exc:
        raise sa.exc.DBAPIError.instance(None, None, exc, conn.dialect.loaded_dbapi.Error) from exc
    finally:
        cursor.close()


def fetch_tuples(conn: sa.Connection, statement: sa.Select) -> list[tuple]:
    """Rows of a parameterless SELECT as plain tuples from the driver.

    For the few reads that return thousands of small rows (totals per function and
    cause), building SQLAlchemy Row objects costs more than the query itself.
    """
    sql = str(statement.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    with driver_cursor(conn) as cursor:
        cursor.execute(sql)
        return cursor.fetchall()
