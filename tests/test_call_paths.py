"""Every call of a watched jit on its path: the call that compiled, JAX's C++ fast path,
its Python path (and why). tests/programs/call_paths.py calls a plain step and three with
effects a thousand times each under ``cachewatch run``, and a step whose static flag adds
a callback a thousand times each way; the counts are exact."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
import sqlalchemy as sa
from test_server_api import make_client
from test_verdicts import Ran, run_program

from cachewatch.callpaths import call_path_reads, slow_path
from cachewatch.core import jaxcompat, runtimes
from cachewatch.store import engine as enginemod
from cachewatch.store import models
from cachewatch.store.columns import Filters
from cachewatch.storms import findings

CALLS = 1000
SLOW = {"logged_step": "unordered_effects", "read_back_step": "unordered_effects", "ordered_step": "ordered_effects"}


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> Ran:
    if not jaxcompat.available("fastpath_decision"):
        pytest.skip("this JAX's fast-path decision cannot be read")
    return run_program(tmp_path_factory.mktemp("paths"), "call_paths")


def _compiles(url: str) -> dict[str, list[tuple[str | None, str | None]]]:
    e, f = models.compile_events, models.functions
    with enginemod.connection(url) as conn:
        rows = conn.execute(
            sa.select(f.c.name, e.c.call_path, e.c.slow_reason)
            .join(f, f.c.function_hash == e.c.function_hash)
            .where(e.c.compiled, f.c.name.like("%_step"))
        ).all()
    found: dict[str, list[tuple[str | None, str | None]]] = {}
    for name, path, reason in rows:
        found.setdefault(name, []).append((path, reason))
    return {name: sorted(paths, key=str) for name, paths in found.items()}


def test_each_compile_says_which_path_its_calls_take(ran):
    assert _compiles(ran.url) == {
        "plain_step": [("fast", None)],
        **{name: [("slow", reason)] for name, reason in SLOW.items()},
        "flagged_step": [("fast", None), ("slow", "unordered_effects")],
    }


def test_calls_split_exactly_by_path(ran):
    with enginemod.connection(ran.url) as conn:
        counted = {c.function.name: c for c in call_path_reads.path_counts(conn, Filters())}
    assert set(counted) == {*SLOW, "flagged_step", "loss_of"}  # the plain step took the Python path never
    # The loss differentiated eagerly: every call after the first traced again, in Python.
    assert counted["loss_of"].slow == {"under_transformation": CALLS // 10 - 1}
    assert counted["loss_of"].fast_calls == 0
    flagged = counted["flagged_step"]
    assert (flagged.calls, flagged.compiles) == (2 * CALLS, 2)
    assert flagged.slow == {"unordered_effects": CALLS - 1}
    assert flagged.fast_calls == CALLS - 1
    for name, reason in SLOW.items():
        found = counted[name]
        assert found.calls == CALLS
        assert found.compiles == 1
        # The compiling call is no slow-path call; every other call is one.
        assert found.slow == {reason: CALLS - 1}
        assert found.fast_calls == 0
        assert found.slow_variants == {reason: 1}


def test_slow_paths_are_findings_with_their_reason_and_fix(ran):
    with enginemod.connection(ran.url) as conn:
        told = {s.function.name: s for s in slow_path.slow_paths(call_path_reads.path_counts(conn, Filters()))}
        found = findings.find(conn, Filters())
    assert told["logged_step"].slow_calls == CALLS - 1
    assert "jax.debug.print, jax.debug.callback or an io_callback" in told["logged_step"].text
    assert "drop ordered=True" in told["ordered_step"].fix
    assert "under a JAX transformation applied outside any jit" in told["loss_of"].text
    assert "jax.jit(jax.value_and_grad(loss_of))" in told["loss_of"].fix
    # Every call of logged_step took the Python path: nothing of its own to measure against.
    assert told["logged_step"].excess_seconds is None
    assert "no fast call of it to measure against" in told["logged_step"].text
    # flagged_step's quiet variant took the fast path: its verbose calls are priced against it.
    flagged = told["flagged_step"]
    assert flagged.slow_call_seconds is not None
    assert flagged.fast_call_seconds is not None
    assert flagged.excess_seconds == flagged.slow_calls * max(
        0.0, flagged.slow_call_seconds - flagged.fast_call_seconds
    )
    assert f"Its own fast-path calls took {flagged.fast_call_seconds * 1e6:.0f} µs a call" in flagged.text
    slow = [f for f in found if f.cause == "slow_path"]
    assert {f.functions[0] for f in slow} <= {*SLOW, "flagged_step", "loss_of"}
    # A finding is priced at what the Python path cost beyond the fast path, where that is known.
    assert all(f.seconds == flagged.excess_seconds for f in slow if f.functions[0] == "flagged_step")
    # The eagerly differentiated jit is told at the line that differentiates it.
    assert all(f.fix_kind == "jit_transformed" for f in slow if f.functions[0] == "loss_of")
    program = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs", "call_paths.py")
    with open(program) as f:
        (line,) = [i for i, text in enumerate(f, 1) if "= jax.value_and_grad(loss)(w)" in text]
    assert all(f.entry == f"{program}:{line}" for f in slow if f.functions[0] == "loss_of")
    others = [f for f in slow if f.functions[0] != "loss_of"]
    assert all(f.fix_kind == "fast_path" for f in others)
    assert all(f.compiles == 0 and f.seconds > 0 for f in slow)
    assert not any("plain_step" in f.functions for f in found)
    # Ranked with the others by seconds.
    assert [f.seconds for f in found] == sorted((f.seconds for f in found), reverse=True)


def test_metrics_count_the_slow_path_by_function_and_reason(ran):
    with make_client(ran.url) as client:
        text = client.get("/metrics").text
    for name, reason in SLOW.items():
        assert f'cachewatch_slow_path_calls_total{{function="{name}",reason="{reason}"}} {CALLS - 1}.0' in text
    assert 'cachewatch_slow_path_calls_total{function="plain_step"' not in text


def test_the_cache_names_each_variants_path(ran):
    with make_client(ran.url) as client:
        page = client.get("/api/v1/cache").json()
        html = client.get("/cache").text
    # The dashboard's cache page: one cell per function and run says which path its variants take.
    cells = dict(
        re.findall(r'<td><a href="[^"]*">(\w+_step)</a></td>.*?<td class="call-path"[^>]*>([^<]*)</td>', html, re.S)
    )
    assert cells["plain_step"] == "C++ fast path"
    assert cells["flagged_step"] == "Python path: 1 of 2 (unordered_effects)"
    assert cells["ordered_step"] == "Python path: 1 of 1 (ordered_effects)"
    paths = {
        fn["name"]: [(v["call_path"], v["slow_reason"]) for v in fn["variants"]]
        for fn in page["items"]
        if fn["name"].endswith("_step")
    }
    assert {name: sorted(found, key=str) for name, found in paths.items()} == {
        "plain_step": [("fast", None)],
        **{name: [("slow", reason)] for name, reason in SLOW.items()},
        "flagged_step": [("fast", None), ("slow", "unordered_effects")],
    }


def test_the_function_page_the_api_and_the_report_name_the_slow_path(ran):
    with enginemod.connection(ran.url) as conn:
        logged = conn.execute(
            sa.select(models.functions.c.function_hash).where(models.functions.c.name == "logged_step")
        ).scalar_one()
    with make_client(ran.url) as client:
        detail = client.get(f"/api/v1/functions/{logged}").json()
        page = client.get(f"/functions/{logged}").text
    (slow,) = detail["slow_paths"]
    assert (slow["slow_calls"], slow["fast_calls"], slow["reasons"]) == (CALLS - 1, 0, {"unordered_effects": CALLS - 1})
    assert f'data-slow-calls="{CALLS - 1}"' in page
    report = subprocess.run(
        [sys.executable, "-m", "cachewatch", "report"],
        env={**os.environ, "CACHEWATCH_STORE": ran.url},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    listed = report[report.index("Calls on JAX's Python dispatch path") :]
    assert all(f"{name}: {CALLS - 1} of {CALLS} calls" in listed for name in SLOW)
    assert "plain_step:" not in listed.split("\n\n")[0]


def test_the_fix_for_a_transformed_jit_takes_the_fast_path_with_the_same_result(ran):
    """The fix applied (jit the transformed function once): no call of it goes through
    Python, and it gives what the eagerly differentiated jit gave."""
    with enginemod.connection(ran.url) as conn:
        counted = {c.function.qualname for c in call_path_reads.path_counts(conn, Filters())}
        compiled = conn.execute(
            sa.select(models.compile_events.c.call_path)
            .join(models.functions, models.functions.c.function_hash == models.compile_events.c.function_hash)
            .where(models.functions.c.qualname == "value_and_grad(loss_of)", models.compile_events.c.compiled)
        ).scalars()
        assert "fast" in (paths := list(compiled))
        assert "slow" not in paths
    assert "value_and_grad(loss_of)" not in counted
    eager, fixed = [line for line in ran.stdout.splitlines() if line.startswith("graded ")]
    assert eager == fixed


def test_a_call_is_priced_at_its_median_not_at_one_slow_sample(ran, tmp_path):
    """The first call after a compile is always timed and can take many times a warm one:
    one such sample must not set the price of every slow-path call (a mean of a few would)."""
    copy = tmp_path / "copy.db"
    shutil.copy(ran.url.removeprefix("sqlite:///"), copy)
    url = f"sqlite:///{copy}"

    def logged(conn: sa.Connection) -> slow_path.SlowPath:
        told = slow_path.slow_paths(call_path_reads.path_counts(conn, Filters()))
        return next(s for s in told if s.function.name == "logged_step")

    s = models.call_stats
    with enginemod.connection(url) as conn:
        before = logged(conn)
        row = conn.execute(sa.select(s).where(s.c.function_hash == before.function.function_hash)).mappings().first()
        assert before.slow_call_seconds is not None
        assert row is not None
        outlier = 1000 * before.slow_call_seconds
        values = {k: v for k, v in row.items() if k != "id"}
        values |= {"calls": 0, "sampled_calls": 1, "sampled_seconds": outlier, "slow_calls": None}
        values["run_buckets"] = {str(runtimes.bucket_of(outlier)): [1, 1]}
        conn.execute(s.insert().values(**values))
        after = logged(conn)
    assert after.slow_call_seconds == before.slow_call_seconds
    assert after.seconds == before.seconds


def test_a_jit_traced_inside_another_makes_no_slow_path_call(sqlite_url, use_store):
    """A watched jit called while another is traced runs no dispatch of its own: it is
    traced into the outer program. JAX's Python path still asks for its fast path (with no
    executable); that is no call on the Python path, and is not counted as one."""
    if not jaxcompat.available("fastpath_decision"):
        pytest.skip("this JAX's fast-path decision cannot be read")
    import jax.numpy as jnp

    import cachewatch

    use_store(sqlite_url)

    @cachewatch.jit
    def traced_inside(x):
        return jnp.sin(x) * 2

    @cachewatch.jit
    def traces_it(x):
        return traced_inside(x).sum()

    for n in range(3, 8):
        for _ in range(3):
            traces_it(jnp.ones(n))
    assert cachewatch.flush(30)
    with enginemod.connection(sqlite_url) as conn:
        counted = {c.function.name: c for c in call_path_reads.path_counts(conn, Filters())}
    for name in ("traced_inside", "traces_it"):
        assert name not in counted or not counted[name].slow, counted[name]


def test_a_jit_made_anew_for_each_call_is_told_with_what_making_it_cost_and_the_fix_ends_it(sqlite_url, use_store):
    """``jax.jit(step)(x)`` in a loop: JAX's caches are keyed by the function, so nothing
    recompiles, but jax.jit's set-up runs at every step. Told as calls through a jit made
    for them, priced by what making the objects took (measured), with the jit made once as
    the fix: applied, the same results and nothing to tell. A function jitted twice (two
    models of one factory, say) is no loop."""
    import jax.numpy as jnp

    import cachewatch

    use_store(sqlite_url)

    def remade_step(x):
        return x * 0.5 + 1.0

    def held_step(x):
        return x * 0.5 + 1.0

    def twice_step(x):
        return x - 1.0

    x = y = jnp.ones(4)
    for _ in range(40):
        x = cachewatch.jit(remade_step)(x)
    step = cachewatch.jit(held_step)  # the fix: made once, before the loop
    for _ in range(40):
        y = step(y)
    for _ in range(2):
        cachewatch.jit(twice_step)(x)
    assert (x == y).all()
    assert cachewatch.flush(30)
    with enginemod.connection(sqlite_url) as conn:
        counted = {c.function.name: c for c in call_path_reads.path_counts(conn, Filters())}
        told = {s.function.name: s for s in slow_path.slow_paths(counted.values())}
    assert counted["remade_step"].slow == {"new_jit_object": 39}
    assert counted["remade_step"].jit_object_seconds > 0
    assert "held_step" not in counted
    assert counted["twice_step"].slow == {"new_jit_object": 1}
    assert set(told) == {"remade_step"}
    remade = told["remade_step"]
    assert remade.seconds == counted["remade_step"].jit_object_seconds
    assert remade.made_at is not None
    assert remade.made_at.rsplit(":", 1)[0] == __file__  # the loop's line in this test
    assert f"39 of its 40 calls came through a jit object made at {os.path.basename(remade.made_at)}" in remade.text
    assert "make the jit once, before the loop" in remade.fix


def test_jits_under_one_eager_transformation_are_one_finding_at_its_line_and_its_fix_ends_it(sqlite_url, use_store):
    """``jax.grad(loss)(w)`` run eagerly around two jits (jax's physical-optimisation example's
    shape): every call of each goes through JAX's Python path, traced again under the
    gradient. One change at the line that applies the gradient gives them all the fast
    path, so they are one finding there, priced at what both cost; applied, the same
    gradients and nothing to tell."""
    import jax
    import jax.numpy as jnp

    import cachewatch

    use_store(sqlite_url)

    @cachewatch.jit
    def spread_part(w):
        return jnp.sum(jnp.sin(w) ** 2)

    @cachewatch.jit
    def pull_part(w):
        return jnp.sum(jnp.cos(w) * w)

    def eager_loss(w):
        return spread_part(w) + pull_part(w)

    w = jnp.linspace(0.0, 1.0, 8)
    eager = []
    graded = jax.grad(eager_loss)
    for _ in range(200):
        eager.append(graded(w))
    line = _line() - 1
    graded = jax.jit(jax.grad(eager_loss))  # the fix, as the finding words it
    fixed = [graded(w) for _ in range(200)]
    assert all(jnp.allclose(a, b) for a, b in zip(eager, fixed, strict=True))
    assert cachewatch.flush(30)
    with enginemod.connection(sqlite_url) as conn:
        counted = {c.function.name: c for c in call_path_reads.path_counts(conn, Filters())}
        found = [f for f in findings.find(conn, Filters()) if f.cause == "slow_path"]
    for name in ("spread_part", "pull_part"):
        assert counted[name].transformed_at == f"{__file__}:{line}"
        # Under the fixed step they are traced into its program: no call of theirs is counted.
        assert counted[name].slow == {"under_transformation": 199}
    (told,) = found
    assert told.fix_kind == "jit_transformed"
    assert told.entry == f"{__file__}:{line}"
    assert {f.rsplit(".", 1)[-1] for f in told.functions} == {"spread_part", "pull_part"}
    assert told.seconds > 0
    assert "`graded = jax.jit(jax.grad(eager_loss))` where it is made" in told.fix
    assert "398 calls" in told.fix


def _line() -> int:
    import inspect

    frame = inspect.currentframe()
    assert frame is not None
    assert frame.f_back is not None
    return frame.f_back.f_lineno
