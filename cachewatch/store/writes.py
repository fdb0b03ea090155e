"""The store's one write path: a batch turned into table rows and stored in one transaction.

Both writers call ``write_batch``: the library's SQL sink (``sinks.SqlSink``) with a
recorder's ``Batch``, and the service's ingest with the batch it validated. Rows are
read off either by attribute, so neither is converted into the other first.

A batch sent again (a retry, a spool replay) adds nothing. Events are recognised by
their client-made ``event_id``. Call-statistics rows have no id in the schema, so a
repeat is recognised by run, function, flush time and signature, inside the same
transaction; two writers of one run must not both pass that check, so the write holds
the run's lock first (PostgreSQL: an advisory lock; SQLite: its one writer at a time).
"""

from __future__ import annotations

import dataclasses
import json
import operator
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar

import orjson
import sqlalchemy as sa

from ..core.events import (
    MAX_MEASURE,
    MAX_SECONDS,
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    PROGRAM_TEXT_FORMATS,
    SECONDS_FIELDS,
    seconds_ok,
    timestamp_ok,
)
from . import engine as enginemod
from . import models, rollup
from .columns import in_chunks

Row = dict[str, object]
# A compile event as stored: the values of models.EVENT_COLUMNS, in that order.
EventValues = tuple[Any, ...]


class FunctionLike(Protocol):
    @property
    def function_hash(self) -> str: ...


class Recorded(Protocol):
    """An event or a statistics row of a batch: it names its function and its time."""

    @property
    def function(self) -> FunctionLike: ...
    @property
    def timestamp(self) -> float: ...


class BatchLike(Protocol):
    """A recorder's ``events.Batch`` or the service's validated ``BatchIn``."""

    @property
    def run(self) -> object: ...
    @property
    def events(self) -> Sequence[Recorded]: ...
    @property
    def stats(self) -> Sequence[Recorded]: ...
    @property
    def dropped(self) -> int: ...


class TableRows(NamedTuple):
    runs: list[Row]
    functions: list[Row]
    events: list[EventValues]
    stats: list[Row]
    programs: list[Row] = []


class Written(NamedTuple):
    """What a write added: the ids of the events new to the store (the rest were
    repeats) and how many call-statistics rows were new."""

    events: set[str]
    stats: int


# A store keeps at most this many bytes of compressed program texts unless told otherwise.
DEFAULT_PROGRAM_STORE_MAX_BYTES = 512 * 1024 * 1024
_CHUNK = 900  # ids per IN (...): below SQLite's smallest bound-parameter limit


def _columns(table: sa.Table, *, leave_out: tuple[str, ...] = ()) -> tuple[str, ...]:
    return tuple(c.name for c in table.c if c.name not in leave_out)


_RUN_COLUMNS = _columns(models.runs)
_FUNCTION_COLUMNS = _columns(models.functions, leave_out=("first_seen",))
_STATS_COLUMNS = _columns(models.call_stats, leave_out=("id", "function_hash"))

# Event tuples read off a CompileEvent or the service's EventIn: both carry these attributes.
event_values = operator.attrgetter(
    *("function.function_hash" if name == "function_hash" else name for name in models.EVENT_COLUMNS)
)
_EVENT_ID = models.EVENT_COLUMNS.index("event_id")
_EVENT_RUN = models.EVENT_COLUMNS.index("run_id")
_JSON_AT = tuple(
    i for i, name in enumerate(models.EVENT_COLUMNS) if isinstance(models.compile_events.c[name].type, sa.JSON)
)


def event_row(values: dict[str, object]) -> EventValues:
    """An event tuple from a mapping of column names (missing columns are None)."""
    return tuple(values.get(name) for name in models.EVENT_COLUMNS)


def table_rows(batch: BatchLike) -> TableRows:
    """The batch's rows: its run, the functions it mentions (first seen at their earliest
    event), event tuples, and statistics rows."""
    run: Row = {name: getattr(batch.run, name) for name in _RUN_COLUMNS}
    run["devices"] = list(run["devices"] or ())  # type: ignore[call-overload]  # a tuple or a list of names
    run["capabilities_off"] = list(run["capabilities_off"] or ())  # type: ignore[call-overload]
    functions: dict[str, Row] = {}
    first_seen: dict[str, float] = {}
    for event in batch.events:
        info = event.function
        key = info.function_hash
        seen = first_seen.get(key)
        if seen is None:
            functions[key] = {name: getattr(info, name) for name in _FUNCTION_COLUMNS}  # once per function
            first_seen[key] = event.timestamp
        elif event.timestamp < seen:
            first_seen[key] = event.timestamp
    stats = []
    for stat in batch.stats:
        info = stat.function
        key = info.function_hash
        if key not in functions:
            functions[key] = {name: getattr(info, name) for name in _FUNCTION_COLUMNS}
            first_seen[key] = stat.timestamp
        row: Row = {name: getattr(stat, name) for name in _STATS_COLUMNS}
        row["function_hash"] = key
        stats.append(row)
    function_rows: list[Row] = [{**info_row, "first_seen": first_seen[key]} for key, info_row in functions.items()]
    # One row per fingerprint, the first event's (the one the store keeps): compressing
    # the texts is the costliest step of a write, so a repeat is dropped before it.
    # The StableHLO text is the lowered module's, so it is kept under the module's
    # fingerprint (``module_row``) rather than the optimised program's.
    texts: dict[object, tuple[Any, bool]] = {}
    modules: dict[str, str] = {}
    for e in batch.events:
        payload = getattr(e, "program_texts", None)
        if payload:
            lowered = getattr(e, "lowered_fingerprint", None)
            stablehlo = (_payload_get(payload)("texts") or {}).get("stablehlo")
            apart = False
            if isinstance(lowered, str) and lowered and isinstance(stablehlo, str):
                modules.setdefault(lowered, stablehlo)
                apart = True
            texts.setdefault(_payload_get(payload)("fingerprint"), (payload, apart))
    programs = [program_row(payload, modules_apart=apart) for payload, apart in texts.values()]
    programs += [module_row(fingerprint, text) for fingerprint, text in modules.items()]
    return TableRows([run], function_rows, [event_values(e) for e in batch.events], stats, programs)


def _payload_get(payload: Any) -> Any:
    return payload.get if isinstance(payload, dict) else lambda name, default=None: getattr(payload, name, default)


def program_row(payload: Any, *, modules_apart: bool = False) -> Row:
    """A ``programs`` row from an event's ``program_texts``: each text and the equation
    profile zlib-compressed (here, on the writer's side, not on the compiling thread).
    ``modules_apart``: the StableHLO texts have rows of their own (``module_row``)."""
    get = _payload_get(payload)
    texts = get("texts") or {}
    if modules_apart and "stablehlo" in texts:
        texts = {fmt: text for fmt, text in texts.items() if fmt != "stablehlo"}
    row: Row = {"fingerprint": get("fingerprint"), "stored_at": time.time(), "left_out": list(get("left_out") or [])}
    size = 0
    for fmt in PROGRAM_TEXT_FORMATS:
        text = texts.get(fmt)
        packed = zlib.compress(text.encode(), 6) if isinstance(text, str) else None
        row[fmt] = packed
        size += len(packed or b"")
    profile = get("profile")
    row["profile"] = zlib.compress(json.dumps(profile).encode(), 6) if profile is not None else None
    row["size_bytes"] = size + len(row["profile"] or b"")  # type: ignore[arg-type]
    return row


def module_row(lowered_fingerprint: str, stablehlo: str) -> Row:
    """A ``programs`` row holding one lowered module's StableHLO text under the module's
    own fingerprint: modules that XLA optimises to one program (one row) may differ in
    their names, which is what JAX's persistent cache keys on."""
    packed = zlib.compress(stablehlo.encode(), 6)
    return {
        "fingerprint": lowered_fingerprint,
        "stored_at": time.time(),
        "left_out": [],
        **{fmt: packed if fmt == "stablehlo" else None for fmt in PROGRAM_TEXT_FORMATS},
        "profile": None,
        "size_bytes": len(packed),
    }


E = TypeVar("E")


_BOUNDED = operator.attrgetter(
    "timestamp", *SECONDS_FIELDS, "flops", "bytes_accessed", "jaxpr_eqns", "hlo_ops", "fusions"
)
_N_SECONDS = len(SECONDS_FIELDS)
_COMPILED_RUN_AT = 1 + SECONDS_FIELDS.index("compiled_run_seconds")
_EAGER_RUN_AT = 1 + SECONDS_FIELDS.index("eager_run_seconds")


def in_bounds(event: E) -> E | None:
    """The event as the store may take it: None when its time is outside the store's
    bounds; a duration or measure outside them (negative, infinite, absurd) becomes
    unknown (None). The service refuses such a batch; the library's own writer keeps
    the rest of what it recorded."""
    return event if _plainly_in_bounds(_BOUNDED(event)) else _checked(event)


def _plainly_in_bounds(values: tuple[Any, ...]) -> bool:
    """The usual case, decided in one read of the bounded fields and plain comparisons
    (it runs for every event the library writes): floats and ints within bounds, and
    the run-time pair whole. False sends the event through the full check."""
    ts = values[0]
    if not (ts.__class__ is float and MIN_TIMESTAMP <= ts < MAX_TIMESTAMP):
        return False
    for v in values[1 : 1 + _N_SECONDS]:
        if v is not None and not (v.__class__ is float and 0.0 <= v <= MAX_SECONDS):
            return False
    for v in values[1 + _N_SECONDS : 3 + _N_SECONDS]:
        if v is not None and not (v.__class__ is float and 0.0 <= v <= MAX_MEASURE):
            return False
    for v in values[3 + _N_SECONDS :]:
        if v is not None and not (v.__class__ is int and 0 <= v < 2**31):
            return False
    return values[_EAGER_RUN_AT] is None or values[_COMPILED_RUN_AT] is not None


def _checked(event: E) -> E | None:
    if not timestamp_ok(getattr(event, "timestamp")):
        return None
    bad: dict[str, None] = {name: None for name in SECONDS_FIELDS if not seconds_ok(getattr(event, name))}
    for name in ("flops", "bytes_accessed"):
        value = getattr(event, name)
        if value is not None and not (isinstance(value, (int, float)) and 0.0 <= value <= MAX_MEASURE):
            bad[name] = None
    if getattr(event, "eager_run_seconds") is not None and (
        getattr(event, "compiled_run_seconds") is None or "compiled_run_seconds" in bad
    ):
        bad["eager_run_seconds"] = None  # measured as a pair, or not at all
    for name in ("jaxpr_eqns", "hlo_ops", "fusions"):
        value = getattr(event, name)
        if value is not None and not (0 <= value < 2**31):
            bad[name] = None
    return dataclasses.replace(event, **bad) if bad else event  # type: ignore[type-var]  # a CompileEvent


def write_batch(
    url: str,
    batch: BatchLike,
    dropped_by: Mapping[str, int] | None = None,
    program_store_max_bytes: int = DEFAULT_PROGRAM_STORE_MAX_BYTES,
    *,
    ensure_schema: bool = True,
) -> Written:
    """Store one batch in one transaction, each event and statistics row once.

    ``dropped_by`` is what the run's recorder lost since its previous batch, by reason.
    ``ensure_schema`` migrates an empty store first (the library's writer); the service
    checked its store at start and passes False.

        written = write_batch("sqlite:///cachewatch.db", batch)
        len(written.events), written.stats   # what was new
    """
    rows = table_rows(batch)  # before the transaction: compressing program texts is the costly step
    with enginemod.connection(url, ensure=ensure_schema) as conn:
        return _store_rows(conn, rows, dropped_by, program_store_max_bytes)


def write_rows(
    conn: sa.Connection,
    rows: TableRows,
    dropped_by: Mapping[str, int] | None = None,
    program_store_max_bytes: int = DEFAULT_PROGRAM_STORE_MAX_BYTES,
) -> set[str]:
    """``write_batch``'s rows in a transaction the caller holds; returns the ids of the new events."""
    return _store_rows(conn, rows, dropped_by, program_store_max_bytes).events


def _store_rows(
    conn: sa.Connection,
    rows: TableRows,
    dropped_by: Mapping[str, int] | None = None,
    program_store_max_bytes: int = DEFAULT_PROGRAM_STORE_MAX_BYTES,
) -> Written:
    """Insert one batch's rows in ``conn``'s transaction; repeats are ignored.

    Repeated events are known by id, repeated statistics rows by ``_stats_key``. Program
    texts are stored once per fingerprint, while the store's texts stay under
    ``program_store_max_bytes``.
    """
    # PostgreSQL text cannot hold NUL; an exception message that carries one must not make
    # the whole batch unstorable. Replaced on every backend, so a store reads the same.
    runs, functions, stats = (_strip_nul(part) for part in (rows.runs, rows.functions, rows.stats))
    events = _unique_events([_strip_nul_values(row) for row in rows.events])
    for run in sorted({str(row["run_id"]) for row in (*runs, *stats)}):
        enginemod.lock_run(conn, run)
    _insert_ignoring_duplicates(conn, models.runs, _unique(runs, "run_id"), "run_id")
    _insert_ignoring_duplicates(conn, models.functions, _unique(functions, "function_hash"), "function_hash")
    # Checked after the first inserts: from there on SQLite's write lock is held, so no
    # other writer checks beside this one (on PostgreSQL the run's lock sees to that).
    stats = _new_stats(conn, stats)
    inserted = _insert_events(conn, events)
    if rows.programs:
        _insert_programs(conn, rows.programs, program_store_max_bytes)
    if inserted:
        rollup.add(conn, rollup.deltas(row for row in events if row[_EVENT_ID] in inserted))
        rollup.add(conn, rollup.cache_deltas(row for row in events if row[_EVENT_ID] in inserted))
    # A job's ranks compare anew when one of its runs arrives or compiles.
    changed_runs = {str(row["run_id"]) for row in runs} | {
        row[_EVENT_RUN] for row in events if row[_EVENT_ID] in inserted
    }
    if changed_runs:
        rollup.mark_jobs_stale(conn, changed_runs)
    if stats:
        conn.execute(sa.insert(models.call_stats), stats)
        rollup.add_call_stats(conn, stats)
    lost = [(reason, int(n)) for reason, n in (dropped_by or {}).items() if int(n) > 0]
    if lost and runs and (inserted or stats or not events):  # a repeated batch reports nothing new
        run_id = runs[0]["run_id"]
        drops = [{"run_id": run_id, "reason": str(reason)[:32], "dropped": n} for reason, n in lost]
        rollup.add(conn, {models.run_drops: drops})
    return Written(inserted, len(stats))


_StatsKey = tuple[str, str, float, str]


def _stats_key(row: Mapping[str, Any] | sa.RowMapping) -> _StatsKey:
    """What tells a statistics row from a repeat: its run, function, flush time and
    signature (a flush writes one row per signature sampled)."""
    return str(row["run_id"]), str(row["function_hash"]), float(row["timestamp"]), str(row.get("signature_hash") or "")


def _new_stats(conn: sa.Connection, rows: list[Row]) -> list[Row]:
    """The statistics rows neither stored already nor repeated earlier in ``rows``."""
    if not rows:
        return rows
    existing = _stored_stats_keys(conn, [_stats_key(row) for row in rows])
    fresh = []
    for row in rows:
        key = _stats_key(row)
        if key not in existing:
            existing.add(key)
            fresh.append(row)
    return fresh


def _stored_stats_keys(conn: sa.Connection, keys: list[_StatsKey]) -> set[_StatsKey]:
    """Which of ``keys`` the store holds (and maybe more of the same runs)."""
    s = models.call_stats
    columns = (s.c.run_id, s.c.function_hash, s.c.timestamp, s.c.signature_hash)
    run_ids = sorted({k[0] for k in keys})
    # A batch's stats share one or two flush times; (function_hash, timestamp) is indexed.
    hashes = sorted({k[1] for k in keys})
    stamps = sorted({k[2] for k in keys})
    half = _CHUNK // 2
    existing: set[_StatsKey] = set()
    for chunk in in_chunks(hashes, half):
        existing.update(
            _stats_key(r._mapping)
            for r in conn.execute(
                sa.select(*columns).where(
                    s.c.function_hash.in_(chunk),
                    s.c.timestamp.in_(stamps[:half]),
                    s.c.run_id.in_(run_ids),
                )
            )
        )
    if len(stamps) > half:  # not what a recorder sends: fall back to the runs' rows
        existing.update(
            _stats_key(r._mapping) for r in conn.execute(sa.select(*columns).where(s.c.run_id.in_(run_ids)))
        )
    return existing


def _insert_programs(conn: sa.Connection, programs: list[Row], cap: int) -> None:
    p = models.programs
    programs = _unique(programs, "fingerprint")
    known = set(
        conn.execute(
            sa.select(p.c.fingerprint).where(p.c.fingerprint.in_([r["fingerprint"] for r in programs]))
        ).scalars()
    )
    programs = [row for row in programs if row["fingerprint"] not in known]
    if not programs:
        return  # every text already stored: no need to total the store's texts
    stored = conn.execute(sa.select(sa.func.coalesce(sa.func.sum(p.c.size_bytes), 0))).scalar_one()
    kept = []
    for row in programs:
        if stored + int(row["size_bytes"]) > cap:  # type: ignore[call-overload]
            continue  # the store is full: the event keeps its figures, the texts are not kept
        stored += int(row["size_bytes"])  # type: ignore[call-overload]
        kept.append(row)
    _insert_ignoring_duplicates(conn, p, kept, "fingerprint")


def _insert_ignoring_duplicates(conn: sa.Connection, table: sa.Table, rows: list[Row], key: str) -> None:
    if rows:
        conn.execute(
            enginemod.upsert_insert(conn.dialect.name, table).on_conflict_do_nothing(index_elements=[key]), rows
        )


def _insert_events(conn: sa.Connection, events: list[EventValues]) -> set[str]:
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
    # event ids (the recording process makes them) but for two writes of one run's batch
    # (a retry beside its first post), which the run's lock keeps apart (_store_rows).
    existing: set[str] = set()
    for chunk in in_chunks(wanted, _CHUNK):
        existing.update(conn.execute(sa.select(e.c.event_id).where(e.c.event_id.in_(chunk))).scalars())
    stmt = enginemod.upsert_insert(conn.dialect.name, e).on_conflict_do_nothing(index_elements=["event_id"])
    conn.execute(stmt, [dict(zip(models.EVENT_COLUMNS, row, strict=False)) for row in events])
    return set(wanted) - existing


_SQLITE_INSERT_EVENTS = (
    f"INSERT OR IGNORE INTO {models.compile_events.name} ({', '.join(models.EVENT_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in models.EVENT_COLUMNS)})"
)


def _sqlite_insert_or_ignore(conn: sa.Connection, events: list[EventValues]) -> int:
    """The driver's own executemany: the row-by-row parameter processing of the ORM layer
    costs more than SQLite's insert. JSON columns are serialized here (booleans bind as
    0/1 by themselves). Returns how many rows were inserted."""
    # engine.json_dumps inlined: it runs for every JSON value of every event.
    dumps, option = orjson.dumps, enginemod.JSON_OPTIONS
    params = []
    for row in events:
        values = list(row)
        for i in _JSON_AT:
            value = values[i]
            if value is not None:
                values[i] = dumps(value, option=option).decode()
        params.append(values)
    with enginemod.driver_cursor(conn) as cursor:
        cursor.executemany(_SQLITE_INSERT_EVENTS, params)
        return int(cursor.rowcount)


def _unique(rows: list[Row], key: str) -> list[Row]:
    seen: dict[object, Row] = {}
    for row in rows:
        seen.setdefault(row[key], row)
    return list(seen.values())


def _unique_events(events: list[EventValues]) -> list[EventValues]:
    """Each event once (the first of an id), so the kept totals count a repeat within
    one batch once too. A set of the ids is the cheap test for the usual case: none."""
    if len({row[_EVENT_ID] for row in events}) == len(events):
        return events
    first: dict[object, EventValues] = {}
    for row in events:
        first.setdefault(row[_EVENT_ID], row)
    return list(first.values())


def _strip_nul(rows: Iterable[Row]) -> list[Row]:
    return [
        {k: v.replace("\x00", "\ufffd") if isinstance(v, str) and "\x00" in v else v for k, v in row.items()}
        for row in rows
    ]


_event_texts = operator.itemgetter(
    *(i for i, name in enumerate(models.EVENT_COLUMNS) if isinstance(models.compile_events.c[name].type, sa.String))
)


def _strip_nul_values(row: EventValues) -> EventValues:
    for text in _event_texts(row):  # runs for every event: a plain loop is the cheapest test
        if text and "\x00" in text:
            return tuple(value.replace("\x00", "\ufffd") if isinstance(value, str) else value for value in row)
    return row
