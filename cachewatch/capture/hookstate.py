"""What ``cachewatch.jit`` keeps per (function, jit options): the :class:`HookState` fixed at
decoration time, and the tables that hand back the same trace hook when the same function
is wrapped again with the same options.

JAX keys its caches on the function it is given, so re-wrapping a function must give
``jax.jit`` the same hook to share JAX's caches exactly as ``jax.jit`` does, and a new
lambda, partial or copied wrapper must not. How that sharing is kept (on the function's
``__dict__``, or per instance for a bound method) is apart from what the hook does with a
trace and what a watched call records, which stay in ``jit.py``; that module makes the
hook itself and hands it to :func:`hook_for`.
"""

from __future__ import annotations

import threading
import types
import weakref
from collections.abc import Callable
from typing import Any

from ..core import jaxcompat
from ..explain import signature as sigmod
from ..record import current
from . import _tracking, captures, compile_ahead
from .identity import describe_function, is_library_file


class HookState:
    """Everything fixed at decoration time for one (function, jit options) pair."""

    _serials = iter(range(1, 1 << 62))
    _serial_lock = threading.Lock()

    def __init__(self, fun: Callable[..., Any], options: dict[str, Any]):
        self.info = describe_function(fun)
        # A library's own jit around the user's function passed as an argument
        # (eqx.filter_jit): named after the user's function at its first trace.
        self.in_library_file = is_library_file(self.info.file)
        self.look_for_user_function = self.in_library_file
        self.layout = sigmod.ParamLayout.from_function(
            fun, options.get("static_argnums"), options.get("static_argnames")
        )
        self.trace_name = jaxcompat.fun_name(fun)  # the name JAX's monitoring events carry
        self.module_name = f"jit({self.trace_name})"
        with HookState._serial_lock:
            self.serial = next(HookState._serials)
        reader = captures.reader(fun)
        self.captures = captures.CaptureState(reader) if reader is not None else None
        self.eager_baseline = current.config().eager_baseline
        self.measured: set = set()  # signature keys with an eager baseline already taken
        # The eager baseline calls the function again; a bound method's instance is held
        # weakly, like the hook holds it.
        self.fun = weakref.WeakMethod(fun) if isinstance(fun, types.MethodType) else (lambda: fun)
        # The variants of a running warm-up by signature hash (capture/compile_ahead.py): a call
        # of one being compiled waits instead of compiling it a second time.
        self.warming: dict[str, compile_ahead.Slot] = {}
        self.jit_objects = 0  # jit objects made with this hook: past the first, each made anew
        _tracking.watch_names(self.trace_name, self.module_name, self.info)


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    hash(value)
    return value


_method_hooks: weakref.WeakKeyDictionary[Any, dict] = weakref.WeakKeyDictionary()
_method_lock = threading.Lock()
_HOOKS_ATTR = "__cachewatch_hooks__"


def hook_for(
    fun: Callable[..., Any],
    options: dict[str, Any],
    make_hook: Callable[[Callable[..., Any], HookState], Callable[..., Any]],
) -> tuple[Callable[..., Any], HookState]:
    """The cached hook for this function and options, made (by ``make_hook``) on first use."""
    try:
        options_key = _freeze(options)
    except TypeError:
        options_key = None  # unhashable options: no sharing, like a fresh jax.jit
    if isinstance(fun, types.MethodType):
        try:
            with _method_lock:
                table = _method_hooks.setdefault(fun.__self__, {})
            cache_key = (fun.__func__, options_key)
        except TypeError:
            table, cache_key = None, None
    else:
        table = _own_table(fun)
        cache_key = options_key
    if table is not None and options_key is not None:
        found = table.get(cache_key)
        if found is not None:
            return found
    state = HookState(fun, options)
    made = (make_hook(fun, state), state)
    if table is not None and options_key is not None:
        table[cache_key] = made
    return made


class _HookTable(dict):
    """A function's hooks by options, kept in its ``__dict__``, with the function it is of:
    ``functools.wraps`` copies a function's ``__dict__`` into its wrapper (``jax.grad(f)``,
    ``jax.value_and_grad(f)``), and a wrapper must not be served the hook of ``f``."""

    def __init__(self, owner: Callable[..., Any]):
        super().__init__()
        try:
            self.owner: Callable[[], Any] = weakref.ref(owner)
        except TypeError:
            self.owner = lambda: owner  # the table lives in its __dict__: it lives no longer

    def is_of(self, fun: Callable[..., Any]) -> bool:
        return self.owner() is fun


def _own_table(fun: Callable[..., Any]) -> _HookTable | None:
    """``fun``'s own table of hooks, made (or made anew over a copied one) on first use;
    None for a callable without a ``__dict__``."""
    attrs = getattr(fun, "__dict__", None)
    if not isinstance(attrs, dict):
        return None
    table = attrs.get(_HOOKS_ATTR)
    if not (isinstance(table, _HookTable) and table.is_of(fun)):
        table = _HookTable(fun)
        try:
            attrs[_HOOKS_ATTR] = table
        except TypeError:  # a mapping proxy (a class): no sharing, like a fresh jax.jit
            return None
    return table
