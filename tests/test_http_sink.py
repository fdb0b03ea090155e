"""The HTTP sink against a real uvicorn on a loopback port: batches arrive once, failures
say whether a retry can help, and a service that is down loses nothing: the recorder
spools, and replays when the service is back."""

from __future__ import annotations

import http.server
import threading
import time

import jax.numpy as jnp
import pytest
import serverkit as kit
import sqlalchemy as sa
from cachewatch_server.main import create_app
from cachewatch_server.settings import ServerSettings
from serverkit import TOKEN

import cachewatch
from cachewatch.core.events import Cause
from cachewatch.record import current, recorder
from cachewatch.store import engine as enginemod
from cachewatch.store import models, spool
from cachewatch.store.http import HttpSink, HttpStoreError, batch_id


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> kit.Recorded:
    current.configure(store=f"sqlite:///{tmp_path_factory.mktemp('lib') / 'lib.db'}")
    return kit.run_jax_workload()


def service(url: str):
    return create_app(ServerSettings(store=url, write_token=TOKEN, read_token=None))


def stored_event_ids(url: str) -> list[str]:
    with enginemod.connection(url) as conn:
        return list(conn.execute(sa.select(models.compile_events.c.event_id)).scalars())


def stats_rows(url: str) -> int:
    with enginemod.connection(url) as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(models.call_stats)).scalar_one()


def test_sink_posts_batches_once(store_url, recorded):
    step = recorded.function("step")
    batch = kit.batch(recorded.run, recorded.events, [kit.stats(recorded.run, step, time.time(), calls=5)])
    with kit.live_server(service(store_url)) as server:
        sink = HttpSink(server.url + "/", token=TOKEN)
        sink.write(batch)
        sink.write(batch)  # the response was lost, say, and the writer retried
        answer = sink.post({**batch.to_wire(), "batch_id": batch_id(batch.to_wire())})
    assert answer["duplicate_events"] == len(recorded.events)
    assert answer["stored_stats"] == 0
    ids = stored_event_ids(store_url)
    assert sorted(ids) == sorted(e.event_id for e in recorded.events)
    assert stats_rows(store_url) == 1


def test_batch_id_is_stable():
    payload = {
        "run": {"run_id": "r"},
        "events": [{"event_id": "a"}, {"event_id": "b"}],
        "stats": [{"function": {"function_hash": "h"}, "timestamp": 1.5}],
    }
    assert batch_id(payload) == batch_id(dict(payload))
    assert batch_id(payload) != batch_id({**payload, "events": [{"event_id": "a"}]})


def test_failures_say_whether_to_retry(sqlite_url, recorded):
    batch = kit.batch(recorded.run, recorded.events)
    with kit.live_server(service(sqlite_url)) as server:
        with pytest.raises(HttpStoreError) as info:
            HttpSink(server.url, token="wrong-token-0123456789abcdef").write(batch)
        assert info.value.status == 401
        assert info.value.retryable is False
        assert "wrong-token" not in str(info.value)
        assert TOKEN not in str(info.value)

        bad = kit.batch(recorded.run, recorded.events)
        payload = bad.to_wire()
        payload["events"][0]["cause"] = "gremlins"
        with pytest.raises(HttpStoreError) as info:
            HttpSink(server.url, token=TOKEN).post(payload)
        assert info.value.status == 422
        assert info.value.retryable is False
        assert "events.0.cause" in str(info.value)
        port = server.port
    # Nobody listens any more: a retry later may work.
    with pytest.raises(HttpStoreError) as info:
        HttpSink(f"http://127.0.0.1:{port}", token=TOKEN, timeout=2).write(batch)
    assert info.value.retryable is True
    assert info.value.status is None
    assert TOKEN not in repr(HttpSink("http://x", token=TOKEN))


class _Canned(http.server.BaseHTTPRequestHandler):
    status = 500
    location = ""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(self.status)
        if self.location:
            self.send_header("Location", self.location)
        self.send_header("Content-Type", "application/json")
        body = b'{"detail": "canned"}'
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize(
    "status,retryable", [(500, True), (503, True), (429, True), (400, False), (413, False), (307, False)]
)
def test_status_codes(status, retryable, recorded):
    handler = type("Handler", (_Canned,), {"status": status, "location": "http://elsewhere.invalid/x"})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(HttpStoreError) as info:
            HttpSink(f"http://127.0.0.1:{httpd.server_address[1]}", token=TOKEN).write(
                kit.batch(recorded.run, recorded.events[:1])
            )
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
    assert info.value.status == status
    assert info.value.retryable is retryable


def test_service_down_then_back_loses_nothing(store_url, tmp_path, use_store):
    port = kit.free_port()
    url = f"http://127.0.0.1:{port}"
    use_store(url, write_token=TOKEN, spool_dir=str(tmp_path / "spool"), sample_every=1)
    cfg = current.config()
    seen: list = []
    recorder.add_listener(seen.append)
    try:

        @cachewatch.jit
        def layer(x):
            return jnp.tanh(x) * 2

        for n in range(1, 6):  # the service is down: these batches go to the spool
            layer(jnp.ones((n,)))
            result = cachewatch.flush(30)
            assert result.done
            assert not result.stored
            assert result.spooled_batches >= 1
        assert spool.has_pending(cfg)
        spooled = len(list(spool._dir(cfg).glob("*.batch.json")))
        assert spooled >= 1
        assert stored_event_ids(store_url) == []

        with kit.live_server(service(store_url), port=port):
            layer(jnp.ones((9,)))  # one more while it is up
            for _ in range(3):
                cachewatch.flush(30)  # the writer replays the spool after a good write
                if not spool.has_pending(cfg):
                    break
            assert not spool.has_pending(cfg)
            assert cachewatch.flush(30)
            ids = stored_event_ids(store_url)
    finally:
        recorder.remove_listener(seen.append)
    assert sorted(ids) == sorted(e.event_id for e in seen), "lost or duplicated events"
    layer_events = sorted((e for e in seen if e.function.name == "layer"), key=lambda e: e.timestamp)
    assert [e.cause for e in layer_events] == [Cause.FIRST_CALL] + [Cause.NEW_SHAPE] * 5
    with enginemod.connection(store_url) as conn:
        calls = conn.execute(sa.select(sa.func.sum(models.call_stats.c.calls))).scalar_one()
    assert calls == 6  # call statistics were spooled and replayed once too
