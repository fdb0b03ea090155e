"""The views every interface shows, each composed once: a function's detail, a run's
report, the diagnosis and a comparison of two runs. The command line, the service's
routes and dashboard, the notebook and ``cachewatch run`` print or serialise these;
none of them puts the reads together again.

    with engine.connection(url) as conn:
        report = compose.run_report(conn, Filters(run_id=run_id), diagnosis.StormRule(threshold=5, window=600.0))
    for found in report.functions:
        print(found.report["qualname"], found.identical_recompiles, found.program_fixes)

The views sit above the errands because each puts several of them together (storms,
verdicts, the cache, programs' fixes); no errand imports them. Each is a frozen
dataclass, and so are the storms, first passes and verdicts inside (``storms.results``,
``payoff.results``); ``as_json()`` gives the JSON the service and ``--format json`` return.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ..cache import cache_reads, cache_view
from ..callpaths import call_path_reads, slow_path
from ..core.events import Cause
from ..core.results import fields_of
from ..payoff import costmodel, kept_regressions, verdicts
from ..payoff.results import CostModelRow, Regression, Verdict
from ..programs import program_texts
from ..store import queries
from ..store.columns import Filters, FunctionReport
from ..store.queries import Totals
from ..storms import diagnosis, findings, fixes, steady, storm_reads
from ..storms.results import FirstPass, Storm

# Functions of a report whose compile-cost profile is read (most compile seconds first).
PROFILED_FUNCTIONS = 50
# Storms a function's detail describes and prices (newest first); the rest are counted.
# A function that stormed in hundreds of runs would otherwise price every one of them.
STORMS_SHOWN = 20


@dataclasses.dataclass(frozen=True)
class FunctionDetail:
    """One function as its page and ``GET /api/v1/functions/{hash}`` show it."""

    report: FunctionReport
    storms: list[Storm]  # newest first (so the active ones first), at most the limit asked for
    verdict: Verdict | None  # is jit worth it; None when there is nothing to weigh
    storms_total: int  # every storm of the function, shown or not
    # Per run, its calls JAX served through its Python dispatch path (none: not one).
    slow_paths: list[slow_path.SlowPath] = dataclasses.field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            **self.report,
            "storms": [s.as_json() for s in self.storms],
            "storms_total": self.storms_total,
            "verdict": self.verdict.as_json() if self.verdict is not None else None,
            "slow_paths": [slow_path.as_json(s) for s in self.slow_paths],
        }


def function_detail(
    conn: sa.Connection,
    function_hash: str,
    filters: Filters,
    rule: diagnosis.StormRule,
    *,
    storms_limit: int | None = STORMS_SHOWN,
) -> FunctionDetail | None:
    """The function's report row, its newest ``storms_limit`` storms (None: all; every
    storm is judged and counted, only those shown are described and priced) and its
    verdict; None when the store has no such function."""
    row = queries.function_row(conn, function_hash, filters)
    if row is None:
        return None
    found = diagnosis.find_storms(
        conn,
        filters,
        **rule,
        function_hashes=[function_hash],
        page=None if storms_limit is None else (0, storms_limit),
        with_first_passes=False,
    )
    verdict = verdicts.verdicts_or_none(conn, [row], filters).get(function_hash)
    slow = slow_path.slow_paths(call_path_reads.path_counts(conn, filters, [function_hash]))
    return FunctionDetail(row, list(found.storms), verdict, found.total, slow)


def suggested_fix(conn: sa.Connection, detail: FunctionDetail, filters: Filters, label: str) -> str | None:
    """What to change first: the newest storm's fix, else the fix for the dominant cause
    of the function's recompiles (None when it only ever compiled on its first call)."""
    if detail.storms:
        return detail.storms[0].fix
    row = detail.report
    dominant = row.get("dominant_cause")
    if dominant is None or dominant == Cause.FIRST_CALL:
        return None
    rows = storm_reads.dominant_cause_rows(conn, row["function_hash"], filters, dominant)
    return fixes.fix_for(row["name"], label, row.get("module") or "", dominant, rows)


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    """Is jit worth it per function, the compile cost model, and compile-time regressions across runs."""

    verdicts: dict[str, Verdict]  # by function hash
    cost_model: list[CostModelRow]
    regressions: list[Regression]  # the steepest first, at most the limit asked for
    regressions_total: int  # every regression found, shown or not

    def as_json(self) -> dict[str, Any]:
        """``GET /api/v1/diagnosis``."""
        return {
            "verdicts": {h: v.as_json() for h, v in self.verdicts.items()},
            "cost_model": [row.as_json() for row in self.cost_model],
            "regressions": [g.as_json() for g in self.regressions],
            "regressions_total": self.regressions_total,
        }


def diagnosis_of(
    conn: sa.Connection,
    rows: list[FunctionReport],
    filters: Filters,
    regressions_limit: int | None = kept_regressions.REGRESSIONS_SHOWN,
) -> Diagnosis:
    """The diagnosis of a report's rows (regressions are the whole store's: they span
    runs; the ``regressions_limit`` steepest are listed, None for all)."""
    rises = kept_regressions.compile_regressions(conn, limit=regressions_limit)
    return Diagnosis(
        verdicts=verdicts.verdicts_or_none(conn, rows, filters),
        cost_model=costmodel.cost_model(conn, filters),
        regressions=rises.shown,
        regressions_total=rises.total,
    )


def diagnosis_view(
    conn: sa.Connection, filters: Filters, regressions_limit: int | None = kept_regressions.REGRESSIONS_SHOWN
) -> Diagnosis:
    """``GET /api/v1/diagnosis``: the diagnosis of every function under the filters."""
    return diagnosis_of(conn, queries.function_report(conn, filters), filters, regressions_limit)


@dataclasses.dataclass(frozen=True)
class FunctionFindings:
    """One function of a report with what the report found about it."""

    report: FunctionReport
    verdict: Verdict | None
    identical_recompiles: int  # recompiles that produced the program compiled before
    identical_seconds: float
    program_fixes: list[str]  # what makes its program big, and the change that helps

    def as_json(self) -> dict[str, Any]:
        """The row of ``cachewatch report --format json``."""
        return {
            **self.report,
            "verdict": self.verdict.as_json() if self.verdict is not None else None,
            "identical_recompiles": self.identical_recompiles,
            "identical_seconds": self.identical_seconds,
            "program_fixes": self.program_fixes,
        }


@dataclasses.dataclass(frozen=True)
class RunReport:
    """A run's report (or the store's, or any filtered part of it): every function, most
    compile seconds first, with its storms, first passes and wasted recompiles; with
    ``full``, also the diagnosis and each function's compile-cost fixes."""

    rows: list[FunctionReport]
    storms: list[Storm]
    first_passes: list[FirstPass]
    identical: list[program_texts.IdenticalRecompiles]  # per function and cause, most seconds first
    diagnosis: Diagnosis | None
    program_fixes: dict[str, list[str]]  # by function hash
    # The storms by root cause, most compile seconds first: what a reader acts on first.
    findings: list[findings.Finding] = dataclasses.field(default_factory=list)
    # The functions whose calls JAX served through its Python dispatch path (``full`` only).
    slow_paths: list[slow_path.SlowPath] = dataclasses.field(default_factory=list)

    @property
    def functions(self) -> list[FunctionFindings]:
        wasted: dict[str, list[program_texts.IdenticalRecompiles]] = {}
        for item in self.identical:
            wasted.setdefault(item.function_hash, []).append(item)
        verdicts = self.diagnosis.verdicts if self.diagnosis is not None else {}
        return [
            FunctionFindings(
                report=row,
                verdict=verdicts.get(row["function_hash"]),
                identical_recompiles=sum(i.recompiles for i in wasted.get(row["function_hash"], [])),
                identical_seconds=sum(i.seconds for i in wasted.get(row["function_hash"], [])),
                program_fixes=self.program_fixes.get(row["function_hash"], []),
            )
            for row in self.rows
        ]


def run_report(
    conn: sa.Connection,
    filters: Filters,
    rule: diagnosis.StormRule,
    *,
    full: bool = True,
    regressions_limit: int | None = kept_regressions.REGRESSIONS_SHOWN,
) -> RunReport:
    """The report ``cachewatch report`` prints (``full``, with the ``regressions_limit``
    steepest regressions) and a run's summary is made of (not ``full``)."""
    rows = queries.function_report(conn, filters)
    storms, passes = diagnosis.storms_and_first_passes(conn, filters, **rule)
    identical = program_texts.identical_recompiles(conn, filters)
    found = findings.with_slow_paths(conn, filters, findings.of_storms(conn, storms))
    if not full:
        return RunReport(rows, storms, passes, identical, None, {}, found)
    fixes = {
        row["function_hash"]: [
            fix.text for fix in program_texts.compile_profile(conn, row["function_hash"], filters).fixes
        ]
        for row in rows[:PROFILED_FUNCTIONS]
        if row["compiles"]
    }
    diagnosed = diagnosis_of(conn, rows, filters, regressions_limit)
    slow = slow_path.slow_paths(call_path_reads.path_counts(conn, filters))
    return RunReport(rows, storms, passes, identical, diagnosed, fixes, found, slow)


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """What ``cachewatch run`` prints at exit and a notebook shows for a run: its report,
    its warm-up, the functions that compiled another's program, and JAX's caches."""

    report: RunReport
    warmup_compiles: int
    shared_programs: list[program_texts.SharedPrograms]
    held: cache_view.CacheReport
    # Values jitted functions read at trace time that changed since: wrong results, not slow ones.
    stale_captures: list[str] = dataclasses.field(default_factory=list)


# Functions whose stale captured values a run's summary tells (`cachewatch events` lists every one).
STALE_CAPTURES_TOLD = 3


def run_summary(conn: sa.Connection, run_id: str, rule: diagnosis.StormRule) -> RunSummary:
    filters = Filters(run_id=run_id)
    return RunSummary(
        report=run_report(conn, filters, rule, full=False),
        warmup_compiles=steady.warmup_compiles(conn, run_id),
        shared_programs=program_texts.shared_programs(conn, filters),
        held=cache_view.cache_report(cache_reads.read_cache(conn, filters)),
        stale_captures=queries.latest_stale_captures(conn, run_id, STALE_CAPTURES_TOLD),
    )


def summary(
    conn: sa.Connection, filters: Filters, rule: diagnosis.StormRule, *, active: Sequence[Storm] | None = None
) -> Summary:
    """The store's totals (or the filtered part's) and how many storms are active now
    (``active``: found already, by a page that shows them)."""
    if active is None:
        active = diagnosis.storms(conn, filters, **rule, active_only=True, described=False)
    totals = queries.totals(conn, filters)
    return Summary.of(
        totals,
        active_storms=len(active),
        storm_threshold=rule["threshold"],
        storm_window=rule["window"],
    )


@dataclasses.dataclass(frozen=True)
class Summary(Totals):
    """The store's totals (or the filtered part's) and how many storms are active now."""

    active_storms: int
    storm_threshold: int
    storm_window: float

    @classmethod
    def of(cls, totals: Totals, *, active_storms: int, storm_threshold: int, storm_window: float) -> Summary:
        return cls(
            **fields_of(totals),
            active_storms=active_storms,
            storm_threshold=storm_threshold,
            storm_window=storm_window,
        )

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
