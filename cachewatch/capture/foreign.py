"""Compiles of jit objects cachewatch did not wrap.

JAX's own jitted helpers (``jnp.mean``, ``jax.nn.relu``, ``jax.random.normal``) are jit
objects made when JAX is imported; a library or a script may have made others before
``cachewatch.install()``; and eager code runs one small jit per primitive. JAX reports
each of their compiles through ``jax.monitoring`` with nothing but a name. The listener
reads the rest off JAX's own frames on the stack at that moment, through the seam
(``core/jaxcompat.py``, which alone walks them and reads their locals):

- at the end of a trace, ``_trace_for_jit``: the function, its jit options and the call's
  arguments, which give the same signature (statics included) a wrapped function gets;
- at the end of a lowering, ``_cached_lowering_to_hlo``: the abstract arguments and
  JAX's names for them, for a compile that came without a trace.

Where neither frame can be read (a JAX version whose internals differ), the compile is
still recorded under the name JAX gave it. Nothing here runs on a cache hit.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import threading
import types
import weakref
from collections import OrderedDict
from typing import Any

from ..core import _guard, jaxcompat
from ..core.events import UNATTRIBUTED_MODULE, Cause, CompileEvent, FunctionInfo, describe_array
from ..explain import causes
from ..explain import placement as placemod
from ..explain import signature as sigmod
from . import building, devices, foreign_causes, opbyop
from .foreign_causes import BACKWARD_PASS, OUTSIDE_CALL, Target
from .identity import (
    call_site,
    code_file,
    describe_function,
    function_info,
    is_library_file,
    user_function,
    user_function_closed_over,
    user_function_in,
)

# JAX's frames this module asks the seam about, by the capability that checks them
# (core/jaxcompat.py); where a JAX release renames one, compiles are still recorded, with
# less detail:
# - the end of a trace for jit (the function, its jit options and the call's arguments),
# - the lowering of a jaxpr (abstract arguments, the jaxpr and its debug information),
# - a jitted function's transpose rule: a compile below it is the backward pass of grad
#   or vjp taken outside any jit, which JAX runs after the function's own call returned,
# - JAX's jit dispatch on a cache miss: its ``fun`` is the function jit wraps, marked with
#   HOOK_ATTR when it is a watched one. A compile with no such frame above it is made
#   outside the watched function's own call.
LOWER_FRAME = "lowering_frame"
TRANSPOSE_FRAME = "transpose_frame"
DISPATCH_FRAME = "dispatch_frame"
HOOK_ATTR = "__cachewatch_hook__"
_OUTSIDE_CALL_DEPTH = 128

# Module of functions known only by the name JAX compiled them under.


@_guard.guarded(where="foreign.layout")
def _layout_of(fun: Any, ji: Any) -> sigmod.ParamLayout | None:
    try:
        return sigmod.ParamLayout.from_function(fun, *jaxcompat.jit_static_arguments(ji))
    except (TypeError, ValueError):  # no Python signature to read (a builtin, a C callable)
        return None


# --------------------------------------------------------------- jit objects and functions

# A foreign jit object is known by its PjitInfo (one per jax.jit(...) call). Entries hold
# it, so its id is not reused while remembered; the table is bounded for jit-in-a-loop.
_MAX_OBJECTS = 4096
_objects: OrderedDict[int, tuple[Any, int, sigmod.ParamLayout | None]] = OrderedDict()
_objects_lock = threading.Lock()
_serials = iter(range(1 << 40, 1 << 62))  # apart from the serials of wrapped functions

_described: weakref.WeakKeyDictionary[Any, FunctionInfo] = weakref.WeakKeyDictionary()


def _jit_object(ji: Any, fun: Any) -> tuple[int, sigmod.ParamLayout | None]:
    key = id(ji)
    with _objects_lock:
        found = _objects.get(key)
        if found is not None and found[0] is ji:
            _objects.move_to_end(key)
            return found[1], found[2]
        layout = _layout_of(fun, ji)
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
        with contextlib.suppress(TypeError):
            _described[fun] = found
    return found


def from_trace(frame: Any, name: str) -> Target | None:
    """The target of a trace that just ended, read off JAX's ``_trace_for_jit`` frame."""
    trace = jaxcompat.jit_trace(frame)
    if trace is None:
        return None
    fun, ji, args, kwargs = trace.fun, trace.jit_info, trace.args, trace.kwargs
    site = call_site(2)
    if jaxcompat.is_eager_primitive(fun):
        return Target(
            opbyop.function_info(name),
            0,
            sigmod.build_operands(args, jaxcompat.primitive_params(fun)),
            primitive=name,
            call_site=site,
        )
    serial, layout = _jit_object(ji, fun)
    described = fun
    if is_library_file(code_file(user_function(fun)) or ""):
        # A library's own jit around the user's function passed as an argument (eqx.filter_jit).
        passed = user_function_in((args, kwargs), getattr(fun, "__name__", name))
        if passed is None:
            # A library's function closing over the user's (jax.pmap's inner jit).
            passed = user_function_closed_over(user_function(fun))
        if passed is not None:
            described = passed
    signature = sigmod.build(layout, args, kwargs) if layout is not None else None
    info = _describe(described)
    placement: tuple = ()
    if signature is not None and layout is not None:
        placement = placemod.placement(layout, args, kwargs)
        foreign_causes.note_traced_placement(info.function_hash, signature, placement)
    return Target(info, serial, signature, call_site=site, placement=placement)


def from_lowering(frame: Any, name: str) -> Target:
    """The target of a compile that came without a trace, from JAX's lowering frame."""
    lowering = jaxcompat.jit_lowering(frame)
    site = call_site(2)
    if lowering is None:
        return Target(_by_name(strip_jit(name), None), 0, None, call_site=site, lowered_only=True)
    signature, jaxpr, source = _read_lowering(lowering)
    inner = strip_jit(name)
    program = program_key(jaxpr)
    placement = _lowered_placement(lowering, signature)
    if inner in opbyop.primitive_names():
        # A primitive's program lowered without a trace of its own: built by a transformation
        # taken outside any jit (linearize, partial_eval), another program than the primitive
        # run op by op, though of the same name and argument types.
        return Target(
            opbyop.function_info(inner),
            0,
            signature,
            primitive=inner,
            call_site=site,
            lowered_only=True,
            program=program,
            outputs=output_types(jaxpr),
            jaxpr_ref=_weak(jaxpr),
        )
    return Target(
        _by_source(inner, source),
        0,
        signature,
        call_site=site,
        lowered_only=True,
        program=program,
        outputs=output_types(jaxpr),
        jaxpr_ref=_weak(jaxpr),
        placement=placement,
    )


def _lowered_placement(lowering: jaxcompat.JitLowering, signature: sigmod.Signature) -> tuple:
    """Committed or not, per argument, from the shardings JAX lowers with: an uncommitted
    argument's is left unspecified, a committed one's is its sharding."""
    leaves = signature.leaves
    where = jaxcompat.lowered_argument_devices(lowering, len(leaves))
    if where is None:  # a JAX whose lowering frame holds other objects (the capability is off now)
        return ()
    return tuple(
        placemod.Placed(leaf.path, False, "") if on is None else placemod.Placed(leaf.path, True, ",".join(on))
        for leaf, on in zip(leaves, where, strict=False)
    )


def _weak(value: Any) -> Any:
    try:
        return weakref.ref(value)
    except TypeError:
        return None


def program_key(jaxpr: Any) -> tuple | None:
    """What tells one lowered program from another of the same name, at any shapes: its
    inputs, outputs, and the primitives of its equations in order (a linearized `tanh`
    is other equations than `tanh`; parameters are left out, as many are shapes)."""
    if jaxpr is None:
        return None
    try:
        primitives = tuple(str(eqn.primitive) for eqn in jaxpr.eqns)
        return (len(jaxpr.invars), len(jaxpr.outvars), hash(primitives))
    except Exception as exc:  # the lowering frame's jaxpr is another object on this JAX
        jaxcompat.turn_off(LOWER_FRAME, f"its jaxpr could not be read: {type(exc).__name__}: {exc}")
        return None


def output_types(jaxpr: Any) -> tuple[str, ...] | None:
    """The types a lowered program returns, as signatures describe arrays; None unread."""
    if jaxpr is None:
        return None
    try:
        avals = [v.aval for v in jaxpr.outvars]
        return tuple(describe_array(a.dtype, a.shape, bool(getattr(a, "weak_type", False))) for a in avals)
    except Exception:  # an output that is no array (a token, a ref): not compared
        return None


def _read_lowering(lowering: jaxcompat.JitLowering) -> tuple[sigmod.Signature, Any, str | None]:
    """From JAX's lowering: the arguments' signature, the jaxpr, and where the function it
    came from is defined (``name at file:line``)."""
    return sigmod.from_avals(lowering.arg_names, lowering.in_avals), lowering.jaxpr, lowering.source


def outside_call(frame: Any) -> str | None:
    """How JAX comes to lower a watched function outside the function's own call (its
    backward pass, or a transformation evaluated outside any jit); None within the call,
    and None when JAX's dispatch frame cannot be read (such compiles are then claimed by
    the next call, as before the distinction existed)."""
    if not jaxcompat.available(DISPATCH_FRAME):
        return None
    if any(getattr(fun, HOOK_ATTR, False) for fun in jaxcompat.dispatched_functions(frame, _OUTSIDE_CALL_DEPTH)):
        return None
    backward = jaxcompat.find_frame(frame, TRANSPOSE_FRAME, _OUTSIDE_CALL_DEPTH) is not None
    return BACKWARD_PASS if backward else OUTSIDE_CALL


def from_outside_call(frame: Any, name: str, how: str, watched: list[FunctionInfo]) -> Target | None:
    """The target of a compile made outside a watched function's call: of the ``watched``
    functions with this name, the one defined where JAX's debug information says (the
    only one, when it says nothing). None when it names none of them: a plain jit that
    shares a watched function's name."""
    lowering = jaxcompat.jit_lowering(frame)
    signature, jaxpr, source = _read_lowering(lowering) if lowering is not None else (None, None, None)
    where = _source_location(source)
    matches = [info for info in watched if (info.file, info.line) == where]
    if not matches and not where[0] and len(watched) == 1:
        matches = watched
    if not matches:
        return None
    program = program_key(jaxpr)
    return Target(
        matches[-1],
        0,
        signature,
        call_site=call_site(2),
        lowered_only=True,
        outside_call=how,
        program=program,
        outputs=output_types(jaxpr),
        jaxpr_ref=_weak(jaxpr),
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
    module = next((m for m in sys.modules.copy().values() if getattr(m, "__file__", None) == file), None)
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
        except Exception:  # a module's object may raise anything from its attributes
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
    return function_info(digest, name=name, qualname=name, module=UNATTRIBUTED_MODULE, file=file, line=line)


# ------------------------------------------------------------------------- events


def to_event(target: Target, record: building.CompileRecord) -> CompileEvent:
    """The event of a foreign compile: why it compiled, from its target; the rest from the
    listener's ``record`` of it."""
    info = target.info
    device = devices.default_device()
    sig = target.signature
    if target.primitive is not None and not target.lowered_only:
        cause, explanation, diff = foreign_causes.explain_primitive(target)
    elif target.lowered_only:
        cause, explanation, diff = foreign_causes.explain_lowered(target)
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
    # Read again: another program at the same argument types names itself in its signature.
    return building.compile_event(
        record, info, cause, explanation, diff, target.signature, device=device, call_site=target.call_site
    )


causes.on_reset(foreign_causes.reset)
causes.on_reset(opbyop.reset)
