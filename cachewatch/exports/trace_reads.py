"""What a run's trace is made of: its compiles (with their function, thread, times, phases,
cause and persistent-cache result) and its call-statistics rows (calls, and releases of
executables), in time order, as frozen rows for perfetto.py.

    with engine.connection(url) as conn:
        run = runs.find_run(conn, "exp-42")
        records = trace_reads.read_run(conn, run.run_id)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..core.events import Kind, held_bytes
from ..store import models


@dataclass(frozen=True, slots=True)
class CompileRow:
    """One event of the run as a trace shows it (kind ``stale_capture`` never read)."""

    event_id: str
    function_hash: str
    name: str
    qualname: str
    module: str
    thread: str
    timestamp: float
    kind: str
    cause: str
    compiled: bool
    nested: bool
    warmup: bool
    trace_seconds: float | None
    lower_seconds: float | None
    compile_seconds: float | None
    persistent_cache: str | None  # hit, written, not_written, off; None: not recorded
    persistent_cache_reason: str | None
    cache_time_saved_seconds: float | None
    signature_hash: str
    call_site: str | None
    explanation: str
    executable_bytes: int  # what JAX's cache holds for the executable (events.held_bytes)
    jaxpr_eqns: int | None
    hlo_ops: int | None
    flops: float | None
    call_path: str | None
    error: str | None


@dataclass(frozen=True, slots=True)
class CallRow:
    """One call-statistics row: a flush of a function's calls, or a release of its
    executables (``released_by`` set, ``calls`` 0)."""

    function_hash: str
    timestamp: float
    calls: int
    released_by: str | None


@dataclass(frozen=True)
class RunRecords:
    compiles: tuple[CompileRow, ...]
    calls: tuple[CallRow, ...]


def read_run(conn: sa.Connection, run_id: str) -> RunRecords:
    """The run's events (stale captures left out) and call-statistics rows, oldest first."""
    return RunRecords(tuple(_compiles(conn, run_id)), tuple(_calls(conn, run_id)))


_EVENT_COLUMNS = (
    "event_id",
    "function_hash",
    "thread",
    "timestamp",
    "kind",
    "cause",
    "compiled",
    "nested",
    "warmup",
    "trace_seconds",
    "lower_seconds",
    "compile_seconds",
    "persistent_cache",
    "persistent_cache_hit",
    "persistent_cache_reason",
    "cache_time_saved_seconds",
    "signature_hash",
    "call_site",
    "explanation",
    "memory",
    "jaxpr_eqns",
    "hlo_ops",
    "flops",
    "call_path",
    "error",
)


def _compiles(conn: sa.Connection, run_id: str) -> list[CompileRow]:
    e, f = models.compile_events, models.functions
    q = (
        sa.select(*(e.c[name] for name in _EVENT_COLUMNS), f.c.name, f.c.qualname, f.c.module)
        .join(f, f.c.function_hash == e.c.function_hash)
        .where(e.c.run_id == run_id, e.c.kind != Kind.STALE_CAPTURE)
        .order_by(e.c.timestamp, e.c.id)
    )
    return [_compile_row(row) for row in conn.execute(q)]


def _cache_result(row: Any) -> str | None:
    """The persistent cache's result; from the older hit flag where only that was recorded."""
    if row.persistent_cache:
        return str(row.persistent_cache)
    if row.persistent_cache_hit is None:
        return None
    return "hit" if row.persistent_cache_hit else None


def _compile_row(row: Any) -> CompileRow:
    return CompileRow(
        event_id=row.event_id,
        function_hash=row.function_hash,
        name=row.name or "",
        qualname=row.qualname or "",
        module=row.module or "",
        thread=row.thread or "",
        timestamp=float(row.timestamp),
        kind=row.kind,
        cause=row.cause,
        compiled=bool(row.compiled),
        nested=bool(row.nested),
        warmup=bool(row.warmup),
        trace_seconds=row.trace_seconds,
        lower_seconds=row.lower_seconds,
        compile_seconds=row.compile_seconds,
        persistent_cache=_cache_result(row),
        persistent_cache_reason=row.persistent_cache_reason,
        cache_time_saved_seconds=row.cache_time_saved_seconds,
        signature_hash=row.signature_hash or "",
        call_site=row.call_site,
        explanation=row.explanation or "",
        executable_bytes=held_bytes(row.memory),
        jaxpr_eqns=row.jaxpr_eqns,
        hlo_ops=row.hlo_ops,
        flops=row.flops,
        call_path=row.call_path,
        error=row.error,
    )


def _calls(conn: sa.Connection, run_id: str) -> list[CallRow]:
    s = models.call_stats
    q = (
        sa.select(s.c.function_hash, s.c.timestamp, s.c.calls, s.c.released_by)
        .where(s.c.run_id == run_id)
        .order_by(s.c.timestamp, s.c.id)
    )
    return [CallRow(r.function_hash, float(r.timestamp), int(r.calls or 0), r.released_by) for r in conn.execute(q)]
