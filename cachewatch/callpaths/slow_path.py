"""Which jits JAX serves through its Python dispatch path on every call, why, what those
calls took, and what to change.

JAX serves a warm call of a jit from its C++ path in a few microseconds; an executable
with effects (``jax.debug.print``, ``jax.debug.callback``, ``io_callback``), mutable
references or non-array outputs gets no C++ path, and every call of it goes through
Python instead, with nothing retraced or recompiled to show for it
(capture/dispatch_path.py counts them). The time those calls took is their sampled run
time (dispatch, run and wait) times their count.

    for found in slow_path.slow_paths(call_path_reads.path_counts(conn, filters)):
        print(found.text, found.fix)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from ..core.events import FunctionInfo, short_name
from ..core.figures import seconds_text
from .call_path_reads import PathCounts

# Why, as a user reads it, and what to change.
WHY = {
    "ordered_effects": "an ordered effect inside it (io_callback(..., ordered=True), jax.debug.print(..., ordered=True))",
    "unordered_effects": "an effect inside it (jax.debug.print, jax.debug.callback or an io_callback)",
    "ref_effects": "mutable array references inside it",
    "profile_rebuild": "a profile-guided (PGLE) rebuild still pending",
    "non_array_outputs": "an output that is not a plain jax.Array",
    "other": "an executable JAX's C++ path does not take",
}
FIX = {
    "ordered_effects": (
        "drop ordered=True where the callbacks' order does not matter, or move the callback out of the hot "
        "step (return the value and log it outside, every N steps)"
    ),
    "unordered_effects": (
        "move the jax.debug.print or jax.debug.callback out of the hot step (return the value and log it "
        "outside the jit, every N steps), or behind a flag that is off in training; an io_callback that "
        "only reads a value can take it as an argument instead"
    ),
    "ref_effects": "pass and return the state as arrays instead of mutable references in the hot step",
    "profile_rebuild": "nothing: the profile-guided rebuild ends by itself after jax_pgle_profiling_runs",
    "non_array_outputs": "return jax.Arrays (not Python scalars or other objects) from the jit",
    "other": "see which of its outputs or options differ from the jit's usual ones",
}


@dataclasses.dataclass(frozen=True)
class SlowPath:
    """A function in a run whose calls went through JAX's Python path."""

    run_id: str
    function: FunctionInfo
    calls: int
    compiles: int
    slow_calls: int
    fast_calls: int
    reasons: dict[str, int]  # slow-path calls by why
    seconds: float | None  # what those calls took (sampled mean times count); None without samples
    text: str
    fix: str


def as_json(found: SlowPath) -> dict[str, object]:
    """A function's slow-path calls as the API gives them."""
    return {
        "run_id": found.run_id,
        "calls": found.calls,
        "compiles": found.compiles,
        "slow_calls": found.slow_calls,
        "fast_calls": found.fast_calls,
        "reasons": dict(found.reasons),
        "seconds": found.seconds,
        "text": found.text,
        "fix": found.fix,
    }


def slow_paths(counts: Iterable[PathCounts]) -> list[SlowPath]:
    """Each function's slow-path calls with why and what to change, most seconds first."""
    out = [_told(c) for c in counts if c.slow_calls]
    return sorted(out, key=lambda s: (-(s.seconds or 0.0), -s.slow_calls, s.function.qualname))


def _told(counts: PathCounts) -> SlowPath:
    name = short_name(counts.function.qualname or counts.function.name)
    reason = max(counts.slow, key=lambda r: counts.slow[r])
    mean = counts.sampled_seconds / counts.sampled_calls if counts.sampled_calls else None
    seconds = mean * counts.slow_calls if mean is not None else None
    took = (
        f", about {seconds_text(seconds)} in all ({mean * 1e6:.0f} µs a call, sampled)"
        if mean is not None and seconds is not None
        else ""
    )
    text = (
        f"{name}: {counts.slow_calls} of {counts.calls} calls went through JAX's Python dispatch path, not its "
        f"C++ fast path{took}: {WHY.get(reason, reason)}. Nothing recompiled; each such call runs JAX's "
        "Python code again."
    )
    fix = f"To give `{name}` the fast path: {FIX.get(reason, FIX['other'])}."
    return SlowPath(
        counts.run_id,
        counts.function,
        counts.calls,
        counts.compiles,
        counts.slow_calls,
        counts.fast_calls,
        dict(counts.slow),
        seconds,
        text,
        fix,
    )
