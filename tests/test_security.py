"""Every route with no token, a wrong token, and the other role's token: the answer
the README documents. Tokens are compared in constant time and never appear in a
response or a log line; CORS is closed; the service binds to loopback unless told."""

from __future__ import annotations

import logging
import time

import pytest
import serverkit as kit
from cachewatch_server import tokens
from cachewatch_server.dashboard import auth
from cachewatch_server.dashboard.render import PLOTLY_PATH
from cachewatch_server.main import create_app, serve
from cachewatch_server.settings import ServerSettings
from fastapi.testclient import TestClient

from cachewatch import cli

WRITE, READ = "write-token-0123456789abcdef", "read-token-0123456789abcdef"

# The documented access of every route: "public", "read" (read token, or the dashboard's
# session cookie for pages and the API description), "write" (write token), "page" (a
# dashboard page: without the read token it redirects to /login).
ACCESS = {
    ("POST", "/api/v1/events"): "write",
    ("GET", "/api/v1/functions"): "read",
    ("GET", "/api/v1/functions/{function_hash}"): "read",
    ("GET", "/api/v1/functions/{function_hash}/events"): "read",
    ("GET", "/api/v1/runs"): "read",
    ("GET", "/api/v1/runs/compare"): "read",
    ("GET", "/api/v1/storms"): "read",
    ("GET", "/api/v1/findings"): "read",
    ("GET", "/api/v1/runs/{run_id}/trace"): "read",
    ("GET", "/api/v1/summary"): "read",
    ("GET", "/api/v1/diagnosis"): "read",
    ("GET", "/api/v1/jobs"): "read",
    ("GET", "/api/v1/jobs/{job}"): "read",
    ("GET", "/api/v1/events/{event_id}/program"): "read",
    ("GET", "/api/v1/events/{event_id}/diff"): "read",
    ("GET", "/api/v1/functions/{function_hash}/whatif"): "read",
    ("GET", "/api/v1/cache"): "read",
    ("GET", "/metrics"): "read",
    ("GET", "/openapi.json"): "read",
    ("GET", "/docs"): "read",
    ("GET", "/"): "page",
    ("GET", "/functions"): "page",
    ("GET", "/functions/{function_hash}"): "page",
    ("GET", "/runs"): "page",
    ("GET", "/runs/compare"): "page",
    ("GET", "/storms"): "page",
    ("GET", "/jobs"): "page",
    ("GET", "/health"): "page",
    ("GET", "/jobs/{job}"): "page",
    ("GET", "/cache"): "page",
    ("GET", "/programs/{event_id}/flamegraph"): "page",
    ("GET", "/healthz"): "public",
    ("GET", "/login"): "public",
    ("POST", "/login"): "public",
    ("POST", "/logout"): "public",
    ("GET", "/static/{name}"): "public",
    ("GET", PLOTLY_PATH): "public",
}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> kit.Recorded:
    from cachewatch.record import current

    # Every jaxpr printed, so the program route has one to answer with.
    current.configure(store=f"sqlite:///{tmp_path_factory.mktemp('lib') / 'lib.db'}", job="security-walk")
    return kit.run_jax_workload()


def _routes(app) -> set[tuple[str, str]]:
    """(method, path) of every route the app serves, included routers opened up."""
    found = set()
    for route in app.routes:
        contexts = route.effective_route_contexts() if hasattr(route, "effective_route_contexts") else [route]
        for context in contexts:
            for method in getattr(context, "methods", None) or ():
                if method != "HEAD":
                    found.add((method, context.path))
    return found


def _concrete(path: str, function_hash: str, event_id: str = "") -> str:
    if path.endswith("/runs/compare"):  # the store's one run, compared with itself
        return path + "?baseline=security-walk&run=security-walk"
    return (
        path.replace("{function_hash}", function_hash)
        .replace("{event_id}", event_id)
        .replace("{name}", "dashboard.css")
        .replace("{job}", "security-walk")
        .replace("{run_id}", "security-walk")
    )


def test_every_route_answers_as_documented(sqlite_url, recorded, caplog):
    app = create_app(ServerSettings(store=sqlite_url, write_token=WRITE, read_token=READ))
    assert _routes(app) == set(ACCESS), "a route without a documented access rule"
    body = kit.payload(recorded.run, recorded.events)
    function_hash = recorded.events[0].function.function_hash
    # A recompile (its program kept, an earlier compile to diff with): both program routes answer 200.
    event_id = [e for e in recorded.by_name("step") if e.compiled][1].event_id
    caplog.set_level(logging.DEBUG)
    credentials = {
        "none": {},
        "wrong": kit.auth("not-the-token-0123456789"),
        "write": kit.auth(WRITE),
        "read": kit.auth(READ),
    }
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.post("/api/v1/events", json=body, headers=kit.auth(WRITE)).status_code == 200
        for (method, path), access in sorted(ACCESS.items()):
            url = _concrete(path, function_hash, event_id)
            for who, headers in credentials.items():
                if method == "POST" and path == "/api/v1/events":
                    response = client.post(url, json=body, headers=headers)
                elif method == "POST":
                    response = client.post(
                        url, data={"token": "x", "next": "/"}, headers=headers, follow_redirects=False
                    )
                else:
                    response = client.get(url, headers=headers, follow_redirects=False)
                status = response.status_code
                allowed = (
                    access == "public"
                    or (access == "write" and who == "write")
                    or (access in ("read", "page") and who == "read")
                )
                if (method, path) == ("POST", "/login"):
                    assert status == 401
                    assert "Sign in" in response.text
                elif (method, path) in (("POST", "/logout"), ("GET", "/login")):
                    assert status in (200, 303), (method, path, who, status)
                elif allowed:
                    assert status == 200, (method, path, who, status)
                elif access == "page":
                    assert status == 303, (
                        method,
                        path,
                        who,
                        status,
                    )
                    assert response.headers["location"].startswith("/login?next="), (
                        method,
                        path,
                        who,
                        status,
                    )
                else:
                    assert status == 401, (method, path, who, status)
                    assert response.headers["www-authenticate"] == "Bearer"
                    assert "Bearer <token>" in response.json()["detail"]
                for token in (WRITE, READ):
                    assert token not in response.text
                    assert token not in str(response.headers)
                assert "Traceback" not in response.text
    for record in caplog.records:
        message = record.getMessage()
        assert WRITE not in message
        assert READ not in message
        assert "Traceback" not in message


def test_tokens_are_compared_in_constant_time(sqlite_url, monkeypatch):
    compared = []
    real = tokens.hmac.compare_digest

    def spy(a, b):
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(tokens.hmac, "compare_digest", spy)  # the one reading of a token
    app = create_app(ServerSettings(store=sqlite_url, write_token=WRITE, read_token=READ))
    with TestClient(app) as client:
        assert client.get("/api/v1/summary", headers=kit.auth("x" * 27)).status_code == 401
    assert compared
    assert all(isinstance(a, bytes) for a, _ in compared)


def test_the_dashboard_session_expires_on_the_server(sqlite_url):
    app = create_app(ServerSettings(store=sqlite_url, write_token=None, read_token=READ))
    with TestClient(app) as client:
        login = client.post("/login", data={"token": READ, "next": "/runs"}, follow_redirects=False)
        assert login.status_code == 303
        assert client.get("/runs", follow_redirects=False).status_code == 200  # the cookie it set
        client.cookies.clear()
        old = auth.session_value(READ, issued=int(time.time()) - auth.COOKIE_MAX_AGE - 10)
        client.cookies.set(auth.COOKIE, old)
        assert client.get("/runs", follow_redirects=False).status_code == 303
        client.cookies.set(auth.COOKIE, auth.session_value("another-token-0123456789"))
        assert client.get("/runs", follow_redirects=False).status_code == 303
        client.cookies.set(auth.COOKIE, auth.session_value(READ))
        assert client.get("/openapi.json").status_code == 200  # the API description, for /docs


def test_cors_is_closed_by_default(sqlite_url):
    with TestClient(create_app(ServerSettings(store=sqlite_url, write_token=None, read_token=None))) as client:
        preflight = client.options(
            "/api/v1/events", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
        )
        simple = client.get("/api/v1/summary", headers={"Origin": "https://evil.example"})
    for response in (preflight, simple):
        assert "access-control-allow-origin" not in response.headers
    assert preflight.status_code in (405, 404)


def test_the_service_binds_to_loopback_unless_told(capsys):
    import inspect

    assert inspect.signature(serve).parameters["host"].default == "127.0.0.1"
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    assert "default 127.0.0.1" in capsys.readouterr().out


def test_errors_say_nothing_of_the_store_credentials():
    secret = "s3cret-password"
    app = create_app(ServerSettings(store=f"postgresql://user:{secret}@127.0.0.1:1/none"))
    client = TestClient(app, raise_server_exceptions=False)  # no startup: the store is unreachable
    answers = [client.get(p) for p in ("/healthz", "/api/v1/summary", "/", "/metrics")]
    for response in answers:
        assert response.status_code in (200, 503), response.status_code
        assert secret not in response.text
        assert "Traceback" not in response.text
