"""Where the writer sends batches, chosen by the store URL.

``sqlite:///...`` and ``postgresql://...`` write straight into the SQL store through
``writes.write_batch`` (one transaction per batch, many rows per statement, a repeated
event or statistics row stored once);
``http(s)://...`` posts to a cachewatch server.
"""

from __future__ import annotations

from typing import Protocol

from ..core.config import Config
from ..core.events import Batch, DropReason, timestamp_ok
from .writes import DEFAULT_PROGRAM_STORE_MAX_BYTES, in_bounds, write_batch


class Sink(Protocol):
    """Where the recorder's writer hands each batch: stored whole, or an exception."""

    def write(self, batch: Batch) -> None: ...


def is_service(url: str) -> bool:
    """Whether a store URL names a cachewatch service (batches go over HTTP), not a SQL store."""
    return url.startswith(("http://", "https://"))


def open_sink(cfg: Config) -> Sink:
    url = cfg.store
    if is_service(url):
        from .http import HttpSink

        return HttpSink(url, token=cfg.write_token)
    return SqlSink(url, program_store_max_bytes=cfg.program_store_max_bytes)


class SqlSink:
    """Writes each batch straight into a SQL store, keeping what is within the store's bounds."""

    def __init__(self, url: str, program_store_max_bytes: int = DEFAULT_PROGRAM_STORE_MAX_BYTES):
        self.url = url
        self.program_store_max_bytes = program_store_max_bytes

    def write(self, batch: Batch) -> None:
        events = [in_bounds(e) for e in batch.events]
        kept = [e for e in events if e is not None]
        stats = [s for s in batch.stats if timestamp_ok(s.timestamp)]
        refused = len(events) - len(kept)
        if (
            refused
            or len(stats) != len(batch.stats)
            or any(a is not b for a, b in zip(kept, batch.events, strict=False))
        ):
            lost = dict(batch.dropped_by)
            lost[DropReason.OUT_OF_BOUNDS] = lost.get(DropReason.OUT_OF_BOUNDS, 0) + refused
            batch = Batch(run=batch.run, events=kept, stats=stats, dropped_by=lost)
        write_batch(self.url, batch, batch.dropped_by, self.program_store_max_bytes)
