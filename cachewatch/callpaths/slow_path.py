"""Which jits JAX serves through its Python dispatch path on every call, why, what those
calls took, and what to change.

JAX serves a warm call of a jit from its C++ path in a few microseconds; an executable
with effects (``jax.debug.print``, ``jax.debug.callback``, ``io_callback``), mutable
references or non-array outputs gets no C++ path, and every call of it goes through
Python instead, with nothing retraced or recompiled to show for it
(capture/dispatch_path.py counts them). The time those calls took is their sampled run
time (dispatch, run and wait) times their count. Where the same function also has
variants on the fast path (a static flag that adds the callback, say), what the Python
path cost is measured against them: the slow-path calls times the difference of the two
paths' median calls (of the timed samples). A function whose every variant takes the Python path has no fast
call to measure against, and says so.

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
    "under_transformation": (
        "calls made under a JAX transformation applied outside any jit (jax.grad, jax.value_and_grad or "
        "jax.vmap of the jit, run eagerly): each call is traced again in Python and no executable of its own runs"
    ),
    "new_jit_object": (
        "a new jit object made for each call (jax.jit({name}) run again before calling it): JAX's caches are "
        "keyed by the function, so nothing recompiled, but jax.jit's own Python set-up ran each time"
    ),
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
    "under_transformation": (
        "jit the transformed function instead of transforming the jit, with the transformation your code "
        "applies: step = jax.jit(jax.value_and_grad({name})) for a gradient, jax.jit(jax.vmap({name}, "
        "in_axes=...)) for a vmap, made once, before the loop; a static argument of `{name}` stays static "
        "only if the new jit is told so again, by position (static_argnums), as the transformed function "
        "takes its arguments by position. Then call step"
    ),
    "new_jit_object": (
        "make the jit once, before the loop (step = jax.jit({name}), or @jax.jit on its definition), and "
        "call that; a jit made inside a helper called each step goes to module level, or to the __init__ of "
        "the object that holds it"
    ),
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
    seconds: float | None  # what those calls took (a call's median run time times count); None: none timed
    text: str
    fix: str
    # A call's median run time on each path (the function's own variants); None where it
    # has no timed call on that path.
    slow_call_seconds: float | None = None
    fast_call_seconds: float | None = None
    # Where the user's code made the jit objects counted under new_jit_object (file:line).
    made_at: str | None = None
    # Where the user's code applied the transformation the calls counted under
    # under_transformation ran under (file:line).
    transformed_at: str | None = None

    @property
    def excess_seconds(self) -> float | None:
        """What the slow-path calls took beyond the same function's fast-path calls; None
        where it has no timed call on either path to measure with."""
        if self.slow_call_seconds is None or self.fast_call_seconds is None:
            return None
        return self.slow_calls * max(0.0, self.slow_call_seconds - self.fast_call_seconds)


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
        "slow_call_seconds": found.slow_call_seconds,
        "fast_call_seconds": found.fast_call_seconds,
        "excess_seconds": found.excess_seconds,
        "made_at": found.made_at,
        "transformed_at": found.transformed_at,
        "text": found.text,
        "fix": found.fix,
    }


# Jit objects made anew that make a finding: at least this many, and for at least half of
# the function's calls (a jit made twice at import, or once per model, is no loop).
NEW_OBJECTS_MIN = 10


def _told_of(counts: PathCounts) -> bool:
    """Whether a function's calls on the Python path are worth telling: any of JAX's own
    reasons, or jit objects made anew for most of its calls."""
    made = counts.slow.get("new_jit_object", 0)
    if counts.slow_calls > made:
        return True
    return made >= max(NEW_OBJECTS_MIN, counts.calls / 2)


def slow_paths(counts: Iterable[PathCounts]) -> list[SlowPath]:
    """Each function's slow-path calls with why and what to change, most seconds first."""
    out = [_told(c) for c in counts if c.slow_calls and _told_of(c)]
    return sorted(out, key=lambda s: (-(s.seconds or 0.0), -s.slow_calls, s.function.qualname))


def _told(counts: PathCounts) -> SlowPath:
    name = short_name(counts.function.qualname or counts.function.name)
    reason = max(counts.slow, key=lambda r: counts.slow[r])
    remade = reason == "new_jit_object"
    seconds, text, fix = _remade(counts, name) if remade else _through_python(counts, name, reason)
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
        # A jit made anew is priced by making it, not by its calls' paths.
        None if remade else counts.slow_call_seconds,
        None if remade else counts.fast_call_seconds,
        counts.jit_made_at if remade else None,
        counts.transformed_at if reason == "under_transformation" else None,
    )


def _through_python(counts: PathCounts, name: str, reason: str) -> tuple[float | None, str, str]:
    """What the calls on JAX's Python path took (sampled, against the function's own
    fast-path calls where it has some), the text, and the fix for ``reason``."""
    slow_each, fast_each = counts.slow_call_seconds, counts.fast_call_seconds
    # Without per-path samples (paths not told at compile), every sample stands for the calls.
    each = slow_each if slow_each is not None else counts.call_seconds
    seconds = each * counts.slow_calls if each is not None else None
    took = (
        f", about {seconds_text(seconds)} in all ({each * 1e6:.0f} µs a call, sampled)"
        if each is not None and seconds is not None
        else ""
    )
    if slow_each is not None and fast_each is not None:
        extra = counts.slow_calls * max(0.0, slow_each - fast_each)
        against = (
            f" Its own fast-path calls took {fast_each * 1e6:.0f} µs a call: the Python path cost "
            f"{seconds_text(extra)} more."
        )
    elif counts.slow_calls and not counts.fast_calls:
        against = " None of its calls took the fast path, so there is no fast call of it to measure against."
    else:
        against = ""
    text = (
        f"{name}: {counts.slow_calls} of {counts.calls} calls went through JAX's Python dispatch path, not its "
        f"C++ fast path{took}: {WHY.get(reason, reason)}. Nothing recompiled; each such call runs JAX's "
        f"Python code again.{against}"
    )
    fix = f"To give `{name}` the fast path: {FIX.get(reason, FIX['other']).format(name=name)}."
    return seconds, text, fix


def _remade(counts: PathCounts, name: str) -> tuple[float, str, str]:
    """A function given a new jit object for most of its calls: priced by what making the
    objects took (measured), which is what making the jit once saves."""
    made = counts.slow.get("new_jit_object", 0)
    seconds = counts.jit_object_seconds
    each = f" ({seconds / made * 1e6:.0f} µs each, measured)" if made and seconds else ""
    # The line by its file's name, as a finding's entry reads.
    where = f" made at {counts.jit_made_at.rsplit('/', 1)[-1]}" if counts.jit_made_at else " made for the call"
    text = (
        f"{name}: {made} of its {counts.calls} calls came through a jit object{where}, about "
        f"{seconds_text(seconds)} in all{each}: {WHY['new_jit_object'].format(name=name)}."
    )
    fix = f"To stop making `{name}`'s jit again: {FIX['new_jit_object'].format(name=name)}."
    return seconds, text, fix
