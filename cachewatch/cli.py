"""The ``cachewatch`` command (also ``python -m cachewatch``).

cachewatch report [--store URL] [--run RUN_ID] [--format table|json]
cachewatch storms [--store URL] [--threshold N] [--window SECONDS] [--format table|json]
cachewatch events [--store URL] [--function NAME] [--limit N] [--format table|json]
cachewatch program EVENT_ID [--store URL] [--format jaxpr|stablehlo|hlo|pprof|flamegraph] [-o FILE]
cachewatch diff EVENT_A [EVENT_B] [--store URL] [--format text|json|flamegraph]
cachewatch db upgrade [--store URL]
cachewatch db prune [--store URL] (--older-than AGE | --keep-runs N) [--texts-only] [--dry-run] [--format text|json]
cachewatch serve [--store URL] [--host H] [--port P] [--workers N]
cachewatch run [--store URL] [--run-name N] [--max-compiles N] [--fail-on-storm] [--log-to TARGET]... (script.py | -m module) ARGS...
cachewatch compare BASELINE_RUN [RUN] [--max-extra-compiles N] [--max-compile-time-ratio R] [--format table|json]
cachewatch cache [--store URL] [--run RUN | --all-runs] [--function NAME] [--cache-dir DIR] [--format table|json]
cachewatch whatif FUNCTION [--run RUN] [--pad pow2|multiple:K|ladder:A,B,C|auto[:N]] [--axis ARG:AXIS] [--format table|json]
cachewatch export RUN --format perfetto [-o FILE] [--store URL]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import cli_export, cli_report, runner
from .cli_report import here, local_time, print_table, store_url
from .core import config as configmod

if TYPE_CHECKING:  # the commands import what they read when run, so `cachewatch --help` stays quick
    pass


def _store_command(sub: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand that opens a store: ``add_parser``'s arguments, and ``--store``."""
    parser: argparse.ArgumentParser = sub.add_parser(name, **kwargs)
    parser.add_argument(
        "--store",
        help=f"store URL (default: $CACHEWATCH_STORE, else the shared SQLite file {configmod.default_store_url()})",
    )
    return parser


def _add_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", dest="run_id", help="only this run id")
    parser.add_argument("--format", choices=("table", "json"), default="table")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cachewatch", description="Why did jax.jit compile, and what did it cost?")
    sub = parser.add_subparsers(dest="command", required=True)

    _add_reports(sub)
    _add_program_views(sub)

    db = sub.add_parser("db", help="store maintenance")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    _store_command(db_sub, "upgrade", help="migrate the store's schema to this version")
    _add_prune(db_sub)

    serve = _store_command(sub, "serve", help="run the web service: dashboard, query API, ingest, /metrics")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (default 1)")

    sub.add_parser("settings", help="list the CACHEWATCH_* settings and their defaults")

    doctor = sub.add_parser("doctor", help="what works on the JAX in use: every capability, and one compile end to end")
    doctor.add_argument("--format", choices=("table", "json"), default="table")
    runner.add_arguments(
        sub.add_parser(
            "run",
            help="run a Python program with every jit recorded",
            usage=runner.USAGE,
            description=runner.DESCRIPTION,
        )
    )
    _add_compare(sub)
    _add_whatif(sub)
    _add_cache(sub)
    cli_export.add_arguments(
        _store_command(sub, "export", help="a run's compiles as a trace for Perfetto or chrome://tracing")
    )
    return parser


def _add_reports(sub: Any) -> None:
    """The commands that read the store's findings: report, storms and events."""
    report = _store_command(sub, "report", help="per-function compiles, causes and cost")
    _add_filters(report)
    report.add_argument(
        "--regressions",
        type=_regression_count,
        default=100,
        help="compile-time regressions listed, the steepest first (default 100; the count of all is given)",
    )
    report.add_argument(
        "--html",
        metavar="DIR",
        help="write the run's report as static HTML pages into DIR (--run names the run; default the latest), "
        "to open from disk with no server",
    )

    storms = _store_command(sub, "storms", help="recompilation storms with their cause and fix, led by their findings")
    findings = _store_command(sub, "findings", help="recompiles by root cause, most compile seconds first, with a fix")
    for command in (storms, findings):
        _add_filters(command)
        command.add_argument("--threshold", type=int, help="recompiles that make a storm (default: storm_threshold)")
        command.add_argument("--window", type=float, help="seconds they must fall within (default: storm_window)")

    events = _store_command(sub, "events", help="compile events with cause, explanation and diff")
    _add_filters(events)
    events.add_argument("--function", help="function name, qualified name or hash prefix")
    events.add_argument("--limit", type=int, default=1000, help="most events to show (default 1000)")


def _add_program_views(sub: Any) -> None:
    """The commands that show what a compile compiled: program, and diff of two compiles."""
    program = _store_command(
        sub, "program", help="what a compile compiled: its jaxpr, StableHLO, HLO, pprof profile or flame graph"
    )
    program.add_argument("event_id", help="the compile event's id")
    program.add_argument("--format", choices=("jaxpr", "stablehlo", "hlo", "pprof", "flamegraph"), default="jaxpr")
    program.add_argument(
        "--output",
        "-o",
        help="write to this file (pprof is binary: default stdout; a flamegraph to FILE.svg: plain SVG)",
    )

    diff = _store_command(sub, "diff", help="two compiles of a function: key, equations, jaxpr and XLA figures")
    diff.add_argument("event_a", help="a compile event (alone: diffed with the compile before it)")
    diff.add_argument("event_b", nargs="?", help="a later compile event, diffed against EVENT_A")
    diff.add_argument("--format", choices=("text", "json", "flamegraph"), default="text")


def _age(text: str) -> float:
    from .store import retention

    try:
        return retention.parse_age(text)
    except retention.RetentionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _whole_number(text: str, what: str) -> int:
    """``text`` as a whole number of 0 or more, else argparse's error naming ``what``."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number of {what}, not {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"the {what} must be 0 or more, not {n}")
    return n


def _regression_count(text: str) -> int:
    return _whole_number(text, "regressions to list")


def _run_count(text: str) -> int:
    return _whole_number(text, "runs to keep")


def _add_prune(db_sub: Any) -> None:
    prune = _store_command(
        db_sub,
        "prune",
        help="drop old runs (or only their program texts) and give the space back",
        description="Drop the runs with nothing recorded for AGE, or all but the N newest runs, and give the "
        "space back. Totals per function and for the whole store keep counting what was dropped, so the "
        "counters of /metrics never go back; a run still being written to is left alone.",
    )
    which = prune.add_mutually_exclusive_group(required=True)
    which.add_argument("--older-than", type=_age, metavar="AGE", help="runs idle for this long: 30d, 12h, 90m, 2w")
    which.add_argument("--keep-runs", type=_run_count, metavar="N", help="keep the N newest runs (by start time)")
    prune.add_argument("--texts-only", action="store_true", help="drop only their program texts, keep the events")
    prune.add_argument("--dry-run", action="store_true", help="say what would be dropped, change nothing")
    prune.add_argument("--format", choices=("text", "json"), default="text")


def _prune(args: argparse.Namespace) -> int:
    from .store import engine as enginemod
    from .store import retention

    try:
        policy = retention.Policy(older_than=args.older_than, keep_runs=args.keep_runs, texts_only=args.texts_only)
    except retention.RetentionError as exc:
        print(f"cachewatch db prune: {exc}", file=sys.stderr)
        return 2
    url = store_url(args)
    result = retention.prune(url, policy, dry_run=args.dry_run)
    if args.format == "json":
        print(json.dumps(result.as_json(), indent=2))
        return 0
    where = enginemod.redact_url(enginemod.normalize_url(url))
    scope = policy.describe()
    if result.cut is not None:
        scope += f" (nothing recorded since {local_time(result.cut, '%Y-%m-%d %H:%M:%S')})"
    verb = "would drop" if result.dry_run else "dropped"
    texts = f"{result.program_texts} program texts ({_size(result.program_text_bytes)})"
    if policy.texts_only:
        print(f"{where}: {verb} {texts} of {result.runs} runs: {scope}")
    else:
        print(
            f"{where}: {verb} {result.runs} runs, {result.events} events, {result.call_stats} call-statistics rows, "
            f"{texts}: {scope}"
        )
    if result.skipped_runs:
        print(f"left alone: {result.skipped_runs} runs written to while the prune ran")
    if result.reclaim_error:
        print(f"the space was not given back (the next prune tries again): {result.reclaim_error}")
    if result.bytes_after is None:
        print(f"store size: {_size(result.bytes_before)}")
    else:
        print(f"store size: {_size(result.bytes_before)} -> {_size(result.bytes_after)}")
    return 0


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "kB", "MB"):
        if value < 1000:
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


def _add_compare(sub: Any) -> None:
    compare = _store_command(
        sub,
        "compare",
        help="two runs function by function: compiles, causes, compile seconds (a CI gate)",
        description="Compare RUN with BASELINE_RUN (run ids, unique id prefixes or run names). Without RUN, the "
        "newest other run of the baseline's run name (or job); without either, the newest run and the one before it.",
    )
    compare.add_argument("baseline", nargs="?", metavar="BASELINE_RUN")
    compare.add_argument("run", nargs="?", metavar="RUN")
    compare.add_argument(
        "--max-extra-compiles", type=int, help="exit 1 when RUN compiled more than this many times more"
    )
    compare.add_argument(
        "--max-compile-time-ratio",
        type=float,
        help="exit 1 when RUN's compile seconds exceed the baseline's times this",
    )
    compare.add_argument("--format", choices=("table", "json"), default="table")


def _compare(args: argparse.Namespace) -> int:
    from .comparison import side_by_side
    from .store import engine as enginemod
    from .store.runs import RunNotFound

    with enginemod.connection(store_url(args)) as conn:
        try:
            result = side_by_side.compare(conn, args.baseline, args.run)
        except RunNotFound as exc:
            print(f"cachewatch: {exc.args[0]}", file=sys.stderr)
            return 2
    broken = side_by_side.gate(
        result, max_extra_compiles=args.max_extra_compiles, max_compile_time_ratio=args.max_compile_time_ratio
    )
    if args.format == "json":
        print(json.dumps({**result.as_json(), "limits_broken": broken}, indent=2, default=str))
    else:
        print(side_by_side.text(result))
        for reason in broken:
            print(f"FAIL: {reason}")
    return 1 if broken else 0


def _add_whatif(sub: Any) -> None:
    prices = _store_command(
        sub,
        "whatif",
        help="what padding (or another fix) would buy over a run: compiles, compile and run seconds",
        description="Replay FUNCTION's compiles in RUN (default: its latest run) through a padding policy on the "
        "axis that varied and price it with the run's own figures: compiles and their seconds, the extra run "
        "time of padded calls, the executables kept. auto[:N] finds the cheapest ladder of at most N buckets.",
    )
    prices.add_argument("function", metavar="FUNCTION", help="function name, qualified name or hash prefix")
    prices.add_argument("--run", dest="run_id", help="run id, id prefix or run name (default: the latest)")
    prices.add_argument("--pad", default="pow2", help="pow2 | multiple:K | ladder:A,B,C | auto[:N] (default pow2)")
    prices.add_argument("--axis", help="ARG:AXIS to pad, as the signature names it (default: the axis that varied)")
    prices.add_argument("--format", choices=("table", "json"), default="table")


def _whatif(args: argparse.Namespace) -> int:
    import dataclasses

    from .store import engine as enginemod
    from .store.runs import RunNotFound
    from .whatif import policies, price_text, prices, whatif_reads

    try:  # bad arguments are refused before the store is opened
        policy = policies.parse_policy(args.pad)
        axis = policies.parse_axis(args.axis) if args.axis else None
    except policies.WhatifError as exc:
        print(f"cachewatch whatif: {exc}", file=sys.stderr)
        return 2
    with enginemod.connection(store_url(args)) as conn:
        try:
            function = whatif_reads.find_function(conn, args.function)
            run_id, run_name = whatif_reads.run_of(conn, function.function_hash, args.run_id)
            found = whatif_reads.evidence(conn, function, run_id, run_name)
            result = prices.analyse(found, policy, axis)
        except (whatif_reads.FunctionNotFound, RunNotFound, policies.WhatifError) as exc:
            print(f"cachewatch whatif: {exc.args[0]}", file=sys.stderr)
            return 2
    if args.format == "json":
        print(json.dumps({**dataclasses.asdict(result), "fix": prices.fix_sentence(result)}, indent=2))
    else:
        print(here(price_text.text(result)))
    return 0


def _add_cache(sub: Any) -> None:
    cache = _store_command(
        sub,
        "cache",
        help="JAX's caches: executables per function and variant, their calls and memory, the persistent cache",
        description="Per function and compiled variant of RUN (default: the latest run): when each executable was "
        "made, the calls it served, its memory, when it was released and by what; the variants never called "
        "again; what the persistent compilation cache did; and its directory audited (--cache-dir, default "
        "CACHEWATCH_PERSISTENT_CACHE_DIR, JAX_COMPILATION_CACHE_DIR, or the directory the run's compiles used).",
    )
    which_runs = cache.add_mutually_exclusive_group()
    which_runs.add_argument("--run", dest="run_id", help="run id, id prefix or run name (default: the latest)")
    which_runs.add_argument(
        "--all-runs", action="store_true", help="every run, newest first (with --function: the function over its runs)"
    )
    cache.add_argument("--function", help="function name, qualified name or hash prefix")
    cache.add_argument("--cache-dir", help="the persistent compilation cache directory to audit")
    cache.add_argument("--format", choices=("table", "json"), default="table")


def _cache(args: argparse.Namespace) -> int:
    from .cache import cache_directory, cache_reads, cache_view
    from .store import columns, queries
    from .store import engine as enginemod
    from .store.runs import RunNotFound, find_run

    cache_dir = (
        args.cache_dir or configmod.resolve().persistent_cache_dir or os.environ.get("JAX_COMPILATION_CACHE_DIR")
    )
    with enginemod.connection(store_url(args)) as conn:
        try:
            run_id = find_run(conn, args.run_id).run_id if args.run_id else cache_reads.latest_run(conn)
        except RunNotFound as exc:
            print(f"cachewatch cache: {exc.args[0]}", file=sys.stderr)
            return 2
        hashes = queries.find_functions(conn, args.function) if args.function else None
        if args.function and not hashes:
            print(f"cachewatch cache: no function {args.function!r} in the store", file=sys.stderr)
            return 2
        filters = columns.Filters() if args.all_runs else columns.Filters(run_id=run_id)
        pairs = [(r, f) for r, f, _ in cache_reads.cache_functions(conn, filters, hashes)] if run_id else []
        report = cache_view.cache_report(cache_reads.read_cache(conn, filters, pairs))
        # Else the directory the run's compiles used, as they recorded it.
        cache_dir = cache_dir or (cache_reads.run_cache_directory(conn, run_id) if run_id else None)
        audit = None
        if cache_dir:
            audit = cache_directory.audit_directory(
                cache_dir,
                lambda keys: cache_reads.entry_origins(conn, keys),
                lambda directory: cache_reads.entries_written_to(conn, directory),
            )
    note = None if cache_dir else "No persistent cache directory to audit (--cache-dir)."
    if args.format == "json":
        print(json.dumps({**report.as_dict(), "directory": audit.as_dict() if audit else None}, indent=2))
    else:
        print(here(cache_view.text(report, audit, note)))
    if audit is not None and not audit.readable:
        print(f"cachewatch cache: {audit.problems[0]}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # `cachewatch report | head`: the reader is gone; end quietly, as other tools do.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (stdout until the process ends)
        return 0


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv and argv[0] == "run":
        # The program's own arguments follow its name untouched: split them off first.
        try:
            return runner.main(argv[1:], runner.parser())
        except configmod.ConfigError as exc:
            print(f"cachewatch: {exc}", file=sys.stderr)
            return 2
    args = parser.parse_args(argv)
    from .store import engine as enginemod

    commands = {
        "report": cli_report.report,
        "events": _events,
        "storms": cli_report.storms,
        "findings": cli_report.list_findings,
        "program": _program,
        "diff": _diff,
        "db": _db,
        "serve": _serve,
        "compare": _compare,
        "whatif": _whatif,
        "cache": _cache,
        "export": cli_export.export,
        "settings": _settings,
        "doctor": _doctor,
    }
    command = commands.get(args.command)
    if command is None:
        return 1
    try:
        return command(args)
    except (enginemod.StoreError, configmod.ConfigError) as exc:
        print(f"cachewatch: {exc}", file=sys.stderr)
        return 2


def _db(args: argparse.Namespace) -> int:
    """``cachewatch db prune``, or bring the store's schema to the newest revision."""
    from .store import engine as enginemod

    if args.db_command == "prune":
        return _prune(args)
    url = store_url(args)
    revision = enginemod.upgrade(url)
    print(f"store {enginemod.redact_url(enginemod.normalize_url(url))} is at revision {revision}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    serve = _service()
    if serve is None:
        print("cachewatch: the service is not installed; run: pip install 'cachewatch[server]'", file=sys.stderr)
        return 2
    return serve(store=store_url(args), host=args.host, port=args.port, workers=args.workers)


def _settings(args: argparse.Namespace) -> int:
    print(configmod.describe())
    return 0


def _doctor(args: argparse.Namespace) -> int:
    """Exit 0 when everything works, 1 when a capability is off or a compile was recorded with gaps."""
    from . import doctor

    check = doctor.checkup()
    if args.format == "json":
        print(json.dumps(check.as_json(), indent=2))
    else:
        print(doctor.render(check))
    return 0 if check.healthy else 1


def _service() -> Any:
    """The service's entry, if installed: the library never depends on it."""
    try:
        module = importlib.import_module("cachewatch_server.main")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in (
            "cachewatch_server",
            "fastapi",
            "uvicorn",
            "jinja2",
            "prometheus_client",
            "pydantic_settings",
            "plotly",
        ):
            return None
        raise
    return module.serve


def _events(args: argparse.Namespace) -> int:
    from .cache import cache_reads
    from .store import columns, queries
    from .store import engine as enginemod

    url = store_url(args)
    with enginemod.connection(url) as conn:
        hashes = None
        if args.function:
            hashes = queries.find_functions(conn, args.function)
            if not hashes:
                print(f"cachewatch: no function named {args.function!r} in the store", file=sys.stderr)
                return 1
        rows = queries.list_events(conn, columns.Filters(run_id=args.run_id), hashes, limit=args.limit)
        cache_reads.explain_cache_misses(conn, rows)
    for row in rows:
        row.pop("id", None)
    if args.format == "json":
        print(json.dumps(rows, indent=2, default=str))
        return 0
    table = []
    for r in rows:
        when = local_time(r["timestamp"], "%H:%M:%S")
        cost = sum(r[k] or 0.0 for k in ("trace_seconds", "lower_seconds", "compile_seconds"))
        kind = r["kind"] + ("" if r["compiled"] else " (no compile)") + (" (warm-up)" if r.get("warmup") else "")
        why = r["error"] or r["explanation"]
        if r["persistent_cache_hit"] is not None:
            why += (
                " Persistent cache: hit."
                if r["persistent_cache_hit"]
                else " " + (r["cache_miss"]["explanation"] if r["cache_miss"] else "Persistent cache: miss.")
            )
        table.append([when, r["qualname"], kind, r["cause"], f"{cost:.3f}", r["call_site"] or "", why])
    print_table(["time", "function", "kind", "cause", "seconds", "call site", "why"], table)
    return 0


def _program(args: argparse.Namespace) -> int:
    from .programs import flamegraph, program_texts
    from .store import engine as enginemod

    try:
        with enginemod.connection(store_url(args)) as conn:
            if args.format == "flamegraph":
                as_svg = bool(args.output) and args.output.endswith(".svg")
                found: str | bytes = flamegraph.for_event(conn, args.event_id, as_svg=as_svg)
            else:
                found = program_texts.program(conn, args.event_id, args.format)
    except program_texts.ProgramNotFound as exc:
        print(f"cachewatch: {exc}", file=sys.stderr)
        return 1
    data = found if isinstance(found, bytes) else found.encode()
    if args.output:
        with open(args.output, "wb") as out:
            out.write(data)
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(data if isinstance(found, bytes) else data + b"\n")
        sys.stdout.flush()
    return 0


def _diff(args: argparse.Namespace) -> int:
    from .programs import flamegraph, program_texts
    from .store import engine as enginemod

    after, against = (args.event_b, args.event_a) if args.event_b else (args.event_a, None)
    try:
        with enginemod.connection(store_url(args)) as conn:
            if args.format == "flamegraph":
                print(flamegraph.for_diff(conn, after, against), end="")
                return 0
            change = program_texts.diff(conn, after, against)
    except program_texts.ProgramNotFound as exc:
        print(f"cachewatch: {exc}", file=sys.stderr)
        return 1
    print(
        json.dumps(change.as_json(), indent=2, default=str)
        if args.format == "json"
        else program_texts.diff_text(change)
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
