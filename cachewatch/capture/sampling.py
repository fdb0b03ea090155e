"""Sampled calls of ``cachewatch.jit``: the one in ``sample_every`` the hit path hands over.

Each is timed alone (its run time, per signature), or past the cap on timed calls only
named (its signature given the calls since the last sample), or, in the stretch after a
compile, named so that the calls each signature gets are known (counters.CallCounter).
"""

from __future__ import annotations

import time
from typing import Any

import jax

from ..core import _guard
from ..explain import signature as sigmod
from . import _tracking
from .counters import CallCounter
from .hookstate import HookState


def timed_call(jitted: Any, stats: CallCounter, state: HookState, args: tuple, kwargs: dict) -> Any:
    """A sampled call, timed alone: the time one call takes with nothing else queued.

    JAX dispatches asynchronously: the inputs may be outputs of calls still queued on
    the device, and blocking on this call's output would wait for those too. So the
    inputs are waited for first, then the timer covers dispatch, the run, and the wait
    for this call's outputs. What it leaves out is pipelining: in a loop that never
    blocks, the next call's dispatch overlaps this one's run.
    """
    mark = _tracking.activity
    if not stats.sampling and not stats.first_hit:
        stats.next_sample = stats.calls + stats.sample_every
        return jitted(*args, **kwargs)  # sampling is off; handed over only to end warm-up
    first_hit, stats.first_hit = stats.first_hit, False
    if not first_hit and stats.calls < min(stats.naming_until, stats.next_timed):
        named = _name_after_compile(state, stats, args, kwargs)
        if named:
            return jitted(*args, **kwargs)
        # A signature with no run time yet is timed, uncapped, as a first hit is: its
        # calls can be counted only at a run time of its own.
        first_hit = named is None
    stats.next_sample = stats.next_timed = stats.calls + stats.sample_every
    if stats.calls + 1 < stats.naming_until:
        stats.next_sample = stats.calls + 1  # the stretch named after a compile goes on
    if not first_hit:  # one timed call per compile is never capped: compiles are rarer than that
        now = time.monotonic()
        if now - stats.window_start >= 1.0:
            stats.window_start = now
            stats.window_calls = stats.calls
            stats.window_samples = 0
            stats.window_naming = 0.0
        if stats.window_samples >= stats.max_per_second:
            if len(stats.signatures) > 1 and stats.window_naming < NAMING_SECONDS_PER_SECOND:
                began = time.perf_counter()
                _count_call(state, stats, args, kwargs)
                stats.window_naming += time.perf_counter() - began
            else:  # nothing more to do this second: the hit path need not hand over again
                _skip_to_next_window(stats, now)
            return jitted(*args, **kwargs)
        stats.window_samples += 1
    signature_hash = _sample_signature(state, stats, args, kwargs)
    if signature_hash is None:
        return jitted(*args, **kwargs)
    start = time.perf_counter()
    out = jitted(*args, **kwargs)
    jax.block_until_ready(out)
    end = time.perf_counter()
    if _tracking.activity == mark:  # a call that compiled would count compile time as run time
        stats.add_sample(signature_hash, end - start, end)
    return out


@_guard.guarded(default=False, where="jit.name")
def _name_after_compile(state: HookState, stats: CallCounter, args: tuple, kwargs: dict) -> bool | None:
    """One call of the stretch after a compile: named (its signature given its calls), not
    timed, while the stretch's share of the compile's seconds lasts (then it ends): True.
    None where its signature has no run time yet: that call is to be timed instead."""
    if len(stats.signatures) <= 1 or stats.naming_left <= 0.0:
        stats.naming_until = stats.calls
        stats.next_sample = stats.next_timed
        return True
    began = time.perf_counter()
    signature_hash = sigmod.build(state.layout, args, kwargs).stable_hash()
    stats.naming_left -= time.perf_counter() - began
    if signature_hash not in stats.seconds_of:
        return None
    stats.add_count(signature_hash)
    stats.next_sample = stats.calls + 1 if stats.calls + 1 < stats.naming_until else stats.next_timed
    return True


# Past the cap on timed calls, sampled calls are only named (their signature, without
# waiting for anything), so per-variant counts stay close where a fast loop leaves few timed
# calls; naming stops for the second once it has taken this much of it (0.5%): a signature
# of a pytree of a hundred leaves takes about a millisecond.
NAMING_SECONDS_PER_SECOND = 0.005


@_guard.guarded(where="jit.count")
def _count_call(state: HookState, stats: CallCounter, args: tuple, kwargs: dict) -> None:
    """Give the calls since the last sample to this call's signature (not timed)."""
    stats.add_count(sigmod.build(state.layout, args, kwargs).stable_hash())


def _skip_to_next_window(stats: CallCounter, now: float) -> None:
    """Sample next about when this second's window ends, at the calls' pace so far in it
    (at most a hundred sampling intervals on: a loop that slows down is still looked at)."""
    elapsed = now - stats.window_start
    if elapsed <= 0:
        return
    left = (stats.calls - stats.window_calls) / elapsed * (1.0 - elapsed)
    stats.next_sample = stats.calls + min(max(stats.sample_every, int(left)), 100 * stats.sample_every)


@_guard.guarded(where="jit.sample")
def _sample_signature(state: HookState, stats: CallCounter, args: tuple, kwargs: dict) -> str | None:
    """Wait for the call's inputs, and name its signature (before the call: donated
    inputs are gone after it). None: do not time this call."""
    try:
        jax.block_until_ready((args, kwargs))
    except Exception:  # e.g. an input already donated: the call itself will say so
        return None
    if len(stats.signatures) <= 1:  # one shape so far (or none known): no need to look
        return next(iter(stats.signatures), "")
    return sigmod.build(state.layout, args, kwargs).stable_hash()
