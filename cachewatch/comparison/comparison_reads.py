"""What a comparison of two runs reads: which runs, and each one's functions.

    with engine.connection(url) as conn:
        baseline, run = comparison_reads.pick_runs(conn, "3f2a", None)
        rows = comparison_reads.run_functions(conn, baseline.run_id)

A run is named by its id, a unique prefix of it, or a run name or job (its latest run). Without
a second run, the newest other run of the baseline's run name (or job) is compared; a
baseline given by run name alone stands for the two newest runs of that name.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from ..store import models, queries
from ..store.columns import Filters, FunctionReport
from ..store.runs import RunNotFound, RunRef, find_run, ref_of, select_runs


@dataclass(frozen=True)
class FunctionTotals:
    """One function's figures in one run."""

    report: FunctionReport
    program_size: int | None  # the largest compiled program's StableHLO operations, if recorded


def latest_runs(conn: sa.Connection, limit: int = 2, *, like: RunRef | None = None) -> list[RunRef]:
    """The newest runs, newest first; with ``like``, only runs of its run name (or its job,
    when it has no run name), ``like`` itself left out."""
    r = models.runs
    query = select_runs()
    if like is not None:
        same = r.c.run_name == like.run_name if like.run_name or not like.job else r.c.job == like.job
        query = query.where(same, r.c.run_id != like.run_id)
    query = query.order_by(r.c.started_at.desc(), r.c.run_id.desc()).limit(limit)
    return [ref_of(row) for row in conn.execute(query)]


def pick_runs(conn: sa.Connection, baseline: str | None, run: str | None) -> tuple[RunRef, RunRef]:
    """The two runs to compare: as named; the baseline's newest sibling (same run name or job)
    when ``run`` is not given; the newest run and the one before it of its name when neither is."""
    if baseline is None:
        newest = latest_runs(conn, 1)
        if not newest:
            raise RunNotFound("the store has no run")
        earlier = latest_runs(conn, 1, like=newest[0])
        if not earlier:
            raise RunNotFound(f"run {newest[0].run_id} has no earlier run of the same run name or job to compare with")
        return earlier[0], newest[0]
    base = find_run(conn, baseline)
    if run is not None:
        return base, find_run(conn, run)
    if base.run_id != baseline and not base.run_id.startswith(baseline):
        # Named by its run name, the baseline is the run before the newest of that name.
        earlier = latest_runs(conn, 1, like=base)
        if not earlier:
            raise RunNotFound(f"only one run goes by {baseline!r}; name two runs to compare")
        return earlier[0], base
    siblings = latest_runs(conn, 1, like=base)
    if not siblings:
        raise RunNotFound(f"run {base.run_id} has no other run of the same run name or job; name the run to compare")
    return base, siblings[0]


def run_functions(conn: sa.Connection, run_id: str) -> dict[str, FunctionTotals]:
    """Each function with events in the run, by hash: its report row and program size."""
    report = queries.function_report(conn, Filters(run_id=run_id))
    e = models.compile_events
    sizes = dict(
        conn.execute(
            sa.select(e.c.function_hash, sa.func.max(e.c.hlo_ops))
            .where(e.c.run_id == run_id, e.c.compiled, e.c.hlo_ops.is_not(None))
            .group_by(e.c.function_hash)
        ).all()
    )
    return {
        row["function_hash"]: FunctionTotals(
            row, int(sizes[row["function_hash"]]) if row["function_hash"] in sizes else None
        )
        for row in report
    }
