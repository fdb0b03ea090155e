"""The ``cachewatch`` command (also ``python -m cachewatch``).

cachewatch report [--store URL] [--run RUN_ID] [--format table|json]
cachewatch storms [--store URL] [--threshold N] [--window SECONDS] [--format table|json]
cachewatch events [--store URL] [--function NAME] [--limit N] [--format table|json]
cachewatch db upgrade [--store URL]
cachewatch serve [--store URL] [--host H] [--port P] [--workers N]
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import sys
from typing import Any, Mapping, Sequence

from . import config as configmod
from .events import OP_BY_OP_MODULE


def _store_url(args: argparse.Namespace) -> str:
    if args.store:
        return args.store
    return configmod.resolve().store


def _add_store(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        help=f"store URL (default: $CACHEWATCH_STORE, else the shared SQLite file {configmod.default_store_url()})",
    )


def _add_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", dest="run_id", help="only this run id")
    parser.add_argument("--format", choices=("table", "json"), default="table")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cachewatch", description="Why did jax.jit compile, and what did it cost?")
    sub = parser.add_subparsers(dest="command", required=True)

    report = sub.add_parser("report", help="per-function compiles, causes and cost")
    _add_store(report)
    _add_filters(report)

    storms = sub.add_parser("storms", help="recompilation storms with their cause and fix")
    _add_store(storms)
    _add_filters(storms)
    storms.add_argument("--threshold", type=int, help="recompiles that make a storm (default: storm_threshold)")
    storms.add_argument("--window", type=float, help="seconds they must fall within (default: storm_window)")

    events = sub.add_parser("events", help="compile events with cause, explanation and diff")
    _add_store(events)
    _add_filters(events)
    events.add_argument("--function", help="function name, qualified name or hash prefix")
    events.add_argument("--limit", type=int, default=1000, help="most events to show (default 1000)")

    db = sub.add_parser("db", help="store maintenance")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    upgrade = db_sub.add_parser("upgrade", help="migrate the store's schema to this version")
    _add_store(upgrade)

    serve = sub.add_parser("serve", help="run the web service: dashboard, query API, ingest, /metrics")
    _add_store(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (default 1)")

    sub.add_parser("settings", help="list the CACHEWATCH_* settings and their defaults")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # `cachewatch report | head`: the reader is gone; end quietly, as other tools do.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    from .store import engine as enginemod

    try:
        if args.command == "report":
            return _report(args)
        if args.command == "events":
            return _events(args)
        if args.command == "storms":
            return _storms(args)
        if args.command == "db":
            url = _store_url(args)
            revision = enginemod.upgrade(url)
            print(f"store {enginemod.redact_url(enginemod.normalize_url(url))} is at revision {revision}")
            return 0
        if args.command == "serve":
            serve = _service()
            if serve is None:
                print(
                    "cachewatch: the service is not installed; run: pip install 'cachewatch[server]'", file=sys.stderr
                )
                return 2
            return serve(store=_store_url(args), host=args.host, port=args.port, workers=args.workers)
        if args.command == "settings":
            print(configmod.describe())
            return 0
    except (enginemod.StoreError, configmod.ConfigError) as exc:
        print(f"cachewatch: {exc}", file=sys.stderr)
        return 2
    return 1


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


def _report(args: argparse.Namespace) -> int:
    from . import analysis
    from .store import engine as enginemod
    from .store import queries

    url = _store_url(args)
    cfg = configmod.resolve()
    filters = queries.Filters(run_id=args.run_id)
    with enginemod.connection(url) as conn:
        report = queries.function_report(conn, filters)
        verdicts = analysis.verdicts_or_none(conn, report, filters)
        storms = analysis.detect_storms(conn, filters, threshold=cfg.storm_threshold, window=cfg.storm_window)
        costs = analysis.cost_model(conn, filters)
        regressions = analysis.compile_regressions(conn)
    rows: list[dict[str, Any]] = [{**row, "verdict": verdicts.get(row["function_hash"])} for row in report]
    if args.format == "json":
        print(json.dumps(rows, indent=2, default=str))
        return 0
    if not rows:
        print(
            f"No compile events in {enginemod.redact_url(enginemod.normalize_url(url))} yet. Wrap a function with "
            "cachewatch.jit (or call cachewatch.install()) and run your program with the same "
            "CACHEWATCH_STORE."
        )
        return 0
    table = []
    for r in rows:
        causes = ", ".join(f"{c}={n}" for c, n in sorted(r["causes"].items(), key=lambda kv: -kv[1]))
        where = f"{_basename(r['file'])}:{r['line']}" if r["file"] else "(eager code)"
        table.append(
            [
                r["qualname"],
                where,
                r["compiles"],
                r["recompiles"],
                f"{r['compile_seconds']:.3f}",
                r["calls"] or "-",
                "-" if r["run_seconds_est"] is None else f"{r['run_seconds_est']:.3f}",
                "-" if r["compile_share"] is None else f"{100 * r['compile_share']:.1f}%",
                causes,
            ]
        )
    _print_table(
        [
            "function",
            "defined at",
            "compiles",
            "recompiles",
            "compile s",
            "calls",
            "run s (est)",
            "compile share",
            "causes",
        ],
        table,
    )
    print("\n" + _coverage_line(rows))
    _print_findings(rows, storms, costs, regressions)
    return 0


def _coverage_line(rows: Sequence[Mapping[str, Any]]) -> str:
    """How many compiles were tied to a function, and how many only to the name JAX gave them."""
    from .foreign import UNATTRIBUTED_MODULE

    total = sum(r["compiles"] for r in rows)
    by_name = sum(r["compiles"] for r in rows if r.get("module") == UNATTRIBUTED_MODULE)
    eager = sum(r["compiles"] for r in rows if r.get("module") == OP_BY_OP_MODULE)
    text = (
        f"Compiles recorded: {total}; attributed to a function or an eager primitive: {total - by_name} ({eager} eager)"
    )
    if by_name:
        text += f"; known only by the name JAX compiled them under: {by_name}"
    return text + "."


def _print_findings(
    rows: Sequence[Mapping[str, Any]], storms: list[dict], costs: list[dict], regressions: list[dict]
) -> None:
    from . import analysis

    if storms:
        print(f"\nStorms ({len(storms)}):")
        for storm in storms:
            print(f"  {analysis.describe_storm(storm)}\n    Fix: {_here(storm['fix'])}")
    worth = [(r["qualname"], r["verdict"]["text"]) for r in rows if r.get("verdict") and r["verdict"]["text"]]
    if worth:
        print("\nIs jit worth it:")
        for name, text in worth:
            print(f"  {name}: {text}")
    stale = [r for r in rows if r.get("stale_captures")]
    if stale:
        print("\nStale captured values (read at trace time, changed since; see `cachewatch events`):")
        for r in stale:
            print(f"  {r['qualname']}: {r['stale_captures']} change(s)")
    steep = [c for c in costs if c["superlinear"]]
    if steep:
        print("\nCompile time grows faster than program size:")
        for c in steep:
            print(
                f"  {c['qualname']}: compile seconds ~ size^{c['exponent']:.2f}, fitted on {c['points']} "
                f"compiles over sizes {c['min_size']:.0f}-{c['max_size']:.0f}"
            )
    if regressions:
        print("\nCompile-time regressions across runs:")
        for g in regressions:
            print(
                f"  {g['qualname']}: {g['seconds_before']:.3f}s -> {g['seconds_after']:.3f}s "
                f"(jax {g['jax_before']} -> {g['jax_after']})"
            )


def _storms(args: argparse.Namespace) -> int:
    from . import analysis
    from .store import engine as enginemod
    from .store import queries

    url = _store_url(args)
    cfg = configmod.resolve()
    with enginemod.connection(url) as conn:
        storms = analysis.detect_storms(
            conn,
            queries.Filters(run_id=args.run_id),
            threshold=args.threshold or cfg.storm_threshold,
            window=args.window or cfg.storm_window,
        )
    if args.format == "json":
        print(json.dumps(storms, indent=2, default=str))
        return 0
    if not storms:
        print("No recompilation storms.")
        return 0
    print(f"Storms ({len(storms)}):")
    for storm in storms:
        start = _local_time(storm["start"], "%Y-%m-%d %H:%M:%S")
        print(f"  {analysis.describe_storm(storm)} From {start} over {storm['end'] - storm['start']:.0f}s.")
        print(f"    Fix: {_here(storm['fix'])}")
    return 0


def _events(args: argparse.Namespace) -> int:
    from .store import engine as enginemod
    from .store import queries

    url = _store_url(args)
    with enginemod.connection(url) as conn:
        hashes = None
        if args.function:
            hashes = queries.find_functions(conn, args.function)
            if not hashes:
                print(f"cachewatch: no function named {args.function!r} in the store", file=sys.stderr)
                return 1
        rows = queries.list_events(conn, queries.Filters(run_id=args.run_id), hashes, limit=args.limit)
        queries.explain_cache_misses(conn, rows)
    for row in rows:
        row.pop("id", None)
    if args.format == "json":
        print(json.dumps(rows, indent=2, default=str))
        return 0
    table = []
    for r in rows:
        when = _local_time(r["timestamp"], "%H:%M:%S")
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
    _print_table(["time", "function", "kind", "cause", "seconds", "call site", "why"], table)
    return 0


def _local_time(seconds: float, fmt: str) -> str:
    """The time for a table; a stored time no calendar holds is shown as it is, flagged."""
    try:
        return dt.datetime.fromtimestamp(seconds).strftime(fmt)
    except (OverflowError, OSError, ValueError, TypeError):
        return f"invalid time ({seconds!r})"


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _here(text: str) -> str:
    """Paths under the current directory, as the user would type them (tables only; JSON keeps them whole)."""
    return text.replace(os.getcwd() + os.sep, "")


def _print_table(headers: list[str], rows: list[list[Any]]) -> None:
    cells = [[_here(str(c)) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row[:-1]):
            widths[i] = min(max(widths[i], len(c)), 60)
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
