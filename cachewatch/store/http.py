"""The sink for ``http(s)://`` stores: post each batch to a cachewatch server.

Standard library only (the library must not pull an HTTP client into training
images). A failure raises :class:`HttpStoreError`; ``retryable`` is False for a
refusal that will not change on retry (a 4xx other than 408, 425 and 429; a 413 is
resent in halves), so the writer sets the batch aside rather than hammers. Every batch carries a ``batch_id`` derived from its
content, so a batch retried after a lost response is recognised by the server.

    sink = HttpSink("http://cachewatch:8000", token="...")
    sink.write(batch)
"""

from __future__ import annotations

import hashlib
import http.client
import json
import urllib.error
import urllib.request
from typing import Any

import orjson

from ..core.events import Batch
from .engine import StoreError

INGEST_PATH = "/api/v1/events"
_RETRYABLE_STATUS = {408, 425, 429}
_LARGE_BODY = 256 * 1024  # a dropped connection while sending more than this is read as "too large"


class HttpStoreError(StoreError):
    """The server could not be reached, or refused the batch."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = True, too_large: bool = False):
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.too_large = too_large  # 413, or the connection dropped while a large body was sent


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # Following a redirect would resend the bearer token to wherever it points.
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def ingest_url(url: str) -> str:
    base = url.rstrip("/")
    return base if base.endswith(INGEST_PATH) else base + INGEST_PATH


def batch_id(payload: dict[str, Any]) -> str:
    """Same batch, same id: its run, event ids and statistics rows, hashed."""
    digest = hashlib.sha256(payload["run"]["run_id"].encode())
    for event in payload["events"]:
        digest.update(b"e" + event["event_id"].encode())
    for row in payload["stats"]:
        digest.update(f"s{row['function']['function_hash']}:{row['timestamp']!r}".encode())
    return digest.hexdigest()[:32]


class HttpSink:
    def __init__(self, url: str, token: str | None = None, timeout: float = 10.0):
        self.url = ingest_url(url)
        self._token = token or None
        self.timeout = timeout
        self._opener = urllib.request.build_opener(_NoRedirect())

    def __repr__(self) -> str:  # never show the token
        return f"HttpSink({self.url!r})"

    def write(self, batch: Batch) -> None:
        """Post the batch; one the server finds too large is sent again in halves (each
        stored whole or not at all, and idempotent on event ids)."""
        payload = batch.to_wire()  # carries the events the recorder lost since its previous batch
        payload["batch_id"] = batch_id(payload)
        try:
            self.post(payload)
        except HttpStoreError as exc:
            if not exc.too_large:
                raise
            events, stats = list(batch.events), list(batch.stats)
            if len(events) + len(stats) <= 1:
                raise HttpStoreError(
                    f"{exc} (one row is larger than the server takes)", status=413, retryable=False
                ) from None
            half = len(events) // 2
            parts = (
                ((events[:half], stats), (events[half:], []))
                if events
                else ((events, stats[: len(stats) // 2]), (events, stats[len(stats) // 2 :]))
            )
            for i, (part_events, part_stats) in enumerate(parts):
                self.write(Batch(batch.run, part_events, part_stats, dropped_by=batch.dropped_by if i == 0 else None))

    def post(self, payload: dict[str, Any]) -> dict[str, Any]:
        """POST one JSON batch; returns the server's answer or raises :class:`HttpStoreError`."""
        # orjson writes NaN and infinities as null, which the service reads as "unknown".
        body = orjson.dumps(payload, option=orjson.OPT_NON_STR_KEYS)
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "cachewatch-http-sink",
        }
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                answer = response.read()
        except urllib.error.HTTPError as exc:
            status = exc.code
            detail = _detail(exc)
            exc.close()
            if 300 <= status < 400:
                raise HttpStoreError(
                    f"{self.url} redirected ({status}) to {exc.headers.get('Location')}; "
                    "set CACHEWATCH_STORE to the final address",
                    status=status,
                    retryable=False,
                ) from None
            retryable = status >= 500 or status in _RETRYABLE_STATUS
            raise HttpStoreError(
                f"{self.url} answered {status}: {detail}", status=status, retryable=retryable, too_large=status == 413
            ) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:  # refused, reset, timeout
            reason = getattr(exc, "reason", exc)
            # A server that refuses a body by its length may answer 413 and close before it
            # has read it all: the client sees the connection drop instead.
            dropped = isinstance(reason, (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected))
            raise HttpStoreError(
                f"cannot reach {self.url}: {reason}", too_large=dropped and len(body) > _LARGE_BODY
            ) from None
        try:
            return json.loads(answer) if answer else {}
        except ValueError:
            return {}


def _detail(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read(4096)
        data = json.loads(raw)
        text = data.get("message") or data.get("detail") if isinstance(data, dict) else None
        return str(text or raw.decode(errors="replace"))[:500]
    except (OSError, ValueError, http.client.HTTPException):  # a body cut short or not JSON
        return exc.reason if isinstance(exc.reason, str) else "no detail"
