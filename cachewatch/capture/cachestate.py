"""What a compile leaves behind: host memory around it, what the persistent compilation
cache did with it, and when JAX's caches let its executables go.

Host memory. Before the backend compile (when JAX reports the end of lowering) the
resident set is read from ``/proc/self/statm`` and the kernel's high-water mark of the
resident set is reset (``5`` written to ``/proc/self/clear_refs``); when JAX reports the
end of the backend compile, ``/proc/self/status`` gives the resident set after it and
the high-water mark, which is then the peak *during* the compile. Both files are kept
open and read with ``pread`` (a few microseconds each). The reset is process-wide: two
threads compiling at once each see the higher peak of the two, and a tool of the
program's own that reads ``VmHWM`` reads the peak since the last compile. Where the
reset is refused (no ``/proc``, a kernel without it) the peak is kept only when the
high-water mark rose during the compile (then it is the peak); otherwise it is None.

Persistent cache. JAX asks its cache (``compile_requests_use_cache``), then reports a
hit, or compiles and reports ``cache_misses`` only when it wrote the entry. A compile
that asked and neither hit nor wrote was not written, and the reason is the first of
JAX's own checks (``compiler._cache_write``) that it failed: process 0 only, then the
minimum compile time; anything else (a host callback, the minimum entry size, an
error JAX warned about) is ``error_or_other``. The entry's key, which names the entry's
file, and its size are read off JAX's frames by the seam (``jaxcompat.persistent_cache_key``);
the directory it goes to off JAX's cache (``jaxcompat.persistent_cache_directory``), so an
entry missing from that directory later is one its size limit evicted (or a person deleted).

Releases. ``jax.clear_caches()`` calls every cache registered with JAX; one registered
here notes the time, and ``clear_cache()`` of a wrapped function notes its function.
The recorder collects them with the call statistics as rows with ``released_by`` set.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..core import _guard, jaxcompat, process
from ..core.events import (
    HOST_MEMORY_FIELDS,
    PERSISTENT_CACHE_FIELDS,
    CallStats,
    FunctionInfo,
    NotWrittenReason,
    PersistentCache,
)
from ..record import recorder
from . import counters

# ------------------------------------------------------------------ host memory


def _proc_io() -> tuple[Callable[[int, int, int], bytes], Callable[[int, bytes], int]]:
    """pread and write for the /proc files: the C extension's, which keep the GIL (the
    kernel answers in microseconds; letting go of the GIL on a compiling thread hands it to
    cachewatch's writer for up to its switch interval), else the os module's."""
    native = counters.native()
    if native is not None and hasattr(native, "pread"):
        return native.pread, native.write
    return os.pread, os.write


_pread, _write = _proc_io()
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_fds: dict[str, int] = {}
_fds_pid = 0
_can_reset: bool | None = None


def _fd(name: str, flags: int) -> int:
    global _fds_pid
    if _fds_pid != os.getpid():  # a forked child reads its own /proc/self
        for fd in _fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        _fds.clear()
        _fds_pid = os.getpid()
    found = _fds.get(name)
    if found is None:
        found = _fds[name] = os.open(f"/proc/self/{name}", flags)
    return found


def resident_bytes() -> int | None:
    """The process's resident set now (bytes), or None without /proc."""
    try:
        return int(_pread(_fd("statm", os.O_RDONLY), 128, 0).split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def _status_figures() -> tuple[int, int] | None:
    """(resident set, its high-water mark) in bytes, from /proc/self/status."""
    try:
        text = _pread(_fd("status", os.O_RDONLY), 8192, 0)
        hwm_at = text.index(b"VmHWM:")
        rss_at = text.index(b"VmRSS:", hwm_at)
        hwm = int(text[hwm_at + 6 : text.index(b"kB", hwm_at)])
        rss = int(text[rss_at + 6 : text.index(b"kB", rss_at)])
        return rss * 1024, hwm * 1024
    except (OSError, ValueError):
        return None


def _reset_peak() -> bool:
    """Reset the kernel's high-water mark of the resident set; False where it cannot be."""
    global _can_reset
    if _can_reset is False:
        return False
    try:
        _write(_fd("clear_refs", os.O_WRONLY), b"5")
        _can_reset = True
    except OSError:
        _can_reset = False
    return _can_reset


def begin_compile() -> tuple[int, int | None] | None:
    """Readings before a backend compile: (resident bytes, the high-water mark when it could
    not be reset, else None); None without /proc."""
    before = resident_bytes()
    if before is None:
        return None
    if _reset_peak():
        return before, None
    figures = _status_figures()
    return before, figures[1] if figures else None


def end_compile(begun: tuple[int, int | None] | None) -> tuple[int | None, int | None, int | None]:
    """(host bytes gained and kept, resident bytes before, peak resident bytes during) of a
    compile begun with :func:`begin_compile`."""
    if begun is None:
        return None, None, None
    figures = _status_figures()
    if figures is None:
        return None, begun[0], None
    rss, hwm = figures
    before, old_hwm = begun
    if old_hwm is not None and hwm <= old_hwm:
        peak = None  # the mark could not be reset and did not rise: the peak is not known
    else:
        peak = max(hwm, before, rss)
    return rss - before, before, peak


# ------------------------------------------------------------------ persistent cache


def _jax_config(name: str) -> Any:
    try:
        import jax

        return getattr(jax.config, name)
    except AttributeError:  # a flag this JAX does not have
        return None


def outcome(requested: bool, hit: bool, written: bool, compile_seconds: float | None) -> tuple[str, str | None]:
    """(``persistent_cache``, ``persistent_cache_reason``) of one compile."""
    if not requested:
        return PersistentCache.OFF.value, None
    if hit:
        return PersistentCache.HIT.value, None
    if written:
        return PersistentCache.WRITTEN.value, None
    return PersistentCache.NOT_WRITTEN.value, _not_written_reason(compile_seconds)


def _not_written_reason(compile_seconds: float | None) -> str:
    # JAX's own order of checks (compiler._cache_write): process 0 only, host callbacks,
    # then the minimum compile time.
    try:
        import jax

        if jax.process_index() != 0:
            return NotWrittenReason.NOT_PROCESS_0.value
    except RuntimeError:  # no backend could start
        pass
    minimum = _jax_config("jax_persistent_cache_min_compile_time_secs")
    if isinstance(minimum, (int, float)) and compile_seconds is not None and compile_seconds < minimum:
        return NotWrittenReason.MIN_COMPILE_TIME.value
    return NotWrittenReason.ERROR_OR_OTHER.value


def readings(record: Any) -> dict[str, Any]:
    """What was read around one compile, as its event's fields (only those taken): the
    host's memory when it was read, what the persistent cache did when it was asked. A
    field left out is None, the event's own default: not read."""
    taken: dict[str, Any] = {}
    if not record.compiles:
        return taken
    if record.host_bytes_before is not None:
        taken.update((name, getattr(record, name)) for name in HOST_MEMORY_FIELDS)
    if record.persistent_cache is not None:
        taken.update((name, getattr(record, name)) for name in PERSISTENT_CACHE_FIELDS)
    return taken


# ------------------------------------------------------------------ releases

_lock = threading.Lock()
# Functions that compiled since their executables were last released (by hash).
_holding: dict[str, FunctionInfo] = {}
_MAX_HOLDING = 100_000
# Releases not yet collected: (function, when, by what).
_released: list[tuple[FunctionInfo, float, str]] = []
_MAX_RELEASED = 100_000
CLEAR_CACHES = "jax.clear_caches()"
CLEAR_CACHE = "clear_cache()"


class _ReleaseNotice(jaxcompat.ClearListener):
    """Notes that ``jax.clear_caches()`` released every executable."""

    def cache_clear(self) -> None:
        with _guard.guard("cachestate.clear_caches"):
            released(None, CLEAR_CACHES)


# Registered at the first compile, not at import.
_notice = _ReleaseNotice("cachewatch: notes jax.clear_caches()")


def compiled(info: FunctionInfo) -> None:
    """Note that ``info`` holds a new executable (it is released by the next clear)."""
    _notice.register()
    if info.function_hash not in _holding and len(_holding) < _MAX_HOLDING:
        with _lock:
            _holding[info.function_hash] = info


def released(info: FunctionInfo | None, by: str) -> None:
    """The executables of ``info`` (of every function when None) were released ``by``."""
    now = time.time()
    with _lock:
        if info is None:
            gone = list(_holding.values())
            _holding.clear()
        else:
            found = _holding.pop(info.function_hash, None)
            gone = [found or info]
        room = _MAX_RELEASED - len(_released)
        _released.extend((function, now, by) for function in gone[: max(0, room)])


def collect_releases(run_id: str) -> list[CallStats]:
    """Rows for the releases since the previous collection (calls 0, ``released_by`` set)."""
    if not _released:
        return []
    with _lock:
        taken = list(_released)
        _released.clear()
    return [
        CallStats(
            run_id=run_id,
            function=info,
            timestamp=when,
            calls=0,
            sampled_calls=0,
            sampled_seconds=0.0,
            released_by=by,
        )
        for info, when, by in taken
    ]


recorder.collect_stats_from(collect_releases)


def _after_fork_in_child() -> None:
    with _lock:
        _released.clear()  # the parent's to report


process.on_fork_in_child(process.Concern.REPORTS, _after_fork_in_child)
