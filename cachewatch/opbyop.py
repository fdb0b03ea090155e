"""JAX's own small compiles from code that runs outside any jit.

Every eager ``jnp`` call runs one primitive at a time, and JAX compiles each primitive
once per new combination of shapes, dtypes and parameters. Un-jitted code that meets
a new shape every step (``convert_element_type``, ``broadcast_in_dim`` ...) pays a
compile per step. cachewatch records these compiles as events of a pseudo-function
per primitive, with the user's line that ran it, so a barrage shows up as a storm.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import time

from . import recorder
from .events import CompileEvent, FunctionInfo, new_event_id

MODULE = "jax.op_by_op"
_lock = threading.Lock()
_seen: set[str] = set()
_infos: dict[str, FunctionInfo] = {}


@functools.lru_cache(maxsize=1)
def primitive_names() -> frozenset[str]:
    """Names of JAX's primitives and jax.numpy functions: what an eager compile is named after."""
    from jax._src import core
    from jax._src.lax import control_flow, lax, slicing, special
    from jax._src.lax import convolution, linalg, parallel, fft

    import jax.numpy as jnp

    names = set()
    for module in (lax, slicing, control_flow, special, convolution, linalg, parallel, fft):
        for value in vars(module).values():
            if isinstance(value, core.Primitive):
                names.add(value.name)
    # jax.numpy's own functions are small jits of their own (jit(multiply), jit(where)...)
    # and compile per shape the same way when called eagerly.
    names.update(name for name, value in vars(jnp).items() if callable(value) and not name.startswith("_"))
    return frozenset(names)


def function_info(primitive: str) -> FunctionInfo:
    info = _infos.get(primitive)
    if info is None:
        digest = hashlib.sha256(f"{MODULE}:{primitive}".encode()).hexdigest()[:20]
        info = _infos[primitive] = FunctionInfo(function_hash=digest, name=primitive,
                                                qualname=f"{primitive} (op-by-op)", module=MODULE, file="",
                                                line=0)
    return info


def reset() -> None:
    with _lock:
        _seen.clear()


def record(primitive: str, lower_seconds: float | None, compile_seconds: float, call_site: str | None,
           trace_seconds: float | None) -> None:
    info = function_info(primitive)
    with _lock:
        first = primitive not in _seen
        _seen.add(primitive)
    if first:
        cause = "first_call"
        explanation = f"JAX compiled the primitive `{primitive}` op by op, outside any jit, for the first time."
    else:
        # JAX keys these compiles on shapes, dtypes and parameters together and says
        # nothing of which changed; cachewatch cannot tell either.
        cause = "unknown"
        explanation = (f"JAX compiled the primitive `{primitive}` op by op again, outside any jit, for shapes, "
                       "dtypes or parameters it had not seen: un-jitted code meets new shapes. Move it inside "
                       "a jitted function or keep its shapes fixed.")
    recorder.record_event(CompileEvent(
        event_id=new_event_id(), function=info, run_id=recorder.run_id(), timestamp=time.time(),
        kind="compile", cause=cause, explanation=explanation, diff=(), signature=(), signature_hash="",
        compiled=True, nested=False, trace_seconds=trace_seconds, lower_seconds=lower_seconds,
        compile_seconds=compile_seconds, call_site=call_site, thread=threading.current_thread().name))
