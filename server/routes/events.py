"""``POST /api/v1/events``: batch ingest from recorders (the HTTP sink) and other clients."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError

from .. import ingest
from ..deps import Settings, WriteAuth
from ..schemas import BatchIn, IngestResult

router = APIRouter(prefix="/api/v1", tags=["ingest"])


@router.post("/events", response_model=IngestResult, summary="Store a batch of compile events",
             responses={401: {"description": "A write token is configured and the request lacks it."},
                        413: {"description": "The body is larger than CACHEWATCH_MAX_BODY_BYTES."},
                        422: {"description": "The batch is invalid; nothing of it was stored."},
                        503: {"description": "The store is unavailable; retry later."}})
def ingest_events(_: WriteAuth, batch: BatchIn, request: Request, settings: Settings) -> dict:
    """Store the batch whole or not at all. Repeating a batch (same event ids) stores nothing twice."""
    counters: ingest.IngestCounters = request.app.state.counters
    try:
        ingest.check(batch, settings.max_batch_events)
    except RequestValidationError:
        counters.rejected(len(batch.events))
        raise
    result = ingest.store(settings.store, batch)
    counters.client_dropped(batch.batch_id, batch.dropped)
    return result
