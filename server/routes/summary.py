"""``/api/v1/summary``: totals over the store, or over the filtered part of it."""

from __future__ import annotations

from fastapi import APIRouter

from cachewatch.storms import diagnosis
from cachewatch.views import compose

from ..deps import Connection, QueryFilters, ReadAuth, Settings
from ..schemas import Summary

router = APIRouter(prefix="/api/v1", tags=["summary"])


@router.get("/summary", response_model=Summary, summary="Totals: functions, compiles, cost, active storms")
def get_summary(_: ReadAuth, conn: Connection, settings: Settings, filters: QueryFilters) -> Summary:
    found = compose.summary(conn, filters, diagnosis.rule_of(settings))
    return Summary.model_validate(found.as_json())
