"""``jax.pmap`` under ``install()``: its calls counted under the user's function.

A pmapped function compiles through a jit of JAX's own around the user's function
(``_cached_shard_map.<locals>._fun`` on JAX 0.10 and later), which the listener records
under the user's function (``identity.user_function_closed_over``). Its calls never pass
through ``cachewatch.jit``, so ``install()`` wraps ``jax.pmap`` to count them on that
function's counter; the report then sets its compiles against its calls.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..record import current
from . import counters
from .identity import describe_function, user_function


class CountedPmap:
    """What ``jax.pmap(f)`` returns, with each call counted; everything else is the
    pmapped function's own (``lower``, ``__wrapped__``, ...)."""

    __slots__ = ("_pmapped", "_counter", "__weakref__")

    def __init__(self, pmapped: Any, counter: counters.CallCounter) -> None:
        self._pmapped = pmapped
        self._counter = counter

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._counter.calls += 1
        return self._pmapped(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pmapped, name)

    def __repr__(self) -> str:
        return repr(self._pmapped)


def counting(original: Callable[..., Any]) -> Callable[..., Any]:
    """``jax.pmap`` as ``install()`` makes it: ``original``, with the calls counted."""

    @functools.wraps(original)
    def pmap(fun: Any = None, *args: Any, **kwargs: Any) -> Any:
        if fun is None:  # used as a decorator factory: jax.pmap(axis_name="i")
            return functools.partial(pmap, *args, **kwargs)
        pmapped = original(fun, *args, **kwargs)
        try:
            cfg = current.config()
            info = describe_function(user_function(fun))
            counter = counters.counter_for(info, cfg.sample_every, cfg.sample_max_per_second)
        except Exception:  # an object cachewatch cannot name: leave the pmap as JAX made it
            return pmapped
        return CountedPmap(pmapped, counter)

    pmap.__cachewatch__ = True  # type: ignore[attr-defined]
    return pmap
