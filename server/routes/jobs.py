"""``/api/v1/jobs``: multi-process jobs, and the ranks of one compared."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query

from cachewatch.fleet import divergence

from ..deps import Connection, ReadAuth
from ..schemas import JobOut, JobSummary

router = APIRouter(prefix="/api/v1", tags=["jobs"])


@router.get("/jobs", response_model=list[JobSummary], summary="Jobs with the most recently started runs")
def list_jobs(
    _: ReadAuth, conn: Connection, limit: Annotated[int, Query(ge=1, le=500, description="Most jobs to list.")] = 50
) -> list[JobSummary]:
    return [
        JobSummary(
            job=report.job,
            process_count=report.process_count,
            ranks=len(report.ranks),
            divergent_ranks=report.divergent_ranks,
            missing_ranks=report.missing_ranks,
        )
        for report in divergence.compare_jobs(conn, divergence.recent_jobs(conn, limit=limit))
    ]


@router.get(
    "/jobs/{job}",
    response_model=JobOut,
    summary="One job's ranks compared: ranks that compiled a signature the others did not, or compiled it more often",
    responses={404: {"description": "No run carries this job."}},
)
def get_job(
    _: ReadAuth, conn: Connection, job: Annotated[str, Path(max_length=200, description="The job name the runs carry.")]
) -> divergence.JobReport:
    report = divergence.compare_job(conn, job)
    if report is None:
        raise HTTPException(status_code=404, detail=f"no run carries job {job!r}")
    return report
