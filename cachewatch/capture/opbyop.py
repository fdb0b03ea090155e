"""JAX's own small compiles from code that runs outside any jit.

Every eager ``jnp`` call runs one primitive at a time, and JAX compiles each primitive
once per new combination of operand shapes, dtypes and parameters. Un-jitted code that
meets a new shape every step (``convert_element_type``, ``broadcast_in_dim`` ...) pays a
compile per step. cachewatch records these compiles as events of a pseudo-function per
primitive (see ``foreign``), with the user's line that ran it, so a barrage shows up as
a storm and each recompile names the operand or parameter that changed.
"""

from __future__ import annotations

import hashlib
import threading

from ..core import jaxcompat
from ..core.events import OP_BY_OP_MODULE, FunctionInfo

_lock = threading.Lock()
_seen: set[str] = set()
_infos: dict[str, FunctionInfo] = {}
# Names of the primitives in JAX's loaded modules, what an eager compile is named after
# (the seam scans JAX's modules; bound here once, so a call costs no extra lookup).
primitive_names = jaxcompat.primitive_names


def function_info(primitive: str) -> FunctionInfo:
    info = _infos.get(primitive)
    if info is None:
        digest = hashlib.sha256(f"{OP_BY_OP_MODULE}:{primitive}".encode()).hexdigest()[:20]
        info = _infos[primitive] = FunctionInfo(
            function_hash=digest,
            name=primitive,
            qualname=f"{primitive} (op-by-op)",
            module=OP_BY_OP_MODULE,
            file="",
            line=0,
        )
    return info


def first_compile(primitive: str) -> bool:
    """True the first time a compile of ``primitive`` is seen in this run."""
    with _lock:
        first = primitive not in _seen
        _seen.add(primitive)
    return first


def reset() -> None:
    """Forget which primitives compiled (a new run)."""
    with _lock:
        _seen.clear()
