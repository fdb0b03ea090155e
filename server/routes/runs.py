"""``/api/v1/runs``: the processes that recorded events, newest first; two of them compared."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query

from cachewatch.comparison import side_by_side
from cachewatch.store import listings
from cachewatch.store.runs import RunNotFound

from ..deps import Connection, Page, QueryFilters, ReadAuth, decode_after, encode_cursor, invalid
from ..schemas import RunComparisonOut, RunPage

router = APIRouter(prefix="/api/v1", tags=["runs"])


@router.get("/runs", response_model=RunPage, summary="Runs, newest first (since/until apply to the start time)")
def list_runs(_: ReadAuth, conn: Connection, filters: QueryFilters, page: Page) -> RunPage:
    after = decode_after("runs", page.cursor, str)
    rows = listings.run_rows(conn, filters, limit=page.limit + 1, after=after)
    more = len(rows) > page.limit
    rows = rows[: page.limit]
    cursor = encode_cursor("runs", [rows[-1]["started_at"], rows[-1]["run_id"]]) if more else None
    return RunPage.model_validate({"items": rows, "next_cursor": cursor})


RunName = Annotated[
    str | None,
    Query(max_length=200, description="A run id, a unique prefix of one, or a run name (its newest run)."),
]


@router.get(
    "/runs/compare",
    response_model=RunComparisonOut,
    summary="Two runs compared function by function: compiles, recompiles by cause, compile seconds, "
    "program size; what is new and what is gone",
    responses={404: {"description": "A run cannot be told from what was given."}},
)
def compare_runs(
    _: ReadAuth, conn: Connection, baseline: RunName = None, run: RunName = None
) -> side_by_side.Comparison:
    """Without ``run``, the newest other run of the baseline's run name (or job); without
    either, the newest run and the one before it."""
    if run is not None and baseline is None:
        raise invalid(("query", "baseline"), "give the baseline when naming the run", None)
    try:
        return side_by_side.compare(conn, baseline, run)
    except RunNotFound as exc:
        raise HTTPException(status_code=404, detail=exc.args[0]) from None
