"""The one place a :class:`CompileEvent` is made, for a wrapped function and a foreign jit alike.

    event = building.compile_event(record, info, cause, explanation, diff, signature,
                                   device=device, call_site=site)

A compile record (``_tracking.Record``) carries what the trace hook and the monitoring
listener measured; :func:`compile_event` fills every field those give, and the ones
every event has (ids, run, backend), in one order: the run hears of the compile before
the warm-up flag is read, the executable is noted as held, then the persistent cache's
key for the compile is taken. The caller passes what only it knows: the function, why
it compiled, its signature, device and call site.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from ..core.events import Cause, CompileEvent, DiffEntry, FunctionInfo, Kind, new_event_id
from ..core.texts import static_made_anew
from ..explain import signature as sigmod
from ..record import current
from . import cachestate, devices
from .identity import stack_of
from .program import Pending


class CompileRecord(Protocol):
    """What :func:`compile_event` reads of a compile record (``_tracking.Record``)."""

    @property
    def seq(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def timestamp(self) -> float: ...
    @property
    def compiles(self) -> int: ...
    @property
    def trace_seconds(self) -> float | None: ...
    @property
    def lower_seconds(self) -> float | None: ...
    @property
    def compile_seconds(self) -> float | None: ...
    @property
    def persistent_cache_hit(self) -> bool | None: ...
    @property
    def cache_time_saved(self) -> float | None: ...
    @property
    def thread(self) -> str: ...
    @property
    def error(self) -> str | None: ...
    @property
    def captured(self) -> dict[str, str] | None: ...
    @property
    def jaxpr_eqns(self) -> int | None: ...
    @property
    def program(self) -> Pending | None: ...


class Measured(NamedTuple):
    """What only a wrapped function's call measured around its compile: which call
    compiled and whether the program was repeating its work when it came (the call
    counter), and the eager baseline's two timed runs, when one was taken."""

    while_repeating: bool = False
    call_number: int | None = None
    compiled_run_seconds: float | None = None
    eager_run_seconds: float | None = None
    call_path: str | None = None
    slow_reason: str | None = None


NOT_MEASURED = Measured()


def _no_cache_key(seq: int) -> tuple[bool | None, dict[str, str] | None]:
    return None, None


# (hit, key parts) of the compile recorded as ``seq``: cachekey.install() sets it to its
# ``take`` (cachekey reads the listener's records, so it sits above this module).
cache_key_of: Callable[[int], tuple[bool | None, dict[str, str] | None]] = _no_cache_key


# The causes a trace gives a signature unlike the function's earlier ones.
_SIGNATURE_CAUSES = frozenset(
    {Cause.NEW_SHAPE, Cause.NEW_DTYPE, Cause.WEAK_TYPE, Cause.NEW_STRUCTURE, Cause.NEW_STATIC_VALUE, Cause.NEW_CONTEXT}
)


def _as_first_compile(function: FunctionInfo, cause: str, explanation: str) -> tuple[str, str]:
    """A compile's cause and explanation, told as a first call where it is the function's
    first compile in the run though traced before inside other jits (the signature changed
    since): no recompile."""
    if not current.first_compile_in_run(function.function_hash) or cause not in _SIGNATURE_CAUSES:
        return cause, explanation
    return Cause.FIRST_CALL, (
        f"First compile of `{function.qualname or function.name}` in this run, on its own; it was traced "
        f"before inside another jit, which compiled it into that one's program. {explanation}"
    )


def compile_event(
    record: CompileRecord,
    function: FunctionInfo,
    cause: str,
    explanation: str,
    diff: tuple[DiffEntry, ...],
    signature: sigmod.Signature | None,
    *,
    device: str | None,
    call_site: str | None,
    ahead: str | None = None,
    nested: bool = False,
    measured: Measured = NOT_MEASURED,
) -> CompileEvent:
    """The event of one trace or compile record. ``ahead``: the line that called
    ``cachewatch.warmup`` when the record is a warm-up's (kind ``warmup``, never a
    recompile); ``measured``: what only the caller measured (the next call's sample, an
    eager baseline)."""
    compiled = record.compiles > 0
    if compiled:
        cause, explanation = _as_first_compile(function, cause, explanation)
    if compiled and ahead is None:
        # Tell the run before its warm-up flag is read: this compile may end warm-up.
        current.note_compile(
            function.function_hash, cause, call_site, function.module, stack_of(call_site), static_made_anew(diff)
        )
    if compiled:
        cachestate.compiled(function)
    cache_hit, cache_key = cache_key_of(record.seq)
    return event(
        function,
        Kind.AHEAD if ahead is not None and compiled else record.kind,
        cause,
        explanation,
        diff,
        signature,
        timestamp=record.timestamp,
        thread=record.thread,
        call_site=ahead or call_site,
        compiled=compiled,
        nested=nested,
        trace_seconds=record.trace_seconds,
        lower_seconds=record.lower_seconds,
        compile_seconds=record.compile_seconds,
        persistent_cache_hit=record.persistent_cache_hit if cache_hit is None else cache_hit,
        cache_time_saved_seconds=record.cache_time_saved,
        device=device,
        error=record.error,
        captured=record.captured or None,
        warmup=ahead is not None or current.in_warmup(record.timestamp),
        cache_key=cache_key,
        jaxpr_eqns=record.jaxpr_eqns,
        pending=record.program,
        # Both name their fields as the event does; what was not read or measured is None
        # (while_repeating False), the event's own default.
        **cachestate.readings(record),
        **measured._asdict(),
    )


def event(
    function: FunctionInfo,
    kind: str,
    cause: str,
    explanation: str,
    diff: tuple[DiffEntry, ...],
    signature: sigmod.Signature | None,
    *,
    timestamp: float,
    thread: str | None,
    call_site: str | None,
    compiled: bool = False,
    nested: bool = False,
    **fields: Any,
) -> CompileEvent:
    """An event with a new id, in the current run, on this process's backend; ``fields``
    are the rest of :class:`CompileEvent`'s."""
    return CompileEvent(
        event_id=new_event_id(),
        function=function,
        run_id=current.run_id(),
        timestamp=timestamp,
        kind=kind,
        cause=cause,
        explanation=explanation,
        diff=tuple(diff),
        signature=signature.as_json() if signature is not None else (),
        signature_hash=signature.stable_hash() if signature is not None else "",
        compiled=compiled,
        nested=nested,
        backend=devices.backend(),
        # A plain string in the store; the user's frames around it beside it.
        call_site=None if call_site is None else str(call_site),
        user_stack=stack_of(call_site),
        thread=thread,
        **fields,
    )
