"""One run in a few lines: what ``cachewatch run`` prints at exit and a notebook cell shows.

    summary = runsummary.for_store(url, run_id)
    print(runsummary.text(summary))

A summary is a :class:`RunSummaryView`; its ``as_json()`` is the JSON of ``cachewatch run
--summary json``: ``run_id``, ``store``, ``compiles``, ``recompiles``, ``compile_seconds``,
``warmup_compiles`` (set-up and first compiles, never part of a storm, as storms judge it),
``identical_recompiles`` and ``identical_seconds`` (recompiles of one function that produced
its program again: waste), ``shared_program_compiles`` (compiles of another function's
program: they could share a jit, no waste), ``functions`` (the
top few: name, compiles, causes, compile seconds, calls), ``storms`` (with their fix) and
``next`` (where to look).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..core import config as configmod
from ..core import figures
from ..core.figures import seconds_text
from ..core.texts import counted
from ..store import columns, sinks
from ..store import engine as enginemod
from ..storms import diagnosis, findings
from ..storms.results import FirstPass, Storm
from . import compose

TOP_FUNCTIONS = 5
# First passes whose fix the summary tells (`cachewatch report` tells every one's).
FIRST_PASS_ADVICE_TOLD = 2


@dataclasses.dataclass(frozen=True)
class TopFunction:
    """One of the functions that compiled longest, as the summary lists it."""

    name: str
    function_hash: str
    compiles: int
    causes: dict[str, int]  # most events first
    compile_seconds: float
    calls: int
    recompile_causes: dict[str, int] = dataclasses.field(default_factory=dict)  # the recompiles alone, most first


@dataclasses.dataclass(frozen=True)
class StormLine:
    """A storm as the summary shows it: its figures, its line of text and its fix."""

    short_name: str
    function_hash: str
    key: str  # the function hash, or ``site:<call site>`` for a line of user code
    compiles: int
    dominant_cause: str
    causes: dict[str, int]
    active: bool
    text: str
    fix: str


@dataclasses.dataclass(frozen=True)
class ReportFigures:
    """Totals, the top functions by compile seconds and the storms of a report."""

    compiles: int
    recompiles: int
    compile_seconds: float
    function_count: int
    functions: tuple[TopFunction, ...]
    storms: tuple[StormLine, ...]
    # The storms by root cause, most compile seconds first (each storm is the detail of one).
    findings: tuple[findings.Finding, ...] = ()


@dataclasses.dataclass(frozen=True)
class RunFigures:
    """A run's figures: its report's, its warm-up, its waste and JAX's caches."""

    report: ReportFigures
    live_executables: int
    live_executable_bytes: int
    never_called_again: int
    warmup_compiles: int
    identical_recompiles: int
    identical_seconds: float
    first_pass_compiles: int
    shared_program_compiles: int
    shared_programs: tuple[str, ...]  # the first few pairs' sentences
    stale_captures: tuple[str, ...] = ()  # the newest explanation for each of a few functions
    # What a fixed shape would spare the costliest first passes that offer it (most seconds first).
    first_pass_advice: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class RunSummaryView:
    """A run in a few lines: where it was written, where to look next, and its figures
    (None for an http(s) store: the service reads it, and the summary says where)."""

    run_id: str
    store: str
    flushed: bool
    next: tuple[str, ...]
    figures: RunFigures | None

    def as_json(self) -> dict[str, Any]:
        """The JSON of ``cachewatch run --summary json`` (``function_count`` only with figures)."""
        found, report = self.figures, self.figures.report if self.figures is not None else None
        out: dict[str, Any] = {
            "run_id": self.run_id,
            "store": self.store,
            "flushed": self.flushed,
            "compiles": report.compiles if report else None,
            "recompiles": report.recompiles if report else None,
            "compile_seconds": report.compile_seconds if report else None,
            "warmup_compiles": found.warmup_compiles if found else None,
            "identical_recompiles": found.identical_recompiles if found else None,
            "identical_seconds": found.identical_seconds if found else None,
            "first_pass_compiles": found.first_pass_compiles if found else None,
            "first_pass_advice": list(found.first_pass_advice) if found else [],
            "shared_program_compiles": found.shared_program_compiles if found else None,
            "shared_programs": list(found.shared_programs) if found else [],
            "stale_captures": list(found.stale_captures) if found else [],
            "live_executables": found.live_executables if found else None,
            "live_executable_bytes": found.live_executable_bytes if found else None,
            "never_called_again": found.never_called_again if found else None,
            "functions": [dataclasses.asdict(f) for f in report.functions] if report else [],
            "findings": [f.as_json() for f in report.findings] if report else [],
            "storms": [dataclasses.asdict(s) for s in report.storms] if report else [],
            "next": list(self.next),
        }
        if report is not None:
            out["function_count"] = report.function_count
        return out


def for_store(url: str, run_id: str, *, flushed: bool = True, top: int = TOP_FUNCTIONS) -> RunSummaryView:
    """The run's summary read from its store; an http(s) store is read by the service, so
    the summary then only says where to look."""
    cfg = configmod.resolve({"store": url})
    shown = enginemod.redact_url(url) if not sinks.is_service(url) else url
    figures = None
    if not sinks.is_service(url):
        with enginemod.connection(url) as conn:
            found = compose.run_summary(conn, run_id, diagnosis.rule_of(cfg))
        figures = of_summary(found, top=top)
    return RunSummaryView(run_id, shown, flushed, tuple(_next_steps(url, run_id)), figures)


def of_summary(found: compose.RunSummary, *, top: int = TOP_FUNCTIONS) -> RunFigures:
    """The summary's figures from a run's composed summary."""
    held, report = found.held, found.report
    return RunFigures(
        report=of_report(report.rows, report.storms, top=top, found=report.findings),
        live_executables=sum(fn.live for fn in held.functions),
        live_executable_bytes=sum(fn.live_bytes for fn in held.functions),
        never_called_again=sum(len(fn.never_hit) for fn in held.functions),
        warmup_compiles=found.warmup_compiles,
        identical_recompiles=sum(i.recompiles for i in report.identical),
        identical_seconds=sum(i.seconds for i in report.identical),
        first_pass_compiles=sum(p.compiles for p in report.first_passes),
        shared_program_compiles=sum(s.compiles for s in found.shared_programs),
        shared_programs=tuple(s.text for s in found.shared_programs[:3]),
        stale_captures=tuple(found.stale_captures),
        first_pass_advice=_first_pass_advice(report.first_passes),
    )


def _first_pass_advice(passes: Sequence[FirstPass]) -> tuple[str, ...]:
    """The fixes of the costliest first passes that offer one, one per line of the user's
    (a jit and the eager conversion beside it at one line are one cause)."""
    told: dict[str | None, str] = {}
    for found in sorted(passes, key=lambda p: -p.seconds):
        advice = diagnosis.first_pass_advice(found)
        if advice and found.call_site not in told:
            told[found.call_site] = advice
    return tuple(told.values())[:FIRST_PASS_ADVICE_TOLD]


def of_report(
    report: Sequence[columns.FunctionReport],
    storms: list[Storm],
    *,
    top: int,
    found: Sequence[findings.Finding] = (),
) -> ReportFigures:
    """Totals, the top functions by compile seconds, the storms and their findings, from a
    report's rows."""
    return ReportFigures(
        compiles=sum(r["compiles"] for r in report),
        recompiles=sum(r["recompiles"] for r in report),
        compile_seconds=sum(r["compile_seconds"] for r in report),
        function_count=len(report),
        functions=tuple(
            TopFunction(
                name=r["qualname"] or r["name"],
                function_hash=r["function_hash"],
                compiles=r["compiles"],
                causes=dict(sorted(r["causes"].items(), key=lambda kv: -kv[1])),
                compile_seconds=r["compile_seconds"],
                calls=r["calls"],
                recompile_causes=dict(sorted(r["recompile_causes"].items(), key=lambda kv: -kv[1])),
            )
            for r in list(report)[:top]
            if r["compiles"]
        ),
        storms=tuple(
            StormLine(
                short_name=s.short_name,
                function_hash=s.function_hash,
                key=s.key,
                compiles=s.compiles,
                dominant_cause=s.dominant_cause,
                causes=s.causes,
                active=s.active,
                text=diagnosis.describe_storm(s),
                fix=s.fix,
            )
            for s in storms
        ),
        findings=tuple(found),
    )


def _next_steps(url: str, run_id: str) -> list[str]:
    if sinks.is_service(url):
        return [f"dashboard: {url.rstrip('/')}/?run_id={run_id}"]
    store = "" if url == configmod.default_store_url() else f" --store {enginemod.redact_url(url)}"
    return [
        f"cachewatch report{store} --run {run_id}",
        f"cachewatch events{store} --run {run_id}",
        f"cachewatch serve{store}, then http://127.0.0.1:8000/?run_id={run_id}",
    ]


def text(summary: RunSummaryView) -> str:
    """The summary as a few lines for a terminal."""
    head = f"cachewatch: run {summary.run_id[:12]}"
    if summary.figures is None:
        lines = [f"{head}: events sent to {summary.store}."]
    else:
        lines = _figure_lines(head, summary.figures, summary.flushed)
    lines.append("  Next: " + "; ".join(summary.next))
    return "\n".join(lines)


def _figure_lines(head: str, found: RunFigures, flushed: bool) -> list[str]:
    report = found.report
    lines = [
        f"{head}: {counted(report.compiles, 'compile')} ({counted(report.recompiles, 'recompile')}, "
        f"{found.warmup_compiles} in warm-up), {seconds_text(report.compile_seconds)} compiling, "
        f"{counted(report.function_count, 'function')}."
    ]
    if found.first_pass_compiles:
        lines.append(
            f"  {counted(found.first_pass_compiles, 'recompile')} {'was' if found.first_pass_compiles == 1 else 'were'} "
            "a first pass over a few shapes, then served "
            "from the cache (no storm)."
        )
        lines.extend(f"    {advice}" for advice in found.first_pass_advice)
    if found.identical_recompiles:
        lines.append(
            f"  {counted(found.identical_recompiles, 'recompile')} produced a program compiled before in the run "
            f"({seconds_text(found.identical_seconds)} of pure waste; `cachewatch report` names them)."
        )
    if found.shared_program_compiles:
        lines.append(
            f"  {counted(found.shared_program_compiles, 'compile')} produced the same program as another function's "
            "(no waste; those functions could share one jit)."
        )
    if found.live_executables:
        lines.append(
            f"  {counted(found.live_executables, 'executable')} left alive in JAX's caches "
            f"({figures.bytes_text(found.live_executable_bytes)} of code)"
            + (
                f"; {found.never_called_again} {'was' if found.never_called_again == 1 else 'were'} never called "
                "after the call that compiled " + ("it" if found.never_called_again == 1 else "them")
                if found.never_called_again
                else ""
            )
            + " (`cachewatch cache`)."
        )
    # A compiled program that still uses an old value gives wrong results: told above the costs per function.
    lines.extend(f"  Stale value: {text}" for text in found.stale_captures)
    if not flushed:
        lines.append("  Not every event was written in time: the figures may be short.")
    for f in report.functions:
        # The recompiles' own causes: a trace inside another jit compiled nothing of its own.
        causes = ", ".join(f"{cause}={count}" for cause, count in f.recompile_causes.items() if count)
        lines.append(
            f"  {f.name}: {counted(f.compiles, 'compile')}, {seconds_text(f.compile_seconds)}"
            + (f", {counted(f.calls, 'call')}" if f.calls else "")
            + (f"; recompiled for {causes}" if causes else "")
        )
    lines.extend(_finding_lines(report))
    return lines


STORMS_SHOWN = 3  # storms shown under each finding; `cachewatch storms` lists them all


def _finding_lines(report: ReportFigures) -> list[str]:
    """Each finding with its fix and the storms it gathers; storms no finding holds (a
    report without findings) each with their own fix."""
    lines = []
    told: set[str] = set()
    for found in report.findings:
        lines.append(f"  Finding {findings.describe(found)}")
        lines.append(f"    Fix: {found.fix}")
        mine = sorted((s for s in report.storms if s.key in found.storms), key=lambda s: -s.compiles)
        for storm in mine[:STORMS_SHOWN]:
            lines.append(f"    Storm {storm.text}")
        if len(mine) > STORMS_SHOWN:
            lines.append(f"    ... and {len(mine) - STORMS_SHOWN} more storms (`cachewatch storms`)")
        told.update(s.key for s in mine)
    for storm in report.storms:
        if storm.key not in told:
            lines.append(f"  Storm {storm.text}")
            lines.append(f"    Fix: {storm.fix}")
    return lines
