"""The overview's pictures in real headless Chromium: whether each jit pays for itself
(compile seconds against the run seconds it saved, with the break-even line), and a run's
compiles on one time axis per thread with its storms, findings and live executables.

The functions are real jits traced and compiled by JAX through cachewatch; the run the
pictures draw is those events written again with fixed times and figures (seconds,
calls, eager baselines), so that which side of the break-even line a jit falls on never
depends on how fast this machine is. Screenshots go to docs/images/.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import pytest
import serverkit as kit
import sqlalchemy as sa
from cachewatch_server.main import create_app
from cachewatch_server.settings import ServerSettings
from conftest import new_run
from test_dashboard import Tab, chromium  # noqa: F401  (the browser fixture, shared)

import cachewatch
from cachewatch.core.events import CallStats, Cause, CompileEvent, Kind, RunInfo
from cachewatch.record import current, recorder
from cachewatch.store import engine as enginemod
from cachewatch.store import models
from cachewatch.store.sinks import SqlSink

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
SHAPES = 8  # the storming jit's batch sizes: a first call and seven recompiles


# ------------------------------------------------------------------ real jits, then fixed figures


@cachewatch.jit
def storming(x):
    return (x * 2.0).sum()


@cachewatch.jit
def pays(x):
    for _ in range(8):
        x = jnp.sin(x) * 1.5 + 0.25
    return x


@cachewatch.jit
def loses(x):
    return x + 1.0


@cachewatch.jit
def unweighed(x):
    return x - 1.0


@cachewatch.jit
def warm(x):
    return x * x


def _record() -> dict[str, list[CompileEvent]]:
    """The jits' real compile events, by function name."""
    new_run()
    seen: list[CompileEvent] = []
    recorder.add_listener(seen.append)
    try:
        warm(jnp.ones(4))
        pays(jnp.ones(16))
        loses(jnp.ones(3))
        unweighed(jnp.ones(5))
        for n in range(1, SHAPES + 1):
            storming(jnp.ones((n, 3)))
        assert recorder.flush(30)
    finally:
        recorder.remove_listener(seen.append)
    by_name: dict[str, list[CompileEvent]] = {}
    for event in seen:
        if event.compiled and event.function.module == __name__:
            by_name.setdefault(event.function.name, []).append(event)
    return by_name


@dataclasses.dataclass(frozen=True)
class Figures:
    """What each function's events and statistics are written with."""

    compile_seconds: float  # of each compile: trace, lowering and XLA compile in the ratio 2:1:5
    calls: int
    run_seconds: float  # one compiled call
    eager_seconds: float | None  # one call op by op


FIGURES = {
    # Compiled once and called many times, far faster than eagerly: pays for itself.
    "pays": Figures(0.05, 5_000, 20e-6, 1e-3),
    # Eight compiles for eight calls: what it saves cannot repay them.
    "storming": Figures(0.08, SHAPES, 20e-6, 60e-6),
    # Eager ran faster: jit lost time on every call.
    "loses": Figures(0.03, 100, 50e-6, 40e-6),
    "unweighed": Figures(0.02, 10, 1e-4, None),
    "warm": Figures(0.04, 3, 1e-5, None),
}
THREADS = {"loses": "worker-1"}


def _event(event: CompileEvent, run: RunInfo, at: float, **changes: Any) -> CompileEvent:
    figures = FIGURES[event.function.name]
    seconds = figures.compile_seconds
    return kit.copy_event(
        event,
        run,
        at,
        trace_seconds=seconds * 0.25,
        lower_seconds=seconds * 0.125,
        compile_seconds=seconds * 0.625,
        # The baseline is measured in pairs: one call op by op beside one compiled call.
        eager_run_seconds=figures.eager_seconds,
        compiled_run_seconds=figures.run_seconds if figures.eager_seconds is not None else None,
        thread=THREADS.get(event.function.name, "MainThread"),
        memory={"code": 40_000, "argument": 64, "output": 64, "temp": 0},
        persistent_cache_hit=None,
        **{"warmup": False, **changes},
    )


def _events(real: dict[str, list[CompileEvent]], run: RunInfo, t0: float) -> list[CompileEvent]:
    (first_warm,) = real["warm"]
    out = [
        _event(first_warm, run, t0 + 1.0, warmup=True),
        # The same program compiled ahead of its call (cachewatch.warmup), on another signature.
        _event(first_warm, run, t0 + 1.5, kind=Kind.AHEAD, signature_hash=uuid.uuid4().hex[:16], identical_to=None),
        _event(real["pays"][0], run, t0 + 2.0),
        _event(real["loses"][0], run, t0 + 2.01),  # on its own thread, at the same time as pays
        _event(real["unweighed"][0], run, t0 + 4.0),
    ]
    assert [e.cause for e in real["storming"]] == [Cause.FIRST_CALL] + [Cause.NEW_SHAPE] * (SHAPES - 1)
    for i, event in enumerate(real["storming"]):
        # The loop kept coming back to it between new shapes: a storm, not a first pass.
        out.append(_event(event, run, t0 + 10.0 + 2.0 * i, while_repeating=i > 0))
    return out


def _stats(real: dict[str, list[CompileEvent]], run: RunInfo, at: float) -> list[CallStats]:
    rows = []
    for name, events in real.items():
        figures = FIGURES[name]
        sampled = min(figures.calls, 50)
        rows.append(
            CallStats(
                run_id=run.run_id,
                function=events[0].function,
                timestamp=at,
                calls=figures.calls,
                sampled_calls=sampled,
                sampled_seconds=sampled * figures.run_seconds,
                signature_hash=events[-1].signature_hash,
            )
        )
    # The storming jit's executables released (its cache cleared) at the end.
    rows.append(CallStats(run.run_id, real["storming"][0].function, at + 5.0, 0, 0, 0.0, released_by="clear_cache()"))
    return rows


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[str, RunInfo]:
    """A store holding one run of the jits above with fixed figures."""
    folder = tmp_path_factory.mktemp("pictures")
    current.reset_configuration()
    current.configure(store=f"sqlite:///{folder / 'real.db'}")
    try:
        real = _record()
        template = current.run_info()
    finally:
        current.reset_configuration()
    assert set(real) == set(FIGURES), real.keys()
    url = f"sqlite:///{folder / 'store.db'}"
    t0 = time.time() - 3_600  # an hour ago: a finished run, no storm active
    run = dataclasses.replace(template, run_id=uuid.uuid4().hex, started_at=t0, run_name="pictures")
    enginemod.upgrade(url)
    SqlSink(url).write(kit.batch(run, _events(real, run, t0), _stats(real, run, t0 + 40.0)))
    return url, run


@pytest.fixture(scope="module")
def server(store) -> Iterator[Any]:
    settings = ServerSettings(store=store[0], write_token=None, read_token=None)
    with kit.live_server(create_app(settings)) as live:
        yield live


@pytest.fixture
def tab(chromium, server) -> Iterator[Tab]:  # noqa: F811
    context = chromium.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20000)
    opened = Tab(page, server.url, IMAGES)
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    opened.requests = requests  # type: ignore[attr-defined]
    try:
        yield opened
        opened.assert_clean()
        # Nothing but the page and its own scripts and styles: no CDN, and no JSON read
        # from the API after the page loaded (a static copy of the page draws the same).
        outside = [u for u in requests if not u.startswith(server.url + "/") or "/api/" in u]
        assert not outside, outside
    finally:
        context.close()


def _hashes(url: str) -> dict[str, str]:
    with enginemod.connection(url) as conn:
        f = models.functions
        return {row.name: row.function_hash for row in conn.execute(sa.select(f.c.name, f.c.function_hash))}


# ------------------------------------------------------------------ the scatter

PAYOFF = """el => ({
  traces: el.data.map(t => ({name: t.name, yaxis: t.yaxis || 'y', x: Array.from(t.x || []),
    y: Array.from(t.y || []), customdata: Array.from(t.customdata || []), mode: t.mode})),
  xtype: el._fullLayout.xaxis.type, ytype: el._fullLayout.yaxis.type,
  lost: el._fullLayout.yaxis2 ? {type: el._fullLayout.yaxis2.type, range: el._fullLayout.yaxis2.range} : null,
})"""


def _points(chart: dict[str, Any]) -> dict[str, tuple[float, float, str]]:
    """(x, y, panel) of each function's point, by function hash."""
    found = {}
    for trace in chart["traces"]:
        for x, y, key in zip(trace["x"], trace["y"], trace["customdata"], strict=False):
            found[key] = (x, y, trace["yaxis"])
    return found


@pytest.mark.parametrize("scope", ["run", "all runs"])
def test_the_scatter_puts_each_jit_on_its_side_of_break_even(tab, store, scope):
    url, run = store
    hashes = _hashes(url)
    tab.open(f"/?run_id={run.run_id}" if scope == "run" else "/")
    chart = tab.page.eval_on_selector("#chart-payoff", PAYOFF)
    assert (chart["xtype"], chart["ytype"]) == ("log", "log")
    (line,) = [t for t in chart["traces"] if t["name"].startswith("break-even")]
    assert line["x"] == line["y"]  # saved = compile seconds
    points = _points(chart)
    # Only the jits with an eager baseline are drawn; the others are listed.
    assert set(points) == {hashes["pays"], hashes["storming"], hashes["loses"]}
    for x, _, _ in points.values():
        assert line["x"][0] <= x <= line["x"][1]
    x, y, panel = points[hashes["pays"]]
    assert panel == "y"
    assert y > x  # above the line
    assert x == pytest.approx(FIGURES["pays"].compile_seconds)
    x, y, panel = points[hashes["storming"]]
    assert panel == "y"
    assert y < x / 100  # far below: eight compiles for what eight calls saved
    assert x == pytest.approx(SHAPES * FIGURES["storming"].compile_seconds)
    x, y, panel = points[hashes["loses"]]
    assert panel == "y2"  # lost time: drawn beneath, by how much
    assert chart["lost"]["type"] == "log"
    assert chart["lost"]["range"][0] > chart["lost"]["range"][1]  # losses grow downwards
    # Coloured by storm: the storming jit's trace is the storm's.
    (storm_trace,) = [t for t in chart["traces"] if hashes["storming"] in t["customdata"]]
    assert storm_trace["name"] == "in a storm"
    assert {t["name"] for t in chart["traces"] if hashes["pays"] in t["customdata"]} == {"no storm or finding"}
    # The table beside it: every weighed function, the sides agreed.
    rows = tab.page.eval_on_selector_all(
        "#payoff-table tbody tr", "rows => rows.map(r => [r.dataset.functionHash, r.dataset.pays])"
    )
    assert dict(rows) == {
        hashes["pays"]: "true",
        hashes["storming"]: "false",
        hashes["loses"]: "false",
        hashes["unweighed"]: "",
        hashes["warm"]: "",
    }
    if scope == "run":
        _hover(tab, "#chart-payoff", hashes["pays"])
        assert "pays for itself" in tab.page.eval_on_selector("#chart-payoff .hoverlayer", "g => g.textContent")
        tab.page.locator("#chart-payoff").screenshot(path=str(IMAGES / "payoff-scatter.png"))


# Where plotly drew the point whose customdata is the key, within the chart.
POINT_AT = """(el, key) => {
  const layout = el._fullLayout;
  const at = (axis, value) => axis.l2p(axis.d2l(value)) + axis._offset;
  for (const t of el.data) {
    const i = Array.from(t.customdata || []).indexOf(key);
    if (i < 0 || t.type !== 'scatter') continue;
    const y = layout[(t.yaxis || 'y').replace('y', 'yaxis')];
    return {x: at(layout.xaxis, t.x[i]), y: at(y, t.y[i])};
  }
  return null;
}"""


def _hover(tab: Tab, selector: str, key: str) -> None:
    """The mouse over the point of ``key``, its hover label shown."""
    chart = tab.page.locator(selector)
    chart.scroll_into_view_if_needed()
    point = tab.page.eval_on_selector(selector, POINT_AT, key)
    assert point is not None, key
    box = chart.bounding_box()
    assert box is not None
    tab.page.mouse.move(box["x"] + point["x"], box["y"] + point["y"])
    tab.page.wait_for_selector(f"{selector} .hoverlayer .hovertext")


def test_a_click_on_a_point_opens_its_function(tab, store):
    url, run = store
    pays_hash = _hashes(url)["pays"]
    tab.open(f"/?run_id={run.run_id}")
    # What plotly emits for a click on the point (its pixel position is plotly's business).
    tab.follow(
        lambda: tab.page.eval_on_selector(
            "#chart-payoff", f"el => el.emit('plotly_click', {{points: [{{customdata: '{pays_hash}'}}]}})"
        )
    )
    assert tab.path == f"/functions/{pays_hash}"
    assert tab.query == {"run_id": run.run_id}


# ------------------------------------------------------------------ the timeline

TIMELINE = """el => ({
  traces: el.data.map(t => ({name: t.name, type: t.type, y: Array.from(t.y || []),
    base: Array.from(t.base || []), x: Array.from(t.x || []), customdata: Array.from(t.customdata || []),
    yaxis: t.yaxis || 'y', pattern: t.marker && t.marker.pattern ? Array.from(t.marker.pattern.shape || []) : []})),
  lanes: Array.from(el._fullLayout.yaxis.categoryarray || []),
  shapes: (el.layout.shapes || []).length,
  shared: el._fullLayout.xaxis.anchor,
})"""


def _store_compiles(url: str, run_id: str) -> list[tuple[str, str, float]]:
    """The run's compiles as the store holds them, in time order: (event id, thread, seconds)."""
    e = models.compile_events
    q = (
        sa.select(e.c.event_id, e.c.thread, e.c.trace_seconds, e.c.lower_seconds, e.c.compile_seconds)
        .where(e.c.run_id == run_id, e.c.compiled)
        .order_by(e.c.timestamp, e.c.id)
    )
    with enginemod.connection(url) as conn:
        return [(r.event_id, r.thread, r.trace_seconds + r.lower_seconds + r.compile_seconds) for r in conn.execute(q)]


def test_the_timeline_draws_every_compile_in_order(tab, store):
    url, run = store
    tab.open(f"/?run_id={run.run_id}")
    chart = tab.page.eval_on_selector("#chart-run-timeline", TIMELINE)
    compiles = _store_compiles(url, run.run_id)
    assert len(compiles) == SHAPES + 5
    (marks,) = [t for t in chart["traces"] if t["name"] == "compiles"]
    assert marks["customdata"] == [event_id for event_id, _, _ in compiles]
    assert marks["y"] == [thread for _, thread, _ in compiles]  # no compile overlaps another on its thread
    # Each compile a bar of its phases, one after the other, as long as it took.
    phases = [t for t in chart["traces"] if t["type"] == "bar" and t["name"] in ("trace", "lower", "XLA compile")]
    assert [t["name"] for t in phases] == ["trace", "lower", "XLA compile"]
    for trace in phases:
        assert trace["customdata"] == marks["customdata"]
    lengths = [sum(t["x"][i] for t in phases) / 1000 for i in range(len(compiles))]
    assert lengths == pytest.approx([seconds for _, _, seconds in compiles])
    assert phases[0]["base"] == marks_base(chart)
    # Warm-up hatched, ahead of time dotted, the rest plain.
    assert phases[0]["pattern"][:2] == ["/", "."]
    assert set(phases[0]["pattern"][2:]) == {""}
    # Lanes: the storm and its finding above the two threads.
    assert chart["lanes"] == ["storms", "findings", "MainThread", "worker-1"]
    storms = next(t for t in chart["traces"] if t["name"] == "storms")
    assert len(storms["x"]) == 1
    assert chart["shapes"] == 2  # the storm and the finding shaded
    # The live executables beneath, on the same time axis: the storm's released at the end.
    live = next(t for t in chart["traces"] if t["name"] == "live executables")
    assert live["yaxis"] == "y2"
    assert chart["shared"] == "y2"
    assert max(live["y"]) == len(compiles)
    assert live["y"][-1] == len(compiles) - SHAPES
    # The table: the same compiles in the same order.
    listed = tab.page.eval_on_selector_all("#timeline-table tbody tr", "rows => rows.map(r => r.dataset.eventId)")
    assert listed == marks["customdata"]
    timeline = tab.page.locator("#chart-run-timeline")
    timeline.scroll_into_view_if_needed()
    timeline.screenshot(path=str(IMAGES / "run-timeline.png"))
    # Zoomed into the two compiles that ran at once on two threads: their phases.
    pays_at = marks["x"][marks["customdata"].index(compiles[2][0])]
    tab.page.eval_on_selector(
        "#chart-run-timeline",
        """(el, start) => { const t = new Date(start.replace(' ', 'T') + 'Z').getTime();
          return Plotly.relayout(el, {'xaxis.range': [t - 60, t + 140]}); }""",
        pays_at,
    )
    _hover(tab, "#chart-run-timeline", compiles[2][0])
    timeline.screenshot(path=str(IMAGES / "run-timeline-zoomed.png"))


def marks_base(chart: dict[str, Any]) -> list[str]:
    (marks,) = [t for t in chart["traces"] if t["name"] == "compiles"]
    return marks["x"]


def test_without_a_run_there_is_no_timeline(tab, store):
    tab.open("/")
    assert tab.page.locator("#chart-run-timeline").count() == 0
    assert tab.page.locator("#chart-payoff").count() == 1


# ------------------------------------------------------------------ on a function's page

FOCUS = """el => ({
  points: el.data.filter(t => t.type === 'scatter' && t.mode === 'markers' && t.customdata).map(t => ({
    keys: Array.from(t.customdata), opacity: Array.from([].concat(t.marker.opacity)),
    width: Array.from([].concat(t.marker.line.width))})),
  notes: (el.layout.annotations || []).map(a => a.text),
})"""


def test_a_functions_page_marks_it_on_its_runs_pictures(tab, store):
    url, run = store
    hashes = _hashes(url)
    storming_hash = hashes["storming"]
    tab.open(f"/functions/{storming_hash}")  # no run chosen: the function's latest run
    assert f"run {run.run_name or run.run_id[:12]}" in tab.page.inner_text("#payoff-title")
    chart = tab.page.eval_on_selector("#chart-payoff", FOCUS)
    drawn = {}
    for trace in chart["points"]:
        drawn.update({key: (o, w) for key, o, w in zip(trace["keys"], trace["opacity"], trace["width"], strict=True)})
    # Every weighed jit of the run is drawn; this one in full and outlined, the others faint.
    assert set(drawn) == {hashes["pays"], storming_hash, hashes["loses"]}
    assert drawn[storming_hash][0] > drawn[hashes["pays"]][0]
    assert drawn[storming_hash][1] > drawn[hashes["pays"]][1]
    assert any("storming" in note for note in chart["notes"])
    focused = tab.page.eval_on_selector_all("#payoff-table tr.focus", "rows => rows.map(r => r.dataset.functionHash)")
    assert focused == [storming_hash]
    # The run's timeline with every compile of the run; this function's compiles in full.
    timeline = tab.page.eval_on_selector("#chart-run-timeline", TIMELINE)
    (marks,) = [t for t in timeline["traces"] if t["name"] == "compiles"]
    assert marks["customdata"] == [event_id for event_id, _, _ in _store_compiles(url, run.run_id)]
    opacity = tab.page.eval_on_selector(
        "#chart-run-timeline", "el => Array.from(el.data.find(t => t.name === 'compiles').marker.opacity)"
    )
    mine = set(tab.page.eval_on_selector_all("#timeline-table tr.focus", "rows => rows.map(r => r.dataset.eventId)"))
    assert len(mine) == SHAPES  # its first compile and seven recompiles
    assert all((o == 1.0) == (key in mine) for key, o in zip(marks["customdata"], opacity, strict=True))
    tab.page.locator("#chart-payoff").scroll_into_view_if_needed()
    tab.page.locator("#chart-payoff").screenshot(path=str(IMAGES / "function-payoff.png"))
