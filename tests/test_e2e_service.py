"""End to end, as a user runs it: `cachewatch serve` in one process, a JAX training
script in another with CACHEWATCH_STORE pointing at the service; then the API and
/metrics tell what happened."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import serverkit as kit
from serverkit import TOKEN

from cachewatch.core.events import Cause

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "storm_demo.py"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEWATCH_")}
    env.update(
        JAX_PLATFORMS="cpu",
        CACHEWATCH_SPOOL_DIR=str(tmp_path / "spool"),
        XDG_DATA_HOME=str(tmp_path / "data"),
        NO_PROXY="127.0.0.1,localhost",
        **extra,
    )
    return env


def _get(url: str, timeout: float = 10.0):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body = response.read().decode()
        return json.loads(body) if "json" in response.headers.get("Content-Type", "") else body


@pytest.fixture
def served(tmp_path):
    """`python -m cachewatch serve` on a free port, stopped (and waited for) at the end."""
    with kit.serve_process(
        f"sqlite:///{tmp_path / 'service.db'}", tmp_path, _env(tmp_path, CACHEWATCH_WRITE_TOKEN=TOKEN)
    ) as url:
        yield url


def test_training_script_through_the_service(served, tmp_path):
    result = subprocess.run(
        [sys.executable, str(DEMO)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(
            tmp_path,
            CACHEWATCH_STORE=served,
            CACHEWATCH_WRITE_TOKEN=TOKEN,
            CACHEWATCH_RUN_NAME="e2e-demo",
            CACHEWATCH_SAMPLE_EVERY="1",
        ),
    )
    assert result.returncode == 0, result.stderr
    assert "events written: True" in result.stdout

    functions = {f["name"]: f for f in _get(served + "/api/v1/functions")["items"]}
    step, loop = functions["train_step"], functions["<lambda>"]
    assert (step["compiles"], step["causes"], step["dominant_cause"]) == (
        8,
        {"first_call": 1, "new_shape": 7},
        "new_shape",
    )
    assert step["calls"] == 24
    assert step["run_seconds_est"] > 0
    assert 0 < step["compile_share"] < 1
    assert (loop["compiles"], loop["dominant_cause"]) == (8, "new_function_object")

    events = _get(served + f"/api/v1/functions/{step['function_hash']}/events?limit=100")["items"]
    assert len(events) == 8
    assert events[1]["diff"][0]["path"].startswith("batch")
    assert all("storm_demo.py:" in e["call_site"] for e in events)

    summary = _get(served + "/api/v1/summary")
    # Besides the two functions, eager jnp calls add op-by-op compiles of their own.
    assert summary["functions"] >= 2
    assert summary["events"] >= 16
    assert summary["active_storms"] >= 2

    runs = _get(served + "/api/v1/runs")["items"]
    assert [r["run_name"] for r in runs] == ["e2e-demo"]
    assert runs[0]["events"] == summary["events"]

    storms = {s["name"]: s for s in _get(served + "/api/v1/storms")["items"]}
    assert storms["train_step"]["dominant_cause"] == Cause.NEW_SHAPE
    assert storms["train_step"]["active"]
    assert "batch" in storms["train_step"]["fix"]
    assert "storm_demo.py" in storms["<lambda>"]["fix"]

    samples = kit.parse_metrics(_get(served + "/metrics"))
    assert kit.sample(samples, "cachewatch_compiles_total", function="train_step", cause=Cause.NEW_SHAPE) == 7
    assert kit.sample(samples, "cachewatch_compiles_total", function="<lambda>", cause=Cause.NEW_FUNCTION_OBJECT) == 7
    assert kit.sample(samples, "cachewatch_calls_total", function="train_step") == 24
    assert kit.sample(samples, "cachewatch_compile_seconds_count", function="train_step") == 8
    assert kit.sample(samples, "cachewatch_storm_active", function="train_step") == 1
    assert kit.sample(samples, "cachewatch_events_ingested_total") == summary["events"]
    assert kit.sample(samples, "cachewatch_events_dropped_total", reason="queue_full") == 0
    posts = kit.sample(samples, "cachewatch_http_requests_total", method="POST", route="/api/v1/events", status="200")
    assert posts is not None
    assert posts >= 1

    # Without the token the service refuses to store anything.
    request = urllib.request.Request(
        served + "/api/v1/events", data=b"{}", method="POST", headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=10)
    assert info.value.code == 401
