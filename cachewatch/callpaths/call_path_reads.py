"""The calls of each function by the path JAX served them on, read from the store: the
slow-path calls by why (``call_stats.slow_calls``), the calls and timed samples beside
them, and each compile's path (``compile_events.call_path``)."""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass, field

import sqlalchemy as sa

from ..core.events import FunctionInfo
from ..store import models, queries
from ..store.columns import Filters


@dataclass(frozen=True)
class PathCounts:
    """One function's calls in one run (of the filtered part of the store), by path."""

    run_id: str
    function: FunctionInfo
    calls: int  # every call counted
    compiles: int  # the calls that compiled
    slow: dict[str, int]  # calls served through JAX's Python path, by why
    sampled_calls: int  # the calls the timed samples stand for
    sampled_seconds: float
    slow_variants: dict[str, int] = field(default_factory=dict)  # compiles given no fast path, by why
    # The timed samples split by the path of the variant they ran (a signature's executable
    # takes one path): (samples, seconds) of variants on JAX's Python path and on its C++ path.
    slow_sampled: tuple[int, float] = (0, 0.0)
    fast_sampled: tuple[int, float] = (0, 0.0)

    @property
    def slow_calls(self) -> int:
        return sum(self.slow.values())

    @property
    def fast_calls(self) -> int:
        return max(0, self.calls - self.compiles - self.slow_calls)


def path_counts(
    conn: sa.Connection, filters: Filters, function_hashes: Iterable[str] | None = None
) -> list[PathCounts]:
    """Per run, the functions (of ``function_hashes``, when given) with calls on JAX's
    Python path in the filtered part, most such calls first."""
    s = models.call_stats
    slow: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(collections.Counter)
    rows = sa.select(s.c.run_id, s.c.function_hash, s.c.slow_calls).where(s.c.slow_calls.is_not(None))
    if function_hashes is not None:
        rows = rows.where(s.c.function_hash.in_(list(function_hashes)))
    for run_id, function_hash, counted in conn.execute(filters.apply(s, rows)):
        if isinstance(counted, dict):
            slow[(run_id, function_hash)].update({str(k): int(v) for k, v in counted.items() if isinstance(v, int)})
    wanted = sorted(key for key, counted in slow.items() if sum(counted.values()) > 0)
    if not wanted:
        return []
    hashes = sorted({h for _, h in wanted})
    runs = sorted({r for r, _ in wanted})
    sums = sa.select(
        s.c.run_id,
        s.c.function_hash,
        sa.func.sum(s.c.calls).label("calls"),
        sa.func.sum(s.c.sampled_calls).label("sampled_calls"),
        sa.func.sum(s.c.sampled_seconds).label("sampled_seconds"),
    ).where(s.c.function_hash.in_(hashes), s.c.run_id.in_(runs))
    totals = {
        (r.run_id, r.function_hash): r
        for r in conn.execute(filters.apply(s, sums).group_by(s.c.run_id, s.c.function_hash))
    }
    compiles, variants, path_of = _compiles_by_path(conn, filters, hashes, runs)
    by_path = _samples_by_path(conn, filters, hashes, runs, path_of)
    infos = queries.function_infos(conn, hashes)
    found = [
        PathCounts(
            run_id,
            infos[h],
            int(totals[(run_id, h)].calls or 0) if (run_id, h) in totals else 0,
            compiles[(run_id, h)],
            dict(slow[(run_id, h)]),
            int(totals[(run_id, h)].sampled_calls or 0) if (run_id, h) in totals else 0,
            float(totals[(run_id, h)].sampled_seconds or 0.0) if (run_id, h) in totals else 0.0,
            dict(variants[(run_id, h)]),
            by_path.get((run_id, h, "slow"), (0, 0.0)),
            by_path.get((run_id, h, "fast"), (0, 0.0)),
        )
        for run_id, h in wanted
        if h in infos
    ]
    return sorted(found, key=lambda c: (-c.slow_calls, c.function.qualname, c.run_id))


def _compiles_by_path(
    conn: sa.Connection, filters: Filters, hashes: list[str], runs: list[str]
) -> tuple[
    dict[tuple[str, str], int], dict[tuple[str, str], collections.Counter[str]], dict[tuple[str, str, str], str]
]:
    """Per (run, function): its compiles, and those given no fast path by why; and per
    (run, function, signature), the path its variant takes."""
    e = models.compile_events
    compiles: dict[tuple[str, str], int] = collections.Counter()
    variants: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(collections.Counter)
    path_of: dict[tuple[str, str, str], str] = {}
    events = sa.select(e.c.run_id, e.c.function_hash, e.c.signature_hash, e.c.call_path, e.c.slow_reason).where(
        e.c.function_hash.in_(hashes), e.c.run_id.in_(runs), e.c.compiled
    )
    for run_id, function_hash, signature_hash, path, reason in conn.execute(filters.apply(e, events)):
        compiles[(run_id, function_hash)] += 1
        if path == "slow":
            variants[(run_id, function_hash)][reason or "other"] += 1
        if path in ("slow", "fast"):
            path_of[(run_id, function_hash, signature_hash)] = path
    return compiles, variants, path_of


def _samples_by_path(
    conn: sa.Connection,
    filters: Filters,
    hashes: list[str],
    runs: list[str],
    path_of: dict[tuple[str, str, str], str],
) -> dict[tuple[str, str, str], tuple[int, float]]:
    """(samples, seconds) per (run, function, path): each signature's timed samples under
    the path its compiled variant takes."""
    s = models.call_stats
    per_signature = (
        sa.select(
            s.c.run_id,
            s.c.function_hash,
            s.c.signature_hash,
            sa.func.sum(s.c.sampled_calls).label("samples"),
            sa.func.sum(s.c.sampled_seconds).label("seconds"),
        )
        .where(s.c.function_hash.in_(hashes), s.c.run_id.in_(runs), s.c.sampled_calls > 0)
        .group_by(s.c.run_id, s.c.function_hash, s.c.signature_hash)
    )
    found: dict[tuple[str, str, str], tuple[int, float]] = {}
    for row in conn.execute(filters.apply(s, per_signature)):
        path = path_of.get((row.run_id, row.function_hash, row.signature_hash))
        if path is None:
            continue  # a signature whose compile is not in view: its path is not known
        key = (row.run_id, row.function_hash, path)
        samples, seconds = found.get(key, (0, 0.0))
        found[key] = (samples + int(row.samples or 0), seconds + float(row.seconds or 0.0))
    return found


def slow_calls_by_reason(conn: sa.Connection) -> dict[tuple[str, str], int]:
    """Every function's calls on JAX's Python path in the whole store, by (function hash,
    why): what /metrics counts (the partial index holds only the rows that counted some)."""
    s = models.call_stats
    found: dict[tuple[str, str], int] = collections.Counter()
    for function_hash, counted in conn.execute(
        sa.select(s.c.function_hash, s.c.slow_calls).where(s.c.slow_calls.is_not(None))
    ):
        if isinstance(counted, dict):
            for reason, n in counted.items():
                if isinstance(n, int):
                    found[(function_hash, str(reason))] += n
    return dict(found)
