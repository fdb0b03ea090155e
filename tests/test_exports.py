"""A run taken elsewhere: ``cachewatch export RUN --format perfetto`` (and the API's
``/api/v1/runs/{run_id}/trace``) as a Chrome trace-event file, checked against the store it
was read from; ``cachewatch.log_scalars`` into a real TensorBoard event file, a CLU-style
writer, an offline Weights & Biases run and a local MLflow tracking store, and
``cachewatch run --log-to`` into the same, each read back and set against the store.

W&B runs offline (``WANDB_MODE=offline``, in the test's directory): no network, no login.

Perfetto's own TraceProcessor (the ``perfetto`` package) is not used: it downloads its
``trace_processor_shell`` binary on first use, and the tests run without that network."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import mlflow
import numpy as np
import pytest
import sqlalchemy as sa
from cachewatch_server.main import create_app
from cachewatch_server.settings import ServerSettings
from fastapi.testclient import TestClient
from mlflow.tracking import MlflowClient
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboardX import SummaryWriter
from wandb.proto import wandb_internal_pb2

import cachewatch
from cachewatch import cli
from cachewatch.core import config as configmod
from cachewatch.exports import dashboards, perfetto, scalars
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
    """examples/train_storms.py (three epochs) under ``cachewatch run --log-to``: (store URL,
    run id); the dashboards' files lie in ``_logs_of(url)``."""
    url = f"sqlite:///{tmp_path_factory.mktemp('export') / 'train.db'}"
    env = {
        **os.environ,
        "CACHEWATCH_STORE": url,
        "JAX_PLATFORMS": "cpu",
        "CACHEWATCH_RAISE_INTERNAL_ERRORS": "1",
    }
    # Its scalars go to TensorBoard and an offline W&B run too, beside the run's store
    # (test_train_storms_scalars_in_tensorboard_and_wandb_match_the_store).
    logs = _logs_of(url)
    env.update(_wandb_env(logs))
    done = subprocess.run(
        [sys.executable, "-m", "cachewatch", "run", f"--log-to=tensorboard:{logs / 'tensorboard'}", "--log-to=wandb"]
        + [str(EXAMPLE), "--epochs", "3", "--run-name", "export-me"],
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
    started, before = current.run_started(), time.time()
    written = cachewatch.log_scalars(writer, 42)
    after = time.time()
    writer.close()
    assert written is not None
    _check_against_store(written, sqlite_url, run_id)
    # The compile share: the compile seconds over the run's wall seconds when it was read.
    assert written.compile_share is not None
    assert written.compile_seconds / (after - started) <= written.compile_share
    assert written.compile_share <= written.compile_seconds / (before - started)
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


# ------------------------------------------------------------------ dashboards: W&B, MLflow, `run --log-to`

PROGRAM = ROOT / "tests" / "programs" / "dashboard_loop.py"
# The figures the process counts itself, which must equal the store's at the end.
COUNTED = (
    scalars.COMPILES,
    scalars.RECOMPILES,
    scalars.COMPILE_SECONDS,
    scalars.LIVE_EXECUTABLES,
    scalars.LIVE_EXECUTABLE_BYTES,
)
DASHBOARD_LIBRARIES = ("wandb", "mlflow", "tensorboardX", "tensorboard")
# wandb 0.31 ships no Python reader of an offline run's .wandb file (its Go core writes it),
# so it is read here: a 7-byte header (":W&B", magic 0xBEE1, version 0), then a LevelDB
# log of 32 KiB blocks, each chunk behind a header (CRC-32 of its type byte and data,
# length, type); a record whole in one chunk, or FIRST, MIDDLE..., LAST. Each record is a
# wandb.proto.wandb_internal_pb2.Record, parsed with wandb's own protobuf classes.
_WANDB_HEADER = struct.Struct("<4sHB")
_WANDB_CHUNK = struct.Struct("<IHB")
_WANDB_BLOCK = 32 * 1024
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _logs_of(url: str) -> Path:
    """Where a storms_run-like fixture's dashboards write: beside its SQLite store."""
    return Path(url.removeprefix("sqlite:///")).parent


def _wandb_env(where: Path) -> dict[str, str]:
    """W&B offline (no network, no login), its files under ``where``."""
    return {"WANDB_MODE": "offline", "WANDB_DIR": str(where), "WANDB_SILENT": "true", "WANDB_CONSOLE": "off"}


def _wandb_records(path: Path) -> list[Any]:
    """The records of an offline run's .wandb file, every chunk's CRC checked."""
    data = path.read_bytes()
    assert _WANDB_HEADER.unpack_from(data) == (b":W&B", 0xBEE1, 0)
    records: list[Any] = []
    protos: Any = wandb_internal_pb2  # generated, without type stubs
    pos, parts = _WANDB_HEADER.size, b""
    while pos + _WANDB_CHUNK.size <= len(data):
        left = _WANDB_BLOCK - pos % _WANDB_BLOCK
        if left < _WANDB_CHUNK.size:  # a block's tail too short for a header is padding
            pos += left
            continue
        crc, length, kind = _WANDB_CHUNK.unpack_from(data, pos)
        if (crc, length, kind) == (0, 0, 0):  # zeros to the end of the block
            pos += left
            continue
        chunk = data[pos + _WANDB_CHUNK.size : pos + _WANDB_CHUNK.size + length]
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == crc, f"bad chunk at {pos} of {path}"
        pos += _WANDB_CHUNK.size + length
        parts = chunk if kind in (_FULL, _FIRST) else parts + chunk
        if kind in (_FULL, _LAST):
            record = protos.Record()
            record.ParseFromString(parts)
            records.append(record)
    return records


@dataclasses.dataclass
class WandbRun:
    """An offline W&B run as its .wandb file holds it."""

    project: str
    name: str
    config: dict[str, Any]
    history: list[dict[str, Any]]  # one row per step, {key: value}, "_step" among them

    def series(self, key: str) -> list[tuple[int, Any]]:
        return [(row["_step"], row[key]) for row in self.history if key in row]


def _wandb_runs(where: Path) -> list[WandbRun]:
    runs = []
    for path in sorted(where.glob("wandb/offline-run-*/run-*.wandb")):
        records = _wandb_records(path)
        (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
        config = {item.key: json.loads(item.value_json) for item in run.config.update}
        history = [
            {item.key or ".".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
            for r in records
            if r.WhichOneof("record_type") == "history"
        ]
        runs.append(WandbRun(run.project, run.display_name, config, history))
    return runs


@pytest.fixture(scope="session")
def mlflow_template(tmp_path_factory) -> Path:
    """An empty MLflow SQLite tracking store, made once (MLflow's migrations take seconds):
    each test copies it."""
    path = tmp_path_factory.mktemp("mlflow") / "template.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


def _mlflow_store(template: Path, where: Path) -> str:
    path = where / "mlflow.db"
    shutil.copyfile(template, path)
    return f"sqlite:///{path}"


def _mlflow_last(client: MlflowClient, run_id: str, keys: Sequence[str]) -> dict[str, float]:
    """Each metric's value at its last step (the last logged there)."""
    found = {}
    for key in keys:
        history = client.get_metric_history(run_id, key)
        assert history, key
        found[key] = max(history, key=lambda m: (m.step, m.timestamp)).value
    return found


def _store_says(url: str, run_id: str, capsys) -> dict[str, float]:
    """The run's figures as the store has them: compiles, recompiles and compile seconds as
    ``cachewatch report --format json`` gives them (summed over the run's functions), live
    executables and their bytes as the run's summary (``cachewatch run --summary json``),
    and the storms active now."""
    capsys.readouterr()
    assert cli.main(["report", "--store", url, "--run", run_id, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    figures = _store_figures(url, run_id)
    assert sum(r["compiles"] for r in rows) == figures.report.compiles
    with enginemod.connection(url) as conn:
        active = diagnosis.storms(conn, Filters(run_id=run_id), **_rule(), active_only=True)
    return {
        scalars.COMPILES: sum(r["compiles"] for r in rows),
        scalars.RECOMPILES: sum(r["recompiles"] for r in rows),
        scalars.COMPILE_SECONDS: sum(r["compile_seconds"] for r in rows),
        scalars.LIVE_EXECUTABLES: figures.live_executables,
        scalars.LIVE_EXECUTABLE_BYTES: figures.live_executable_bytes,
        scalars.ACTIVE_STORMS: len(active),
    }


def _matches(written: dict[str, Any], store: dict[str, float], keys: Sequence[str], rel: float = 1e-9) -> None:
    for key in keys:
        assert written[key] == pytest.approx(store[key], rel=rel), key


def _run(options: Sequence[str], program_args: Sequence[str], env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    """``cachewatch run OPTIONS dashboard_loop.py ARGS``: exit code, stdout, stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "cachewatch", "run", *options, str(PROGRAM), *program_args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, done.stdout, done.stderr


def _program_env(url: str, tmp_path: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_"))}
    return {
        **env,
        "CACHEWATCH_STORE": url,
        "JAX_PLATFORMS": "cpu",
        "CACHEWATCH_RAISE_INTERNAL_ERRORS": "1",
        **_wandb_env(tmp_path),
        **more,
    }


def _ran(result: tuple[int, str, str]) -> dict[str, Any]:
    code, out, err = result
    assert code == 0, err[-3000:]
    return cast(dict[str, Any], json.loads(out.strip().splitlines()[-1]))


def test_log_scalars_into_a_wandb_offline_run_and_an_mlflow_store_match_the_report(
    sqlite_url, tmp_path, capsys, mlflow_template
):
    mlflow_url = _mlflow_store(mlflow_template, tmp_path)
    env = _program_env(sqlite_url, tmp_path, MLFLOW_TRACKING_URI=mlflow_url)
    ran = _ran(_run([], ["--wandb", "--mlflow", "--log-scalars", "4"], env, tmp_path))
    store = _store_says(sqlite_url, ran["run_id"], capsys)
    assert store[scalars.RECOMPILES] >= 6  # seven batch sizes
    logged_at = [0, 4, 8, ran["steps"]]  # every fourth step, and once after the flush

    (run,) = _wandb_runs(tmp_path)
    assert run.project == "dashboard-loop"
    assert [step for step, _ in run.series("loss")] == list(range(ran["steps"]))
    compiles = run.series(scalars.COMPILES)
    assert [step for step, _ in compiles] == logged_at
    assert [value for _, value in compiles] == sorted(value for _, value in compiles)
    _matches(run.history[-1], store, COUNTED)

    client = MlflowClient(tracking_uri=mlflow_url)
    (found,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert [m.step for m in client.get_metric_history(found.info.run_id, scalars.COMPILES)] == logged_at
    assert len(client.get_metric_history(found.info.run_id, "loss")) == ran["steps"]
    _matches(_mlflow_last(client, found.info.run_id, COUNTED), store, COUNTED)


def test_run_log_to_writes_into_the_programs_run_or_starts_one_of_its_own(
    sqlite_url, tmp_path, capsys, mlflow_template
):
    """TensorBoard; W&B into the run the program started; MLflow into a run of its own, as
    the program has none (a run of its own in W&B: the train_storms test; the program's
    MLflow run: the writing-thread test)."""
    mlflow_url = _mlflow_store(mlflow_template, tmp_path)
    tensorboard_dir = tmp_path / "tensorboard"
    options = [
        f"--log-to=tensorboard:{tensorboard_dir}",
        "--log-to",
        "wandb",
        "--log-to",
        f"mlflow:{mlflow_url}",
        "--run-name",
        "logged",
        "--summary",
        "json",
    ]
    code, out, err = _run(options, ["--wandb"], _program_env(sqlite_url, tmp_path), tmp_path)
    ran = _ran((code, out, err))
    store = _store_says(sqlite_url, ran["run_id"], capsys)
    summary = json.loads(err.strip().splitlines()[-1])
    assert summary["compiles"] == store[scalars.COMPILES]
    assert summary["live_executables"] == store[scalars.LIVE_EXECUTABLES]
    every = [*COUNTED, scalars.ACTIVE_STORMS]

    events = EventAccumulator(str(tensorboard_dir))
    events.Reload()
    _matches({tag: events.Scalars(tag)[-1].value for tag in every}, store, every, rel=1e-6)  # float32

    (run,) = _wandb_runs(tmp_path)  # the program's, and no other
    assert run.project == "dashboard-loop"
    # The program's steps are its own: the figures joined its last step, none was added.
    assert [step for step, _ in run.series("loss")] == list(range(ran["steps"]))
    assert run.history[-1]["_step"] == ran["steps"] - 1
    _matches(run.history[-1], store, every)

    client = MlflowClient(tracking_uri=mlflow_url)
    experiment = client.get_experiment_by_name("cachewatch")
    assert experiment is not None
    (found,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert found.info.experiment_id == experiment.experiment_id
    assert found.info.run_name == "logged"
    assert found.info.status == "FINISHED"
    assert found.data.tags["cachewatch.run_id"] == ran["run_id"]
    _matches(_mlflow_last(client, found.info.run_id, every), store, every)
    assert not (tmp_path / "mlruns").exists()  # MLflow's default store left alone


def test_train_storms_scalars_in_tensorboard_and_wandb_match_the_store(storms_run, capsys):
    url, run_id = storms_run
    store = _store_says(url, run_id, capsys)
    assert store[scalars.ACTIVE_STORMS] >= 1
    every = [*COUNTED, scalars.ACTIVE_STORMS]
    events = EventAccumulator(str(_logs_of(url) / "tensorboard"))
    events.Reload()
    _matches({tag: events.Scalars(tag)[-1].value for tag in every}, store, every, rel=1e-6)
    (run,) = _wandb_runs(_logs_of(url))
    assert run.project == "cachewatch"
    assert run.config["cachewatch_run_id"] == run_id
    _matches(run.history[-1], store, every)


def test_a_missing_library_or_a_bad_target_is_said_once_and_the_program_runs_unchanged(sqlite_url, tmp_path):
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "wandb.py").write_text("raise ImportError('No module named wandb (hidden by the test)')\n")
    env = _program_env(sqlite_url, tmp_path, PYTHONPATH=str(hidden))
    targets = ["wandb", "tensorboard", "nowhere:at-all", "wandb:project"]
    options = [f"--log-to={t}" for t in targets] + ["--quiet"]
    code, out, err = _run(options, ["--exit-code", "7"], env, tmp_path)
    assert code == 7, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["imported"] == []  # none could be, none was
    said = [line for line in err.splitlines() if line.startswith("cachewatch: --log-to")]
    assert [line.split(":")[1].strip().removeprefix("--log-to ") for line in said] == [
        "wandb",
        "tensorboard",
        "nowhere",
        "wandb",
    ]
    assert "cannot be imported" in said[0]
    assert all(line.endswith("the program runs without it") for line in said)
    assert not list(tmp_path.glob("wandb/offline-run-*"))


def test_a_failing_dashboard_is_counted_and_the_others_still_get_the_figures(sqlite_url, use_store):
    _recompiling_run(sqlite_url, use_store)

    class Kept:
        name = "kept"

        def __init__(self) -> None:
            self.points: list[dashboards.Point] = []
            self.closed: dashboards.Point | None = None

        def write(self, point: dashboards.Point) -> None:
            self.points.append(point)

        def close(self, point: dashboards.Point) -> None:
            self.closed = point

    class Broken(Kept):
        name = "broken"

        def write(self, point: dashboards.Point) -> None:
            raise ConnectionError("the dashboard is down")

    now = [100.0]
    kept, broken = Kept(), Broken()
    logger = dashboards.Logger([broken, kept], every=1.0, clock=lambda: now[0])  # not started: ticked by hand
    before = scalars.writer_failures()
    now[0] += 3.4
    logger.tick()
    logger.tick()  # unchanged figures: not written again
    assert [p.step for p in kept.points] == [3]
    assert scalars.writer_failures() == before + 1
    now[0] += 2.0
    logger.stop()
    assert broken.closed is not None  # a sink that failed to write is still closed
    assert kept.closed is not None
    assert kept.closed.step == 5
    assert kept.closed.scalars.compiles == 8
    assert kept.closed.scalars == kept.points[0].scalars  # the same counts (the share moved with the clock)


def test_targets_are_parsed_or_refused():
    assert dashboards.parse("tensorboard:runs/a:b") == ("tensorboard", "runs/a:b")
    assert dashboards.parse("wandb") == ("wandb", "")
    assert dashboards.parse("mlflow") == ("mlflow", "")
    assert dashboards.parse("mlflow:sqlite:///x.db") == ("mlflow", "sqlite:///x.db")
    for bad in ("tensorboard", "tensorboard:", "wandb:p", "prometheus", ""):
        with pytest.raises(dashboards.TargetError):
            dashboards.parse(bad)


def test_an_mlflow_run_active_in_the_main_thread_gets_the_points_of_the_writing_thread(
    sqlite_url, use_store, tmp_path, mlflow_template, monkeypatch
):
    _recompiling_run(sqlite_url, use_store)
    mlflow_url = _mlflow_store(mlflow_template, tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_url)  # the program's store, as MLflow finds it
    sink = dashboards.Mlflow("", "threads", current.run_id(), threading.get_ident())
    figures = scalars.figures()
    assert figures is not None
    early = dashboards.Point(1, 1.0e9, figures)
    sink.write(early)  # no run yet: kept
    with mlflow.start_run() as active:
        writer = threading.Thread(target=sink.write, args=(dashboards.Point(2, 1.0e9 + 1, figures),))
        writer.start()
        writer.join(60)
        sink.close(dashboards.Point(3, 1.0e9 + 2, figures))
    history = MlflowClient(tracking_uri=mlflow_url).get_metric_history(active.info.run_id, scalars.COMPILES)
    assert sorted(m.step for m in history) == [1, 2, 3]
    assert {m.value for m in history} == {8.0}


def test_nothing_configured_imports_no_dashboard_library(sqlite_url, tmp_path):
    program = tmp_path / "no_dashboard.py"
    program.write_text(
        "import sys, numpy as np, cachewatch\n"
        "f = cachewatch.jit(lambda x: x + 1.0)\n"
        "f(np.ones(3, np.float32)); f(np.ones(4, np.float32))\n"
        "assert cachewatch.log_scalars(lambda named, step: None, 1).compiles == 2\n"
        f"print(sorted(m for m in {DASHBOARD_LIBRARIES!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "cachewatch", "run", "--quiet", str(program)],
        env=_program_env(sqlite_url, tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"
