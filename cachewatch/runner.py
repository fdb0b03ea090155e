"""``cachewatch run``: run a program exactly as ``python`` would, with ``install()`` in effect.

    cachewatch run train.py --lr 3e-4
    cachewatch run --max-compiles 40 --fail-on-storm -m trainer.main --steps 100

The program runs in this process, as ``__main__``, with ``sys.argv``, ``__file__`` and
``sys.path[0]`` set as ``python script.py`` or ``python -m module`` sets them; its stdin,
stdout and signals are its own. Before its first line runs, ``cachewatch.install()`` is in
effect, so every jit it or its libraries make (Optax's, Flax's at their import) is
wrapped. When it ends, a summary goes to stderr and the exit code is the program's own;
only a program that succeeded can fail a CI limit, with :data:`EXIT_LIMIT`.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import importlib.machinery
import importlib.util
import io
import json
import os
import signal
import sys
import threading
import traceback
import types
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .core import config as configmod
from .core.texts import counted

if TYPE_CHECKING:  # the analysis is imported once the program has run, not before it starts
    from .exports.dashboards import Logger
    from .views.runsummary import RunSummaryView

# The exit code of a program that succeeded but broke a limit of --max-compiles or
# --fail-on-storm: apart from 1 (an uncaught exception) and 2 (a usage error), which
# Python programs use themselves. A program that failed keeps its own code.
EXIT_LIMIT = 3
# The options of `run` that take a value (the rest are flags): where the program's own
# arguments begin is found by walking past these.
_VALUED = {
    "--store",
    "--run-name",
    "--job",
    "--max-compiles",
    "--summary",
    "--warmup-from",
    "--log-to",
    "--log-every",
    "--html",
}
_FLAGS = {"--quiet", "--fail-on-storm", "-h", "--help"}


@dataclasses.dataclass(frozen=True)
class Target:
    """What to run: a script path or a module name, and the arguments it gets."""

    script: str | None
    module: str | None
    args: tuple[str, ...]


USAGE = "cachewatch run [options] (script.py | -m module) [args ...]"
DESCRIPTION = (
    "Run a program as python would (sys.argv, __main__, exit code, signals, stdin), with "
    "cachewatch.install() in effect before its first import; print a summary to stderr at exit."
)


def parser() -> argparse.ArgumentParser:
    """The ``run`` subcommand's own parser (the program and its arguments are split off first)."""
    run = argparse.ArgumentParser(prog="cachewatch run", usage=USAGE, description=DESCRIPTION)
    add_arguments(run)
    return run


def add_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("--store", help="store URL (default: $CACHEWATCH_STORE, else the shared SQLite file)")
    run.add_argument("--run-name", help="the run's name (default: $CACHEWATCH_RUN_NAME, else the program's name)")
    run.add_argument("--job", help="job name shared by the processes of one multi-process program")
    run.add_argument("--quiet", action="store_true", help="no summary (limits still apply)")
    run.add_argument("--summary", choices=("text", "json"), default="text", help="summary format (on stderr)")
    run.add_argument(
        "--max-compiles", type=int, help=f"exit {EXIT_LIMIT} when the program compiled more than this many times"
    )
    run.add_argument(
        "--fail-on-storm", action="store_true", help=f"exit {EXIT_LIMIT} when a recompilation storm happened"
    )
    run.add_argument(
        "--warmup-from",
        metavar="RUN",
        help="compile ahead of time, in background threads, every signature RUN (an id or name) recorded for "
        "each cachewatch.jit function, as the function is defined",
    )
    run.add_argument(
        "--log-to",
        action="append",
        default=[],
        metavar="TARGET",
        help="write the run's compile scalars to a training dashboard while it runs and at exit: "
        "tensorboard:DIR, wandb or mlflow[:URI] (repeat for several)",
    )
    run.add_argument(
        "--log-every", type=float, metavar="SECONDS", help="seconds between two writes of --log-to (default 10)"
    )
    run.add_argument(
        "--html",
        metavar="DIR",
        help="at exit, write the run's report as static HTML pages into DIR (cachewatch report --html)",
    )


def split_argv(argv: Sequence[str]) -> tuple[list[str], Target | None]:
    """``run``'s own options, and the program with its arguments (None: no program named)."""
    argv = list(argv)
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest = argv[i + 1 :]
            return argv[:i], Target(rest[0], None, tuple(rest[1:])) if rest else None
        if arg == "-m":
            if i + 1 >= len(argv):
                return argv[:i], None
            return argv[:i], Target(None, argv[i + 1], tuple(argv[i + 2 :]))
        if arg.startswith("-m") and len(arg) > 2:  # -mpackage.module, as python accepts it
            return argv[:i], Target(None, arg[2:], tuple(argv[i + 1 :]))
        if arg in _VALUED:
            i += 2
            continue
        if arg in _FLAGS or (arg.startswith("--") and "=" in arg):
            i += 1
            continue
        if arg.startswith("-"):  # an unknown option: argparse says so
            i += 1
            continue
        return argv[:i], Target(arg, None, tuple(argv[i + 1 :]))
    return argv, None


def main(argv: Sequence[str], parser: argparse.ArgumentParser) -> int:
    options, target = split_argv(argv)
    args = parser.parse_args(options)
    if target is None:
        parser.error("name a script to run, or -m and a module")
    if args.max_compiles is not None and args.max_compiles < 0:
        parser.error("--max-compiles must be 0 or more")
    if args.log_every is not None and not args.log_every > 0:
        parser.error("--log-every must be more than 0 seconds")
    _configure(args, target)
    if args.warmup_from:
        problem = _unknown_run(args.warmup_from)
        if problem:
            parser.error(f"--warmup-from: {problem}")

    import cachewatch

    cachewatch.install()
    from .record import current

    run_id = current.run_id()
    dashboards = _log_to(args.log_to, args.log_every)
    code, interrupted = execute(target)
    try:
        summary = _summarize(run_id)
    except Exception as exc:  # the program's result stands whatever happens here
        summary = None
        print(f"cachewatch: no summary: {type(exc).__name__}: {exc}", file=sys.stderr)
    if dashboards is not None:
        dashboards.stop()  # after the flush: the last point is the run's total
    if args.html and summary is not None:
        _write_html(args.html, run_id)
    broken = _limits_broken(summary, args)
    if summary is not None and not args.quiet:
        _print_summary(summary, broken, args.summary, code)
    elif broken:
        for line in broken:
            print(f"cachewatch: {line}", file=sys.stderr)
    if interrupted:
        _die_of_sigint()
    if code == 0 and broken:
        return EXIT_LIMIT
    return code


def _log_to(targets: Sequence[str], every: float | None) -> Logger | None:
    """Start writing the scalars to the ``--log-to`` targets (None: none named or none usable)."""
    if not targets:
        return None  # and none of the dashboards' libraries imported
    from .exports import dashboards
    from .record import current

    return dashboards.start(
        targets,
        every=every or dashboards.EVERY,
        run_name=current.config().run_name,
        run_id=current.run_id(),
        warn=lambda line: print(f"cachewatch: {line}", file=sys.stderr),
    )


def _unknown_run(run: str) -> str | None:
    """Why ``run`` cannot be warmed from (None: the store has it)."""
    from .record import current
    from .store import engine as enginemod
    from .store import runs

    store = current.config().store
    try:
        with enginemod.connection(store, ensure=False) as conn:
            runs.find_run(conn, run)
    except runs.RunNotFound as exc:
        return f"{exc} ({enginemod.redact_url(store)})"
    except Exception as exc:  # a store that is missing or unreadable
        return f"cannot read the store {enginemod.redact_url(store)}: {exc}"
    return None


def _configure(args: argparse.Namespace, target: Target) -> None:
    """Settings for this process and for every Python process it starts (the environment
    carries them; a child with CACHEWATCH_INSTALL=1 records its own run under the same name)."""
    env: dict[str, str] = {}
    if args.store:
        env["CACHEWATCH_STORE"] = args.store
    if args.run_name:
        env["CACHEWATCH_RUN_NAME"] = args.run_name
    elif not os.environ.get("CACHEWATCH_RUN_NAME"):
        # Runs of one program share a name, so `cachewatch compare` finds the latest two.
        env["CACHEWATCH_RUN_NAME"] = os.path.basename(target.script) if target.script else str(target.module)
    if args.job:
        env["CACHEWATCH_JOB"] = args.job
    if args.warmup_from:
        env["CACHEWATCH_WARMUP_FROM"] = args.warmup_from
    configmod.resolve(environ={**os.environ, **env})  # refuse a bad setting before the program starts
    os.environ.update(env)
    os.environ["CACHEWATCH_INSTALL"] = "1"


def execute(target: Target) -> tuple[int, bool]:
    """Run the program as ``__main__``; its exit code, and whether Ctrl-C ended it."""
    main_module = types.ModuleType("__main__")
    main_module.__dict__["__builtins__"] = __builtins__
    try:
        code_obj = _prepare(target, main_module)
    except _NotRunnable as exc:
        print(f"{os.path.basename(sys.executable)}: {exc}", file=sys.stderr)
        return 2 if target.script else 1, False
    sys.modules["__main__"] = main_module
    try:
        exec(code_obj, main_module.__dict__)
    except SystemExit as exc:
        return _exit_code(exc), False
    except KeyboardInterrupt as exc:
        _print_program_traceback(exc)
        return 130, True
    except BaseException as exc:  # whatever the program raised ends it as Python would: traceback, status 1
        _print_program_traceback(exc)
        return 1, False
    finally:
        sys.stdout.flush()
    return 0, False


class _NotRunnable(Exception):
    pass


def _prepare(target: Target, module: types.ModuleType) -> types.CodeType:
    """Set ``sys.argv``, ``sys.path[0]`` and the module's attributes as python does; the code to run."""
    if target.script is not None:
        path = target.script
        if os.path.isdir(path) or (os.path.isfile(path) and not path.endswith((".py", ".pyw")) and _is_zip(path)):
            # A directory or zip with __main__.py: python puts it first on the path.
            sys.path[0:1] = [path]
            spec = importlib.util.find_spec("__main__")
            if spec is None or spec.loader is None:
                raise _NotRunnable(f"can't find '__main__' module in {path!r}")
            return _from_spec(spec, module, argv0=path, args=target.args)
        try:
            with io.open_code(path) as handle:
                source = handle.read()
        except OSError as exc:
            raise _NotRunnable(
                f"can't open file {os.path.abspath(path)!r}: [Errno {exc.errno}] {exc.strerror}"
            ) from None
        full = os.path.abspath(path)
        sys.argv[:] = [path, *target.args]
        # python puts the script's directory (symbolic links resolved) first on the path.
        sys.path[0:1] = [os.path.dirname(os.path.realpath(path))]
        module.__dict__.update(__file__=full, __cached__=None, __package__=None, __spec__=None)
        module.__loader__ = importlib.machinery.SourceFileLoader("__main__", full)
        return compile(source, full, "exec", dont_inherit=True)
    assert target.module is not None
    sys.path[0:1] = [os.getcwd()]  # python -m puts the working directory first
    sys.argv[:] = ["-m", *target.args]
    try:
        spec = importlib.util.find_spec(target.module)
        if spec is not None and spec.submodule_search_locations is not None:  # a package: its __main__
            spec = importlib.util.find_spec(target.module + ".__main__")
    except (ImportError, ValueError) as exc:
        raise _NotRunnable(f"Error while finding module specification for {target.module!r} ({exc})") from None
    if spec is None or spec.loader is None:
        raise _NotRunnable(f"No module named {target.module}")
    return _from_spec(spec, module, argv0=spec.origin or target.module, args=target.args)


def _from_spec(
    spec: importlib.machinery.ModuleSpec, module: types.ModuleType, argv0: str, args: tuple[str, ...]
) -> types.CodeType:
    loader: Any = spec.loader
    code = loader.get_code(spec.name) if hasattr(loader, "get_code") else None
    if code is None:
        raise _NotRunnable(f"No code object available for {spec.name}")
    sys.argv[:] = [argv0, *args]
    module.__dict__.update(
        __file__=spec.origin,
        __cached__=spec.cached,
        __package__=spec.parent,
        __spec__=spec,
        __loader__=spec.loader,
    )
    return code


def _is_zip(path: str) -> bool:
    import zipfile

    return zipfile.is_zipfile(path)


def _exit_code(exc: SystemExit) -> int:
    """The exit status python gives ``sys.exit(value)``: None is 0, an int (or bool) itself,
    anything else is printed to stderr and is 1."""
    value = exc.code
    if value is None:
        return 0
    if isinstance(value, int):
        return int(value) & 0xFF
    print(value, file=sys.stderr)
    return 1


def _print_program_traceback(exc: BaseException) -> None:
    """The traceback python would print: from the program's first frame, none of the runner's."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb, file=sys.stderr)


def _die_of_sigint() -> None:
    """Python ends a program that Ctrl-C stopped by SIGINT itself, so the shell sees the signal,
    once it has ended as it ends any program: non-daemon threads joined, then atexit handlers
    (the program's, the libraries', cachewatch's flush); the signal would skip them."""
    with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C stops the wait, as under python
        threading._shutdown()  # type: ignore[attr-defined]  # what python's exit runs first
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except (OSError, ValueError):
        pass


def _write_html(directory: str, run_id: str) -> None:
    """``--html DIR``: the run's report as static pages, after the flush; a failure is one
    line on stderr and leaves the program's exit code alone."""
    from .record import current
    from .store import sinks

    store = current.config().store
    if sinks.is_service(store):
        print("cachewatch: --html needs a SQL store; this run went to a service", file=sys.stderr)
        return
    try:
        from cachewatch_server import static_report

        written = static_report.write(store, Path(directory), run=run_id)
    except ImportError as exc:
        print(
            f"cachewatch: --html needs the dashboard's libraries ({exc}): pip install 'cachewatch[server]'",
            file=sys.stderr,
        )
        return
    except Exception as exc:  # the program's result stands whatever happens here
        print(f"cachewatch: no HTML report: {type(exc).__name__}: {exc}", file=sys.stderr)
        return
    print(f"cachewatch: the run's report is in {written.index}", file=sys.stderr)


def _summarize(run_id: str) -> RunSummaryView:
    """Write what the run recorded and read it back as the run's summary."""
    import cachewatch

    from .record import current
    from .views import runsummary

    cfg = current.config()
    flushed = cachewatch.flush(cfg.exit_timeout)
    return runsummary.for_store(cfg.store, run_id, flushed=bool(flushed))


def _limits_broken(summary: RunSummaryView | None, args: argparse.Namespace) -> list[str]:
    broken: list[str] = []
    if args.max_compiles is None and not args.fail_on_storm:
        return broken
    if summary is None or summary.figures is None:
        return ["the run's compiles could not be read back, so the limits cannot be checked"]
    report = summary.figures.report
    if args.max_compiles is not None and report.compiles > args.max_compiles:
        broken.append(f"{counted(report.compiles, 'compile')}, more than --max-compiles {args.max_compiles}")
    if args.fail_on_storm and report.storms:
        names = ", ".join(s.short_name for s in report.storms)
        broken.append(f"recompilation storm ({names}) and --fail-on-storm")
    return broken


def _print_summary(summary: RunSummaryView, broken: list[str], style: str, code: int) -> None:
    from .views import runsummary

    if style == "json":
        print(
            json.dumps({**summary.as_json(), "limits_broken": broken, "exit_code": code}, default=str), file=sys.stderr
        )
        return
    text = runsummary.text(summary)
    if broken:
        outcome = "program failed" if code else f"exit {EXIT_LIMIT}"
        text += "\n" + "\n".join(f"cachewatch: limit broken ({outcome}): {line}" for line in broken)
    print(text, file=sys.stderr)
