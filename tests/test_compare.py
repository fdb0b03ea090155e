"""Two runs compared, on SQLite and PostgreSQL: through the read module and the reasoning
the command line uses, ``GET /api/v1/runs/compare`` and the dashboard's runs pages. The
runs are real events: the baseline compiled ``step`` once, the later run at 8 shapes."""

from __future__ import annotations

import re
import time

import pytest
import serverkit as kit
from cachewatch_server.main import create_app
from cachewatch_server.settings import ServerSettings
from fastapi.testclient import TestClient

from cachewatch.comparison import side_by_side
from cachewatch.store import engine as enginemod
from cachewatch.store import runs
from cachewatch.store.sinks import SqlSink


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> kit.Recorded:
    from cachewatch.record import current

    current.configure(store=f"sqlite:///{tmp_path_factory.mktemp('lib') / 'lib.db'}")
    return kit.run_jax_workload()


@pytest.fixture
def two_runs(store_url, recorded):
    """A baseline and a run of the program "train", and an unrelated later run."""
    t0 = time.time() - 3_600  # an hour ago: times the store takes
    base = kit.new_run(recorded.run, started_at=t0, name="train")
    later = kit.new_run(recorded.run, started_at=t0 + 1_000, name="train")
    other = kit.new_run(recorded.run, started_at=t0 + 2_000, name="other")
    step = recorded.by_name("step")
    rest = [e for e in recorded.events if e.function.name != "step"]
    kept = [e for e in rest if e.function.name != "scale"]  # scale is gone from the later run
    sink = SqlSink(store_url)
    enginemod.upgrade(store_url)
    sink.write(kit.batch(base, [kit.copy_event(e, base, t0 + i) for i, e in enumerate(step[:1] + rest)]))
    sink.write(kit.batch(later, [kit.copy_event(e, later, t0 + 1_000 + i) for i, e in enumerate(step + kept)]))
    sink.write(kit.batch(other, [kit.copy_event(e, other, t0 + 2_000) for e in step[:1]]))
    return store_url, base, later, recorded.function("scale")


def test_the_comparison_names_what_compiled_more_and_what_is_gone(two_runs):
    url, base, later, dropped = two_runs
    with enginemod.connection(url) as conn:
        # The baseline by id prefix; the run: its newest sibling of the same name, not "other".
        result = side_by_side.compare(conn, base.run_id[:10], None)
        assert result.run.run_id == later.run_id
        by_name = side_by_side.compare(conn, "train", None)  # the two newest runs of that name
        assert (by_name.baseline.run_id, by_name.run.run_id) == (base.run_id, later.run_id)
        with pytest.raises(runs.RunNotFound, match="no run has the id, run name or job 'nope'"):
            side_by_side.compare(conn, "nope", None)
    step = next(f for f in result.functions if f.name == "step")
    assert step.status == "changed"
    assert step.extra_compiles == 7
    assert step.cause == "new_shape"
    assert step.causes_delta == {"new_shape": 7}
    assert step.extra_seconds > 0
    assert result.functions[0].name == "step"
    gone = [f for f in result.functions if f.status == "gone"]
    assert [f.function_hash for f in gone] == [dropped.function_hash]
    assert result.gone == [dropped.qualname]
    assert result.new == []
    # 7 more of step, 2 fewer now that scale is gone.
    assert result.extra_compiles == 5
    assert side_by_side.gate(result, max_extra_compiles=5) == []
    (reason,) = side_by_side.gate(result, max_extra_compiles=4)
    assert reason.startswith("5 more compiles than the baseline (at most 4 allowed): step: +7 compiles (new_shape +7)")
    assert "step: +7 compiles (new_shape +7)" in side_by_side.text(result)


def test_the_api_and_the_dashboard_compare_two_runs(two_runs):
    url, base, later, _ = two_runs
    with TestClient(create_app(ServerSettings(store=url))) as client:
        got = client.get("/api/v1/runs/compare", params={"baseline": base.run_id, "run": later.run_id})
        assert got.status_code == 200, got.text
        body = got.json()
        step = next(f for f in body["functions"] if f["name"] == "step")
        assert (step["cause"], step["extra_compiles"], step["baseline"]["compiles"], step["run"]["compiles"]) == (
            "new_shape",
            7,
            1,
            8,
        )
        assert client.get("/api/v1/runs/compare", params={"baseline": "nope"}).status_code == 404
        assert client.get("/api/v1/runs/compare", params={"run": later.run_id}).status_code == 422
        runs_page = client.get("/runs").text
        assert 'action="/runs/compare"' in runs_page
        assert f'name="baseline" value="{base.run_id}"' in runs_page
        assert f'name="run" value="{later.run_id}"' in runs_page
        page = client.get("/runs/compare", params={"baseline": base.run_id, "run": later.run_id})
        assert page.status_code == 200
        row = re.search(r'<tr data-function="step" data-status="changed"[^>]*>(.*?)</tr>', page.text, re.S)
        assert row is not None
        assert "new_shape +7" in row.group(1)
        assert "1 → 8" in row.group(1)
        missing = client.get("/runs/compare", params={"baseline": "nope"})
        assert missing.status_code == 404
        assert "no run has the id, run name or job" in missing.text
