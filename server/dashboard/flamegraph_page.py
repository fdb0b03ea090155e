"""``/programs/{event_id}/flamegraph``: a compile's program as a flame graph, the
self-contained HTML document ``cachewatch program EVENT_ID --format flamegraph`` writes;
with ``?against=EVENT`` its frames are coloured by the equations each gained or lost
against that compile (``cachewatch diff EVENT EVENT_ID --format flamegraph``), and with
``?against=previous`` against the function's compile before it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse

from cachewatch.programs import flamegraph, program_texts

from ..deps import Connection
from . import pages

router = APIRouter(route_class=pages.PageRoute, include_in_schema=False)

# The document's own script and style run, nothing else loads, and no site may frame it.
_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": flamegraph.CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


@router.get("/programs/{event_id}/flamegraph", response_class=HTMLResponse)
def program_flamegraph(
    request: Request,
    conn: Connection,
    event_id: Annotated[str, Path(max_length=32)],
    against: Annotated[str | None, Query(max_length=32)] = None,
) -> HTMLResponse:
    try:
        if against is None:
            document = flamegraph.for_event(conn, event_id)
        else:  # "previous": the compile `cachewatch diff EVENT_ID` would take
            document = flamegraph.for_diff(conn, event_id, None if against == "previous" else against)
    except program_texts.ProgramNotFound as exc:
        return pages.page(request, "error.html", status=404, view=None, title="No flame graph", message=str(exc))
    return HTMLResponse(document, headers=_HEADERS)
