"""The cachewatch service: batch ingest, the query API, and Prometheus metrics.

    cachewatch serve --store postgresql://cachewatch@db/cachewatch --workers 4
    uvicorn --factory cachewatch_server.main:create_app        # settings from CACHEWATCH_* variables

At startup an empty store is migrated (so the zero-setup SQLite default just works)
and a store at an older schema revision is refused with the command that upgrades it.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, disable_created_metrics, values
from prometheus_client.multiprocess import MultiProcessCollector
from sqlalchemy.exc import DataError, IntegrityError
from starlette.exceptions import HTTPException as StarletteHTTPException

from cachewatch.core import _guard
from cachewatch.core.events import VERSION as __version__
from cachewatch.store import engine as enginemod
from cachewatch.store import retention

from . import dashboard
from .ingest import IngestCounters
from .metrics import StoreCollector
from .middleware import BodyLimit, RequestMetrics
from .routes import (
    cache,
    diagnosis,
    docs,
    events,
    exports,
    functions,
    health,
    jobs,
    metrics,
    programs,
    runs,
    storms,
    summary,
)
from .settings import ServerSettings, SettingsError, load

logger = logging.getLogger("cachewatch.server")

INGEST_PATH = "/api/v1/events"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def create_app(settings: ServerSettings | None = None) -> FastAPI:
    """The ASGI app; ``settings`` default to the ``CACHEWATCH_*`` environment."""
    settings = settings if settings is not None else load()
    # `_created` series double the series count and nothing here reads them.
    disable_created_metrics()
    registry = CollectorRegistry()  # per app: tests and several apps in one process stay apart
    # Counters only this process knows (requests, refused batches): with several workers
    # each writes its own file and a scrape of any worker sums them all.
    process_registry: CollectorRegistry | None = registry
    if multiprocess_dir():
        MultiProcessCollector(registry)
        process_registry = None
    counters = IngestCounters(process_registry)

    # The API's description (/openapi.json, /docs) asks for the read token like the API it
    # describes: the built-in routes would answer anyone.
    app = FastAPI(
        title="cachewatch",
        version=__version__,
        lifespan=_lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        description="Why did jax.jit compile, and what did it cost? Batch ingest from "
        "cachewatch recorders, per-function compile history, storms, and Prometheus metrics.",
    )
    app.state.settings = settings
    app.state.registry = registry
    app.state.counters = counters
    policy = settings.retention_policy()
    app.state.retention = RetentionSchedule(settings.store, policy, settings.retention_interval) if policy else None
    registry.register(StoreCollector(settings))

    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(RequestMetrics, **RequestMetrics.metrics(process_registry))  # outermost: sees every status
    for module in (events, functions, programs, runs, storms, summary, diagnosis, health, metrics, jobs, cache):
        app.include_router(module.router)
    app.include_router(exports.router)
    app.include_router(dashboard.router)

    app.include_router(docs.router(_documented_openapi(app)))

    app.add_exception_handler(enginemod.StoreError, _store_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    return app


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Check the schema and start the retention schedule; stop it at shutdown."""
    await run_in_threadpool(enginemod.ensure_schema, app.state.settings.store)
    # Everything imported so far (JAX included) lives as long as the process: keep it
    # out of the collector's full passes, which otherwise stall requests.
    gc.freeze()
    schedule = app.state.retention
    if schedule is not None:
        schedule.start()
    try:
        yield
    finally:
        if schedule is not None:
            schedule.stop()


def _documented_openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """Make ``app.openapi`` FastAPI's schema with the ingest batch's schemas added, and return it."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()  # FastAPI keeps it as app.openapi_schema
            events.document(schema)
            return schema
        return app.openapi_schema

    setattr(app, "openapi", openapi)  # FastAPI's documented way to amend the schema
    return openapi


class RetentionSchedule:
    """``CACHEWATCH_RETENTION``: the store pruned in a thread of its own, at start and then
    every ``interval`` seconds. The prune works in short transactions, so requests and
    ingest go on beside it; a store that is down is tried again at the next interval.
    With several workers each runs the schedule: a second prune finds nothing left to do."""

    def __init__(self, url: str, policy: retention.Policy, interval: float):
        self.url, self.policy, self.interval = url, policy, interval
        self.last: retention.PruneResult | None = None
        self.prunes = 0  # finished, whether or not they dropped anything
        self.failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="cachewatch-retention", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)  # a prune in a long VACUUM is left to end with the process

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            self._stop.wait(self.interval)

    @_guard.guarded(where="server.retention")
    def run_once(self) -> retention.PruneResult | None:
        try:
            result = retention.prune(self.url, self.policy)
        except enginemod.StoreError as exc:
            self.failures += 1
            logger.warning("retention: cannot prune the store: %s", exc)
            return None
        self.last = result
        self.prunes += 1
        if result.reclaim_error:
            logger.warning("retention: the space was not given back: %s", result.reclaim_error)
        if result.runs or result.program_texts:
            logger.info(
                "retention (%s): dropped %d runs, %d events, %d call-statistics rows, %d program texts; "
                "store %d -> %s bytes",
                self.policy.describe(),
                result.runs,
                result.events,
                result.call_stats,
                result.program_texts,
                result.bytes_before,
                result.bytes_after,
            )
        return result


def multiprocess_dir() -> str | None:
    """prometheus-client's multiprocess directory, when this process writes its metrics there.

    prometheus-client decides when it is first imported, so ``cachewatch serve`` sets
    the variable before it starts the workers."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    return directory if directory and values.ValueClass is not values.MutexValue else None


def _is_ingest(request: Request) -> bool:
    return request.method == "POST" and request.url.path.rstrip("/").endswith(INGEST_PATH)


async def _store_error(request: Request, exc: Exception) -> JSONResponse:
    cause = exc.__cause__
    if isinstance(cause, (IntegrityError, DataError)):
        # The data, not the store, is at fault: a retry would fail the same way.
        if _is_ingest(request):
            request.app.state.counters.rejected(0)
        return JSONResponse(status_code=422, content={"detail": f"the store refused the batch: {exc}"})
    logger.warning("store error on %s %s: %s", request.method, request.url.path, exc)
    return JSONResponse(
        status_code=503,
        headers={"Retry-After": "5"},
        content={"detail": f"the store is unavailable, retry later: {exc}"},
    )


def _where(loc: Any) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "request"


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)  # registered for it alone
    errors = exc.errors()
    body = getattr(exc, "body", None)
    if _is_ingest(request) and isinstance(body, dict):
        events_in = body.get("events")
        request.app.state.counters.rejected(len(events_in) if isinstance(events_in, list) else 0)
    detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in errors]
    lines = [f"{_where(e['loc'])}: {e['msg']}" for e in detail[:5]]
    if len(detail) > 5:
        lines.append(f"and {len(detail) - 5} more")
    message = "; ".join(lines)
    if _is_ingest(request):
        message = "batch refused, nothing stored: " + message
    return JSONResponse(status_code=422, content={"detail": detail, "message": message})


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)  # registered for it alone
    if exc.status_code == 413 and _is_ingest(request):
        request.app.state.counters.rejected(0)
    return await http_exception_handler(request, exc)


def serve(store: str | None = None, host: str = "127.0.0.1", port: int = 8000, workers: int = 1) -> int:
    """Run the service with uvicorn until it is stopped; returns the exit status."""
    import uvicorn

    try:
        settings = load(**({"store": store} if store else {}))
    except SettingsError as exc:
        print(f"cachewatch: {exc}", file=sys.stderr)
        return 2
    if workers < 1:
        print("cachewatch: --workers must be at least 1", file=sys.stderr)
        return 2
    # Check (or create) the schema once, before any worker starts: workers racing to
    # migrate one empty database would collide.
    enginemod.ensure_schema(settings.store)
    enginemod.dispose_engines()
    if host not in _LOOPBACK and settings.write_token is None:
        logger.warning(
            "cachewatch serve listens on %s without CACHEWATCH_WRITE_TOKEN: anyone who can reach it can write events",
            host,
        )
    if workers == 1:
        uvicorn.run(create_app(settings), host=host, port=port)
        return 0
    # Worker processes build their own app from the environment, and share their
    # request counters through prometheus-client's multiprocess files.
    os.environ["CACHEWATCH_STORE"] = settings.store
    own_dir = None
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        for stale in Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).glob("*.db"):
            stale.unlink(missing_ok=True)  # counters of an earlier service would be summed in
    else:
        own_dir = os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="cachewatch-metrics-")
    try:
        uvicorn.run("cachewatch_server.main:create_app", factory=True, host=host, port=port, workers=workers)
    finally:
        if own_dir:
            shutil.rmtree(own_dir, ignore_errors=True)
    return 0
