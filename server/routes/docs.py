"""``GET /openapi.json`` and ``GET /docs``: the API's description, behind the read token
like the API itself (FastAPI's own routes for them answer anyone). A browser signed in
to the dashboard (its session cookie) may read them too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from ..dashboard import auth


def _allowed(request: Request) -> None:
    if not auth.allowed(request):
        raise HTTPException(
            status_code=401,
            detail="missing or wrong bearer token: send the header "
            "'Authorization: Bearer <token>' (or sign in at /login)",
            headers={"WWW-Authenticate": "Bearer"},
        )


def router(openapi: Callable[[], dict[str, Any]]) -> APIRouter:
    routes = APIRouter(include_in_schema=False)

    @routes.get("/openapi.json")
    def openapi_json(request: Request) -> JSONResponse:
        _allowed(request)
        return JSONResponse(openapi())

    @routes.get("/docs")
    def swagger_ui(request: Request) -> HTMLResponse:
        _allowed(request)
        return get_swagger_ui_html(openapi_url="/openapi.json", title="cachewatch API")

    return routes
