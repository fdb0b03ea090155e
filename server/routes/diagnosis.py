"""``/api/v1/diagnosis``: is jit worth it, the compile cost model, and compile-time regressions."""

from __future__ import annotations

from fastapi import APIRouter

from cachewatch.analysis import views

from ..deps import Connection, QueryFilters, ReadAuth
from ..schemas import DiagnosisOut

router = APIRouter(prefix="/api/v1", tags=["diagnosis"])


@router.get("/diagnosis", response_model=DiagnosisOut, summary="Verdicts, compile cost model and regressions")
def diagnosis(_: ReadAuth, conn: Connection, filters: QueryFilters) -> DiagnosisOut:
    found = views.diagnosis_view(conn, filters)
    return DiagnosisOut.model_validate(found.as_json())
