"""Compiles of jit objects cachewatch did not wrap.

JAX's own jitted helpers (``jnp.mean``, ``jax.nn.relu``, ``jax.random.normal``) are jit
objects made when JAX is imported; a library or a script may have made others before
``cachewatch.install()``; and eager code runs one small jit per primitive. JAX reports
each of their compiles through ``jax.monitoring`` with nothing but a name. The listener
reads the rest off JAX's own frames on the stack at that moment:

- at the end of a trace, ``_trace_for_jit``: the function, its jit options and the call's
  arguments, which give the same signature (statics included) a wrapped function gets;
- at the end of a lowering, ``_cached_lowering_to_hlo``: the abstract arguments and
  JAX's names for them, for a compile that came without a trace.

Where neither frame can be read (a JAX version whose internals differ), the compile is
still recorded under the name JAX gave it. Nothing here runs on a cache hit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import threading
import types
import weakref
from collections import OrderedDict
from typing import Any

import jax

from . import causes, current, devices, opbyop
from . import signature as sigmod
from .events import Cause, CompileEvent, FunctionInfo, new_event_id
from .identity import call_site, code_file, describe_function, is_library_file, user_function, user_function_in

# JAX's frames this module reads; if a JAX release renames them, compiles are still
# recorded, with less detail.
TRACE_FRAME = "_trace_for_jit"
LOWER_FRAME = "_cached_lowering_to_hlo"
# A jitted function's transpose rule: a compile below it is the backward pass of grad or
# vjp taken outside any jit, which JAX runs after the function's own call has returned.
TRANSPOSE_FRAMES = ("_pjit_transpose_fancy", "_pjit_transpose")
# JAX's jit dispatch on a cache miss: its ``fun`` is the function jit wraps, marked with
# HOOK_ATTR when it is a watched one. A compile with no such frame above it is made
# outside the watched function's own call.
DISPATCH_FRAME = "cache_miss"
HOOK_ATTR = "__cachewatch_hook__"
_OUTSIDE_CALL_DEPTH = 128
BACKWARD_PASS = "for its backward pass (jax.grad or jax.vjp taken outside any jit, which compiles the transpose)"
OUTSIDE_CALL = "outside its own call (jax.checkpoint, jax.hessian or another transformation evaluated outside any jit)"
_JAX_SRC = os.path.dirname(os.path.abspath(jax.__file__)) + os.sep

# Module of functions known only by the name JAX compiled them under.
UNATTRIBUTED_MODULE = "<unattributed>"


@dataclasses.dataclass(slots=True)
class Target:
    """What a foreign compile is of: the function, which jit object, and the signature."""

    info: FunctionInfo
    serial: int
    signature: sigmod.Signature | None
    primitive: str | None = None
    # Read off JAX's frames: the call site is only known while they are on the stack.
    call_site: str | None = None
    # Compiled without a trace of its own call: traced inside a transformation (grad, vmap,
    # a library's lifted transform) and run outside any jit.
    lowered_only: bool = False
    # A watched function compiled outside its own call (its backward pass, say): how.
    outside_call: str = ""
    # The lowered program's inputs, outputs and equations: the same program at other
    # shapes has the same counts (a forward, a remat's recomputation, a backward pass differ).
    program: tuple[int, int, int] | None = None


def find_frame(frame: Any, code_name: str, depth: int = 12) -> Any:
    """The nearest frame of JAX's function ``code_name`` above ``frame``, if within ``depth``."""
    while frame is not None and depth > 0:
        code = frame.f_code
        if code.co_name == code_name and code.co_filename.startswith(_JAX_SRC):
            return frame
        frame = frame.f_back
        depth -= 1
    return None


# --------------------------------------------------------------- jit objects and functions

# A foreign jit object is known by its PjitInfo (one per jax.jit(...) call). Entries hold
# it, so its id is not reused while remembered; the table is bounded for jit-in-a-loop.
_MAX_OBJECTS = 4096
_objects: OrderedDict[int, tuple[Any, int, sigmod.ParamLayout | None]] = OrderedDict()
_objects_lock = threading.Lock()
_serials = iter(range(1 << 40, 1 << 62))  # apart from the serials of wrapped functions

_described: "weakref.WeakKeyDictionary[Any, FunctionInfo]" = weakref.WeakKeyDictionary()


def _jit_object(ji: Any, fun: Any) -> tuple[int, sigmod.ParamLayout | None]:
    key = id(ji)
    with _objects_lock:
        found = _objects.get(key)
        if found is not None and found[0] is ji:
            _objects.move_to_end(key)
            return found[1], found[2]
        try:
            layout = sigmod.ParamLayout.from_function(
                fun, getattr(ji, "static_argnums", ()), getattr(ji, "static_argnames", ())
            )
        except Exception:
            layout = None
        serial = next(_serials)
        _objects[key] = (ji, serial, layout)
        while len(_objects) > _MAX_OBJECTS:
            _objects.popitem(last=False)
        return serial, layout


def _describe(fun: Any) -> FunctionInfo:
    try:
        found = _described.get(fun)
    except TypeError:
        return describe_function(fun)
    if found is None:
        found = describe_function(fun)
        try:
            _described[fun] = found
        except TypeError:
            pass
    return found


def _primitive_params(fun: Any) -> dict[str, Any]:
    # JAX's prim_fun closes over the primitive and its parameters (jax._src.dispatch).
    for cell in getattr(fun, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return {}


def from_trace(frame: Any, name: str) -> Target | None:
    """The target of a trace that just ended, read off JAX's ``_trace_for_jit`` frame."""
    found = find_frame(frame, TRACE_FRAME)
    if found is None:
        return None
    local = found.f_locals
    fun, ji = local.get("fun"), local.get("ji")
    args, kwargs = local.get("args") or (), local.get("kwargs") or {}
    site = call_site(2)
    if getattr(fun, "_apply_primitive", False):
        return Target(
            opbyop.function_info(name),
            0,
            sigmod.build_operands(args, _primitive_params(fun)),
            primitive=name,
            call_site=site,
        )
    serial, layout = _jit_object(ji, fun)
    described = fun
    if is_library_file(code_file(user_function(fun)) or ""):
        # A library's own jit around the user's function passed as an argument (eqx.filter_jit).
        passed = user_function_in((args, kwargs), getattr(fun, "__name__", name))
        if passed is not None:
            described = passed
    signature = sigmod.build(layout, args, kwargs) if layout is not None else None
    return Target(_describe(described), serial, signature, call_site=site)


def from_lowering(frame: Any, name: str) -> Target:
    """The target of a compile that came without a trace, from JAX's lowering frame."""
    found = find_frame(frame, LOWER_FRAME)
    site = call_site(2)
    if found is None:
        return Target(_by_name(strip_jit(name), None), 0, None, call_site=site, lowered_only=True)
    signature, jaxpr, source = _read_lowering(found)
    inner = strip_jit(name)
    if inner in opbyop.primitive_names():
        return Target(opbyop.function_info(inner), 0, signature, primitive=inner, call_site=site)
    return Target(_by_source(inner, source), 0, signature, call_site=site, lowered_only=True)


def _read_lowering(found: Any) -> tuple[sigmod.Signature, Any, str | None]:
    """From JAX's lowering frame: the arguments' signature, the jaxpr, and where the
    function it came from is defined (``name at file:line``)."""
    local = found.f_locals
    avals = tuple(local.get("in_avals") or ())
    skip = int(local.get("num_const_args") or 0)
    jaxpr = getattr(local.get("closed_jaxpr"), "jaxpr", None)
    debug = getattr(jaxpr, "_debug_info", None) or getattr(jaxpr, "debug_info", None)
    arg_names = tuple(getattr(debug, "arg_names", None) or ())
    return sigmod.from_avals(arg_names, avals[skip:]), jaxpr, getattr(debug, "func_src_info", None)


def outside_call(frame: Any) -> str | None:
    """How JAX comes to lower a watched function outside the function's own call (its
    backward pass, or a transformation evaluated outside any jit); None within the call."""
    found = frame
    while (found := find_frame(found, DISPATCH_FRAME, _OUTSIDE_CALL_DEPTH)) is not None:
        if getattr(found.f_locals.get("fun"), HOOK_ATTR, False):
            return None
        found = found.f_back
    backward = any(find_frame(frame, name, _OUTSIDE_CALL_DEPTH) is not None for name in TRANSPOSE_FRAMES)
    return BACKWARD_PASS if backward else OUTSIDE_CALL


def from_outside_call(frame: Any, name: str, how: str, watched: list[FunctionInfo]) -> Target | None:
    """The target of a compile made outside a watched function's call: of the ``watched``
    functions with this name, the one defined where JAX's debug information says (the
    only one, when it says nothing). None when it names none of them: a plain jit that
    shares a watched function's name."""
    found = find_frame(frame, LOWER_FRAME)
    signature, jaxpr, source = _read_lowering(found) if found is not None else (None, None, None)
    where = _source_location(source)
    matches = [info for info in watched if (info.file, info.line) == where]
    if not matches and not where[0] and len(watched) == 1:
        matches = watched
    if not matches:
        return None
    program = (len(jaxpr.invars), len(jaxpr.outvars), len(jaxpr.eqns)) if jaxpr is not None else None
    return Target(
        matches[-1], 0, signature, call_site=call_site(2), lowered_only=True, outside_call=how, program=program
    )


def from_name(name: str) -> Target:
    return Target(_by_name(strip_jit(name), None), 0, None, call_site=call_site(2), lowered_only=True)


def strip_jit(module_name: str) -> str:
    if module_name.startswith("jit(") and module_name.endswith(")"):
        return module_name[4:-1]
    return module_name


def _by_source(name: str, source_info: str | None) -> FunctionInfo:
    """The function JAX's debug info points at (``name at file:line``), found among the loaded
    modules so it is the same function, with the same hash, as when it is traced."""
    file, _ = _source_location(source_info)
    key = (file, name)
    found = _by_source_cache.get(key)
    if found is None:
        function = _find_function(file, name) if file else None
        found = _describe(function) if function is not None else _by_name(name, source_info)
        _by_source_cache[key] = found
    return found


_by_source_cache: dict[tuple[str, str], FunctionInfo] = {}


def _find_function(file: str, name: str) -> Any:
    module = next((m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == file), None)
    if module is None:
        return None
    for value in list(vars(module).values()):
        if isinstance(value, types.ModuleType):
            continue  # a module's __getattr__ may warn or import
        try:
            # A module-level jit keeps the function in __wrapped__; jnp's ufunc objects one level deeper.
            for candidate in (value, getattr(value, "__wrapped__", None), getattr(value, "_func", None)):
                candidate = getattr(candidate, "__wrapped__", candidate)
                code = getattr(candidate, "__code__", None)
                if code is not None and code.co_name == name and code.co_filename == file:
                    return candidate
        except Exception:
            continue
    return None


def _source_location(source_info: str | None) -> tuple[str, int]:
    if not source_info or " at " not in source_info:
        return "", 0
    where = source_info.rsplit(" at ", 1)[1]
    file, _, number = where.rpartition(":")
    if not file:
        return where, 0
    return file, int(number) if number.isdigit() else 0


def _by_name(name: str, source_info: str | None) -> FunctionInfo:
    """A function known by name (and, from JAX's debug info, ``name at file:line``)."""
    file, line = _source_location(source_info)
    # The hash leaves the directory out, like a wrapped function's: the same code on
    # two hosts is one function.
    digest = hashlib.sha256(f"{UNATTRIBUTED_MODULE}:{name}:{os.path.basename(file)}:{line}".encode())
    return FunctionInfo(
        function_hash=digest.hexdigest()[:20],
        name=name,
        qualname=name,
        module=UNATTRIBUTED_MODULE,
        file=file,
        line=line,
    )


# ------------------------------------------------------------------------- events


def to_event(
    target: Target,
    kind: str,
    timestamp: float,
    trace_seconds: float | None,
    lower_seconds: float | None,
    compile_seconds: float | None,
    persistent_cache_hit: bool | None,
    cache_time_saved: float | None,
    thread: str,
    jaxpr_eqns: int | None = None,
    cache_key: dict[str, str] | None = None,
) -> CompileEvent:
    info = target.info
    device = devices.default_device()
    sig = target.signature
    if target.primitive is not None:
        cause, explanation, diff = _explain_primitive(target)
    elif target.lowered_only:
        cause, explanation, diff = _explain_lowered(target)
    elif sig is None:
        cause, explanation, diff = (
            Cause.UNKNOWN,
            (f"JAX compiled `{info.name}` again; its arguments could not be read, so what changed is unknown."),
            (),
        )
    else:
        verdict = causes.explain_trace(
            info.function_hash,
            target.serial,
            info.name,
            sig,
            succeeded=True,
            compiled=True,
            device=device,
            call_site=target.call_site,
        )
        cause, explanation, diff = verdict.cause, verdict.explanation, verdict.diff
    return CompileEvent(
        event_id=new_event_id(),
        function=info,
        run_id=current.run_id(),
        timestamp=timestamp,
        kind=kind,
        cause=cause,
        explanation=explanation,
        diff=tuple(diff),
        signature=sig.as_json() if sig is not None else (),
        signature_hash=sig.stable_hash() if sig is not None else "",
        compiled=True,
        nested=False,
        trace_seconds=trace_seconds,
        lower_seconds=lower_seconds,
        compile_seconds=compile_seconds,
        persistent_cache_hit=persistent_cache_hit,
        cache_time_saved_seconds=cache_time_saved,
        device=device,
        backend=devices.backend(),
        call_site=target.call_site,
        jaxpr_eqns=jaxpr_eqns,
        thread=thread,
        warmup=current.in_warmup(timestamp),
        cache_key=cache_key,
    )


# Primitives whose name says little to a user.
_PRIMITIVE_NOTES = {
    "stage": " (JAX's own step that puts a Python or NumPy value on the device)",
    "device_put": " (moving a value to a device)",
}


def _explain_primitive(target: Target) -> tuple[str, str, tuple[dict[str, Any], ...]]:
    primitive = target.primitive or ""
    info = target.info
    sig = target.signature
    where = f" at {target.call_site}" if target.call_site else ""
    if sig is None:
        first = opbyop.first_compile(primitive)
        if first:
            return (
                Cause.FIRST_CALL,
                (f"JAX compiled the primitive `{primitive}` op by op, outside any jit, for the first time{where}."),
                (),
            )
        return (
            Cause.UNKNOWN,
            (
                f"JAX compiled the primitive `{primitive}` op by op again{where}; JAX did not expose "
                "its operands here, so what changed is unknown."
            ),
            (),
        )
    operands = ", ".join(leaf.describe() for leaf in sig.leaves if not leaf.static) or "no operands"
    verdict = causes.explain_trace(
        info.function_hash, 0, primitive, sig, succeeded=True, compiled=True, device=None, call_site=target.call_site
    )
    note = _PRIMITIVE_NOTES.get(primitive, "")
    if verdict.cause == Cause.FIRST_CALL:
        opbyop.first_compile(primitive)
        return (
            Cause.FIRST_CALL,
            (
                f"JAX compiled the primitive `{primitive}`{note} op by op, outside any jit, for "
                f"the first time{where} ({operands})."
            ),
            (),
        )
    if not verdict.diff:
        return (
            verdict.cause,
            (
                f"JAX compiled the primitive `{primitive}` op by op again{where} ({operands}) "
                "with operands and parameters it had compiled before: its cache was cleared."
            ),
            (),
        )
    change = verdict.diff[0]
    if change.get("change") == "static":
        what = f"its parameter `{change['path']}` changed: {change['before']} -> {change['after']}"
    else:
        what = (
            f"operand {change['path']} changed {change['change'].replace('_', ' ')}: "
            f"{change['before']} -> {change['after']}"
        )
    more = f" ({len(verdict.diff) - 1} more difference(s) in the diff)" if len(verdict.diff) > 1 else ""
    return (
        verdict.cause,
        (
            f"JAX compiled the primitive `{primitive}`{note} op by op again, outside any jit{where}: "
            f"{what}{more}. Eager code compiles each primitive once per new shape; move it "
            "inside a jitted function or keep its shapes fixed."
        ),
        verdict.diff,
    )


# Signatures of compiles without a trace, per function: JAX names their arguments
# differently from a traced call, so they are compared only with each other.
_lowered: dict[tuple[str, str, tuple[int, int, int] | None], list[sigmod.Signature]] = {}
_lowered_lock = threading.Lock()


def _explain_lowered(target: Target) -> tuple[str, str, tuple[dict[str, Any], ...]]:
    info, sig = target.info, target.signature
    # A compile outside the function's call is compared only with the function's other
    # compiles of the same program made the same way: a backward pass, or a remat's
    # recomputation, is another program than the forward one, with other arguments.
    key = (info.function_hash, target.outside_call, target.program if target.outside_call else None)
    with _lowered_lock:
        earlier = list(_lowered.get(key, ()))
        if sig is not None:
            _lowered.setdefault(key, []).append(sig)
            del _lowered[key][:-64]
    if target.outside_call:
        inside = target.outside_call
        if not earlier:
            return Cause.FIRST_CALL, f"First compile of `{info.name}` {inside} in this run.", ()
    else:
        inside = "traced inside a transformation (grad, vmap, a library's lifted transform) and run outside any jit"
    if not earlier:
        if not causes.seen(info.function_hash):
            causes.note(info.function_hash)
            return Cause.FIRST_CALL, f"First compile of `{info.name}` in this run, {inside}.", ()
        return (
            Cause.UNKNOWN,
            (
                f"`{info.name}` was compiled again, {inside}; JAX reports no call of its own for it, "
                "so what changed is unknown."
            ),
            (),
        )
    if sig is None:
        return Cause.UNKNOWN, f"`{info.name}` was compiled again, {inside}; its arguments could not be read.", ()
    _, entries = sigmod.closest(earlier, sig)
    if not entries:
        return (
            Cause.UNKNOWN,
            (
                f"`{info.name}` was compiled again, {inside}, with argument types it had compiled "
                "before: its jaxpr or a static value differed."
            ),
            (),
        )
    first = entries[0]
    return (
        first["cause"],
        (
            f"`{info.name}` was compiled again, {inside}: argument {first['path']} changed "
            f"{first['change'].replace('_', ' ')}: {first['before']} -> {first['after']}."
        ),
        tuple(entries),
    )


def reset() -> None:
    """Forget the compiles seen without a trace (a new run)."""
    with _lowered_lock:
        _lowered.clear()


causes.on_reset(reset)
causes.on_reset(opbyop.reset)
