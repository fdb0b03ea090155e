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

    steady = recompiles(conn, filters)        # what storms are made of
    warmup = warmup_compiles(conn, run_id)    # what the run's summary counts
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from ..core.warmup import WarmupWatch
from ..store.columns import Filters
from . import storm_reads
from .storm_reads import Recompile


def steady_since(conn: sa.Connection, run_ids: Iterable[str]) -> dict[str, float]:
    """Per run, the time its flagged warm-up is judged over (runs whose flags stand are left out)."""
    per_run: dict[str, list[storm_reads.WarmupCompile]] = collections.defaultdict(list)
    for row in storm_reads.warmup_compiles_of(conn, list(run_ids)):
        per_run[row.run_id].append(row)
    found = {}
    for run_id, rows in per_run.items():
        ended = warmup_end(rows)
        if ended is not None:
            found[run_id] = ended
    return found


def warmup_end(rows: Iterable[Any]) -> float | None:
    """The timestamp of the first compile (``timestamp``, ``function_hash``, ``cause``,
    ``call_site``, ``module``, in time order) that shows the program doing its work again
    (``core.warmup.WarmupWatch``, the rule capture follows as it records), or None."""
    watch = WarmupWatch()
    for row in rows:
        stack = getattr(row, "user_stack", None)
        module = getattr(row, "module", "")
        remade = getattr(row, "remade_static", False)
        if watch.sees_work_again(row.call_site, row.function_hash, row.cause, module, stack, remade):
            return float(row.timestamp)
    return None


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
    storm_reads.recompiles_past_first."""
    found = storm_reads.recompiles_past_first(conn, filters, function_hashes, diffs=diffs, dense=dense)
    since = steady_since(conn, {r.run_id for r, warmup in found if warmup})
    return [r for r, warmup in found if not warmup or (r.run_id in since and r.timestamp >= since[r.run_id])]


def warmup_compiles(conn: sa.Connection, run_id: str) -> int:
    """Compiles of the run that belong to its warm-up, as storms judge it."""
    return storm_reads.count_warmup_compiles(conn, run_id, before=steady_since(conn, [run_id]).get(run_id))


@dataclasses.dataclass
class Work:
    """What a run's events say about it going on: when it was last seen working (the end
    of its latest compile, or its latest call statistics that report calls served from
    the cache, with the collection after which those calls came: see
    :class:`storm_reads.SeenWorking`), and per function the spans of its statistics in which
    the cache served it (more calls than compiles of that function; each span starts at
    the run's collection before it, after which its calls were made), with the calls each
    statistics row counted (``counted``: per function, its rows' time stamps and calls),
    from which the calls after a compile are told exactly."""

    seen: dict[str, storm_reads.SeenWorking]
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


def _heard_until(seen: storm_reads.SeenWorking, until: float) -> storm_reads.SeenWorking:
    """What was seen of a run by ``until``: served calls written later are taken as heard
    at ``until`` when the collection before them was earlier (some may have come by then)."""
    compiled = None if seen.compiled is None else min(seen.compiled, until)
    if seen.served_at is None or (seen.served_since is not None and seen.served_since >= until):
        return storm_reads.SeenWorking(compiled, None, None)
    return storm_reads.SeenWorking(compiled, min(seen.served_at, until), seen.served_since)


def work(conn: sa.Connection, run_ids: Iterable[str], function_hashes: Iterable[str]) -> Work:
    """The runs' :class:`Work`: when each was last seen working (every function's
    statistics count), and the served spans and counted calls of the functions asked about."""
    wanted = list(run_ids)
    found = Work({}, collections.defaultdict(list))
    if not wanted:
        return found
    found.seen.update(storm_reads.last_seen_working(conn, wanted))
    for flush in storm_reads.flushes_of(conn, wanted, list(set(function_hashes))):
        key = (flush.run_id, flush.function_hash)
        found.counted[key].append((flush.timestamp, flush.calls))
        if flush.served:
            start = float("-inf") if flush.since is None else flush.since
            found.served[key].append((start, flush.timestamp))
    return found
