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
    "host memory (before and after the compile)": (cachestate, ("begin_compile", "end_compile")),
    "persistent cache result": (cachestate, ("outcome",)),
    "persistent cache key (JAX's frame)": (jaxcompat, ("persistent_cache_key",)),
    "entry size (JAX's frame)": (jaxcompat, ("persistent_cache_entry_bytes",)),
    "cache directory": (jaxcompat, ("persistent_cache_directory",)),
}


def timed(spent: list[float], fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start

    return wrapper


def one_repeat(functions: int, first: int) -> tuple[dict[str, float], float]:
    """Seconds per compile of each reading, and of the whole compile (call to return)."""
    spent = {name: [0.0] for name in READINGS}
    originals = []
    for name, (module, attrs) in READINGS.items():
        for attr in attrs:
            originals.append((module, attr, getattr(module, attr)))
            setattr(module, attr, timed(spent[name], getattr(module, attr)))
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
    return {name: s[0] / functions for name, s in spent.items()}, per_compile


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
    print(f"    {'reading':48s} {'us/compile':>10s} {'of a compile':>13s}")
    total = 0.0
    for name in READINGS:
        seconds = statistics.median(r[0][name] for r in runs)
        total += seconds
        print(f"    {name:48s} {seconds * 1e6:10.1f} {seconds / compile_seconds:12.3%}")
    print(f"    {'all of them':48s} {total * 1e6:10.1f} {total / compile_seconds:12.3%}")


if __name__ == "__main__":
    main()
