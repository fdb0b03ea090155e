"""Kept results, one mechanism (store/settling.py): every kind in ``settling.KEPT`` is
marked stale by the write path, found again by a reader that can write, and worked out
from the store, to the same answer, by a reader that cannot.

One store, written as the recorder writes (SqlSink, batches of real compile events and
call statistics): two ranks of one job that compile differently, each rank's compiles of
``step`` a burst, the later rank's compiles slower by more than a regression takes, and
timed calls. Then one more batch of the later rank's run (its caches cleared, it compiles
again, slower, and its calls run slower): every kind is stale again, its kept rows of
that run must be replaced, and its answer moves. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import serverkit as kit
import sqlalchemy as sa

from cachewatch.core import runtimes
from cachewatch.core.events import Batch, CallStats, Cause, CompileEvent, RunInfo
from cachewatch.fleet import divergence
from cachewatch.payoff import kept_regressions
from cachewatch.record import current
from cachewatch.store import engine as enginemod
from cachewatch.store import queries, settling
from cachewatch.store.sinks import SqlSink
from cachewatch.storms import diagnosis

T0 = 1_700_000_000.0  # the first rank's start
NOW = T0 + 86_400.0  # "now" for the storm finder: long after every event, so no storm is active
JOB = "kept-job"
SECONDS = 0.125  # rank 0's XLA seconds per compile; rank 1's are RISE times more, then RISE squared
RISE = 4  # a regression at the kept thresholds, exact in binary: no median rounds
CALL_SECONDS = 0.001  # a timed call's seconds (RISE times more in the last batch)


def _regressions(conn: sa.Connection) -> dict[str, Any]:
    found = kept_regressions.compile_regressions(conn, limit=4)  # the steepest, and the count kept beside them
    return {"found": [r.as_json() for r in found.shown], "total": found.total}


def _run_times(conn: sa.Connection) -> dict[str, Any]:
    found = queries.signature_run_times(conn)
    rows = [(f, s, t["run_seconds"], t["samples"], t["weight"]) for f, by in found.items() for s, t in by.items()]
    return {"found": sorted(rows)}


def _bursts(conn: sa.Connection) -> dict[str, Any]:
    storms, passes = diagnosis.storms_and_first_passes(conn, now=NOW)
    return {"found": [("storm", s.as_json()) for s in storms] + [("first pass", p.as_json()) for p in passes]}


def _rank_comparisons(conn: sa.Connection) -> dict[str, Any]:
    report = divergence.compare_job(conn, JOB)
    assert report is not None
    found = dataclasses.asdict(report)
    return {"found": found.pop("divergences"), **found}


# Each kept kind and a public read that answers from it: it settles the kind first, or
# works the answer out from the store where it cannot write. "found": what the store
# should make non-empty (the rest of the answer is compared too).
READS: dict[str, Callable[[sa.Connection], dict[str, Any]]] = {
    settling.REGRESSIONS.what: _regressions,
    settling.RUN_TIMES.what: _run_times,
    settling.BURSTS.what: _bursts,
    settling.RANK_COMPARISONS.what: _rank_comparisons,
}


def test_every_kept_kind_has_a_read():
    assert sorted(READS) == sorted(kept.what for kept in settling.KEPT)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> kit.Recorded:
    """Real compile events of real JAX code, once: ``step`` at 8 shapes, ``scale`` at 2 static values."""
    current.configure(store=f"sqlite:///{tmp_path_factory.mktemp('kept') / 'recorded.db'}")
    try:
        return kit.run_jax_workload()
    finally:
        current.reset_configuration()


def _run(recorded: kit.Recorded, rank: int, started: float) -> RunInfo:
    """A run of rank ``rank`` of the job."""
    return dataclasses.replace(
        kit.new_run(recorded.run, started_at=started), job=JOB, process_index=rank, process_count=2
    )


def _batch(
    run: RunInfo,
    compiles: list[CompileEvent],
    at: float,
    seconds: float,
    timed: tuple[float, int] = (CALL_SECONDS, 30),
    **changes: Any,
) -> Batch:
    """A batch of ``run``: these compiles one a second from ``at`` (``step``'s a burst),
    each of ``seconds`` of XLA compile, and a minute later 3 timed calls of each
    signature (``timed``: the seconds of each, and the calls the 3 stand for)."""
    call_seconds, calls = timed
    events = [
        kit.copy_event(e, run, at + i, compile_seconds=seconds, persistent_cache_hit=False, **changes)
        for i, e in enumerate(compiles)
    ]
    stats = [
        CallStats(
            run_id=run.run_id,
            function=e.function,
            timestamp=at + 60,
            calls=calls,
            sampled_calls=3,
            sampled_seconds=3 * call_seconds,
            signature_hash=e.signature_hash,
            run_buckets={str(runtimes.bucket_of(call_seconds)): [3, calls]},
        )
        for e in events
    ]
    return kit.batch(run, events, stats)


@contextlib.contextmanager
def _read_only(url: str) -> Iterator[sa.Connection]:
    """A connection that cannot write, for real: what a role that may only read, or a
    snapshot another writer got ahead of, sees."""
    with enginemod.connection(url) as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SET TRANSACTION READ ONLY"))  # the transaction's first statement
            yield conn
            return
        conn.exec_driver_sql("PRAGMA query_only = ON")
        try:
            yield conn
        finally:
            conn.exec_driver_sql("PRAGMA query_only = OFF")  # the pool hands this connection on


def _marks(conn: sa.Connection, kept: settling.Kept) -> int:
    return conn.execute(sa.select(sa.func.count()).select_from(kept.stale)).scalar_one()


def _find_nothing(conn: sa.Connection, settling_keys: sa.Table) -> None:
    pass


def _both_agree(url: str, kept: settling.Kept) -> dict[str, Any]:
    """The kind's answer worked out from the store by a reader that cannot write (marks
    left standing), then found again and kept (marks cleared), then read back: the same."""
    read = READS[kept.what]
    with _read_only(url) as reader:
        assert _marks(reader, kept) > 0
        assert not settling.settle(reader, kept, _find_nothing), "a reader that cannot write falls back"
        worked_out = read(reader)
        assert _marks(reader, kept) > 0, "and leaves the marks"
    with enginemod.connection(url) as conn:
        found = read(conn)
        assert _marks(conn, kept) == 0, "found again, the marks go"
    with enginemod.connection(url) as conn:
        assert read(conn) == found, "and read back as kept"
    assert found == worked_out
    return found


@pytest.mark.parametrize("kept", settling.KEPT, ids=[k.what for k in settling.KEPT])
def test_a_kept_result_is_marked_found_again_and_equals_the_store(kept, store_url, recorded):
    assert RISE >= kept_regressions.FACTOR  # each rise a regression at the kept thresholds
    assert SECONDS * (RISE - 1) >= kept_regressions.MIN_SECONDS
    step, scale = recorded.by_name("step"), recorded.by_name("scale")
    rank0, rank1 = _run(recorded, 0, T0), _run(recorded, 1, T0 + 1_000)
    sink = SqlSink(store_url)
    # Rank 0 compiles step at 7 shapes (a first pass), rank 1 at all 8 (a storm: its loop
    # came back to shapes it had compiled), each compile RISE times slower: the ranks
    # disagree, and every signature both compiled is a regression.
    sink.write(_batch(rank0, step[:7] + scale, rank0.started_at, SECONDS))
    sink.write(_batch(rank1, step + scale, rank1.started_at, SECONDS * RISE, while_repeating=True))
    with enginemod.connection(store_url) as conn:
        assert _marks(conn, kept) > 0, "the writes marked the kind stale"
    first = _both_agree(store_url, kept)
    assert first["found"], "the store makes this kind non-trivial"
    # One more batch of rank 1's run: its caches cleared, it compiles step's shapes again,
    # slower still, and most of its calls run slower. What is kept of that run (its burst,
    # its median compile seconds, its rank's counts) must be replaced, not added to.
    slower_calls = (CALL_SECONDS * RISE, 300)
    again = dict(while_repeating=True, cause=Cause.CACHE_CLEARED)
    sink.write(_batch(rank1, step, rank1.started_at + 100, SECONDS * RISE**2, slower_calls, **again))
    with enginemod.connection(store_url) as conn:
        assert _marks(conn, kept) > 0, "the new batch marked the kind stale again"
    second = _both_agree(store_url, kept)
    assert second["found"]
    assert second != first
