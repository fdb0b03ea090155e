"""Attribution of traces and compiles to the call that caused them.

The hot path of a wrapped call reads one integer, ``activity``, before and after the
call. Only the trace hook and the ``jax.monitoring`` listener change it, and they do
so under a lock, so it only ever grows: a call that sees it unchanged did not trace
or compile, and pays nothing more. A call that sees it change claims, from its own
thread's pending list, the records made since it started.

Records are made by the trace hook (one per trace, carrying the abstract signature)
and by the listener (durations, persistent-cache hits, and a backend compile that
happened with no trace). JAX reports all of them on the thread that traces and
compiles, which is the calling thread, so concurrent calls on other threads never
mix their records.

Compiles of jit objects cachewatch did not wrap (JAX's own, those made before
``install()``, eager primitives) have no wrapped call to claim them: the listener
records them itself when their backend compile ends (see ``foreign``). So it does for
the backward pass of a wrapped function (grad or vjp outside any jit), which JAX
compiles after the function's call has returned.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from ..core import _guard, jaxcompat
from ..core.events import FunctionInfo, Kind
from ..record import recorder
from . import cachestate, foreign, opbyop, program

# JAX's monitoring events, named once in the compatibility seam (checked there against
# JAX's own constants: the capability compile_events).
TRACE_EVENT = jaxcompat.EVENTS["trace"]
LOWER_EVENT = jaxcompat.EVENTS["lower"]
COMPILE_EVENT = jaxcompat.EVENTS["compile"]
CACHE_HIT_EVENT = jaxcompat.EVENTS["cache_hit"]
CACHE_MISS_EVENT = jaxcompat.EVENTS["cache_miss"]
CACHE_SAVED_EVENT = jaxcompat.EVENTS["cache_saved"]
CACHE_REQUEST_EVENT = jaxcompat.EVENTS["cache_request"]

# Records nobody claims (a compile of a watched function that JAX ran outside the
# function's own call, other than a backward pass) are kept at most this long.
_MAX_PENDING = 256

activity = 0
_activity_lock = threading.Lock()
_tls = threading.local()

# The attribute that marks cachewatch's trace hook, so the listener tells a wrapped
# function's trace from a foreign one.
HOOK_ATTR = foreign.HOOK_ATTR
# Whether compiles of jit objects cachewatch did not wrap are recorded (install() turns
# it on; cachewatch.jit alone records only the functions it wraps and eager primitives).
_process_wide = False

# Module and trace names of watched functions, so compiles without a trace are told
# apart from foreign ones.
_watched_lock = threading.Lock()
_watched_modules: dict[str, int] = {}
_watched_traces: dict[str, int] = {}
# The watched functions of each module name (a few, most recent last): a backward-pass
# compile is recorded under the one JAX's debug information points at.
_watched_functions: dict[str, list[FunctionInfo]] = {}
_MAX_FUNCTIONS_PER_NAME = 16


_native_bump: Callable[[], int] | None
try:
    # The C hot path (cachewatch/_fastcall.c) reads its own copy, kept equal to this one.
    from ._fastcall import bump as _native_bump
except ImportError:  # pragma: no cover - the extension is optional
    _native_bump = None


def bump() -> int:
    """Advance the activity counter; returns the new value (a sequence number)."""
    global activity
    with _activity_lock:
        activity += 1
        if _native_bump is not None:
            _native_bump()
        return activity


def watch_names(trace_name: str, module_name: str, info: FunctionInfo) -> None:
    with _watched_lock:
        _watched_traces[trace_name] = _watched_traces.get(trace_name, 0) + 1
        _watched_modules[module_name] = _watched_modules.get(module_name, 0) + 1
        known = _watched_functions.setdefault(module_name, [])
        if info not in known:
            known.append(info)
            del known[:-_MAX_FUNCTIONS_PER_NAME]


class Record:
    """One trace, or one compile without a trace, being filled in on this thread."""

    __slots__ = (
        "seq",
        "state",
        "module_name",
        "kind",
        "signature",
        "error",
        "timestamp",
        "trace_seconds",
        "lower_seconds",
        "compile_seconds",
        "compiles",
        "persistent_cache_hit",
        "cache_time_saved",
        "jaxpr_eqns",
        "thread",
        "captured",
        "stale",
        "target",
        "program",
        "memory_begun",
        "host_bytes",
        "host_bytes_before",
        "peak_host_bytes",
        "cache_requested",
        "cache_written",
        "persistent_cache",
        "persistent_cache_reason",
        "persistent_cache_key",
        "persistent_cache_bytes",
        "persistent_cache_dir",
        "ahead",
    )

    def __init__(self, state: Any, module_name: str, kind: str, signature: Any = None):
        self.state = state
        self.module_name = module_name
        self.kind = kind
        self.signature = signature
        self.error: str | None = None
        self.timestamp = time.time()
        self.trace_seconds: float | None = None
        self.lower_seconds: float | None = None
        self.compile_seconds: float | None = None
        self.compiles = 0
        self.persistent_cache_hit: bool | None = None
        self.cache_time_saved: float | None = None
        self.jaxpr_eqns: int | None = None
        self.captured: dict[str, str] | None = None
        self.stale: list[tuple[str, str, str]] = []
        self.target: Any = None  # a foreign.Target: recorded by the listener itself
        self.program: program.Pending | None = None  # what was compiled, read later (program.py)
        # Compiled ahead of time by cachewatch.warmup, not by a call: the line that called it.
        self.ahead: str | None = getattr(_tls, "ahead", None)
        self.thread = threading.current_thread().name
        # Host memory and the persistent cache around the backend compile (cachestate.py).
        self.memory_begun: tuple[int, int | None] | None = None
        self.host_bytes: int | None = None
        self.host_bytes_before: int | None = None
        self.peak_host_bytes: int | None = None
        self.cache_requested = False
        self.cache_written = False
        self.persistent_cache: str | None = None
        self.persistent_cache_reason: str | None = None
        self.persistent_cache_key: str | None = None
        self.persistent_cache_bytes: int | None = None
        self.persistent_cache_dir: str | None = None
        self.seq = bump()


def _pending() -> list[Record]:
    try:
        return _tls.pending
    except AttributeError:
        _tls.pending = []
        return _tls.pending


def push(record: Record) -> None:
    pending = _pending()
    pending.append(record)
    if len(pending) > _MAX_PENDING:
        del pending[: len(pending) - _MAX_PENDING]


def claim(state: Any, module_name: str, since: int) -> list[Record]:
    """Take this thread's records made after ``since`` that belong to ``state``.

    Trace records belong to the state whose hook made them; compiles without a trace
    belong to whichever watched call of the same module name is finishing.
    """
    pending = _pending()
    mine: list[Record] = []
    keep: list[Record] = []
    for record in pending:
        if record.seq > since and (
            record.state is state or (record.state is None and record.module_name == module_name)
        ):
            mine.append(record)
        else:
            keep.append(record)
    if mine:
        pending[:] = keep
    return mine


def suppressed() -> bool:
    return getattr(_tls, "suppress", False)


class suppress:
    """Within this block, traces and compiles on this thread are cachewatch's own doing
    (timing an eager baseline) and are not recorded."""

    def __enter__(self) -> None:
        self.previous = getattr(_tls, "suppress", False)
        _tls.suppress = True

    def __exit__(self, *exc: object) -> None:
        _tls.suppress = self.previous


class ahead_of_time:
    """Within this block, traces and compiles on this thread are a warm-up's
    (``cachewatch.warmup``, called at ``call_site``): recorded as kind ``warmup``, never
    recompiles or storms."""

    def __init__(self, call_site: str) -> None:
        self.call_site = call_site

    def __enter__(self) -> None:
        self.previous = getattr(_tls, "ahead", None)
        _tls.ahead = self.call_site

    def __exit__(self, *exc: object) -> None:
        _tls.ahead = self.previous


def _latest(predicate) -> Record | None:
    pending = getattr(_tls, "pending", None)
    if not pending:
        return None
    for record in reversed(pending):
        if predicate(record):
            return record
    return None


@_guard.guarded(where="monitoring.duration")
def on_duration(event: str, duration_secs: float, **kwargs: str | int) -> None:
    if suppressed():
        return
    duration = duration_secs
    fun_name = kwargs.get("fun_name")
    name = fun_name if isinstance(fun_name, str) else None
    if event == TRACE_EVENT:
        _on_trace(name, duration)
    elif event in (LOWER_EVENT, COMPILE_EVENT):
        _on_lower_or_compile(event, name or "", duration)
    elif event == CACHE_SAVED_EVENT:
        record = _latest(lambda r: r.compiles == 0)
        if record is not None:
            record.cache_time_saved = duration


def _on_trace(name: str | None, duration: float) -> None:
    caller = jaxcompat.caller_frame()
    in_jit, fun = jaxcompat.traced_jit_function(caller)
    if in_jit and getattr(fun, HOOK_ATTR, None) is None:
        # A jit object cachewatch did not wrap: JAX's own, one made before install(),
        # or an eager primitive.
        if not _process_wide and not jaxcompat.is_eager_primitive(fun):
            return
        target = foreign.from_trace(caller, name or "")
        if target is not None:
            made = Record(None, f"jit({name})", Kind.TRACE, target.signature)
            made.target = target
            made.trace_seconds = duration
            push(made)
        return
    if not in_jit and name not in _watched_traces:
        return
    record = _latest(
        lambda r: (
            r.kind == Kind.TRACE and r.trace_seconds is None and r.state is not None and r.state.trace_name == name
        )
    )
    if record is not None:
        record.trace_seconds = duration


def _on_lower_or_compile(event: str, name: str, duration: float) -> None:
    record = _latest(lambda r: r.module_name == name and r.compiles == 0)
    if record is None or (event == LOWER_EVENT and record.lower_seconds is not None):
        # Lowered or compiled with no trace of its own: for a wrapped function, a new
        # device or sharding, or a jaxpr that JAX had cached from an earlier trace (the
        # wrapped call claims it when it returns); otherwise a foreign jit's.
        record = Record(None, name, Kind.COMPILE)
        if name not in _watched_modules:
            if not _process_wide and foreign.strip_jit(name) not in opbyop.primitive_names():
                return
            caller = jaxcompat.caller_frame()
            record.target = foreign.from_lowering(caller, name) if event == LOWER_EVENT else foreign.from_name(name)
        elif event == LOWER_EVENT and (how := foreign.outside_call(caller := jaxcompat.caller_frame())) is not None:
            # No call of the function will claim it (grad's backward pass begins after the
            # call has returned): recorded as soon as it is compiled, like a foreign one.
            with _watched_lock:
                candidates = list(_watched_functions.get(name, ()))
            record.target = foreign.from_outside_call(caller, name, how, candidates)
            if record.target is None:  # a plain jit sharing a watched function's name
                if not _process_wide:
                    return
                record.target = foreign.from_lowering(caller, name)
        push(record)
    if event == LOWER_EVENT:
        record.lower_seconds = duration
        # The backend compile comes next: the host memory it needs is measured from here.
        record.memory_begun = cachestate.begin_compile()
        bump()
        return
    record.host_bytes, record.host_bytes_before, record.peak_host_bytes = cachestate.end_compile(record.memory_begun)
    record.compile_seconds = duration
    record.compiles += 1
    record.persistent_cache, record.persistent_cache_reason = cachestate.outcome(
        record.cache_requested, record.persistent_cache_hit is True, record.cache_written, duration
    )
    record.program = program.take()
    bump()
    if record.target is not None:
        _drop(record)
        recorder.record_event(foreign.to_event(record.target, record))


def _program_wanted(name: str) -> bool:
    """Whether the program of a compile of this module name is read: one cachewatch will record
    (never cachewatch's own compiles)."""
    if suppressed():
        return False
    return name in _watched_modules or _process_wide or foreign.strip_jit(name) in opbyop.primitive_names()


program.wanted = _program_wanted


def _drop(record: Record) -> None:
    pending = _pending()
    with contextlib.suppress(ValueError):
        pending.remove(record)


@_guard.guarded(where="monitoring.event")
def on_event(event: str, **kwargs: Any) -> None:
    if event in (CACHE_HIT_EVENT, CACHE_MISS_EVENT):
        # JAX reports a miss after the backend compile, a hit in place of it.
        record = _latest(lambda r: r.lower_seconds is not None and r.persistent_cache_hit is None)
        if record is not None:
            record.persistent_cache_hit = event == CACHE_HIT_EVENT
            # JAX's "miss" is recorded only once the entry is written.
            record.cache_written = event == CACHE_MISS_EVENT
            if record.cache_written:
                record.persistent_cache_bytes = jaxcompat.persistent_cache_entry_bytes()
    elif event == CACHE_REQUEST_EVENT and not suppressed():
        record = _latest(lambda r: r.lower_seconds is not None and r.compiles == 0)
        if record is not None:
            record.cache_requested = True
            record.persistent_cache_key = jaxcompat.persistent_cache_key()
            record.persistent_cache_dir = jaxcompat.persistent_cache_directory()


_installed = False
_install_lock = threading.Lock()


def record_everything(on: bool = True) -> None:
    """Record the compiles of every jit in the process, not only those cachewatch wrapped."""
    global _process_wide
    install_listeners()
    _process_wide = on


def recording_everything() -> bool:
    """Whether ``install()`` is in effect (compiles of every jit are recorded)."""
    return _process_wide


def install_listeners() -> None:
    """Register the listeners with jax.monitoring once per process."""
    global _installed, TRACE_EVENT, LOWER_EVENT, COMPILE_EVENT, CACHE_HIT_EVENT, CACHE_MISS_EVENT, CACHE_SAVED_EVENT
    global CACHE_REQUEST_EVENT
    with _install_lock:
        if _installed:
            return
        from jax import monitoring

        # The names as the seam holds them now, probed at once: a JAX that renamed its
        # events says so here, with one warning.
        TRACE_EVENT, LOWER_EVENT, COMPILE_EVENT = (jaxcompat.EVENTS[k] for k in ("trace", "lower", "compile"))
        CACHE_HIT_EVENT, CACHE_MISS_EVENT = jaxcompat.EVENTS["cache_hit"], jaxcompat.EVENTS["cache_miss"]
        CACHE_SAVED_EVENT = jaxcompat.EVENTS["cache_saved"]
        CACHE_REQUEST_EVENT = jaxcompat.EVENTS["cache_request"]
        jaxcompat.available("compile_events")
        jaxcompat.available("persistent_cache_events")
        program.install()
        monitoring.register_event_duration_secs_listener(on_duration)
        monitoring.register_event_listener(on_event)
        _installed = True
