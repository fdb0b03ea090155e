"""``/api/v1/events/{event_id}/program`` and ``/diff``: what a compile compiled, and how
it differs from another compile."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Path, Query
from fastapi.responses import PlainTextResponse, Response

from cachewatch.programs import program_texts

from ..deps import Connection, ReadAuth
from ..schemas import ProgramDiffOut

router = APIRouter(prefix="/api/v1", tags=["programs"])

EventId = Annotated[str, Path(max_length=32, description="The compile event's id.")]


@router.get(
    "/events/{event_id}/program",
    summary="The program a compile compiled",
    response_class=PlainTextResponse,
    responses={
        200: {
            "content": {"text/plain": {}, "application/octet-stream": {}},
            "description": "The text (jaxpr, stablehlo, hlo), or the gzip-compressed pprof profile.",
        },
        404: {"description": "No such event, or no text of this format kept for it (the detail says why)."},
    },
)
def get_program(
    _: ReadAuth,
    conn: Connection,
    event_id: EventId,
    format: Annotated[Literal["jaxpr", "stablehlo", "hlo", "pprof"], Query(description="What to return.")] = "jaxpr",
) -> Response:
    try:
        found = program_texts.program(conn, event_id, format)
    except program_texts.ProgramNotFound as exc:
        raise HTTPException(404, str(exc)) from None
    if isinstance(found, bytes):
        return Response(
            found,
            media_type="application/octet-stream",
            headers={"Content-Disposition": f'attachment; filename="{event_id}.pb.gz"'},
        )
    return PlainTextResponse(found)


@router.get(
    "/events/{event_id}/diff",
    response_model=ProgramDiffOut,
    summary="A compile against another: key, equations by primitive and line, jaxpr diff, XLA figures",
    responses={404: {"description": "No such event, or nothing to diff it with."}},
)
def get_diff(
    _: ReadAuth,
    conn: Connection,
    event_id: EventId,
    against: Annotated[
        str | None,
        Query(
            max_length=32,
            description="The earlier compile (default: the one with the same program, else the one just before).",
        ),
    ] = None,
) -> ProgramDiffOut:
    try:
        return ProgramDiffOut.model_validate(program_texts.diff(conn, event_id, against).as_json())
    except program_texts.ProgramNotFound as exc:
        raise HTTPException(404, str(exc)) from None
