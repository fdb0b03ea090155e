"""Where the writer sends batches, chosen by the store URL.

``sqlite:///...`` and ``postgresql://...`` write straight into the SQL store (one
transaction per batch, many rows per statement, idempotent on event ids);
``http(s)://...`` posts to a cachewatch server.
"""

from __future__ import annotations

from typing import Protocol

from ..config import Config
from ..events import Batch, timestamp_ok
from . import engine as enginemod
from .writes import in_bounds, table_rows, write_rows


class Sink(Protocol):
    """Where the recorder's writer hands each batch: stored whole, or an exception."""

    def write(self, batch: Batch) -> None: ...


def open_sink(cfg: Config) -> Sink:
    url = cfg.store
    if url.startswith(("http://", "https://")):
        from .http import HttpSink

        return HttpSink(url, token=cfg.write_token)
    return SqlSink(url)


class SqlSink:
    """Writes each batch straight into a SQL store, keeping what is within the store's bounds."""

    def __init__(self, url: str):
        self.url = url

    def write(self, batch: Batch) -> None:
        events = [in_bounds(e) for e in batch.events]
        kept = [e for e in events if e is not None]
        stats = [s for s in batch.stats if timestamp_ok(s.timestamp)]
        refused = len(events) - len(kept)
        if refused or len(stats) != len(batch.stats) or any(a is not b for a, b in zip(kept, batch.events)):
            batch = Batch(run=batch.run, events=kept, stats=stats, dropped=batch.dropped + refused)
        with enginemod.connection(self.url) as conn:
            write_rows(conn, table_rows(batch), dropped=batch.dropped)
