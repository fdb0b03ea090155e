"""What naming the calls after each compile costs, and what it tells.

    .venv/bin/python benchmarks/naming_stretch.py [--repeats 7] [--epochs 4]

A loop in the shape of Flax's sst2 example: a jitted step over batches padded to one of
six widths, drawn in random order, a full batch between two bucketed ones, for a few
epochs (the first epoch compiles the six widths, the rest is served from the cache).
Three variants, interleaved (the order rotates every repeat), each repeat in a process
of its own (a run per process, as a program is; JAX compiles afresh in each):

- jax.jit;
- cachewatch.jit as it ships: after each compile the next calls are named (their
  signature read, not timed) for a stretch, within a tenth of that compile's seconds;
- cachewatch.jit with the stretch off (its length set to 0), as before it existed.

Printed: the loop's wall time (medians over the repeats, and the ratio to jax.jit paired
per repeat), and how the storm finder judged the widths' burst in each cachewatch run:
with the stretch, the widths served again show a first pass; without it, the burst that
came back to the full batch between new widths reads as a storm.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np

import cachewatch
from cachewatch.capture import counters
from cachewatch.record import current
from cachewatch.store import engine as enginemod
from cachewatch.storms import diagnosis

WIDTHS = (32, 48, 64, 80, 96)
VARIANTS = ("jax.jit", "cachewatch.jit", "cachewatch.jit, stretch off")


def make_step() -> Callable[..., Any]:
    """A step of its own each time (JAX's caches are per function: every repeat compiles)."""

    def bucketed_step(w, x):
        return jnp.tanh(jnp.tanh(x @ w) @ w.T).sum()

    return bucketed_step


def loop(jit: Callable[..., Any], epochs: int, seed: int) -> float:
    """Wall seconds of the loop, from its first call to its last result."""
    w = jnp.ones((16, 16)) / 16
    full = jnp.ones((16, 16))
    bucketed = [jnp.ones((width, 16)) for width in WIDTHS for _ in range(4)]
    order = np.random.default_rng(seed)
    step = jit(make_step())
    out = []
    start = time.perf_counter()
    for _ in range(epochs):
        for i in order.permutation(len(bucketed)):
            out.append(step(w, full))
            out.append(step(w, bucketed[i]))
    jax.block_until_ready(out)
    return time.perf_counter() - start


def verdict(url: str) -> str:
    """How the storm finder judged the step's burst: storm, first pass, or neither."""
    assert cachewatch.flush(30)
    with enginemod.connection(url) as conn:
        storms, passes = diagnosis.storms_and_first_passes(conn, threshold=5, window=600)
    if any(s.name == "bucketed_step" for s in storms):
        return "storm"
    return "first pass" if any(p.name == "bucketed_step" for p in passes) else "neither"


def run(variant: str, directory: str, index: int, epochs: int) -> tuple[float, str]:
    if variant == "jax.jit":
        return loop(jax.jit, epochs, index), ""
    url = f"sqlite:///{directory}/run-{index}.db"
    current.reset_configuration()
    cachewatch.configure(store=url, run_name=f"naming-{index}")
    shipped = counters.NAMED_AFTER_COMPILE_MAX
    if variant.endswith("stretch off"):
        counters.NAMED_AFTER_COMPILE_MAX = 0
    try:
        seconds = loop(cachewatch.jit, epochs, index)
    finally:
        counters.NAMED_AFTER_COMPILE_MAX = shipped
    return seconds, verdict(url)


def in_a_process(variant: str, directory: str, index: int, epochs: int) -> tuple[float, str]:
    """One repeat of one variant, run by this file in a process of its own."""
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--one",
            variant,
            "--dir",
            directory,
            "--index",
            str(index),
            "--epochs",
            str(epochs),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    took, _, said = done.stdout.strip().splitlines()[-1].partition(" ")
    return float(took), said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--one", choices=VARIANTS, help=argparse.SUPPRESS)  # one repeat, in this process
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        took, said = run(args.one, args.dir, args.index, args.epochs)
        print(f"{took} {said}")
        return
    directory = tempfile.mkdtemp(prefix="cachewatch-naming-")
    seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    verdicts: dict[str, list[str]] = {v: [] for v in VARIANTS}
    index = 0
    for repeat in range(args.repeats):
        turn = repeat % len(VARIANTS)
        for variant in VARIANTS[turn:] + VARIANTS[:turn]:
            took, said = in_a_process(variant, directory, index, args.epochs)
            seconds[variant].append(took)
            verdicts[variant].append(said)
            index += 1

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"jax {jax.__version__}, backend {jax.default_backend()}"
    )
    calls = args.epochs * len(WIDTHS) * 4 * 2
    print()
    print(f"the bucketed loop: {calls} calls, 6 shapes, {args.epochs} epochs ({args.repeats} interleaved repeats)")
    print(f"    {'variant':30} {'ms (median)':>12} {'vs jax.jit':>11}   judged")
    for variant in VARIANTS:
        ratio = statistics.median(s / j for s, j in zip(seconds[variant], seconds["jax.jit"], strict=True))
        judged = ", ".join(f"{verdicts[variant].count(v)} {v}" for v in sorted(set(verdicts[variant])) if v)
        print(f"    {variant:30} {statistics.median(seconds[variant]) * 1e3:12.1f} {ratio:11.3f}   {judged}")


if __name__ == "__main__":
    main()
