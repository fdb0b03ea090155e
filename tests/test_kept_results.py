"""Kept results, one mechanism (store/settling.py): every kind is marked stale by the write
path, found again by the reader that can write, and worked out from the store, to the
same answer, by one that cannot.

One store, recorded for real (a jit whose batch size varies, two ranks of one job that
compile differently, timed calls) plus later ranks that compile four times slower, then sixty-four, then
every kind in ``settling.KEPT`` checked the same way on SQLite and PostgreSQL.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import jax.numpy as jnp
import pytest
import sqlalchemy as sa

import cachewatch
from cachewatch.fleet import divergence
from cachewatch.payoff import kept_regressions
from cachewatch.store import engine as enginemod
from cachewatch.store import models, queries, rollup, settling, writes
from cachewatch.storms import diagnosis

NOW = 4_000_000_000.0  # "now" for the storm finder: far after every event, so none is active


def _regressions(conn: sa.Connection) -> Any:
    found = kept_regressions.compile_regressions(conn)
    return found.total, [dataclasses.astuple(r) for r in found.shown]


def _run_times(conn: sa.Connection) -> Any:
    return {
        (function, signature): (found["run_seconds"], found["samples"], found["weight"])
        for function, by_signature in queries.signature_run_times(conn).items()
        for signature, found in by_signature.items()
    }


def _bursts(conn: sa.Connection) -> Any:
    storms, passes = diagnosis.storms_and_first_passes(conn, now=NOW)
    return [s.as_json() for s in storms], [p.as_json() for p in passes]


def _rank_comparisons(conn: sa.Connection) -> Any:
    return [dataclasses.asdict(r) for r in divergence.compare_jobs(conn, divergence.recent_jobs(conn))]


# Each kept kind and a read that answers from it: it settles the kind first, or works the
# answer out from the store when it cannot write.
READS: dict[str, Callable[[sa.Connection], Any]] = {
    settling.REGRESSIONS.what: _regressions,
    settling.RUN_TIMES.what: _run_times,
    settling.BURSTS.what: _bursts,
    settling.RANK_COMPARISONS.what: _rank_comparisons,
}


def test_every_kept_kind_has_a_read():
    assert sorted(READS) == sorted(kept.what for kept in settling.KEPT)


def _record(url: str, use_store: Callable[..., str]) -> None:
    """Two ranks of one job: each steps a jit over varying batch sizes (a burst of
    recompiles), rank 1 over one size more."""
    for rank, sizes in ((0, range(8, 16)), (1, range(8, 17))):
        use_store(url, job="kept-job", process_index=rank, process_count=2, sample_every=1)

        @cachewatch.jit
        def step(x):
            return jnp.tanh(x * 2.0).sum()

        for size in sizes:
            for _ in range(3):  # timed calls: run-time buckets
                step(jnp.ones((size, 4)))
        assert cachewatch.flush(30)


def _later_slower_run(conn: sa.Connection, rank: int, started_at: float, factor: float) -> None:
    """The first run's compiles again as a later rank's of the job, ``factor`` times
    slower and past its warm-up: regressions, a storm of its own, one more rank."""
    e, r = models.compile_events, models.runs
    first = conn.execute(sa.select(r.c.run_id).order_by(r.c.started_at).limit(1)).scalar_one()
    columns = [c for c in e.c if c.name != "id"]
    rows = [dict(row._mapping) for row in conn.execute(sa.select(*columns).where(e.c.run_id == first))]
    run = {
        "run_id": f"rank{rank}".ljust(32, "0"),
        "started_at": started_at,
        "jax_version": "0.9",
        "devices": [],
        "job": "kept-job",
        "process_index": rank,
        "process_count": rank + 1,
    }
    slower = [
        {
            **row,
            "event_id": f"rank{rank}-{i}",
            "run_id": run["run_id"],
            "compile_seconds": (row["compile_seconds"] or 0.1) * factor,
            "warmup": False,
        }
        for i, row in enumerate(rows)
    ]
    writes.write_rows(conn, writes.TableRows([run], [], [writes.event_row(row) for row in slower], []))


@contextlib.contextmanager
def _read_only(url: str) -> Iterator[sa.Connection]:
    """A connection that cannot write, for real: what a role that may only read, or a
    snapshot another writer got ahead of, sees."""
    with enginemod.connection(url) as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SET TRANSACTION READ ONLY"))
            yield conn
            return
        conn.exec_driver_sql("PRAGMA query_only = ON")
        try:
            yield conn
        finally:
            conn.exec_driver_sql("PRAGMA query_only = OFF")


def _marks(conn: sa.Connection, kept: settling.Kept) -> int:
    return conn.execute(sa.select(sa.func.count()).select_from(kept.stale)).scalar_one()


def _both_agree(url: str, kept: settling.Kept) -> Any:
    """The kind's answer worked out from the store (marks left standing), then kept (marks
    cleared): the same."""
    read = READS[kept.what]
    with _read_only(url) as reader:
        worked_out = read(reader)
        assert _marks(reader, kept) > 0, "a reader that cannot write leaves the marks"
    with enginemod.connection(url) as conn:
        found = read(conn)
        assert _marks(conn, kept) == 0, "found again, the marks go"
    with enginemod.connection(url) as conn:
        assert read(conn) == found, "and read back as kept"
    assert found == worked_out
    return found


@pytest.mark.parametrize("kept", settling.KEPT, ids=[k.what for k in settling.KEPT])
def test_a_kept_result_is_marked_found_again_and_equals_the_store(kept, store_url, use_store):
    _record(store_url, use_store)
    with enginemod.connection(store_url) as conn:
        _later_slower_run(conn, 2, NOW - 10_000, 4.0)
        rollup.mark_all_kept_stale(conn)  # every kind stale, nothing kept: as after a bulk load
        assert _marks(conn, kept) > 0
    first = _both_agree(store_url, kept)
    assert first  # the store makes this kind non-trivial
    # One more write: the write path marks the kind stale again, and the answer follows it.
    with enginemod.connection(store_url) as conn:
        _later_slower_run(conn, 3, NOW - 5_000, 64.0)
    with enginemod.connection(store_url) as conn:
        marked = _marks(conn, kept)
    if kept is settling.RUN_TIMES:
        assert marked == 0  # the later runs carry no timed calls: nothing for run times to find again
        return
    assert marked > 0
    assert _both_agree(store_url, kept) != first
