"""Two runs of a program side by side, function by function: did the change compile more?

    with engine.connection(url) as conn:
        result = side_by_side.compare(conn, "baseline-run-id", None)
    for reason in side_by_side.gate(result, max_extra_compiles=0, max_compile_time_ratio=1.5):
        print(reason)

Functions are matched by their hash (the same source gives the same hash in every
process). Per function: compiles, recompiles by cause, compile seconds, calls and the
compiled program's size (StableHLO operations, when recorded), baseline -> run; what is
new in the run and what is gone from it. Functions come most extra compile seconds first.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..core.events import Cause, short_name
from ..core.figures import seconds_text
from . import comparison_reads


@dataclass(frozen=True)
class Figures:
    """One function's figures in one run of a comparison."""

    compiles: int
    recompiles: int
    causes: dict[str, int]  # cause -> compiles and traces
    compile_seconds: float
    calls: int
    program_size: int | None  # the largest compiled program's StableHLO operations, if recorded


_NONE = Figures(compiles=0, recompiles=0, causes={}, compile_seconds=0.0, calls=0, program_size=None)


@dataclass(frozen=True)
class FunctionChange:
    """One function, baseline -> run."""

    function_hash: str
    name: str
    qualname: str
    short_name: str
    module: str
    status: str  # new | gone | changed | same
    baseline: Figures | None  # None: new in the run
    run: Figures | None  # None: gone from the run
    extra_compiles: int
    extra_recompiles: int
    extra_seconds: float  # compile seconds in the run minus in the baseline
    causes_delta: dict[str, int]  # cause -> change in count (non-zero only)
    cause: str | None  # the cause behind most of the extra recompiles: what to look at first


@dataclass(frozen=True)
class ComparedRun:
    """One side of a comparison: the run and its totals over the functions compared."""

    run_id: str
    run_name: str
    job: str
    started_at: float
    jax_version: str
    compiles: int
    recompiles: int
    compile_seconds: float


@dataclass(frozen=True)
class Comparison:
    """Two runs compared: what ``cachewatch compare``, ``GET /api/v1/runs/compare`` and the
    dashboard's compare page show."""

    baseline: ComparedRun
    run: ComparedRun
    extra_compiles: int
    extra_seconds: float
    compile_time_ratio: float | None  # None when the baseline compiled nothing
    functions: list[FunctionChange]  # most extra compile seconds first
    new: list[str]  # qualnames
    gone: list[str]

    def as_json(self) -> dict[str, Any]:
        """The comparison as ``--format json`` and the API write it."""
        return dataclasses.asdict(self)


def compare(conn: sa.Connection, baseline: str | None, run: str | None) -> Comparison:
    """The comparison of two runs (see :func:`cachewatch.comparison.comparison_reads.pick_runs` for the defaults).
    Raises ``RunNotFound`` when a run cannot be told."""
    base_ref, run_ref = comparison_reads.pick_runs(conn, baseline, run)
    return of_functions(
        base_ref,
        comparison_reads.run_functions(conn, base_ref.run_id),
        run_ref,
        comparison_reads.run_functions(conn, run_ref.run_id),
    )


def of_functions(
    base_ref: comparison_reads.RunRef,
    base: dict[str, comparison_reads.FunctionTotals],
    run_ref: comparison_reads.RunRef,
    now: dict[str, comparison_reads.FunctionTotals],
) -> Comparison:
    functions = [
        _change(function_hash, base.get(function_hash), now.get(function_hash))
        for function_hash in set(base) | set(now)
    ]
    functions.sort(key=lambda f: (-f.extra_seconds, -f.extra_compiles, f.qualname))
    baseline = _side(base_ref, [f.baseline for f in functions if f.baseline])
    after = _side(run_ref, [f.run for f in functions if f.run])
    return Comparison(
        baseline=baseline,
        run=after,
        extra_compiles=after.compiles - baseline.compiles,
        extra_seconds=after.compile_seconds - baseline.compile_seconds,
        # None when the baseline compiled nothing (any compile is then more than a ratio can say).
        compile_time_ratio=after.compile_seconds / baseline.compile_seconds if baseline.compile_seconds > 0 else None,
        functions=functions,
        new=[f.qualname for f in functions if f.status == "new"],
        gone=[f.qualname for f in functions if f.status == "gone"],
    )


def _change(
    function_hash: str, before: comparison_reads.FunctionTotals | None, after: comparison_reads.FunctionTotals | None
) -> FunctionChange:
    row = (after or before).report  # type: ignore[union-attr]
    b, a = _figures(before), _figures(after)
    causes = sorted(set(b.causes) | set(a.causes))
    delta = {c: a.causes.get(c, 0) - b.causes.get(c, 0) for c in causes}
    delta = {c: d for c, d in delta.items() if d}
    grown = {c: d for c, d in delta.items() if d > 0 and c != Cause.FIRST_CALL}
    return FunctionChange(
        function_hash=function_hash,
        name=row["name"],
        qualname=row["qualname"],
        short_name=short_name(row["qualname"]) if row["qualname"] else function_hash[:12],
        module=row["module"],
        status="new" if before is None else "gone" if after is None else _status(b, a),
        baseline=None if before is None else b,
        run=None if after is None else a,
        extra_compiles=a.compiles - b.compiles,
        extra_recompiles=a.recompiles - b.recompiles,
        extra_seconds=a.compile_seconds - b.compile_seconds,
        causes_delta=delta,
        cause=max(sorted(grown), key=lambda c: grown[c]) if grown else None,
    )


def _side(ref: comparison_reads.RunRef, figures: list[Figures]) -> ComparedRun:
    return ComparedRun(
        run_id=ref.run_id,
        run_name=ref.run_name,
        job=ref.job,
        started_at=ref.started_at,
        jax_version=ref.jax_version,
        compiles=sum(f.compiles for f in figures),
        recompiles=sum(f.recompiles for f in figures),
        compile_seconds=sum(f.compile_seconds for f in figures),
    )


def _figures(totals: comparison_reads.FunctionTotals | None) -> Figures:
    if totals is None:
        return _NONE
    r = totals.report
    return Figures(
        compiles=r["compiles"],
        recompiles=r["recompiles"],
        causes=dict(r["causes"]),
        compile_seconds=r["compile_seconds"],
        calls=r["calls"],
        program_size=totals.program_size,
    )


def _status(b: Figures, a: Figures) -> str:
    same = b.compiles == a.compiles and b.causes == a.causes and b.program_size == a.program_size
    return "same" if same else "changed"


def gate(
    result: Comparison, *, max_extra_compiles: int | None = None, max_compile_time_ratio: float | None = None
) -> list[str]:
    """Why the run fails a CI gate against its baseline (empty: it passes)."""
    broken = []
    if max_extra_compiles is not None and result.extra_compiles > max_extra_compiles:
        worst = [f for f in result.functions if f.extra_compiles > 0][:3]
        broken.append(
            f"{result.extra_compiles} more compiles than the baseline (at most {max_extra_compiles} allowed)"
            + (": " + "; ".join(_function_change(f) for f in worst) if worst else "")
        )
    if max_compile_time_ratio is not None:
        ratio = result.compile_time_ratio
        over = result.run.compile_seconds > 0 if ratio is None else ratio > max_compile_time_ratio
        if over:
            shown = "the baseline compiled nothing" if ratio is None else f"x{ratio:.2f}"
            broken.append(
                f"compile time {seconds_text(result.baseline.compile_seconds)} -> "
                f"{seconds_text(result.run.compile_seconds)} ({shown}; at most x{max_compile_time_ratio:g} allowed)"
            )
    return broken


def _function_change(f: FunctionChange) -> str:
    """``grad_step: +9 compiles (new_shape +9), +3.1 s``."""
    causes = ", ".join(f"{c} {d:+d}" for c, d in sorted(f.causes_delta.items(), key=lambda kv: -abs(kv[1])))
    text = f"{f.short_name}: {f.extra_compiles:+d} compiles"
    if causes:
        text += f" ({causes})"
    sign = "+" if f.extra_seconds >= 0 else "-"
    return text + f", {sign}{seconds_text(abs(f.extra_seconds))}"


def text(result: Comparison, *, limit: int = 20) -> str:
    """The comparison for a terminal: totals, then the functions that changed."""
    b, r = result.baseline, result.run
    ratio = result.compile_time_ratio
    lines = [
        f"Baseline {b.run_id[:12]} ({b.run_name or 'no name'}) -> run {r.run_id[:12]} ({r.run_name or 'no name'})",
        f"Compiles: {b.compiles} -> {r.compiles} ({result.extra_compiles:+d}); "
        f"compile time: {seconds_text(b.compile_seconds)} -> {seconds_text(r.compile_seconds)}"
        + (f" (x{ratio:.2f})" if ratio is not None else ""),
    ]
    changed = [f for f in result.functions if f.status != "same"]
    if not changed:
        lines.append("Every function compiled as in the baseline.")
    for f in changed[:limit]:
        if f.status == "new":
            lines.append(f"  new   {_function_change(f)}")
        elif f.status == "gone":
            lines.append(f"  gone  {_function_change(f)}")
        else:
            before, after = f.baseline or _NONE, f.run or _NONE  # both set for a function in both runs
            size = ""
            if before.program_size != after.program_size:
                size = f", program size {before.program_size} -> {after.program_size}"
            lines.append(
                f"  {'more' if f.extra_compiles > 0 else 'less' if f.extra_compiles < 0 else 'same'}  "
                f"{_function_change(f)} ({before.compiles} -> {after.compiles}{size})"
            )
    if len(changed) > limit:
        lines.append(f"  ... and {len(changed) - limit} more (--format json lists them all)")
    return "\n".join(lines)
