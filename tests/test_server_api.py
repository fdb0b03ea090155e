"""The service's HTTP API through TestClient, on a real SQLite file and a real PostgreSQL
database: ingest (idempotent, whole or nothing, limits, auth), the query endpoints with
filters and cursors, storms, the summary, the schema check at startup, /healthz."""

from __future__ import annotations

import datetime as dt
import time

import pytest
import serverkit as kit
import sqlalchemy as sa
from cachewatch_server.deps import encode_cursor
from cachewatch_server.main import create_app
from cachewatch_server.settings import ServerSettings, SettingsError, load
from fastapi.testclient import TestClient
from serverkit import READ_TOKEN, TOKEN, auth

from cachewatch.core.events import Cause
from cachewatch.record import current
from cachewatch.store import engine as enginemod
from cachewatch.store import models, writes
from cachewatch.store import queries as storequeries
from cachewatch.storms import diagnosis
from cachewatch.views import compose


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> kit.Recorded:
    # The library writes to a scratch store; the tests post the same events to the service.
    # It stays pointed there: later flushes then never reach the user's default store.
    current.configure(store=f"sqlite:///{tmp_path_factory.mktemp('lib') / 'lib.db'}")
    return kit.run_jax_workload()


def make_client(url: str, **settings) -> TestClient:
    return TestClient(
        create_app(
            ServerSettings(
                store=url,
                write_token=settings.pop("write_token", None),
                read_token=settings.pop("read_token", None),
                **settings,
            )
        )
    )


@pytest.fixture
def client(store_url):
    with make_client(store_url) as c:
        yield c


def count(url: str, table: sa.Table) -> int:
    with enginemod.connection(url) as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()


def test_ingest_then_query(client, store_url, recorded):
    # The statistics are written as the workload ends: the run stops right after step's
    # burst of shapes, which is a storm: its 8 calls were the 8 that compiled (a run heard
    # from long after it, served from the cache, would show a first pass instead).
    ended = max(e.timestamp for e in recorded.events) + 0.01
    step = recorded.function("step")
    body = kit.payload(
        recorded.run, recorded.events, [kit.stats(recorded.run, step, ended, calls=8, sampled=4, seconds=0.2)]
    )
    r = client.post("/api/v1/events", json=body)
    assert r.status_code == 200, r.text
    assert r.json() == {
        "batch_id": None,
        "events": len(recorded.events),
        "stored_events": len(recorded.events),
        "duplicate_events": 0,
        "stats": 1,
        "stored_stats": 1,
        "duplicate_stats": 0,
    }

    items = client.get("/api/v1/functions").json()["items"]
    by_name = {row["name"]: row for row in items}
    assert set(by_name) == {"step", "<lambda>", "scale"}
    row = by_name["step"]
    assert row["function_hash"] == step.function_hash
    assert (row["compiles"], row["recompiles"]) == (8, 7)
    assert row["causes"] == {"first_call": 1, "new_shape": 7}
    assert row["dominant_cause"] == Cause.NEW_SHAPE
    # 4 samples at 0.05 s: the run time per call is their bucket's centre, within 4.5%.
    assert row["calls"] == 8
    assert row["run_seconds_est"] == pytest.approx(0.4, rel=0.05)
    assert by_name["<lambda>"]["dominant_cause"] == Cause.NEW_FUNCTION_OBJECT
    assert by_name["scale"]["causes"] == {"first_call": 1, "new_static_value": 1}
    # Same numbers as the store's own report (the CLI's).
    with enginemod.connection(store_url) as conn:
        report = {r["function_hash"]: r for r in storequeries.function_report(conn)}
    for item in items:
        for key, expected in report[item["function_hash"]].items():
            if isinstance(expected, float):
                assert item[key] == pytest.approx(expected), key
            else:
                assert item[key] == expected, key

    detail = client.get(f"/api/v1/functions/{step.function_hash}").json()
    assert detail["qualname"] == step.qualname
    assert detail["compiles"] == 8
    assert [s["dominant_cause"] for s in detail["storms"]] == ["new_shape"]
    assert "pad" in detail["storms"][0]["fix"]

    events = client.get(f"/api/v1/functions/{step.function_hash}/events").json()
    assert events["next_cursor"] is None
    assert [e["cause"] for e in events["items"]] == ["first_call"] + ["new_shape"] * 7
    second = events["items"][1]
    assert second["diff"][0]["path"] == "x"
    assert second["diff"][0]["change"] == "shape"
    assert second["signature"]
    assert second["name"] == "step"
    assert "id" not in second
    assert {e["event_id"] for e in events["items"]} == {e.event_id for e in recorded.by_name("step")}

    runs = client.get("/api/v1/runs").json()["items"]
    assert [(r["run_id"], r["events"]) for r in runs] == [(recorded.run.run_id, len(recorded.events))]
    assert runs[0]["jax_version"] == recorded.run.jax_version

    summary = client.get("/api/v1/summary").json()
    assert summary["functions"] == 3
    assert summary["runs"] == 1
    assert summary["events"] == len(recorded.events)
    assert summary["compiles"] == sum(e.compiled for e in recorded.events)
    assert summary["recompiles"] == 7 + 2 + 1
    assert summary["compile_seconds"] == pytest.approx(sum(r["compile_seconds"] for r in items))
    assert summary["calls"] == 8
    assert summary["active_storms"] == 1
    step_row = by_name["step"]
    share = step_row["compile_seconds"] / (step_row["compile_seconds"] + step_row["run_seconds_est"])
    assert summary["compile_share"] == pytest.approx(share)


def test_retried_batch_is_stored_once(client, store_url, recorded):
    now = time.time()
    step = recorded.function("step")
    body = kit.payload(
        recorded.run, recorded.events, [kit.stats(recorded.run, step, now, calls=10)], batch_id="b-1", dropped=2
    )
    first = client.post("/api/v1/events", json=body)
    again = client.post("/api/v1/events", json=body)
    assert first.status_code == again.status_code == 200
    assert again.json()["stored_events"] == 0
    assert again.json()["duplicate_events"] == len(recorded.events)
    assert again.json()["stored_stats"] == 0
    assert again.json()["duplicate_stats"] == 1
    assert count(store_url, models.compile_events) == len(recorded.events)
    assert count(store_url, models.call_stats) == 1
    # By name: which function compiled longest varies from run to run.
    by_name = {row["name"]: row for row in client.get("/api/v1/functions").json()["items"]}
    assert by_name["step"]["calls"] == 10
    # Half old, half new: only the new half is added.
    run2 = kit.new_run(recorded.run)
    fresh = [kit.copy_event(e, run2, now) for e in recorded.events[:3]]
    r = client.post("/api/v1/events", json=kit.payload(run2, fresh))
    assert r.json()["stored_events"] == 3
    assert count(store_url, models.compile_events) == len(recorded.events) + 3


def test_one_bad_event_stores_nothing(client, store_url, recorded):
    body = kit.payload(recorded.run, recorded.events)
    body["events"][3]["cause"] = "cosmic_rays"
    r = client.post("/api/v1/events", json=body)
    assert r.status_code == 422
    assert "events.3.cause" in r.json()["message"]
    assert "nothing stored" in r.json()["message"]
    assert r.json()["detail"][0]["loc"] == ["body", "events", 3, "cause"]

    body = kit.payload(recorded.run, recorded.events)
    body["events"][1]["kind"] = "link"
    body["events"][2]["function"]["qualname"] = "q" * 600
    body["events"][4]["timestamp"] = "yesterday"
    message = client.post("/api/v1/events", json=body).json()["message"]
    for field in ("events.1.kind", "events.2.function.qualname", "events.4.timestamp"):
        assert field in message

    # Valid on its own, but of another run than the batch: refused by the route.
    body = kit.payload(recorded.run, recorded.events)
    body["events"][-1]["run_id"] = "f" * 32
    r = client.post("/api/v1/events", json=body)
    assert r.status_code == 422
    assert f"events.{len(recorded.events) - 1}.run_id" in r.json()["message"]

    for table in (models.compile_events, models.runs, models.functions, models.call_stats):
        assert count(store_url, table) == 0
    assert client.get("/api/v1/summary").json()["events"] == 0


def test_store_failure_mid_batch_rolls_back(client, store_url, recorded):
    # The ingest transaction: the run and function rows go in, then the events insert
    # fails (an event names a function the batch does not carry): nothing stays.
    rows = writes.table_rows(kit.batch(recorded.run, recorded.events[:2]))
    events = rows.events
    at = models.EVENT_COLUMNS.index("function_hash")
    events[1] = events[1][:at] + ("0" * 20,) + events[1][at + 1 :]
    with pytest.raises(enginemod.StoreError):
        with enginemod.connection(store_url, ensure=False) as conn:
            writes.write_rows(conn, rows)
    assert count(store_url, models.runs) == 0
    assert count(store_url, models.compile_events) == 0


def test_text_with_nul_is_stored(client, store_url, recorded):
    # PostgreSQL text cannot hold NUL: the service replaces it rather than refuse the batch.
    body = kit.payload(recorded.run, recorded.events[:1])
    body["events"][0]["error"] = "ValueError: bad\x00byte"
    assert client.post("/api/v1/events", json=body).status_code == 200
    with enginemod.connection(store_url) as conn:
        stored = conn.execute(sa.select(models.compile_events.c.error)).scalar_one()
    assert stored == "ValueError: bad\ufffdbyte"


def test_limits(store_url, recorded):
    with make_client(store_url, max_body_bytes=4096, max_batch_events=5) as client:
        body = kit.payload(recorded.run, recorded.events)
        r = client.post("/api/v1/events", json=body)
        assert r.status_code == 413
        assert "4096 bytes" in r.json()["detail"]

        # Without a Content-Length (chunked), the limit holds while reading.
        def chunks():
            yield b'{"run": '
            for _ in range(100):
                yield b" " * 100

        r = client.post("/api/v1/events", content=chunks(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413

    with make_client(store_url, max_batch_events=5) as client:
        r = client.post("/api/v1/events", json=kit.payload(recorded.run, recorded.events[:6]))
        assert r.status_code == 422
        assert "events" in r.json()["message"]
        assert "at most 5" in r.json()["message"]
        assert client.post("/api/v1/events", json=kit.payload(recorded.run, recorded.events[:5])).status_code == 200

        assert client.get("/api/v1/functions", params={"limit": 5000}).status_code == 422
        assert client.get("/api/v1/functions", params={"limit": 0}).status_code == 422
        r = client.post("/api/v1/events", content=b"{not json", headers={"Content-Type": "application/json"})
        assert r.status_code == 422


def test_tokens(store_url, recorded):
    with make_client(store_url, write_token=TOKEN, read_token=READ_TOKEN) as client:
        body = kit.payload(recorded.run, recorded.events)
        assert client.post("/api/v1/events", json=body).status_code == 401
        r = client.post("/api/v1/events", json=body, headers=auth("wrong-token-0123456789abcdef"))
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == "Bearer"
        assert TOKEN not in r.text
        # The write token is checked before the body: no hints about the schema for strangers.
        assert client.post("/api/v1/events", json={"x": 1}).status_code == 401
        assert client.post("/api/v1/events", json=body, headers=auth(READ_TOKEN)).status_code == 401
        assert client.post("/api/v1/events", json=body, headers=auth(TOKEN)).status_code == 200

        for path in ("/api/v1/functions", "/api/v1/runs", "/api/v1/storms", "/api/v1/summary", "/metrics"):
            assert client.get(path).status_code == 401, path
            assert client.get(path, headers=auth(TOKEN)).status_code == 401, path
            assert client.get(path, headers=auth(READ_TOKEN)).status_code == 200, path
        assert client.get("/healthz").status_code == 200


def test_unsafe_settings_are_refused(sqlite_url, monkeypatch):
    store_url = sqlite_url
    with pytest.raises(SettingsError) as info:
        load(store=store_url, write_token="short-secret")
    assert "CACHEWATCH_WRITE_TOKEN" in str(info.value)
    assert "16 characters" in str(info.value)
    assert "short-secret" not in str(info.value)
    monkeypatch.setenv("CACHEWATCH_READ_TOKEN", "has spaces in it, sixteen+")
    monkeypatch.setenv("CACHEWATCH_METRICS_TOP_N", "0")
    with pytest.raises(SettingsError) as info:
        load(store=store_url)
    assert "CACHEWATCH_READ_TOKEN" in str(info.value)
    assert "CACHEWATCH_METRICS_TOP_N" in str(info.value)
    monkeypatch.delenv("CACHEWATCH_READ_TOKEN")
    monkeypatch.delenv("CACHEWATCH_METRICS_TOP_N")
    with pytest.raises(SettingsError, match="unsupported store URL"):
        load(store="mysql://db/x")
    # Empty means unset (what docker-compose passes for an unset variable).
    monkeypatch.setenv("CACHEWATCH_WRITE_TOKEN", "")
    assert load(store=store_url).write_token is None
    # The library's default store is the service's default store.
    monkeypatch.delenv("CACHEWATCH_STORE", raising=False)
    from cachewatch.core import config

    assert load().store == config.default_store_url()


def _seed_two_runs(client, recorded, base: float):
    """Run A at base (all events), run B one hour later (the step events only)."""
    run_a = kit.new_run(recorded.run, started_at=base, name="a")
    run_b = kit.new_run(recorded.run, started_at=base + 3600, name="b")
    events_a = [kit.copy_event(e, run_a, base + i) for i, e in enumerate(recorded.events)]
    events_b = [kit.copy_event(e, run_b, base + 3600 + i) for i, e in enumerate(recorded.by_name("step"))]
    for run, events in ((run_a, events_a), (run_b, events_b)):
        assert client.post("/api/v1/events", json=kit.payload(run, events)).status_code == 200
    return run_a, run_b


def test_filters_and_cursors(client, recorded):
    base = 1_800_000_000.0
    run_a, run_b = _seed_two_runs(client, recorded, base)
    step = recorded.function("step").function_hash

    def step_compiles(**params):
        rows = client.get("/api/v1/functions", params=params).json()["items"]
        return {r["name"]: r["compiles"] for r in rows}.get("step")

    assert step_compiles() == 16
    assert step_compiles(run_id=run_a.run_id) == 8
    assert step_compiles(run_id=run_b.run_id) == 8
    assert step_compiles(since=base + 3600) == 8
    iso = dt.datetime.fromtimestamp(base + 3600, tz=dt.UTC).isoformat().replace("+00:00", "Z")
    assert step_compiles(since=iso) == 8
    assert step_compiles(until=iso) == 8
    assert step_compiles(since=base + 3600, run_id=run_a.run_id) is None
    r = client.get("/api/v1/functions", params={"since": "last tuesday"})
    assert r.status_code == 422
    assert "since" in r.json()["message"]

    # Function listing: pages of one, in the same order as one page.
    everything = client.get("/api/v1/functions").json()["items"]
    seen, cursor = [], None
    while True:
        page = client.get("/api/v1/functions", params={"limit": 1, **({"cursor": cursor} if cursor else {})}).json()
        seen += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [r["function_hash"] for r in seen] == [r["function_hash"] for r in everything]
    assert client.get("/api/v1/functions", params={"q": "SCAL"}).json()["items"][0]["name"] == "scale"

    # Events: pages of 3 walk all 16 once, oldest first.
    ids, times, cursor = [], [], None
    while True:
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = client.get(f"/api/v1/functions/{step}/events", params=params).json()
        assert len(page["items"]) <= 3
        ids += [e["event_id"] for e in page["items"]]
        times += [e["timestamp"] for e in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(ids) == len(set(ids)) == 16
    assert times == sorted(times)
    only_b = client.get(f"/api/v1/functions/{step}/events", params={"run_id": run_b.run_id}).json()["items"]
    assert {e["run_id"] for e in only_b} == {run_b.run_id}
    assert len(only_b) == 8
    bad = client.get(f"/api/v1/functions/{step}/events", params={"cursor": "bm90LWEtY3Vyc29y"})
    assert bad.status_code == 422
    assert "cursor" in bad.json()["message"]
    functions_cursor = client.get("/api/v1/functions", params={"limit": 1}).json()["next_cursor"]
    assert client.get(f"/api/v1/functions/{step}/events", params={"cursor": functions_cursor}).status_code == 422

    # Runs: newest first, filtered on their start time, paged.
    runs = client.get("/api/v1/runs").json()["items"]
    assert [r["run_id"] for r in runs] == [run_b.run_id, run_a.run_id]
    assert runs[0]["events"] == 8
    assert runs[1]["events"] == len(recorded.events)
    page = client.get("/api/v1/runs", params={"limit": 1}).json()
    assert [r["run_id"] for r in page["items"]] == [run_b.run_id]
    page = client.get("/api/v1/runs", params={"limit": 1, "cursor": page["next_cursor"]}).json()
    assert [r["run_id"] for r in page["items"]] == [run_a.run_id]
    assert page["next_cursor"] is None
    assert [r["run_id"] for r in client.get("/api/v1/runs", params={"until": base + 1}).json()["items"]] == [
        run_a.run_id
    ]

    summary = client.get("/api/v1/summary", params={"run_id": run_b.run_id}).json()
    assert (summary["events"], summary["functions"], summary["runs"]) == (8, 1, 1)


def test_a_cursor_of_the_listing_with_another_position_is_refused(client, recorded):
    # Each listing's cursor carries one shape of position: an offset, or a (time, tie) pair.
    _seed_two_runs(client, recorded, 1_800_000_000.0)
    step = recorded.function("step").function_hash
    wrong = {
        "/api/v1/functions": ("functions", -1),
        "/api/v1/storms": ("storms", "3"),
        "/api/v1/cache": ("cache", [3]),
        f"/api/v1/functions/{step}/events": ("events", [1.0, "an id"]),
        "/api/v1/runs": ("runs", [1.0, 2]),
    }
    for path, (kind, position) in wrong.items():
        r = client.get(path, params={"cursor": encode_cursor(kind, position)})
        assert r.status_code == 422, path
        assert "cursor" in r.json()["message"], path


def test_storms(client, store_url, recorded):
    now = time.time()
    old = now - 86_400
    run_old = kit.new_run(recorded.run, started_at=old)
    run_new = kit.new_run(recorded.run, started_at=now - 60)
    step_events = recorded.by_name("step")
    lambda_events = recorded.by_name("<lambda>")
    # Yesterday: step recompiled 7 times in 7 seconds. Now: 6 new lambdas in the loop.
    old_events = [kit.copy_event(e, run_old, old + i) for i, e in enumerate(step_events)]
    new_events = [
        kit.copy_event(
            lambda_events[min(i, 2)], run_new, now - 30 + i, cause=Cause.FIRST_CALL if i == 0 else "new_function_object"
        )
        for i in range(7)
    ]
    for run, events in ((run_old, old_events), (run_new, new_events)):
        assert client.post("/api/v1/events", json=kit.payload(run, events)).status_code == 200

    page = client.get("/api/v1/storms").json()
    assert (page["threshold"], page["window"]) == (5, 600.0)
    storms = page["items"]
    assert [(s["name"], s["dominant_cause"], s["active"], s["compiles"]) for s in storms] == [
        ("<lambda>", "new_function_object", True, 6),
        ("step", "new_shape", False, 7),
    ]
    assert "outside the loop" in storms[0]["fix"]
    assert storms[1]["run_ids"] == [run_old.run_id]
    # The API's storm is the command line's JSON, field for field (priced fix included).
    with enginemod.connection(store_url) as conn:
        told = {s.name: s.as_json() for s in diagnosis.detect_storms(conn, threshold=5, window=600.0, now=now)}
    assert "priced_fix" in told["step"]  # a new-shape storm of a jit is priced
    for item in storms:
        assert {key: item[key] for key in told[item["name"]]} == told[item["name"]]
    assert [s["name"] for s in client.get("/api/v1/storms", params={"active": True}).json()["items"]] == ["<lambda>"]
    assert [s["name"] for s in client.get("/api/v1/storms", params={"active": False}).json()["items"]] == ["step"]
    assert [s["name"] for s in client.get("/api/v1/storms", params={"until": now - 3600}).json()["items"]] == ["step"]
    step_hash = step_events[0].function.function_hash
    only = client.get("/api/v1/storms", params={"function_hash": step_hash}).json()["items"]
    assert [s["name"] for s in only] == ["step"]
    first = client.get("/api/v1/storms", params={"limit": 1}).json()
    second = client.get("/api/v1/storms", params={"limit": 1, "cursor": first["next_cursor"]}).json()
    assert [s["name"] for s in first["items"] + second["items"]] == ["<lambda>", "step"]
    assert second["next_cursor"] is None
    assert client.get("/api/v1/summary").json()["active_storms"] == 1


def test_unknown_function_is_404(client):
    assert client.get("/api/v1/functions/doesnotexist").status_code == 404
    assert client.get("/api/v1/functions/doesnotexist/events").status_code == 404


def test_function_without_events_in_filter(client, recorded):
    client.post("/api/v1/events", json=kit.payload(recorded.run, recorded.events))
    step = recorded.function("step").function_hash
    row = client.get(f"/api/v1/functions/{step}", params={"since": time.time() + 3600}).json()
    assert row["compiles"] == 0
    assert row["storms"] == []
    assert row["name"] == "step"


def test_empty_store_is_migrated_at_startup(store_url):
    assert enginemod.current_revision(store_url) is None
    with make_client(store_url) as client:
        assert client.get("/healthz").json() == {"status": "ok", "store": "ok"}
        assert client.get("/api/v1/functions").json() == {"items": [], "next_cursor": None}
    assert enginemod.current_revision(store_url) == enginemod.head_revision()


def test_outdated_schema_is_refused(store_url):
    enginemod.upgrade(store_url)
    with enginemod.get_engine(store_url).begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0000_older'"))
    enginemod._verified.clear()
    with pytest.raises(enginemod.SchemaOutdated) as info:
        with make_client(store_url):
            pass
    assert "cachewatch db upgrade --store" in str(info.value)
    assert "0000_older" in str(info.value)


def test_healthz_reports_an_unreachable_store(tmp_path):
    # No lifespan (no `with`): the app is up, its store is not.
    client = TestClient(create_app(ServerSettings(store="postgresql://nobody@127.0.0.1:1/none")))
    r = client.get("/healthz")
    assert r.status_code == 503
    assert r.json()["status"] == "error"
    assert "unreachable" in r.json()["store"]
    r = client.get("/api/v1/functions")
    assert r.status_code == 503
    assert r.headers["retry-after"] == "5"


def test_openapi_documents_the_api(client):
    spec = client.get("/openapi.json").json()
    for path in (
        "/api/v1/events",
        "/api/v1/functions",
        "/api/v1/functions/{function_hash}",
        "/api/v1/functions/{function_hash}/events",
        "/api/v1/runs",
        "/api/v1/storms",
        "/api/v1/summary",
        "/metrics",
        "/healthz",
    ):
        assert path in spec["paths"], path
    schemas = spec["components"]["schemas"]
    assert set(schemas["EventIn"]["properties"]["cause"]["enum"]) == set(recorder_causes())
    assert "next_cursor" in schemas["EventPage"]["properties"]


def recorder_causes():
    from cachewatch.core.events import CAUSES

    return CAUSES


def test_a_run_row_says_what_was_lost_by_reason_and_what_its_jax_lacked(client, recorded):
    import dataclasses

    run = dataclasses.replace(kit.new_run(recorded.run), capabilities_off=("trace_context",))
    events = [kit.copy_event(e, run, time.time()) for e in recorded.events[:2]]
    body = kit.payload(run, events, dropped_by={"queue_full": 3, "spool_full": 1})
    assert client.post("/api/v1/events", json=body).status_code == 200
    later = kit.payload(run, [], dropped=2)  # a client that reports a total only
    assert client.post("/api/v1/events", json=later).status_code == 200
    (row,) = [r for r in client.get("/api/v1/runs").json()["items"] if r["run_id"] == run.run_id]
    assert row["dropped"] == {"queue_full": 3, "spool_full": 1, "unreported": 2}
    assert row["capabilities_off"] == ["trace_context"]
    page = client.get("/runs").text
    assert "3 queue full" in page
    assert "trace_context" in page


def test_the_health_page_lists_every_capability_of_the_jax_seam(client, recorded):
    import dataclasses

    from cachewatch.core import jaxcompat

    run = dataclasses.replace(kit.new_run(recorded.run), capabilities_off=("cache_key_log",))
    body = kit.payload(run, [kit.copy_event(recorded.events[0], run, time.time())])
    assert client.post("/api/v1/events", json=body).status_code == 200
    page = client.get("/health").text
    for status in jaxcompat.status():
        assert f'data-capability="{status.name}"' in page
    assert f'data-run-id="{run.run_id}"' in page
    assert "cache_key_log" in page
    metrics = client.get("/metrics").text
    assert 'cachewatch_capability{name="trace_context"} 1.0' in metrics


def test_a_functions_detail_lists_its_newest_storms_and_counts_them_all(client, recorded, monkeypatch):
    # step storms in three runs a day apart: seven recompiles in seven seconds each time.
    now = time.time()
    step_events = recorded.by_name("step")
    step_hash = step_events[0].function.function_hash
    for days in (3, 2, 1):
        started = now - days * 86_400
        run = kit.new_run(recorded.run, started_at=started)
        events = [kit.copy_event(e, run, started + i) for i, e in enumerate(step_events)]
        assert client.post("/api/v1/events", json=kit.payload(run, events)).status_code == 200
    path = f"/api/v1/functions/{step_hash}"
    every = client.get(path).json()
    assert every["storms_total"] == 3
    assert len(every["storms"]) == 3
    starts = [s["start"] for s in every["storms"]]
    assert starts == sorted(starts, reverse=True), "newest first"
    two = client.get(path, params={"storms_limit": 2}).json()
    assert two["storms"] == every["storms"][:2]
    assert two["storms_total"] == 3
    none = client.get(path, params={"storms_limit": 0}).json()
    assert none["storms"] == []
    assert none["storms_total"] == 3
    for bad in (-1, 10_001, "many"):
        assert client.get(path, params={"storms_limit": bad}).status_code == 422, bad
    # The page shows the newest few and links to every one of them on the storms page.
    monkeypatch.setattr(compose, "STORMS_SHOWN", 2)
    page = client.get(f"/functions/{step_hash}").text
    assert 'id="storms-more"' in page
    assert f"/storms?function_hash={step_hash}" in page
    assert (
        client.get(f"/functions/{step_hash}", params={"run_id": every["storms"][0]["run_ids"][0]}).text.count(
            'id="storms-more"'
        )
        == 0
    ), "one run's single storm needs no link"
    narrowed = client.get("/storms", params={"function_hash": step_hash}).text
    assert 'id="storms-function"' in narrowed
    assert narrowed.count('class="storm-name"') == 3
    unknown = client.get("/storms", params={"function_hash": "0" * 40})
    assert unknown.status_code == 200
    assert "not in the store" in unknown.text
    assert 'class="storm-name"' not in unknown.text
