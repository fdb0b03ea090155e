"""``/api/v1/runs/{run_id}/trace``: a run's compiles as a Chrome trace-event file, the same
JSON as ``cachewatch export RUN --format perfetto`` (open it in ui.perfetto.dev)."""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, HTTPException, Path
from fastapi.responses import Response

from cachewatch.exports import run_trace
from cachewatch.store.runs import RunNotFound
from cachewatch.storms import diagnosis

from ..deps import Connection, ReadAuth, Settings

router = APIRouter(prefix="/api/v1", tags=["runs"])

# What the answer holds, for the API's description: the trace-event format's two keys
# (each event's fields are the format's: name, cat, ph, ts, dur, pid, tid, id, args).
_TRACE_SCHEMA = {
    "type": "object",
    "required": ["traceEvents", "displayTimeUnit"],
    "properties": {
        "traceEvents": {"type": "array", "items": {"type": "object"}},
        "displayTimeUnit": {"type": "string"},
        "otherData": {"type": "object"},
    },
}


@router.get(
    "/runs/{run_id}/trace",
    summary="A run's compiles as a Chrome trace-event file (Perfetto, chrome://tracing)",
    response_class=Response,
    responses={
        200: {
            "content": {"application/json": {"schema": _TRACE_SCHEMA}},
            "description": "Trace events: a track per thread, a slice per compile with its phases inside, "
            "the storms as async slices, and a counter of live executables.",
        },
        404: {"description": "No run answers to the name given."},
    },
)
def get_trace(
    _: ReadAuth,
    conn: Connection,
    settings: Settings,
    run_id: Annotated[
        str, Path(max_length=200, description="A run id, a unique prefix of one, or a run name (its newest run).")
    ],
) -> Response:
    try:
        trace = run_trace.run_trace(conn, run_id, diagnosis.rule_of(settings))
    except RunNotFound as exc:
        raise HTTPException(status_code=404, detail=exc.args[0]) from None
    return Response(orjson.dumps(trace.as_json()), media_type="application/json")
