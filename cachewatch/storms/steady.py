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
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..core.events import Kind
from ..core.warmup import WarmupWatch
from ..store import models
from ..store.columns import Filters, cost_expr
from . import storm_reads
from .storm_reads import Recompile


def steady_since(conn: sa.Connection, run_ids: Iterable[str]) -> dict[str, float]:
    """Per run, the time its flagged warm-up is judged over (runs whose flags stand are left out)."""
    per_run: dict[str, list[WarmupCompile]] = collections.defaultdict(list)
    for row in warmup_compiles_of(conn, list(run_ids)):
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
        if watch.sees_work_again(row.call_site, row.function_hash, row.cause, getattr(row, "module", "")):
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
    evidence.recompiles_past_first."""
    found = storm_reads.recompiles_past_first(conn, filters, function_hashes, diffs=diffs, dense=dense)
    since = steady_since(conn, {r.run_id for r, warmup in found if warmup})
    return [r for r, warmup in found if not warmup or (r.run_id in since and r.timestamp >= since[r.run_id])]


def warmup_compiles(conn: sa.Connection, run_id: str) -> int:
    """Compiles of the run that belong to its warm-up, as storms judge it."""
    return count_warmup_compiles(conn, run_id, before=steady_since(conn, [run_id]).get(run_id))


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

    seen: dict[str, SeenWorking]
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


def _heard_until(seen: SeenWorking, until: float) -> SeenWorking:
    """What was seen of a run by ``until``: served calls written later are taken as heard
    at ``until`` when the collection before them was earlier (some may have come by then)."""
    compiled = None if seen.compiled is None else min(seen.compiled, until)
    if seen.served_at is None or (seen.served_since is not None and seen.served_since >= until):
        return SeenWorking(compiled, None, None)
    return SeenWorking(compiled, min(seen.served_at, until), seen.served_since)


def work(conn: sa.Connection, run_ids: Iterable[str], function_hashes: Iterable[str]) -> Work:
    """The runs' :class:`Work`: when each was last seen working (every function's
    statistics count), and the served spans and counted calls of the functions asked about."""
    wanted = list(run_ids)
    found = Work({}, collections.defaultdict(list))
    if not wanted:
        return found
    found.seen.update(last_seen_working(conn, wanted))
    for flush in flushes_of(conn, wanted, list(set(function_hashes))):
        key = (flush.run_id, flush.function_hash)
        found.counted[key].append((flush.timestamp, flush.calls))
        if flush.served:
            start = float("-inf") if flush.since is None else flush.since
            found.served[key].append((start, flush.timestamp))
    return found


@dataclass(frozen=True, slots=True)
class WarmupCompile:
    """A compile a run flagged as warm-up (not one made ahead of time by cachewatch.warmup),
    as the end of warm-up is judged from: where it came from and why it compiled."""

    run_id: str
    timestamp: float
    function_hash: str
    cause: str
    call_site: str | None
    module: str


def warmup_compiles_of(conn: sa.Connection, run_ids: list[str]) -> list[WarmupCompile]:
    """The runs' compiles flagged as warm-up, by run and time."""
    if not run_ids:
        return []
    e, f = models.compile_events, models.functions
    q = (
        sa.select(e.c.run_id, e.c.timestamp, e.c.function_hash, e.c.cause, e.c.call_site, f.c.module)
        .join(f, f.c.function_hash == e.c.function_hash)
        .where(e.c.run_id.in_(run_ids), e.c.compiled, e.c.warmup, e.c.kind != Kind.AHEAD.value)
        .order_by(e.c.run_id, e.c.timestamp)
    )
    return [
        WarmupCompile(r.run_id, float(r.timestamp), r.function_hash, r.cause, r.call_site, r.module or "")
        for r in conn.execute(q)
    ]


def count_warmup_compiles(conn: sa.Connection, run_id: str, *, before: float | None) -> int:
    """The run's compiles flagged as warm-up (made before ``before``, when given)."""
    e = models.compile_events
    query = sa.select(sa.func.count()).where(e.c.run_id == run_id, e.c.compiled, e.c.warmup)
    if before is not None:
        query = query.where(e.c.timestamp < before)
    return int(conn.execute(query).scalar_one())


@dataclass(frozen=True, slots=True)
class Flush:
    """One function's call statistics written at one time in one run: the calls counted
    since its previous statistics (written at ``previous``, None for its first), whether
    the cache served some of them (``served``: more calls than compiles of the function
    in that span), and ``since``: the run's previous collection of statistics (any
    function's; None before the first), after which every one of these calls was made.
    A collection reads every counter, so a function without a row in it had made no call
    by then: its next row counts calls made after that collection, not after its own
    previous row, which may be long before."""

    run_id: str
    function_hash: str
    timestamp: float
    previous: float | None
    calls: int
    served: bool
    since: float | None


@dataclass(frozen=True, slots=True)
class SeenWorking:
    """When a run was last seen working: ``compiled``, the end of its latest compile (None
    without one), and its latest statistics that counted calls the cache served: written
    at ``served_at``, of calls made after ``served_since`` (see :class:`Flush`)."""

    compiled: float | None
    served_at: float | None
    served_since: float | None

    def after(self, moment: float) -> float | None:
        """When the run was last seen working, from evidence of work after ``moment``
        only: a flush of served calls counts when all its calls came after ``moment``
        (its calls may have been made at any time since the previous collection, so a
        flush written late, at exit, says nothing of when they were made)."""
        heard = [self.compiled] if self.compiled is not None else []
        if self.served_at is not None and self.served_since is not None and self.served_since >= moment:
            heard.append(self.served_at)
        return max(heard) if heard else None


def last_seen_working(conn: sa.Connection, run_ids: list[str]) -> dict[str, SeenWorking]:
    """Per run, when it was last seen working (see :class:`SeenWorking`). The latest flush
    of served calls is the one with the latest ``since`` too (``since`` is the run's
    collection before it). Statistics written at exit that count only the calls that
    compiled say the process ended, not that the program went on. Judged in SQL, so a
    store of a fleet's runs never ships their statistics here."""
    e = models.compile_events
    compiled: dict[str, float] = {}
    ends = sa.select(e.c.run_id, sa.func.max(e.c.timestamp + cost_expr(e))).where(e.c.run_id.in_(run_ids), e.c.compiled)
    for run_id, last in conn.execute(ends.group_by(e.c.run_id)):
        if last is not None:
            compiled[run_id] = float(last)
    flushes = _flushes(run_ids).subquery()
    latest = sa.func.row_number().over(partition_by=flushes.c.run_id, order_by=flushes.c.timestamp.desc())
    ranked = sa.select(flushes.c.run_id, flushes.c.timestamp, flushes.c.since, latest.label("rank"))
    ranked_served = ranked.where(flushes.c.served).subquery()
    served = {
        run_id: (float(stamp), None if since is None else float(since))
        for run_id, stamp, since in conn.execute(
            sa.select(ranked_served.c.run_id, ranked_served.c.timestamp, ranked_served.c.since).where(
                ranked_served.c.rank == 1
            )
        )
    }
    return {
        run_id: SeenWorking(compiled.get(run_id), *served.get(run_id, (None, None)))
        for run_id in set(compiled) | set(served)
    }


def _flushes(run_ids: list[str], function_hashes: list[str] | None = None) -> sa.Select[Any]:
    """Per run, function and flush time: the calls the statistics counted (a flush writes
    one row per timed signature; the function's calls are on one of them), when the
    function's previous statistics were written, the run's previous collection
    (``since``), and whether the cache served some of the calls. The one place the rule
    "served" is written, for the run's last-seen time and the per-function spans alike.
    Rows that record a release of executables are written when the release happened, not
    by a collection: they count no calls and bound no span."""
    s, e = models.call_stats, models.compile_events
    collected = s.c.released_by.is_(None)
    counted = sa.select(s.c.run_id, s.c.function_hash, s.c.timestamp, sa.func.sum(s.c.calls).label("calls")).where(
        s.c.run_id.in_(run_ids), collected
    )
    if function_hashes is not None:
        counted = counted.where(s.c.function_hash.in_(function_hashes))
    per_flush = counted.group_by(s.c.run_id, s.c.function_hash, s.c.timestamp).subquery()
    previous = sa.func.lag(per_flush.c.timestamp).over(
        partition_by=(per_flush.c.run_id, per_flush.c.function_hash), order_by=per_flush.c.timestamp
    )
    # Every collection of the run (one time stamp, whichever functions it wrote).
    times = sa.select(s.c.run_id, s.c.timestamp).where(s.c.run_id.in_(run_ids), collected).distinct().subquery()
    collections = sa.select(
        times.c.run_id,
        times.c.timestamp,
        sa.func.lag(times.c.timestamp).over(partition_by=times.c.run_id, order_by=times.c.timestamp).label("since"),
    ).subquery()
    spans = (
        sa.select(per_flush, previous.label("previous"), collections.c.since)
        .join(
            collections,
            sa.and_(collections.c.run_id == per_flush.c.run_id, collections.c.timestamp == per_flush.c.timestamp),
        )
        .subquery()
    )
    compiled_in_span = (
        sa.select(sa.func.count())
        .where(
            e.c.function_hash == spans.c.function_hash,
            e.c.run_id == spans.c.run_id,
            e.c.compiled,
            e.c.timestamp <= spans.c.timestamp,
            # Both bounds on the time, so the span is one range of the index of the run's
            # events by function and time (an OR would scan the function's events up to it).
            e.c.timestamp > sa.func.coalesce(spans.c.previous, _BEFORE_ANY_TIME),
        )
        .scalar_subquery()
    )
    return sa.select(spans, (sa.func.coalesce(spans.c.calls, 0) > compiled_in_span).label("served"))


def flushes_of(conn: sa.Connection, run_ids: list[str], function_hashes: list[str]) -> list[Flush]:
    """The functions' call statistics in the runs, one per flush, in time order."""
    if not function_hashes:
        return []
    flushes = _flushes(run_ids, function_hashes).subquery()
    q = sa.select(flushes).order_by(flushes.c.run_id, flushes.c.function_hash, flushes.c.timestamp)
    return [
        Flush(
            r.run_id,
            r.function_hash,
            float(r.timestamp),
            None if r.previous is None else float(r.previous),
            int(r.calls or 0),
            bool(r.served),
            None if r.since is None else float(r.since),
        )
        for r in conn.execute(q)
    ]


# Earlier than any event's time stamp: the lower bound of a function's first flush span.
_BEFORE_ANY_TIME = sa.literal(-1e300, sa.Float)
