"""Read queries the service needs beyond ``cachewatch.store.queries``; they return plain dicts."""

from __future__ import annotations

import logging
import time
from typing import Any

import sqlalchemy as sa

from cachewatch import analysis
from cachewatch.events import Cause, Kind
from cachewatch.store import models
from cachewatch.store import queries as storequeries
from cachewatch.store.queries import Filters

logger = logging.getLogger("cachewatch.server")


def verdicts(conn: sa.Connection, rows: list[dict[str, Any]], filters: Filters) -> dict[str, dict[str, Any]]:
    """``analysis.verdicts``, or none when a stored row it cannot weigh (a run time measured
    op by op without its compiled twin, written before the store refused such rows) would
    fail the whole page: the page shows what is there, without the verdicts."""
    try:
        return analysis.verdicts(conn, rows, filters)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
        logger.warning("verdicts left out: a stored row cannot be weighed: %s: %s", type(exc).__name__, exc)
        return {}


def function_rows(conn: sa.Connection, filters: Filters) -> list[dict[str, Any]]:
    """Every function's report row, most compile seconds first."""
    return storequeries.function_report(conn, filters)


def function_page(
    conn: sa.Connection, filters: Filters, q: str | None, offset: int, limit: int
) -> tuple[list[dict[str, Any]], bool]:
    """One page of report rows (most compile seconds first) and whether more follow.

    Over the whole store the page's functions are chosen in SQL from the totals, and
    only they get a full report row; with a run or time filter the report is built for
    every function that matches and then cut.
    """
    if not filters.is_empty():
        rows = storequeries.function_report(conn, filters)
        if q:
            needle = q.lower()
            rows = [r for r in rows if needle in r["qualname"].lower() or needle in r["name"].lower()]
        return rows[offset : offset + limit], offset + limit < len(rows)
    t, f = models.function_totals, models.functions
    cost = sa.func.sum(sa.case((t.c.kind != Kind.STALE_CAPTURE, t.c.cost_seconds), else_=0.0)).label("cost")
    chosen = (
        sa.select(t.c.function_hash, cost, f.c.qualname)
        .join(f, f.c.function_hash == t.c.function_hash)
        .group_by(t.c.function_hash, f.c.qualname)
    )
    if q:
        needle = q.lower()
        chosen = chosen.where(
            sa.or_(
                sa.func.lower(f.c.qualname).contains(needle, autoescape=True),
                sa.func.lower(f.c.name).contains(needle, autoescape=True),
            )
        )
    hashes = [
        r.function_hash
        for r in conn.execute(chosen.order_by(cost.desc(), f.c.qualname).offset(offset).limit(limit + 1))
    ]
    rows = storequeries.function_report(conn, filters, function_hashes=hashes[:limit]) if hashes else []
    return rows, len(hashes) > limit


_EVENT_COLUMNS = [c for c in models.compile_events.c if c.name != "id"]


def event_rows(
    conn: sa.Connection, function_hash: str, filters: Filters, limit: int, after: tuple[float, int] | None = None
) -> list[dict[str, Any]]:
    """One function's events in time order (ties by id), with its name; ``after`` pages on.

    Ordered by (timestamp, id) rather than id alone so the (function_hash, timestamp)
    index serves the order: a busy function's page needs no sort of all its events.
    """
    e, f = models.compile_events, models.functions
    q = filters.apply(
        e,
        sa.select(e.c.id, *_EVENT_COLUMNS, f.c.name, f.c.qualname)
        .join(f, f.c.function_hash == e.c.function_hash)
        .where(e.c.function_hash == function_hash),
    )
    if after is not None:
        timestamp, last_id = after
        # The redundant `>=` lets the planner start the index range at the cursor.
        q = q.where(
            e.c.timestamp >= timestamp,
            sa.or_(e.c.timestamp > timestamp, sa.and_(e.c.timestamp == timestamp, e.c.id > last_id)),
        )
    return [dict(r._mapping) for r in conn.execute(q.order_by(e.c.timestamp, e.c.id).limit(limit))]


def function_exists(conn: sa.Connection, function_hash: str) -> bool:
    f = models.functions
    return conn.execute(sa.select(f.c.function_hash).where(f.c.function_hash == function_hash)).first() is not None


def function_row(conn: sa.Connection, function_hash: str, filters: Filters) -> dict[str, Any] | None:
    """One function's report row (zeros when it has no events in the filters); None if unknown."""
    f = models.functions
    info = conn.execute(sa.select(f).where(f.c.function_hash == function_hash)).first()
    if info is None:
        return None
    rows = storequeries.function_report(conn, filters, function_hashes=[function_hash])
    if rows:
        return rows[0]
    return {
        "name": info.name,
        "qualname": info.qualname,
        "module": info.module,
        "file": info.file,
        "line": info.line,
        "function_hash": function_hash,
        "traces": 0,
        "compiles": 0,
        "recompiles": 0,
        "causes": {},
        "dominant_cause": None,
        "stale_captures": 0,
        "compile_seconds": 0.0,
        "calls": 0,
        "sampled_calls": 0,
        "run_seconds_mean": None,
        "run_seconds_est": None,
        "compile_share": None,
        "run_time_note": "never called",
        "first_compile": None,
        "last_compile": None,
    }


def storms(
    conn: sa.Connection,
    filters: Filters,
    *,
    threshold: int,
    window: float,
    function_hashes: list[str] | None = None,
    active_only: bool = False,
    now: float | None = None,
) -> list[dict[str, Any]]:
    """Storms, newest first. With ``active_only`` only recent events are read.

    A storm is active when its last compile is within ``window`` of now, and the
    ``threshold`` compiles that make it span at most ``window``: so every event of an
    active storm is younger than ``2 * window`` and older events need not be read.
    """
    now = time.time() if now is None else now
    if active_only:
        horizon = now - 2 * window
        filters = Filters(
            run_id=filters.run_id,
            until=filters.until,
            since=horizon if filters.since is None else max(filters.since, horizon),
        )
    found = analysis.detect_storms(
        conn, filters, threshold=threshold, window=window, now=now, function_hashes=function_hashes
    )
    return [s for s in found if s["active"]] if active_only else found


def run_rows(
    conn: sa.Connection, filters: Filters, limit: int, after: tuple[float, str] | None = None
) -> list[dict[str, Any]]:
    """Runs, newest first, with their event counts; ``since``/``until`` apply to the start time."""
    r = models.runs
    q = filters.apply_to_runs(sa.select(r))
    if after is not None:
        started, run_id = after
        q = q.where(sa.or_(r.c.started_at < started, sa.and_(r.c.started_at == started, r.c.run_id < run_id)))
    rows = [
        dict(row._mapping) for row in conn.execute(q.order_by(r.c.started_at.desc(), r.c.run_id.desc()).limit(limit))
    ]
    if not rows:
        return rows
    totals = models.run_totals
    counts = {
        row.run_id: row
        for row in conn.execute(
            sa.select(
                totals.c.run_id, totals.c.events, totals.c.compiles, totals.c.cost_seconds.label("compile_seconds")
            ).where(totals.c.run_id.in_([row["run_id"] for row in rows]))
        )
    }
    for row in rows:
        found = counts.get(row["run_id"])
        row["devices"] = list(row.get("devices") or [])
        row["events"] = int(found.events) if found else 0
        row["compiles"] = int(found.compiles or 0) if found else 0
        row["compile_seconds"] = float(found.compile_seconds or 0.0) if found else 0.0
    return rows


def _grouped(conn: sa.Connection, filters: Filters, *columns: str) -> list[tuple]:
    """(columns..., events, cost seconds) grouped by ``columns``, aggregated by the database.

    Over the whole store this reads the per-function totals; with a run or time filter,
    the events through their indexes. Stale captures count as events but cost nothing.
    """
    if filters.is_empty():
        t = models.function_totals
        keys = [t.c[c] for c in columns]
        q = sa.select(
            *keys,
            sa.func.sum(t.c.events),
            sa.func.sum(sa.case((t.c.kind != Kind.STALE_CAPTURE, t.c.cost_seconds), else_=0.0)),
        )
    else:
        e = models.compile_events
        keys = [e.c[c] for c in columns]
        q = filters.apply(e, sa.select(*keys, sa.func.count(), sa.func.sum(storequeries.cost_expr(e))))
    return [tuple(row) for row in conn.execute(q.group_by(*keys))]


def summary(conn: sa.Connection, filters: Filters, *, threshold: int, window: float) -> dict[str, Any]:
    """Totals over the store (or the filtered part of it)."""
    if filters.since is None and filters.until is None:
        per_run = models.run_totals
        runs_q = sa.select(sa.func.count()).select_from(per_run).where(per_run.c.events > 0)
        if filters.run_id:
            runs_q = runs_q.where(per_run.c.run_id == filters.run_id)
    else:
        # One index probe per run ((run_id, timestamp) is indexed) instead of a DISTINCT
        # over every event.
        e = models.compile_events
        r = models.runs
        has_events = filters.apply(e, sa.select(e.c.id).where(e.c.run_id == r.c.run_id)).exists()
        runs_q = sa.select(sa.func.count()).select_from(r).where(has_events)
        if filters.run_id:
            runs_q = runs_q.where(r.c.run_id == filters.run_id)
    runs = conn.execute(runs_q).scalar_one()
    causes: dict[str, int] = {}
    totals = {"events": 0, "traces": 0, "compiles": 0, "recompiles": 0, "stale_captures": 0}
    for kind, cause, compiled, n, _ in _grouped(conn, filters, "kind", "cause", "compiled"):
        n = int(n)
        if kind == Kind.STALE_CAPTURE:
            # Not a compile: the report keeps these out of the causes too.
            totals["stale_captures"] += n
        else:
            causes[cause] = causes.get(cause, 0) + n
        totals["events"] += n
        totals["traces"] += n if kind == Kind.TRACE else 0
        if compiled:
            totals["compiles"] += n
            if cause != Cause.FIRST_CALL:
                totals["recompiles"] += n
    compile_by_function = {
        function_hash: float(cost or 0.0) for function_hash, _, cost in _grouped(conn, filters, "function_hash")
    }
    calls = 0
    run_total = 0.0
    measured_compile = 0.0
    measured = False
    unsampled = 0
    for row in storequeries.call_totals(conn, filters):
        calls += row.calls
        unsampled += row.unsampled_calls
        if row.run_seconds_per_call is not None:
            measured = True
            run_total += row.run_seconds_per_call * row.calls
            measured_compile += compile_by_function.get(row.function_hash, 0.0)
    compile_seconds = sum(compile_by_function.values())
    note = None
    if not measured:
        note = storequeries.run_time_note(
            storequeries.CallTotals("", calls, 0, 0.0, None, unsampled), totals["compiles"]
        )
    active = storms(conn, filters, threshold=threshold, window=window, active_only=True)
    return {
        "functions": len(compile_by_function),
        "runs": int(runs or 0),
        **totals,
        "causes": causes,
        "compile_seconds": compile_seconds,
        "calls": calls,
        "run_seconds_est": run_total if measured else None,
        "compile_share": storequeries.compile_share(measured_compile, run_total if measured else None),
        "run_time_note": note,
        "active_storms": len(active),
        "storm_threshold": threshold,
        "storm_window": window,
    }
