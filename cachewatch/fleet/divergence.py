"""The ranks of one multi-process job, compared.

Every rank of a data-parallel job runs the same program, so each should compile the
same signatures the same number of times. A rank that compiled a signature the others
did not (it met a batch of another size), or compiled one more often (its cache was
cleared, or a jit was re-created on that rank only), is where a straggler comes from:
the other ranks wait at the next collective while it compiles.

    report = divergence.compare_job(conn, "exp-42")
    report.divergent_ranks       # [1]
    report.divergences[0]        # rank, function, signature, compiles here and elsewhere
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..core.events import describe_array
from . import fleet_reads

# Signatures shown per divergence listing; the count of the rest is still given.
MAX_DIVERGENCES = 200
# Missing ranks listed per job: a run may declare any process count (the ingest API takes
# up to 2**31 - 1), and listing every rank below it would take the service's memory.
MAX_MISSING_RANKS = 10_000


def _reference(counts: list[int]) -> int:
    """What most ranks did (ties: the smaller count): the baseline a rank is held to."""
    tally = Counter(counts)
    best = max(tally.values())
    return min(n for n, k in tally.items() if k == best)


def job_runs(conn: sa.Connection, job: str) -> list[fleet_reads.JobRun]:
    """The job's runs, by rank, then start time."""
    return fleet_reads.job_runs(conn, job)


@dataclass(frozen=True)
class RankCompiles:
    """One rank of a job: its runs, their hosts and compiles, and whether it diverged."""

    process_index: int  # -1 for runs of the job that carry none
    run_ids: list[str]
    hosts: list[str]
    compiles: int
    divergent: bool


@dataclass(frozen=True)
class _Extra:
    """A (rank, function, signature) that compiled more than most ranks did, not yet named."""

    process_index: int
    function_hash: str
    signature_hash: str
    compiles: int
    others: dict[str, int]  # rank -> compiles of the same function and signature
    reason: str  # only_this_rank | more_compiles


@dataclass(frozen=True)
class Divergence:
    """A (rank, function, signature) that compiled more than most ranks did, named."""

    process_index: int
    function_hash: str
    function: str
    signature_hash: str
    signature: list[dict[str, Any]]
    compiles: int  # compiles of this function and signature on this rank
    others: dict[str, int]  # rank -> compiles of the same function and signature
    reason: str  # only_this_rank | more_compiles
    explanation: str
    last_explanation: str  # why this rank's latest compile of it happened


@dataclass(frozen=True)
class JobReport:
    """A job's ranks compared: ``GET /api/v1/jobs/{job}``, the dashboard's job page and the
    rank-divergence metric."""

    job: str
    process_count: int
    ranks: list[RankCompiles]
    missing_ranks: list[int]  # ranks below process_count with no run in the store
    divergent_ranks: list[int]
    divergences: list[Divergence]  # the first MAX_DIVERGENCES
    divergences_total: int


def compare_job(conn: sa.Connection, job: str) -> JobReport | None:
    """The job's ranks, and every (rank, function, signature) that compiled more than
    most ranks did, each named; None when no run carries this job."""
    runs = job_runs(conn, job)
    if not runs:
        return None
    return _compared(conn, job, runs, fleet_reads.rank_compiles(conn, [job]), named=True)


def compare_jobs(conn: sa.Connection, jobs: list[str]) -> list[JobReport]:
    """Several jobs compared as :func:`compare_job` does, in their order, in three queries
    for all of them; their divergences are counted and their ranks told, not named
    (``divergences`` empty): what a listing of jobs and the divergence metric show."""
    runs_of = fleet_reads.runs_of_jobs(conn, jobs)
    counted = fleet_reads.rank_compiles(conn, list(runs_of))
    return [_compared(conn, job, runs_of[job], counted, named=False) for job in jobs if job in runs_of]


def _compared(
    conn: sa.Connection, job: str, runs: list[fleet_reads.JobRun], counted: fleet_reads.RankTotals, *, named: bool
) -> JobReport:
    """The report of a job from its runs and what its ranks compiled."""
    rank_of = {run.run_id: run.process_index if run.process_index is not None else -1 for run in runs}
    # (function, signature) -> rank -> compiles, of the signatures the ranks disagree on.
    compiles: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for row in counted.disagreeing:
        if row.job == job:
            compiles[(row.function_hash, row.signature_hash)][row.rank] += row.compiles
    ranks = sorted(set(rank_of.values()))
    declared = max((run.process_count or 0 for run in runs), default=0)
    found = _divergences(compiles, ranks)
    divergent = sorted({d.process_index for d in found})
    return JobReport(
        job=job,
        process_count=declared or len(ranks),
        ranks=[
            RankCompiles(
                process_index=rank,
                run_ids=[run.run_id for run in runs if rank_of[run.run_id] == rank],
                hosts=sorted({run.host for run in runs if rank_of[run.run_id] == rank}),
                compiles=counted.compiles.get((job, rank), 0),
                divergent=rank in divergent,
            )
            for rank in ranks
        ],
        missing_ranks=_missing(declared, ranks),
        divergent_ranks=divergent,
        divergences=_describe(conn, found[:MAX_DIVERGENCES], list(rank_of)) if named else [],
        divergences_total=len(found),
    )


def _missing(declared: int, ranks: list[int]) -> list[int]:
    """The ranks below the declared process count with no run, the first MAX_MISSING_RANKS."""
    present = set(ranks)
    missing: list[int] = []
    for rank in range(declared):
        if len(missing) == MAX_MISSING_RANKS:
            break
        if rank not in present:
            missing.append(rank)
    return missing


def _divergences(compiles: dict[tuple[str, str], Counter], ranks: list[int]) -> list[_Extra]:
    """Every (rank, function, signature) that compiled more than most ranks did, per rank
    in order: watched functions' signatures first, a rank's own compiles before extra ones."""
    found: list[_Extra] = []
    if len(ranks) > 1:
        for (function_hash, signature_hash), by_rank in compiles.items():
            counts = [by_rank.get(rank, 0) for rank in ranks]
            baseline = _reference(counts)
            for rank, n in zip(ranks, counts, strict=False):
                if n > baseline:
                    others = {str(o): by_rank.get(o, 0) for o in ranks if o != rank}
                    found.append(
                        _Extra(
                            process_index=rank,
                            function_hash=function_hash,
                            signature_hash=signature_hash,
                            compiles=n,
                            others=others,
                            reason="only_this_rank" if not any(others.values()) else "more_compiles",
                        )
                    )
    # Per rank, signatures of watched functions before JAX's eager compiles (which carry none).
    found.sort(
        key=lambda d: (
            d.process_index,
            d.signature_hash == "",
            d.reason != "only_this_rank",
            -d.compiles,
            d.function_hash,
            d.signature_hash,
        )
    )
    return found


def _describe(conn: sa.Connection, found: list[_Extra], run_ids: list[str]) -> list[Divergence]:
    """Name each divergence: the function, its signature, and a sentence."""
    if not found:
        return []
    names = fleet_reads.qualnames(conn, (d.function_hash for d in found))
    signatures: dict[tuple[str, str], fleet_reads.LastSignature | None] = {}
    for d in found:
        key = (d.function_hash, d.signature_hash)
        if key not in signatures:
            signatures[key] = fleet_reads.last_signature(conn, key[0], key[1], run_ids)
    out = []
    for d in found:
        function = names.get(d.function_hash, d.function_hash[:12])
        last = signatures[(d.function_hash, d.signature_hash)]
        signature, last_explanation = (last.signature, last.explanation) if last else ([], "")
        shape = signature_text(signature)
        if d.reason == "only_this_rank":
            text = (
                f"Rank {d.process_index} compiled `{function}` for {shape}, which no other rank "
                f"compiled ({d.compiles} time(s))."
            )
        else:
            others = ", ".join(f"rank {r}: {n}" for r, n in d.others.items())
            text = f"Rank {d.process_index} compiled `{function}` for {shape} {d.compiles} time(s) ({others})."
        out.append(
            Divergence(
                process_index=d.process_index,
                function_hash=d.function_hash,
                function=function,
                signature_hash=d.signature_hash,
                signature=signature,
                compiles=d.compiles,
                others=d.others,
                reason=d.reason,
                explanation=text,
                last_explanation=last_explanation,
            )
        )
    return out


def signature_text(signature: list[dict[str, Any]]) -> str:
    """``batch: float32[24,8], w: float32[8,4]``: a signature in one line."""
    parts = []
    for leaf in signature:
        path = leaf.get("path", "?")
        if "static" in leaf and leaf.get("static"):
            parts.append(f"{path}={leaf.get('value')}")
        elif "shape" in leaf:
            parts.append(
                f"{path}: {describe_array(leaf.get('dtype'), leaf.get('shape') or (), bool(leaf.get('weak_type')))}"
            )
        else:
            parts.append(str(path))
    return ", ".join(parts) if parts else "an unrecorded signature"


def recent_jobs(conn: sa.Connection, limit: int = 20) -> list[str]:
    """The jobs with the most recently started runs (the metric and the dashboard list these)."""
    return fleet_reads.recent_jobs(conn, limit)
