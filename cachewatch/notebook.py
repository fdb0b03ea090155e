"""IPython and Jupyter: what a cell compiled, shown under the cell.

    %load_ext cachewatch
    %%cachewatch                 # on top of one cell
    %cachewatch on               # every cell from now on (and %cachewatch off)

Loading the extension calls ``cachewatch.install()``. Under a watched cell comes a table
of its compiles (function, cause with its diff, seconds, call site) and the storms its
compiles made, with their fix: HTML in a notebook, text in a terminal. A cell that
compiled nothing shows nothing under ``%cachewatch on`` and says so under ``%%cachewatch``.
IPython is only imported by IPython itself: this module needs none of it to load.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .core import _guard, tables
from .core.events import EVENT_COLUMNS, CompileEvent
from .core.figures import seconds_text

if TYPE_CHECKING:  # the analysis is imported when a report is made: loading the extension stays light
    from .storms.results import Storm
    from .views.runsummary import RunSummaryView

# Rows shown under a cell; a loop that compiled thousands of times is summed up after these.
MAX_ROWS = 50


class CellReport:
    """The compiles of one cell and the storms they made; renders itself in a notebook."""

    def __init__(
        self,
        events: list[CompileEvent],
        storms: list[Storm],
        *,
        always: bool = True,
        alive: tuple[int, int] | None = None,
    ):
        self.events = events
        self.storms = storms
        self.always = always  # say "no compiles" rather than show nothing
        # The executables the cell's compiles made that JAX's caches still hold at its end,
        # and the bytes of their code (None: not read, the store is a service's).
        self.alive = alive

    @property
    def compile_seconds(self) -> float:
        return sum(e.seconds for e in self.events)

    def _headline(self) -> str:
        n = len(self.events)
        functions = len({e.function.function_hash for e in self.events})
        if not n:
            return "cachewatch: this cell compiled nothing."
        return (
            f"cachewatch: this cell compiled {n} time{'s' if n != 1 else ''} "
            f"({functions} function{'s' if functions != 1 else ''}, {seconds_text(self.compile_seconds)})"
            + (f"; {len(self.storms)} storm{'s' if len(self.storms) != 1 else ''}" if self.storms else "")
            + self._alive_text()
            + "."
        )

    def _alive_text(self) -> str:
        if self.alive is None:
            return ""
        count, held = self.alive
        from .core.figures import bytes_text

        return f"; it left {count} executable{'s' if count != 1 else ''} alive in JAX's caches" + (
            f" ({bytes_text(held)} of code)" if held else ""
        )

    def _rows(self) -> list[list[str]]:
        return [e.cells() for e in self.events[:MAX_ROWS]]

    def _more(self) -> str:
        return f"... and {len(self.events) - MAX_ROWS} more compiles" if len(self.events) > MAX_ROWS else ""

    def _repr_html_(self) -> str | None:
        if not self.events and not self.always:
            return None
        parts = [f"<p><strong>{html.escape(self._headline())}</strong></p>"]
        if self.events:
            parts.append(tables.html_table(EVENT_COLUMNS, self._rows(), css_class="cachewatch-compiles"))
            if self._more():
                parts.append(f"<p>{html.escape(self._more())}</p>")
        if self.storms:
            storm_rows = [[s.short_name, s.dominant_cause, str(s.compiles), s.fix] for s in self.storms]
            parts.append(
                tables.html_table(
                    ("storm in", "mostly", "recompiles", "fix"),
                    storm_rows,
                    caption="Recompilation storms",
                    css_class="cachewatch-storms",
                )
            )
        return '<div class="cachewatch-cell">' + "".join(parts) + "</div>"

    def __repr__(self) -> str:
        lines = [self._headline()]
        if self.events:
            lines.append(tables.text_table(EVENT_COLUMNS, self._rows()))
            if self._more():
                lines.append(self._more())
        for s in self.storms:
            lines.append(f"Storm in {s.short_name}: {s.compiles} recompiles, mostly {s.dominant_cause}.")
            lines.append(f"  Fix: {s.fix}")
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


class RunReport:
    """A run's summary (``cachewatch.report()``): the table of ``cachewatch run``'s summary,
    as HTML in a notebook and as text elsewhere. ``view`` is the summary; ``summary`` its
    plain dictionary (the JSON of ``cachewatch run --summary json``)."""

    def __init__(self, view: RunSummaryView):
        self.view = view

    @property
    def summary(self) -> dict[str, Any]:
        return self.view.as_json()

    def _repr_html_(self) -> str:
        from .views import runsummary

        head = html.escape(runsummary.text(self.view).splitlines()[0])
        parts = [f"<p><strong>{head}</strong></p>"]
        report = self.view.figures.report if self.view.figures is not None else None
        if report is not None and report.functions:
            rows = [
                [
                    f.name,
                    str(f.compiles),
                    ", ".join(f"{c}={n}" for c, n in f.causes.items()),
                    seconds_text(f.compile_seconds),
                    str(f.calls or "-"),
                ]
                for f in report.functions
            ]
            parts.append(
                tables.html_table(
                    ("function", "compiles", "causes", "compile time", "calls"), rows, css_class="cachewatch-functions"
                )
            )
        if report is not None and report.storms:
            parts.append(
                tables.html_table(
                    ("storm in", "mostly", "recompiles", "fix"),
                    [[t.short_name, t.dominant_cause, str(t.compiles), t.fix] for t in report.storms],
                    caption="Recompilation storms",
                    css_class="cachewatch-storms",
                )
            )
        parts.append(f"<p>Next: {html.escape('; '.join(self.view.next))}</p>")
        return '<div class="cachewatch-run">' + "".join(parts) + "</div>"

    def __repr__(self) -> str:
        from .views import runsummary

        return runsummary.text(self.view)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


def run_report(run_id: str | None = None) -> RunReport:
    """This process's run (or ``run_id``), written out and read back from the store."""
    from .record import current, recorder
    from .views import runsummary

    cfg = current.config()
    flushed = recorder.flush(cfg.exit_timeout)
    return RunReport(runsummary.for_store(cfg.store, run_id or current.run_id(), flushed=bool(flushed)))


class _Watch:
    """Collects the compiles recorded between ``start`` and ``stop`` (any thread of the process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[CompileEvent] = []
        self._started = 0.0
        self._on = False

    def listener(self, event: CompileEvent) -> None:
        if self._on and event.compiled:
            with self._lock:
                self._events.append(event)

    def start(self) -> None:
        with self._lock:
            self._events = []
        self._started = time.time()
        self._on = True

    def stop(self, *, always: bool) -> CellReport:
        self._on = False
        ended = time.time()
        with self._lock:
            events = list(self._events)
        if not events:
            return CellReport(events, [], always=always)
        storms, alive = _cell_findings(self._started, ended, events)
        return CellReport(events, storms, always=always, alive=alive)


def _cell_findings(
    started: float, ended: float, events: list[CompileEvent]
) -> tuple[list[Storm], tuple[int, int] | None]:
    """Storms of this run made of the cell's own compiles, and the executables they made
    that are still alive with their bytes (read from the store once written). The program
    is judged as of the cell's end: what the writer records after it (the call statistics
    flushed for this report) is no sign that the program went on."""
    with _guard.guard("notebook.storms"):
        from .cache import cache_reads, cache_view
        from .record import current, recorder
        from .store import columns, sinks
        from .store import engine as enginemod
        from .storms import diagnosis

        cfg = current.config()
        if sinks.is_service(cfg.store) or not recorder.flush(cfg.exit_timeout):
            return [], None
        hashes = sorted({e.function.function_hash for e in events})
        in_cell = columns.Filters(run_id=current.run_id(), since=started)
        with enginemod.connection(cfg.store) as conn:
            storms = diagnosis.detect_storms(
                conn,
                in_cell,
                **diagnosis.rule_of(cfg),
                function_hashes=hashes,
                heard_until=ended,
            )
            held = cache_view.cache_report(cache_reads.read_cache(conn, in_cell))
        alive = [v for fn in held.functions for v in fn.variants if v.live and v.created_at <= ended]
        return storms, (len(alive), sum(v.executable_bytes for v in alive))
    return [], None


_watch = _Watch()
_every_cell = False


def _display(report: CellReport) -> None:
    from IPython.display import display

    display(report)


def _pre_run_cell(*_: Any) -> None:
    if _every_cell:
        _watch.start()


def _post_run_cell(*_: Any) -> None:
    if _every_cell and _watch._on:
        report = _watch.stop(always=False)
        if report.events:
            _display(report)


def load(ipython: Any, install: Callable[[], None]) -> None:
    """``%load_ext cachewatch`` (``cachewatch.load_ipython_extension``): ``install`` is called,
    and the ``%%cachewatch`` and ``%cachewatch on|off`` magics are registered."""
    from .record import recorder

    install()
    recorder.remove_listener(_watch.listener)
    recorder.add_listener(_watch.listener, at_once=True)

    def cachewatch_magic(line: str, cell: str | None = None) -> None:
        global _every_cell
        if cell is None:
            word = line.strip().lower()
            if word not in ("on", "off"):
                print("usage: %cachewatch on | off  (or %%cachewatch on top of a cell)")
                return
            _every_cell = word == "on"
            return
        was_on = _every_cell
        _every_cell = False  # this cell's table is the magic's, not the per-cell hook's
        try:
            _watch.start()
            ipython.run_cell(cell)
            _display(_watch.stop(always=True))
        finally:
            _every_cell = was_on

    ipython.register_magic_function(cachewatch_magic, magic_kind="line_cell", magic_name="cachewatch")
    if not _registered(ipython):  # loaded twice (%reload_ext): one table per cell still
        ipython.events.register("pre_run_cell", _pre_run_cell)
        ipython.events.register("post_run_cell", _post_run_cell)


def _registered(ipython: Any) -> bool:
    return _pre_run_cell in ipython.events.callbacks.get("pre_run_cell", [])


def unload(ipython: Any) -> None:
    global _every_cell
    from .record import recorder

    _every_cell = False
    recorder.remove_listener(_watch.listener)
    if _registered(ipython):
        ipython.events.unregister("pre_run_cell", _pre_run_cell)
        ipython.events.unregister("post_run_cell", _post_run_cell)
