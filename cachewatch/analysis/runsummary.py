"""One run in a few lines: what ``cachewatch run`` prints at exit and a notebook cell shows.

    summary = runsummary.for_store(url, run_id)
    print(runsummary.text(summary))

A summary is a plain dictionary (it is also the JSON of ``cachewatch run --summary json``):
``run_id``, ``store``, ``compiles``, ``recompiles``, ``compile_seconds``,
``warmup_compiles`` (set-up and first compiles, never part of a storm, as storms judge it),
``identical_recompiles`` and ``identical_seconds`` (recompiles of one function that produced
its program again: waste), ``shared_program_compiles`` (compiles of another function's
program: they could share a jit, no waste), ``functions`` (the
top few: name, compiles, causes, compile seconds, calls), ``storms`` (with their fix) and
``next`` (where to look).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core import config as configmod
from ..core.events import Cause
from ..core.figures import seconds_text
from ..store import columns
from ..store import engine as enginemod
from . import cache, diagnosis, views
from .results import Storm

TOP_FUNCTIONS = 5


def for_store(url: str, run_id: str, *, flushed: bool = True, top: int = TOP_FUNCTIONS) -> dict[str, Any]:
    """The run's summary read from its store; an http(s) store is read by the service, so
    the summary then only says where to look."""
    cfg = configmod.resolve({"store": url})
    shown = enginemod.redact_url(url) if not _is_http(url) else url
    summary: dict[str, Any] = {
        "run_id": run_id,
        "store": shown,
        "flushed": flushed,
        "compiles": None,
        "recompiles": None,
        "compile_seconds": None,
        "warmup_compiles": None,
        "identical_recompiles": None,
        "identical_seconds": None,
        "first_pass_compiles": None,
        "shared_program_compiles": None,
        "shared_programs": [],
        "live_executables": None,
        "live_executable_bytes": None,
        "never_called_again": None,
        "functions": [],
        "storms": [],
        "next": _next_steps(url, run_id),
    }
    if _is_http(url):
        return summary
    with enginemod.connection(url) as conn:
        found = views.run_summary(conn, run_id, threshold=cfg.storm_threshold, window=cfg.storm_window)
    summary.update(of_summary(found, top=top))
    return summary


def of_summary(found: views.RunSummary, *, top: int = TOP_FUNCTIONS) -> dict[str, Any]:
    """The summary's figures from a run's composed summary."""
    held, report = found.held, found.report
    return {
        **of_report(report.rows, report.storms, top=top),
        "live_executables": sum(fn.live for fn in held.functions),
        "live_executable_bytes": sum(fn.live_bytes for fn in held.functions),
        "never_called_again": sum(len(fn.never_hit) for fn in held.functions),
        "warmup_compiles": found.warmup_compiles,
        "identical_recompiles": sum(int(i["recompiles"]) for i in report.identical),
        "identical_seconds": sum(float(i["seconds"]) for i in report.identical),
        "first_pass_compiles": sum(p.compiles for p in report.first_passes),
        "shared_program_compiles": sum(int(s["compiles"]) for s in found.shared_programs),
        "shared_programs": [s["text"] for s in found.shared_programs[:3]],
    }


def of_report(report: Sequence[columns.FunctionReport], storms: list[Storm], *, top: int) -> dict[str, Any]:
    """Totals, the top functions by compile seconds and the storms, from a report's rows."""
    return {
        "compiles": sum(r["compiles"] for r in report),
        "recompiles": sum(r["recompiles"] for r in report),
        "compile_seconds": sum(r["compile_seconds"] for r in report),
        "function_count": len(report),
        "functions": [
            {
                "name": r["qualname"] or r["name"],
                "function_hash": r["function_hash"],
                "compiles": r["compiles"],
                "causes": dict(sorted(r["causes"].items(), key=lambda kv: -kv[1])),
                "compile_seconds": r["compile_seconds"],
                "calls": r["calls"],
            }
            for r in list(report)[:top]
            if r["compiles"]
        ],
        "storms": [
            {
                "short_name": s.short_name,
                "function_hash": s.function_hash,
                "compiles": s.compiles,
                "dominant_cause": s.dominant_cause,
                "causes": s.causes,
                "active": s.active,
                "text": diagnosis.describe_storm(s),
                "fix": s.fix,
            }
            for s in storms
        ],
    }


def _is_http(url: str) -> bool:
    return url.startswith(("http://", "https://"))


def _next_steps(url: str, run_id: str) -> list[str]:
    if _is_http(url):
        return [f"dashboard: {url.rstrip('/')}/?run_id={run_id}"]
    store = "" if url == configmod.default_store_url() else f" --store {enginemod.redact_url(url)}"
    return [
        f"cachewatch report{store} --run {run_id}",
        f"cachewatch events{store} --run {run_id}",
        f"cachewatch serve{store}, then http://127.0.0.1:8000/?run_id={run_id}",
    ]


def text(summary: dict[str, Any]) -> str:
    """The summary as a few lines for a terminal."""
    head = f"cachewatch: run {summary['run_id'][:12]}"
    if summary["compiles"] is None:
        lines = [f"{head}: events sent to {summary['store']}."]
    else:
        lines = [
            f"{head}: {summary['compiles']} compiles ({summary['recompiles']} recompiles, "
            f"{summary['warmup_compiles']} in warm-up), {seconds_text(summary['compile_seconds'])} compiling, "
            f"{summary['function_count']} functions."
        ]
        if summary.get("first_pass_compiles"):
            lines.append(
                f"  {summary['first_pass_compiles']} recompiles were a first pass over a few shapes, then served "
                "from the cache (no storm)."
            )
        if summary.get("identical_recompiles"):
            lines.append(
                f"  {summary['identical_recompiles']} recompiles produced a program compiled before in the run "
                f"({seconds_text(summary['identical_seconds'])} of pure waste; `cachewatch report` names them)."
            )
        if summary.get("shared_program_compiles"):
            lines.append(
                f"  {summary['shared_program_compiles']} compiles produced the same program as another function's "
                "(no waste; those functions could share one jit)."
            )
        if summary.get("live_executables"):
            lines.append(
                f"  {summary['live_executables']} executables left alive in JAX's caches "
                f"({cache.bytes_text(summary['live_executable_bytes'])} as XLA counts them)"
                + (
                    f"; {summary['never_called_again']} were never called after the call that compiled them"
                    if summary.get("never_called_again")
                    else ""
                )
                + " (`cachewatch cache`)."
            )
        if not summary.get("flushed", True):
            lines.append("  Not every event was written in time: the figures may be short.")
        for f in summary["functions"]:
            causes = ", ".join(
                f"{cause}={count}" for cause, count in f["causes"].items() if count and cause != Cause.FIRST_CALL
            )
            lines.append(
                f"  {f['name']}: {f['compiles']} compiles, {seconds_text(f['compile_seconds'])}"
                + (f", {f['calls']} calls" if f["calls"] else "")
                + (f"; recompiled for {causes}" if causes else "")
            )
        for storm in summary["storms"]:
            lines.append(f"  Storm {storm['text']}")
            lines.append(f"    Fix: {storm['fix']}")
    lines.append("  Next: " + "; ".join(summary["next"]))
    return "\n".join(lines)
