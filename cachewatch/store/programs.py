"""Reading what was compiled: an event with its program's texts and equation profile."""

from __future__ import annotations

import json
import zlib
from typing import Any

import sqlalchemy as sa

from ..core.events import PROGRAM_TEXT_FORMATS
from . import models
from .columns import EVENT_SELECT, cost_expr


def event(conn: sa.Connection, event_id: str) -> dict[str, Any] | None:
    """One event row with its function's name (``EVENT_SELECT``), or None."""
    e, f = models.compile_events, models.functions
    query = (
        sa.select(*EVENT_SELECT, f.c.name, f.c.qualname)
        .join(f, f.c.function_hash == e.c.function_hash)
        .where(e.c.event_id == event_id)
    )
    found = conn.execute(query).first()
    return dict(found._mapping) if found is not None else None


def texts(conn: sa.Connection, fingerprint: str | None) -> dict[str, Any] | None:
    """The stored texts of a program (format -> text), its profile rows and what was left
    out; None when the store kept nothing for it."""
    if not fingerprint:
        return None
    p = models.programs
    found = conn.execute(sa.select(p).where(p.c.fingerprint == fingerprint)).first()
    if found is None:
        return None
    row = found._mapping
    out: dict[str, Any] = {"texts": {}, "left_out": list(row["left_out"] or []), "size_bytes": row["size_bytes"]}
    for fmt in PROGRAM_TEXT_FORMATS:
        if row[fmt] is not None:
            out["texts"][fmt] = zlib.decompress(row[fmt]).decode()
    out["profile"] = json.loads(zlib.decompress(row["profile"])) if row["profile"] is not None else None
    return out


def previous_compile(conn: sa.Connection, row: dict[str, Any]) -> str | None:
    """The compile of the same function in the same run just before this event's."""
    e = models.compile_events
    found = conn.execute(
        sa.select(e.c.event_id)
        .where(
            e.c.function_hash == row["function_hash"],
            e.c.run_id == row["run_id"],
            e.c.compiled.is_(True),
            e.c.timestamp < row["timestamp"],
        )
        .order_by(e.c.timestamp.desc())
        .limit(1)
    ).scalar()
    return found


def recent_compiles(conn: sa.Connection, function_hash: str, limit: int = 20) -> list[dict[str, Any]]:
    """The function's latest compiles that recorded a program, newest first."""
    e = models.compile_events
    return [
        dict(r)
        for r in conn.execute(
            sa.select(e.c.event_id, e.c.run_id, e.c.timestamp, e.c.function_hash, e.c.identical_to)
            .where(e.c.function_hash == function_hash, e.c.program_fingerprint.is_not(None))
            .order_by(e.c.timestamp.desc())
            .limit(limit)
        ).mappings()
    ]


def identical_between(
    conn: sa.Connection, function_hash: str, run_id: str, start: float, end: float
) -> tuple[int, float]:
    """Recompiles of the function in the run between ``start`` and ``end`` (inclusive)
    that produced the program compiled before, and their seconds."""
    e = models.compile_events
    count, seconds = conn.execute(
        sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(cost_expr(e)), 0.0)).where(
            e.c.function_hash == function_hash,
            e.c.run_id == run_id,
            e.c.timestamp >= start,
            e.c.timestamp <= end,
            e.c.identical_to.is_not(None),
        )
    ).one()
    return int(count), float(seconds)
