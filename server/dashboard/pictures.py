"""The dashboard's pictures: whether each jit pays for itself (a scatter of compile seconds
against the run seconds it saves), and a run's compiles on one time axis per thread.

Each has two halves: what it is made of, read through the errands (the verdicts of
payoff/, the storms and findings of storms/, a run's compiles from exports/trace_reads.py,
its executables from cache/), as plain frozen rows the page's table shows; and the
plotly.js figure drawn from those rows, as the other charts in render.py are.

    found = findings.find_with_storms(conn, filters, **rule)  # the storms and findings, read once
    view = pictures.payoff_view(conn, report, filters, found)
    figure = pictures.payoff_chart(view.points)           # None: nothing measured to draw
    timeline = pictures.run_timeline(conn, run_id, found)   # found for Filters(run_id=run_id)
    figure = pictures.timeline_chart(timeline, focus=function_hash)  # one function's page
"""

from __future__ import annotations

import dataclasses
import html
import math
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from cachewatch.cache import cache_reads, cache_view
from cachewatch.core.events import Kind, short_name
from cachewatch.core.figures import bytes_text
from cachewatch.exports import perfetto, trace_reads
from cachewatch.exports.trace_reads import CompileRow
from cachewatch.payoff import verdicts
from cachewatch.payoff.results import Verdict
from cachewatch.store.columns import Filters, FunctionReport
from cachewatch.storms import findings
from cachewatch.storms.results import Storm

from . import render

# ------------------------------------------------------------------ is jit worth it: the scatter

STORM, FINDING, NEITHER = "storm", "finding", "neither"
_GROUP_LOOK = {  # colour and marker: the group is told by both, never by colour alone
    STORM: ("#B4462C", "diamond", "in a storm"),
    FINDING: ("#9C6A00", "square", "in a finding"),
    NEITHER: (render.COMPILE_COLOR, "circle", "no storm or finding"),
}
SAVED_FLOOR = 1e-6  # seconds: a saving or compile time below this is drawn at it (the table has it)


@dataclasses.dataclass(frozen=True)
class PayoffPoint:
    """One function weighed: its compile seconds against the run seconds its jit saved
    over running eagerly (``calls`` times the eager less the compiled run time of one
    call; negative: jit lost time). ``saved_seconds`` is None without an eager baseline."""

    function_hash: str
    label: str
    compiles: int
    calls: int
    compile_seconds: float
    saved_seconds: float | None
    run_seconds_mean: float | None
    eager_seconds_mean: float | None
    break_even_calls: int | None  # calls that would repay all its compiles
    group: str  # STORM, FINDING or NEITHER

    @property
    def drawn(self) -> bool:
        return self.saved_seconds is not None

    @property
    def pays(self) -> bool | None:
        """Above the break-even line: what it saved repaid what it cost to compile."""
        return None if self.saved_seconds is None else self.saved_seconds >= self.compile_seconds

    @property
    def verdict(self) -> str:
        if self.saved_seconds is None:
            return "no eager baseline"
        if self.saved_seconds <= 0:
            return "lost time: eager is as fast per call"
        return "pays for itself" if self.pays else "saved less than it cost"


@dataclasses.dataclass(frozen=True)
class PayoffView:
    points: list[PayoffPoint]  # drawn first (most compile seconds first), then the unmeasured

    @property
    def drawn(self) -> list[PayoffPoint]:
        return [p for p in self.points if p.drawn]


def payoff_view(
    conn: sa.Connection, report: Sequence[FunctionReport], filters: Filters, found: findings.Found
) -> PayoffView:
    """Every function of ``report`` with a verdict, with its storm or finding (``found``:
    the view's findings and storms, as the page that draws this read them), as the
    scatter draws it."""
    weighed = verdicts.verdicts_or_none(conn, report, filters)
    if not weighed:
        return PayoffView([])
    storming = {h for s in found.storms for h in (s.function_hash, *s.function_hashes)}
    in_findings = {h for f in found.findings for h in f.function_hashes}
    return PayoffView(payoff_points(report, weighed, storming, in_findings))


def payoff_points(
    report: Sequence[FunctionReport], weighed: Mapping[str, Verdict], storming: set[str], in_findings: set[str]
) -> list[PayoffPoint]:
    """The rows with a verdict as points: those with an eager baseline first."""
    labels = dict(zip((r["function_hash"] for r in report), render.unique_labels(report), strict=True))
    points = []
    for row in report:
        verdict = weighed.get(row["function_hash"])
        if verdict is None:
            continue
        run, eager = verdict.run_seconds_mean, verdict.eager_seconds_mean
        saved = verdict.calls * (eager - run) if run is not None and eager is not None else None
        function_hash = row["function_hash"]
        group = STORM if function_hash in storming else FINDING if function_hash in in_findings else NEITHER
        points.append(
            PayoffPoint(
                function_hash=function_hash,
                label=labels[function_hash],
                compiles=verdict.compiles,
                calls=verdict.calls,
                compile_seconds=verdict.compile_seconds,
                saved_seconds=saved,
                run_seconds_mean=run,
                eager_seconds_mean=eager,
                break_even_calls=verdict.break_even_calls_total,
                group=group,
            )
        )
    points.sort(key=lambda p: (not p.drawn, -p.compile_seconds, p.label))
    return points


def _marker_size(calls: int) -> float:
    # Area grows with the order of magnitude of the calls: 1 call 7 px, a million 37 px.
    return min(40.0, 7.0 + 5.0 * math.log10(max(1, calls)))


def _payoff_hover(p: PayoffPoint) -> str:
    saved = p.saved_seconds or 0.0
    lines = [
        f"<b>{html.escape(p.label)}</b>",
        f"{p.compiles:,} compile(s), {render.fmt_brief_seconds(p.compile_seconds)} compiling",
        f"{p.calls:,} call(s): {render.fmt_brief_seconds(p.run_seconds_mean)} each compiled, {render.fmt_brief_seconds(p.eager_seconds_mean)} eager",
        f"jit {'saved' if saved > 0 else 'lost'} {render.fmt_brief_seconds(abs(saved))} running: {p.verdict}",
    ]
    if p.break_even_calls is not None and not p.pays:
        lines.append(f"pays off after {p.break_even_calls:,} calls")
    lines.append(_GROUP_LOOK[p.group][2] + " · click for its page")
    return "<br>".join(lines)


def _log_range(values: Iterable[float]) -> list[float]:
    """A log axis' range (in powers of ten) around the values, half a decade of margin."""
    logs = [math.log10(max(SAVED_FLOOR, v)) for v in values if math.isfinite(v)]
    if not logs:
        return [-3.0, 0.0]
    low, high = min(logs), max(logs)
    if high - low < 1:
        low, high = low - 0.5, high + 0.5
    return [low - 0.5, high + 0.5]


def _faded(function_hash: str, focus: str | None) -> bool:
    """Drawn faintly: another function than the one a function's page is about."""
    return focus is not None and function_hash != focus


def _payoff_traces(drawn: Sequence[PayoffPoint], lost_panel: bool, focus: str | None) -> list[dict[str, Any]]:
    """One trace per group in the panel of savings (``lost_panel`` False) or of losses;
    with ``focus``, every other function's point faint and that one's outlined."""
    traces = []
    for group, (color, symbol, name) in _GROUP_LOOK.items():
        mine = [p for p in drawn if p.group == group and ((p.saved_seconds or 0.0) <= 0) == lost_panel]
        if not mine:
            continue
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": name,
                "legendgroup": group,
                "showlegend": not lost_panel
                or not any(p.group == group and (p.saved_seconds or 0.0) > 0 for p in drawn),
                "x": [max(SAVED_FLOOR, p.compile_seconds) for p in mine],
                "y": [max(SAVED_FLOOR, abs(p.saved_seconds or 0.0)) for p in mine],
                "yaxis": "y2" if lost_panel else "y",
                "customdata": [p.function_hash for p in mine],
                "hovertext": [_payoff_hover(p) for p in mine],
                "hovertemplate": "%{hovertext}<extra></extra>",
                "marker": {
                    "color": color,
                    "symbol": symbol,
                    "size": [_marker_size(p.calls) for p in mine],
                    "opacity": [0.25 if _faded(p.function_hash, focus) else 0.8 for p in mine],
                    "line": {
                        "color": ["#ffffff" if p.function_hash != focus else "#1f2328" for p in mine],
                        "width": [1 if p.function_hash != focus else 3 for p in mine],
                    },
                },
            }
        )
    return traces


def payoff_chart(points: Sequence[PayoffPoint], focus: str | None = None) -> dict[str, Any] | None:
    """Compile seconds (x) against run seconds saved (y, above) or lost (below), both on
    log scales, with the break-even line saved = compile seconds; None: nothing measured.
    ``focus``: the function a function's page is about, its point named, the others faint."""
    drawn = [p for p in points if p.drawn]
    if not drawn:
        return None
    saved = [p.saved_seconds for p in drawn if p.saved_seconds is not None and p.saved_seconds > 0]
    lost = [-(p.saved_seconds or 0.0) for p in drawn if (p.saved_seconds or 0.0) <= 0]
    x_range = _log_range([p.compile_seconds for p in drawn])
    y_range = _log_range([*saved, *(p.compile_seconds for p in drawn)])
    low, high = min(x_range[0], y_range[0]), max(x_range[1], y_range[1])
    line = {
        "type": "scatter",
        "mode": "lines",
        "name": "break-even: saved = compile seconds",
        "x": [10**low, 10**high],
        "y": [10**low, 10**high],
        "line": {"color": "#57606a", "dash": "dash", "width": 1.5},
        "hoverinfo": "skip",
    }
    data = [line, *_payoff_traces(drawn, False, focus), *_payoff_traces(drawn, True, focus)]
    split = 0.3 if lost else 0.0  # the losses' panel, only where some jit lost time
    layout = render._layout(
        height=520,
        xaxis=render._axis("compile seconds (log)", type="log", range=x_range, anchor="y2" if lost else "y"),
        yaxis=render._axis(
            "run seconds jit saved (log)", type="log", range=y_range, domain=[split + 0.06 if lost else 0.0, 1.0]
        ),
        annotations=_payoff_notes(lost) + _focus_note(drawn, focus),
    )
    if lost:
        layout["yaxis2"] = render._axis(
            "seconds lost", type="log", range=list(reversed(_log_range(lost))), domain=[0.0, split]
        )
    return {"data": data, "layout": layout}


def _focus_note(drawn: Sequence[PayoffPoint], focus: str | None) -> list[dict[str, Any]]:
    """An arrow naming the focused function's point, in whichever panel it is drawn."""
    mine = [p for p in drawn if p.function_hash == focus]
    if not mine:
        return []
    p = mine[0]
    lost = (p.saved_seconds or 0.0) <= 0
    return [
        {
            "x": math.log10(max(SAVED_FLOOR, p.compile_seconds)),
            "y": math.log10(max(SAVED_FLOOR, abs(p.saved_seconds or 0.0))),
            "xref": "x",
            "yref": "y2" if lost else "y",
            "text": f"<b>{html.escape(p.label)}</b>",
            "showarrow": True,
            "arrowhead": 2,
            "ax": 40,
            "ay": -36,
            "font": {"size": 13, "color": "#1f2328"},
        }
    ]


def _payoff_notes(lost: list[float]) -> list[dict[str, Any]]:
    note = {"xref": "paper", "yref": "y domain", "x": 0.01, "showarrow": False, "xanchor": "left"}
    notes = [
        {**note, "y": 0.98, "yanchor": "top", "text": "above the line: saved more than compiling cost"},
        {**note, "y": 0.02, "yanchor": "bottom", "text": "below: compiling cost more than it saved"},
    ]
    if lost:
        notes.append(
            {**note, "yref": "y2 domain", "y": 0.05, "yanchor": "bottom", "text": "lost time: eager ran faster"}
        )
    for n in notes:
        n["font"] = {"size": 12, "color": "#57606a"}
    return notes


# ------------------------------------------------------------------ a run's timeline

TIMELINE_COMPILES = 1500  # compiles drawn (and listed) at most: the run's first ones
STORMS_LANE, FINDINGS_LANE = "storms", "findings"
_PHASE_COLORS = {
    "trace": "#6A88A6",
    "lower": "#9DB4CC",
    perfetto.XLA_COMPILE: render.COMPILE_COLOR,
    perfetto.CACHE_READ: "#0F8B99",
}
# Warm-up and ahead-of-time compiles are hatched and dotted; a compile of the run plain.
_KIND_LOOK = {
    perfetto.COMPILE: ("", "circle", "compile"),
    perfetto.WARM_UP: ("/", "triangle-right", "warm-up compile"),
    perfetto.AHEAD: (".", "square", "ahead-of-time compile"),
}


@dataclasses.dataclass(frozen=True)
class Bar:
    """One compile on its lane: when it began, its phases in order, how it came about."""

    row: CompileRow
    lane: str
    phases: tuple[tuple[str, float], ...]
    kind: str  # perfetto.COMPILE, WARM_UP or AHEAD

    @property
    def name(self) -> str:
        return short_name(self.row.qualname or self.row.name) or self.row.function_hash[:12]

    @property
    def start(self) -> float:
        return self.row.timestamp

    @property
    def seconds(self) -> float:
        return sum(s for _, s in self.phases)

    @property
    def end(self) -> float:
        return self.start + self.seconds


@dataclasses.dataclass(frozen=True)
class Span:
    """A storm or a finding, shaded over the stretch of the run it covers."""

    kind: str  # STORMS_LANE or FINDINGS_LANE
    label: str
    start: float
    end: float
    text: str  # what the hover and the table say of it


@dataclasses.dataclass(frozen=True)
class Live:
    """Executables JAX's caches held for the run from ``timestamp`` on, and their bytes."""

    timestamp: float
    live: int
    bytes: int


@dataclasses.dataclass(frozen=True)
class RunTimeline:
    bars: list[Bar]
    lanes: list[str]
    spans: list[Span]
    live: list[Live]
    left_out: int  # compiles past TIMELINE_COMPILES


def run_timeline(conn: sa.Connection, run_id: str, found: findings.Found) -> RunTimeline:
    """The run's compiles in time order on their threads' lanes, its storms and findings
    (``found``: the run's, as the page read them), and its live executables (as the cache
    page counts them)."""
    records = trace_reads.read_run(conn, run_id)
    compiled = [r for r in records.compiles if r.compiled or r.kind == Kind.AHEAD]
    bars, lanes = _bars(compiled[:TIMELINE_COMPILES])
    of_storms = [f for f in found.findings if f.storms]
    spans = _storm_spans(found.storms, bars) + _finding_spans(of_storms, found.storms, bars)
    report = cache_view.cache_report(cache_reads.read_cache(conn, Filters(run_id=run_id)))
    return RunTimeline(bars, lanes, spans, _live(report.functions), max(0, len(compiled) - TIMELINE_COMPILES))


def _phases(row: CompileRow) -> tuple[tuple[str, float], ...]:
    compiled_by = perfetto.CACHE_READ if row.persistent_cache == "hit" else perfetto.XLA_COMPILE
    known = (("trace", row.trace_seconds), ("lower", row.lower_seconds), (compiled_by, row.compile_seconds))
    return tuple((name, max(0.0, seconds)) for name, seconds in known if seconds is not None)


def _bars(rows: Sequence[CompileRow]) -> tuple[list[Bar], list[str]]:
    """Each compile on its thread's first lane free when it starts: a compile nested in
    another (an inner jit compiled while the outer traced) goes to a lane of its own."""
    ends: dict[str, list[float]] = {}
    bars = []
    for row in rows:
        phases = _phases(row)
        end = row.timestamp + sum(s for _, s in phases)
        lanes = ends.setdefault(row.thread, [])
        free = next((i for i, last in enumerate(lanes) if row.timestamp >= last), len(lanes))
        if free == len(lanes):
            lanes.append(end)
        else:
            lanes[free] = end
        kind = perfetto.category(row)
        bars.append(Bar(row, _lane_name(row.thread, free), phases, kind if kind in _KIND_LOOK else perfetto.COMPILE))
    order = [_lane_name(thread, i) for thread, lanes in ends.items() for i in range(len(lanes))]
    return bars, order


def _lane_name(thread: str, lane: int) -> str:
    name = thread or "(thread not recorded)"
    return name if lane == 0 else f"{name} ({lane + 1})"


def _storm_end(storm: Storm, members: set[str], bars: Sequence[Bar]) -> float:
    """The end of the storm's last compile (a storm's ``end`` is when that one began)."""
    return max([storm.end, *(b.end for b in bars if b.row.function_hash in members and b.start <= storm.end)])


def _storm_spans(storms: Sequence[Storm], bars: Sequence[Bar]) -> list[Span]:
    spans = []
    for storm in sorted(storms, key=lambda s: (s.start, s.key)):
        members = {storm.function_hash, *storm.function_hashes}
        text = f"storm of {storm.short_name}: {storm.compiles} recompiles, mostly {storm.dominant_cause}"
        if storm.fix:
            text += f". Fix: {storm.fix}"
        spans.append(Span(STORMS_LANE, storm.short_name, storm.start, _storm_end(storm, members, bars), text))
    return spans


def _finding_spans(found: Sequence[findings.Finding], storms: Sequence[Storm], bars: Sequence[Bar]) -> list[Span]:
    """Each finding from its first storm's start to its last storm's end."""
    by_key: dict[str, list[Storm]] = {}
    for storm in storms:
        by_key.setdefault(storm.key, []).append(storm)
    spans = []
    for finding in found:
        mine = [s for key in finding.storms for s in by_key.get(key, []) if s.run_id == finding.run_id]
        if not mine:
            continue  # a finding of calls on JAX's slow path: no stretch of compiles
        end = max(_storm_end(s, {s.function_hash, *s.function_hashes}, bars) for s in mine)
        text = (
            f"{finding.varying} ({finding.compiles} compiles, {', '.join(finding.functions[:4])}). Fix: {finding.fix}"
        )
        spans.append(Span(FINDINGS_LANE, finding.varying, min(s.start for s in mine), end, text))
    return spans


def _live(functions: Sequence[cache_view.FunctionCache]) -> list[Live]:
    """The functions' live executables and bytes summed into the run's, at each change."""
    changes = sorted((p.timestamp, i, p) for i, fn in enumerate(functions) for p in fn.timeline)
    now: dict[int, cache_view.LivePoint] = {}
    out: list[Live] = []
    for when, i, point in changes:
        now[i] = point
        total = Live(when, sum(p.live for p in now.values()), sum(p.bytes for p in now.values()))
        if out and out[-1].timestamp == when:
            out[-1] = total
        else:
            out.append(total)
    return out


def _bar_hover(bar: Bar) -> str:
    row = bar.row
    phases = ", ".join(f"{name} {render.fmt_brief_seconds(s)}" for name, s in bar.phases) or "no phase timed"
    return (
        f"<b>{html.escape(bar.name)}</b> · {html.escape(row.cause)} · {_KIND_LOOK[bar.kind][2]}<br>"
        f"{render.fmt_time_ms(row.timestamp)} UTC on {html.escape(bar.lane)}<br>{render.fmt_brief_seconds(bar.seconds)}: {phases}"
    )


def _phase_traces(bars: Sequence[Bar], focus: str | None) -> list[dict[str, Any]]:
    """A bar per compile and phase, each phase starting where the one before it ended
    (with ``focus``, every other function's faint)."""
    per_phase: dict[str, list[tuple[Bar, float, float]]] = {}
    for bar in bars:
        at = bar.start
        for name, seconds in bar.phases:
            per_phase.setdefault(name, []).append((bar, at, seconds))
            at += seconds
    traces = []
    for name in _PHASE_COLORS:
        pieces = per_phase.get(name, [])
        if not pieces:
            continue
        traces.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": name,
                "y": [bar.lane for bar, _, _ in pieces],
                "base": [render.plot_time(at) for _, at, _ in pieces],
                "x": [seconds * 1000 for _, _, seconds in pieces],  # a date axis measures bars in ms
                "customdata": [bar.row.event_id for bar, _, _ in pieces],
                "hovertext": [_bar_hover(bar) for bar, _, _ in pieces],
                "hovertemplate": "%{hovertext}<extra>" + name + "</extra>",
                "width": 0.6,
                "marker": {
                    "color": _PHASE_COLORS[name],
                    "opacity": [0.25 if _faded(bar.row.function_hash, focus) else 1.0 for bar, _, _ in pieces],
                    "line": {"color": _PHASE_COLORS[name], "width": 0.5},
                    "pattern": {
                        "shape": [_KIND_LOOK[bar.kind][0] for bar, _, _ in pieces],
                        "bgcolor": _PHASE_COLORS[name],
                        "fgcolor": "#ffffff",
                        "solidity": 0.35,
                    },
                },
            }
        )
    return traces


def _start_traces(bars: Sequence[Bar], focus: str | None) -> list[dict[str, Any]]:
    """A mark at each compile's start, so a compile too short to see as a bar is still
    seen: one trace of every compile in time order (its colour and symbol by how it came
    about), and one legend entry for each kind."""
    compiles = {
        "type": "scatter",
        "mode": "markers",
        "name": "compiles",
        "showlegend": False,
        "x": [render.plot_time(b.start) for b in bars],
        "y": [b.lane for b in bars],
        "customdata": [b.row.event_id for b in bars],
        "hovertext": [_bar_hover(b) for b in bars],
        "hovertemplate": "%{hovertext}<extra></extra>",
        "marker": {
            "symbol": [_KIND_LOOK[b.kind][1] for b in bars],
            "color": [_PHASE_COLORS[perfetto.XLA_COMPILE] if b.kind == perfetto.COMPILE else "#767676" for b in bars],
            "size": 8,
            "opacity": [0.25 if _faded(b.row.function_hash, focus) else 1.0 for b in bars],
            "line": {"color": "#ffffff", "width": 1},
        },
    }
    legend = [
        {
            "type": "scatter",
            "mode": "markers",
            "name": _KIND_LOOK[kind][2] + _PATTERN_NAMES.get(kind, ""),
            "x": [None],
            "y": [None],
            "hoverinfo": "skip",
            "marker": {"symbol": _KIND_LOOK[kind][1], "size": 8, "color": _kind_color(kind)},
        }
        for kind in dict.fromkeys(b.kind for b in bars)
    ]
    return [compiles, *legend]


_PATTERN_NAMES = {perfetto.WARM_UP: " (hatched)", perfetto.AHEAD: " (dotted)"}


def _kind_color(kind: str) -> str:
    return _PHASE_COLORS[perfetto.XLA_COMPILE] if kind == perfetto.COMPILE else "#767676"


_SPAN_LOOK = {  # fill of the shaded range, and the colour of its bar in its own lane
    STORMS_LANE: ("rgba(180, 70, 44, 0.12)", "#B4462C"),
    FINDINGS_LANE: ("rgba(156, 106, 0, 0.10)", "#9C6A00"),
}


def _span_traces(spans: Sequence[Span]) -> list[dict[str, Any]]:
    """Storms and findings as bars in lanes of their own, above the threads, each named."""
    traces = []
    for kind in (STORMS_LANE, FINDINGS_LANE):
        mine = [s for s in spans if s.kind == kind]
        if not mine:
            continue
        color = _SPAN_LOOK[kind][1]
        traces.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": kind,
                "y": [kind] * len(mine),
                "base": [render.plot_time(s.start) for s in mine],
                "x": [max(0.0, s.end - s.start) * 1000 for s in mine],
                "text": [html.escape(s.label) for s in mine],
                "textposition": "inside",
                "insidetextanchor": "start",
                "textfont": {"color": "#ffffff"},
                "hovertext": ["<br>".join(textwrap.wrap(html.escape(s.text), 90)) for s in mine],
                "hovertemplate": "%{hovertext}<extra></extra>",
                "width": 0.6,
                "showlegend": False,  # the lane names it
                "marker": {"color": color, "line": {"color": color, "width": 1}},
            }
        )
    return traces


def _span_shapes(spans: Sequence[Span]) -> list[dict[str, Any]]:
    """Each storm and finding shaded over the threads' lanes, for the stretch it covers."""
    return [
        {
            "type": "rect",
            "xref": "x",
            "yref": "y domain",
            "x0": render.plot_time(s.start),
            "x1": render.plot_time(s.end),
            "y0": 0,
            "y1": 1,
            "fillcolor": _SPAN_LOOK[s.kind][0],
            "line": {"width": 0},
            "layer": "below",
        }
        for s in spans
    ]


def _live_traces(live: Sequence[Live]) -> list[dict[str, Any]]:
    """The run's live executables (left axis) and their bytes (right), as steps."""
    x = [render.plot_time(p.timestamp) for p in live]
    return [
        {
            "type": "scatter",
            "mode": "lines",
            "line": {"shape": "hv", "color": render.COMPILE_COLOR, "width": 2},
            "name": "live executables",
            "x": x,
            "y": [p.live for p in live],
            "yaxis": "y2",
            "hovertemplate": "%{y} live executable(s)<br>%{x}<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "lines",
            "line": {"shape": "hv", "color": render.TOTAL_COLOR, "width": 2, "dash": "dot"},
            "name": "their bytes",
            "x": x,
            "y": [p.bytes for p in live],
            "customdata": [bytes_text(p.bytes) for p in live],
            "yaxis": "y3",
            "hovertemplate": "%{customdata} held<br>%{x}<extra></extra>",
        },
    ]


def timeline_chart(timeline: RunTimeline, focus: str | None = None) -> dict[str, Any] | None:
    """Lanes of compiles (threads, with storms and findings above them) over the run's
    time, and the live executables and their bytes beneath on the same axis; None: no
    compile. ``focus``: the function a function's page is about, the others' compiles faint."""
    if not timeline.bars:
        return None
    lanes = [k for k in (STORMS_LANE, FINDINGS_LANE) if any(s.kind == k for s in timeline.spans)] + timeline.lanes
    data = [
        *_span_traces(timeline.spans),
        *_phase_traces(timeline.bars, focus),
        *_start_traces(timeline.bars, focus),
        *(_live_traces(timeline.live) if timeline.live else []),
    ]
    lane_height = 34
    top = lane_height * len(lanes) + 60
    beneath = 170 if timeline.live else 0
    layout = render._layout(
        height=top + beneath + 110,
        barmode="overlay",
        xaxis=render._axis("time (UTC)", type="date", anchor="y2" if timeline.live else "y"),
        yaxis=render._axis(
            "",
            type="category",
            categoryorder="array",
            categoryarray=lanes,
            autorange="reversed",
            domain=[beneath / (top + beneath) + 0.04 if beneath else 0.0, 1.0],
        ),
        shapes=_span_shapes(timeline.spans),
        margin={"l": 16, "r": 16 if not timeline.live else 64, "t": 36, "b": 48},
    )
    if timeline.live:
        largest = max(p.live for p in timeline.live)
        layout["yaxis2"] = {
            **render._count_axis("live executables", largest),
            "range": [0, largest * 1.1 + 0.5],
            "domain": [0.0, beneath / (top + beneath) - 0.02],
        }
        layout["yaxis3"] = render._axis(
            "bytes held",
            overlaying="y2",
            side="right",
            range=[0, max(1, max(p.bytes for p in timeline.live)) * 1.1],
            showgrid=False,
            tickmode="auto",
            nticks=4,
            tickformat="~s",
            ticksuffix="B",
        )
    return {"data": data, "layout": layout}
