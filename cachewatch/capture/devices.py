"""Where a compile runs: the backend, and the device a call's inputs live on."""

from __future__ import annotations

import functools
from typing import Any

import jax


@functools.lru_cache(maxsize=1)
def backend() -> str | None:
    """JAX's default backend (``cpu``, ``gpu``, ``tpu``); None when JAX cannot tell."""
    try:
        return jax.default_backend()
    except RuntimeError:  # no backend could start
        return None


@functools.lru_cache(maxsize=1)
def default_device() -> str | None:
    """The first device of the default backend, where a call with no array input runs."""
    try:
        return str(jax.devices()[0])
    except RuntimeError:  # no backend could start
        return None


def of_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The devices of the first concrete array among a call's inputs (``cpu:0``, or a
    comma-separated list for a sharded array); the default device when there is none."""
    for leaf in jax.tree_util.tree_leaves((args, kwargs)):
        devices = getattr(leaf, "devices", None)
        if devices is None or isinstance(leaf, jax.core.Tracer):
            continue
        try:
            found = sorted(str(d) for d in devices())
        except Exception:  # a deleted (donated) array, or a leaf of the user's with a devices of its own
            continue
        return ",".join(found)
    return default_device()
