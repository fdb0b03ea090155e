"""The writer: batching, drops, flush, spooling when the store is down, fork."""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import pytest
import sqlalchemy as sa

import cachewatch
from cachewatch.core import config as configmod
from cachewatch.core.events import Batch, Cause, CompileEvent, FunctionInfo
from cachewatch.record import current, recorder
from cachewatch.store import engine as enginemod
from cachewatch.store import models, spool

INFO = FunctionInfo(function_hash="f" * 20, name="synthetic", qualname="synthetic", module="tests", file="x.py", line=1)


def make_event(**overrides) -> CompileEvent:
    values: dict[str, Any] = dict(
        event_id=uuid.uuid4().hex,
        function=INFO,
        run_id=current.run_id(),
        timestamp=time.time(),
        kind="trace",
        cause=Cause.FIRST_CALL,
        explanation="synthetic",
        diff=(),
        signature=(),
        signature_hash="0" * 20,
        compiled=True,
        nested=False,
        compile_seconds=0.01,
    )
    values.update(overrides)
    return CompileEvent(**values)


def count_events(url: str) -> int:
    with enginemod.connection(url) as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(models.compile_events)).scalar_one()


def test_many_events_in_few_batches_and_flush(store_url, use_store):
    use_store(store_url, batch_size=200)
    for _ in range(1000):
        recorder.record_event(make_event())
    assert cachewatch.flush(30)
    assert count_events(store_url) == 1000
    assert recorder.dropped_events() == 0


def test_full_queue_drops_and_counts(sqlite_url, use_store):
    import threading

    use_store(sqlite_url, queue_size=5, flush_interval=0.01)
    writer = recorder._get_writer()
    release, busy = threading.Event(), threading.Event()

    class SlowSink:  # a store that takes its time: the queue fills behind it
        def write(self, batch):
            busy.set()
            release.wait(30)

    recorder.use_sink(SlowSink())
    writer.put(make_event())
    assert busy.wait(10)
    for _ in range(12):
        writer.put(make_event())
    assert writer.dropped == 12 - 5
    release.set()
    result = cachewatch.flush(10)
    assert result
    assert result.dropped == {"queue_full": 7}


def test_store_down_spools_then_replays_without_loss_or_duplicates(tmp_path, use_store):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the store's directory should be")
    url = f"sqlite:///{blocker}/store.db"
    use_store(url, spool_dir=str(tmp_path / "spool"), flush_interval=0.05)
    ids = []
    for _ in range(30):
        event = make_event()
        ids.append(event.event_id)
        recorder.record_event(event)
    result = cachewatch.flush(30)
    assert not result
    assert result.done
    assert result.spooled_batches >= 1
    cfg = current.config()
    assert spool.has_pending(cfg)
    assert recorder.written_events() == 0
    # The store comes back: the next write replays the spool first.
    blocker.unlink()
    blocker.mkdir()
    enginemod.dispose_engines()
    recorder.record_event(make_event())
    assert cachewatch.flush(30)
    deadline = time.time() + 10
    while spool.has_pending(cfg) and time.time() < deadline:
        cachewatch.flush(5)
    assert not spool.has_pending(cfg)
    with enginemod.connection(url) as conn:
        stored = [r.event_id for r in conn.execute(sa.select(models.compile_events.c.event_id))]
    assert len(stored) == 31
    assert set(ids) <= set(stored)


def test_store_down_and_spool_full_drops_events_as_spool_full(tmp_path, use_store):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the store's directory should be")
    url = f"sqlite:///{blocker}/store.db"
    # A cap smaller than any batch: with the store down, nothing can be kept either.
    use_store(url, spool_dir=str(tmp_path / "spool"), spool_max_bytes=64, flush_interval=0.05)
    for _ in range(5):
        recorder.record_event(make_event())
    result = cachewatch.flush(30)
    assert result.done
    assert result.spooled_batches == 0
    assert result.dropped == {"spool_full": 5}  # lost, and said why
    assert recorder.dropped_events() == 5
    assert recorder.written_events() == 0
    assert not spool.has_pending(current.config())
    # The store comes back: the loss reaches the run's row with the next batch.
    blocker.unlink()
    blocker.mkdir()
    enginemod.dispose_engines()
    recorder.record_event(make_event())
    assert cachewatch.flush(30)
    with enginemod.connection(url) as conn:
        drops = {r.reason: r.dropped for r in conn.execute(sa.select(models.run_drops))}
    assert drops == {"spool_full": 5}
    assert count_events(url) == 1


def test_spool_respects_its_byte_cap(tmp_path):
    cfg = configmod.resolve({"store": "sqlite:///x.db", "spool_dir": str(tmp_path), "spool_max_bytes": 3000})
    batch = Batch(run=current.run_info(), events=[make_event()], stats=[])
    saved = [spool.save(cfg, batch) for _ in range(10)]
    assert saved[0]
    assert not all(saved)
    assert spool.used_bytes(cfg) <= 3000


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")
def test_child_after_fork_gets_its_own_run_and_writer(sqlite_url, use_store):
    use_store(sqlite_url)
    recorder.record_event(make_event())
    assert cachewatch.flush(10)
    parent_run = current.run_id()
    pid = os.fork()
    if pid == 0:  # child: no JAX work here, only the recorder
        code = 1
        try:
            assert recorder._writer is None
            recorder.record_event(make_event(run_id=current.run_id()))
            code = 0 if cachewatch.flush(20) and current.run_id() != parent_run else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with enginemod.connection(sqlite_url) as conn:
        runs = conn.execute(sa.select(models.runs.c.run_id, models.runs.c.pid)).all()
    assert len(runs) == 2
    assert {r.pid for r in runs} == {os.getpid(), pid}


def test_call_statistics_are_written(sqlite_url, use_store):
    use_store(sqlite_url, sample_every=2, sample_max_per_second=1000)
    import jax.numpy as jnp

    @cachewatch.jit
    def counted(x):
        return x + 1

    for _ in range(10):
        counted(jnp.ones(2))
    assert cachewatch.flush(10)
    for _ in range(5):
        counted(jnp.ones(2))
    assert cachewatch.flush(10)
    with enginemod.connection(sqlite_url) as conn:
        rows = conn.execute(sa.select(models.call_stats)).all()
    assert [r.calls for r in rows] == [10, 5]
    assert sum(r.sampled_calls for r in rows) >= 5


class _Refusal(Exception):
    retryable = False
    status = 422


def test_refused_batch_is_dropped_not_spooled_and_never_blocks_the_spool(tmp_path, sqlite_url, use_store):
    use_store(sqlite_url, spool_dir=str(tmp_path / "spool"), flush_interval=0.05)
    cfg = current.config()
    writer = recorder._get_writer()
    # An older batch the store refuses sits in the spool ahead of a good one.
    refused = Batch(run=current.run_info(), events=[make_event()], stats=[])
    good = Batch(run=current.run_info(), events=[make_event()], stats=[])
    assert spool.save(cfg, refused)
    assert spool.save(cfg, good)

    class Picky:
        def __init__(self, real):
            self.real = real

        def write(self, batch):
            if batch.events and batch.events[0].event_id == refused.events[0].event_id:
                raise _Refusal("the store refuses this batch")
            self.real.write(batch)

    from cachewatch.store.sinks import SqlSink

    recorder.use_sink(Picky(SqlSink(sqlite_url)))
    recorder.record_event(make_event())
    assert cachewatch.flush(30)
    assert not spool.has_pending(cfg)
    assert count_events(sqlite_url) == 2  # the good spooled batch and the new event
    assert len(list((tmp_path / "spool").rglob("*.bad"))) == 1

    class Refusing:
        def write(self, batch):
            raise _Refusal("never")

    recorder.use_sink(Refusing())
    dropped = writer.dropped
    recorder.record_event(make_event())
    result = cachewatch.flush(30)
    assert result
    assert writer.dropped == dropped + 1
    assert not spool.has_pending(cfg)
    # The spooled batch set aside on replay and this refused one, each under its reason.
    assert result.dropped == {"set_aside": dropped, "store_refused": 1}
    assert dropped > 0
