"""Abstract signatures of traced calls, and the diff that explains a recompile.

A signature lists, per argument path (``batch['x']``, ``params[0].w``), what JAX keys
its cache on: shape, dtype and weak type for arrays, the value for static arguments,
and the pytree structure of each argument including whether it was passed by
position or by keyword. Two signatures are compared leaf by leaf; the first change in
argument order names the cause, and every change is listed in the diff.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import numbers
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import numpy as np

from ..core.events import Cause, DiffEntry, describe_array
from . import context as ctxmod

_MAX_REPR = 200


@dataclasses.dataclass(frozen=True, slots=True)
class Leaf:
    path: str
    arg: int  # index of the argument this leaf belongs to, in call order
    static: bool
    shape: tuple[int | str, ...] | None = None  # a symbolic dimension is its text
    dtype: str | None = None
    weak_type: bool | None = None
    value_repr: str | None = None
    # In-process identity of a static value: (type, hash), as JAX compares statics.
    value_key: Any = None
    # The array's abstract sharding when it names a mesh (an array sharded over devices,
    # a pmap's output): JAX traces again when it changes. None for a plain array.
    sharding: str | None = None

    def compare_key(self) -> tuple:
        if self.static:
            return ("static", self.value_key)
        return ("array", self.shape, self.dtype, self.weak_type, self.sharding)

    def describe(self) -> str:
        if self.static:
            return f"static {self.value_repr}"
        return describe_array(self.dtype, self.shape or (), bool(self.weak_type))

    def describe_sharding(self) -> str:
        return self.sharding or "unsharded (no mesh)"

    def as_dict(self) -> dict[str, Any]:
        if self.static:
            return {"path": self.path, "static": True, "value": self.value_repr}
        row = {
            "path": self.path,
            "static": False,
            "shape": list(self.shape or ()),
            "dtype": self.dtype,
            "weak_type": bool(self.weak_type),
        }
        if self.sharding is not None:  # left out for a plain array: its hash stays what it was
            row["sharding"] = self.sharding
        return row


@dataclasses.dataclass(frozen=True, slots=True)
class ArgStructure:
    name: str
    passed_as: str  # "positional" or "keyword"
    static: bool
    treedef: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class Signature:
    structure: tuple[ArgStructure, ...]
    leaves: tuple[Leaf, ...]
    # JAX's trace context when the signature was taken (``context.snapshot()``): part of
    # the key JAX looks up, compared by name when it differs.
    context: tuple = ()
    # Taken behind a wrapper that holds every non-array leaf static (ParamLayout.user).
    held_static: bool = False

    @property
    def key(self) -> tuple:
        return (self.structure, tuple((leaf.path, leaf.compare_key()) for leaf in self.leaves), self.context)

    @property
    def arg_key(self) -> tuple:
        """The key without the context: the arguments alone."""
        return (self.structure, tuple((leaf.path, leaf.compare_key()) for leaf in self.leaves))

    def as_json(self) -> tuple[dict[str, Any], ...]:
        return tuple(leaf.as_dict() for leaf in self.leaves)

    def stable_hash(self) -> str:
        """Same signature, same hash, in every process (static values by repr)."""
        payload = json.dumps([[s.as_dict() for s in self.structure], list(self.as_json())], sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:20]


@dataclasses.dataclass(frozen=True, slots=True)
class ParamLayout:
    """What is known at decoration time about how arguments map to names and statics."""

    positional_names: tuple[str, ...]
    varargs_name: str | None
    static_argnums: frozenset[int]
    static_argnames: frozenset[str]
    # The user's function's layout, where the jitted function is a library's wrapper that
    # splits the user's arguments into arrays and static leaves (Equinox's filter_jit):
    # signatures are then named by the user's parameters (``lr``, ``model.w``), not by the
    # wrapper's (``dynamic_nodonate['rest'][1]``).
    user: ParamLayout | None = None

    @classmethod
    def from_function(cls, fun: Any, static_argnums: Any, static_argnames: Any) -> ParamLayout:
        nums = _as_tuple(static_argnums)
        names = _as_tuple(static_argnames)
        positional: list[str] = []
        varargs = None
        try:
            params = list(inspect.signature(fun).parameters.values())
        except (TypeError, ValueError):
            params = []
        for p in params:
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                positional.append(p.name)
            elif p.kind is p.VAR_POSITIONAL:
                varargs = p.name
        # Mirror jax.jit: static_argnums and static_argnames imply each other where the
        # signature lets them.
        num_set = {n if n >= 0 else len(positional) + n for n in nums}
        name_set = set(names)
        for n in list(num_set):
            if 0 <= n < len(positional):
                name_set.add(positional[n])
        for name in list(name_set):
            if name in positional:
                num_set.add(positional.index(name))
        return cls(tuple(positional), varargs, frozenset(num_set), frozenset(name_set))

    def of_user_function(self, fun: Any) -> ParamLayout:
        """This layout, told the user's function behind it where it is a filtering wrapper's."""
        if self.positional_names != FILTER_JIT_PARAMS or self.static_argnums != {2}:
            return self
        return dataclasses.replace(self, user=ParamLayout.from_function(fun, None, None))

    def arg_name(self, index: int) -> str:
        if index < len(self.positional_names):
            return self.positional_names[index]
        base = self.varargs_name or "args"
        return f"{base}[{index - len(self.positional_names)}]"


def _as_tuple(value: Any) -> tuple:
    if value is None:
        return ()
    if isinstance(value, (int, str)):
        return (value,)
    return tuple(value)


def _short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # a user object whose repr fails must not break the trace
        text = f"<{type(value).__qualname__}>"
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."


def _static_leaf(path: str, arg: int, value: Any) -> Leaf:
    key: tuple[object, ...]
    try:
        key = (type(value).__module__, type(value).__qualname__, hash(value))
    except TypeError:
        key = (type(value).__qualname__, id(value))
    return Leaf(path=path, arg=arg, static=True, value_repr=_short_repr(value), value_key=key)


# Statics of at most this many parts are looked into for flattened pytrees.
_MAX_STATIC_PARTS = 8


def _static_leaves(path: str, arg: int, value: Any) -> list[Leaf]:
    """A static argument's leaves: its value, or, where it holds pytrees flattened to
    ``(leaves, treedef)`` pairs, each pair's structure and each of its leaves by path.
    A wrapper that holds every non-array leaf of its arguments static passes them so
    (Equinox's filter_jit, in one argument ``static``): a diff then names the field that
    changed (``static[1].temperature``), not the whole argument."""
    parts = _flattened_parts(value, "")
    if not parts:
        return [_static_leaf(path, arg, value)]
    found = []
    for where, (flat, treedef) in parts:
        try:
            rebuilt = jax.tree_util.tree_flatten_with_path(treedef.unflatten(flat))[0]
        except Exception:  # a node that cannot be rebuilt from its leaves: the value whole
            return [_static_leaf(path, arg, value)]
        found.append(_static_leaf(f"{path}{where} (structure)", arg, treedef))
        found.extend(_static_leaf(path + where + jax.tree_util.keystr(k), arg, leaf) for k, leaf in rebuilt)
    return found


def _flattened_parts(value: Any, where: str) -> list[tuple[str, tuple[tuple, Any]]] | None:
    """The ``(leaves, treedef)`` pairs ``value`` is made of (itself, or a tuple of them,
    nested), each with its index path; None when it is anything else."""
    if not isinstance(value, tuple) or not value or len(value) > _MAX_STATIC_PARTS:
        return None
    if len(value) == 2 and isinstance(value[1], jax.tree_util.PyTreeDef) and isinstance(value[0], tuple):
        return [(where, value)] if value[1].num_leaves == len(value[0]) else None
    parts = []
    for i, item in enumerate(value):
        inner = _flattened_parts(item, f"{where}[{i}]")
        if inner is None:
            return None
        parts.extend(inner)
    return parts


def _array_leaf(path: str, arg: int, value: Any) -> Leaf:
    aval = getattr(value, "aval", None)
    if aval is None:
        try:
            aval = jax.typeof(value)
        except TypeError:  # not a JAX type: a static leaf
            return _static_leaf(path, arg, value)
    return _aval_leaf(path, arg, aval, abstract_sharding(aval))


def _aval_leaf(path: str, arg: int, aval: Any, sharding: str | None = None) -> Leaf:
    """The leaf of an abstract value: its shape, dtype and weak type."""
    # A symbolic dimension (jax.export's shape polymorphism: "b", "2*b") is kept as its text.
    shape = tuple(int(d) if isinstance(d, numbers.Integral) else str(d) for d in getattr(aval, "shape", ()))
    dtype = getattr(aval, "dtype", None)
    return Leaf(
        path=path,
        arg=arg,
        static=False,
        shape=shape,
        dtype=str(dtype) if dtype is not None else None,
        weak_type=bool(getattr(aval, "weak_type", False)),
        sharding=sharding,
    )


def abstract_sharding(aval: Any) -> str | None:
    """The abstract sharding JAX keys its trace on (``aval.sharding``: a mesh of named
    axes and a partition spec), as text, when it names a mesh; None otherwise."""
    sharding = getattr(aval, "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    names = getattr(mesh, "axis_names", None)
    if not names:
        return None
    sizes = getattr(mesh, "axis_sizes", None) or ()
    axes = ", ".join(f"{n}={s}" for n, s in zip(names, sizes, strict=False)) if sizes else ", ".join(map(str, names))
    return f"mesh({axes}) {getattr(sharding, 'spec', '')}"


# The parameters of the function Equinox's filter_jit hands jax.jit (``static`` static):
# the user's arrays in two dicts by donation, every other leaf of theirs in ``static``.
FILTER_JIT_PARAMS = ("dynamic_donate", "dynamic_nodonate", "static")


def user_arguments(
    layout: ParamLayout, args: Sequence[Any], kwargs: dict[str, Any]
) -> list[tuple[str, str, Any]] | None:
    """The user's own arguments behind a filtering wrapper's (see ``ParamLayout.user``),
    as (name, passed as, value), each put back together from its array and static leaves,
    the function itself first as ``fun`` (a module called as the function holds arrays);
    None where the wrapper's arguments are not of the shape it is known by (another
    version's layout: the signature is then named as the wrapper's)."""
    user = layout.user
    if user is None or kwargs or len(args) != 3:
        return None
    donate, nodonate, static = args
    try:
        dynamic = {**donate, **nodonate}
        static_fun, static_first, static_rest = static
        first = _combined(dynamic["first"], static_first)
        rest, user_kwargs = _combined(dynamic["rest"], static_rest)
        fun = _combined(dynamic["fun"], static_fun)
        positional: tuple[Any, ...] = (first, *tuple(rest))
    except Exception:  # any other layout: named as the wrapper's
        return None
    # Equinox adds a None after the user's arguments (so that there is always a first).
    user_args, dummy = positional[:-1], positional[-1]
    if dummy is not None or not isinstance(user_kwargs, dict):
        return None
    fun_name = "__fun__" if "fun" in user.positional_names or "fun" in user_kwargs else "fun"
    items = [(fun_name, "positional", fun)]
    items += [(user.arg_name(i), "positional", value) for i, value in enumerate(user_args)]
    items += [(name, "keyword", user_kwargs[name]) for name in sorted(user_kwargs)]
    return items


def _combined(dynamic: Sequence[Any], static: tuple[tuple[Any, ...], Any]) -> Any:
    """One argument put back together from its array leaves and its other leaves."""
    static_leaves, treedef = static
    leaves = [d if s is None else s for d, s in zip(dynamic, static_leaves, strict=True)]
    return treedef.unflatten(leaves)


def _filtered_leaf(path: str, arg: int, value: Any) -> Leaf:
    """A leaf as a filtering wrapper holds it: an array (Equinox's ``is_array``: a JAX or
    NumPy array, a tracer) is traced by its type, any other value is static."""
    if isinstance(value, (jax.Array, np.ndarray, np.generic)):
        return _array_leaf(path, arg, value)
    return _static_leaf(path, arg, value)


def build(layout: ParamLayout, args: Sequence[Any], kwargs: dict[str, Any]) -> Signature:
    """Signature of one traced call, from the tracers and static values the body receives."""
    user = user_arguments(layout, args, kwargs)
    if user is not None:
        found = _of_items([(name, passed_as, False, value) for name, passed_as, value in user], _filtered_leaf)
        return dataclasses.replace(found, held_static=True)
    items: list[tuple[str, str, bool, Any]] = []
    for i, value in enumerate(args):
        items.append((layout.arg_name(i), "positional", i in layout.static_argnums, value))
    for name in sorted(kwargs):
        items.append((name, "keyword", name in layout.static_argnames, kwargs[name]))
    return _of_items(items, _array_leaf)


def _of_items(items: Sequence[tuple[str, str, bool, Any]], leaf_of: Callable[[str, int, Any], Leaf]) -> Signature:
    """The signature of arguments given as (name, passed as, static, value), each
    non-static one's leaves read by ``leaf_of``."""
    structure: list[ArgStructure] = []
    leaves: list[Leaf] = []
    for index, (name, passed_as, static, value) in enumerate(items):
        if static:
            structure.append(ArgStructure(name, passed_as, True, "*"))
            leaves.extend(_static_leaves(name, index, value))
            continue
        flat, treedef = jax.tree_util.tree_flatten_with_path(value)
        structure.append(ArgStructure(name, passed_as, False, str(treedef)))
        for keypath, leaf in flat:
            leaves.append(leaf_of(name + jax.tree_util.keystr(keypath), index, leaf))
    return Signature(tuple(structure), tuple(leaves), ctxmod.snapshot())


def build_operands(args: Sequence[Any], params: dict[str, Any]) -> Signature:
    """Signature of one eager primitive: its operands, and its parameters as static values
    (``broadcast_in_dim`` compiles once per target ``shape``, which is a parameter)."""
    structure: list[ArgStructure] = []
    leaves: list[Leaf] = []
    for index, value in enumerate(args):
        name = f"operands[{index}]"
        structure.append(ArgStructure(name, "positional", False, "*"))
        leaves.append(_array_leaf(name, index, value))
    for offset, name in enumerate(sorted(params)):
        structure.append(ArgStructure(name, "keyword", True, "*"))
        leaves.append(_static_leaf(name, len(args) + offset, params[name]))
    return Signature(tuple(structure), tuple(leaves), ctxmod.snapshot())


def from_avals(arg_names: Sequence[str], avals: Sequence[Any]) -> Signature:
    """Signature from the abstract values JAX lowers, named by JAX's own argument paths
    (what is left when the call's arguments are no longer at hand)."""
    structure: list[ArgStructure] = []
    leaves: list[Leaf] = []
    for index, aval in enumerate(avals):
        name = arg_names[index] if index < len(arg_names) and arg_names[index] else f"args[{index}]"
        structure.append(ArgStructure(name, "positional", False, "*"))
        leaves.append(_aval_leaf(name, index, aval))
    return Signature(tuple(structure), tuple(leaves), ctxmod.snapshot())


def with_program(sig: Signature, program: str) -> Signature:
    """``sig`` with what was compiled as one more static argument, ``(program)``: a compile
    without a trace of its own sees no static argument, and another program at the same
    argument types (another shape drawn, another backward pass) is another variant."""
    index = len(sig.structure)
    return Signature(
        (*sig.structure, ArgStructure("(program)", "positional", True, "*")),
        (*sig.leaves, _static_leaf("(program)", index, program)),
        sig.context,
    )


# ---------------------------------------------------------------------------- diff

_LEAF_CAUSE = {
    "shape": Cause.NEW_SHAPE,
    "dtype": Cause.NEW_DTYPE,
    "weak_type": Cause.WEAK_TYPE,
    "static": Cause.NEW_STATIC_VALUE,
    "sharding": Cause.NEW_DEVICE_OR_SHARDING,
}


def diff(before: Signature, after: Signature) -> list[DiffEntry]:
    """Every difference between two signatures: pytree structure first, then the leaves'
    types, each in argument order.

    Each entry: ``path``, ``change`` (shape, dtype, weak_type, static, added, removed,
    passed_as, structure), ``cause``, ``before`` and ``after`` (readable), and ``axes``
    for a shape change of equal rank.
    """
    entries: list[DiffEntry] = []
    old_args = {s.name: (i, s) for i, s in enumerate(before.structure)}
    old_leaves = {leaf.path: leaf for leaf in before.leaves}
    new_by_arg = _leaves_by_arg(after)
    old_by_arg = _leaves_by_arg(before)
    for index, arg in enumerate(after.structure):
        old = old_args.get(arg.name)
        if old is None:
            entries.append(diff_entry(arg.name, "added", Cause.NEW_STRUCTURE, None, _arg_summary(after, index)))
            continue
        old_index, old_arg = old
        old_arg_leaves = {leaf.path: leaf for leaf in old_by_arg.get(old_index, [])}
        entries.extend(_arg_diff(old_arg, arg, old_arg_leaves, new_by_arg.get(index, [])))
        entries.extend(_leaf_diffs(old_index, old_leaves, old_arg_leaves, new_by_arg.get(index, [])))
    new_names = {arg.name for arg in after.structure}
    for index, arg in enumerate(before.structure):
        if arg.name not in new_names:
            entries.append(diff_entry(arg.name, "removed", Cause.NEW_STRUCTURE, _arg_summary(before, index), None))
    if after.held_static:
        for entry in entries:
            if entry["change"] == "static":
                entry["held_static"] = True
    # JAX's cache compares the pytree before the types of its leaves: structure changes
    # lead (the first of them names the cause), the rest keep argument order.
    entries.sort(key=lambda entry: entry["cause"] != Cause.NEW_STRUCTURE)
    return entries


def _leaves_by_arg(sig: Signature) -> dict[int, list[Leaf]]:
    by_arg: dict[int, list[Leaf]] = {}
    for leaf in sig.leaves:
        by_arg.setdefault(leaf.arg, []).append(leaf)
    return by_arg


def _arg_diff(
    old_arg: ArgStructure, arg: ArgStructure, old_arg_leaves: dict[str, Leaf], new_leaves: list[Leaf]
) -> list[DiffEntry]:
    """How one argument present in both signatures changed as a whole: the way it was
    passed, and its pytree when its leaves' paths stayed the same."""
    entries = []
    if old_arg.passed_as != arg.passed_as:
        entries.append(diff_entry(arg.name, "passed_as", Cause.NEW_STRUCTURE, old_arg.passed_as, arg.passed_as))
    if old_arg.treedef != arg.treedef and set(old_arg_leaves) == {leaf.path for leaf in new_leaves}:
        was, now = _where_differ(old_arg.treedef, arg.treedef)
        entries.append(diff_entry(arg.name, "structure", Cause.NEW_STRUCTURE, was, now))
    return entries


def _leaf_diffs(
    old_index: int, old_leaves: dict[str, Leaf], old_arg_leaves: dict[str, Leaf], new_leaves: list[Leaf]
) -> list[DiffEntry]:
    """The leaves of one argument added, changed (see ``_leaf_entry``) and removed."""
    entries = []
    for leaf in new_leaves:
        prior = old_leaves.get(leaf.path)
        if prior is None or prior.arg != old_index:
            entries.append(diff_entry(leaf.path, "added", Cause.NEW_STRUCTURE, None, leaf.describe()))
            continue
        entry = _leaf_entry(prior, leaf)
        if entry is not None:
            entries.append(entry)
    new_paths = {leaf.path for leaf in new_leaves}
    for path, prior in old_arg_leaves.items():
        if path not in new_paths:
            entries.append(diff_entry(path, "removed", Cause.NEW_STRUCTURE, prior.describe(), None))
    return entries


def _leaf_entry(prior: Leaf, leaf: Leaf) -> DiffEntry | None:
    """The entry of a leaf that changed, named by its most telling change (all of them
    under ``changes``), with the ``axes`` that changed size; None when it did not change."""
    changes = _leaf_changes(prior, leaf)
    if not changes:
        return None
    change = changes[0]
    if change == "static" and prior.static and leaf.static:
        entry = diff_entry(leaf.path, change, _LEAF_CAUSE[change], prior.value_repr, leaf.value_repr)
    elif change == "static":  # a static value then an array, or back: each side as it was
        entry = diff_entry(leaf.path, change, _LEAF_CAUSE[change], prior.describe(), leaf.describe())
    elif change == "sharding":
        entry = diff_entry(leaf.path, change, _LEAF_CAUSE[change], prior.describe_sharding(), leaf.describe_sharding())
    else:
        entry = diff_entry(leaf.path, change, _LEAF_CAUSE[change], prior.describe(), leaf.describe())
    entry["changes"] = changes
    if change == "shape" and prior.shape is not None and leaf.shape is not None and len(prior.shape) == len(leaf.shape):
        entry["axes"] = [a for a, (x, y) in enumerate(zip(prior.shape, leaf.shape, strict=False)) if x != y]
    return entry


def diff_entry(path: str, change: str, cause: Cause, before: Any, after: Any) -> DiffEntry:
    return {"path": path, "change": change, "cause": str(cause), "before": before, "after": after}


# Where an element of a treedef's text opens: a named attribute (``('temperature', ``),
# a dict, a list of children.
_ELEMENT_OPENS = ("('", "{", "[")
_NAME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_."


def _where_differ(before: str, after: str, limit: int = 160) -> tuple[str, str]:
    """Two pytree structures' texts, each cut to the element where they differ. A
    treedef's text holds its nodes' static data (a Flax NNX module's Python attributes, a
    dataclass's static fields, dict keys) and runs to thousands of characters; its first
    160 say nothing of what changed."""
    if len(before) <= limit and len(after) <= limit:
        return before, after
    start = len(os.path.commonprefix([before, after]))
    tail = len(os.path.commonprefix([before[start:][::-1], after[start:][::-1]]))
    opens = [before.rfind(mark, max(0, start - 100), start) for mark in _ELEMENT_OPENS]
    if max(opens) >= 0:
        start = max(opens)
    elif (call := before.rfind("(", max(0, start - 100), start)) >= 0:
        # An object's text, ``Name(field=...``: from its name.
        start = len(before[:call].rstrip(_NAME_CHARS))
    else:
        start = max(0, start - 40)
    return _cut(before, start, len(before) - tail, limit), _cut(after, start, len(after) - tail, limit)


def _cut(text: str, start: int, end: int, limit: int) -> str:
    """``text`` from ``start`` to the close of the element the difference ends in (or
    ``limit`` characters), with "..." where cut."""
    closes = [i for i in (text.find(mark, end) for mark in ("))", "}", "]")) if i >= 0]
    stop = min(min(closes, default=len(text)) + 2, len(text), start + limit)
    return ("..." if start else "") + text[start:stop] + ("..." if stop < len(text) else "")


def _arg_summary(sig: Signature, index: int) -> str:
    leaves = [leaf for leaf in sig.leaves if leaf.arg == index]
    if len(leaves) == 1:
        return leaves[0].describe()
    return f"{len(leaves)} leaves"


def _leaf_changes(before: Leaf, after: Leaf) -> list[str]:
    """What differs between two leaves, most telling first (shape, weak type, dtype)."""
    if before.static or after.static:
        return [] if before.compare_key() == after.compare_key() else ["static"]
    changes = []
    if before.shape != after.shape:
        changes.append("shape")
    if before.weak_type != after.weak_type:
        changes.append("weak_type")
    if before.dtype != after.dtype:
        changes.append("dtype")
    if before.sharding != after.sharding:
        changes.append("sharding")
    return changes


def _kind_changed(before: Leaf, after: Leaf, found: list[str]) -> int:
    """1 when a leaf changed in kind (dtype, weak type, rank), not only in its sizes."""
    if "dtype" in found or "weak_type" in found:
        return 1
    if "shape" in found and len(before.shape or ()) != len(after.shape or ()):
        return 1
    return 0


def closest(candidates: Iterable[Signature], target: Signature) -> tuple[Signature | None, list[DiffEntry]]:
    """The earlier signature closest to ``target``, and the diff against it.

    Same pytree structure first, then fewest differing leaves; among those, the one whose
    leaves differ least in kind (a size that changed, rather than a dtype, a weak type or a
    rank: eager code alternating an int32 and a float32 operand that both change length
    is a new shape, not a new dtype); ties go to the most recent signature. A candidate
    of the same structure is scored leaf by leaf without building its diff (a function
    compiled for many shapes has many candidates); the diff is built once, for the winner.
    """
    target_paths = [leaf.path for leaf in target.leaves]
    best: tuple[tuple[int, int, int, int], Signature, list[DiffEntry] | None] | None = None
    for candidate in reversed(list(candidates)):
        entries: list[DiffEntry] | None = None
        if candidate.structure == target.structure and [leaf.path for leaf in candidate.leaves] == target_paths:
            differing = changes = kinds = 0
            for before, after in zip(candidate.leaves, target.leaves, strict=False):
                found = _leaf_changes(before, after)
                if found:
                    differing += 1
                    changes += len(found)
                    kinds += _kind_changed(before, after, found)
            score = (0, differing, changes, kinds)
        else:
            entries = diff(candidate, target)
            score = (1, len(entries), sum(len(e.get("changes", (1,))) for e in entries), 0)
        if best is None or score < best[0]:
            best = (score, candidate, entries)
            if score == (0, 0, 0, 0):
                break  # an identical signature: nothing can be closer
    if best is None:
        return None, []
    return best[1], best[2] if best[2] is not None else diff(best[1], target)


# ---------------------------------------------------------------------- placement
