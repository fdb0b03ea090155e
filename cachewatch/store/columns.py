"""What every read of the store shares: the columns of an event, what an event cost, the
filters of a view, and the shapes of its rows (``FunctionReport``, ``EventRow``: what the
API serialises). The reports (queries.py), every errand's reads (storms/storm_reads.py,
payoff/cost_reads.py, ...) and the service's listings and charts (listings.py, charts.py)
build on these."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, TypeVar, cast

import sqlalchemy as sa

from ..core.events import MAX_SECONDS, CacheMissExplanation, Cause, Kind
from . import models

# Every column of an event but the store's own row id.
EVENT_SELECT = [c for c in models.compile_events.c if c.name != "id"]

# Values in one IN (...) list: well under SQLite's bound-parameter limit (999 before 3.32)
# and small enough that PostgreSQL plans each list as quickly as a join.
IN_CHUNK = 500

_T = TypeVar("_T")


def in_chunks(values: Sequence[_T], size: int = IN_CHUNK) -> Iterator[list[_T]]:
    """``values`` in consecutive slices of ``size``, each one IN (...) list of a read."""
    for start in range(0, len(values), size):
        yield list(values[start : start + size])


@dataclass(frozen=True)
class Filters:
    run_id: str | None = None
    since: float | None = None
    until: float | None = None
    run_ids: tuple[str, ...] | None = None  # these runs only (what the store finds again per run)

    def is_empty(self) -> bool:
        """No run and no time bound: the whole store, which the kept totals answer."""
        return not self.run_id and self.since is None and self.until is None and self.run_ids is None

    def apply(self, table: sa.Table, query: sa.Select) -> sa.Select:
        return self._bound(query, table.c.run_id, table.c.timestamp)

    def apply_to_runs(self, query: sa.Select) -> sa.Select:
        """The same filters for a query over runs: since/until bound the run's start."""
        r = models.runs
        return self._bound(query, r.c.run_id, r.c.started_at)

    def _bound(self, query: sa.Select, run_id: sa.ColumnElement[Any], when: sa.ColumnElement[Any]) -> sa.Select:
        """The query with the run and the time span (``since`` inclusive) on these columns."""
        if self.run_id:
            query = query.where(run_id == self.run_id)
        if self.run_ids is not None:
            query = query.where(run_id.in_(self.run_ids))
        if self.since is not None:
            query = query.where(when >= self.since)
        if self.until is not None:
            query = query.where(when < self.until)
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
    recompile_causes: dict[str, int]  # the recompiles alone by cause (no trace that compiled nothing)
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
    program_fingerprint: str | None
    lowered_fingerprint: str | None
    identical_to: str | None
    same_program_as: str | None
    figures_missing: dict[str, str] | None
    while_repeating: bool | None
    call_number: int | None
    eqns_by_primitive: dict[str, int] | None
    eqns_by_line: list[dict[str, Any]] | None
    fusions: int | None
    memory: dict[str, int] | None
    name: str
    qualname: str
    cache_miss: CacheMissExplanation | None  # set by explain_cache_misses


def event_rows_of(result: Iterable[sa.Row[*tuple[Any, ...]]]) -> list[EventRow]:
    return [cast(EventRow, dict(r._mapping)) for r in result]


def recompiled(t: sa.Table | sa.FromClause) -> sa.ColumnElement[bool]:
    """core.events.is_recompile over a table with the events' kind, cause and compiled
    columns (the events, or their kept totals)."""
    return sa.and_(t.c.compiled, t.c.cause != Cause.FIRST_CALL.value, t.c.kind != Kind.AHEAD.value)


def cost_expr(e: sa.Table) -> sa.ColumnElement:
    """An event's compile seconds as the report counts them: trace + lowering + XLA compile."""
    return (
        sa.func.coalesce(e.c.trace_seconds, 0.0)
        + sa.func.coalesce(e.c.lower_seconds, 0.0)
        + sa.func.coalesce(e.c.compile_seconds, 0.0)
    )


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
