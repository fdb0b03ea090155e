"""``cachewatch run --log-to``: the run's scalars written to a training dashboard for the
program, which needs no line of its own.

    cachewatch run --log-to tensorboard:runs/exp-42 --log-to wandb --log-to mlflow train.py

Targets (``parse``): ``tensorboard:DIR`` (a tensorboardX ``SummaryWriter(DIR)``),
``wandb`` (the run the program started, ``wandb.run``; else a run of its own, project
``$WANDB_PROJECT`` or ``cachewatch``, started at exit), ``mlflow[:URI]`` (the run the
program has active; else a run of its own in the tracking store URI, MLflow's default
without one, started at exit). Each library is imported only when its target is named.

A daemon thread writes the figures (``scalars.figures``) every ``EVERY`` seconds when
they changed, and ``Logger.stop`` writes them once more at exit, once the recorder has
flushed: the last point is the run's total. The step is the whole seconds since the
program started, except in a W&B run the program started, where the figures join the
program's current step (``run.log(..., commit=False)``) and leave its step count alone.
Until a run is found for W&B or MLflow the points wait in memory (the last
``MAX_PENDING``), and go into the program's run when it appears, or into the run of
their own at exit.

A target that is malformed or whose library is missing is said once (``warn``) and left
out; a writer that fails is logged and counted as ``log_scalars`` does
(``scalars.writer_failed``). The program runs the same either way.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from . import scalars

# Seconds between two writes of the background thread (`cachewatch run --log-every`).
EVERY = 10.0
# Points kept while no W&B or MLflow run takes them (a long run that never starts one
# keeps its latest).
MAX_PENDING = 10_000
# How long stop() waits for a write in flight (an MLflow store being created) to end.
_JOIN_SECONDS = 60.0
# MLflow takes at most this many metrics in one log_batch call.
_MLFLOW_BATCH = 1000
KINDS = ("tensorboard", "wandb", "mlflow")


class TargetError(ValueError):
    """A ``--log-to`` target that cannot be written to: malformed, or its library missing."""


@dataclasses.dataclass(frozen=True)
class Point:
    """The figures at one moment: the step, the wall time (seconds) and the scalars."""

    step: int
    wall: float
    scalars: scalars.Scalars


class Sink(Protocol):
    """Where the points go: ``write`` from the background thread while the program runs,
    ``close`` from the main thread at exit, with the last point."""

    name: str

    def write(self, point: Point) -> None: ...

    def close(self, point: Point) -> None: ...


def parse(target: str) -> tuple[str, str]:
    """``tensorboard:DIR`` -> ("tensorboard", DIR); ``wandb`` -> ("wandb", "");
    ``mlflow[:URI]`` -> ("mlflow", URI or "")."""
    kind, _, rest = target.partition(":")
    if kind not in KINDS:
        raise TargetError(f"unknown target {target!r}: give tensorboard:DIR, wandb or mlflow[:URI]")
    if kind == "tensorboard" and not rest:
        raise TargetError("tensorboard needs a directory: tensorboard:DIR")
    if kind == "wandb" and rest:
        raise TargetError(f"wandb takes no argument ({target!r}); set WANDB_PROJECT, WANDB_MODE as usual")
    return kind, rest


def _library(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise TargetError(f"{name.partition('.')[0]} cannot be imported ({exc})") from None


class TensorBoard:
    """A tensorboardX ``SummaryWriter(logdir)``, one scalar per tag at the step."""

    def __init__(self, logdir: str) -> None:
        self.name = f"tensorboard:{logdir}"
        # An event file is named by the second it was opened and the host: a suffix of its
        # own keeps it apart from the program's writer opened in the same second into DIR.
        self.writer = _library("tensorboardX").SummaryWriter(logdir, filename_suffix=".cachewatch")

    def write(self, point: Point) -> None:
        scalars.write(self.writer, point.step, point.scalars)
        self.writer.flush()  # seen by a TensorBoard watching DIR now, not at the writer's next flush

    def close(self, point: Point) -> None:
        try:
            self.write(point)
        finally:
            self.writer.close()


class Wandb:
    """The program's W&B run, when it has one; else a run of its own at exit."""

    def __init__(self, run_name: str, run_id: str) -> None:
        self.name = "wandb"
        self.wandb = _library("wandb")
        self.run_name, self.run_id = run_name, run_id
        self.pending: collections.deque[Point] = collections.deque(maxlen=MAX_PENDING)
        self.programs: object | None = None  # the program's run, once seen

    def write(self, point: Point) -> None:
        run = self.wandb.run  # the run the program started (None before it, and once finished)
        if run is None:
            if self.programs is None:
                self.pending.append(point)
            return
        self.programs = run
        self.pending.clear()  # the figures are totals: the latest stands for those before it
        # No step: the figures join the program's current step, and its count stays its own.
        run.log(point.scalars.by_name(), commit=False)

    def close(self, point: Point) -> None:
        if self.wandb.run is not None or self.programs is not None:
            # Committed with the program's run at its finish (wandb's own exit hook). A run
            # the program finished itself keeps the figures written before then.
            self.write(point)
            return
        wandb = self.wandb
        own = wandb.init(
            project=os.environ.get("WANDB_PROJECT") or "cachewatch",
            name=self.run_name or None,
            config={"cachewatch_run_id": self.run_id},
            settings=wandb.Settings(console="off"),
        )
        try:
            for each in (*self.pending, point):
                own.log(each.scalars.by_name(), step=each.step)
        finally:
            own.finish()


class Mlflow:
    """The program's active MLflow run, when it has one; else a run of its own at exit,
    in the tracking store ``uri`` (MLflow's default when empty)."""

    def __init__(self, uri: str, run_name: str, run_id: str, main_thread: int) -> None:
        self.name = f"mlflow:{uri}" if uri else "mlflow"
        self.mlflow = _library("mlflow")
        self.tracking = _library("mlflow.tracking")
        self.entities = _library("mlflow.entities")
        self.uri, self.run_name, self.run_id = uri, run_name, run_id
        self.main_thread = main_thread
        self.pending: collections.deque[Point] = collections.deque(maxlen=MAX_PENDING)
        self.programs: str | None = None  # the program's run id, once seen

    def _active(self) -> str | None:
        """The id of the run the program has active in its main thread. MLflow keeps the
        active run per thread, so from this module's thread ``mlflow.active_run()`` says
        None; the main thread's is read from MLflow's per-thread record of it."""
        if threading.get_ident() == self.main_thread:
            active = self.mlflow.active_run()
            return None if active is None else str(active.info.run_id)
        fluent = sys.modules.get("mlflow.tracking.fluent")
        stack = getattr(fluent, "_active_run_stack", None)
        every = getattr(stack, "get_all_thread_values", None)
        runs = every().get(self.main_thread) if callable(every) else None
        return str(runs[-1].info.run_id) if runs else None

    def _log(self, client: Any, run_id: str, points: Sequence[Point]) -> None:
        metric = self.entities.Metric
        metrics = [
            metric(key, float(value), int(p.wall * 1000), p.step)
            for p in points
            for key, value in p.scalars.by_name().items()
        ]
        for start in range(0, len(metrics), _MLFLOW_BATCH):
            client.log_batch(run_id, metrics=metrics[start : start + _MLFLOW_BATCH])

    def write(self, point: Point) -> None:
        run_id = self._active()
        if run_id is None:
            if self.programs is None:
                self.pending.append(point)
            return
        self.programs = run_id
        points = (*self.pending, point)
        self.pending.clear()
        # The program's run lives in the program's tracking store (MLflow's global URI).
        self._log(self.tracking.MlflowClient(), run_id, points)

    def close(self, point: Point) -> None:
        # The program's run, active or ended by the program itself (MLflow takes metrics
        # into a finished run); else a run of its own.
        run_id = self._active() or self.programs
        if run_id is not None:
            self._log(self.tracking.MlflowClient(), run_id, (*self.pending, point))
            return
        client = self.tracking.MlflowClient(tracking_uri=self.uri or None)
        experiment = os.environ.get("MLFLOW_EXPERIMENT_ID") or self._experiment(client)
        run = client.create_run(experiment, run_name=self.run_name or None, tags={"cachewatch.run_id": self.run_id})
        try:
            self._log(client, run.info.run_id, (*self.pending, point))
        finally:
            client.set_terminated(run.info.run_id)

    @staticmethod
    def _experiment(client: Any) -> str:
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or "cachewatch"
        found = client.get_experiment_by_name(name)
        return str(found.experiment_id) if found is not None else str(client.create_experiment(name))


def open_sink(target: str, *, run_name: str, run_id: str, main_thread: int) -> Sink:
    """The sink for one ``--log-to`` target; TargetError when it is malformed or its
    library cannot be imported (or refuses, as a SummaryWriter whose directory cannot be made)."""
    kind, rest = parse(target)
    try:
        if kind == "tensorboard":
            return TensorBoard(rest)
        if kind == "wandb":
            return Wandb(run_name, run_id)
        return Mlflow(rest, run_name, run_id, main_thread)
    except TargetError:
        raise
    except Exception as exc:  # the library refused: said once, the program runs without it
        raise TargetError(f"{kind}: {type(exc).__name__}: {exc}") from None


class Logger:
    """Writes the figures to its sinks every ``every`` seconds, when they changed, from a
    daemon thread; ``stop`` writes the last point and closes the sinks."""

    def __init__(self, sinks: Sequence[Sink], every: float = EVERY, clock: Callable[[], float] = time.monotonic):
        self.sinks = list(sinks)
        self.every = every
        self.clock = clock
        self.started = clock()
        self.last: scalars.Scalars | None = None
        self.stopping = threading.Event()
        self.lock = threading.Lock()  # one write at a time: the thread's, or stop()'s
        self.thread = threading.Thread(target=self._loop, name="cachewatch-dashboards", daemon=True)

    def start(self) -> Logger:
        self.thread.start()
        return self

    def _point(self, figures: scalars.Scalars) -> Point:
        return Point(int(self.clock() - self.started), time.time(), figures)

    def _loop(self) -> None:
        while not self.stopping.wait(self.every):
            self.tick()

    def tick(self) -> None:
        """Write the figures now, if they changed since the last write."""
        figures = scalars.figures()
        if figures is None or figures == self.last:
            return
        with self.lock:
            point = self._point(figures)
            for sink in self.sinks:
                _attempt(sink, sink.write, point)
            self.last = figures

    def stop(self) -> None:
        """At exit, once the recorder has flushed: the last point into every sink, and the
        sinks closed (a run of their own finished)."""
        self.stopping.set()
        if self.thread.ident is not None:  # started
            self.thread.join(_JOIN_SECONDS)
        figures = scalars.figures(fresh=True) or self.last
        if figures is None or self.thread.is_alive():
            return  # a write still in flight holds the sinks: the points before it stand
        with self.lock:
            point = self._point(figures)
            for sink in self.sinks:
                _attempt(sink, sink.close, point)


def _attempt(sink: Sink, action: Callable[[Point], None], point: Point) -> None:
    try:
        action(point)
    except Exception as exc:  # the dashboard's library may raise anything; the program goes on
        scalars.writer_failed(f"--log-to {sink.name}", exc)


def start(
    targets: Sequence[str],
    *,
    every: float = EVERY,
    run_name: str,
    run_id: str,
    warn: Callable[[str], None],
) -> Logger | None:
    """Open a sink per target (``warn`` says why one cannot be) and start writing; None
    when no target could be opened."""
    sinks: list[Sink] = []
    main_thread = threading.get_ident()
    for target in targets:
        try:
            sinks.append(open_sink(target, run_name=run_name, run_id=run_id, main_thread=main_thread))
        except TargetError as exc:
            warn(f"--log-to {target}: {exc}; the program runs without it")
    return Logger(sinks, every).start() if sinks else None
