"""Call counters: how often each watched function is called, and its sampled run times.

One ``CallCounter`` per function (by hash), shared by every jit object around it. The
cache-hit path of ``cachewatch.jit`` (in C, ``_fastcall.c``, or its pure-Python twin in
``jit.py``) only increments ``calls`` and compares it with ``next_sample``; everything
else here runs on sampled calls, after compiles, and when the recorder takes the
statistics.
"""

from __future__ import annotations

import threading
import time
from types import ModuleType
from typing import TYPE_CHECKING

from ..core import config as configmod
from ..core import process, runtimes
from ..core.events import CallStats, FunctionInfo
from ..record import current, recorder

NEVER_SAMPLE = 1 << 62


class _PyCounter:
    """The pure-Python twin of ``_fastcall.Counter``."""

    __slots__ = ("calls", "next_sample")

    def __init__(self) -> None:
        self.calls = 0
        self.next_sample = 0


def native() -> ModuleType | None:
    """The cache-hit path in C (cachewatch/capture/_fastcall.c), built by pip when a C compiler is
    there; without it (or with CACHEWATCH_PURE_PYTHON set), the pure-Python twin in
    jit._python_watched does the same, slower."""
    if configmod.from_environment("pure_python"):
        return None
    try:
        from . import _fastcall
    except ImportError:  # pragma: no cover - the tests build it, and run the twin by switching it off
        return None
    return _fastcall


if TYPE_CHECKING:
    from ._fastcall import Counter as _Counter
    from ._fastcall import Watched as _Watched

    Watched: type[_Watched] | None
elif (_fastcall := native()) is not None:
    _Counter, Watched = _fastcall.Counter, _fastcall.Watched
else:
    _Counter, Watched = _PyCounter, None


# Calls named after each compile (see CallCounter.naming_until): at least, and at most.
NAMED_AFTER_COMPILE_MIN = 16
NAMED_AFTER_COMPILE_MAX = 256
# What naming them may take, at most: this share of the seconds the compile took.
NAMING_SHARE_OF_COMPILE = 0.1


class CallCounter(_Counter):
    """Calls of one function (by hash), shared by every jit object around it.

    ``calls`` and ``next_sample`` live in the base class, where the C hot path reads them.
    Sampled run times wait in ``pending`` (per signature hash: log-spaced buckets and the
    plain sum of seconds) until the recorder takes them.
    """

    __slots__ = (
        "function",
        "sample_every",
        "sampled_calls",
        "sampled_seconds",
        "window_start",
        "window_samples",
        "window_calls",
        "max_per_second",
        "flushed_calls",
        "pending",
        "last_timed_calls",
        "last_timed_end",
        "first_hit",
        "signatures",
        "latest_signature",
        "repeating",
        "counted_upto",
        "last_signature",
        "seconds_of",
        "window_naming",
        "slow",
        "flushed_slow",
        "naming_until",
        "next_timed",
        "compiled_at",
        "naming_left",
        "jit_object_seconds",
        "jit_made_at",
        "transformed_at",
        "run_base",
    )

    def __init__(self, function: FunctionInfo, sample_every: int, max_per_second: float):
        super().__init__()  # calls = 0
        self.function = function
        self.first_hit = False  # the next sampled call is the first cache hit after a compile
        self.configure(sample_every, max_per_second)
        self.sampled_calls = 0
        self.sampled_seconds = 0.0
        self.window_start = 0.0
        self.window_samples = 0
        self.window_calls = 0  # calls when the window began
        self.flushed_calls = 0
        self.pending: dict[str, tuple[runtimes.Buckets, list[float]]] = {}
        self.last_timed_calls = 0  # calls counted at the previous timed call
        self.last_timed_end = 0.0  # perf_counter when it returned (0: none yet)
        self.signatures: set[str] = set()  # signature hashes compiled so far
        self.latest_signature = ""  # the one compiled last
        # Since the latest compile, a timed call was of a signature compiled before it: the
        # program had come back to work it had done (see after_compile).
        self.repeating = False
        # Calls given to a signature so far (under _pending_lock): each sample stands for the
        # calls since then, and a compile or a collection gives the calls after the last
        # sample to its signature (the stretch it was in), so no stretch's tail is lost.
        self.counted_upto = 0
        self.last_signature = ""  # of the last call given its signature (timed or counted)
        self.seconds_of: dict[str, float] = {}  # the last timed run time per signature
        self.window_naming = 0.0  # seconds spent naming calls past the timing cap in this second
        # Calls JAX served through its Python path, by why (dispatch_path.py), and as flushed.
        self.slow: dict[str, int] = {}
        self.flushed_slow: dict[str, int] = {}
        # What making jit objects anew for the function took since the last collection
        # (each counted under slow['new_jit_object']).
        self.jit_object_seconds = 0.0
        self.jit_made_at: str | None = None  # the user's line that made one (the first since then)
        # The user's line that applied a transformation around calls under
        # slow['under_transformation'] (the first since the last collection).
        self.transformed_at: str | None = None
        # After a compile, every call up to ``naming_until`` is named (not timed): whether
        # the program comes back to the signatures it compiled (a few bucketed lengths in
        # random order) or meets each once (a ragged loader's new sizes) is told by the
        # calls each signature got, where one in ``sample_every`` would miss most
        # (storms/diagnosis.py). ``next_timed``: the call the sampling schedule times next.
        self.compiled_at = 0  # the call that compiled last
        self.run_base = 0  # calls made before this run began (an earlier run of the process)
        self.naming_left = 0.0  # seconds the stretch may still spend naming

    @property
    def run_calls(self) -> int:
        """The calls made in this run: the store counts calls per run, and a compile's
        call number is compared with them (``call_number``)."""
        return self.calls - self.run_base

    def note_slow(self, reason: str, calls: int = 1) -> None:
        """Count ``calls`` served through JAX's Python path for ``reason`` (-1: a call
        counted here was the compiling one)."""
        self.slow[reason] = self.slow.get(reason, 0) + calls

    def note_jit_object(self, seconds: float, made_at: str | None) -> None:
        """One more jit object made anew for the function, what making it took, and where."""
        with _pending_lock:
            self.jit_object_seconds += seconds
            self.jit_made_at = self.jit_made_at or made_at
            self.slow["new_jit_object"] = self.slow.get("new_jit_object", 0) + 1

    def take_jit_objects(self) -> tuple[float, str | None]:
        """What making jit objects anew took since the last take, and where one was made."""
        with _pending_lock:
            taken = self.jit_object_seconds, self.jit_made_at
            self.jit_object_seconds, self.jit_made_at = 0.0, None
        return taken

    def note_transformed_at(self, site: str | None) -> None:
        with _pending_lock:
            self.transformed_at = self.transformed_at or site

    def take_transformed_at(self) -> str | None:
        with _pending_lock:
            taken, self.transformed_at = self.transformed_at, None
        return taken

    def take_slow(self) -> dict[str, int]:
        """The slow-path calls since the last take, by reason (none left out as zero)."""
        now = dict(self.slow)
        new = {reason: n - self.flushed_slow.get(reason, 0) for reason, n in now.items()}
        self.flushed_slow = now
        return {reason: n for reason, n in new.items() if n}

    def configure(self, sample_every: int, max_per_second: float) -> None:
        self.sample_every = sample_every if sample_every > 0 else NEVER_SAMPLE
        self.first_hit = self.first_hit and self.sampling  # a compile's first hit is still timed
        self.next_sample = self.next_timed = self.calls + (1 if self.first_hit else self.sample_every)
        self.naming_until = 0  # a stretch named after a compile ends with the old setting
        self.max_per_second = max_per_second

    @property
    def sampling(self) -> bool:
        return self.sample_every < NEVER_SAMPLE

    def after_compile(self, signature_hash: str | None, compile_seconds: float = 0.0) -> bool:
        """Time the next call: every signature gets a run time, however few its calls.

        Returns whether, since the function's previous compile, a timed call was of a
        signature compiled before that one: the program had come back to work it had done,
        and still met a new signature. The first call after each compile is timed, so a
        loop that returns to its usual shape between new ones is seen at once; a first
        pass over a few shapes in order never returns before its last compile."""
        repeating, self.repeating = self.repeating, False
        self.count_tail(self.calls - 1, then=self.calls)  # the compiling call is no hit
        if signature_hash:
            self.signatures.add(signature_hash)
            self.latest_signature = signature_hash
        # The calls before the compile were of other signatures: the next timed call
        # stands for none of them, and its wall time since then holds the compile.
        self.last_timed_calls = self.calls
        self.last_timed_end = 0.0
        if self.sampling:
            self.first_hit = True
            self.next_sample = self.calls + 1
            # Named for twice as many calls as came since the previous compile: the stretch
            # in which a loop over a few shapes comes round to them again.
            stretch = min(NAMED_AFTER_COMPILE_MAX, max(NAMED_AFTER_COMPILE_MIN, 2 * (self.calls - self.compiled_at)))
            self.naming_until = self.calls + stretch
            self.next_timed = self.calls + self.sample_every
            # A share of what the compile took: the stretch costs a burst a little more, and
            # as much on a busy machine as on an idle one.
            self.naming_left = NAMING_SHARE_OF_COMPILE * compile_seconds
        self.compiled_at = self.calls
        return repeating

    def add_sample(self, signature_hash: str, alone: float, end: float) -> None:
        """One timed call: ``alone`` its time with nothing queued, ``end`` when it returned.

        Its run time is ``alone``, but no more than the wall time per call since the
        previous timed call: calls queued back to back overlap their dispatch and runs,
        and the latency of one call alone (the host waiting on the device and back) is
        then not what each costs. The previous timed call waited for its outputs, so the
        calls in between finished inside that wall time.
        """
        calls = self.calls
        between = calls - self.last_timed_calls
        seconds = alone
        if self.last_timed_end and between > 0:
            seconds = min(alone, (end - self.last_timed_end) / between)
        self.last_timed_calls = calls
        self.last_timed_end = end
        if signature_hash != self.latest_signature and signature_hash in self.signatures:
            self.repeating = True
        with _pending_lock:  # the writer's collection gives calls to signatures too
            weight = max(1, calls - self.counted_upto)  # the calls this sample stands for
            self.counted_upto = calls
            self.last_signature = signature_hash
            self.seconds_of[signature_hash] = seconds
            self.sampled_calls += 1
            self.sampled_seconds += seconds
            found = self._pending_for(signature_hash)
            runtimes.add_sample(found[0], seconds, weight)
            found[1][0] += seconds

    def add_count(self, signature_hash: str) -> None:
        """One call past the timing cap whose signature was named but not timed: it stands
        for the calls since the previous sample, as a timed one would, at its signature's
        last timed run time."""
        with _pending_lock:
            self.last_signature = signature_hash
        self.count_tail(self.calls)

    def count_tail(self, upto: int, then: int | None = None) -> None:
        """Give the calls after the last sample, up to call number ``upto``, to that
        sample's signature, at its signature's last timed run time (no timed sample is
        added); then count from call ``then`` on (``upto`` by default)."""
        with _pending_lock:  # the user's thread and the writer's both give calls
            tail = upto - self.counted_upto
            seconds = self.seconds_of.get(self.last_signature)
            if tail > 0 and seconds is not None:
                runtimes.add_weight(self._pending_for(self.last_signature)[0], seconds, tail)
                self.counted_upto = upto
            if then is not None:
                self.counted_upto = then

    def _pending_for(self, signature_hash: str) -> tuple[runtimes.Buckets, list[float]]:
        found = self.pending.get(signature_hash)
        if found is None:
            found = self.pending[signature_hash] = ({}, [0.0])
        return found

    def take_samples(self) -> dict[str, tuple[runtimes.Buckets, list[float]]]:
        """The samples since the previous take, per signature hash."""
        with _pending_lock:
            taken, self.pending = self.pending, {}
        return taken


_pending_lock = threading.Lock()  # sampled calls are rare: a lock costs nothing there


_stats_lock = threading.Lock()
_stats: dict[str, CallCounter] = {}


def all_call_stats() -> list[CallCounter]:
    with _stats_lock:
        return list(_stats.values())


def known_counter(function_hash: str) -> CallCounter | None:
    """The function's counter, where one was made."""
    with _stats_lock:
        return _stats.get(function_hash)


def counter_for(info: FunctionInfo, sample_every: int, max_per_second: float) -> CallCounter:
    """The function's counter, made on first use with these sampling settings."""
    with _stats_lock:
        stats = _stats.get(info.function_hash)
        if stats is None:
            stats = _stats[info.function_hash] = CallCounter(info, sample_every, max_per_second)
        return stats


def rename(old: FunctionInfo, new: FunctionInfo) -> None:
    """Keep a counter under the function it turned out to be (a library's jit of the user's function)."""
    with _stats_lock:
        stats = _stats.pop(old.function_hash, None)
        if stats is not None:
            stats.function = new
            _stats.setdefault(new.function_hash, stats)


def collect_call_stats(run_id: str) -> list[CallStats]:
    """Rows for the calls and timed samples since the last collection, one per sampled
    signature (the function's new calls on the first), for the recorder's next batch."""
    rows = []
    now = time.time()
    for stats in all_call_stats():
        calls = stats.calls
        stats.count_tail(calls)
        samples = stats.take_samples()
        slow = stats.take_slow()
        made, made_at = stats.take_jit_objects()
        transformed_at = stats.take_transformed_at()
        if calls == stats.flushed_calls and not samples and not slow:
            continue
        new_calls = calls - stats.flushed_calls
        stats.flushed_calls = calls
        sample_every = stats.sample_every if stats.sampling else 0
        if not samples:
            rows.append(
                _row(run_id, stats, now, new_calls, sample_every, slow=slow, made=(made, made_at), at=transformed_at)
            )
            continue
        for signature_hash, (buckets, seconds) in samples.items():
            rows.append(
                _row(
                    run_id,
                    stats,
                    now,
                    new_calls,
                    sample_every,
                    signature_hash,
                    buckets,
                    seconds[0],
                    slow=slow,
                    made=(made, made_at),
                    at=transformed_at,
                )
            )
            # The function's calls go on its first row.
            new_calls, slow, made, made_at, transformed_at = 0, {}, 0.0, None, None
    return rows


def _row(
    run_id: str,
    stats: CallCounter,
    now: float,
    calls: int,
    sample_every: int,
    signature_hash: str = "",
    buckets: runtimes.Buckets | None = None,
    seconds: float = 0.0,
    *,
    slow: dict[str, int],
    made: tuple[float, str | None] = (0.0, None),
    at: str | None = None,
) -> CallStats:
    """One row of a function's calls, with one signature's timed samples when it has some."""
    return CallStats(
        run_id=run_id,
        function=stats.function,
        timestamp=now,
        calls=calls,
        sampled_calls=sum(v[0] for v in buckets.values()) if buckets is not None else 0,
        sampled_seconds=seconds,
        signature_hash=signature_hash,
        run_buckets=runtimes.to_json(buckets) if buckets is not None else None,
        sample_every=sample_every,
        slow_calls=slow or None,
        jit_object_seconds=made[0] or None,
        jit_made_at=made[1],
        transformed_at=at,
    )


def _resample(cfg: configmod.Config) -> None:
    for stats in all_call_stats():  # functions wrapped before configure() sample anew too
        stats.configure(cfg.sample_every, cfg.sample_max_per_second)


current.on_configure(_resample)
recorder.collect_stats_from(collect_call_stats)


def _begin_run_counts() -> None:
    for stats in all_call_stats():  # a new run of this process counts its calls from here
        stats.run_base = stats.calls


current.on_run_begun(_begin_run_counts)


def _after_fork_in_child() -> None:
    for stats in all_call_stats():  # the parent's calls were the parent's to report
        stats.flushed_calls = stats.counted_upto = stats.run_base = stats.calls
        stats.take_samples()


process.on_fork_in_child(process.Concern.REPORTS, _after_fork_in_child)
