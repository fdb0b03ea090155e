"""``cachewatch report`` and ``cachewatch storms`` as a terminal prints them (and ``report
--html`` as static pages), and the table, time and path helpers every command's table
uses."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .core import config as configmod
from .core.events import OP_BY_OP_MODULE, UNATTRIBUTED_MODULE
from .core.figures import share_text
from .storms import diagnosis

if TYPE_CHECKING:  # the commands import what they read when run, so `cachewatch --help` stays quick
    from .programs.program_texts import IdenticalRecompiles
    from .storms.findings import Finding
    from .views.compose import FunctionFindings, RunReport


def store_url(args: argparse.Namespace) -> str:
    if args.store:
        return args.store
    return configmod.resolve().store


def report(args: argparse.Namespace) -> int:
    from .store import columns
    from .store import engine as enginemod
    from .views import compose

    url = store_url(args)
    if args.html:
        return write_html(url, args.html, args.run_id)
    cfg = configmod.resolve()
    with enginemod.connection(url) as conn:
        report = compose.run_report(
            conn,
            columns.Filters(run_id=args.run_id),
            diagnosis.rule_of(cfg),
            regressions_limit=args.regressions,
        )
    functions = report.functions
    if args.format == "json":
        print(json.dumps([found.as_json() for found in functions], indent=2, default=str))
        return 0
    if not functions:
        print(
            f"No compile events in {enginemod.redact_url(enginemod.normalize_url(url))} yet. Wrap a function with "
            "cachewatch.jit (or call cachewatch.install()) and run your program with the same "
            "CACHEWATCH_STORE."
        )
        return 0
    _print_functions(report.rows)
    print("\n" + _coverage_line(report.rows))
    _print_findings(report, functions)
    _print_program_findings(report.identical, functions)
    return 0


def write_html(url: str, directory: str, run: str | None) -> int:
    """``report --html DIR``: the run's report as static pages (the dashboard's, rendered
    here); 2 when no run answers to ``run``, 1 when the service's libraries are missing."""
    try:
        from cachewatch_server import static_report
    except ImportError as exc:
        print(
            f"cachewatch report --html: needs the dashboard's libraries ({exc.name or exc}): "
            "pip install 'cachewatch[server]'",
            file=sys.stderr,
        )
        return 1
    try:
        written = static_report.write(url, Path(directory), run=run)
    except static_report.ReportError as exc:
        print(f"cachewatch report --html: {exc}", file=sys.stderr)
        return 2
    left_out = f"; {written.left_out} more pages linked as text" if written.left_out else ""
    print(
        f"cachewatch: the report of run {written.run_id[:12]} is in {written.directory} ({written.pages} pages, "
        f"{written.programs} flame graphs{left_out}): open {written.index}"
    )
    return 0


_REPORT_HEADERS = [
    "function",
    "defined at",
    "compiles",
    "recompiles",
    "compile s",
    "calls",
    "run s (est)",
    "compile share",
    "causes",
]


def _print_functions(rows: Sequence[Mapping[str, Any]]) -> None:
    table = []
    for r in rows:
        causes = ", ".join(f"{c}={n}" for c, n in sorted(r["causes"].items(), key=lambda kv: -kv[1]))
        where = f"{basename(r['file'])}:{r['line']}" if r["file"] else "(eager code)"
        table.append(
            [
                r["qualname"],
                where,
                r["compiles"],
                r["recompiles"],
                f"{r['compile_seconds']:.3f}",
                r["calls"] or "-",
                "-" if r["run_seconds_est"] is None else f"{r['run_seconds_est']:.3f}",
                share_text(r["compile_share"]),
                causes,
            ]
        )
    print_table(_REPORT_HEADERS, table)


def _print_program_findings(identical: Sequence[IdenticalRecompiles], functions: Sequence[FunctionFindings]) -> None:
    """Wasted recompiles, then what makes each program big."""
    if identical:
        total = sum(i.seconds for i in identical)
        count = sum(i.recompiles for i in identical)
        print(f"\nRecompiles that produced the program compiled before ({count}, {total:.3f} s wasted):")
        for item in identical:
            print(f"  {here(item.fix)}")
    fixes = [(found.report["qualname"], text) for found in functions for text in found.program_fixes]
    if fixes:
        print(
            "\nCompile cost (what makes the program big; `cachewatch program EVENT_ID --format pprof` for all of it):"
        )
        for name, text in fixes:
            print(f"  {name}: {here(text)}")


def _coverage_line(rows: Sequence[Mapping[str, Any]]) -> str:
    """How many compiles were tied to a function, and how many only to the name JAX gave them."""
    total = sum(r["compiles"] for r in rows)
    by_name = sum(r["compiles"] for r in rows if r.get("module") == UNATTRIBUTED_MODULE)
    eager = sum(r["compiles"] for r in rows if r.get("module") == OP_BY_OP_MODULE)
    text = (
        f"Compiles recorded: {total}; attributed to a function or an eager primitive: {total - by_name} ({eager} eager)"
    )
    if by_name:
        text += f"; known only by the name JAX compiled them under: {by_name}"
    return text + "."


def _print_bursts(report: RunReport) -> None:
    """The findings, then their storms, the first passes and the calls on JAX's Python path."""
    from .storms import diagnosis

    storms, passes = report.storms, report.first_passes
    _print_finding_list(report.findings)
    if storms:
        print(f"\nStorms ({len(storms)}, the findings' detail):" if report.findings else f"\nStorms ({len(storms)}):")
        for storm in storms:
            print(f"  {diagnosis.describe_storm(storm)}\n    Fix: {here(storm.fix)}")
    if passes:
        print("\nFirst passes (each shape compiled once, none again; not storms):")
        for found in passes:
            print(f"  {diagnosis.describe_first_pass(found)}")
            advice = diagnosis.first_pass_advice(found)
            if advice:
                print(f"    Fix: {here(advice)}")
    if report.slow_paths:
        print("\nCalls on JAX's Python dispatch path, not its C++ fast path:")
        for slow in report.slow_paths:
            print(f"  {here(slow.text)}\n    Fix: {here(slow.fix)}")


def _print_findings(report: RunReport, functions: Sequence[FunctionFindings]) -> None:
    costs, regressions = (report.diagnosis.cost_model, report.diagnosis.regressions) if report.diagnosis else ([], [])
    regressions_total = report.diagnosis.regressions_total if report.diagnosis else 0
    _print_bursts(report)
    worth = [(f.report["qualname"], f.verdict.text) for f in functions if f.verdict and f.verdict.text]
    if worth:
        print("\nIs jit worth it:")
        for name, text in worth:
            print(f"  {name}: {text}")
    stale = [f.report for f in functions if f.report.get("stale_captures")]
    if stale:
        print("\nStale captured values (read at trace time, changed since; see `cachewatch events`):")
        for r in stale:
            print(f"  {r['qualname']}: {r['stale_captures']} change(s)")
    steep = [c for c in costs if c.superlinear]
    if steep:
        print("\nCompile time grows faster than program size:")
        for c in steep:
            print(
                f"  {c.qualname}: compile seconds ~ size^{c.exponent:.2f}, fitted on {c.points} "
                f"compiles over sizes {c.min_size:.0f}-{c.max_size:.0f}"
            )
    if regressions:
        print("\nCompile-time regressions across runs (the steepest first):")
        for g in regressions:
            print(
                f"  {g.qualname}: {g.seconds_before:.3f}s -> {g.seconds_after:.3f}s "
                f"(jax {g.jax_before} -> {g.jax_after})"
            )
        if regressions_total > len(regressions):
            print(f"  ... and {regressions_total - len(regressions)} more (--regressions N lists more)")


def _print_finding_list(found: Sequence[Finding]) -> None:
    """The findings, most compile seconds first, each with its fix."""
    from .storms import findings

    if not found:
        return
    print(f"\nFindings ({len(found)}, by root cause, most compile seconds first):")
    for number, finding in enumerate(found, 1):
        print(f"  {number}. {findings.describe(finding)}\n     Fix: {here(finding.fix)}")


def list_findings(args: argparse.Namespace) -> int:
    """``cachewatch findings``: the storms by root cause, most compile seconds first."""
    from .store import columns
    from .store import engine as enginemod
    from .storms import findings

    cfg = configmod.resolve()
    with enginemod.connection(store_url(args)) as conn:
        found = findings.find(
            conn,
            columns.Filters(run_id=args.run_id),
            threshold=args.threshold or cfg.storm_threshold,
            window=args.window or cfg.storm_window,
        )
    if args.format == "json":
        print(json.dumps([f.as_json() for f in found], indent=2, default=str))
    elif not found:
        print("No recompilation storms, so no findings.")
    else:
        _print_finding_list(found)
    return 0


def storms(args: argparse.Namespace) -> int:
    from .store import columns
    from .store import engine as enginemod
    from .storms import diagnosis, findings

    url = store_url(args)
    cfg = configmod.resolve()
    with enginemod.connection(url) as conn:
        storms = diagnosis.detect_storms(
            conn,
            columns.Filters(run_id=args.run_id),
            threshold=args.threshold or cfg.storm_threshold,
            window=args.window or cfg.storm_window,
        )
        found = findings.of_storms(conn, storms) if args.format != "json" else []
    if args.format == "json":
        print(json.dumps([storm.as_json() for storm in storms], indent=2, default=str))
        return 0
    if not storms:
        print("No recompilation storms.")
        return 0
    _print_finding_list(found)
    print(f"\nStorms ({len(storms)}, the findings' detail):")
    for storm in storms:
        start = local_time(storm.start, "%Y-%m-%d %H:%M:%S")
        print(f"  {diagnosis.describe_storm(storm)} From {start} over {storm.end - storm.start:.0f}s.")
        print(f"    Fix: {here(storm.fix)}")
    return 0


def local_time(seconds: float, fmt: str) -> str:
    """The time for a table; a stored time no calendar holds is shown as it is, flagged."""
    try:
        return dt.datetime.fromtimestamp(seconds).strftime(fmt)
    except (OverflowError, OSError, ValueError, TypeError):
        return f"invalid time ({seconds!r})"


def basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def here(text: str) -> str:
    """Paths under the current directory, as the user would type them (tables only; JSON keeps them whole)."""
    return text.replace(os.getcwd() + os.sep, "")


def print_table(headers: list[str], rows: list[list[Any]]) -> None:
    cells = [[here(str(c)) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row[:-1]):
            widths[i] = min(max(widths[i], len(c)), 60)
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=False)))
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)))
