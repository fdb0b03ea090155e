"""The browser dashboard: which functions recompile, why, since when, and what it costs.

    from cachewatch_server import dashboard
    app.include_router(dashboard.router)     # /, /functions, /functions/{hash}, /runs, /storms,
                                             # /programs/{event_id}/flamegraph

Server-rendered HTML (Jinja2) with charts drawn by plotly.js, which is served from the
installed ``plotly`` package: the pages need no internet. With a read token
configured, pages ask for it (``Authorization: Bearer`` or the cookie set at /login).
"""

from __future__ import annotations

from fastapi import APIRouter

from . import flamegraph_page, pages, public

router = APIRouter()
router.include_router(public.router)
router.include_router(pages.router)
router.include_router(flamegraph_page.router)

__all__ = ["router"]
