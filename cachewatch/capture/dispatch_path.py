"""Which calls of a watched jit JAX serves from its C++ fast path, and which from its
Python path, and why.

JAX's jit serves a warm call in C++ when, after the first call of a signature, its Python
path hands back a fast path for the executable (``pjit._get_fastpath_data``); it hands back
none when the executable has effects (a ``jax.debug.print`` or ``jax.debug.callback``
inside, an ``io_callback``), mutable references, outputs that are not plain arrays, or a
profile-guided rebuild pending, and then every call of that signature goes through
Python. cachewatch wraps that decision (through the seam, ``jaxcompat.wrap_fastpath_decision``):
it runs only on calls the Python path serves, so a call the C++ path serves costs nothing
more. Each decision of no fast path is counted on the function's call counter by reason;
the call that compiled is told apart (its event carries ``call_path`` and ``slow_reason``)
and not counted as a slow-path call. Fast-path calls are the rest: calls, less compiles,
less slow-path calls.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from ..core import _guard, jaxcompat
from ..record import current
from . import _tracking, counters, identity

# The attribute cachewatch.jit sets on the function it hands jax.jit: its HookState.
STATE_ATTR = "__cachewatch_state__"
# Frames between the wrapped decision and JAX's cache_miss: the wrapper, the guard.
_DISPATCH_DEPTH = 8

_last = threading.local()  # (function hash, reason, tracking activity) of this thread's last slow decision
_installed = False
# Per executable given no fast path: (it, held weakly, why, its function's call counter).
_known: dict[int, tuple[Callable[[], Any], str | None, counters.CallCounter]] = {}
_KNOWN_MAX = 4096
counting = True  # off: JAX's decisions pass through uncounted (what benchmarks/call_paths.py weighs)


def install() -> bool:
    """Watch JAX's fast-path decisions, once per process; False where this JAX cannot be
    read (the capability fastpath_decision is off: calls are then not split by path)."""
    global _installed
    if not _installed:
        _installed = jaxcompat.wrap_fastpath_decision(_watching)
    return _installed


def _watching(original: Callable[..., Any]) -> Callable[..., Any]:
    def fastpath_data(*args: Any, **kwargs: Any) -> Any:
        data = original(*args, **kwargs)
        if data is None and counting:
            _note_slow(args, kwargs)
        return data

    return fastpath_data


@_guard.guarded(where="dispatch.slow")
def _note_slow(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    fun = jaxcompat.dispatched_function(jaxcompat.caller_frame(1), None, _DISPATCH_DEPTH)
    state = getattr(fun, STATE_ATTR, None)
    if state is None:
        return  # not a watched jit (JAX's own dispatch of an eager pjit, say)
    # Why and where to count, read once per executable: every call of it asks again.
    executable = args[0] if args else kwargs.get("executable")
    known = _known.get(id(executable))
    if known is None or known[0]() is not executable:
        cfg = current.config()
        stats = counters.counter_for(state.info, cfg.sample_every, cfg.sample_max_per_second)
        known = (_weak(executable), jaxcompat.slow_path_reason(args, kwargs), stats)
        if len(_known) >= _KNOWN_MAX:
            _known.clear()
        _known[id(executable)] = known
    _, reason, stats = known
    if reason is None:
        return  # traced into another jit's program: no dispatch of its own
    stats.note_slow(reason)
    if reason == "under_transformation" and stats.transformed_at is None:
        # Looked up once per collection: a walk of the stack costs more than the count.
        stats.note_transformed_at(identity.transformation_site(identity.call_site(2)))
    _last.decision = (state.info.function_hash, reason, _tracking.activity)


def _weak(executable: Any) -> Callable[[], Any]:
    """A weak reference to the executable (one JAX let go of is not kept alive here);
    for one that takes none, a reference that never matches (read anew each call)."""
    try:
        return weakref.ref(executable)
    except TypeError:
        return lambda: _NOTHING


_NOTHING = object()


def path_of_compiling_call(function_hash: str, mark: int) -> tuple[str | None, str | None]:
    """(``call_path``, ``slow_reason``) of the call that compiled now in this thread (its
    tracking ``mark`` taken as it began): ``slow`` with why when JAX gave its executable no
    fast path, and that call is taken back off the slow-path count (it is the compiling
    call); ``fast`` otherwise; (None, None) where paths are not watched."""
    if not _installed:
        return None, None
    decision = getattr(_last, "decision", None)
    if decision is None or decision[0] != function_hash or decision[2] <= mark:
        return "fast", None
    _last.decision = None
    reason = decision[1]
    stats = counters.known_counter(function_hash)
    if stats is not None:
        stats.note_slow(reason, -1)
    return "slow", reason
