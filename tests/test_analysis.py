"""Diagnosis beyond JAX's flags: storms with fixes, stale globals, is jit worth it, cost model."""

from __future__ import annotations

import functools
import json
import math
import time
import uuid

import jax
import jax.numpy as jnp
import pytest
import sqlalchemy as sa

import cachewatch
from cachewatch import cli
from cachewatch.core.events import Cause, FunctionInfo, Kind
from cachewatch.payoff import cost_reads, costmodel, kept_regressions, verdicts
from cachewatch.store import columns, models, queries, rollup
from cachewatch.store import engine as enginemod
from cachewatch.storms import diagnosis, fixes, storm_reads
from cachewatch.storms.results import Storm


def storms_for(url: str, qualname_part: str, **kwargs) -> list[Storm]:
    with enginemod.connection(url) as conn:
        storms = diagnosis.detect_storms(conn, **kwargs)
    return [s for s in storms if qualname_part in s.qualname]


def events_of(url: str, name: str) -> list[columns.EventRow]:
    with enginemod.connection(url) as conn:
        return [e for e in queries.list_events(conn, limit=10_000) if e["name"] == name]


@pytest.fixture
def store(sqlite_url, use_store):
    return use_store(sqlite_url)


# ------------------------------------------------------------------ storms


def test_varying_batch_axis_storm_suggests_bucketing(store):
    @cachewatch.jit
    def ragged_step(w, batch):
        return (batch["tokens"] @ w).sum()

    w = jnp.ones((4, 2))
    sizes = [1, 3, 5, 8, 13, 21, 34, 55, 89, 144]
    for size in sizes:
        ragged_step(w, {"tokens": jnp.ones((size, 4))})  # line of the call: checked below
    assert cachewatch.flush(30)
    (storm,) = storms_for(store, "ragged_step")
    assert storm.dominant_cause == Cause.NEW_SHAPE
    assert storm.compiles == 9
    assert storm.active
    assert "batch['tokens'] axis 0 took 10 sizes between 1 and 144" in storm.fix
    buckets = len({1 if s <= 1 else 2 ** (s - 1).bit_length() for s in sizes})
    assert f"pad to powers of two: {buckets} compile(s) instead of 10" in storm.fix
    assert __file__ in storm.fix


def test_static_argument_storm_counts_values(store):
    @functools.partial(cachewatch.jit, static_argnums=1)
    def power(x, k):
        return x**k

    for k in range(7):
        power(jnp.ones(3), k)
    assert cachewatch.flush(30)
    (storm,) = storms_for(store, "power")
    assert storm.dominant_cause == Cause.NEW_STATIC_VALUE
    assert storm.fix.startswith("Static argument k of `power` took 7 distinct values")
    assert "make it a traced argument" in storm.fix


def test_jit_in_loop_storm_names_the_line_to_hoist(store):
    def body(x):
        return x * 3

    for _i in range(6):
        cachewatch.jit(lambda x: body(x))(jnp.ones(2))
        line = _line() - 1
    assert cachewatch.flush(30)
    (storm,) = storms_for(store, "<lambda>")
    assert storm.dominant_cause == Cause.NEW_FUNCTION_OBJECT
    assert f"called at {__file__}:{line}" in storm.fix
    assert "outside the loop" in storm.fix


def _line() -> int:
    import inspect

    frame = inspect.currentframe()
    assert frame is not None
    assert frame.f_back is not None
    return frame.f_back.f_lineno


def test_weak_type_and_changing_keys_storms(store):
    @cachewatch.jit
    def scaled(x, scale):
        return x * scale

    @cachewatch.jit
    def summed(batch):
        return sum(v.sum() for v in batch.values())

    for i in range(6):
        scaled(jnp.ones(3), 0.5 if i % 2 == 0 else jnp.float32(0.5))
        scaled.clear_cache() if i == 1 else None
    keys = ["a", "b", "c", "d", "e", "f", "g"]
    for n in range(1, 8):
        summed({k: jnp.ones(2) for k in keys[:n]})
    assert cachewatch.flush(30)
    (storm,) = storms_for(store, "summed")
    assert storm.dominant_cause == Cause.NEW_STRUCTURE
    assert "batch['" in storm.fix
    assert "keep dict keys" in storm.fix
    weak = [e for e in events_of(store, "scaled") if e["cause"] == Cause.WEAK_TYPE]
    assert weak
    assert all(e["diff"][0]["path"] == "scale" for e in weak)
    fix = fixes.suggest_fix("scaled", Cause.WEAK_TYPE, [_recompile(e) for e in weak])
    assert fix.startswith("Argument scale of `scaled` flips between a Python scalar and a typed array")


def _recompile(event: columns.EventRow) -> storm_reads.Recompile:
    """The stored event as the advice reads it."""
    return storm_reads.Recompile(
        function_hash=event["function_hash"],
        run_id=event["run_id"],
        timestamp=event["timestamp"],
        cause=event["cause"],
        diff=event["diff"],
        call_site=event["call_site"],
        signature_hash=event["signature_hash"],
    )


def test_op_by_op_barrage_is_a_storm(store):
    @cachewatch.jit
    def train_step(x):
        return x * 2.0

    train_step(jnp.ones(3))
    train_step(jnp.ones(3))  # the training loop runs: set-up is over
    for n in (5, 2, 8, 3, 9, 4, 7, 6):
        jnp.zeros((n, 3)) + 1.0  # eager: JAX compiles its small ops for every new shape
    line = _line() - 1
    assert cachewatch.flush(30)
    barrages = [s for s in storms_for(store, "(op-by-op)") if s.compiles >= 5]
    assert barrages
    assert any(f"Un-jitted code at {__file__}:{line}" in s.fix for s in barrages)
    assert all("Move that code inside a jitted function" in s.fix for s in barrages)


def test_an_eager_barrage_over_a_count_that_grows_is_not_told_to_move_into_a_jit(store):
    """A size that grows a step at a time is a new program at each step, jitted or not: the
    line is told to keep it in a buffer of fixed capacity, not to move into a jit."""

    @cachewatch.jit
    def grown_step(x):
        return x * 2.0

    grown_step(jnp.ones(3))
    grown_step(jnp.ones(3))  # the training loop runs: set-up is over
    for n in range(12, 20):
        jnp.ones((n, 5)) * 3.0  # one more row each step
    line = _line() - 1
    assert cachewatch.flush(30)
    (told,) = [s for s in storms_for(store, "(op-by-op)") if s.call_site == f"{__file__}:{line}"]
    assert "buffer of fixed capacity" in told.fix
    assert "Move that code inside a jitted function" not in told.fix


def test_storm_threshold_and_window(sqlite_url):
    enginemod.ensure_schema(sqlite_url)
    now = time.time()
    _insert_compiles(sqlite_url, "spread", [now - 3600 * i for i in range(8)])
    _insert_compiles(sqlite_url, "burst", [now - i for i in range(5)])
    with enginemod.connection(sqlite_url) as conn:
        names = {s.qualname for s in diagnosis.detect_storms(conn, threshold=5, window=600)}
        assert names == {"burst"}
        assert not diagnosis.detect_storms(conn, threshold=6, window=600)
        assert {s.qualname for s in diagnosis.detect_storms(conn, threshold=5, window=8 * 3600)} == {
            "spread",
            "burst",
        }


def _insert_compiles(url: str, name: str, timestamps: list[float], run_id: str = "r" * 32, **fields) -> None:
    with enginemod.connection(url) as conn:
        conn.execute(
            sa.insert(models.runs).prefix_with("OR IGNORE"),
            [
                {
                    "run_id": run_id,
                    "started_at": fields.pop("started_at", 0.0),
                    "jax_version": fields.pop("jax_version", "0.10.2"),
                    "devices": [],
                }
            ],
        )
        conn.execute(
            sa.insert(models.functions).prefix_with("OR IGNORE"),
            [{"function_hash": name, "name": name, "qualname": name, "first_seen": 0.0}],
        )
        conn.execute(
            sa.insert(models.compile_events),
            [
                {
                    "event_id": uuid.uuid4().hex,
                    "function_hash": name,
                    "run_id": run_id,
                    "timestamp": t,
                    "kind": "trace",
                    "cause": Cause.NEW_SHAPE,
                    "compiled": True,
                    "nested": False,
                    "signature_hash": fields.get("signature_hash", "s"),
                    "compile_seconds": fields.get("seconds", 0.1),
                    "jaxpr_eqns": fields.get("eqns"),
                }
                for t in timestamps
            ],
        )
        rollup.rebuild(conn)  # rows written behind the writers' back: recount the totals


def test_the_read_module_hands_analysis_typed_rows(store_url, use_store):
    """What the errands reason over comes typed from their reads, on both backends."""
    use_store(store_url, eager_baseline=True)

    @cachewatch.jit
    def resized(x):
        return (x * 2.0).sum()

    line = resized.__wrapped__.__code__.co_firstlineno
    for size in (2, 3, 4, 5, 6, 7):
        resized(jnp.ones(size))
    assert cachewatch.flush(30)
    with enginemod.connection(store_url) as conn:
        (function_hash,) = queries.find_functions(conn, "resized")
        infos = queries.function_infos(conn, [function_hash])
        # The function's own (the read adds those of the lines that called it: eager code there).
        found = storm_reads.recompiles_past_first(conn, columns.Filters(), [function_hash])
        recompiles = [r for r, _ in found if r.function_hash == function_hash]
        costs = cost_reads.signature_costs(conn, columns.Filters(), [function_hash])
        sizes = [s for s in cost_reads.compile_sizes(conn, columns.Filters()) if s.function_hash == function_hash]
        uncached = [u for u in cost_reads.uncached_compiles(conn) if u.function_hash == function_hash]
        latest = storm_reads.dominant_cause_rows(conn, function_hash, columns.Filters(), Cause.NEW_SHAPE)

    info = infos[function_hash]
    assert isinstance(info, FunctionInfo)
    assert info.name == "resized"
    assert info.line == line
    assert recompiles
    assert all(isinstance(r, storm_reads.Recompile) for r in recompiles)
    assert {r.cause for r in recompiles} == {Cause.NEW_SHAPE}
    assert all(isinstance(r.timestamp, float) and r.diff and r.diff[0]["change"] == "shape" for r in recompiles)
    assert [r.timestamp for r in recompiles] == sorted(r.timestamp for r in recompiles)
    assert len(costs) == 6
    assert all(isinstance(c, cost_reads.SignatureCost) for c in costs)
    assert all(c.compiles == 1 and isinstance(c.seconds, float) and c.seconds > 0 for c in costs)
    assert all(c.eager_seconds is not None and c.eager_seconds > 0 for c in costs)
    assert len(sizes) == 6
    assert all(isinstance(s, cost_reads.CompileSize) and s.size > 0 for s in sizes)
    assert len(uncached) == 6
    assert {u.jax_version for u in uncached} == {jax.__version__}
    assert all(isinstance(u.run_started_at, float) and u.compile_seconds > 0 for u in uncached)
    assert len(latest) == 5
    assert all(isinstance(r, storm_reads.Recompile) for r in latest)
    assert [r.timestamp for r in latest] == sorted((r.timestamp for r in latest), reverse=True)


# ------------------------------------------------------------------ stale globals

THRESHOLD = 0.0
LEARNING_RATE = 0.01
LOG_EVERY = 10


def test_stale_global_is_flagged_without_changing_results(sqlite_url, use_store):
    global THRESHOLD
    use_store(sqlite_url, sample_every=1, sample_max_per_second=1000)

    @cachewatch.jit
    def clip(x):
        return jnp.maximum(x, THRESHOLD)

    THRESHOLD = 0.0
    assert float(clip(jnp.float32(-1.0))) == 0.0
    THRESHOLD = 10.0
    # The cached executable still uses 0.0: cachewatch reports it and changes nothing.
    assert float(clip(jnp.float32(-1.0))) == 0.0
    assert float(clip(jnp.float32(-1.0))) == 0.0
    assert cachewatch.flush(30)
    stale = [e for e in events_of(sqlite_url, "clip") if e["kind"] == Kind.STALE_CAPTURE]
    assert len(stale) == 1  # reported once per change, not once per call
    (event,) = stale
    assert event["diff"][0]["path"] == "THRESHOLD"
    assert (event["diff"][0]["before"], event["diff"][0]["after"]) == ("0.0", "10.0")
    assert "still uses the old value" in event["explanation"]
    traced = [e for e in events_of(sqlite_url, "clip") if e["kind"] == "trace"]
    assert traced[0]["captured"] == {"THRESHOLD": "0.0"}
    THRESHOLD = 0.0


def test_closure_cell_change_is_flagged(sqlite_url, use_store):
    use_store(sqlite_url, sample_every=1, sample_max_per_second=1000)
    offset = jnp.ones(2)

    @cachewatch.jit
    def shift(x):
        return x + offset

    shift(jnp.zeros(2))
    offset = jnp.full(2, 5.0)  # noqa: F841 - rebinding the captured cell is the point
    shift(jnp.zeros(2))
    assert cachewatch.flush(30)
    (event,) = [e for e in events_of(sqlite_url, "shift") if e["kind"] == Kind.STALE_CAPTURE]
    assert event["diff"][0]["path"] == "offset"
    assert event["diff"][0]["before"] == "float32[2] [1.0, 1.0]"


def test_a_captured_typed_key_is_read_and_its_change_flagged(sqlite_url, use_store):
    """A typed PRNG key (jax.random.key) has no NumPy form: its bits are what is compared."""
    use_store(sqlite_url, sample_every=1, sample_max_per_second=1000)
    noise_key = jax.random.key(1)

    @cachewatch.jit
    def noisy(x):
        return x + jax.random.normal(noise_key, x.shape)

    first = noisy(jnp.zeros(2))
    noise_key = jax.random.key(2)  # noqa: F841 - rebinding the captured cell is the point
    assert bool((noisy(jnp.zeros(2)) == first).all())  # the cached executable keeps the old key
    assert cachewatch.flush(30)
    (event,) = [e for e in events_of(sqlite_url, "noisy") if e["kind"] == Kind.STALE_CAPTURE]
    assert event["diff"][0]["path"] == "noise_key"


def test_pure_training_loop_has_no_stale_capture(sqlite_url, use_store):
    use_store(sqlite_url, sample_every=1, sample_max_per_second=1000)
    history = []  # mutated by the loop but never read inside the jitted function

    @cachewatch.jit
    def sgd_step(params, batch):
        grads = jax.grad(lambda p: ((batch["x"] @ p["w"] - batch["y"]) ** 2).mean())(params)
        return jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, params, grads)

    params = {"w": jnp.zeros((3, 1))}
    key = jax.random.PRNGKey(0)
    for step in range(60):
        key, sub = jax.random.split(key)
        batch = {"x": jax.random.normal(sub, (16, 3)), "y": jnp.ones((16, 1))}
        params = sgd_step(params, batch)
        if step % LOG_EVERY == 0:
            history.append(float(params["w"].sum()))
    assert cachewatch.flush(30)
    events = events_of(sqlite_url, "sgd_step")
    assert [e["kind"] for e in events] == ["trace"]
    assert events[0]["captured"] == {"LEARNING_RATE": "0.01"}


# ------------------------------------------------------------------ is jit worth it


def test_break_even_arithmetic():
    # 12 compiles costing 3.0 s in all, 41 calls; compiled run 0.01 s, eager 0.02 s.
    verdict = verdicts.jit_verdict(compile_seconds=3.0, compiles=12, calls=41, run_mean=0.01, eager_mean=0.02)
    assert verdict.few_calls
    assert verdict.break_even_calls == 25  # one compile, 0.25 s, over 0.01 s saved per call
    assert verdict.break_even_calls_total == 300  # all twelve
    assert verdict.jit_saves_seconds == pytest.approx(41 * 0.02 - (3.0 + 41 * 0.01))
    assert verdict.worth_it is False
    assert verdict.repaid is False
    assert verdict.compile_share == pytest.approx(3.0 / (3.0 + 0.41))
    assert verdict.text == (
        "compiled 12 time(s) for 41 call(s); compiling costs more than running: compile "
        "share 88.0% (3 s compiling, 0.41 s running); one compile is repaid after 25 calls "
        "(10 ms saved per call against eager); this run did not repay its compiles: jit "
        "costs 2.59 s more than running eagerly (it would pay off after 300 calls)"
    )
    paid = verdicts.jit_verdict(compile_seconds=0.5, compiles=1, calls=1000, run_mean=0.001, eager_mean=0.004)
    assert paid.worth_it
    assert paid.break_even_calls == 167
    assert not paid.few_calls
    assert paid.text == (
        "running costs more than compiling: compile share 33.3% (0.5 s compiling, 1 s running); "
        "one compile is repaid after 167 calls (3 ms saved per call against eager); this run "
        "repaid its compiles: jit saves 2.5 s over running eagerly"
    )
    slower = verdicts.jit_verdict(compile_seconds=0.5, compiles=1, calls=10, run_mean=0.004, eager_mean=0.001)
    assert slower.break_even_calls is None
    assert "eager is as fast per call" in slower.text


def test_verdict_agrees_with_the_compile_share():
    # A run whose compile share is 95.8% says compiling costs more, whatever the baseline.
    share = verdicts.jit_verdict(compile_seconds=2.3, compiles=1, calls=1000, run_mean=0.0001, eager_mean=None)
    assert share.compile_share == pytest.approx(0.958, abs=5e-4)
    assert share.text == (
        "compiling costs more than running: compile share 95.8% (2.3 s compiling, 0.1 s "
        "running); eager baseline off, so no break-even"
    )
    assert share.break_even_calls is None
    assert share.worth_it is None
    untimed = verdicts.jit_verdict(
        compile_seconds=1.0, compiles=3, calls=3, run_mean=None, eager_mean=None, run_note="called only while compiling"
    )
    assert untimed.text == (
        "compiled 3 time(s) for 3 call(s); no run time (called only while compiling), so no compile share"
    )
    # With an eager baseline, a run whose calls could not have saved the compile time says so.
    eager = verdicts.jit_verdict(
        compile_seconds=1.0, compiles=3, calls=3, run_mean=None, eager_mean=0.01, run_note="called only while compiling"
    )
    assert eager.repaid is False
    assert eager.text.endswith(
        "this run did not repay its compiles: 3 call(s) save at most 0.03 s against eager, for 1 s compiling"
    )


def test_eager_baseline_is_measured_once_per_signature(sqlite_url, use_store, capsys):
    use_store(sqlite_url)

    @functools.partial(cachewatch.jit, eager_baseline=True)
    def mlp(x):
        for _ in range(20):
            x = jnp.tanh(x @ jnp.eye(8) + 0.1)
        return x

    for _ in range(3):
        mlp(jnp.ones((4, 8)))
    for _ in range(2):  # the second call: a run time for this signature too
        mlp(jnp.ones((2, 8)))
    assert cachewatch.flush(30)
    events = events_of(sqlite_url, "mlp")
    assert len(events) == 2
    assert all((e["eager_run_seconds"] or 0) > 0 and (e["compiled_run_seconds"] or 0) > 0 for e in events)
    assert cli.main(["report", "--store", sqlite_url, "--format", "json"]) == 0
    (row,) = [r for r in json.loads(capsys.readouterr().out) if r["name"] == "mlp"]
    verdict = row["verdict"]
    assert verdict["eager_seconds_mean"] > 0
    assert verdict["worth_it"] is not None
    assert "eagerly" in verdict["text"]
    # The verdict's numbers are the report's, and each signature has its own break-even.
    assert verdict["compile_share"] == pytest.approx(row["compile_share"])
    assert f"compile share {100 * row['compile_share']:.1f}%" in verdict["text"]
    assert len(verdict["signatures"]) == 2
    for sig in verdict["signatures"]:
        assert sig["compiles"] == 1
        assert sig["run_seconds"] > 0
        assert sig["eager_seconds"] > 0
        saved = sig["eager_seconds"] - sig["run_seconds"]
        assert sig["break_even_calls"] == (math.ceil(sig["compile_seconds_per_compile"] / saved) if saved > 0 else None)


# ------------------------------------------------------------------ compile cost model


def test_cost_model_flags_superlinear_growth(sqlite_url):
    enginemod.ensure_schema(sqlite_url)
    for i, size in enumerate([10, 20, 40, 80, 160]):
        _insert_compiles(
            sqlite_url, "quadratic", [1000.0 + i], eqns=size, seconds=1e-5 * size**2, signature_hash=f"q{i}"
        )
        _insert_compiles(sqlite_url, "linear", [1000.0 + i], eqns=size, seconds=1e-3 * size, signature_hash=f"l{i}")
    with enginemod.connection(sqlite_url) as conn:
        rows = {r.qualname: r for r in costmodel.cost_model(conn)}
    assert rows["quadratic"].exponent == pytest.approx(2.0)
    assert rows["quadratic"].superlinear
    assert rows["linear"].exponent == pytest.approx(1.0)
    assert not rows["linear"].superlinear
    assert rows["linear"].seconds_per_1000_ops == pytest.approx(1.0)


def test_compile_regression_across_runs(sqlite_url):
    enginemod.ensure_schema(sqlite_url)
    _insert_compiles(
        sqlite_url, "step", [10.0, 11.0], run_id="a" * 32, started_at=1.0, jax_version="0.9.0", seconds=0.2
    )
    _insert_compiles(
        sqlite_url, "step", [20.0, 21.0], run_id="b" * 32, started_at=2.0, jax_version="0.10.2", seconds=0.5
    )
    _insert_compiles(sqlite_url, "steady", [10.0], run_id="a" * 32, seconds=0.2)
    _insert_compiles(sqlite_url, "steady", [20.0], run_id="b" * 32, seconds=0.21)
    with enginemod.connection(sqlite_url) as conn:
        (found,) = kept_regressions.compile_regressions(conn).shown
    assert found.qualname == "step"
    assert found.ratio == pytest.approx(2.5)
    assert found.jax_before.startswith("0.9.0")
    assert found.jax_after.startswith("0.10.2")


def test_report_lists_the_regressions_asked_for_and_counts_the_rest(sqlite_url, capsys):
    enginemod.ensure_schema(sqlite_url)
    for i, seconds in enumerate((0.1, 0.3, 0.7)):  # two rises: x3, then x2.3
        _insert_compiles(sqlite_url, "step", [10.0], run_id=f"{i}" * 32, started_at=float(i), seconds=seconds)
    assert cli.main(["report", "--store", sqlite_url, "--regressions", "1"]) == 0
    out = capsys.readouterr().out
    assert "step: 0.100s -> 0.300s" in out
    assert "0.300s -> 0.700s" not in out
    assert "... and 1 more" in out
    assert cli.main(["report", "--store", sqlite_url]) == 0
    out = capsys.readouterr().out
    assert "0.300s -> 0.700s" in out
    assert "more (--regressions N" not in out


def test_every_compile_records_its_program_size(sqlite_url, use_store):
    use_store(sqlite_url)  # the program view's, off the compile (cost_analysis is deprecated)

    @cachewatch.jit
    def dense(x):
        return jnp.tanh(x @ x.T).sum()

    dense(jnp.ones((8, 4)))
    assert cachewatch.flush(30)
    (event,) = events_of(sqlite_url, "dense")
    assert (event["hlo_ops"] or 0) >= 3
    assert (event["jaxpr_eqns"] or 0) >= 3
    assert event["flops"]
    assert event["flops"] >= 8 * 8 * 4


def test_diagnosis_through_the_api(sqlite_url, use_store):
    from cachewatch_server.main import create_app
    from cachewatch_server.settings import ServerSettings
    from fastapi.testclient import TestClient

    use_store(sqlite_url)

    @functools.partial(cachewatch.jit, eager_baseline=True)
    def layer(x):
        return jnp.tanh(x @ x.T)

    for n in (2, 3, 4):
        layer(jnp.ones((n, 4)))
    assert cachewatch.flush(30)
    _insert_compiles(sqlite_url, "slow_step", [10.0], run_id="a" * 32, started_at=1.0, seconds=0.1)
    _insert_compiles(sqlite_url, "slow_step", [20.0], run_id="b" * 32, started_at=2.0, seconds=0.4)
    with TestClient(create_app(ServerSettings(store=sqlite_url))) as client:
        body = client.get("/api/v1/diagnosis").json()
        (layer_hash,) = [h for h, v in body["verdicts"].items() if v["compiles"] == 3]
        assert body["verdicts"][layer_hash]["eager_seconds_mean"] > 0
        assert body["verdicts"][layer_hash]["few_calls"] is True
        assert [r["qualname"] for r in body["regressions"]] == ["slow_step"]
        assert body["regressions_total"] == 1
        assert any(row["function_hash"] == layer_hash for row in body["cost_model"])
        unlisted = client.get("/api/v1/diagnosis?regressions_limit=0").json()
        assert unlisted["regressions"] == []
        assert unlisted["regressions_total"] == 1
        assert client.get("/api/v1/diagnosis?regressions_limit=-1").status_code == 422
        detail = client.get(f"/api/v1/functions/{layer_hash}").json()
        assert detail["verdict"]["text"] == body["verdicts"][layer_hash]["text"]


def test_stale_capture_check_can_be_turned_off(sqlite_url, use_store):
    global THRESHOLD
    use_store(sqlite_url, sample_every=1, sample_max_per_second=1000, stale_capture_check=False)

    @cachewatch.jit
    def floor_at(x):
        return jnp.maximum(x, THRESHOLD)

    THRESHOLD = 0.0
    floor_at(jnp.float32(-1.0))
    THRESHOLD = 10.0
    floor_at(jnp.float32(-1.0))  # a sampled call
    floor_at(jnp.ones(3))  # a new trace
    assert cachewatch.flush(30)
    assert [e["kind"] for e in events_of(sqlite_url, "floor_at")] == ["trace", "trace"]
    THRESHOLD = 0.0


def test_a_storm_of_a_librarys_jit_advises_on_the_calls_not_on_its_options():
    """jax.random.normal's inner jit, wrapped because install() came before JAX's import,
    recompiles per shape: the user cannot unmark its static argument, only pass fewer shapes."""
    rows = [
        storm_reads.Recompile(
            "h",
            "run",
            float(i),
            Cause.NEW_STATIC_VALUE,
            [{"path": "shape", "change": "static", "before": f"({i},)", "after": f"({i + 1},)"}],
            "train.py:65",
        )
        for i in range(6)
    ]
    fix = fixes.fix_for("_normal", "_normal", "jax._src.random", Cause.NEW_STATIC_VALUE, rows)
    assert "static argument shape took 7 different values" in fix
    assert "train.py:65" in fix
    assert "drop it from static_argnums" not in fix  # not the user's to change
    mine = fixes.fix_for("smooth", "smooth", "train", Cause.NEW_STATIC_VALUE, rows, file="/home/me/train.py")
    assert "drop it from static_argnums" in mine


def test_a_function_traced_inside_another_jit_is_not_told_as_recompiled(store):
    """A jit called inside another is traced there (a trace event with a cause, no compile
    of its own); compiled once on its own, at a shape of its own, it has no recompile: its
    first compile in the run is a first call, and the report's recompile causes, which the
    runner's summary prints as "recompiled for", leave the traces out."""

    @cachewatch.jit
    def nested_part(x):
        return jnp.tanh(x) * 2.0

    @cachewatch.jit
    def nesting_step(x):
        return nested_part(x).sum()

    nesting_step(jnp.ones(3))
    nesting_step(jnp.ones(5))  # nested_part traced again inside it, at a new shape
    nested_part(jnp.ones(7))  # its one compile of its own
    assert cachewatch.flush(30)
    with enginemod.connection(store) as conn:
        (row,) = [r for r in queries.function_report(conn) if r["name"] == "nested_part"]
    assert row["compiles"] == 1
    assert row["recompiles"] == 0
    assert sum(n for cause, n in row["causes"].items() if cause != Cause.FIRST_CALL) >= 1  # its traces
    assert row["recompile_causes"] == {}
    (compiled,) = [e for e in events_of(store, "nested_part") if e["compiled"]]
    assert compiled["cause"] == Cause.FIRST_CALL
    assert "traced before inside another jit" in compiled["explanation"]
