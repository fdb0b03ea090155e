"""Compile-time regressions kept, found again per signature only once it changed.

A regression is a function and signature whose median uncached XLA compile seconds rose
by ``FACTOR`` times and ``MIN_SECONDS`` or more from one run that compiled it to the
next (cost_reads.slower_compiles). Counting them pairs the medians of every signature in
every run: at a fleet's year, seconds for each diagnosis. So they are kept
(``compile_regressions``), and every write that stores an uncached compile, and every
prune that drops one, marks its signature stale (``stale_regressions``, rollup.py).
A diagnosis first finds the stale signatures' regressions again (:func:`settle`, by
settling.py's rule), then reads the steepest from an index, and their total from the
count kept beside them (``kept_counts``, moved by each finding):

    found = slower_compiles(conn, limit=100)   # cost_reads.SlowerCompiles

Other thresholds than the kept ones are counted from the compiles, as before.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import sqlalchemy as sa

from ..store import models, queries, settling
from . import cost_reads
from .results import Regression

FACTOR = 1.5  # a rise of this many times ...
MIN_SECONDS = 0.05  # ... and of at least this many seconds is a regression
_NO_RATIO = 1.0  # the order of a rise from zero seconds (others: minus their ratio): it has none, and comes last


def slower_compiles(
    conn: sa.Connection, factor: float = FACTOR, min_seconds: float = MIN_SECONDS, limit: int | None = None
) -> cost_reads.SlowerCompiles:
    """:func:`cost_reads.slower_compiles`, steepest first, the same rises in the same order:
    from the kept regressions at the kept thresholds (once the stale ones are found
    again), else counted from the compiles."""
    if (factor, min_seconds) == (FACTOR, MIN_SECONDS) and settle(conn):
        return kept(conn, limit)
    return cost_reads.slower_compiles(conn, factor, min_seconds, limit)


def kept(conn: sa.Connection, limit: int | None = None) -> cost_reads.SlowerCompiles:
    """The kept regressions, steepest first (the order of cost_reads.slower_compiles)."""
    r = models.compile_regressions
    q = (
        sa.select(
            r.c.function_hash, r.c.signature_hash, r.c.run_before, r.c.run_after, r.c.seconds_before, r.c.seconds_after
        )
        .order_by(r.c.steepest_first, r.c.function_hash, r.c.signature_hash, r.c.run_after)
        .limit(limit)
    )
    shown = [cost_reads.SlowerCompile(*row) for row in conn.execute(q)]
    total = len(shown) if limit is None else kept_total(conn)
    return cost_reads.SlowerCompiles(shown, int(total))


def kept_total(conn: sa.Connection) -> int:
    """How many regressions are kept: the count kept beside them (``kept_counts``),
    else (a store that has none yet) counted."""
    c, r = models.kept_counts, models.compile_regressions
    kept = conn.execute(sa.select(c.c.rows).where(c.c.name == r.name)).scalar()
    if kept is None:
        return int(conn.execute(sa.select(sa.func.count()).select_from(r)).scalar_one())
    return int(kept)


def _recount(conn: sa.Connection, removed: int, added: int) -> None:
    """The kept count of regressions moved by what a finding removed and added (its
    finder holds the lock, or SQLite's one writer: no two move it at once)."""
    c, r = models.kept_counts, models.compile_regressions
    moved = conn.execute(sa.update(c).where(c.c.name == r.name).values(rows=c.c.rows - removed + added))
    if not moved.rowcount:
        total = conn.execute(sa.select(sa.func.count()).select_from(r)).scalar_one()
        conn.execute(sa.insert(c).values(name=r.name, rows=total))


def settle(conn: sa.Connection) -> bool:
    """Find the stale signatures' regressions again (settling.settle); False when this
    connection cannot write them: the caller then counts them from the compiles."""
    find_again = _find_again_in_sql if conn.dialect.name == "postgresql" else _find_again
    return settling.settle(conn, settling.REGRESSIONS, find_again)


def _find_again(conn: sa.Connection, stale: sa.Table) -> None:
    """The stale signatures' regressions found from their compiles (cost_reads.slower_compiles_of)."""
    r = models.compile_regressions
    keys = [(row.function_hash, row.signature_hash) for row in conn.execute(sa.select(stale))]
    found = cost_reads.slower_compiles_of(cost_reads.uncached_compiles(conn, keys), FACTOR, MIN_SECONDS)
    removed = conn.execute(sa.delete(r).where(settling.of_signatures(r, stale))).rowcount
    if found:
        conn.execute(sa.insert(r), [_kept_row(f) for f in found])
    _recount(conn, removed, len(found))


def _kept_row(found: cost_reads.SlowerCompile) -> dict[str, Any]:
    before = found.seconds_before
    return {
        "function_hash": found.function_hash,
        "signature_hash": found.signature_hash,
        "run_after": found.run_after,
        "run_before": found.run_before,
        "seconds_before": before,
        "seconds_after": found.seconds_after,
        "steepest_first": -found.seconds_after / before if before > 0 else _NO_RATIO,
    }


def _find_again_in_sql(conn: sa.Connection, stale: sa.Table) -> None:
    """:func:`_find_again` on PostgreSQL, in SQL (the medians and their pairs)."""
    r = models.compile_regressions
    removed = conn.execute(sa.delete(r).where(settling.of_signatures(r, stale))).rowcount
    rises = cost_reads.regression_pairs(FACTOR, MIN_SECONDS, stale).subquery()
    steepest_first = sa.case((rises.c.median_before > 0, -rises.c.median / rises.c.median_before), else_=_NO_RATIO)
    conn.execute(
        sa.insert(r).from_select(
            [c.name for c in r.c],  # in the table's order, as selected below
            sa.select(
                rises.c.function_hash,
                rises.c.signature_hash,
                rises.c.run_id,
                rises.c.run_before,
                rises.c.median_before,
                rises.c.median,
                steepest_first,
            ),
        )
    )
    # Counted, not the insert's rowcount (which an INSERT ... SELECT need not report).
    added = conn.execute(sa.select(sa.func.count()).select_from(r).where(settling.of_signatures(r, stale)))
    _recount(conn, removed, added.scalar_one())


# Regressions a diagnosis lists, steepest first: a fleet's store holds tens of thousands
# of rises between noisy runs, and the steepest are the ones to look at.
REGRESSIONS_SHOWN = 100


@dataclasses.dataclass(frozen=True)
class Regressions:
    """The steepest regressions (at most the limit asked for) and how many there are."""

    shown: list[Regression]
    total: int


def compile_regressions(
    conn: sa.Connection,
    factor: float = FACTOR,
    min_seconds: float = MIN_SECONDS,
    limit: int | None = None,
) -> Regressions:
    """The same function and signature compiling markedly slower in a later run,
    steepest first (``limit`` of them when given; ``total`` counts every one).

    Compares the median compile time per (function, signature) between consecutive
    runs that compiled it, and names the JAX versions of both runs.
    """
    slower = slower_compiles(conn, factor, min_seconds, limit)
    versions = cost_reads.run_versions(conn, {s.run_before for s in slower.shown} | {s.run_after for s in slower.shown})
    infos = queries.function_infos(conn, {s.function_hash for s in slower.shown}) if slower.shown else {}
    found = [
        Regression(
            function_hash=s.function_hash,
            signature_hash=s.signature_hash,
            run_before=s.run_before,
            run_after=s.run_after,
            seconds_before=s.seconds_before,
            seconds_after=s.seconds_after,
            ratio=s.seconds_after / s.seconds_before if s.seconds_before else None,
            jax_before="/".join(versions.get(s.run_before, ("", ""))),
            jax_after="/".join(versions.get(s.run_after, ("", ""))),
            qualname=infos[s.function_hash].qualname if s.function_hash in infos else "",
        )
        for s in slower.shown
    ]
    return Regressions(found, slower.total)
