"""``/api/v1/diagnosis``: is jit worth it, the compile cost model, and compile-time regressions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from cachewatch.payoff import kept_regressions
from cachewatch.views import compose

from ..deps import Connection, QueryFilters, ReadAuth
from ..schemas import DiagnosisOut

router = APIRouter(prefix="/api/v1", tags=["diagnosis"])


@router.get("/diagnosis", response_model=DiagnosisOut, summary="Verdicts, compile cost model and regressions")
def get_diagnosis(
    _: ReadAuth,
    conn: Connection,
    filters: QueryFilters,
    regressions_limit: Annotated[
        int,
        Query(ge=0, le=10_000, description="Regressions listed, the steepest first (regressions_total counts all)."),
    ] = kept_regressions.REGRESSIONS_SHOWN,
) -> DiagnosisOut:
    found = compose.diagnosis_view(conn, filters, regressions_limit)
    return DiagnosisOut.model_validate(found.as_json())
