"""Everything cachewatch takes from JAX beyond its public API, behind named capabilities.

Each capability is probed once, at first use, against the JAX in this process: does the
frame cachewatch reads exist with the locals it reads, does JAX still emit the monitoring
event under the name cachewatch listens for, does the logger still say what cachewatch
parses. One that fails turns off with one warning naming the feature lost on this JAX
version, never silently; the rest of cachewatch goes on with less detail. A capability
can also turn off later, when its hook fails at run time (``turn_off``).

    from cachewatch.core import jaxcompat
    if jaxcompat.available("trace_frame"):
        ...

``cachewatch doctor``, the dashboard's health page and ``cachewatch_capability{name}`` on
/metrics list the same table (``status()``). Where JAX has a public API for a thing, the
public API is used and the capability only says so.

Only this module imports ``jax._src``, walks JAX's frames or reads their locals, and reads
JAX's log records; capture asks through the typed accessors below, each saying which JAX
versions it serves and what it gives when the JAX in use lacks the thing
(``tests/test_layout.py`` refuses such reads anywhere else).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import os
import re
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

logger = logging.getLogger("cachewatch")


class CapabilityWarning(UserWarning):
    """A feature of cachewatch is off on the JAX version in use (see ``cachewatch doctor``)."""


# What cachewatch expects of JAX's internals, in one table: the frames it reads (module,
# function, the locals it reads there), the event names it listens for, the logger text
# it parses. A JAX release that renames one of them turns its capability off.
FRAMES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    # name: (JAX module, function names (any one), locals read)
    "trace_frame": ("jax._src.pjit", ("_trace_for_jit",), ("fun", "ji", "args", "kwargs")),
    "lowering_frame": (
        "jax._src.interpreters.pxla",
        ("_cached_lowering_to_hlo",),
        ("closed_jaxpr", "in_avals", "num_const_args", "semantic_in_shardings"),
    ),
    "dispatch_frame": ("jax._src.pjit", ("cache_miss",), ("fun",)),
    "transpose_frame": ("jax._src.pjit", ("_pjit_transpose_fancy", "_pjit_transpose"), ()),
    "primitive_params": ("jax._src.dispatch", ("prim_fun",), ("params",)),
}
EVENTS: dict[str, str] = {
    "trace": "/jax/core/compile/jaxpr_trace_duration",
    "lower": "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "compile": "/jax/core/compile/backend_compile_duration",
    "cache_hit": "/jax/compilation_cache/cache_hits",
    "cache_miss": "/jax/compilation_cache/cache_misses",
    "cache_saved": "/jax/compilation_cache/compile_time_saved_sec",
    "cache_request": "/jax/compilation_cache/compile_requests_use_cache",
}
# JAX's own names for its compile events, which cachewatch's must equal.
_JAX_EVENT_CONSTANTS = {
    "trace": "JAXPR_TRACE_EVENT",
    "lower": "JAXPR_TO_MLIR_MODULE_EVENT",
    "compile": "BACKEND_COMPILE_EVENT",
}
CACHE_KEY_LOGGER = "jax._src.cache_key"
CACHE_KEY_MESSAGE = "get_cache_key hash of serialized %s: %s"
# Attributes read off JAX's modules and objects: (module, attribute, ...) as the probes
# check them.
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "trace_equations": ("jax._src.core", "trace_ctx"),
    "jaxpr_debug_info": ("jax._src.core", "Jaxpr", "debug_info"),
    "persistent_cache_reset": ("jax.experimental.compilation_cache.compilation_cache", "reset_cache"),
    "trace_context": ("jax._src.config", "trace_context", "trace_context_names"),
    # The class jax.extend.core re-exports, read where it is defined: importing
    # jax.extend imports Pallas, which adds options to the trace context JAX keys its
    # caches on (JAX 0.12), so every function traced before would be traced again.
    "primitives": ("jax._src.core", "Primitive"),
    "distributed_state": ("jax.distributed", "is_initialized"),
    "jit_cache_size": ("_cache_size",),  # on the object jax.jit returns
    "clear_caches_hook": ("jax._src.util", "register_cache"),
    # The program view: the lowering hands every jaxpr to the first, the second takes the
    # lowered module and returns the executable.
    "program_hooks": ("jax._src.jaxpr_util", "maybe_dump_jaxpr_to_file", "jax._src.compiler", "compile_or_get_cached"),
    "hlo_print_options": ("jax._src.lib", "hlo", "HloPrintOptions"),
    "traceback_lines": ("jax._src.lib", "xla_client", "Traceback", "code_addr2line"),
    "mlir_strip_debuginfo": ("jax._src.lib.mlir", "passmanager", "PassManager"),
    # A fresh MLIR context with JAX's dialects, in which the writer's thread reads a copy
    # of the lowered module (the compile's own context is JAX's, and not thread-safe).
    "mlir_context": ("jax._src.interpreters.mlir", "make_ir_context"),
    # The class of the sharding the lowering frame gives an uncommitted argument: told
    # apart by name (checked with the frame, by the capability lowering_frame).
    "lowering_frame": ("jax._src.interpreters.pxla", "UnspecifiedValue"),
    # The attribute JAX's dispatch sets on the function it jits for an eager primitive:
    # (module that sets it, attribute), read off the function at trace time.
    "primitive_marker": ("jax._src.dispatch", "_apply_primitive"),
    # The persistent cache JAX made (None until its first compile asks): where its entries go.
    "persistent_cache_directory": ("jax._src.compilation_cache", "_cache"),
}
TRACER_CLASSES: dict[str, tuple[str, str]] = {
    # class name: (module, what the call is traced under)
    "JVPTracer": ("jax._src.interpreters.ad", "jvp"),
    "LinearizeTracer": ("jax._src.interpreters.ad", "linearize (grad)"),
    "BatchTracer": ("jax._src.interpreters.batching", "vmap"),
}


@dataclasses.dataclass
class Capability:
    name: str
    gives: str  # what cachewatch can do with it, i.e. what is lost without it
    probe: Callable[[], str | None]  # None when it works, else why not
    public: str = ""  # the public API used for it, when JAX has one
    state: bool | None = None  # None until probed
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class CapabilityStatus:
    name: str
    available: bool
    gives: str
    reason: str
    public: str


_lock = threading.RLock()
_capabilities: dict[str, Capability] = {}


def _capability(
    name: str, gives: str, public: str = ""
) -> Callable[[Callable[[], str | None]], Callable[[], str | None]]:
    def register(probe: Callable[[], str | None]) -> Callable[[], str | None]:
        _capabilities[name] = Capability(name, gives, probe, public)
        return probe

    return register


def available(name: str) -> bool:
    """Whether capability ``name`` works on this JAX (probed on first use, then remembered)."""
    cap = _capabilities[name]
    state = cap.state
    if state is None:
        state = _probe(cap)
    return state


def _probe(cap: Capability) -> bool:
    with _lock:
        if cap.state is not None:
            return cap.state
        try:
            reason = cap.probe()
        except Exception as exc:  # a probe that cannot even look: the hook is not there
            reason = f"{type(exc).__name__}: {exc}"
        cap.state = reason is None
        if reason is not None:
            cap.reason = reason
            _warn(cap)
        return cap.state


def turn_off(name: str, reason: str) -> None:
    """The hook failed at run time: the capability is off from now on (one warning)."""
    cap = _capabilities[name]
    with _lock:
        if cap.state is False:
            return
        cap.state, cap.reason = False, reason
    _warn(cap)


def _warn(cap: Capability) -> None:
    message = (
        f"cachewatch: on JAX {_jax_version()} the capability {cap.name!r} is off, so {cap.gives} "
        f"is lost ({cap.reason}); `cachewatch doctor` lists what works"
    )
    logger.warning(message)
    warnings.warn(message, CapabilityWarning, stacklevel=3)


def status() -> list[CapabilityStatus]:
    """Every capability, probed: what works on the JAX in use."""
    return [
        CapabilityStatus(cap.name, available(cap.name), cap.gives, cap.reason, cap.public)
        for cap in list(_capabilities.values())
    ]


def off() -> list[str]:
    """Names of the capabilities probed so far and found off (what a run reports)."""
    return sorted(cap.name for cap in _capabilities.values() if cap.state is False)


def reset() -> None:
    """Forget every probe (tests, after changing the expectations above)."""
    with _lock:
        for cap in _capabilities.values():
            cap.state, cap.reason = None, ""
        _module_source.cache_clear()


def _jax_version() -> str:
    import jax

    return jax.__version__


# ------------------------------------------------------------------ probes


@functools.cache
def _module_source(module_name: str) -> str:
    import importlib

    return inspect.getsource(importlib.import_module(module_name))


def _code_objects(module_name: str) -> dict[str, list[types.CodeType]]:
    """Every function's code in a JAX module, nested ones included, by name."""
    import importlib

    module = importlib.import_module(module_name)
    found: dict[str, list[types.CodeType]] = {}

    def walk(code: types.CodeType) -> None:
        found.setdefault(code.co_name, []).append(code)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                walk(const)

    for value in list(vars(module).values()):
        fn = inspect.unwrap(value) if callable(value) else value
        code = getattr(fn, "__code__", None)
        if isinstance(code, types.CodeType) and getattr(fn, "__module__", None) == module_name:
            walk(code)
    return found


def _frame_probe(name: str) -> str | None:
    module_name, functions, local_names = FRAMES[name]
    codes = _code_objects(module_name)
    for function in functions:
        for code in codes.get(function, ()):
            names = set(code.co_varnames) | set(code.co_cellvars) | set(code.co_freevars)
            if all(local in names for local in local_names):
                return None
    # Functions behind JAX's C caches have no code object to reach: read their definition.
    source = _module_source(module_name)
    for function in functions:
        match = re.search(rf"def {re.escape(function)}\((.*?)\)\s*(->[^:]*)?:", source, re.S)
        if match and all(re.search(rf"\b{re.escape(local)}\b", match.group(1)) for local in local_names):
            return None
    wanted = " or ".join(functions)
    return f"{module_name} has no function {wanted} with the locals {', '.join(local_names) or '(none)'}"


_capability("trace_frame", "the identity and signature of compiles of jits cachewatch did not wrap")(
    lambda: _frame_probe("trace_frame")
)


@_capability("lowering_frame", "the signature of a compile made without a trace (foreign lowerings)")
def _lowering_frame() -> str | None:
    return _frame_probe("lowering_frame") or _attribute_probe("lowering_frame")


_capability(
    "dispatch_frame",
    "telling a watched function's compile outside its call (grad's backward pass) from a plain jit",
)(lambda: _frame_probe("dispatch_frame"))
_capability("transpose_frame", "naming the backward pass of jax.grad or jax.vjp taken outside any jit")(
    lambda: _frame_probe("transpose_frame")
)
_capability("primitive_params", "the parameters of eager (op-by-op) compiles, and their diffs")(
    lambda: _frame_probe("primitive_params")
)


@_capability("primitive_marker", "telling JAX's op-by-op compiles of eager primitives apart")
def _primitive_marker() -> str | None:
    # Not an attribute of the module: set on each function dispatch jits for a primitive.
    module_name, attribute = ATTRIBUTES["primitive_marker"]
    if not re.search(rf"\.{re.escape(attribute)}\s*=\s*True", _module_source(module_name)):
        return f"{module_name} no longer marks the functions of eager primitives with {attribute}"
    return None


@_capability("compile_events", "trace, lowering and compile seconds, and compiles made without a trace")
def _compile_events() -> str | None:
    from jax._src import dispatch

    for key, constant in _JAX_EVENT_CONSTANTS.items():
        theirs = getattr(dispatch, constant, None)
        if theirs != EVENTS[key]:
            return f"jax._src.dispatch.{constant} is {theirs!r}, cachewatch listens for {EVENTS[key]!r}"
    return None


@_capability("persistent_cache_events", "persistent-cache hits and misses")
def _persistent_cache_events() -> str | None:
    sources = _module_source("jax._src.compiler") + _module_source("jax._src.compilation_cache")
    missing = [
        EVENTS[key] for key in ("cache_hit", "cache_miss", "cache_saved", "cache_request") if EVENTS[key] not in sources
    ]
    return f"JAX no longer records {', '.join(missing)}" if missing else None


@_capability("cache_key_log", "which part of the persistent cache key changed on a miss")
def _cache_key_log() -> str | None:
    if CACHE_KEY_MESSAGE not in _module_source(CACHE_KEY_LOGGER):
        return f"{CACHE_KEY_LOGGER} no longer logs {CACHE_KEY_MESSAGE!r}"
    return None


def _attribute_probe(name: str) -> str | None:
    """Each name after the module is an attribute of the one before it."""
    import importlib

    module_name, *path = ATTRIBUTES[name]
    value: Any = importlib.import_module(module_name)
    for attribute in path:
        if not hasattr(value, attribute):
            return f"{module_name}.{'.'.join(path)} is missing"
        value = getattr(value, attribute)
    return None


def _attribute_capability(name: str, gives: str, public: str = "") -> None:
    """A capability that holds where the attribute path ``ATTRIBUTES[name]`` resolves."""
    _capability(name, gives, public)(lambda: _attribute_probe(name))


@_capability("trace_equations", "jaxpr_eqns, the equation count of each trace")
def _trace_equations() -> str | None:
    from jax._src.interpreters import partial_eval as pe

    if "tracing_eqns" not in _module_source(pe.__name__):
        return "JAX's jaxpr stack frame keeps no tracing_eqns"
    return _attribute_probe("trace_equations")


_attribute_capability(
    "primitives", "naming eager (op-by-op) compiles after their primitive", public="jax.extend.core.Primitive"
)


@_capability("jaxpr_debug_info", "the source of a function known only from its jaxpr (foreign lowerings)")
def _jaxpr_debug_info() -> str | None:
    if "func_src_info" not in _module_source("jax._src.api_util") + _module_source("jax._src.core"):
        return "JAX's debug info has no func_src_info"
    return _attribute_probe("jaxpr_debug_info")


@_capability("jit_cache_size", "_cache_size() on a cachewatch.jit function, as on the object jax.jit returns")
def _jit_cache_size() -> str | None:
    from jax._src import api  # JAX's own jit: after install(), jax.jit is cachewatch's

    (attribute,) = ATTRIBUTES["jit_cache_size"]
    return None if callable(getattr(api.jit(_identity), attribute, None)) else f"a jit object has no {attribute}"


@_capability("transform_tracers", "naming the transformation (vmap, jvp, grad) a call is traced under")
def _transform_tracers() -> str | None:
    import importlib

    missing = [
        f"{module}.{cls}"
        for cls, (module, _) in TRACER_CLASSES.items()
        if not hasattr(importlib.import_module(module), cls)
    ]
    return f"no {', '.join(missing)}" if missing else None


_attribute_capability(
    "distributed_state", "the rank of a run under jax.distributed", public="jax.distributed.is_initialized"
)


_attribute_capability(
    "persistent_cache_reset",
    "turning the persistent cache on after a first compile",
    public="jax.experimental.compilation_cache.compilation_cache.reset_cache",
)


def _attribute_probe_each(name: str) -> str | None:
    """Each name after the module is an attribute of the module itself."""
    import importlib

    module_name, *names = ATTRIBUTES[name]
    module = importlib.import_module(module_name)
    missing = [n for n in names if not callable(getattr(module, n, None))]
    return f"{module_name} has no {', '.join(missing)}" if missing else None


@_capability("program_hooks", "the program behind each compile (its shape, XLA's figures, its fingerprint)")
def _program_hooks() -> str | None:
    import importlib

    names = ATTRIBUTES["program_hooks"]
    for module_name, attribute in zip(names[::2], names[1::2], strict=False):
        if not callable(getattr(importlib.import_module(module_name), attribute, None)):
            return f"{module_name}.{attribute} is missing"
    return None


_attribute_capability("hlo_print_options", "the fingerprint of the optimised program (identical recompiles)")
_attribute_capability("traceback_lines", "equations by user source line (the compile-cost profile)")
_attribute_capability("mlir_strip_debuginfo", "the lowered program's fingerprint (what a persistent cache would serve)")
_attribute_capability(
    "mlir_context", "reading the lowered program off the compile path (its fingerprint, its StableHLO)"
)
_attribute_capability(
    "persistent_cache_directory", "which cache directory each entry went to (the entries its size limit evicted)"
)


@_capability("clear_caches_hook", "telling a cache cleared by jax.clear_caches() from a retrace with nothing cleared")
def _clear_caches_hook() -> str | None:
    return _attribute_probe_each("clear_caches_hook")


def register_cache_for_clearing(cache: Any, name: str) -> bool:
    """Have ``jax.clear_caches()`` call ``cache.cache_clear()`` too; False when this JAX
    has no such registry."""
    if not available("clear_caches_hook"):
        return False
    from jax._src import util

    util.register_cache(cache, name)
    return True


class ClearListener:
    """Registered with JAX's cache management like one of its own caches, so that
    ``jax.clear_caches()`` (which clears every registered cache) calls ``cache_clear``;
    a subclass says what a clear does.

        class Counter(ClearListener):
            def cache_clear(self) -> None: ...
        counter = Counter("cachewatch: counts jax.clear_caches()")
        counter.register()  # at first use, not at import
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.registered: bool | None = None  # None: not asked yet

    def register(self) -> bool:
        """Register once; whether JAX will call it (False: this JAX has no registry)."""
        if self.registered is None:
            self.registered = register_cache_for_clearing(self, self.name)
        return self.registered

    def cache_clear(self) -> None:
        raise NotImplementedError

    # JAX's registry may ask a cache what it holds: nothing, here.
    def cache_info(self) -> Any:
        return None

    def cache_keys(self) -> list:
        return []


def _identity(x: Any) -> Any:
    return x


# ------------------------------------------------------------------ the seam's own reads


def primitive_type() -> type | None:
    """JAX's Primitive class (public: jax.extend.core.Primitive), or None when it is off."""
    if not available("primitives"):
        return None
    from jax._src.core import Primitive

    return Primitive


_fun_name: Callable[[Any], str] | None = None


def fun_name(fun: Any) -> str:
    """The name JAX's monitoring events give a function jit traces: JAX's own
    ``jax._src.util.fun_name``, resolved once (JAX 0.10-0.12). Where JAX has none, its rule
    in 0.10-0.12: the ``__name__``, through ``functools.partial``, else ``<unnamed function>``."""
    global _fun_name
    if _fun_name is None:
        try:
            from jax._src import util

            _fun_name = util.fun_name
        except (ImportError, AttributeError):
            _fun_name = _fun_name_as_in_jax
    return _fun_name(fun)


def _fun_name_as_in_jax(fun: Any) -> str:
    while True:
        name = getattr(fun, "__name__", None)
        if name is not None:
            return name
        if not isinstance(fun, functools.partial):
            return "<unnamed function>"
        fun = fun.func


def is_eager_primitive(fun: Any) -> bool:
    """Whether a function JAX traces for jit is its own wrapper of one eager primitive
    (an op-by-op compile); False also when the capability is off."""
    if not available("primitive_marker"):
        return False
    return bool(getattr(fun, ATTRIBUTES["primitive_marker"][1], False))


def unspecified_sharding(sharding: Any) -> bool:
    """Whether a sharding from JAX's lowering frame is the one of an uncommitted argument."""
    return type(sharding).__name__ == ATTRIBUTES["lowering_frame"][1]


def traced_equations() -> int | None:
    """Equations of the jaxpr JAX is building on this thread (dead ones excluded): what
    lowering will see. None outside a trace, or when the capability is off."""
    if not available("trace_equations"):
        return None
    import weakref

    from jax._src import core

    try:
        eqns = core.trace_ctx.trace.frame.tracing_eqns
    except AttributeError:
        return None  # not inside a jaxpr trace (an eager or a vmap call)
    count = 0
    for eqn in eqns:
        if isinstance(eqn, weakref.ReferenceType) and eqn() is None:
            continue
        count += 1
    return count


def jaxpr_debug_info(jaxpr: Any) -> Any:
    """A jaxpr's debug info (argument names, source of the function), or None."""
    if not available("jaxpr_debug_info"):
        return None
    return getattr(jaxpr, "_debug_info", None) or getattr(jaxpr, "debug_info", None)


def transform_of(tracer: Any) -> str:
    """What a call is traced under (``vmap``, ``jvp``, ``linearize (grad)``), from its tracer."""
    name = type(tracer).__name__
    if available("transform_tracers") and name in TRACER_CLASSES:
        return TRACER_CLASSES[name][1]
    return name


def jit_cache_size(jitted: Any) -> Callable[[], int] | None:
    """The jit object's cache size reader, or None when JAX has none."""
    return getattr(jitted, "_cache_size", None) if available("jit_cache_size") else None


def distributed_initialized() -> bool:
    """Whether jax.distributed is initialised in this process."""
    if not available("distributed_state"):
        return False
    import jax

    return bool(jax.distributed.is_initialized())


def reset_persistent_cache() -> None:
    """Make JAX decide again whether the persistent cache is on (after its directory changed)."""
    if available("persistent_cache_reset"):
        from jax.experimental.compilation_cache import compilation_cache

        compilation_cache.reset_cache()


@_capability("trace_context", "new_context: naming the configuration option or context manager that changed")
def _trace_context() -> str | None:
    missing = _attribute_probe_each("trace_context")
    if missing:
        return missing
    from jax._src import config

    if len(config.trace_context_names()) != len(config.trace_context()):
        return "JAX's trace context and its names differ in length"
    return None


_context_names: tuple[str, ...] = ()


def trace_context() -> tuple[Any, ...] | None:
    """The values JAX keys its tracing caches on besides the arguments (a mesh, the matmul
    precision, the promotion modes, x64, the default device, ...), or None when off."""
    if not available("trace_context"):
        return None
    from jax._src import config

    return config.trace_context()


def trace_context_names(context: tuple[Any, ...]) -> tuple[str, ...]:
    """The names of a trace context's values, by position (read again when JAX adds one:
    a user context or a late import lengthens the tuple)."""
    global _context_names
    if len(_context_names) != len(context):
        from jax._src import config

        _context_names = tuple(config.trace_context_names())
    return _context_names


# ------------------------------------------------------------------ JAX's frames
#
# Capture holds a frame only as an opaque starting point for these accessors; the walking
# and the locals are read here.

_jax_dir = ""


def _jax_source_dir() -> str:
    """JAX's package directory: a frame of a named function is JAX's only when it is in there."""
    global _jax_dir
    if not _jax_dir:
        import jax

        _jax_dir = os.path.dirname(os.path.abspath(jax.__file__)) + os.sep
    return _jax_dir


def caller_frame(depth: int = 1) -> types.FrameType:
    """The frame ``depth`` levels above the function that calls this one (what
    ``sys._getframe(depth)`` gives there): where a walk up to JAX's frames starts. Any JAX."""
    return sys._getframe(depth + 1)


def find_frame(start: types.FrameType | None, capability: str, depth: int = 12) -> types.FrameType | None:
    """The nearest frame of the JAX function ``FRAMES[capability]`` names, ``start`` included,
    within ``depth`` frames; None when there is none or the capability is off. JAX 0.10-0.12."""
    if not available(capability):
        return None
    names = FRAMES[capability][1]
    jax_dir = _jax_source_dir()
    frame = start
    while frame is not None and depth > 0:
        code = frame.f_code
        if code.co_name in names and code.co_filename.startswith(jax_dir):
            return frame
        frame = frame.f_back
        depth -= 1
    return None


def traced_jit_function(start: types.FrameType | None) -> tuple[bool, Any]:
    """Whether a trace ending now is one of JAX's jit (``pjit._trace_for_jit`` within 12
    frames above ``start``), and the function it traces (that frame's ``fun``, None when
    absent). JAX 0.10-0.12; ``(False, None)`` when the capability trace_frame is off."""
    frame = find_frame(start, "trace_frame")
    if frame is None:
        return False, None
    return True, frame.f_locals.get("fun")


def dispatched_function(start: types.FrameType | None, default: Any, depth: int) -> Any:
    """The function a jit dispatched on a cache miss wraps (``pjit.cache_miss``'s ``fun``,
    within ``depth`` frames above ``start``). JAX 0.10-0.12; ``default`` when there is no
    such frame, no such local, or the capability dispatch_frame is off."""
    frame = find_frame(start, "dispatch_frame", depth)
    return default if frame is None else frame.f_locals.get("fun", default)


@dataclasses.dataclass(frozen=True, slots=True)
class JitTrace:
    """A trace JAX's jit is making (``pjit._trace_for_jit``'s locals)."""

    fun: Any  # the function jit traces
    jit_info: Any  # JAX's record of the jax.jit(...) call: one per jit object
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def jit_trace(start: types.FrameType | None) -> JitTrace | None:
    """The trace of JAX's jit ending now (``pjit._trace_for_jit`` within 12 frames above
    ``start``): its function, jit object, and the call's arguments. JAX 0.10-0.12; None
    when there is no such frame or the capability trace_frame is off."""
    frame = find_frame(start, "trace_frame")
    if frame is None:
        return None
    local = frame.f_locals
    return JitTrace(local.get("fun"), local.get("ji"), local.get("args") or (), local.get("kwargs") or {})


def jit_static_arguments(jit_info: Any) -> tuple[Any, Any]:
    """The ``static_argnums`` and ``static_argnames`` of a jit object (``JitTrace.jit_info``,
    a PjitInfo). JAX 0.10-0.12; ``((), ())`` where it holds none."""
    return getattr(jit_info, "static_argnums", ()), getattr(jit_info, "static_argnames", ())


@dataclasses.dataclass(frozen=True, slots=True)
class JitLowering:
    """A jaxpr JAX is lowering (``pxla._cached_lowering_to_hlo``'s locals)."""

    in_avals: tuple[Any, ...]  # the arguments' abstract values, constants left out
    jaxpr: Any  # the Jaxpr being lowered
    arg_names: tuple[str, ...]  # JAX's names for the arguments (its debug info)
    source: str | None  # where the function is defined: ``name at file:line``
    const_args: int  # how many constants the lowering's inputs start with
    in_shardings: Any  # JAX's shardings of the inputs, constants first


def jit_lowering(start: types.FrameType | None) -> JitLowering | None:
    """The lowering of a jaxpr under way (``pxla._cached_lowering_to_hlo`` within 12 frames
    above ``start``). JAX 0.10-0.12 (a ClosedJaxpr on 0.10; on 0.12 a Jaxpr whose ``.jaxpr``
    is itself); None when there is no such frame or the capability lowering_frame is off."""
    frame = find_frame(start, "lowering_frame")
    if frame is None:
        return None
    local = frame.f_locals
    avals = tuple(local.get("in_avals") or ())
    skip = int(local.get("num_const_args") or 0)
    closed = local.get("closed_jaxpr")
    jaxpr = getattr(closed, "jaxpr", closed)
    debug = jaxpr_debug_info(jaxpr)
    return JitLowering(
        avals[skip:],
        jaxpr,
        tuple(getattr(debug, "arg_names", None) or ()),
        getattr(debug, "func_src_info", None),
        skip,
        local.get("semantic_in_shardings"),
    )


def lowered_argument_devices(lowering: JitLowering, count: int) -> list[list[str] | None] | None:
    """Per argument of a lowering (its first ``count``): None when uncommitted (JAX leaves
    its sharding unspecified), else the devices its sharding is on, sorted. JAX 0.10-0.12;
    None, and the capability lowering_frame off, when the frame holds other objects."""
    try:
        shardings = tuple(getattr(lowering.in_shardings, "shardings", None) or ())
        skip = lowering.const_args
        return [
            None if unspecified_sharding(sharding) else sorted(str(d) for d in sharding.device_set)
            for sharding in shardings[skip : skip + count]
        ]
    except Exception as exc:  # a JAX whose lowering frame holds other objects: its probe could not tell
        turn_off("lowering_frame", f"its shardings could not be read: {type(exc).__name__}: {exc}")
        return None


def dispatched_functions(start: types.FrameType | None, depth: int) -> Iterator[Any]:
    """The function of each jit dispatch on a cache miss on the stack (``pjit.cache_miss``'s
    ``fun``), nearest first, from ``start`` up: each within ``depth`` frames of the one
    before. JAX 0.10-0.12; None for a frame without the local; nothing when the capability
    dispatch_frame is off."""
    frame = find_frame(start, "dispatch_frame", depth)
    while frame is not None:
        yield frame.f_locals.get("fun")
        frame = find_frame(frame.f_back, "dispatch_frame", depth)


def primitive_params(fun: Any) -> dict[str, Any]:
    """The parameters of the eager primitive JAX's ``dispatch.prim_fun`` closes over (the
    function an op-by-op compile traces). JAX 0.10-0.12; empty when the capability
    primitive_params is off or the closure holds none."""
    if not available("primitive_params"):
        return {}
    for cell in getattr(fun, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, dict):
            return value
    return {}


# The persistent cache's frames read when JAX records a request or a write, as
# (function, local). No capability of their own: a JAX that renamed one leaves the
# figure empty, as it always has.
CACHE_FRAMES: dict[str, tuple[str, str]] = {
    "key": ("compile_or_get_cached", "cache_key"),
    "entry_size": ("put_executable_and_time", "entry_size"),
}


def _cache_frame_local(start: types.FrameType | None, which: str, depth: int) -> Any:
    function, local = CACHE_FRAMES[which]
    frame = start
    for _ in range(depth):
        if frame is None:
            return None
        if frame.f_code.co_name == function:
            return frame.f_locals.get(local)
        frame = frame.f_back
    return None


def persistent_cache_key(depth: int = 12) -> str | None:
    """The key of the entry JAX is asking its persistent cache for, read from the caller up
    (``compiler.compile_or_get_cached``'s ``cache_key``; JAX 0.10-0.12); None when that frame
    is not within ``depth`` or holds no string key."""
    key = _cache_frame_local(sys._getframe(1), "key", depth)
    return key if isinstance(key, str) else None


def persistent_cache_directory() -> str | None:
    """The directory JAX's persistent cache reads and writes (``compilation_cache._cache``'s
    ``path``; JAX 0.10-0.12): the one it was made with, which a later change of
    ``jax_compilation_cache_dir`` does not move until the cache is reset. A local directory
    is made absolute with its links resolved; None when no cache is made or it has no path."""
    global _directory_of
    cache = _compilation_cache_module().__dict__.get("_cache") if available("persistent_cache_directory") else None
    if cache is None:
        return None
    if _directory_of[0] is not cache:  # read once per cache JAX makes: a stat per part of the path
        path = getattr(cache, "path", None)
        text = None if path is None else str(path)
        _directory_of = (cache, text if text is None or "://" in text else os.path.realpath(text))
    return _directory_of[1]


_directory_of: tuple[Any, str | None] = (None, None)


@functools.cache
def _compilation_cache_module() -> types.ModuleType:
    from jax._src import compilation_cache

    return compilation_cache


def persistent_cache_entry_bytes(depth: int = 8) -> int | None:
    """The size of the entry JAX has just decided to write to its persistent cache, read from
    the caller up (``put_executable_and_time``'s ``entry_size``; JAX 0.10-0.12); None when
    that frame is not within ``depth`` or holds no integer size."""
    size = _cache_frame_local(sys._getframe(1), "entry_size", depth)
    return size if isinstance(size, int) else None


# ------------------------------------------------------------------ JAX's modules and logs

_primitive_names: frozenset[str] = frozenset()
_primitive_names_from = 0


def primitive_names() -> frozenset[str]:
    """Names of the primitives defined in JAX's loaded modules (``jax._src.*``): what JAX
    names an eager (op-by-op) compile after. Read again when more of JAX has been imported
    since, so primitives of modules loaded late (``reduce_window_max`` in
    ``jax._src.lax.windowed_reductions``) are known too. JAX 0.10-0.12; the names found
    so far (none at first) when the capability primitives is off."""
    global _primitive_names, _primitive_names_from
    # A copy in one step: another thread may be importing (list() of a live view can see
    # the dictionary change size and raise).
    modules = [m for name, m in sys.modules.copy().items() if name.startswith("jax._src") and m is not None]
    if len(modules) == _primitive_names_from:
        return _primitive_names
    primitive = primitive_type()
    if primitive is None:
        return _primitive_names
    names = set()
    for module in modules:
        for value in list(vars(module).values()):
            if isinstance(value, primitive):
                names.add(getattr(value, "name", ""))
    _primitive_names, _primitive_names_from = frozenset(names), len(modules)
    return _primitive_names


class _CacheKeyParts(logging.Filter):
    """Hands on each part's hash as JAX logs it (a filter runs on the logging thread)."""

    def __init__(self, on_part: Callable[[Any, Any], None], pass_through: bool):
        super().__init__()
        self.on_part = on_part
        self.pass_through = pass_through  # the program itself wants JAX's debug records

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG:
            return True
        args = record.args
        if record.msg == CACHE_KEY_MESSAGE and isinstance(args, tuple) and len(args) == 2:
            self.on_part(args[0], args[1])
        return self.pass_through


def read_cache_key_log(on_part: Callable[[Any, Any], None]) -> bool:
    """Call ``on_part(part, digest)`` for each part of a persistent-cache key as JAX hashes
    it (``CACHE_KEY_LOGGER``'s DEBUG record ``CACHE_KEY_MESSAGE``; JAX 0.10-0.12), on the
    compiling thread. The logger is set to pass DEBUG records, and the filter keeps them
    from the program's own handlers unless it asked for JAX's debug logs. Call once per
    process; False (nothing installed) when the capability cache_key_log is off."""
    if not available("cache_key_log"):
        return False
    key_logger = logging.getLogger(CACHE_KEY_LOGGER)
    wanted_debug = key_logger.isEnabledFor(logging.DEBUG)
    key_logger.addFilter(_CacheKeyParts(on_part, pass_through=wanted_debug))
    if not wanted_debug:
        key_logger.setLevel(logging.DEBUG)
    return True


# ------------------------------------------------------------------ the program view


def _wrap_jax_function(
    module_name: str, attribute: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> bool:
    """Replace ``module.attribute`` by ``make(original)`` once per process; False when JAX
    has no such function."""
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return False
    original = getattr(module, attribute, None)
    if original is None or getattr(original, "__cachewatch__", False):
        return original is not None
    wrapper = make(original)
    wrapper.__cachewatch__ = True  # type: ignore[attr-defined]
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(module, attribute, wrapper)
    return True


def wrap_jaxpr_lowering(make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Replace ``jaxpr_util.maybe_dump_jaxpr_to_file(fun_name, jaxpr, ...)``, which pxla
    hands every jaxpr it lowers (and looks up through its module on every use), by
    ``make(original)``, once per process. JAX 0.10-0.12; False when JAX has no such function."""
    module_name, attribute = ATTRIBUTES["program_hooks"][:2]
    return _wrap_jax_function(module_name, attribute, make)


def wrap_backend_compile(make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Replace ``compiler.compile_or_get_cached(backend, computation, ...)``, which takes the
    lowered module and returns the executable (a persistent-cache hit included), by
    ``make(original)``, once per process. JAX 0.10-0.12; False when JAX has no such function."""
    module_name, attribute = ATTRIBUTES["program_hooks"][2:]
    return _wrap_jax_function(module_name, attribute, make)


def hlo_print_options() -> Any | None:
    """jaxlib's ``HloPrintOptions`` without metadata and with canonical names (a fresh one
    per call). JAX 0.10-0.12; None when the capability hlo_print_options is off, or turns
    off here when jaxlib refuses the options."""
    if not available("hlo_print_options"):
        return None
    try:
        from jax._src.lib import hlo

        options = hlo.HloPrintOptions()
        options.print_metadata = False
        options.canonicalize_instruction_names = True
        options.canonicalize_computations = True
        return options
    except (ImportError, AttributeError) as exc:
        turn_off("hlo_print_options", f"{type(exc).__name__}: {exc}")
        return None


@dataclasses.dataclass(frozen=True)
class LoweredModuleReader:
    """JAX's MLIR, to read a copy of a lowered module away from JAX's own context."""

    make_context: Callable[[], Any]  # a fresh MLIR context with JAX's dialects
    parse: Callable[[bytes], Any]  # bytecode to a module, in the current context
    strip_debuginfo: Callable[[Any], None]  # drops locations, in the current context


_lowered_module_reader: LoweredModuleReader | None = None


def lowered_module_reader() -> LoweredModuleReader | None:
    """JAX's MLIR context maker, module parser and strip-debuginfo pass (resolved once).
    JAX 0.10-0.12; None, and the capability mlir_context off, when jaxlib lacks them.
    Callers check mlir_strip_debuginfo and mlir_context before copying a module out."""
    global _lowered_module_reader
    if _lowered_module_reader is None:
        try:
            from jax._src.interpreters import mlir
            from jax._src.lib.mlir import ir, passmanager
        except ImportError as exc:
            turn_off("mlir_context", f"{type(exc).__name__}: {exc}")
            return None

        def strip_debuginfo(module: Any) -> None:
            passmanager.PassManager.parse("builtin.module(strip-debuginfo)").run(module.operation)

        _lowered_module_reader = LoweredModuleReader(mlir.make_ir_context, ir.Module.parse, strip_debuginfo)
    return _lowered_module_reader


def source_line_reader(is_library_file: Callable[[str], bool]) -> Callable[[Any], tuple[str, int, str] | None]:
    """A function from an equation's ``source_info`` to its innermost frame whose file is not
    a library's (file, line, function), read off JAX's traceback. Per code object the test
    is made once, per (code, offset) the line is looked up once. JAX 0.10-0.12; a reader
    that always gives None when the capability traceback_lines is off."""
    if not available("traceback_lines"):
        return lambda source_info: None
    from jax._src.lib import xla_client

    try:
        addr2line = xla_client.Traceback.code_addr2line
    except AttributeError as exc:
        turn_off("traceback_lines", f"{type(exc).__name__}: {exc}")
        return lambda source_info: None
    # Keyed by the code object's id (hashing a code object hashes its bytecode); the
    # tracebacks being read keep the code objects alive for the reader's lifetime.
    user: dict[int, bool] = {}
    lines: dict[tuple[int, int], int] = {}

    def read(source_info: Any) -> tuple[str, int, str] | None:
        traceback = getattr(source_info, "traceback", None)
        if traceback is None:
            return None
        codes, lastis = traceback.raw_frames()
        for code, lasti in zip(codes, lastis, strict=False):
            ok = user.get(id(code))
            if ok is None:
                ok = user[id(code)] = not is_library_file(code.co_filename)
            if ok:
                key = (id(code), lasti)
                line = lines.get(key)
                if line is None:
                    line = lines[key] = addr2line(code, lasti)
                return code.co_filename, line, code.co_qualname
        return None

    return read
