"""What analysis reasons over: recompiles after warm-up, each signature's cost, program
sizes against compile seconds, compiles that missed the persistent cache. Frozen
dataclasses, so the reasoning in cachewatch.analysis never touches SQL."""

from __future__ import annotations

import collections
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import sqlalchemy as sa

from ..core.events import MAX_SECONDS, FunctionInfo, Kind
from . import models
from .columns import Filters, cost_expr, in_chunks


@dataclass(frozen=True, slots=True)
class Recompile:
    """One compile as the advice and the storm finder read it."""

    function_hash: str
    run_id: str
    timestamp: float
    cause: str
    diff: list[dict[str, Any]] | None
    call_site: str | None
    signature_hash: str = ""
    seconds: float = 0.0  # trace, lowering and XLA compile seconds
    while_repeating: bool = False  # the program had come back to an earlier signature first
    call_number: int | None = None  # which call of the function compiled (None: not counted)
    event_id: str = ""  # set where the diff is read later (see with_diffs)


@dataclass(frozen=True, slots=True)
class SignatureCost:
    """One signature of a function: its compiles, their seconds, its mean eager run time."""

    function_hash: str
    signature_hash: str
    compiles: int
    seconds: float
    eager_seconds: float | None


@dataclass(frozen=True, slots=True)
class CompileSize:
    """One compile's program size and its lowering plus XLA compile seconds."""

    function_hash: str
    size: float
    seconds: float


@dataclass(frozen=True, slots=True)
class UncachedCompile:
    """One XLA compile that missed the persistent cache, with its run's start and JAX versions."""

    function_hash: str
    signature_hash: str
    run_id: str
    compile_seconds: float
    run_started_at: float
    jax_version: str
    jaxlib_version: str


_RECOMPILE_COLUMNS = (
    "function_hash",
    "run_id",
    "timestamp",
    "cause",
    "diff",
    "call_site",
    "signature_hash",
    "while_repeating",
    "call_number",
)


def _recompile_columns(e: sa.Table, diffs: bool = True, event_id: bool = False) -> list[Any]:
    """The columns of a Recompile (without ``diffs``, the bulk of a row, a null diff), and
    with ``event_id`` the event id to read its diff or find it by."""
    named = [e.c[name] if diffs or name != "diff" else sa.null().label("diff") for name in _RECOMPILE_COLUMNS]
    return [*named, cost_expr(e).label("seconds"), *([e.c.event_id] if event_id else [])]


def _recompiles(result: Iterable[sa.Row[*tuple[Any, ...]]]) -> list[Recompile]:
    return [
        Recompile(
            r.function_hash,
            r.run_id,
            float(r.timestamp),
            r.cause,
            r.diff,
            r.call_site,
            r.signature_hash or "",
            float(r.seconds or 0.0),
            bool(r.while_repeating),
            r.call_number,
            getattr(r, "event_id", ""),
        )
        for r in result
    ]


# A run's recompiles whose diffs are read as one range of its events by time (their
# functions' events from the first to the last) rather than by id, from this many on: a
# storm's tens of thousands are then one read, not a lookup each.
DIFFS_BY_RANGE = 1_000


def with_diffs(conn: sa.Connection, rows: list[Recompile]) -> list[Recompile]:
    """The recompiles with their diffs, read for just these events (by event id, or for
    many of one run, by the span they cover)."""
    e = models.compile_events
    wanted = [r for r in rows if r.event_id and r.diff is None]  # the rest carry theirs
    per_run: dict[str, list[Recompile]] = collections.defaultdict(list)
    for r in wanted:
        per_run[r.run_id].append(r)
    diffs: dict[str, Any] = {}
    by_id: list[str] = []
    for run_id, found in per_run.items():
        if len(found) < DIFFS_BY_RANGE:
            by_id.extend(r.event_id for r in found)
            continue
        ids = {r.event_id for r in found}
        q = sa.select(e.c.event_id, e.c.diff).where(
            e.c.run_id == run_id,
            e.c.timestamp.between(min(r.timestamp for r in found), max(r.timestamp for r in found)),
            e.c.function_hash.in_({r.function_hash for r in found}),
        )
        diffs.update((event_id, diff) for event_id, diff in conn.execute(q) if event_id in ids)
    for chunk in in_chunks(list(set(by_id))):
        q = sa.select(e.c.event_id, e.c.diff).where(e.c.event_id.in_(chunk))
        diffs.update((event_id, diff) for event_id, diff in conn.execute(q))
    return [replace(r, diff=diffs.get(r.event_id, r.diff)) if r.event_id else r for r in rows]


def recompiles_by_id(conn: sa.Connection, event_ids: list[str], diffs: bool = False) -> list[Recompile]:
    """These events as recompiles, each with its event id, and with its diff when
    ``diffs`` (else :func:`with_diffs` reads them later), in no order."""
    e = models.compile_events
    columns = _recompile_columns(e, diffs, event_id=True)
    found: list[Recompile] = []
    for chunk in in_chunks(event_ids):
        q = sa.select(*columns).where(e.c.event_id.in_(chunk))
        found.extend(_recompiles(conn.execute(q)))
    return found


def in_time_order(rows: Iterable[Recompile]) -> list[Recompile]:
    """Recompiles by time, ties by function and event: one order however they were read."""
    return sorted(rows, key=lambda r: (r.timestamp, r.function_hash, r.event_id))


def compile_seconds_between(conn: sa.Connection, run_id: str, start: float, end: float) -> float:
    """Seconds one run spent tracing, lowering and compiling (every function) in the events
    stamped from ``start`` to ``end``."""
    e = models.compile_events
    q = sa.select(sa.func.sum(cost_expr(e))).where(e.c.run_id == run_id, e.c.timestamp >= start, e.c.timestamp <= end)
    return float(conn.execute(q).scalar() or 0.0)


def function_infos(conn: sa.Connection, function_hashes: Iterable[str]) -> dict[str, FunctionInfo]:
    """Name, qualified name, module, file and line of each function, by hash."""
    f = models.functions
    wanted = list(function_hashes)
    if not wanted:
        return {}
    q = sa.select(f.c.function_hash, f.c.name, f.c.qualname, f.c.module, f.c.file, f.c.line)
    return {
        r.function_hash: FunctionInfo(r.function_hash, r.name, r.qualname, r.module, r.file, int(r.line or 0))
        for r in conn.execute(q.where(f.c.function_hash.in_(wanted)))
    }


def recompiles_past_first(
    conn: sa.Connection,
    filters: Filters,
    function_hashes: list[str] | None = None,
    *,
    diffs: bool = True,
    dense: tuple[int, float] | None = None,
) -> list[tuple[Recompile, bool]]:
    """Every compile that was not a function's first, with its warm-up flag, by function,
    run and time (compiles made ahead of time by cachewatch.warmup are never recompiles).
    With ``function_hashes``: those functions' own, and those of the lines of user code
    that reached them (a storm of eager code or library jits is found per line). Without
    ``diffs``, each carries its event id instead, for :func:`with_diffs`. With ``dense``
    (``threshold``, ``window``): only those of a function, or of a line of user code, in a
    run where ``threshold`` of them came within ``window`` seconds somewhere (a burst needs
    that), all of theirs; the rest of a fleet's store never leaves the database."""
    e = models.compile_events
    recompiled = sa.text(models.RECOMPILED)  # word for word the partial indexes' condition, so they serve
    q = filters.apply(
        e,
        sa.select(*_recompile_columns(e, diffs, event_id=not diffs), e.c.warmup)
        .where(recompiled)
        .order_by(e.c.function_hash, e.c.run_id, e.c.timestamp),
    )
    members = None
    if function_hashes is not None:
        sites = filters.apply(
            e,
            sa.select(e.c.call_site).where(
                e.c.function_hash.in_(function_hashes), e.c.compiled, e.c.call_site.is_not(None)
            ),
        )
        members = (e.c.function_hash.in_(function_hashes), e.c.call_site.in_(sites))
        q = q.where(sa.or_(*members))
    rows = conn.execute(q).all() if dense is None else _dense_rows(conn, q, filters, recompiled, dense, members)
    return list(zip(_recompiles(rows), (bool(r.warmup) for r in rows), strict=False))


def _dense_rows(
    conn: sa.Connection,
    q: sa.Select[Any],
    filters: Filters,
    recompiled: sa.TextClause,
    dense: tuple[int, float],
    members: tuple[sa.ColumnElement[bool], sa.ColumnElement[bool]] | None,
) -> list[sa.Row[Any]]:
    """The rows of ``q`` of the dense pairs (see :func:`_dense`), read run by run. The pairs
    are fetched first: as subqueries under an OR, PostgreSQL ran them again for every row
    of a large store. ``members``: the conditions that keep the functions asked about and
    the lines that reached them, so the window runs over their recompiles alone."""
    found_pairs = _dense(filters, recompiled, *dense, members)
    by_function, by_line = (set(map(tuple, conn.execute(pairs))) for pairs in found_pairs)
    runs = sorted({run_id for run_id, _ in by_function | by_line})
    e = models.compile_events
    found = [
        row
        for chunk in in_chunks(runs)
        for row in conn.execute(q.where(e.c.run_id.in_(chunk)))
        if (row.run_id, row.function_hash) in by_function or (row.run_id, row.call_site) in by_line
    ]
    found.sort(key=lambda row: (row.function_hash, row.run_id, row.timestamp))
    return found


def _dense(
    filters: Filters,
    recompiled: sa.TextClause,
    threshold: int,
    window: float,
    members: tuple[sa.ColumnElement[bool], sa.ColumnElement[bool]] | None = None,
) -> tuple[sa.Select[Any], sa.Select[Any]]:
    """The (run, function) and (run, line of user code) pairs among the recompiles in which
    ``threshold`` consecutive ones fit in ``window`` seconds: those a burst can come from.
    ``members`` (functions, lines) keeps whole partitions only, so the window over those
    left is the same as over every recompile."""
    e = models.compile_events
    steps_back = max(threshold - 1, 0)

    def pairs(column: sa.ColumnElement[Any], member: sa.ColumnElement[bool] | None) -> sa.Select[Any]:
        earlier = sa.func.lag(e.c.timestamp, steps_back).over(partition_by=(e.c.run_id, column), order_by=e.c.timestamp)
        inner = sa.select(e.c.run_id, column.label("member"), (e.c.timestamp - earlier).label("span")).where(recompiled)
        if member is not None:
            inner = inner.where(member)
        spans = filters.apply(e, inner).subquery()
        return sa.select(spans.c.run_id, spans.c.member).where(spans.c.span <= window).distinct()

    by_function, by_line = members if members is not None else (None, None)
    return pairs(e.c.function_hash, by_function), pairs(e.c.call_site, by_line)


def signature_costs(
    conn: sa.Connection, filters: Filters, function_hashes: list[str] | None, *, eager_only: bool = False
) -> list[SignatureCost]:
    """Per function and signature (of ``function_hashes``; None: of every function):
    compiles, their cost in seconds, and the mean eager run time (with ``eager_only``,
    only the signatures that have one); over the whole store from the kept totals
    (rollup.py), else from the events."""
    if filters.is_empty():
        t = models.signature_totals
        kept = sa.select(
            t.c.function_hash,
            t.c.signature_hash,
            t.c.compiles,
            t.c.cost_seconds.label("seconds"),
            sa.case((t.c.eager_runs > 0, t.c.eager_seconds / t.c.eager_runs)).label("eager"),
        )
        if function_hashes is not None:
            kept = kept.where(t.c.function_hash.in_(function_hashes))
        if eager_only:
            kept = kept.where(t.c.eager_runs > 0)
        return _signature_costs(conn.execute(kept).all())
    return signature_costs_of_events(conn, filters, function_hashes, eager_only=eager_only)


def signature_costs_of_events(
    conn: sa.Connection, filters: Filters, function_hashes: list[str] | None, *, eager_only: bool = False
) -> list[SignatureCost]:
    """:func:`signature_costs` grouped from the events (under any filters)."""
    e = models.compile_events
    q = sa.select(
        e.c.function_hash,
        e.c.signature_hash,
        sa.func.sum(sa.case((e.c.compiled, 1), else_=0)).label("compiles"),
        sa.func.sum(cost_expr(e)).label("seconds"),
        sa.func.avg(e.c.eager_run_seconds).label("eager"),
    ).where(e.c.kind != Kind.STALE_CAPTURE)
    if function_hashes is not None:
        q = q.where(e.c.function_hash.in_(function_hashes))
    q = q.group_by(e.c.function_hash, e.c.signature_hash)
    if eager_only:
        q = q.having(sa.func.count(e.c.eager_run_seconds) > 0)
    q = filters.apply(e, q)
    return _signature_costs(conn.execute(q).all())


def _signature_costs(rows: Iterable[Any]) -> list[SignatureCost]:
    """Rows of (function_hash, signature_hash, compiles, seconds, eager) as signature costs."""
    return [
        SignatureCost(
            function_hash,
            signature_hash or "",
            int(compiles or 0),
            float(seconds or 0.0),
            float(eager) if eager is not None else None,
        )
        for function_hash, signature_hash, compiles, seconds, eager in rows
    ]


def _cost_points() -> tuple[sa.ColumnElement[Any], sa.ColumnElement[Any], tuple[sa.ColumnElement[bool], ...]]:
    """What a point of the cost model is, for the compiles and their fit alike: the
    program's size (HLO operations, else jaxpr equations), its lowering plus XLA compile
    seconds, and which compiles count. A compile an older writer stored with seconds out
    of bounds says nothing of its cost, and its squares would overflow PostgreSQL's fit
    (which raises where Python gives inf)."""
    e = models.compile_events
    size = sa.func.coalesce(e.c.hlo_ops, e.c.jaxpr_eqns)
    seconds = sa.func.coalesce(e.c.lower_seconds, 0.0) + sa.func.coalesce(e.c.compile_seconds, 0.0)
    counted = (
        e.c.compiled,
        size.is_not(None),
        size > 0,
        e.c.compile_seconds > 0,
        sa.func.coalesce(e.c.lower_seconds, 0.0).between(0.0, MAX_SECONDS),
        e.c.compile_seconds <= MAX_SECONDS,
    )
    return size, seconds, counted


def compile_sizes(conn: sa.Connection, filters: Filters) -> list[CompileSize]:
    """Each compile's program size (HLO operations, else jaxpr equations) and its lowering
    plus XLA compile seconds, for the cost model."""
    e = models.compile_events
    size, seconds, counted = _cost_points()
    q = filters.apply(e, sa.select(e.c.function_hash, size.label("size"), seconds.label("seconds")).where(*counted))
    return [CompileSize(r.function_hash, float(r.size), float(r.seconds)) for r in conn.execute(q)]


@dataclass(frozen=True, slots=True)
class SizeFit:
    """One function's compiles against program size: how many, over how many distinct
    sizes from ``min_size`` to ``max_size``, and the least-squares slopes of seconds on
    size (``slope``) and of log seconds on log size (``loglog_slope``), None where the
    size does not vary."""

    function_hash: str
    compiles: int
    distinct_sizes: int
    min_size: float
    max_size: float
    slope: float | None
    loglog_slope: float | None


def size_fits(conn: sa.Connection, filters: Filters) -> list[SizeFit]:
    """Per function, the fit of :func:`compile_sizes`: over the whole store from the kept
    totals per size (rollup.py); under filters aggregated in SQL on PostgreSQL
    (``regr_slope``; a fleet's store would ship every compile otherwise), elsewhere from
    the compiles."""
    if filters.is_empty():
        t = models.compile_size_totals
        kept = sa.select(t.c.function_hash, t.c.size, t.c.compiles, t.c.seconds, t.c.log_seconds)
        return size_fits_of_totals(conn.execute(kept.order_by(t.c.function_hash, t.c.size)))
    if conn.dialect.name != "postgresql":
        return size_fits_of(compile_sizes(conn, filters))
    e = models.compile_events
    raw_size, seconds, counted = _cost_points()
    size = raw_size.cast(sa.Float)
    q = filters.apply(
        e,
        sa.select(
            e.c.function_hash,
            sa.func.count().label("compiles"),
            sa.func.count(sa.distinct(size)).label("distinct_sizes"),
            sa.func.min(size).label("min_size"),
            sa.func.max(size).label("max_size"),
            sa.func.regr_slope(seconds, size).label("slope"),
            sa.func.regr_slope(sa.func.ln(seconds), sa.func.ln(size)).label("loglog_slope"),
        )
        .where(*counted)
        .group_by(e.c.function_hash),
    )
    return [
        SizeFit(
            r.function_hash,
            int(r.compiles),
            int(r.distinct_sizes),
            float(r.min_size),
            float(r.max_size),
            None if r.slope is None else float(r.slope),
            None if r.loglog_slope is None else float(r.loglog_slope),
        )
        for r in conn.execute(q)
    ]


class SizeTotal(NamedTuple):
    """A function's compiles at one program size: how many, their seconds and the sum of
    the seconds' logarithms (a row of ``compile_size_totals``)."""

    function_hash: str
    size: float
    compiles: int
    seconds: float
    log_seconds: float


def size_fits_of(compiles: Iterable[CompileSize]) -> list[SizeFit]:
    """:func:`size_fits` from the compiles themselves, summed per function and size as
    the kept rows are."""
    totals: dict[tuple[str, float], list[float]] = {}
    for c in compiles:
        total = totals.setdefault((c.function_hash, c.size), [0, 0.0, 0.0])
        total[0] += 1
        total[1] += c.seconds
        total[2] += math.log(c.seconds)
    return size_fits_of_totals(SizeTotal(h, size, int(n), y, log_y) for (h, size), (n, y, log_y) in totals.items())


def size_fits_of_totals(rows: Iterable[Any]) -> list[SizeFit]:
    """:func:`size_fits` from rows of :class:`SizeTotal`'s fields, grouped by function:
    the least-squares slopes, from sums centred on each function's mean size (as stable
    as over the compiles themselves)."""
    by_function: dict[str, list[tuple[float, int, float, float]]] = {}
    for r in rows:
        by_function.setdefault(r.function_hash, []).append(
            (float(r.size), int(r.compiles), float(r.seconds), float(r.log_seconds))
        )
    fits = []
    for function_hash, sizes in by_function.items():
        fits.append(
            SizeFit(
                function_hash,
                sum(n for _, n, _, _ in sizes),
                len(sizes),
                min(x for x, _, _, _ in sizes),
                max(x for x, _, _, _ in sizes),
                _slope_of_sums([(x, n, y) for x, n, y, _ in sizes]),
                _slope_of_sums([(math.log(x), n, log_y) for x, n, _, log_y in sizes]),
            )
        )
    return fits


def _slope_of_sums(points: list[tuple[float, int, float]]) -> float | None:
    """The least-squares slope of y on x from (x, how many points at x, their y summed),
    or None when x does not vary (one x: its mean, rounded, would make a variance of noise)."""
    if len(points) < 2:
        return None
    n = sum(count for _, count, _ in points)
    mean_x = sum(x * count for x, count, _ in points) / n
    mean_y = sum(y for _, _, y in points) / n
    var = sum(count * (x - mean_x) ** 2 for x, count, _ in points)
    if var == 0:
        return None
    return sum((x - mean_x) * (y - count * mean_y) for x, count, y in points) / var


def _uncached() -> tuple[sa.ColumnElement[bool], ...]:
    """The compiles whose XLA seconds count for regressions: compiled, timed within bounds,
    of a signature, and not served by the persistent cache (the write path marks the
    same ones' signatures stale: rollup.py)."""
    e = models.compile_events
    return (
        e.c.compiled,
        e.c.compile_seconds.is_not(None),
        e.c.compile_seconds <= MAX_SECONDS,  # a row an older writer took out of bounds: no figure
        e.c.signature_hash != "",
        e.c.persistent_cache_hit.is_not(True),
    )


UNCACHED = _uncached()


def uncached_compiles(
    conn: sa.Connection, signatures: Iterable[tuple[str, str]] | None = None
) -> list[UncachedCompile]:
    """XLA compile seconds of every compile that did not hit the persistent cache, with its
    run's start and JAX versions, for comparing runs; with ``signatures`` ((function,
    signature) pairs), only theirs."""
    e, r = models.compile_events, models.runs
    q = (
        sa.select(
            e.c.function_hash,
            e.c.signature_hash,
            e.c.run_id,
            e.c.compile_seconds,
            r.c.started_at,
            r.c.jax_version,
            r.c.jaxlib_version,
        )
        .join(r, r.c.run_id == e.c.run_id)
        .where(*UNCACHED)
    )
    if signatures is None:
        rows = conn.execute(q).all()
    else:
        wanted = sorted(set(signatures))
        pair = sa.tuple_(e.c.function_hash, e.c.signature_hash)
        rows = [row for chunk in in_chunks(wanted) for row in conn.execute(q.where(pair.in_(chunk)))]
    return [
        UncachedCompile(
            r.function_hash,
            r.signature_hash,
            r.run_id,
            float(r.compile_seconds),
            float(r.started_at),
            r.jax_version or "",
            r.jaxlib_version or "",
        )
        for r in rows
    ]


@dataclass(frozen=True, slots=True)
class SlowerCompile:
    """A function and signature whose median XLA compile seconds (missing the persistent
    cache) rose from one run that compiled it to the next (by the runs' start)."""

    function_hash: str
    signature_hash: str
    run_before: str
    run_after: str
    seconds_before: float
    seconds_after: float


@dataclass(frozen=True, slots=True)
class SlowerCompiles:
    """The rises found: the steepest first (``shown``, at most the limit asked for) and
    how many there are in all."""

    shown: list[SlowerCompile]
    total: int


def _steepest_first(found: SlowerCompile) -> tuple[bool, float, str, str, str]:
    """Largest ratio first (a rise from zero seconds has none and comes last), then by
    function, signature and later run, so a limit always keeps the same rises."""
    ratio = found.seconds_after / found.seconds_before if found.seconds_before > 0 else None
    return (ratio is None, -(ratio or 0.0), found.function_hash, found.signature_hash, found.run_after)


def slower_compiles(conn: sa.Connection, factor: float, min_seconds: float, limit: int | None = None) -> SlowerCompiles:
    """Every rise of ``factor`` times and ``min_seconds`` or more between consecutive runs
    (ties in start broken by run id), steepest first; with ``limit``, only that many are
    returned (``total`` counts them all). On PostgreSQL the medians, the pairs of runs,
    the order and the limit are found in SQL (a fleet's store holds a compile per
    signature and run: reading them all would ship the whole table, and a fleet's noise
    makes tens of thousands of rises); elsewhere from :func:`uncached_compiles`."""
    if conn.dialect.name == "postgresql":
        return _slower_compiles_in_sql(conn, factor, min_seconds, limit)
    found = sorted(slower_compiles_of(uncached_compiles(conn), factor, min_seconds), key=_steepest_first)
    return SlowerCompiles(found if limit is None else found[:limit], len(found))


def slower_compiles_of(rows: Iterable[UncachedCompile], factor: float, min_seconds: float) -> list[SlowerCompile]:
    """:func:`slower_compiles` from the compiles themselves (every rise, in no order)."""
    grouped: dict[tuple[str, str], dict[str, list[float]]] = {}
    started: dict[str, float] = {}
    for row in rows:
        grouped.setdefault((row.function_hash, row.signature_hash), {}).setdefault(row.run_id, []).append(
            row.compile_seconds
        )
        started[row.run_id] = row.run_started_at
    found = []
    for (function_hash, signature_hash), per_run in grouped.items():
        ordered = sorted(per_run, key=lambda run_id: (started[run_id], run_id))
        for before, after in zip(ordered, ordered[1:], strict=False):
            old, new = statistics.median(per_run[before]), statistics.median(per_run[after])
            if new >= factor * old and new - old >= min_seconds:
                found.append(SlowerCompile(function_hash, signature_hash, before, after, old, new))
    return found


def _slower_compiles_in_sql(
    conn: sa.Connection, factor: float, min_seconds: float, limit: int | None
) -> SlowerCompiles:
    paired = regression_pairs(factor, min_seconds).subquery()
    ratio = sa.case((paired.c.median_before > 0, paired.c.median / paired.c.median_before))
    q = (
        sa.select(paired, sa.func.count().over().label("total"))
        .order_by(ratio.desc().nulls_last(), paired.c.function_hash, paired.c.signature_hash, paired.c.run_id)
        .limit(limit)
    )
    rows = conn.execute(q).all()
    shown = [
        SlowerCompile(
            row.function_hash,
            row.signature_hash,
            row.run_before,
            row.run_id,
            float(row.median_before),
            float(row.median),
        )
        for row in rows
    ]
    if rows or limit != 0:
        return SlowerCompiles(shown, int(rows[0].total) if rows else 0)
    # A limit of zero returns no row to carry the count.
    count = sa.select(sa.func.count()).select_from(q.limit(None).order_by(None).subquery())
    return SlowerCompiles([], int(conn.execute(count).scalar_one()))


def regression_pairs(factor: float, min_seconds: float, signatures: sa.FromClause | None = None) -> sa.Select[Any]:
    """PostgreSQL's query of :func:`slower_compiles`' rises, in no order: function_hash,
    signature_hash, run_before, run_id (the later run), median_before and median; with
    ``signatures`` (a table of function_hash and signature_hash), only theirs."""
    e, r = models.compile_events, models.runs
    median = sa.func.percentile_cont(0.5).within_group(e.c.compile_seconds)
    per_run = (
        sa.select(e.c.function_hash, e.c.signature_hash, e.c.run_id, r.c.started_at, median.label("median"))
        .join(r, r.c.run_id == e.c.run_id)
        .where(*UNCACHED)
        .group_by(e.c.function_hash, e.c.signature_hash, e.c.run_id, r.c.started_at)
    )
    if signatures is not None:
        per_run = per_run.join(
            signatures,
            sa.and_(signatures.c.function_hash == e.c.function_hash, signatures.c.signature_hash == e.c.signature_hash),
        )
    ranked = per_run.subquery()
    by_signature = (ranked.c.function_hash, ranked.c.signature_hash)
    in_order = (ranked.c.started_at, ranked.c.run_id)
    paired = sa.select(
        ranked,
        sa.func.lag(ranked.c.run_id).over(partition_by=by_signature, order_by=in_order).label("run_before"),
        sa.func.lag(ranked.c.median).over(partition_by=by_signature, order_by=in_order).label("median_before"),
    ).subquery()
    return sa.select(
        paired.c.function_hash,
        paired.c.signature_hash,
        paired.c.run_before,
        paired.c.run_id,
        paired.c.median_before,
        paired.c.median,
    ).where(
        paired.c.run_before.is_not(None),
        paired.c.median >= factor * paired.c.median_before,
        paired.c.median - paired.c.median_before >= min_seconds,
    )


def run_versions(conn: sa.Connection, run_ids: Iterable[str]) -> dict[str, tuple[str, str]]:
    """Per run, the JAX and jaxlib versions it ran."""
    r = models.runs
    wanted = sorted(set(run_ids))
    found: dict[str, tuple[str, str]] = {}
    for chunk in in_chunks(wanted):
        q = sa.select(r.c.run_id, r.c.jax_version, r.c.jaxlib_version).where(r.c.run_id.in_(chunk))
        found.update((row.run_id, (row.jax_version or "", row.jaxlib_version or "")) for row in conn.execute(q))
    return found


def dominant_cause_rows(
    conn: sa.Connection, function_hash: str, filters: Filters, cause: str, limit: int = 500
) -> list[Recompile]:
    """The latest compiles of one cause, with their diffs and call sites (for the advice)."""
    e = models.compile_events
    q = filters.apply(
        e,
        sa.select(*_recompile_columns(e))
        .where(e.c.function_hash == function_hash, e.c.cause == cause, e.c.compiled)
        .order_by(e.c.timestamp.desc())
        .limit(limit),
    )
    return _recompiles(conn.execute(q))


@dataclass(frozen=True, slots=True)
class WarmupCompile:
    """A compile a run flagged as warm-up (not one made ahead of time by cachewatch.warmup),
    as the end of warm-up is judged from: where it came from and why it compiled."""

    run_id: str
    timestamp: float
    function_hash: str
    cause: str
    call_site: str | None
    module: str


def warmup_compiles_of(conn: sa.Connection, run_ids: list[str]) -> list[WarmupCompile]:
    """The runs' compiles flagged as warm-up, by run and time."""
    if not run_ids:
        return []
    e, f = models.compile_events, models.functions
    q = (
        sa.select(e.c.run_id, e.c.timestamp, e.c.function_hash, e.c.cause, e.c.call_site, f.c.module)
        .join(f, f.c.function_hash == e.c.function_hash)
        .where(e.c.run_id.in_(run_ids), e.c.compiled, e.c.warmup, e.c.kind != Kind.WARMUP.value)
        .order_by(e.c.run_id, e.c.timestamp)
    )
    return [
        WarmupCompile(r.run_id, float(r.timestamp), r.function_hash, r.cause, r.call_site, r.module or "")
        for r in conn.execute(q)
    ]


def count_warmup_compiles(conn: sa.Connection, run_id: str, *, before: float | None) -> int:
    """The run's compiles flagged as warm-up (made before ``before``, when given)."""
    e = models.compile_events
    query = sa.select(sa.func.count()).where(e.c.run_id == run_id, e.c.compiled, e.c.warmup)
    if before is not None:
        query = query.where(e.c.timestamp < before)
    return int(conn.execute(query).scalar_one())


@dataclass(frozen=True, slots=True)
class Flush:
    """One function's call statistics written at one time in one run: the calls counted
    since its previous statistics (written at ``previous``, None for its first), whether
    the cache served some of them (``served``: more calls than compiles of the function
    in that span), and ``since``: the run's previous collection of statistics (any
    function's; None before the first), after which every one of these calls was made.
    A collection reads every counter, so a function without a row in it had made no call
    by then: its next row counts calls made after that collection, not after its own
    previous row, which may be long before."""

    run_id: str
    function_hash: str
    timestamp: float
    previous: float | None
    calls: int
    served: bool
    since: float | None


@dataclass(frozen=True, slots=True)
class SeenWorking:
    """When a run was last seen working: ``compiled``, the end of its latest compile (None
    without one), and its latest statistics that counted calls the cache served: written
    at ``served_at``, of calls made after ``served_since`` (see :class:`Flush`)."""

    compiled: float | None
    served_at: float | None
    served_since: float | None

    def after(self, moment: float) -> float | None:
        """When the run was last seen working, from evidence of work after ``moment``
        only: a flush of served calls counts when all its calls came after ``moment``
        (its calls may have been made at any time since the previous collection, so a
        flush written late, at exit, says nothing of when they were made)."""
        heard = [self.compiled] if self.compiled is not None else []
        if self.served_at is not None and self.served_since is not None and self.served_since >= moment:
            heard.append(self.served_at)
        return max(heard) if heard else None


def last_seen_working(conn: sa.Connection, run_ids: list[str]) -> dict[str, SeenWorking]:
    """Per run, when it was last seen working (see :class:`SeenWorking`). The latest flush
    of served calls is the one with the latest ``since`` too (``since`` is the run's
    collection before it). Statistics written at exit that count only the calls that
    compiled say the process ended, not that the program went on. Judged in SQL, so a
    store of a fleet's runs never ships their statistics here."""
    e = models.compile_events
    compiled: dict[str, float] = {}
    ends = sa.select(e.c.run_id, sa.func.max(e.c.timestamp + cost_expr(e))).where(e.c.run_id.in_(run_ids), e.c.compiled)
    for run_id, last in conn.execute(ends.group_by(e.c.run_id)):
        if last is not None:
            compiled[run_id] = float(last)
    flushes = _flushes(run_ids).subquery()
    latest = sa.func.row_number().over(partition_by=flushes.c.run_id, order_by=flushes.c.timestamp.desc())
    ranked = sa.select(flushes.c.run_id, flushes.c.timestamp, flushes.c.since, latest.label("rank"))
    ranked_served = ranked.where(flushes.c.served).subquery()
    served = {
        run_id: (float(stamp), None if since is None else float(since))
        for run_id, stamp, since in conn.execute(
            sa.select(ranked_served.c.run_id, ranked_served.c.timestamp, ranked_served.c.since).where(
                ranked_served.c.rank == 1
            )
        )
    }
    return {
        run_id: SeenWorking(compiled.get(run_id), *served.get(run_id, (None, None)))
        for run_id in set(compiled) | set(served)
    }


# Earlier than any event's time stamp: the lower bound of a function's first flush span.
_BEFORE_ANY_TIME = sa.literal(-1e300, sa.Float)


def _flushes(run_ids: list[str], function_hashes: list[str] | None = None) -> sa.Select[Any]:
    """Per run, function and flush time: the calls the statistics counted (a flush writes
    one row per timed signature; the function's calls are on one of them), when the
    function's previous statistics were written, the run's previous collection
    (``since``), and whether the cache served some of the calls. The one place the rule
    "served" is written, for the run's last-seen time and the per-function spans alike.
    Rows that record a release of executables are written when the release happened, not
    by a collection: they count no calls and bound no span."""
    s, e = models.call_stats, models.compile_events
    collected = s.c.released_by.is_(None)
    counted = sa.select(s.c.run_id, s.c.function_hash, s.c.timestamp, sa.func.sum(s.c.calls).label("calls")).where(
        s.c.run_id.in_(run_ids), collected
    )
    if function_hashes is not None:
        counted = counted.where(s.c.function_hash.in_(function_hashes))
    per_flush = counted.group_by(s.c.run_id, s.c.function_hash, s.c.timestamp).subquery()
    previous = sa.func.lag(per_flush.c.timestamp).over(
        partition_by=(per_flush.c.run_id, per_flush.c.function_hash), order_by=per_flush.c.timestamp
    )
    # Every collection of the run (one time stamp, whichever functions it wrote).
    times = sa.select(s.c.run_id, s.c.timestamp).where(s.c.run_id.in_(run_ids), collected).distinct().subquery()
    collections = sa.select(
        times.c.run_id,
        times.c.timestamp,
        sa.func.lag(times.c.timestamp).over(partition_by=times.c.run_id, order_by=times.c.timestamp).label("since"),
    ).subquery()
    spans = (
        sa.select(per_flush, previous.label("previous"), collections.c.since)
        .join(
            collections,
            sa.and_(collections.c.run_id == per_flush.c.run_id, collections.c.timestamp == per_flush.c.timestamp),
        )
        .subquery()
    )
    compiled_in_span = (
        sa.select(sa.func.count())
        .where(
            e.c.function_hash == spans.c.function_hash,
            e.c.run_id == spans.c.run_id,
            e.c.compiled,
            e.c.timestamp <= spans.c.timestamp,
            # Both bounds on the time, so the span is one range of the index of the run's
            # events by function and time (an OR would scan the function's events up to it).
            e.c.timestamp > sa.func.coalesce(spans.c.previous, _BEFORE_ANY_TIME),
        )
        .scalar_subquery()
    )
    return sa.select(spans, (sa.func.coalesce(spans.c.calls, 0) > compiled_in_span).label("served"))


def flushes_of(conn: sa.Connection, run_ids: list[str], function_hashes: list[str]) -> list[Flush]:
    """The functions' call statistics in the runs, one per flush, in time order."""
    if not function_hashes:
        return []
    flushes = _flushes(run_ids, function_hashes).subquery()
    q = sa.select(flushes).order_by(flushes.c.run_id, flushes.c.function_hash, flushes.c.timestamp)
    return [
        Flush(
            r.run_id,
            r.function_hash,
            float(r.timestamp),
            None if r.previous is None else float(r.previous),
            int(r.calls or 0),
            bool(r.served),
            None if r.since is None else float(r.since),
        )
        for r in conn.execute(q)
    ]
