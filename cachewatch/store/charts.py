"""The dashboard's charts and event pages: compiles over time, a function's timeline,
call sites and compiles over time, and its events page by page."""

from __future__ import annotations

from typing import TypedDict

import sqlalchemy as sa

from ..core.events import Kind
from . import engine as enginemod
from . import models, rollup
from .columns import EVENT_SELECT, EventRow, Filters, cost_expr, event_rows_of, recompiled


class TimelinePoint(TypedDict):
    """One trace or compile of a function on its timeline."""

    timestamp: float
    cause: str
    kind: str
    compiled: bool
    call_site: str | None
    seconds: float


class CallSite(TypedDict):
    """One place a function was called from when it traced or compiled."""

    call_site: str | None
    events: int
    recompiles: int
    seconds: float
    last: float


class CompilesOverTime(TypedDict):
    """Compiles per time bucket of ``width`` seconds: ``(bucket_start, cause, count)`` rows."""

    width: int
    rows: list[tuple[float, str, int]]


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
    # A float width keeps the division in double precision: an integer one is cast to
    # NUMERIC, whose division per event is most of the chart's time on a large store.
    return sa.func.floor(column / sa.literal(float(width), sa.Float)) * width


def compiles_over_time(conn: sa.Connection, filters: Filters, *, recompiles_only: bool = True) -> CompilesOverTime:
    """Compiles per time bucket and cause, in buckets as wide as the span shown asks. The
    whole store's chart in buckets of an hour or more is summed from the kept hourly
    totals (a year is a few thousand rows); a chart of one run or a time range, or of a
    span short enough for finer buckets, counts its compiles (a function's chart:
    :func:`function_charts`)."""
    span = hour_span(conn) if filters.is_empty() else None
    if span is not None and bucket_width(span) >= rollup.HOUR:
        width = bucket_width(span)
        return {"width": width, "rows": compiles_by_hour(conn, width, recompiles_only=recompiles_only)}
    width = bucket_width(time_span(conn, filters))
    return {"width": width, "rows": compiles_by_event(conn, filters, width, recompiles_only=recompiles_only)}


def hour_span(conn: sa.Connection) -> tuple[float, float] | None:
    """The span of the kept hourly totals: the first hour's start to the last hour's end."""
    h = models.compile_hour_totals
    low, high = conn.execute(sa.select(sa.func.min(h.c.hour), sa.func.max(h.c.hour))).one()
    return None if low is None else (float(low), float(high) + rollup.HOUR)


def compiles_by_hour(conn: sa.Connection, width: int, *, recompiles_only: bool) -> list[tuple[float, str, int]]:
    """The whole store's compiles per bucket of ``width`` (a whole number of hours) and cause, from the kept totals."""
    h = models.compile_hour_totals
    bucket = _bucket(conn, h.c.hour, width).label("bucket")
    q = sa.select(bucket, h.c.cause, sa.func.sum(h.c.recompiles if recompiles_only else h.c.compiles).label("n"))
    rows = conn.execute(q.group_by(bucket, h.c.cause).order_by(bucket, h.c.cause)).all()
    return [(float(r.bucket), r.cause, int(r.n)) for r in rows if r.n]


def compiles_by_event(
    conn: sa.Connection, filters: Filters, width: int, *, recompiles_only: bool = True
) -> list[tuple[float, str, int]]:
    """Compiles per bucket of ``width`` seconds and cause, counted from the events."""
    e = models.compile_events
    bucket = _bucket(conn, e.c.timestamp, width).label("bucket")
    q = filters.apply(e, sa.select(bucket, e.c.cause, sa.func.count().label("n")).where(e.c.compiled))
    if recompiles_only:
        q = q.where(recompiled(e))
    enginemod.room_to_group(conn)
    rows = conn.execute(q.group_by(bucket, e.c.cause).order_by(bucket, e.c.cause)).all()
    return [(float(r.bucket), r.cause, int(r.n)) for r in rows]


def timeline(conn: sa.Connection, function_hash: str, filters: Filters, limit: int = 5000) -> list[TimelinePoint]:
    """The function's traces and compiles (newest ``limit``), oldest first, with their cost."""
    e = models.compile_events
    q = filters.apply(
        e,
        sa.select(e.c.timestamp, e.c.cause, e.c.kind, e.c.compiled, e.c.call_site, cost_expr(e).label("seconds"))
        .where(e.c.function_hash == function_hash, e.c.kind != Kind.STALE_CAPTURE)
        .order_by(e.c.timestamp.desc(), e.c.id.desc())
        .limit(limit),
    )
    # Fetched at once and unpacked as tuples: a busy function's page reads thousands.
    rows = [
        TimelinePoint(
            timestamp=float(timestamp),
            cause=cause,
            kind=kind,
            compiled=bool(compiled),
            call_site=call_site,
            seconds=float(seconds or 0.0),
        )
        for timestamp, cause, kind, compiled, call_site, seconds in conn.execute(q).all()
    ]
    rows.reverse()
    return rows


def function_charts(
    conn: sa.Connection, function_hash: str, filters: Filters
) -> tuple[list[CallSite], CompilesOverTime]:
    """Where the function was called when it traced or compiled (busiest first), and its
    compiles per time bucket and cause: one pass over its events, grouped by both at
    once (a busy function has some hundred thousand; on PostgreSQL they are read from
    the index of its events by time, which carries every column this needs)."""
    e = models.compile_events
    width = bucket_width(time_span(conn, filters, function_hash))
    bucket = _bucket(conn, e.c.timestamp, width).label("bucket")
    stale = (e.c.kind == Kind.STALE_CAPTURE).label("stale")
    recompile = recompiled(e).label("recompile")
    q = filters.apply(
        e,
        sa.select(
            bucket,
            e.c.cause,
            e.c.call_site,
            e.c.compiled,
            stale,
            recompile,
            sa.func.count().label("n"),
            sa.func.sum(cost_expr(e)).label("seconds"),
            sa.func.max(e.c.timestamp).label("last"),
        )
        .where(e.c.function_hash == function_hash)
        .group_by(bucket, e.c.cause, e.c.call_site, e.c.compiled, stale, recompile),
    )
    sites: dict[str | None, CallSite] = {}
    compiles: dict[tuple[float, str], int] = {}
    enginemod.room_to_group(conn)
    for start, cause, call_site, compiled, is_stale, is_recompile, n, seconds, last in conn.execute(q).all():
        n = int(n)
        if compiled:
            key = (float(start), cause)
            compiles[key] = compiles.get(key, 0) + n
        if is_stale:
            continue  # a stale capture is no trace or compile of the function's own
        site = sites.get(call_site)
        if site is None:
            site = sites[call_site] = CallSite(
                call_site=call_site, events=0, recompiles=0, seconds=0.0, last=float(last)
            )
        site["events"] += n
        if is_recompile:
            site["recompiles"] += n
        site["seconds"] += float(seconds or 0.0)
        site["last"] = max(site["last"], float(last))
    listed = sorted(sites.values(), key=lambda r: (-r["events"], r["call_site"] or ""))
    return listed, {"width": width, "rows": [(start, cause, n) for (start, cause), n in sorted(compiles.items())]}


def _event_kind(e: sa.Table, kind: str | None) -> list[sa.ColumnElement]:
    # "stale" events are not compiles: the detail page lists them apart.
    if kind == Kind.STALE_CAPTURE:
        return [e.c.kind == Kind.STALE_CAPTURE]
    if kind == "compiles":
        return [e.c.kind != Kind.STALE_CAPTURE]
    return []


def events_page(
    conn: sa.Connection, function_hash: str, filters: Filters, *, limit: int, offset: int, kind: str | None = None
) -> list[EventRow]:
    """One page of a function's events, newest first: the latest is what a person looks for first."""
    e = models.compile_events
    q = filters.apply(
        e,
        sa.select(e.c.id, *EVENT_SELECT)
        .where(e.c.function_hash == function_hash, *_event_kind(e, kind))
        .order_by(e.c.timestamp.desc(), e.c.id.desc())
        .limit(limit)
        .offset(offset),
    )
    return event_rows_of(conn.execute(q))
