"""What the store knows of JAX's caches: every compile that left an executable, the call
statistics that say how often each was used, the releases of executables, and which
function wrote each persistent-cache entry. ``cachewatch.cache.cache_view`` turns these
into entries (variants), live counts over time and the persistent cache's audit.

    with engine.connect() as conn:
        records = read_cache(conn, Filters(run_id=run), function_hashes=None)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import sqlalchemy as sa

from ..core.events import Kind, PersistentCache, explain_cache_miss
from ..core.lowered import ModuleDiff, diff_modules
from ..programs import program_reads
from ..store import models
from ..store.columns import EventRow, Filters, cost_expr, in_chunks


@dataclass(frozen=True, slots=True)
class CompiledRecord:
    """One compile that left an executable in a jit's cache."""

    event_id: str
    run_id: str
    function_hash: str
    timestamp: float
    kind: str
    cause: str
    warmup: bool
    signature_hash: str
    device: str | None
    seconds: float  # trace + lowering + XLA compile
    memory: dict[str, int] | None
    host_bytes: int | None
    host_bytes_before: int | None
    peak_host_bytes: int | None
    persistent_cache: str | None
    persistent_cache_reason: str | None
    persistent_cache_key: str | None
    cache_time_saved_seconds: float | None
    persistent_cache_bytes: int | None
    xla_seconds: float | None = None  # the XLA compile alone: what a persistent-cache hit replaces
    call_path: str | None = None  # how JAX serves its calls: fast (C++) or slow (Python)
    slow_reason: str | None = None


@dataclass(frozen=True, slots=True)
class StatsRecord:
    """One call-statistics row: calls of the function (on its first row of a flush), the
    calls its samples stand for (``weight``) for one signature, or a release."""

    run_id: str
    function_hash: str
    timestamp: float
    calls: int
    signature_hash: str
    sampled_calls: int
    sampled_seconds: float
    weight: int
    sample_every: int | None
    released_by: str | None


@dataclass(frozen=True, slots=True)
class FunctionName:
    function_hash: str
    name: str
    qualname: str
    module: str


@dataclass(frozen=True, slots=True)
class RunRecord:
    run_id: str
    run_name: str
    started_at: float
    host: str
    pid: int


@dataclass(frozen=True)
class CacheRecords:
    compiles: tuple[CompiledRecord, ...]
    stats: tuple[StatsRecord, ...]
    functions: dict[str, FunctionName]
    runs: dict[str, RunRecord]


@dataclass(frozen=True, slots=True)
class EntryOrigin:
    """Who wrote a persistent-cache entry, as the store saw it, and how often it was read."""

    key: str
    function_hash: str
    name: str
    run_id: str
    written_at: float
    hits: int


def _weight(buckets: Any) -> int:
    if not isinstance(buckets, dict):
        return 0
    total = 0
    for value in buckets.values():
        if isinstance(value, (list, tuple)) and len(value) == 2:
            total += int(value[1] or 0)
    return total


def cache_functions(
    conn: sa.Connection,
    filters: Filters,
    function_hashes: Sequence[str] | None = None,
    runs: Sequence[str] | None = None,
) -> list[tuple[str, str, float]]:
    """(run_id, function_hash, first compile) of every function that compiled under the
    filters (and in ``runs`` when given), newest run first: what a page of the cache is cut from."""
    e, r = models.compile_events, models.runs
    q = filters.apply(
        e,
        sa.select(e.c.run_id, e.c.function_hash, sa.func.min(e.c.timestamp).label("first")).where(
            e.c.compiled, e.c.kind != Kind.STALE_CAPTURE
        ),
    )
    if function_hashes is not None:
        q = q.where(e.c.function_hash.in_(list(function_hashes)))
    if runs is not None:
        q = q.where(e.c.run_id.in_(list(runs)))
    q = q.group_by(e.c.run_id, e.c.function_hash)
    rows = conn.execute(q).all()
    started = {
        row.run_id: row.started_at
        for row in conn.execute(sa.select(r.c.run_id, r.c.started_at).where(r.c.run_id.in_({x.run_id for x in rows})))
    }
    return sorted(
        ((row.run_id, row.function_hash, float(row.first)) for row in rows),
        key=lambda t: (-started.get(t[0], 0.0), t[0], t[2], t[1]),
    )


def read_cache(conn: sa.Connection, filters: Filters, pairs: Iterable[tuple[str, str]] | None = None) -> CacheRecords:
    """The compiles, statistics, names and runs of the given (run_id, function_hash) pairs
    (every pair under the filters when None)."""
    if pairs is None:
        pairs = [(run, fn) for run, fn, _ in cache_functions(conn, filters)]
    wanted = set(pairs)
    runs_wanted = sorted({run for run, _ in wanted})
    fns_wanted = sorted({fn for _, fn in wanted})
    compiles: list[CompiledRecord] = []
    stats: list[StatsRecord] = []
    for chunk in in_chunks(fns_wanted):
        compiles += _read_compiles(conn, filters, chunk, runs_wanted, wanted)
        stats += _read_stats(conn, filters, chunk, runs_wanted, wanted)
    compiles.sort(key=lambda c: (c.timestamp, c.event_id))
    stats.sort(key=lambda x: x.timestamp)
    return CacheRecords(tuple(compiles), tuple(stats), _read_names(conn, fns_wanted), _read_runs(conn, runs_wanted))


def _read_compiles(
    conn: sa.Connection, filters: Filters, chunk: list[str], runs: list[str], wanted: set[tuple[str, str]]
) -> list[CompiledRecord]:
    """The compiles of the wanted pairs among these functions and runs, under the filters' time span."""
    e = models.compile_events
    q = sa.select(
        e.c.event_id,
        e.c.run_id,
        e.c.function_hash,
        e.c.timestamp,
        e.c.kind,
        e.c.cause,
        e.c.warmup,
        e.c.signature_hash,
        e.c.device,
        cost_expr(e).label("seconds"),
        e.c.memory,
        e.c.host_bytes,
        e.c.host_bytes_before,
        e.c.peak_host_bytes,
        e.c.persistent_cache,
        e.c.persistent_cache_reason,
        e.c.persistent_cache_key,
        e.c.cache_time_saved_seconds,
        e.c.persistent_cache_bytes,
        e.c.compile_seconds,
        e.c.call_path,
        e.c.slow_reason,
    ).where(e.c.function_hash.in_(chunk), e.c.run_id.in_(runs), e.c.compiled, e.c.kind != Kind.STALE_CAPTURE)
    q = Filters(since=filters.since, until=filters.until).apply(e, q)
    return [
        CompiledRecord(
            row.event_id,
            row.run_id,
            row.function_hash,
            float(row.timestamp),
            row.kind,
            row.cause,
            bool(row.warmup),
            row.signature_hash or "",
            row.device,
            float(row.seconds or 0.0),
            row.memory if isinstance(row.memory, dict) else None,
            row.host_bytes,
            row.host_bytes_before,
            row.peak_host_bytes,
            row.persistent_cache,
            row.persistent_cache_reason,
            row.persistent_cache_key,
            row.cache_time_saved_seconds,
            row.persistent_cache_bytes,
            row.compile_seconds,
            row.call_path,
            row.slow_reason,
        )
        for row in _wanted_rows(conn, q, wanted)
    ]


def _read_stats(
    conn: sa.Connection, filters: Filters, chunk: list[str], runs: list[str], wanted: set[tuple[str, str]]
) -> list[StatsRecord]:
    """The call statistics of the wanted pairs among these functions and runs."""
    s = models.call_stats
    # Statistics after the filter's start count (hits of executables made before it
    # are not shown, their executables being outside the filter).
    sq = sa.select(
        s.c.run_id,
        s.c.function_hash,
        s.c.timestamp,
        s.c.calls,
        s.c.signature_hash,
        s.c.sampled_calls,
        s.c.sampled_seconds,
        s.c.run_buckets,
        s.c.sample_every,
        s.c.released_by,
    ).where(s.c.function_hash.in_(chunk), s.c.run_id.in_(runs))
    if filters.since is not None:
        sq = sq.where(s.c.timestamp >= filters.since)
    return [
        StatsRecord(
            row.run_id,
            row.function_hash,
            float(row.timestamp),
            int(row.calls or 0),
            row.signature_hash or "",
            int(row.sampled_calls or 0),
            float(row.sampled_seconds or 0.0),
            _weight(row.run_buckets),
            row.sample_every,
            row.released_by,
        )
        for row in _wanted_rows(conn, sq, wanted)
    ]


def _wanted_rows(conn: sa.Connection, query: sa.Select[Any], wanted: set[tuple[str, str]]) -> Iterator[sa.Row[Any]]:
    """The query's rows of the wanted (run, function) pairs: its IN lists select every run
    with every function, more than the pairs asked for."""
    return (row for row in conn.execute(query) if (row.run_id, row.function_hash) in wanted)


def _read_names(conn: sa.Connection, function_hashes: list[str]) -> dict[str, FunctionName]:
    """The names of these functions, by hash."""
    f = models.functions
    return {
        row.function_hash: FunctionName(row.function_hash, row.name, row.qualname, row.module or "")
        for chunk in in_chunks(function_hashes)
        for row in conn.execute(
            sa.select(f.c.function_hash, f.c.name, f.c.qualname, f.c.module).where(f.c.function_hash.in_(chunk))
        )
    }


def _read_runs(conn: sa.Connection, run_ids: list[str]) -> dict[str, RunRecord]:
    """These runs' records, by id."""
    r = models.runs
    return {
        row.run_id: RunRecord(row.run_id, row.run_name or "", float(row.started_at), row.host or "", int(row.pid or 0))
        for row in conn.execute(
            sa.select(r.c.run_id, r.c.run_name, r.c.started_at, r.c.host, r.c.pid).where(r.c.run_id.in_(run_ids))
        )
    }


def latest_run(conn: sa.Connection) -> str | None:
    """The newest run that compiled anything (what ``cachewatch cache`` shows by default)."""
    r, e = models.runs, models.compile_events
    row = conn.execute(
        sa.select(r.c.run_id)
        .where(sa.exists(sa.select(e.c.id).where(e.c.run_id == r.c.run_id, e.c.compiled)))
        .order_by(r.c.started_at.desc())
        .limit(1)
    ).first()
    return row.run_id if row is not None else None


def run_cache_directory(conn: sa.Connection, run_id: str) -> str | None:
    """The persistent cache directory the run's latest compile that asked the cache used."""
    e = models.compile_events
    return conn.execute(
        sa.select(e.c.persistent_cache_dir)
        .where(e.c.run_id == run_id, e.c.persistent_cache_dir.is_not(None))
        .order_by(e.c.timestamp.desc())
        .limit(1)
    ).scalar()


def entry_origins(conn: sa.Connection, keys: Sequence[str]) -> dict[str, EntryOrigin]:
    """Per persistent-cache key: the compile that wrote it (the earliest seen writing it,
    else the earliest that asked for it) and how many compiles read it (hits)."""
    e, f = models.compile_events, models.functions
    out: dict[str, EntryOrigin] = {}
    hits: dict[str, int] = {}
    keys = sorted(set(keys))
    for chunk in in_chunks(keys):
        q = (
            sa.select(
                e.c.persistent_cache_key, e.c.persistent_cache, e.c.function_hash, f.c.name, e.c.run_id, e.c.timestamp
            )
            .join(f, f.c.function_hash == e.c.function_hash)
            .where(e.c.persistent_cache_key.in_(chunk))
            .order_by(e.c.timestamp)
        )
        for row in conn.execute(q):
            key = row.persistent_cache_key
            if row.persistent_cache == PersistentCache.HIT:
                hits[key] = hits.get(key, 0) + 1
            known = out.get(key)
            if known is None or (row.persistent_cache == PersistentCache.WRITTEN and known.hits < 0):
                # hits < 0 marks an origin that is not a write: a later write replaces it.
                origin_hits = 0 if row.persistent_cache == PersistentCache.WRITTEN else -1
                out[key] = EntryOrigin(key, row.function_hash, row.name, row.run_id, float(row.timestamp), origin_hits)
    return {
        key: EntryOrigin(o.key, o.function_hash, o.name, o.run_id, o.written_at, hits.get(key, 0))
        for key, o in out.items()
    }


@dataclass(frozen=True, slots=True)
class WrittenEntry:
    """An entry the store saw written to a cache directory: who wrote it, its size as
    written, and how many recorded compiles read it from that directory."""

    origin: EntryOrigin
    bytes: int | None


def entries_written_to(conn: sa.Connection, directory: str) -> list[WrittenEntry]:
    """Every entry recorded as written to ``directory`` (compiles record the directory of
    their cache since cachewatch 0018; older ones name none and are not here), each once
    (its first write) with the reads recorded from that directory."""
    e, f = models.compile_events, models.functions
    q = (
        sa.select(
            e.c.persistent_cache_key,
            e.c.persistent_cache,
            e.c.persistent_cache_bytes,
            e.c.function_hash,
            f.c.name,
            e.c.run_id,
            e.c.timestamp,
        )
        .join(f, f.c.function_hash == e.c.function_hash)
        .where(
            e.c.persistent_cache_dir == directory,
            e.c.persistent_cache_key.is_not(None),
            e.c.persistent_cache.in_([PersistentCache.WRITTEN.value, PersistentCache.HIT.value]),
        )
        .order_by(e.c.timestamp)
    )
    written: dict[str, tuple[EntryOrigin, int | None]] = {}
    hits: dict[str, int] = {}
    for row in conn.execute(q):
        key = row.persistent_cache_key
        if row.persistent_cache == PersistentCache.HIT:
            hits[key] = hits.get(key, 0) + 1
        elif key not in written:
            origin = EntryOrigin(key, row.function_hash, row.name, row.run_id, float(row.timestamp), 0)
            written[key] = (origin, row.persistent_cache_bytes)
    return [WrittenEntry(replace(origin, hits=hits.get(key, 0)), size) for key, (origin, size) in written.items()]


@dataclass(frozen=True, slots=True)
class LiveExecutables:
    """A function's executables not released as of its newest run's last record."""

    function_hash: str
    run_id: str
    live: int
    memory_bytes: int  # XLA's figures summed over them (parts as cache_view counts them)


def live_executables(conn: sa.Connection, runs: int, held: Callable[[Any], int]) -> list[LiveExecutables]:
    """Per function, in its newest of the ``runs`` most recently started runs that compiled:
    the compiles after its last release, and their memory. Reads only those compiles (what
    JAX still holds), never a run's whole history: /metrics asks this on every scrape."""
    r, e, s = models.runs, models.compile_events, models.call_stats
    recent = {
        row.run_id: float(row.started_at)
        for row in conn.execute(
            sa.select(r.c.run_id, r.c.started_at)
            .where(sa.exists(sa.select(e.c.id).where(e.c.run_id == r.c.run_id, e.c.compiled)))
            .order_by(r.c.started_at.desc())
            .limit(runs)
        )
    }
    if not recent:
        return []
    newest: dict[str, str] = {}
    for row in conn.execute(
        sa.select(e.c.function_hash, e.c.run_id)
        .where(e.c.run_id.in_(list(recent)), e.c.compiled, e.c.kind != Kind.STALE_CAPTURE)
        .group_by(e.c.function_hash, e.c.run_id)
    ):
        known = newest.get(row.function_hash)
        if known is None or recent[row.run_id] > recent[known]:
            newest[row.function_hash] = row.run_id
    released = (
        sa.select(s.c.run_id, s.c.function_hash, sa.func.max(s.c.timestamp).label("at"))
        .where(s.c.run_id.in_(list(recent)), s.c.released_by.is_not(None))
        .group_by(s.c.run_id, s.c.function_hash)
        .subquery()
    )
    q = (
        sa.select(e.c.function_hash, e.c.run_id, e.c.memory)
        .select_from(
            e.outerjoin(
                released, sa.and_(released.c.run_id == e.c.run_id, released.c.function_hash == e.c.function_hash)
            )
        )
        .where(
            e.c.run_id.in_(list(recent)),
            e.c.compiled,
            e.c.kind != Kind.STALE_CAPTURE,
            sa.or_(released.c.at.is_(None), e.c.timestamp > released.c.at),
        )
    )
    counts: dict[str, list[int]] = {fn: [0, 0] for fn in newest}
    for function_hash, run_id, memory in conn.execute(q):
        if newest.get(function_hash) != run_id:
            continue
        found = counts[function_hash]
        found[0] += 1
        found[1] += held(memory)
    return [LiveExecutables(fn, newest[fn], n, size) for fn, (n, size) in counts.items()]


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
            sa.select(
                e.c.run_id, e.c.persistent_cache_hit, e.c.cache_key, e.c.program_fingerprint, e.c.lowered_fingerprint
            )
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
        programs = (
            (earlier.program_fingerprint, earlier.lowered_fingerprint),
            (row.get("program_fingerprint"), row.get("lowered_fingerprint")),
        )
        row["cache_miss"] = explain_cache_miss(
            earlier.cache_key,
            key,
            earlier_run=earlier.run_id,
            earlier_hit=earlier.persistent_cache_hit,
            programs=programs,
            module_diff=_module_diff(conn, programs),
        )
    return rows


def _module_diff(
    conn: sa.Connection, programs: tuple[tuple[str | None, str | None], tuple[str | None, str | None]]
) -> ModuleDiff | None:
    """The two lowered modules compared, read only for the one case their names explain:
    the same optimised program from modules that differ, both kept in the store."""
    (program_before, lowered_before), (program_after, lowered_after) = programs
    if not program_before or program_before != program_after or not lowered_before or lowered_before == lowered_after:
        return None
    before = program_reads.lowered_text(conn, lowered_before)
    after = program_reads.lowered_text(conn, lowered_after) if before is not None else None
    return diff_modules(before, after) if before is not None and after is not None else None
