"""Compile-time regressions kept, found again per signature only once it changed.

A regression is a function and signature whose median uncached XLA compile seconds rose
by ``FACTOR`` times and ``MIN_SECONDS`` or more from one run that compiled it to the
next (evidence.slower_compiles). Counting them pairs the medians of every signature in
every run: at a fleet's year, seconds for each diagnosis. So they are kept
(``compile_regressions``), and every write that stores an uncached compile, and every
prune that drops one, marks its signature stale (``stale_regressions``, rollup.py).
A diagnosis first finds the stale signatures' regressions again (:func:`settle`), then
reads the steepest from an index:

    found = regressions.slower_compiles(conn, limit=100)   # evidence.SlowerCompiles

Other thresholds than the kept ones are counted from the compiles, as before.
"""

from __future__ import annotations

import logging
from typing import Any

import sqlalchemy as sa

from . import evidence, models

logger = logging.getLogger("cachewatch.store")

FACTOR = 1.5  # a rise of this many times ...
MIN_SECONDS = 0.05  # ... and of at least this many seconds is a regression
# PostgreSQL advisory lock held while stale signatures are found again (beside
# engine.py's LABELS_LOCK and SCHEMA_LOCK and retention.py's RETENTION_LOCK).
REGRESSIONS_LOCK = 0x6361636865_04
_INSUFFICIENT_PRIVILEGE = "42501"  # PostgreSQL: a role that may read the store, not write it
_NO_RATIO = 1.0  # the order of a rise from zero seconds (others: minus their ratio): it has none, and comes last


def slower_compiles(
    conn: sa.Connection, factor: float = FACTOR, min_seconds: float = MIN_SECONDS, limit: int | None = None
) -> evidence.SlowerCompiles:
    """:func:`evidence.slower_compiles`, steepest first, the same rises in the same order:
    from the kept regressions at the kept thresholds (once the stale ones are found
    again), else counted from the compiles."""
    if (factor, min_seconds) == (FACTOR, MIN_SECONDS) and settle(conn):
        return kept(conn, limit)
    return evidence.slower_compiles(conn, factor, min_seconds, limit)


def kept(conn: sa.Connection, limit: int | None = None) -> evidence.SlowerCompiles:
    """The kept regressions, steepest first (the order of evidence.slower_compiles)."""
    r = models.compile_regressions
    q = (
        sa.select(
            r.c.function_hash, r.c.signature_hash, r.c.run_before, r.c.run_after, r.c.seconds_before, r.c.seconds_after
        )
        .order_by(r.c.steepest_first, r.c.function_hash, r.c.signature_hash, r.c.run_after)
        .limit(limit)
    )
    shown = [evidence.SlowerCompile(*row) for row in conn.execute(q)]
    total = len(shown) if limit is None else conn.execute(sa.select(sa.func.count()).select_from(r)).scalar_one()
    return evidence.SlowerCompiles(shown, int(total))


def settle(conn: sa.Connection) -> bool:
    """Find the stale signatures' regressions again, in a savepoint of ``conn``'s
    transaction; False when this connection cannot write them (a read-only store, a
    writer that got there first under a snapshot), and nothing was changed: the caller
    then counts the regressions from the compiles."""
    s = models.stale_regressions
    if conn.execute(sa.select(s.c.marks).limit(1)).first() is None:
        return True  # nothing changed since they were last found
    try:
        with conn.begin_nested():
            if conn.dialect.name == "postgresql":
                # Held to the end of the caller's transaction, so the next finder sees
                # this one's work committed (finders of a busy store take turns).
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(REGRESSIONS_LOCK)))
                _settle_in_sql(conn)
            else:
                _settle(conn)
    # Locked (SQLite's snapshot out of date), a serialization failure or a key another
    # finder wrote after this snapshot began (PostgreSQL's repeatable read), read-only.
    except (sa.exc.OperationalError, sa.exc.InternalError, sa.exc.IntegrityError) as exc:
        logger.info("kept regressions not brought up to date here (%s); counted from the compiles", exc.orig)
        return False
    except sa.exc.ProgrammingError as exc:
        if getattr(exc.orig, "sqlstate", None) != _INSUFFICIENT_PRIVILEGE:
            raise
        logger.info("kept regressions not brought up to date by a role that may only read; counted from the compiles")
        return False
    return True


def _settle(conn: sa.Connection) -> None:
    """The stale signatures' regressions found from their compiles (evidence.slower_compiles_of)."""
    s, r = models.stale_regressions, models.compile_regressions
    stale = conn.execute(sa.select(s.c.function_hash, s.c.signature_hash, s.c.marks)).all()
    if not stale:
        return
    keys = [(row.function_hash, row.signature_hash) for row in stale]
    found = evidence.slower_compiles_of(evidence.uncached_compiles(conn, keys), FACTOR, MIN_SECONDS)
    same = (r.c.function_hash == sa.bindparam("fh"), r.c.signature_hash == sa.bindparam("sh"))
    conn.execute(sa.delete(r).where(*same), [{"fh": fh, "sh": sh} for fh, sh in keys])
    if found:
        conn.execute(sa.insert(r), [_kept_row(f) for f in found])
    # Only the marks read: a writer that marked a signature meanwhile leaves it stale.
    marked = (s.c.function_hash == sa.bindparam("fh"), s.c.signature_hash == sa.bindparam("sh"))
    conn.execute(
        sa.delete(s).where(*marked, s.c.marks == sa.bindparam("m")),
        [{"fh": row.function_hash, "sh": row.signature_hash, "m": row.marks} for row in stale],
    )


def _kept_row(found: evidence.SlowerCompile) -> dict[str, Any]:
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


def _settle_in_sql(conn: sa.Connection) -> None:
    """:func:`_settle` on PostgreSQL, in SQL: the stale marks are copied once, so every
    step works on the same signatures however many writers mark more meanwhile."""
    s, r = models.stale_regressions, models.compile_regressions
    settling = sa.Table(
        "settling_regressions",
        sa.MetaData(),
        sa.Column("function_hash", sa.String(40)),
        sa.Column("signature_hash", sa.String(40)),
        sa.Column("marks", sa.BigInteger),
        prefixes=["TEMPORARY"],
    )
    settling.create(conn)  # gone with the savepoint if a step fails
    conn.execute(sa.insert(settling).from_select(["function_hash", "signature_hash", "marks"], sa.select(s)))
    ours = (r.c.function_hash == settling.c.function_hash, r.c.signature_hash == settling.c.signature_hash)
    conn.execute(sa.delete(r).where(*ours))
    rises = evidence.regression_pairs(FACTOR, MIN_SECONDS, settling).subquery()
    steepest_first = sa.case((rises.c.median_before > 0, -rises.c.median / rises.c.median_before), else_=_NO_RATIO)
    columns = [
        "function_hash",
        "signature_hash",
        "run_after",
        "run_before",
        "seconds_before",
        "seconds_after",
        "steepest_first",
    ]
    conn.execute(
        sa.insert(r).from_select(
            columns,
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
    conn.execute(
        sa.delete(s).where(
            s.c.function_hash == settling.c.function_hash,
            s.c.signature_hash == settling.c.signature_hash,
            s.c.marks == settling.c.marks,
        )
    )
    settling.drop(conn)
