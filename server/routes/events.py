"""``POST /api/v1/events``: batch ingest from recorders (the HTTP sink) and other clients."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool

from .. import ingest
from ..deps import Settings, WriteAuth
from ..schemas import BatchIn, IngestResult

router = APIRouter(prefix="/api/v1", tags=["ingest"])

# The body is read raw and validated by pydantic's JSON parser in one pass (FastAPI's
# own body handling parses to Python objects first, then validates them), so the
# OpenAPI description of the body is given here and its schemas added by document().
_BODY = {"required": True, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/BatchIn"}}}}


@router.post(
    "/events",
    response_model=IngestResult,
    summary="Store a batch of compile events",
    openapi_extra={"requestBody": _BODY},
    responses={
        401: {"description": "A write token is configured and the request lacks it."},
        413: {"description": "The body is larger than CACHEWATCH_MAX_BODY_BYTES."},
        422: {"description": "The batch is invalid; nothing of it was stored."},
        503: {"description": "The store is unavailable; retry later."},
    },
)
async def ingest_events(_: WriteAuth, request: Request, settings: Settings) -> IngestResult:
    """Store the batch whole or not at all. Repeating a batch (same event ids) stores nothing twice."""
    body = await request.body()
    return await run_in_threadpool(
        ingest.accept,
        body,
        settings.max_batch_events,
        settings.store,
        request.app.state.counters,
        settings.program_store_max_bytes,
    )


def document(spec: dict[str, Any]) -> None:
    """Add the ingest batch's schemas to an OpenAPI document."""
    schema = BatchIn.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(schema.pop("$defs", {}))
    schemas["BatchIn"] = schema
