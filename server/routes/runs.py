"""``/api/v1/runs``: the processes that recorded events, newest first."""

from __future__ import annotations

from fastapi import APIRouter

from cachewatch.store import queries as storequeries

from ..deps import Connection, Page, QueryFilters, ReadAuth, decode_cursor, encode_cursor, invalid
from ..schemas import RunPage

router = APIRouter(prefix="/api/v1", tags=["runs"])


@router.get("/runs", response_model=RunPage, summary="Runs, newest first (since/until apply to the start time)")
def list_runs(_: ReadAuth, conn: Connection, filters: QueryFilters, page: Page) -> dict:
    after = decode_cursor("runs", page.cursor)
    if after is not None:
        if not (
            isinstance(after, list)
            and len(after) == 2
            and isinstance(after[0], (int, float))
            and isinstance(after[1], str)
        ):
            raise invalid(("query", "cursor"), "not a cursor of this listing", page.cursor)
        after = (float(after[0]), after[1])
    rows = storequeries.run_rows(conn, filters, limit=page.limit + 1, after=after)
    more = len(rows) > page.limit
    rows = rows[: page.limit]
    cursor = encode_cursor("runs", [rows[-1]["started_at"], rows[-1]["run_id"]]) if more else None
    return {"items": rows, "next_cursor": cursor}
