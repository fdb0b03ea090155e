"""The capability table: what cachewatch expects of JAX's internals (the frames it reads,
the events it listens for, the logger text it parses, the attributes it reads), each
probed once against the JAX in this process and turned off, with one warning, where it
fails."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import re
import threading
import types
import warnings
from collections.abc import Callable
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
# JAX's own entry points that call a user's function back a bounded number of times while
# transforming it (grad, jacfwd, vjp, vmap, jit through its api boundary, check_grads over
# its few directions): the module a user's frame calls into, as recorded with the frame.
TRANSFORMATION_MODULES = frozenset({"jax._src.api", "jax._src.traceback_util", "jax._src.public_test_util"})
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
    # What JAX's jit decides after a call on its Python path: whether the C++ path can serve
    # the executable from then on (None: every call goes through Python).
    "fastpath_decision": ("jax._src.pjit", "_get_fastpath_data"),
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


def capability(
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


capability("trace_frame", "the identity and signature of compiles of jits cachewatch did not wrap")(
    lambda: _frame_probe("trace_frame")
)


@capability("lowering_frame", "the signature of a compile made without a trace (foreign lowerings)")
def _lowering_frame() -> str | None:
    return _frame_probe("lowering_frame") or _attribute_probe("lowering_frame")


capability(
    "dispatch_frame",
    "telling a watched function's compile outside its call (grad's backward pass) from a plain jit",
)(lambda: _frame_probe("dispatch_frame"))
capability("transpose_frame", "naming the backward pass of jax.grad or jax.vjp taken outside any jit")(
    lambda: _frame_probe("transpose_frame")
)
capability("primitive_params", "the parameters of eager (op-by-op) compiles, and their diffs")(
    lambda: _frame_probe("primitive_params")
)


@capability("primitive_marker", "telling JAX's op-by-op compiles of eager primitives apart")
def _primitive_marker() -> str | None:
    # Not an attribute of the module: set on each function dispatch jits for a primitive.
    module_name, attribute = ATTRIBUTES["primitive_marker"]
    if not re.search(rf"\.{re.escape(attribute)}\s*=\s*True", _module_source(module_name)):
        return f"{module_name} no longer marks the functions of eager primitives with {attribute}"
    return None


@capability("compile_events", "trace, lowering and compile seconds, and compiles made without a trace")
def _compile_events() -> str | None:
    from jax._src import dispatch

    for key, constant in _JAX_EVENT_CONSTANTS.items():
        theirs = getattr(dispatch, constant, None)
        if theirs != EVENTS[key]:
            return f"jax._src.dispatch.{constant} is {theirs!r}, cachewatch listens for {EVENTS[key]!r}"
    return None


@capability("persistent_cache_events", "persistent-cache hits and misses")
def _persistent_cache_events() -> str | None:
    sources = _module_source("jax._src.compiler") + _module_source("jax._src.compilation_cache")
    missing = [
        EVENTS[key] for key in ("cache_hit", "cache_miss", "cache_saved", "cache_request") if EVENTS[key] not in sources
    ]
    return f"JAX no longer records {', '.join(missing)}" if missing else None


@capability("cache_key_log", "which part of the persistent cache key changed on a miss")
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
    capability(name, gives, public)(lambda: _attribute_probe(name))


@capability("trace_equations", "jaxpr_eqns, the equation count of each trace")
def _trace_equations() -> str | None:
    from jax._src.interpreters import partial_eval as pe

    if "tracing_eqns" not in _module_source(pe.__name__):
        return "JAX's jaxpr stack frame keeps no tracing_eqns"
    return _attribute_probe("trace_equations")


_attribute_capability(
    "primitives", "naming eager (op-by-op) compiles after their primitive", public="jax.extend.core.Primitive"
)


@capability("jaxpr_debug_info", "the source of a function known only from its jaxpr (foreign lowerings)")
def _jaxpr_debug_info() -> str | None:
    if "func_src_info" not in _module_source("jax._src.api_util") + _module_source("jax._src.core"):
        return "JAX's debug info has no func_src_info"
    return _attribute_probe("jaxpr_debug_info")


@capability("jit_cache_size", "_cache_size() on a cachewatch.jit function, as on the object jax.jit returns")
def _jit_cache_size() -> str | None:
    from jax._src import api  # JAX's own jit: after install(), jax.jit is cachewatch's

    (attribute,) = ATTRIBUTES["jit_cache_size"]
    return None if callable(getattr(api.jit(_identity), attribute, None)) else f"a jit object has no {attribute}"


@capability("transform_tracers", "naming the transformation (vmap, jvp, grad) a call is traced under")
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


def attribute_probe_each(name: str) -> str | None:
    """Each name after the module is an attribute of the module itself."""
    import importlib

    module_name, *names = ATTRIBUTES[name]
    module = importlib.import_module(module_name)
    missing = [n for n in names if not callable(getattr(module, n, None))]
    return f"{module_name} has no {', '.join(missing)}" if missing else None


@capability("program_hooks", "the program behind each compile (its shape, XLA's figures, its fingerprint)")
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


# The parameters of pjit._get_fastpath_data that the call-path reader takes by position.
FASTPATH_PARAMETERS = ("executable", "out_tree", "args_flat", "out_flat", "effects")


@capability("fastpath_decision", "which calls of a jit take JAX's Python dispatch path instead of its C++ one, and why")
def _fastpath_decision() -> str | None:
    import importlib
    import inspect

    module_name, attribute = ATTRIBUTES["fastpath_decision"]
    found = getattr(importlib.import_module(module_name), attribute, None)
    if not callable(found):
        return f"{module_name}.{attribute} is missing"
    names = tuple(inspect.signature(inspect.unwrap(found)).parameters)[: len(FASTPATH_PARAMETERS)]
    if names != FASTPATH_PARAMETERS:
        return f"{module_name}.{attribute} takes {', '.join(names)}, not {', '.join(FASTPATH_PARAMETERS)}"
    return None


@capability("clear_caches_hook", "telling a cache cleared by jax.clear_caches() from a retrace with nothing cleared")
def _clear_caches_hook() -> str | None:
    return attribute_probe_each("clear_caches_hook")


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


@capability("trace_context", "new_context: naming the configuration option or context manager that changed")
def _trace_context() -> str | None:
    missing = attribute_probe_each("trace_context")
    if missing:
        return missing
    from jax._src import config

    if len(config.trace_context_names()) != len(config.trace_context()):
        return "JAX's trace context and its names differ in length"
    return None
