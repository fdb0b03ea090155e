"""Bad input: every measure is bounded at ingest and in the library's own SQL writer,
a refused batch stores nothing and leaves the service up, and rows that got into a
store before it bounded them (or by hand) never make a page, an API answer or a
command fail: what is there is shown, flagged."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time

import httpx
import pytest
import serverkit as kit
import sqlalchemy as sa
from cachewatch_server.main import create_app
from cachewatch_server.settings import ServerSettings
from fastapi.testclient import TestClient

from cachewatch.record import current
from cachewatch.store import engine as enginemod
from cachewatch.store import models, sinks, writes


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> kit.Recorded:
    current.configure(store=f"sqlite:///{tmp_path_factory.mktemp('lib') / 'lib.db'}")
    return kit.run_jax_workload()


def client_for(url: str, **settings) -> TestClient:
    return TestClient(
        create_app(ServerSettings(store=url, write_token=None, read_token=None, **settings)),
        raise_server_exceptions=False,
    )


def _count(url: str) -> int:
    with enginemod.connection(url) as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(models.compile_events)).scalar_one()


def _pages(client: TestClient, function_hash: str, run_id: str) -> dict[str, httpx.Response]:
    paths = [
        "/",
        "/functions",
        f"/functions/{function_hash}",
        "/runs",
        "/storms",
        f"/?run_id={run_id}",
        f"/functions?run_id={run_id}",
        "/api/v1/functions",
        f"/api/v1/functions/{function_hash}",
        f"/api/v1/functions/{function_hash}/events",
        "/api/v1/runs",
        "/api/v1/storms",
        "/api/v1/summary",
        "/api/v1/diagnosis",
        "/metrics",
    ]
    return {path: client.get(path) for path in paths}


BAD_TIMES = [1e308, -1e308, 0.0, 253402300800.0 * 10]  # far future, far past, 1970, past year 9999


def test_rows_outside_the_bounds_already_stored_never_break_a_page_or_command(store_url, recorded, tmp_path):
    good = recorded.by_name("step")
    run = kit.new_run(recorded.run, started_at=1e308)
    bad = [kit.copy_event(good[i % len(good)], run, ts) for i, ts in enumerate(BAD_TIMES)]
    bad += [
        kit.copy_event(good[1], run, time.time(), compile_seconds=-5.0),
        kit.copy_event(good[2], run, time.time(), compile_seconds=1e300, trace_seconds=float("inf")),
        # an op-by-op run time without its compiled twin: the verdicts cannot weigh it
        kit.copy_event(good[3], run, time.time(), eager_run_seconds=0.5, compiled_run_seconds=None),
    ]
    if "postgresql" in store_url:  # SQLite keeps NaN as NULL, which the column refuses
        bad.append(kit.copy_event(good[3], run, float("nan"), compile_seconds=float("nan")))
    # Written as a store older than the bounds would have taken them: straight through the rows.
    batch = kit.batch(run, bad)
    with enginemod.connection(store_url) as conn:
        writes.write_rows(conn, writes.table_rows(batch))
    function_hash = good[0].function.function_hash
    with client_for(store_url) as client:
        answers = _pages(client, function_hash, run.run_id)
    for path, response in answers.items():
        assert response.status_code == 200, (path, response.status_code, response.text[:300])
    assert "invalid time" in answers[f"/functions/{function_hash}"].text
    assert "invalid time" in answers["/runs"].text
    for command in (["report"], ["events"], ["events", "--format", "json"], ["report", "--format", "json"], ["storms"]):
        done = subprocess.run(
            [sys.executable, "-m", "cachewatch", *command, "--store", store_url],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (command, done.stderr[-2000:])
        assert "Traceback" not in done.stderr


def _event_body(recorded, **changes) -> dict:
    body = kit.payload(recorded.run, recorded.by_name("step")[:2])
    body["events"][1].update(changes)
    return body


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"timestamp": 1e308}, "timestamp"),
        ({"timestamp": -1.0}, "timestamp"),
        ({"timestamp": 4_200_000_000.0}, "timestamp"),
        ({"compile_seconds": -0.5}, "compile_seconds"),
        ({"compile_seconds": 1e9}, "compile_seconds"),
        ({"trace_seconds": "fast"}, "trace_seconds"),
        ({"jaxpr_eqns": -3}, "jaxpr_eqns"),
        ({"flops": -1.0}, "flops"),
        ({"eager_run_seconds": 0.5, "compiled_run_seconds": None}, "eager_run_seconds"),
        ({"kind": 3}, "kind"),
        ({"cause": "<script>alert(1)</script>"}, "cause"),
    ],
)
def test_out_of_bounds_and_wrong_types_are_refused_whole(sqlite_url, recorded, changes, field):
    with client_for(sqlite_url) as client:
        response = client.post("/api/v1/events", json=_event_body(recorded, **changes))
        assert response.status_code == 422, response.text
        assert field in response.json()["message"]
        assert "nothing stored" in response.json()["message"]
        assert client.get("/healthz").status_code == 200
    assert _count(sqlite_url) == 0


def test_stats_bounds(sqlite_url, recorded):
    step = recorded.function("step")
    with client_for(sqlite_url) as client:
        for stat in (
            kit.stats(recorded.run, step, time.time(), calls=-1),
            kit.stats(recorded.run, step, 1e308, calls=1),
            kit.stats(recorded.run, step, time.time(), calls=2, sampled=-1, seconds=0.1),
            kit.stats(recorded.run, step, time.time(), calls=2, sampled=1, seconds=-0.1),
        ):
            body = kit.payload(recorded.run, [], [stat])
            assert client.post("/api/v1/events", json=body).status_code == 422


@pytest.mark.parametrize(
    "raw",
    [
        b"NaN",
        b'{"run": {"run_id": "r", "started_at": NaN}}',
        b'{"run": {"run_id": "r", "started_at": Infinity}}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"run": ' * 5000 + b"1" + b"}" * 5000,
        b"\xff\xfe not json",
        b'{"run": "a string"}',
        b"",
        b"[]",
        json.dumps({"run": {"run_id": "x" * 10_000, "started_at": 1.8e9}}).encode(),
    ],
)
def test_malformed_bodies_get_a_clear_4xx(sqlite_url, raw):
    with client_for(sqlite_url) as client:
        response = client.post("/api/v1/events", content=raw, headers={"Content-Type": "application/json"})
        assert 400 <= response.status_code < 500, (raw[:40], response.status_code)
        assert response.json().get("message") or response.json().get("detail")
        assert "Traceback" not in response.text
        assert client.get("/healthz").status_code == 200


def test_oversized_body_is_413_and_stores_nothing(sqlite_url, recorded):
    with client_for(sqlite_url, max_body_bytes=64 * 1024) as client:
        events = [
            kit.copy_event(recorded.by_name("step")[1], recorded.run, time.time(), explanation="x" * 2000)
            for _ in range(100)
        ]
        response = client.post("/api/v1/events", json=kit.payload(recorded.run, events))
        assert response.status_code == 413
        assert "CACHEWATCH_MAX_BODY_BYTES" in response.json()["detail"]
        assert client.get("/healthz").status_code == 200
    assert _count(sqlite_url) == 0


HOSTILE = [
    "<script>alert('x')</script>",
    "'; DROP TABLE compile_events; --",
    "Robert'); DELETE FROM runs;--",
    "naïve_λ_函数",
    "tab\there\nnewline",
    "bell\x07and\x1bescape",
    "\u202eright-to-left",
    "emoji_🔥",
]


def test_hostile_names_are_stored_literally_and_shown_escaped(store_url, recorded):
    template = recorded.by_name("step")[1]
    run = kit.new_run(recorded.run)
    events = []
    for i, name in enumerate(HOSTILE):
        function = dataclasses.replace(
            template.function, function_hash=f"{i:040x}", name=name, qualname=name, module=name, file=name
        )
        events.append(
            kit.copy_event(template, run, time.time() - 10 + i, function=function, explanation=name, call_site=name)
        )
    with client_for(store_url) as client:
        assert client.post("/api/v1/events", json=kit.payload(run, events)).status_code == 200
        items = client.get("/api/v1/functions?limit=100").json()["items"]
        assert {row["qualname"] for row in items} >= set(HOSTILE)  # literally, nothing stripped
        pages = [client.get(p) for p in ("/", "/functions", "/storms", "/runs")]
        pages += [client.get(f"/functions/{i:040x}") for i in range(len(HOSTILE))]
        metrics = client.get("/metrics")
    assert metrics.status_code == 200
    for page in pages:
        assert page.status_code == 200
        assert "<script>alert(" not in page.text  # never as markup
    # Shown, escaped, on the function's own page and in the list.
    for page in (pages[1], pages[4]):
        assert "&lt;script&gt;alert(" in page.text
    assert "DROP TABLE compile_events" in pages[5].text
    with enginemod.connection(store_url) as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(models.runs)).scalar_one() >= 1


def test_the_library_writer_keeps_bounds_too(sqlite_url, recorded):
    good = recorded.by_name("step")
    run = kit.new_run(recorded.run)
    events = [
        kit.copy_event(good[0], run, time.time()),
        kit.copy_event(good[1], run, 1e308),  # refused: counted as dropped
        kit.copy_event(good[2], run, time.time(), compile_seconds=-2.0, trace_seconds=float("inf")),
    ]
    sinks.SqlSink(sqlite_url).write(kit.batch(run, events))
    with enginemod.connection(sqlite_url) as conn:
        rows = conn.execute(
            sa.select(
                models.compile_events.c.event_id,
                models.compile_events.c.compile_seconds,
                models.compile_events.c.trace_seconds,
            )
        ).all()
        dropped = conn.execute(sa.select(sa.func.sum(models.run_drops.c.dropped))).scalar_one()
    assert {r.event_id for r in rows} == {events[0].event_id, events[2].event_id}
    assert [(r.compile_seconds, r.trace_seconds) for r in rows if r.event_id == events[2].event_id] == [(None, None)]
    assert dropped == 1


def test_the_library_writer_stores_text_with_nul(store_url, recorded):
    # An exception message may carry a NUL, which PostgreSQL text cannot hold: the library's
    # own writer replaces it as the service does, rather than lose the batch.
    good = recorded.by_name("step")
    run = kit.new_run(recorded.run)
    events = [kit.copy_event(good[0], run, time.time(), error="ValueError: bad\x00byte")]
    sinks.SqlSink(store_url).write(kit.batch(run, events))
    with enginemod.connection(store_url) as conn:
        stored = conn.execute(sa.select(models.compile_events.c.error)).scalar_one()
    assert stored == "ValueError: bad\ufffdbyte"
