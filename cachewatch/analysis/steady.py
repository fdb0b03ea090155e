"""When a run's warm-up ended and when it was last seen working, judged from its events.

Capture flags a compile as warm-up until the user's own jitted code runs again. A program
whose repeated work is all in library jits and eager code (a NumPyro ``svi.run`` per
step, ``jnp.linalg.cholesky`` at many sizes) never gives that sign, so the store's flags
alone would keep it in warm-up to the end. Here warm-up also ends at the first compile
that shows the program doing its work again:

- a jit compiled again because it was made afresh (``new_function_object``,
  ``cache_cleared``) from a line of user code that compiled it before: the code that
  creates it ran again (a primitive run op by op, or one of JAX's own jits that JAX
  lowers afresh under an eager transformation, is not such a jit);
- a function compiled again from a line of user code that compiled it before, after
  other lines of the same function compiled in between: the program came back to that
  line (a loop's body).

Set-up from one line (``model.init``) compiles many shapes of a few library jits from one
place, and stays warm-up.

    steady = steady.recompiles(conn, filters)        # what storms are made of
    warmup = steady.warmup_compiles(conn, run_id)    # what the run's summary counts
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import functools
import linecache
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from ..core.events import OP_BY_OP_MODULE, Cause
from ..store import evidence
from ..store.columns import Filters
from ..store.evidence import Recompile

# A compile of a jit made afresh: the code that makes the jit ran again.
_REMADE = frozenset({Cause.NEW_FUNCTION_OBJECT, Cause.CACHE_CLEARED})


def steady_since(conn: sa.Connection, run_ids: Iterable[str]) -> dict[str, float]:
    """Per run, the time its flagged warm-up is judged over (runs whose flags stand are left out)."""
    per_run: dict[str, list[evidence.WarmupCompile]] = collections.defaultdict(list)
    for row in evidence.warmup_compiles_of(conn, list(run_ids)):
        per_run[row.run_id].append(row)
    found = {}
    for run_id, rows in per_run.items():
        ended = warmup_end(rows)
        if ended is not None:
            found[run_id] = ended
    return found


def warmup_end(rows: Iterable[Any]) -> float | None:
    """The timestamp of the first compile (``timestamp``, ``function_hash``, ``cause``,
    ``call_site``, ``module``, in time order) that shows the program doing its work again,
    or None. A primitive run op by op or one of JAX's own jits under an eager
    transformation is lowered from a new jaxpr within one call (``new_function_object``
    in a model's set-up): no sign of a loop. A line is come back to in a loop when the
    lines that compiled in between are in the same function as it (the loop's body); a
    line of a function the library calls back (a model evaluated by a sampler's set-up,
    a loss under an eager grad) comes back with the caller's line in between, and that
    is no sign of a loop. Lines whose source cannot be read are never taken for one."""
    compiled_at: dict[tuple[str, str], int] = {}  # (call site, function) -> index of its last visit
    visits: list[str] = []  # the call site of each visit: a run of compiles from one line
    for row in rows:
        site = row.call_site or ""
        if not visits or site != visits[-1]:
            visits.append(site)  # another line of user code reached the compiler
        if not site:
            continue
        visit = len(visits) - 1
        key = (site, row.function_hash)
        before = compiled_at.get(key)
        compiled_at[key] = visit
        if before is None:
            continue
        remade = row.cause in _REMADE and _made_by_user_or_library(getattr(row, "module", ""))
        if remade or (before < visit and _loop_body(site, visits[before + 1 : visit])):
            return float(row.timestamp)
    return None


def _loop_body(site: str, between: list[str]) -> bool:
    """Whether every line that compiled between two visits of ``site`` is in the same
    function as ``site``: the body of a loop around it."""
    home = enclosing_function(site)
    return home is not None and all(enclosing_function(other) == home for other in between if other)


def enclosing_function(call_site: str) -> tuple[str, str, int] | None:
    """The innermost function around a ``file:line`` call site (file, name, first line),
    or None when the source cannot be read (a store read on another host)."""
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
    """Every function defined in a source file: name, first and last line."""
    try:
        tree = ast.parse("".join(linecache.getlines(file)))
    except (SyntaxError, ValueError):
        return ()
    return tuple(
        (node.name, node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    )


def _made_by_user_or_library(module: str) -> bool:
    """A jit that the user's code or a library makes: not a primitive run op by op, nor one
    of JAX's own jits, which JAX lowers afresh under an eager transformation within one
    call (a sampler's set-up)."""
    return module != OP_BY_OP_MODULE and module.split(".", 1)[0] not in ("jax", "jaxlib")


def recompiles(
    conn: sa.Connection,
    filters: Filters,
    function_hashes: list[str] | None = None,
    *,
    diffs: bool = True,
    dense: tuple[int, float] | None = None,
) -> list[Recompile]:
    """Recompiles made after warm-up, by function, run and time: what storms are made of.
    Warm-up is the store's flags, ended where :func:`steady_since` says the program was
    already repeating its work. Without ``diffs``, and ``dense``: see
    evidence.recompiles_past_first."""
    found = evidence.recompiles_past_first(conn, filters, function_hashes, diffs=diffs, dense=dense)
    since = steady_since(conn, {r.run_id for r, warmup in found if warmup})
    return [r for r, warmup in found if not warmup or (r.run_id in since and r.timestamp >= since[r.run_id])]


def warmup_compiles(conn: sa.Connection, run_id: str) -> int:
    """Compiles of the run that belong to its warm-up, as storms judge it."""
    return evidence.count_warmup_compiles(conn, run_id, before=steady_since(conn, [run_id]).get(run_id))


@dataclasses.dataclass
class Work:
    """What a run's events say about it going on: when it was last seen working (the end
    of its latest compile, or its latest call statistics that report calls served from
    the cache, with the collection after which those calls came: see
    :class:`evidence.SeenWorking`), and per function the spans of its statistics in which
    the cache served it (more calls than compiles of that function; each span starts at
    the run's collection before it, after which its calls were made), with the calls each
    statistics row counted (``counted``: per function, its rows' time stamps and calls),
    from which the calls after a compile are told exactly."""

    seen: dict[str, evidence.SeenWorking]
    served: dict[tuple[str, str], list[tuple[float, float]]]
    counted: dict[tuple[str, str], list[tuple[float, int]]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(list)
    )

    def last_after(self, run_id: str, moment: float) -> float | None:
        """When the run was last seen working, from evidence of work after ``moment``."""
        seen = self.seen.get(run_id)
        return None if seen is None else seen.after(moment)

    def calls(self, run_id: str, function_hash: str, until: float | None = None) -> int:
        """The function's calls the run counted (in statistics written by ``until``)."""
        rows = self.counted.get((run_id, function_hash), ())
        return sum(calls for stamp, calls in rows if until is None or stamp <= until)

    def heard_until(self, until: float | None) -> None:
        """Keep only what the run had written by ``until`` (a report judged as of then)."""
        if until is None:
            return
        self.seen = {run: _heard_until(seen, until) for run, seen in self.seen.items()}
        self.served = {key: [span for span in spans if span[1] <= until] for key, spans in self.served.items()}

    def served_after(self, run_id: str, function_hashes: Iterable[str], after: float) -> bool:
        """Whether the cache served one of the functions in statistics covering only time after ``after``."""
        return any(start >= after for h in function_hashes for start, _ in self.served.get((run_id, h), ()))


def _heard_until(seen: evidence.SeenWorking, until: float) -> evidence.SeenWorking:
    """What was seen of a run by ``until``: served calls written later are taken as heard
    at ``until`` when the collection before them was earlier (some may have come by then)."""
    compiled = None if seen.compiled is None else min(seen.compiled, until)
    if seen.served_at is None or (seen.served_since is not None and seen.served_since >= until):
        return evidence.SeenWorking(compiled, None, None)
    return evidence.SeenWorking(compiled, min(seen.served_at, until), seen.served_since)


def work(conn: sa.Connection, run_ids: Iterable[str], function_hashes: Iterable[str]) -> Work:
    """The runs' :class:`Work`: when each was last seen working (every function's
    statistics count), and the served spans and counted calls of the functions asked about."""
    wanted = list(run_ids)
    found = Work({}, collections.defaultdict(list))
    if not wanted:
        return found
    found.seen.update(evidence.last_seen_working(conn, wanted))
    for flush in evidence.flushes_of(conn, wanted, list(set(function_hashes))):
        key = (flush.run_id, flush.function_hash)
        found.counted[key].append((flush.timestamp, flush.calls))
        if flush.served:
            start = float("-inf") if flush.since is None else flush.since
            found.served[key].append((start, flush.timestamp))
    return found
