"""Run time of a call, sampled from the calls, and the compile share it gives: every
function that ran a call after compiling has one, and one that has none says why."""

from __future__ import annotations

import json
import math
import time

import jax
import jax.numpy as jnp
import pytest
import serverkit as kit
import sqlalchemy as sa
from cachewatch_server.main import create_app
from cachewatch_server.settings import ServerSettings
from fastapi.testclient import TestClient

import cachewatch
from cachewatch import cli
from cachewatch.capture.counters import _stats
from cachewatch.core import runtimes
from cachewatch.payoff import costmodel
from cachewatch.record import current
from cachewatch.store import columns, models, rollup
from cachewatch.store import engine as enginemod
from cachewatch.store import queries as storequeries


def service(url: str) -> TestClient:
    return TestClient(create_app(ServerSettings(store=url, write_token=None, read_token=None)))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> kit.Recorded:
    # Real events from a scratch store; the test posts them to the service.
    current.configure(store=f"sqlite:///{tmp_path_factory.mktemp('lib') / 'lib.db'}")
    return kit.run_jax_workload()


def report_row(url: str, name: str) -> columns.FunctionReport:
    with enginemod.connection(url) as conn:
        rows = [r for r in storequeries.function_report(conn) if r["name"] == name]
    assert len(rows) == 1, rows
    return rows[0]


def stats_of(fn) -> cachewatch.capture.counters.CallCounter:
    return _stats[fn.__cachewatch_state__.info.function_hash]


# ------------------------------------------------------------------ sampling in a loop
# How close the recorded run time comes to a stopwatch depends on the machine: that
# figure is benchmarks/run_time.py's. Here, what holds on any machine: exact counts of
# calls and timed calls, and each timed call measured inside the caller's own timing.


def test_pipelined_loop_samples_exactly_and_within_its_wall_time(sqlite_url, use_store):
    # A jitted SGD step called back to back, never blocked: JAX queues the calls. A timed
    # call waits for its inputs first, so the queue is not part of its time.
    use_store(sqlite_url, sample_every=20, sample_max_per_second=50)

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
    stats = stats_of(sgd_step)
    calls, seconds = stats.calls, stats.sampled_seconds
    start = time.perf_counter()
    for _ in range(400):  # a fixed count, not a fixed time: the counts below are exact
        params = sgd_step(params, x, y)
    jax.block_until_ready(params)
    wall = time.perf_counter() - start
    assert stats.calls - calls == 400
    # Timed calls run one after another inside the loop, so together they fit in it.
    assert 0 < stats.sampled_seconds - seconds <= wall
    assert cachewatch.flush(30)
    row = report_row(sqlite_url, "sgd_step")
    # The compile, then the first cache hit and every 20th call after it (19 in all stay
    # under the cap of 50 a second, however fast the machine).
    assert (row["calls"], row["sampled_calls"]) == (401, 20)
    mean = row["run_seconds_mean"]
    assert mean is not None
    assert 0 < mean < math.inf
    assert row["run_seconds_est"] == pytest.approx(row["calls"] * mean)


def test_blocked_kernel_samples_exactly_and_within_its_stopwatch(sqlite_url, use_store):
    # Each call blocked by the caller: every timed call lies inside one stopwatch reading.
    use_store(sqlite_url, sample_every=2, sample_max_per_second=1000)

    @cachewatch.jit
    def matmul(a, b):
        return a @ b

    a = jnp.ones((384, 384)) / 384
    jax.block_until_ready(matmul(a, a))
    stopwatch = []
    for _ in range(41):
        start = time.perf_counter()
        jax.block_until_ready(matmul(a, a))
        stopwatch.append(time.perf_counter() - start)
    assert cachewatch.flush(30)
    row = report_row(sqlite_url, "matmul")
    # The compile, the first cache hit, then every second call: calls 4, 6, ... 42.
    assert (row["calls"], row["sampled_calls"]) == (42, 21)
    # No timed call outlasts the call around it; the run time is a bucket's centre, within
    # 2 ** (1 / 16) of the times in the bucket.
    mean = row["run_seconds_mean"]
    assert mean is not None
    assert 0 < mean <= max(stopwatch) * 2 ** (1 / 16)
    assert row["run_seconds_est"] == pytest.approx(42 * mean)


# ------------------------------------------------------------------ every function gets a compile share


def test_short_run_has_a_compile_share_in_report_and_api(sqlite_url, use_store, capsys, hot_path):
    use_store(sqlite_url)  # the default: 1 call in 100 timed

    @cachewatch.jit
    def short(x):
        return jnp.sin(x) * 2

    for _ in range(3):  # one compile, then two cache hits
        short(jnp.ones(16))
    assert cachewatch.flush(30)
    assert cli.main(["report", "--store", sqlite_url, "--format", "json"]) == 0
    (row,) = [r for r in json.loads(capsys.readouterr().out) if r["name"] == "short"]
    assert row["calls"] == 3
    assert row["sampled_calls"] == 1
    assert 0 < row["compile_share"] < 1
    assert row["run_time_note"] is None
    assert row["run_seconds_est"] == pytest.approx(3 * row["run_seconds_mean"])
    # The verdict states the same share.
    assert f"compile share {100 * row['compile_share']:.1f}%" in row["verdict"]["text"]
    assert "eager baseline off" in row["verdict"]["text"]
    with service(sqlite_url) as client:
        items = client.get("/api/v1/functions").json()["items"]
        summary = client.get("/api/v1/summary").json()
    (api_row,) = [r for r in items if r["name"] == "short"]
    assert api_row["compile_share"] == pytest.approx(row["compile_share"])
    assert summary["compile_share"] is not None
    assert summary["run_time_note"] is None


def test_every_signature_gets_a_run_time(sqlite_url, use_store, hot_path):
    use_store(sqlite_url)

    @cachewatch.jit
    def scale(x):
        return x * 3

    for n in (4, 4, 8, 8, 8, 16):  # 16 compiles on its only call: nothing to time
        scale(jnp.ones(n))
    pending = stats_of(scale).take_samples()
    assert len(pending) == 2
    assert all(sum(v[0] for v in buckets.values()) == 1 for buckets, _ in pending.values())


def test_without_a_timed_call_the_report_says_why(sqlite_url, use_store, capsys):
    use_store(sqlite_url, sample_every=0)

    @cachewatch.jit
    def untimed(x):
        return x - 1

    for _ in range(4):
        untimed(jnp.ones(3))
    for _i in range(3):  # a new jit object per call: every call compiles
        cachewatch.jit(lambda x: x * 2)(jnp.ones(3))
    assert cachewatch.flush(30)
    assert cli.main(["report", "--store", sqlite_url, "--format", "json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["untimed"]["compile_share"] is None
    assert rows["untimed"]["run_time_note"] == "sampling off"
    assert rows["<lambda>"]["run_time_note"] == "called only while compiling"
    assert "no run time (sampling off)" in rows["untimed"]["verdict"]["text"]


def test_first_hit_sample_is_never_rate_capped(sqlite_url, use_store):
    use_store(sqlite_url, sample_every=1, sample_max_per_second=1)

    @cachewatch.jit
    def capped(x):
        return x + 2

    for n in (2, 2, 2, 3, 3):
        capped(jnp.ones(n))
    # 1 per second allows the first shape's first hit; the second shape's is timed anyway.
    assert len(stats_of(capped).take_samples()) == 2


# ------------------------------------------------------------------ the statistic


def test_one_slow_call_cannot_move_the_run_time():
    buckets: runtimes.Buckets = {}
    for seconds in (0.010, 0.011, 0.010, 0.0105, 0.200):
        runtimes.add_sample(buckets, seconds)
    assert runtimes.median_seconds(buckets) == pytest.approx(0.0105, rel=0.05)
    two: runtimes.Buckets = {}
    runtimes.add_sample(two, 0.001)
    runtimes.add_sample(two, 0.5)
    assert runtimes.median_seconds(two) == pytest.approx(0.001, rel=0.05)  # the faster of two
    assert runtimes.median_seconds({}) is None
    # Three timed calls in a stall, standing for 5 calls each, against two standing for
    # 100 each: the median call ran at the free speed.
    stalled: runtimes.Buckets = {}
    for seconds, weight in ((0.01, 100), (0.01, 100), (0.05, 5), (0.05, 5), (0.05, 5)):
        runtimes.add_sample(stalled, seconds, weight)
    assert runtimes.median_seconds(stalled) == pytest.approx(0.01, rel=0.05)


def test_signatures_are_weighted_by_the_calls_they_stand_for(sqlite_url):
    # A small shape called 900 times at 1 ms, a big one 100 times at 10 ms: one call
    # costs 1.9 ms on average, not the 5.5 ms of averaging the two signatures.
    enginemod.ensure_schema(sqlite_url)
    small: runtimes.Buckets = {}
    big: runtimes.Buckets = {}
    runtimes.add_sample(small, 0.001, weight=900)
    runtimes.add_sample(big, 0.010, weight=100)
    with enginemod.connection(sqlite_url) as conn:
        conn.execute(sa.insert(models.runs), [{"run_id": "r" * 32, "started_at": 0.0, "devices": []}])
        conn.execute(
            sa.insert(models.functions), [{"function_hash": "f", "name": "f", "qualname": "f", "first_seen": 0.0}]
        )
        stats = [
            {
                "run_id": "r" * 32,
                "function_hash": "f",
                "timestamp": 1.0,
                "calls": 1000,
                "sampled_calls": 1,
                "sampled_seconds": 0.001,
                "signature_hash": "small",
                "run_buckets": runtimes.to_json(small),
                "sample_every": 100,
            },
            {
                "run_id": "r" * 32,
                "function_hash": "f",
                "timestamp": 1.0,
                "calls": 0,
                "sampled_calls": 1,
                "sampled_seconds": 0.010,
                "signature_hash": "big",
                "run_buckets": runtimes.to_json(big),
                "sample_every": 100,
            },
        ]
        conn.execute(sa.insert(models.call_stats), stats)
        rollup.add_call_stats(conn, stats)
        (total,) = storequeries.call_totals(conn)
        (by_run,) = storequeries.call_totals(conn, columns.Filters(run_id="r" * 32))
        per_signature = storequeries.signature_run_times(conn)["f"]
    assert total.run_seconds_per_call == pytest.approx(0.0019, rel=0.05)
    assert by_run.run_seconds_per_call == pytest.approx(total.run_seconds_per_call)
    assert per_signature["small"]["run_seconds"] == pytest.approx(0.001, rel=0.05)
    assert per_signature["big"]["weight"] == 100


def test_ingest_keeps_one_row_per_signature(sqlite_url, recorded):
    now = time.time()
    step = recorded.function("step")
    rows = [
        kit.stats(recorded.run, step, now, calls=30, sampled=1, seconds=0.002),
        kit.stats(recorded.run, step, now, calls=0, sampled=1, seconds=0.02),
    ]
    rows = [
        type(r)(
            **{
                **{f: getattr(r, f) for f in r.__dataclass_fields__},
                "signature_hash": sig,
                "run_buckets": runtimes.to_json({runtimes.bucket_of(r.sampled_seconds): [1, 15]}),
                "sample_every": 100,
            }
        )
        for r, sig in zip(rows, ("a", "b"), strict=False)
    ]
    with service(sqlite_url) as client:
        body = kit.payload(recorded.run, recorded.events, rows)
        assert client.post("/api/v1/events", json=body).json()["stored_stats"] == 2
        assert client.post("/api/v1/events", json=body).json()["stored_stats"] == 0
        bad = kit.payload(recorded.run, [], [rows[0]])
        bad["stats"][0]["run_buckets"] = {"x": [1, 1]}
        assert client.post("/api/v1/events", json=bad).status_code == 422
        (row,) = [r for r in client.get("/api/v1/functions").json()["items"] if r["name"] == "step"]
    # Two signatures, 15 calls each: the mean of 2 ms and 20 ms.
    assert row["run_seconds_mean"] == pytest.approx(0.011, rel=0.05)


# ------------------------------------------------------------------ the cost model


def test_cost_model_gives_no_exponent_from_too_few_points(sqlite_url):
    from test_analysis import _insert_compiles

    enginemod.ensure_schema(sqlite_url)
    for i, size in enumerate([10, 20, 40, 80]):
        _insert_compiles(sqlite_url, "four", [1000.0 + i], eqns=size, seconds=1e-5 * size**2.6, signature_hash=f"f{i}")
    with enginemod.connection(sqlite_url) as conn:
        (row,) = costmodel.cost_model(conn)
    assert row.points == 4
    assert row.exponent is None
    assert not row.superlinear
    assert row.note is not None
    assert "from 4 compile(s)" in row.note
