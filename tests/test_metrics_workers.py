"""/metrics across processes: `cachewatch serve --workers 2`, and two separate services
on one PostgreSQL database, scraped many times while batches with new functions arrive.
No counter series may ever read lower than in an earlier scrape, whichever process
answered, and once writes stop every process answers the same store values."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import urllib.request

import pytest
import serverkit as kit

from cachewatch.core.events import FunctionInfo
from cachewatch.record import current

STORE_COUNTERS = (
    "cachewatch_compiles_total",
    "cachewatch_compile_seconds_bucket",
    "cachewatch_compile_seconds_sum",
    "cachewatch_compile_seconds_count",
    "cachewatch_calls_total",
    "cachewatch_run_seconds_total",
    "cachewatch_events_ingested_total",
    "cachewatch_events_dropped_total",
)
PROCESS_COUNTERS = (
    "cachewatch_http_requests_total",
    "cachewatch_ingest_rejected_events_total",
    "cachewatch_ingest_rejected_batches_total",
    "cachewatch_http_request_duration_seconds_count",
)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> kit.Recorded:
    current.configure(store=f"sqlite:///{tmp_path_factory.mktemp('lib') / 'lib.db'}")
    return kit.run_jax_workload()


def _function(i: int) -> FunctionInfo:
    return FunctionInfo(
        function_hash=f"{i:020x}", name=f"f{i}", qualname=f"layer.f{i}", module="net", file="net.py", line=i
    )


def _post(url: str, body: dict) -> int:
    request = urllib.request.Request(
        url + "/api/v1/events",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _scrape(url: str) -> dict:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as response:
        return kit.parse_metrics(response.read().decode())


def _feed(urls: list[str], recorded, stop: threading.Event, posted: list[tuple[int, int, int]]) -> None:
    """Batches of recompiles, a new function every few batches, the biggest compilers late:
    so functions arrive (and would overtake the first ones) while scrapes go on. Each batch
    is noted in ``posted`` as (batch, status, events): the test body checks them, since an
    assert in this thread would only end the thread."""
    template = recorded.by_name("step")[1]
    run = kit.new_run(recorded.run)
    batch = 0
    while not stop.is_set() and batch < 400:
        functions = [_function(i) for i in range(1 + batch // 6)]
        function = functions[batch % len(functions)]
        n = 1 + (batch // 6) % 5  # later functions compile more per batch
        events = [kit.copy_event(template, run, time.time(), function=function) for _ in range(n)]
        stats = [kit.stats(run, function, time.time() + batch * 1e-3, calls=7, sampled=1, seconds=0.002)]
        body = kit.payload(run, events, stats)
        if batch % 25 == 24:  # a refused batch now and then: the process counters move too
            body["events"][0]["kind"] = "nope"
        posted.append((batch, _post(urls[batch % len(urls)], body), len(events)))
        batch += 1


def _assert_never_lower(history: list[dict], names: tuple[str, ...]) -> int:
    """Every series of ``names`` at least as high as in any earlier scrape; returns comparisons made."""
    highest: dict = {}
    compared = 0
    for i, samples in enumerate(history):
        for key, value in samples.items():
            if key[0] not in names:
                continue
            if key in highest:
                compared += 1
                assert value >= highest[key], f"scrape {i}: {key} went down from {highest[key]} to {value}"
            highest[key] = max(value, highest.get(key, value))
    return compared


def _run(urls: list[str], recorded, scrapes: int) -> list[dict]:
    stop = threading.Event()
    posted: list[tuple[int, int, int]] = []
    history: list[dict] = []
    crashed: list[Exception] = []

    def feed() -> None:
        try:
            _feed(urls, recorded, stop, posted)
        except Exception as exc:  # reported by the test body, not lost with the thread
            crashed.append(exc)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        for i in range(scrapes):
            history.append(_scrape(urls[i % len(urls)]))
            time.sleep(0.02)
    finally:
        stop.set()
        feeder.join(60)
    assert not feeder.is_alive(), "the feeder did not stop"
    assert crashed == [], crashed
    # Every batch answered: accepted, except the deliberately broken one in 25.
    statuses = [status for _, status, _ in posted]
    assert statuses == [422 if batch % 25 == 24 else 200 for batch, _, _ in posted], statuses
    sent = [n if status == 200 else 0 for _, status, n in posted]
    assert sum(sent) > 0
    final = [_scrape(url) for url in urls for _ in range(4)]
    store_values = [{k: v for k, v in samples.items() if k[0] in STORE_COUNTERS} for samples in final]
    assert all(values == store_values[0] for values in store_values), "processes disagree on the store"
    # One unlabelled series: the store's total, not one per process or per worker.
    assert [k for k in store_values[0] if k[0] == "cachewatch_events_ingested_total"] == [
        ("cachewatch_events_ingested_total", ())
    ]
    ingested = store_values[0][("cachewatch_events_ingested_total", ())]
    assert ingested == sum(sent)
    labels = {dict(k[1])["function"] for k in store_values[0] if k[0] == "cachewatch_compiles_total"}
    assert len(labels) <= 4
    assert "other" in labels
    return history + final


def _env(tmp_path) -> dict[str, str]:
    env = {**os.environ, "CACHEWATCH_METRICS_TOP_N": "3", "JAX_PLATFORMS": "cpu"}
    for name in ("CACHEWATCH_WRITE_TOKEN", "CACHEWATCH_READ_TOKEN", "PROMETHEUS_MULTIPROC_DIR"):
        env.pop(name, None)
    return env


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_two_workers_never_show_a_counter_going_down(kind, tmp_path, recorded, request):
    store = f"sqlite:///{tmp_path / 'store.db'}" if kind == "sqlite" else request.getfixturevalue("pg_url")
    with kit.serve_process(store, tmp_path, _env(tmp_path), workers=2) as url:
        history = _run([url], recorded, scrapes=150)
    # Both the store's counters and the ones each worker keeps (summed over workers).
    assert _assert_never_lower(history, STORE_COUNTERS) > 1000
    assert _assert_never_lower(history, PROCESS_COUNTERS) > 100
    assert any(k[0] == "cachewatch_ingest_rejected_events_total" and v > 0 for k, v in history[-1].items())


def test_two_services_on_one_postgresql_agree(pg_url, tmp_path, recorded):
    with contextlib.ExitStack() as stack:
        urls = [
            stack.enter_context(kit.serve_process(pg_url, tmp_path, _env(tmp_path), log_name=f"serve-{i}.log"))
            for i in range(2)
        ]
        history = _run(urls, recorded, scrapes=150)
    # Request counters belong to each service; the store's are the same whichever answers.
    assert _assert_never_lower(history, STORE_COUNTERS) > 1000
