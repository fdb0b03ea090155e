"""Per-function totals kept beside the events, so summaries never scan every event.

Every write of compile events adds what it inserted (and only that: a retried batch
adds nothing) to ``event_rollup``, one row per (function, run, kind, cause, compiled,
cost bucket). The report, the service's summary and its ``/metrics`` read these few
thousand rows instead of millions of events; queries bounded in time still read the
events through their time indexes.
"""

from __future__ import annotations

import bisect
from typing import Any, Iterable

import sqlalchemy as sa

from . import models

# Upper bounds (seconds) of trace + lowering + compile per event: from a cached retrace
# of a tiny function to a large model's XLA compile. The last bucket is unbounded.
COST_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                                   120.0, 300.0)

_KEY = ("function_hash", "run_id", "kind", "cause", "compiled", "bucket")


def event_cost(row: dict[str, Any]) -> float:
    return sum(float(row.get(k) or 0.0) for k in ("trace_seconds", "lower_seconds", "compile_seconds"))


def cost_bucket(cost: float) -> int:
    """Index of the first bucket whose upper bound holds ``cost`` (len(COST_BUCKETS) for +Inf)."""
    return bisect.bisect_left(COST_BUCKETS, cost)


def deltas(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rollup rows for a set of newly stored events."""
    out: dict[tuple, dict[str, Any]] = {}
    for e in events:
        cost = event_cost(e)
        key = (e["function_hash"], e["run_id"], e["kind"], e["cause"], bool(e["compiled"]), cost_bucket(cost))
        row = out.get(key)
        if row is None:
            out[key] = {**dict(zip(_KEY, key)), "events": 1, "cost_seconds": cost,
                        "first_ts": e["timestamp"], "last_ts": e["timestamp"]}
        else:
            row["events"] += 1
            row["cost_seconds"] += cost
            row["first_ts"] = min(row["first_ts"], e["timestamp"])
            row["last_ts"] = max(row["last_ts"], e["timestamp"])
    return list(out.values())


def add(conn: sa.Connection, rows: list[dict[str, Any]]) -> None:
    """Add rollup deltas: insert new keys, accumulate into existing ones."""
    if not rows:
        return
    r = models.event_rollup
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert

        smaller, larger = sa.func.least, sa.func.greatest
    else:
        from sqlalchemy.dialects.sqlite import insert

        smaller, larger = sa.func.min, sa.func.max
    stmt = insert(r)
    stmt = stmt.on_conflict_do_update(index_elements=list(_KEY), set_={
        "events": r.c.events + stmt.excluded.events,
        "cost_seconds": r.c.cost_seconds + stmt.excluded.cost_seconds,
        "first_ts": smaller(r.c.first_ts, stmt.excluded.first_ts),
        "last_ts": larger(r.c.last_ts, stmt.excluded.last_ts),
    })
    # Sorted keys make concurrent writers lock rollup rows in one order (no deadlocks).
    conn.execute(stmt, sorted(rows, key=lambda row: tuple(row[k] for k in _KEY)))


def rebuild(conn: sa.Connection, chunk: int = 50_000) -> None:
    """Recompute the whole rollup from the events (after a bulk load or an upgrade)."""
    e = models.compile_events
    conn.execute(sa.delete(models.event_rollup))
    columns = [e.c.function_hash, e.c.run_id, e.c.kind, e.c.cause, e.c.compiled, e.c.timestamp,
               e.c.trace_seconds, e.c.lower_seconds, e.c.compile_seconds]
    last_id = 0
    while True:
        rows = conn.execute(sa.select(e.c.id, *columns).where(e.c.id > last_id).order_by(e.c.id)
                            .limit(chunk)).mappings().all()
        if not rows:
            return
        add(conn, deltas(rows))
        last_id = rows[-1]["id"]
