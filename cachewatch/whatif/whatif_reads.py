"""What a price of a fix reads: one function's compiles in one run, in order, with their
signatures, costs and XLA memory, and its calls and sampled run times per signature.
Frozen dataclasses, so cachewatch.whatif.prices never touches SQL.

    function = find_function(conn, "train_step")
    run = run_of(conn, function.function_hash, None)      # its latest run
    found = evidence(conn, function, run)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..core import runtimes
from ..core.events import MEMORY_PARTS, FunctionInfo, Kind
from ..store import models
from ..store.runs import RunNotFound, find_run


class FunctionNotFound(LookupError):
    """No function, or more than one, answers to the name given."""


@dataclass(frozen=True, slots=True)
class Leaf:
    """One leaf of a recorded signature: an array's shape, dtype and weak type, or a static value."""

    path: str
    static: bool
    shape: tuple[int, ...] | None = None
    dtype: str = ""
    weak_type: bool = False
    value: str = ""


@dataclass(frozen=True, slots=True)
class CompileRecord:
    """One compile of the function, as recorded."""

    event_id: str
    timestamp: float
    cause: str
    signature_hash: str
    signature: tuple[Leaf, ...]
    seconds: float  # trace + lowering + XLA compile
    xla_seconds: float  # XLA compile alone: what a persistent cache serves
    memory_bytes: int | None  # XLA's generated code, arguments, outputs and temporaries
    identical_to: str | None
    persistent_cache_hit: bool | None
    device: str


@dataclass(frozen=True, slots=True)
class TimedSignature:
    """One signature's sampled run time: its median call, and the calls its samples stand for."""

    signature_hash: str
    samples: int
    calls: int
    median_seconds: float


@dataclass(frozen=True, slots=True)
class RunEvidence:
    """Everything a price is made of, for one function in one run."""

    function: FunctionInfo
    run_id: str
    run_name: str
    compiles: tuple[CompileRecord, ...]  # oldest first
    calls: int
    timed: tuple[TimedSignature, ...]
    sample_every: int | None


def find_function(conn: sa.Connection, name: str) -> FunctionInfo:
    """The one function with this hash, hash prefix, name or qualified name."""
    f = models.functions
    cols = (f.c.function_hash, f.c.name, f.c.qualname, f.c.module, f.c.file, f.c.line)
    found = conn.execute(sa.select(*cols).where(f.c.function_hash == name)).all()
    if not found:
        found = conn.execute(
            sa.select(*cols).where(
                sa.or_(f.c.name == name, f.c.qualname == name, f.c.function_hash.startswith(name, autoescape=True))
            )
        ).all()
    if not found:
        raise FunctionNotFound(f"no function named {name!r} in the store (a name, qualified name or hash prefix)")
    if len(found) > 1:
        named = ", ".join(f"{r.qualname} ({r.function_hash[:12]})" for r in found[:5])
        raise FunctionNotFound(f"{len(found)} functions answer to {name!r}: {named}; give a hash prefix")
    r = found[0]
    return FunctionInfo(r.function_hash, r.name, r.qualname, r.module or "", r.file or "", int(r.line or 0))


def run_of(conn: sa.Connection, function_hash: str, run: str | None) -> tuple[str, str]:
    """The run (id, name) to price: the one named (id, id prefix or run name), else the
    latest run in which the function compiled. Raises RunNotFound."""
    e, r = models.compile_events, models.runs
    if run:
        ref = find_run(conn, run)
        q = sa.select(e.c.id).where(e.c.function_hash == function_hash, e.c.run_id == ref.run_id, e.c.compiled)
        if conn.execute(q.limit(1)).first() is None:
            raise RunNotFound(f"the function did not compile in run {ref.run_id} ({ref.run_name or 'no name'})")
        return ref.run_id, ref.run_name
    latest = conn.execute(
        sa.select(r.c.run_id, r.c.run_name)
        .join(e, e.c.run_id == r.c.run_id)
        .where(e.c.function_hash == function_hash, e.c.compiled)
        .order_by(r.c.started_at.desc(), r.c.run_id.desc())
        .limit(1)
    ).first()
    if latest is None:
        raise RunNotFound("the function has no compile in any run of the store")
    return latest.run_id, latest.run_name or ""


def _leaves(signature: Any, made: dict[tuple[Any, ...], Leaf]) -> tuple[Leaf, ...]:
    """A recorded signature's leaves. ``made``: the leaves made so far for the same reading,
    by their fields; a run's signatures share most leaves (the weights), and a frozen
    dataclass costs more to make than to find (a storm of 40,000 compiles reads 400,000)."""
    out = []
    for entry in signature or ():
        if not isinstance(entry, dict) or "path" not in entry:
            continue
        static = bool(entry.get("static"))
        shape = entry.get("shape")
        key = (
            str(entry["path"]),
            static,
            tuple(shape) if isinstance(shape, list) else None,
            str(entry.get("dtype", "")),
            bool(entry.get("weak_type", False)),
            str(entry.get("value", "")) if static else "",
        )
        leaf = made.get(key)
        if leaf is None:
            leaf = made[key] = _leaf(entry, static, shape)
        out.append(leaf)
    return tuple(out)


def _leaf(entry: dict[str, Any], static: bool, shape: Any) -> Leaf:
    if static:
        return Leaf(str(entry["path"]), True, value=str(entry.get("value", "")))
    dims = tuple(int(d) for d in shape) if isinstance(shape, list) else None
    return Leaf(str(entry["path"]), False, dims, str(entry.get("dtype", "")), bool(entry.get("weak_type", False)))


def _memory(memory: Any) -> int | None:
    if not isinstance(memory, dict):
        return None
    parts = [memory.get(p) for p in MEMORY_PARTS if p != "constants"]
    numbers = [int(v) for v in parts if isinstance(v, (int, float))]
    return sum(numbers) if numbers else None


def evidence(conn: sa.Connection, function: FunctionInfo, run_id: str, run_name: str = "") -> RunEvidence:
    """The function's compiles in the run, oldest first, and its calls and timed signatures."""
    (found,) = evidence_of_many(conn, [(function, run_id)])
    return RunEvidence(function, run_id, run_name, found.compiles, found.calls, found.timed, found.sample_every)


def evidence_of_many(conn: sa.Connection, pairs: list[tuple[FunctionInfo, str]]) -> list[RunEvidence]:
    """:func:`evidence` for each (function, run), in two queries (a page of storms prices
    fifty: three queries each were three round trips each)."""
    if not pairs:
        return []
    wanted = _pairs([(function.function_hash, run_id) for function, run_id in pairs])
    compiles = _compiles(conn, wanted)
    stats = _call_stats(conn, wanted)
    return [
        RunEvidence(function, run_id, "", compiles.get(i, ()), *_calls_and_timed_signatures(stats.get(i, [])))
        for i, (function, run_id) in enumerate(pairs)
    ]


def evidence_stamps(conn: sa.Connection, pairs: list[tuple[str, str]]) -> list[tuple[Any, ...]]:
    """Per (function hash, run id): what changes whenever :func:`evidence_of_many` would
    read the pair differently. Events and call statistics are only ever added or pruned,
    never changed, so their counts, newest ids and spans say it; in two grouped queries."""
    if not pairs:
        return []
    wanted = _pairs(pairs)
    e, s = models.compile_events, models.call_stats
    events = {
        int(r.pair): tuple(r[1:])
        for r in conn.execute(
            sa.select(
                wanted.c.pair,
                sa.func.count(),
                sa.func.max(e.c.id),
                sa.func.min(e.c.timestamp),
                sa.func.max(e.c.timestamp),
            )
            .select_from(wanted)
            .join(e, sa.and_(e.c.function_hash == wanted.c.function_hash, e.c.run_id == wanted.c.run_id))
            .group_by(wanted.c.pair)
        )
    }
    stats = {
        int(r.pair): tuple(r[1:])
        for r in conn.execute(
            sa.select(wanted.c.pair, sa.func.count(), sa.func.max(s.c.id), sa.func.sum(s.c.calls))
            .select_from(wanted)
            .join(s, sa.and_(s.c.function_hash == wanted.c.function_hash, s.c.run_id == wanted.c.run_id))
            .group_by(wanted.c.pair)
        )
    }
    return [(events.get(i), stats.get(i)) for i in range(len(pairs))]


def _pairs(pairs: list[tuple[str, str]]) -> sa.CTE:
    """The (function hash, run id) pairs as a numbered table to join on."""
    return (
        sa.values(sa.column("pair", sa.Integer), sa.column("function_hash", sa.String), sa.column("run_id", sa.String))
        .data([(i, function_hash, run_id) for i, (function_hash, run_id) in enumerate(pairs)])
        .cte("pairs")  # WITH pairs(...) AS (VALUES ...): SQLite names no columns of an aliased VALUES
    )


def _compiles(conn: sa.Connection, wanted: sa.CTE) -> dict[int, tuple[CompileRecord, ...]]:
    """Each (function, run) pair's compiles, oldest first (stale captures left out)."""
    e = models.compile_events
    q = (
        sa.select(
            wanted.c.pair,
            e.c.event_id,
            e.c.timestamp,
            e.c.cause,
            e.c.signature_hash,
            e.c.signature,
            e.c.trace_seconds,
            e.c.lower_seconds,
            e.c.compile_seconds,
            e.c.memory,
            e.c.identical_to,
            e.c.persistent_cache_hit,
            e.c.device,
        )
        .select_from(wanted)
        .join(e, sa.and_(e.c.function_hash == wanted.c.function_hash, e.c.run_id == wanted.c.run_id))
        .where(e.c.compiled, e.c.kind != Kind.STALE_CAPTURE)
        .order_by(wanted.c.pair, e.c.timestamp, e.c.id)
    )
    made: dict[tuple[Any, ...], Leaf] = {}
    found: dict[int, list[CompileRecord]] = {}
    for r in conn.execute(q):
        found.setdefault(int(r.pair), []).append(
            CompileRecord(
                r.event_id,
                float(r.timestamp),
                r.cause,
                r.signature_hash or "",
                _leaves(r.signature, made),
                float(r.trace_seconds or 0.0) + float(r.lower_seconds or 0.0) + float(r.compile_seconds or 0.0),
                float(r.compile_seconds or 0.0),
                _memory(r.memory),
                r.identical_to,
                r.persistent_cache_hit,
                r.device or "",
            )
        )
    return {pair: tuple(records) for pair, records in found.items()}


def _call_stats(conn: sa.Connection, wanted: sa.CTE) -> dict[int, list[Any]]:
    """Each (function, run) pair's call-statistics rows."""
    s = models.call_stats
    q = (
        sa.select(wanted.c.pair, s.c.calls, s.c.signature_hash, s.c.run_buckets, s.c.sample_every)
        .select_from(wanted)
        .join(s, sa.and_(s.c.function_hash == wanted.c.function_hash, s.c.run_id == wanted.c.run_id))
        .order_by(wanted.c.pair, s.c.id)
    )
    found: dict[int, list[Any]] = {}
    for row in conn.execute(q):
        found.setdefault(int(row.pair), []).append(row)
    return found


def _calls_and_timed_signatures(stats: list[Any]) -> tuple[int, tuple[TimedSignature, ...], int | None]:
    """The function's calls in the run, its signatures with a median run time, and the
    run's sampling interval (the last one recorded)."""
    calls = sum(int(r.calls or 0) for r in stats)
    buckets: dict[str, runtimes.Buckets] = {}
    sample_every = None
    for r in stats:
        if r.sample_every is not None:
            sample_every = int(r.sample_every)
        if r.signature_hash and r.run_buckets:
            runtimes.merge(buckets.setdefault(r.signature_hash, {}), runtimes.from_json(r.run_buckets))
    timed = []
    for signature_hash, found in sorted(buckets.items()):
        median = runtimes.median_seconds(found)
        if median is not None:
            samples = sum(v[0] for v in found.values())
            weight = sum(max(v[1], v[0]) for v in found.values())
            timed.append(TimedSignature(signature_hash, samples, weight, median))
    return calls, tuple(timed), sample_every
