"""The reports: what the command line, the service and the dashboard all read.

Field names follow DESIGN.md: a report row carries ``name``, ``qualname``, ``module``,
``file``, ``line``, ``function_hash``, ``traces``, ``compiles``, ``recompiles``,
``causes``, ``compile_seconds``, ``calls``, ``run_seconds_est``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import orjson
import sqlalchemy as sa

from ..core import runtimes
from ..core.events import Cause, FunctionInfo, Kind, is_recompile
from ..core.figures import compile_share
from . import engine as enginemod
from . import models, rollup, settling
from .columns import EVENT_SELECT, EventRow, Filters, FunctionReport, cost_expr, event_rows_of


class SignatureRunTime(TypedDict):
    """The run time of one call of a signature (median; None if unknown), from ``samples``
    timed calls that stand for ``weight`` calls."""

    run_seconds: float | None
    samples: int
    weight: int


@dataclass(frozen=True)
class Totals:
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


def _tally_events(
    conn: sa.Connection, filters: Filters, function_hashes: list[str] | None
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """Per function: its event totals, its events by cause, and its recompiles by cause."""
    rows: dict[str, dict[str, Any]] = {}
    causes: dict[str, dict[str, int]] = {}
    recompile_causes: dict[str, dict[str, int]] = {}
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
        if is_recompile(kind, cause, compiled):
            row["recompiles"] += n
            again = recompile_causes.setdefault(function_hash, {})
            again[cause] = again.get(cause, 0) + n
        per = causes[function_hash]
        per[cause] = per.get(cause, 0) + n
    return rows, causes, recompile_causes


def function_report(
    conn: sa.Connection,
    filters: Filters = Filters(),
    function_hashes: list[str] | None = None,
    *,
    with_calls: bool = True,
) -> list[FunctionReport]:
    """One row per function, most compile seconds first (``with_calls=False``: without
    reading the call statistics, every row as if its function had no call recorded).

    ``compile_seconds`` is the whole cost of (re)compiling: trace + lowering + XLA
    compile. ``run_seconds_mean`` is the run time of one call (cachewatch.core.runtimes: the
    signatures' median sampled times, weighted by their calls); ``run_seconds_est`` is
    that times the calls; ``run_time_note`` says why a function has none.
    """
    rows, causes, recompile_causes = _tally_events(conn, filters, function_hashes)
    if not rows:
        return []
    stats = {r.function_hash: r for r in call_totals(conn, filters, function_hashes)} if with_calls else {}
    f = models.functions
    meta_q = sa.select(f)
    if function_hashes is not None or not filters.is_empty():
        meta_q = meta_q.where(f.c.function_hash.in_(list(rows)))
    meta = {r.function_hash: r for r in conn.execute(meta_q)}
    report = [
        _report_row(
            function_hash,
            meta.get(function_hash),
            row,
            (causes.get(function_hash, {}), recompile_causes.get(function_hash, {})),
            stats.get(function_hash),
        )
        for function_hash, row in rows.items()
    ]
    report.sort(key=lambda r: (-r["compile_seconds"], r["qualname"]))
    return report


def _report_row(
    function_hash: str,
    info: sa.Row[*tuple[Any, ...]] | None,
    totals: dict[str, Any],
    causes_of: tuple[dict[str, int], dict[str, int]],
    stat: CallTotals | None,
) -> FunctionReport:
    """A function's report row from its event totals (with its events' causes, and its
    recompiles' alone) and its call totals."""
    causes, recompile_causes = causes_of
    compile_seconds = float(totals["compile_seconds"] or 0.0)
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
        "recompile_causes": recompile_causes,
        "dominant_cause": _dominant(causes),
        "stale_captures": int(totals["stale_captures"] or 0),
        "compile_seconds": compile_seconds,
        **_call_fields(stat, compile_seconds, compiles),
        "first_compile": totals["first_compile"],
        "last_compile": totals["last_compile"],
    }


class _CallFields(TypedDict):
    """The fields of a report row that its function's call statistics give."""

    calls: int
    sampled_calls: int
    run_seconds_mean: float | None
    run_seconds_est: float | None
    compile_share: float | None
    run_time_note: str | None


def _call_fields(stat: CallTotals | None, compile_seconds: float, compiles: int) -> _CallFields:
    """The fields of a report row that come from the function's call statistics."""
    calls = stat.calls if stat else 0
    per_call = stat.run_seconds_per_call if stat else None
    run_est = per_call * calls if per_call is not None else None
    return {
        "calls": calls,
        "sampled_calls": stat.sampled_calls if stat else 0,
        "run_seconds_mean": per_call,
        "run_seconds_est": run_est,
        "compile_share": compile_share(compile_seconds, run_est),
        "run_time_note": run_time_note(stat, compiles),
    }


def with_calls(conn: sa.Connection, filters: Filters, rows: list[FunctionReport]) -> list[FunctionReport]:
    """Rows of :func:`function_report` read ``with_calls=False``, with their functions'
    call statistics under the same filters (only these functions' are read)."""
    if not rows:
        return rows
    stats = {r.function_hash: r for r in call_totals(conn, filters, [r["function_hash"] for r in rows])}
    return [
        {**row, **_call_fields(stats.get(row["function_hash"]), row["compile_seconds"], row["compiles"])}
        for row in rows
    ]


_NO_EVENTS = {
    "traces": 0,
    "compiles": 0,
    "recompiles": 0,
    "compile_seconds": 0.0,
    "stale_captures": 0,
    "first_compile": None,
    "last_compile": None,
}


def _dominant(causes: dict[str, int]) -> str | None:
    """The most frequent cause other than first_call (first_call when that is all)."""
    others = {c: n for c, n in causes.items() if c != Cause.FIRST_CALL}
    pool = others or causes
    return max(sorted(pool), key=lambda c: pool[c]) if pool else None


@dataclass(frozen=True)
class CallTotals:
    """A function's calls and what was timed of them (see cachewatch.core.runtimes)."""

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
    found, per_signature = _stat_sums(conn, filters, function_hashes)
    return [
        CallTotals(h, calls, sampled, seconds, runtimes.per_call_seconds(per_signature.get(h, {})), unsampled)
        for h, (calls, sampled, seconds, unsampled) in found.items()
    ]


def _stat_sums(
    conn: sa.Connection, filters: Filters, function_hashes: list[str] | None
) -> tuple[dict[str, list[Any]], dict[str, dict[str, runtimes.Buckets]]]:
    """The statistics rows under the filters, summed: per function its calls, sampled
    calls, sampled seconds and calls made while sampling was off; per function and
    signature the run-time buckets merged (rollup.row_buckets's rule for a row written
    before buckets were kept).

    A week of a fleet is tens of thousands of rows: plain tuples, the buckets' JSON text
    parsed here and merged straight into the signature's buckets (a Row mapping and a
    copy of the buckets per row cost more than the query itself)."""
    s = models.call_stats
    q = filters.apply(
        s,
        sa.select(
            s.c.function_hash,
            s.c.signature_hash,
            s.c.calls,
            s.c.sampled_calls,
            s.c.sampled_seconds,
            sa.cast(s.c.run_buckets, sa.Text),
            s.c.sample_every,
        ),
    )
    if function_hashes is not None:
        q = q.where(s.c.function_hash.in_(function_hashes))
    found: dict[str, list[Any]] = {}
    per_signature: dict[str, dict[str, runtimes.Buckets]] = {}
    loads = orjson.loads
    for function_hash, signature_hash, calls, sampled, seconds, text, every in enginemod.fetch_tuples(conn, q):
        calls, sampled, seconds = int(calls or 0), int(sampled or 0), float(seconds or 0.0)
        totals = found.get(function_hash)
        if totals is None:
            totals = found[function_hash] = [0, 0, 0.0, 0]
        totals[0] += calls
        totals[1] += sampled
        totals[2] += seconds
        if every == 0:
            totals[3] += calls
        data = loads(text) if text else None
        if not data:  # a row from before buckets were kept (rare): the rule's own spelling
            data = rollup.row_buckets({"sampled_calls": sampled, "sampled_seconds": seconds, "calls": calls})
            if not data:
                continue
        runtimes.merge(per_signature.setdefault(function_hash, {}).setdefault(signature_hash or "", {}), data)
    return found, per_signature


def signature_run_times(
    conn: sa.Connection, filters: Filters = Filters(), function_hashes: list[str] | None = None
) -> dict[str, dict[str, SignatureRunTime]]:
    """Per function and signature hash: the run time of one call (median), its samples,
    and the calls they stand for."""
    if filters.is_empty():
        return _kept_signature_run_times(conn, function_hashes)
    _, per_signature = _stat_sums(conn, filters, function_hashes)
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


def _kept_signature_run_times(
    conn: sa.Connection, function_hashes: list[str] | None
) -> dict[str, dict[str, SignatureRunTime]]:
    """:func:`signature_run_times` over the whole store: each signature's median kept
    (``run_time_medians``), found again for the signatures whose buckets grew since
    (settling.py); a reader that cannot write them finds every one from the buckets."""
    if not settling.settle(conn, settling.RUN_TIMES, _find_medians_again):
        return _run_times_of(conn.execute(_medians_of_buckets(function_hashes=function_hashes)).all())
    m = models.run_time_medians
    q = sa.select(m.c.function_hash, m.c.signature_hash, m.c.median_bucket, m.c.samples, m.c.weight)
    if function_hashes is not None:
        q = q.where(m.c.function_hash.in_(function_hashes))
    return _run_times_of(conn.execute(q).all())


def _find_medians_again(conn: sa.Connection, stale: sa.Table) -> None:
    m = models.run_time_medians
    conn.execute(sa.delete(m).where(settling.of_signatures(m, stale)))
    conn.execute(sa.insert(m).from_select([c.name for c in m.c], _medians_of_buckets(signatures=stale)))


def _medians_of_buckets(
    *, signatures: sa.Table | None = None, function_hashes: list[str] | None = None
) -> sa.Select[Any]:
    """Each signature's median bucket found in SQL from the kept buckets
    (runtimes.median_seconds's rule: the first bucket by which half the weight is
    reached, a sample standing for at least itself), with its samples and weight; only
    those of ``signatures`` (a table of them) or of ``function_hashes`` when given."""
    b = models.run_time_buckets
    weight = sa.case((b.c.weight > 0, b.c.weight), else_=b.c.samples)
    signature = (b.c.function_hash, b.c.signature_hash)
    inner = sa.select(
        b.c.function_hash,
        b.c.signature_hash,
        b.c.bucket,
        b.c.samples,
        b.c.weight,
        sa.func.sum(weight).over(partition_by=signature, order_by=b.c.bucket).label("reached"),
        sa.func.sum(weight).over(partition_by=signature).label("whole"),
    )
    if signatures is not None:
        inner = inner.where(settling.of_signatures(b, signatures))
    if function_hashes is not None:
        inner = inner.where(b.c.function_hash.in_(function_hashes))
    found = inner.subquery()
    return sa.select(
        found.c.function_hash,
        found.c.signature_hash,
        sa.func.min(sa.case((2 * found.c.reached >= found.c.whole, found.c.bucket))).label("median_bucket"),
        sa.func.sum(found.c.samples).label("samples"),
        sa.func.sum(found.c.weight).label("weight"),
    ).group_by(found.c.function_hash, found.c.signature_hash)


def _run_times_of(rows: Iterable[Any]) -> dict[str, dict[str, SignatureRunTime]]:
    """Rows of (function_hash, signature_hash, median_bucket, samples, weight) by function and signature."""
    out: dict[str, dict[str, SignatureRunTime]] = {}
    for function_hash, signature_hash, median, samples, weight in rows:
        samples = int(samples or 0)
        out.setdefault(function_hash, {})[signature_hash] = SignatureRunTime(
            run_seconds=runtimes.bucket_seconds(int(median)) if samples > 0 and median is not None else None,
            samples=samples,
            weight=int(weight or 0),
        )
    return out


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
    return event_rows_of(conn.execute(q))


def function_row(conn: sa.Connection, function_hash: str, filters: Filters) -> FunctionReport | None:
    """One function's report row (zeros when it has no events in the filters); None if unknown."""
    f = models.functions
    info = conn.execute(sa.select(f).where(f.c.function_hash == function_hash)).first()
    if info is None:
        return None
    rows = function_report(conn, filters, function_hashes=[function_hash])
    if rows:
        return rows[0]
    return _report_row(function_hash, info, _NO_EVENTS, ({}, {}), None)


def grouped(conn: sa.Connection, filters: Filters, *columns: str) -> list[tuple]:
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


def _runs_with_events(conn: sa.Connection, filters: Filters) -> int:
    """How many runs have an event under the filters.

    From each run's kept totals, whose first and last event times are exact (retention
    counts a pruned run's again): a run has an event since a time when its last one is
    not older, and before a time when its first one is older. Only with both bounds is
    each run that spans them looked up in its events ((run_id, timestamp) is indexed)."""
    t = models.run_totals
    runs_q = sa.select(sa.func.count()).select_from(t).where(t.c.events > 0)
    if filters.run_id:
        runs_q = runs_q.where(t.c.run_id == filters.run_id)
    if filters.run_ids is not None:
        runs_q = runs_q.where(t.c.run_id.in_(filters.run_ids))
    if filters.since is not None:
        runs_q = runs_q.where(t.c.last_ts >= filters.since)
    if filters.until is not None:
        runs_q = runs_q.where(t.c.first_ts < filters.until)
    if filters.since is not None and filters.until is not None:
        e = models.compile_events
        runs_q = runs_q.where(filters.apply(e, sa.select(e.c.id).where(e.c.run_id == t.c.run_id)).exists())
    return conn.execute(runs_q).scalar_one()


@dataclass
class _EventTally:
    """What the events under a view count: events, traces, compiles, recompiles and stale
    captures, events per cause, and compile seconds per function."""

    events: int = 0
    traces: int = 0
    compiles: int = 0
    recompiles: int = 0
    stale_captures: int = 0
    causes: dict[str, int] = field(default_factory=dict)
    compile_by_function: dict[str, float] = field(default_factory=dict)


def _event_tally(conn: sa.Connection, filters: Filters) -> _EventTally:
    """The events under the filters, counted: from the kept totals over the whole store."""
    tally = _EventTally()
    groups: Iterable[tuple[Any, ...]]
    if filters.is_empty():
        # The kept totals summed in SQL: a few dozen rows, and a cost per function.
        groups = ((None, *row) for row in grouped(conn, filters, "kind", "cause", "compiled"))
        tally.compile_by_function = {h: float(c or 0.0) for h, _, c in grouped(conn, filters, "function_hash")}
    else:  # one pass over the groups the report reads (per function, kind, cause, compiled)
        groups = (row[:6] for row in _event_groups(conn, filters))
    costs, causes = tally.compile_by_function, tally.causes
    for function_hash, kind, cause, compiled, n, cost in groups:
        n = int(n)
        tally.events += n
        if kind == Kind.STALE_CAPTURE:
            # Not a compile and no cost: the report keeps these out of the causes too.
            tally.stale_captures += n
            if function_hash is not None:
                costs.setdefault(function_hash, 0.0)
            continue
        causes[cause] = causes.get(cause, 0) + n
        if function_hash is not None:
            costs[function_hash] = costs.get(function_hash, 0.0) + float(cost or 0.0)
        if kind == Kind.TRACE:
            tally.traces += n
        if compiled:
            tally.compiles += n
        if is_recompile(kind, cause, compiled):
            tally.recompiles += n
    return tally


def totals(conn: sa.Connection, filters: Filters) -> Totals:
    """Totals over the store (or the filtered part of it): events, compiles by cause, cost,
    calls and run time (the summary without its storms)."""
    runs = _runs_with_events(conn, filters)
    tally = _event_tally(conn, filters)
    compile_by_function = tally.compile_by_function
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
        note = run_time_note(CallTotals("", calls, 0, 0.0, None, unsampled), tally.compiles)
    return Totals(
        functions=len(compile_by_function),
        runs=int(runs or 0),
        events=tally.events,
        traces=tally.traces,
        compiles=tally.compiles,
        recompiles=tally.recompiles,
        stale_captures=tally.stale_captures,
        causes=tally.causes,
        compile_seconds=compile_seconds,
        calls=calls,
        run_seconds_est=run_total if measured else None,
        compile_share=compile_share(measured_compile, run_total if measured else None),
        run_time_note=note,
    )


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


def latest_stale_captures(conn: sa.Connection, run_id: str, limit: int) -> list[str]:
    """The newest stale-capture explanation of each of up to ``limit`` functions of a run
    (a value a jitted function read at trace time that has changed since), newest first."""
    e = models.compile_events
    q = (
        sa.select(e.c.function_hash, e.c.explanation)
        .where(e.c.run_id == run_id, e.c.cause == Cause.STALE_CAPTURE)
        .order_by(e.c.timestamp.desc(), e.c.id.desc())
    )
    told: dict[str, str] = {}
    for row in conn.execute(q):
        told.setdefault(row.function_hash, row.explanation or "")
        if len(told) >= limit:
            break
    return list(told.values())
