"""What the cache readings cost the compile path: host memory around each backend compile,
and the persistent compilation cache's result, key, entry size and directory.

    .venv/bin/python benchmarks/cache_readings.py [--functions 40] [--repeats 3]

Compiles a small function at many shapes with the persistent cache on (every compile
writes an entry), timing each reading where cachewatch takes it, with the compile itself
timed around it; prints microseconds per compile and the share of a compile, medians over
the repeats. The readings are timed directly: whole-compile times move by more than they
cost from one compile to the next.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import sqlalchemy as sa

import cachewatch
from cachewatch.capture import cachestate
from cachewatch.core import jaxcompat
from cachewatch.store import engine as enginemod
from cachewatch.store import models

READINGS = {
    "host memory before the compile (and the mark reset)": (cachestate, ("begin_compile",)),
    "host memory after the compile (and its peak)": (cachestate, ("end_compile",)),
    "persistent cache result": (cachestate, ("outcome",)),
    "persistent cache key (JAX's frame)": (jaxcompat, ("persistent_cache_key",)),
    "entry size (JAX's frame)": (jaxcompat, ("persistent_cache_entry_bytes",)),
    "cache directory": (jaxcompat, ("persistent_cache_directory",)),
}


TIMER = "the timer itself, around a no-op (in each row above)"


def timed(spent: list[float], fn: Callable[..., Any], timer: list[float]) -> Callable[..., Any]:
    """``spent``: [wall seconds, this thread's CPU seconds]. The wall time also holds the
    waits for the GIL when a reading's system call lets another thread run (the writer
    reading earlier programs); the CPU time is what the reading itself costs. Each call
    also times a no-op the same way, just before, into ``timer``: once per compile the
    timer's own code runs cold too, and its cost is part of every row."""

    def noop() -> None:
        return None

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            noop()
        finally:
            timer[0] += time.perf_counter() - start
            timer[1] += time.thread_time() - cpu
            timer[2] += 1
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start
            spent[1] += time.thread_time() - cpu

    return wrapper


def one_repeat(functions: int, first: int) -> tuple[dict[str, tuple[float, float]], float]:
    """(wall, CPU) seconds per compile of each reading, and of the whole compile (call to return)."""
    spent = {name: [0.0, 0.0, 0.0] for name in [*READINGS, TIMER]}
    originals = []
    for name, (module, attrs) in READINGS.items():
        for attr in attrs:
            originals.append((module, attr, getattr(module, attr)))
            setattr(module, attr, timed(spent[name], getattr(module, attr), spent[TIMER]))
    try:

        def step(x):
            return jnp.tanh(x @ x.T).sum() + jnp.mean(x)

        fn = cachewatch.jit(step)
        # Shapes no earlier repeat compiled: every compile misses the cache and writes.
        inputs = [jnp.ones((first + n + 2, 8)) for n in range(functions)]
        jax.block_until_ready(inputs)
        start = time.perf_counter()
        for x in inputs:
            jax.block_until_ready(fn(x))
        per_compile = (time.perf_counter() - start) / functions
    finally:
        for module, attr, original in originals:
            setattr(module, attr, original)
    # Per compile; the timer's row per timed call (what each row above carries of it).
    per = {name: (s[0] / functions, s[1] / functions) for name, s in spent.items()}
    calls = max(1.0, spent[TIMER][2])
    per[TIMER] = (spent[TIMER][0] / calls, spent[TIMER][1] / calls)
    return per, per_compile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--functions", type=int, default=40, help="shapes compiled per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
        f"jax {jax.__version__}, backend {jax.default_backend()}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        cachewatch.configure(store=f"sqlite:///{tmp}/store.db", persistent_cache_dir=f"{tmp}/jax-cache")
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        runs = [one_repeat(args.functions, r * args.functions) for r in range(args.repeats)]
        cachewatch.flush(30)
        with enginemod.connection(f"sqlite:///{tmp}/store.db") as conn:
            e = models.compile_events
            results = dict(
                conn.execute(
                    sa.select(e.c.persistent_cache, sa.func.count()).where(e.c.compiled).group_by(e.c.persistent_cache)
                ).all()
            )
    compile_seconds = statistics.median(r[1] for r in runs)
    print(
        f"\n{args.functions} compiles per repeat, {args.repeats} repeats; a compile (call to return): "
        f"{compile_seconds * 1e3:.1f} ms; the persistent cache per compile: {results}\n"
    )
    print(f"    {'reading':56s} {'CPU us':>8s} {'of a compile':>13s} {'wall us':>8s} {'of a compile':>13s}")
    totals = [0.0, 0.0]
    for name in READINGS:
        wall = statistics.median(r[0][name][0] for r in runs)
        cpu = statistics.median(r[0][name][1] for r in runs)
        totals[0] += wall
        totals[1] += cpu
        _row(name, cpu, wall, compile_seconds)
    _row("all of them", totals[1], totals[0], compile_seconds)
    timer_wall = statistics.median(r[0][TIMER][0] for r in runs)
    timer_cpu = statistics.median(r[0][TIMER][1] for r in runs)
    _row(TIMER, timer_cpu, timer_wall, compile_seconds)
    rows = len(READINGS)
    _row("all of them, less the timer", totals[1] - rows * timer_cpu, totals[0] - rows * timer_wall, compile_seconds)


def _row(name: str, cpu: float, wall: float, compile_seconds: float) -> None:
    print(
        f"    {name:56s} {cpu * 1e6:8.1f} {cpu / compile_seconds:12.3%} {wall * 1e6:8.1f} {wall / compile_seconds:12.3%}"
    )


if __name__ == "__main__":
    main()
