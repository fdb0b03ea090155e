"""The overview's chart of compiles over time: the whole store's weeks are summed from the
kept hourly totals, and they say what counting the compiles themselves says."""

from __future__ import annotations

import random

import pytest
import sqlalchemy as sa
from test_recorder import make_event

import cachewatch
from cachewatch.core.events import Cause, Kind
from cachewatch.record import recorder
from cachewatch.store import charts, models, rollup
from cachewatch.store import engine as enginemod
from cachewatch.store.columns import Filters

DAY = 86400.0
START = 1_780_000_000.0  # a Thursday in 2026, mid-hour
CAUSES = (Cause.FIRST_CALL, Cause.NEW_SHAPE, Cause.NEW_STATIC_VALUE, Cause.WEAK_TYPE)


def _record_weeks(days: int, seed: int = 7) -> int:
    """Compiles (and traces that did not compile) at random times over ``days`` days."""
    rng = random.Random(seed)
    compiled = 0
    for _ in range(400):
        stamp = START + rng.uniform(0, days * DAY)
        is_compile = rng.random() < 0.8
        compiled += is_compile
        recorder.record_event(make_event(timestamp=stamp, cause=rng.choice(CAUSES), compiled=is_compile))
    assert cachewatch.flush(30)
    return compiled


def test_the_kept_hours_count_every_compile_once(store_url, use_store):
    use_store(store_url)
    compiled = _record_weeks(days=40)
    with enginemod.connection(store_url) as conn:
        h = models.compile_hour_totals
        kept = conn.execute(sa.select(h.c.hour, h.c.cause, h.c.compiles)).all()
        e = models.compile_events
        counted: dict[tuple[int, str], int] = {}
        for stamp, cause in conn.execute(sa.select(e.c.timestamp, e.c.cause).where(e.c.compiled)):
            key = (rollup.hour_of(stamp), cause)
            counted[key] = counted.get(key, 0) + 1
    assert sum(n for _, _, n in kept) == compiled
    assert {(int(hour), cause): n for hour, cause, n in kept} == counted
    assert all(hour % rollup.HOUR == 0 for hour, _, _ in kept)


def test_the_whole_store_chart_from_kept_hours_equals_the_count_of_compiles(store_url, use_store):
    use_store(store_url)
    _record_weeks(days=40)
    with enginemod.connection(store_url) as conn:
        whole = charts.compiles_over_time(conn, Filters())
        assert whole["width"] >= rollup.HOUR  # a span of weeks: drawn from the kept hours
        assert whole["rows"] == charts.compiles_by_event(conn, Filters(), whole["width"])
        everything = charts.compiles_over_time(conn, Filters(), recompiles_only=False)
        assert everything["rows"] == charts.compiles_by_event(
            conn, Filters(), everything["width"], recompiles_only=False
        )
        assert sum(n for _, _, n in everything["rows"]) > sum(n for _, _, n in whole["rows"]) > 0
        # A time range is counted from its events, in its own buckets.
        since = Filters(since=START + 30 * DAY)
        recent = charts.compiles_over_time(conn, since)
        assert recent["rows"] == charts.compiles_by_event(conn, since, recent["width"])
        assert min(bucket for bucket, _, _ in recent["rows"]) >= START + 30 * DAY - recent["width"]
        # The kept hours are what the whole store's chart reads: events pruned since stay counted,
        # as the kept totals beside it do.
        conn.execute(sa.delete(models.compile_events))
        assert charts.compiles_over_time(conn, Filters()) == whole
        assert charts.compiles_by_event(conn, Filters(), whole["width"]) == []


def test_a_short_store_is_counted_in_buckets_finer_than_an_hour(store_url, use_store):
    use_store(store_url)
    _record_weeks(days=1)
    with enginemod.connection(store_url) as conn:
        chart = charts.compiles_over_time(conn, Filters())
        assert chart["width"] < rollup.HOUR
        assert chart["rows"] == charts.compiles_by_event(conn, Filters(), chart["width"])


def test_a_functions_charts_read_in_one_pass_are_its_call_sites_and_compiles_counted(store_url, use_store):
    # Traces and compiles from three lines (and none), stale captures among them, over
    # two days: the call sites and compiles over time the function page reads together
    # are those counted from the events one by one.
    use_store(store_url)
    rng = random.Random(11)
    sites = ("train.py:10", "train.py:42", "eval.py:7", None)
    for _ in range(300):
        kind = rng.choice(("trace", "trace", "trace", Kind.STALE_CAPTURE))
        recorder.record_event(
            make_event(
                timestamp=START + rng.uniform(0, 2 * DAY),
                cause=rng.choice(CAUSES),
                compiled=rng.random() < 0.7,
                kind=kind,
                call_site=rng.choice(sites),
                trace_seconds=rng.uniform(0, 0.1),
            )
        )
    assert cachewatch.flush(30)
    with enginemod.connection(store_url) as conn:
        function_hash = conn.execute(sa.select(models.functions.c.function_hash)).scalar_one()
        listed, over_time = charts.function_charts(conn, function_hash, Filters())
        e = models.compile_events
        columns = (e.c.timestamp, e.c.cause, e.c.call_site, e.c.compiled, e.c.kind, charts.cost_expr(e))
        events = conn.execute(sa.select(*columns).where(e.c.function_hash == function_hash)).all()
    width = over_time["width"]
    assert width == charts.bucket_width((min(r[0] for r in events), max(r[0] for r in events)))
    counted: dict[tuple[float, str], int] = {}
    by_site: dict[str | None, list] = {}
    for stamp, cause, site, compiled, kind, seconds in events:
        if compiled:
            key = (float(int(stamp // width) * width), cause)
            counted[key] = counted.get(key, 0) + 1
        if kind == Kind.STALE_CAPTURE:
            continue
        found = by_site.setdefault(site, [0, 0, 0.0, stamp])
        found[0] += 1
        found[1] += bool(compiled and cause != Cause.FIRST_CALL)
        found[2] += seconds
        found[3] = max(found[3], stamp)
    assert over_time["rows"] == [(start, cause, n) for (start, cause), n in sorted(counted.items())]
    assert {s["call_site"]: [s["events"], s["recompiles"]] for s in listed} == {
        site: found[:2] for site, found in by_site.items()
    }
    for s in listed:
        assert s["seconds"] == pytest.approx(by_site[s["call_site"]][2])
        assert s["last"] == pytest.approx(by_site[s["call_site"]][3])
    assert [s["events"] for s in listed] == sorted((s["events"] for s in listed), reverse=True)
    assert len(listed) == len(sites), "every line, and the events without one"


def test_the_room_a_functions_charts_take_to_group_ends_with_their_read(pg_url):
    # The charts raise PostgreSQL's work memory for their own transaction only: a pooled
    # connection's next transaction is back at the server's setting.
    def work_mem(conn: sa.Connection) -> str:
        return conn.exec_driver_sql("SHOW work_mem").scalar_one()

    enginemod.ensure_schema(pg_url)
    with enginemod.connection(pg_url) as conn:
        before = work_mem(conn)
    for _ in range(3):  # enough turns of the pool to meet the same connection again
        with enginemod.connection(pg_url) as conn:
            charts.function_charts(conn, "0" * 40, Filters())
            charts.compiles_by_event(conn, Filters(since=0.0), 60)
            assert work_mem(conn) == enginemod.GROUPING_WORK_MEM
        with enginemod.connection(pg_url) as conn:
            assert work_mem(conn) == before
