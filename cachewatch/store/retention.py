"""Retention: drop old runs (or only their program texts) and give the space back.

    result = prune(url, Policy(older_than=30 * 86400))              # runs idle for 30 days
    result = prune(url, Policy(keep_runs=1000, texts_only=True), dry_run=True)

A pruned run loses its events, call statistics, per-run totals and its ``runs`` row (the
signatures it compiled have their kept regressions found again without it); a
program text goes once no remaining event refers to it. The totals per function and for
the whole store (rollup.py) are kept as they are: they count every event the store ever
took, so the counters of ``/metrics`` never go back and the unfiltered report keeps its
all-time figures, while a report of one remaining run reads that run's events, which a
prune does not touch. What a pruned run's recorder reported lost moves to one run of its
own (``PRUNED_RUN_ID``), so ``cachewatch_events_dropped_total`` keeps it too.

Work goes in short transactions, one run (and at most ``chunk`` rows) at a time, each
taking the locks a writer of that run takes, so ingest goes on beside a prune. A run is
pruned only when nothing was recorded for it since the cut: its start, its events and its
statistics are all older. That is checked again inside each transaction, so a run that a
writer gets to meanwhile is left alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from . import engine as enginemod
from . import models, rollup
from .columns import in_chunks

# A recorder's lost-event counts outlive the runs they came from here (run_drops has
# one row per run and reason; the counter on /metrics sums them all).
PRUNED_RUN_ID = "pruned-runs"
PRUNED_RUN_NAME = "(runs removed by cachewatch db prune: what their recorders lost)"

# PostgreSQL advisory lock held by a running prune (beside engine.py's LABELS_LOCK and SCHEMA_LOCK).
RETENTION_LOCK = 0x6361636865_03

# Rows deleted per transaction: short enough that a writer waiting behind one (SQLite
# has one writer at a time) is not held up long.
DEFAULT_CHUNK = 2000

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


class RetentionError(ValueError):
    """A retention setting or argument that cannot be used; the message says why."""


def parse_age(text: str) -> float:
    """Seconds in an age such as ``30d``, ``12h``, ``90m``, ``2w`` or ``45s``.

    >>> parse_age("2w")
    1209600.0
    """
    found = _AGE.match(str(text))
    if not found:
        raise RetentionError(f"cannot read the age {text!r}: use a number and a unit, e.g. 30d, 12h, 90m, 2w")
    seconds = float(found.group(1)) * _UNITS[found.group(2)]
    if not (0 < seconds < math.inf):
        raise RetentionError(f"the age {text!r} must be more than zero")
    return seconds


@dataclass(frozen=True)
class Policy:
    """What to prune: runs idle for longer than ``older_than`` seconds, or all but the
    ``keep_runs`` newest runs (by start time); with ``texts_only``, only their program texts."""

    older_than: float | None = None
    keep_runs: int | None = None
    texts_only: bool = False

    def __post_init__(self) -> None:
        if (self.older_than is None) == (self.keep_runs is None):
            raise RetentionError("give one of older_than (an age) or keep_runs (a number of runs)")
        if self.older_than is not None and not (0 < self.older_than < math.inf):
            raise RetentionError(f"older_than must be a positive number of seconds, not {self.older_than!r}")
        if self.keep_runs is not None and (isinstance(self.keep_runs, bool) or self.keep_runs < 0):
            raise RetentionError(f"keep_runs must be 0 or more, not {self.keep_runs!r}")

    def describe(self) -> str:
        scope = "program texts of " if self.texts_only else ""
        if self.older_than is not None:
            return f"{scope}runs with nothing recorded for {_age_text(self.older_than)}"
        return f"{scope}runs older than the {self.keep_runs} newest"


def parse_policy(text: str) -> Policy:
    """The service's ``CACHEWATCH_RETENTION``: an age (``30d``), ``runs:N`` (keep the N
    newest runs), either one prefixed ``texts:`` for program texts only (``texts:7d``)."""
    value = str(text).strip()
    texts_only = value.startswith("texts:")
    if texts_only:
        value = value.removeprefix("texts:").strip()
    if value.startswith("runs:"):
        count = value.removeprefix("runs:").strip()
        if not count.isdigit():
            raise RetentionError(f"runs:N takes a whole number of runs to keep (0 or more), not {count!r}")
        return Policy(keep_runs=int(count), texts_only=texts_only)
    try:
        return Policy(older_than=parse_age(value), texts_only=texts_only)
    except RetentionError:
        raise RetentionError(
            f"cannot read the retention {text!r}: use an age (30d, 12h, 90m, 2w), runs:N to keep the N newest "
            "runs, and a texts: prefix to drop only program texts (texts:7d)"
        ) from None


@dataclass(frozen=True)
class PruneResult:
    """What a prune dropped (or, with ``dry_run``, would drop), and the store's size."""

    policy: Policy
    dry_run: bool
    cut: float | None  # runs with nothing recorded since this time were in scope; None: no run was
    runs: int  # runs dropped (with texts_only: runs whose texts were in scope)
    events: int
    call_stats: int
    program_texts: int
    program_text_bytes: int  # compressed bytes of the texts dropped
    skipped_runs: int  # in scope when chosen, written to since: left alone
    bytes_before: int
    bytes_after: int | None  # None in a dry run: nothing changed
    seconds: float
    reclaim_error: str | None = None  # why the space was not given back (the rows are gone all the same)

    def as_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "policy": dataclasses.asdict(self.policy)}


@dataclass(frozen=True)
class _Run:
    run_id: str
    started_at: float
    last: float  # the latest of its start, its events and its statistics


def prune(
    url: str,
    policy: Policy,
    *,
    dry_run: bool = False,
    now: float | None = None,
    reclaim: bool = True,
    chunk: int = DEFAULT_CHUNK,
) -> PruneResult:
    """Drop what ``policy`` names; with ``reclaim``, give the space back afterwards
    (SQLite: VACUUM; PostgreSQL: plain VACUUM, see :func:`reclaim_space`)."""
    _known_store(url)
    with contextlib.nullcontext() if dry_run else _one_prune_at_a_time(url):
        return _prune(url, policy, dry_run=dry_run, now=now, reclaim=reclaim, chunk=chunk)


@contextlib.contextmanager
def _one_prune_at_a_time(url: str) -> Iterator[None]:
    """On PostgreSQL, a prune waits for another one to end (the service's workers each run
    the schedule, and an operator may run the command meanwhile); it then finds done what
    the other did. SQLite's writers take turns anyway."""
    engine = enginemod.get_engine(url)
    if engine.dialect.name != "postgresql":
        yield
        return
    try:
        with engine.connect() as raw:
            conn = raw.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql(f"SELECT pg_advisory_lock({RETENTION_LOCK})")
            try:
                yield
            finally:
                conn.exec_driver_sql(f"SELECT pg_advisory_unlock({RETENTION_LOCK})")
    except sa.exc.SQLAlchemyError as exc:
        raise enginemod.StoreError(f"{type(exc).__name__}: {getattr(exc, 'orig', None) or exc}") from exc


def _prune(url: str, policy: Policy, *, dry_run: bool, now: float | None, reclaim: bool, chunk: int) -> PruneResult:
    started = time.monotonic()
    now = time.time() if now is None else now
    before = store_bytes(url)
    with enginemod.connection(url, ensure=False) as conn:
        cut, scope = _scope(conn, policy, now)
    events = stats = dropped_runs = skipped = 0
    candidates: set[str] = set()
    modules: set[str] = set()
    if dry_run or policy.texts_only:
        with enginemod.connection(url, ensure=False) as conn:
            events, stats = _count(conn, [r.run_id for r in scope])
            candidates = _fingerprints(conn, [r.run_id for r in scope])
            modules = _fingerprints(conn, [r.run_id for r in scope], "lowered_fingerprint")
        dropped_runs = len(scope)
        if policy.texts_only:
            events = stats = 0
    else:
        assert cut is not None or not scope
        for run in scope:
            done = _drop_run(url, run.run_id, cut or now, chunk)
            skipped += done.skipped
            dropped_runs += done.dropped
            events += done.events
            stats += done.call_stats
            candidates |= done.fingerprints
            modules |= done.modules
    # A text stays while any event of a run outside the scope (or skipped) refers to it.
    scope_ids = {r.run_id for r in scope}
    texts, text_bytes = _drop_texts(url, sorted(candidates), scope_ids, cut, dry_run=dry_run)
    module_texts, module_bytes = _drop_texts(
        url, _kept(url, sorted(modules)), scope_ids, cut, dry_run=dry_run, column="lowered_fingerprint"
    )
    texts, text_bytes = texts + module_texts, text_bytes + module_bytes
    after: int | None = None
    reclaim_error = None
    if not dry_run:
        if reclaim and (dropped_runs or texts):
            try:
                reclaim_space(url)
            except enginemod.StoreError as exc:  # e.g. SQLite busy past its timeout: the next prune tries again
                reclaim_error = str(exc)
        after = store_bytes(url)
    return PruneResult(
        policy=policy,
        dry_run=dry_run,
        cut=cut,
        runs=dropped_runs,
        events=events,
        call_stats=stats,
        program_texts=texts,
        program_text_bytes=text_bytes,
        skipped_runs=skipped,
        bytes_before=before,
        bytes_after=after,
        seconds=time.monotonic() - started,
        reclaim_error=reclaim_error,
    )


def _known_store(url: str) -> None:
    """Refuse a store that is not there (a SQLite file is not created to be pruned) or
    holds no cachewatch schema of this version, with the reason."""
    parsed = sa.engine.make_url(enginemod.normalize_url(url))  # before an engine: it makes the file's folder
    path = parsed.database
    if parsed.get_backend_name() == "sqlite" and path and path != ":memory:" and not os.path.exists(path):
        raise enginemod.StoreError(f"no store at {enginemod.redact_url(url)}: the file {path} does not exist")
    if parsed.get_backend_name() == "sqlite" and path and path != ":memory:" and os.path.getsize(path) == 0:
        # Opening it would write SQLite's header into it: a prune leaves it as it is.
        raise enginemod.SchemaOutdated(
            f"the store at {enginemod.redact_url(url)} is empty; run: {enginemod.upgrade_command(url)}"
        )
    enginemod.ensure_schema(url, migrate_empty=False)


def _runs(conn: sa.Connection, run_ids: list[str] | None = None) -> list[_Run]:
    """Runs with the time anything was last recorded for them."""
    r, t, s = models.runs, models.run_totals, models.call_stats
    last_stat = sa.select(s.c.run_id, sa.func.max(s.c.timestamp).label("last")).group_by(s.c.run_id)
    if run_ids is not None:
        last_stat = last_stat.where(s.c.run_id.in_(run_ids))
    stat_q = last_stat.subquery()
    q = (
        sa.select(r.c.run_id, r.c.started_at, t.c.last_ts, stat_q.c.last)
        .select_from(r.outerjoin(t, t.c.run_id == r.c.run_id).outerjoin(stat_q, stat_q.c.run_id == r.c.run_id))
        .where(r.c.run_id != PRUNED_RUN_ID)
    )
    if run_ids is not None:
        q = q.where(r.c.run_id.in_(run_ids))
    out = []
    for run_id, started_at, last_event, last_stat_ts in conn.execute(q):
        times = [float(x) for x in (started_at, last_event, last_stat_ts) if x is not None]
        out.append(_Run(run_id, float(started_at), max(times)))
    return out


def _scope(conn: sa.Connection, policy: Policy, now: float) -> tuple[float | None, list[_Run]]:
    """The cut and the runs in scope, oldest first.

    By age, the cut is ``now - older_than``. By count, it is the start of the oldest run
    kept: a run outside the newest ``keep_runs`` that recorded anything since then may
    still be running, and is kept too.
    """
    runs = _runs(conn)
    if policy.older_than is not None:
        cut = now - policy.older_than
    else:
        assert policy.keep_runs is not None
        newest = sorted(runs, key=lambda r: (r.started_at, r.run_id), reverse=True)
        if len(newest) <= policy.keep_runs:
            return None, []
        kept, runs = newest[: policy.keep_runs], newest[policy.keep_runs :]
        cut = min(r.started_at for r in kept) if kept else now
    scope = sorted((r for r in runs if r.last < cut), key=lambda r: (r.started_at, r.run_id))
    return (cut if scope else None), scope


@contextlib.contextmanager
def _run_transaction(url: str, run_id: str) -> Iterator[sa.Connection]:
    """A write transaction that no writer of this run runs beside: SQLite's write lock;
    on PostgreSQL the run's lock that every write takes (``engine.lock_run``), and the
    run's row locked, which a writer's foreign-key check waits on (a writer older than
    the lock in the library took none)."""
    try:
        with enginemod.get_engine(url).connect() as conn, conn.begin():
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                enginemod.lock_run(conn, run_id)
                r = models.runs
                conn.execute(sa.select(r.c.run_id).where(r.c.run_id == run_id).with_for_update())
            yield conn
    except sa.exc.SQLAlchemyError as exc:
        raise enginemod.StoreError(f"{type(exc).__name__}: {getattr(exc, 'orig', None) or exc}") from exc


@dataclass
class _Dropped:
    events: int = 0
    call_stats: int = 0
    fingerprints: set[str] = dataclasses.field(default_factory=set)
    modules: set[str] = dataclasses.field(default_factory=set)  # lowered modules' fingerprints
    dropped: bool = False  # its row went: the run is gone
    skipped: bool = False  # written to since the cut: left alone


def _drop_run(url: str, run_id: str, cut: float, chunk: int) -> _Dropped:
    """Delete one run, ``chunk`` rows per transaction. A run found written to since the
    cut is left (what was deleted of it by then was older than the cut, and its totals
    are counted again from what is left)."""
    e, s = models.compile_events, models.call_stats
    done = _Dropped()
    while True:
        with _run_transaction(url, run_id) as conn:
            found = _runs(conn, [run_id])
            if not found:
                return done  # gone: another prune got there first
            if found[0].last >= cut:
                if done.events or done.call_stats:
                    _recount_run(conn, run_id)
                done.skipped = True
                return done
            ids = list(
                conn.execute(sa.select(e.c.id).where(e.c.run_id == run_id).order_by(e.c.id).limit(chunk)).scalars()
            )
            if ids:
                for program, module in conn.execute(
                    sa.select(e.c.program_fingerprint, e.c.lowered_fingerprint).where(e.c.id.in_(ids)).distinct()
                ):
                    if program:
                        done.fingerprints.add(program)
                    if module:
                        done.modules.add(module)
                _mark_regressions_stale(conn, ids)
                rollup.mark_runs_stale(conn, [run_id])  # its kept bursts go at the next read
                done.events += _delete_ids(conn, e, ids)
                continue
            stat_ids = list(
                conn.execute(sa.select(s.c.id).where(s.c.run_id == run_id).order_by(s.c.id).limit(chunk)).scalars()
            )
            if stat_ids:
                rollup.mark_runs_stale(conn, [run_id])
                done.call_stats += _delete_ids(conn, s, stat_ids)
                continue
            _fold_drops(conn, run_id)
            rollup.mark_jobs_stale(conn, [run_id])  # one rank fewer
            conn.execute(sa.delete(models.run_totals).where(models.run_totals.c.run_id == run_id))
            conn.execute(sa.delete(models.runs).where(models.runs.c.run_id == run_id))
            done.dropped = True
            return done


def _mark_regressions_stale(conn: sa.Connection, ids: list[int]) -> None:
    """The signatures of these events' uncached compiles marked stale, as a writer marks
    them: their kept regressions are found again without these compiles."""
    e = models.compile_events
    names = rollup.UNCACHED_FIELDS
    for part in in_chunks(ids):
        rows = conn.execute(sa.select(*(e.c[name] for name in names)).where(e.c.id.in_(part))).all()
        rollup.mark_regressions_stale(conn, rows, names)


def _delete_ids(conn: sa.Connection, table: sa.Table, ids: list[int]) -> int:
    deleted = 0
    for part in in_chunks(ids):
        deleted += conn.execute(sa.delete(table).where(table.c.id.in_(part))).rowcount
    return deleted


def _fold_drops(conn: sa.Connection, run_id: str) -> None:
    """Move the run's lost-event counts to the pruned runs' own row."""
    d = models.run_drops
    lost = [
        {"run_id": PRUNED_RUN_ID, "reason": reason, "dropped": int(n)}
        for reason, n in conn.execute(sa.select(d.c.reason, d.c.dropped).where(d.c.run_id == run_id))
        if n
    ]
    if lost:
        stmt = enginemod.upsert_insert(conn.dialect.name, models.runs).on_conflict_do_nothing(index_elements=["run_id"])
        conn.execute(stmt, [{"run_id": PRUNED_RUN_ID, "run_name": PRUNED_RUN_NAME, "started_at": 0.0, "devices": []}])
        rollup.add(conn, {d: lost})
    conn.execute(sa.delete(d).where(d.c.run_id == run_id))


def _recount_run(conn: sa.Connection, run_id: str) -> None:
    """The run's totals counted again from its events (after part of it was pruned)."""
    e, t = models.compile_events, models.run_totals
    live = e.c.kind != rollup.STALE_KIND
    cost = sa.func.coalesce(e.c.trace_seconds, 0.0) + sa.func.coalesce(e.c.lower_seconds, 0.0)
    cost = cost + sa.func.coalesce(e.c.compile_seconds, 0.0)
    row = conn.execute(
        sa.select(
            sa.func.count(),
            sa.func.sum(sa.case((e.c.compiled, 1), else_=0)),
            sa.func.sum(sa.case((live, cost), else_=0.0)),
            sa.func.min(e.c.timestamp),
            sa.func.max(e.c.timestamp),
        ).where(e.c.run_id == run_id)
    ).one()
    conn.execute(sa.delete(t).where(t.c.run_id == run_id))
    if row[0]:
        conn.execute(
            sa.insert(t),
            {
                "run_id": run_id,
                "events": int(row[0]),
                "compiles": int(row[1] or 0),
                "cost_seconds": float(row[2] or 0.0),
                "first_ts": float(row[3]),
                "last_ts": float(row[4]),
            },
        )


def _count(conn: sa.Connection, run_ids: list[str]) -> tuple[int, int]:
    """Events and statistics rows of these runs."""
    e, s = models.compile_events, models.call_stats
    events = stats = 0
    for part in in_chunks(run_ids):
        events += conn.execute(sa.select(sa.func.count()).where(e.c.run_id.in_(part))).scalar_one()
        stats += conn.execute(sa.select(sa.func.count()).where(s.c.run_id.in_(part))).scalar_one()
    return int(events), int(stats)


def _fingerprints(conn: sa.Connection, run_ids: list[str], column: str = "program_fingerprint") -> set[str]:
    """The programs the events of these runs compiled (or, by ``column``, their lowered
    modules: a module's StableHLO text is kept under the module's fingerprint)."""
    e = models.compile_events
    out: set[str] = set()
    for part in in_chunks(run_ids):
        q = sa.select(e.c[column]).where(e.c.run_id.in_(part), e.c[column].is_not(None)).distinct()
        out.update(conn.execute(q).scalars())
    return out


def _kept(url: str, fingerprints: list[str]) -> list[str]:
    """Those of ``fingerprints`` the store keeps a text under: most stores keep no lowered
    module's text, and a look-up by key spares them a scan of the events per chunk."""
    p = models.programs
    out: list[str] = []
    with enginemod.connection(url, ensure=False) as conn:
        for part in in_chunks(fingerprints):
            out += conn.execute(sa.select(p.c.fingerprint).where(p.c.fingerprint.in_(part))).scalars()
    return sorted(out)


@contextlib.contextmanager
def _texts_transaction(url: str) -> Iterator[sa.Connection]:
    """A transaction no writer of program texts runs beside. A writer stores an event and
    its program's text in one transaction; on PostgreSQL this lock waits for writers that
    already stored a text to commit (their events are then seen here) and holds back the
    ones that have not (their insert then stores the text again)."""
    try:
        with enginemod.get_engine(url).connect() as conn, conn.begin():
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                conn.exec_driver_sql(f"LOCK TABLE {models.programs.name} IN SHARE ROW EXCLUSIVE MODE")
            yield conn
    except sa.exc.SQLAlchemyError as exc:
        raise enginemod.StoreError(f"{type(exc).__name__}: {getattr(exc, 'orig', None) or exc}") from exc


def _drop_texts(
    url: str,
    candidates: list[str],
    scope: set[str],
    cut: float | None,
    *,
    dry_run: bool,
    column: str = "program_fingerprint",
) -> tuple[int, int]:
    """Drop the texts among ``candidates`` that only events of runs in ``scope`` refer
    to (through ``column``), those runs still idle since ``cut``; returns how many and
    their compressed bytes."""
    e, p = models.compile_events, models.programs
    count = size = 0
    for part in in_chunks(candidates):
        with _texts_transaction(url) if not dry_run else enginemod.connection(url, ensure=False) as conn:
            referring = conn.execute(sa.select(e.c[column], e.c.run_id).where(e.c[column].in_(part)).distinct()).all()
            # A run of the scope written to since it was chosen (or skipped by the prune)
            # keeps its texts.
            asked = sorted({run_id for _, run_id in referring if run_id in scope})
            idle: set[str] = set()
            for runs in in_chunks(asked):
                idle.update(r.run_id for r in _runs(conn, runs) if cut is not None and r.last < cut)
            used = {fp for fp, run_id in referring if run_id not in idle}
            unused = [fp for fp in part if fp not in used]
            if not unused:
                continue
            found = conn.execute(
                sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(p.c.size_bytes), 0)).where(
                    p.c.fingerprint.in_(unused)
                )
            ).one()
            count += int(found[0])
            size += int(found[1])
            if not dry_run:
                conn.execute(sa.delete(p).where(p.c.fingerprint.in_(unused)))
    return count, size


# The tables a prune deletes from: the ones worth vacuuming afterwards.
_PRUNED_TABLES = ("compile_events", "call_stats", "run_totals", "run_drops", "runs", "programs")


def reclaim_space(url: str) -> None:
    """Give the space of deleted rows back.

    SQLite: VACUUM rewrites the file without them, so it shrinks (then a WAL checkpoint
    truncates the log the rewrite went through). Writers wait meanwhile (their busy
    timeout is 30 s), as they wait for any transaction.
    PostgreSQL: plain VACUUM (and ANALYZE) of the tables pruned: the space of dead rows
    goes back to the tables for new rows, and only empty pages at a table's end go back
    to the system. VACUUM FULL would shrink the files, but it locks each table against
    reads and writes while it copies it, which a live service cannot take.
    """
    engine = enginemod.get_engine(url)
    try:
        with engine.connect() as raw:
            conn = raw.execution_options(isolation_level="AUTOCOMMIT")
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql("VACUUM")
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            else:
                conn.exec_driver_sql("VACUUM (ANALYZE) " + ", ".join(_PRUNED_TABLES))
    except sa.exc.SQLAlchemyError as exc:
        raise enginemod.StoreError(f"{type(exc).__name__}: {getattr(exc, 'orig', None) or exc}") from exc


def store_bytes(url: str) -> int:
    """The store's size: SQLite's file and its write-ahead log; on PostgreSQL, the
    cachewatch tables with their indexes and TOAST."""
    engine = enginemod.get_engine(url)
    if engine.dialect.name == "sqlite":
        path = engine.url.database
        if path and path != ":memory:":
            return sum(os.path.getsize(f) for f in (path, path + "-wal") if os.path.exists(f))
        with enginemod.connection(url, ensure=False) as conn:
            return int(conn.exec_driver_sql("PRAGMA page_count").scalar_one()) * int(
                conn.exec_driver_sql("PRAGMA page_size").scalar_one()
            )
    names = sorted(models.Base.metadata.tables)
    with enginemod.connection(url, ensure=False) as conn:
        total = conn.execute(
            sa.text(
                "SELECT coalesce(sum(pg_total_relation_size(to_regclass(name))), 0) FROM unnest(CAST(:names AS text[])) AS name"
            ),
            {"names": names},
        ).scalar_one()
    return int(total)


def _age_text(seconds: float) -> str:
    for unit, size in (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
