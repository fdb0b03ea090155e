"""What cachewatch costs the program it watches.

    .venv/bin/python benchmarks/overhead.py [--repeats 7] [--rounds 41] [--shapes 50] [--hits-only]

(a) a cache-hit call of a tiny function: cachewatch.jit against jax.jit;
(b) a function compiled for many distinct shapes: time per compile with
    cachewatch.jit, with plain jax.jit, and with jax.jit under JAX's own
    jax_explain_cache_misses;
(c) the same compiles, with cachewatch's own work and JAX's explanation each timed
    directly (whole-compile times in (b) vary more than either costs);
(d) the first cache hit after each of those compiles, which cachewatch times (it
    waits for the call's inputs and outputs), against the same call with sampling off.

Variants run interleaved (the order rotates every repeat) in one process, and each
figure is the median over the repeats, so drift of the machine hits all alike.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
import types

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp

import cachewatch
from cachewatch.capture.counters import Watched


def make_tiny():
    def tiny(x):
        return x + 1

    return tiny


def make_model():
    def model(x):
        h = jnp.tanh(x @ jnp.ones((x.shape[-1], 16)))
        return jnp.sum(h * h) + jnp.mean(x)

    return model


def bare_wrapper(fn):
    """The thinnest possible Python wrapper: the floor for a tool that counts calls in Python."""
    jitted = jax.jit(fn)

    def call(*args):
        return jitted(*args)

    return call


def hit_rounds(wrappers: dict, calls: int, rounds: int) -> dict[str, tuple[float, float]]:
    """Per variant: median seconds per call and median ratio to jax.jit in the same round."""
    x = jnp.ones(8)
    fns = {}
    for name, wrap in wrappers.items():
        fns[name] = wrap(make_tiny())
        jax.block_until_ready(fns[name](x))  # compile outside the timing
    names = list(fns)
    per_call: dict[str, list[float]] = {n: [] for n in names}
    ratios: dict[str, list[float]] = {n: [] for n in names}
    for rnd in range(rounds):
        order = names[rnd % len(names) :] + names[: rnd % len(names)]
        times = {}
        for name in order:
            fn = fns[name]
            start = time.perf_counter()
            for _ in range(calls):
                out = fn(x)
            jax.block_until_ready(out)
            times[name] = (time.perf_counter() - start) / calls
        for name in names:
            per_call[name].append(times[name])
            ratios[name].append(times[name] / times["jax.jit"])
    return {n: (statistics.median(per_call[n]), statistics.median(ratios[n])) for n in names}


def time_compiles(wrap, shapes: int, explain: bool) -> float:
    fn = wrap(make_model())  # a new function object: JAX's caches are cold for it
    inputs = [jnp.ones((n + 1, 8)) for n in range(shapes)]
    jax.block_until_ready(inputs)
    previous = jax.config.jax_explain_cache_misses
    jax.config.update("jax_explain_cache_misses", explain)
    try:
        start = time.perf_counter()
        for x in inputs:
            out = fn(x)
        jax.block_until_ready(out)
        elapsed = time.perf_counter() - start
    finally:
        jax.config.update("jax_explain_cache_misses", previous)
    return elapsed / shapes


def first_hits(shapes: int, sample_every: int) -> float:
    """Median seconds the first cache-hit call after each compile takes to return."""
    cachewatch.configure(sample_every=sample_every)
    fn = cachewatch.jit(make_model())
    inputs = [jnp.ones((n + 1, 8)) for n in range(shapes)]
    jax.block_until_ready(inputs)
    times = []
    for x in inputs:
        jax.block_until_ready(fn(x))  # the compile
        start = time.perf_counter()
        out = fn(x)
        times.append(time.perf_counter() - start)
        jax.block_until_ready(out)
    return statistics.median(times)


class OwnTime:
    """Time spent inside cachewatch's own trace and compile handling (the hook's signature
    and the event built after the call), measured directly: the compile-time comparison
    above is within the noise of XLA's own compile times."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __enter__(self) -> OwnTime:
        jitmod = sys.modules["cachewatch.capture.jit"]  # the module: `cachewatch.jit` the name is the function

        self._saved = {name: getattr(jitmod, name) for name in ("_begin_trace", "_end_trace", "_finish")}
        for name, fn in self._saved.items():
            setattr(jitmod, name, self._timed(fn))
        return self

    def _timed(self, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        return wrapper

    def __exit__(self, *exc) -> None:
        jitmod = sys.modules["cachewatch.capture.jit"]  # the module: `cachewatch.jit` the name is the function

        for name, fn in self._saved.items():
            setattr(jitmod, name, fn)


class JaxExplainTime:
    """Time inside JAX's own cache-miss explanation (what jax_explain_cache_misses adds
    to a compile), measured directly like OwnTime. JAX hands its explainer to a C++
    cache at import, so the function's code is swapped in place for a timed call of a
    copy of the original."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.clock = time.perf_counter

    def __enter__(self) -> JaxExplainTime:
        from jax._src.interpreters import partial_eval

        self._fn = partial_eval.explain
        self._code = self._fn.__code__
        original = types.FunctionType(self._code, self._fn.__globals__, "explain")
        self._fn.__globals__["_cachewatch_benchmark_explain"] = (original, self)
        self._fn.__code__ = _timed_explain.__code__
        return self

    def __exit__(self, *exc) -> None:
        self._fn.__code__ = self._code
        self._fn.__globals__.pop("_cachewatch_benchmark_explain", None)


def _timed_explain(*args, **kwargs):
    # Runs with JAX's module globals (its code is swapped into JAX's explainer).
    original, meter = _cachewatch_benchmark_explain  # noqa: F821 - a global of that module
    start = meter.clock()
    try:
        return original(*args, **kwargs)
    finally:
        meter.seconds += meter.clock() - start


def interleaved(variants: dict, repeats: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for rep in range(repeats):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            samples[name].append(variants[name]())
    return {name: statistics.median(values) for name, values in samples.items()}


def print_machine() -> None:
    hit_path = "C (_fastcall)" if Watched is not None else "the pure-Python twin (no C extension)"
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"jax {jax.__version__}, backend {jax.default_backend()}; cachewatch's cache-hit path: {hit_path}"
    )
    print()


def print_hits(hits: dict[str, tuple[float, float]], rounds: int) -> None:
    print(f"(a) cache-hit call of a tiny function ({rounds} interleaved rounds of 2000 calls)")
    print(f"    {'variant':34} {'us/call':>9} {'ratio':>7}")
    for name, (per_call, ratio) in hits.items():
        print(f"    {name:34} {per_call * 1e6:9.2f} {ratio:7.3f}")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=41, help="rounds for (a), ratios paired per round")
    parser.add_argument("--shapes", type=int, default=50)
    parser.add_argument("--hits-only", action="store_true", help="measure (a) alone (long runs of many rounds)")
    args = parser.parse_args()

    # JAX's explanations go to the "jax" logger at WARNING; keep them off the terminal
    # (the records are still built, which is their cost).
    jax_logger = logging.getLogger("jax")
    jax_logger.addHandler(logging.NullHandler())
    jax_logger.propagate = False

    store = tempfile.mkdtemp(prefix="cachewatch-bench-")
    cachewatch.configure(store=f"sqlite:///{store}/bench.db", run_name="overhead-benchmark")

    hits = hit_rounds(
        {
            "jax.jit": jax.jit,
            "bare Python wrapper (floor)": bare_wrapper,
            "cachewatch.jit": cachewatch.jit,
        },
        calls=2_000,
        rounds=args.rounds,
    )
    if args.hits_only:
        print_machine()
        print_hits(hits, args.rounds)
        return
    compiles = interleaved(
        {
            "jax.jit": lambda: time_compiles(jax.jit, args.shapes, explain=False),
            "jax.jit + explain_cache_misses": lambda: time_compiles(jax.jit, args.shapes, explain=True),
            "cachewatch.jit": lambda: time_compiles(cachewatch.jit, args.shapes, explain=False),
        },
        args.repeats,
    )
    own = OwnTime()
    with own:
        for _ in range(3):
            time_compiles(cachewatch.jit, args.shapes, explain=False)
    theirs = JaxExplainTime()
    with theirs:
        for _ in range(3):
            time_compiles(jax.jit, args.shapes, explain=True)
    hit_after_compile = interleaved(
        {
            "sampled (cachewatch default)": lambda: first_hits(args.shapes, sample_every=100),
            "not sampled (CACHEWATCH_SAMPLE_EVERY=0)": lambda: first_hits(args.shapes, sample_every=0),
        },
        args.repeats,
    )
    cachewatch.flush(30)

    print_machine()
    print_hits(hits, args.rounds)
    print(
        f"(b) one function compiled for {args.shapes} distinct shapes (medians of {args.repeats} interleaved repeats)"
    )
    print(f"    {'variant':34} {'ms/compile':>10} {'added vs jax.jit':>17}")
    base = compiles["jax.jit"]
    for name, value in compiles.items():
        print(f"    {name:34} {value * 1e3:10.2f} {100 * (value - base) / base:16.1f}%")

    base_ms = compiles["jax.jit"] * 1e3
    print()
    print(f"(c) work added per compile, timed directly over the same {3 * args.shapes} compiles")
    print(f"    {'variant':52} {'ms/compile':>10} {'of a compile':>13}")
    for name, seconds in (
        ("cachewatch (signature, cause, diff, event)", own.seconds),
        ("JAX's jax_explain_cache_misses (explanation, log)", theirs.seconds),
    ):
        ms = 1e3 * seconds / (3 * args.shapes)
        print(f"    {name:52} {ms:10.3f} {100 * ms / base_ms:12.2f}%")
    print()
    print(
        f"(d) first cache-hit call after each compile (medians over {args.shapes} compiles, "
        f"{args.repeats} interleaved repeats)"
    )
    print(f"    {'variant':52} {'us/call':>10} {'of a compile':>13}")
    for name, seconds in hit_after_compile.items():
        print(f"    {name:52} {seconds * 1e6:10.1f} {100 * seconds * 1e3 / base_ms:12.3f}%")
    added = (
        hit_after_compile["sampled (cachewatch default)"] - hit_after_compile["not sampled (CACHEWATCH_SAMPLE_EVERY=0)"]
    )
    print(
        f"    {'added by the first-call sample, per compile':52} {added * 1e6:10.1f} "
        f"{100 * added * 1e3 / base_ms:12.3f}%"
    )


if __name__ == "__main__":
    main()
