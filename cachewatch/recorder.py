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
import dataclasses
import logging
import os
import platform
import queue
import random
import socket
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from . import _guard
from . import config as configmod
from .counters import all_call_stats
from .events import Batch, CallStats, CompileEvent, RunInfo
from .runtimes import to_json

if TYPE_CHECKING:
    from .store.sinks import Sink

logger = logging.getLogger("cachewatch")

_lock = threading.RLock()
_config: configmod.Config | None = None
_overrides: dict[str, Any] = {}
_run: RunInfo | None = None
_run_id: str | None = None
_writer: "Writer | None" = None
_owner_pid = os.getpid()


def config() -> configmod.Config:
    global _config
    cfg = _config
    if cfg is None:
        with _lock:
            if _config is None:
                _config = configmod.resolve(_overrides)
                _guard.raise_errors = _config.raise_internal_errors
                with _guard.guard("recorder.persistent_cache"):  # from the environment, on first use
                    _apply_persistent_cache(_config)
            cfg = _config
    return cfg


def configure(**settings: Any) -> configmod.Config:
    """Change settings; events already queued go to the store they were meant for."""
    global _config, _overrides
    with _lock:
        merged = {**_overrides, **settings}
        new = configmod.resolve(merged)  # raises ConfigError before anything changes
        _apply_persistent_cache(new)  # so does a cache directory that cannot be made
        old_writer = _writer
        if old_writer is not None and new.store != (_config.store if _config else None):
            old_writer.flush(new.exit_timeout)
            old_writer.stop(new.exit_timeout)
            _set_writer(None)
        _overrides = merged
        _config = new
        _guard.raise_errors = new.raise_internal_errors
        for stats in all_call_stats():  # functions wrapped before this call sample anew too
            stats.configure(new.sample_every, new.sample_max_per_second)
        if _run is not None and (new.run_name != _run.run_name or _job_changed(new, _run)):
            _new_run()
    return new


def reset_configuration() -> None:
    """Forget settings made by configure(); the environment and defaults apply again."""
    global _overrides
    with _lock:
        _overrides = {}
    configure()


def _set_writer(writer: "Writer | None") -> None:
    global _writer
    _writer = writer


def run_id() -> str:
    global _run_id
    if _run_id is None:
        with _lock:
            if _run_id is None:
                _run_id = uuid.uuid4().hex
    return _run_id


def _new_run() -> None:
    global _run, _run_id, _process_start, _steady_since
    _run = None
    _run_id = uuid.uuid4().hex
    _process_start = time.time()  # a later run in the same process starts now
    _steady_since = None
    _compiled_functions.clear()


# Warm-up: a run starts by building its model and optimizer and compiling each jitted
# step once. It ends when the user's own jitted code runs a second time: a call of one
# of the user's wrapped functions that neither traced nor compiled, or a second compile
# of one (the loop is running, and recompiling). With warmup_seconds set, warm-up is
# instead the first warmup_seconds of the run (for programs without a jitted step).
# Compiles made during warm-up are flagged, and storms are found among the others only.
_steady_since: float | None = None
_compiled_functions: set[str] = set()


def mark_steady() -> None:
    """The user's jitted code runs again: warm-up is over."""
    global _steady_since
    if _steady_since is None:
        _steady_since = time.time()


def note_user_compile(function_hash: str) -> None:
    """A compile of one of the user's functions; the second of the same function ends warm-up."""
    if _steady_since is None:
        if function_hash in _compiled_functions:
            mark_steady()
        else:
            _compiled_functions.add(function_hash)


def steady() -> bool:
    return _steady_since is not None


def in_warmup(timestamp: float) -> bool:
    """Whether a compile that started at ``timestamp`` belongs to the run's warm-up."""
    window = config().warmup_seconds
    if window > 0:
        return timestamp - _process_start < window
    return _steady_since is None


def run_info() -> RunInfo:
    global _run
    if _run is None:
        with _lock:
            if _run is None:
                _run = _describe_run()
    return _run


def _describe_run() -> RunInfo:
    import jax
    import jaxlib

    try:
        backend = jax.default_backend()
        devices = tuple(str(d) for d in jax.devices())
    except Exception:
        backend, devices = "", ()
    return RunInfo(
        run_id=run_id(),
        run_name=config().run_name,
        host=socket.gethostname(),
        pid=os.getpid(),
        started_at=_process_start,  # the process's start, or the time configure() began a new run
        jax_version=jax.__version__,
        jaxlib_version=getattr(jaxlib, "__version__", ""),
        backend=backend,
        devices=devices,
        python_version=platform.python_version(),
        **_job_and_rank(config()),
    )


def _job_and_rank(cfg: configmod.Config) -> dict[str, Any]:
    """The run's job and rank: as configured, else JAX's own when it runs distributed."""
    index, count = cfg.process_index, cfg.process_count
    if index is None or count is None:
        try:
            import jax
            from jax._src import distributed

            if distributed.global_state.client is not None:
                index = jax.process_index() if index is None else index
                count = jax.process_count() if count is None else count
        except Exception:  # an older or newer JAX without this state: no rank
            pass
    # Ranks are compared within a job: without one, the run name (the same on every
    # rank when the launcher sets it) stands in.
    job = cfg.job or (cfg.run_name if index is not None else "")
    return {"job": job, "process_index": index, "process_count": count}


def _job_changed(cfg: configmod.Config, run: RunInfo) -> bool:
    return (
        (bool(cfg.job) and cfg.job != run.job)
        or (cfg.process_index is not None and cfg.process_index != run.process_index)
        or (cfg.process_count is not None and cfg.process_count != run.process_count)
    )


_cache_dir_applied: str | None = None


def _apply_persistent_cache(cfg: configmod.Config) -> None:
    """Turn JAX's persistent compilation cache on in ``persistent_cache_dir``, once per directory."""
    global _cache_dir_applied
    path = cfg.persistent_cache_dir
    if not path or path == _cache_dir_applied:
        return
    import jax

    path = os.path.abspath(os.path.expanduser(path))
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise configmod.ConfigError(
            f"persistent_cache_dir={cfg.persistent_cache_dir!r} cannot be created: {exc}"
        ) from None
    jax.config.update("jax_compilation_cache_dir", path)
    # Cache every compile, however small or quick: what cachewatch explains is each one.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    try:
        # JAX decides once per process whether the cache is on; a compile made before
        # this call would have decided "off".
        from jax._src import compilation_cache

        compilation_cache.reset_cache()
    except Exception:
        pass
    _cache_dir_applied = cfg.persistent_cache_dir


_process_start = time.time()


def _get_writer() -> "Writer":
    writer = _writer
    if writer is None or writer.pid != os.getpid():
        with _lock:
            if _writer is None or _writer.pid != os.getpid():
                _set_writer(Writer(config()))
            writer = _writer
    return writer  # type: ignore[return-value]


def use_sink(sink: "Sink | None") -> "Sink":
    """Hand every later batch to ``sink`` (anything with ``write(batch: Batch)``), or, with
    None, to the store ``CACHEWATCH_STORE`` names again. Returns the sink used until now.

        previous = cachewatch.recorder.use_sink(MySink())
    """
    writer = _get_writer()
    previous = writer.sink()
    writer._sink = sink
    return previous


def record_event(event: CompileEvent) -> None:
    """Hand an event to the writer (never blocks; drops and counts when full)."""
    _get_writer().put(event)
    for listener in list(_event_listeners):
        with _guard.guard("recorder.listener"):
            listener(event)


_event_listeners: list = []


def add_listener(callback) -> None:
    """Call ``callback(event)`` for every recorded event, in the recording thread."""
    _event_listeners.append(callback)


def remove_listener(callback) -> None:
    try:
        _event_listeners.remove(callback)
    except ValueError:
        pass


@dataclasses.dataclass(frozen=True)
class FlushResult:
    """What :func:`flush` achieved. True only when the events are in the store:

    if not cachewatch.flush(10):
        print(cachewatch.flush(0))  # FlushResult(done=True, spooled_batches=3, set_aside_batches=0)
    """

    done: bool  # the writer handled every event recorded before the call, within the timeout
    spooled_batches: int  # batches of this store waiting in the spool (not stored yet)
    set_aside_batches: int = 0  # batches this writer set aside for good (refused, unreadable), so far

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
    from .store import spool

    return FlushResult(
        done=done, spooled_batches=spool.pending_batches(writer.cfg), set_aside_batches=sum(writer.set_aside.values())
    )


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
        self.queue: queue.Queue = queue.Queue(maxsize=cfg.queue_size)
        self.dropped = 0
        self._dropped_reported = 0
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

    # -- producer side (any thread)

    def put(self, item: Any) -> None:
        self._ensure_thread()
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1
            self._warn(f"cachewatch queue full ({self.cfg.queue_size} events): {self.dropped} event(s) dropped so far")

    def flush(self, timeout: float) -> bool:
        self._ensure_thread()
        request = _FlushRequest()
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.queue.put(request, timeout=max(0.01, deadline - time.monotonic()))
                break
            except queue.Full:
                if time.monotonic() >= deadline:
                    return False
        return request.done.wait(max(0.0, deadline - time.monotonic()))

    def stop(self, timeout: float) -> None:
        self._stopping = True
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
                batch.append(item)
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
        now = time.monotonic()
        stats: list[CallStats] = []
        if with_stats or now - self._last_stats >= self.cfg.stats_interval:
            self._last_stats = now
            stats = _collect_call_stats()
        if not batch and not stats:
            self._drain_spool()
            return
        sink = self._get_sink()
        lost = self.dropped - self._dropped_reported
        payload = Batch(run=run_info(), events=batch, stats=stats, dropped=lost)
        failure = self._send(sink, payload)
        if failure is None:
            self.written += len(batch)
            self._dropped_reported += lost
            self._drain_spool(store_up=True)
        elif _refused(failure):
            # The store will never take this batch (it is invalid to it): spooling it would
            # only block the batches behind it.
            self.dropped += len(batch)
            self.set_aside["refused by the store"] += 1
            self._warn(f"cachewatch: {self._shown_store()} refused a batch, {len(batch)} event(s) dropped: {failure}")
        else:
            self.failed_batches += 1
            from .store import spool

            spooled = spool.save(self.cfg, payload)
            if not spooled:
                self.dropped += len(batch)
            self._warn(
                f"cachewatch could not write to {self._shown_store()}; "
                f"{'spooled' if spooled else 'dropped'} {len(batch)} event(s)"
            )

    def _shown_store(self) -> str:
        from .store.engine import redact_url  # loaded already: the sink's module imports it

        return redact_url(self.cfg.store)

    def _send(self, sink: Any, payload: "Batch", attempts: int = 4) -> Exception | None:
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
        from .store import spool

        if not spool.has_pending(self.cfg):
            return
        sink = self._get_sink()

        def send(payload: Batch) -> str:
            failure = self._send(sink, payload, attempts=1)
            if failure is None:
                self.written += len(payload.events)
                return "sent"
            return "refused" if _refused(failure) else "failed"

        result = spool.replay(self.cfg, send, store_up=store_up)
        if result.set_aside:
            self.set_aside.update(result.set_aside)
            self.dropped += result.set_aside_events  # reported to the store with the next batch
            self._warn(
                f"cachewatch: set aside spooled batches for good ({dict(result.set_aside)}); "
                f"they stay in {spool._dir(self.cfg)} as *.bad"
            )

    def sink(self) -> "Sink":
        """The sink batches go to: the store CACHEWATCH_STORE names unless use_sink() set one."""
        return self._get_sink()

    def _get_sink(self) -> "Sink":
        if self._sink is None:
            from .store.sinks import open_sink

            self._sink = open_sink(self.cfg)
        return self._sink


_EMPTY = object()


def _refused(exc: Exception) -> bool:
    """A client error the store will repeat for this batch whatever we do (not auth, not rate)."""
    status = getattr(exc, "status", None)
    return isinstance(status, int) and 400 <= status < 500 and status not in (401, 403, 408, 425, 429)


def _collect_call_stats() -> list[CallStats]:
    rows = []
    now = time.time()
    rid = run_id()
    for stats in all_call_stats():
        calls = stats.calls
        samples = stats.take_samples()
        if calls == stats.flushed_calls and not samples:
            continue
        new_calls = calls - stats.flushed_calls
        stats.flushed_calls = calls
        sample_every = stats.sample_every if stats.sampling else 0
        if not samples:
            rows.append(
                CallStats(
                    run_id=rid,
                    function=stats.function,
                    timestamp=now,
                    calls=new_calls,
                    sampled_calls=0,
                    sampled_seconds=0.0,
                    sample_every=sample_every,
                )
            )
            continue
        for signature_hash, (buckets, seconds) in samples.items():
            rows.append(
                CallStats(
                    run_id=rid,
                    function=stats.function,
                    timestamp=now,
                    calls=new_calls,
                    sampled_calls=sum(v[0] for v in buckets.values()),
                    sampled_seconds=seconds[0],
                    signature_hash=signature_hash,
                    run_buckets=to_json(buckets),
                    sample_every=sample_every,
                )
            )
            new_calls = 0  # the function's calls go on its first row
    return rows


def _at_exit() -> None:
    writer = _writer
    if writer is None or writer.pid != os.getpid():
        return
    timeout = writer.cfg.exit_timeout
    if not writer.flush(timeout):
        left = writer.queue.qsize()
        logger.warning("cachewatch: %d event(s) not written within %.1fs at exit", left, timeout)


def _after_fork_in_child() -> None:
    # The child is a new process: a new run, a new writer thread, a fresh history.
    global _writer, _run, _run_id, _lock, _process_start, _steady_since
    _lock = threading.RLock()
    _writer = None
    _run = None
    _run_id = None
    _process_start = time.time()
    _steady_since = None
    _compiled_functions.clear()
    from . import causes

    causes.reset()
    for stats in all_call_stats():  # the parent's calls were the parent's to report
        stats.flushed_calls = stats.calls
        stats.take_samples()


atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
