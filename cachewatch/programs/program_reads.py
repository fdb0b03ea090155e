"""Reading what was compiled: an event with its program's texts and equation profile;
recompiles that produced a program compiled before, programs two functions share, and
the program figures a function's compile-cost profile is made of (frozen rows)."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import sqlalchemy as sa

from ..core.events import PROGRAM_TEXT_FORMATS
from ..store import models
from ..store.columns import EVENT_SELECT, EventRow, Filters, cost_expr, recompiled


def event(conn: sa.Connection, event_id: str) -> EventRow | None:
    """One event row with its function's name (``EVENT_SELECT``), or None."""
    e, f = models.compile_events, models.functions
    query = (
        sa.select(*EVENT_SELECT, f.c.name, f.c.qualname)
        .join(f, f.c.function_hash == e.c.function_hash)
        .where(e.c.event_id == event_id)
    )
    found = conn.execute(query).first()
    return cast(EventRow, dict(found._mapping)) if found is not None else None


@dataclass(frozen=True, slots=True)
class ProgramTexts:
    """What the store kept of one program: its texts, its equation profile, and the
    formats recorded but left out under the per-program cap."""

    texts: dict[str, str]  # format (jaxpr, stablehlo, hlo) -> text
    left_out: list[str]
    size_bytes: int | None
    profile: list[list[Any]] | None  # rows of file, line, function, primitive, in a loop body, equations


def texts(conn: sa.Connection, fingerprint: str | None) -> ProgramTexts | None:
    """The stored texts of a program (format -> text), its profile rows and what was left
    out; None when the store kept nothing for it."""
    if not fingerprint:
        return None
    p = models.programs
    found = conn.execute(sa.select(p).where(p.c.fingerprint == fingerprint)).first()
    if found is None:
        return None
    row = found._mapping
    return ProgramTexts(
        texts={fmt: zlib.decompress(row[fmt]).decode() for fmt in PROGRAM_TEXT_FORMATS if row[fmt] is not None},
        left_out=list(row["left_out"] or []),
        size_bytes=row["size_bytes"],
        profile=json.loads(zlib.decompress(row["profile"])) if row["profile"] is not None else None,
    )


@dataclass(frozen=True, slots=True)
class KeptProfile:
    """The equation profile kept with a program (None: the program's row has none)."""

    rows: list[list[Any]] | None  # as ProgramTexts.profile


def profile(conn: sa.Connection, fingerprint: str | None) -> KeptProfile | None:
    """A program's equation profile alone, its texts left unread (the flame graph needs
    no text); None when the store kept nothing for the program."""
    if not fingerprint:
        return None
    p = models.programs
    found = conn.execute(sa.select(p.c.profile).where(p.c.fingerprint == fingerprint)).first()
    if found is None:
        return None
    kept = found._mapping["profile"]
    return KeptProfile(json.loads(zlib.decompress(kept)) if kept is not None else None)


def lowered_text(conn: sa.Connection, lowered_fingerprint: str | None) -> str | None:
    """The StableHLO text of one lowered module, kept under its own fingerprint (the
    optimised program's row is shared by modules that differ in their names); None when
    the store kept none."""
    if not lowered_fingerprint:
        return None
    p = models.programs
    found = conn.execute(sa.select(p.c.stablehlo).where(p.c.fingerprint == lowered_fingerprint)).scalar()
    return zlib.decompress(found).decode() if found is not None else None


class CompileRef(NamedTuple):
    """Where one compile sits: enough to find the compile it is diffed with."""

    event_id: str
    run_id: str
    timestamp: float
    function_hash: str
    identical_to: str | None

    @classmethod
    def of(cls, row: EventRow) -> CompileRef:
        return cls(row["event_id"], row["run_id"], row["timestamp"], row["function_hash"], row.get("identical_to"))


def previous_compile(conn: sa.Connection, compile: CompileRef) -> str | None:
    """The compile of the same function in the same run just before this one."""
    e = models.compile_events
    found = conn.execute(
        sa.select(e.c.event_id)
        .where(
            e.c.function_hash == compile.function_hash,
            e.c.run_id == compile.run_id,
            e.c.compiled.is_(True),
            e.c.timestamp < compile.timestamp,
        )
        .order_by(e.c.timestamp.desc())
        .limit(1)
    ).scalar()
    return found


def recent_compiles(conn: sa.Connection, function_hash: str, limit: int = 20) -> list[CompileRef]:
    """The function's latest compiles that recorded a program, newest first."""
    e = models.compile_events
    return [
        CompileRef(*row)
        for row in conn.execute(
            sa.select(e.c.event_id, e.c.run_id, e.c.timestamp, e.c.function_hash, e.c.identical_to)
            .where(e.c.function_hash == function_hash, e.c.program_fingerprint.is_not(None))
            .order_by(e.c.timestamp.desc())
            .limit(limit)
        )
    ]


# ------------------------------------------------- wasted compiles and compile cost


@dataclass(frozen=True, slots=True)
class WastedRecompiles:
    """Recompiles of one function and cause that produced the program it compiled before."""

    function_hash: str
    qualname: str
    cause: str
    recompiles: int
    seconds: float
    persistent_cache_would_serve: int  # the lowered module was the same too
    below_min_compile_time: int  # of those, compiled faster than the persistent cache keeps
    module: str  # the function's (OP_BY_OP_MODULE for a primitive run op by op)
    file: str  # where it is defined: the user's code, or a library's


@dataclass(frozen=True, slots=True)
class SharedProgram:
    """Compiles of one function that produced another function's program."""

    function_hash: str
    qualname: str
    other_hash: str
    other_qualname: str
    compiles: int
    seconds: float


@dataclass(frozen=True, slots=True)
class ProfiledCompile:
    """One compile's program figures, as the compile-cost profile reads them."""

    event_id: str
    run_id: str
    timestamp: float
    jaxpr_eqns: int | None
    hlo_ops: int | None
    compile_seconds: float | None
    seconds: float  # trace, lowering and XLA compile seconds
    eqns_by_line: list[dict[str, Any]] | None
    memory: dict[str, int] | None
    identical_to: str | None


def _where(e: sa.Table, filters: Filters) -> list[Any]:
    out = []
    if filters.run_id:
        out.append(e.c.run_id == filters.run_id)
    if filters.since is not None:
        out.append(e.c.timestamp >= filters.since)
    if filters.until is not None:
        out.append(e.c.timestamp < filters.until)
    return out


def _wasted(e: sa.FromClause, earlier: sa.FromClause) -> list[Any]:
    """A wasted recompile: the same function compiled the same program before. A first
    compile is no recompile, and another function's program (``same_program_as``; older
    stores set ``identical_to`` across functions too) is no waste."""
    return [
        e.c.identical_to.is_not(None),
        earlier.c.function_hash == e.c.function_hash,
        recompiled(e),
    ]


def wasted_recompiles(
    conn: sa.Connection, filters: Filters, function_hashes: list[str] | None, min_compile_seconds: float
) -> list[WastedRecompiles]:
    """Wasted recompiles per function and cause; ``below_min_compile_time`` counts those a
    persistent cache would have served had they compiled for ``min_compile_seconds`` or more."""
    e, earlier, f = models.compile_events, models.compile_events.alias("earlier"), models.functions
    same_lowered = sa.and_(
        e.c.lowered_fingerprint.is_not(None), e.c.lowered_fingerprint == earlier.c.lowered_fingerprint
    )
    quick = sa.and_(same_lowered, sa.func.coalesce(e.c.compile_seconds, 0.0) < min_compile_seconds)
    query = (
        sa.select(
            e.c.function_hash,
            f.c.qualname,
            f.c.module,
            f.c.file,
            e.c.cause,
            sa.func.count().label("recompiles"),
            sa.func.sum(cost_expr(e)).label("seconds"),
            sa.func.sum(sa.case((same_lowered, 1), else_=0)).label("persistent_cache_would_serve"),
            sa.func.sum(sa.case((quick, 1), else_=0)).label("below_min_compile_time"),
        )
        .join(earlier, earlier.c.event_id == e.c.identical_to)
        .join(f, f.c.function_hash == e.c.function_hash)
        .where(*_wasted(e, earlier), *_where(e, filters))
        .group_by(e.c.function_hash, f.c.qualname, f.c.module, f.c.file, e.c.cause)
    )
    if function_hashes is not None:
        query = query.where(e.c.function_hash.in_(function_hashes))
    return [
        WastedRecompiles(
            function_hash=row.function_hash,
            qualname=row.qualname,
            cause=row.cause,
            recompiles=row.recompiles,
            seconds=float(row.seconds or 0.0),
            persistent_cache_would_serve=int(row.persistent_cache_would_serve or 0),
            below_min_compile_time=int(row.below_min_compile_time or 0),
            module=row.module or "",
            file=row.file or "",
        )
        for row in conn.execute(query)
    ]


class Span(NamedTuple):
    """Some functions' compiles in one run between two times (inclusive): a storm's."""

    function_hashes: tuple[str, ...]
    run_id: str
    start: float
    end: float


def wasted_between(
    conn: sa.Connection, function_hashes: list[str], run_id: str, start: float, end: float
) -> tuple[int, float]:
    """Wasted recompiles of the functions in the run between ``start`` and ``end`` (inclusive), and their seconds."""
    (found,) = wasted_in_spans(conn, [Span(tuple(function_hashes), run_id, start, end)])
    return found


def wasted_in_spans(conn: sa.Connection, spans: list[Span]) -> list[tuple[int, float]]:
    """:func:`wasted_between` for each span, in one query (a page of storms asks for
    fifty; one query each was a round trip each)."""
    if not spans:
        return []
    rows = [(i, h, span.run_id, span.start, span.end) for i, span in enumerate(spans) for h in span.function_hashes]
    if not rows:
        return [(0, 0.0)] * len(spans)
    v = (
        sa.values(
            sa.column("span", sa.Integer),
            sa.column("function_hash", sa.String),
            sa.column("run_id", sa.String),
            sa.column("span_start", sa.Float),
            sa.column("span_end", sa.Float),
            name="spans",
        )
        .data(rows)
        .cte("spans")  # WITH spans(...) AS (VALUES ...): SQLite names no columns of an aliased VALUES
    )
    e, earlier = models.compile_events, models.compile_events.alias("earlier")
    q = (
        sa.select(v.c.span, sa.func.count(), sa.func.coalesce(sa.func.sum(cost_expr(e)), 0.0))
        .select_from(v)
        .join(
            e,
            sa.and_(
                e.c.function_hash == v.c.function_hash,
                e.c.run_id == v.c.run_id,
                e.c.timestamp >= v.c.span_start,
                e.c.timestamp <= v.c.span_end,
            ),
        )
        .join(earlier, earlier.c.event_id == e.c.identical_to)
        .where(*_wasted(e, earlier))
        .group_by(v.c.span)
    )
    found = {int(span): (int(count), float(seconds)) for span, count, seconds in conn.execute(q)}
    return [found.get(i, (0, 0.0)) for i in range(len(spans))]


def shared_programs(conn: sa.Connection, filters: Filters) -> list[SharedProgram]:
    """Per pair of functions, the compiles of the first that produced the second's program."""
    e, other, f, g = (
        models.compile_events,
        models.compile_events.alias("other"),
        models.functions,
        models.functions.alias("g"),
    )
    link = sa.func.coalesce(e.c.same_program_as, e.c.identical_to)
    query = (
        sa.select(
            e.c.function_hash,
            f.c.qualname,
            other.c.function_hash.label("other_hash"),
            g.c.qualname.label("other_qualname"),
            sa.func.count().label("compiles"),
            sa.func.sum(cost_expr(e)).label("seconds"),
        )
        .join(other, other.c.event_id == link)
        .join(f, f.c.function_hash == e.c.function_hash)
        .join(g, g.c.function_hash == other.c.function_hash)
        .where(link.is_not(None), other.c.function_hash != e.c.function_hash, *_where(e, filters))
        .group_by(e.c.function_hash, f.c.qualname, other.c.function_hash, g.c.qualname)
    )
    return [
        SharedProgram(
            function_hash=row.function_hash,
            qualname=row.qualname,
            other_hash=row.other_hash,
            other_qualname=row.other_qualname,
            compiles=row.compiles,
            seconds=float(row.seconds or 0.0),
        )
        for row in conn.execute(query)
    ]


def profiled_compiles(conn: sa.Connection, function_hash: str, filters: Filters, limit: int) -> list[ProfiledCompile]:
    """The function's latest compiles, newest first, with their program figures."""
    e = models.compile_events
    query = (
        sa.select(
            e.c.event_id,
            e.c.run_id,
            e.c.timestamp,
            e.c.jaxpr_eqns,
            e.c.hlo_ops,
            e.c.compile_seconds,
            cost_expr(e).label("seconds"),
            e.c.eqns_by_line,
            e.c.memory,
            e.c.identical_to,
        )
        .where(e.c.function_hash == function_hash, e.c.compiled.is_(True), *_where(e, filters))
        .order_by(e.c.timestamp.desc())
        .limit(limit)
    )
    return [ProfiledCompile(**row) for row in conn.execute(query).mappings()]
