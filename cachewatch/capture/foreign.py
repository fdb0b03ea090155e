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
import dataclasses
import hashlib
import os
import sys
import threading
import types
import weakref
from collections import OrderedDict
from typing import Any, NamedTuple

from ..core import _guard, jaxcompat
from ..core.events import UNATTRIBUTED_MODULE, Cause, CompileEvent, DiffEntry, FunctionInfo, describe_array
from ..explain import causes
from ..explain import context as ctxmod
from ..explain import signature as sigmod
from . import building, devices, opbyop
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
BACKWARD_PASS = "for its backward pass (jax.grad or jax.vjp taken outside any jit, which compiles the transpose)"
OUTSIDE_CALL = "outside its own call (jax.checkpoint, jax.hessian or another transformation evaluated outside any jit)"

# Module of functions known only by the name JAX compiled them under.


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
    # The lowered program's inputs, outputs and equations (primitives and simple
    # parameters): the same program at other shapes has the same key; a forward, a remat's
    # recomputation, a backward pass, a linearized program of one name differ.
    program: tuple | None = None
    # What the lowered program returns (``float32[4,16]`` each): a static argument (a shape)
    # changes it at the same argument types, and a compile without a trace shows none.
    outputs: tuple[str, ...] | None = None
    # The lowered jaxpr itself, weakly: JAX's lowering and compile caches are keyed on it.
    jaxpr_ref: Any = None
    # Where each array argument was (sigmod.placement): committed or not, and its devices.
    placement: tuple = ()


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
        placement = sigmod.placement(layout, args, kwargs)
        with _lowered_lock:
            _traced_placements[(info.function_hash, _array_key(signature))] = placement
            while len(_traced_placements) > _MAX_OBJECTS:
                del _traced_placements[next(iter(_traced_placements))]
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
        sigmod.Placed(leaf.path, False, "") if on is None else sigmod.Placed(leaf.path, True, ",".join(on))
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
    except Exception:  # noqa: BLE001 - an output that is no array (a token, a ref): not compared
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
    return building.compile_event(
        record, info, cause, explanation, diff, sig, device=device, call_site=target.call_site
    )


# Primitives whose name says little to a user.
_PRIMITIVE_NOTES = {
    "stage": " (JAX's own step that puts a Python or NumPy value on the device)",
    "device_put": " (moving a value to a device)",
}


def _explain_primitive(target: Target) -> tuple[str, str, tuple[DiffEntry, ...]]:
    primitive = target.primitive or ""
    info = target.info
    sig = target.signature
    where = f" at {target.call_site}" if target.call_site else ""
    if sig is None:
        return _primitive_unread(primitive, where)
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
        if "jax.clear_caches()" in verdict.explanation:
            why = "after jax.clear_caches()"
        else:
            why = "what changed is not in its operands, parameters or trace context"
        return (
            verdict.cause,
            (
                f"JAX compiled the primitive `{primitive}` op by op again{where} ({operands}) "
                f"with operands, parameters and trace context it had compiled before: {why}."
            ),
            (),
        )
    return verdict.cause, _primitive_changed(f"`{primitive}`{note}", where, operands, verdict), verdict.diff


def _primitive_unread(primitive: str, where: str) -> tuple[str, str, tuple[DiffEntry, ...]]:
    """A primitive compiled op by op whose operands JAX did not expose: its first compile,
    or one whose cause is unknown."""
    if opbyop.first_compile(primitive):
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


def _primitive_changed(named: str, where: str, operands: str, verdict: causes.Verdict) -> str:
    """The sentence for a primitive compiled again because its trace context, a parameter
    or an operand changed (the first difference of ``verdict``'s diff)."""
    if verdict.cause == Cause.NEW_CONTEXT:
        options = [e for e in verdict.diff if e.get("change") == "context"]
        shown = "; ".join(f"{e['path']}: {e['before']} -> {e['after']}" for e in options[:3])
        return (
            f"JAX compiled the primitive {named} op by op again, outside any jit{where} "
            f"({operands}), because the trace context JAX keys its cache on changed: {shown}. "
            "Set the option once at start-up, or run this code inside the same context every time."
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
        f"JAX compiled the primitive {named} op by op again, outside any jit{where}: "
        f"{what}{more}. Eager code compiles each primitive once per new shape; move it "
        "inside a jitted function or keep its shapes fixed."
    )


# Signatures of compiles without a trace, per function: JAX names their arguments
# differently from a traced call, so they are compared only with each other.
class _Lowered(NamedTuple):
    """An earlier compile without a trace: arguments, clears before it, jaxpr, returns."""

    signature: sigmod.Signature
    clears: int
    jaxpr_ref: Any
    outputs: tuple[str, ...] | None


_lowered: dict[tuple[str, str, tuple | None], list[_Lowered]] = {}
_lowered_lock = threading.Lock()


def _explain_lowered(target: Target) -> tuple[str, str, tuple[DiffEntry, ...]]:
    info, sig = target.info, target.signature
    earlier, clears = _remember_lowered(target)
    moved = _commitment_changed(target)
    if moved:
        first = moved[0]
        now = "committed to" if first["after"].startswith("committed") else "uncommitted on"
        return (
            Cause.NEW_DEVICE_OR_SHARDING,
            (
                f"`{info.name}` was compiled again without a retrace: argument {first['path']} is now {now} "
                f"{first['after'].split(' ', 2)[-1]} (it was {first['before']}); committed and uncommitted "
                "arrays compile separately, even on one device."
            ),
            tuple(moved),
        )
    inside = _lowered_inside(target)
    if not earlier:
        if target.outside_call:
            return Cause.FIRST_CALL, f"First compile of `{info.name}` {inside} in this run.", ()
        if target.program is not None or not causes.seen(info.function_hash):
            causes.note(info.function_hash)
            return Cause.FIRST_CALL, f"First compile of this program of `{info.name}` in this run, {inside}.", ()
        return (
            Cause.UNKNOWN,
            (
                f"`{info.name}` was compiled again, {inside}; JAX's jaxpr for it could not be read, so "
                "it could not be compared with the function's earlier programs."
            ),
            (),
        )
    if sig is None:
        return Cause.UNKNOWN, f"`{info.name}` was compiled again, {inside}; its arguments could not be read.", ()
    same_context = [e.signature for e in earlier if e.signature.context == sig.context]
    if not same_context:
        entries = ctxmod.diff(earlier[-1].signature.context, sig.context)
        if entries:
            return Cause.NEW_CONTEXT, ctxmod.sentence(info.name, entries), tuple(entries)
    _, entries = sigmod.closest(same_context or [e.signature for e in earlier], sig)
    if not entries:
        return _lowered_same_types(target, sig, inside, earlier, clears)
    first = entries[0]
    return (
        first["cause"],
        (
            f"`{info.name}` was compiled again, {inside}: argument {first['path']} changed "
            f"{first['change'].replace('_', ' ')}: {first['before']} -> {first['after']}."
        ),
        tuple(entries),
    )


def _remember_lowered(target: Target) -> tuple[list[_Lowered], int]:
    """The earlier compiles without a trace to compare this one with, and the count of cache
    clears now; this one is added to them.

    A compile without a trace is compared only with the function's other compiles of the
    same program made the same way: a backward pass, a remat's recomputation, the program
    linearize builds of a primitive, are other programs than the plain one, with other
    arguments, each with a history of its own."""
    key = (target.info.function_hash, target.outside_call, target.program)
    clears = ctxmod.clears()
    with _lowered_lock:
        earlier = list(_lowered.get(key, ()))
        if target.signature is not None:
            _lowered.setdefault(key, []).append(_Lowered(target.signature, clears, target.jaxpr_ref, target.outputs))
            del _lowered[key][:-64]
    return earlier, clears


def _lowered_inside(target: Target) -> str:
    """Where a compile without a trace was made, as the sentences say it."""
    if target.outside_call:
        return target.outside_call
    if target.primitive is not None:
        return (
            "as a program JAX built for a transformation taken outside any jit (jax.grad, jvp or "
            "linearize of eager code), told apart from the primitive run op by op"
        )
    return "traced inside a transformation (grad, vmap, a library's lifted transform) and run outside any jit"


def _lowered_same_types(
    target: Target, sig: sigmod.Signature, inside: str, earlier: list[_Lowered], clears: int
) -> tuple[str, str, tuple[DiffEntry, ...]]:
    """A compile without a trace of argument types compiled before: another program (a
    static argument changed what it returns), after a cache clear, for a jaxpr JAX built
    afresh, or for a reason unknown."""
    info = target.info
    repeats = [(e.clears, e.jaxpr_ref) for e in earlier if e.signature.key == sig.key]
    returned = [e.outputs for e in earlier if e.signature.key == sig.key and e.outputs is not None]
    if target.outputs is not None and returned and target.outputs not in returned:
        return _returns_other(info.name, inside, returned[-1], target.outputs)
    if any(at != clears for at, _ in repeats):
        return (
            Cause.CACHE_CLEARED,
            f"`{info.name}` was compiled again, {inside}, with a program and argument types it had "
            "compiled before, after jax.clear_caches().",
            (),
        )
    current_jaxpr = target.jaxpr_ref() if target.jaxpr_ref is not None else None
    if current_jaxpr is not None and all(ref is not None and ref() is not current_jaxpr for _, ref in repeats):
        # JAX's lowering and compile caches are keyed on the jaxpr object, and a
        # transformation evaluated outside any jit builds the jaxpr afresh each time.
        return (
            Cause.NEW_FUNCTION_OBJECT,
            (
                f"`{info.name}` was compiled again, {inside}: the same program at the same argument "
                "types, rebuilt by JAX as a new jaxpr object (the transformed function was made afresh, "
                "a lambda or partial in a loop, or JAX had dropped the old jaxpr), and JAX's compile "
                "cache is keyed on the object. Jit the function that takes the transformation "
                "(jax.jit(jax.grad(loss))), created once, so it compiles once."
            ),
            (),
        )
    return (
        Cause.UNKNOWN,
        (
            f"`{info.name}` was compiled again, {inside}; the program (its equations), the jaxpr "
            "object, the argument types and JAX's trace context were all the same as an earlier "
            "compile's, and no cache was cleared."
        ),
        (),
    )


def _returns_other(name: str, inside: str, before: tuple[str, ...], after: tuple[str, ...]) -> tuple[str, str, tuple]:
    """The same argument types returning other types: another program."""
    pairs = zip(before, after, strict=True) if len(before) == len(after) else [(", ".join(before), ", ".join(after))]
    entries = tuple(
        DiffEntry(path=f"output {i}", change="static", cause=Cause.NEW_STATIC_VALUE.value, before=was, after=now)
        for i, (was, now) in enumerate(pairs)
        if was != now
    )
    text = (
        f"`{name}` was compiled again, {inside}: at the same argument types it returns {entries[0]['after']} where "
        f"it returned {entries[0]['before']}, so a static argument (a shape or size) or a value it closes over "
        "changed, and with it the program. Each new value compiles once; keep such values to a few."
    )
    return Cause.NEW_STATIC_VALUE, text, entries


def _commitment_changed(target: Target) -> list[DiffEntry]:
    """Diff entries for arguments whose commitment differs from the function's trace at
    this signature (JAX lowers again for it, without tracing)."""
    sig = target.signature
    if target.outside_call or target.primitive is not None or sig is None or not target.placement:
        return []
    with _lowered_lock:
        traced = _traced_placements.get((target.info.function_hash, _array_key(sig)))
    if not traced or len(traced) != len(target.placement):
        return []
    entries = []
    for was, now in zip(traced, target.placement, strict=False):
        if was.committed == now.committed:
            continue
        where = now.where or was.where
        after = sigmod.Placed(was.path, now.committed, where)
        entries.extend(sigmod.placement_diff((was,), (after,)))
    return entries


def _array_key(sig: sigmod.Signature) -> tuple:
    # A traced signature names arguments as the call did, a lowered one as JAX does:
    # their array leaves, in order, are what both have.
    return tuple(leaf.compare_key() for leaf in sig.leaves if not leaf.static)


# The placement of each foreign function's traced signatures, to tell a compile made for
# a committed argument (lowered again, not traced) from one made inside a transformation.
_traced_placements: dict[tuple[str, tuple], tuple] = {}


def reset() -> None:
    """Forget the compiles seen without a trace (a new run)."""
    with _lowered_lock:
        _lowered.clear()
        _traced_placements.clear()


causes.on_reset(reset)
causes.on_reset(opbyop.reset)
