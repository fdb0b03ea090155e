"""Where a call's concrete arrays live, as JAX's compile cache sees them (committed or
not, on which devices, in which layout), and what changed between two calls: a
recompile whose signature is the same may be one of placement."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax

from ..core import _guard
from ..core.events import Cause, DiffEntry
from ..core.texts import shortened
from .signature import ParamLayout, diff_entry, user_arguments


@dataclasses.dataclass(frozen=True, slots=True)
class Placed:
    """Where one concrete array argument lives, as JAX's compile cache sees it: committed
    (``jax.device_put(x, device)``, a sharded array) or not, and its sharding."""

    path: str
    committed: bool
    where: str  # ``cpu:0``, or the sharding of an array over several devices
    # A committed array's layout (``major_to_minor=(1, 0)``): JAX compiles once per input
    # layout of committed arrays; empty where it is not read or does not count.
    layout: str = ""

    def describe(self) -> str:
        return f"{'committed to' if self.committed else 'uncommitted on'} {self.where}"


def _layout(value: Any) -> str:
    try:
        layout = value.format.layout
    except Exception:  # an array type without a format, or a backend without layouts
        return ""
    order = getattr(layout, "major_to_minor", None)
    if order is None:
        return ""
    tiling = getattr(layout, "tiling", ())
    return f"major_to_minor={tuple(order)}" + (f", tiling={tuple(tiling)}" if tiling else "")


def _where(value: Any) -> str:
    sharding = value.sharding
    found = sorted(str(d) for d in sharding.device_set)
    if len(found) == 1:
        return found[0]
    spec = getattr(sharding, "spec", None)
    shape = getattr(getattr(sharding, "mesh", None), "shape", None)
    text = f"{type(sharding).__name__}({spec}" + (f", mesh {dict(shape)}" if shape else "") + ")"
    return shortened(text, 160)


@_guard.guarded(default=(), where="signature.placement")
def placement(layout: ParamLayout, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[Placed, ...]:
    """The placement of every concrete array among a call's arguments, by argument path.
    Read only when a call compiled (it walks every leaf). Placement is a detail of an
    explanation: a bug here is counted and the event kept, with no placement."""
    placed: list[Placed] = []
    user = user_arguments(layout, args, kwargs)
    if user is not None:  # a filtering wrapper's: its non-array leaves are static, not placed
        items = [(name, False, value) for name, _, value in user]
    else:
        items = [(layout.arg_name(i), i in layout.static_argnums, v) for i, v in enumerate(args)]
        items += [(name, name in layout.static_argnames, kwargs[name]) for name in sorted(kwargs)]
    for name, static, value in items:
        if static:
            continue
        for keypath, leaf in jax.tree_util.tree_flatten_with_path(value)[0]:
            if isinstance(leaf, jax.core.Tracer):
                continue
            if not isinstance(leaf, jax.Array):  # a Python or NumPy value: placed by JAX, uncommitted
                if user is None:
                    placed.append(Placed(name + jax.tree_util.keystr(keypath), False, ""))
                continue
            try:
                committed = bool(leaf.committed)
                placed.append(
                    Placed(
                        name + jax.tree_util.keystr(keypath),
                        committed,
                        _where(leaf),
                        _layout(leaf) if committed else "",
                    )
                )
            except Exception:  # a deleted (donated) array, or an array type without these
                continue
    return tuple(placed)


def placement_diff(before: Sequence[Placed], after: Sequence[Placed]) -> list[DiffEntry]:
    """One entry per array argument whose commitment or placement changed."""
    old = {p.path: p for p in before}
    entries = []
    for now in after:
        was = old.get(now.path)
        if was is None or was == now:
            continue
        if was.committed != now.committed and was.where == now.where:
            change = "committed"
        elif was.where != now.where:
            change = "placement"
        elif was.layout != now.layout:
            entries.append(
                diff_entry(now.path, "layout", Cause.NEW_DEVICE_OR_SHARDING, was.layout or None, now.layout or None)
            )
            continue
        else:
            continue
        entries.append(diff_entry(now.path, change, Cause.NEW_DEVICE_OR_SHARDING, was.describe(), now.describe()))
    return entries
