"""Shared pieces of the service benchmarks: throwaway stores, realistic events, a served
cachewatch, and table printing."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import sqlalchemy as sa

from cachewatch.core.events import new_event_id
from cachewatch.store import engine as enginemod
from cachewatch.store import models, rollup, writes

PG_ADMIN_URL = os.environ.get("CACHEWATCH_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def temp_store(kind: str) -> Iterator[str]:
    """A fresh, migrated store: a SQLite file, or a new PostgreSQL database (dropped after)."""
    if kind == "sqlite":
        directory = tempfile.mkdtemp(prefix="cachewatch-bench-")
        url = f"sqlite:///{directory}/store.db"
        try:
            enginemod.upgrade(url)
            yield url
        finally:
            enginemod.dispose_engines()
            shutil.rmtree(directory, ignore_errors=True)
        return
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"cachewatch_bench_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    try:
        enginemod.upgrade(url)
        yield url
    finally:
        enginemod.dispose_engines()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def real_event_template() -> tuple[Any, Any]:
    """One real recompile event (and its run) from real JAX code, to clone from."""
    import jax.numpy as jnp

    import cachewatch
    from cachewatch.record import current, recorder

    scratch = tempfile.mkdtemp(prefix="cachewatch-bench-lib-")
    current.configure(store=f"sqlite:///{scratch}/lib.db")
    seen: list = []
    recorder.add_listener(seen.append)

    @cachewatch.jit
    def layer(params, x):
        return jnp.tanh(x @ params["w"] + params["b"])

    params = {"w": jnp.ones((16, 8)), "b": jnp.zeros((8,))}
    for n in (4, 8):
        layer(params, jnp.ones((n, 16)))
    recorder.flush(10)
    recorder.remove_listener(seen.append)
    return current.run_info(), seen[-1]


def clone_events(template: Any, run: Any, n: int, start: float) -> list[Any]:
    return [
        dataclasses.replace(template, event_id=new_event_id(), run_id=run.run_id, timestamp=start + i * 1e-3)
        for i in range(n)
    ]


def seed(
    url: str,
    events: int,
    functions: int,
    *,
    runs: int = 50,
    days: float = 30.0,
    chunk: int = 20_000,
    template: Any = None,
    quiet: bool = False,
) -> dict[str, Any]:
    """Fill a store with ``events`` compile events over ``functions`` functions, fast.

    Compiles per function follow a Zipf-like law (a few functions recompile a lot);
    the last hour holds storms for a handful of functions. Rows go in with
    executemany, ``chunk`` rows per statement.
    """
    rng = random.Random(42)
    now = time.time()
    start = now - days * 86400
    diff = (
        list(template.diff)
        if template is not None
        else [
            {
                "path": "x",
                "change": "shape",
                "cause": "new_shape",
                "before": "float32[4,16]",
                "after": "float32[8,16]",
                "changes": ["shape"],
                "axes": [0],
            }
        ]
    )
    signature = (
        list(template.signature)
        if template is not None
        else [{"path": "x", "static": False, "shape": [8, 16], "dtype": "float32", "weak_type": False}]
    )
    function_rows = [
        {
            "function_hash": f"{i:020x}",
            "name": f"fn_{i}",
            "qualname": f"model.block_{i % 97}.fn_{i}",
            "module": f"model.block_{i % 97}",
            "file": f"/src/model/block_{i % 97}.py",
            "line": 10 + i,
            "first_seen": start,
        }
        for i in range(functions)
    ]
    weights = [1.0 / (rank + 1) ** 0.8 for rank in range(functions)]
    total = sum(weights)
    per_function = [max(1, int(events * w / total)) for w in weights]
    per_function[0] += events - sum(per_function)
    run_rows = [
        {
            "run_id": uuid.uuid4().hex,
            "run_name": f"exp-{i}",
            "host": f"host-{i % 8}",
            "pid": 1000 + i,
            "started_at": start + i * (days * 86400 / runs),
            "jax_version": "0.10.2",
            "jaxlib_version": "0.10.2",
            "backend": "cpu",
            "devices": ["cpu:0"],
            "python_version": "3.11",
        }
        for i in range(runs)
    ]
    causes = ["new_shape"] * 6 + [
        "new_static_value",
        "weak_type",
        "new_dtype",
        "new_function_object",
        "new_structure",
        "cache_cleared",
    ]
    started = time.perf_counter()
    e = models.compile_events
    with enginemod.get_engine(url).begin() as conn:
        conn.execute(sa.insert(models.runs), run_rows)
        conn.execute(sa.insert(models.functions), function_rows)

    def event_rows() -> Iterator[dict]:
        for index, count in enumerate(per_function):
            function_hash = function_rows[index]["function_hash"]
            storming = index < 5
            for k in range(count):
                # Storming functions put their last 20 compiles in the last hour.
                if storming and k >= count - 20:
                    ts = now - 3600 + (k - count + 20) * 60
                else:
                    ts = start + rng.random() * (days * 86400 - 7200)
                run = run_rows[min(runs - 1, int((ts - start) / (days * 86400) * runs))]
                first = k == 0
                compile_s = rng.lognormvariate(-3.0, 1.2)
                yield {
                    "event_id": new_event_id(),
                    "function_hash": function_hash,
                    "run_id": run["run_id"],
                    "timestamp": ts,
                    "kind": "trace",
                    "cause": "first_call" if first else rng.choice(causes),
                    "explanation": "`fn` traced again. Argument x changed shape on axis 0: float32[4,16] -> "
                    "float32[8,16].",
                    "diff": [] if first else diff,
                    "signature": signature,
                    "signature_hash": uuid.uuid4().hex[:20],
                    "compiled": True,
                    "nested": False,
                    "trace_seconds": compile_s * 0.1,
                    "lower_seconds": compile_s * 0.1,
                    "compile_seconds": compile_s,
                    "persistent_cache_hit": None,
                    "cache_time_saved_seconds": None,
                    "device": "cpu:0",
                    "backend": "cpu",
                    "call_site": "/src/train.py:120",
                    "jaxpr_eqns": 42,
                    "flops": None,
                    "bytes_accessed": None,
                    "error": None,
                    "thread": "MainThread",
                }

    buffer: list[dict] = []
    written = 0
    for row in event_rows():
        buffer.append(row)
        if len(buffer) >= chunk:
            with enginemod.get_engine(url).begin() as conn:
                conn.execute(sa.insert(e), buffer)
                # What the writers keep beside the events.
                rollup.add(conn, rollup.deltas([writes.event_row(row) for row in buffer]))
            written += len(buffer)
            buffer = []
            if not quiet:
                print(f"\r  seeding {written:,}/{events:,} events", end="", file=sys.stderr, flush=True)
    if buffer:
        with enginemod.get_engine(url).begin() as conn:
            conn.execute(sa.insert(e), buffer)
            rollup.add(conn, rollup.deltas([writes.event_row(row) for row in buffer]))
        written += len(buffer)
    stats = []
    for index in range(functions):
        for k in range(5):
            calls = rng.randint(10, 10_000)
            sampled = calls // 100
            stats.append(
                {
                    "run_id": run_rows[(index + k) % runs]["run_id"],
                    "function_hash": function_rows[index]["function_hash"],
                    "timestamp": start + (k + 1) * days * 86400 / 6,
                    "calls": calls,
                    "sampled_calls": sampled,
                    "sampled_seconds": sampled * rng.uniform(0.001, 0.05),
                }
            )
    with enginemod.get_engine(url).begin() as conn:
        conn.execute(sa.insert(models.call_stats), stats)
        rollup.add_call_stats(conn, stats)
        conn.execute(sa.text("ANALYZE"))  # planner statistics, as a store in service would have
    if not quiet:
        print(f"\r  seeded {written:,} events in {time.perf_counter() - started:.0f}s" + " " * 20, file=sys.stderr)
    busiest = function_rows[0]["function_hash"]
    typical = function_rows[functions // 2]["function_hash"]
    return {
        "events": written,
        "functions": functions,
        "busiest": busiest,
        "typical": typical,
        "busiest_events": per_function[0],
        "typical_events": per_function[functions // 2],
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def served(store: str, **env: str) -> Iterator[str]:
    """``python -m cachewatch serve`` on a free loopback port; stopped at the end."""
    with serve_process(store, **env) as (url, _):
        yield url


@contextlib.contextmanager
def serve_process(
    store: str, workers: int = 1, port: int | None = None, **env: str
) -> Iterator[tuple[str, subprocess.Popen]]:
    """``python -m cachewatch serve`` on a loopback port (a free one unless given), with
    ``workers`` workers; yields its URL and process, and stops it at the end."""
    port = port or free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("CACHEWATCH_", "PROMETHEUS_"))}
    environ.update(JAX_PLATFORMS="cpu", NO_PROXY="127.0.0.1,localhost", **env)
    log = tempfile.TemporaryFile()  # noqa: SIM115  (the server writes it for as long as it runs)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cachewatch", "serve", "--store", store, "--port", str(port), "--workers", str(workers)],
        env=environ,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError("cachewatch serve exited:\n" + log.read().decode(errors="replace"))
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=2):
                    break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError("cachewatch serve did not start") from None
                time.sleep(0.2)
        yield url, proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    k = (len(ordered) - 1) * q
    low, high = math.floor(k), math.ceil(k)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def print_table(headers: list[str], rows: list[list[Any]]) -> None:
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=False)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells:
        print(
            "| "
            + " | ".join(c.rjust(w) if _numeric(c) else c.ljust(w) for c, w in zip(row, widths, strict=False))
            + " |"
        )


def _numeric(text: str) -> bool:
    try:
        float(text.replace(",", "").rstrip("x%"))
        return True
    except ValueError:
        return False


def dumps(value: Any) -> str:
    return json.dumps(value, indent=2, default=str)
