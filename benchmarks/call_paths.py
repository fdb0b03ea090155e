"""What telling calls apart by path costs the program.

    .venv/bin/python benchmarks/call_paths.py [--repeats 15] [--calls 2000]

(a) a plain step's cache-hit call, which JAX serves from its C++ fast path:
    ``cachewatch.jit`` against ``jax.jit`` (the decision cachewatch watches is never asked);
(b) a step with a ``jax.debug.callback`` inside, whose every call JAX serves through its
    Python path: ``cachewatch.jit`` (which counts each such call, and why) against
    ``jax.jit``, and against ``cachewatch.jit`` with the paths not watched;
(c) the slow path itself: the callback step against the plain step under ``jax.jit``.

Variants run interleaved (the order rotates every repeat) in one process, and each
figure is the median over the repeats of the ratio within the repeat.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("CACHEWATCH_STORE", "sqlite://")  # nothing kept

import jax
import jax.numpy as jnp

import cachewatch
from cachewatch.capture import dispatch_path


def plain(x):
    return jnp.tanh(x) * 0.5


def logged(x):
    jax.debug.callback(lambda v: None, x[0])
    return jnp.tanh(x) * 0.5


def unwatched_paths(fn):
    """``cachewatch.jit`` with the fast-path decision left as JAX has it."""
    jitted = cachewatch.jit(fn)

    def call(x):
        dispatch_path.counting = False
        try:
            return jitted(x)
        finally:
            dispatch_path.counting = True

    return call


def rounds(fns: dict, calls: int, repeats: int, base: str) -> dict[str, float]:
    x = jnp.ones(16)
    for fn in fns.values():
        jax.block_until_ready(fn(x))  # compiled outside the timing
    names = list(fns)
    ratios: dict[str, list[float]] = {n: [] for n in names}
    per_call: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        times = {}
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            for _ in range(calls):
                out = fns[name](x)
            jax.block_until_ready(out)
            times[name] = (time.perf_counter() - start) / calls
        for name in names:
            ratios[name].append(times[name] / times[base])
            per_call[name].append(times[name])
    for name in names:
        print(f"  {name:<42} {statistics.median(per_call[name]) * 1e6:8.1f} µs  x{statistics.median(ratios[name]):.3f}")
    return {n: statistics.median(ratios[n]) for n in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    print(f"Python {platform.python_version()}, JAX {jax.__version__}, {jax.default_backend()}")
    print("(a) plain step, cache hit (C++ fast path), against jax.jit:")
    rounds({"jax.jit": jax.jit(plain), "cachewatch.jit": cachewatch.jit(plain)}, args.calls, args.repeats, "jax.jit")
    print("(b) step with a jax.debug.callback (Python path every call), against jax.jit:")
    rounds(
        {
            "jax.jit": jax.jit(logged),
            "cachewatch.jit, paths counted": cachewatch.jit(logged),
            "cachewatch.jit, paths not watched": unwatched_paths(logged),
        },
        args.calls,
        args.repeats,
        "jax.jit",
    )
    print("(c) the Python path against the fast path, both under jax.jit:")
    rounds({"plain": jax.jit(plain), "with jax.debug.callback": jax.jit(logged)}, args.calls, args.repeats, "plain")


if __name__ == "__main__":
    main()
