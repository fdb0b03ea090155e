"""What a job's ranks compiled, read for cachewatch.fleet.divergence: the job's runs, their
compiles per function and signature, and the names and signatures a divergence shows.

A job's rank comparison (each rank's compiles, and the signatures its ranks disagree on)
is kept per job (``kept_rank_totals``, ``kept_rank_disagreements``): a listing of a
hundred jobs would otherwise group tens of thousands of compiles on every read. Every
write of a run of the job or of its events, and every prune of them, marks the job
stale (``stale_jobs``; writes.py, retention.py); a reader first finds the stale jobs'
comparisons again, by settling.py's rule, then reads the kept ones."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..store import models, settling
from ..store.columns import in_chunks


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


# Runs read per job wanted when the most recent jobs are found from the newest runs.
RUNS_PER_RECENT_JOB = 16


def rank_compiles(conn: sa.Connection, jobs: list[str]) -> RankTotals:
    """:class:`RankTotals` of these jobs: kept per job, found again for the jobs written
    to since (settling.py's rule); worked out from the store for the unnamed job (never
    kept: every run without a job is in it) or where this connection cannot write."""
    named = [job for job in jobs if job]
    if named and settle(conn):
        found = _kept(conn, named)
        if len(named) < len(jobs):
            unnamed = compare_ranks(conn, [""])
            found = RankTotals({**found.compiles, **unnamed.compiles}, found.disagreeing + unnamed.disagreeing)
        return found
    return compare_ranks(conn, jobs)


def settle(conn: sa.Connection) -> bool:
    """Find the stale jobs' rank comparisons again (settling.settle); False when this
    connection cannot write them: the caller then compares the ranks from the store."""
    return settling.settle(conn, settling.RANK_COMPARISONS, _find_again)


def _find_again(conn: sa.Connection, stale: sa.Table) -> None:
    """Replace the kept comparisons of the jobs in ``stale`` with their ranks compared anew."""
    t, d = models.kept_rank_totals, models.kept_rank_disagreements
    jobs = sorted(job for (job,) in conn.execute(sa.select(stale.c.job)) if job)
    for kept in (t, d):
        conn.execute(sa.delete(kept).where(kept.c.job.in_(sa.select(stale.c.job))))
    for chunk in in_chunks(jobs):
        found = compare_ranks(conn, chunk)
        if found.compiles:
            conn.execute(
                sa.insert(t), [{"job": job, "rank": rank, "compiles": n} for (job, rank), n in found.compiles.items()]
            )
        if found.disagreeing:
            conn.execute(sa.insert(d), [dataclasses.asdict(row) for row in found.disagreeing])


def _kept(conn: sa.Connection, jobs: list[str]) -> RankTotals:
    """The kept comparisons of these jobs (a job that compiled nothing has none)."""
    t, d = models.kept_rank_totals, models.kept_rank_disagreements
    compiles: dict[tuple[str, int], int] = {}
    disagreeing: list[RankSignatureCompiles] = []
    for chunk in in_chunks(jobs):
        totals = sa.select(t.c.job, t.c.rank, t.c.compiles).where(t.c.job.in_(chunk))
        compiles.update({(job, int(rank)): int(n) for job, rank, n in conn.execute(totals)})
        rows = sa.select(d.c.job, d.c.rank, d.c.function_hash, d.c.signature_hash, d.c.compiles).where(
            d.c.job.in_(chunk)
        )
        disagreeing.extend(
            RankSignatureCompiles(job, int(k), fh, sh, int(n)) for job, k, fh, sh, n in conn.execute(rows)
        )
    return RankTotals(compiles, disagreeing)


def compare_ranks(conn: sa.Connection, jobs: list[str]) -> RankTotals:
    """:class:`RankTotals` of these jobs worked out from their compiles. A signature that
    every rank of its job compiled equally often (most of them, in a healthy job)
    diverges nowhere: its rows stay in the database (a hundred jobs' ranks are tens of
    thousands of such rows)."""
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
    """The jobs with the most recently started runs, most recent first: the first
    ``limit`` jobs met reading the runs newest first, which the index of their start
    serves without grouping every run (/metrics and the jobs page ask on every read).
    Where the newest runs hold too few jobs (ranks restarted many times, or runs in no
    job), every run's job is grouped instead."""
    r = models.runs
    newest = conn.execute(
        sa.select(r.c.job).where(r.c.job != "").order_by(r.c.started_at.desc()).limit(limit * RUNS_PER_RECENT_JOB)
    ).scalars()
    found = list(dict.fromkeys(newest))
    if len(found) >= limit:
        return found[:limit]
    latest = sa.func.max(r.c.started_at)
    rows = conn.execute(sa.select(r.c.job).where(r.c.job != "").group_by(r.c.job).order_by(latest.desc()).limit(limit))
    return [row[0] for row in rows]
