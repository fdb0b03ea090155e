"""Read queries shared by the command line and the server. They return plain dicts.

Field names follow DESIGN.md: a report row carries ``name``, ``qualname``, ``module``,
``file``, ``line``, ``function_hash``, ``traces``, ``compiles``, ``recompiles``,
``causes``, ``compile_seconds``, ``calls``, ``run_seconds_est``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..events import explain_cache_miss
from . import engine as enginemod
from . import models

_EVENT_COLUMNS = [c for c in models.compile_events.c if c.name != "id"]


@dataclass(frozen=True)
class Filters:
    run_id: str | None = None
    since: float | None = None
    until: float | None = None

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


def cost_expr(e: sa.Table) -> sa.ColumnElement:
    """An event's compile seconds as the report counts them: trace + lowering + XLA compile."""
    return (sa.func.coalesce(e.c.trace_seconds, 0.0) + sa.func.coalesce(e.c.lower_seconds, 0.0)
            + sa.func.coalesce(e.c.compile_seconds, 0.0))


def function_report(conn: sa.Connection, filters: Filters = Filters(),
                    function_hashes: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per function, most compile seconds first.

    ``compile_seconds`` is the whole cost of (re)compiling: trace + lowering + XLA
    compile. ``run_seconds_est`` is the sampled mean run time times the calls.
    """
    rows: dict[str, dict[str, Any]] = {}
    causes: dict[str, dict[str, int]] = {}
    # Thousands of groups on a big store: plain tuples and locals keep this loop cheap.
    for function_hash, kind, cause, compiled, events, cost, first_ts, last_ts in event_groups(
            conn, filters, function_hashes):
        row = rows.get(function_hash)
        if row is None:
            row = rows[function_hash] = {"traces": 0, "compiles": 0, "recompiles": 0, "compile_seconds": 0.0,
                                         "stale_captures": 0, "first_compile": first_ts, "last_compile": last_ts}
            causes[function_hash] = {}
        else:
            if first_ts < row["first_compile"]:
                row["first_compile"] = first_ts
            if last_ts > row["last_compile"]:
                row["last_compile"] = last_ts
        n = int(events)
        if kind == "stale_capture":
            row["stale_captures"] += n
            continue
        if kind == "trace":
            row["traces"] += n
        row["compile_seconds"] += float(cost or 0.0)
        if compiled:
            row["compiles"] += n
            if cause != "first_call":
                row["recompiles"] += n
        per = causes[function_hash]
        per[cause] = per.get(cause, 0) + n
    if not rows:
        return []
    stats = {r.function_hash: r for r in call_totals(conn, filters, function_hashes)}
    f = models.functions
    meta_q = sa.select(f)
    if function_hashes is not None or filters.run_id or filters.since is not None or filters.until is not None:
        meta_q = meta_q.where(f.c.function_hash.in_(list(rows)))
    meta = {r.function_hash: r for r in conn.execute(meta_q)}
    report = []
    for function_hash, row in rows.items():
        info = meta.get(function_hash)
        stat = stats.get(function_hash)
        calls = int(stat.calls or 0) if stat else 0
        sampled = int(stat.sampled_calls or 0) if stat else 0
        mean = (float(stat.sampled_seconds) / sampled) if stat and sampled else None
        compile_seconds = float(row["compile_seconds"] or 0.0)
        run_est = mean * calls if mean is not None else None
        report.append({
            "name": info.name if info else "",
            "qualname": info.qualname if info else "",
            "module": info.module if info else "",
            "file": info.file if info else "",
            "line": info.line if info else 0,
            "function_hash": function_hash,
            "traces": int(row["traces"] or 0),
            "compiles": int(row["compiles"] or 0),
            "recompiles": int(row["recompiles"] or 0),
            "causes": causes.get(function_hash, {}),
            "dominant_cause": _dominant(causes.get(function_hash, {})),
            "stale_captures": int(row["stale_captures"] or 0),
            "compile_seconds": compile_seconds,
            "calls": calls,
            "sampled_calls": sampled,
            "run_seconds_mean": mean,
            "run_seconds_est": run_est,
            "compile_share": (compile_seconds / (compile_seconds + run_est)
                              if run_est is not None and compile_seconds + run_est > 0 else None),
            "first_compile": row["first_compile"],
            "last_compile": row["last_compile"],
        })
    report.sort(key=lambda r: (-r["compile_seconds"], r["qualname"]))
    return report


def _dominant(causes: dict[str, int]) -> str | None:
    """The most frequent cause other than first_call (first_call when that is all)."""
    others = {c: n for c, n in causes.items() if c != "first_call"}
    pool = others or causes
    return max(sorted(pool), key=lambda c: pool[c]) if pool else None


def call_totals(conn: sa.Connection, filters: Filters = Filters(),
                function_hashes: list[str] | None = None) -> list[Any]:
    """Per function: calls, sampled_calls, sampled_seconds (from the totals when unfiltered)."""
    if filters.run_id is None and filters.since is None and filters.until is None:
        t = models.function_call_totals
        q = sa.select(t.c.function_hash, t.c.calls, t.c.sampled_calls, t.c.sampled_seconds)
        key = t.c.function_hash
    else:
        s = models.call_stats
        q = filters.apply(s, sa.select(
            s.c.function_hash, sa.func.sum(s.c.calls).label("calls"),
            sa.func.sum(s.c.sampled_calls).label("sampled_calls"),
            sa.func.sum(s.c.sampled_seconds).label("sampled_seconds")).group_by(s.c.function_hash))
        key = s.c.function_hash
    if function_hashes is not None:
        q = q.where(key.in_(function_hashes))
    return conn.execute(q).all()


def event_groups(conn: sa.Connection, filters: Filters = Filters(),
                 function_hashes: list[str] | None = None) -> list[Any]:
    """Event totals per (function, kind, cause, compiled): count, cost seconds, first and last time.

    Over the whole store they come from the totals the writers keep (a few rows per
    function); for one run or a time range, from the events through their indexes.
    """
    if filters.run_id is None and filters.since is None and filters.until is None:
        t = models.function_totals
        q = sa.select(t.c.function_hash, t.c.kind, t.c.cause, t.c.compiled, t.c.events,
                      t.c.cost_seconds, t.c.first_ts, t.c.last_ts)
        if function_hashes is not None:
            return conn.execute(q.where(t.c.function_hash.in_(function_hashes))).all()
        return enginemod.fetch_tuples(conn, q)
    e = models.compile_events
    q = filters.apply(e, sa.select(e.c.function_hash, e.c.kind, e.c.cause, e.c.compiled,
                                   sa.func.count().label("events"), sa.func.sum(cost_expr(e)).label("cost_seconds"),
                                   sa.func.min(e.c.timestamp).label("first_ts"),
                                   sa.func.max(e.c.timestamp).label("last_ts")))
    if function_hashes is not None:
        q = q.where(e.c.function_hash.in_(function_hashes))
    return conn.execute(q.group_by(e.c.function_hash, e.c.kind, e.c.cause, e.c.compiled)).all()


def find_functions(conn: sa.Connection, name: str) -> list[str]:
    """Hashes of functions whose name, qualified name or hash prefix matches ``name``."""
    f = models.functions
    q = sa.select(f.c.function_hash).where(sa.or_(f.c.name == name, f.c.qualname == name,
                                                  f.c.function_hash.startswith(name)))
    return [r.function_hash for r in conn.execute(q)]


def list_events(conn: sa.Connection, filters: Filters = Filters(), function_hashes: list[str] | None = None,
                limit: int = 1000, after_id: int | None = None) -> list[dict[str, Any]]:
    """Compile events, oldest first, with the function's name; ``after_id`` pages on."""
    e, f = models.compile_events, models.functions
    q = filters.apply(e, sa.select(e.c.id, *_EVENT_COLUMNS, f.c.name, f.c.qualname)
                      .join(f, f.c.function_hash == e.c.function_hash))
    if function_hashes is not None:
        q = q.where(e.c.function_hash.in_(function_hashes))
    if after_id is not None:
        q = q.where(e.c.id > after_id)
    q = q.order_by(e.c.id).limit(limit)
    return [dict(r._mapping) for r in conn.execute(q)]


def list_runs(conn: sa.Connection, limit: int = 100) -> list[dict[str, Any]]:
    r = models.runs
    return [dict(row._mapping) for row in conn.execute(sa.select(r).order_by(r.c.started_at.desc()).limit(limit))]


def open_report(url: str, filters: Filters = Filters()) -> list[dict[str, Any]]:
    with enginemod.connection(url) as conn:
        return function_report(conn, filters)


def explain_cache_misses(conn: sa.Connection, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
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
            .where(e.c.function_hash == row["function_hash"], e.c.timestamp < row["timestamp"],
                   e.c.signature_hash == row["signature_hash"], e.c.run_id != row["run_id"],
                   e.c.persistent_cache_hit.is_not(None))
            .order_by(e.c.timestamp.desc()).limit(1)).first()
        if earlier is None or not earlier.cache_key:
            continue
        row["cache_miss"] = explain_cache_miss(earlier.cache_key, key, earlier_run=earlier.run_id,
                                               earlier_hit=earlier.persistent_cache_hit)
    return rows
