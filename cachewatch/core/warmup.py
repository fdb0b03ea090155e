"""The run's warm-up (its set-up phase) and the one rule for when it ends.

Capture asks it as each compile is recorded (``record/current.py``: the ``warmup`` flag
of the events); the store's readers ask it again for runs whose events were recorded
before the rule saw them (``storms/steady.py``). Both feed compiles in time order:

    watch = WarmupWatch()
    for c in compiles:
        if watch.sees_work_again(c.call_site, c.function_hash, c.cause, c.module):
            ...warm-up ended at c...

Not to be confused with compiling *ahead* (``cachewatch.warmup``, ``run --warmup-from``:
kind ``Kind.AHEAD``), which compiles before a call needs it and is never a recompile.
"""

from __future__ import annotations

import ast
import functools
import linecache
import re
from collections.abc import Mapping, Sequence

from . import jaxcompat
from .events import OP_BY_OP_MODULE, Cause

# A compile of a jit made afresh: the code that makes the jit ran again.
_REMADE = frozenset({Cause.NEW_FUNCTION_OBJECT, Cause.CACHE_CLEARED})


def remade_jit(cause: str, module: str) -> bool:
    """A jit of the user's or of a library compiled again because it was made afresh or
    its cache cleared. Not a primitive run op by op, nor one of JAX's own jits, which JAX
    lowers afresh under an eager transformation within one call (a sampler's set-up)."""
    own = module == OP_BY_OP_MODULE or module.split(".", 1)[0] in ("jax", "jaxlib")
    return cause in _REMADE and not own


class WarmupWatch:
    """Warm-up ends at the first compile that shows the program doing its work again:

    - a jit made afresh (:func:`remade_jit`) compiled again from a line that compiled it
      before (the code that makes it ran again);
    - a function compiled again from the same user frames as before for a static value
      made anew (``remade_static``: the same text, compared by identity: the branches of
      an eager ``lax.cond`` written as lambdas in a loop's body): the code that makes that
      value ran again, unless one call mapping it over a pytree's leaves brought it back
      (:func:`one_map_call`);
    - a function compiled again from the same user frames as before (the same line,
      reached through the same lines further out), where some function around it left
      that frame's line and came back to it, with every compile in between inside that
      function: a loop's body came back to it. A line of a function a library calls back
      (a model a sampler evaluates, a loss under an eager grad) comes back with the
      library's own compiles in between, made from the caller's one line: no sign of a
      loop. A helper called twice in one step from two lines is reached through two
      different frames: no sign of one either.

    The user's frames are the call site's ``stack`` (``{"site": "file:line"}`` from the
    call site outwards); without one, the call site alone. A compile with no call site
    (no user code reached the compiler) never counts against a loop's body; lines whose
    source cannot be read are never taken for a loop. Not thread-safe: the caller
    serialises."""

    __slots__ = ("_compiles", "_last")

    def __init__(self) -> None:
        self._compiles: list[tuple[str, ...]] = []  # the user's lines of each compile, innermost first
        self._last: dict[tuple[tuple[str, ...], str], int] = {}  # (lines, function) -> its last compile

    def sees_work_again(
        self,
        call_site: str | None,
        function_hash: str,
        cause: str,
        module: str,
        stack: Sequence[Mapping[str, str]] | None = None,
        remade_static: bool = False,
    ) -> bool:
        """Record one compile; True when it ends warm-up. ``remade_static``: its changed
        static values were made anew (``core.texts.static_made_anew`` of its diff)."""
        lines = tuple(frame["site"] for frame in stack if frame.get("site")) if stack else ()
        if not lines and call_site:
            lines = (str(call_site),)
        self._compiles.append(lines)
        if not lines:
            return False
        now = len(self._compiles) - 1
        before = self._last.get((lines, function_hash))
        self._last[(lines, function_hash)] = now
        if before is None:
            return False
        if remade_jit(cause, module) or (remade_static and not one_map_call(stack or ())):
            return True
        between = self._compiles[before + 1 : now]
        return len(between) <= _LOOP_BODY_MAX and any(_came_back(line, between) for line in lines)


# Compiles between two of one line that are still read as a loop's body: past this, the
# two are too far apart to say (and the reading stays cheap in a warm-up that never ends).
_LOOP_BODY_MAX = 1024


def _came_back(line: str, between: list[tuple[str, ...]]) -> bool:
    """Whether every compile in ``between`` ran inside the function around ``line`` and
    one of them at another of its lines: that function left ``line`` and came back."""
    home = enclosing_function(line)
    if home is None:
        return False
    moved = False
    for lines in between:
        if not lines:
            continue  # no user code reached the compiler
        inside = [other for other in lines if enclosing_function(other) == home]
        if not inside:
            return False
        # Moved when the function was at none of its frames' lines at ``line`` (a lambda or
        # comprehension of the same function can stand on the stack beside it).
        moved = moved or line not in inside
    return moved


@functools.lru_cache(maxsize=4096)
def enclosing_function(call_site: str) -> tuple[str, str, int] | None:
    """The innermost function around a ``file:line`` call site (file, name, first line),
    ``<module>`` at a file's top level, or None when the source cannot be read (a store
    read on another host)."""
    file, _, line = call_site.rpartition(":")
    if not file or not line.isdigit():
        return None
    number = int(line)
    around = [(start, name) for name, start, stop in _functions_in(file) if start <= number <= stop]
    if not around:
        return (file, "<module>", 0) if _functions_in(file) or linecache.getlines(file) else None
    start, name = max(around)
    return (file, name, start)


@functools.lru_cache(maxsize=128)
def _functions_in(file: str) -> tuple[tuple[str, int, int], ...]:
    """Every function defined in a source file: name, first and last line. Parsed once
    per file, and only while a warm-up is judged."""
    try:
        tree = ast.parse("".join(linecache.getlines(file)))
    except (SyntaxError, ValueError):
        return ()
    return tuple(
        (node.name, node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    )


@functools.lru_cache(maxsize=128)
def loops_in(file: str) -> tuple[tuple[int, int], ...]:
    """Every ``for`` and ``while`` of a source file: first and last line (none when its
    source cannot be read, a store read on another host)."""
    try:
        tree = ast.parse("".join(linecache.getlines(file)))
    except (SyntaxError, ValueError):
        return ()
    return tuple(
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor))
    )


def in_a_loop(call_site: str) -> bool:
    """Whether a ``file:line`` lies inside a ``for`` or ``while`` of its file."""
    file, _, line = call_site.rpartition(":")
    if not file or not line.isdigit():
        return False
    number = int(line)
    return any(start <= number <= stop for start, stop in loops_in(file))


def innermost_loop(call_site: str) -> tuple[str, int, int] | None:
    """The innermost ``for`` or ``while`` around a ``file:line`` (file, first and last
    line), or None outside any loop or where the source cannot be read."""
    file, _, line = call_site.rpartition(":")
    if not file or not line.isdigit():
        return None
    number = int(line)
    around = [(start, stop) for start, stop in loops_in(file) if start <= number <= stop]
    if not around:
        return None
    start, stop = max(around)
    return (file, start, stop)


def one_map_call(stack: Sequence[Mapping[str, str]]) -> bool:
    """Whether a compile that came back to its lines came back within one call that maps
    a function over a pytree's leaves (``jax.tree.map``, ``tree_util.tree_map``, a
    library's tree utilities): one of its user frames calls into a pytree module, and none
    of them lies in a ``for`` or ``while``, so nothing but the map over the leaves brought
    the code back. Eager code over a pytree whose leaves differ in shape compiles its
    primitives once per shape in one call."""
    into_a_tree = any(_is_pytree_module(frame.get("into", "")) for frame in stack)
    return into_a_tree and not any(in_a_loop(frame.get("site", "")) for frame in stack)


def _is_pytree_module(module: str) -> bool:
    """A module of pytree utilities: ``jax._src.tree``, ``jax._src.tree_util``,
    ``optax.tree_utils._tree_math``, dm-tree's ``tree``."""
    return any(part.strip("_").startswith("tree") for part in module.split(".")) if module else False


# The user's frames kept with each compile (capture/identity.py): the loop is rarely deeper.
USER_FRAMES = 8


def ran_once(stack: Sequence[Mapping[str, str]]) -> bool:
    """Whether the user's frames of a compile show code that ran once: every frame whole
    (fewer than :data:`USER_FRAMES`, the outermost at a file's top level), none in a ``for``
    or ``while`` or on a line with a comprehension or a ``map``, and none but the innermost
    calling into a library (which may call the user's code back in a loop of its own), or
    else into one of JAX's transformations (``jaxcompat.TRANSFORMATION_MODULES``).
    The innermost frame's call into a library is one call, whatever the library does in it."""
    if not stack or len(stack) >= USER_FRAMES:
        return False
    outermost = enclosing_function(stack[-1]["site"])
    if outermost is None or outermost[1] != "<module>":
        return False
    for i, frame in enumerate(stack):
        site = frame["site"]
        file, _, line = site.rpartition(":")
        text = linecache.getline(file, int(line)) if line.isdigit() else ""
        if not text or in_a_loop(site) or " for " in text or _maps(text):
            return False
        if i and frame.get("into") and frame["into"] not in jaxcompat.TRANSFORMATION_MODULES:
            return False
    return True


# ``map(``, ``jax.tree.map(``, ``tree_map(``, ``lax.map(``: a call per item or leaf. Not
# ``vmap(``, ``pmap(``, ``xmap(`` or ``shard_map(``: transformations, which trace once.
_MAP_CALL = re.compile(r"(\w*)map\(")
_TRANSFORMING_MAPS = frozenset({"v", "p", "x", "shard_"})


def _maps(text: str) -> bool:
    return any(prefix not in _TRANSFORMING_MAPS for prefix in _MAP_CALL.findall(text))
