"""Totals kept beside the events, so summaries never scan every event.

Every write of compile events adds what it inserted (only that: a retried batch adds
nothing) to small tables: per function, kind, cause and compiled flag; per function
and cost bucket (the histogram of ``/metrics``); per run; per function alone; per
function and signature (the verdicts' break-even per signature); per function and
program size (the cost model's fits); and for
the whole store, per cause, per cost bucket and per hour and cause (the overview's chart). The report, the service's summary,
runs page and ``/metrics`` read these few thousand rows instead of millions of
events; queries bounded in time or to one run read the events through their indexes.
"""

from __future__ import annotations

import bisect
import collections
import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from ..core import runtimes
from ..core.events import MAX_SECONDS, Cause, Kind, is_recompile, timestamp_ok
from . import engine as enginemod
from . import models
from .columns import UNCACHED, in_chunks

# Upper bounds (seconds) of trace + lowering + compile per event: from a cached retrace
# of a tiny function to a large model's XLA compile. The last bucket is unbounded.
COST_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)

STALE_KIND = Kind.STALE_CAPTURE
FIRST_CALL = Cause.FIRST_CALL
# Columns the upsert replaces instead of adding to.
_LATEST = frozenset({"run_seconds_per_call"})


def cost_bucket(cost: float) -> int:
    """Index of the first bucket whose upper bound holds ``cost`` (len(COST_BUCKETS) for +Inf)."""
    return bisect.bisect_left(COST_BUCKETS, cost)


def deltas(
    events: Iterable[Sequence[Any]],
    columns: Sequence[str] = models.EVENT_COLUMNS,
) -> dict[sa.Table, list[dict[str, Any]]]:
    """The rows to add to each totals table for a set of newly stored events (tuples of
    ``columns``).

    The per-event loop is written out per table rather than through a generic merge: it
    runs for every event the store takes. The coarser totals (per function alone, and
    store-wide) are then summed from its few rows.
    """
    events = list(events)
    functions, buckets, runs, identical = _per_event_totals(events, columns)
    per_function, causes, store_buckets = _coarse_totals(functions, buckets, identical)
    return {
        models.function_totals: list(functions.values()),
        models.function_cost_buckets: list(buckets.values()),
        models.run_totals: list(runs.values()),
        models.function_compile_totals: list(per_function.values()),
        models.cause_totals: list(causes.values()),
        models.cost_bucket_totals: list(store_buckets.values()),
        models.compile_hour_totals: _hour_totals(events, columns),
        models.signature_totals: _signature_totals(events, columns),
        models.stale_regressions: _stale_regressions(events, columns),
        models.stale_storms: _stale_runs(events, columns),
        models.compile_size_totals: _size_totals(events, columns),
    }


HOUR = 3600


def hour_of(timestamp: float) -> int:
    """The start of the hour a time stamp falls in (epoch seconds): the key of ``compile_hour_totals``."""
    return int(timestamp // HOUR) * HOUR


def _hour_totals(events: Iterable[Sequence[Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    """Compiles per hour and cause among the events; a time stamp outside the store's
    bounds (a row an older writer took) is in no hour."""
    ts_at, kind_at, cause_at, compiled_at = (columns.index(name) for name in ("timestamp", "kind", "cause", "compiled"))
    counts: dict[tuple[int, str], list[int]] = {}
    for e in events:
        if e[compiled_at] and timestamp_ok(e[ts_at]):
            key = (hour_of(float(e[ts_at])), e[cause_at])
            found = counts.setdefault(key, [0, 0])
            found[0] += 1
            found[1] += is_recompile(e[kind_at], e[cause_at], True)
    return [{"hour": hour, "cause": cause, "compiles": n, "recompiles": r} for (hour, cause), (n, r) in counts.items()]


def _signature_totals(events: Iterable[Sequence[Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    """Compiles, cost seconds and eager run times per function and signature among the
    events (stale captures left out); none from a store read before these columns were
    kept (a migration's rebuild of older totals)."""
    if "eager_run_seconds" not in columns:
        return []
    hash_at, sig_at, kind_at, compiled_at, eager_at, trace_at, lower_at, compile_at = (
        columns.index(name)
        for name in (
            "function_hash",
            "signature_hash",
            "kind",
            "compiled",
            "eager_run_seconds",
            "trace_seconds",
            "lower_seconds",
            "compile_seconds",
        )
    )
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for e in events:
        if e[kind_at] == STALE_KIND:
            continue
        key = (e[hash_at], e[sig_at] or "")
        row = found.get(key)
        if row is None:
            row = found[key] = {
                "function_hash": key[0],
                "signature_hash": key[1],
                "compiles": 0,
                "cost_seconds": 0.0,
                "eager_seconds": 0.0,
                "eager_runs": 0,
            }
        row["compiles"] += bool(e[compiled_at])
        row["cost_seconds"] += float(e[trace_at] or 0.0) + float(e[lower_at] or 0.0) + float(e[compile_at] or 0.0)
        if e[eager_at] is not None:
            row["eager_seconds"] += float(e[eager_at])
            row["eager_runs"] += 1
    return list(found.values())


_SIZE_FIELDS = ("function_hash", "compiled", "hlo_ops", "jaxpr_eqns", "lower_seconds", "compile_seconds")


def _size_totals(events: Iterable[Sequence[Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    """Per function and program size, the compiles the cost model counts (as
    payoff.cost_reads._cost_points does: a size above zero, HLO operations else jaxpr equations,
    seconds within bounds), their seconds and the sum of the seconds' logarithms."""
    if not set(_SIZE_FIELDS) <= set(columns):
        return []
    hash_at, compiled_at, hlo_at, eqns_at, lower_at, compile_at = (columns.index(name) for name in _SIZE_FIELDS)
    found: dict[tuple[str, float], dict[str, Any]] = {}
    for e in events:
        size = e[hlo_at] if e[hlo_at] is not None else e[eqns_at]
        lower, compile_seconds = e[lower_at] or 0.0, e[compile_at]
        if not e[compiled_at] or size is None or size <= 0 or compile_seconds is None:
            continue
        if not (0.0 < compile_seconds <= MAX_SECONDS and 0.0 <= lower <= MAX_SECONDS):
            continue
        seconds = lower + compile_seconds
        key = (e[hash_at], float(size))
        row = found.get(key)
        if row is None:
            row = found[key] = {
                "function_hash": key[0],
                "size": key[1],
                "compiles": 0,
                "seconds": 0.0,
                "log_seconds": 0.0,
            }
        row["compiles"] += 1
        row["seconds"] += seconds
        row["log_seconds"] += math.log(seconds)
    return list(found.values())


UNCACHED_FIELDS = ("function_hash", "signature_hash", "compiled", "compile_seconds", "persistent_cache_hit")


def _stale_regressions(events: Iterable[Sequence[Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    """A mark per function and signature for each of its uncached compiles among the
    events (as payoff/cost_reads.py counts them): their kept regressions are out of date.
    None from a read that lacks these columns (a rebuild marks every signature itself)."""
    if not set(UNCACHED_FIELDS) <= set(columns):
        return []
    hash_at, sig_at, compiled_at, seconds_at, hit_at = (columns.index(name) for name in UNCACHED_FIELDS)
    return _marks(
        (e[hash_at], e[sig_at])
        for e in events
        if e[compiled_at]
        and e[sig_at]
        and e[seconds_at] is not None
        and e[seconds_at] <= MAX_SECONDS
        and e[hit_at] is not True
    )


def _stale_runs(events: Iterable[Sequence[Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    """A mark per run for each of its events: its kept bursts are out of date (store
    reads that lack the run leave it to a rebuild, which marks every run itself)."""
    if "run_id" not in columns:
        return []
    run_at = columns.index("run_id")
    return _run_marks(e[run_at] for e in events)


def _run_marks(run_ids: Iterable[str]) -> list[dict[str, Any]]:
    return _marks(((run_id,) for run_id in run_ids), ("run_id",))


def mark_runs_stale(conn: sa.Connection, run_ids: Iterable[str]) -> None:
    """Mark these runs' kept bursts stale, and their jobs' rank comparisons (their events
    pruned, or the runs themselves)."""
    run_ids = list(run_ids)
    add(conn, {models.stale_storms: _run_marks(run_ids)})
    mark_jobs_stale(conn, run_ids)


def mark_jobs_stale(conn: sa.Connection, run_ids: Iterable[str]) -> None:
    """Mark the jobs of these runs stale: their kept rank comparisons are found again at
    the next read (fleet/fleet_reads.py). Runs without a job are never kept, so never marked."""
    r = models.runs
    jobs: list[str] = []
    for chunk in in_chunks(sorted(set(run_ids))):
        q = sa.select(r.c.job).where(r.c.run_id.in_(chunk), r.c.job != "").distinct()
        jobs.extend(conn.execute(q).scalars())
    add(conn, {models.stale_jobs: _marks(((job,) for job in set(jobs)), ("job",))})


def _marks(
    keys: Iterable[tuple[str, ...]], columns: tuple[str, ...] = ("function_hash", "signature_hash")
) -> list[dict[str, Any]]:
    """Rows of a stale table (settling.py): a mark per time each key (a function and
    signature, or a run) came."""
    counted = collections.Counter(keys)
    return [{**dict(zip(columns, key, strict=True)), "marks": n} for key, n in counted.items()]


def mark_regressions_stale(conn: sa.Connection, events: Iterable[Sequence[Any]], columns: Sequence[str]) -> None:
    """Mark the signatures of these events' uncached compiles stale (events pruned: their
    kept regressions are found again without them)."""
    add(conn, {models.stale_regressions: _stale_regressions(events, columns)})


def mark_all_kept_stale(conn: sa.Connection) -> None:
    """Every signature with an uncached compile, every one with run-time buckets, every
    run and every job marked stale, and nothing kept of them: the next reader finds their
    regressions, median run times, bursts and rank comparisons all again (after a bulk
    load, or a rebuild)."""
    e, b = models.compile_events, models.run_time_buckets
    columns = ["function_hash", "signature_hash", "marks"]
    for kept, stale, counted in (
        (
            models.compile_regressions,
            models.stale_regressions,
            sa.select(e.c.function_hash, e.c.signature_hash, sa.func.count())
            .where(*UNCACHED)
            .group_by(e.c.function_hash, e.c.signature_hash),
        ),
        (
            models.run_time_medians,
            models.stale_run_times,
            sa.select(b.c.function_hash, b.c.signature_hash, sa.func.count()).group_by(
                b.c.function_hash, b.c.signature_hash
            ),
        ),
    ):
        conn.execute(sa.delete(kept))
        conn.execute(sa.delete(stale))
        conn.execute(sa.insert(stale).from_select(columns, counted))
    conn.execute(sa.delete(models.kept_counts))  # none kept: each is counted again when found
    for kept in (
        models.kept_burst_events,
        models.kept_bursts,
        models.stale_storms,
        models.kept_rank_disagreements,
        models.kept_rank_totals,
        models.stale_jobs,
    ):
        conn.execute(sa.delete(kept))
    r = models.runs
    conn.execute(sa.insert(models.stale_storms).from_select(["run_id", "marks"], sa.select(r.c.run_id, sa.literal(1))))
    jobs = sa.select(r.c.job, sa.literal(1)).where(r.c.job != "").distinct()
    conn.execute(sa.insert(models.stale_jobs).from_select(["job", "marks"], jobs))


_EVENT_FIELDS = (
    "function_hash",
    "run_id",
    "kind",
    "cause",
    "compiled",
    "timestamp",
    "trace_seconds",
    "lower_seconds",
    "compile_seconds",
)


def _per_event_totals(
    events: Iterable[Sequence[Any]], columns: Sequence[str]
) -> tuple[dict[tuple, dict], dict[tuple, dict], dict[str, dict], dict[str, float]]:
    """The totals kept per (function, kind, cause, compiled), per (function, cost bucket)
    and per run, and the seconds each function spent on compiles identical to an earlier
    one: one pass over the events, the loop every stored event goes through."""
    hash_at, run_at, kind_at, cause_at, compiled_at, ts_at, trace_at, lower_at, compile_at = (
        columns.index(name) for name in _EVENT_FIELDS
    )
    # A store read before the column existed (a migration's rebuild) has no identical_to.
    identical_at = columns.index("identical_to") if "identical_to" in columns else None
    identical: dict[str, float] = {}
    functions: dict[tuple, dict] = {}
    buckets: dict[tuple, dict] = {}
    runs: dict[str, dict] = {}
    for e in events:
        cost = float(e[trace_at] or 0.0) + float(e[lower_at] or 0.0) + float(e[compile_at] or 0.0)
        ts = e[ts_at]
        compiled = bool(e[compiled_at])
        function_hash = e[hash_at]
        key = (function_hash, e[kind_at], e[cause_at], compiled)
        row = functions.get(key)
        if row is None:
            functions[key] = _function_row(key, cost, ts)
        else:
            row["events"] += 1
            row["cost_seconds"] += cost
            # Comparisons, not min()/max(): this runs for every event stored.
            if ts < row["first_ts"]:
                row["first_ts"] = ts
            elif ts > row["last_ts"]:
                row["last_ts"] = ts
        if identical_at is not None and e[identical_at] is not None and key[2] != FIRST_CALL:
            identical[function_hash] = identical.get(function_hash, 0.0) + cost
        is_compile_or_trace = key[1] != STALE_KIND
        if is_compile_or_trace:
            bucket = cost_bucket(cost)
            row = buckets.get((function_hash, bucket))
            if row is None:
                buckets[(function_hash, bucket)] = {"function_hash": function_hash, "bucket": bucket, "events": 1}
            else:
                row["events"] += 1
        run_cost = cost if is_compile_or_trace else 0.0
        run_id = e[run_at]
        row = runs.get(run_id)
        if row is None:
            runs[run_id] = _run_row(run_id, compiled, run_cost, ts)
        else:
            row["events"] += 1
            row["compiles"] += compiled
            row["cost_seconds"] += run_cost
            if ts < row["first_ts"]:
                row["first_ts"] = ts
            elif ts > row["last_ts"]:
                row["last_ts"] = ts
    return functions, buckets, runs, identical


def _function_row(key: tuple, cost: float, ts: Any) -> dict[str, Any]:
    """A ``function_totals`` row for the first event of its key (function, kind, cause, compiled)."""
    function_hash, kind, cause, compiled = key
    return {
        "function_hash": function_hash,
        "kind": kind,
        "cause": cause,
        "compiled": compiled,
        "events": 1,
        "cost_seconds": cost,
        "first_ts": ts,
        "last_ts": ts,
    }


def _run_row(run_id: str, compiled: bool, cost: float, ts: Any) -> dict[str, Any]:
    """A ``run_totals`` row for the first event of its run."""
    return {
        "run_id": run_id,
        "events": 1,
        "compiles": int(compiled),
        "cost_seconds": cost,
        "first_ts": ts,
        "last_ts": ts,
    }


def _coarse_totals(
    functions: dict[tuple, dict], buckets: dict[tuple, dict], identical: dict[str, float]
) -> tuple[dict[Any, dict], dict[Any, dict], dict[Any, dict]]:
    """The totals per function alone, per (kind, cause, compiled) and per cost bucket
    store-wide, summed from the finer rows of ``_per_event_totals``."""
    per_function: dict[Any, dict] = {}
    causes: dict[Any, dict] = {}
    for row in functions.values():
        live = row["kind"] != STALE_KIND
        _sum_into(
            per_function,
            {"function_hash": row["function_hash"]},
            {
                "events": row["events"],
                "live_events": row["events"] if live else 0,
                "compiles": row["events"] if live and row["compiled"] else 0,
                "cost_seconds": row["cost_seconds"] if live else 0.0,
                "identical_seconds": 0.0,
            },
        )
        _sum_into(
            causes,
            {"kind": row["kind"], "cause": row["cause"], "compiled": row["compiled"]},
            {"events": row["events"], "cost_seconds": row["cost_seconds"]},
        )
    for function_hash, seconds in identical.items():
        per_function[(function_hash,)]["identical_seconds"] = seconds
    store_buckets: dict[Any, dict] = {}
    for row in buckets.values():
        _sum_into(store_buckets, {"bucket": row["bucket"]}, {"events": row["events"]})
    return per_function, causes, store_buckets


def _sum_into(out: dict[Any, dict], key: dict[str, Any], values: dict[str, Any]) -> None:
    """Add ``values`` to the row of ``out`` with these key columns (made on first use)."""
    found = out.get(tuple(key.values()))
    if found is None:
        out[tuple(key.values())] = {**key, **values}
    else:
        for name, value in values.items():
            found[name] += value


def add(conn: sa.Connection, tables: dict[sa.Table, list[dict[str, Any]]]) -> None:
    """Add deltas: insert new keys, accumulate into existing ones."""
    for table, rows in tables.items():
        if not rows:
            continue
        key = [c.name for c in table.primary_key.columns]
        # Sorted keys make concurrent writers lock rows in one order (no deadlocks).
        conn.execute(_upsert(conn.dialect.name, table), sorted(rows, key=lambda row: tuple(row[k] for k in key)))


@functools.cache
def _upsert(dialect: str, table: sa.Table) -> Any:
    """INSERT ... ON CONFLICT DO UPDATE adding to the stored totals (built once per table:
    the statement is the same for every batch)."""
    smaller, larger = (sa.func.least, sa.func.greatest) if dialect == "postgresql" else (sa.func.min, sa.func.max)
    key = [c.name for c in table.primary_key.columns]
    stmt = enginemod.upsert_insert(dialect, table)
    updates: dict[str, sa.ColumnElement[Any]] = {}
    for column in table.c:
        if column.name in key:
            continue
        if column.name in _LATEST:
            # A value as of the latest write (None: keep the stored one).
            updates[column.name] = sa.func.coalesce(stmt.excluded[column.name], column)
        elif column.name == "first_ts":
            updates[column.name] = smaller(column, stmt.excluded[column.name])
        elif column.name == "last_ts":
            updates[column.name] = larger(column, stmt.excluded[column.name])
        else:
            updates[column.name] = column + stmt.excluded[column.name]
    return stmt.on_conflict_do_update(index_elements=key, set_=updates)


TABLES = (
    "function_totals",
    "function_cost_buckets",
    "run_totals",
    "function_call_totals",
    "function_compile_totals",
    "cause_totals",
    "cost_bucket_totals",
    "run_time_buckets",
    "compile_hour_totals",
    "signature_totals",
    "compile_size_totals",
)


def add_call_stats(conn: sa.Connection, stats: list[dict[str, Any]], *, mark_stale: bool = True) -> None:
    """Fold new call-statistics rows into ``function_call_totals`` and ``run_time_buckets``,
    and (``mark_stale``; a rebuild marks them all at once) mark the signatures whose
    buckets grew stale for their kept median (settling.py).

    Each row is valued at the run time per call known once it is counted (the stored
    buckets plus this batch's, in time order), and the estimate is only ever added to: a
    counter in Prometheus must not go down when a later sample lowers the run time.
    ``run_seconds_per_call`` is the latest value, for the report and the compile share.
    """
    if not stats:
        return
    t, b = models.function_call_totals, models.run_time_buckets
    hashes = sorted({row["function_hash"] for row in stats})
    waiting = {
        r[0]: int(r[1])
        for r in conn.execute(sa.select(t.c.function_hash, t.c.unvalued_calls).where(t.c.function_hash.in_(hashes)))
    }
    known = _stored_run_time_buckets(conn, hashes)
    deltas: dict[str, dict[str, Any]] = {}
    new_buckets: dict[tuple[str, str, int], dict[str, Any]] = {}
    for row in sorted(stats, key=lambda r: r["timestamp"]):
        key = row["function_hash"]
        delta = deltas.get(key)
        if delta is None:
            delta = deltas[key] = _empty_call_totals(key)
        calls = int(row["calls"])
        delta["calls"] += calls
        delta["sampled_calls"] += int(row["sampled_calls"])
        delta["sampled_seconds"] += float(row["sampled_seconds"])
        if row.get("sample_every") == 0:
            delta["unsampled_calls"] += calls
        buckets = row_buckets(row)
        if buckets:
            signature_hash = row.get("signature_hash") or ""
            runtimes.merge(known[key].setdefault(signature_hash, {}), buckets)
            _add_run_time_buckets(new_buckets, key, signature_hash, buckets)
        per_call = runtimes.per_call_seconds(known[key])
        if per_call is None:
            delta["unvalued_calls"] += calls
            continue
        delta["run_seconds_per_call"] = per_call
        delta["run_seconds"] += calls * per_call
        stored_waiting = waiting.pop(key, 0)
        if stored_waiting or delta["unvalued_calls"]:  # calls from before the first sample: valued now, once
            delta["run_seconds"] += (stored_waiting + delta["unvalued_calls"]) * per_call
            delta["unvalued_calls"] = -stored_waiting
    add(conn, {t: list(deltas.values()), b: list(new_buckets.values())})
    if mark_stale and new_buckets:
        add(conn, {models.stale_run_times: _marks((f, g) for f, g, _ in new_buckets)})
    if mark_stale:  # a run's statistics tell whether it went on after a burst
        add(conn, {models.stale_storms: _run_marks(row["run_id"] for row in stats if row.get("run_id"))})


def _stored_run_time_buckets(conn: sa.Connection, hashes: list[str]) -> dict[str, dict[str, runtimes.Buckets]]:
    """The run-time buckets stored for these functions, per function and signature."""
    b = models.run_time_buckets
    known: dict[str, dict[str, runtimes.Buckets]] = {h: {} for h in hashes}
    for function_hash, signature_hash, bucket, samples, weight in conn.execute(
        sa.select(b.c.function_hash, b.c.signature_hash, b.c.bucket, b.c.samples, b.c.weight).where(
            b.c.function_hash.in_(hashes)
        )
    ):
        known[function_hash].setdefault(signature_hash, {})[int(bucket)] = [int(samples), int(weight)]
    return known


def _empty_call_totals(function_hash: str) -> dict[str, Any]:
    """A ``function_call_totals`` delta with nothing counted yet."""
    return {
        "function_hash": function_hash,
        "calls": 0,
        "sampled_calls": 0,
        "sampled_seconds": 0.0,
        "run_seconds": 0.0,
        "unvalued_calls": 0,
        "unsampled_calls": 0,
        "run_seconds_per_call": None,
    }


def _add_run_time_buckets(
    new_buckets: dict[tuple[str, str, int], dict[str, Any]],
    function_hash: str,
    signature_hash: str,
    buckets: runtimes.Buckets,
) -> None:
    """Add one stats row's run-time buckets to the ``run_time_buckets`` rows to insert."""
    for bucket, (samples, weight) in buckets.items():
        found = new_buckets.setdefault(
            (function_hash, signature_hash, bucket),
            {
                "function_hash": function_hash,
                "signature_hash": signature_hash,
                "bucket": bucket,
                "samples": 0,
                "weight": 0,
            },
        )
        found["samples"] += samples
        found["weight"] += weight


def row_buckets(row: Mapping[str, Any] | sa.RowMapping) -> runtimes.Buckets:
    """A statistics row's buckets; a row written before buckets were kept holds its
    samples at their mean, standing for the row's calls."""
    if row.get("run_buckets"):
        return runtimes.from_json(row["run_buckets"])
    sampled = int(row["sampled_calls"] or 0)
    if not sampled:
        return {}
    return {runtimes.bucket_of(float(row["sampled_seconds"]) / sampled): [sampled, max(int(row["calls"]), sampled)]}


def _rebuild_columns(conn: sa.Connection, tables: tuple[str, ...]) -> list[sa.Column[Any]]:
    """The event columns a rebuild of ``tables`` reads (the id first): those the store at
    the caller's revision has."""
    e = models.compile_events
    columns = [
        e.c.id,
        e.c.function_hash,
        e.c.run_id,
        e.c.kind,
        e.c.cause,
        e.c.compiled,
        e.c.timestamp,
        e.c.trace_seconds,
        e.c.lower_seconds,
        e.c.compile_seconds,
    ]
    if any(c["name"] == "identical_to" for c in sa.inspect(conn).get_columns("compile_events")):
        columns.append(e.c.identical_to)
    if "signature_totals" in tables:
        columns += [e.c.signature_hash, e.c.eager_run_seconds]
    if "compile_size_totals" in tables:
        columns += [e.c.hlo_ops, e.c.jaxpr_eqns]
    return columns


def rebuild(conn: sa.Connection, chunk: int = 50_000, tables: tuple[str, ...] = TABLES) -> None:
    """Recompute the totals from the events (after a bulk load or an upgrade); ``tables``:
    only these (a migration fills those that exist at its revision)."""
    e = models.compile_events
    for name in tables:
        conn.execute(sa.delete(models.Base.metadata.tables[name]))
    columns = _rebuild_columns(conn, tables)
    names = [c.name for c in columns]
    last_id = 0
    while True:
        rows = conn.execute(sa.select(*columns).where(e.c.id > last_id).order_by(e.c.id).limit(chunk)).all()
        if not rows:
            break
        add(conn, {table: found for table, found in deltas(rows, names).items() if table.name in tables})
        last_id = rows[-1][0]
    if "function_call_totals" in tables:
        _rebuild_call_totals(conn, chunk, tables)
    if tables == TABLES:  # the whole store recounted: its kept results are found again too
        mark_all_kept_stale(conn)


def _rebuild_call_totals(conn: sa.Connection, chunk: int, tables: tuple[str, ...]) -> None:
    """The call totals (and, where the store has them, the run-time buckets) from the
    statistics rows."""
    s = models.call_stats
    # The columns a store at the caller's revision has: sampled buckets came with run_time_buckets.
    stat_columns = [
        s.c.id,
        s.c.run_id,
        s.c.function_hash,
        s.c.timestamp,
        s.c.calls,
        s.c.sampled_calls,
        s.c.sampled_seconds,
    ]
    if "run_time_buckets" in tables:
        stat_columns += [s.c.signature_hash, s.c.run_buckets, s.c.sample_every]
    last_id = 0
    while True:
        stat_rows = (
            conn.execute(sa.select(*stat_columns).where(s.c.id > last_id).order_by(s.c.id).limit(chunk))
            .mappings()
            .all()
        )
        if not stat_rows:
            return
        add_call_stats(conn, [dict(r) for r in stat_rows], mark_stale=False)
        last_id = stat_rows[-1]["id"]


def cache_deltas(
    events: Iterable[Sequence[Any]],
    columns: Sequence[str] = models.EVENT_COLUMNS,
) -> dict[sa.Table, list[dict[str, Any]]]:
    """Persistent-cache requests (hit or miss) and seconds saved, for newly stored events."""
    hit_at, saved_at = columns.index("persistent_cache_hit"), columns.index("cache_time_saved_seconds")
    totals: dict[str, dict[str, Any]] = {}
    for e in events:
        hit = e[hit_at]
        if hit is None:
            continue
        result = "hit" if hit else "miss"
        row = totals.setdefault(result, {"result": result, "events": 0, "saved_seconds": 0.0})
        row["events"] += 1
        # JAX's estimate is negative when loading took longer than compiling would
        # have; the counter built on this total must never go down.
        row["saved_seconds"] += max(0.0, float(e[saved_at] or 0.0))
    return {models.persistent_cache_totals: list(totals.values())}
