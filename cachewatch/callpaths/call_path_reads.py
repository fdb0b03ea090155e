"""The calls of each function by the path JAX served them on, read from the store: the
slow-path calls by why (``call_stats.slow_calls``), the calls and timed samples beside
them, and each compile's path (``compile_events.call_path``).

A call's time on each path is the median of its timed samples (``core/runtimes.py``), as
a function's run time is everywhere else: the first call after a compile, always timed,
can take ten times a warm one, and a mean of a few samples would price every call at it."""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from ..core import runtimes
from ..core.events import FunctionInfo
from ..core.texts import commonest
from ..store import models, queries, rollup
from ..store.columns import Filters


@dataclass(frozen=True)
class PathCounts:
    """One function's calls in one run (of the filtered part of the store), by path."""

    run_id: str
    function: FunctionInfo
    calls: int  # every call counted
    compiles: int  # the calls that compiled
    slow: dict[str, int]  # calls served through JAX's Python path, by why
    call_seconds: float | None  # a call's run time, every variant's samples; None: none timed
    slow_variants: dict[str, int] = field(default_factory=dict)  # compiles given no fast path, by why
    # A call's run time split by the path of the variant it ran (a signature's executable
    # takes one path): of variants on JAX's Python path and on its C++ path.
    slow_call_seconds: float | None = None
    fast_call_seconds: float | None = None
    # What making the jit objects counted under slow['new_jit_object'] took, and the
    # user's line that made them (the one most rows name).
    jit_object_seconds: float = 0.0
    jit_made_at: str | None = None
    # The user's line that applied a transformation around the calls counted under
    # slow['under_transformation'] (the one most rows name).
    transformed_at: str | None = None

    @property
    def slow_calls(self) -> int:
        return sum(self.slow.values())

    @property
    def fast_calls(self) -> int:
        return max(0, self.calls - self.compiles - self.slow_calls)


_Keyed = dict[tuple[str, str], Any]  # by (run id, function hash)


def _slow_rows(
    conn: sa.Connection, filters: Filters, function_hashes: Iterable[str] | None
) -> tuple[_Keyed, _Keyed, _Keyed, _Keyed]:
    """By (run, function): the slow-path calls by why, what making jit objects anew took,
    and the lines that made them and that applied a transformation around the calls."""
    s = models.call_stats
    slow: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(collections.Counter)
    made: dict[tuple[str, str], float] = collections.defaultdict(float)
    made_at: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    transformed_at: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    rows = sa.select(
        s.c.run_id, s.c.function_hash, s.c.slow_calls, s.c.jit_object_seconds, s.c.jit_made_at, s.c.transformed_at
    ).where(s.c.slow_calls.is_not(None))
    if function_hashes is not None:
        rows = rows.where(s.c.function_hash.in_(list(function_hashes)))
    for run_id, function_hash, counted, seconds, site, transformed in conn.execute(filters.apply(s, rows)):
        if isinstance(counted, dict):
            slow[(run_id, function_hash)].update({str(k): int(v) for k, v in counted.items() if isinstance(v, int)})
        made[(run_id, function_hash)] += float(seconds or 0.0)
        if site:
            made_at[(run_id, function_hash)].append(site)
        if transformed:
            transformed_at[(run_id, function_hash)].append(transformed)
    return slow, made, made_at, transformed_at


def path_counts(
    conn: sa.Connection, filters: Filters, function_hashes: Iterable[str] | None = None
) -> list[PathCounts]:
    """Per run, the functions (of ``function_hashes``, when given) with calls on JAX's
    Python path in the filtered part, most such calls first."""
    slow, made, made_at, transformed_at = _slow_rows(conn, filters, function_hashes)
    wanted = sorted(key for key, counted in slow.items() if sum(counted.values()) > 0)
    if not wanted:
        return []
    hashes = sorted({h for _, h in wanted})
    runs = sorted({r for r, _ in wanted})
    compiles, variants, path_of = _compiles_by_path(conn, filters, hashes, runs)
    calls, timed = _calls_and_times(conn, filters, hashes, runs)

    def call_seconds(run_id: str, function_hash: str, path: str | None) -> float | None:
        return runtimes.per_call_seconds(
            {
                signature: buckets
                for signature, buckets in timed.get((run_id, function_hash), {}).items()
                if path is None or path_of.get((run_id, function_hash, signature)) == path
            }
        )

    infos = queries.function_infos(conn, hashes)
    found = [
        PathCounts(
            run_id,
            infos[h],
            calls[(run_id, h)],
            compiles[(run_id, h)],
            dict(slow[(run_id, h)]),
            call_seconds(run_id, h, None),
            dict(variants[(run_id, h)]),
            call_seconds(run_id, h, "slow"),
            call_seconds(run_id, h, "fast"),
            made[(run_id, h)],
            commonest(made_at[(run_id, h)]),
            commonest(transformed_at[(run_id, h)]),
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


def _calls_and_times(
    conn: sa.Connection, filters: Filters, hashes: list[str], runs: list[str]
) -> tuple[collections.Counter[tuple[str, str]], dict[tuple[str, str], dict[str, runtimes.Buckets]]]:
    """Per (run, function): its calls, and its timed samples' buckets by signature (a
    signature whose compile is not in view still counts towards the function's time)."""
    s = models.call_stats
    rows = sa.select(
        s.c.run_id,
        s.c.function_hash,
        s.c.signature_hash,
        s.c.calls,
        s.c.sampled_calls,
        s.c.sampled_seconds,
        s.c.run_buckets,
    ).where(s.c.function_hash.in_(hashes), s.c.run_id.in_(runs))
    calls: collections.Counter[tuple[str, str]] = collections.Counter()
    timed: dict[tuple[str, str], dict[str, runtimes.Buckets]] = collections.defaultdict(dict)
    for row in conn.execute(filters.apply(s, rows)).mappings():
        key = (row["run_id"], row["function_hash"])
        calls[key] += int(row["calls"] or 0)
        if row["sampled_calls"]:
            signature = row["signature_hash"] or ""
            runtimes.merge(timed[key].setdefault(signature, {}), rollup.row_buckets(row))
    return calls, timed


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
