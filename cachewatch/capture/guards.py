"""Run-time guards: a recompile limit per function, and ``freeze`` after warm-up.

    step = cachewatch.jit(step, max_recompiles=8, on_limit="raise")
    cachewatch.freeze(on_compile="raise")   # from here on, any compile is an error
    with cachewatch.freeze(on_compile="warn"): ...

Both decide in the trace hook, before JAX lowers and compiles: a refused trace raises
out of the user's function, so JAX caches nothing for it and everything it compiled
before stays usable. A compile that comes without a trace (a jaxpr JAX had cached, a
new device, or, after ``cachewatch.install()``, a jit made before it) is caught when JAX
announces the lowering, which is also before any work.

Nothing here raises or warns by itself: ``check_trace`` and ``on_lowering`` hand back
what to do, and the hook does it outside cachewatch's internal guard, so a refusal
reaches the user while an internal error still never does.
"""

from __future__ import annotations

import dataclasses
import threading
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

from ..core import _guard, jaxcompat
from ..core.events import Cause, DiffEntry
from ..explain import causes
from ..record import current
from . import _tracking, foreign

LOWERING_STARTED = jaxcompat.EVENTS["lower"]  # JAX also records it as a scalar (the start time) as lowering begins


class RecompileLimitError(RuntimeError):
    """A watched function would have compiled past its limit; JAX did not compile it.

    ``function``, ``cause``, ``diff`` (the structured diff against the closest earlier
    signature) and ``causes`` (cause -> count of the recompiles so far) say why.
    """

    def __init__(
        self,
        message: str,
        *,
        function: str = "",
        cause: str = "",
        diff: tuple[DiffEntry, ...] = (),
        causes: dict[str, int] | None = None,
    ):
        super().__init__(message)
        self.function = function
        self.cause = cause
        self.diff = diff
        self.causes = dict(causes or {})


class FrozenCompileError(RecompileLimitError):
    """A trace or compile happened after ``cachewatch.freeze()``."""


class RecompileLimitWarning(UserWarning):
    """A watched function compiled past its limit (``on_limit="warn"``)."""


class FrozenCompileWarning(RecompileLimitWarning):
    """A trace or compile happened after ``cachewatch.freeze(on_compile="warn")``."""


@dataclasses.dataclass
class Tally:
    """Recompiles of one function (every jit object around it) in this process."""

    name: str
    recompiles: int = 0
    causes: Counter = dataclasses.field(default_factory=Counter)
    limit: int = 0
    action: str = "warn"
    warned: bool = False
    exceeded: bool = False


_lock = threading.Lock()
_tallies: dict[str, Tally] = {}
_explicit: dict[str, tuple[int | None, str | None]] = {}  # function hash -> (max_recompiles, on_limit) from jit()
_frozen: str | None = None  # "raise" | "warn" while frozen
_frozen_at = 0
_tls = threading.local()


def set_limit(function_hash: str, max_recompiles: int | None, on_limit: str | None) -> None:
    """Record a limit given to ``cachewatch.jit``; it wins over ``CACHEWATCH_MAX_RECOMPILES``."""
    if max_recompiles is None and on_limit is None:
        return
    with _lock:
        before = _explicit.get(function_hash, (None, None))
        _explicit[function_hash] = (
            max_recompiles if max_recompiles is not None else before[0],
            on_limit if on_limit is not None else before[1],
        )


def check_options(max_recompiles: Any, on_limit: Any) -> None:
    """Refuse bad ``cachewatch.jit`` limit options when the function is wrapped, not later."""
    from ..core.config import ON_LIMIT_ACTIONS

    if max_recompiles is not None and (
        not isinstance(max_recompiles, int) or isinstance(max_recompiles, bool) or max_recompiles < 0
    ):
        raise ValueError(f"max_recompiles must be a non-negative int (0: no limit), got {max_recompiles!r}")
    if on_limit is not None and on_limit not in ON_LIMIT_ACTIONS:
        raise ValueError(f"on_limit must be one of {', '.join(ON_LIMIT_ACTIONS)}, got {on_limit!r}")


def _limit_for(function_hash: str) -> tuple[int, str]:
    cfg = current.config()
    limit, action = _explicit.get(function_hash, (None, None))
    return (cfg.max_recompiles if limit is None else limit, cfg.on_limit if action is None else action)


def tallies() -> dict[str, Tally]:
    """Recompiles counted per function hash (for reports and the pytest plugin)."""
    with _lock:
        return {k: dataclasses.replace(v, causes=Counter(v.causes)) for k, v in _tallies.items()}


def reset() -> None:
    """Forget counts, limits given to jit() stay (for tests and a new run)."""
    with _lock:
        _tallies.clear()


# ------------------------------------------------------------------------ freeze


class freeze:
    """After warm-up: any later trace or compile of a watched function is an error
    (``on_compile="raise"``, :class:`FrozenCompileError`) or a warning naming its cause.
    With ``cachewatch.install()``, compiles of any jit count.

        cachewatch.freeze()                  # until cachewatch.unfreeze()
        with cachewatch.freeze(on_compile="warn"):
            ...                              # the previous state comes back at exit
    """

    def __init__(self, on_compile: str = "raise"):
        global _frozen, _frozen_at
        if on_compile not in ("raise", "warn"):
            raise ValueError(f"on_compile must be 'raise' or 'warn', got {on_compile!r}")
        _install_lowering_listener()
        with _lock:
            self._previous = _frozen
            _frozen = on_compile
            _frozen_at = _tracking.activity

    def __enter__(self) -> freeze:
        return self

    def __exit__(self, *exc: object) -> None:
        global _frozen
        with _lock:
            _frozen = self._previous


def unfreeze() -> None:
    """Compiles are allowed again."""
    global _frozen
    with _lock:
        _frozen = None


def frozen() -> str | None:
    """``"raise"`` or ``"warn"`` while frozen, else None."""
    return _frozen


_listener_installed = False


def _install_lowering_listener() -> None:
    global _listener_installed, LOWERING_STARTED
    with _lock:
        if _listener_installed:
            return
        LOWERING_STARTED = jaxcompat.EVENTS["lower"]
        from jax import monitoring

        # JAX records a scalar (the start time) as it begins to lower a jaxpr: the last
        # moment before any compile work, for traces we did not see.
        monitoring.register_scalar_listener(_on_scalar)
        _listener_installed = True


def _on_scalar(event: str, value: float, **kwargs: Any) -> None:
    if event != LOWERING_STARTED or _frozen is None:
        return
    # The decision is cachewatch's own work and runs under the guard (a bug there never
    # reaches the compile); only the refusal it decides on is meant to.
    outcome = _decide_lowering(kwargs.get("fun_name"))
    if outcome is not None:
        act(outcome)


@_guard.guarded(where="guards.lowering")
def _decide_lowering(fun_name: Any) -> BaseException | Warning | None:
    return on_lowering(fun_name if isinstance(fun_name, str) else None)


# ------------------------------------------------------------------ the decision


def _format_diff(diff: tuple[DiffEntry, ...] | list) -> list[str]:
    lines = []
    for entry in diff:
        change = entry.get("change")
        before, after = entry.get("before"), entry.get("after")
        lines.append(f"    {entry.get('path')}: {before} -> {after}  ({entry.get('cause') or change})")
    return lines


def describe(name: str, verdict: causes.Verdict, call_site: str | None) -> list[str]:
    """Function, cause, the sentence and the diff: the body of every guard's message."""
    lines = [f"  function: {name}", f"  cause: {verdict.cause}", f"  why: {verdict.explanation}"]
    if call_site:
        lines.append(f"  called at: {call_site}")
    if verdict.diff:
        lines.append("  diff (before -> after):")
        lines.extend(_format_diff(verdict.diff))
    return lines


def check_trace(
    state: Any, record: _tracking.Record | None, call_site_of: Callable[[], str | None]
) -> BaseException | Warning | None:
    """What to do about this trace of a watched function: None (go on), a warning to
    emit, or an exception to raise. Counts the trace when it is a recompile."""
    if record is None or record.signature is None:
        return None  # cachewatch's own trace (suppressed), or no signature to judge by
    info = state.info
    frozen_mode = _frozen
    limit, action = _limit_for(info.function_hash)
    if frozen_mode is None and limit <= 0:
        return None  # no limit on this function: nothing to count
    call_site = call_site_of()
    verdict = causes.preview_trace(info.function_hash, state.serial, info.name, record.signature, call_site)
    if frozen_mode is not None:
        head = f"`{info.qualname}` would be traced and compiled after cachewatch.freeze() ({verdict.cause}):"
        text = "\n".join([head, *describe(info.qualname, verdict, call_site)])
        if frozen_mode == "raise":
            return FrozenCompileError(text, function=info.qualname, cause=verdict.cause, diff=verdict.diff)
        _tls.reported = state.module_name  # the lowering that follows is this same compile
        return FrozenCompileWarning(text)
    if verdict.cause == Cause.FIRST_CALL:
        return None
    with _lock:
        tally = _tallies.get(info.function_hash)
        if tally is None:
            tally = _tallies[info.function_hash] = Tally(info.qualname)
        tally.limit, tally.action = limit, action
        if limit <= 0 or tally.recompiles < limit:
            tally.recompiles += 1
            tally.causes[verdict.cause] += 1
            return None
        # Past the limit. A refused trace is not a recompile: the count stays at the limit.
        tally.exceeded = True
        if action != "raise":
            tally.recompiles += 1
            tally.causes[verdict.cause] += 1
        so_far = dict(tally.causes)
        if action == "record" or (action == "warn" and tally.warned):
            return None
        tally.warned = True
    counts = ", ".join(f"{c}={n}" for c, n in sorted(so_far.items(), key=lambda kv: -kv[1]))
    if action == "raise":
        head = (
            f"`{info.qualname}` would recompile past its limit of {limit} "
            f"(max_recompiles); JAX did not compile it. Recompiles so far: {counts}."
        )
        return RecompileLimitError(
            "\n".join([head, *describe(info.qualname, verdict, call_site)]),
            function=info.qualname,
            cause=verdict.cause,
            diff=verdict.diff,
            causes=so_far,
        )
    head = (
        f"`{info.qualname}` recompiled {tally.recompiles} times, past its limit of {limit} "
        f"(max_recompiles); recompiles so far: {counts}. Further ones are not reported again."
    )
    return RecompileLimitWarning("\n".join([head, *describe(info.qualname, verdict, call_site)]))


def on_lowering(module_name: str | None) -> BaseException | Warning | None:
    """A lowering is starting while frozen: refuse it unless it is cachewatch's own, an
    eager primitive, a trace already reported, or (without install()) not watched."""
    if _frozen is None or not module_name or _tracking.suppressed():
        return None
    if getattr(_tls, "reported", None) == module_name:
        _tls.reported = None
        return None
    target = _lowering_target()
    if target is _UNKNOWN:  # not reached through jit's dispatch (.lower(), say): judge by name
        watched = module_name in _tracking._watched_modules
    else:
        watched = getattr(target, HOOK_MARK, False)
    if not watched:
        if not _installed() or not (module_name.startswith("jit(") and module_name.endswith(")")):
            return None
        if _is_primitive(module_name[4:-1]):
            return None  # op-by-op execution of eager code: not a jit of the user's
    outside = foreign.outside_call(jaxcompat.caller_frame()) if watched else None
    if outside is not None:
        what = f"compiled {outside}"
    elif watched:
        what = (
            "compiled again without a retrace (another device, sharding or layout, an argument newly "
            "committed or uncommitted, or a jaxpr JAX had cached)"
        )
    else:
        what = "compiled (a jit made before cachewatch.install(), so its arguments are not known)"
    text = f"`{module_name}` would be {what} after cachewatch.freeze()."
    if _frozen == "raise":
        cause = Cause.NEW_DEVICE_OR_SHARDING if watched and outside is None else Cause.UNKNOWN
        return FrozenCompileError(text, function=module_name, cause=cause)
    return FrozenCompileWarning(text)


HOOK_MARK = _tracking.HOOK_ATTR  # set on the function cachewatch.jit hands to jax.jit
_UNKNOWN = object()
_MAX_FRAMES = 32


def _lowering_target() -> Any:
    """The function the jit being lowered wraps, read off JAX's dispatch frame: a name can
    be shared by a watched function and a plain ``jax.jit`` (every lambda is ``<lambda>``)."""
    return jaxcompat.dispatched_function(jaxcompat.caller_frame(2), _UNKNOWN, _MAX_FRAMES)


def act(outcome: BaseException | Warning) -> None:
    """Raise the refusal, or emit the warning (which ``-W error`` may still turn into one)."""
    if isinstance(outcome, Warning):
        warnings.warn(outcome, stacklevel=3)
        return
    raise outcome


def _installed() -> bool:
    return _tracking.recording_everything()


def _is_primitive(name: str) -> bool:
    from . import opbyop

    return name in opbyop.primitive_names()
