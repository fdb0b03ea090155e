"""Where the writer sends batches, chosen by the store URL.

``sqlite:///...`` and ``postgresql://...`` write straight into the SQL store (one
transaction per batch, many rows per statement, idempotent on event ids);
``http(s)://...`` posts to a cachewatch server.
"""

from __future__ import annotations

import dataclasses
import operator
import types
from typing import Any, Mapping, Protocol

import sqlalchemy as sa

from ..config import Config
from ..events import MAX_MEASURE, SECONDS_FIELDS, Batch, seconds_ok, timestamp_ok
from . import engine as enginemod
from . import models, rollup


class Sink(Protocol):
    """Where the recorder's writer hands each batch: stored whole, or an exception."""

    def write(self, batch: Batch) -> None: ...


def open_sink(cfg: Config) -> Sink:
    url = cfg.store
    if url.startswith(("http://", "https://")):
        from .http import HttpSink

        return HttpSink(url, token=cfg.write_token)
    return SqlSink(url)


def _insert_ignoring_duplicates(conn: sa.Connection, table: sa.Table, rows: list[dict[str, Any]], key: str) -> None:
    if rows:
        conn.execute(
            enginemod.upsert_insert(conn.dialect.name, table).on_conflict_do_nothing(index_elements=[key]), rows
        )


# Event tuples (models.EVENT_COLUMNS) read off a CompileEvent, or off the service's
# validated EventIn: both carry these attributes.
event_values = operator.attrgetter(
    *("function.function_hash" if name == "function_hash" else name for name in models.EVENT_COLUMNS)
)
_EVENT_ID = models.EVENT_COLUMNS.index("event_id")
_JSON_AT = tuple(
    i for i, name in enumerate(models.EVENT_COLUMNS) if isinstance(models.compile_events.c[name].type, sa.JSON)
)


def event_row(values: Mapping[str, Any]) -> tuple:
    """An event tuple from a mapping of column names (missing columns are None)."""
    return tuple(values.get(name) for name in models.EVENT_COLUMNS)


def _insert_events(conn: sa.Connection, events: list[tuple]) -> set[str]:
    """Insert the events whose id is new; returns those ids."""
    if not events:
        return set()
    e = models.compile_events
    wanted = [row[_EVENT_ID] for row in events]
    if conn.dialect.name == "sqlite":
        # SQLite has one writer at a time, and this transaction holds the write lock
        # from its first insert on; a new rowid is the largest one plus one. So the rows
        # this insert added are the newest ``rowcount`` rows, and when that is every row
        # (a batch seen for the first time, the usual case) there is nothing to ask.
        added = _sqlite_insert_or_ignore(conn, events)
        if added == len(set(wanted)):
            return set(wanted)
        newest = sa.select(e.c.event_id).order_by(e.c.id.desc()).limit(added)
        return set(conn.execute(newest).scalars()) if added else set()
    # Which ids are new, asked before inserting: RETURNING over a many-row insert is
    # slow to prepare (psycopg parses the statement in Python). Two writers never share
    # event ids (the recording process makes them), so only this writer's own retry
    # repeats one, never concurrently.
    existing: set[Any] = set()
    for start in range(0, len(wanted), 900):
        existing.update(
            conn.execute(sa.select(e.c.event_id).where(e.c.event_id.in_(wanted[start : start + 900]))).scalars()
        )
    stmt = enginemod.upsert_insert(conn.dialect.name, e).on_conflict_do_nothing(index_elements=["event_id"])
    conn.execute(stmt, [dict(zip(models.EVENT_COLUMNS, row)) for row in events])
    return set(wanted) - existing


_SQLITE_INSERT_EVENTS = (
    f"INSERT OR IGNORE INTO {models.compile_events.name} ({', '.join(models.EVENT_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in models.EVENT_COLUMNS)})"
)


def _sqlite_insert_or_ignore(conn: sa.Connection, events: list[tuple]) -> int:
    """The driver's own executemany: the row-by-row parameter processing of the ORM layer
    costs more than SQLite's insert. JSON columns are serialized here (booleans bind as
    0/1 by themselves). Returns how many rows were inserted."""
    dumps = enginemod.json_dumps
    params = []
    for row in events:
        values = list(row)
        for i in _JSON_AT:
            if values[i] is not None:
                values[i] = dumps(values[i])
        params.append(values)
    with enginemod.driver_cursor(conn) as cursor:
        cursor.executemany(_SQLITE_INSERT_EVENTS, params)
        return cursor.rowcount


def write_rows(
    conn: sa.Connection,
    runs: list[dict],
    functions: list[dict],
    events: list[tuple],
    stats: list[dict],
    dropped: int = 0,
) -> set[str]:
    """Insert one batch in one transaction; repeats of the same ids are ignored.

    ``events`` are tuples of ``models.EVENT_COLUMNS``. ``dropped`` is what the run's
    recorder lost since its previous batch. Returns the ids of the events that were new
    (the rest were already stored).
    """
    _insert_ignoring_duplicates(conn, models.runs, _unique(runs, "run_id"), "run_id")
    _insert_ignoring_duplicates(conn, models.functions, _unique(functions, "function_hash"), "function_hash")
    inserted = _insert_events(conn, events)
    if inserted:
        rollup.add(conn, rollup.deltas(row for row in events if row[_EVENT_ID] in inserted))
        rollup.add(conn, rollup.cache_deltas(row for row in events if row[_EVENT_ID] in inserted))
    if stats:
        conn.execute(sa.insert(models.call_stats), stats)
        rollup.add_call_stats(conn, stats)
    if dropped and runs and (inserted or stats or not events):  # a repeated batch reports nothing new
        rollup.add(conn, {models.run_drops: [{"run_id": runs[0]["run_id"], "dropped": int(dropped)}]})
    return inserted


def _unique(rows: list[dict], key: str) -> list[dict]:
    seen: dict[Any, dict] = {}
    for row in rows:
        seen.setdefault(row[key], row)
    return list(seen.values())


def in_bounds(event: Any) -> Any:
    """The event as the store may take it: None when its time is outside the store's
    bounds; a duration or measure outside them (negative, infinite, absurd) becomes
    unknown (None). The service refuses such a batch; the library's own writer keeps
    the rest of what it recorded."""
    if not timestamp_ok(event.timestamp):
        return None
    bad = {name: None for name in SECONDS_FIELDS if not seconds_ok(getattr(event, name))}
    for name in ("flops", "bytes_accessed"):
        value = getattr(event, name)
        if value is not None and not (isinstance(value, (int, float)) and 0.0 <= value <= MAX_MEASURE):
            bad[name] = None
    if getattr(event, "eager_run_seconds") is not None and (
        event.compiled_run_seconds is None or "compiled_run_seconds" in bad
    ):
        bad["eager_run_seconds"] = None  # measured as a pair, or not at all
    for name in ("jaxpr_eqns", "hlo_ops"):
        value = getattr(event, name)
        if value is not None and not (0 <= value < 2**31):
            bad[name] = None
    return dataclasses.replace(event, **bad) if bad else event


def batch_rows(batch: Batch) -> tuple[list[dict], list[dict], list[tuple], list[dict]]:
    """Rows for one recorder batch: the run, the functions it mentions, event tuples, stats."""
    first_seen: dict[str, float] = {}
    functions: dict[str, dict] = {}
    for event in batch.events:
        info = event.function
        seen = first_seen.get(info.function_hash)
        if seen is None:
            first_seen[info.function_hash] = event.timestamp
            functions[info.function_hash] = info.as_dict()  # once per function, not per event
        elif event.timestamp < seen:
            first_seen[info.function_hash] = event.timestamp
    for stat in batch.stats:
        info = stat.function
        first_seen.setdefault(info.function_hash, stat.timestamp)
        functions.setdefault(info.function_hash, info.as_dict())
    function_rows = [{**row, "first_seen": first_seen[h]} for h, row in functions.items()]
    return (
        [batch.run.as_dict()],
        function_rows,
        [event_values(e) for e in batch.events],
        [s.as_dict() for s in batch.stats],
    )


class SqlSink:
    def __init__(self, url: str):
        self.url = url

    def write(self, batch: Batch) -> None:
        events = [in_bounds(e) for e in batch.events]
        kept = [e for e in events if e is not None]
        stats = [s for s in batch.stats if timestamp_ok(s.timestamp)]
        refused = len(events) - len(kept)
        if refused or len(stats) != len(batch.stats) or any(a is not b for a, b in zip(kept, batch.events)):
            batch = types.SimpleNamespace(
                run=batch.run, events=kept, stats=stats, dropped=getattr(batch, "dropped", 0) + refused
            )
        runs, functions, rows, stats_rows = batch_rows(batch)
        with enginemod.connection(self.url) as conn:
            write_rows(conn, runs, functions, rows, stats_rows, dropped=getattr(batch, "dropped", 0))
