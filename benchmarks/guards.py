"""What the recompile limit and freeze cost: the decision made in the trace hook, per trace.

    .venv/bin/python benchmarks/guards.py [--shapes 60] [--repeats 5]

One watched function is compiled for ``--shapes`` distinct shapes, once with no limit
(the default: the decision is one dictionary look-up), once with a limit it never
reaches (``on_limit="record"``: every trace is classified against the closest earlier
signature before JAX compiles), and once frozen with ``on_compile="warn"`` (classified,
and a warning made). The time inside ``guards.check_trace`` is measured directly and set
against the whole call that traced and compiled. Variants are interleaved; medians over
the repeats.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax.numpy as jnp  # noqa: E402

import cachewatch  # noqa: E402
from cachewatch.capture import guards  # noqa: E402
from cachewatch.explain import causes
from cachewatch.record import current

_spent = [0.0]
_original_check = guards.check_trace


def _timed_check(*args, **kwargs):
    start = time.perf_counter()
    try:
        return _original_check(*args, **kwargs)
    finally:
        _spent[0] += time.perf_counter() - start


guards.check_trace = _timed_check


def one_variant(variant: str, shapes: int, serial: int) -> tuple[float, float]:
    """(ms in the guard per trace, ms per compiling call) for one fresh function."""
    causes.reset()
    guards.reset()
    namespace: dict = {}
    # A fresh function each time (new source, new hash): nothing cached from before.
    exec(f"def bench_step_{serial}(x):\n    return (x * 2.0 + 1.0).sum()\n", namespace)
    fun = namespace[f"bench_step_{serial}"]
    options = {"max_recompiles": 10 * shapes, "on_limit": "record"} if variant == "limit" else {}
    step = cachewatch.jit(fun, **options)
    _spent[0] = 0.0
    total = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frozen = cachewatch.freeze(on_compile="warn") if variant == "freeze" else None
        try:
            for n in range(1, shapes + 1):
                x = jnp.ones((n,))
                start = time.perf_counter()
                step(x).block_until_ready()
                total += time.perf_counter() - start
        finally:
            if frozen is not None:
                cachewatch.unfreeze()
    return _spent[0] / shapes * 1e3, total / shapes * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    current.configure(store=f"sqlite:///{tempfile.mkdtemp(prefix='cachewatch-bench-')}/store.db")
    variants = ("no limit", "limit", "freeze")
    guard_ms: dict[str, list[float]] = {v: [] for v in variants}
    call_ms: dict[str, list[float]] = {v: [] for v in variants}
    serial = 0
    for _ in range(args.repeats):
        for variant in variants:
            serial += 1
            g, c = one_variant(variant, args.shapes, serial)
            guard_ms[variant].append(g)
            call_ms[variant].append(c)
    cachewatch.flush(30)
    print(f"one function compiled for {args.shapes} shapes; medians of {args.repeats} interleaved repeats")
    print(f"    {'variant':28} {'guard ms/trace':>15} {'call ms/compile':>16} {'guard share':>12}")
    for variant, label in zip(
        variants, ("no limit (default)", "max_recompiles, not reached", "freeze(on_compile='warn')"), strict=False
    ):
        g, c = statistics.median(guard_ms[variant]), statistics.median(call_ms[variant])
        print(f"    {label:28} {g:15.4f} {c:16.2f} {g / c:12.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
