"""Each run's bursts of recompiles kept, found again per run only once the run changed.

The storm finder (diagnosis.find_storms) reads every run's recompiles, judges each burst
a storm or a first pass, and describes a page of them: at a fleet's year, seconds per
listing for the reading and judging alone. What it finds in a run depends on that run
alone (its recompiles, its warm-up, its call statistics), so the bursts are kept per run
(``kept_bursts``, with their recompiles' event ids in ``kept_burst_events``). Every write
of a run's events or call statistics, and every prune of its events, marks the run stale
(``stale_storms``; rollup.py, retention.py); a reader first finds the stale runs'
bursts again, by settling.py's rule, with the finder it is given (the storm finder's
judging, diagnosis.py), then reads the kept ones:

    if kept_bursts.settle(conn, find):   # find(conn, Filters(run_ids=...)) -> [Judged]
        bursts = kept_bursts.read(conn, function_hashes)

Only the storm finder's defaults are kept (its threshold and window, judged as of now);
a listing under other options, or filtered by time, finds its bursts from the store.

A listing that tells a kept burst (reads its recompiles and diffs, writes its fix,
weighs and prices it) keeps what it told (``description``, :func:`keep_descriptions`),
and the next listing reads that instead. A burst found again gets a new id, so a
description told of the burst before can never be written onto it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from collections.abc import Callable, Iterable
from typing import Any

import sqlalchemy as sa

from ..store import models, settling
from ..store.columns import Filters, in_chunks
from . import storm_reads
from .storm_reads import Recompile

RUNS_PER_READ = 1_000  # stale runs whose recompiles are read at once


@dataclasses.dataclass(frozen=True)
class Judged:
    """A burst as the finder judged it: its group (a function hash, or ``site:`` and a
    line), its run, whether it is a storm (else a first pass) and its recompiles in time
    order (a kept one's are read only when it is told: ``group`` None, ``burst_id`` set),
    and a kept one's description when a listing told it before."""

    key: str
    run_id: str
    storm: bool
    started: float
    ended: float
    group: list[Recompile] | None = None
    burst_id: str = ""
    description: dict[str, Any] | None = None


Finder = Callable[[sa.Connection, Filters], list[Judged]]


def settle(conn: sa.Connection, find: Finder) -> bool:
    """Find the stale runs' bursts again with ``find`` (settling.settle); False when this
    connection cannot write them: the caller then finds them from the store."""

    def find_again(conn: sa.Connection, stale: sa.Table) -> None:
        _find_again(conn, stale, find)

    return settling.settle(conn, settling.BURSTS, find_again)


def _find_again(conn: sa.Connection, stale: sa.Table, find: Finder) -> None:
    b, be = models.kept_bursts, models.kept_burst_events
    runs = sorted(run_id for (run_id,) in conn.execute(sa.select(stale.c.run_id)))
    of_stale_runs = b.c.run_id.in_(sa.select(stale.c.run_id))
    conn.execute(sa.delete(be).where(be.c.burst_id.in_(sa.select(b.c.burst_id).where(of_stale_runs))))
    conn.execute(sa.delete(b).where(of_stale_runs))
    finding = secrets.token_hex(8)
    for chunk in in_chunks(runs, RUNS_PER_READ):
        found = find(conn, Filters(run_ids=tuple(chunk)))
        bursts, events = _kept_rows(found, finding)
        if bursts:
            conn.execute(sa.insert(b), bursts)
            _insert_members(conn, events)


def _insert_members(conn: sa.Connection, events: list[dict]) -> None:
    """The bursts' recompiles into ``kept_burst_events``. On PostgreSQL as one statement
    over three arrays: a storm that is still growing is found again after every batch
    its run writes, with tens of thousands of recompiles, and an executemany sends a
    statement per row."""
    be = models.kept_burst_events
    if conn.dialect.name != "postgresql":
        conn.execute(sa.insert(be), events)
        return
    columns = ("burst_id", "event_id", "function_hash")
    arrays = ", ".join(f"CAST(:{c} AS text[])" for c in columns)
    conn.execute(
        sa.text(f"INSERT INTO {be.name} ({', '.join(columns)}) SELECT * FROM unnest({arrays})"),
        {c: [row[c] for row in events] for c in columns},
    )


def _kept_rows(found: Iterable[Judged], finding: str) -> tuple[list[dict], list[dict]]:
    bursts: list[dict] = []
    events: list[dict] = []
    for burst in found:
        assert burst.group is not None  # the finder's own, read whole
        burst_id = _burst_id(burst, finding)
        bursts.append(
            {
                "burst_id": burst_id,
                "run_id": burst.run_id,
                "group_key": burst.key,
                "storm": burst.storm,
                "started": burst.started,
                "ended": burst.ended,
            }
        )
        events.extend(
            {"burst_id": burst_id, "event_id": r.event_id, "function_hash": r.function_hash} for r in burst.group
        )
    return bursts, events


def _burst_id(burst: Judged, finding: str) -> str:
    # A group's bursts in one run never share their first recompile's time stamp; each
    # finding of a run's bursts gives them new ids.
    named = f"{burst.run_id}\0{burst.key}\0{burst.started!r}\0{finding}"
    return hashlib.sha256(named.encode()).hexdigest()[:32]


def read(conn: sa.Connection, function_hashes: list[str] | None = None, run_id: str | None = None) -> list[Judged]:
    """The kept bursts (of one run, and with a recompile of one of ``function_hashes``,
    when given), with their descriptions and without their recompiles (:func:`with_groups`
    reads them)."""
    b, be = models.kept_bursts, models.kept_burst_events
    q = sa.select(b.c.burst_id, b.c.group_key, b.c.run_id, b.c.storm, b.c.started, b.c.ended, b.c.description)
    if run_id:
        q = q.where(b.c.run_id == run_id)
    if function_hashes is not None:
        q = q.where(b.c.burst_id.in_(sa.select(be.c.burst_id).where(be.c.function_hash.in_(function_hashes))))
    return [
        Judged(
            row.group_key,
            row.run_id,
            bool(row.storm),
            float(row.started),
            float(row.ended),
            burst_id=row.burst_id,
            description=row.description if isinstance(row.description, dict) else None,
        )
        for row in conn.execute(q)
    ]


def keep_descriptions(conn: sa.Connection, told: dict[str, dict[str, Any]], replacing: Iterable[str] = ()) -> bool:
    """Keep what a listing told of these kept bursts (burst id: its description) for the
    next listing; a burst found again since it was read (a new id) or told by another
    listing meanwhile is left as it is, unless its id is in ``replacing`` (a description
    in a shape this version does not read). False where this connection cannot write:
    the next listing tells them again."""
    if not told:
        return True
    b = models.kept_bursts
    stmt = (
        sa.update(b)
        .where(
            b.c.burst_id == sa.bindparam("told_id"),
            sa.or_(b.c.description.is_(None), sa.bindparam("replacing", type_=sa.Boolean)),
        )
        .values(description=sa.bindparam("told"))
    )
    replaced = set(replacing)
    rows = [
        {"told_id": burst_id, "told": description, "replacing": burst_id in replaced}
        for burst_id, description in told.items()
    ]
    return settling.write_if_able(conn, "burst descriptions", lambda: conn.execute(stmt, rows))


def with_groups(conn: sa.Connection, bursts: list[Judged], diffs: bool = False) -> list[tuple[Judged, list[Recompile]]]:
    """Each burst with its recompiles in time order, read for the kept ones (with their
    diffs when ``diffs``, in the same read); a kept burst whose recompiles a prune took
    since it was read is left out."""
    wanted = [burst.burst_id for burst in bursts if burst.group is None]
    be = models.kept_burst_events
    members: dict[str, list[str]] = {}
    for chunk in in_chunks(wanted):
        q = sa.select(be.c.burst_id, be.c.event_id).where(be.c.burst_id.in_(chunk))
        for burst_id, event_id in conn.execute(q):
            members.setdefault(burst_id, []).append(event_id)
    ids = [event_id for found in members.values() for event_id in found]
    read = {r.event_id: r for r in storm_reads.recompiles_by_id(conn, ids, diffs)} if ids else {}
    grouped = []
    for burst in bursts:
        group = burst.group
        if group is None:
            group = storm_reads.in_time_order(read[i] for i in members.get(burst.burst_id, ()) if i in read)
        if group:
            grouped.append((burst, group))
    return grouped
