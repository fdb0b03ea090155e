"""pytest plugin (loaded through the ``pytest11`` entry point when cachewatch is installed).

    @pytest.mark.max_compiles(train_step, 1)        # or the function's name: "train_step"
    def test_steady_state(): ...

    def test_no_retrace(cachewatch):                 # the fixture
        step(x)
        assert cachewatch.compiles(step) == 1

    $ pytest --cachewatch-report                     # the session's compile table at the end

cachewatch itself (and so JAX) is imported only when a test uses the fixture or the
marker, or the report is asked for: installing cachewatch costs other test suites
nothing.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import pytest

from .core.events import OP_BY_OP_MODULE, Cause

_MARKER_HELP = (
    "max_compiles(fn_or_name, n): fail the test when the cachewatch-watched function "
    "(a cachewatch.jit function, or a function's name or qualified name) compiles more "
    "than n times during it"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cachewatch")
    group.addoption(
        "--cachewatch-report",
        action="store_true",
        default=False,
        help="print the compiles of watched functions during the session, per function, at the end",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER_HELP)
    if config.getoption("--cachewatch-report", default=False):
        session_log = SessionLog()
        config.pluginmanager.register(session_log, "cachewatch-session-log")


class CompileLog:
    """Compile events of watched functions, collected while it is attached."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def __call__(self, event: Any) -> None:
        if event.compiled:
            self.events.append(event)

    def attach(self) -> CompileLog:
        from cachewatch.record import recorder

        recorder.add_listener(self, at_once=True)
        return self

    def detach(self) -> None:
        from cachewatch.record import recorder

        recorder.remove_listener(self)

    def of(self, fn_or_name: Any) -> list[Any]:
        """The compile events of one function: a watched function, or a name or qualified name."""
        if isinstance(fn_or_name, str):
            return [
                e
                for e in self.events
                if fn_or_name in (e.function.name, e.function.qualname)
                or fn_or_name == f"{e.function.module}.{e.function.qualname}"
            ]
        from cachewatch.capture.jit import watched_state

        state = watched_state(fn_or_name)
        if state is None:
            raise TypeError(
                "max_compiles and the cachewatch fixture take a function wrapped by "
                "cachewatch.jit (or jax.jit after cachewatch.install()) or a function's "
                f"name, got {type(fn_or_name).__name__}"
            )
        return [e for e in self.events if e.function.function_hash == state.info.function_hash]


def _describe_name(fn_or_name: Any) -> str:
    if isinstance(fn_or_name, str):
        return fn_or_name
    from cachewatch.capture.jit import watched_state

    state = watched_state(fn_or_name)
    return state.info.qualname if state is not None else repr(fn_or_name)


def explain_extra(name: str, limit: int, events: list[Any]) -> str:
    """The failure message: the function, then the cause, sentence and diff of each
    compile past the limit."""
    counts = Counter(e.cause for e in events)
    lines = [
        f"`{name}` compiled {len(events)} time(s), at most {limit} allowed "
        f"(causes: {', '.join(f'{c}={n}' for c, n in counts.most_common())}).",
        f"Compiles past the limit ({len(events) - limit}):",
    ]
    for number, event in enumerate(events[limit:], start=limit + 1):
        lines.append(f"  #{number} {event.cause}: {event.explanation}")
        if event.call_site:
            lines.append(f"     called at {event.call_site}")
        for entry in event.diff:
            lines.append(
                f"     {entry.get('path')}: {entry.get('before')} -> {entry.get('after')}"
                f"  ({entry.get('cause') or entry.get('change')})"
            )
    return "\n".join(lines)


class MaxCompilesExceeded(AssertionError):
    """A test's ``max_compiles`` marker was exceeded."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    markers = list(item.iter_markers(name="max_compiles"))
    if not markers:
        return (yield)
    limits = []
    for marker in markers:
        args = list(marker.args) + [marker.kwargs[k] for k in ("fn_or_name", "n") if k in marker.kwargs]
        if len(args) != 2 or not isinstance(args[1], int):
            raise pytest.UsageError(
                f"{item.nodeid}: use @pytest.mark.max_compiles(fn_or_name, n), "
                f"got args={marker.args!r} kwargs={marker.kwargs!r}"
            )
        limits.append((args[0], args[1]))
    log = CompileLog().attach()
    try:
        result = yield
    finally:
        log.detach()
    failures = []
    for target, limit in limits:
        seen = log.of(target)
        if len(seen) > limit:
            failures.append(explain_extra(_describe_name(target), limit, seen))
    if failures:
        raise MaxCompilesExceeded("\n\n".join(failures))
    return result


class Fixture:
    """What the ``cachewatch`` fixture gives a test: the compiles seen during it, and the guards.

    def test_step(cachewatch):
        step(x); step(x)
        assert cachewatch.compiles(step) == 1
        cachewatch.freeze()      # undone when the test ends
    """

    def __init__(self, log: CompileLog):
        self._log = log

    @property
    def events(self) -> list[Any]:
        """Every compile event of a watched function during the test so far (JAX's own
        op-by-op compiles of eager code left out)."""
        return [e for e in self._log.events if e.function.module != OP_BY_OP_MODULE]

    def compiles(self, fn_or_name: Any) -> int:
        return len(self._log.of(fn_or_name))

    def events_of(self, fn_or_name: Any) -> list[Any]:
        return self._log.of(fn_or_name)

    def assert_compiles(self, fn_or_name: Any, at_most: int) -> None:
        """Fail with the cause and diff of each compile past ``at_most``."""
        seen = self._log.of(fn_or_name)
        if len(seen) > at_most:
            raise MaxCompilesExceeded(explain_extra(_describe_name(fn_or_name), at_most, seen))

    def expect_compiles(self, fn: Any, at_most: int = 0):
        import cachewatch

        return cachewatch.expect_compiles(fn, at_most=at_most)

    def freeze(self, on_compile: str = "raise"):
        import cachewatch

        return cachewatch.freeze(on_compile=on_compile)


@pytest.fixture(name="cachewatch")
def cachewatch_fixture():
    from cachewatch.capture import guards

    frozen_before = guards.frozen()
    log = CompileLog().attach()
    try:
        yield Fixture(log)
    finally:
        log.detach()
        if guards.frozen() != frozen_before:
            guards.unfreeze()
            if frozen_before is not None:
                guards.freeze(on_compile=frozen_before)


class SessionLog:
    """Collects the session's compiles for ``--cachewatch-report``."""

    def __init__(self) -> None:
        self.log = CompileLog()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.log.attach()

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if "cachewatch" not in sys.modules:
            terminalreporter.write_sep("=", "cachewatch: no watched function compiled (cachewatch was not imported)")
            return
        self.log.detach()
        terminalreporter.write_sep("=", "cachewatch compile report")
        for line in report_lines(self.log.events):
            terminalreporter.write_line(line)


def report_lines(events: list[Any]) -> list[str]:
    """One row per function: compiles, recompiles, compile seconds, causes."""
    if not events:
        return ["no watched function compiled during the session"]
    rows: dict[str, dict[str, Any]] = {}
    for event in events:
        row = rows.setdefault(
            event.function.function_hash,
            {
                "function": event.function.qualname,
                "defined at": (
                    f"{event.function.file.rsplit('/', 1)[-1]}:{event.function.line}" if event.function.file else "-"
                ),
                "compiles": 0,
                "seconds": 0.0,
                "causes": Counter(),
            },
        )
        row["compiles"] += 1
        row["seconds"] += sum(v for v in (event.trace_seconds, event.lower_seconds, event.compile_seconds) if v)
        row["causes"][event.cause] += 1
    ordered = sorted(rows.values(), key=lambda r: (-r["compiles"], r["function"]))
    table = [("function", "defined at", "compiles", "recompiles", "compile s", "causes")]
    for row in ordered:
        recompiles = row["compiles"] - row["causes"].get(Cause.FIRST_CALL, 0)
        table.append(
            (
                row["function"],
                row["defined at"],
                str(row["compiles"]),
                str(recompiles),
                f"{row['seconds']:.3f}",
                ", ".join(f"{c}={n}" for c, n in row["causes"].most_common()),
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]) - 1)]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r[:-1], widths, strict=False)) + "  " + r[-1] for r in table]
