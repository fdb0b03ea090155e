"""Read queries shared by the command line, the service and the dashboard.

Reports and events come as typed dicts (``FunctionReport``, ``EventRow``, the shape the
API serialises); what analysis reasons over comes as frozen dataclasses.

Field names follow DESIGN.md: a report row carries ``name``, ``qualname``, ``module``,
``file``, ``line``, ``function_hash``, ``traces``, ``compiles``, ``recompiles``,
``causes``, ``compile_seconds``, ``calls``, ``run_seconds_est``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence, TypedDict, Unpack, cast

import sqlalchemy as sa

from .. import runtimes
from ..events import Cause, FunctionInfo, Kind, explain_cache_miss, short_name
from . import engine as enginemod
from . import models, rollup

# Every column of an event but the store's own row id.
EVENT_SELECT = [c for c in models.compile_events.c if c.name != "id"]


@dataclass(frozen=True)
class Filters:
    run_id: str | None = None
    since: float | None = None
    until: float | None = None

    def is_empty(self) -> bool:
        """No run and no time bound: the whole store, which the kept totals answer."""
        return not self.run_id and self.since is None and self.until is None

    def apply(self, table: sa.Table, query: sa.Select) -> sa.Select:
        if self.run_id:
            query = query.where(table.c.run_id == self.run_id)
        if self.since is not None:
            query = query.where(table.c.timestamp >= self.since)
        if self.until is not None:
            query = query.where(table.c.timestamp < self.until)
        return query

    def apply_to_runs(self, query: sa.Select) -> sa.Select:
        """The same filters for a query over runs: since/until bound the run's start."""
        r = models.runs
        if self.run_id:
            query = query.where(r.c.run_id == self.run_id)
        if self.since is not None:
            query = query.where(r.c.started_at >= self.since)
        if self.until is not None:
            query = query.where(r.c.started_at < self.until)
        return query


class FunctionReport(TypedDict):
    """One function's row of the report (the CLI's table, ``/api/v1/functions``, the dashboard)."""

    name: str
    qualname: str
    module: str
    file: str
    line: int
    function_hash: str
    traces: int
    compiles: int
    recompiles: int
    causes: dict[str, int]  # compiles and traces by cause
    dominant_cause: str | None  # the most frequent cause other than first_call
    stale_captures: int
    compile_seconds: float  # trace + lowering + XLA compile, over all compiles
    calls: int
    sampled_calls: int
    run_seconds_mean: float | None  # one call's run time; None: none was timed
    run_seconds_est: float | None  # that times the calls
    compile_share: float | None  # compile seconds over compile plus run seconds
    run_time_note: str | None  # why there is no run time
    first_compile: float | None
    last_compile: float | None


class EventRow(TypedDict, total=False):
    """One stored event as read back: the store's row id and every column of
    ``models.compile_events`` (the listings add the function's ``name`` and ``qualname``)."""

    id: int
    event_id: str
    function_hash: str
    run_id: str
    timestamp: float
    kind: str
    cause: str
    explanation: str
    diff: list[dict[str, Any]]
    signature: list[dict[str, Any]]
    signature_hash: str
    compiled: bool
    nested: bool
    trace_seconds: float | None
    lower_seconds: float | None
    compile_seconds: float | None
    persistent_cache_hit: bool | None
    cache_time_saved_seconds: float | None
    device: str | None
    backend: str | None
    call_site: str | None
    jaxpr_eqns: int | None
    flops: float | None
    bytes_accessed: float | None
    error: str | None
    thread: str | None
    hlo_ops: int | None
    compiled_run_seconds: float | None
    eager_run_seconds: float | None
    captured: dict[str, str] | None
    warmup: bool
    cache_key: dict[str, str] | None
    name: str
    qualname: str
    cache_miss: dict[str, Any] | None  # set by explain_cache_misses


class SignatureRunTime(TypedDict):
    """The run time of one call of a signature (median; None if unknown), from ``samples``
    timed calls that stand for ``weight`` calls."""

    run_seconds: float | None
    samples: int
    weight: int


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


class Totals(TypedDict):
    """The store (or its filtered part) in figures: the summary without its storms."""

    functions: int
    runs: int
    events: int
    traces: int
    compiles: int
    recompiles: int
    stale_captures: int
    causes: dict[str, int]
    compile_seconds: float
    calls: int
    run_seconds_est: float | None
    compile_share: float | None
    run_time_note: str | None


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


def _event_rows(result: Iterable[sa.Row[Unpack[tuple[Any, ...]]]]) -> list[EventRow]:
    return [cast(EventRow, dict(r._mapping)) for r in result]


def cost_expr(e: sa.Table) -> sa.ColumnElement:
    """An event's compile seconds as the report counts them: trace + lowering + XLA compile."""
    return (
        sa.func.coalesce(e.c.trace_seconds, 0.0)
        + sa.func.coalesce(e.c.lower_seconds, 0.0)
        + sa.func.coalesce(e.c.compile_seconds, 0.0)
    )


def function_report(
    conn: sa.Connection, filters: Filters = Filters(), function_hashes: list[str] | None = None
) -> list[FunctionReport]:
    """One row per function, most compile seconds first.

    ``compile_seconds`` is the whole cost of (re)compiling: trace + lowering + XLA
    compile. ``run_seconds_mean`` is the run time of one call (cachewatch.runtimes: the
    signatures' median sampled times, weighted by their calls); ``run_seconds_est`` is
    that times the calls; ``run_time_note`` says why a function has none.
    """
    rows: dict[str, dict[str, Any]] = {}
    causes: dict[str, dict[str, int]] = {}
    # Thousands of groups on a big store: plain tuples and locals keep this loop cheap.
    for function_hash, kind, cause, compiled, events, cost, first_ts, last_ts in _event_groups(
        conn, filters, function_hashes
    ):
        row = rows.get(function_hash)
        if row is None:
            row = rows[function_hash] = {**_NO_EVENTS, "first_compile": first_ts, "last_compile": last_ts}
            causes[function_hash] = {}
        else:
            if first_ts < row["first_compile"]:
                row["first_compile"] = first_ts
            if last_ts > row["last_compile"]:
                row["last_compile"] = last_ts
        n = int(events)
        if kind == Kind.STALE_CAPTURE:
            row["stale_captures"] += n
            continue
        if kind == Kind.TRACE:
            row["traces"] += n
        row["compile_seconds"] += float(cost or 0.0)
        if compiled:
            row["compiles"] += n
            if cause != Cause.FIRST_CALL:
                row["recompiles"] += n
        per = causes[function_hash]
        per[cause] = per.get(cause, 0) + n
    if not rows:
        return []
    stats = {r.function_hash: r for r in call_totals(conn, filters, function_hashes)}
    f = models.functions
    meta_q = sa.select(f)
    if function_hashes is not None or not filters.is_empty():
        meta_q = meta_q.where(f.c.function_hash.in_(list(rows)))
    meta = {r.function_hash: r for r in conn.execute(meta_q)}
    report = [
        _report_row(
            function_hash, meta.get(function_hash), row, causes.get(function_hash, {}), stats.get(function_hash)
        )
        for function_hash, row in rows.items()
    ]
    report.sort(key=lambda r: (-r["compile_seconds"], r["qualname"]))
    return report


def _report_row(
    function_hash: str,
    info: sa.Row[Unpack[tuple[Any, ...]]] | None,
    totals: dict[str, Any],
    causes: dict[str, int],
    stat: CallTotals | None,
) -> FunctionReport:
    """A function's report row from its event totals and its call totals."""
    calls = stat.calls if stat else 0
    per_call = stat.run_seconds_per_call if stat else None
    compile_seconds = float(totals["compile_seconds"] or 0.0)
    run_est = per_call * calls if per_call is not None else None
    compiles = int(totals["compiles"] or 0)
    return {
        "name": info.name if info else "",
        "qualname": info.qualname if info else "",
        "module": info.module if info else "",
        "file": info.file if info else "",
        "line": info.line if info else 0,
        "function_hash": function_hash,
        "traces": int(totals["traces"] or 0),
        "compiles": compiles,
        "recompiles": int(totals["recompiles"] or 0),
        "causes": causes,
        "dominant_cause": _dominant(causes),
        "stale_captures": int(totals["stale_captures"] or 0),
        "compile_seconds": compile_seconds,
        "calls": calls,
        "sampled_calls": stat.sampled_calls if stat else 0,
        "run_seconds_mean": per_call,
        "run_seconds_est": run_est,
        "compile_share": compile_share(compile_seconds, run_est),
        "run_time_note": run_time_note(stat, compiles),
        "first_compile": totals["first_compile"],
        "last_compile": totals["last_compile"],
    }


_NO_EVENTS = {
    "traces": 0,
    "compiles": 0,
    "recompiles": 0,
    "compile_seconds": 0.0,
    "stale_captures": 0,
    "first_compile": None,
    "last_compile": None,
}


def compile_share(compile_seconds: float, run_seconds: float | None) -> float | None:
    """Compile seconds over compile plus run seconds; None without a run time."""
    if run_seconds is None or compile_seconds + run_seconds <= 0:
        return None
    return compile_seconds / (compile_seconds + run_seconds)


def _dominant(causes: dict[str, int]) -> str | None:
    """The most frequent cause other than first_call (first_call when that is all)."""
    others = {c: n for c, n in causes.items() if c != Cause.FIRST_CALL}
    pool = others or causes
    return max(sorted(pool), key=lambda c: pool[c]) if pool else None


@dataclass(frozen=True)
class CallTotals:
    """A function's calls and what was timed of them (see cachewatch.runtimes)."""

    function_hash: str
    calls: int
    sampled_calls: int
    sampled_seconds: float
    run_seconds_per_call: float | None  # None: no call was timed
    unsampled_calls: int  # calls made while sampling was off


def call_totals(
    conn: sa.Connection, filters: Filters = Filters(), function_hashes: list[str] | None = None
) -> list[CallTotals]:
    """Per function: calls, samples, and the run time of one call (from the totals when unfiltered)."""
    if filters.is_empty():
        t = models.function_call_totals
        q = sa.select(
            t.c.function_hash,
            t.c.calls,
            t.c.sampled_calls,
            t.c.sampled_seconds,
            t.c.run_seconds_per_call,
            t.c.unsampled_calls,
        )
        if function_hashes is not None:
            q = q.where(t.c.function_hash.in_(function_hashes))
        return [
            CallTotals(
                h,
                int(calls or 0),
                int(sampled or 0),
                float(seconds or 0.0),
                None if per_call is None else float(per_call),
                int(unsampled or 0),
            )
            for h, calls, sampled, seconds, per_call, unsampled in enginemod.fetch_tuples(conn, q)
        ]
    found: dict[str, list] = {}
    per_signature: dict[str, dict[str, runtimes.Buckets]] = {}
    for row in _stat_rows(conn, filters, function_hashes):
        totals = found.setdefault(row["function_hash"], [0, 0, 0.0, 0])
        totals[0] += int(row["calls"] or 0)
        totals[1] += int(row["sampled_calls"] or 0)
        totals[2] += float(row["sampled_seconds"] or 0.0)
        totals[3] += int(row["calls"] or 0) if row["sample_every"] == 0 else 0
        buckets = rollup.row_buckets(row)
        if buckets:
            runtimes.merge(
                per_signature.setdefault(row["function_hash"], {}).setdefault(row["signature_hash"] or "", {}), buckets
            )
    return [
        CallTotals(h, calls, sampled, seconds, runtimes.per_call_seconds(per_signature.get(h, {})), unsampled)
        for h, (calls, sampled, seconds, unsampled) in found.items()
    ]


def _stat_rows(conn: sa.Connection, filters: Filters, function_hashes: list[str] | None) -> Sequence[sa.RowMapping]:
    s = models.call_stats
    q = filters.apply(
        s,
        sa.select(
            s.c.function_hash,
            s.c.signature_hash,
            s.c.calls,
            s.c.sampled_calls,
            s.c.sampled_seconds,
            s.c.run_buckets,
            s.c.sample_every,
        ),
    )
    if function_hashes is not None:
        q = q.where(s.c.function_hash.in_(function_hashes))
    return conn.execute(q).mappings().all()


def signature_run_times(
    conn: sa.Connection, filters: Filters = Filters(), function_hashes: list[str] | None = None
) -> dict[str, dict[str, SignatureRunTime]]:
    """Per function and signature hash: the run time of one call (median), its samples,
    and the calls they stand for."""
    per_signature: dict[str, dict[str, runtimes.Buckets]] = {}
    if filters.is_empty():
        b = models.run_time_buckets
        q = sa.select(b.c.function_hash, b.c.signature_hash, b.c.bucket, b.c.samples, b.c.weight)
        if function_hashes is not None:
            q = q.where(b.c.function_hash.in_(function_hashes))
        for function_hash, signature_hash, bucket, samples, weight in conn.execute(q):
            per_signature.setdefault(function_hash, {}).setdefault(signature_hash, {})[int(bucket)] = [
                int(samples),
                int(weight),
            ]
    else:
        for row in _stat_rows(conn, filters, function_hashes):
            buckets = rollup.row_buckets(row)
            if buckets:
                runtimes.merge(
                    per_signature.setdefault(row["function_hash"], {}).setdefault(row["signature_hash"] or "", {}),
                    buckets,
                )
    return {
        h: {
            sig: SignatureRunTime(
                run_seconds=runtimes.median_seconds(buckets),
                samples=sum(v[0] for v in buckets.values()),
                weight=sum(v[1] for v in buckets.values()),
            )
            for sig, buckets in sigs.items()
        }
        for h, sigs in per_signature.items()
    }


def run_time_note(stat: CallTotals | None, compiles: int) -> str | None:
    """Why a function has no run time (None when it has one)."""
    if stat is not None and stat.run_seconds_per_call is not None:
        return None
    calls = stat.calls if stat is not None else 0
    if not calls:
        return "never called"
    if calls <= compiles:  # every call compiled: there was no run to time
        return "called only while compiling"
    if stat is not None and stat.unsampled_calls:
        return "sampling off"
    return "no call timed yet"


def _event_groups(
    conn: sa.Connection, filters: Filters = Filters(), function_hashes: list[str] | None = None
) -> Sequence[tuple[Any, ...]]:
    """Event totals per (function, kind, cause, compiled): count, cost seconds, first and last time.

    Over the whole store they come from the totals the writers keep (a few rows per
    function); for one run or a time range, from the events through their indexes.
    """
    if filters.is_empty():
        t = models.function_totals
        q = sa.select(
            t.c.function_hash,
            t.c.kind,
            t.c.cause,
            t.c.compiled,
            t.c.events,
            t.c.cost_seconds,
            t.c.first_ts,
            t.c.last_ts,
        )
        if function_hashes is not None:
            return conn.execute(q.where(t.c.function_hash.in_(function_hashes))).all()
        return enginemod.fetch_tuples(conn, q)
    e = models.compile_events
    q = filters.apply(
        e,
        sa.select(
            e.c.function_hash,
            e.c.kind,
            e.c.cause,
            e.c.compiled,
            sa.func.count().label("events"),
            sa.func.sum(cost_expr(e)).label("cost_seconds"),
            sa.func.min(e.c.timestamp).label("first_ts"),
            sa.func.max(e.c.timestamp).label("last_ts"),
        ),
    )
    if function_hashes is not None:
        q = q.where(e.c.function_hash.in_(function_hashes))
    return conn.execute(q.group_by(e.c.function_hash, e.c.kind, e.c.cause, e.c.compiled)).all()


def find_functions(conn: sa.Connection, name: str) -> list[str]:
    """Hashes of functions whose name, qualified name or hash prefix matches ``name``."""
    f = models.functions
    q = sa.select(f.c.function_hash).where(
        sa.or_(f.c.name == name, f.c.qualname == name, f.c.function_hash.startswith(name))
    )
    return [r.function_hash for r in conn.execute(q)]


def list_events(
    conn: sa.Connection,
    filters: Filters = Filters(),
    function_hashes: list[str] | None = None,
    limit: int = 1000,
    after_id: int | None = None,
) -> list[EventRow]:
    """Compile events, oldest first, with the function's name; ``after_id`` pages on."""
    e, f = models.compile_events, models.functions
    q = filters.apply(
        e, sa.select(e.c.id, *EVENT_SELECT, f.c.name, f.c.qualname).join(f, f.c.function_hash == e.c.function_hash)
    )
    if function_hashes is not None:
        q = q.where(e.c.function_hash.in_(function_hashes))
    if after_id is not None:
        q = q.where(e.c.id > after_id)
    q = q.order_by(e.c.id).limit(limit)
    return _event_rows(conn.execute(q))


def explain_cache_misses(conn: sa.Connection, rows: list[EventRow]) -> list[EventRow]:
    """Set ``cache_miss`` on event rows that missed the persistent cache: against the
    latest earlier event of the same function and signature in another run that asked
    the cache, the parts of the key that changed (None where there is none to compare)."""
    e = models.compile_events
    for row in rows:
        row["cache_miss"] = None
        key = row.get("cache_key")
        if row.get("persistent_cache_hit") is not False or not key or not row.get("signature_hash"):
            continue
        earlier = conn.execute(
            sa.select(e.c.run_id, e.c.persistent_cache_hit, e.c.cache_key)
            .where(
                e.c.function_hash == row["function_hash"],
                e.c.timestamp < row["timestamp"],
                e.c.signature_hash == row["signature_hash"],
                e.c.run_id != row["run_id"],
                e.c.persistent_cache_hit.is_not(None),
            )
            .order_by(e.c.timestamp.desc())
            .limit(1)
        ).first()
        if earlier is None or not earlier.cache_key:
            continue
        row["cache_miss"] = explain_cache_miss(
            earlier.cache_key, key, earlier_run=earlier.run_id, earlier_hit=earlier.persistent_cache_hit
        )
    return rows


# ------------------------------------------------------------------ what analysis reasons over


@dataclass(frozen=True, slots=True)
class Recompile:
    """One compile as the advice and the storm finder read it."""

    function_hash: str
    run_id: str
    timestamp: float
    cause: str
    diff: list[dict[str, Any]] | None
    call_site: str | None


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


_RECOMPILE_COLUMNS = ("function_hash", "run_id", "timestamp", "cause", "diff", "call_site")


def _recompiles(result: Iterable[sa.Row[Unpack[tuple[Any, ...]]]]) -> list[Recompile]:
    return [Recompile(r.function_hash, r.run_id, float(r.timestamp), r.cause, r.diff, r.call_site) for r in result]


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


def steady_recompiles(
    conn: sa.Connection, filters: Filters, function_hashes: list[str] | None = None
) -> list[Recompile]:
    """Recompiles made after warm-up, by function, run and time: what storms are made of."""
    e = models.compile_events
    q = filters.apply(
        e,
        sa.select(*(e.c[name] for name in _RECOMPILE_COLUMNS))
        .where(e.c.compiled, e.c.cause != Cause.FIRST_CALL.value, sa.not_(e.c.warmup))
        .order_by(e.c.function_hash, e.c.run_id, e.c.timestamp),
    )
    if function_hashes is not None:
        q = q.where(e.c.function_hash.in_(function_hashes))
    return _recompiles(conn.execute(q))


def signature_costs(conn: sa.Connection, filters: Filters, function_hashes: list[str]) -> list[SignatureCost]:
    """Per function and signature: compiles, their cost in seconds, and the mean eager run time."""
    e = models.compile_events
    q = filters.apply(
        e,
        sa.select(
            e.c.function_hash,
            e.c.signature_hash,
            sa.func.sum(sa.case((e.c.compiled, 1), else_=0)).label("compiles"),
            sa.func.sum(cost_expr(e)).label("seconds"),
            sa.func.avg(e.c.eager_run_seconds).label("eager"),
        )
        .where(e.c.function_hash.in_(function_hashes), e.c.kind != Kind.STALE_CAPTURE)
        .group_by(e.c.function_hash, e.c.signature_hash),
    )
    return [
        SignatureCost(
            r.function_hash,
            r.signature_hash or "",
            int(r.compiles or 0),
            float(r.seconds or 0.0),
            float(r.eager) if r.eager is not None else None,
        )
        for r in conn.execute(q)
    ]


def compile_sizes(conn: sa.Connection, filters: Filters) -> list[CompileSize]:
    """Each compile's program size (HLO operations, else jaxpr equations) and its lowering
    plus XLA compile seconds, for the cost model."""
    e = models.compile_events
    size = sa.func.coalesce(e.c.hlo_ops, e.c.jaxpr_eqns)
    q = filters.apply(
        e,
        sa.select(
            e.c.function_hash,
            size.label("size"),
            (sa.func.coalesce(e.c.lower_seconds, 0.0) + sa.func.coalesce(e.c.compile_seconds, 0.0)).label("seconds"),
        ).where(e.c.compiled, size.is_not(None), size > 0, e.c.compile_seconds > 0),
    )
    return [CompileSize(r.function_hash, float(r.size), float(r.seconds)) for r in conn.execute(q)]


def uncached_compiles(conn: sa.Connection) -> list[UncachedCompile]:
    """XLA compile seconds of every compile that did not hit the persistent cache, with its
    run's start and JAX versions, for comparing runs."""
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
        .where(
            e.c.compiled,
            e.c.compile_seconds.is_not(None),
            e.c.signature_hash != "",
            e.c.persistent_cache_hit.is_not(True),
        )
    )
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
        for r in conn.execute(q)
    ]


# ------------------------------------------------------------------ the service's listings


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
    report of every function that matches and cuts it.
    """
    key = sort.lstrip("-")
    if key not in SORT_KEYS:
        raise ValueError(f"cannot sort functions by {sort!r}")
    descending = sort.startswith("-")
    if not filters.is_empty() or key in ("name", "dominant_cause"):
        rows = _matching(function_report(conn, filters), q, cause)
        rows = _sorted_rows(rows, key, descending)
        return rows[offset : offset + limit], len(rows)
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
    by_hash = {r["function_hash"]: r for r in function_report(conn, filters, function_hashes=hashes)} if hashes else {}
    return [by_hash[h] for h in hashes if h in by_hash], int(total)


def _listing(q: str | None, cause: str | None, key: str) -> sa.Select[Any]:
    """Per function, from the kept totals: its hash, qualified name and the sort ``key``,
    computed in SQL (only what that key needs is aggregated or joined)."""
    t, f, c = models.function_totals, models.functions, models.function_call_totals
    compiled_events = sa.case((t.c.compiled, t.c.events), else_=0)
    measures: dict[str, sa.ColumnElement[Any]] = {
        "compile_seconds": sa.func.sum(sa.case((t.c.kind != Kind.STALE_CAPTURE, t.c.cost_seconds), else_=0.0)),
        "compiles": sa.func.sum(compiled_events),
        "recompiles": sa.func.sum(sa.case((t.c.cause != Cause.FIRST_CALL, compiled_events), else_=0)),
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
        {cause for kind, cause, _, _ in _grouped(conn, filters, "kind", "cause") if kind != Kind.STALE_CAPTURE}
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
    return _event_rows(conn.execute(q.order_by(e.c.timestamp, e.c.id).limit(limit)))


def function_exists(conn: sa.Connection, function_hash: str) -> bool:
    f = models.functions
    return conn.execute(sa.select(f.c.function_hash).where(f.c.function_hash == function_hash)).first() is not None


def function_row(conn: sa.Connection, function_hash: str, filters: Filters) -> FunctionReport | None:
    """One function's report row (zeros when it has no events in the filters); None if unknown."""
    f = models.functions
    info = conn.execute(sa.select(f).where(f.c.function_hash == function_hash)).first()
    if info is None:
        return None
    rows = function_report(conn, filters, function_hashes=[function_hash])
    if rows:
        return rows[0]
    return _report_row(function_hash, info, _NO_EVENTS, {}, None)


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
        q = filters.apply(e, sa.select(*keys, sa.func.count(), sa.func.sum(cost_expr(e))))
    return [tuple(row) for row in conn.execute(q.group_by(*keys))]


def totals(conn: sa.Connection, filters: Filters) -> Totals:
    """Totals over the store (or the filtered part of it): events, compiles by cause, cost,
    calls and run time (the summary without its storms)."""
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
    events = traces = compiles = recompiles = stale_captures = 0
    for kind, cause, compiled, n, _ in _grouped(conn, filters, "kind", "cause", "compiled"):
        n = int(n)
        if kind == Kind.STALE_CAPTURE:
            # Not a compile: the report keeps these out of the causes too.
            stale_captures += n
        else:
            causes[cause] = causes.get(cause, 0) + n
        events += n
        traces += n if kind == Kind.TRACE else 0
        if compiled:
            compiles += n
            if cause != Cause.FIRST_CALL:
                recompiles += n
    compile_by_function = {
        function_hash: float(cost or 0.0) for function_hash, _, cost in _grouped(conn, filters, "function_hash")
    }
    calls = 0
    run_total = 0.0
    measured_compile = 0.0
    measured = False
    unsampled = 0
    for row in call_totals(conn, filters):
        calls += row.calls
        unsampled += row.unsampled_calls
        if row.run_seconds_per_call is not None:
            measured = True
            run_total += row.run_seconds_per_call * row.calls
            measured_compile += compile_by_function.get(row.function_hash, 0.0)
    compile_seconds = sum(compile_by_function.values())
    note = None
    if not measured:
        note = run_time_note(CallTotals("", calls, 0, 0.0, None, unsampled), compiles)
    return {
        "functions": len(compile_by_function),
        "runs": int(runs or 0),
        "events": events,
        "traces": traces,
        "compiles": compiles,
        "recompiles": recompiles,
        "stale_captures": stale_captures,
        "causes": causes,
        "compile_seconds": compile_seconds,
        "calls": calls,
        "run_seconds_est": run_total if measured else None,
        "compile_share": compile_share(measured_compile, run_total if measured else None),
        "run_time_note": note,
    }


# ------------------------------------------------------------------ the dashboard's charts and pages


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
) -> CompilesOverTime:
    """Compiles per time bucket and cause, in buckets as wide as the span shown asks."""
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
    rows = [
        TimelinePoint(
            timestamp=float(r.timestamp),
            cause=r.cause,
            kind=r.kind,
            compiled=bool(r.compiled),
            call_site=r.call_site,
            seconds=float(r.seconds or 0.0),
        )
        for r in conn.execute(q)
    ]
    rows.reverse()
    return rows


def call_sites(conn: sa.Connection, function_hash: str, filters: Filters) -> list[CallSite]:
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
        CallSite(
            call_site=r.call_site,
            events=int(r.events),
            recompiles=int(r.recompiles or 0),
            seconds=float(r.seconds or 0.0),
            last=float(r.last),
        )
        for r in conn.execute(q)
    ]
    rows.sort(key=lambda r: (-r["events"], r["call_site"] or ""))
    return rows


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
    return _event_rows(conn.execute(q))


def dominant_cause_rows(
    conn: sa.Connection, function_hash: str, filters: Filters, cause: str, limit: int = 500
) -> list[Recompile]:
    """The latest compiles of one cause, with their diffs and call sites (for the advice)."""
    e = models.compile_events
    q = filters.apply(
        e,
        sa.select(*(e.c[name] for name in _RECOMPILE_COLUMNS))
        .where(e.c.function_hash == function_hash, e.c.cause == cause, e.c.compiled)
        .order_by(e.c.timestamp.desc())
        .limit(limit),
    )
    return _recompiles(conn.execute(q))


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


def _run_choice(row: sa.Row[Unpack[tuple[Any, ...]]]) -> RunChoice:
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
