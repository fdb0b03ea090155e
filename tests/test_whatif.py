"""What a fix would buy: a real storm (11 batch sizes over a few hundred steps) recorded
with cachewatch, priced by ``whatif`` under each padding policy, and the padded program
run to count JAX's own compiles against the prediction. Counts and structure only: no
assertion rests on a timing."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import serverkit as kit
import sqlalchemy as sa
from cachewatch_server.main import create_app
from cachewatch_server.settings import ServerSettings
from conftest import new_run
from fastapi.testclient import TestClient
from scenarios import jax_compile_count, jax_compile_log
from test_dashboard import SCREENSHOTS, Tab, chromium  # noqa: F401 - chromium is a fixture used here

import cachewatch
from cachewatch import cli
from cachewatch.core.events import FunctionInfo
from cachewatch.record import current
from cachewatch.store import engine as enginemod
from cachewatch.store.runs import RunNotFound
from cachewatch.storms import diagnosis
from cachewatch.whatif import policies, prices, whatif_reads
from cachewatch.whatif.whatif_reads import CompileRecord, Leaf, RunEvidence, TimedSignature

SIZES = (9, 10, 12, 14, 17, 20, 23, 26, 28, 30, 32)
STEPS = 264


def make_step():
    """A fresh function object each time, so JAX's cache starts cold for it."""

    def storm_step(w, batch):
        return jnp.mean((jnp.tanh(batch["x"] @ w) - batch["y"][:, None]) ** 2)

    return storm_step


def batches(pad=lambda n: n):
    rng = np.random.default_rng(0)
    made = {}
    for n in SIZES:
        x = rng.standard_normal((n, 4)).astype(np.float32)
        y = rng.standard_normal(n).astype(np.float32)
        b = pad(n)
        made[n] = {"x": np.pad(x, ((0, b - n), (0, 0))), "y": np.pad(y, (0, b - n))}
    # A storm: sizes in a scrambled order, each met many times.
    return [made[SIZES[(i * 7) % len(SIZES)]] for i in range(STEPS)]


@pytest.fixture(scope="module")
def storm(tmp_path_factory):
    """The storm recorded, every call timed (so the run time can be fitted)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('whatif') / 'store.db'}"
    current.reset_configuration()
    current.configure(store=url, sample_every=1, sample_max_per_second=1e6)
    new_run()
    w = np.ones((4, 2), np.float32)
    step = cachewatch.jit(make_step())
    with jax_compile_log() as log:
        for batch in batches():
            step(w, batch)

        @cachewatch.jit
        def one_shape(x):
            return x * 2

        for _ in range(30):
            one_shape(np.ones(5, np.float32))
    assert cachewatch.flush(30)
    run_id = current.run_id()
    current.reset_configuration()
    assert jax_compile_count(log, "storm_step") == len(SIZES)
    return url, run_id


def price(url: str, name: str, policy: str, axis: str | None = None, fallback: str | None = None) -> policies.Whatif:
    with enginemod.connection(url) as conn:
        function = whatif_reads.find_function(conn, name)
        run_id, run_name = whatif_reads.run_of(conn, function.function_hash, None)
        found = whatif_reads.evidence(conn, function, run_id, run_name)
    return prices.analyse(
        found,
        policies.parse_policy(policy),
        policies.parse_axis(axis) if axis else None,
        fallback=policies.parse_policy(fallback) if fallback else None,
    )


def padded_compiles(bucket_of) -> int:
    """Run the storm padded as the policy says and count JAX's compiles of it."""
    w = np.ones((4, 2), np.float32)
    step = jax.jit(make_step())
    with jax_compile_log() as log:
        for batch in batches(bucket_of):
            step(w, batch)
    return jax_compile_count(log, "storm_step")


@pytest.mark.parametrize("policy", ["pow2", "multiple:8", "ladder:12,20,32", "ladder:16", "auto", "auto:3"])
def test_each_policy_predicts_jax_compile_count(storm, policy):
    url, _ = storm
    result = price(url, "storm_step", policy)
    assert (result.path, result.axis) == ("batch['x']", 0)
    assert result.along == ("batch['y'] axis 0",)  # the labels are padded with the inputs
    assert [s.size for s in result.sizes] == sorted(SIZES)
    assert result.recorded.compiles == len(SIZES)
    assert result.price is not None
    rungs = result.price.buckets
    expected = padded_compiles(lambda n: next((b for b in rungs if b >= n), n))
    assert result.price.compiles == expected
    if policy == "pow2":
        assert rungs == (16, 32)
        assert expected == 2
    if policy == "ladder:16":  # sizes above the ladder stay as they are
        assert expected == 1 + sum(1 for n in SIZES if n > 16)


def test_auto_is_no_worse_than_pow2_on_the_run_figures(storm):
    url, _ = storm
    auto = price(url, "storm_step", "auto")
    pow2 = price(url, "storm_step", "pow2")
    assert auto.run_fit is not None
    assert auto.run_fit.points >= prices.MIN_TIMED_SIZES
    assert auto.price is not None
    assert pow2.price is not None
    assert auto.price.total_seconds is not None
    assert pow2.price.total_seconds is not None
    assert auto.price.total_seconds <= pow2.price.total_seconds + 1e-12
    # The curve: the cheapest ladder of 1, 2, ... buckets, each ending at the largest size.
    assert [len(p.buckets) for p in auto.curve] == list(range(1, len(auto.curve) + 1))
    assert len(auto.curve) >= 2
    assert all(p.buckets[-1] == max(SIZES) and p.compiles == len(p.buckets) for p in auto.curve)
    assert auto.price in auto.curve
    assert price(url, "storm_step", "auto", fallback="pow2") == auto, "a run time to weigh: no fallback"
    assert min(p.total_seconds or 0.0 for p in auto.curve) == auto.price.total_seconds
    # Padding never makes the run cheaper, and the executables kept are the buckets.
    assert all(p.padded_run_seconds is not None and p.padded_run_seconds >= 0 for p in auto.curve)
    assert pow2.price.executables == 2
    assert pow2.recorded.executables == len(SIZES)


def test_the_priced_fix_sentence(storm):
    url, run_id = storm
    pow2 = price(url, "storm_step", "pow2")
    sentence = prices.fix_sentence(pow2)
    assert sentence is not None
    assert re.fullmatch(
        r"pad batch\['x'\] axis 0 to 16, 32: 2 compiles instead of 11, saves \S+ \S+ of \S+ \S+ compiling, "
        r"adds \S+ \S+ of padded compute",
        sentence,
    ), sentence
    with enginemod.connection(url) as conn:
        function = whatif_reads.find_function(conn, "storm_step")
        priced = prices.priced_fix(conn, function.function_hash, run_id)
        assert priced is not None
        assert priced.startswith("pad batch['x'] axis 0 to ")
        one_shape = whatif_reads.find_function(conn, "one_shape")
        assert prices.priced_fix(conn, one_shape.function_hash, run_id) is None
        # Many storms priced together: each as alone, in order (a run without it: nothing to pad).
        together = prices.priced_fixes(
            conn, [(one_shape, run_id), (function, run_id), (function, "0" * 32), (function, run_id)]
        )
        assert together == [None, priced, None, priced]
        alone = whatif_reads.evidence(conn, function, run_id)
        (read_together,) = whatif_reads.evidence_of_many(conn, [(function, run_id)])
        assert read_together.compiles == alone.compiles
        assert (read_together.calls, read_together.timed) == (alone.calls, alone.timed)


def test_a_single_shape_has_nothing_to_pad(storm, capsys):
    url, _ = storm
    result = price(url, "one_shape", "pow2")
    assert result.price is None
    assert result.path is None
    assert "nothing to pad" in result.nothing_to_pad
    assert cli.main(["whatif", "one_shape", "--store", url]) == 0
    assert "nothing to pad" in capsys.readouterr().out


def test_the_command_prints_a_table_and_json(storm, capsys):
    url, run_id = storm
    assert cli.main(["whatif", "storm_step", "--store", url, "--run", run_id[:12], "--pad", "auto:4"]) == 0
    out = capsys.readouterr().out
    assert "batch['x'] axis 0 (with batch['y'] axis 0): 11 sizes" in out
    assert "auto: the cheapest ladder of each number of buckets" in out
    assert cli.main(["whatif", "storm_step", "--store", url, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["price"]["policy"] == "pow2"
    assert data["price"]["compiles"] == 2
    assert {"compiles", "compile_seconds", "padded_run_seconds", "total_seconds"} <= set(data["price"])
    assert data["fix"].startswith("pad batch['x'] axis 0 to 16, 32: 2 compiles instead of 11")


def _store_state(url: str) -> tuple[str, tuple[int, ...]]:
    path = Path(url.removeprefix("sqlite:///"))
    with enginemod.connection(url) as conn:
        counts = tuple(
            int(conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one())
            for t in ("runs", "functions", "compile_events", "call_stats")
        )
    return hashlib.sha256(path.read_bytes()).hexdigest(), counts


@pytest.mark.parametrize(
    "args, message",
    [
        (["nope"], "no function named 'nope'"),
        (["storm_step", "--run", "nope"], "no run has the id, run name or job 'nope'"),
        (["storm_step", "--pad", "pow3"], "not a padding policy: 'pow3'"),
        (["storm_step", "--pad", "ladder:32,16"], "a ladder's buckets must rise"),
        (["storm_step", "--pad", "multiple:0"], "must be 1 or more"),
        (["storm_step", "--pad", "auto:x"], "must be a whole number"),
        (["storm_step", "--axis", "batch['x']:1"], "batch['x'] axis 1 never varied in this run: it was 4"),
        (["storm_step", "--axis", "batch['x']:5"], "batch['x'] has no axis 5"),
        (["storm_step", "--axis", "labels:0"], "no array argument 'labels'"),
        (["storm_step", "--axis", "batch"], "not an axis: 'batch'"),
    ],
)
def test_bad_input_exits_2_and_changes_nothing(storm, capsys, args, message):
    url, _ = storm
    before = _store_state(url)
    assert cli.main(["whatif", *args, "--store", url]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.startswith("cachewatch whatif: ")
    assert _store_state(url) == before


def test_the_service_prices_a_policy_and_refuses_bad_input(storm):
    url, run_id = storm
    with enginemod.connection(url) as conn:
        h = whatif_reads.find_function(conn, "storm_step").function_hash
    before = _store_state(url)
    with TestClient(create_app(ServerSettings(store=url))) as client:
        ok = client.get(f"/api/v1/functions/{h}/whatif", params={"policy": "pow2", "run_id": run_id})
        assert ok.status_code == 200, ok.text
        body = ok.json()
        assert body["price"]["compiles"] == 2
        assert body["recorded"]["compiles"] == len(SIZES)
        assert body["fix"].startswith("pad batch['x'] axis 0 to 16, 32: 2 compiles instead of 11")
        auto = client.get(f"/api/v1/functions/{h}/whatif", params={"policy": "auto:4"}).json()
        assert [len(p["buckets"]) for p in auto["curve"]] == [1, 2, 3, 4]
        for params, status, where in [
            ({"policy": "pow3"}, 422, "policy"),
            ({"policy": "pow2", "axis": "batch['x']:1"}, 422, "axis"),
            ({"policy": "pow2", "axis": "x"}, 422, "axis"),
            ({"policy": "pow2", "run_id": "nope"}, 404, None),
        ]:
            r = client.get(f"/api/v1/functions/{h}/whatif", params=params)
            assert r.status_code == status, (params, r.text)
            if where:
                assert r.json()["detail"][0]["loc"] == ["query", where]
        assert client.get("/api/v1/functions/0123abc/whatif").status_code == 404
    assert _store_state(url) == before


# ------------------------------------------------------------------ the reasoning alone


FN = FunctionInfo("f" * 20, "step", "step", "m", "m.py", 1)


def _compile(i: int, size: int, cause: str = "new_shape", **kw) -> CompileRecord:
    leaves = (Leaf("x", False, (size, 3), "float32", kw.pop("weak", False)),)
    return CompileRecord(
        f"e{i}",
        float(i),
        cause,
        kw.pop("sig", f"s{size}"),
        leaves,
        0.5,
        0.4,
        1000 * size,
        kw.pop("identical", None),
        None,
        "cpu",
    )


def test_too_few_timed_signatures_refuse_to_price_run_time():
    ev = RunEvidence(
        FN,
        "r1",
        "",
        tuple(_compile(i, n, "first_call" if i == 0 else "new_shape") for i, n in enumerate((3, 5, 6, 7))),
        400,
        (TimedSignature("s3", 10, 100, 0.001), TimedSignature("s5", 10, 100, 0.002)),
        100,
    )
    result = prices.analyse(ev, policies.parse_policy("pow2"))
    assert result.run_fit is None
    assert "a fit needs 3" in result.run_fit_note
    assert result.price is not None
    assert result.price.compiles == 2
    assert result.price.padded_run_seconds is None
    assert result.price.total_seconds is None
    assert result.price.executable_bytes == 1000 * (4 + 8)  # fitted: linear in the size
    assert "padded compute not priced" in (prices.fix_sentence(result) or "")
    with pytest.raises(policies.WhatifError, match="auto cannot weigh padding against compiles"):
        prices.analyse(ev, policies.parse_policy("auto"))
    # With a fallback, the same reading of the run prices it instead (a storm's price).
    assert prices.analyse(ev, policies.parse_policy("auto"), fallback=policies.parse_policy("pow2")) == result


def test_other_fixes_are_priced_from_the_run():
    compiles = (
        _compile(0, 4, "first_call"),
        _compile(1, 4, "new_function_object", identical="e0"),
        _compile(2, 4, "weak_type", sig="w4", weak=True, identical="e0"),
    )
    ev = RunEvidence(FN, "r1", "", compiles, 3, (), 100)
    result = prices.analyse(ev, policies.parse_policy("pow2"))
    assert "nothing to pad" in result.nothing_to_pad
    fixes = {f.fix: f for f in result.fixes}
    # The weak-type flip's identical program is the weak-type fix's, not hoisting's.
    assert fixes["hoist_jit"].compiles_after == 2
    assert fixes["hoist_jit"].seconds_saved == pytest.approx(0.5)
    assert fixes["weak_type"].compiles_after == 2
    assert fixes["persistent_cache"].seconds_saved == pytest.approx(1.2)
    assert "jax_persistent_cache_min_compile_time_secs=0" in fixes["persistent_cache"].text


def test_a_compile_that_empties_the_cache_happens_under_every_policy():
    sizes = (3, 5, 3, 6)
    causes = ("first_call", "new_shape", "cache_cleared", "new_shape")
    ev = RunEvidence(
        FN, "r1", "", tuple(_compile(i, n, c) for i, (n, c) in enumerate(zip(sizes, causes, strict=False))), 4, (), 1
    )
    result = prices.analyse(ev, policies.parse_policy("ladder:8"))
    # 8 compiled, the cache cleared and 8 compiled again; 6 pads into it.
    assert result.price is not None
    assert result.price.compiles == 2
    assert result.recorded.compiles == 4


def test_unknown_names_raise_lookup_errors(storm):
    url, _ = storm
    with enginemod.connection(url) as conn:
        with pytest.raises(whatif_reads.FunctionNotFound):
            whatif_reads.find_function(conn, "nope")
        h = whatif_reads.find_function(conn, "storm_step").function_hash
        with pytest.raises(RunNotFound):
            whatif_reads.run_of(conn, h, "feedbeef")


# ------------------------------------------------------------------ the dashboard, in Chromium


@pytest.fixture(scope="module")
def live(storm):
    with kit.live_server(create_app(ServerSettings(store=storm[0]))) as server:
        yield server


@pytest.fixture
def tab(chromium, live):  # noqa: F811 - the fixture imported above
    context = chromium.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20000)
    opened = Tab(page, live.url, SCREENSHOTS / "whatif")
    try:
        yield opened
        opened.assert_clean()
    finally:
        context.close()


def test_the_function_page_draws_the_ladder_curve(tab, storm):
    url, run_id = storm
    with enginemod.connection(url) as conn:
        h = whatif_reads.find_function(conn, "storm_step").function_hash
        one = whatif_reads.find_function(conn, "one_shape").function_hash
    with TestClient(create_app(ServerSettings(store=url))) as client:
        auto = client.get(f"/api/v1/functions/{h}/whatif", params={"policy": "auto"}).json()
    tab.open(f"/functions/{h}?run_id={run_id}")
    chart = tab.chart("chart-ladder")
    assert chart["plotly"]
    assert chart["drawn"] >= 1
    assert chart["alternative"]
    lines = {t["name"]: t for t in chart["traces"]}
    assert set(lines) == {"compile seconds", "padded run seconds", "total seconds", "cheapest"}
    assert lines["total seconds"]["x"] == [len(p["buckets"]) for p in auto["curve"]]
    assert lines["total seconds"]["y"] == pytest.approx([p["total_seconds"] for p in auto["curve"]])
    assert lines["cheapest"]["x"] == [len(auto["price"]["buckets"])]
    rows = tab.page.eval_on_selector_all(
        "#ladder-curve tbody tr", "rows => rows.map(r => [Number(r.dataset.buckets), Number(r.dataset.compiles)])"
    )
    assert rows == [[len(p["buckets"]), p["compiles"]] for p in auto["curve"]]
    fix = tab.page.locator("#padding-fix")
    assert fix.get_attribute("data-compiles") == str(auto["price"]["compiles"])
    assert fix.inner_text().startswith("Pad batch['x'] axis 0 to ")
    tab.shot("function-storm_step-ladder")
    # One shape: no padding section at all.
    tab.open(f"/functions/{one}")
    assert tab.page.locator("#padding").count() == 0


def test_auto_over_many_sizes_chooses_among_a_bounded_set_of_rungs():
    sizes = list(range(1, 601))
    compiles = tuple(_compile(i, n, "first_call" if i == 0 else "new_shape") for i, n in enumerate(sizes))
    timed = tuple(TimedSignature(f"s{n}", 1, 10, 1e-4 + 1e-6 * n) for n in sizes)
    ev = RunEvidence(FN, "r1", "", compiles, 10 * len(sizes), timed, 1)
    result = prices.analyse(ev, policies.parse_policy("auto:5"))
    assert [len(p.buckets) for p in result.curve] == [1, 2, 3, 4, 5]
    assert all(p.buckets[-1] == 600 and p.compiles == len(p.buckets) for p in result.curve)
    assert result.price is not None
    assert result.price.total_seconds is not None


def test_a_storms_fix_quotes_what_padding_saves_over_the_run(sqlite_url, use_store):
    use_store(sqlite_url)

    @cachewatch.jit
    def grows(x):
        return jnp.tanh(x @ x.T).sum()

    for size in range(9, 21):
        grows(jnp.ones((size, 4)))
    assert cachewatch.flush(30)
    with enginemod.connection(sqlite_url) as conn:
        storms = diagnosis.detect_storms(conn)
    (storm,) = [s for s in storms if s.name == "grows"]
    assert storm.priced_fix is not None
    assert storm.priced_fix.startswith("pad x axis 0 to ")
    assert "compiles instead of 12" in storm.priced_fix
    assert "Priced over this run: pad x" in storm.fix
    # Unpriced storms leave the price out and nothing else.
    with enginemod.connection(sqlite_url) as conn:
        unpriced = diagnosis.detect_storms(conn, priced=False)
    assert unpriced == [
        dataclasses.replace(s, priced_fix=None, fix=s.fix.split(" Priced over this run:")[0]) for s in storms
    ]
    # Telling which functions storm (the summary's count, /metrics) reads no diff and
    # describes nothing: the same storms, with no fix, waste or recurrence.
    with enginemod.connection(sqlite_url) as conn:
        counted = diagnosis.detect_storms(conn, described=False)
    assert counted == [
        dataclasses.replace(s, fix="", priced_fix=None, recurs_in_runs=1, identical_programs=0, identical_seconds=0.0)
        for s in storms
    ]


def test_a_runs_price_is_kept_until_the_run_changes(store_url, use_store):
    use_store(store_url)

    @cachewatch.jit
    def grows(x):
        return jnp.tanh(x @ x.T).sum()

    def priced() -> policies.Whatif:
        with enginemod.connection(store_url) as conn:
            (found,) = prices.auto_prices(conn, [(function, run_id)])
            fresh = prices.analyse(
                whatif_reads.evidence(conn, function, run_id), policies.Policy("auto"), fallback=policies.Policy("pow2")
            )
        assert isinstance(found, policies.Whatif)
        assert found == fresh  # what the store says now
        return found

    for size in range(9, 21):
        grows(jnp.ones((size, 4)))
    assert cachewatch.flush(30)
    with enginemod.connection(store_url) as conn:
        function = whatif_reads.find_function(conn, "grows")
        run_id, _ = whatif_reads.run_of(conn, function.function_hash, None)
    first = priced()
    assert first.recorded.compiles == 12
    assert priced() is first  # nothing new in the run: neither read nor analysed again
    # New compiles in the run: priced again.
    grows(jnp.ones((21, 4)))
    grows(jnp.ones((22, 4)))
    assert cachewatch.flush(30)
    grown = priced()
    assert grown.recorded.compiles == 14
    # Only calls at cache hits (call statistics): priced again too.
    for _ in range(300):
        grows(jnp.ones((22, 4)))
    assert cachewatch.flush(30)
    called = priced()
    assert called is not grown
    assert called.calls > grown.calls
