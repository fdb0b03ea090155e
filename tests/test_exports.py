"""A run taken elsewhere: ``cachewatch export RUN --format perfetto`` (and the API's
``/api/v1/runs/{run_id}/trace``) as a Chrome trace-event file, checked against the store it
was read from; and ``cachewatch.log_scalars`` into a real TensorBoard event file, a CLU-style
writer and a ``wandb.log``-like function, with the run's figures.

Perfetto's own TraceProcessor (the ``perfetto`` package) is not used: it downloads its
``trace_processor_shell`` binary on first use, and the tests run without that network."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import sqlalchemy as sa
from cachewatch_server.main import create_app
from cachewatch_server.settings import ServerSettings
from fastapi.testclient import TestClient
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboardX import SummaryWriter

import cachewatch
from cachewatch import cli
from cachewatch.core import config as configmod
from cachewatch.exports import perfetto, scalars
from cachewatch.record import current
from cachewatch.store import engine as enginemod
from cachewatch.store import models
from cachewatch.store.columns import Filters
from cachewatch.storms import diagnosis
from cachewatch.views import runsummary

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "train_storms.py"
TOP_LEVEL = {perfetto.COMPILE, perfetto.WARM_UP, perfetto.AHEAD, perfetto.TRACE}
PHASES = {"trace", "lower", perfetto.XLA_COMPILE, perfetto.CACHE_READ}


# ------------------------------------------------------------------ helpers


def _export(url: str, run: str, path: Path) -> dict[str, Any]:
    assert cli.main(["export", run, "--format", "perfetto", "--store", url, "-o", str(path)]) == 0
    return json.loads(path.read_text())


def _rule() -> diagnosis.StormRule:
    return diagnosis.rule_of(configmod.resolve())


def _tracks(trace: dict[str, Any]) -> dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}


def _compiles_by_thread(url: str, run_id: str) -> dict[str, list[str]]:
    """The run's compiled events per thread, in the store's order (time, then id)."""
    e = models.compile_events
    with enginemod.connection(url) as conn:
        rows = conn.execute(
            sa.select(e.c.thread, e.c.event_id)
            .where(e.c.run_id == run_id, e.c.compiled, e.c.kind != "stale_capture")
            .order_by(e.c.timestamp, e.c.id)
        ).all()
    found: dict[str, list[str]] = defaultdict(list)
    for thread, event_id in rows:
        found[thread or ""].append(event_id)
    return found


def _check_nesting(trace: dict[str, Any]) -> None:
    """Every phase lies inside its compile's span, the phases fill it one after another, and
    no two compiles of one track overlap (every track nests properly)."""
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    parents = [e for e in slices if e["cat"] in TOP_LEVEL]
    by_track: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for parent in parents:
        by_track[parent["tid"]].append(parent)
    for track in by_track.values():
        track.sort(key=lambda p: p["ts"])
        for before, after in zip(track, track[1:], strict=False):
            assert before["ts"] + before["dur"] <= after["ts"]
    children = [e for e in slices if e["cat"] == perfetto.PHASE]
    assert children
    filled: Counter[tuple[int, int]] = Counter()
    for child in children:
        assert child["name"] in PHASES
        (parent,) = [
            p
            for p in by_track[child["tid"]]
            if p["ts"] <= child["ts"] and child["ts"] + child["dur"] <= p["ts"] + p["dur"]
        ]
        assert child["args"]["of"] == parent["name"]
        filled[(parent["tid"], parent["ts"])] += child["dur"]
    for parent in parents:
        if filled[(parent["tid"], parent["ts"])]:
            assert filled[(parent["tid"], parent["ts"])] == parent["dur"]


# ------------------------------------------------------------------ a real program's trace


@pytest.fixture(scope="module")
def storms_run(tmp_path_factory) -> tuple[str, str]:
    """examples/train_storms.py (three epochs) under ``cachewatch run``: (store URL, run id)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('export') / 'train.db'}"
    env = {
        **os.environ,
        "CACHEWATCH_STORE": url,
        "JAX_PLATFORMS": "cpu",
        "CACHEWATCH_RAISE_INTERNAL_ERRORS": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "cachewatch", "run", str(EXAMPLE), "--epochs", "3", "--run-name", "export-me"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with enginemod.connection(url) as conn:
        run_id = conn.execute(sa.select(models.runs.c.run_id)).scalar_one()
    return url, run_id


def test_every_compile_is_a_slice_on_its_threads_track_in_the_stores_order(storms_run, tmp_path):
    url, run_id = storms_run
    trace = _export(url, "export-me", tmp_path / "trace.json")
    assert trace["displayTimeUnit"] == "ms"
    assert trace["otherData"]["run_id"] == run_id
    tracks = _tracks(trace)
    compiled = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] in TOP_LEVEL - {perfetto.TRACE}]
    shown: dict[str, list[str]] = defaultdict(list)
    for event in sorted(compiled, key=lambda e: e["ts"]):
        # On its thread's track (or that thread's overflow track), named after its function.
        assert tracks[event["tid"]].startswith(event["args"]["thread"])
        assert event["args"]["function"].endswith(event["name"])
        shown[event["args"]["thread"]].append(event["args"]["event_id"])
    assert shown == _compiles_by_thread(url, run_id)
    # The thread's tid is the same in every slice of it; the first track is the thread's name.
    assert tracks[1] == "MainThread"
    _check_nesting(trace)


def test_the_slices_carry_cause_kind_and_seconds_and_tell_warm_up_apart(storms_run, tmp_path):
    url, run_id = storms_run
    trace = _export(url, run_id, tmp_path / "trace.json")
    compiled = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] in TOP_LEVEL]
    e = models.compile_events
    with enginemod.connection(url) as conn:
        rows = {
            r.event_id: r
            for r in conn.execute(sa.select(e).where(e.c.run_id == run_id, e.c.kind != "stale_capture")).all()
        }
    for event in compiled:
        row = rows[event["args"]["event_id"]]
        assert event["args"]["cause"] == row.cause
        assert event["args"]["kind"] == row.kind
        assert event["args"]["signature_hash"] == row.signature_hash
        assert event["args"]["compile_seconds"] == pytest.approx(row.compile_seconds)
        expected = perfetto.WARM_UP if row.warmup else perfetto.COMPILE
        assert event["cat"] == (perfetto.AHEAD if row.kind == "warmup" else expected)
        assert event["dur"] == pytest.approx(
            1e6 * sum(s or 0.0 for s in (row.trace_seconds, row.lower_seconds, row.compile_seconds)), abs=3
        )
    cats = Counter(event["cat"] for event in compiled)
    assert cats[perfetto.WARM_UP] == sum(1 for r in rows.values() if r.compiled and r.warmup)
    assert cats[perfetto.COMPILE] > 0


def test_storms_are_ranges_and_the_counter_ends_at_the_live_executables(storms_run, tmp_path):
    url, run_id = storms_run
    trace = _export(url, run_id, tmp_path / "trace.json")
    events = trace["traceEvents"]
    with enginemod.connection(url) as conn:
        storms = diagnosis.detect_storms(conn, Filters(run_id=run_id), **_rule())
    assert storms
    begins = {e["id"]: e for e in events if e["ph"] == "b"}
    ends = {e["id"]: e for e in events if e["ph"] == "e"}
    assert set(begins) == set(ends)
    assert len(begins) == len(storms)
    assert {e["cat"] for e in begins.values()} == {perfetto.STORM}
    assert _tracks(trace)[next(iter(begins.values()))["tid"]] == perfetto.STORMS_TRACK
    assert sorted(b["args"]["short_name"] for b in begins.values()) == sorted(s.short_name for s in storms)
    for storm_id, begin in begins.items():
        assert ends[storm_id]["ts"] >= begin["ts"]
        assert begin["args"]["fix"]
        assert begin["args"]["dominant_cause"]
    counter = [e for e in events if e["ph"] == "C"]
    assert [e["ts"] for e in counter] == sorted(e["ts"] for e in counter)
    figures = runsummary.for_store(url, run_id).figures
    assert figures is not None
    assert counter[-1]["args"][perfetto.LIVE_SERIES] == figures.live_executables


def test_an_unknown_run_is_refused(storms_run, tmp_path, capsys):
    url, _ = storms_run
    assert cli.main(["export", "no-such-run", "--store", url, "-o", str(tmp_path / "t.json")]) == 2
    assert "no-such-run" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()


# ------------------------------------------------------------------ the API's trace


def _recompiling_run(url: str, use_store) -> str:
    """A run with a storm: one jit fed seven shapes (six recompiles), and another released."""
    use_store(url, run_name="api-trace")
    # NumPy inputs: no eager op of JAX's compiles beside the two jits.
    grows = cachewatch.jit(lambda x: x * 2.0 + 1.0)
    for n in range(1, 8):
        grows(np.ones(n, np.float32))
    dropped = cachewatch.jit(lambda x: x - 1.0)
    dropped(np.ones(3, np.float32))
    dropped.clear_cache()
    assert cachewatch.flush(10)
    return current.run_id()


def test_the_api_answers_the_commands_trace_and_404_for_an_unknown_run(store_url, use_store, tmp_path):
    run_id = _recompiling_run(store_url, use_store)
    from_cli = _export(store_url, run_id, tmp_path / "trace.json")
    assert any(e["ph"] == "b" for e in from_cli["traceEvents"])  # the storm
    _check_nesting(from_cli)
    app = create_app(ServerSettings(store=store_url, write_token=None, read_token=None))
    with TestClient(app) as client:
        answer = client.get(f"/api/v1/runs/{run_id}/trace")
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "application/json"
        assert answer.json() == from_cli
        assert client.get("/api/v1/runs/api-trace/trace").json() == from_cli  # by run name too
        missing = client.get("/api/v1/runs/no-such-run/trace")
        assert missing.status_code == 404
        assert "no-such-run" in missing.json()["detail"]
    # Released by clear_cache(): the counter ends below the compiles.
    counter = [e for e in from_cli["traceEvents"] if e["ph"] == "C"]
    assert counter[-1]["args"][perfetto.LIVE_SERIES] == 7


# ------------------------------------------------------------------ scalars


def _store_figures(url: str, run_id: str) -> runsummary.RunFigures:
    found = runsummary.for_store(url, run_id).figures
    assert found is not None
    return found


def _check_against_store(written: scalars.Scalars, url: str, run_id: str) -> None:
    figures = _store_figures(url, run_id)
    assert written.compiles == figures.report.compiles == 8
    assert written.recompiles == figures.report.recompiles == 6
    assert written.compile_seconds == pytest.approx(figures.report.compile_seconds)
    assert written.live_executables == figures.live_executables == 7
    assert written.live_executable_bytes == figures.live_executable_bytes
    assert written.live_executable_bytes > 0
    with enginemod.connection(url) as conn:
        active = diagnosis.storms(conn, Filters(run_id=run_id), **_rule(), active_only=True)
    assert written.active_storms == len(active) == 1


def test_log_scalars_writes_the_runs_figures_to_a_tensorboard_event_file(sqlite_url, use_store, tmp_path):
    run_id = _recompiling_run(sqlite_url, use_store)
    logdir = tmp_path / "tensorboard"
    writer = SummaryWriter(str(logdir))
    written = cachewatch.log_scalars(writer, 42)
    writer.close()
    assert written is not None
    _check_against_store(written, sqlite_url, run_id)
    events = EventAccumulator(str(logdir))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {scalars.COMPILES, scalars.RECOMPILES, scalars.COMPILE_SECONDS, scalars.LIVE_EXECUTABLES} <= tags
    for tag, value in written.by_name().items():
        (point,) = events.Scalars(tag)
        assert point.step == 42
        assert point.value == pytest.approx(value, rel=1e-6)  # an event file keeps float32


def test_log_scalars_takes_a_clu_writer_and_a_logging_function(sqlite_url, use_store):
    run_id = _recompiling_run(sqlite_url, use_store)

    class CluWriter:
        def __init__(self) -> None:
            self.written: list[tuple[int, dict[str, float]]] = []

        def write_scalars(self, step: int, scalars: dict[str, float]) -> None:
            self.written.append((step, dict(scalars)))

    clu = CluWriter()
    written = cachewatch.log_scalars(clu, 7)
    assert written is not None
    _check_against_store(written, sqlite_url, run_id)
    assert clu.written == [(7, written.by_name())]
    logged: list[tuple[dict[str, float], int]] = []
    again = cachewatch.log_scalars(lambda data, step: logged.append((data, step)), 8)  # as wandb.log is called
    assert again is not None
    assert logged == [(again.by_name(), 8)]
    assert logged[0][0][scalars.COMPILES] == 8


def test_a_failing_writer_never_reaches_the_training_loop(sqlite_url, use_store, caplog):
    _recompiling_run(sqlite_url, use_store)

    class Broken:
        def add_scalar(self, tag: str, value: float, step: int) -> None:
            raise OSError("disk full")

    before = scalars.writer_failures()
    caplog.set_level(logging.WARNING, logger="cachewatch")
    assert cachewatch.log_scalars(Broken(), 1) is None
    assert cachewatch.log_scalars(cast(Any, object()), 2) is None  # no writer at all: said, not raised
    assert scalars.writer_failures() == before + 2
    assert "training goes on" in caplog.text
