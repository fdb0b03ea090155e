"""Stale captured globals: values a jitted function read at trace time and baked in.

    g = 0
    f = cachewatch.jit(lambda x: x + g)
    f(1.0)      # traced with g == 0: the compiled code adds 0
    g = 10
    f(1.0)      # still adds 0 -- cachewatch records a stale_capture event

At every trace, cachewatch notes the module globals and closure cells the function's
code reads that hold plain values (numbers, strings, arrays, small containers of
them, dataclass instances); modules, functions and classes are left out. On sampled
later calls it compares them again and reports each change once. It never changes
what the program computes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from ..core import jaxcompat
from .identity import unwrap_callable

_MAX_ITEMS = 64
_MAX_HASHED_ELEMENTS = 4096
_MAX_SUMMARY = 80


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):  # lambdas and comprehensions inside the body
            names |= _code_names(const)
    return names


def reader(fun: Callable[..., Any]) -> Callable[[], dict[str, Any]] | None:
    """A function returning {name: current value} of what ``fun`` reads, or None if nothing."""
    inner, _ = unwrap_callable(fun)
    code = getattr(inner, "__code__", None)
    if code is None:
        return None
    module_globals = getattr(inner, "__globals__", {})
    global_names = sorted(n for n in _code_names(code) if n in module_globals)
    cells = list(zip(code.co_freevars, inner.__closure__ or (), strict=False))
    if not global_names and not cells:
        return None

    def read() -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name in global_names:
            value = module_globals.get(name, _MISSING)
            if value is not _MISSING and _is_plain_value(value):
                values[name] = value
        for name, cell in cells:
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell: not assigned yet
                continue
            if _is_plain_value(value):
                values[name] = value
        return values

    return read


_MISSING = object()


def _is_plain_value(value: Any, depth: int = 0) -> bool:
    """Values that become constants when traced. Containers only when all they hold is
    plain too: a list that collects tracers as a side effect is not a captured value."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes, np.ndarray, np.generic)):
        return True
    if isinstance(value, (tuple, list)):
        return depth < 2 and len(value) <= _MAX_ITEMS and all(_is_plain_value(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return depth < 2 and len(value) <= _MAX_ITEMS and all(_is_plain_value(v, depth + 1) for v in value.values())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return depth < 2
    return _is_jax_array(value)


def _key_data(value: Any) -> Any:
    """A typed PRNG key (``jax.random.key``) as its raw bits, which NumPy can read (its
    id where they cannot be read: rebinding is still noticed); any other array as it is."""
    import jax

    if isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
        bits = jaxcompat.key_bits(value)
        return np.asarray(id(value)) if bits is None else bits
    return value


def _is_jax_array(value: Any) -> bool:
    try:
        import jax

        return isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer)
    except Exception:  # a captured value of the user's may be a proxy whose class cannot be read
        return False


def fingerprint(value: Any, depth: int = 0) -> Any:
    """A comparable token that changes when the value does (bounded work)."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return (type(value).__name__, value)
    if isinstance(value, np.generic):
        return ("np", str(value.dtype), value.item())
    if isinstance(value, np.ndarray) or _is_jax_array(value):
        shape, dtype = tuple(value.shape), str(value.dtype)
        size = int(np.prod(shape)) if shape else 1
        if size <= _MAX_HASHED_ELEMENTS:
            data = np.asarray(_key_data(value))
            return ("array", shape, dtype, hashlib.sha1(np.ascontiguousarray(data).tobytes()).hexdigest())
        # Too big to hash on a sampled call: notice rebinding, not in-place edits.
        return ("array", shape, dtype, id(value))
    if depth >= 2:
        return ("object", type(value).__qualname__, id(value))
    if isinstance(value, (tuple, list)):
        items = value[:_MAX_ITEMS]
        return (type(value).__name__, len(value), tuple(fingerprint(v, depth + 1) for v in items))
    if isinstance(value, dict):
        items = list(value.items())[:_MAX_ITEMS]
        return ("dict", len(value), tuple((repr(k), fingerprint(v, depth + 1)) for k, v in items))
    if dataclasses.is_dataclass(value):
        return (
            "dataclass",
            type(value).__qualname__,
            tuple((f.name, fingerprint(getattr(value, f.name, None), depth + 1)) for f in dataclasses.fields(value)),
        )
    return ("object", type(value).__qualname__, id(value))


def summary(value: Any) -> str:
    if isinstance(value, np.ndarray) or _is_jax_array(value):
        shape = ",".join(str(d) for d in value.shape)
        if value.size <= 4:
            return f"{value.dtype}[{shape}] {np.asarray(_key_data(value)).tolist()}"
        return f"{value.dtype}[{shape}]"
    try:
        text = repr(value)
    except Exception:  # a user object whose repr fails must not break the trace
        text = f"<{type(value).__qualname__}>"
    return text if len(text) <= _MAX_SUMMARY else text[: _MAX_SUMMARY - 3] + "..."


@dataclasses.dataclass
class CaptureState:
    """What one function read at its first trace, and which changes were reported."""

    read: Callable[[], dict[str, Any]]
    baseline: dict[str, tuple[Any, str]] | None = None  # name -> (fingerprint, summary)
    reported: set = dataclasses.field(default_factory=set)

    def snapshot(self) -> dict[str, str]:
        """Called at a trace: remember values on the first trace; return their summaries."""
        values = self.read()
        current = {name: (fingerprint(v), summary(v)) for name, v in values.items()}
        if self.baseline is None:
            self.baseline = current
        return {name: s for name, (_, s) in current.items()}

    def changes(self) -> list[tuple[str, str, str]]:
        """(name, summary at trace time, summary now) for each change not reported yet."""
        if not self.baseline:
            return []
        found = []
        values = self.read()
        for name, (old_fp, old_summary) in self.baseline.items():
            if name not in values:
                continue
            new_fp = fingerprint(values[name])
            if new_fp != old_fp and (name, new_fp) not in self.reported:
                self.reported.add((name, new_fp))
                found.append((name, old_summary, summary(values[name])))
        return found
