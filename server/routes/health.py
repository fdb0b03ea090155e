"""``GET /healthz``: is the store reachable? (No token: load balancers and Docker ask it.)"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from cachewatch.store import engine as enginemod

from ..deps import Settings
from ..schemas import Health

router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    response_model=Health,
    summary="Service and store health",
    responses={503: {"model": Health, "description": "The store is unreachable."}},
)
def healthz(settings: Settings):
    try:
        enginemod.ping(settings.store)
    except Exception as exc:  # whatever keeps the store from answering makes the service unhealthy
        return JSONResponse(status_code=503, content={"status": "error", "store": f"unreachable: {type(exc).__name__}"})
    return {"status": "ok", "store": "ok"}
