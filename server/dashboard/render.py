"""Templates, number formats, cause colours and chart specs for the dashboard pages.

Charts are built here as plain plotly.js figures ``{"data": [...], "layout": {...}}``
and embedded in the page as JSON; the browser only draws them. Each chart also gets
a small table with the same numbers, as its text alternative.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.metadata
import math
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from typing import Any

import jinja2

from cachewatch.core import events
from cachewatch.core.events import CAUSES, Cause, short_name
from cachewatch.core.figures import bytes_text, seconds_cell, seconds_text, share_text
from cachewatch.store.charts import CompilesOverTime, TimelinePoint
from cachewatch.whatif.prices import Price

# One fixed colour per cause, the same on every page and chart: hues as far apart
# as they can be, each darkened to keep at least 3:1 contrast against white, as bars and
# swatches need. The cause's name is always shown beside its colour.
_PALETTE: dict[str, str] = {
    Cause.FIRST_CALL: "#767676",
    Cause.NEW_SHAPE: "#1F6FB4",
    Cause.NEW_DTYPE: "#9C6A00",
    Cause.WEAK_TYPE: "#B5478F",
    Cause.NEW_STATIC_VALUE: "#2A8A2A",
    Cause.NEW_STRUCTURE: "#C62828",
    Cause.NEW_FUNCTION_OBJECT: "#7B4FB0",
    Cause.CACHE_CLEARED: "#0F8B99",
    Cause.NEW_DEVICE_OR_SHARDING: "#8C564B",
    Cause.NEW_CONTEXT: "#C25400",
    Cause.UNKNOWN: "#333333",
    Cause.STALE_CAPTURE: "#7F7F00",
}
_FALLBACK = "#5A5A5A"
CAUSE_COLORS: dict[str, str] = {cause: _PALETTE.get(cause, _FALLBACK) for cause in CAUSES}
# Charts that are not about causes use slate blues, so no bar is read as a cause.
COMPILE_COLOR = "#2B3A4A"
RUN_COLOR = "#6A88A6"
TOTAL_COLOR = "#B4462C"

CAUSE_HELP: dict[str, str] = {
    Cause.FIRST_CALL: "first trace of this function in this run",
    Cause.NEW_SHAPE: "an array argument changed shape",
    Cause.NEW_DTYPE: "an array argument changed dtype",
    Cause.WEAK_TYPE: "an argument flipped between a Python scalar and a typed array",
    Cause.NEW_STATIC_VALUE: "a static argument took a value not seen before",
    Cause.NEW_STRUCTURE: "the pytree of the arguments changed",
    Cause.NEW_FUNCTION_OBJECT: "the same source was wrapped by a new jit object",
    Cause.CACHE_CLEARED: "the function's cache was cleared or evicted",
    Cause.NEW_DEVICE_OR_SHARDING: "compiled again for another device, sharding, layout or commitment",
    Cause.NEW_CONTEXT: "a configuration option or context manager JAX keys its cache on changed",
    Cause.UNKNOWN: "no cause could be established",
    Cause.STALE_CAPTURE: "a value read at trace time changed afterwards",
}


def cause_color(cause: str | None) -> str:
    return CAUSE_COLORS.get(cause or "", _FALLBACK)


def cause_order(causes: Iterable[str]) -> list[str]:
    """Causes in the vocabulary's order, so stacks and legends read the same everywhere."""
    rank = {c: i for i, c in enumerate(CAUSES)}
    return sorted(set(causes), key=lambda c: (rank.get(c, len(rank)), c))


# ------------------------------------------------------------------ formats


def fmt_seconds(value: float | None) -> str:
    return seconds_cell(value, missing="–")


def fmt_brief_seconds(value: float | None) -> str:
    """Seconds in the unit that suits them (20 us, 1.23 ms, 4.9 s): a call's run time is
    often far below the millisecond a table's column shows."""
    return "–" if value is None else seconds_text(value)


def fmt_count(value: int | None) -> str:
    return "–" if value is None else f"{value:,}"


def fmt_share(value: float | None) -> str:
    return share_text(value, missing="–")


def utc(value: float | None) -> dt.datetime | None:
    """The time as a UTC datetime; None when unknown or not a time a calendar can show
    (a row stored before the store bounded its times must not break a page)."""
    if value is None:
        return None
    try:
        return dt.datetime.fromtimestamp(value, dt.UTC)
    except (OverflowError, OSError, ValueError, TypeError):
        return None


def fmt_time(value: float | None) -> str:
    """Times are shown in UTC everywhere: one clock for every host and reader."""
    when = utc(value)
    if when is None:
        return "–" if value is None else f"invalid time ({value!r})"
    return when.strftime("%Y-%m-%d %H:%M:%S")


def fmt_time_ms(value: float | None) -> str:
    """A time to the millisecond (UTC): compiles of one second told apart."""
    when = utc(value)
    if when is None:
        return fmt_time(value)
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{when.microsecond // 1000:03d}"


def iso_time(value: float | None) -> str:
    when = utc(value)
    return "" if when is None else when.strftime("%Y-%m-%dT%H:%M:%S") + "Z"


_EPOCH = dt.datetime(1970, 1, 1)


def plot_time(value: float) -> str:
    # plotly.js reads "YYYY-MM-DD HH:MM:SS.fff" as a wall-clock date and shows it
    # as given: UTC in, UTC on the axis. A time no calendar holds is left off the axis.
    # The epoch plus the seconds, not fromtimestamp and strftime: a function's timeline
    # formats thousands of these per page, and this is a third of the cost.
    try:
        return (_EPOCH + dt.timedelta(seconds=value)).isoformat(" ", "milliseconds")
    except (OverflowError, ValueError, TypeError):
        return ""


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "–"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def parse_described(text: Any) -> dict[str, Any]:
    """Split a diff side (``float32[32,16] weak``, ``static 3``, a repr) into its parts."""
    if text is None:
        return {"absent": True}
    if not isinstance(text, str):
        return {"value": repr(text)}
    array = events.parse_described(text)
    if array is not None:
        dtype, dims, weak = array
        return {"shape": "[" + ",".join(str(d) for d in dims) + "]", "dtype": dtype, "weak_type": weak}
    if text.startswith("static "):
        return {"value": text[len("static ") :]}
    return {"value": text}


def signature_parts(entry: dict[str, Any]) -> dict[str, Any]:
    """One ``signature`` entry as the same parts as :func:`parse_described`."""
    if entry.get("static"):
        return {"value": entry.get("value")}
    shape = entry.get("shape")
    return {
        "shape": "[" + ",".join(str(d) for d in shape) + "]" if shape is not None else None,
        "dtype": entry.get("dtype"),
        "weak_type": bool(entry.get("weak_type")),
    }


def short_site(site: str | None) -> str:
    """``/long/path/to/examples/train.py:88`` -> ``examples/train.py:88`` (the full path stays in a title)."""
    if not site:
        return "–"
    parts = site.replace("\\", "/").split("/")
    return "/".join(parts[-2:])


# ------------------------------------------------------------------ charts

_FONT = {
    "family": "system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif",
    "size": 13,
    "color": "#1f2328",
}


def _layout(**extra: Any) -> dict[str, Any]:
    layout = {
        "font": _FONT,
        "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff",
        "margin": {"l": 56, "r": 16, "t": 36, "b": 48},
        "hovermode": "closest",
        # Above the plot: below it, the legend would collide with the x axis title.
        "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom", "traceorder": "normal"},
    }
    layout.update(extra)
    return layout


def _axis(title: str, **extra: Any) -> dict[str, Any]:
    return {
        "title": {"text": title},
        "gridcolor": "#e6e8eb",
        "zerolinecolor": "#c9ced4",
        "linecolor": "#8b949e",
        "automargin": True,
        **extra,
    }


def _count_axis(title: str, largest: int) -> dict[str, Any]:
    # Counts are whole: below ten, plotly would otherwise tick at 0.5, 1.5, ...
    extra = {"dtick": 1} if largest <= 10 else {}
    return _axis(title, rangemode="tozero", tickformat=",d", **extra)


def recompiles_chart(buckets: CompilesOverTime) -> dict[str, Any]:
    """Stacked bars: recompiles per time bucket, one trace (and colour) per cause."""
    width = buckets["width"]
    by_cause: dict[str, dict[float, int]] = {}
    for start, cause, n in buckets["rows"]:
        by_cause.setdefault(cause, {})[start] = n
    data = []
    for cause in cause_order(by_cause):
        points = sorted(by_cause[cause].items())
        data.append(
            {
                "type": "bar",
                "name": cause,
                "marker": {"color": cause_color(cause)},
                "x": [plot_time(t + width / 2) for t, _ in points],
                "y": [n for _, n in points],
                "width": width * 1000 * 0.9,
                "hovertemplate": "%{y} recompile(s)<br>%{x}<extra>" + cause + "</extra>",
            }
        )
    layout = _layout(
        barmode="stack",
        bargap=0.05,
        xaxis=_axis(f"time (UTC), {fmt_duration(width)} buckets", type="date"),
        yaxis=_count_axis("recompiles", max(_stack_heights(buckets["rows"]), default=0)),
    )
    return {"data": data, "layout": layout}


def unique_labels(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Short names, made longer only where two functions share one (a chart axis would merge them)."""
    names = [label(r) for r in rows]
    for longer in (
        lambda r: r.get("qualname") or label(r),
        lambda r: f"{r.get('qualname') or label(r)} ({r['function_hash'][:8]})",
    ):
        seen: dict[str, int] = {}
        for n in names:
            seen[n] = seen.get(n, 0) + 1
        names = [longer(r) if seen[n] > 1 else n for r, n in zip(rows, names, strict=False)]
    return names


def _stack_heights(rows: list[tuple[float, str, int]]) -> list[int]:
    totals: dict[float, int] = {}
    for start, _, n in rows:
        totals[start] = totals.get(start, 0) + n
    return list(totals.values())


def cost_chart(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Grouped horizontal bars: compile seconds against estimated run seconds, per function."""
    names = unique_labels(rows)
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "name": "compile seconds",
            "y": names,
            "x": [r["compile_seconds"] for r in rows],
            "marker": {"color": COMPILE_COLOR},
            "hovertemplate": "%{x:.3f} s compiling<extra>%{y}</extra>",
        },
        {
            "type": "bar",
            "orientation": "h",
            "name": "estimated run seconds",
            "y": names,
            "x": [r["run_seconds_est"] or 0.0 for r in rows],
            "marker": {"color": RUN_COLOR},
            "hovertemplate": "%{x:.3f} s running (estimated)<extra>%{y}</extra>",
        },
    ]
    layout = _layout(
        barmode="group",
        height=max(260, 46 * len(rows) + 110),
        xaxis=_axis("seconds", rangemode="tozero"),
        yaxis=_axis("", autorange="reversed"),
        margin={"l": 16, "r": 16, "t": 36, "b": 48},
    )
    return {"data": data, "layout": layout}


def causes_chart(causes: dict[str, int]) -> dict[str, Any]:
    """Horizontal bars, one per cause, in the cause's colour."""
    order = [c for c in cause_order(causes) if causes.get(c)]
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "y": order,
            "x": [causes[c] for c in order],
            "marker": {"color": [cause_color(c) for c in order]},
            "showlegend": False,
            "text": [str(causes[c]) for c in order],
            "textposition": "auto",
            "hovertemplate": "%{x} event(s)<extra>%{y}</extra>",
        }
    ]
    layout = _layout(
        height=max(200, 34 * len(order) + 90),
        xaxis=_count_axis("events", max((causes[c] for c in order), default=0)),
        yaxis=_axis("", autorange="reversed"),
        margin={"l": 16, "r": 16, "t": 16, "b": 48},
    )
    return {"data": data, "layout": layout}


def timeline_chart(points: Sequence[TimelinePoint]) -> dict[str, Any]:
    """One marker per trace or compile: when (x), how long (y), why (colour)."""
    by_cause: dict[str, list[TimelinePoint]] = {}
    for p in points:
        by_cause.setdefault(p["cause"], []).append(p)
    data = []
    for cause in cause_order(by_cause):
        pts = by_cause[cause]
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": cause,
                "x": [plot_time(p["timestamp"]) for p in pts],
                "y": [p["seconds"] for p in pts],
                "marker": {
                    "color": cause_color(cause),
                    "size": 9,
                    "symbol": ["circle" if p["compiled"] else "circle-open" for p in pts],
                    "line": {"width": 1.5, "color": cause_color(cause)},
                },
                "hovertemplate": "%{y:.3f} s<br>%{x}<extra>" + cause + "</extra>",
            }
        )
    layout = _layout(xaxis=_axis("time (UTC)", type="date"), yaxis=_axis("seconds", rangemode="tozero"))
    return {"data": data, "layout": layout}


def histogram_chart(seconds: list[float]) -> dict[str, Any]:
    seconds = [s for s in seconds if math.isfinite(s)]
    data = [
        {
            "type": "histogram",
            "x": seconds,
            "marker": {"color": COMPILE_COLOR, "line": {"color": "#ffffff", "width": 1}},
            "nbinsx": min(30, max(5, int(math.sqrt(len(seconds))) * 2)),
            "showlegend": False,
            "hovertemplate": "%{y} compile(s) of %{x} s<extra></extra>",
        }
    ]
    # No bin holds more compiles than there are.
    layout = _layout(bargap=0.04, xaxis=_axis("seconds per compile"), yaxis=_count_axis("compiles", len(seconds)))
    return {"data": data, "layout": layout}


def ladder_chart(curve: Sequence[Price], chosen: Price) -> dict[str, Any]:
    """Lines over the number of buckets a padding ladder has: compile seconds (falling),
    padded run seconds (rising) and their sum, with the cheapest ladder marked."""
    x = [len(p.buckets) for p in curve]
    labels = [", ".join(str(b) for b in p.buckets) for p in curve]
    lines = (
        ("compile seconds", [p.compile_seconds for p in curve], COMPILE_COLOR, "dot"),
        ("padded run seconds", [p.padded_run_seconds or 0.0 for p in curve], RUN_COLOR, "dash"),
        ("total seconds", [p.total_seconds or 0.0 for p in curve], TOTAL_COLOR, "solid"),
    )
    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": name,
            "x": x,
            "y": ys,
            "customdata": labels,
            "line": {"color": color, "dash": dash, "width": 2},
            "hovertemplate": f"%{{y:.3f}} s {name}<extra>buckets %{{customdata}}</extra>",
        }
        for name, ys, color, dash in lines
    ]
    data.append(
        {
            "type": "scatter",
            "mode": "markers",
            "name": "cheapest",
            "x": [len(chosen.buckets)],
            "y": [chosen.total_seconds or 0.0],
            "marker": {"color": TOTAL_COLOR, "size": 14, "symbol": "star"},
            "hovertemplate": "cheapest: %{y:.3f} s in total<extra></extra>",
        }
    )
    layout = _layout(
        xaxis=_count_axis("buckets in the ladder", max(x, default=1)),
        yaxis=_axis("seconds over the run", rangemode="tozero"),
    )
    return {"data": data, "layout": layout}


def histogram_table(seconds: list[float], bins: int = 8) -> list[dict[str, Any]]:
    """The histogram's text alternative: counts in equal-width ranges."""
    seconds = [s for s in seconds if math.isfinite(s)]  # a stored infinity has no bin
    if not seconds:
        return []
    low, high = min(seconds), max(seconds)
    if high <= low:
        return [{"low": low, "high": high, "n": len(seconds)}]
    step = (high - low) / bins
    if not math.isfinite(step):  # the range overflows a double: one bin
        return [{"low": low, "high": high, "n": len(seconds)}]
    counts = [0] * bins
    for s in seconds:
        counts[min(bins - 1, int((s - low) / step))] += 1
    return [{"low": low + i * step, "high": low + (i + 1) * step, "n": n} for i, n in enumerate(counts)]


def label(row: Mapping[str, Any]) -> str:
    """The name a person recognises: the readable tail of the qualified name."""
    return short_name(row.get("qualname") or row.get("name") or row.get("function_hash", "?"))


# ------------------------------------------------------------------ templates


PLOTLY_PATH = "/static/vendor/plotly.min.js"


def plotly_url() -> str:
    """The versioned URL of plotly.js, so a browser may cache it for good."""
    try:
        version = importlib.metadata.version("plotly")
    except importlib.metadata.PackageNotFoundError:
        version = "missing"
    return f"{PLOTLY_PATH}?v={urllib.parse.quote(version)}"


def _asset_version(name: str) -> str:
    data = (resources.files("cachewatch_server.dashboard") / "static" / name).read_bytes()
    return hashlib.sha256(data).hexdigest()[:12]


def make_environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("cachewatch_server.dashboard", "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        seconds=fmt_seconds,
        count=fmt_count,
        share=fmt_share,
        time=fmt_time,
        time_ms=fmt_time_ms,
        brief_seconds=fmt_brief_seconds,
        iso=iso_time,
        duration=fmt_duration,
        site=short_site,
        short=short_name,
        size=bytes_text,
    )
    env.globals.update(
        cause_color=cause_color,
        cause_help=CAUSE_HELP,
        label=label,
        parse_described=parse_described,
        signature_parts=signature_parts,
        plotly_url=plotly_url(),
        asset={name: f"/static/{name}?v={_asset_version(name)}" for name in ("dashboard.css", "dashboard.js")},
    )
    return env


def live_executables_chart(timelines: Sequence[tuple[str, Sequence[Any]]], *, field: str) -> dict[str, Any]:
    """Step lines per function: executables alive (``field`` "live") or their bytes ("bytes")
    over time, from each function's timeline of cache_view.LivePoint."""
    data = []
    for name, points in timelines:
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "line": {"shape": "hv"},
                "name": name,
                "x": [plot_time(p.timestamp) for p in points],
                "y": [getattr(p, field) for p in points],
                "hovertemplate": ("%{y} executable(s)" if field == "live" else "%{y:,} bytes")
                + "<br>%{x}<extra>"
                + name
                + "</extra>",
            }
        )
    largest = max((getattr(p, field) for _, points in timelines for p in points), default=0)
    yaxis = _count_axis("live executables", largest) if field == "live" else _axis("bytes", rangemode="tozero")
    return {"data": data, "layout": _layout(xaxis=_axis("time (UTC)", type="date"), yaxis=yaxis)}


def hit_rate_chart(rows: Sequence[tuple[str, float]]) -> dict[str, Any]:
    """One bar per run: the share of its compiles that the persistent cache served."""
    data = [
        {
            "type": "bar",
            "x": [name for name, _ in rows],
            "y": [rate for _, rate in rows],
            "marker": {"color": "#1f6feb"},
            "hovertemplate": "%{y:.0%}<extra>%{x}</extra>",
        }
    ]
    layout = _layout(
        xaxis=_axis("run", type="category"), yaxis=_axis("persistent cache hit rate", range=[0, 1], tickformat=".0%")
    )
    return {"data": data, "layout": layout}
