"""ASGI middleware: a request body limit, and the service's own request metrics."""

from __future__ import annotations

import time
from typing import TypedDict

from fastapi import HTTPException
from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimit:
    """Refuse a request body over ``max_bytes`` with 413, before reading more of it.

    The check runs when the route reads the body, so the request is already routed
    (and counted under its route) and routes without a body pay nothing.
    """

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        declared = None
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = None
        received = 0

        def too_large() -> HTTPException:
            return HTTPException(
                status_code=413,
                detail=f"request body larger than {limit} bytes; send "
                "smaller batches (the limit is CACHEWATCH_MAX_BODY_BYTES)",
            )

        async def limited() -> Message:
            nonlocal received
            if declared is not None and declared > limit:
                raise too_large()
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise too_large()
            return message

        await self.app(scope, limited, send)


class RequestMetricSet(TypedDict):
    requests: Counter
    duration: Histogram


class RequestMetrics:
    """``cachewatch_http_requests_total`` and ``..._duration_seconds`` by route template (bounded)."""

    def __init__(self, app: ASGIApp, requests: Counter, duration: Histogram):
        self.app = app
        self.requests = requests
        self.duration = duration

    @staticmethod
    def metrics(registry: CollectorRegistry | None) -> RequestMetricSet:
        """The two metrics, registered once per app on its own registry (none in multiprocess
        mode, where a scrape reads every worker's files instead)."""
        return {
            "requests": Counter(
                "cachewatch_http_requests", "HTTP requests served.", ["method", "route", "status"], registry=registry
            ),
            "duration": Histogram(
                "cachewatch_http_request_duration_seconds",
                "Time to serve an HTTP request.",
                ["method", "route"],
                registry=registry,
                buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            ),
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            # The route's template, never the raw path: labels stay a bounded set.
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            method = scope.get("method", "")
            if method not in ("GET", "POST", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS"):
                method = "other"
            self.requests.labels(method, route, str(status)).inc()
            self.duration.labels(method, route).observe(time.perf_counter() - start)
