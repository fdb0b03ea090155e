"""Truthful delivery: flush says stored or only spooled; a batch the store will never
take is set aside with a counted reason and never blocks the spool; torn spool files
are skipped and counted while the rest is delivered; a batch over the service's size
cap is sent again in halves."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import serverkit as kit
import sqlalchemy as sa
from cachewatch_server.main import create_app
from cachewatch_server.settings import ServerSettings
from test_recorder import count_events, make_event

import cachewatch
from cachewatch.core.events import Batch
from cachewatch.record import current, recorder
from cachewatch.store import engine as enginemod
from cachewatch.store import models, spool
from cachewatch.store.sinks import SqlSink

# The writer also replays when idle; these tests lay out the spool first, then flush.
IDLE = {"flush_interval": 30.0, "stats_interval": 30.0}


class _Unreachable(Exception):
    retryable = True  # looks like the store is down: the writer would keep it


def _batch(n: int = 1) -> Batch:
    return Batch(run=current.run_info(), events=[make_event() for _ in range(n)], stats=[])


def test_a_batch_that_fails_while_later_ones_go_through_is_set_aside(tmp_path, sqlite_url, use_store):
    use_store(sqlite_url, spool_dir=str(tmp_path / "spool"), **IDLE)
    cfg = current.config()
    writer = recorder._get_writer()
    poison, behind = _batch(2), [_batch(1) for _ in range(3)]
    assert spool.save(cfg, poison)
    assert all(spool.save(cfg, b) for b in behind)
    real = SqlSink(sqlite_url)

    class FailsOnOne:  # e.g. a body the server resets the connection on, every time
        def write(self, batch):
            if batch.events and batch.events[0].event_id == poison.events[0].event_id:
                raise _Unreachable("connection reset")
            real.write(batch)

    recorder.use_sink(FailsOnOne())
    dropped = writer.dropped
    for _ in range(spool.MAX_STRIKES + 1):
        recorder.record_event(make_event())
        cachewatch.flush(30)
    result = cachewatch.flush(30)
    assert result.stored
    assert result.spooled_batches == 0
    assert count_events(sqlite_url) == 3 + spool.MAX_STRIKES + 1  # everything but the poison batch
    assert writer.set_aside == {f"failed {spool.MAX_STRIKES} times while the store took other batches": 1}
    assert writer.dropped == dropped + 2  # its events are counted lost, and reported to the store
    bad = list((tmp_path / "spool").rglob("*.bad"))
    assert len(bad) == 1
    assert "took other batches" in bad[0].with_name(bad[0].name + ".reason").read_text()


def test_a_store_that_is_down_strikes_no_batch(tmp_path, use_store):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the store's directory should be")
    use_store(f"sqlite:///{blocker}/store.db", spool_dir=str(tmp_path / "spool"), flush_interval=0.05)
    for _ in range(8):
        recorder.record_event(make_event())
        assert not cachewatch.flush(30)
    assert recorder._get_writer().set_aside == {}
    assert not list((tmp_path / "spool").rglob("*~*"))  # two failures in a row: the store, not a batch


def test_torn_spool_files_are_skipped_counted_and_the_rest_delivered(tmp_path, sqlite_url, use_store):
    use_store(sqlite_url, spool_dir=str(tmp_path / "spool"), **IDLE)
    cfg = current.config()
    good = [_batch(2) for _ in range(3)]
    assert all(spool.save(cfg, b) for b in good)
    files = sorted(spool._dir(cfg).glob("*.batch.json"))
    whole = files[1].read_bytes()
    files[1].write_bytes(whole[: len(whole) // 2])  # half a record, as a crash mid-copy leaves it
    # A process killed while writing its spool file left this (and its pid is gone).
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    (spool._dir(cfg) / f"{time.time_ns():020d}-{dead}-deadbeef.tmp").write_bytes(whole[:100])
    result = cachewatch.flush(30)
    assert result.stored
    assert count_events(sqlite_url) == 4  # the two whole batches
    assert recorder._get_writer().set_aside == {"unreadable": 1, "torn write": 1}
    assert not list(spool._dir(cfg).glob("*.tmp"))


def test_a_batch_claimed_by_a_dead_process_goes_back_in_line(tmp_path, sqlite_url, use_store):
    use_store(sqlite_url, spool_dir=str(tmp_path / "spool"), **IDLE)
    cfg = current.config()
    assert spool.save(cfg, _batch(3))
    path = next(spool._dir(cfg).glob("*.batch.json"))
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    os.rename(path, path.with_name(path.name + f".sending-{dead}"))
    assert cachewatch.flush(30)
    assert count_events(sqlite_url) == 3


def test_a_batch_over_the_size_cap_is_sent_in_halves(store_url, tmp_path, use_store):
    app = create_app(ServerSettings(store=store_url, write_token=None, read_token=None, max_body_bytes=64 * 1024))
    with kit.live_server(app) as server:
        use_store(server.url, spool_dir=str(tmp_path / "spool"), batch_size=500, flush_interval=0.5)
        ids = []
        for _ in range(400):  # about 1 MB in one batch: sixteen times the cap
            event = make_event(explanation="x" * 2000)
            ids.append(event.event_id)
            recorder.record_event(event)
        result = cachewatch.flush(60)
        assert result.stored, result
    with enginemod.connection(store_url) as conn:
        stored = list(conn.execute(sa.select(models.compile_events.c.event_id)).scalars())
    assert sorted(stored) == sorted(ids)
    assert not list((tmp_path / "spool").rglob("*.bad"))
