"""Each compile as an OpenTelemetry span, checked against a real OTLP/HTTP receiver.

Real programs run under ``cachewatch run`` in a subprocess, their spans sent to a small
HTTP server on 127.0.0.1 that keeps every ``POST /v1/traces`` body, decoded with the
protocol's own types (``opentelemetry-proto``). The spans are compared with what the
store recorded: one per compile, with the same event ids, functions and figures, its
phases as children, and the program's own span as its parent where the program held
one open. Off, nothing of OpenTelemetry is imported; an unreachable collector or a
missing SDK is one warning, and the program's output is the same.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from scenarios import run_program_file

from cachewatch.core import config as configmod
from cachewatch.exports import otel
from cachewatch.exports.trace_reads import CompileRow, read_run
from cachewatch.store import engine as enginemod

PHASES = ("trace", "lower", "XLA compile", "persistent cache read")


@dataclass(frozen=True)
class Received:
    """One span as the collector got it, with its resource's service.name."""

    service: str
    span: Span

    @property
    def attributes(self) -> dict[str, object]:
        return {a.key: _value(a.value) for a in self.span.attributes}


def _value(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


class Receiver:
    """An OTLP/HTTP collector: keeps the bodies POSTed to /v1/traces, answers 200."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.paths: list[str] = []
        self.content_types: list[str] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.paths.append(self.path)
                receiver.content_types.append(self.headers.get("Content-Type", ""))
                receiver.bodies.append(body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def spans(self) -> list[Received]:
        found = []
        for body in self.bodies:
            request = ExportTraceServiceRequest.FromString(body)
            for resource_spans in request.resource_spans:
                names = [a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"]
                for scope_spans in resource_spans.scope_spans:
                    found += [Received(names[0] if names else "", span) for span in scope_spans.spans]
        return found

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    collector = Receiver()
    try:
        yield collector
    finally:
        collector.close()


def closed_port() -> int:
    """A port on 127.0.0.1 nobody listens on (taken, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# The user's program: its own tracer provider (service "trainer") sending to the same
# collector, and a span "epoch" held open around a recompile of step and smooth's first.
TRAINER = """
import functools, os
import jax.numpy as jnp
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import cachewatch

provider = TracerProvider(resource=Resource.create({"service.name": "trainer"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=os.environ["TRAINER_TRACES"])))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("trainer")


@cachewatch.jit
def step(x, lr):
    return (x * lr).sum()


@functools.partial(cachewatch.jit, static_argnames="n")
def smooth(x, n):
    for _ in range(n):
        x = 0.5 * (x + jnp.roll(x, 1))
    return x


xs = {size: jnp.ones(size) for size in (4, 8, 16)}
for size in (4, 8):
    print(float(step(xs[size], 0.5)))
with tracer.start_as_current_span("epoch"):
    print(float(step(xs[16], 0.5)))
    print(float(smooth(xs[4], n=2).sum()))
print(float(step(xs[4], 0.5)))
"""

# A program with no OpenTelemetry of its own; it writes which opentelemetry modules were
# loaded to the file MODULES_FILE names. HIDE_OTEL makes the SDK look missing.
PLAIN = """
import json, os, sys

if os.environ.get("HIDE_OTEL"):
    sys.modules["opentelemetry"] = None  # as if the SDK were not installed

import jax.numpy as jnp

import cachewatch


@cachewatch.jit
def double_sum(x):
    return (x * 2).sum()


for n in (2, 3, 4, 3):
    print(n, float(double_sum(jnp.arange(n, dtype=jnp.float32))))
with open(os.environ["MODULES_FILE"], "w") as out:
    json.dump(sorted(m for m, module in sys.modules.items() if m.startswith("opentelemetry") and module), out)
"""


def no_otel_settings(patch: pytest.MonkeyPatch) -> None:
    """The programs see only the settings a test gives them (run_program_file passes ours on)."""
    for name in [n for n in os.environ if n.startswith("OTEL_") or n == otel.SETTING]:
        patch.delenv(name)


@pytest.fixture(autouse=True)
def _no_otel_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    no_otel_settings(monkeypatch)


def run(folder: Path, source: str, env: dict[str, str]) -> tuple[str, str, str]:
    """Run ``source`` under ``cachewatch run`` into a fresh store: stdout, stderr, store URL."""
    folder.mkdir(parents=True)
    program = folder / "program.py"
    program.write_text(textwrap.dedent(source))
    store = f"sqlite:///{folder}/store.db"
    done = run_program_file(str(program), store, {"CACHEWATCH_EXIT_TIMEOUT": "60", **env})
    return done.stdout, done.stderr, store


def spanned_rows(store: str, run_id: str) -> dict[str, CompileRow]:
    """The store's compiles of the run that are spans (those a Perfetto trace shows), by event id."""
    with enginemod.connection(store, ensure=False) as conn:
        rows = read_run(conn, run_id).compiles
    return {r.event_id: r for r in rows if r.compiled or (not r.nested and r.trace_seconds is not None)}


def compile_spans(received: list[Received]) -> list[Received]:
    return [r for r in received if "cachewatch.cause" in r.attributes]


def check_against_store(received: list[Received], store: str) -> dict[str, Received]:
    """Every span of a compile is one of the store's, each once; their phases are their
    children, in order and end to end; their attributes are the store's figures."""
    compiles = compile_spans(received)
    run_ids = {c.attributes["cachewatch.run_id"] for c in compiles}
    assert len(run_ids) == 1
    rows = spanned_rows(store, str(run_ids.pop()))
    by_event = {str(c.attributes["cachewatch.event_id"]): c for c in compiles}
    assert len(by_event) == len(compiles)  # one span per compile
    assert set(by_event) == set(rows)
    assert sum(1 for r in rows.values() if r.compiled) == sum(
        1 for c in compiles if c.attributes["cachewatch.compiled"]
    )
    children: dict[bytes, list[Span]] = {}
    for r in received:
        children.setdefault(r.span.parent_span_id, []).append(r.span)
    for event_id, got in by_event.items():
        row, span, attrs = rows[event_id], got.span, got.attributes
        assert span.name == (row.qualname or row.name).rsplit("<locals>.", 1)[-1]
        assert attrs["cachewatch.function"] == (row.qualname or row.name)
        assert attrs["cachewatch.function_hash"] == row.function_hash
        assert attrs["cachewatch.module"] == row.module
        assert attrs["cachewatch.cause"] == row.cause
        assert attrs["cachewatch.kind"] == row.kind
        assert attrs["cachewatch.signature_hash"] == row.signature_hash
        assert attrs.get("cachewatch.compile_seconds") == row.compile_seconds
        assert attrs.get("cachewatch.trace_seconds") == row.trace_seconds
        assert attrs.get("cachewatch.flops") == row.flops
        assert attrs.get("cachewatch.persistent_cache") == row.persistent_cache
        assert attrs.get("cachewatch.call_site") == row.call_site
        assert attrs.get("thread.name") == row.thread
        assert abs(span.start_time_unix_nano / 1e9 - row.timestamp) < 1e-3
        phases = sorted(children.get(span.span_id, []), key=lambda s: s.start_time_unix_nano)
        expected = ["trace", "lower", "persistent cache read" if row.persistent_cache == "hit" else "XLA compile"]
        seconds = [row.trace_seconds, row.lower_seconds, row.compile_seconds]
        assert [p.name for p in phases] == [n for n, s in zip(expected, seconds, strict=True) if s is not None]
        assert all(p.trace_id == span.trace_id for p in phases)
        assert [p.start_time_unix_nano for p in phases] == [span.start_time_unix_nano] + [
            p.end_time_unix_nano for p in phases[:-1]
        ]
        assert phases[-1].end_time_unix_nano == span.end_time_unix_nano
        assert [p.end_time_unix_nano - p.start_time_unix_nano for p in phases] == [
            round(s * 1e9) for s in seconds if s is not None
        ]
    return by_event


@pytest.mark.parametrize(
    ("setting", "service"),
    [
        pytest.param(otel.SETTING, "cachewatch", id="cachewatch-provider"),
        pytest.param("OTEL_EXPORTER_OTLP_ENDPOINT", "trainer", id="the-programs-provider"),
    ],
)
def test_every_compile_is_a_span_with_its_phases_under_the_programs_span(
    tmp_path: Path, receiver: Receiver, setting: str, service: str
) -> None:
    """With cachewatch's setting, its own provider (service ``cachewatch``); with the
    standard variable and a provider the program set, the program's (service ``trainer``)."""
    env = {setting: receiver.url, "TRAINER_TRACES": receiver.url + "/v1/traces"}
    stdout, stderr, store = run(tmp_path / "trainer", TRAINER, env)
    assert stdout.split() == ["2.0", "4.0", "8.0", "4.0", "2.0"]
    assert "cachewatch: compile spans" not in stderr
    assert set(receiver.paths) == {"/v1/traces"}
    assert set(receiver.content_types) == {"application/x-protobuf"}
    received = receiver.spans()
    compiles = check_against_store(received, store)
    (epoch,) = [r.span for r in received if r.span.name == "epoch"]
    assert {r.service for r in received if r.span.name == "epoch"} == {"trainer"}
    assert {c.service for c in compiles.values()} == {service}
    # The program's span is the parent of what compiled inside it, and of nothing else.
    steps = sorted((c for c in compiles.values() if c.span.name == "step"), key=lambda c: c.span.start_time_unix_nano)
    assert [c.attributes["cachewatch.cause"] for c in steps] == ["first_call", "new_shape", "new_shape"]
    (smooth,) = [c for c in compiles.values() if c.span.name == "smooth"]
    for inside in (steps[2], smooth):
        assert inside.span.parent_span_id == epoch.span_id
        assert inside.span.trace_id == epoch.trace_id
    for outside in steps[:2]:
        assert outside.span.parent_span_id == b""
    assert {c.span.parent_span_id for c in compiles.values()} <= {b"", epoch.span_id}
    # What is known of a compile of the program's own jit.
    attrs = steps[2].attributes
    assert attrs["cachewatch.function"] == "step"
    assert attrs["cachewatch.module"] == "__main__"
    assert attrs["cachewatch.backend"] == "cpu"
    assert attrs["cachewatch.device"]
    line = TRAINER.splitlines().index("    print(float(step(xs[16], 0.5)))") + 1
    assert str(attrs["cachewatch.call_site"]).endswith(f"program.py:{line}")
    assert attrs["cachewatch.compiled"] is True
    assert attrs["cachewatch.persistent_cache"]  # as the store has it (checked above)
    assert float(str(attrs["cachewatch.compile_seconds"])) > 0
    assert float(str(attrs["cachewatch.flops"])) > 0
    assert "cachewatch.error" not in attrs  # unknown values are left out


@pytest.fixture(scope="module")
def off(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The plain program's output with spans off; off, it loads nothing of OpenTelemetry."""
    folder = tmp_path_factory.mktemp("off")
    with pytest.MonkeyPatch.context() as patch:
        no_otel_settings(patch)
        out, err, _ = run(folder / "run", PLAIN, {"MODULES_FILE": str(folder / "modules.json")})
    assert json.loads((folder / "modules.json").read_text()) == []
    assert "span" not in err
    return out


def test_off_nothing_of_opentelemetry_is_imported(off: str) -> None:
    assert off.split()[:2] == ["2", "2.0"]  # the program ran (the fixture checked its imports)


def test_an_unreachable_collector_is_one_warning_and_changes_nothing(tmp_path: Path, off: str) -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    modules = tmp_path / "modules.json"
    out, err, _ = run(tmp_path / "run", PLAIN, {"MODULES_FILE": str(modules), "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
    assert out == off
    warnings = [line for line in err.splitlines() if "compile spans cannot be sent" in line]
    assert len(warnings) == 1
    assert f"{endpoint}/v1/traces" in warnings[0]
    assert "Connection refused" in warnings[0] or "Failed to establish" in warnings[0]
    for noise in ("Traceback", "Transient error", "Failed to export", "Exception while exporting"):
        assert noise not in err
    assert "opentelemetry.sdk" in json.loads(modules.read_text())


def test_a_missing_sdk_is_one_warning_and_changes_nothing(tmp_path: Path, off: str) -> None:
    modules = tmp_path / "modules.json"
    env = {"MODULES_FILE": str(modules), "HIDE_OTEL": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    out, err, _ = run(tmp_path / "run", PLAIN, env)
    assert out == off
    warnings = [line for line in err.splitlines() if "not installed" in line]
    assert len(warnings) == 1
    assert "OTEL_EXPORTER_OTLP_ENDPOINT names an OpenTelemetry collector" in warnings[0]
    assert "pip install 'cachewatch[otel]'" in warnings[0]
    assert "Traceback" not in err


def resolved(settings: dict[str, str], environ: dict[str, str]) -> otel.Target | None:
    return otel.target(configmod.resolve(settings, environ=environ), environ=environ)


def test_which_setting_names_the_collector() -> None:
    base = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://base:4318/"}
    assert resolved({}, {}) is None
    assert resolved({}, base) == otel.Target("http://base:4318/v1/traces", "OTEL_EXPORTER_OTLP_ENDPOINT", own=False)
    traces = {**base, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4318/custom"}
    assert resolved({}, traces) == otel.Target(
        "http://traces:4318/custom", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", own=False
    )
    own = otel.Target("http://mine:4318/v1/traces", otel.SETTING, own=True)
    assert resolved({"otel_endpoint": "http://mine:4318"}, traces) == own
    assert resolved({}, {**traces, otel.SETTING: "http://mine:4318/v1/traces"}) == own
    assert resolved({"otel_endpoint": "off"}, traces) is None
    assert resolved({}, {**base, "OTEL_SDK_DISABLED": "true"}) is None


def test_a_compile_becomes_a_span_only_when_it_compiled_or_traced_on_its_own() -> None:
    from cachewatch.core.events import CompileEvent, FunctionInfo

    def event(**changes: object) -> CompileEvent:
        info = FunctionInfo("h", "f", "f", "m", "m.py", 1)
        fields: dict = dict(
            event_id="e",
            function=info,
            run_id="r",
            timestamp=0.0,
            kind="trace",
            cause="first_call",
            explanation="",
            diff=(),
            signature=(),
            signature_hash="s",
            compiled=False,
            nested=False,
        )
        return CompileEvent(**{**fields, **changes})

    assert otel.spanned(event(compiled=True))
    assert otel.spanned(event(trace_seconds=0.1))
    assert not otel.spanned(event(trace_seconds=0.1, nested=True))
    assert not otel.spanned(event(kind="stale_capture", compiled=True))
