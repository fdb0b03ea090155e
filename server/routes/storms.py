"""``/api/v1/storms``: recompilation storms with their dominant cause and fix, newest first;
``/api/v1/findings``: the storms by root cause, most compile seconds first."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from cachewatch.storms import diagnosis, findings
from cachewatch.storms.results import FirstPass

from ..deps import Connection, Page, QueryFilters, ReadAuth, Settings, decode_offset, encode_cursor
from ..schemas import FindingList, FindingOut, FirstPassOut, StormOut, StormPage

router = APIRouter(prefix="/api/v1", tags=["storms"])


@router.get("/storms", response_model=StormPage, summary="Recompilation storms, newest first")
def list_storms(
    _: ReadAuth,
    conn: Connection,
    settings: Settings,
    filters: QueryFilters,
    page: Page,
    active: Annotated[bool | None, Query(description="Only active (true) or only past (false) storms.")] = None,
    function_hash: Annotated[str | None, Query(max_length=40, description="Only this function.")] = None,
) -> StormPage:
    offset = decode_offset("storms", page.cursor)
    hashes = [function_hash] if function_hash else None
    rule = diagnosis.rule_of(settings)
    passes: list[FirstPass] = []
    if active is True:  # only recent events are read, and first passes are never active
        found = diagnosis.storms(
            conn,
            filters,
            **rule,
            function_hashes=hashes,
            active_only=True,
        )
        total = len(found)
        found = found[offset : offset + page.limit]
    else:
        # Only the page's storms are described and priced; every storm is counted.
        shown = diagnosis.find_storms(
            conn,
            filters,
            page=(offset, page.limit),
            active=active,
            **rule,
            function_hashes=hashes,
            with_first_passes=not offset,  # the first passes ride on the first page only
        )
        found, total, passes = list(shown.storms), shown.total, list(shown.first_passes)
    end = offset + page.limit
    return StormPage(
        threshold=rule["threshold"],
        window=rule["window"],
        items=[StormOut.model_validate(s.as_json()) for s in found],
        next_cursor=encode_cursor("storms", end) if end < total else None,
        first_passes=[
            FirstPassOut.model_validate({**p.as_json(), "text": diagnosis.describe_first_pass(p)}) for p in passes
        ],
    )


@router.get("/findings", response_model=FindingList, summary="Recompiles by root cause, most compile seconds first")
def list_findings(
    _: ReadAuth,
    conn: Connection,
    settings: Settings,
    filters: QueryFilters,
    limit: Annotated[int, Query(ge=1, le=500, description="Findings listed, most compile seconds first.")] = 50,
) -> FindingList:
    """Each finding gathers the storms of one run that one varying value drives (the same
    sizes, one re-created object, the same static values), at the user's line where it
    enters, with its whole price and one fix; the newest 500 storms are gathered."""
    rule = diagnosis.rule_of(settings)
    found = findings.find(conn, filters, **rule)[:limit]
    return FindingList(
        threshold=rule["threshold"],
        window=rule["window"],
        items=[FindingOut.model_validate({**f.as_json(), "text": findings.describe(f)}) for f in found],
    )
