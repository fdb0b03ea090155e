"""Taking an ingest batch over HTTP: parsed, checked against the settings' sizes, and
stored whole or not at all through the store's one write path (``writes.write_batch``),
which stores a retried batch's events and call statistics once.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson
from fastapi.exceptions import RequestValidationError
from prometheus_client import CollectorRegistry, Counter
from pydantic import ValidationError

from cachewatch.store import writes

from .deps import invalid
from .schemas import BatchIn, CallStatsIn, EventIn, IngestResult


class IngestCounters:
    """Batches and events this process refused: only the process that answered knows them.

    Prometheus counters, so with several workers (prometheus-client's multiprocess mode,
    which ``cachewatch serve --workers N`` turns on) a scrape of any worker sums them all.
    """

    def __init__(self, registry: CollectorRegistry | None):
        self.batches = Counter(
            "cachewatch_ingest_rejected_batches",
            "Ingest batches refused (invalid, oversized, or refused by the store); nothing of them was stored.",
            registry=registry,
        )
        self.events = Counter(
            "cachewatch_ingest_rejected_events", "Events in refused ingest batches.", registry=registry
        )

    def rejected(self, events: int) -> None:
        self.batches.inc()
        self.events.inc(events)


def parse(body: bytes) -> BatchIn:
    """The batch in a request body, parsed and validated in one pass by pydantic's own
    JSON parser (no Python objects built first); errors shaped like FastAPI's."""
    try:
        return BatchIn.model_validate_json(body)
    except ValidationError as exc:
        try:
            data = orjson.loads(body)  # only to count the events refused
        except orjson.JSONDecodeError:
            data = None
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()], body=data) from None


def accept(
    body: bytes,
    max_events: int,
    url: str,
    counters: IngestCounters,
    program_store_max_bytes: int = writes.DEFAULT_PROGRAM_STORE_MAX_BYTES,
) -> IngestResult:
    """Parse, check and store one posted batch: whole or not at all."""
    batch = parse(body)
    try:
        check(batch, max_events)
    except RequestValidationError:
        counters.rejected(len(batch.events))
        raise
    return store(url, batch, program_store_max_bytes)


def check(batch: BatchIn, max_events: int) -> None:
    """Refuse what the schema alone cannot: sizes from settings, and rows of another run."""
    for name, rows in (("events", batch.events), ("stats", batch.stats)):
        if len(rows) > max_events:
            raise invalid(
                ("body", name), f"{len(rows)} rows in one batch; at most {max_events} (send smaller batches)", len(rows)
            )
    run_id = batch.run.run_id
    parts: tuple[tuple[str, Sequence[EventIn | CallStatsIn]], ...] = (("events", batch.events), ("stats", batch.stats))
    for name, records in parts:
        for i, row in enumerate(records):
            if row.run_id != run_id:
                raise invalid(
                    ("body", name, i, "run_id"),
                    f"must equal run.run_id ({run_id!r}); send one batch per run",
                    row.run_id,
                )
            if row.function_hash is not None and row.function_hash != row.function.function_hash:
                raise invalid(
                    ("body", name, i, "function_hash"), "must equal function.function_hash", row.function_hash
                )
    for i, row in enumerate(batch.events):
        if row.eager_run_seconds is not None and row.compiled_run_seconds is None:
            raise invalid(
                ("body", "events", i, "eager_run_seconds"),
                "comes with compiled_run_seconds (the two runs are measured together)",
                row.eager_run_seconds,
            )
    # No check of sampled calls against calls: a function's statistics come as one row per
    # sampled signature (its calls on the first), and a call counted just before one flush
    # may be timed just after it, so a batch can rightly hold more samples than calls.


def store(
    url: str, batch: BatchIn, program_store_max_bytes: int = writes.DEFAULT_PROGRAM_STORE_MAX_BYTES
) -> IngestResult:
    """Write one checked batch in one transaction; returns what was new and what was a repeat.
    Program texts are kept while the store's stay under ``program_store_max_bytes``
    (CACHEWATCH_PROGRAM_STORE_MAX_BYTES), as the library's own writer keeps them."""
    written = writes.write_batch(url, batch, batch.drops(), program_store_max_bytes, ensure_schema=False)
    return IngestResult(
        batch_id=batch.batch_id,
        events=len(batch.events),
        stored_events=len(written.events),
        duplicate_events=len(batch.events) - len(written.events),
        stats=len(batch.stats),
        stored_stats=written.stats,
        duplicate_stats=len(batch.stats) - written.stats,
    )
