"""What a scrape of ``/metrics`` reads of the store: the kept totals per function and for
the whole store, the labels decided so far, the names a label is made from, the recorders'
drops, wasted seconds and program sizes, the persistent cache's entries and totals. The
service's metrics module turns these rows into series; it holds no SQL of its own."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from ..core.events import Kind
from . import engine as enginemod
from . import models
from .columns import in_chunks


@dataclass
class FunctionTotals:
    """The per-function rows a scrape reads whole (one row per function)."""

    seconds: dict[str, float]  # hash -> trace + lowering + compile seconds (functions with live events)
    compiles: dict[str, int]
    calls: dict[str, tuple[int, float, bool]]  # hash -> (calls, run seconds, a call was timed)
    # hash -> calls times the run time of one call now: the compile share's run side, as
    # `cachewatch report` computes it (run_seconds, the counter, values each write at the
    # run time known then, so that it only grows).
    run_now: dict[str, float]
    labels: dict[str, str | None]  # hash -> label, or None for `other`
    events: int

    def present(self) -> set[str]:
        return set(self.seconds) | set(self.calls)


def function_totals(conn: sa.Connection) -> FunctionTotals:
    f, c = models.function_compile_totals, models.function_call_totals
    seconds, compiles, events = {}, {}, 0
    for function_hash, n, live, n_compiles, cost in enginemod.fetch_tuples(
        conn, sa.select(f.c.function_hash, f.c.events, f.c.live_events, f.c.compiles, f.c.cost_seconds)
    ):
        events += int(n)
        if live:
            seconds[function_hash] = float(cost or 0.0)
            compiles[function_hash] = int(n_compiles or 0)
    calls, run_now = {}, {}
    for function_hash, n, run_seconds, per_call in enginemod.fetch_tuples(
        conn, sa.select(c.c.function_hash, c.c.calls, c.c.run_seconds, c.c.run_seconds_per_call)
    ):
        calls[function_hash] = (int(n or 0), float(run_seconds or 0.0), per_call is not None)
        if per_call is not None:
            run_now[function_hash] = int(n or 0) * float(per_call)
    return FunctionTotals(seconds, compiles, calls, run_now, labels(conn), events)


def labels(conn: sa.Connection) -> dict[str, str | None]:
    """The labels decided so far: function hash -> label, or None for ``other``."""
    m = models.metric_labels
    return dict(enginemod.fetch_tuples(conn, sa.select(m.c.function_hash, m.c.label)))


def function_names(conn: sa.Connection) -> dict[str, tuple[str, str, str]]:
    """Every function's name, qualified name and module, a label is made from."""
    fn = models.functions
    return {
        h: (name, qualname, module or "")
        for h, name, qualname, module in conn.execute(
            sa.select(fn.c.function_hash, fn.c.name, fn.c.qualname, fn.c.module)
        )
    }


def add_labels(conn: sa.Connection, rows: Sequence[Mapping[str, object]]) -> None:
    """Keep newly decided labels (``function_hash``, ``label``, ``decided_at``)."""
    conn.execute(sa.insert(models.metric_labels), rows)


@dataclass
class CausesAndBuckets:
    """A function's compiles per cause (stale captures left out) and its events per cost bucket."""

    compiles: dict[str, int]
    buckets: dict[int, int]


def causes_and_buckets(conn: sa.Connection, function_hashes: list[str]) -> dict[str, CausesAndBuckets]:
    """:class:`CausesAndBuckets` of these functions (each present, empty where none)."""
    t, h = models.function_totals, models.function_cost_buckets
    out = {function_hash: CausesAndBuckets({}, {}) for function_hash in function_hashes}
    for chunk in in_chunks(function_hashes):
        for function_hash, cause, n in conn.execute(
            sa.select(t.c.function_hash, t.c.cause, sa.func.sum(t.c.events))
            .where(t.c.kind != Kind.STALE_CAPTURE, t.c.compiled, t.c.function_hash.in_(chunk))
            .group_by(t.c.function_hash, t.c.cause)
        ):
            found = out[function_hash].compiles
            found[cause] = found.get(cause, 0) + int(n)
        for function_hash, bucket_index, n in conn.execute(
            sa.select(h.c.function_hash, h.c.bucket, h.c.events).where(h.c.function_hash.in_(chunk))
        ):
            found_buckets = out[function_hash].buckets
            found_buckets[int(bucket_index)] = found_buckets.get(int(bucket_index), 0) + int(n)
    return out


def store_causes_and_buckets(conn: sa.Connection) -> CausesAndBuckets:
    """The whole store's compiles per cause (stale captures left out) and events per cost bucket."""
    c, b = models.cause_totals, models.cost_bucket_totals
    compiles: dict[str, int] = {}
    for cause, n in enginemod.fetch_tuples(
        conn, sa.select(c.c.cause, c.c.events).where(c.c.kind != Kind.STALE_CAPTURE, c.c.compiled)
    ):
        compiles[cause] = compiles.get(cause, 0) + int(n)
    buckets: dict[int, int] = {}
    for bucket_index, n in enginemod.fetch_tuples(conn, sa.select(b.c.bucket, b.c.events)):
        buckets[int(bucket_index)] = buckets.get(int(bucket_index), 0) + int(n)
    return CausesAndBuckets(compiles, buckets)


def client_drops(conn: sa.Connection) -> dict[str, int]:
    """Events the recorders reported lost, by reason."""
    d = models.run_drops
    return {
        reason: int(n)
        for reason, n in conn.execute(sa.select(d.c.reason, sa.func.sum(d.c.dropped)).group_by(d.c.reason))
    }


def identical_seconds(conn: sa.Connection) -> dict[str, float]:
    """Per function, the kept seconds of recompiles that produced the program compiled before."""
    kept = models.function_compile_totals
    # Kept totals: a prune of old events never takes these seconds back.
    rows = conn.execute(sa.select(kept.c.function_hash, kept.c.identical_seconds).where(kept.c.identical_seconds > 0))
    return {function_hash: float(seconds or 0.0) for function_hash, seconds in rows}


def latest_program_sizes(conn: sa.Connection, function_hashes: Iterable[str]) -> dict[str, int]:
    """The jaxpr equations of each function's latest compiled program, found through the
    function-and-time index newest first (not by grouping every compile of the store)."""
    e, f = models.compile_events, models.functions
    latest = (
        sa.select(e.c.jaxpr_eqns)
        .where(
            e.c.function_hash == f.c.function_hash, e.c.program_fingerprint.is_not(None), e.c.jaxpr_eqns.is_not(None)
        )
        .order_by(e.c.timestamp.desc(), e.c.jaxpr_eqns.desc())
        .limit(1)
        .scalar_subquery()
    )
    wanted = sorted(set(function_hashes))
    found: dict[str, int] = {}
    for chunk in in_chunks(wanted):
        q = sa.select(f.c.function_hash, latest).where(f.c.function_hash.in_(chunk))
        found.update((function_hash, int(eqns)) for function_hash, eqns in conn.execute(q) if eqns is not None)
    return found


def persistent_entries(conn: sa.Connection) -> tuple[int, int]:
    """Persistent compilation cache entries recorded as written (distinct keys), and their bytes."""
    e = models.compile_events
    written = (
        sa.select(e.c.persistent_cache_key, sa.func.max(e.c.persistent_cache_bytes).label("size"))
        .where(sa.text(models.PERSISTENT_WRITTEN))  # word for word the partial index's, so it is used
        .group_by(e.c.persistent_cache_key)
        .subquery()
    )
    n, size = conn.execute(sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(written.c.size), 0))).one()
    return int(n or 0), int(size or 0)


def persistent_cache_totals(conn: sa.Connection) -> tuple[dict[str, int], float]:
    """The kept persistent-cache requests by result, and the compile seconds it saved."""
    t = models.persistent_cache_totals
    requests = {result: int(events) for result, events in conn.execute(sa.select(t.c.result, t.c.events))}
    saved = conn.execute(sa.select(sa.func.coalesce(sa.func.sum(t.c.saved_seconds), 0.0))).scalar_one()
    return requests, float(saved or 0.0)
