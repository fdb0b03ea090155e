"""The run this process records: its settings, its identity, and its warm-up.

Settings are resolved once from ``configure()`` arguments, ``CACHEWATCH_*`` variables
and defaults. A run is one process (or a new run name or job set by ``configure()``);
its ``RunInfo`` goes with every batch. Warm-up is the run's set-up and first compiles,
which storms leave out.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..core import _guard, jaxcompat, process
from ..core import config as configmod
from ..core.events import RunInfo
from ..core.warmup import WarmupWatch

_lock = threading.RLock()
_config: configmod.Config | None = None
_overrides: dict[str, Any] = {}
_store_changed: list[Callable[[configmod.Config], None]] = []
_configured: list[Callable[[configmod.Config], None]] = []
_run_ending: list[Callable[[], None]] = []
_run_began: list[Callable[[], None]] = []


def config() -> configmod.Config:
    global _config
    cfg = _config
    if cfg is None:
        with _lock:
            if _config is None:
                _config = configmod.resolve(_overrides)
                _guard.raise_errors = _config.raise_internal_errors
                with _guard.guard("current.persistent_cache"):  # from the environment, on first use
                    _apply_persistent_cache(_config)
            cfg = _config
    return cfg


def configure(**settings: Any) -> configmod.Config:
    """Change settings; events already queued go to the store they were meant for."""
    global _config, _overrides
    if _may_end_run(settings):
        for ending in _run_ending:  # the recorder writes what the run counted, under its id
            ending()
    with _lock:
        merged = {**_overrides, **settings}
        new = configmod.resolve(merged)  # raises ConfigError before anything changes
        _apply_persistent_cache(new)  # so does a cache directory that cannot be made
        if _config is not None and new.store != _config.store:
            for callback in _store_changed:
                callback(new)
        _overrides = merged
        _config = new
        _guard.raise_errors = new.raise_internal_errors
        for callback in _configured:  # e.g. functions wrapped before this call sample anew
            callback(new)
        info = _run.info
        if info is not None and (new.run_name != info.run_name or _job_changed(new, info)):
            _new_run()
    return new


def _may_end_run(settings: dict[str, Any]) -> bool:
    """Whether configure(**settings) names another run or job (told before the lock is
    taken: the run's last writes need the writer, which reads the run under that lock).
    Whether a new run begins is told after them: only a run that wrote something has
    ended; one that recorded nothing yet takes the new name."""
    old = _config
    if old is None:
        return False
    try:
        new = configmod.resolve({**_overrides, **settings})
    except configmod.ConfigError:
        return False  # configure() itself raises it, with nothing changed
    return new.run_name != old.run_name or (new.job, new.process_index, new.process_count) != (
        old.job,
        old.process_index,
        old.process_count,
    )


def on_run_ending(callback: Callable[[], None]) -> None:
    """Call ``callback()`` before configure() begins a new run in this process, while the
    old one is still current (the recorder writes what it holds for it)."""
    _run_ending.append(callback)


def on_run_begun(callback: Callable[[], None]) -> None:
    """Call ``callback()`` once configure() (with a new run name or job) has begun a new
    run in this process: what counts per run starts again from there. A forked child's
    new run is each concern's own fork handler's to begin."""
    _run_began.append(callback)


def on_configure(callback: Callable[[configmod.Config], None]) -> None:
    """Call ``callback(new_config)`` after every configure(); capture registers here, so
    the run never imports what sits above it."""
    _configured.append(callback)


def on_store_change(callback: Callable[[configmod.Config], None]) -> None:
    """Call ``callback(new_config)`` when configure() points the run at another store,
    before the change takes effect (the recorder writes what it holds to the old store)."""
    _store_changed.append(callback)


def reset_configuration() -> None:
    """Forget settings made by configure(); the environment and defaults apply again."""
    global _overrides
    with _lock:
        _overrides = {}
    configure()


class _Run:
    """The run this process records now: its identity, its start, and what its warm-up
    has seen. A forked child begins a new one, and so does configure() with a new run
    name or job. When warm-up ended stays a module global (``_steady_since``): jit's
    sampled calls read it through steady(), and a global is the cheaper read there."""

    __slots__ = ("id", "info", "started", "seen_rank", "compiled_functions", "warmup_watch", "compiled_any")

    def __init__(self) -> None:
        self.id: str | None = None  # made on first use
        self.info: RunInfo | None = None  # described on first use
        self.started = time.time()
        # The rank seen while the program ran: a run first described after
        # jax.distributed.shutdown() (its events written at exit) still carries it.
        self.seen_rank: tuple[int, int] | None = None
        self.compiled_functions: set[str] = set()  # the user's functions compiled once in warm-up
        self.warmup_watch = WarmupWatch()  # what warm-up has compiled from where
        self.compiled_any: set[str] = set()  # every function that compiled in this run

    def begin(self, run_id: str | None) -> None:
        """Start a new run now (``run_id`` None: made on first use); the rank seen stays."""
        self.id = run_id
        self.info = None
        self.started = time.time()
        self.compiled_functions.clear()
        self.warmup_watch = WarmupWatch()
        self.compiled_any = set()


_run = _Run()


def run_id() -> str:
    found = _run.id
    if found is None:
        with _lock:
            if _run.id is None:
                _run.id = uuid.uuid4().hex
            found = _run.id
    return found


def _new_run() -> None:
    global _steady_since
    _run.begin(uuid.uuid4().hex)  # a later run in the same process starts now
    _steady_since = None
    for began in _run_began:
        began()


# Warm-up: a run starts by building its model and optimizer and compiling each jitted
# step once. It ends when the user's own jitted code runs a second time: a call of one
# of the user's wrapped functions that neither traced nor compiled, or a second compile
# of one (the loop is running, and recompiling). With warmup_seconds set, warm-up is
# instead the first warmup_seconds of the run (for programs without a jitted step).
# Compiles made during warm-up are flagged, and storms are found among the others only.
_steady_since: float | None = None


def mark_steady() -> None:
    """The user's jitted code runs again: warm-up is over."""
    global _steady_since
    if _steady_since is None:
        _steady_since = time.time()


def note_user_compile(function_hash: str) -> None:
    """A compile of one of the user's functions; the second of the same function ends warm-up."""
    if _steady_since is None:
        if function_hash in _run.compiled_functions:
            mark_steady()
        else:
            _run.compiled_functions.add(function_hash)


def note_compile(
    function_hash: str,
    cause: str,
    call_site: str | None,
    module: str,
    stack: list[dict[str, str]] | None = None,
    remade_static: bool = False,
) -> None:
    """Any compile (a library's jit, JAX's own, a primitive run op by op), before its
    warm-up flag is read: warm-up also ends when the program is seen repeating its work
    with no jit of the user's to show it (``core.warmup.WarmupWatch``: the one rule, which
    the store's readers ask again for events recorded before it saw them)."""
    if _steady_since is not None:
        return
    with _lock:
        ended = _run.warmup_watch.sees_work_again(call_site, function_hash, cause, module, stack, remade_static)
    if ended:
        mark_steady()


def first_compile_in_run(function_hash: str) -> bool:
    """Whether this compile is the function's first in the run (it is then noted)."""
    with _lock:
        if function_hash in _run.compiled_any:
            return False
        _run.compiled_any.add(function_hash)
        return True


def steady() -> bool:
    return _steady_since is not None


def in_warmup(timestamp: float) -> bool:
    """Whether a compile that started at ``timestamp`` belongs to the run's warm-up."""
    window = config().warmup_seconds
    if window > 0:
        return timestamp - _run.started < window
    return _steady_since is None


def run_started() -> float:
    """When this run began (the process's start, or the configure() that began a new run)."""
    return _run.started


def run_info() -> RunInfo:
    if _run.info is None:
        with _lock:
            if _run.info is None:
                _run.info = _describe_run()
    run = _run.info
    off = tuple(jaxcompat.off())
    if off != run.capabilities_off:  # a capability turned off since: the run says so
        with _lock:
            run = _run.info = dataclasses.replace(run, capabilities_off=off)
    return run


def _describe_run() -> RunInfo:
    import jax
    import jaxlib

    try:
        backend = jax.default_backend()
        devices = tuple(str(d) for d in jax.devices())
    except RuntimeError:  # no backend could start
        backend, devices = "", ()
    return RunInfo(
        run_id=run_id(),
        run_name=config().run_name,
        host=socket.gethostname(),
        pid=os.getpid(),
        started_at=_run.started,  # the process's start, or the time configure() began a new run
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
        rank = _distributed_rank() or _run.seen_rank
        if rank is not None:
            index = rank[0] if index is None else index
            count = rank[1] if count is None else count
    # Ranks are compared within a job: without one, the run name (the same on every
    # rank when the launcher sets it) stands in.
    job = cfg.job or (cfg.run_name if index is not None else "")
    return {"job": job, "process_index": index, "process_count": count}


def _distributed_rank() -> tuple[int, int] | None:
    """JAX's rank and rank count while it runs distributed (None otherwise)."""
    import jax

    if jaxcompat.distributed_initialized():
        return jax.process_index(), jax.process_count()
    return None


def note_rank() -> None:
    """Remember the process's rank, if it has one yet (called as events are recorded)."""
    if _run.seen_rank is None and _run.info is None:
        _run.seen_rank = _distributed_rank()


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
    # JAX decides once per process whether the cache is on; a compile made before this
    # call would have decided "off".
    jaxcompat.reset_persistent_cache()
    _cache_dir_applied = cfg.persistent_cache_dir


def _after_fork_in_child() -> None:
    # The child is a new process: a new run with its own warm-up, and no rank seen yet.
    global _lock, _steady_since
    _lock = threading.RLock()
    _run.begin(None)
    _run.seen_rank = None
    _steady_since = None


process.on_fork_in_child(process.Concern.RUN, _after_fork_in_child)
