"""Read queries only the dashboard needs; the rest come from ``cachewatch.store.queries``,
``cachewatch.analysis`` and ``server.queries``, so a page and the JSON API show the same
numbers. Everything aggregates in SQL and returns plain dicts or lists."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from cachewatch.events import Cause, Kind
from cachewatch.store import models
from cachewatch.store.queries import Filters, cost_expr

# Bucket widths for the charts over time, in seconds: the first giving at most
# MAX_BUCKETS bars over the span shown wins.
_BUCKETS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 2 * 3600, 6 * 3600, 12 * 3600, 86400, 7 * 86400)
MAX_BUCKETS = 80


def has_events(conn: sa.Connection) -> bool:
    e = models.compile_events
    return conn.execute(sa.select(e.c.id).limit(1)).first() is not None


def time_span(conn: sa.Connection, filters: Filters, function_hash: str | None = None) -> tuple[float, float] | None:
    e = models.compile_events
    q = filters.apply(e, sa.select(sa.func.min(e.c.timestamp), sa.func.max(e.c.timestamp)))
    if function_hash is not None:
        q = q.where(e.c.function_hash == function_hash)
    low, high = conn.execute(q).one()
    return None if low is None else (float(low), float(high))


def bucket_width(span: tuple[float, float] | None) -> int:
    if span is None:
        return 60
    seconds = max(span[1] - span[0], 1.0)
    for width in _BUCKETS:
        if seconds / width <= MAX_BUCKETS:
            return width
    return _BUCKETS[-1]


def _bucket(conn: sa.Connection, column: sa.ColumnElement, width: int) -> sa.ColumnElement:
    # floor() is missing from SQLite builds without the math functions; a cast to
    # integer truncates, which is floor for the positive epoch seconds stored here.
    # PostgreSQL's cast rounds instead, so it gets floor().
    if conn.dialect.name == "sqlite":
        return sa.cast(column / width, sa.Integer) * width
    return sa.func.floor(column / width) * width


def compiles_over_time(
    conn: sa.Connection, filters: Filters, *, recompiles_only: bool = True, function_hash: str | None = None
) -> dict[str, Any]:
    """Compiles per time bucket and cause: ``{"width": s, "rows": [(bucket_start, cause, n), ...]}``."""
    e = models.compile_events
    width = bucket_width(time_span(conn, filters, function_hash))
    bucket = _bucket(conn, e.c.timestamp, width).label("bucket")
    q = filters.apply(e, sa.select(bucket, e.c.cause, sa.func.count().label("n")).where(e.c.compiled))
    if recompiles_only:
        q = q.where(e.c.cause != Cause.FIRST_CALL)
    if function_hash is not None:
        q = q.where(e.c.function_hash == function_hash)
    rows = conn.execute(q.group_by(bucket, e.c.cause).order_by(bucket)).all()
    return {"width": width, "rows": [(float(r.bucket), r.cause, int(r.n)) for r in rows]}


def timeline(conn: sa.Connection, function_hash: str, filters: Filters, limit: int = 5000) -> list[dict[str, Any]]:
    """The function's traces and compiles (newest ``limit``), oldest first, with their cost."""
    e = models.compile_events
    q = filters.apply(
        e,
        sa.select(e.c.timestamp, e.c.cause, e.c.kind, e.c.compiled, e.c.call_site, cost_expr(e).label("seconds"))
        .where(e.c.function_hash == function_hash, e.c.kind != Kind.STALE_CAPTURE)
        .order_by(e.c.timestamp.desc(), e.c.id.desc())
        .limit(limit),
    )
    rows = [dict(r._mapping) for r in conn.execute(q)]
    rows.reverse()
    return rows


def call_sites(conn: sa.Connection, function_hash: str, filters: Filters) -> list[dict[str, Any]]:
    """Where the function was called when it traced or compiled, busiest first."""
    e = models.compile_events
    recompiles = sa.func.sum(sa.case((sa.and_(e.c.compiled, e.c.cause != Cause.FIRST_CALL), 1), else_=0))
    q = filters.apply(
        e,
        sa.select(
            e.c.call_site,
            sa.func.count().label("events"),
            recompiles.label("recompiles"),
            sa.func.sum(cost_expr(e)).label("seconds"),
            sa.func.max(e.c.timestamp).label("last"),
        )
        .where(e.c.function_hash == function_hash, e.c.kind != Kind.STALE_CAPTURE)
        .group_by(e.c.call_site),
    )
    rows = [
        {
            "call_site": r.call_site,
            "events": int(r.events),
            "recompiles": int(r.recompiles or 0),
            "seconds": float(r.seconds or 0.0),
            "last": r.last,
        }
        for r in conn.execute(q)
    ]
    rows.sort(key=lambda r: (-r["events"], r["call_site"] or ""))
    return rows


_EVENT_COLUMNS = [c for c in models.compile_events.c if c.name != "id"]


def _event_kind(e: sa.Table, kind: str | None) -> list[sa.ColumnElement]:
    # "stale" events are not compiles: the detail page lists them apart.
    if kind == Kind.STALE_CAPTURE:
        return [e.c.kind == Kind.STALE_CAPTURE]
    if kind == "compiles":
        return [e.c.kind != Kind.STALE_CAPTURE]
    return []


def count_events(conn: sa.Connection, function_hash: str, filters: Filters, kind: str | None = None) -> int:
    e = models.compile_events
    q = filters.apply(
        e, sa.select(sa.func.count()).select_from(e).where(e.c.function_hash == function_hash, *_event_kind(e, kind))
    )
    return int(conn.execute(q).scalar_one())


def events_page(
    conn: sa.Connection, function_hash: str, filters: Filters, *, limit: int, offset: int, kind: str | None = None
) -> list[dict[str, Any]]:
    """One page of a function's events, newest first: the latest is what a person looks for first."""
    e = models.compile_events
    q = filters.apply(
        e,
        sa.select(e.c.id, *_EVENT_COLUMNS)
        .where(e.c.function_hash == function_hash, *_event_kind(e, kind))
        .order_by(e.c.timestamp.desc(), e.c.id.desc())
        .limit(limit)
        .offset(offset),
    )
    return [dict(r._mapping) for r in conn.execute(q)]


def dominant_cause_rows(
    conn: sa.Connection, function_hash: str, filters: Filters, cause: str, limit: int = 500
) -> list[Any]:
    """The latest compiles of one cause, as rows with ``diff`` and ``call_site`` (for suggest_fix)."""
    e = models.compile_events
    q = filters.apply(
        e,
        sa.select(e.c.diff, e.c.call_site, e.c.cause, e.c.timestamp)
        .where(e.c.function_hash == function_hash, e.c.cause == cause, e.c.compiled)
        .order_by(e.c.timestamp.desc())
        .limit(limit),
    )
    return list(conn.execute(q))


def run_spans(conn: sa.Connection, run_ids: list[str]) -> dict[str, tuple[float, float]]:
    """First and last event time of each run."""
    if not run_ids:
        return {}
    e = models.compile_events
    q = (
        sa.select(e.c.run_id, sa.func.min(e.c.timestamp).label("first"), sa.func.max(e.c.timestamp).label("last"))
        .where(e.c.run_id.in_(run_ids))
        .group_by(e.c.run_id)
    )
    return {r.run_id: (float(r.first), float(r.last)) for r in conn.execute(q)}


def run_choices(conn: sa.Connection, limit: int = 200) -> list[dict[str, Any]]:
    """Runs for the filter menu, newest first: id, name and start only."""
    r = models.runs
    q = sa.select(r.c.run_id, r.c.run_name, r.c.host, r.c.started_at).order_by(r.c.started_at.desc()).limit(limit)
    return [dict(row._mapping) for row in conn.execute(q)]


def run_info(conn: sa.Connection, run_id: str) -> dict[str, Any] | None:
    r = models.runs
    row = conn.execute(
        sa.select(r.c.run_id, r.c.run_name, r.c.host, r.c.started_at).where(r.c.run_id == run_id)
    ).first()
    return dict(row._mapping) if row is not None else None


def count_runs(conn: sa.Connection, filters: Filters) -> int:
    """How many runs the runs page lists (since/until apply to the start time, as in the API)."""
    q = filters.apply_to_runs(sa.select(sa.func.count()).select_from(models.runs))
    return int(conn.execute(q).scalar_one())
