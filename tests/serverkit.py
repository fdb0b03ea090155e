"""Helpers for the service tests: real compile events from real JAX code, batches built
from them, a uvicorn server on a loopback port, and a parser for /metrics."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

import cachewatch
from cachewatch.core.events import CallStats, CompileEvent, FunctionInfo, RunInfo
from cachewatch.explain import causes
from cachewatch.record import current, recorder
from cachewatch.record.recorder import Batch

TOKEN = "test-token-0123456789abcdef"
READ_TOKEN = "read-token-0123456789abcdef"


@dataclasses.dataclass
class Recorded:
    """What one real run of JAX code produced."""

    run: RunInfo
    events: list[CompileEvent]

    def by_name(self, name: str) -> list[CompileEvent]:
        return [e for e in self.events if e.function.name == name]

    def function(self, name: str) -> FunctionInfo:
        return self.by_name(name)[0].function


def run_jax_workload() -> Recorded:
    """Trace and compile real functions, capturing every event the library records.

    ``step`` sees 8 batch shapes (a storm of new_shape), a lambda is jitted anew
    3 times (new_function_object), ``scale`` gets 2 static values.
    """
    recorder.flush(10)
    causes.reset()
    current._new_run()
    seen: list[CompileEvent] = []
    recorder.add_listener(seen.append)
    try:

        @cachewatch.jit
        def step(x):
            return (x * 2.0).sum()

        for n in range(1, 9):
            step(jnp.ones((n, 3)))
        for _ in range(3):
            cachewatch.jit(lambda x: x + 1)(jnp.ones(3))

        @cachewatch.jit(static_argnames="k")
        def scale(x, k):
            return x * k

        scale(jnp.ones(2), k=2)
        scale(jnp.ones(2), k=3)
        recorder.flush(10)
    finally:
        recorder.remove_listener(seen.append)
    # Only the functions above: eager jnp calls add op-by-op compiles of their own.
    mine = [e for e in seen if e.function.qualname.startswith("run_jax_workload.<locals>.")]
    return Recorded(run=current.run_info(), events=mine)


def new_run(run: RunInfo, started_at: float | None = None, name: str = "") -> RunInfo:
    return dataclasses.replace(
        run, run_id=uuid.uuid4().hex, started_at=started_at or time.time(), run_name=name or run.run_name
    )


def copy_event(event: CompileEvent, run: RunInfo, timestamp: float, **changes: Any) -> CompileEvent:
    """The same real event, as if a later run recorded it at ``timestamp``."""
    return dataclasses.replace(event, event_id=uuid.uuid4().hex, run_id=run.run_id, timestamp=timestamp, **changes)


def stats(
    run: RunInfo, function: FunctionInfo, timestamp: float, calls: int, sampled: int = 0, seconds: float = 0.0
) -> CallStats:
    return CallStats(
        run_id=run.run_id,
        function=function,
        timestamp=timestamp,
        calls=calls,
        sampled_calls=sampled,
        sampled_seconds=seconds,
    )


def batch(run: RunInfo, events: list[CompileEvent], call_stats: Sequence[CallStats] = ()) -> Batch:
    return Batch(run=run, events=list(events), stats=list(call_stats))


def payload(run: RunInfo, events: list[CompileEvent], call_stats: Sequence[CallStats] = (), **extra) -> dict:
    """The JSON body of POST /api/v1/events: what the HTTP sink sends."""
    return {**batch(run, events, call_stats).to_wire(), **extra}


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serve_process(
    store: str, workdir: Path, env: dict[str, str], timeout: float = 90.0, workers: int = 1, log_name: str = "serve.log"
) -> Iterator[str]:
    """`python -m cachewatch serve` on a free loopback port, as a user runs it; yields its URL.

    Waits for /healthz to answer ok, and stops (and waits for) the process at the end;
    its output is in ``workdir / "serve.log"``.
    """
    port = free_port()
    log_path = workdir / log_name
    log = open(log_path, "w")  # noqa: SIM115  (the server writes it; closed when it stops)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cachewatch", "serve", "--store", store, "--port", str(port), "--workers", str(workers)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=workdir,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"cachewatch serve exited: {log_path.read_text()}")
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=2) as response:
                    if json.loads(response.read())["status"] == "ok":
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"cachewatch serve did not come up: {log_path.read_text()}")
            time.sleep(0.2)
        yield url
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


class LiveServer:
    """uvicorn serving an app on a loopback port, in a thread; start and stop at will."""

    def __init__(self, app, port: int | None = None):
        self.app = app
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 30.0) -> LiveServer:
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="test-uvicorn", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start on port {self.port}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(15)
            assert not self._thread.is_alive(), "uvicorn did not stop"
        self._server = self._thread = None


@contextlib.contextmanager
def live_server(app, port: int | None = None) -> Iterator[LiveServer]:
    server = LiveServer(app, port).start()
    try:
        yield server
    finally:
        server.stop()


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a /metrics page: (sample name, sorted labels) -> value."""
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))
