"""``cachewatch doctor``: what works on the JAX in this process.

Every capability of the compatibility seam (cachewatch.core.jaxcompat), probed, and one
compile recorded end to end: a function wrapped by ``cachewatch.jit``, called at two
shapes, must give two events (``first_call``, then ``new_shape``) with their trace,
lowering and compile seconds and an equation count.
"""

from __future__ import annotations

import dataclasses
import platform
from typing import Any

from .core import jaxcompat
from .core.events import Batch, Cause, CompileEvent


@dataclasses.dataclass(frozen=True)
class Checkup:
    jax_version: str
    jaxlib_version: str
    python_version: str
    capabilities: list[jaxcompat.CapabilityStatus]
    end_to_end: list[str]  # what the recorded compiles lacked; empty when all was there

    @property
    def healthy(self) -> bool:
        return all(c.available for c in self.capabilities) and not self.end_to_end

    def as_json(self) -> dict[str, Any]:
        return {
            "jax": self.jax_version,
            "jaxlib": self.jaxlib_version,
            "python": self.python_version,
            "healthy": self.healthy,
            "capabilities": [dataclasses.asdict(c) for c in self.capabilities],
            "end_to_end": self.end_to_end,
        }


class _Collect:
    def __init__(self) -> None:
        self.events: list[CompileEvent] = []

    def write(self, batch: Batch) -> None:
        self.events.extend(batch.events)


def checkup() -> Checkup:
    import jax
    import jaxlib

    capabilities = jaxcompat.status()
    return Checkup(
        jax_version=jax.__version__,
        jaxlib_version=getattr(jaxlib, "__version__", ""),
        python_version=platform.python_version(),
        capabilities=capabilities,
        end_to_end=_record_two_compiles(),
    )


def _record_two_compiles() -> list[str]:
    import jax.numpy as jnp

    import cachewatch

    from .record import recorder

    sink = _Collect()
    previous = recorder.use_sink(sink)
    try:

        def doctor_probe(x: Any) -> Any:
            return jnp.sin(x) * 2.0 + 1.0

        probe = cachewatch.jit(doctor_probe)
        probe(jnp.ones(3)).block_until_ready()
        probe(jnp.ones(4)).block_until_ready()
        cachewatch.flush(10.0)
    finally:
        recorder.use_sink(previous)
    mine = [e for e in sink.events if e.function.name == "doctor_probe"]
    problems = []
    causes = [e.cause for e in mine]
    if causes != [Cause.FIRST_CALL, Cause.NEW_SHAPE]:
        problems.append(f"expected causes first_call, new_shape; recorded {[str(c) for c in causes]}")
    for what in ("trace_seconds", "lower_seconds", "compile_seconds", "jaxpr_eqns"):
        if any(getattr(e, what) is None for e in mine):
            problems.append(f"{what} missing from a recorded compile")
    return problems


def render(check: Checkup) -> str:
    lines = [
        f"JAX {check.jax_version} (jaxlib {check.jaxlib_version}), Python {check.python_version}",
        "",
    ]
    width = max(len(c.name) for c in check.capabilities)
    for c in check.capabilities:
        state = "works" if c.available else "OFF  "
        detail = c.gives if c.available else f"{c.gives} is lost: {c.reason}"
        via = f" (public API: {c.public})" if c.public and c.available else ""
        lines.append(f"  {c.name:<{width}}  {state}  {detail}{via}")
    lines.append("")
    if check.end_to_end:
        lines.append("end to end: a compile recorded with gaps:")
        lines.extend(f"  - {problem}" for problem in check.end_to_end)
    else:
        lines.append("end to end: two compiles recorded with their causes, seconds and equation counts")
    off = [c.name for c in check.capabilities if not c.available]
    lines.append(
        "all capabilities work on this JAX" if not off else f"{len(off)} capability(ies) off: {', '.join(off)}"
    )
    return "\n".join(lines)
