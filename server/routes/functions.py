"""``/api/v1/functions``: per-function compiles, causes and cost; one function; its events."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query

from cachewatch.cache import cache_reads
from cachewatch.store import listings
from cachewatch.store.runs import RunNotFound
from cachewatch.storms import diagnosis
from cachewatch.views import compose
from cachewatch.whatif import policies, prices, whatif_reads

from ..deps import (
    Connection,
    Page,
    QueryFilters,
    ReadAuth,
    Settings,
    decode_after,
    decode_offset,
    encode_cursor,
    invalid,
)
from ..schemas import EventPage, FunctionDetail, FunctionPage, WhatifOut

router = APIRouter(prefix="/api/v1", tags=["functions"])

FunctionHash = Annotated[str, Path(max_length=40, description="The function's stable hash.")]
_NO_FUNCTION: dict[int | str, dict[str, Any]] = {404: {"description": "No function with this hash in the store."}}


def _no_function(function_hash: str) -> HTTPException:
    return HTTPException(status_code=404, detail=f"no function {function_hash!r} in the store")


@router.get("/functions", response_model=FunctionPage, summary="Functions, most compile seconds first")
def list_functions(
    _: ReadAuth,
    conn: Connection,
    filters: QueryFilters,
    page: Page,
    q: Annotated[
        str | None, Query(max_length=200, description="Only functions whose name or qualified name contains this text.")
    ] = None,
) -> FunctionPage:
    offset = decode_offset("functions", page.cursor)
    rows, total = listings.function_page(conn, filters, offset=offset, limit=page.limit, q=q)
    end = offset + page.limit
    return FunctionPage.model_validate(
        {"items": rows, "next_cursor": encode_cursor("functions", end) if end < total else None}
    )


@router.get(
    "/functions/{function_hash}",
    response_model=FunctionDetail,
    summary="One function, with its storms",
    responses=_NO_FUNCTION,
)
def get_function(
    _: ReadAuth,
    conn: Connection,
    settings: Settings,
    filters: QueryFilters,
    function_hash: FunctionHash,
    storms_limit: Annotated[
        int,
        Query(
            ge=0,
            le=10_000,
            description="Storms listed, newest first (storms_total counts all; /api/v1/storms pages through them).",
        ),
    ] = compose.STORMS_SHOWN,
) -> FunctionDetail:
    detail = compose.function_detail(
        conn,
        function_hash,
        filters,
        diagnosis.rule_of(settings),
        storms_limit=storms_limit,
    )
    if detail is None:
        raise _no_function(function_hash)
    return FunctionDetail.model_validate(detail.as_json())


@router.get(
    "/functions/{function_hash}/events",
    response_model=EventPage,
    summary="A function's compile events with their diffs, oldest first (by event time)",
    responses=_NO_FUNCTION,
)
def function_events(
    _: ReadAuth, conn: Connection, filters: QueryFilters, page: Page, function_hash: FunctionHash
) -> EventPage:
    if not listings.function_exists(conn, function_hash):
        raise _no_function(function_hash)
    after = decode_after("events", page.cursor, int)
    rows = listings.event_rows(conn, function_hash, filters, limit=page.limit + 1, after=after)
    more = len(rows) > page.limit
    rows = rows[: page.limit]
    cursor = encode_cursor("events", [rows[-1]["timestamp"], rows[-1]["id"]]) if more else None
    cache_reads.explain_cache_misses(conn, rows)
    for row in rows:
        row.pop("id", None)
    return EventPage.model_validate({"items": rows, "next_cursor": cursor})


@router.get(
    "/functions/{function_hash}/whatif",
    response_model=WhatifOut,
    summary="What padding (or another fix) would buy over a run, priced on the run's own figures",
    responses={
        404: {"description": "No function with this hash, or no run of it by that name."},
        422: {"description": "A policy that does not parse, or an axis that cannot be padded."},
    },
)
def function_whatif(
    _: ReadAuth,
    conn: Connection,
    function_hash: FunctionHash,
    policy: Annotated[
        str, Query(max_length=2000, description="pow2 | multiple:K | ladder:A,B,C | auto[:N] | none")
    ] = "pow2",
    run_id: Annotated[
        str | None, Query(max_length=200, description="Run id, id prefix or run name (default: its latest run).")
    ] = None,
    axis: Annotated[
        str | None, Query(max_length=1000, description="ARG:AXIS to pad (default: the axis that varied).")
    ] = None,
) -> WhatifOut:
    try:
        parsed = policies.parse_policy(policy)
    except policies.WhatifError as exc:
        raise invalid(("query", "policy"), str(exc), policy) from None
    try:
        wanted = policies.parse_axis(axis) if axis else None
    except policies.WhatifError as exc:
        raise invalid(("query", "axis"), str(exc), axis) from None
    if not listings.function_exists(conn, function_hash):
        raise _no_function(function_hash)
    function = whatif_reads.find_function(conn, function_hash)
    try:
        run, run_name = whatif_reads.run_of(conn, function.function_hash, run_id)
    except RunNotFound as exc:
        raise HTTPException(status_code=404, detail=str(exc.args[0])) from None
    found = whatif_reads.evidence(conn, function, run, run_name)
    try:
        result = prices.analyse(found, parsed, wanted)
    except policies.WhatifError as exc:
        raise invalid(("query", "axis" if axis else "policy"), str(exc), axis or policy) from None
    return WhatifOut.model_validate({**dataclasses.asdict(result), "fix": prices.fix_sentence(result)})
