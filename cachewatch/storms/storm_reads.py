"""What the storm finder reasons over: the recompiles after warm-up, with their diffs, read
by span or by id, and the names of the functions they belong to. Frozen dataclasses, so
the judging in diagnosis.py never touches SQL."""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import sqlalchemy as sa

from ..core.events import Cause, Kind
from ..core.texts import static_made_anew
from ..store import models, rollup
from ..store.columns import Filters, cost_expr, in_chunks


@dataclass(frozen=True, slots=True)
class Recompile:
    """One compile as the advice and the storm finder read it."""

    function_hash: str
    run_id: str
    timestamp: float
    cause: str
    diff: list[dict[str, Any]] | None
    call_site: str | None
    signature_hash: str = ""
    seconds: float = 0.0  # trace, lowering and XLA compile seconds
    while_repeating: bool = False  # the program had come back to an earlier signature first
    call_number: int | None = None  # which call of the function compiled (None: not counted)
    event_id: str = ""  # set where the diff is read later (see with_diffs)
    into: str = ""  # the library module the call site called into (read with the diff)
    callee: str = ""  # and the qualified name of the function it called there


_RECOMPILE_COLUMNS = (
    "function_hash",
    "run_id",
    "timestamp",
    "cause",
    "diff",
    "call_site",
    "signature_hash",
    "while_repeating",
    "call_number",
)


def _recompile_columns(e: sa.Table, diffs: bool = True, event_id: bool = False) -> list[Any]:
    """The columns of a Recompile (without ``diffs``, the bulk of a row, a null diff), and
    with ``event_id`` the event id to read its diff or find it by."""
    named = [e.c[name] if diffs or name != "diff" else sa.null().label("diff") for name in _RECOMPILE_COLUMNS]
    return [*named, cost_expr(e).label("seconds"), *([e.c.event_id] if event_id else [])]


def _recompiles(result: Iterable[sa.Row[*tuple[Any, ...]]]) -> list[Recompile]:
    return [
        Recompile(
            r.function_hash,
            r.run_id,
            float(r.timestamp),
            r.cause,
            r.diff,
            r.call_site,
            r.signature_hash or "",
            float(r.seconds or 0.0),
            bool(r.while_repeating),
            r.call_number,
            getattr(r, "event_id", ""),
        )
        for r in result
    ]


# A run's recompiles whose diffs are read as one range of its events by time (their
# functions' events from the first to the last) rather than by id, from this many on: a
# storm's tens of thousands are then one read, not a lookup each.
DIFFS_BY_RANGE = 1_000


def with_diffs(conn: sa.Connection, rows: list[Recompile]) -> list[Recompile]:
    """The recompiles with their diffs (and the library their call site called into),
    read for just these events (by event id, or for many of one run, by the span they cover)."""
    e = models.compile_events
    wanted = [r for r in rows if r.event_id and r.diff is None]  # the rest carry theirs
    per_run: dict[str, list[Recompile]] = collections.defaultdict(list)
    for r in wanted:
        per_run[r.run_id].append(r)
    diffs: dict[str, tuple[Any, tuple[str, str]]] = {}
    by_id: list[str] = []
    for run_id, found in per_run.items():
        if len(found) < DIFFS_BY_RANGE:
            by_id.extend(r.event_id for r in found)
            continue
        ids = {r.event_id for r in found}
        q = sa.select(e.c.event_id, e.c.diff, e.c.user_stack).where(
            e.c.run_id == run_id,
            e.c.timestamp.between(min(r.timestamp for r in found), max(r.timestamp for r in found)),
            e.c.function_hash.in_({r.function_hash for r in found}),
        )
        diffs.update((event_id, (diff, _into(stack))) for event_id, diff, stack in conn.execute(q) if event_id in ids)
    for chunk in in_chunks(list(set(by_id))):
        q = sa.select(e.c.event_id, e.c.diff, e.c.user_stack).where(e.c.event_id.in_(chunk))
        diffs.update((event_id, (diff, _into(stack))) for event_id, diff, stack in conn.execute(q))
    return [
        replace(r, diff=read[0], into=read[1][0], callee=read[1][1])
        if r.event_id and (read := diffs.get(r.event_id))
        else r
        for r in rows
    ]


def _into(stack: Any) -> tuple[str, str]:
    """The library module the call site called into and the function it called there, from
    an event's user frames."""
    if isinstance(stack, list) and stack and isinstance(stack[0], dict):
        return str(stack[0].get("into") or ""), str(stack[0].get("callee") or "")
    return "", ""


def recompiles_by_id(conn: sa.Connection, event_ids: list[str], diffs: bool = False) -> list[Recompile]:
    """These events as recompiles, each with its event id, and with its diff when
    ``diffs`` (else :func:`with_diffs` reads them later), in no order."""
    e = models.compile_events
    columns = _recompile_columns(e, diffs, event_id=True)
    found: list[Recompile] = []
    for chunk in in_chunks(event_ids):
        q = sa.select(*columns).where(e.c.event_id.in_(chunk))
        found.extend(_recompiles(conn.execute(q)))
    return found


def in_time_order(rows: Iterable[Recompile]) -> list[Recompile]:
    """Recompiles by time, ties by function and event: one order however they were read."""
    return sorted(rows, key=lambda r: (r.timestamp, r.function_hash, r.event_id))


def served_signatures(conn: sa.Connection, run_id: str, function_hash: str, signature_hashes: set[str]) -> set[str]:
    """The signatures among ``signature_hashes`` that one function's calls in one run met
    besides the calls that compiled them: those with calls of their own in the run's
    statistics (a call is counted to a signature only once one was named as of it)."""
    if not signature_hashes:
        return set()
    s = models.call_stats
    rows = sa.select(s.c.signature_hash, s.c.run_buckets, s.c.sampled_calls, s.c.sampled_seconds, s.c.calls).where(
        s.c.run_id == run_id, s.c.function_hash == function_hash, s.c.signature_hash.in_(sorted(signature_hashes))
    )
    return {
        row["signature_hash"]
        for row in conn.execute(rows).mappings()
        if any(calls for _, calls in rollup.row_buckets(row).values())
    }


def compile_seconds_between(conn: sa.Connection, run_id: str, start: float, end: float) -> float:
    """Seconds one run spent tracing, lowering and compiling (every function) in the events
    stamped from ``start`` to ``end``."""
    e = models.compile_events
    q = sa.select(sa.func.sum(cost_expr(e))).where(e.c.run_id == run_id, e.c.timestamp >= start, e.c.timestamp <= end)
    return float(conn.execute(q).scalar() or 0.0)


def recompiles_past_first(
    conn: sa.Connection,
    filters: Filters,
    function_hashes: list[str] | None = None,
    *,
    diffs: bool = True,
    dense: tuple[int, float] | None = None,
) -> list[tuple[Recompile, bool]]:
    """Every compile that was not a function's first, with its warm-up flag, by function,
    run and time (compiles made ahead of time by cachewatch.warmup are never recompiles).
    With ``function_hashes``: those functions' own, and those of the lines of user code
    that reached them (a storm of eager code or library jits is found per line). Without
    ``diffs``, each carries its event id instead, for :func:`with_diffs`. With ``dense``
    (``threshold``, ``window``): only those of a function, or of a line of user code, in a
    run where ``threshold`` of them came within ``window`` seconds somewhere (a burst needs
    that), all of theirs; the rest of a fleet's store never leaves the database."""
    e = models.compile_events
    recompiled = sa.text(models.RECOMPILED)  # word for word the partial indexes' condition, so they serve
    q = filters.apply(
        e,
        sa.select(*_recompile_columns(e, diffs, event_id=not diffs), e.c.warmup)
        .where(recompiled)
        .order_by(e.c.function_hash, e.c.run_id, e.c.timestamp),
    )
    members = None
    if function_hashes is not None:
        sites = filters.apply(
            e,
            sa.select(e.c.call_site).where(
                e.c.function_hash.in_(function_hashes), e.c.compiled, e.c.call_site.is_not(None)
            ),
        )
        members = (e.c.function_hash.in_(function_hashes), e.c.call_site.in_(sites))
        q = q.where(sa.or_(*members))
    rows = conn.execute(q).all() if dense is None else _dense_rows(conn, q, filters, recompiled, dense, members)
    return list(zip(_recompiles(rows), (bool(r.warmup) for r in rows), strict=False))


def _dense_rows(
    conn: sa.Connection,
    q: sa.Select[Any],
    filters: Filters,
    recompiled: sa.TextClause,
    dense: tuple[int, float],
    members: tuple[sa.ColumnElement[bool], sa.ColumnElement[bool]] | None,
) -> list[sa.Row[Any]]:
    """The rows of ``q`` of the dense pairs (see :func:`_dense`), read run by run. The pairs
    are fetched first: as subqueries under an OR, PostgreSQL ran them again for every row
    of a large store. ``members``: the conditions that keep the functions asked about and
    the lines that reached them, so the window runs over their recompiles alone."""
    found_pairs = _dense(filters, recompiled, *dense, members)
    by_function, by_line = (set(map(tuple, conn.execute(pairs))) for pairs in found_pairs)
    runs = sorted({run_id for run_id, _ in by_function | by_line})
    e = models.compile_events
    found = [
        row
        for chunk in in_chunks(runs)
        for row in conn.execute(q.where(e.c.run_id.in_(chunk)))
        if (row.run_id, row.function_hash) in by_function or (row.run_id, row.call_site) in by_line
    ]
    found.sort(key=lambda row: (row.function_hash, row.run_id, row.timestamp))
    return found


def _dense(
    filters: Filters,
    recompiled: sa.TextClause,
    threshold: int,
    window: float,
    members: tuple[sa.ColumnElement[bool], sa.ColumnElement[bool]] | None = None,
) -> tuple[sa.Select[Any], sa.Select[Any]]:
    """The (run, function) and (run, line of user code) pairs among the recompiles in which
    ``threshold`` consecutive ones fit in ``window`` seconds: those a burst can come from.
    ``members`` (functions, lines) keeps whole partitions only, so the window over those
    left is the same as over every recompile."""
    e = models.compile_events
    steps_back = max(threshold - 1, 0)

    def pairs(column: sa.ColumnElement[Any], member: sa.ColumnElement[bool] | None) -> sa.Select[Any]:
        earlier = sa.func.lag(e.c.timestamp, steps_back).over(partition_by=(e.c.run_id, column), order_by=e.c.timestamp)
        inner = sa.select(e.c.run_id, column.label("member"), (e.c.timestamp - earlier).label("span")).where(recompiled)
        if member is not None:
            inner = inner.where(member)
        spans = filters.apply(e, inner).subquery()
        return sa.select(spans.c.run_id, spans.c.member).where(spans.c.span <= window).distinct()

    by_function, by_line = members if members is not None else (None, None)
    return pairs(e.c.function_hash, by_function), pairs(e.c.call_site, by_line)


def dominant_cause_rows(
    conn: sa.Connection, function_hash: str, filters: Filters, cause: str, limit: int = 500
) -> list[Recompile]:
    """The latest compiles of one cause, with their diffs and call sites (for the advice)."""
    e = models.compile_events
    q = filters.apply(
        e,
        sa.select(*_recompile_columns(e))
        .where(e.c.function_hash == function_hash, e.c.cause == cause, e.c.compiled)
        .order_by(e.c.timestamp.desc())
        .limit(limit),
    )
    return _recompiles(conn.execute(q))


@dataclass(frozen=True, slots=True)
class WarmupCompile:
    """A compile a run flagged as warm-up (not one made ahead of time by cachewatch.warmup),
    as the end of warm-up is judged from: where it came from and why it compiled."""

    run_id: str
    timestamp: float
    function_hash: str
    cause: str
    call_site: str | None
    module: str
    user_stack: list[dict[str, str]] | None = None
    remade_static: bool = False  # its changed static values were made anew (core.texts.static_made_anew)


def warmup_compiles_of(conn: sa.Connection, run_ids: list[str]) -> list[WarmupCompile]:
    """The runs' compiles flagged as warm-up, by run and time."""
    if not run_ids:
        return []
    e, f = models.compile_events, models.functions
    # Only a new static value's diff can tell a value made anew: no other diff is read.
    static_diff = sa.type_coerce(sa.case((e.c.cause == Cause.NEW_STATIC_VALUE.value, e.c.diff)), e.c.diff.type)
    q = (
        sa.select(
            e.c.run_id,
            e.c.timestamp,
            e.c.function_hash,
            e.c.cause,
            e.c.call_site,
            f.c.module,
            e.c.user_stack,
            static_diff.label("static_diff"),
        )
        .join(f, f.c.function_hash == e.c.function_hash)
        .where(e.c.run_id.in_(run_ids), e.c.compiled, e.c.warmup, e.c.kind != Kind.AHEAD.value)
        .order_by(e.c.run_id, e.c.timestamp)
    )
    return [
        WarmupCompile(
            r.run_id,
            float(r.timestamp),
            r.function_hash,
            r.cause,
            r.call_site,
            r.module or "",
            r.user_stack,
            static_made_anew(r.static_diff),
        )
        for r in conn.execute(q)
    ]


def count_warmup_compiles(conn: sa.Connection, run_id: str, *, before: float | None) -> int:
    """The run's compiles flagged as warm-up (made before ``before``, when given)."""
    e = models.compile_events
    query = sa.select(sa.func.count()).where(e.c.run_id == run_id, e.c.compiled, e.c.warmup)
    if before is not None:
        query = query.where(e.c.timestamp < before)
    return int(conn.execute(query).scalar_one())


@dataclass(frozen=True, slots=True)
class Flush:
    """One function's call statistics written at one time in one run: the calls counted
    since its previous statistics (written at ``previous``, None for its first), whether
    the cache served some of them (``served``: more calls than compiles of the function
    in that span), and ``since``: the run's previous collection of statistics (any
    function's; None before the first), after which every one of these calls was made.
    A collection reads every counter, so a function without a row in it had made no call
    by then: its next row counts calls made after that collection, not after its own
    previous row, which may be long before."""

    run_id: str
    function_hash: str
    timestamp: float
    previous: float | None
    calls: int
    served: bool
    since: float | None


@dataclass(frozen=True, slots=True)
class SeenWorking:
    """When a run was last seen working: ``compiled``, the end of its latest compile (None
    without one), and its latest statistics that counted calls the cache served: written
    at ``served_at``, of calls made after ``served_since`` (see :class:`Flush`)."""

    compiled: float | None
    served_at: float | None
    served_since: float | None

    def after(self, moment: float) -> float | None:
        """When the run was last seen working, from evidence of work after ``moment``
        only: a flush of served calls counts when all its calls came after ``moment``
        (its calls may have been made at any time since the previous collection, so a
        flush written late, at exit, says nothing of when they were made)."""
        heard = [self.compiled] if self.compiled is not None else []
        if self.served_at is not None and self.served_since is not None and self.served_since >= moment:
            heard.append(self.served_at)
        return max(heard) if heard else None


def last_seen_working(conn: sa.Connection, run_ids: list[str]) -> dict[str, SeenWorking]:
    """Per run, when it was last seen working (see :class:`SeenWorking`). The latest flush
    of served calls is the one with the latest ``since`` too (``since`` is the run's
    collection before it). Statistics written at exit that count only the calls that
    compiled say the process ended, not that the program went on. Judged in SQL, so a
    store of a fleet's runs never ships their statistics here."""
    e = models.compile_events
    compiled: dict[str, float] = {}
    ends = sa.select(e.c.run_id, sa.func.max(e.c.timestamp + cost_expr(e))).where(e.c.run_id.in_(run_ids), e.c.compiled)
    for run_id, last in conn.execute(ends.group_by(e.c.run_id)):
        if last is not None:
            compiled[run_id] = float(last)
    flushes = _flushes(run_ids).subquery()
    latest = sa.func.row_number().over(partition_by=flushes.c.run_id, order_by=flushes.c.timestamp.desc())
    ranked = sa.select(flushes.c.run_id, flushes.c.timestamp, flushes.c.since, latest.label("rank"))
    ranked_served = ranked.where(flushes.c.served).subquery()
    served = {
        run_id: (float(stamp), None if since is None else float(since))
        for run_id, stamp, since in conn.execute(
            sa.select(ranked_served.c.run_id, ranked_served.c.timestamp, ranked_served.c.since).where(
                ranked_served.c.rank == 1
            )
        )
    }
    return {
        run_id: SeenWorking(compiled.get(run_id), *served.get(run_id, (None, None)))
        for run_id in set(compiled) | set(served)
    }


def _flushes(run_ids: list[str], function_hashes: list[str] | None = None) -> sa.Select[Any]:
    """Per run, function and flush time: the calls the statistics counted (a flush writes
    one row per timed signature; the function's calls are on one of them), when the
    function's previous statistics were written, the run's previous collection
    (``since``), and whether the cache served some of the calls. The one place the rule
    "served" is written, for the run's last-seen time and the per-function spans alike.
    Rows that record a release of executables are written when the release happened, not
    by a collection: they count no calls and bound no span."""
    s, e = models.call_stats, models.compile_events
    collected = s.c.released_by.is_(None)
    counted = sa.select(s.c.run_id, s.c.function_hash, s.c.timestamp, sa.func.sum(s.c.calls).label("calls")).where(
        s.c.run_id.in_(run_ids), collected
    )
    if function_hashes is not None:
        counted = counted.where(s.c.function_hash.in_(function_hashes))
    per_flush = counted.group_by(s.c.run_id, s.c.function_hash, s.c.timestamp).subquery()
    previous = sa.func.lag(per_flush.c.timestamp).over(
        partition_by=(per_flush.c.run_id, per_flush.c.function_hash), order_by=per_flush.c.timestamp
    )
    # Every collection of the run (one time stamp, whichever functions it wrote).
    times = sa.select(s.c.run_id, s.c.timestamp).where(s.c.run_id.in_(run_ids), collected).distinct().subquery()
    collections = sa.select(
        times.c.run_id,
        times.c.timestamp,
        sa.func.lag(times.c.timestamp).over(partition_by=times.c.run_id, order_by=times.c.timestamp).label("since"),
    ).subquery()
    spans = (
        sa.select(per_flush, previous.label("previous"), collections.c.since)
        .join(
            collections,
            sa.and_(collections.c.run_id == per_flush.c.run_id, collections.c.timestamp == per_flush.c.timestamp),
        )
        .subquery()
    )
    compiled_in_span = (
        sa.select(sa.func.count())
        .where(
            e.c.function_hash == spans.c.function_hash,
            e.c.run_id == spans.c.run_id,
            e.c.compiled,
            e.c.timestamp <= spans.c.timestamp,
            # Both bounds on the time, so the span is one range of the index of the run's
            # events by function and time (an OR would scan the function's events up to it).
            e.c.timestamp > sa.func.coalesce(spans.c.previous, _BEFORE_ANY_TIME),
        )
        .scalar_subquery()
    )
    return sa.select(spans, (sa.func.coalesce(spans.c.calls, 0) > compiled_in_span).label("served"))


def flushes_of(conn: sa.Connection, run_ids: list[str], function_hashes: list[str]) -> list[Flush]:
    """The functions' call statistics in the runs, one per flush, in time order."""
    if not function_hashes:
        return []
    flushes = _flushes(run_ids, function_hashes).subquery()
    q = sa.select(flushes).order_by(flushes.c.run_id, flushes.c.function_hash, flushes.c.timestamp)
    return [
        Flush(
            r.run_id,
            r.function_hash,
            float(r.timestamp),
            None if r.previous is None else float(r.previous),
            int(r.calls or 0),
            bool(r.served),
            None if r.since is None else float(r.since),
        )
        for r in conn.execute(q)
    ]


# Earlier than any event's time stamp: the lower bound of a function's first flush span.
_BEFORE_ANY_TIME = sa.literal(-1e300, sa.Float)


@dataclass(frozen=True, slots=True)
class FramedCompile:
    """A compile with the user's frames around it (what tells a loop from one pass)."""

    event_id: str
    function_hash: str
    call_site: str | None
    cause: str
    user_stack: list[dict[str, str]] | None


def compiles_in_span(conn: sa.Connection, run_id: str, start: float, end: float) -> list[FramedCompile]:
    """Every compile of the run from ``start`` to ``end`` (any function), in time order,
    with its user frames."""
    e = models.compile_events
    q = (
        sa.select(e.c.event_id, e.c.function_hash, e.c.call_site, e.c.cause, e.c.user_stack)
        .where(e.c.run_id == run_id, e.c.compiled, e.c.timestamp.between(start, end))
        .order_by(e.c.timestamp, e.c.id)
    )
    return [
        FramedCompile(
            r.event_id, r.function_hash, r.call_site, r.cause, r.user_stack if isinstance(r.user_stack, list) else None
        )
        for r in conn.execute(q)
    ]


@dataclass(frozen=True, slots=True)
class CountedCompile:
    """A compile of a function whose calls are counted: which call compiled, and where."""

    function_hash: str
    timestamp: float
    call_site: str
    call_number: int
    signature_hash: str
    while_repeating: bool


def counted_compiles_in_span(conn: sa.Connection, run_id: str, start: float, end: float) -> list[CountedCompile]:
    """The run's compiles from ``start`` to ``end`` that say which call of their function
    compiled (a jit whose calls are counted) and at which line, in time order."""
    e = models.compile_events
    q = (
        sa.select(
            e.c.function_hash, e.c.timestamp, e.c.call_site, e.c.call_number, e.c.signature_hash, e.c.while_repeating
        )
        .where(
            e.c.run_id == run_id,
            e.c.compiled,
            e.c.call_number.is_not(None),
            e.c.call_site.is_not(None),
            e.c.timestamp.between(start, end),
        )
        .order_by(e.c.timestamp, e.c.id)
    )
    return [
        CountedCompile(
            r.function_hash,
            float(r.timestamp),
            r.call_site,
            int(r.call_number),
            r.signature_hash or "",
            bool(r.while_repeating),
        )
        for r in conn.execute(q)
    ]
