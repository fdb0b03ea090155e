"""Kept results found again only where the store changed.

Some answers are too costly to work out from the whole store on every read, so they
are kept: the compile-time regressions and each signature's median run time per
function and signature, each run's bursts of recompiles per run. Whatever changes what
they are made of marks the signature (or run) stale (a table of its keys and a count of
``marks``); a reader first finds the stale ones' results again, then reads the kept ones:

    if settling.settle(conn, models.stale_regressions, LOCK, find_again):
        ...read the kept rows...
    else:
        ...work them out from the store, as before...

``find_again(conn, settling)`` replaces the kept rows of the signatures in ``settling``
(a temporary copy of the marks taken under the lock). Only the marks copied are then
deleted: a writer that marks a signature meanwhile leaves it stale for the next reader.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import sqlalchemy as sa

logger = logging.getLogger("cachewatch.store")

_INSUFFICIENT_PRIVILEGE = "42501"  # PostgreSQL: a role that may read the store, not write it


def settle(
    conn: sa.Connection, stale: sa.Table, lock: int, find_again: Callable[[sa.Connection, sa.Table], None]
) -> bool:
    """Find the stale signatures' results again, in a savepoint of ``conn``'s
    transaction (on PostgreSQL under advisory lock ``lock``, held to the end of the
    caller's transaction, so the next reader sees this one's work committed); False when
    this connection cannot write them, and nothing was changed: the caller then works
    them out from the store."""
    if conn.execute(sa.select(stale.c.marks).limit(1)).first() is None:
        return True  # nothing changed since they were last found

    def settle_locked() -> None:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(lock)))
        _settle(conn, stale, find_again)

    return write_if_able(conn, stale.name, settle_locked)


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
