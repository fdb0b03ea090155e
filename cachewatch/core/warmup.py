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
    - a function compiled again from a line that compiled it before, with only lines of
      the same function compiling in between (a loop's body came back to it). A line of
      a function a library calls back (a model a sampler evaluates, a loss under an eager
      grad) comes back with the caller's line in between: no sign of a loop.

    A compile with no call site (no user code reached the compiler) is a visit of its own
    that never counts against a loop's body; lines whose source cannot be read are never
    taken for a loop. Not thread-safe: the caller serialises."""

    __slots__ = ("_compiled_at", "_visits")

    def __init__(self) -> None:
        self._compiled_at: dict[tuple[str, str], int] = {}  # (call site, function) -> its last visit
        self._visits: list[str] = []  # the call site of each visit: a run of compiles from one line

    def sees_work_again(self, call_site: str | None, function_hash: str, cause: str, module: str) -> bool:
        """Record one compile; True when it ends warm-up."""
        site = call_site or ""
        if not self._visits or site != self._visits[-1]:
            self._visits.append(site)  # another line reached the compiler
        if not site:
            return False
        visit = len(self._visits) - 1
        before = self._compiled_at.get((site, function_hash))
        self._compiled_at[(site, function_hash)] = visit
        if before is None:
            return False
        return remade_jit(cause, module) or (before < visit and _loop_body(site, self._visits[before + 1 : visit]))


def _loop_body(site: str, between: list[str]) -> bool:
    """Whether every line that compiled between two visits of ``site`` is in the same
    function as ``site``: the body of a loop around it."""
    home = enclosing_function(site)
    return home is not None and all(enclosing_function(other) == home for other in between if other)


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
