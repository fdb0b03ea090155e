"""What a warm-up from the last run's record buys a training program.

    .venv/bin/python benchmarks/warmup.py [--repeats 5] [--threads 2]

The program (tests/programs/warm_loop.py) trains over 11 batch sizes for two epochs, so
it compiles 11 variants of its step. Each repeat, in a fresh store: one run records
them; then, in alternating order, a run without warm-up and a run with
``--warmup-from`` that run (``--threads`` worker threads). For each, the seconds to the
end of its first epoch and in all, and the compiles JAX logged on the training thread
(by thread name). Medians over the repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# The CPU unless JAX_PLATFORMS names another (JAX_PLATFORMS=cuda on a GPU machine).
os.environ.setdefault("JAX_PLATFORMS", "cpu")
PROGRAM = Path(__file__).resolve().parent.parent / "tests" / "programs" / "warm_loop.py"
LOGGED = (
    "import logging, runpy, sys; "
    "logging.basicConfig(format='%(threadName)s|%(message)s'); "
    "import jax; jax.config.update('jax_log_compiles', True); "
    "path = sys.argv[1]; sys.argv = sys.argv[1:]; runpy.run_path(path, run_name='__main__')"
)


def run(store: str, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", LOGGED, str(PROGRAM), *args],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "CACHEWATCH_STORE": store},
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    out = json.loads(done.stdout.strip().splitlines()[-1])
    threads = [
        line.split("|", 1)[0]
        for line in done.stderr.splitlines()
        if "|Finished XLA compilation of jit(train_step)" in line
    ]
    out["on_training_thread"] = sum(1 for t in threads if t == "MainThread")
    out["in_warmup_threads"] = sum(1 for t in threads if t.startswith("cachewatch-warmup-"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import jax

    print(f"jax {jax.__version__}, python {platform.python_version()}, {os.cpu_count()} cpus")
    cold: list[dict] = []
    warm: list[dict] = []
    for repeat in range(args.repeats):
        scratch = tempfile.mkdtemp(prefix="cachewatch-bench-warmup-")
        store = f"sqlite:///{scratch}/store.db"
        recorded = run(store)
        pair = [("cold", ()), ("warm", ("--warmup-from", recorded["run_id"], "--threads", str(args.threads)))]
        for name, extra in pair if repeat % 2 == 0 else reversed(pair):
            (cold if name == "cold" else warm).append(run(store, *extra))

    def med(rows: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    for name, rows in (("without warm-up", cold), (f"warmed from the last run, {args.threads} threads", warm)):
        print(
            f"{name:40} first epoch {med(rows, 'first_epoch_seconds'):6.2f} s, in all {med(rows, 'total_seconds'):6.2f} s; "
            f"compiles on the training thread {med(rows, 'on_training_thread'):.0f}, "
            f"in warm-up threads {med(rows, 'in_warmup_threads'):.0f} (median of {len(rows)})"
        )
    ratio = statistics.median(
        w["first_epoch_seconds"] / c["first_epoch_seconds"] for w, c in zip(warm, cold, strict=False)
    )
    print(f"first epoch, warmed / without: {ratio:.3f} (median of paired repeats)")


if __name__ == "__main__":
    main()
