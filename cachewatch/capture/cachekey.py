"""JAX's persistent compilation cache: hit or miss per compile, and the key, part by part.

JAX hashes a compile's key from parts (the program, the jaxlib version, the backend,
the XLA flags, the compile options, the devices, ...) and logs each part's own hash
at DEBUG level as it builds the key. cachewatch reads those log records through the
seam (``jaxcompat.read_cache_key_log``: the logger is set to pass them, and a filter
keeps them from the program's own log handlers unless the program asked for JAX's
debug logs), so a later miss can be explained by the parts whose hash changed since a
run that hit.

Hit and miss come from JAX's monitoring events: a request to the cache, then a hit
or none; each is attributed to the record of the compile on the same thread.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ..core import _guard, jaxcompat
from . import _tracking, building

REQUEST_EVENT = jaxcompat.EVENTS["cache_request"]
HIT_EVENT = jaxcompat.EVENTS["cache_hit"]
_HASH_CHARS = 16  # of each part's sha256: plenty to tell two parts apart
_MAX_KEPT = 1024  # compiles whose key waits for its event to be built

_tls = threading.local()
_lock = threading.Lock()
_by_seq: dict[int, tuple[bool, dict[str, str]]] = {}
_installed = False


def _on_key_part(part: object, digest: object) -> None:
    """One part's hash of the key JAX is building on this thread (from the seam's log reader)."""
    with _guard.guard("cachekey.log"):
        parts = getattr(_tls, "parts", None)
        if parts is None or part == "computation":  # the first part: a new key
            parts = _tls.parts = {}
        parts[str(part)] = str(digest)[:_HASH_CHARS]


def install() -> None:
    """Listen for the cache's events and read the key's parts (once per process)."""
    global _installed, REQUEST_EVENT, HIT_EVENT
    with _lock:
        if _installed:
            return
        REQUEST_EVENT, HIT_EVENT = jaxcompat.EVENTS["cache_request"], jaxcompat.EVENTS["cache_hit"]
        from jax import monitoring

        jaxcompat.read_cache_key_log(_on_key_part)
        monitoring.register_event_listener(_on_event)
        building.cache_key_of = take  # every compile event takes its key through the one builder
        _installed = True


def _readable() -> dict[str, str]:
    """Plain values beside the hashes, for a person reading a miss."""
    import jax
    import jaxlib

    out = {"jax": jax.__version__, "jaxlib": getattr(jaxlib, "__version__", "")}
    try:
        out["backend"] = jax.default_backend()
        out["device_kind"] = jax.devices()[0].device_kind
    except (RuntimeError, AttributeError):  # no backend could start, or a device without a kind
        pass
    out["xla_flags"] = os.environ.get("XLA_FLAGS", "")[:400]
    return out


@_guard.guarded(where="cachekey.event")
def _on_event(event: str, **kwargs: Any) -> None:
    if event != REQUEST_EVENT and event != HIT_EVENT:
        return
    if _tracking.suppressed() or not _cache_dir():
        return  # JAX also "asks" the cache when none is configured: that is no miss to report
    record = _tracking._latest(lambda r: r.lower_seconds is not None)
    if record is None:
        return
    with _lock:
        if event == REQUEST_EVENT:
            parts = getattr(_tls, "parts", None) or {}
            _tls.parts = None
            _by_seq[record.seq] = (False, {**parts, **_readable()})
            if len(_by_seq) > _MAX_KEPT:
                for seq in sorted(_by_seq)[: len(_by_seq) - _MAX_KEPT]:
                    del _by_seq[seq]
        else:
            found = _by_seq.get(record.seq)
            if found is not None:
                _by_seq[record.seq] = (True, found[1])


def _cache_dir() -> str | None:
    try:
        import jax

        # A flag: JAX 0.12 types attribute reads of its config, 0.10 does not; getattr suits both.
        return getattr(jax.config, "jax_compilation_cache_dir")
    except AttributeError:  # a JAX without the persistent cache
        return None


def take(seq: int) -> tuple[bool | None, dict[str, str] | None]:
    """(hit, key parts) of the compile recorded as ``seq``; (None, None) when it did not
    ask the persistent cache."""
    if not _by_seq:
        return None, None
    with _lock:
        found = _by_seq.pop(seq, None)
    if found is None:
        return None, None
    return found
