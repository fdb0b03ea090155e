"""``cachewatch.jit``: ``jax.jit`` that records why and at what cost it traces and compiles.

    @cachewatch.jit
    def step(params, batch): ...

    @cachewatch.jit(static_argnames="n", donate_argnums=0)
    def g(x, n): ...

The user's function is wrapped once, at decoration time, in a *trace hook* that reads
the abstract signature of every trace, and that hook is what ``jax.jit`` compiles. The
hook is cached on the user's function (per set of jit options, ``hookstate.py``), so
re-wrapping the same function shares JAX's caches exactly as ``jax.jit`` does, and
re-wrapping a new lambda or partial does not, exactly as ``jax.jit`` does not.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import time
import types
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple, ParamSpec, Protocol, TypeVar, overload

import jax

from ..core import _guard, jaxcompat
from ..core.events import Cause, CompileEvent, FunctionInfo, Kind
from ..explain import causes
from ..explain import placement as placemod
from ..explain import signature as sigmod
from ..record import current, recorder
from . import (
    _tracking,
    baseline,
    building,
    cachekey,
    cachestate,
    compile_ahead,
    counters,
    devices,
    dispatch_path,
    guards,
    hookstate,
    sampling,
)
from .counters import CallCounter
from .counters import Watched as _Watched
from .hookstate import HookState
from .identity import call_site, describe_function, is_library_file, unwrap_callable, user_function_in

_jax_jit = jax.jit  # the original, kept before install() may replace jax.jit

# cachewatch's own keywords: time an eager run beside the compiled one, per signature;
# a recompile limit and what to do past it.
_EAGER_OPTION = "eager_baseline"
_LIMIT_OPTIONS = ("max_recompiles", "on_limit")


def _stats_for(info: FunctionInfo) -> CallCounter:
    cfg = current.config()
    return counters.counter_for(info, cfg.sample_every, cfg.sample_max_per_second)


def _make_hook(fun: Callable[..., Any], state: HookState) -> Callable[..., Any]:
    self_ref = None
    target = fun
    if isinstance(fun, types.MethodType):
        # Hold the instance weakly: the hook is cached per instance and must not keep it alive.
        self_ref = weakref.ref(fun.__self__)
        target = fun.__func__

    def hook(*args, **kwargs):
        record = _begin_trace(state, args, kwargs)
        # The limits and freeze decide here, before JAX lowers and compiles; what they
        # decide is done outside the internal guard so that it reaches the caller.
        outcome = _check_guards(state, record)
        try:
            if outcome is not None:
                guards.act(outcome)  # raises the refusal, or warns (which -W error turns into one)
            out = target(*args, **kwargs) if self_ref is None else target(self_ref(), *args, **kwargs)
        except BaseException as exc:  # a refusal, or the user's function failed to trace: noted, re-raised as it came
            if record is not None:
                _trace_failed(record, exc)
            raise
        if record is not None:
            _end_trace(record)
        return out

    for attr in ("__module__", "__doc__"):
        with contextlib.suppress(AttributeError, TypeError):
            setattr(hook, attr, getattr(fun, attr))
    inner, _ = unwrap_callable(fun)
    hook.__name__ = state.trace_name
    hook.__qualname__ = getattr(inner, "__qualname__", state.trace_name)
    # JAX reads the parameters through inspect.signature and the source location
    # through __wrapped__ (for its error messages); both must show the user's function.
    with contextlib.suppress(TypeError, ValueError):
        setattr(hook, "__signature__", inspect.signature(fun))
    setattr(hook, "__wrapped__", target if self_ref is not None else fun)
    # The listener and freeze() tell a wrapped function's trace from a plain jit's by it.
    setattr(hook, _tracking.HOOK_ATTR, True)
    setattr(hook, dispatch_path.STATE_ATTR, state)
    return hook


# ----------------------------------------------------------------- trace hook side


@_guard.guarded(where="hook.begin")
def _begin_trace(state: HookState, args: tuple, kwargs: dict) -> _tracking.Record | None:
    if _tracking.suppressed():
        return None
    if state.look_for_user_function:
        _name_after_user_function(state, args, kwargs)
    sig = sigmod.build(state.layout, args, kwargs)
    record = _tracking.Record(state, state.module_name, Kind.TRACE, sig)
    if state.captures is not None:
        record.stale = _capture_changes(state)
        record.captured = state.captures.snapshot()
    _tracking.push(record)
    return record


def _name_after_user_function(state: HookState, args: tuple, kwargs: dict) -> None:
    state.look_for_user_function = False  # look once
    found = user_function_in((args, kwargs), state.trace_name)
    if found is None:
        return
    old, state.info = state.info, describe_function(found)
    state.layout = state.layout.of_user_function(found)
    state.in_library_file = is_library_file(state.info.file)
    counters.rename(old, state.info)


@_guard.guarded(where="hook.guards")
def _check_guards(state: HookState, record: _tracking.Record | None) -> BaseException | Warning | None:
    if record is None:
        return None
    # The call site is looked up only when a limit or freeze asks for the cause.
    return guards.check_trace(state, record, lambda: call_site(4))


@_guard.guarded(where="hook.failed")
def _trace_failed(record: _tracking.Record, exc: BaseException) -> None:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    record.error = f"{type(exc).__name__}: {message[:500]}"


@_guard.guarded(where="hook.end")
def _end_trace(record: _tracking.Record) -> None:
    record.jaxpr_eqns = _count_traced_eqns()


def _count_traced_eqns() -> int | None:
    # The jaxpr being built is not handed to us; count the equations of the trace
    # frame JAX is filling, which is what lowering will see.
    return jaxcompat.traced_equations()


# ------------------------------------------------------------------ call side


def _make_watched(fun: Callable[..., Any], jitted: Any, state: HookState) -> Callable[..., Any]:
    """The function ``cachewatch.jit`` returns: calls ``jitted`` and notices traces and compiles.

    On a cache hit the frame around JAX's C++ dispatch is the whole cost, so the common
    path is C (``_fastcall.Watched``); it hands sampled calls to ``sampled`` and calls that
    traced or compiled to ``finish``. The pure-Python twin (``_python_watched``) is a plain
    closure, the cheapest Python frame. Either binds as a method exactly like ``jax.jit``.
    """
    stats = _stats_for(state.info)
    paths = _call_paths(jitted, state, stats)
    watched: Any
    if _Watched is not None:
        watched = _Watched(jitted, stats, paths.sampled, paths.finish)
    else:
        watched = _python_watched(jitted, stats, paths)
    _dress(watched, fun, jitted, state, stats, paths.run)
    return watched


class _CallPaths(NamedTuple):
    """What a watched call does past the cache hit: ``run`` a call that may trace or
    compile, ``timed`` a sampled one, ``sampled`` the sampled call's way in (it waits for
    a warm-up compiling its signature), and ``finish`` a call that traced or compiled."""

    run: Callable[[Callable[..., Any], tuple, dict], Any]
    timed: Callable[..., Any]
    sampled: Callable[..., Any]
    finish: Callable[[int, tuple, dict, BaseException | None], None]


def _call_paths(jitted: Any, state: HookState, stats: CallCounter) -> _CallPaths:
    """The closures behind one watched function's misses and sampled calls."""
    tracking = _tracking

    def finish(mark: int, args: tuple, kwargs: dict, exc: BaseException | None) -> None:
        if _finish(state, jitted, mark, args, kwargs, exc):
            stats.calls -= 1  # made while tracing an outer function: not an execution
        if not current.steady():
            stats.next_sample = stats.calls + 1  # the next call tells whether warm-up is over

    def run(call: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        mark = tracking.activity
        try:
            out = call(*args, **kwargs)
        except BaseException as exc:  # a failed call's trace is still recorded; the error re-raised as it came
            _failed(finish, mark, args, kwargs, exc)
            raise
        if tracking.activity != mark:
            finish(mark, args, kwargs, None)
        elif not current.steady() and not state.in_library_file:
            current.mark_steady()  # the user's own step ran from the cache: set-up is over
        return out

    def timed(*args, **kwargs):
        out = sampling.timed_call(jitted, stats, state, args, kwargs)
        if state.captures is not None:
            _check_captures(state)
        return out

    def sampled(*args, **kwargs):  # the call is counted already
        if not state.warming:
            return run(timed, args, kwargs)
        _await_warmup(state, args, kwargs)
        try:
            return run(timed, args, kwargs)
        finally:
            if state.warming:  # every call looks while a warm-up compiles
                stats.next_sample = stats.calls + 1

    return _CallPaths(run, timed, sampled, finish)


def _failed(
    finish: Callable[[int, tuple, dict, BaseException | None], None],
    mark: int,
    args: tuple,
    kwargs: dict,
    exc: BaseException,
) -> None:
    """After a call that raised (``run``'s, the cache-hit path's): a failed call's trace is
    still recorded; the caller then re-raises the error as it came."""
    if _tracking.activity != mark:
        finish(mark, args, kwargs, exc)


def _python_watched(jitted: Any, stats: CallCounter, paths: _CallPaths) -> Callable[..., Any]:
    """The pure-Python twin of ``_fastcall.Watched``. The cache hit is this one frame: it
    counts the call and calls ``jitted``, and calls nothing else unless the call is sampled
    or traced or compiled. That is why it spells out ``run``'s call and check instead of
    calling ``run``: a helper's frame would cost every call. A call that raised is not hot:
    ``_failed`` takes it, as in ``run``."""
    run, timed, finish = paths.run, paths.timed, paths.finish
    tracking = _tracking

    def watched(*args, **kwargs):
        stats.calls += 1
        if stats.calls >= stats.next_sample:
            return run(timed, args, kwargs)
        mark = tracking.activity
        try:
            out = jitted(*args, **kwargs) if kwargs else jitted(*args)
        except BaseException as exc:  # a failed call's trace is still recorded; the error re-raised as it came
            _failed(finish, mark, args, kwargs, exc)
            raise
        if tracking.activity != mark:
            finish(mark, args, kwargs, None)
        return out

    return watched


def _dress(
    watched: Any,
    fun: Callable[..., Any],
    jitted: Any,
    state: HookState,
    stats: CallCounter,
    run: Callable[[Callable[..., Any], tuple, dict], Any],
) -> None:
    """Give ``watched`` the user's function's name and docs, the jit object's methods
    (each run through ``run``, so their traces are recorded), and cachewatch's handles."""

    def observed(method: str) -> Callable[..., Any]:
        def call(*args, **kwargs):
            return run(getattr(jitted, method), args, kwargs)

        call.__name__ = method
        return call

    def compile_ahead(site: str, args: tuple, kwargs: dict) -> None:
        """Trace, lower and compile this signature without running it (``cachewatch.warmup``,
        called at ``site``): JAX's caches then serve the first call with it."""
        with _tracking.ahead_of_time(site):
            run(lambda *a, **k: jitted.lower(*a, **k).compile(), args, kwargs)

    def clear_cache() -> None:
        jitted.clear_cache()
        with _guard.guard("jit.clear_cache"):
            causes.mark_cleared(state.info.function_hash, state.serial)
            cachestate.released(state.info, cachestate.CLEAR_CACHE)

    def staged(method: str) -> Callable[..., Any]:
        def stage(*args, **kwargs):
            # Its compile() (ahead of time, outside any call) is recorded as this signature's.
            return _compiled_through(run(getattr(jitted, method), args, kwargs), run, args, kwargs)

        stage.__name__ = method
        return stage

    functools.update_wrapper(watched, fun, updated=())
    watched.lower = staged("lower")
    watched.trace = staged("trace")
    watched.eval_shape = observed("eval_shape")
    watched.clear_cache = clear_cache
    watched.__cachewatch_compile_ahead__ = compile_ahead
    watched.__cachewatch_stats__ = stats
    watched._cache_size = jaxcompat.jit_cache_size(jitted)
    watched.__cachewatch_state__ = state
    watched.__cachewatch_jitted__ = jitted
    # functools.wraps copies these attributes into a wrapper of the watched function
    # (jax.grad(f), jax.vmap(f)); its own id tells the watched function from such a copy.
    watched.__cachewatch_id__ = id(watched)


def _compiled_through(stage: Any, run: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """``stage`` (a ``jax.stages.Lowered``, or a ``Traced``) whose ``compile()`` (or whose
    ``lower()``'s ``compile()``) runs through ``run`` with the arguments it was made for, so
    that a compile ahead of time, outside any call, is claimed and recorded: the same
    type, its slots copied, one method overridden. ``stage`` itself where that cannot be."""
    method = "compile" if hasattr(stage, "compile") else "lower"
    stage_type: Any = type(stage)
    try:
        observed: Any = object.__new__(_observed_type(stage_type, method))
        for cls in type(stage).__mro__:
            for slot in cls.__dict__.get("__slots__", ()):
                if hasattr(stage, slot):
                    setattr(observed, slot, getattr(stage, slot))
    except Exception:  # a stage of another shape: its compile goes unrecorded, as JAX made it
        return stage
    made = getattr(type(stage), method)
    if method == "compile":
        observed._cachewatch_next = lambda a, k: run(lambda *_, **__: made(stage, *a, **k), args, kwargs)
    else:
        # lower() of a trace, outside any call: its compile is recorded as one made outside
        # the function's call (a lowering inside one would be a compile event of its own).
        observed._cachewatch_next = lambda a, k: _compiled_through(made(stage, *a, **k), run, args, kwargs)
    return observed


@functools.cache
def _observed_type(stage_type: Any, method: str) -> type:
    def next_stage(self, *args, **kwargs):
        return self._cachewatch_next(args, kwargs)

    next_stage.__name__ = method
    return type(stage_type.__name__, (stage_type,), {"__slots__": ("_cachewatch_next",), method: next_stage})


@_guard.guarded(where="jit.await_warmup")
def _await_warmup(state: HookState, args: tuple, kwargs: dict) -> None:
    """Wait for a warm-up compiling this call's signature, or take it over (compile_ahead.claim)."""
    compile_ahead.claim(state.warming, sigmod.build(state.layout, args, kwargs).stable_hash())


# Called with every function cachewatch.jit makes (the interfaces register here: a
# warm-up from the warmup_from setting starts as the function is defined).
_on_watched: list[Callable[[Any], None]] = []


def on_watched(callback: Callable[[Any], None]) -> None:
    """Call ``callback(watched)`` for every function ``cachewatch.jit`` makes from now on."""
    _on_watched.append(callback)


def is_watched(fn: Any) -> bool:
    """True for a function returned by ``cachewatch.jit`` (not a wrapper of one that
    ``functools.wraps`` gave its attributes)."""
    return getattr(fn, "__cachewatch_state__", None) is not None and getattr(fn, "__cachewatch_id__", None) == id(fn)


def watched_state(fn: Any) -> HookState | None:
    """The state of a function ``cachewatch.jit`` returned; None for anything else."""
    return fn.__cachewatch_state__ if is_watched(fn) else None


@_guard.guarded(where="jit.remade")
def _note_jit_object(state: HookState, seconds: float) -> None:
    """Count a jit object made anew; the line that made it is looked up once per
    collection (a walk of the stack would cost as much again as making the object)."""
    stats = _stats_for(state.info)
    stats.note_jit_object(seconds, None if stats.jit_made_at else call_site(3))


@_guard.guarded(where="jit.finish")
def _finish(state: HookState, jitted: Any, mark: int, args: tuple, kwargs: dict, exc: BaseException | None) -> bool:
    """Record what the call traced and compiled; True when the call was made while tracing
    another function (a call of the jaxpr being built, not an execution)."""
    records = _tracking.claim(state, state.module_name, mark)
    if not records:
        return False
    call_site = _call_site()
    device = devices.of_inputs(args, kwargs)
    measured = building.NOT_MEASURED
    compiled = [r for r in records if r.compiles > 0 and r.error is None]
    if compiled and not state.in_library_file:
        current.note_user_compile(state.info.function_hash)
    if compiled and exc is None:
        # XLA's figures come with the program the compile itself made (program.py).
        measured = _sample_next_call(state, args, kwargs, compiled[0])
        path, reason = dispatch_path.path_of_compiling_call(state.info.function_hash, mark)
        measured = measured._replace(call_path=path, slow_reason=reason)
        timed = (
            baseline.eager_baseline(state.measured, state.fun, jitted, compiled[0], args, kwargs)
            if state.eager_baseline
            else None
        )
        if timed is not None:
            measured = measured._replace(compiled_run_seconds=timed[0], eager_run_seconds=timed[1])
    for record in records:
        event = _to_event(
            state,
            record,
            args,
            kwargs,
            call_site,
            device,
            measured if record is (compiled[0] if compiled else None) else building.NOT_MEASURED,
        )
        recorder.record_event(event)
        for name, before, after in record.stale:
            recorder.record_event(_stale_event(state, name, before, after, call_site))
    return all(r.kind == Kind.TRACE and r.trace_seconds is None and r.compiles == 0 for r in records)


def _sample_next_call(state: HookState, args: tuple, kwargs: dict, record: _tracking.Record) -> building.Measured:
    """Time the call after this compile. The compile's fields from the call counter: which
    call compiled, and whether the program was repeating its work when it came."""
    sig = record.signature if record.kind == Kind.TRACE else _concrete_signature(state, args, kwargs)
    stats = _stats_for(state.info)
    took = sum(t or 0.0 for t in (record.trace_seconds, record.lower_seconds, record.compile_seconds))
    repeating = stats.after_compile(sig.stable_hash() if sig is not None else None, took)
    return building.Measured(while_repeating=repeating, call_number=stats.run_calls)


def _to_event(
    state: HookState,
    record: _tracking.Record,
    args: tuple,
    kwargs: dict,
    call_site: str | None,
    device: str | None,
    measured: building.Measured,
) -> CompileEvent:
    info = state.info
    compiled = record.compiles > 0
    if record.kind == Kind.TRACE:
        sig = record.signature
        nested = record.trace_seconds is None and not compiled
        verdict = causes.explain_trace(
            info.function_hash,
            state.serial,
            info.name,
            sig,
            succeeded=record.error is None,
            compiled=compiled,
            device=device,
            call_site=call_site,
            placement=placemod.placement(state.layout, args, kwargs) if compiled else (),
        )
    else:
        sig = _concrete_signature(state, args, kwargs)
        nested = False
        transform = _transformation(args, kwargs)
        if transform is not None:
            verdict = causes.explain_transformed(info.function_hash, state.serial, info.name, sig, *transform)
        else:
            verdict = causes.explain_compile(
                info.function_hash,
                state.serial,
                info.name,
                sig,
                device,
                placemod.placement(state.layout, args, kwargs),
            )
    return building.compile_event(
        record,
        info,
        verdict.cause,
        verdict.explanation,
        verdict.diff,
        sig,
        device=device,
        call_site=call_site,
        ahead=record.ahead,
        nested=nested,
        measured=measured,
    )


def _stale_event(state: HookState, name: str, before: str, after: str, call_site: str | None) -> CompileEvent:
    info = state.info
    return building.event(
        info,
        Kind.STALE_CAPTURE,
        Cause.STALE_CAPTURE,
        (
            f"`{info.name}` read `{name}` when it was traced ({before}); it is now {after}, but the "
            f"compiled code still uses the old value. Pass `{name}` as an argument (static if it "
            "steers Python control flow) instead of reading it from the enclosing scope."
        ),
        ({"path": name, "change": "value", "cause": Cause.STALE_CAPTURE, "before": before, "after": after},),
        None,
        timestamp=time.time(),
        thread=threading.current_thread().name,
        call_site=call_site,
    )


def _capture_changes(state: HookState) -> list[tuple[str, str, str]]:
    """Changes to the values baked in at trace time, unless the check is turned off."""
    if state.captures is None or not current.config().stale_capture_check:
        return []
    return state.captures.changes()


@_guard.guarded(where="jit.captures")
def _check_captures(state: HookState) -> None:
    changes = _capture_changes(state)
    if changes:
        site = _call_site()
        for name, before, after in changes:
            recorder.record_event(_stale_event(state, name, before, after, site))


def _transformation(args: tuple, kwargs: dict) -> tuple[str, tuple[str, ...]] | None:
    """The transformation whose tracers the call's arguments are, if any (the compile that
    follows is of the transformed function, not of the function itself), with the shapes
    of the values under its tracers (a vmap's batched arguments)."""
    tracers = [leaf for leaf in jax.tree_util.tree_leaves((args, kwargs)) if isinstance(leaf, jax.core.Tracer)]
    if not tracers:
        return None
    values = (getattr(t, "val", None) for t in tracers)  # a tracer's value: an array, or another tracer
    shapes = tuple(str(tuple(shape)) for shape in (getattr(v, "shape", None) for v in values) if shape is not None)
    return jaxcompat.transform_of(tracers[0]), shapes


@_guard.guarded(where="jit.signature")
def _concrete_signature(state: HookState, args: tuple, kwargs: dict) -> sigmod.Signature | None:
    # A bug here is counted by the guard (and fails the project's tests), never turned
    # into a quiet cause=unknown.
    return sigmod.build(state.layout, args, kwargs)


def _call_site() -> str | None:
    return call_site(3)


# ------------------------------------------------------------------ public entry


P = ParamSpec("P")
R = TypeVar("R", covariant=True)


class Jitted(Protocol[P, R]):
    """What ``cachewatch.jit`` returns: the function, with its parameters and result type,
    and the jit object's methods (``lower``, ``trace``, ``eval_shape``, ``clear_cache``)."""

    @property
    def __wrapped__(self) -> Callable[P, R]: ...

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...
    def lower(self, *args: P.args, **kwargs: P.kwargs) -> jax.stages.Lowered: ...
    def trace(self, *args: P.args, **kwargs: P.kwargs) -> jax.stages.Traced: ...
    def eval_shape(self, *args: P.args, **kwargs: P.kwargs) -> Any: ...
    def clear_cache(self) -> None: ...

    # A jitted method binds like a function (its first parameter is the instance).
    @overload
    def __get__(self, instance: None, owner: type[Any]) -> Jitted[P, R]: ...
    @overload
    def __get__(self, instance: object, owner: type[Any]) -> Callable[..., R]: ...


@overload
def jit(fun: Callable[P, R], /, **jit_options: Any) -> Jitted[P, R]: ...
@overload
def jit(fun: None = None, /, **jit_options: Any) -> Callable[[Callable[P, R]], Jitted[P, R]]: ...


def jit(fun: Callable[..., Any] | None = None, /, **jit_options: Any) -> Any:
    """Drop-in for ``jax.jit``: same arguments, same behaviour, plus a record of every compile."""
    if fun is None:
        return lambda f: jit(f, **jit_options)
    if is_watched(fun):
        fun = getattr(fun, "__wrapped__")
    eager_baseline = jit_options.pop(_EAGER_OPTION, None)
    max_recompiles, on_limit = (jit_options.pop(name, None) for name in _LIMIT_OPTIONS)
    guards.check_options(max_recompiles, on_limit)
    if not current.config().enabled:
        return _jax_jit(fun, **jit_options)
    hook = None
    with _guard.guard("jit.wrap"):
        _tracking.install_listeners()
        cachekey.install()
        dispatch_path.install()
        hook, state = hookstate.hook_for(fun, jit_options, _make_hook)
        if eager_baseline:
            state.eager_baseline = True
        guards.set_limit(state.info.function_hash, max_recompiles, on_limit)
    if hook is None:
        return _jax_jit(fun, **jit_options)
    began = time.perf_counter()
    jitted = _jax_jit(hook, **jit_options)
    took = time.perf_counter() - began  # JAX's own set-up of a jit object: what making it anew costs
    watched = _make_watched(fun, jitted, state)
    state.jit_objects += 1
    if state.jit_objects > 1:  # made anew for a function jitted before, with the same options
        _note_jit_object(state, took)
    for callback in _on_watched:
        with _guard.guard("jit.on_watched"):
            callback(watched)
    return watched
