"""A run's compiles as a Chrome trace-event file: what Perfetto (ui.perfetto.dev) and
chrome://tracing open. Pure: it takes the rows trace_reads.py read and the run's storms.

    trace = perfetto.build(run, trace_reads.read_run(conn, run.run_id), storms)
    json.dumps(trace.as_json())     # {"traceEvents": [...], "displayTimeUnit": "ms", ...}

- One track per thread that compiled (``tid`` given in the order the threads first
  compiled, named by ``thread_name`` metadata). Each compile is a complete slice
  (``ph: "X"``) named after its function, from the compile's start, its duration the
  sum of its phases; the phases (trace, lower, then XLA compile, or the persistent
  cache read where the cache served it) are slices nested inside it, in that order.
  Slices of one thread that would overlap (two compiles timed at once on one thread)
  go to a second track of that thread, so that every track nests properly.
- ``cat`` tells them apart: ``compile`` (after the run's warm-up), ``warm-up`` (made
  during it), ``ahead`` (compiled ahead by ``cachewatch.warmup``), ``trace`` (a trace
  that compiled nothing), ``phase`` (a compile's phases), ``storm``.
- Storms are async slices (``ph: "b"``/``"e"``, ``cat: "storm"``) on the ``storms``
  track, from the storm's first compile to the end of its last.
- The counter ``cachewatch`` (``ph: "C"``) has one series, ``live executables``: the
  run's compiles so far less those JAX's caches released (``jax.clear_caches()``, a
  jit's ``clear_cache()``).

Times are whole microseconds from the run's start (the earliest compile's, if that is
earlier), so a child's span lies exactly inside its parent's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..core.events import VERSION, Kind, short_name
from ..store.runs import RunRef
from ..storms.results import Storm
from .trace_reads import CallRow, CompileRow, RunRecords

PID = 1
COUNTER = "cachewatch"
LIVE_SERIES = "live executables"
STORMS_TRACK = "storms"
# The categories of the slices, one word each, so that a viewer's filter picks them.
COMPILE, WARM_UP, AHEAD, TRACE, PHASE, STORM = "compile", "warm-up", "ahead", "trace", "phase", "storm"
CACHE_READ, XLA_COMPILE = "persistent cache read", "XLA compile"


@dataclasses.dataclass(frozen=True)
class ChromeTrace:
    """The trace: its events in the trace-event format, and what run it is."""

    events: tuple[dict[str, Any], ...]
    other: dict[str, str]

    def as_json(self) -> dict[str, Any]:
        return {"traceEvents": list(self.events), "displayTimeUnit": "ms", "otherData": dict(self.other)}


@dataclasses.dataclass(frozen=True)
class _Slice:
    """A compile laid out on its thread: start and phases in microseconds."""

    row: CompileRow
    start: int
    phases: tuple[tuple[str, int], ...]

    @property
    def dur(self) -> int:
        return sum(d for _, d in self.phases)

    @property
    def end(self) -> int:
        return self.start + self.dur


def category(row: CompileRow) -> str:
    """The slice's ``cat``: how the run came to compile it."""
    if row.kind == Kind.AHEAD:
        return AHEAD
    if not row.compiled:
        return TRACE
    return WARM_UP if row.warmup else COMPILE


def build(run: RunRef, records: RunRecords, storms: Sequence[Storm]) -> ChromeTrace:
    """The run's trace: its threads' compiles, its storms and its live executables."""
    rows = [r for r in records.compiles if r.compiled or (not r.nested and r.trace_seconds is not None)]
    origin = min([run.started_at, *(r.timestamp for r in rows)])
    slices = [_slice(r, origin) for r in rows]
    lanes = _lanes(slices)
    tids = _track_ids(lanes)
    storms_tid = len(tids) + 1
    calls = _calls_by_function(records.calls)
    events: list[dict[str, Any]] = [
        {
            "name": "process_name",
            "ph": "M",
            "pid": PID,
            "args": {"name": f"cachewatch run {run.run_name or run.run_id}"},
        }
    ]
    named = [*tids.items(), *([((STORMS_TRACK, 0), storms_tid)] if storms else [])]
    for (thread, lane), tid in named:
        events.append(
            {"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": _track(thread, lane)}}
        )
        events.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid, "args": {"sort_index": tid}})
    for piece, track in zip(slices, lanes, strict=True):
        events.extend(_slice_events(piece, tids[track], calls.get(piece.row.function_hash)))
    events.extend(_storm_events(storms, slices, origin, storms_tid))
    events.extend(_live_counter(slices, records.calls, origin))
    other = {"run_id": run.run_id, "run_name": run.run_name, "job": run.job, "jax_version": run.jax_version}
    return ChromeTrace(tuple(events), {**other, "backend": run.backend, "exported_by": f"cachewatch {VERSION}"})


def _us(seconds: float) -> int:
    return round(seconds * 1_000_000)


def _slice(row: CompileRow, origin: float) -> _Slice:
    compiled_by = CACHE_READ if row.persistent_cache == "hit" else XLA_COMPILE
    known = [("trace", row.trace_seconds), ("lower", row.lower_seconds), (compiled_by, row.compile_seconds)]
    phases = tuple((name, max(0, _us(seconds))) for name, seconds in known if seconds is not None)
    return _Slice(row, _us(row.timestamp - origin), phases)


def _lanes(slices: Sequence[_Slice]) -> list[tuple[str, int]]:
    """Each slice's (thread, lane): the thread's first lane where it starts after the
    lane's last slice ended, so that no two slices of a track overlap."""
    ends: dict[str, list[int]] = {}
    placed = []
    for piece in slices:
        lanes = ends.setdefault(piece.row.thread, [])
        free = next((i for i, end in enumerate(lanes) if piece.start >= end), len(lanes))
        if free == len(lanes):
            lanes.append(piece.end)
        else:
            lanes[free] = piece.end
        placed.append((piece.row.thread, free))
    return placed


def _track_ids(lanes: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """A ``tid`` per track: the threads' first tracks 1, 2, ... in the order they first
    compiled, then their overflow tracks."""
    firsts = list(dict.fromkeys(thread for thread, lane in lanes if lane == 0))
    extra = list(dict.fromkeys(lane for lane in lanes if lane[1] > 0))
    return {lane: tid for tid, lane in enumerate([*((t, 0) for t in firsts), *extra], start=1)}


def _track(thread: str, lane: int) -> str:
    name = thread or "(thread not recorded)"
    return name if lane == 0 else f"{name} (overlapping, {lane + 1})"


def _calls_by_function(calls: Sequence[CallRow]) -> dict[str, int]:
    found: dict[str, int] = {}
    for row in calls:
        found[row.function_hash] = found.get(row.function_hash, 0) + row.calls
    return found


def _slice_events(piece: _Slice, tid: int, calls: int | None) -> list[dict[str, Any]]:
    """The compile's slice, then its phases inside it, one after the other."""
    row = piece.row
    name = short_name(row.qualname or row.name) or row.function_hash[:12]
    out = [
        {
            "name": name,
            "cat": category(row),
            "ph": "X",
            "ts": piece.start,
            "dur": piece.dur,
            "pid": PID,
            "tid": tid,
            "args": _slice_args(row, calls),
        }
    ]
    at = piece.start
    for phase, dur in piece.phases:
        out.append(
            {"name": phase, "cat": PHASE, "ph": "X", "ts": at, "dur": dur, "pid": PID, "tid": tid, "args": {"of": name}}
        )
        at += dur
    return out


def _slice_args(row: CompileRow, calls: int | None) -> dict[str, Any]:
    """What a viewer shows of a selected compile (unknown figures left out)."""
    seconds = sum(s or 0.0 for s in (row.trace_seconds, row.lower_seconds, row.compile_seconds))
    args = {
        "function": row.qualname or row.name,
        "module": row.module,
        "function_hash": row.function_hash,
        "event_id": row.event_id,
        "cause": row.cause,
        "kind": row.kind,
        "warmup": row.warmup,
        "thread": row.thread,
        "signature_hash": row.signature_hash,
        "seconds": seconds,
        "trace_seconds": row.trace_seconds,
        "lower_seconds": row.lower_seconds,
        "compile_seconds": row.compile_seconds,
        "persistent_cache": row.persistent_cache,
        "persistent_cache_reason": row.persistent_cache_reason,
        "cache_time_saved_seconds": row.cache_time_saved_seconds,
        "explanation": row.explanation,
        "call_site": row.call_site,
        "executable_bytes": row.executable_bytes or None,
        "jaxpr_eqns": row.jaxpr_eqns,
        "hlo_ops": row.hlo_ops,
        "flops": row.flops,
        "call_path": row.call_path,
        "error": row.error,
        "function_calls_in_run": calls,
    }
    return {key: value for key, value in args.items() if value is not None and value != ""}


def _storm_events(storms: Sequence[Storm], slices: Sequence[_Slice], origin: float, tid: int) -> list[dict[str, Any]]:
    """Each storm as an async slice on the storms track, from its first compile's start to
    the end of its last compile."""
    ends: dict[str, list[tuple[int, int]]] = {}
    for piece in slices:
        ends.setdefault(piece.row.function_hash, []).append((piece.start, piece.end))
    out: list[dict[str, Any]] = []
    for number, storm in enumerate(sorted(storms, key=lambda s: (s.start, s.key)), start=1):
        start, last = _us(storm.start - origin), _us(storm.end - origin)
        members = {storm.function_hash, *storm.function_hashes}
        end = max([last, *(e for fn in members for s, e in ends.get(fn, ()) if start <= s <= last)])
        common = {"name": f"storm: {storm.short_name}", "cat": STORM, "id": f"storm-{number}", "pid": PID, "tid": tid}
        out.append({**common, "ph": "b", "ts": start, "args": _storm_args(storm)})
        out.append({**common, "ph": "e", "ts": end})
    return out


def _storm_args(storm: Storm) -> dict[str, Any]:
    return {
        "short_name": storm.short_name,
        "function": storm.qualname or storm.name,
        "function_hash": storm.function_hash,
        "call_site": storm.call_site,
        "compiles": storm.compiles,
        "dominant_cause": storm.dominant_cause,
        "causes": dict(storm.causes),
        "fix": storm.fix,
    }


def _live_counter(slices: Sequence[_Slice], calls: Sequence[CallRow], origin: float) -> list[dict[str, Any]]:
    """The live executables over time: one more at the end of each compile, a function's
    all gone at a release of its executables."""
    changes = [(piece.end, 1, piece.row.function_hash) for piece in slices if piece.row.compiled]
    changes += [(_us(row.timestamp - origin), 0, row.function_hash) for row in calls if row.released_by]
    live: dict[str, int] = {}
    total = 0
    points: dict[int, int] = {0: 0}
    for ts, compiled, function_hash in sorted(changes):
        if compiled:
            live[function_hash] = live.get(function_hash, 0) + 1
            total += 1
        else:
            total -= live.pop(function_hash, 0)
        points[max(0, ts)] = total  # the last change at a time stands for that time
    return [{"name": COUNTER, "ph": "C", "ts": ts, "pid": PID, "args": {LIVE_SERIES: n}} for ts, n in points.items()]
