"""Every figure of the program view on every compile, read off the compile path.

The figures are read by the writer's thread after the user's call has returned, so they
are there whatever the machine is doing: these tests load the machine with a busy thread
of their own and still expect every figure of every compile.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import pytest
import sqlalchemy as sa
from scenarios import jax_compile_log

import cachewatch
from cachewatch import cli
from cachewatch.capture import program
from cachewatch.core import _guard
from cachewatch.record import current, recorder
from cachewatch.store import engine, models

# Every figure the program view gives a compile on CPU (docs/program.md).
FIGURES = ("program_fingerprint", "lowered_fingerprint", "jaxpr_eqns", "hlo_ops", "fusions", "flops", "bytes_accessed")
MEMORY_PARTS = ("generated_code", "argument", "output", "temp")


@contextlib.contextmanager
def busy_machine() -> Iterator[None]:
    """A thread that keeps one core and the GIL busy for as long as the block runs."""
    stop = threading.Event()

    def spin() -> None:
        n = 0
        while not stop.is_set():
            n = (n * 31 + 7) % 1_000_003

    thread = threading.Thread(target=spin, name="busy", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def training_program() -> None:
    """A small training loop that compiles in the ways real ones do: a step at several
    batch sizes and a weak-type flip, a scanned and an unrolled loop, a jit re-created
    in a loop, and a gradient."""

    @cachewatch.jit
    def step(w, x, lr):
        loss, grad = jax.value_and_grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
        return w - lr * grad, loss

    @cachewatch.jit
    def unrolled(x):
        for i in range(40):  # 121 equations, as a Python loop over layers writes them
            x = jnp.sin(x) * 0.5 + i
        return x

    @cachewatch.jit
    def scanned(x):
        return jax.lax.scan(lambda c, _: (jnp.cos(c) + 1.0, None), x, None, length=40)[0]

    w = jnp.ones((8, 4))
    for batch in (16, 16, 24, 32):
        w, _ = step(w, jnp.ones((batch, 8)), 0.1)
    step(w, jnp.ones((16, 8)), jnp.float32(0.1))  # a typed learning rate: weak_type
    unrolled(jnp.ones(5))
    scanned(jnp.ones(5))
    for _ in range(2):
        cachewatch.jit(lambda v: v * 2.0 + 1.0)(jnp.ones(3))


def compiled_rows(url: str) -> list[dict]:
    e, f = models.compile_events, models.functions
    with engine.get_engine(url).connect() as conn:
        query = (
            sa.select(e, f.c.name)
            .join(f, f.c.function_hash == e.c.function_hash)
            .where(e.c.compiled, f.c.module != "jax.op_by_op")
            .order_by(e.c.timestamp)
        )
        return [dict(r._mapping) for r in conn.execute(query)]


def test_every_compile_has_every_figure_under_load(sqlite_url, use_store, capsys):
    use_store(sqlite_url)
    with busy_machine(), jax_compile_log() as log:
        training_program()
    assert cachewatch.flush(60)
    rows = compiled_rows(sqlite_url)
    logged = [m for m in log if m.startswith("Finished XLA compilation of jit(")]
    # One event per compile JAX logged of these functions (the eager ops are left out).
    ours = ("jit(step)", "jit(unrolled)", "jit(scanned)", "jit(<lambda>)")
    assert len(rows) == sum(1 for m in logged if any(name in m for name in ours))
    assert {r["name"] for r in rows} >= {"step", "unrolled", "scanned", "<lambda>"}
    for row in rows:
        where = f"{row['name']} ({row['cause']})"
        for name in FIGURES:
            assert row[name] is not None, f"{name} missing on {where}"
        assert set(MEMORY_PARTS) <= set(row["memory"] or {}), f"memory parts missing on {where}"
        assert row["figures_missing"] is None, where
    unrolled = next(r for r in rows if r["name"] == "unrolled")
    assert unrolled["jaxpr_eqns"] >= 120
    assert unrolled["flops"] > 0
    # `cachewatch program` prints the jaxpr of every compile recorded with the defaults.
    capsys.readouterr()
    for row in rows:
        assert cli.main(["program", row["event_id"], "--store", sqlite_url, "--format", "jaxpr"]) == 0
        out = capsys.readouterr().out
        assert out.lstrip().startswith("{ lambda"), f"{row['name']}: {out[:80]!r}"


def test_the_weak_type_flip_compiles_the_same_program_within_the_function(sqlite_url, use_store):
    use_store(sqlite_url)
    training_program()
    assert cachewatch.flush(60)
    rows = compiled_rows(sqlite_url)
    steps = [r for r in rows if r["name"] == "step"]
    flipped = next(r for r in steps if r["cause"] == "weak_type")
    first = steps[0]
    assert first["cause"] == "first_call"
    assert first["identical_to"] is None
    assert flipped["identical_to"] == first["event_id"]
    assert flipped["same_program_as"] is None
    # The lambda re-created in the loop: its second jit object compiled its first program.
    lambdas = [r for r in rows if r["name"] == "<lambda>"]
    assert [r["cause"] for r in lambdas] == ["first_call", "new_function_object"]
    assert lambdas[1]["identical_to"] == lambdas[0]["event_id"]


def test_another_functions_program_is_the_same_program_not_a_recompile(sqlite_url, use_store):
    use_store(sqlite_url)

    @cachewatch.jit
    def double(x):
        return jnp.sin(x) * 2.0

    @cachewatch.jit
    def twice(x):
        return jnp.sin(x) * 2.0  # another function, the same program

    double(jnp.ones(4))
    twice(jnp.ones(4))
    assert cachewatch.flush(30)
    rows = {r["name"]: r for r in compiled_rows(sqlite_url)}
    assert rows["double"]["program_fingerprint"] == rows["twice"]["program_fingerprint"]
    # Each is its function's first compile: no recompile, no waste.
    assert rows["twice"]["cause"] == "first_call"
    assert rows["twice"]["identical_to"] is None
    assert rows["twice"]["same_program_as"] == rows["double"]["event_id"]


def _live_executables() -> int:
    return len(jax.devices()[0].client.live_executables())


def test_executables_waiting_for_the_writer_are_capped_and_released(sqlite_url, use_store):
    # The writer rests ten thousand times as long as it reads: the backlog fills.
    use_store(sqlite_url, program_backlog=2, program_worker_share=0.0001)
    before = recorder.program_work()
    baseline = _live_executables()
    for n in range(20):
        cachewatch.jit(lambda v, n=n: jnp.sin(v) * (n + 1))(jnp.ones(3))  # 20 jit objects, 20 programs
    work = recorder.program_work()
    assert work.peak_waiting == 2
    assert work.read_inline > before.read_inline
    assert cachewatch.flush(60)
    work = recorder.program_work()
    read = (work.read_by_writer - before.read_by_writer) + (work.read_inline - before.read_inline)
    assert read >= 20
    assert work.waiting == 0
    # Once read, cachewatch holds no executable: with JAX's caches cleared, every one of the
    # twenty is gone from the backend.
    jax.clear_caches()
    gc.collect()
    assert _live_executables() <= baseline
    rows = [r for r in compiled_rows(sqlite_url) if r["name"] == "<lambda>"]
    assert len(rows) == 20, [(r["cause"], r["kind"], r["call_site"]) for r in rows]
    assert all(r["flops"] is not None and r["memory"] for r in rows), [(r["flops"], r["memory"]) for r in rows]


def test_a_failure_reading_the_program_keeps_the_event(sqlite_url, use_store, monkeypatch):
    use_store(sqlite_url, raise_internal_errors=False)

    def broken(*args, **kwargs):
        raise RuntimeError("bug inside cachewatch")

    monkeypatch.setattr(program, "build", broken)
    cachewatch.jit(lambda v: v - 1.0)(jnp.ones(2))
    assert cachewatch.flush(30)
    assert _guard.internal_errors().get("program.complete", 0) >= 1
    rows = [r for r in compiled_rows(sqlite_url) if r["name"] == "<lambda>"]
    assert len(rows) == 1
    assert rows[0]["program_fingerprint"] is None
    assert rows[0]["compile_seconds"]
    _guard.reset()
    current.configure(raise_internal_errors=True)


def test_xla_figures_are_the_compiles_own_and_nothing_is_lowered_again(sqlite_url, use_store, monkeypatch):
    """XLA's figures are read off the executable JAX compiled for the call; the removed
    cost_analysis setting is still accepted, with a warning, and lowers nothing a second
    time (docs/program.md)."""
    built: list[tuple[Any, program.Program]] = []
    build = program.build

    def spy(jaxpr, executable, *rest):
        made = build(jaxpr, executable, *rest)
        built.append((executable, made))
        return made

    monkeypatch.setattr(program, "build", spy)
    lowered_again: list[object] = []
    lower = jax.stages.Traced.lower

    def lower_again(self, *a, **k):
        lowered_again.append(self)
        return lower(self, *a, **k)

    monkeypatch.setattr(jax.stages.Traced, "lower", lower_again)

    with pytest.warns(DeprecationWarning, match="'cost_analysis' has no effect"):
        use_store(sqlite_url, cost_analysis=True)

    @cachewatch.jit
    def dense(x):
        return jnp.tanh(x @ x.T).sum() * 3.0

    with jax_compile_log() as log:
        dense(jnp.ones((8, 4)))
    assert cachewatch.flush(30)
    (row,) = [r for r in compiled_rows(sqlite_url) if r["name"] == "dense"]
    assert not lowered_again
    assert [m.split(" in ")[0] for m in log if m.startswith("Finished") and "jit(dense)" in m] == [
        "Finished jaxpr to MLIR module conversion jit(dense)",
        "Finished XLA compilation of jit(dense)",
    ]
    (executable,) = [e for e, made in built if made.fingerprint == row["program_fingerprint"]]
    cost = executable.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    assert row["flops"] == float(cost["flops"]) >= 8 * 8 * 4
    assert row["bytes_accessed"] == float(cost["bytes accessed"])
    assert row["hlo_ops"] >= 3

    # The program view off: no figures, and still no second lowering for them.
    with pytest.warns(DeprecationWarning, match="'cost_analysis' has no effect"):
        use_store(sqlite_url, cost_analysis=True, program_view=False)

    @cachewatch.jit
    def sparse(x):
        return jnp.cos(x @ x.T).sum() * 5.0

    sparse(jnp.ones((8, 4)))
    assert cachewatch.flush(30)
    (row,) = [r for r in compiled_rows(sqlite_url) if r["name"] == "sparse"]
    assert row["flops"] is None
    assert row["bytes_accessed"] is None
    assert row["hlo_ops"] is None
    assert row["compile_seconds"]
    assert not lowered_again
