"""Does ``cachewatch whatif`` predict what its fix does?

    .venv/bin/python benchmarks/whatif.py [--repeats 3] [--steps 300]

A training program (a 3-layer MLP, SGD, a mask over padded rows) whose batch size takes
12 values over a few hundred steps is run once with cachewatch recording (every call
timed). ``whatif`` prices ``auto`` (the ladder it recommends) and ``pow2`` on that run.
Then the program is run again, each in a fresh process, with its batches padded as each
policy says, and its compiles (JAX's own log), compile seconds (cachewatch's record of
the padded run) and the wall time of its training loop are set against the prediction:
the function's priced seconds alone, and the recorded loop with the function's priced
seconds replaced by the policy's (what is not the function stays as it was). Each repeat
records anew; figures are medians over the repeats.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from cachewatch.whatif import policies

os.environ.setdefault("JAX_PLATFORMS", "cpu")

SIZES = (24, 40, 56, 72, 88, 104, 136, 168, 200, 232, 264, 300)
FEATURES, HIDDEN, CLASSES = 128, 512, 10


def _program(steps: int, ladder: tuple[int, ...], store: str, run_name: str) -> dict:
    """One training run in this process: the loop's wall time and JAX's compile count."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import cachewatch

    cachewatch.configure(store=store, run_name=run_name, sample_every=1, sample_max_per_second=1e6)
    messages: list[str] = []

    class Log(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logging.getLogger("jax").addHandler(Log(logging.DEBUG))
    jax.config.update("jax_log_compiles", True)

    @cachewatch.jit
    def train_step(params, x, y, mask):
        def loss(p):
            h = jnp.tanh(x @ p["w1"] + p["b1"])
            h = jnp.tanh(h @ p["w2"] + p["b2"])
            logits = h @ p["w3"]
            xent = jax.nn.logsumexp(logits, axis=-1) - jnp.take_along_axis(logits, y[:, None], axis=-1)[:, 0]
            return jnp.sum(xent * mask) / jnp.maximum(jnp.sum(mask), 1.0)

        value, grads = jax.value_and_grad(loss)(params)
        return jax.tree.map(lambda a, g: a - 0.05 * g, params, grads), value

    rng = np.random.default_rng(0)
    params = {
        "w1": rng.standard_normal((FEATURES, HIDDEN), np.float32) * 0.05,
        "b1": np.zeros(HIDDEN, np.float32),
        "w2": rng.standard_normal((HIDDEN, HIDDEN), np.float32) * 0.05,
        "b2": np.zeros(HIDDEN, np.float32),
        "w3": rng.standard_normal((HIDDEN, CLASSES), np.float32) * 0.05,
    }
    params = jax.tree.map(jnp.asarray, params)
    # The data is made (and padded) before the clock starts: the loop times the step alone.
    batches = []
    for n in rng.choice(SIZES, size=steps):
        n = int(n)
        b = next((r for r in ladder if r >= n), n)
        x = np.zeros((b, FEATURES), np.float32)
        x[:n] = rng.standard_normal((n, FEATURES), np.float32)
        y = np.zeros(b, np.int32)
        y[:n] = rng.integers(0, CLASSES, n)
        mask = np.zeros(b, np.float32)
        mask[:n] = 1.0
        batches.append((x, y, mask))
    start = time.perf_counter()
    for x, y, mask in batches:
        params, value = train_step(params, x, y, mask)
    jax.block_until_ready(value)
    wall = time.perf_counter() - start
    cachewatch.flush(30)
    compiles = sum(1 for m in messages if m.startswith("Finished XLA compilation of jit(train_step) "))
    return {"wall_seconds": wall, "jax_compiles": compiles, "jax": jax.__version__}


def _child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-4000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def _price(store: str, policy: str):
    from cachewatch.store import engine as enginemod
    from cachewatch.whatif import prices, whatif_reads

    with enginemod.connection(store) as conn:
        function = whatif_reads.find_function(conn, "train_step")
        run_id, run_name = whatif_reads.run_of(conn, function.function_hash, None)
        found = whatif_reads.evidence(conn, function, run_id, run_name)
    return prices.analyse(found, policies.parse_policy(policy)), found


def _compile_seconds(store: str) -> float:
    return sum(c.seconds for c in _price(store, "none")[1].compiles)


def repeat(directory: str, index: int, steps: int) -> list[dict]:
    recorded = f"sqlite:///{directory}/record-{index}.db"
    base = _child([str(steps), "", recorded, "record"])
    rows = []
    for policy in ("auto", "pow2"):
        result, _ = _price(recorded, policy)
        assert result.price is not None, result.run_fit_note
        assert result.price.total_seconds is not None, result.run_fit_note
        padded_store = f"sqlite:///{directory}/{policy}-{index}.db"
        ladder = ",".join(str(b) for b in result.price.buckets)
        ran = _child([str(steps), ladder, padded_store, f"padded-{policy}"])
        rows.append(
            {
                "policy": policy,
                "ladder": ladder,
                "predicted_compiles": result.price.compiles,
                "compiles": ran["jax_compiles"],
                "predicted_compile_seconds": result.price.compile_seconds,
                "compile_seconds": _compile_seconds(padded_store),
                "predicted_total_seconds": result.price.total_seconds,
                # The loop as recorded, with the function's priced seconds replaced by
                # the policy's: what is not the function (the loop, the host's work per
                # step, timing every call) is the same in both programs.
                "predicted_wall_seconds": base["wall_seconds"]
                - result.recorded.total_seconds
                + result.price.total_seconds,
                "wall_seconds": ran["wall_seconds"],
                "recorded_compiles": result.recorded.compiles,
                "recorded_wall_seconds": base["wall_seconds"],
                "recorded_total_seconds": result.recorded.total_seconds,
                "run_fit_r2": result.run_fit.r2 if result.run_fit else None,
                "run_fit_error": result.run_fit.relative_error if result.run_fit else None,
                "jax": ran["jax"],
            }
        )
    return rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        steps, ladder, store, run_name = sys.argv[2:6]
        rungs = tuple(int(b) for b in ladder.split(",") if b)
        print(json.dumps(_program(int(steps), rungs, store, run_name)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    loads = []
    with tempfile.TemporaryDirectory(prefix="cachewatch-whatif-") as directory:
        runs = []
        for i in range(args.repeats):
            runs.append(repeat(directory, i, args.steps))
            loads.append(os.getloadavg()[0])
    # The machine's load says how far its other work can move a timing between two runs.
    print(
        f"python {platform.python_version()}, jax {runs[0][0]['jax']}, {os.cpu_count()} cpus, "
        f"{args.steps} steps over {len(SIZES)} batch sizes, medians of {args.repeats}; "
        f"load average {min(loads):.1f}-{max(loads):.1f}"
    )
    for k, policy in enumerate(("auto", "pow2")):
        rows = [r[k] for r in runs]

        def med(key: str, rows: list[dict] = rows) -> float:
            return statistics.median(r[key] for r in rows)

        exact = all(r["compiles"] == r["predicted_compiles"] for r in rows)
        print(f"\n{policy}: ladder {', '.join(sorted({r['ladder'] for r in rows}))}")
        print(
            f"  as recorded: {rows[0]['recorded_compiles']} compiles, loop {med('recorded_wall_seconds'):.2f} s "
            f"(priced {med('recorded_total_seconds'):.2f} s); run-time fit R² {med('run_fit_r2'):.3f}, "
            f"mean error {med('run_fit_error'):.1%}"
        )
        print(
            f"  compiles: predicted {[r['predicted_compiles'] for r in rows]}, "
            f"JAX's log {[r['compiles'] for r in rows]} ({'exact' if exact else 'MISSED'})"
        )
        for name, predicted, actual in (
            ("compile seconds", "predicted_compile_seconds", "compile_seconds"),
            ("loop wall time against the function's price", "predicted_total_seconds", "wall_seconds"),
            ("loop wall time from the recorded loop", "predicted_wall_seconds", "wall_seconds"),
        ):
            ratios = [r[actual] / r[predicted] - 1 for r in rows]
            print(
                f"  {name}: predicted {med(predicted):.2f} s, measured {med(actual):.2f} s, "
                f"off by {statistics.median(ratios):+.0%} (each repeat: {', '.join(f'{x:+.0%}' for x in ratios)})"
            )


if __name__ == "__main__":
    main()
