"""What a job's ranks compiled, read for cachewatch.analysis.fleet: the job's runs, their
compiles per function and signature, and the names and signatures a divergence shows."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from . import models


@dataclass(frozen=True, slots=True)
class JobRun:
    """One process of a job."""

    run_id: str
    run_name: str
    host: str
    pid: int
    started_at: float
    process_index: int | None
    process_count: int | None


@dataclass(frozen=True, slots=True)
class RankSignatureCompiles:
    """How often one rank of a job compiled one signature of one function (a rank's
    restarts added up; rank -1: runs of the job that carry no process index)."""

    job: str
    rank: int
    function_hash: str
    signature_hash: str
    compiles: int


@dataclass(frozen=True, slots=True)
class RankTotals:
    """What the jobs' ranks compiled: per (job, rank) all their compiles, and the
    compiles per signature of only the signatures whose ranks disagree."""

    compiles: dict[tuple[str, int], int]
    disagreeing: list[RankSignatureCompiles]


@dataclass(frozen=True, slots=True)
class LastSignature:
    """The newest compile of a signature in a set of runs: its signature and sentence."""

    signature: list[dict[str, Any]]
    explanation: str


def job_runs(conn: sa.Connection, job: str) -> list[JobRun]:
    """The job's runs, by rank, then start time."""
    return runs_of_jobs(conn, [job]).get(job, [])


def runs_of_jobs(conn: sa.Connection, jobs: list[str]) -> dict[str, list[JobRun]]:
    """Each job's runs, by rank, then start time, in one query (jobs without runs left out)."""
    r = models.runs
    rows = conn.execute(
        sa.select(
            r.c.job, r.c.run_id, r.c.run_name, r.c.host, r.c.pid, r.c.started_at, r.c.process_index, r.c.process_count
        )
        .where(r.c.job.in_(jobs))
        .order_by(r.c.job, r.c.process_index, r.c.started_at)
    )
    found: dict[str, list[JobRun]] = {}
    for row in rows:
        values = dict(row._mapping)
        found.setdefault(values.pop("job"), []).append(JobRun(**values))
    return found


def rank_compiles(conn: sa.Connection, jobs: list[str]) -> RankTotals:
    """:class:`RankTotals` of these jobs. A signature that every rank of its job compiled
    equally often (most of them, in a healthy job) diverges nowhere: its rows stay in the
    database (a hundred jobs' ranks are tens of thousands of such rows)."""
    if not jobs:
        return RankTotals({}, [])
    r, e = models.runs, models.compile_events
    rank = sa.func.coalesce(r.c.process_index, -1)
    per = (
        sa.select(r.c.job, rank.label("rank"), e.c.function_hash, e.c.signature_hash, sa.func.count().label("compiles"))
        .select_from(e.join(r, r.c.run_id == e.c.run_id))
        .where(r.c.job.in_(jobs), e.c.compiled.is_(True))
        .group_by(r.c.job, rank, e.c.function_hash, e.c.signature_hash)
        .subquery("per")
    )
    each_signature = (per.c.job, per.c.function_hash, per.c.signature_hash)
    spread = sa.select(
        per,
        sa.func.count().over(partition_by=each_signature).label("ranks_in"),
        sa.func.min(per.c.compiles).over(partition_by=each_signature).label("fewest"),
        sa.func.max(per.c.compiles).over(partition_by=each_signature).label("most"),
    ).subquery("spread")
    ranks_of = (
        sa.select(r.c.job, sa.func.count(sa.distinct(rank)).label("ranks"))
        .where(r.c.job.in_(jobs))
        .group_by(r.c.job)
        .subquery("ranks_of")
    )
    disagreeing = conn.execute(
        sa.select(spread.c.job, spread.c.rank, spread.c.function_hash, spread.c.signature_hash, spread.c.compiles)
        .join(ranks_of, ranks_of.c.job == spread.c.job)
        .where(sa.or_(spread.c.ranks_in < ranks_of.c.ranks, spread.c.fewest != spread.c.most))
    )
    found = [RankSignatureCompiles(job, int(k), fh, sh, int(n)) for job, k, fh, sh, n in disagreeing]
    totals = conn.execute(
        sa.select(r.c.job, rank, sa.func.count())
        .select_from(e.join(r, r.c.run_id == e.c.run_id))
        .where(r.c.job.in_(jobs), e.c.compiled.is_(True))
        .group_by(r.c.job, rank)
    )
    return RankTotals({(job, int(k)): int(n) for job, k, n in totals}, found)


def qualnames(conn: sa.Connection, function_hashes: Iterable[str]) -> dict[str, str]:
    f = models.functions
    query = sa.select(f.c.function_hash, f.c.qualname).where(f.c.function_hash.in_(sorted(set(function_hashes))))
    return {row.function_hash: row.qualname for row in conn.execute(query)}


def last_signature(
    conn: sa.Connection, function_hash: str, signature_hash: str, run_ids: list[str]
) -> LastSignature | None:
    """The newest compile of this signature in these runs; None when none compiled it."""
    e = models.compile_events
    row = conn.execute(
        sa.select(e.c.signature, e.c.explanation)
        .where(
            e.c.function_hash == function_hash,
            e.c.signature_hash == signature_hash,
            e.c.run_id.in_(run_ids),
            e.c.compiled.is_(True),
        )
        .order_by(e.c.timestamp.desc())
        .limit(1)
    ).first()
    return LastSignature(list(row.signature or []), row.explanation) if row else None


def recent_jobs(conn: sa.Connection, limit: int = 20) -> list[str]:
    """The jobs with the most recently started runs."""
    r = models.runs
    latest = sa.func.max(r.c.started_at)
    rows = conn.execute(
        sa.select(r.c.job, latest).where(r.c.job != "").group_by(r.c.job).order_by(latest.desc()).limit(limit)
    )
    return [row[0] for row in rows]
