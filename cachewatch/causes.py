"""Why a function was traced or compiled again: the cause, one sentence, and the diff.

The history kept here is per process (a run) and per function hash, with the
signatures each jit object has traced. A trace is explained against the closest
earlier signature of the *same jit object*, since that is the cache JAX looked in;
a jit object that has never traced, wrapping a function another object already
traced, is the re-created-jit pitfall (``jax.jit(lambda ...)`` in a loop).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Any

from . import signature as sigmod
from .events import Cause
from .signature import Signature

# The closest-signature search looks at this many recent distinct signatures; exact
# repeats are still found among all of them.
_MAX_CANDIDATES = 256


@dataclasses.dataclass
class ObjectHistory:
    signatures: list[Signature] = dataclasses.field(default_factory=list)
    keys: set = dataclasses.field(default_factory=set)
    compiled_keys: set = dataclasses.field(default_factory=set)
    devices: dict = dataclasses.field(default_factory=dict)  # signature key -> device string
    cleared: bool = False
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
    diff: tuple[dict[str, Any], ...]


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
) -> Verdict:
    """Classify one trace and remember its signature."""
    with _lock:
        history = _histories.setdefault(function_hash, FunctionHistory())
        obj = history.objects.setdefault(serial, ObjectHistory())
        verdict = _classify_trace(history, obj, name, sig, call_site)
        if succeeded:
            _remember(history, obj, sig, compiled, device)
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


def explain_compile(function_hash: str, serial: int, name: str, sig: Signature | None, device: str | None) -> Verdict:
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
            before = obj.devices.get(key)
            diff = (
                (
                    {
                        "path": "<device>",
                        "change": "device",
                        "cause": Cause.NEW_DEVICE_OR_SHARDING.value,
                        "before": before,
                        "after": device,
                    },
                )
                if before != device
                else ()
            )
            where = f" (from {before} to {device})" if before != device else ""
            verdict = Verdict(
                Cause.NEW_DEVICE_OR_SHARDING,
                f"`{name}` was compiled again for the same signature without a retrace: "
                f"its arguments moved to another device, sharding or layout{where}.",
                diff,
            )
        elif key in obj.keys:
            cause = Cause.FIRST_CALL if not history.compiled_any else Cause.NEW_DEVICE_OR_SHARDING
            verdict = Verdict(
                cause,
                f"`{name}` was compiled for a signature it had so far only traced "
                "inside another transformation (the jaxpr came from JAX's trace cache).",
                (),
            )
        else:
            verdict = _classify_trace(history, obj, name, sig, None)
        _remember(history, obj, sig, True, device)
        return verdict


def _remember(history: FunctionHistory, obj: ObjectHistory, sig: Signature, compiled: bool, device: str | None) -> None:
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
        history.compiled_any = True
    obj.cleared = False


def _classify_trace(
    history: FunctionHistory, obj: ObjectHistory, name: str, sig: Signature, call_site: str | None
) -> Verdict:
    if not history.signatures:
        return Verdict(Cause.FIRST_CALL, f"First trace of `{name}` in this run.", ())
    if not obj.signatures:
        _, entries = sigmod.closest(history.signatures, sig)
        where = f" at {call_site}" if call_site else ""
        return Verdict(
            Cause.NEW_FUNCTION_OBJECT,
            f"A new jit object was created around `{name}`{where}, which JAX had already traced: "
            "its cache belongs to the old object, so it traced and compiled again. "
            "Create the jit once, outside the loop, and reuse it.",
            tuple(entries),
        )
    if sig.key in obj.keys:
        if obj.cleared:
            text = f"`{name}` was traced again with a signature it had already compiled, after clear_cache()."
        else:
            text = (
                f"`{name}` was traced again with a signature it had already compiled: its cache was "
                "cleared (jax.clear_caches()) or the entry was evicted."
            )
        return Verdict(Cause.CACHE_CLEARED, text, ())
    _, entries = sigmod.closest(obj.signatures, sig)
    if not entries:
        return Verdict(
            Cause.UNKNOWN,
            f"`{name}` was traced again and no difference from an earlier "
            "signature could be found (a JAX configuration change, perhaps).",
            (),
        )
    return Verdict(entries[0]["cause"], _sentence(name, entries, history), tuple(entries))


def _sentence(name: str, entries: list[dict[str, Any]], history: FunctionHistory) -> str:
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
        if (before or "").endswith(" weak"):
            text = (
                f"Argument {path} was a Python scalar (weakly typed {before[:-5]}) and is now a typed "
                f"array ({after}); pass one kind consistently, e.g. always jnp.asarray(...)."
            )
        else:
            text = (
                f"Argument {path} was a typed array ({before}) and is now a Python scalar "
                f"(weakly typed {(after or '')[:-5]}); pass one kind consistently, e.g. always "
                "jnp.asarray(...)."
            )
    elif change == "static":
        count = len(history.static_values.get(path, ())) + 1
        text = (
            f"Static argument {path} took a new value {after} (before: {before}); "
            f"{count} distinct values so far, one compile each."
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


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
