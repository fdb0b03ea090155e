"""``cachewatch export RUN --format perfetto [-o FILE] [--store URL]``: a run's compiles as
a Chrome trace-event file, for Perfetto (ui.perfetto.dev: Open trace file) and
chrome://tracing (docs/integrations.md)."""

from __future__ import annotations

import argparse
import sys

from .cli_report import store_url
from .core import config as configmod

FORMATS = ("perfetto",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The export command's arguments (its ``--store`` is the caller's)."""
    parser.add_argument("run", metavar="RUN", help="run id, unique id prefix, run name or job (its latest run)")
    parser.add_argument(
        "--format", choices=FORMATS, default="perfetto", help="perfetto: Chrome trace-event JSON (the default)"
    )
    parser.add_argument("--output", "-o", help="write to this file (default: stdout)")


def export(args: argparse.Namespace) -> int:
    """Write the run's trace; 2 when no run answers to RUN."""
    import orjson

    from .exports import run_trace
    from .store import engine as enginemod
    from .store.runs import RunNotFound
    from .storms import diagnosis

    rule = diagnosis.rule_of(configmod.resolve())
    with enginemod.connection(store_url(args)) as conn:
        try:
            trace = run_trace.run_trace(conn, args.run, rule)
        except RunNotFound as exc:
            print(f"cachewatch export: {exc.args[0]}", file=sys.stderr)
            return 2
    body = orjson.dumps(trace.as_json())
    if args.output:
        with open(args.output, "wb") as out:
            out.write(body)
        print(f"cachewatch export: {len(trace.events)} trace events written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.buffer.write(body + b"\n")
        sys.stdout.flush()
    return 0
