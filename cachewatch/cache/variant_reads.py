"""What a run compiled for one function, as a warm-up reads it back: each distinct
signature it traced and compiled, with the run's JAX and devices (a record from
another JAX or another kind of device cannot be compiled ahead here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..core.events import Kind
from ..store import models
from ..store.runs import RunRef, find_run


@dataclass(frozen=True)
class RecordedVariant:
    """One signature the run compiled: its leaves as recorded (path, shape, dtype,
    weak type, or a static value's repr), where, and what compiling it cost."""

    signature: tuple[dict[str, Any], ...]
    signature_hash: str
    device: str | None
    compile_seconds: float


@dataclass(frozen=True)
class RecordedFunction:
    run: RunRef
    variants: tuple[RecordedVariant, ...]
    # The run compiled a function of this qualified name and module under another hash:
    # its source changed since.
    changed_since: bool


def recorded_function(
    conn: sa.Connection, run: str, function_hash: str, qualname: str, module: str
) -> RecordedFunction:
    """The distinct signatures ``run`` traced and compiled for the function (warm-ups
    included, failed and nested traces left out), first compile of each first."""
    found = find_run(conn, run)
    e, f = models.compile_events, models.functions
    rows = conn.execute(
        sa.select(e.c.signature, e.c.signature_hash, e.c.device, e.c.compile_seconds)
        .where(
            e.c.run_id == found.run_id,
            e.c.function_hash == function_hash,
            e.c.compiled,
            e.c.kind.in_([Kind.TRACE, Kind.AHEAD]),
            e.c.error.is_(None),
            e.c.signature_hash != "",
        )
        .order_by(e.c.timestamp)
    ).all()
    variants: dict[str, RecordedVariant] = {}
    for row in rows:
        if row.signature_hash not in variants:
            variants[row.signature_hash] = RecordedVariant(
                tuple(row.signature or ()), row.signature_hash, row.device, float(row.compile_seconds or 0.0)
            )
    changed = False
    if not variants:
        other = conn.execute(
            sa.select(sa.func.count())
            .select_from(e.join(f, f.c.function_hash == e.c.function_hash))
            .where(
                e.c.run_id == found.run_id,
                e.c.compiled,
                f.c.qualname == qualname,
                f.c.module == module,
                f.c.function_hash != function_hash,
            )
        ).scalar_one()
        changed = bool(other)
    return RecordedFunction(found, tuple(variants.values()), changed)
