"""cachewatch: every ``jax.jit`` trace and compile, why it happened, and what it cost.

import cachewatch

@cachewatch.jit                      # drop-in for jax.jit
def step(params, batch): ...

cachewatch.configure(store="sqlite:///cachewatch.db", run_name="exp-42")
cachewatch.install()                 # observe every jax.jit in the process
with cachewatch.expect_compiles(step, at_most=1):
    step(params, batch)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jax

from . import notebook
from .ahead import WarmupError, warmup
from .capture import _tracking, pmapped
from .capture.guards import (
    FrozenCompileError,
    FrozenCompileWarning,
    RecompileLimitError,
    RecompileLimitWarning,
    freeze,
    unfreeze,
)
from .capture.jit import is_watched, jit
from .core import _guard
from .core.config import ConfigError
from .core.events import CAUSES, VERSION, CompileEvent
from .exports import otel as _otel  # noqa: F401  (each compile as a span when an OTLP endpoint is set)
from .exports.scalars import log_scalars
from .record.current import configure
from .record.recorder import flush

__version__ = VERSION

__all__ = [
    "CAUSES",
    "CompileEvent",
    "ConfigError",
    "UnexpectedCompiles",
    "configure",
    "is_watched",
    "expect_compiles",
    "flush",
    "install",
    "installed",
    "jit",
    "log_scalars",
    "report",
    "load_ipython_extension",
    "unload_ipython_extension",
    "uninstall",
    "warmup",
    "WarmupError",
    "RecompileLimitError",
    "FrozenCompileError",
    "RecompileLimitWarning",
    "FrozenCompileWarning",
    "freeze",
    "unfreeze",
]

_install_lock = threading.Lock()
_original_jax_jit: Callable[..., Any] | None = None
_original_jax_pmap: Callable[..., Any] | None = None


def install() -> None:
    """Record every compile JAX makes in this process from now on.

    ``jax.jit`` itself becomes ``cachewatch.jit``, so every jit made after this (by the
    program, Flax, Optax, Equinox ...) is wrapped, with full causes and call counts. Jit
    objects made before (JAX's own ``jnp.mean``, ``jax.random.normal``; a library's made
    at its import; a name bound by ``from jax import jit`` earlier) and eager primitives
    are recorded from JAX's compile events, with their signatures and causes but
    without call counts.
    """
    global _original_jax_jit, _original_jax_pmap
    with _install_lock:
        if _original_jax_jit is None:
            _original_jax_jit = jax.jit
            jax.jit = jit  # type: ignore[assignment]
        if _original_jax_pmap is None:
            _original_jax_pmap = jax.pmap
            jax.pmap = pmapped.counting(jax.pmap)
        with _guard.guard("install"):
            _tracking.record_everything(True)


def uninstall() -> None:
    """Undo ``install()``: ``jax.jit`` is JAX's again and foreign compiles are no longer recorded."""
    global _original_jax_jit, _original_jax_pmap
    with _install_lock:
        if _original_jax_jit is not None:
            jax.jit = _original_jax_jit
            _original_jax_jit = None
        if _original_jax_pmap is not None:
            jax.pmap = _original_jax_pmap
            _original_jax_pmap = None
        with _guard.guard("uninstall"):
            _tracking.record_everything(False)


def report(run_id: str | None = None) -> notebook.RunReport:
    """This run's summary (compiles, top functions and their causes, storms), as
    ``cachewatch run`` prints it at exit; in a notebook it shows as a table.

        cachewatch.report()            # the last line of a cell
    """
    return notebook.run_report(run_id)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext cachewatch``: install(), and the ``%%cachewatch`` cell magic (cachewatch.notebook)."""
    notebook.load(ipython, install)


def unload_ipython_extension(ipython: Any) -> None:
    notebook.unload(ipython)


def installed() -> bool:
    return _original_jax_jit is not None


class UnexpectedCompiles(AssertionError):
    """More compiles happened inside ``expect_compiles`` than allowed."""

    def __init__(self, name: str, at_most: int, events: list[CompileEvent]):
        self.events = events
        lines = [f"`{name}` compiled {len(events)} time(s), at most {at_most} expected:"]
        for event in events:
            lines.append(
                f"  - {event.cause}: {event.explanation}" + (f" (at {event.call_site})" if event.call_site else "")
            )
            lines.extend(
                f"      {entry.get('path')}: {entry.get('before')} -> {entry.get('after')}" for entry in event.diff
            )
        super().__init__("\n".join(lines))


@contextlib.contextmanager
def expect_compiles(fn: Any, at_most: int = 0) -> Iterator[list[CompileEvent]]:
    """Fail (in CI, say) when ``fn`` compiles more than ``at_most`` times inside the block.

        with cachewatch.expect_compiles(step, at_most=1):
            for batch in batches:
                step(params, batch)

    The list it yields fills with the compile events seen so far.
    """
    if not is_watched(fn):
        raise TypeError(
            "expect_compiles needs a function wrapped by cachewatch.jit "
            f"(or jax.jit after cachewatch.install()), got {type(fn).__name__}"
        )
    state = fn.__cachewatch_state__
    target = state.info.function_hash
    seen: list[CompileEvent] = []

    def listener(event: CompileEvent) -> None:
        if event.function.function_hash == target and event.compiled:
            seen.append(event)

    from .record import recorder

    recorder.add_listener(listener, at_once=True)
    try:
        yield seen
    finally:
        recorder.remove_listener(listener)
    if len(seen) > at_most:
        raise UnexpectedCompiles(state.info.qualname, at_most, seen)


def internal_error_count() -> int:
    """How many errors cachewatch swallowed in this process (each was logged once)."""
    return _guard.internal_error_count()
