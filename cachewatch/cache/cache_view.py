"""JAX's caches as a cache: per function and compiled variant, when each executable was
made, how often it served a call, what it holds in memory, when it was released; the
persistent compilation cache per run (its directory is audited in cache_directory.py).

    report = cache_report(records)             # records: cache_reads.read_cache(...)
    for fn in report.functions: fn.live, fn.live_bytes, fn.variants

A *variant* is one executable: one compile of one function for a signature, placement
and context. Its ``calls`` are the calls it served from the cache (hits: the call that
compiled it is not one). They are exact where the function had one variant in the
run (every counted call was that variant's), else the calls its sampled run times
stand for (``calls_exact`` False): within a few calls of the truth when the program
calls one signature in stretches; None where calls are not counted (a jit cachewatch
did not wrap, or run-time sampling off with several variants).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..core import tables
from ..core.events import Kind, PersistentCache, held_bytes
from ..core.figures import bytes_text, seconds_text
from . import cache_directory
from .cache_reads import CacheRecords, CompiledRecord, StatsRecord


@dataclass(frozen=True)
class Variant:
    """One executable of one function."""

    event_id: str
    run_id: str
    function_hash: str
    signature_hash: str
    device: str | None
    created_at: float
    compile_seconds: float
    cause: str
    warmup: bool
    calls: int | None  # calls served from the cache (hits)
    calls_exact: bool
    run_seconds: float | None  # estimated run time of those calls
    last_hit: float | None  # the statistics flush that last counted a hit (an upper bound)
    released_at: float | None
    released_by: str | None
    memory: dict[str, int] | None  # XLA's figures: generated_code, argument, output, temp
    host_bytes: int | None
    peak_host_bytes: int | None
    persistent_cache: str | None
    persistent_cache_reason: str | None
    persistent_cache_key: str | None
    persistent_cache_bytes: int | None = None
    call_path: str | None = None  # fast (JAX's C++ dispatch) or slow (its Python path, every call)
    slow_reason: str | None = None

    @property
    def live(self) -> bool:
        return self.released_at is None

    @property
    def executable_bytes(self) -> int:
        """What JAX's cache holds for the executable: its code (events.held_bytes), not
        the arguments, outputs and temporaries of a call."""
        return held_bytes(self.memory)

    @property
    def never_hit(self) -> bool:
        """Compiled and never used again (known only where calls are counted)."""
        return self.calls == 0

    def as_dict(self) -> dict[str, object]:
        return {
            "event_id": self.event_id,
            "run_id": self.run_id,
            "function_hash": self.function_hash,
            "signature_hash": self.signature_hash,
            "device": self.device,
            "created_at": self.created_at,
            "compile_seconds": self.compile_seconds,
            "cause": self.cause,
            "warmup": self.warmup,
            "calls": self.calls,
            "calls_exact": self.calls_exact,
            "run_seconds": self.run_seconds,
            "last_hit": self.last_hit,
            "live": self.live,
            "released_at": self.released_at,
            "released_by": self.released_by,
            "memory": self.memory,
            "executable_bytes": self.executable_bytes,
            "host_bytes": self.host_bytes,
            "peak_host_bytes": self.peak_host_bytes,
            "persistent_cache": self.persistent_cache,
            "persistent_cache_reason": self.persistent_cache_reason,
            "persistent_cache_key": self.persistent_cache_key,
            "persistent_cache_bytes": self.persistent_cache_bytes,
            "call_path": self.call_path,
            "slow_reason": self.slow_reason,
        }


@dataclass(frozen=True)
class LivePoint:
    """Executables alive in one function's caches from ``timestamp`` on, and their bytes."""

    timestamp: float
    live: int
    bytes: int


@dataclass(frozen=True)
class FunctionCache:
    run_id: str
    function_hash: str
    name: str
    qualname: str
    module: str
    variants: tuple[Variant, ...]
    timeline: tuple[LivePoint, ...]
    releases: tuple[tuple[float, str], ...]
    calls_counted: str  # "exact", "sampled" or "not counted"
    persistent: PersistentFigures | None = None  # None: no compile asked the persistent cache

    @property
    def live(self) -> int:
        return sum(1 for v in self.variants if v.live)

    @property
    def live_bytes(self) -> int:
        return sum(v.executable_bytes for v in self.variants if v.live)

    @property
    def peak_live(self) -> int:
        return max((p.live for p in self.timeline), default=0)

    @property
    def never_hit(self) -> tuple[Variant, ...]:
        return tuple(v for v in self.variants if v.never_hit)

    def as_dict(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "function_hash": self.function_hash,
            "name": self.name,
            "qualname": self.qualname,
            "module": self.module,
            "executables": len(self.variants),
            "live": self.live,
            "live_bytes": self.live_bytes,
            "peak_live": self.peak_live,
            "calls_counted": self.calls_counted,
            "never_hit": len(self.never_hit),
            "never_hit_compile_seconds": sum(v.compile_seconds for v in self.never_hit),
            "releases": [{"timestamp": t, "by": by} for t, by in self.releases],
            "timeline": [{"timestamp": p.timestamp, "live": p.live, "bytes": p.bytes} for p in self.timeline],
            "variants": [v.as_dict() for v in self.variants],
            "persistent": self.persistent.as_dict() if self.persistent else None,
        }


@dataclass(frozen=True)
class PersistentFigures:
    """What the persistent compilation cache did for a set of compiles (a run's, or one
    function's in a run)."""

    results: dict[str, int]  # hit, written, not_written, off -> compiles
    not_written: dict[str, int]  # reason -> compiles
    saved_seconds: float  # compile time the hits saved, as JAX reports it
    # XLA compile seconds of the compiles that asked the cache and compiled: what hits
    # would have saved them (a hit still traces and lowers).
    missed_seconds: float

    @property
    def hit_rate(self) -> float | None:
        asked = sum(n for result, n in self.results.items() if result != PersistentCache.OFF)
        return self.results.get(PersistentCache.HIT, 0) / asked if asked else None

    def as_dict(self) -> dict[str, object]:
        return {
            "results": dict(self.results),
            "not_written": dict(self.not_written),
            "saved_seconds": self.saved_seconds,
            "missed_seconds": self.missed_seconds,
            "hit_rate": self.hit_rate,
        }


@dataclass(frozen=True)
class PersistentRun(PersistentFigures):
    """What the persistent compilation cache did for one run's compiles."""

    run_id: str = ""

    def as_dict(self) -> dict[str, object]:
        return {"run_id": self.run_id, **super().as_dict()}


@dataclass(frozen=True)
class CacheReport:
    functions: tuple[FunctionCache, ...]
    persistent: tuple[PersistentRun, ...]

    @property
    def never_hit(self) -> tuple[Variant, ...]:
        return tuple(v for fn in self.functions for v in fn.never_hit)

    def as_dict(self) -> dict[str, object]:
        return {
            "functions": [fn.as_dict() for fn in self.functions],
            "persistent": [p.as_dict() for p in self.persistent],
        }


def cache_report(records: CacheRecords) -> CacheReport:
    """Entries, live counts and the persistent cache per run, from the store's records."""
    compiles: dict[tuple[str, str], list[CompiledRecord]] = {}
    for c in records.compiles:
        compiles.setdefault((c.run_id, c.function_hash), []).append(c)
    stats: dict[tuple[str, str], list[StatsRecord]] = {}
    for s in records.stats:
        stats.setdefault((s.run_id, s.function_hash), []).append(s)
    functions = []
    for (run_id, function_hash), made in compiles.items():
        name = records.functions.get(function_hash)
        functions.append(
            _function_cache(
                run_id,
                function_hash,
                (name.name, name.qualname, name.module) if name else (function_hash[:12], "", ""),
                made,
                stats.get((run_id, function_hash), []),
            )
        )
    started = {run_id: run.started_at for run_id, run in records.runs.items()}
    functions.sort(key=lambda fn: (-started.get(fn.run_id, 0.0), -fn.live, fn.name))
    persistent = _persistent_by_run(records.compiles)
    persistent.sort(key=lambda p: -started.get(p.run_id, 0.0))
    return CacheReport(tuple(functions), tuple(persistent))


def _function_cache(
    run_id: str,
    function_hash: str,
    names: tuple[str, str, str],
    made: list[CompiledRecord],
    stats: list[StatsRecord],
) -> FunctionCache:
    releases = tuple((s.timestamp, s.released_by) for s in stats if s.released_by)
    counted = [s for s in stats if not s.released_by]
    made = sorted(made, key=lambda c: c.timestamp)
    released = _first_release_after(made, releases)
    mode, calls, last_hit, run_seconds = _hits(made, released, counted)
    variants = tuple(
        Variant(
            event_id=c.event_id,
            run_id=run_id,
            function_hash=function_hash,
            signature_hash=c.signature_hash,
            device=c.device,
            created_at=c.timestamp,
            compile_seconds=c.seconds,
            cause=c.cause,
            warmup=c.warmup or c.kind == Kind.AHEAD,
            calls=calls[i],
            calls_exact=mode == "exact",
            run_seconds=run_seconds[i],
            last_hit=last_hit[i],
            released_at=released[i][0],
            released_by=released[i][1],
            memory=c.memory,
            host_bytes=c.host_bytes,
            peak_host_bytes=c.peak_host_bytes,
            persistent_cache=c.persistent_cache,
            persistent_cache_reason=c.persistent_cache_reason,
            persistent_cache_key=c.persistent_cache_key,
            persistent_cache_bytes=c.persistent_cache_bytes,
            call_path=c.call_path,
            slow_reason=c.slow_reason,
        )
        for i, c in enumerate(made)
    )
    return FunctionCache(
        run_id,
        function_hash,
        *names,
        variants=variants,
        timeline=_timeline(variants),
        releases=releases,
        calls_counted=mode,
        persistent=_persistent_figures(made),
    )


def _first_release_after(
    made: list[CompiledRecord], releases: tuple[tuple[float, str], ...]
) -> list[tuple[float | None, str | None]]:
    """For each compile (in time order), the first release at or after it: when and by what."""
    released: list[tuple[float | None, str | None]] = []
    for c in made:
        after = [(t, by) for t, by in releases if t >= c.timestamp]
        released.append(min(after) if after else (None, None))
    return released


def _hits(
    made: list[CompiledRecord],
    released: list[tuple[float | None, str | None]],
    counted: list[StatsRecord],
) -> tuple[str, list[int | None], list[float | None], list[float | None]]:
    """How the calls were counted ("exact", "sampled" or "not counted") and, per compile,
    its hits, last hit and run seconds."""
    keys = {(c.signature_hash, c.device) for c in made}
    total_calls = sum(s.calls for s in counted)
    # A compile made by a call (not ahead of time by a warm-up) counts that call.
    compiling_calls = sum(1 for c in made if c.kind != Kind.AHEAD)
    sampling = any((s.sample_every or 0) > 0 for s in counted)
    calls: list[int | None]
    last_hit: list[float | None]
    if not counted:
        mode = "not counted"
        calls, last_hit = [None] * len(made), [None] * len(made)
        run_seconds: list[float | None] = [None] * len(made)
    elif len(keys) == 1:
        mode = "exact"
        # Every counted call was this variant's; each compiling call is no hit.
        if len(made) == 1:
            calls = [max(0, total_calls - compiling_calls)]
            last_hit = [max(s.timestamp for s in counted) if calls[0] else None]
        else:  # made again after a release: each flush's calls go to the one alive then
            calls, last_hit = _split_by_time(made, released, [(s.timestamp, s.calls) for s in counted if s.calls])
            calls = [max(0, (n or 0) - (1 if c.kind != Kind.AHEAD else 0)) for n, c in zip(calls, made, strict=False)]
        run_seconds = _run_seconds(made, calls, counted)
    elif sampling:
        mode = "sampled"
        calls = [0] * len(made)
        last_hit = [None] * len(made)
        for sig in {c.signature_hash for c in made}:
            mine = [i for i, c in enumerate(made) if c.signature_hash == sig]
            got, when = _split_by_time(
                [made[i] for i in mine],
                [released[i] for i in mine],
                [(s.timestamp, s.weight) for s in counted if s.signature_hash == sig and s.weight],
            )
            for i, n, t in zip(mine, got, when, strict=False):
                calls[i], last_hit[i] = n or 0, t
        run_seconds = _run_seconds(made, calls, counted)
    else:
        mode = "not counted"
        calls, last_hit, run_seconds = [None] * len(made), [None] * len(made), [None] * len(made)
    return mode, calls, last_hit, run_seconds


def _split_by_time(
    made: Sequence[CompiledRecord], released: Sequence[tuple[float | None, str | None]], counts: list[tuple[float, int]]
) -> tuple[list[int | None], list[float | None]]:
    """Counts flushed at times, given to the executable alive when each was flushed (the
    latest made before it and not released by then; the latest made, when none is)."""
    calls: list[int | None] = [0] * len(made)
    last: list[float | None] = [None] * len(made)
    for when, n in counts:
        alive = [i for i, c in enumerate(made) if c.timestamp <= when and _alive_at(released[i][0], when)]
        earlier = [i for i, c in enumerate(made) if c.timestamp <= when]
        target = alive[-1] if alive else (earlier[-1] if earlier else None)
        if target is None:
            continue
        calls[target] = (calls[target] or 0) + n
        last[target] = max(when, last[target] or when)
    return calls, last


def _alive_at(released_at: float | None, when: float) -> bool:
    return released_at is None or released_at > when


def _run_seconds(
    made: Sequence[CompiledRecord], calls: list[int | None], counted: list[StatsRecord]
) -> list[float | None]:
    """Each variant's calls valued at its signature's sampled mean run time."""
    per_sig: dict[str, list[float]] = {}
    for s in counted:
        if s.sampled_calls and s.signature_hash:
            found = per_sig.setdefault(s.signature_hash, [0.0, 0.0])
            found[0] += s.sampled_seconds
            found[1] += s.sampled_calls
    out: list[float | None] = []
    for c, n in zip(made, calls, strict=False):
        mean = per_sig.get(c.signature_hash)
        out.append(mean[0] / mean[1] * n if mean and mean[1] and n is not None else None)
    return out


def _timeline(variants: Sequence[Variant]) -> tuple[LivePoint, ...]:
    steps: list[tuple[float, int, int]] = []
    for v in variants:
        steps.append((v.created_at, +1, v.executable_bytes))
        if v.released_at is not None:
            steps.append((v.released_at, -1, -v.executable_bytes))
    steps.sort(key=lambda s: (s[0], -s[1]))
    live = size = 0
    points: list[LivePoint] = []
    for when, change, nbytes in steps:
        live += change
        size += nbytes
        if points and points[-1].timestamp == when:
            points[-1] = LivePoint(when, live, size)
        else:
            points.append(LivePoint(when, live, size))
    return tuple(points)


def _persistent_by_run(compiles: Sequence[CompiledRecord]) -> list[PersistentRun]:
    by_run: dict[str, list[CompiledRecord]] = {}
    for c in compiles:
        by_run.setdefault(c.run_id, []).append(c)
    runs = []
    for run_id, mine in by_run.items():
        f = _persistent_figures(mine)
        if f is not None:
            runs.append(PersistentRun(f.results, f.not_written, f.saved_seconds, f.missed_seconds, run_id=run_id))
    return runs


def _persistent_figures(compiles: Sequence[CompiledRecord]) -> PersistentFigures | None:
    """What the cache did for these compiles; None when none of them asked it."""
    results: dict[str, int] = {}
    reasons: dict[str, int] = {}
    saved = missed = 0.0
    for c in compiles:
        if c.persistent_cache is None:
            continue
        results[c.persistent_cache] = results.get(c.persistent_cache, 0) + 1
        if c.persistent_cache == PersistentCache.NOT_WRITTEN and c.persistent_cache_reason:
            reasons[c.persistent_cache_reason] = reasons.get(c.persistent_cache_reason, 0) + 1
        if c.persistent_cache == PersistentCache.HIT and c.cache_time_saved_seconds:
            saved += c.cache_time_saved_seconds
        if c.persistent_cache in (PersistentCache.WRITTEN, PersistentCache.NOT_WRITTEN) and c.xla_seconds:
            missed += c.xla_seconds
    return PersistentFigures(results, reasons, saved, missed) if results else None


# ------------------------------------------------------------------ as text


def text(
    report: CacheReport, audit: cache_directory.DirectoryAudit | None = None, audit_note: str | None = None
) -> str:
    """The report for a terminal: per function its executables, then the variants that
    never served a call, the persistent cache per run, and the directory."""
    lines: list[str] = []
    lines += _functions_text(report)
    lines += _never_hit_text(report)
    lines += _slow_path_text(report)
    for p in report.persistent:
        lines += _persistent_text(p, report.functions)
    if audit_note:
        lines.append("")
        lines.append(audit_note)
    if audit is not None:
        lines.append("")
        lines += cache_directory.directory_text(audit)
    return "\n".join(lines)


def _functions_text(report: CacheReport) -> list[str]:
    """The table of each function's executables, with the note on what "live" means."""
    lines: list[str] = []
    if not report.functions:
        lines.append("No compiles recorded for this selection.")
    else:
        rows = []
        for fn in report.functions:
            released = ", ".join(sorted({by for _, by in fn.releases}))
            counted = sum(v.calls or 0 for v in fn.variants) if fn.calls_counted != "not counted" else None
            rows.append(
                [
                    fn.name,
                    fn.run_id[:8],
                    str(len(fn.variants)),
                    str(fn.live),
                    bytes_text(fn.live_bytes),
                    str(fn.peak_live),
                    "-" if counted is None else f"{counted} ({fn.calls_counted})",
                    str(len(fn.never_hit)),
                    released or "-",
                ]
            )
        lines.append(
            tables.text_table(
                [
                    "function",
                    "run",
                    "executables",
                    "live",
                    "live bytes",
                    "peak live",
                    "hits",
                    "never hit",
                    "released by",
                ],
                rows,
            )
        )
    if any(fn.live for fn in report.functions):
        lines.append(
            "Live: not released as of the run's last record. A run whose process has ended, or died, freed its "
            "executables at exit."
        )
    return lines


def _never_hit_text(report: CacheReport) -> list[str]:
    """The variants compiled and never called again (the first fifty)."""
    never = report.never_hit
    if not never:
        return []
    names = {fn.function_hash: fn.name for fn in report.functions}
    lines = [
        "",
        f"Compiled and never called again ({len(never)}, {seconds_text(sum(v.compile_seconds for v in never))}):",
    ]
    for v in never[:50]:
        lines.append(
            f"  {names.get(v.function_hash, v.function_hash[:12])}  signature {v.signature_hash[:12]}"
            f"{'  on ' + v.device if v.device else ''}  compile {seconds_text(v.compile_seconds)}"
            f"{'  (warm-up)' if v.warmup else ''}"
        )
    if len(never) > 50:
        lines.append(f"  ... and {len(never) - 50} more")
    return lines


def _slow_path_text(report: CacheReport) -> list[str]:
    """The variants JAX serves through its Python path on every call (no C++ fast path)."""
    slow = [(fn, v) for fn in report.functions for v in fn.variants if v.call_path == "slow"]
    if not slow:
        return []
    lines = ["", f"Served through JAX's Python path on every call, not its C++ fast path ({len(slow)}):"]
    for fn, v in slow[:50]:
        calls = "" if v.calls is None else f"  {v.calls} calls"
        lines.append(f"  {fn.name}  signature {v.signature_hash[:12]}  {v.slow_reason or 'other'}{calls}")
    if len(slow) > 50:
        lines.append(f"  ... and {len(slow) - 50} more")
    lines.append("  (`cachewatch findings` says what each costs and what gives it the fast path.)")
    return lines


def _persistent_text(p: PersistentRun, functions: Sequence[FunctionCache]) -> list[str]:
    """What the persistent compilation cache did in one run, and for each of its functions."""
    lines = ["", f"Persistent compilation cache, run {p.run_id[:8]}: {_figures_text(p)}"]
    for fn in functions:
        if fn.run_id == p.run_id and fn.persistent is not None:
            lines.append(f"  {fn.name}: {_figures_text(fn.persistent)}")
    return lines


def _figures_text(p: PersistentFigures) -> str:
    parts = [f"{n} {result.replace('_', ' ')}" for result, n in sorted(p.results.items())]
    why = ", ".join(f"{reason} {n}" for reason, n in sorted(p.not_written.items()))
    rate = "-" if p.hit_rate is None else f"{p.hit_rate:.0%}"
    return (
        ", ".join(parts)
        + (f" (not written: {why})" if why else "")
        + f"; hit rate {rate}; saved {seconds_text(p.saved_seconds)}"
        + f"; hits would have saved {seconds_text(p.missed_seconds)} more"
    )
