"""cachewatch.warmup: what a run compiled is compiled ahead of the next run's hot path.

Counted against JAX's own compile log, with the thread each compile ran on: after a
warm-up from the first run's record, the training thread compiles nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
import sqlalchemy as sa
from scenarios import jax_compile_count, jax_compile_log

import cachewatch
from cachewatch.capture import _tracking
from cachewatch.core.events import Kind
from cachewatch.store import charts, engine, models, queries
from cachewatch.store.columns import Filters

PROGRAM = Path(__file__).parent / "programs" / "warm_loop.py"
SIZES = 11

# Runs a program with JAX's compile log on stderr, each line with the thread that compiled.
LOGGED = (
    "import logging, runpy, sys; "
    "logging.basicConfig(format='%(threadName)s|%(message)s'); "
    "import jax; jax.config.update('jax_log_compiles', True); "
    "path = sys.argv[1]; sys.argv = sys.argv[1:]; runpy.run_path(path, run_name='__main__')"
)


def run_program(store: str, *args: str, **env: str) -> tuple[dict, list[tuple[str, str]]]:
    done = subprocess.run(
        [sys.executable, "-c", LOGGED, str(PROGRAM), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "CACHEWATCH_STORE": store, **env},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    compiles = [
        tuple(line.split("|", 1))
        for line in done.stderr.splitlines()
        if "|Finished XLA compilation of jit(train_step)" in line
    ]
    return json.loads(done.stdout.strip().splitlines()[-1]), compiles  # type: ignore[return-value]


def test_a_warmed_run_compiles_nothing_on_its_training_thread(sqlite_url):
    first, first_compiles = run_program(sqlite_url)
    assert len(first_compiles) == SIZES
    assert {thread for thread, _ in first_compiles} == {"MainThread"}
    second, second_compiles = run_program(sqlite_url, "--warmup-from", first["run_id"], "--threads", "2")
    assert second["compiled"] == SIZES
    assert second["skipped"] == []
    # Every compile JAX made ran in a warm-up thread: the loop's calls were all cache hits.
    assert len(second_compiles) == SIZES
    assert all(thread.startswith("cachewatch-warmup-") for thread, _ in second_compiles), second_compiles
    with engine.connection(sqlite_url) as conn:
        e = models.compile_events
        kinds = conn.execute(
            sa.select(e.c.kind, e.c.warmup, e.c.call_site).where(e.c.run_id == second["run_id"], e.c.compiled)
        ).all()
        report = {r["name"]: r for r in queries.function_report(conn, Filters(run_id=second["run_id"]))}
    mine = [k for k in kinds if k.call_site and k.call_site.endswith("warm_loop.py:" + str(_warmup_line()))]
    assert len(mine) == SIZES
    assert all(k.kind == Kind.AHEAD and k.warmup for k in mine)
    # A warm-up's compiles are compiles, never recompiles.
    assert report["train_step"]["compiles"] == SIZES
    assert report["train_step"]["recompiles"] == 0
    # Nor in the charts: the run's and the function's call sites, and the whole store's
    # hourly totals (the overview's chart over a long span) count the same recompiles as
    # the reports (the first run's ten count; the warmed run's eleven do not).
    with engine.connection(sqlite_url) as conn:
        whole = queries.function_report(conn, Filters())
        run_chart = charts.compiles_over_time(conn, Filters(run_id=second["run_id"]))
        sites, _ = charts.function_charts(conn, report["train_step"]["function_hash"], Filters(run_id=second["run_id"]))
        hourly = charts.compiles_by_hour(conn, 3600, recompiles_only=True)
        hourly_compiles = charts.compiles_by_hour(conn, 3600, recompiles_only=False)
    assert sum(n for _, _, n in run_chart["rows"]) == sum(r["recompiles"] for r in report.values())
    assert [site["recompiles"] for site in sites] == [0] * len(sites)
    assert sum(site["events"] for site in sites) >= SIZES
    assert sum(n for _, _, n in hourly) == sum(r["recompiles"] for r in whole) >= SIZES - 1
    assert sum(n for _, _, n in hourly_compiles) == sum(r["compiles"] for r in whole)


def test_warm_up_fills_the_persistent_cache_that_the_next_warm_up_reads(sqlite_url, tmp_path):
    first, _ = run_program(sqlite_url)
    cache = {"CACHEWATCH_PERSISTENT_CACHE_DIR": str(tmp_path / "cache")}
    filled, _ = run_program(sqlite_url, "--warmup-from", first["run_id"], **cache)
    # JAX names each entry's file after the jit and its key (the program's eager ops have theirs).
    entries = [p for p in (tmp_path / "cache").iterdir() if p.name.startswith("jit_train_step-")]
    assert len(entries) == SIZES
    read, _ = run_program(sqlite_url, "--warmup-from", first["run_id"], **cache)
    with engine.connection(sqlite_url) as conn:
        e = models.compile_events
        outcomes = {
            run: [
                r.persistent_cache
                for r in conn.execute(
                    sa.select(e.c.persistent_cache).where(e.c.run_id == run, e.c.compiled, e.c.kind == Kind.AHEAD)
                )
            ]
            for run in (filled["run_id"], read["run_id"])
        }
    assert outcomes[filled["run_id"]] == ["written"] * SIZES
    assert outcomes[read["run_id"]] == ["hit"] * SIZES


def _warmup_line() -> int:
    return next(i for i, line in enumerate(PROGRAM.read_text().splitlines(), 1) if "cachewatch.warmup(" in line)


class Knob:
    """A static argument whose repr cannot be read back."""

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def __hash__(self) -> int:
        return hash(self.scale)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Knob) and other.scale == self.scale


def test_what_cannot_be_rebuilt_is_skipped_with_its_reason(sqlite_url, use_store):
    use_store(sqlite_url)

    @cachewatch.jit(static_argnums=1)
    def scaled(x, knob):
        return x * knob.scale

    @cachewatch.jit(static_argnums=1)
    def repeated(x, times):
        return jnp.tile(x, times)

    scaled(jnp.ones(3), Knob(2.0))
    repeated(jnp.ones(3), 2)
    repeated(jnp.ones(4), 3)
    assert cachewatch.flush(30)
    from cachewatch.record import current

    run = current.run_id()
    jax.clear_caches()
    handle = cachewatch.warmup(scaled, from_run=run, background=False)
    assert handle.compiled == []
    assert len(handle.skipped) == 1
    assert "static value knob=" in handle.skipped[0].reason
    assert "cannot be rebuilt" in handle.skipped[0].reason
    with jax_compile_log() as log:
        handle = cachewatch.warmup(repeated, from_run=run, background=False, threads=2)
        assert sorted(handle.compiled) == ["x: float32[3], times=2", "x: float32[4], times=3"]
        assert jax_compile_count(log, "repeated") == 2
        repeated(jnp.ones(3), 2)
        repeated(jnp.ones(4), 3)
        assert jax_compile_count(log, "repeated") == 2  # both calls were served by the warm-up


def test_a_call_racing_its_own_warmup_compiles_once(sqlite_url, use_store):
    use_store(sqlite_url)

    @cachewatch.jit
    def deep(x):
        for i in range(300):  # long enough to compile that the call arrives during it
            x = jnp.sin(x) * 0.9 + i
        return x

    state = getattr(deep, "__cachewatch_state__")
    with jax_compile_log() as log:
        handle = cachewatch.warmup(deep, signatures=[(jax.ShapeDtypeStruct((5,), jnp.float32),)])
        deadline = time.monotonic() + 60
        slots = list(state.warming.values())
        while slots and slots[0].state == "queued" and time.monotonic() < deadline:
            time.sleep(0.001)
        deep(jnp.ones(5))  # arrives while the warm-up compiles its signature, or after
        assert handle.wait(60)
        assert jax_compile_count(log, "deep") == 1
    assert handle.compiled == ["x: float32[5]"]


def test_a_call_takes_over_a_signature_the_warmup_has_not_come_to(sqlite_url, use_store):
    use_store(sqlite_url)

    @cachewatch.jit
    def layered(x):
        for i in range(200):
            x = jnp.cos(x) * 0.5 + i
        return x

    sizes = (2, 3, 4, 5)
    with jax_compile_log() as log:
        # One thread, in this order: the last size waits behind three compiles.
        handle = cachewatch.warmup(layered, signatures=[(jax.ShapeDtypeStruct((n,), jnp.float32),) for n in sizes])
        layered(jnp.ones(5))  # compiles it now rather than wait for the other three
        assert handle.wait(120)
        assert jax_compile_count(log, "layered") == len(sizes)  # each size once
    assert sorted(handle.compiled) == [f"x: float32[{n}]" for n in sizes[:3]]
    assert [s.signature for s in handle.skipped] == ["x: float32[5]"]
    assert "a call of the program compiled it" in handle.skipped[0].reason


def test_bad_input_is_refused_and_compiles_nothing(sqlite_url, use_store):
    use_store(sqlite_url)

    @cachewatch.jit
    def f(x):
        return x + 1

    f(jnp.ones(2))
    assert cachewatch.flush(30)
    from cachewatch.record import current

    run = current.run_id()
    with pytest.raises(cachewatch.WarmupError, match="no run has the id, run name or job 'nope'"):
        cachewatch.warmup(f, from_run="nope")
    with pytest.raises(cachewatch.WarmupError, match="cachewatch.jit"):
        cachewatch.warmup(jax.jit(lambda x: x), from_run=run)
    with pytest.raises(cachewatch.WarmupError, match="one of from_run"):
        cachewatch.warmup(f)
    with engine.connection(sqlite_url) as conn:
        conn.execute(sa.update(models.runs).where(models.runs.c.run_id == run).values(jax_version="0.0.1"))
    with pytest.raises(cachewatch.WarmupError, match="recorded with JAX 0.0.1"):
        cachewatch.warmup(f, from_run=run)


def test_the_warming_table_is_empty_when_done(sqlite_url, use_store):
    use_store(sqlite_url)

    @cachewatch.jit
    def g(x):
        return x * 3

    handle = cachewatch.warmup(g, signatures=[(jnp.ones(n),) for n in (2, 3, 4)], threads=3)
    assert handle.wait(60)
    assert len(handle.compiled) == 3
    assert getattr(g, "__cachewatch_state__").warming == {}
    assert not getattr(_tracking._tls, "ahead", None)  # the calling thread is no warm-up
    assert threading.current_thread().name == "MainThread"


def test_cachewatch_run_warms_every_function_from_a_run(sqlite_url, tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "CACHEWATCH_STORE": sqlite_url}
    runner = [sys.executable, "-m", "cachewatch", "run", "--quiet", "--run-name", "loop"]
    first = subprocess.run([*runner, str(PROGRAM)], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    refused = subprocess.run(
        [*runner, "--warmup-from", "nope", str(PROGRAM)], capture_output=True, text=True, timeout=600, env=env
    )
    assert refused.returncode == 2
    assert "--warmup-from: no run has the id, run name or job 'nope'" in refused.stderr
    second = subprocess.run(
        [*runner, "--warmup-from", "loop", str(PROGRAM)], capture_output=True, text=True, timeout=600, env=env
    )
    assert second.returncode == 0, second.stderr[-2000:]
    run_id = json.loads(second.stdout.strip().splitlines()[-1])["run_id"]
    e, f = models.compile_events, models.functions
    with engine.connection(sqlite_url) as conn:
        rows = conn.execute(
            sa.select(e.c.kind, e.c.call_site)
            .join(f, f.c.function_hash == e.c.function_hash)
            .where(e.c.run_id == run_id, e.c.compiled, f.c.name == "train_step")
        ).all()
    # Every train_step compile of the second run was its warm-up's, made as it was defined.
    assert len(rows) == SIZES
    assert {r.kind for r in rows} == {Kind.AHEAD}
    defined = next(i for i, line in enumerate(PROGRAM.read_text().splitlines(), 1) if "@cachewatch.jit" in line)
    assert {r.call_site for r in rows} == {f"{PROGRAM}:{defined}"}
