"""What ``cachewatch.install()`` costs a program that calls JAX's own jitted helpers.

    .venv/bin/python benchmarks/install_overhead.py [--rounds 31] [--steps 300]

A loop of JAX's helpers at fixed shapes, called eagerly (``jax.random.split`` and
``normal``, ``jax.nn.relu`` and ``log_softmax``, ``jnp.mean`` and ``argmax``): every call
after the first is a cache hit. Rounds with ``install()`` and rounds after ``uninstall()``
alternate in one process (the order flips every round), and each figure is the median
over the rounds, so drift of the machine hits both alike.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp

import cachewatch


def helpers_loop(steps: int, key, x) -> float:
    """Seconds per step of the loop; the result is waited for once at the end."""
    start = time.perf_counter()
    out = None
    for _ in range(steps):
        key, sub = jax.random.split(key)
        noise = jax.random.normal(sub, (32, 16))
        h = jax.nn.relu(x + noise)
        logits = jax.nn.log_softmax(h, axis=-1)
        out = (jnp.mean(logits), jnp.argmax(logits, axis=-1))
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        cachewatch.configure(store=f"sqlite:///{tmp}/bench.db", spool_dir=os.path.join(tmp, "spool"))
        key, x = jax.random.PRNGKey(0), jnp.ones((32, 16))
        cachewatch.install()
        helpers_loop(5, key, x)  # compile everything once, recorded
        cachewatch.uninstall()
        helpers_loop(5, key, x)
        times: dict[str, list[float]] = {"without install()": [], "with install()": []}
        for round_ in range(args.rounds):
            order = [False, True] if round_ % 2 == 0 else [True, False]
            for on in order:
                if on:
                    cachewatch.install()
                else:
                    cachewatch.uninstall()
                times["with install()" if on else "without install()"].append(helpers_loop(args.steps, key, x))
        cachewatch.uninstall()
        cachewatch.flush(30)

    print(
        f"# {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"jax {jax.__version__} on {jax.default_backend()}"
    )
    print(
        f"JAX's helpers at fixed shapes, called eagerly ({args.rounds} interleaved rounds of "
        f"{args.steps} steps, 7 helper calls per step)"
    )
    base = statistics.median(times["without install()"])
    print(f"    {'variant':<22}{'us/step':>10}{'ratio':>9}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"    {name:<22}{median * 1e6:>10.1f}{median / base:>9.3f}")


if __name__ == "__main__":
    sys.exit(main())
