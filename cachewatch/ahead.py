"""``cachewatch.warmup``: compile ahead of time what a function compiled in an earlier run.

    handle = cachewatch.warmup(train_step, from_run="exp-41", threads=2)
    for batch in data:                    # starts at once; a call whose shapes are being
        state = train_step(state, batch)  # compiled waits for that compile
    print(handle)                         # <warm-up of train_step (done): 11 compiled, 0 skipped, 3.20 s>

The run's signatures are read from the store the process records to; compiling them is
``capture/warmup.py``'s work.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import jax

from .capture import compile_ahead, devices
from .capture.identity import call_site
from .capture.jit import is_watched, on_watched
from .explain import signature as sigmod
from .record import current


class WarmupError(ValueError):
    """A warm-up that cannot start: not a watched function, an unknown run, a record from
    another JAX version or device kind. Nothing was compiled."""


def warmup(
    fn: Any,
    example_args: Sequence[Any] | None = None,
    from_run: str | None = None,
    signatures: Sequence[Any] | None = None,
    threads: int = 1,
    background: bool = True,
    example_kwargs: dict[str, Any] | None = None,
    store: str | None = None,
    _site: str | None = None,
) -> compile_ahead.WarmupHandle:
    """Compile ahead of time, in ``threads`` worker threads, every variant ``from_run``
    compiled for ``fn`` (a ``cachewatch.jit`` function), or each of ``signatures``
    (``args`` tuples or ``(args, kwargs)`` pairs of arrays, ``jax.ShapeDtypeStruct`` and
    static values). ``example_args`` (one call's arguments) gives the pytree where the
    record cannot (custom nodes). Returns at once with ``background``, else when done."""
    if not is_watched(fn):
        raise WarmupError(f"warmup() takes a function made by cachewatch.jit, got {type(fn).__name__}")
    if (from_run is None) == (signatures is None):
        raise WarmupError("warmup() takes one of from_run= (a run id or name) or signatures= (a list)")
    if threads < 1:
        raise WarmupError(f"threads must be at least 1, got {threads}")
    state = fn.__cachewatch_state__
    if signatures is not None:
        variants = [_given(state.layout, item) for item in signatures]
        skipped: list[compile_ahead.Skipped] = []
    else:
        assert from_run is not None
        variants, skipped = _recorded(state, from_run, store or current.config().store)
    return compile_ahead.start(
        fn,
        variants,
        tuple(example_args) if example_args is not None else None,
        example_kwargs,
        threads=threads,
        background=background,
        skipped=skipped,
        site=_site or call_site(2),
    )


def _given(layout: sigmod.ParamLayout, item: Any) -> compile_ahead.Variant:
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], dict) and isinstance(item[0], tuple):
        args, kwargs = item
    else:
        args, kwargs = tuple(item), {}
    signature = sigmod.build(layout, args, kwargs)
    return compile_ahead.Variant(signature.as_json(), signature.stable_hash())


def _recorded(state: Any, run: str, store: str) -> tuple[list[compile_ahead.Variant], list[compile_ahead.Skipped]]:
    from .cache import variant_reads
    from .store import engine as enginemod
    from .store import runs

    info = state.info
    try:
        with enginemod.connection(store, ensure=False) as conn:
            found = variant_reads.recorded_function(conn, run, info.function_hash, info.qualname, info.module)
    except runs.RunNotFound as exc:
        raise WarmupError(str(exc)) from None
    except Exception as exc:  # the store is missing or unreadable: say which
        raise WarmupError(f"cannot read the store {enginemod.redact_url(store)}: {exc}") from None
    if found.run.jax_version and found.run.jax_version != jax.__version__:
        raise WarmupError(
            f"run {found.run.run_id[:12]} was recorded with JAX {found.run.jax_version}; this is JAX "
            f"{jax.__version__}: its programs may differ, so nothing was compiled ahead"
        )
    backend = devices.backend()  # the backend this process compiles for
    if found.run.backend and backend and found.run.backend != backend:
        raise WarmupError(
            f"run {found.run.run_id[:12]} compiled for {found.run.backend}; this process compiles for {backend}"
        )
    if found.changed_since:
        return [], [
            compile_ahead.Skipped(
                "*",
                f"`{info.qualname}` changed since run {found.run.run_id[:12]} (its source hash differs): "
                "its old signatures may not be what it compiles now",
            )
        ]
    variants = [compile_ahead.Variant(v.signature, v.signature_hash, v.device) for v in found.variants]
    return variants, []


logger = logging.getLogger("cachewatch")
_warmed: set[str] = set()
_warmed_lock = threading.Lock()


def _warm_on_definition(watched: Any) -> None:
    """With ``warmup_from`` set (``cachewatch run --warmup-from RUN``), each function
    starts its warm-up as it is defined, once per function in the process, reading the
    store in a thread of its own so the definition returns at once."""
    cfg = current.config()
    if not cfg.warmup_from:
        return
    info = watched.__cachewatch_state__.info
    with _warmed_lock:
        if info.function_hash in _warmed:
            return
        _warmed.add(info.function_hash)

    def start() -> None:
        try:
            handle = warmup(
                watched,
                from_run=cfg.warmup_from,
                threads=cfg.warmup_threads,
                background=False,
                _site=f"{info.file}:{info.line}",  # where the function is defined
            )
        except WarmupError as exc:
            logger.warning("cachewatch: no warm-up of %s: %s", info.qualname, exc)
            return
        for skipped in handle.skipped:
            logger.info("cachewatch: warm-up of %s skipped %s: %s", info.qualname, skipped.signature, skipped.reason)

    threading.Thread(target=start, name="cachewatch-warmup-start", daemon=True).start()


on_watched(_warm_on_definition)
