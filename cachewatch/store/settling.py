"""Kept results found again only where the store changed: the one mechanism.

Some answers are too costly to work out from the whole store on every read, so they
are kept, each declared once below (``KEPT``): what is kept, the table of keys a change
marks stale, and the lock under which a reader finds them again. Each kind, what marks
its keys stale, and what they are found again from:

- compile-time regressions, per function and signature (payoff/kept_regressions.py):
  marked by every write of an uncached compile and every prune of one; found again from
  the signature's uncached compiles, their medians paired run to run (in SQL on
  PostgreSQL), with the count kept beside them moved;
- each signature's median run time (store/queries.py): marked by a write's new run-time
  buckets (prunes leave the buckets); found again, in SQL, from the signature's buckets;
- each run's bursts of recompiles (storms/kept_bursts.py): marked by every write of the
  run's events or call statistics, and every prune of either; found again by the storm
  finder's judging of the run's recompiles (storms/diagnosis.py), under new burst ids;
- each job's rank comparisons (fleet/fleet_reads.py): marked by every write of a run of
  the job or of the run's events, and every prune of the run's events, its call
  statistics or the run itself; found again by comparing the job's ranks' compiles.

The marks are made by the write path (rollup.py, writes.py) and by retention
(retention.py), in the writer's transaction: a write stays cheap, and what a kept result
depends on changes with later writes and prunes, so it is found when read.
``rollup.mark_all_kept_stale`` marks everything after a bulk load. A kept result holds
no version of the rule that found it: a release that changes a rule marks the keys it
touches stale in its migration (0034 marks every run's bursts, for a new judging). A reader first finds
the stale keys' results again, then reads the kept ones:

    if settling.settle(conn, settling.REGRESSIONS, find_again):
        ...read the kept rows...
    else:
        ...work them out from the store, as before...

``find_again(conn, settling)`` replaces the kept rows of the keys (signatures, runs or
jobs) in ``settling``, a temporary copy of the marks taken under the lock. Only the marks
copied are then deleted: a writer that marks a key meanwhile leaves it stale for the
next reader. A reader that cannot write (a role that may only read, a SQLite snapshot
another writer got ahead of) changes nothing and works the answer out from the store.

A new kind is a ``Kept`` entry here, its stale table (models.py, a migration), its marks
in rollup.py and retention.py, its ``find_again`` beside its reads, and a row in
tests/test_kept_results.py, which holds every kind to the same answer both ways.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import sqlalchemy as sa

from . import models

logger = logging.getLogger("cachewatch.store")


@dataclasses.dataclass(frozen=True)
class Kept:
    """One kind of kept result: what it is, the table of keys a change marks stale, and
    the PostgreSQL advisory lock held while a reader finds them again (beside engine.py's
    LABELS_LOCK and SCHEMA_LOCK and retention.py's RETENTION_LOCK)."""

    what: str
    stale: sa.Table
    lock: int


REGRESSIONS = Kept("compile-time regressions", models.stale_regressions, 0x6361636865_04)
RUN_TIMES = Kept("median run times", models.stale_run_times, 0x6361636865_05)
BURSTS = Kept("bursts of recompiles", models.stale_storms, 0x6361636865_06)
RANK_COMPARISONS = Kept("rank comparisons", models.stale_jobs, 0x6361636865_07)
KEPT = (REGRESSIONS, RUN_TIMES, BURSTS, RANK_COMPARISONS)

_INSUFFICIENT_PRIVILEGE = "42501"  # PostgreSQL: a role that may read the store, not write it


def settle(conn: sa.Connection, kept: Kept, find_again: Callable[[sa.Connection, sa.Table], None]) -> bool:
    """Find the stale keys' results of ``kept`` again, in a savepoint of ``conn``'s
    transaction (on PostgreSQL under its advisory lock, held to the end of the caller's
    transaction, so the next reader sees this one's work committed); False when this
    connection cannot write them, and nothing was changed: the caller then works them
    out from the store."""
    if conn.execute(sa.select(kept.stale.c.marks).limit(1)).first() is None:
        return True  # nothing changed since they were last found

    def settle_locked() -> None:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(kept.lock)))
        _settle(conn, kept.stale, find_again)

    return write_if_able(conn, kept.what, settle_locked)


def write_if_able(conn: sa.Connection, kept: str, write: Callable[[], object]) -> bool:
    """Run ``write`` in a savepoint of ``conn``'s transaction; False, with nothing changed,
    when this connection cannot write the ``kept`` rows now: the caller works them out
    from the store (or leaves them for the next reader)."""
    try:
        with conn.begin_nested():
            write()
    # Locked (SQLite's snapshot out of date), a serialization failure or a key another
    # reader wrote after this snapshot began (PostgreSQL's repeatable read), read-only.
    except (sa.exc.OperationalError, sa.exc.InternalError, sa.exc.IntegrityError) as exc:
        logger.info("kept %s not brought up to date here (%s); worked out from the store", kept, exc.orig)
        return False
    except sa.exc.ProgrammingError as exc:
        if getattr(exc.orig, "sqlstate", None) != _INSUFFICIENT_PRIVILEGE:
            raise
        logger.info("kept %s not brought up to date by a role that may only read", kept)
        return False
    return True


def _settle(conn: sa.Connection, stale: sa.Table, find_again: Callable[[sa.Connection, sa.Table], None]) -> None:
    copied = sa.Table(
        "settling_" + stale.name,
        sa.MetaData(),
        *(sa.Column(c.name, c.type) for c in stale.c),  # the keys (signatures, or runs) and their marks
        prefixes=["TEMPORARY"],
    )
    copied.create(conn)  # gone with the savepoint if a step fails
    names = [c.name for c in stale.c]
    conn.execute(sa.insert(copied).from_select(names, sa.select(*(stale.c[n] for n in names))))
    find_again(conn, copied)
    marked = sa.tuple_(*(stale.c[n] for n in names))
    conn.execute(sa.delete(stale).where(marked.in_(sa.select(*(copied.c[n] for n in names)))))
    copied.drop(conn)


def of_signatures(table: sa.Table, settling: sa.Table) -> sa.ColumnElement[bool]:
    """``table``'s rows of the signatures being found again."""
    return sa.tuple_(table.c.function_hash, table.c.signature_hash).in_(
        sa.select(settling.c.function_hash, settling.c.signature_hash)
    )
