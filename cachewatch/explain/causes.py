"""Why a function was traced or compiled again: the cause, one sentence, and the diff.

The history kept here is per process (a run) and per function hash, with the
signatures each jit object has traced. A trace is explained against the closest
earlier signature of the *same jit object*, since that is the cache JAX looked in;
a jit object that has never traced, wrapping a function another object already
traced, is the re-created-jit pitfall (``jax.jit(lambda ...)`` in a loop).
"""

from __future__ import annotations

import dataclasses
import threading

from ..core import process
from ..core.events import Cause, DiffEntry
from . import context as ctxmod
from . import placement as placemod
from . import signature as sigmod
from .signature import Signature

# The closest-signature search looks at this many recent distinct signatures; exact
# repeats are still found among all of them.
_MAX_CANDIDATES = 256

# What to do about a primitive's static parameter made anew each time (the explanation
# of such a compile and the fix of its storm say the same).
REMADE_PARAMETER_ADVICE = (
    "Functions defined where the code runs (a lambda or nested def given to lax.cond, lax.switch, "
    "lax.scan or lax.while_loop inside a loop) are traced again into new jaxprs each time: define them "
    "once, outside the loop, and pass what changes as operands (lax.cond(p, true_fn, false_fn, x, scale)), "
    "or jit the code around them, which traces them once."
)


@dataclasses.dataclass
class ObjectHistory:
    signatures: list[Signature] = dataclasses.field(default_factory=list)
    keys: set = dataclasses.field(default_factory=set)
    compiled_keys: set = dataclasses.field(default_factory=set)
    devices: dict = dataclasses.field(default_factory=dict)  # signature key -> device string
    # signature key -> the placements (placemod.placement) it was compiled for, latest last
    placements: dict = dataclasses.field(default_factory=dict)
    cleared: bool = False
    # ctxmod.clears() when the object last traced or compiled: a repeat after it changed
    # came after jax.clear_caches().
    global_clears: int = 0
    # (transformation, signature key) -> shapes under its tracers, of compiles made for a
    # transformation of the function (jvp, vmap, linearize outside any jit) from a cached jaxpr.
    transformed: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class FunctionHistory:
    signatures: list[Signature] = dataclasses.field(default_factory=list)
    objects: dict[int, ObjectHistory] = dataclasses.field(default_factory=dict)
    static_values: dict[str, set] = dataclasses.field(default_factory=dict)
    compiled_any: bool = False


@dataclasses.dataclass(frozen=True)
class Verdict:
    cause: Cause
    explanation: str
    diff: tuple[DiffEntry, ...]


_lock = threading.Lock()
_histories: dict[str, FunctionHistory] = {}


def reset() -> None:
    """Forget every history (a new run, for instance after fork)."""
    with _lock:
        _histories.clear()
    for forget in _on_reset:
        forget()


def _after_fork_in_child() -> None:
    # The child is a new run: its first compile of each function is its own first call.
    global _lock
    _lock = threading.Lock()
    reset()


# Other per-run histories (eager primitives, compiles without a trace) forget with this one.
_on_reset: list = []


def on_reset(forget) -> None:
    """Call ``forget()`` whenever the histories are reset (a new run)."""
    _on_reset.append(forget)


def seen(function_hash: str) -> bool:
    """Whether this function traced or compiled earlier in this run."""
    with _lock:
        return function_hash in _histories


def compiled_signatures(function_hash: str) -> list[Signature]:
    """The signatures this function was traced at earlier in this run, where it compiled on
    its own at any of them ([] where it never compiled)."""
    with _lock:
        history = _histories.get(function_hash)
        return list(history.signatures) if history is not None and history.compiled_any else []


def note(function_hash: str) -> None:
    """Remember that this function compiled, with no signature to keep."""
    with _lock:
        _histories.setdefault(function_hash, FunctionHistory())


def mark_cleared(function_hash: str, serial: int) -> None:
    with _lock:
        history = _histories.setdefault(function_hash, FunctionHistory())
        history.objects.setdefault(serial, ObjectHistory()).cleared = True


def explain_trace(
    function_hash: str,
    serial: int,
    name: str,
    sig: Signature,
    *,
    succeeded: bool,
    compiled: bool,
    device: str | None,
    call_site: str | None,
    placement: tuple = (),
) -> Verdict:
    """Classify one trace and remember its signature (and where its arguments were)."""
    with _lock:
        history = _histories.setdefault(function_hash, FunctionHistory())
        obj = history.objects.setdefault(serial, ObjectHistory())
        verdict = _classify_trace(history, obj, name, sig, call_site)
        if succeeded:
            _remember(history, obj, sig, compiled, device, placement)
        return verdict


def preview_trace(function_hash: str, serial: int, name: str, sig: Signature, call_site: str | None) -> Verdict:
    """What ``explain_trace`` would say of this trace, remembering nothing (the limits and
    ``freeze`` decide before JAX compiles, and the trace may then be refused)."""
    with _lock:
        history = _histories.get(function_hash) or FunctionHistory()
        obj = history.objects.get(serial) or ObjectHistory()
        return _classify_trace(history, obj, name, sig, call_site)


def explain_transformed(
    function_hash: str, serial: int, name: str, sig: Signature | None, transform: str, shapes: tuple[str, ...]
) -> Verdict:
    """Classify a compile without a trace made for a transformation of the function (its
    arguments were ``transform``'s tracers, over values of ``shapes``): a program of its
    own, built from a jaxpr JAX had cached, so neither a new device nor the plain program
    compiled again."""
    with _lock:
        history = _histories.setdefault(function_hash, FunctionHistory())
        obj = history.objects.setdefault(serial, ObjectHistory())
        key = (transform, sig.key if sig is not None else None)
        before = obj.transformed.get(key)
        obj.transformed[key] = shapes
    if before is None:
        return Verdict(
            Cause.FIRST_CALL,
            f"First compile of `{name}` under {transform} at this signature: a transformation "
            "taken outside any jit compiles a program of its own.",
            (),
        )
    if before != shapes:
        return Verdict(
            Cause.NEW_SHAPE,
            f"`{name}` was compiled again under {transform}: the arguments it transforms changed "
            f"shape, {', '.join(before)} -> {', '.join(shapes)}.",
            (
                {
                    "path": f"<{transform}>",
                    "change": "shape",
                    "cause": Cause.NEW_SHAPE.value,
                    "before": ", ".join(before),
                    "after": ", ".join(shapes),
                },
            ),
        )
    return Verdict(
        Cause.UNKNOWN,
        f"`{name}` was compiled again under {transform} at a signature and shapes it had compiled "
        "under it before, from a jaxpr JAX had cached: what changed is not in its arguments.",
        (),
    )


def explain_compile(
    function_hash: str, serial: int, name: str, sig: Signature | None, device: str | None, placement: tuple = ()
) -> Verdict:
    """Classify a backend compile that happened without a trace."""
    with _lock:
        history = _histories.setdefault(function_hash, FunctionHistory())
        obj = history.objects.setdefault(serial, ObjectHistory())
        if sig is None:
            return Verdict(
                Cause.UNKNOWN,
                f"`{name}` was compiled again without a retrace, and its arguments could not be read.",
                (),
            )
        key = sig.key
        if key in obj.compiled_keys:
            verdict = _recompiled(obj, name, key, device, placement)
        elif key in obj.keys:
            verdict = _first_compile_of_traced(obj, history, name, sig)
        else:
            verdict = _classify_trace(history, obj, name, sig, None)
        _remember(history, obj, sig, True, device, placement)
        return verdict


def _first_compile_of_traced(obj: ObjectHistory, history: FunctionHistory, name: str, sig: Signature) -> Verdict:
    """A compile of a signature so far only traced (by ``.lower()``, or inside another
    transformation: an outer jit, vmap, grad): nothing moved; it is compared with the
    signatures compiled before."""
    note = (
        f"`{name}` was compiled for a signature it had so far only traced (by .lower(), or inside "
        "another transformation; the jaxpr came from JAX's trace cache)"
    )
    compiled = [s for s in obj.signatures if s.key in obj.compiled_keys]
    entries = sigmod.closest(compiled, sig)[1] if compiled else []
    if not entries:
        return Verdict(Cause.FIRST_CALL, note + ": its first compile at this signature.", ())
    return Verdict(Cause(entries[0]["cause"]), note + ". " + _sentence(name, entries, history), tuple(entries))


def _recompiled(obj: ObjectHistory, name: str, key: tuple, device: str | None, placement: tuple) -> Verdict:
    """A compile without a retrace of a signature already compiled: what JAX's compile
    cache keys on beyond the jaxpr changed (commitment, placement), or the cache was cleared."""
    seen_placements = obj.placements.get(key) or []
    entries = placemod.placement_diff(seen_placements[-1], placement) if seen_placements and placement else []
    if placement in seen_placements:
        entries = []
    before = obj.devices.get(key)
    if before != device:
        return _moved_device(name, before, device, entries)
    if entries:
        return _placed_differently(name, entries)
    if obj.global_clears != ctxmod.clears() or obj.cleared:
        return Verdict(
            Cause.CACHE_CLEARED,
            f"`{name}` was compiled again for a signature, device and placement it had compiled, after "
            "its cache was cleared.",
            (),
        )
    return Verdict(
        Cause.UNKNOWN,
        f"`{name}` was compiled again without a retrace; its signature, trace context, device and the "
        "commitment and placement of each argument were the same as an earlier compile's, and no cache "
        "was cleared (an executable JAX evicted, or an input layout it could not read).",
        (),
    )


def _moved_device(name: str, before: str | None, device: str | None, entries: list[DiffEntry]) -> Verdict:
    """A recompile because the arguments moved to another device (the first argument
    whose placement changed named too)."""
    moved = f" (argument {entries[0]['path']}: {entries[0]['before']} -> {entries[0]['after']})" if entries else ""
    return Verdict(
        Cause.NEW_DEVICE_OR_SHARDING,
        f"`{name}` was compiled again for the same signature without a retrace: "
        f"its arguments moved to another device (from {before} to {device}){moved}.",
        (
            {
                "path": "<device>",
                "change": "device",
                "cause": Cause.NEW_DEVICE_OR_SHARDING.value,
                "before": before,
                "after": device,
            },
            *entries,
        ),
    )


def _placed_differently(name: str, entries: list[DiffEntry]) -> Verdict:
    """A recompile on the same device because an argument's layout, commitment or
    placement changed; the sentence is about the first such argument."""
    first = entries[0]
    if first["change"] == "layout":
        text = (
            f"`{name}` was compiled again without a retrace: argument {first['path']} now has the layout "
            f"{first['after']} (it was {first['before']}); JAX compiles once per input layout of committed "
            "arrays. Give it the same layout on every call (one jax.device_put with the same Format, or none)."
        )
    elif first["change"] == "committed":
        now = "committed to" if first["after"].startswith("committed") else "uncommitted on"
        where = first["after"].split(" ", 2)[-1]
        text = (
            f"`{name}` was compiled again without a retrace: argument {first['path']} is now {now} "
            f"{where} (it was {first['before']}); committed and uncommitted arrays compile separately, "
            "even on one device. Place it the same way on every call (always jax.device_put(x, device), "
            "or never)."
        )
    else:
        text = (
            f"`{name}` was compiled again without a retrace: argument {first['path']} moved, "
            f"{first['before']} -> {first['after']}. Place inputs once, before the loop."
        )
    if len(entries) > 1:
        text += f" {len(entries) - 1} more argument(s) changed placement (see the diff)."
    return Verdict(Cause.NEW_DEVICE_OR_SHARDING, text, tuple(entries))


def _remember(
    history: FunctionHistory,
    obj: ObjectHistory,
    sig: Signature,
    compiled: bool,
    device: str | None,
    placement: tuple = (),
) -> None:
    key = sig.key
    if key not in obj.keys:
        obj.keys.add(key)
        obj.signatures.append(sig)
        del obj.signatures[:-_MAX_CANDIDATES]
        history.signatures.append(sig)
        del history.signatures[:-_MAX_CANDIDATES]
    for leaf in sig.leaves:
        if leaf.static:
            history.static_values.setdefault(leaf.path, set()).add(leaf.value_key)
    if compiled:
        obj.compiled_keys.add(key)
        obj.devices[key] = device
        if placement:
            seen = obj.placements.setdefault(key, [])
            if placement not in seen:
                seen.append(placement)
                del seen[:-8]
        history.compiled_any = True
    obj.cleared = False
    obj.global_clears = ctxmod.clears()


def _classify_trace(
    history: FunctionHistory, obj: ObjectHistory, name: str, sig: Signature, call_site: str | None
) -> Verdict:
    if not history.signatures:
        return Verdict(Cause.FIRST_CALL, f"First trace of `{name}` in this run.", ())
    if not obj.signatures:
        _, entries = sigmod.closest(history.signatures, sig)
        where = f" at {call_site}" if call_site else ""
        if entries:
            # Arguments unlike any earlier object's: perhaps another function of the same
            # code (a model a factory such as hk.transform made), compiled for the first time.
            first = entries[0]
            return Verdict(
                Cause.NEW_FUNCTION_OBJECT,
                f"A new jit object was created around `{name}`{where}, whose code JAX had traced through "
                f"another function object, with arguments unlike any earlier one's (argument {first['path']}: "
                f"{first['before']} -> {first['after']}). Where it is another function made from the same "
                "code (a closure over other values, a model hk.transform built), this is its first compile; "
                "where the jit is made anew for each call, create it once, outside the loop, and reuse it.",
                tuple(entries),
            )
        return Verdict(
            Cause.NEW_FUNCTION_OBJECT,
            f"A new jit object was created around `{name}`{where}, which JAX had already traced: "
            "its cache belongs to the old object, so it traced again (and compiles again where it is called "
            "on its own, not inside another jit). Where the jit is made anew for each call, create it once, "
            "outside the loop, and reuse it.",
            tuple(entries),
        )
    if sig.key in obj.keys:
        return _repeat(obj, name)
    # JAX's tracing cache checks the context before the arguments: a context this jit
    # object never traced under is the cause, whatever else changed (the diff lists both).
    same_context = [s for s in obj.signatures if s.context == sig.context]
    if not same_context:
        closest_sig, arg_entries = _closest_across_contexts(obj.signatures, sig)
        context_entries = ctxmod.diff(closest_sig.context, sig.context) if closest_sig is not None else []
        if context_entries:
            entries = context_entries + arg_entries
            text = ctxmod.sentence(name, context_entries)
            if arg_entries:
                text += f" Its arguments changed too ({len(arg_entries)} difference(s) in the diff)."
            return Verdict(Cause.NEW_CONTEXT, text, tuple(entries))
        same_context = obj.signatures
    _, entries = sigmod.closest(same_context, sig)
    if not entries:
        return Verdict(
            Cause.UNKNOWN,
            f"`{name}` was traced again; its arguments (shapes, dtypes, weak types, static values, "
            "pytree) and JAX's trace context were the same as an earlier trace's, so what changed "
            "is not in what JAX keys its tracing cache on.",
            (),
        )
    return Verdict(Cause(entries[0]["cause"]), _sentence(name, entries, history), tuple(entries))


def _closest_across_contexts(candidates: list[Signature], sig: Signature) -> tuple[Signature | None, list]:
    """The earlier signature to compare a trace under a new context with: one with the same
    arguments if there is one (then only the context differs), the one whose context
    differs in fewest options among them; otherwise the closest by arguments."""
    same_args = [c for c in candidates if c.arg_key == sig.arg_key]
    if not same_args:
        return sigmod.closest(candidates, sig)
    return min(same_args, key=lambda c: ctxmod.distance(c.context, sig.context)), []


def _repeat(obj: ObjectHistory, name: str) -> Verdict:
    """A trace of a signature (arguments and context) this jit object traced before."""
    if obj.cleared:
        return Verdict(
            Cause.CACHE_CLEARED,
            f"`{name}` was traced again with a signature it had already compiled, after clear_cache().",
            (),
        )
    if obj.global_clears != ctxmod.clears():
        return Verdict(
            Cause.CACHE_CLEARED,
            f"`{name}` was traced again with a signature it had already compiled, after jax.clear_caches().",
            (),
        )
    # Nothing was cleared, so calling it a cleared cache would be a guess.
    return Verdict(
        Cause.UNKNOWN,
        f"`{name}` was traced again with a signature it had already compiled: its arguments (shapes, "
        "dtypes, weak types, static values by hash, pytree) and JAX's trace context were the same, and "
        "no cache was cleared since (neither jax.clear_caches() nor its clear_cache()). What changed is "
        "not in what cachewatch reads of JAX's cache key: an entry evicted from JAX's bounded caches, a "
        "static argument equal by hash but not by ==, or clear_cache() of a jit object it did not wrap.",
        (),
    )


# A wrapper that traces only JAX arrays and holds every other leaf static, as the user reads it.
HELD_STATIC = "the jit's wrapper (eqx.filter_jit) traces only JAX arrays and holds every other value static, by value"
AS_AN_ARRAY = "pass it as an array of a fixed dtype on every call (jnp.asarray(value, jnp.float32)), traced by its type"


def _held_static_sentence(path: str, before: str | None, after: str | None, count: int) -> str:
    """A static change behind a wrapper that holds non-arrays static: a Python value that
    took a new value, or that turned into an array (or back)."""
    was, now = (before or "").removeprefix("static "), (after or "").removeprefix("static ")
    if (before or "").startswith("static ") and (after or "").startswith("static "):
        return (
            f"Argument {path} took a new value {now} (before: {was}); {HELD_STATIC}, so each of its "
            f"{count} values so far compiled once. To compile once for every value, {AS_AN_ARRAY}."
        )
    kinds = ["a Python value " if text.startswith("static ") else "an array " for text in (before or "", after or "")]
    return f"Argument {path} was {kinds[0]}{was} and is now {kinds[1]}{now}: {HELD_STATIC}. To compile once, {AS_AN_ARRAY}."


def _sentence(name: str, entries: list[DiffEntry], history: FunctionHistory) -> str:
    first = entries[0]
    path, change, before, after = first["path"], first["change"], first["before"], first["after"]
    if change == "shape":
        axes = first.get("axes")
        axis_text = ""
        if axes:
            axis_text = " on axis " + ", ".join(str(a) for a in axes)
        text = f"Argument {path} changed shape{axis_text}: {before} -> {after}."
    elif change == "dtype":
        text = f"Argument {path} changed dtype: {before} -> {after}."
    elif change == "weak_type":
        # Weakly typed: a Python scalar, or an array made from one without a dtype
        # (jnp.array(1.0), jnp.asarray(0.5)), which stays weak until a typed operation.
        weak = "a Python scalar, or an array made from one without a dtype such as jnp.array(1.0)"
        fixed = "give it a dtype where it is made (jnp.float32(1.0), jnp.asarray(x, jnp.float32)) and keep it"
        if (before or "").endswith(" weak"):
            text = (
                f"Argument {path} was weakly typed ({before[:-5]}: {weak}) and is now a typed array ({after}); {fixed}."
            )
        else:
            text = (
                f"Argument {path} was a typed array ({before}) and is now weakly typed "
                f"({(after or '')[:-5]}: {weak}); {fixed}."
            )
    elif change == "sharding":
        text = (
            f"The abstract sharding of argument {path} changed: {before} -> {after}. JAX traces a "
            "function again for each mesh and partition spec its arguments carry (an array sharded "
            "over devices, a pmap's output, after a plain array); place the inputs the same way on "
            "every call (jax.device_put with one sharding) to compile once."
        )
    elif change == "static" and first.get("held_static"):
        text = _held_static_sentence(path, before, after, len(history.static_values.get(path, ())) + 1)
    elif change == "static":
        count = len(history.static_values.get(path, ())) + 1
        text = (
            f"Static argument {path} took a new value {after} (before: {before}); "
            f"{count} distinct values so far, each traced anew (and compiled, where it is called on its own "
            "rather than inside another jit)."
        )
    elif change == "passed_as":
        text = (
            f"Argument {path} was passed by {after} instead of by {before}; JAX caches the two "
            "calling conventions separately."
        )
    elif change == "added":
        text = f"The argument pytree changed: {path} was added ({after})."
    elif change == "removed":
        text = f"The argument pytree changed: {path} was removed (was {before})."
    else:
        text = f"The pytree structure of {path} changed: {before} -> {after}."
    if len(entries) > 1:
        text += f" {len(entries) - 1} more difference(s) in the diff."
    return f"`{name}` traced again. " + text


process.on_fork_in_child(process.Concern.HISTORIES, _after_fork_in_child)
