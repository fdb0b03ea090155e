"""The eager baseline (``eager_baseline=True``): a compiled call and the same call run op
by op, each timed once per signature, so a verdict can say whether the jit pays for
itself against running eagerly."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax

from . import _tracking


def eager_baseline(
    measured: set[Any],
    fun_of: Callable[[], Callable[..., Any] | None],
    jitted: Any,
    record: _tracking.Record,
    args: tuple,
    kwargs: dict,
) -> tuple[float, float] | None:
    """One steady-state compiled run and one op-by-op run of this signature, timed (their
    seconds, in that order); None when not taken. ``measured``: the signatures of the
    function timed so far (this one is added); ``fun_of``: the user's function, or None
    once a method's instance is gone."""
    key = record.signature.key if record.signature is not None else None
    if key is None or key in measured:
        return None
    leaves = jax.tree_util.tree_leaves((args, kwargs))
    if any(getattr(leaf, "is_deleted", lambda: False)() for leaf in leaves):
        return None  # donated inputs are gone: nothing to run again
    measured.add(key)
    with _tracking.suppress():
        start = time.perf_counter()
        jax.block_until_ready(jitted(*args, **kwargs))
        compiled_seconds = time.perf_counter() - start
        fun = fun_of()
        if fun is None:  # the method's instance is gone
            return None
        with jax.disable_jit():
            jax.block_until_ready(fun(*args, **kwargs))  # warm JAX's op-by-op caches
            start = time.perf_counter()
            jax.block_until_ready(fun(*args, **kwargs))
            eager_seconds = time.perf_counter() - start
    return compiled_seconds, eager_seconds
