"""The seam's typed accessors: JAX's frames walked and their locals read (capture holds a
frame only as an opaque starting point), JAX's modules and logs, and the hooks of the
program view. Each says which JAX versions it serves and what it gives when the JAX in use
lacks the thing, and asks the capability table first."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

from . import capabilities


def primitive_type() -> type | None:
    """JAX's Primitive class (public: jax.extend.core.Primitive), or None when it is off."""
    if not capabilities.available("primitives"):
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
    if not capabilities.available("primitive_marker"):
        return False
    return bool(getattr(fun, capabilities.ATTRIBUTES["primitive_marker"][1], False))


def key_bits(key: Any) -> Any:
    """A typed PRNG key array's raw bits (a uint32 array NumPy can read), read without
    running an operation (jax.random.key_data would trace or compile one); None where this
    JAX keeps them elsewhere."""
    return getattr(key, "_base_array", None)


def unspecified_sharding(sharding: Any) -> bool:
    """Whether a sharding from JAX's lowering frame is the one of an uncommitted argument."""
    return type(sharding).__name__ == capabilities.ATTRIBUTES["lowering_frame"][1]


def traced_equations() -> int | None:
    """Equations of the jaxpr JAX is building on this thread (dead ones excluded): what
    lowering will see. None outside a trace, or when the capability is off."""
    if not capabilities.available("trace_equations"):
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
    if not capabilities.available("jaxpr_debug_info"):
        return None
    return getattr(jaxpr, "_debug_info", None) or getattr(jaxpr, "debug_info", None)


def transform_of(tracer: Any) -> str:
    """What a call is traced under (``vmap``, ``jvp``, ``linearize (grad)``), from its tracer."""
    name = type(tracer).__name__
    if capabilities.available("transform_tracers") and name in capabilities.TRACER_CLASSES:
        return capabilities.TRACER_CLASSES[name][1]
    return name


def jit_cache_size(jitted: Any) -> Callable[[], int] | None:
    """The jit object's cache size reader, or None when JAX has none."""
    return getattr(jitted, "_cache_size", None) if capabilities.available("jit_cache_size") else None


def distributed_initialized() -> bool:
    """Whether jax.distributed is initialised in this process."""
    if not capabilities.available("distributed_state"):
        return False
    import jax

    return bool(jax.distributed.is_initialized())


def reset_persistent_cache() -> None:
    """Make JAX decide again whether the persistent cache is on (after its directory changed)."""
    if capabilities.available("persistent_cache_reset"):
        from jax.experimental.compilation_cache import compilation_cache

        compilation_cache.reset_cache()


_context_names: tuple[str, ...] = ()


def trace_context() -> tuple[Any, ...] | None:
    """The values JAX keys its tracing caches on besides the arguments (a mesh, the matmul
    precision, the promotion modes, x64, the default device, ...), or None when off."""
    if not capabilities.available("trace_context"):
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
    """The nearest frame of the JAX function ``capabilities.FRAMES[capability]`` names, ``start`` included,
    within ``depth`` frames; None when there is none or the capability is off. JAX 0.10-0.12."""
    if not capabilities.available(capability):
        return None
    names = capabilities.FRAMES[capability][1]
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
        capabilities.turn_off("lowering_frame", f"its shardings could not be read: {type(exc).__name__}: {exc}")
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
    if not capabilities.available("primitive_params"):
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
    cache = (
        _compilation_cache_module().__dict__.get("_cache")
        if capabilities.available("persistent_cache_directory")
        else None
    )
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
        if record.msg == capabilities.CACHE_KEY_MESSAGE and isinstance(args, tuple) and len(args) == 2:
            self.on_part(args[0], args[1])
        return self.pass_through


def read_cache_key_log(on_part: Callable[[Any, Any], None]) -> bool:
    """Call ``on_part(part, digest)`` for each part of a persistent-cache key as JAX hashes
    it (``capabilities.CACHE_KEY_LOGGER``'s DEBUG record ``capabilities.CACHE_KEY_MESSAGE``; JAX 0.10-0.12), on the
    compiling thread. The logger is set to pass DEBUG records, and the filter keeps them
    from the program's own handlers unless it asked for JAX's debug logs. Call once per
    process; False (nothing installed) when the capability cache_key_log is off."""
    if not capabilities.available("cache_key_log"):
        return False
    key_logger = logging.getLogger(capabilities.CACHE_KEY_LOGGER)
    wanted_debug = key_logger.isEnabledFor(logging.DEBUG)
    key_logger.addFilter(_CacheKeyParts(on_part, pass_through=wanted_debug))
    if not wanted_debug:
        key_logger.setLevel(logging.DEBUG)
    return True


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
    module_name, attribute = capabilities.ATTRIBUTES["program_hooks"][:2]
    return _wrap_jax_function(module_name, attribute, make)


def wrap_backend_compile(make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Replace ``compiler.compile_or_get_cached(backend, computation, ...)``, which takes the
    lowered module and returns the executable (a persistent-cache hit included), by
    ``make(original)``, once per process. JAX 0.10-0.12; False when JAX has no such function."""
    module_name, attribute = capabilities.ATTRIBUTES["program_hooks"][2:]
    return _wrap_jax_function(module_name, attribute, make)


def wrap_fastpath_decision(make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Replace ``pjit._get_fastpath_data(executable, out_tree, args_flat, out_flat, effects,
    ...)``, which a jit's Python path calls after each call it serves (a compile, or a call
    the C++ path cannot serve) and looks up through its module each time, by
    ``make(original)``, once per process. JAX 0.10-0.12; False when the capability
    fastpath_decision is off."""
    if not capabilities.available("fastpath_decision"):
        return False
    module_name, attribute = capabilities.ATTRIBUTES["fastpath_decision"]
    return _wrap_jax_function(module_name, attribute, make)


def slow_path_reason(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Why ``pjit._get_fastpath_data(*args, **kwargs)`` gave no fast path, read from its
    arguments as it reads them (one of ``events.SLOW_REASONS``); None where the call was
    no dispatch at all (traced into another jit's program). JAX 0.10-0.12."""
    named = dict(zip(capabilities.FASTPATH_PARAMETERS, args, strict=False)) | kwargs
    executable = named.get("executable")
    if executable is None:
        if _tracing_a_program(named.get("args_flat") or ()):
            return None
        # No executable of this jit ran: its call was traced under a transformation (an
        # eager jax.grad or jax.vmap of it), which binds what the transformation made.
        return "under_transformation"
    unsafe_call = getattr(executable, "unsafe_call", None)
    if getattr(unsafe_call, "ordered_effects", None):
        return "ordered_effects"
    if getattr(unsafe_call, "has_unordered_effects", False):
        return "unordered_effects"
    if any("Ref" in type(effect).__name__ for effect in named.get("effects") or ()):
        return "ref_effects"
    outputs = named.get("out_flat") or ()
    if executable is not None and not all(type(x).__name__ == "ArrayImpl" for x in outputs):
        return "non_array_outputs"
    if len(args) > 6 and getattr(args[6], "fdo_profile", None) is not None:
        return "profile_rebuild"
    return "other"


def hlo_print_options() -> Any | None:
    """jaxlib's ``HloPrintOptions`` without metadata and with canonical names (a fresh one
    per call). JAX 0.10-0.12; None when the capability hlo_print_options is off, or turns
    off here when jaxlib refuses the options."""
    if not capabilities.available("hlo_print_options"):
        return None
    try:
        from jax._src.lib import hlo

        options = hlo.HloPrintOptions()
        options.print_metadata = False
        options.canonicalize_instruction_names = True
        options.canonicalize_computations = True
        return options
    except (ImportError, AttributeError) as exc:
        capabilities.turn_off("hlo_print_options", f"{type(exc).__name__}: {exc}")
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
            capabilities.turn_off("mlir_context", f"{type(exc).__name__}: {exc}")
            return None

        def strip_debuginfo(module: Any) -> None:
            passmanager.PassManager.parse("builtin.module(strip-debuginfo)").run(module.operation)

        _lowered_module_reader = LoweredModuleReader(mlir.make_ir_context, ir.Module.parse, strip_debuginfo)
    return _lowered_module_reader


def source_stack_reader(kept: Callable[[str], bool], depth: int) -> Callable[[Any], tuple[tuple[str, int, str], ...]]:
    """A function from an equation's ``source_info`` to the frames of JAX's traceback whose
    file ``kept`` keeps (the user's and libraries' code, not JAX's), the ``depth``
    innermost of them, outermost first, each (file, line, function). JAX 0.10-0.12; a
    reader that always gives () when the capability traceback_lines is off."""
    if not capabilities.available("traceback_lines"):
        return lambda source_info: ()
    from jax._src.lib import xla_client

    addr2line = getattr(xla_client.Traceback, "code_addr2line", None)
    if addr2line is None:
        return lambda source_info: ()
    keep: dict[int, bool] = {}
    lines: dict[tuple[int, int], int] = {}

    def read(source_info: Any) -> tuple[tuple[str, int, str], ...]:
        traceback = getattr(source_info, "traceback", None)
        if traceback is None:
            return ()
        codes, lastis = traceback.raw_frames()
        found = []
        for code, lasti in zip(codes, lastis, strict=False):
            ok = keep.get(id(code))
            if ok is None:
                ok = keep[id(code)] = kept(code.co_filename)
            if ok:
                key = (id(code), lasti)
                line = lines.get(key)
                if line is None:
                    line = lines[key] = addr2line(code, lasti)
                found.append((code.co_filename, line, code.co_qualname))
                if len(found) == depth:
                    break
        return tuple(reversed(found))

    return read


def source_line_reader(is_library_file: Callable[[str], bool]) -> Callable[[Any], tuple[str, int, str] | None]:
    """A function from an equation's ``source_info`` to its innermost frame whose file is not
    a library's (file, line, function), read off JAX's traceback. Per code object the test
    is made once, per (code, offset) the line is looked up once. JAX 0.10-0.12; a reader
    that always gives None when the capability traceback_lines is off."""
    if not capabilities.available("traceback_lines"):
        return lambda source_info: None
    from jax._src.lib import xla_client

    try:
        addr2line = xla_client.Traceback.code_addr2line
    except AttributeError as exc:
        capabilities.turn_off("traceback_lines", f"{type(exc).__name__}: {exc}")
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


def _tracing_a_program(values: Any) -> bool:
    """Whether a call is made while a jit traces its program (an outer jit, or a
    transformation inside one): a trace of its arguments, or the current one, is JAX's
    jaxpr-building trace or stands on one. JAX 0.10-0.12 (traces know their parent)."""
    try:
        from jax._src import core

        traces = [getattr(x, "_trace", None) for x in values]
        traces.append(getattr(getattr(core, "trace_ctx", None), "trace", None))
        for trace in traces:
            for _ in range(16):  # transformations nest a few deep
                if trace is None:
                    break
                if type(trace).__name__ == "DynamicJaxprTrace":
                    return True
                trace = getattr(trace, "parent_trace", None)
    except Exception:  # a JAX whose traces read otherwise: told as before
        return False
    return False
