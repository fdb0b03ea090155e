"""The run's compile figures as a training dashboard's scalars: ``cachewatch.log_scalars``.

    writer = tensorboardX.SummaryWriter("runs/exp-42")    # or torch.utils.tensorboard's
    for step, batch in enumerate(batches):
        state = train_step(state, batch)
        if step % 100 == 0:
            cachewatch.log_scalars(writer, step)

The figures are the process's own, kept as it records (no store is read for them): a
tally fed by the recorder's listeners counts this run's compiles, recompiles and their
seconds, and the executables JAX's caches still hold (dropped when ``jax.clear_caches()``
or a jit's ``clear_cache()`` releases them), with their bytes once each compile's program
has been read. Only the active storms are read from the store (``storms.diagnosis``, at
most once every ``STORMS_EVERY`` seconds, as written so far; none for an http(s) store).

A writer is a TensorBoard writer (``add_scalar(tag, value, step)``: tensorboardX's,
torch's), a CLU metric writer (``write_scalars(step, scalars)``), or a function called
as ``fn(scalars, step=step)`` (``wandb.log``, ``mlflow.log_metrics``). None of those
libraries is imported here. A writer that raises is logged (once a minute at most) and
counted, never raised into the training loop.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from ..capture import cachestate
from ..core import _guard, process
from ..core.events import Cause, CompileEvent, Kind, held_bytes, is_recompile
from ..explain import context as ctxmod
from ..record import current, recorder
from ..store import engine as enginemod
from ..store import sinks
from ..store.columns import Filters
from ..storms import diagnosis

logger = logging.getLogger("cachewatch")

COMPILES = "cachewatch/compiles"
RECOMPILES = "cachewatch/recompiles"
COMPILE_SECONDS = "cachewatch/compile_seconds"
LIVE_EXECUTABLES = "cachewatch/live_executables"
LIVE_EXECUTABLE_BYTES = "cachewatch/live_executable_bytes"
ACTIVE_STORMS = "cachewatch/active_storms"
COMPILE_SHARE = "cachewatch/compile_share"
# The store is read for the active storms at most this often (seconds): a loop that logs
# every step does not query its store every step.
STORMS_EVERY = 10.0
# Live executables tracked one by one at most (their bytes each); past it, counted only.
_MAX_TRACKED = 1_000_000
_WARNING_INTERVAL = 60.0


class TensorBoardWriter(Protocol):
    def add_scalar(self, tag: str, scalar_value: float, global_step: int) -> object: ...


class CluWriter(Protocol):
    def write_scalars(self, step: int, scalars: dict[str, float]) -> object: ...


Writer = TensorBoardWriter | CluWriter | Callable[..., object]


@dataclasses.dataclass(frozen=True)
class Scalars:
    """The run's figures as written: compiles, recompiles (no first call's, no ahead of
    time's), trace + lowering + XLA compile seconds of every trace and compile, the
    executables JAX's caches hold and their bytes, the storms active now (None: the store
    could not tell), and the compile share: compile seconds over the run's wall seconds so
    far (summed over threads, so compiles in parallel can take it past 1; None at its
    very start)."""

    compiles: int
    recompiles: int
    compile_seconds: float
    live_executables: int
    live_executable_bytes: int
    active_storms: int | None
    # It moves with the clock alone: readings with the same counts are the same figures
    # (a dashboard is not written again for it).
    compile_share: float | None = dataclasses.field(default=None, compare=False)

    def by_name(self) -> dict[str, float]:
        """The scalars by their names (``cachewatch/compiles`` ...), as a writer takes them."""
        named: dict[str, float] = {
            COMPILES: self.compiles,
            RECOMPILES: self.recompiles,
            COMPILE_SECONDS: self.compile_seconds,
            LIVE_EXECUTABLES: self.live_executables,
            LIVE_EXECUTABLE_BYTES: self.live_executable_bytes,
        }
        if self.active_storms is not None:
            named[ACTIVE_STORMS] = self.active_storms
        if self.compile_share is not None:
            named[COMPILE_SHARE] = self.compile_share
        return named


class _Tally:
    """This run's figures, kept as events are recorded (at once, in the compiling thread)
    and completed (their program read, in the writer's thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset("")

    def reset(self, run_id: str) -> None:
        self.run_id = run_id
        self.compiles = self.recompiles = 0
        self.seconds = 0.0
        # Per function, its executables still held: event id -> bytes (0 until read).
        self.live: dict[str, dict[str, int]] = {}
        self.untracked = 0  # live executables past _MAX_TRACKED, counted without bytes
        self.clears: int | None = None  # jax.clear_caches() so far, read at the first event
        self.storms: tuple[float, int | None] | None = None  # (read at, active storms)

    def recorded(self, event: CompileEvent) -> None:
        if event.kind == Kind.STALE_CAPTURE:
            return
        with self.lock:
            if event.run_id != self.run_id:
                self.reset(event.run_id)
            self._forget_released()
            self.seconds += event.seconds
            if not event.compiled:
                return
            self.compiles += 1
            self.recompiles += is_recompile(event.kind, event.cause, event.compiled)
            held = self.live.setdefault(event.function.function_hash, {})
            if event.cause == Cause.CACHE_CLEARED:  # its clear_cache() came first
                held.clear()
            if sum(map(len, self.live.values())) < _MAX_TRACKED:
                held[event.event_id] = 0
            else:
                self.untracked += 1

    def completed(self, event: CompileEvent) -> None:
        if not event.compiled:
            return
        with self.lock:
            held = self.live.get(event.function.function_hash)
            if event.run_id == self.run_id and held is not None and event.event_id in held:
                held[event.event_id] = held_bytes(event.memory)

    def _forget_released(self) -> None:
        """Drop what JAX's caches let go: everything after ``jax.clear_caches()``, and a
        function's executables once cachestate no longer holds the function (a clear)."""
        clears = ctxmod.clears()
        if self.clears is not None and clears != self.clears:
            self.live.clear()
            self.untracked = 0
        self.clears = clears
        holding = cachestate._holding  # its functions compiled since their last release
        for function_hash in [fn for fn in self.live if fn not in holding]:
            del self.live[function_hash]

    def figures(self, run_id: str) -> tuple[int, int, float, int, int]:
        with self.lock:
            if run_id != self.run_id:
                self.reset(run_id)
            self._forget_released()
            live = sum(map(len, self.live.values())) + self.untracked
            size = sum(sum(held.values()) for held in self.live.values())
            return self.compiles, self.recompiles, self.seconds, live, size


_tally = _Tally()
recorder.add_listener(_tally.recorded, at_once=True)
recorder.add_listener(_tally.completed)


def _after_fork_in_child() -> None:
    _tally.lock = threading.Lock()  # a parent's thread may have held it
    _tally.reset("")  # the child's run is its own


process.on_fork_in_child(process.Concern.REPORTS, _after_fork_in_child)


def _active_storms(run_id: str, fresh: bool) -> int | None:
    """The run's active storms as the store has them, read at most every STORMS_EVERY
    seconds (``fresh``: now); None for an http(s) store, or one that cannot be read now (a
    store that could not be read is asked again at the next call)."""
    now = time.monotonic()
    kept = _tally.storms
    if kept is not None and now - kept[0] < STORMS_EVERY and not fresh:
        return kept[1]
    cfg = current.config()
    found: int | None = None
    if not sinks.is_service(cfg.store):
        try:
            # Not migrated from the training loop: the writer made the store.
            with enginemod.connection(cfg.store, ensure=False) as conn:
                rule = diagnosis.rule_of(cfg)
                found = len(diagnosis.storms(conn, Filters(run_id=run_id), **rule, active_only=True, described=False))
        except enginemod.StoreError:  # busy, or nothing written yet: asked again next time
            return None
    _tally.storms = (now, found)
    return found


@_guard.guarded(default=None, where="scalars.figures")
def figures(*, fresh: bool = False) -> Scalars:
    """This run's figures now, as ``log_scalars`` writes them; ``fresh``: the active storms
    read from the store now, not as read up to STORMS_EVERY seconds ago (at exit, once the
    recorder has flushed)."""
    run_id = current.run_id()
    compiles, recompiles, seconds, live, size = _tally.figures(run_id)
    elapsed = time.time() - current.run_started()
    share = seconds / elapsed if elapsed > 0 else None
    return Scalars(compiles, recompiles, seconds, live, size, _active_storms(run_id, fresh), share)


_failures = 0
_last_warning = 0.0


def writer_failures() -> int:
    """How many times a writer given to ``log_scalars`` raised in this process."""
    return _failures


def write(writer: Writer, step: int, scalars: Scalars) -> None:
    """Hand ``scalars`` to ``writer`` in the way it takes them (see the module's docstring)."""
    named = scalars.by_name()
    write_scalars = getattr(writer, "write_scalars", None)
    add_scalar = getattr(writer, "add_scalar", None)
    if callable(write_scalars):
        write_scalars(step, named)
    elif callable(add_scalar):
        for tag, value in named.items():
            add_scalar(tag, value, step)
    elif callable(writer):
        writer(named, step=step)
    else:
        raise TypeError(
            f"a {type(writer).__name__} is no writer: give one with add_scalar(tag, value, step), "
            "write_scalars(step, scalars), or a function called as fn(scalars, step=step)"
        )


def writer_failed(writer: object, exc: Exception) -> None:
    """Count a failure of ``writer`` (or of the writer a string names) and log it, at most
    once a minute; the caller goes on."""
    global _failures, _last_warning
    _failures += 1
    now = time.monotonic()
    if now - _last_warning >= _WARNING_INTERVAL:
        _last_warning = now
        logger.warning(
            "cachewatch.log_scalars: the writer (%s) failed, training goes on: %s: %s",
            writer if isinstance(writer, str) else type(writer).__name__,
            type(exc).__name__,
            exc,
        )


def log_scalars(writer: Writer, step: int) -> Scalars | None:
    """Write this run's compile figures to ``writer`` at ``step``:
    ``cachewatch/compiles``, ``cachewatch/recompiles``, ``cachewatch/compile_seconds``,
    ``cachewatch/live_executables``, ``cachewatch/live_executable_bytes`` and, where the
    store tells, ``cachewatch/active_storms``.

        cachewatch.log_scalars(summary_writer, step)       # TensorBoard: add_scalar
        cachewatch.log_scalars(clu_writer, step)           # CLU: write_scalars
        cachewatch.log_scalars(wandb.log, step)            # or mlflow.log_metrics

    Returns the figures written (None when they could not be read). Never raises: a
    writer that fails is logged and counted (``writer_failures()``)."""
    scalars = figures()
    if scalars is None:
        return None
    try:
        write(writer, step, scalars)
    except Exception as exc:  # the user's writer may raise anything; the training loop goes on
        writer_failed(writer, exc)
        return None
    return scalars
