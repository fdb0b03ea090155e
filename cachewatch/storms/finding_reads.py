"""What findings are gathered from, read from the store: each storm's recompiles with their
diffs and the user's frames around them, and how long each run went on."""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..core.events import Cause, Kind
from ..store import models
from ..store.columns import cost_expr, in_chunks
from .results import Storm


@dataclass(frozen=True, slots=True)
class StormCompile:
    """One recompile of a storm as a finding reads it."""

    function_hash: str
    timestamp: float
    cause: str
    seconds: float  # trace, lowering and XLA compile
    call_site: str | None
    diff: list[dict[str, Any]]
    user_stack: list[dict[str, str]]  # the user's frames, innermost first ([] when not recorded)


# Storms read in one statement: each adds a term to its WHERE clause.
STORMS_PER_READ = 100


def storm_compiles(conn: sa.Connection, storms: Iterable[Storm]) -> dict[tuple[str, str, float], list[StormCompile]]:
    """Each storm's recompiles, in time order, by (run, storm key, start): those of its
    functions in its span (for a storm of a line of user code, those made from that line).
    Read for many storms at once (one statement a hundred storms, not one a storm: the
    overview and the findings read every storm of the store)."""
    wanted = list(storms)
    found: dict[tuple[str, str, float], list[StormCompile]] = {(s.run_id, s.key, s.start): [] for s in wanted}
    for chunk in in_chunks(wanted, STORMS_PER_READ):
        by_run: dict[str, list[Storm]] = collections.defaultdict(list)
        for storm in chunk:
            by_run[storm.run_id].append(storm)
        for row in conn.execute(_compiles_of(chunk)):
            compile_ = StormCompile(
                row.function_hash,
                float(row.timestamp),
                row.cause,
                float(row.seconds or 0.0),
                row.call_site,
                list(row.diff or []),
                list(row.user_stack or []),
            )
            for storm in by_run[row.run_id]:
                if _in_storm(storm, compile_):
                    found[(storm.run_id, storm.key, storm.start)].append(compile_)
    return found


def _compiles_of(storms: list[Storm]) -> sa.Select:
    """The recompiles that may belong to ``storms``: per storm, its run's compiles of its
    functions in its span (the call site is told apart in Python)."""
    e = models.compile_events
    spans = [
        sa.and_(
            e.c.run_id == storm.run_id,
            e.c.function_hash.in_(storm.function_hashes),
            e.c.timestamp.between(storm.start, storm.end),
        )
        for storm in storms
    ]
    return (
        sa.select(
            e.c.run_id,
            e.c.function_hash,
            e.c.timestamp,
            e.c.cause,
            cost_expr(e).label("seconds"),
            e.c.call_site,
            e.c.diff,
            e.c.user_stack,
        )
        .where(sa.or_(*spans), e.c.compiled, e.c.cause != Cause.FIRST_CALL.value, e.c.kind != Kind.AHEAD.value)
        .order_by(e.c.timestamp, e.c.id)
    )


def _in_storm(storm: Storm, compile_: StormCompile) -> bool:
    return (
        compile_.function_hash in storm.function_hashes
        and storm.start <= compile_.timestamp <= storm.end
        and (not storm.of_line or compile_.call_site == storm.call_site)
    )


def run_lengths(conn: sa.Connection, run_ids: Iterable[str]) -> dict[str, float]:
    """How long each run went on, in seconds: from its start to the last thing it wrote
    (the end of its last compile, or its last call statistics)."""
    wanted = sorted(set(run_ids))
    if not wanted:
        return {}
    r, e, s = models.runs, models.compile_events, models.call_stats
    last: dict[str, float] = collections.defaultdict(float)
    ends = sa.select(e.c.run_id, sa.func.max(e.c.timestamp + cost_expr(e))).where(e.c.run_id.in_(wanted))
    stats = sa.select(s.c.run_id, sa.func.max(s.c.timestamp)).where(s.c.run_id.in_(wanted))
    for q in (ends.group_by(e.c.run_id), stats.group_by(s.c.run_id)):
        for run_id, moment in conn.execute(q):
            if moment is not None:
                last[run_id] = max(last[run_id], float(moment))
    started = dict(conn.execute(sa.select(r.c.run_id, r.c.started_at).where(r.c.run_id.in_(wanted))).all())
    return {run_id: max(0.0, last[run_id] - float(at)) for run_id, at in started.items() if run_id in last}
