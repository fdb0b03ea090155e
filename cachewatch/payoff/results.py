"""What weighing compiles finds, as frozen dataclasses: a jit's verdict (per signature and
in all), a row of the compile cost model, a compile-time regression. ``as_json()`` gives
the JSON the service and ``--format json`` return."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.results import fields_of
from .cost_reads import SlowerCompile


@dataclasses.dataclass(frozen=True)
class SignatureVerdict:
    """One signature's compiles, run and eager time and break-even."""

    signature_hash: str
    compiles: int
    compile_seconds_per_compile: float | None
    run_seconds: float | None
    eager_seconds: float
    break_even_calls: int | None


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether compiling a function paid for itself (see ``verdicts.jit_verdict``)."""

    compiles: int
    calls: int
    compile_seconds: float
    run_seconds_mean: float | None
    run_seconds_est: float | None
    compile_share: float | None
    eager_seconds_mean: float | None
    compile_seconds_per_compile: float | None
    break_even_calls: int | None  # calls after which the time saved repays one compile
    break_even_calls_total: int | None  # ... all the compiles
    jit_saves_seconds: float | None
    repaid: bool | None
    signatures: tuple[SignatureVerdict, ...]
    few_calls: bool
    text: str
    worth_it: bool | None

    def as_json(self) -> dict[str, Any]:
        out = fields_of(self)
        out["signatures"] = [fields_of(s) for s in self.signatures]
        return out


@dataclasses.dataclass(frozen=True)
class CostModelRow:
    """One function's compile seconds against its program size."""

    function_hash: str
    qualname: str
    compiles: int
    points: int  # compiles the fit used
    distinct_sizes: int
    min_size: float
    max_size: float
    seconds_per_1000_ops: float | None
    exponent: float | None  # slope on log-log axes
    superlinear: bool
    note: str | None  # why there is no exponent

    def as_json(self) -> dict[str, Any]:
        return fields_of(self)


@dataclasses.dataclass(frozen=True)
class Regression(SlowerCompile):
    """The same function and signature compiling markedly slower in a later run: the
    store's rise, its ratio, the JAX versions of both runs and the function's name."""

    ratio: float | None
    jax_before: str  # "jax/jaxlib"
    jax_after: str
    qualname: str

    def as_json(self) -> dict[str, Any]:
        return fields_of(self)
