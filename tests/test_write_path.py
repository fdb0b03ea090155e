"""One write path: a batch written again, through the library's SqlSink, the service's
ingest, or one after the other, or by several writers at once, stores and counts its
events and call statistics once, in a real SQLite file and a real PostgreSQL database."""

from __future__ import annotations

import threading
import time
from typing import Any

import orjson
import pytest
import serverkit as kit
import sqlalchemy as sa
from cachewatch_server import ingest
from cachewatch_server.main import create_app
from cachewatch_server.schemas import IngestResult
from cachewatch_server.settings import ServerSettings
from fastapi.testclient import TestClient

from cachewatch.core import runtimes
from cachewatch.core.events import Batch, CallStats, DropReason
from cachewatch.record import current
from cachewatch.store import engine as enginemod
from cachewatch.store import models, rollup
from cachewatch.store.sinks import SqlSink

WRITERS = ("sink", "service")
# What the batch below adds to the store, once.
CALLS = 12 + 0 + 3
SAMPLES = 2
WEIGHT = 6 + 6  # the calls the two samples stand for
DROPPED = 2
# The totals a repeat must leave alone: rollup.py's, the losses and the caches' totals.
KEPT_TOTALS = (*rollup.TABLES, "run_drops", "persistent_cache_totals")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> kit.Recorded:
    # The library records into a scratch store; the tests write the same events again.
    current.configure(store=f"sqlite:///{tmp_path_factory.mktemp('lib') / 'lib.db'}")
    return kit.run_jax_workload()


def make_batch(recorded: kit.Recorded) -> Batch:
    """The workload's events, a flush of statistics (two sampled signatures of ``step``,
    calls of ``scale`` unsampled) and losses the recorder reports."""
    now, run_id = time.time(), recorded.run.run_id
    step, scale = recorded.function("step"), recorded.function("scale")
    fast: runtimes.Buckets = {}
    runtimes.add_sample(fast, 0.002, weight=6)
    slow: runtimes.Buckets = {}
    runtimes.add_sample(slow, 0.004, weight=6)

    def sampled(calls: int, signature: str, buckets: runtimes.Buckets, seconds: float) -> CallStats:
        return CallStats(
            run_id, step, now, calls, 1, seconds, signature * 16, runtimes.to_json(buckets), sample_every=6
        )

    stats = [
        sampled(12, "a", fast, 0.002),
        sampled(0, "b", slow, 0.004),  # the function's calls are on its first row
        CallStats(run_id, scale, now, 3, 0, 0.0, sample_every=6),
    ]
    return Batch(recorded.run, list(recorded.events), stats, {DropReason.QUEUE_FULL: DROPPED})


def service(url: str) -> TestClient:
    return TestClient(create_app(ServerSettings(store=url, write_token=None, read_token=None)))


def write(writer: str, url: str, batch: Batch) -> dict | None:
    """Write ``batch`` as the recorder's SqlSink does, or post it to the service; the
    service's answer, or None."""
    if writer == "sink":
        SqlSink(url).write(batch)
        return None
    with service(url) as client:
        response = client.post("/api/v1/events", json=batch.to_wire())
    assert response.status_code == 200, response.text
    return response.json()


def stored(url: str) -> dict[str, Any]:
    """What the store holds: its rows of events and statistics, and the totals kept beside them."""
    tables = models.Base.metadata.tables
    found: dict[str, Any] = {}
    with enginemod.connection(url) as conn:
        for name in ("compile_events", "call_stats"):
            found[name] = conn.execute(sa.select(sa.func.count()).select_from(tables[name])).scalar_one()
        for name in KEPT_TOTALS:
            table = tables[name]
            rows = conn.execute(sa.select(table).order_by(*table.primary_key.columns)).all()
            found[name] = [tuple(round(v, 9) if isinstance(v, float) else v for v in row) for row in rows]
    return found


def assert_counted_once(found: dict[str, Any], batch: Batch) -> None:
    def total(name: str, column: str) -> float:
        table = models.Base.metadata.tables[name]
        at = [c.name for c in table.columns].index(column)
        return sum(row[at] for row in found[name])

    assert found["compile_events"] == len(batch.events) > 0
    assert found["call_stats"] == len(batch.stats)
    assert total("run_totals", "events") == total("function_totals", "events") == len(batch.events)
    assert total("function_call_totals", "calls") == CALLS
    assert total("function_call_totals", "sampled_calls") == SAMPLES
    assert total("run_time_buckets", "samples") == SAMPLES
    assert total("run_time_buckets", "weight") == WEIGHT
    assert total("run_drops", "dropped") == DROPPED


@pytest.mark.parametrize("again", WRITERS)
@pytest.mark.parametrize("first", WRITERS)
def test_a_batch_written_twice_is_stored_and_counted_once(store_url, recorded, first, again):
    batch = make_batch(recorded)
    answer = write(first, store_url, batch)
    if answer is not None:
        assert (answer["stored_events"], answer["duplicate_events"]) == (len(batch.events), 0)
        assert (answer["stored_stats"], answer["duplicate_stats"]) == (len(batch.stats), 0)
    once = stored(store_url)
    assert_counted_once(once, batch)

    answer = write(again, store_url, batch)  # a retry, a spool replay, or the other writer
    if answer is not None:
        assert answer["events"] == answer["duplicate_events"] == len(batch.events)
        assert answer["stats"] == answer["duplicate_stats"] == len(batch.stats)
        assert answer["stored_events"] == answer["stored_stats"] == 0
    assert stored(store_url) == once


def test_a_batch_repeated_within_itself_is_stored_once(store_url, recorded):
    batch = make_batch(recorded)
    doubled = Batch(batch.run, batch.events + batch.events, batch.stats + batch.stats, batch.dropped_by)
    answer = write("service", store_url, doubled)
    assert answer is not None
    assert (answer["stored_events"], answer["duplicate_events"]) == (len(batch.events), len(batch.events))
    assert (answer["stored_stats"], answer["duplicate_stats"]) == (len(batch.stats), len(batch.stats))
    SqlSink(store_url).write(doubled)
    assert_counted_once(stored(store_url), batch)


def test_writers_racing_with_one_batch_store_it_once(store_url, recorded):
    # Four sinks and four ingests of one batch at once (a client's retry while its first
    # post is still being written): the run's lock lets one at a time check and store it.
    batch = make_batch(recorded)
    posted = ingest.parse(orjson.dumps(batch.to_wire(), option=orjson.OPT_NON_STR_KEYS))  # as HttpSink posts it
    # The run and its functions stored already (a first write of them would make the
    # others wait on their rows' inserts anyway): one event of each function.
    firsts = list({e.function.function_hash: e for e in reversed(batch.events)}.values())
    SqlSink(store_url).write(Batch(batch.run, firsts, []))
    start = threading.Barrier(8)
    answers: list[IngestResult] = []
    failures: list[BaseException] = []

    def race(writer: str) -> None:
        try:
            start.wait(timeout=30)
            if writer == "sink":
                SqlSink(store_url).write(batch)
            else:
                answers.append(ingest.store(store_url, posted))
        except BaseException as exc:  # reported below, from the test's own thread
            failures.append(exc)

    threads = [threading.Thread(target=race, args=(writer,)) for writer in WRITERS * 4]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures
    assert_counted_once(stored(store_url), batch)
    assert sum(a.stored_events for a in answers) <= len(batch.events) - len(firsts)
    assert sum(a.stored_stats for a in answers) <= len(batch.stats)


def test_every_field_of_a_call_statistics_row_survives_the_wire_and_the_spool(sqlite_url):
    """A spooled batch is read back with Batch.from_wire: a field of CallStats that did not
    come back (the slow-path calls did not) was lost for every batch that waited in the
    spool. Every field, set to something other than its default, comes back equal, and
    is stored."""
    import dataclasses
    import json

    from cachewatch.core.events import FunctionInfo, RunInfo

    run = dataclasses.replace(current.run_info(), run_id="f" * 32)
    function = FunctionInfo("s" * 40, "spooled", "spooled", "mod", "/x.py", 3)
    row = CallStats(
        run.run_id,
        function,
        1.0e9,
        12,
        2,
        0.004,
        "a" * 16,
        {"100": [2, 12]},
        6,
        None,
        {"unordered_effects": 3, "new_jit_object": 9},
        0.00025,
        "/home/me/train.py:41",
        "/home/me/train.py:58",
    )
    defaults = CallStats(run.run_id, function, 1.0e9, 12, 2, 0.004)
    changed = [f.name for f in dataclasses.fields(CallStats) if getattr(row, f.name) != getattr(defaults, f.name)]
    # Every field is set but released_by (a release row has no calls) and the first six.
    assert len(changed) == len(dataclasses.fields(CallStats)) - 7
    back = Batch.from_wire(json.loads(json.dumps(Batch(run, [], [row]).to_wire())))
    assert back.stats == [row]
    assert isinstance(back.run, RunInfo)
    SqlSink(sqlite_url).write(back)
    with enginemod.connection(sqlite_url) as conn:
        s = models.call_stats
        stored = conn.execute(
            sa.select(s.c.slow_calls, s.c.jit_object_seconds, s.c.jit_made_at, s.c.transformed_at)
        ).one()
    assert stored == (
        {"unordered_effects": 3, "new_jit_object": 9},
        0.00025,
        "/home/me/train.py:41",
        "/home/me/train.py:58",
    )
