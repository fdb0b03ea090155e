"""What whether a jit pays for itself is weighed on: each signature's compile and run cost,
program sizes against compile seconds (the cost model's points), and the uncached XLA
compile seconds that compile-time regressions compare between runs. Frozen records, read
from the store in one query each."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import sqlalchemy as sa

from ..core.events import MAX_SECONDS, Kind
from ..store import models
from ..store.columns import UNCACHED, Filters, cost_expr, in_chunks


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
