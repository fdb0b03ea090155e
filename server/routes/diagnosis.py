"""``/api/v1/diagnosis``: is jit worth it, the compile cost model, and compile-time regressions."""

from __future__ import annotations

from fastapi import APIRouter

from cachewatch.store import queries as storequeries
from cachewatch.analysis import diagnosis as analysis

from ..deps import Connection, QueryFilters, ReadAuth
from ..schemas import DiagnosisOut

router = APIRouter(prefix="/api/v1", tags=["diagnosis"])


@router.get("/diagnosis", response_model=DiagnosisOut, summary="Verdicts, compile cost model and regressions")
def diagnosis(_: ReadAuth, conn: Connection, filters: QueryFilters) -> dict:
    rows = storequeries.function_report(conn, filters)
    return {
        "verdicts": analysis.verdicts_or_none(conn, rows, filters),
        "cost_model": analysis.cost_model(conn, filters),
        "regressions": analysis.compile_regressions(conn),
    }
