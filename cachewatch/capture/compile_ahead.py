"""Compile ahead of time, in worker threads, the variants a function compiled before.

    handle = cachewatch.warmup(step, from_run="exp-41", threads=2)
    ...                                   # the training loop starts at once
    handle.wait(); print(handle)          # what was compiled, what was skipped and why

Each recorded signature is rebuilt as abstract values (``jax.ShapeDtypeStruct`` with the
weak type; static values from their repr) in the pytree the record names, or in the
pytree of ``example_args`` where the record cannot name it (custom nodes: Flax and
Equinox modules, dataclasses). A rebuilt signature is compiled only when it hashes to
the recorded one, so what is warmed is exactly what the run compiled. JAX's
``jit(f).lower(...).compile()`` fills the caches a later call with those shapes uses, and
XLA compiles with the GIL released, so worker threads compile side by side. A call that
arrives while its own signature is still being compiled waits for it rather than
compiling it a second time. Warm-up compiles are recorded as kind ``warmup``.
"""

from __future__ import annotations

import ast
import functools
import queue
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from ..core import _guard
from ..explain import signature as sigmod
from .identity import call_site


@dataclass(frozen=True)
class Variant:
    """One signature to compile: its leaves as recorded, their hash, and where it ran."""

    leaves: tuple[dict[str, Any], ...]
    signature_hash: str
    device: str | None = None


@dataclass(frozen=True)
class Skipped:
    signature: str
    reason: str


class WarmupHandle:
    """What a warm-up compiled and skipped, and what it cost; ``wait()`` for the end."""

    def __init__(self, function: str, planned: int) -> None:
        self.function = function
        self.planned = planned
        self.compiled: list[str] = []
        self.skipped: list[Skipped] = []
        self.seconds = 0.0  # wall time from start to the last compile's end
        self.compile_seconds = 0.0  # the compiles' own time, summed over the threads
        self._done = threading.Event()
        self._lock = threading.Lock()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every variant is compiled or skipped; False on timeout."""
        return self._done.wait(timeout)

    def _skip(self, signature: str, reason: str) -> None:
        with self._lock:
            self.skipped.append(Skipped(signature, reason))

    def __repr__(self) -> str:
        state = "done" if self.done() else "running"
        return (
            f"<warm-up of {self.function} ({state}): {len(self.compiled)} compiled, {len(self.skipped)} skipped, "
            f"{self.seconds:.2f} s>"
        )


def describe(leaves: Iterable[dict[str, Any]]) -> str:
    """A signature as one line: ``x: float32[8,3], n=4``."""
    parts = []
    for leaf in leaves:
        if leaf.get("static"):
            parts.append(f"{leaf.get('path')}={leaf.get('value')}")
        else:
            dims = ",".join(str(d) for d in leaf.get("shape") or ())
            weak = " weak" if leaf.get("weak_type") else ""
            parts.append(f"{leaf.get('path')}: {leaf.get('dtype')}[{dims}]{weak}")
    return ", ".join(parts)


# ------------------------------------------------------------------ rebuilding


class CannotRebuild(ValueError):
    """A recorded signature that cannot be made into arguments here; the message says why."""


_KEY = re.compile(r"\[('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|-?\d+)\]|\.([A-Za-z_]\w*)")
_NAME = re.compile(r"^[A-Za-z_]\w*|^\*?args\[\d+\]")


def _abstract(leaf: dict[str, Any]) -> Any:
    try:
        dtype = jnp.dtype(leaf["dtype"])  # bfloat16 and the float8s too
        return jax.ShapeDtypeStruct(tuple(leaf.get("shape") or ()), dtype, weak_type=bool(leaf.get("weak_type")))
    except (TypeError, ValueError, KeyError) as exc:
        raise CannotRebuild(f"{leaf.get('path')}: dtype {leaf.get('dtype')!r} is unknown here ({exc})") from None


_DTYPE_REPR = re.compile(r"^dtype\('(\w+)'\)$")


def _static(leaf: dict[str, Any]) -> Any:
    text = str(leaf.get("value"))
    match = _DTYPE_REPR.match(text)
    if match:
        return jnp.dtype(match.group(1))
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise CannotRebuild(
            f"the static value {leaf.get('path')}={text} cannot be rebuilt from its repr: pass signatures= "
            "with the value, or warm this variant with a call"
        ) from None


def _split(path: str) -> tuple[str, list[Any]]:
    """A leaf path (``batch['x'][0]``) as its argument's name and its keys."""
    name = _NAME.match(path)
    if name is None:
        raise CannotRebuild(f"cannot read the argument path {path!r}")
    keys: list[Any] = []
    rest = path[name.end() :]
    while rest:
        key = _KEY.match(rest)
        if key is None:
            raise CannotRebuild(f"cannot read the argument path {path!r}")
        if key.group(2) is not None:
            raise CannotRebuild(
                f"{path} is an attribute of a custom pytree node (a Flax or Equinox module, a dataclass): "
                "pass example_args to give its structure"
            )
        token = key.group(1)
        keys.append(ast.literal_eval(token))
        rest = rest[key.end() :]
    return name.group(0), keys


def _nest(entries: list[tuple[list[Any], Any]], sequence: Callable[[list[Any]], Any]) -> Any:
    """Rebuild one argument from (keys, value) pairs: dicts for string keys, sequences for
    indices 0..n-1 (a tuple or a list, as ``sequence`` makes them)."""
    if len(entries) == 1 and not entries[0][0]:
        return entries[0][1]
    groups: dict[Any, list[tuple[list[Any], Any]]] = {}
    for keys, value in entries:
        if not keys:
            raise CannotRebuild("an argument is both a leaf and a container")
        groups.setdefault(keys[0], []).append((keys[1:], value))
    built = {key: _nest(items, sequence) for key, items in groups.items()}
    if all(isinstance(k, int) for k in built) and sorted(built) == list(range(len(built))):
        return sequence([built[i] for i in range(len(built))])
    return built


def _from_record(
    layout: sigmod.ParamLayout, leaves: Sequence[dict[str, Any]], sequence: Callable[[list[Any]], Any], positional: int
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The record's arguments, the first ``positional`` of them passed by position (a
    signature lists positional arguments first, then keywords by name)."""
    by_arg: dict[str, list[tuple[list[Any], Any]]] = {}
    order: list[str] = []
    for leaf in leaves:
        name, keys = _split(str(leaf.get("path")))
        value = _static(leaf) if leaf.get("static") else _abstract(leaf)
        if name not in by_arg:
            order.append(name)
        by_arg.setdefault(name, []).append((keys, value))
    if any(order[i] != layout.arg_name(i) for i in range(positional)):
        raise CannotRebuild("not passed by position")
    built = [(name, _nest(by_arg[name], sequence)) for name in order]
    return tuple(value for _, value in built[:positional]), dict(built[positional:])


def _from_example(
    leaves: Sequence[dict[str, Any]], example_args: tuple, example_kwargs: dict[str, Any], layout: sigmod.ParamLayout
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The example's pytree with each leaf replaced by the recorded one of the same path."""
    recorded = {str(leaf.get("path")): leaf for leaf in leaves}

    def replace(name: str, value: Any, static: bool) -> Any:
        if static:
            leaf = recorded.get(name)
            if leaf is None:
                raise CannotRebuild(f"the record has no static argument {name}")
            return _static(leaf)
        flat, treedef = jax.tree_util.tree_flatten_with_path(value)
        new = []
        for keypath, _ in flat:
            path = name + jax.tree_util.keystr(keypath)
            leaf = recorded.get(path)
            if leaf is None:
                raise CannotRebuild(f"the record has no leaf {path}: its pytree differs from example_args")
            new.append(_static(leaf) if leaf.get("static") else _abstract(leaf))
        return jax.tree_util.tree_unflatten(treedef, new)

    args = tuple(replace(layout.arg_name(i), value, i in layout.static_argnums) for i, value in enumerate(example_args))
    kwargs = {
        name: replace(name, value, name in layout.static_argnames) for name, value in sorted(example_kwargs.items())
    }
    return args, kwargs


def rebuild(
    layout: sigmod.ParamLayout,
    variant: Variant,
    example_args: tuple | None = None,
    example_kwargs: dict[str, Any] | None = None,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Arguments whose signature hashes to the recorded one; CannotRebuild says why not."""
    tries: list[Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]]
    if example_args is not None or example_kwargs:
        tries = [lambda: _from_example(variant.leaves, tuple(example_args or ()), dict(example_kwargs or {}), layout)]
    else:
        names = {_split(str(leaf.get("path")))[0] for leaf in variant.leaves}
        tries = [
            functools.partial(_from_record, layout, variant.leaves, sequence, positional)
            for positional in range(len(names), -1, -1)
            for sequence in (tuple, list)
        ]
    for attempt in tries:
        try:
            args, kwargs = attempt()
        except CannotRebuild as exc:
            if "not passed by position" in str(exc):
                continue
            raise
        if sigmod.build(layout, args, kwargs).stable_hash() == variant.signature_hash:
            return args, kwargs
    raise CannotRebuild(
        "its pytree could not be rebuilt to the recorded signature"
        + ("" if example_args is not None else ": pass example_args (one call's arguments) to give its structure")
    )


# ------------------------------------------------------------------ compiling


class Slot:
    """One variant of a running warm-up, as the function's calls see it: ``queued``,
    ``compiling`` (a call waits for ``done``) or ``claimed`` by a call that came first."""

    __slots__ = ("signature_hash", "state", "done")

    def __init__(self, signature_hash: str) -> None:
        self.signature_hash = signature_hash
        self.state = "queued"
        self.done = threading.Event()


_slots_lock = threading.Lock()


def claim(warming: dict[str, Slot], signature_hash: str) -> None:
    """What a call of a function being warmed does first: wait while a warm-up compiles
    its signature (JAX would compile it a second time), or take over a signature the
    warm-up has not come to yet (compiling it now costs no more than waiting)."""
    with _slots_lock:
        slot = warming.get(signature_hash)
        if slot is None:
            return
        if slot.state == "queued":
            slot.state = "claimed"
            del warming[signature_hash]
            slot.done.set()
            return
    slot.done.wait()


def start(
    watched: Any,
    variants: Sequence[Variant],
    example_args: tuple | None = None,
    example_kwargs: dict[str, Any] | None = None,
    threads: int = 1,
    background: bool = True,
    skipped: Sequence[Skipped] = (),
    site: str | None = None,
) -> WarmupHandle:
    """Compile each variant ahead of time in ``threads`` worker threads; their events
    name ``site`` (by default the user's line that asked for the warm-up)."""
    state = watched.__cachewatch_state__
    site = site or call_site(2) or ""
    handle = WarmupHandle(state.info.qualname, len(variants))
    handle.skipped.extend(skipped)
    work = _rebuilt(state, variants, handle, example_args, example_kwargs)
    if not work:
        handle._done.set()
        return handle
    compiling = _Compiling(watched, handle, site, len(work))
    slots = _announce(watched, work)
    # Daemon threads: a program that ends before its warm-up does is not held back.
    todo: queue.Queue[tuple[Slot, Variant, tuple, dict]] = queue.Queue()
    for slot, item in zip(slots, work, strict=False):
        todo.put((slot, *item))
    _start_workers(todo, compiling.compile_one, max(1, min(threads, len(work))))
    if not background:
        handle.wait()
    return handle


def _rebuilt(
    state: Any,
    variants: Sequence[Variant],
    handle: WarmupHandle,
    example_args: tuple | None,
    example_kwargs: dict[str, Any] | None,
) -> list[tuple[Variant, tuple, dict]]:
    """Each variant this process can compile, with arguments of its signature; the others
    are skipped on ``handle`` with the reason (a device it lacks, a pytree not rebuilt)."""
    here = {str(d) for d in jax.devices()}
    work: list[tuple[Variant, tuple, dict]] = []
    for variant in variants:
        text = describe(variant.leaves)
        placed = [d for d in (variant.device or "").split(",") if d]
        missing = [d for d in placed if d not in here]
        if missing:
            handle._skip(text, f"compiled on {', '.join(missing)}, which this process does not have")
            continue
        try:
            args, kwargs = rebuild(state.layout, variant, example_args, example_kwargs)
        except CannotRebuild as exc:
            handle._skip(text, str(exc))
            continue
        work.append((variant, args, kwargs))
    return work


def _announce(watched: Any, work: list[tuple[Variant, tuple, dict]]) -> list[Slot]:
    """Every variant is made known to the calls before any is compiled: a call of one that
    is compiling waits for it; a call of one still queued takes it over (see claim)."""
    state = watched.__cachewatch_state__
    slots = [Slot(variant.signature_hash) for variant, _, _ in work]
    with _slots_lock:
        for slot in slots:
            state.warming.setdefault(slot.signature_hash, slot)
    stats = watched.__cachewatch_stats__
    stats.next_sample = stats.calls + 1  # calls look for a warm-up of their signature from now on
    return slots


class _Compiling:
    """One warm-up's compiles: each variant compiled ahead unless a call took it over,
    noted on the handle, which is done when the last one is."""

    def __init__(self, watched: Any, handle: WarmupHandle, site: str, count: int) -> None:
        self.watched = watched
        self.state = watched.__cachewatch_state__
        self.handle = handle
        self.site = site
        self.remaining = count
        self.began = time.perf_counter()

    def compile_one(self, slot: Slot, variant: Variant, args: tuple, kwargs: dict) -> None:
        text = describe(variant.leaves)
        handle = self.handle
        with _slots_lock:
            taken = slot.state != "queued"  # a call took it over: it compiles it itself
            slot.state = "compiling" if not taken else slot.state
        start_compile = time.perf_counter()
        try:
            if taken:
                handle._skip(text, "a call of the program compiled it before the warm-up came to it")
            else:
                self.watched.__cachewatch_compile_ahead__(self.site, args, kwargs)
                with handle._lock:
                    handle.compiled.append(text)
        except Exception as exc:  # the user's function may fail on this signature now
            handle._skip(text, f"compiling it failed: {type(exc).__name__}: {str(exc)[:300]}")
        finally:
            self._release(slot)
            self._count(time.perf_counter() - start_compile)

    def _release(self, slot: Slot) -> None:
        """The variant is no longer the warm-up's: calls of it wait no more."""
        with _slots_lock:
            if self.state.warming.get(slot.signature_hash) is slot:
                del self.state.warming[slot.signature_hash]
        slot.done.set()

    def _count(self, seconds: float) -> None:
        handle = self.handle
        with handle._lock:
            handle.compile_seconds += seconds
            self.remaining -= 1
            last = self.remaining == 0
        if last:
            handle.seconds = time.perf_counter() - self.began
            handle._done.set()


def _start_workers(
    todo: queue.Queue[tuple[Slot, Variant, tuple, dict]], compile_one: Callable[..., None], count: int
) -> None:
    """``count`` daemon threads that compile what is in ``todo`` until it is empty."""

    def worker() -> None:
        while True:
            try:
                item = todo.get_nowait()
            except queue.Empty:
                return
            with _guard.guard("warmup.compile"):
                compile_one(*item)

    for i in range(count):
        threading.Thread(target=worker, name=f"cachewatch-warmup-{i}", daemon=True).start()
