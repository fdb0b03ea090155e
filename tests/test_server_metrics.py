"""/metrics, parsed with prometheus_client's own parser: names, labels and values equal
to the store's content; the `function` label bounded to the top N with `other`; every
counter monotonic across scrapes, also when the ranking changes."""

from __future__ import annotations

import dataclasses
import time

import pytest
import serverkit as kit
import sqlalchemy as sa
from cachewatch_server.main import create_app
from cachewatch_server.metrics import BUCKETS
from cachewatch_server.settings import ServerSettings
from fastapi.testclient import TestClient

from cachewatch.core import runtimes
from cachewatch.core.events import DROP_REASONS, Cause, FunctionInfo, Kind, short_name
from cachewatch.record import current, recorder
from cachewatch.store import engine as enginemod
from cachewatch.store import models
from cachewatch.store import queries as storequeries

STORE_SERIES = (
    "cachewatch_compiles_total",
    "cachewatch_compile_seconds_bucket",
    "cachewatch_compile_seconds_sum",
    "cachewatch_compile_seconds_count",
    "cachewatch_calls_total",
    "cachewatch_run_seconds_total",
    "cachewatch_compile_share_ratio",
    "cachewatch_storm_active",
    "cachewatch_events_ingested_total",
)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> kit.Recorded:
    current.configure(store=f"sqlite:///{tmp_path_factory.mktemp('lib') / 'lib.db'}")
    return kit.run_jax_workload()


def make_client(url: str, **settings) -> TestClient:
    return TestClient(create_app(ServerSettings(store=url, write_token=None, read_token=None, **settings)))


def scrape(client: TestClient) -> dict:
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    return kit.parse_metrics(r.text)


def cost(event) -> float:
    return (event.trace_seconds or 0.0) + (event.lower_seconds or 0.0) + (event.compile_seconds or 0.0)


def test_metrics_equal_the_store(store_url, recorded):
    now = time.time()
    step, scale = recorded.function("step"), recorded.function("scale")
    stats = [
        kit.stats(recorded.run, step, now - 20, calls=100, sampled=2, seconds=0.02),
        kit.stats(recorded.run, step, now - 10, calls=50, sampled=1, seconds=0.03),
        kit.stats(recorded.run, scale, now - 10, calls=7),
    ]
    with make_client(store_url) as client:
        assert client.post("/api/v1/events", json=kit.payload(recorded.run, recorded.events, stats)).status_code == 200
        text = client.get("/metrics").text
        samples = kit.parse_metrics(text)

    names = {name for name, _ in samples}
    assert set(STORE_SERIES) <= names
    assert {
        "cachewatch_events_dropped_total",
        "cachewatch_http_requests_total",
        "cachewatch_store_up",
        "cachewatch_http_request_duration_seconds_count",
    } <= names
    fams = kit.families(text)
    assert fams["cachewatch_compiles"].type == "counter"
    assert fams["cachewatch_compile_seconds"].type == "histogram"
    assert fams["cachewatch_compile_share_ratio"].type == "gauge"

    for name in ("step", "<lambda>", "scale"):
        events = recorded.by_name(name)
        label = short_name(events[0].function.qualname)
        causes = {e.cause for e in events if e.compiled}
        for cause in causes:
            expected = sum(1 for e in events if e.compiled and e.cause == cause)
            assert kit.sample(samples, "cachewatch_compiles_total", function=label, cause=cause) == expected
        assert kit.sample(samples, "cachewatch_compile_seconds_count", function=label) == len(events)
        assert kit.sample(samples, "cachewatch_compile_seconds_sum", function=label) == pytest.approx(
            sum(cost(e) for e in events)
        )
        for le in BUCKETS:
            got = kit.sample(samples, "cachewatch_compile_seconds_bucket", function=label, le=repr(float(le)))
            assert got == sum(1 for e in events if cost(e) <= le), (label, le)
        assert kit.sample(samples, "cachewatch_compile_seconds_bucket", function=label, le="+Inf") == len(events)

    # The report's compile seconds are the histogram's sums.
    with enginemod.connection(store_url) as conn:
        report = {short_name(r["qualname"]): r for r in storequeries.function_report(conn)}
    for label, row in report.items():
        assert kit.sample(samples, "cachewatch_compile_seconds_sum", function=label) == pytest.approx(
            row["compile_seconds"]
        )
        assert kit.sample(samples, "cachewatch_calls_total", function=label) == row["calls"]

    # Each statistics row is costed at the run time per call known when it was written:
    # the lower median of the samples so far (two at 0.01 s, then one at 0.03 s), the
    # centre of its log-spaced bucket.
    per_call = runtimes.bucket_seconds(runtimes.bucket_of(0.01))
    run_seconds = 100 * per_call + 50 * per_call
    assert step.qualname == "run_jax_workload.<locals>.step"  # labelled by its short name
    assert kit.sample(samples, "cachewatch_run_seconds_total", function="step") == pytest.approx(run_seconds)
    assert kit.sample(samples, "cachewatch_run_seconds_total", function="scale") == 0
    compile_s = report["step"]["compile_seconds"]
    assert kit.sample(samples, "cachewatch_compile_share_ratio", function="step") == pytest.approx(
        compile_s / (compile_s + run_seconds)
    )
    # Never timed: no share rather than a made-up one.
    assert kit.sample(samples, "cachewatch_compile_share_ratio", function="scale") is None

    # The statistics count 150 calls of step against its 8 compiles: the cache served 142
    # after its burst of shapes, so the burst was a first pass, not an active storm.
    assert kit.sample(samples, "cachewatch_storm_active", function="step") == 0
    assert kit.sample(samples, "cachewatch_storm_active", function="scale") == 0
    assert kit.sample(samples, "cachewatch_events_ingested_total") == len(recorded.events)
    assert {kit.sample(samples, "cachewatch_events_dropped_total", reason=r) for r in DROP_REASONS} == {0}
    assert kit.sample(samples, "cachewatch_store_up") == 1
    assert (
        kit.sample(samples, "cachewatch_http_requests_total", method="POST", route="/api/v1/events", status="200") == 1
    )
    assert not any(dict(labels).get("function") == "other" for _, labels in samples)

    # A second worker (or a restarted service) reads the same numbers from the store.
    with make_client(store_url) as other_worker:
        again = scrape(other_worker)
    for key, value in samples.items():
        if key[0] in STORE_SERIES:
            assert again[key] == pytest.approx(value), key


def _function(i: int) -> FunctionInfo:
    return FunctionInfo(
        function_hash=f"{i:020x}", name=f"f{i}", qualname=f"model.f{i}", module="model", file="model.py", line=i
    )


def _compiles(recorded, run, function: FunctionInfo, n: int, start: float) -> list:
    template = recorded.by_name("step")[1]  # a real new_shape recompile
    return [kit.copy_event(template, run, start + i, function=function) for i in range(n)]


def _assert_monotonic(before: dict, after: dict) -> None:
    for key, value in before.items():
        name = key[0]
        counter = name.endswith(("_total", "_bucket", "_count", "_sum"))
        if counter and key in after:
            assert after[key] >= value, f"{key} went down: {value} -> {after[key]}"


def _function_labels(samples: dict) -> set[str]:
    return {dict(labels)["function"] for name, labels in samples if name == "cachewatch_compiles_total"}


def test_labels_are_decided_once_and_counters_never_go_down(store_url, recorded):
    now = time.time() - 3600
    run = kit.new_run(recorded.run, started_at=now)
    sizes = {1: 10, 2: 8, 3: 6, 4: 4, 5: 2}
    with make_client(store_url, metrics_top_n=2) as client:
        # f1 and f2 arrive alone: they take the two labels.
        for i in (1, 2):
            events = _compiles(recorded, run, _function(i), sizes[i], now + 100 * i)
            calls = [kit.stats(run, _function(i), now + 100 * i, calls=10 * sizes[i], sampled=1, seconds=0.001)]
            assert client.post("/api/v1/events", json=kit.payload(run, events, calls)).status_code == 200
        first = scrape(client)
        assert _function_labels(first) == {"model.f1", "model.f2"}
        for i in (3, 4, 5):
            events = _compiles(recorded, run, _function(i), sizes[i], now + 100 * i)
            calls = [kit.stats(run, _function(i), now + 100 * i, calls=10 * sizes[i], sampled=1, seconds=0.001)]
            assert client.post("/api/v1/events", json=kit.payload(run, events, calls)).status_code == 200
        second = scrape(client)
        _assert_monotonic(first, second)
        assert _function_labels(second) == {"model.f1", "model.f2", "other"}
        assert kit.sample(second, "cachewatch_compiles_total", function="other", cause=Cause.NEW_SHAPE) == 6 + 4 + 2
        assert kit.sample(second, "cachewatch_compile_seconds_count", function="other") == 12
        assert kit.sample(second, "cachewatch_calls_total", function="other") == 120
        assert kit.sample(second, "cachewatch_compiles_total", function="model.f1", cause=Cause.NEW_SHAPE) == 10

        # f4 overtakes everyone: it stays in `other` (labels are never moved), which grows by its compiles.
        client.post("/api/v1/events", json=kit.payload(run, _compiles(recorded, run, _function(4), 10, now + 1000)))
        third = scrape(client)
        _assert_monotonic(second, third)
        assert _function_labels(third) == {"model.f1", "model.f2", "other"}
        assert kit.sample(third, "cachewatch_compiles_total", function="other", cause=Cause.NEW_SHAPE) == 22

        # A restarted service (or another worker) answers exactly the same from the store.
        with make_client(store_url, metrics_top_n=2) as restarted:
            again = scrape(restarted)
        for key, value in third.items():
            if key[0] in STORE_SERIES:
                assert again[key] == value, key
    with enginemod.connection(store_url) as conn:
        rows = dict(conn.execute(sa.select(models.metric_labels.c.function_hash, models.metric_labels.c.label)).all())
    assert rows == {
        _function(1).function_hash: "model.f1",
        _function(2).function_hash: "model.f2",
        **{_function(i).function_hash: None for i in (3, 4, 5)},
    }


def test_functions_sharing_a_name_get_one_label_each(store_url, recorded):
    run = kit.new_run(recorded.run)
    a = dataclasses.replace(_function(1), qualname="<lambda>", name="<lambda>")
    b = dataclasses.replace(_function(2), qualname="<lambda>", name="<lambda>", module="other_module")
    c = dataclasses.replace(_function(3), qualname="<lambda>", name="<lambda>")  # a's module, another source
    events = (
        _compiles(recorded, run, a, 3, time.time() - 100)
        + _compiles(recorded, run, b, 2, time.time() - 50)
        + _compiles(recorded, run, c, 1, time.time() - 40)
    )
    with make_client(store_url) as client:
        client.post("/api/v1/events", json=kit.payload(run, events))
        samples = scrape(client)
    assert _function_labels(samples) == {
        "model.<lambda>",
        "other_module.<lambda>",
        f"model.<lambda>@{c.function_hash[:12]}",
    }
    assert kit.sample(samples, "cachewatch_compiles_total", function="model.<lambda>", cause=Cause.NEW_SHAPE) == 3
    assert (
        kit.sample(samples, "cachewatch_compiles_total", function="other_module.<lambda>", cause=Cause.NEW_SHAPE) == 2
    )


def test_dropped_events_counter(sqlite_url, recorded):
    with make_client(sqlite_url) as client:
        body = kit.payload(recorded.run, recorded.events, batch_id="batch-1", dropped=3)
        client.post("/api/v1/events", json=body)
        client.post("/api/v1/events", json=body)  # a retry reports the same drops once
        bad = kit.payload(recorded.run, recorded.events[:2])
        bad["events"][0]["kind"] = "nope"
        assert client.post("/api/v1/events", json=bad).status_code == 422
        samples = scrape(client)
    assert kit.sample(samples, "cachewatch_events_dropped_total", reason="unreported") == 3
    # What this process refused is its own counter: the store never saw it.
    assert kit.sample(samples, "cachewatch_ingest_rejected_events_total") == 2
    assert kit.sample(samples, "cachewatch_ingest_rejected_batches_total") == 1
    assert kit.sample(samples, "cachewatch_events_ingested_total") == len(recorded.events)
    # The recorders' drops are kept in the store: a restarted service still counts them.
    with make_client(sqlite_url) as client:
        assert kit.sample(scrape(client), "cachewatch_events_dropped_total", reason="unreported") == 3


def test_recorder_drops_reach_the_store_through_a_sql_sink(sqlite_url, use_store):
    import threading

    import sqlalchemy as sa
    from test_recorder import make_event

    from cachewatch.store import models

    use_store(sqlite_url, queue_size=2, flush_interval=0.01)
    writer = recorder._get_writer()
    release, busy = threading.Event(), threading.Event()
    real = writer.sink()

    class Slow:  # holds the writer so that the queue overflows behind it
        def write(self, batch):
            busy.set()
            release.wait(30)
            real.write(batch)

    recorder.use_sink(Slow())
    writer.put(make_event())
    assert busy.wait(10)
    for _ in range(6):
        writer.put(make_event())
    assert writer.dropped == 4
    release.set()
    recorder.use_sink(real)
    assert recorder.flush(10)
    recorder.record_event(make_event())  # the next batch carries the count
    assert recorder.flush(10)
    with enginemod.connection(sqlite_url) as conn:
        drops = conn.execute(sa.select(models.run_drops.c.reason, models.run_drops.c.dropped)).all()
    assert [tuple(d) for d in drops] == [("queue_full", 4)]


def test_unreachable_store_keeps_metrics_up():
    client = TestClient(create_app(ServerSettings(store="postgresql://nobody@127.0.0.1:1/none")))
    client.get("/healthz")
    samples = scrape(client)
    assert kit.sample(samples, "cachewatch_store_up") == 0
    assert kit.sample(samples, "cachewatch_http_requests_total", method="GET", route="/healthz", status="503") == 1
    assert not any(name == "cachewatch_compiles_total" for name, _ in samples)


def test_stale_captures_are_events_but_not_compiles(sqlite_url, recorded):
    step = recorded.by_name("step")
    stale = kit.copy_event(
        step[-1],
        recorded.run,
        time.time(),
        kind="stale_capture",
        cause=Cause.STALE_CAPTURE,
        compiled=False,
        trace_seconds=None,
        lower_seconds=None,
        compile_seconds=None,
        diff=({"path": "SCALE", "change": "value", "cause": "stale_capture", "before": "1.0", "after": "2.0"},),
        captured={"SCALE": "1.0"},
    )
    with make_client(sqlite_url) as client:
        assert client.post("/api/v1/events", json=kit.payload(recorded.run, step + [stale])).status_code == 200
        samples = scrape(client)
        summary = client.get("/api/v1/summary").json()
        events = client.get(f"/api/v1/functions/{stale.function.function_hash}/events").json()["items"]
    assert kit.sample(samples, "cachewatch_events_ingested_total") == len(step) + 1
    assert kit.sample(samples, "cachewatch_compile_seconds_count", function="step") == len(step)
    assert kit.sample(samples, "cachewatch_compiles_total", function="step", cause=Cause.STALE_CAPTURE) is None
    assert summary["stale_captures"] == 1
    assert "stale_capture" not in summary["causes"]
    assert summary["events"] == len(step) + 1
    assert summary["compiles"] == len(step)
    assert events[-1]["kind"] == Kind.STALE_CAPTURE
    assert events[-1]["captured"] == {"SCALE": "1.0"}


def test_jax_op_by_op_compiles_never_take_a_label(sqlite_url, recorded):
    run = kit.new_run(recorded.run)
    eager = dataclasses.replace(_function(7), name="add", qualname="add", module="jax.op_by_op")
    events = _compiles(recorded, run, eager, 6, time.time() - 100) + _compiles(
        recorded, run, _function(8), 2, time.time() - 50
    )
    with make_client(sqlite_url, metrics_top_n=5) as client:
        client.post("/api/v1/events", json=kit.payload(run, events))
        samples = scrape(client)
    assert _function_labels(samples) == {"model.f8", "other"}
    assert kit.sample(samples, "cachewatch_compiles_total", function="other", cause=Cause.NEW_SHAPE) == 6


def test_a_bug_in_one_family_leaves_the_rest_of_the_scrape(sqlite_url, recorded, monkeypatch):
    """/metrics builds the families read from the store in full before serving any: a bug
    there is counted by the guard and leaves those families out, never the whole scrape."""
    from cachewatch_server import metrics as metricsmod

    from cachewatch.core import _guard

    def broken(snap):
        raise RuntimeError("a bug in building the families")
        yield  # a generator, as the real one is

    monkeypatch.setattr(metricsmod, "families", broken)
    monkeypatch.setattr(_guard, "raise_errors", False)  # as outside the project's tests
    try:
        with make_client(sqlite_url) as client:
            assert client.post("/api/v1/events", json=kit.payload(recorded.run, recorded.events)).status_code == 200
            samples = scrape(client)
        assert _guard.internal_errors().get("metrics.families") == 1
    finally:
        _guard._counts.pop("metrics.families", None)  # counted on purpose here
    assert kit.sample(samples, "cachewatch_store_up") == 1
    assert not any(name == "cachewatch_compiles_total" for name, _ in samples)
    assert any(name == "cachewatch_capability" for name, _ in samples)
