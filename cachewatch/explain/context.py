"""The trace context JAX keys its tracing cache on, and what changed in it.

``jax._src.config.trace_context()`` is a tuple of every configuration option and context
manager registered as part of the key (a mesh, the matmul precision, the promotion
modes, x64, the default device, user contexts, ...), in registration order; which
options there are, and where, differs between JAX versions and grows at run time
(``jax.make_user_context``, importing Pallas). So a snapshot keeps the tuple as it is
(hashable, cheap to read, equal when the values are) and the names beside it, and two
snapshots are compared by name, never by position.
"""

from __future__ import annotations

import enum
from typing import Any

from ..core import jaxcompat
from ..core.events import Cause, DiffEntry

# The value every snapshot takes when JAX does not expose its trace context: all equal,
# so nothing is ever said about a context that cannot be read.
UNREAD: tuple = ()

_MAX_VALUE = 120


def unreadable_reason() -> str | None:
    """Why this JAX's trace context cannot be read (the seam's capability ``trace_context``
    is off), or None when it can."""
    if jaxcompat.available("trace_context"):
        return None
    return next((s.reason for s in jaxcompat.status() if s.name == "trace_context"), "off")


def snapshot() -> tuple:
    """The current trace context (a tuple of values), ``UNREAD`` when it cannot be read."""
    _clear_counter.register()
    values = jaxcompat.trace_context()
    return UNREAD if values is None else values


def _names_for(values: tuple) -> tuple[str, ...]:
    # The seam reads the names again only when the tuple grows or shrinks (a new option
    # registered), not on every trace.
    if not values:
        return ()
    names = jaxcompat.trace_context_names(values)
    return names if len(names) == len(values) else ()


def _named(values: tuple) -> dict[str, Any]:
    names = _names_for(values)
    if len(names) != len(values):
        # Registered between the read of the values and of the names: by position is all
        # there is, and said so.
        return {f"trace_context[{i}]": v for i, v in enumerate(values)}
    named: dict[str, Any] = {}
    for name, value in zip(names, values, strict=False):
        # Every user context is registered as "user_context": number the repeats.
        key, n = name, 1
        while key in named:
            n += 1
            key = f"{name}#{n}"
        named[key] = value
    return named


def render(value: Any) -> str:
    """A short readable form of one option's value (``'highest'``, ``None``, ``cpu:1``)."""
    try:
        if isinstance(value, enum.Enum):
            text = repr(value.value)
        elif isinstance(value, str):
            text = repr(value)
        elif isinstance(value, tuple) and not value:
            text = "none"
        elif isinstance(value, tuple) and len(value) == 1:
            text = render(value[0])
        elif type(value).__name__ in ("Mesh", "AbstractMesh"):
            # Axis names and sizes say which mesh; the full repr lists every device.
            text = f"{type(value).__name__}({tuple(value.axis_names)}, {tuple(value.axis_sizes)})"
        elif type(value).__name__ == "AxisEnv":
            # The named axes of the transformations being traced (vmap with axis_name, shard_map).
            text = f"AxisEnv({dict(value.axis_sizes)})"
        else:
            text = str(value)
    except Exception:  # a value of JAX's or the user's whose str (or mesh) cannot be read
        text = f"<{type(value).__name__}>"
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 3] + "..."


def diff(before: tuple, after: tuple) -> list[DiffEntry]:
    """One diff entry per option whose value differs, named as JAX names it."""
    if before == after or before is UNREAD or after is UNREAD:
        return []
    old, new = _named(before), _named(after)
    entries: list[DiffEntry] = []
    for name in list(new) + [n for n in old if n not in new]:
        missing = object()
        was, now = old.get(name, missing), new.get(name, missing)
        try:
            same = was is now or bool(was == now)
        except Exception:  # values whose == raises or is no bool (arrays): read as changed
            same = False
        if same:
            continue
        entries.append(
            {
                "path": name,
                "change": "context",
                "cause": Cause.NEW_CONTEXT.value,
                "before": "(not registered)" if was is missing else render(was),
                "after": "(not registered)" if now is missing else render(now),
            }
        )
    return entries


def distance(before: tuple, after: tuple) -> int:
    """How many options differ (a rough count when options were registered in between)."""
    if len(before) != len(after):
        return abs(len(before) - len(after)) + sum(
            1 for a, b in zip(before, after, strict=False) if a is not b and a != b
        )
    return sum(1 for a, b in zip(before, after, strict=False) if a is not b and a != b)


_NO_MESH = {"None", "none", "AbstractMesh((), ())"}


def sentence(name: str, entries: list[DiffEntry]) -> str:
    """What changed in the context and what to do about it, for ``name``."""
    shown = "; ".join(f"{e['path']}: {e['before']} -> {e['after']}" for e in entries[:3])
    more = f" (and {len(entries) - 3} more)" if len(entries) > 3 else ""
    if all(e["path"] == "abstract_mesh_context_manager" and {e["before"], e["after"]} <= _NO_MESH for e in entries):
        # No mesh either way: JAX itself enters an empty abstract mesh while it evaluates
        # a transformation (jax.grad, jvp) of un-jitted code, not the program.
        return (
            f"`{name}` compiled again because the trace context JAX keys its cache on changed: {shown}. "
            "JAX sets an empty abstract mesh while it evaluates a transformation (jax.grad, jvp) "
            "outside any jit, so eager code under it compiles apart from the same code outside it; "
            "jit the function that takes the transformation to compile it once."
        )
    return (
        f"`{name}` traced again because the trace context JAX keys its cache on changed: {shown}{more}. "
        "A configuration option or context manager (a mesh, matmul precision, promotion mode, "
        "default device, x64) differed from the earlier call; set the option once at start-up, "
        "or call the function inside the same context every time (hoist the `with` block)."
    )


# ------------------------------------------------------------------ cache clears


class _ClearCounter(jaxcompat.ClearListener):
    """Counts ``jax.clear_caches()``, which clears every cache registered with JAX."""

    def __init__(self) -> None:
        super().__init__("cachewatch: counts jax.clear_caches()")
        self.clears = 0

    def cache_clear(self) -> None:
        self.clears += 1


# Registered at the first trace, not at import: without JAX's registry, a repeat after
# clear_caches() is left unknown.
_clear_counter = _ClearCounter()


def clears() -> int:
    """How many times ``jax.clear_caches()`` ran in this process since the first trace
    (0 when it cannot be told)."""
    _clear_counter.register()
    return _clear_counter.clears
