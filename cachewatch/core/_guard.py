"""The one guard around cachewatch's own work.

Telemetry must never break the program it watches: an error inside cachewatch is
logged once per place (and at most once a minute overall), counted, and swallowed.
cachewatch's own test suite sets ``raise_internal_errors`` so that the same error
fails the test instead.

    @guarded(default=None)
    def _record(...): ...

    with guard("writer.batch"):
        ...
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

logger = logging.getLogger("cachewatch")

F = TypeVar("F", bound=Callable[..., Any])

_lock = threading.Lock()
_counts: dict[str, int] = {}
_last_warning = 0.0
_WARNING_INTERVAL = 60.0
raise_errors = False


def internal_error_count() -> int:
    with _lock:
        return sum(_counts.values())


def internal_errors() -> dict[str, int]:
    with _lock:
        return dict(_counts)


def reset() -> None:
    global _last_warning
    with _lock:
        _counts.clear()
        _last_warning = 0.0


def after_fork_in_child() -> None:
    """A fresh lock in a forked child: a thread of the parent's that was reporting an error
    when it forked held the lock and is not here to release it."""
    global _lock
    _lock = threading.Lock()


def report(where: str, exc: BaseException) -> None:
    """Count an internal error and warn about it, rate-limited."""
    global _last_warning
    with _lock:
        first_here = where not in _counts
        _counts[where] = _counts.get(where, 0) + 1
        now = time.monotonic()
        due = first_here or now - _last_warning >= _WARNING_INTERVAL
        if due:
            _last_warning = now
    if due:
        logger.warning(
            "cachewatch internal error in %s (your program is unaffected): %s: %s",
            where,
            type(exc).__name__,
            exc,
            exc_info=first_here,
        )


class guard:
    """Context manager: swallow and report an internal error (re-raise under tests)."""

    __slots__ = ("where",)

    def __init__(self, where: str):
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None or not isinstance(exc, Exception):
            return False
        report(self.where, exc)
        return not raise_errors


def guarded(default: Any = None, where: str | None = None) -> Callable[[F], F]:
    """Decorator form of :class:`guard`: on an internal error return ``default``."""

    def decorate(fn: F) -> F:
        place = where or fn.__qualname__

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                report(place, exc)
                if raise_errors:
                    raise
                return default

        return wrapper  # type: ignore[return-value]

    return decorate
