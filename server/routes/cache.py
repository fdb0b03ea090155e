"""``/api/v1/cache``: JAX's caches per function and compiled variant (executables, their
hits, memory and releases), and the persistent compilation cache per run."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from cachewatch.cache import cache_reads, cache_view
from cachewatch.store import queries

from ..deps import Connection, Page, QueryFilters, ReadAuth, decode_offset, encode_cursor
from ..schemas import CachePage

router = APIRouter(prefix="/api/v1", tags=["cache"])


@router.get("/cache", response_model=CachePage, summary="Executables per function and variant, newest run first")
def list_cache(
    _: ReadAuth,
    conn: Connection,
    filters: QueryFilters,
    page: Page,
    function: Annotated[
        str | None, Query(max_length=512, description="Only this function: name, qualified name or hash prefix.")
    ] = None,
) -> CachePage:
    offset = decode_offset("cache", page.cursor)
    hashes = queries.find_functions(conn, function) if function else None
    pairs = cache_reads.cache_functions(conn, filters, hashes) if hashes is None or hashes else []
    end = offset + page.limit
    chosen = [(run_id, function_hash) for run_id, function_hash, _ in pairs[offset:end]]
    report = (
        cache_view.cache_report(cache_reads.read_cache(conn, filters, chosen))
        if chosen
        else cache_view.CacheReport((), ())
    )
    order = {pair: i for i, pair in enumerate(chosen)}
    functions = sorted(report.functions, key=lambda fn: order.get((fn.run_id, fn.function_hash), 0))
    return CachePage.model_validate(
        {
            "items": [fn.as_dict() for fn in functions],
            "persistent": [p.as_dict() for p in report.persistent],
            "next_cursor": encode_cursor("cache", end) if end < len(pairs) else None,
        }
    )
