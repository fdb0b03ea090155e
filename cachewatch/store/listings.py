"""Listings the API and the dashboard page through: functions (filtered, sorted and paged
in SQL over the kept totals), one function's events, runs."""

from __future__ import annotations

from typing import Any, TypedDict, cast

import sqlalchemy as sa

from ..core.events import Kind, short_name
from . import models, queries
from .columns import EVENT_SELECT, EventRow, Filters, FunctionReport, event_rows_of, recompiled


class RunChoice(TypedDict):
    """A run as the filter menu names it."""

    run_id: str
    run_name: str
    host: str
    started_at: float


class RunRow(RunChoice):
    """A run with its identity, versions and devices, and its event totals."""

    pid: int
    jax_version: str
    jaxlib_version: str
    backend: str
    devices: list[str]
    python_version: str
    job: str
    process_index: int | None
    process_count: int | None
    events: int
    compiles: int
    compile_seconds: float
    dropped: dict[str, int]  # events lost before the store, by reason
    capabilities_off: list[str]


# What a listing of functions sorts by: report fields. All but ``name`` and
# ``dominant_cause`` are sorted in SQL over the kept totals when the view is the whole store.
SORT_KEYS = (
    "name",
    "compiles",
    "recompiles",
    "dominant_cause",
    "compile_seconds",
    "calls",
    "compile_share",
    "last_compile",
)
# The sort keys that need the functions' call statistics (the rest are read off the events).
CALL_KEYS = ("calls", "compile_share")


def function_page(
    conn: sa.Connection,
    filters: Filters,
    *,
    offset: int,
    limit: int,
    q: str | None = None,
    cause: str | None = None,
    sort: str = "-compile_seconds",
) -> tuple[list[FunctionReport], int]:
    """One page of report rows and how many functions match in all.

    ``q`` keeps functions whose name or qualified name contains it, ``cause`` those with
    compiles of that cause; ``sort`` is a field of :data:`SORT_KEYS`, descending with a
    leading ``-``, unknown values last either way, ties in order of qualified name (then hash). Over the whole
    store the page is chosen in SQL from the kept totals and only its functions get a
    full report row; a run or time filter, or a sort by name or dominant cause, builds the
    report of every function that matches and cuts it (reading the call statistics of the
    page's functions alone, unless the sort is by calls or compile share).
    """
    key = sort.lstrip("-")
    if key not in SORT_KEYS:
        raise ValueError(f"cannot sort functions by {sort!r}")
    descending = sort.startswith("-")
    if not filters.is_empty() or key in ("name", "dominant_cause"):
        # Sorted by what the events say, the page is chosen before the calls are read:
        # then only its functions' statistics are summed (a week of a fleet's is tens of
        # thousands of rows).
        by_calls = key in CALL_KEYS
        rows = _matching(queries.function_report(conn, filters, with_calls=by_calls), q, cause)
        rows = _sorted_rows(rows, key, descending)
        total = len(rows)
        cut = rows[offset : offset + limit]
        return (cut if by_calls else queries.with_calls(conn, filters, cut)), total
    listing = _listing(q, cause, key)
    value = listing.selected_columns[key]
    qualname = listing.selected_columns.qualname
    order: list[sa.ColumnElement[Any]] = [sa.case((value.is_(None), 1), else_=0)]  # unknowns last, either way
    order += [value.desc() if descending else value.asc(), qualname.asc(), listing.selected_columns.function_hash.asc()]
    # The count of all matches rides along with the page (one aggregation, not two).
    counted = listing.add_columns(sa.func.count().over().label("total"))
    page = conn.execute(counted.order_by(*order).offset(offset).limit(limit)).all()
    if page:
        total = page[0].total
    else:  # past the end: count alone
        total = conn.execute(sa.select(sa.func.count()).select_from(listing.subquery())).scalar_one()
    hashes = [r.function_hash for r in page]
    by_hash = (
        {r["function_hash"]: r for r in queries.function_report(conn, filters, function_hashes=hashes)}
        if hashes
        else {}
    )
    return [by_hash[h] for h in hashes if h in by_hash], int(total)


def _listing(q: str | None, cause: str | None, key: str) -> sa.Select[Any]:
    """Per function, from the kept totals: its hash, qualified name and the sort ``key``,
    computed in SQL (only what that key needs is aggregated or joined)."""
    t, f, c = models.function_totals, models.functions, models.function_call_totals
    compiled_events = sa.case((t.c.compiled, t.c.events), else_=0)
    measures: dict[str, sa.ColumnElement[Any]] = {
        "compile_seconds": sa.func.sum(sa.case((t.c.kind != Kind.STALE_CAPTURE, t.c.cost_seconds), else_=0.0)),
        "compiles": sa.func.sum(compiled_events),
        "recompiles": sa.func.sum(sa.case((recompiled(t), t.c.events), else_=0)),
        "last_compile": sa.func.max(t.c.last_ts),
    }
    aggregated = ["compile_seconds"] if key == "compile_share" else [k for k in (key,) if k in measures]
    per_columns = [t.c.function_hash, *(measures[k].label(k) for k in aggregated)]
    if cause:
        of_cause = sa.case((sa.and_(t.c.kind != Kind.STALE_CAPTURE, t.c.cause == cause), t.c.events), else_=0)
        per_columns.append(sa.func.sum(of_cause).label("of_cause"))
    p = sa.select(*per_columns).group_by(t.c.function_hash).subquery()
    listing = sa.select(p.c.function_hash, f.c.qualname).join(f, f.c.function_hash == p.c.function_hash)
    if key in measures:
        listing = listing.add_columns(p.c[key])
    elif key in ("calls", "compile_share"):
        calls = sa.func.coalesce(c.c.calls, 0)
        listing = listing.outerjoin(c, c.c.function_hash == p.c.function_hash)
        if key == "calls":
            listing = listing.add_columns(calls.label("calls"))
        else:
            run_seconds = c.c.run_seconds_per_call * calls
            share = sa.case(
                (
                    sa.and_(c.c.run_seconds_per_call.is_not(None), p.c.compile_seconds + run_seconds > 0),
                    p.c.compile_seconds / (p.c.compile_seconds + run_seconds),
                ),
                else_=None,
            )
            listing = listing.add_columns(share.label("compile_share"))
    if q:
        needle = q.lower()
        listing = listing.where(
            sa.or_(
                sa.func.lower(f.c.qualname).contains(needle, autoescape=True),
                sa.func.lower(f.c.name).contains(needle, autoescape=True),
            )
        )
    if cause:
        listing = listing.where(p.c.of_cause > 0)
    return listing


def causes_present(conn: sa.Connection, filters: Filters) -> list[str]:
    """The causes of the compiles in view (what a listing can be narrowed to)."""
    return sorted(
        {cause for kind, cause, _, _ in queries.grouped(conn, filters, "kind", "cause") if kind != Kind.STALE_CAPTURE}
    )


def has_functions(conn: sa.Connection, filters: Filters) -> bool:
    """Whether any function has events in view."""
    if filters.is_empty():
        return conn.execute(sa.select(models.function_totals.c.function_hash).limit(1)).first() is not None
    e = models.compile_events
    return conn.execute(filters.apply(e, sa.select(e.c.id)).limit(1)).first() is not None


def _matching(rows: list[FunctionReport], q: str | None, cause: str | None) -> list[FunctionReport]:
    if q:
        needle = q.lower()
        rows = [r for r in rows if needle in r["qualname"].lower() or needle in r["name"].lower()]
    if cause:
        rows = [r for r in rows if r["causes"].get(cause)]
    return rows


def _sorted_rows(rows: list[FunctionReport], key: str, descending: bool) -> list[FunctionReport]:
    def value(row: FunctionReport) -> Any:
        if key == "name":
            return short_name(row["qualname"] or row["name"] or row["function_hash"]).lower()
        return row.get(key)

    rows = sorted(rows, key=lambda r: (r["qualname"], r["function_hash"]))
    present = [r for r in rows if value(r) is not None]
    missing = [r for r in rows if value(r) is None]  # last, whichever the direction
    present.sort(key=value, reverse=descending)  # stable: ties keep the qualified names' order
    return present + missing


def event_rows(
    conn: sa.Connection, function_hash: str, filters: Filters, limit: int, after: tuple[float, int] | None = None
) -> list[EventRow]:
    """One function's events in time order (ties by id), with its name; ``after`` pages on.

    Ordered by (timestamp, id) rather than id alone so the (function_hash, timestamp)
    index serves the order: a busy function's page needs no sort of all its events.
    """
    e, f = models.compile_events, models.functions
    q = filters.apply(
        e,
        sa.select(e.c.id, *EVENT_SELECT, f.c.name, f.c.qualname)
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
    return event_rows_of(conn.execute(q.order_by(e.c.timestamp, e.c.id).limit(limit)))


def function_exists(conn: sa.Connection, function_hash: str) -> bool:
    f = models.functions
    return conn.execute(sa.select(f.c.function_hash).where(f.c.function_hash == function_hash)).first() is not None


def run_rows(
    conn: sa.Connection,
    filters: Filters,
    limit: int,
    after: tuple[float, str] | None = None,
    offset: int = 0,
) -> list[RunRow]:
    """Runs, newest first, with their event counts; ``since``/``until`` apply to the start
    time. The API pages on with ``after`` (a cursor), the dashboard with ``offset``."""
    r = models.runs
    q = filters.apply_to_runs(sa.select(r))
    if after is not None:
        started, run_id = after
        q = q.where(sa.or_(r.c.started_at < started, sa.and_(r.c.started_at == started, r.c.run_id < run_id)))
    q = q.order_by(r.c.started_at.desc(), r.c.run_id.desc()).limit(limit).offset(offset)
    rows = [cast(RunRow, dict(row._mapping)) for row in conn.execute(q)]
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
        row["capabilities_off"] = list(row.get("capabilities_off") or [])
        row["dropped"] = {}
    by_run = {row["run_id"]: row for row in rows}
    d = models.run_drops
    for run_id, reason, dropped in conn.execute(
        sa.select(d.c.run_id, d.c.reason, d.c.dropped).where(d.c.run_id.in_(list(by_run)))
    ):
        by_run[run_id]["dropped"][reason] = int(dropped)
    return rows


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


def _run_choice(row: sa.Row[*tuple[Any, ...]]) -> RunChoice:
    return RunChoice(run_id=row.run_id, run_name=row.run_name, host=row.host, started_at=float(row.started_at))


def run_choices(conn: sa.Connection, limit: int = 200) -> list[RunChoice]:
    """Runs for the filter menu, newest first: id, name and start only."""
    r = models.runs
    q = sa.select(r.c.run_id, r.c.run_name, r.c.host, r.c.started_at).order_by(r.c.started_at.desc()).limit(limit)
    return [_run_choice(row) for row in conn.execute(q)]


def run_info(conn: sa.Connection, run_id: str) -> RunChoice | None:
    """One run as the filter menu names it (None if unknown)."""
    r = models.runs
    row = conn.execute(
        sa.select(r.c.run_id, r.c.run_name, r.c.host, r.c.started_at).where(r.c.run_id == run_id)
    ).first()
    return _run_choice(row) if row is not None else None


def count_runs(conn: sa.Connection, filters: Filters) -> int:
    """How many runs the runs page lists (since/until apply to the start time, as in the API)."""
    q = filters.apply_to_runs(sa.select(sa.func.count()).select_from(models.runs))
    return int(conn.execute(q).scalar_one())
