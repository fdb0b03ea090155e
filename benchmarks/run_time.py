"""How close cachewatch's recorded run time is to a stopwatch.

    .venv/bin/python benchmarks/run_time.py [--repeats 5] [--seconds 3.0]

(a) a jitted SGD step on (32, 8) inputs called back to back in a `while` loop for a
    fixed wall time, never blocked (JAX queues the calls): the run time recorded for
    the loop (calls x run time of one call) against the loop's wall time;
(b) a fixed-size matmul, each call blocked by the caller: the recorded run time of
    one call against the stopwatch's median call.

Default sampling settings (the first cache hit after a compile, then 1 call in 100, at
most 5 a second). Each repeat is a new run in a fresh store; figures are medians over
the repeats, with the smallest and largest beside them.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp

import cachewatch
from cachewatch.record import current
from cachewatch.store import engine as enginemod
from cachewatch.store import queries


def report_row(url: str, name: str) -> dict:
    with enginemod.connection(url) as conn:
        (row,) = [r for r in queries.function_report(conn) if r["name"] == name]
    return row


def fresh_store(directory: str, index: int) -> str:
    url = f"sqlite:///{directory}/run-{index}.db"
    current.reset_configuration()
    cachewatch.configure(store=url, run_name=f"run-time-{index}")
    return url


def pipelined_loop(url: str, seconds: float) -> dict:
    @cachewatch.jit
    def sgd_step(params, x, y):
        def loss(p):
            return jnp.mean((jnp.tanh(x @ p["w"] + p["b"]) - y) ** 2)

        grads = jax.grad(loss)(params)
        return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)

    key = jax.random.PRNGKey(0)
    params = {"w": jax.random.normal(key, (8, 4)), "b": jnp.zeros(4)}
    x, y = jax.random.normal(key, (32, 8)), jnp.zeros((32, 4))
    params = jax.block_until_ready(sgd_step(params, x, y))
    calls = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        params = sgd_step(params, x, y)
        calls += 1
    jax.block_until_ready(params)
    wall = time.perf_counter() - start
    cachewatch.flush(30)
    row = report_row(url, "sgd_step")
    return {
        "calls": calls,
        "wall": wall,
        "per_call": row["run_seconds_mean"],
        "ratio": calls * row["run_seconds_mean"] / wall,
        "samples": row["sampled_calls"],
    }


def blocked_matmul(url: str, calls: int) -> dict:
    @cachewatch.jit
    def matmul(a, b):
        return a @ b

    a = jnp.ones((384, 384)) / 384
    jax.block_until_ready(matmul(a, a))
    stopwatch = []
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(matmul(a, a))
        stopwatch.append(time.perf_counter() - start)
    cachewatch.flush(30)
    row = report_row(url, "matmul")
    median = statistics.median(stopwatch)
    return {
        "stopwatch": median,
        "per_call": row["run_seconds_mean"],
        "ratio": row["run_seconds_mean"] / median,
        "samples": row["sampled_calls"],
    }


def spread(values: list[float], fmt: str) -> str:
    return f"{format(statistics.median(values), fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="wall time of each pipelined loop")
    parser.add_argument("--calls", type=int, default=400, help="blocked matmul calls per repeat")
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="cachewatch-runtime-")
    loops, matmuls = [], []
    for i in range(args.repeats):
        loops.append(pipelined_loop(fresh_store(directory, 2 * i), args.seconds))
        matmuls.append(blocked_matmul(fresh_store(directory, 2 * i + 1), args.calls))

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"jax {jax.__version__}, backend {jax.default_backend()}"
    )
    print()
    print(f"(a) SGD step on (32, 8), pipelined for {args.seconds:.1f} s ({args.repeats} repeats; median (min-max))")
    print(f"    calls                          {spread([r['calls'] for r in loops], ',.0f')}")
    print(f"    wall us/call                   {spread([r['wall'] / r['calls'] * 1e6 for r in loops], '.1f')}")
    print(f"    recorded us/call               {spread([r['per_call'] * 1e6 for r in loops], '.1f')}")
    print(f"    timed calls                    {spread([r['samples'] for r in loops], '.0f')}")
    print(f"    recorded run time / wall time  {spread([r['ratio'] for r in loops], '.2f')}")
    print()
    print(f"(b) 384x384 matmul, each of {args.calls} calls blocked ({args.repeats} repeats; median (min-max))")
    print(f"    stopwatch median ms/call       {spread([r['stopwatch'] * 1e3 for r in matmuls], '.3f')}")
    print(f"    recorded ms/call               {spread([r['per_call'] * 1e3 for r in matmuls], '.3f')}")
    print(f"    timed calls                    {spread([r['samples'] for r in matmuls], '.0f')}")
    print(f"    recorded / stopwatch           {spread([r['ratio'] for r in matmuls], '.2f')}")


if __name__ == "__main__":
    main()
