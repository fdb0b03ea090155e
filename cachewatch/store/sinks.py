"""Where the writer sends batches, chosen by the store URL.

``sqlite:///...`` and ``postgresql://...`` write straight into the SQL store (one
transaction per batch, many rows per statement, idempotent on event ids);
``http(s)://...`` posts to a cachewatch server.
"""

from __future__ import annotations

from typing import Any, Protocol

import sqlalchemy as sa

from ..config import Config
from . import engine as enginemod
from . import models, rollup


class Sink(Protocol):
    def write(self, batch: Any) -> None: ...


def open_sink(cfg: Config) -> Sink:
    url = cfg.store
    if url.startswith(("http://", "https://")):
        from .http import HttpSink

        return HttpSink(url, token=cfg.write_token)
    return SqlSink(url)


def _insert_ignoring_duplicates(conn: sa.Connection, table: sa.Table, rows: list[dict[str, Any]],
                                key: str, returning: sa.Column | None = None) -> set[Any]:
    """Insert rows whose key is new; with ``returning``, the values of that column actually inserted."""
    if not rows:
        return set()
    dialect = conn.dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:  # pragma: no cover - only the two dialects above are supported
        raise enginemod.InvalidStoreURL(f"unsupported dialect {dialect}")
    stmt = insert(table).on_conflict_do_nothing(index_elements=[key])
    if returning is None:
        conn.execute(stmt, rows)
        return set()
    if dialect == "sqlite":
        return set(conn.execute(stmt.returning(returning), rows).scalars())
    # psycopg parses the one giant multi-row statement that RETURNING needs in Python,
    # slower than the insert itself; ask which keys exist, then insert in a pipeline.
    # Two writers never share event ids (they are made by the recording process), so
    # only this writer's own retry can repeat them, and it is not concurrent with itself.
    wanted = [row[key] for row in rows]
    existing: set[Any] = set()
    for start in range(0, len(wanted), 1000):
        existing.update(conn.execute(sa.select(returning).where(table.c[key].in_(wanted[start:start + 1000])))
                        .scalars())
    conn.execute(stmt, rows)
    return set(wanted) - existing


def write_rows(conn: sa.Connection, runs: list[dict], functions: list[dict], events: list[dict],
               stats: list[dict], dropped: int = 0) -> set[str]:
    """Insert one batch in one transaction; repeats of the same ids are ignored.

    ``dropped`` is what the run's recorder lost since its previous batch. Returns the
    ids of the events that were new (the rest were already stored).
    """
    _insert_ignoring_duplicates(conn, models.runs, _unique(runs, "run_id"), "run_id")
    _insert_ignoring_duplicates(conn, models.functions, _unique(functions, "function_hash"), "function_hash")
    inserted = _insert_ignoring_duplicates(conn, models.compile_events, events, "event_id",
                                           returning=models.compile_events.c.event_id)
    if inserted:
        rollup.add(conn, rollup.deltas(e for e in events if e["event_id"] in inserted))
    if stats:
        conn.execute(sa.insert(models.call_stats), stats)
        rollup.add_call_stats(conn, stats)
    if dropped and runs and (inserted or stats or not events):  # a repeated batch reports nothing new
        rollup.add(conn, {models.run_drops: [{"run_id": runs[0]["run_id"], "dropped": int(dropped)}]})
    return inserted


def _unique(rows: list[dict], key: str) -> list[dict]:
    seen: dict[Any, dict] = {}
    for row in rows:
        seen.setdefault(row[key], row)
    return list(seen.values())


def batch_rows(batch: Any) -> tuple[list[dict], list[dict], list[dict], list[dict]]:
    """Rows for one recorder batch: the run, the functions it mentions, events, stats."""
    first_seen: dict[str, float] = {}
    functions: dict[str, dict] = {}
    for event in batch.events:
        info = event.function
        seen = first_seen.get(info.function_hash)
        if seen is None:
            first_seen[info.function_hash] = event.timestamp
            functions[info.function_hash] = info.as_dict()  # once per function, not per event
        elif event.timestamp < seen:
            first_seen[info.function_hash] = event.timestamp
    for stat in batch.stats:
        info = stat.function
        first_seen.setdefault(info.function_hash, stat.timestamp)
        functions.setdefault(info.function_hash, info.as_dict())
    function_rows = [{**row, "first_seen": first_seen[h]} for h, row in functions.items()]
    return ([batch.run.as_dict()], function_rows, [e.as_dict() for e in batch.events],
            [s.as_dict() for s in batch.stats])


class SqlSink:
    def __init__(self, url: str):
        self.url = url

    def write(self, batch: Any) -> None:
        runs, functions, events, stats = batch_rows(batch)
        with enginemod.connection(self.url) as conn:
            write_rows(conn, runs, functions, events, stats, dropped=getattr(batch, "dropped", 0))
