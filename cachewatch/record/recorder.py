"""The bounded queue and the background writer between the traced program and the store.

The program's threads only ``put_nowait`` small frozen events; a full queue drops
the event and counts it. One daemon thread, started lazily and restarted in a forked
child, batches events into the sink, retries with backoff and jitter, spools what
the sink would not take to disk, writes per-function call statistics periodically,
and flushes at exit within a deadline.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import dataclasses
import enum
import logging
import os
import queue
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from ..core import _guard, process
from ..core import config as configmod
from ..core.events import Batch, CallStats, CompileEvent, DropReason
from . import current

if TYPE_CHECKING:
    from ..store.sinks import Sink

logger = logging.getLogger("cachewatch")

_lock = threading.RLock()
_writer: Writer | None = None


def _set_writer(writer: Writer | None) -> None:
    global _writer
    _writer = writer


def _retire_writer(new: configmod.Config) -> None:
    """The run moves to another store: what the writer holds goes to the old one first."""
    with _lock:
        old = _writer
        if old is not None and old.pid == os.getpid():
            old.flush(new.exit_timeout)
            old.stop(new.exit_timeout)
        _set_writer(None)


current.on_store_change(_retire_writer)

# Where each batch's call statistics come from: capture's counters register here at import
# (the worker knows nothing of capture). Called with the run id; each returns new rows.
_stats_sources: list[Callable[[str], list[CallStats]]] = []


def collect_stats_from(source: Callable[[str], list[CallStats]]) -> None:
    """Add ``source(run_id)`` to what every batch collects its call statistics from."""
    _stats_sources.append(source)


def _collect_call_stats(run_id: str) -> list[CallStats]:
    return [row for source in _stats_sources for row in source(run_id)]


def _get_writer() -> Writer:
    writer = _writer
    if writer is None or writer.pid != os.getpid():
        with _lock:
            if _writer is None or _writer.pid != os.getpid():
                _set_writer(Writer(current.config()))
            writer = _writer
    return writer  # type: ignore[return-value]


def use_sink(sink: Sink | None) -> Sink:
    """Hand every later batch to ``sink`` (anything with ``write(batch: Batch)``), or, with
    None, to the store ``CACHEWATCH_STORE`` names again. Returns the sink used until now.

        previous = cachewatch.record.recorder.use_sink(MySink())
    """
    writer = _get_writer()
    previous = writer.sink()
    writer._sink = sink
    return previous


def record_event(event: CompileEvent) -> None:
    """Hand an event to the writer (never blocks; drops and counts when full). Listeners
    added with ``at_once=True`` hear it now, in the recording thread, before its program
    is read; the others hear it with its program, in the writer's thread."""
    current.note_rank()
    for listener in list(_event_listeners):
        with _guard.guard("recorder.listener"):
            listener(event)
    _get_writer().put(event)


# Listeners that hear an event when it is recorded, and those that hear it complete.
_event_listeners: list[Callable[[CompileEvent], None]] = []
_completed_listeners: list[Callable[[CompileEvent], None]] = []


def add_listener(callback: Callable[[CompileEvent], None], at_once: bool = False) -> None:
    """Call ``callback(event)`` for every recorded event: by default with the program's
    figures, in the writer's thread, before the event is written (``flush()`` waits for
    it); with ``at_once``, in the recording thread as soon as it is recorded, before the
    program's figures are read (a guard that must act during the call)."""
    (_event_listeners if at_once else _completed_listeners).append(callback)


def remove_listener(callback: Callable[[CompileEvent], None]) -> None:
    for listeners in (_event_listeners, _completed_listeners):
        with contextlib.suppress(ValueError):
            listeners.remove(callback)


def _tell_completed(event: CompileEvent) -> None:
    for listener in list(_completed_listeners):
        with _guard.guard("recorder.listener"):
            listener(event)


@dataclasses.dataclass(frozen=True)
class ProgramWork:
    """What reading compiles' programs off the compile path has cost this process so far."""

    waiting: int  # compiles whose executables wait for the writer's thread now
    peak_waiting: int  # the most that ever waited at once (at most the program_backlog setting)
    read_by_writer: int  # programs read by the writer's thread
    read_inline: int  # programs read by the compiling thread because the backlog was full
    writer_cpu_seconds: float  # CPU the writer's thread spent reading them


def program_work() -> ProgramWork:
    writer = _writer
    if writer is None or writer.pid != os.getpid():
        return ProgramWork(0, 0, 0, 0, 0.0)
    return writer.program_work()


@dataclasses.dataclass(frozen=True)
class FlushResult:
    """What :func:`flush` achieved. True only when the events are in the store:

    if not cachewatch.flush(10):
        print(cachewatch.flush(0))  # FlushResult(done=True, spooled_batches=3, set_aside_batches=0)
    """

    done: bool  # the writer handled every event recorded before the call, within the timeout
    spooled_batches: int  # batches of this store waiting in the spool (not stored yet)
    set_aside_batches: int = 0  # batches this writer set aside for good (refused, unreadable), so far
    dropped: dict[str, int] = dataclasses.field(default_factory=dict)  # events lost so far, by DropReason

    @property
    def stored(self) -> bool:
        return self.done and not self.spooled_batches

    def __bool__(self) -> bool:
        return self.stored


def flush(timeout: float = 5.0) -> FlushResult:
    """Block until every event recorded so far is handled; the result is true only when
    they are stored (false on timeout, or while batches wait in the spool)."""
    writer = _writer
    if writer is None or writer.pid != os.getpid():
        writer = _get_writer()
    done = writer.flush(timeout)
    from ..store import spool

    return FlushResult(
        done=done,
        spooled_batches=spool.pending_batches(writer.cfg),
        set_aside_batches=sum(writer.set_aside.values()),
        dropped=dict(writer.dropped_by),
    )


def _write_ending_run() -> None:
    # The calls and events counted so far belong to the run that is ending: written under
    # its id, not the next run's. A store that does not answer in time keeps them spooled.
    with _guard.guard("recorder.run_ending"):
        flush(RUN_ENDING_FLUSH_SECONDS)


# How long configure() with a new run name waits for the old run's last writes.
RUN_ENDING_FLUSH_SECONDS = 5.0
current.on_run_ending(_write_ending_run)


def dropped_events() -> int:
    writer = _writer
    return writer.dropped if writer is not None else 0


def written_events() -> int:
    writer = _writer
    return writer.written if writer is not None else 0


class _FlushRequest:
    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


class Writer:
    """One daemon thread draining the queue into a sink."""

    def __init__(self, cfg: configmod.Config):
        self.cfg = cfg
        self.pid = os.getpid()
        self.queue: queue.Queue[CompileEvent | _FlushRequest | None] = queue.Queue(maxsize=cfg.queue_size)
        # Events lost before the store, by DropReason; what the store was told so far.
        self.dropped_by: collections.Counter[str] = collections.Counter()
        self._dropped_reported: collections.Counter[str] = collections.Counter()
        self.written = 0
        self.failed_batches = 0
        self.set_aside: collections.Counter = collections.Counter()  # reason -> batches set aside for good
        self._sink: Sink | None = None
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._stopping = False
        self._run_written: str | None = None
        self._last_stats = time.monotonic()
        self._last_warning = 0.0
        # Programs waiting to be read (their executables held), and what reading them cost.
        self._work_lock = threading.Lock()
        self._waiting = 0
        self._peak_waiting = 0
        self._read_by_writer = 0
        self._read_inline = 0
        self._writer_cpu = 0.0
        # Set while a flush or stop waits: the writer reads programs without resting.
        self._hurry = threading.Event()
        self._flushes_waiting = 0

    @property
    def dropped(self) -> int:
        """Events lost before the store so far, all reasons together."""
        return sum(self.dropped_by.values())

    # -- producer side (any thread)

    def put(self, item: CompileEvent) -> None:
        self._ensure_thread()
        held = False
        if item.pending is not None:
            with self._work_lock:
                held = self._waiting < current.config().program_backlog
                if held:
                    self._waiting += 1
                    self._peak_waiting = max(self._peak_waiting, self._waiting)
            if not held:
                # Past the cap the compiling thread reads the program itself: the memory
                # held stays bounded and every compile still gets its figures.
                item = item.pending.complete(item)
                with self._work_lock:
                    self._read_inline += 1
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            if held:
                with self._work_lock:
                    self._waiting -= 1
            self.dropped_by[DropReason.QUEUE_FULL] += 1
            self._warn(f"cachewatch queue full ({self.cfg.queue_size} events): {self.dropped} event(s) dropped so far")

    def flush(self, timeout: float) -> bool:
        self._ensure_thread()
        request = _FlushRequest()
        deadline = time.monotonic() + timeout
        self._rush(+1)
        try:
            while True:
                try:
                    self.queue.put(request, timeout=max(0.01, deadline - time.monotonic()))
                    break
                except queue.Full:
                    if time.monotonic() >= deadline:
                        return False
            return request.done.wait(max(0.0, deadline - time.monotonic()))
        finally:
            self._rush(-1)

    def _rush(self, change: int) -> None:
        with self._work_lock:
            self._flushes_waiting += change
            if self._flushes_waiting > 0 or self._stopping:
                self._hurry.set()
            else:
                self._hurry.clear()

    def program_work(self) -> ProgramWork:
        with self._work_lock:
            return ProgramWork(
                self._waiting, self._peak_waiting, self._read_by_writer, self._read_inline, self._writer_cpu
            )

    def _complete(self, event: CompileEvent) -> CompileEvent:
        """Read the event's program, then rest so that reading takes at most
        ``program_worker_share`` of the wall time (the GIL is the program's otherwise)."""
        pending = event.pending
        assert pending is not None
        cpu, start = time.thread_time(), time.perf_counter()
        try:
            event = pending.complete(event)
        finally:
            elapsed = time.perf_counter() - start
            with self._work_lock:
                self._waiting -= 1
                self._read_by_writer += 1
                self._writer_cpu += time.thread_time() - cpu
        share = current.config().program_worker_share
        if share < 1.0:
            self._hurry.wait(elapsed * (1.0 - share) / share)
        return event

    def stop(self, timeout: float) -> None:
        self._stopping = True
        self._hurry.set()
        thread = self._thread
        if thread is not None and thread.is_alive():
            try:
                self.queue.put(None, timeout=timeout)
            except queue.Full:
                return
            thread.join(timeout)

    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is None:
                thread = threading.Thread(target=self._loop, name="cachewatch-writer", daemon=True)
                thread.start()
                self._thread = thread

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_warning >= 60.0:
            self._last_warning = now
            logger.warning(message)

    # -- writer thread

    def _loop(self) -> None:
        while True:
            batch: list[CompileEvent] = []
            flushes: list[_FlushRequest] = []
            stop = False
            item: CompileEvent | _FlushRequest | _Queue | None
            try:
                item = self.queue.get(timeout=min(self.cfg.flush_interval, self.cfg.stats_interval) or 0.1)
            except queue.Empty:
                item = _EMPTY
            deadline = time.monotonic() + self.cfg.flush_interval
            while item is not _EMPTY:
                if item is None:
                    stop = True
                    break
                if isinstance(item, _FlushRequest):
                    flushes.append(item)
                    break
                # Read its program now, not when the batch is due: its executable is freed
                # the sooner, and the backlog stays short.
                batch.append(self._complete(item) if item.pending is not None else item)
                if len(batch) >= self.cfg.batch_size:
                    break
                remaining = deadline - time.monotonic()
                try:
                    item = self.queue.get(timeout=remaining) if remaining > 0 else self.queue.get_nowait()
                except queue.Empty:
                    item = _EMPTY
            with _guard.guard("writer.loop"):
                self._write(batch, with_stats=bool(flushes) or stop)
            for request in flushes:
                request.done.set()
            if stop:
                return

    def _write(self, batch: list[CompileEvent], with_stats: bool) -> None:
        for event in batch:
            _tell_completed(event)
        now = time.monotonic()
        stats: list[CallStats] = []
        # Statistics collected with every batch of compiles too: calls counted after it
        # were made after those compiles, which is how a burst's verdict tells a program
        # that went on after it (storms/storm_reads.Flush) however late the exit's flush comes.
        compiled = any(event.compiled for event in batch)
        if with_stats or compiled or now - self._last_stats >= self.cfg.stats_interval:
            self._last_stats = now
            stats = _collect_call_stats(current.run_id())
        if not batch and not stats:
            self._drain_spool()
            return
        sink = self._get_sink()
        lost = self.dropped_by - self._dropped_reported
        payload = Batch(run=current.run_info(), events=batch, stats=stats, dropped_by=lost)
        failure = self._send(sink, payload)
        if failure is not None:
            # An event JSON cannot write fails its whole batch: drop it alone, counted, and
            # send the rest (the spool, too, would refuse the batch as it is).
            payload, unencodable = payload.without_unencodable()
            if unencodable:
                self.dropped_by[DropReason.UNENCODABLE] += unencodable
                lost = self.dropped_by - self._dropped_reported
                batch = payload.events
                payload = Batch(run=payload.run, events=batch, stats=stats, dropped_by=lost)
                failure = self._send(sink, payload)
        if failure is None:
            self.written += len(batch)
            self._dropped_reported.update(lost)
            self._drain_spool(store_up=True)
        elif _refused(failure):
            # The store will never take this batch (it is invalid to it): spooling it would
            # only block the batches behind it.
            self.dropped_by[DropReason.STORE_REFUSED] += len(batch)
            self.set_aside["refused by the store"] += 1
            self._warn(f"cachewatch: {self._shown_store()} refused a batch, {len(batch)} event(s) dropped: {failure}")
        else:
            self.failed_batches += 1
            from ..store import spool

            spooled = spool.save(self.cfg, payload)
            if not spooled:
                self.dropped_by[DropReason.SPOOL_FULL] += len(batch)
            self._warn(
                f"cachewatch could not write to {self._shown_store()}; "
                f"{'spooled' if spooled else 'dropped'} {len(batch)} event(s)"
            )

    def _shown_store(self) -> str:
        from ..store.engine import redact_url  # loaded already: the sink's module imports it

        return redact_url(self.cfg.store)

    def _send(self, sink: Sink, payload: Batch, attempts: int = 4) -> Exception | None:
        """Write with retries (backoff and jitter); the last error, or None once written."""
        delay = 0.1
        for attempt in range(attempts):
            try:
                sink.write(payload)
                return None
            except Exception as exc:  # the store is down, locked, or refuses the batch
                if attempt == attempts - 1 or self._stopping or not getattr(exc, "retryable", True):
                    self._warn(f"cachewatch store write failed: {type(exc).__name__}: {exc}")
                    return exc
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 2.0)
        return None

    def _drain_spool(self, store_up: bool = False) -> None:
        from ..store import spool

        if not spool.has_pending(self.cfg):
            return
        sink = self._get_sink()

        def send(payload: Batch) -> spool.Outcome:
            failure = self._send(sink, payload, attempts=1)
            if failure is None:
                self.written += len(payload.events)
                return "sent"
            return "refused" if _refused(failure) else "failed"

        result = spool.replay(self.cfg, send, store_up=store_up)
        if result.set_aside:
            self.set_aside.update(result.set_aside)
            self.dropped_by[DropReason.SET_ASIDE] += result.set_aside_events  # reported with the next batch
            self._warn(
                f"cachewatch: set aside spooled batches for good ({dict(result.set_aside)}); "
                f"they stay in {spool._dir(self.cfg)} as *.bad"
            )

    def sink(self) -> Sink:
        """The sink batches go to: the store CACHEWATCH_STORE names unless use_sink() set one."""
        return self._get_sink()

    def _get_sink(self) -> Sink:
        if self._sink is None:
            from ..store.sinks import open_sink

            self._sink = open_sink(self.cfg)
        return self._sink


class _Queue(enum.Enum):
    EMPTY = enum.auto()  # nothing came before the wait ran out


_EMPTY: Final = _Queue.EMPTY


def _refused(exc: Exception) -> bool:
    """A client error the store will repeat for this batch whatever we do (not auth, not rate)."""
    status = getattr(exc, "status", None)
    return isinstance(status, int) and 400 <= status < 500 and status not in (401, 403, 408, 425, 429)


def _at_exit() -> None:
    writer = _writer
    if writer is None or writer.pid != os.getpid():
        return
    timeout = writer.cfg.exit_timeout
    if not writer.flush(timeout):
        left = writer.queue.qsize()
        logger.warning("cachewatch: %d event(s) not written within %.1fs at exit", left, timeout)


def _after_fork_in_child() -> None:
    # The child is a new process: its own writer thread, started on its first event.
    global _writer, _lock
    _lock = threading.RLock()
    _writer = None


atexit.register(_at_exit)
process.on_fork_in_child(process.Concern.WRITER, _after_fork_in_child)
