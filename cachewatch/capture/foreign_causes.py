"""Why a compile of a jit object cachewatch did not wrap happened (capture/foreign.py reads
what it is of off JAX's frames, as a :class:`Target`): a primitive run op by op, compared
with its earlier operands; a program compiled without a trace of its own (inside a
transformation, or for a backward pass), compared only with the function's earlier such
programs: another program at the same argument types, a cache cleared, a jaxpr JAX built
afresh, or an argument committed to a device."""

from __future__ import annotations

import dataclasses
import re
import threading
from typing import Any, NamedTuple

from ..core.events import Cause, DiffEntry, FunctionInfo
from ..core.texts import shortened, static_made_anew
from ..explain import causes
from ..explain import context as ctxmod
from ..explain import placement as placemod
from ..explain import signature as sigmod
from . import opbyop

_MAX_PLACEMENTS = 4096

# How a watched function came to be compiled outside its own call (Target.outside_call).
BACKWARD_PASS = "for its backward pass (jax.grad or jax.vjp taken outside any jit, which compiles the transpose)"
OUTSIDE_CALL = "outside its own call (jax.checkpoint, jax.hessian or another transformation evaluated outside any jit)"


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
    # a library's lifted transform) or another jit, and run outside any jit.
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
    # A hash of the lowered jaxpr's text (set when a compile without a trace is compared):
    # the same text is the same program, whichever object JAX built it in.
    printed: int | None = None
    # Where each array argument was (placemod.placement): committed or not, and its devices.
    placement: tuple = ()


# Primitives whose name says little to a user.
_PRIMITIVE_NOTES = {
    "stage": " (JAX's own step that puts a Python or NumPy value on the device)",
    "device_put": " (moving a value to a device)",
}


def explain_primitive(target: Target) -> tuple[str, str, tuple[DiffEntry, ...]]:
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


# Primitives a Python list is joined by (jnp.concatenate, jnp.stack, jnp.array of a list):
# more operands for them is a list that grew; for others (a scan's carries), another program.
_JOINS_A_LIST = re.compile(r"`concatenate`")


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
    if static_made_anew(verdict.diff):
        return (
            f"JAX compiled the primitive {named} op by op again, outside any jit{where}: its parameter "
            f"`{change['path']}` was made anew with the same text ({shortened(str(change['after']), 160)}), and "
            f"JAX compares it by identity. {causes.REMADE_PARAMETER_ADVICE}"
        )
    if change.get("change") == "static":
        what = f"its parameter `{change['path']}` changed: {change['before']} -> {change['after']}"
    elif change.get("change") in ("added", "removed"):
        more_or_fewer = "more" if change["change"] == "added" else "fewer"
        shown = change["after"] if change["change"] == "added" else change["before"]
        what = f"it was given {more_or_fewer} operands ({change['path']} {change['change']}: {shown})"
        if _JOINS_A_LIST.search(named):
            return (
                f"JAX compiled the primitive {named} op by op again, outside any jit{where}: {what}, as when "
                "a Python list that grows is passed whole. Keep the items in an array of a fixed size instead, "
                "written with buf.at[n].set(item), or on the host until needed whole."
            )
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
    printed: int | None


# Larger jaxprs are not printed to be compared (a print of this many equations takes a
# few milliseconds, beside a compile of tens).
_MAX_PRINTED_EQUATIONS = 5000

_lowered: dict[tuple[str, str, tuple | None], list[_Lowered]] = {}
# Per function, the programs its backward pass compiled (keys of _lowered), in order.
_backward_programs: dict[str, dict[tuple | None, None]] = {}
_lowered_lock = threading.Lock()


def explain_lowered(target: Target) -> tuple[str, str, tuple[DiffEntry, ...]]:
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
        if target.outside_call == BACKWARD_PASS and sig is not None and _other_backward_at(target, sig):
            # Which outputs carry a gradient picks the transpose: another program, keyed apart.
            target.signature = sigmod.with_program(sig, _program_leaf(target))
            return _another_program(info.name, inside)
        if target.outside_call:
            return Cause.FIRST_CALL, f"First compile of `{info.name}` {inside} in this run.", ()
        compiled = causes.compiled_signatures(info.function_hash) if sig is not None else []
        if compiled and sig is not None:
            # Its first compile without a trace, but the function compiled on its own before
            # (JAX 0.12 reuses a trace made inside another jit): a recompile, no first call.
            return _against_traced(info.name, inside, compiled, sig)
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
    return _argument_changed(info.name, inside, entries)


def _remember_lowered(target: Target) -> tuple[list[_Lowered], int]:
    """The earlier compiles without a trace to compare this one with, and the count of cache
    clears now; this one is added to them.

    A compile without a trace is compared only with the function's other compiles of the
    same program made the same way: a backward pass, a remat's recomputation, the program
    linearize builds of a primitive, are other programs than the plain one, with other
    arguments, each with a history of its own (a backward pass's first program of other
    equations at argument types it compiled before is told by _other_backward_at)."""
    key = (target.info.function_hash, target.outside_call, target.program)
    clears = ctxmod.clears()
    target.printed = _printed(target.jaxpr_ref() if target.jaxpr_ref is not None else None)
    with _lowered_lock:
        earlier = list(_lowered.get(key, ()))
        if target.signature is not None:
            remembered = _Lowered(target.signature, clears, target.jaxpr_ref, target.outputs, target.printed)
            _lowered.setdefault(key, []).append(remembered)
            del _lowered[key][:-64]
            if target.outside_call == BACKWARD_PASS:
                _backward_programs.setdefault(key[0], {})[target.program] = None
    return earlier, clears


def _printed(jaxpr: Any) -> int | None:
    """A hash of the jaxpr's text; None unread or too large to print."""
    try:
        if jaxpr is None or len(jaxpr.eqns) > _MAX_PRINTED_EQUATIONS:
            return None
        return hash(str(jaxpr))
    except Exception:  # a jaxpr this JAX cannot print: not compared
        return None


def _lowered_inside(target: Target) -> str:
    """Where a compile without a trace was made, as the sentences say it."""
    if target.outside_call:
        return target.outside_call
    if target.primitive is not None:
        return (
            "as a program JAX built around the primitive outside any jit (for eager code under a "
            "transformation, jax.grad or jax.vmap, or for one of JAX's own operations), told apart from the "
            "primitive run op by op"
        )
    return (
        "traced earlier inside a transformation (grad, vmap, a library's lifted transform) or another jit, "
        "and compiled from that trace to run outside any jit"
    )


def _lowered_same_types(
    target: Target, sig: sigmod.Signature, inside: str, earlier: list[_Lowered], clears: int
) -> tuple[str, str, tuple[DiffEntry, ...]]:
    """A compile without a trace of argument types compiled before: another program (a
    static argument changed what it returns), after a cache clear, for a jaxpr JAX built
    afresh, or for a reason unknown."""
    info = target.info
    repeats = [e for e in earlier if e.signature.key == sig.key]
    returned = [e.outputs for e in repeats if e.outputs is not None]
    if target.outputs is not None and returned and target.outputs not in returned:
        target.signature = sigmod.with_program(sig, "returns " + ", ".join(target.outputs))
        return _returns_other(info.name, inside, returned[-1], target.outputs)
    printed = [e.printed for e in repeats if e.printed is not None]
    if target.printed is not None and printed and target.printed not in printed:
        target.signature = sigmod.with_program(sig, _program_leaf(target))
        return _another_program(info.name, inside)
    if any(e.clears != clears for e in repeats):
        return (
            Cause.CACHE_CLEARED,
            f"`{info.name}` was compiled again, {inside}, with a program and argument types it had "
            "compiled before, after jax.clear_caches().",
            (),
        )
    current_jaxpr = target.jaxpr_ref() if target.jaxpr_ref is not None else None
    if current_jaxpr is not None and all(
        e.jaxpr_ref is not None and e.jaxpr_ref() is not current_jaxpr for e in repeats
    ):
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


def _other_backward_at(target: Target, sig: sigmod.Signature) -> bool:
    """Whether the function's backward pass compiled another program (other equations)
    at these argument types before this one."""
    function_hash = target.info.function_hash
    with _lowered_lock:
        return any(
            e.signature.key == sig.key
            for program in _backward_programs.get(function_hash, ())
            if program != target.program
            for e in _lowered.get((function_hash, BACKWARD_PASS, program), ())
        )


def _program_leaf(target: Target) -> str:
    """The ``(program)`` static leaf that keys another program at the same argument types."""
    named = target.printed if target.printed is not None else hash(target.program)
    return f"jaxpr {named & 0xFFFFFFFF:08x}"


def _against_traced(
    name: str, inside: str, compiled: list[sigmod.Signature], sig: sigmod.Signature
) -> tuple[str, str, tuple[DiffEntry, ...]]:
    """A compile without a trace of a function that compiled on its own before: which
    array changed type against its closest traced signature, or, where none did, another
    program at the same argument types (a static argument took a new value)."""
    _, entries = sigmod.closest(compiled, sig)
    # Only an array's type is read alike from a trace and from a lowered program (which
    # shows static arguments as nothing and pytrees flattened).
    changed = [e for e in entries if e.get("change") in ("shape", "dtype", "weak_type")]
    if not changed:
        return _another_program(name, inside)
    return _argument_changed(name, inside, changed)


def _argument_changed(name: str, inside: str, entries: list[DiffEntry]) -> tuple[str, str, tuple[DiffEntry, ...]]:
    """A compile without a trace whose first differing argument names the cause."""
    first = entries[0]
    return (
        first["cause"],
        (
            f"`{name}` was compiled again, {inside}: argument {first['path']} changed "
            f"{first['change'].replace('_', ' ')}: {first['before']} -> {first['after']}."
        ),
        tuple(entries),
    )


def _another_program(name: str, inside: str) -> tuple[str, str, tuple[DiffEntry, ...]]:
    """The same argument types, other equations: another program."""
    return (
        Cause.NEW_STATIC_VALUE,
        (
            f"`{name}` was compiled again, {inside}: at the same argument types it is another "
            "program (its equations differ from each earlier one's), so something fixed at trace time "
            "changed: a static argument, a value it closes over, or, for a backward pass, which of its "
            "outputs carry a gradient. Each such program compiles once."
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
        after = placemod.Placed(was.path, now.committed, where)
        entries.extend(placemod.placement_diff((was,), (after,)))
    return entries


def _array_key(sig: sigmod.Signature) -> tuple:
    # A traced signature names arguments as the call did, a lowered one as JAX does:
    # their array leaves, in order, are what both have.
    return tuple(leaf.compare_key() for leaf in sig.leaves if not leaf.static)


# The placement of each foreign function's traced signatures (note_traced_placement).
_traced_placements: dict[tuple[str, tuple], tuple] = {}


def note_traced_placement(function_hash: str, signature: sigmod.Signature, placement: tuple) -> None:
    """Where a traced call's array arguments were, to tell a later compile made for a
    committed argument (lowered again, not traced) from one inside a transformation."""
    with _lowered_lock:
        _traced_placements[(function_hash, _array_key(signature))] = placement
        while len(_traced_placements) > _MAX_PLACEMENTS:
            del _traced_placements[next(iter(_traced_placements))]


def reset() -> None:
    """Forget the compiles seen without a trace (a new run)."""
    with _lowered_lock:
        _lowered.clear()
        _backward_programs.clear()
        _traced_placements.clear()
