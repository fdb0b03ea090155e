"""The dashboard in real headless Chromium, as a person uses it.

The store is filled by real JAX code run through cachewatch: the example training
loop (examples/train_storms.py) in one run, the classic pitfalls of tests/scenarios.py
and a stale captured global in a second run. The app is served by uvicorn on a
loopback port; Chromium (Debian's, driven by Playwright) opens every page. Each page's
numbers, diffs and storms are checked against the JSON API, each chart must be drawn
by plotly.js with data traces, no page may log a console error, and the filters must
survive every link. Screenshots go to test-output/screenshots/<store>/.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import scenarios
import serverkit as kit
import sqlalchemy as sa
from cachewatch_server.dashboard import pages, render
from cachewatch_server.deps import parse_time
from cachewatch_server.main import create_app
from cachewatch_server.settings import ServerSettings
from conftest import create_pg_database, drop_pg_database

import cachewatch
from cachewatch.core import _guard
from cachewatch.core.events import Cause, Kind
from cachewatch.explain import causes
from cachewatch.payoff import verdicts
from cachewatch.record import current, recorder
from cachewatch.store import engine as enginemod
from cachewatch.store import models, rollup
from cachewatch.store import queries as storequeries
from cachewatch.store.columns import Filters
from cachewatch.store.engine import redact_url

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
SCREENSHOTS = ROOT / "test-output" / "screenshots"
PITFALLS = (
    "static_values",
    "batch_sizes",
    "dtype_change",
    "weak_type_flip",
    "dict_keys_change",
    "clear_cache",
    "lambda_in_loop",
)

# Read by `shifted` when it is traced, changed afterwards: a stale capture.
BIAS = 0.0


# ------------------------------------------------------------------ the store: real JAX runs


def _load_example():
    spec = importlib.util.spec_from_file_location("train_storms", ROOT / "examples" / "train_storms.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def seed_store(url: str) -> None:
    """Two real runs into ``url``: the example training loop, then the pitfall scenarios."""
    global BIAS
    import jax.numpy as jnp
    from conftest import new_run

    current.reset_configuration()
    # Every cache-hit call timed: the run-time estimates (and so compile shares) exist.
    # Every program's jaxpr kept, so the function pages can show jaxpr diffs.
    current.configure(store=url, sample_every=1, sample_max_per_second=1000.0, run_name="train-storms")
    new_run()
    example = _load_example()
    argv = sys.argv
    sys.argv = ["train_storms.py", "--epochs", "3", "--run-name", "train-storms"]
    try:
        example.main()
    finally:
        sys.argv = argv
    recorder.flush(30)
    causes.reset()
    current.configure(run_name="pitfalls")  # a new run name starts a new run
    for name in PITFALLS:
        scenarios.ALL[name]()

    BIAS = 0.0

    @cachewatch.jit
    def shifted(x):
        return x + BIAS

    shifted(jnp.ones(2))
    BIAS = 1.0
    for _ in range(3):
        shifted(jnp.ones(2))
    assert recorder.flush(30)


def copy_store(source: str, target: str) -> None:
    """The same rows in another store (the PostgreSQL variant reuses the SQLite runs)."""
    enginemod.ensure_schema(target)
    with enginemod.connection(source) as src, enginemod.connection(target) as dst:
        for table in (
            models.runs,
            models.functions,
            models.compile_events,
            models.call_stats,
            models.function_totals,
            models.function_cost_buckets,
            models.run_totals,
            models.function_call_totals,
            models.run_time_buckets,
            models.programs,
        ):
            columns = [c for c in table.c if c.name != "id"]
            order = table.c.id if "id" in table.c else list(table.primary_key.columns)[0]
            rows = [dict(r._mapping) for r in src.execute(sa.select(*columns).order_by(order))]
            if rows:
                dst.execute(table.insert(), rows)
        rollup.mark_all_kept_stale(dst)  # a bulk copy: what the store keeps is found again


@pytest.fixture(scope="module")
def seeded_sqlite(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('dashboard') / 'store.db'}"
    errors = _guard.internal_error_count()
    try:
        seed_store(url)
    finally:
        recorder.flush(10)
        current.reset_configuration()
    assert _guard.internal_error_count() == errors, _guard.internal_errors()
    return url


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request, seeded_sqlite) -> Iterator[tuple[str, str]]:
    """(kind, url) of a store holding the seeded runs."""
    if request.param == "sqlite":
        yield "sqlite", seeded_sqlite
        return
    request.getfixturevalue("pg_available")
    url = create_pg_database()
    try:
        copy_store(seeded_sqlite, url)
        yield "postgresql", url
    finally:
        drop_pg_database(url)


def make_app(url: str, **settings):
    return create_app(ServerSettings(store=url, **settings))


@pytest.fixture(scope="module")
def server(store):
    with kit.live_server(make_app(store[1])) as live:
        yield live


@pytest.fixture(scope="module")
def api(server):
    with httpx.Client(base_url=server.url, trust_env=False, timeout=30) as client:

        def get(path: str, **params: Any) -> Any:
            response = client.get("/api/v1" + path, params={k: v for k, v in params.items() if v is not None})
            assert response.status_code == 200, response.text
            return response.json()

        yield get


# ------------------------------------------------------------------ the browser


@pytest.fixture(scope="module")
def chromium():
    """Debian's Chromium driven by Playwright; installed first when missing, never downloaded."""
    setup = subprocess.run(
        ["bash", str(ROOT / "scripts" / "ensure-browser.sh")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHON": sys.executable},
    )
    if setup.returncode != 0:
        pytest.fail(f"scripts/ensure-browser.sh failed:\n{setup.stdout}\n{setup.stderr}")
    importlib.invalidate_caches()
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    try:
        yield browser
    finally:
        browser.close()
        playwright.stop()


class Tab:
    """One browser page with its console errors, page checks and screenshots."""

    def __init__(self, page, base: str, shots: Path):
        self.page = page
        self.base = base
        self.shots = shots
        self.errors: list[str] = []
        self.allowed_errors: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))

    def _console(self, message) -> None:
        if message.type != "error":
            return
        text = f"console error: {message.text} ({message.location.get('url', '')})"
        if not any(allowed in text for allowed in self.allowed_errors):
            self.errors.append(text)

    def open(self, path: str, status: int = 200) -> None:
        response = self.page.goto(self.base + path)
        assert response is not None, (path, response and response.status)
        assert response.status == status, (path, response and response.status)
        self.settle()

    def follow(self, action) -> None:
        """Run ``action`` (a click, a submit) and wait for the page it leads to."""
        with self.page.expect_navigation():
            action()
        self.settle()

    def settle(self) -> None:
        # dashboard.js marks the document when every chart is drawn (or there is none).
        self.page.wait_for_function("() => document.documentElement.hasAttribute('data-charts')", timeout=20000)
        state = self.page.evaluate("() => document.documentElement.getAttribute('data-charts')")
        assert state in ("ready", "none"), f"charts did not draw on {self.page.url}: {state}"
        problems = self.page.evaluate(A11Y_CHECK)
        assert not problems, f"accessibility problems on {self.page.url}: {problems}"

    @property
    def query(self) -> dict[str, str]:
        return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.page.url).query))

    @property
    def path(self) -> str:
        return urllib.parse.urlsplit(self.page.url).path

    def shot(self, name: str) -> Path:
        self.shots.mkdir(parents=True, exist_ok=True)
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        print(f"screenshot: {path}")
        return path

    def text(self, selector: str) -> str:
        return self.page.inner_text(selector).strip()

    def card(self, metric: str) -> dict[str, str]:
        el = self.page.locator(f".card[data-metric='{metric}']")
        return {"value": el.get_attribute("data-value"), "text": el.locator("dd").inner_text().strip()}

    def chart(self, chart_id: str) -> dict[str, Any]:
        return self.page.eval_on_selector(f"#{chart_id}", CHART_STATE)

    def assert_clean(self) -> None:
        assert not self.errors, self.errors


CHART_STATE = """el => ({
  plotly: el.classList.contains('js-plotly-plot'),
  svg: el.querySelectorAll('svg.main-svg').length,
  drawn: el.querySelectorAll('g.trace').length,
  marks: el.querySelectorAll('g.trace path.point, g.trace path').length,
  label: el.getAttribute('aria-label') || '',
  alternative: !!(el.closest('figure') && el.closest('figure').querySelector('details table')),
  traces: (el.data || []).map(t => ({name: t.name || '', type: t.type, x: Array.from(t.x || []),
                                    y: Array.from(t.y || [])})),
})"""

# Checks every page must pass: language, one h1, a main landmark, header cells with a
# scope, a label for every control, sortable headers as buttons, charts with a label and
# a text alternative, and text contrast of at least 4.5:1 (WCAG AA) on its background.
A11Y_CHECK = r"""() => {
  const problems = [];
  if (!document.documentElement.lang) problems.push('html without lang');
  if (document.querySelectorAll('h1').length !== 1) problems.push('h1 count ' + document.querySelectorAll('h1').length);
  if (!document.querySelector('main')) problems.push('no main landmark');
  document.querySelectorAll('thead th').forEach(th => {
    if (th.getAttribute('scope') !== 'col') problems.push('column header without scope: ' + th.textContent.trim());
  });
  document.querySelectorAll('tbody th').forEach(th => {
    if (!['row', 'rowgroup'].includes(th.getAttribute('scope')))
      problems.push('row header without scope: ' + th.textContent.trim());
  });
  document.querySelectorAll('input:not([type=hidden]), select, textarea').forEach(el => {
    const label = (el.id && document.querySelector('label[for="' + el.id + '"]')) || el.getAttribute('aria-label')
      || el.closest('label');
    if (!label) problems.push('control without a label: ' + (el.name || el.id));
  });
  document.querySelectorAll('table.sortable thead th').forEach(th => {
    const button = th.querySelector('button');
    if (!button || button.tabIndex < 0)
      problems.push('sortable header without a focusable button: ' + th.textContent.trim());
  });
  document.querySelectorAll('[data-chart]').forEach(el => {
    if (!el.getAttribute('aria-label')) problems.push('chart without aria-label: ' + el.id);
    const figure = el.closest('figure');
    if (!figure || !figure.querySelector('details table')) problems.push('chart without a text alternative: ' + el.id);
  });
  const rgb = s => { const m = s.match(/rgba?\(([^)]+)\)/); if (!m) return null;
    const p = m[1].split(',').map(Number); return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1}; };
  const lum = c => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
  const background = el => { for (let n = el; n; n = n.parentElement) {
      const c = rgb(getComputedStyle(n).backgroundColor); if (c && c.a > 0.5) return c; }
    return {r: 255, g: 255, b: 255, a: 1}; };
  const seen = new Set();
  document.querySelectorAll('main *, header *, .filters *').forEach(el => {
    if (seen.size > 1500) return;
    const own = Array.from(el.childNodes).some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || el.closest('.js-plotly-plot') || el.closest('.visually-hidden')) return;
    const style = getComputedStyle(el);
    if (style.visibility === 'hidden' || style.display === 'none' || !el.getClientRects().length) return;
    seen.add(el);
    const fg = rgb(style.color), bg = background(el);
    const l1 = lum(fg), l2 = lum(bg);
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    if (ratio < 4.5)
      problems.push('contrast ' + ratio.toFixed(2) + ' for "' + el.textContent.trim().slice(0, 40) + '"');
  });
  return problems;
}"""


@pytest.fixture
def tab(chromium, server, store, request):
    context = chromium.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20000)
    opened = Tab(page, server.url, SCREENSHOTS / store[0])
    try:
        yield opened
        opened.assert_clean()
    finally:
        context.close()


def approx(value: str | None, expected: float | None) -> bool:
    if expected is None:
        return value in (None, "")
    return value not in (None, "") and math.isclose(float(value), expected, rel_tol=1e-9, abs_tol=1e-12)


def function_named(api, qualname: str, **filters: Any) -> dict[str, Any]:
    rows = [r for r in api("/functions", limit=1000, **filters)["items"] if r["qualname"] == qualname]
    assert len(rows) == 1, (qualname, rows)
    return rows[0]


def all_events(api, function_hash: str, **filters: Any) -> list[dict[str, Any]]:
    return api(f"/functions/{function_hash}/events", limit=1000, **filters)["items"]


# ------------------------------------------------------------------ pages


def test_overview_shows_storms_causes_and_cost(tab, api):
    tab.open("/")
    summary = api("/summary")
    assert summary["recompiles"] > 20
    assert summary["causes"][Cause.NEW_SHAPE] > 5

    for metric in ("compiles", "recompiles", "functions", "active_storms"):
        card = tab.card(metric)
        assert int(card["value"]) == summary[metric], metric
        assert card["text"] == f"{summary[metric]:,}", metric
    assert approx(tab.card("compile_seconds")["value"], summary["compile_seconds"])
    assert tab.card("compile_seconds")["text"] == render.fmt_seconds(summary["compile_seconds"])
    assert approx(tab.card("run_seconds_est")["value"], summary["run_seconds_est"])
    assert tab.card("compile_share")["text"] == render.fmt_share(summary["compile_share"])

    # Active storms, each with its fix, as the API lists them.
    storms = api("/storms", active="true")["items"]
    shown = tab.page.eval_on_selector_all(
        "#storms-title ~ .storm-list > li",
        """items => items.map(li => ({
        hash: li.dataset.functionHash, fix: li.querySelector('.fix').innerText}))""",
    )
    assert [s["hash"] for s in shown] == [s["function_hash"] for s in storms]
    for item, storm in zip(shown, storms, strict=False):
        assert item["fix"] == "Fix: " + storm["fix"]

    # Recompiles over time: every recompile counted once, one trace per cause, in its colour.
    chart = tab.chart("chart-recompiles")
    assert chart["plotly"]
    assert chart["svg"]
    assert chart["drawn"] >= 1
    assert chart["alternative"]
    assert sum(sum(t["y"]) for t in chart["traces"]) == summary["recompiles"]
    assert {t["name"] for t in chart["traces"]} <= set(summary["causes"]) - {"first_call"}
    colours = tab.page.eval_on_selector("#chart-recompiles", "el => el.data.map(t => [t.name, t.marker.color])")
    assert all(render.CAUSE_COLORS[name] == colour for name, colour in colours)

    # Causes, and compile time against run time for the costliest functions.
    chart = tab.chart("chart-causes")
    assert chart["plotly"]
    assert chart["drawn"] >= 1
    assert dict(zip(chart["traces"][0]["y"], chart["traces"][0]["x"], strict=False)) == summary["causes"]
    functions = api("/functions", limit=1000)["items"]
    chart = tab.chart("chart-cost")
    assert chart["plotly"]
    assert chart["drawn"] == 2
    compile_trace = next(t for t in chart["traces"] if t["name"] == "compile seconds")
    assert compile_trace["x"] == pytest.approx([f["compile_seconds"] for f in functions[:10]])

    # Top offenders: the functions with the most recompiles, with the API's numbers.
    rows = tab.page.eval_on_selector_all(
        "#offenders tbody tr",
        """rows => rows.map(r => ({
        hash: r.dataset.functionHash, recompiles: r.querySelector('[data-col=recompiles]').innerText,
        seconds: r.querySelector('[data-col=compile_seconds]').dataset.value}))""",
    )
    by_hash = {f["function_hash"]: f for f in functions}
    expected = sorted(
        (f for f in functions if f["recompiles"]),
        key=lambda f: (-f["recompiles"], -f["compile_seconds"], f["qualname"]),
    )[:8]
    assert [r["hash"] for r in rows] == [f["function_hash"] for f in expected]
    for row in rows:
        assert int(row["recompiles"]) == by_hash[row["hash"]]["recompiles"]
        assert approx(row["seconds"], by_hash[row["hash"]]["compile_seconds"])
    tab.shot("overview")


def test_functions_table_sorts_filters_and_pages(tab, api):
    tab.open("/functions")
    functions = api("/functions", limit=1000)["items"]
    rows = read_function_rows(tab)
    assert [r["hash"] for r in rows] == [f["function_hash"] for f in functions]  # API order: compile seconds
    by_hash = {f["function_hash"]: f for f in functions}
    for row in rows:
        f = by_hash[row["hash"]]
        assert row["name"] == render.label(f)
        assert int(row["compiles"]) == f["compiles"]
        assert int(row["recompiles"]) == f["recompiles"]
        assert int(row["calls"].replace(",", "")) == f["calls"]
        assert row["cause"] == (f["dominant_cause"] or "")
        assert approx(row["seconds"], f["compile_seconds"])
        assert approx(row["share"], f["compile_share"])
        assert approx(row["last"], f["last_compile"])
    tab.shot("functions")

    # Sort by compiles with a click, then back the other way with the keyboard.
    tab.follow(lambda: tab.page.click("button[data-sort=compiles]"))
    assert tab.query["sort"] == "-compiles"
    assert tab.page.get_attribute("th:has(button[data-sort=compiles])", "aria-sort") == "descending"
    counts = [int(r["compiles"]) for r in read_function_rows(tab)]
    assert counts == sorted(counts, reverse=True)
    assert len(counts) == len(functions)
    tab.page.focus("button[data-sort=compiles]")
    tab.follow(lambda: tab.page.keyboard.press("Enter"))
    assert tab.query["sort"] == "compiles"
    counts = [int(r["compiles"]) for r in read_function_rows(tab)]
    assert counts == sorted(counts)
    tab.follow(lambda: tab.page.click("button[data-sort=name]"))
    names = [r["name"].lower() for r in read_function_rows(tab)]
    assert names == sorted(names)

    # Filter by name, as alert links do (/functions?q=<short name>); the sort stays.
    tab.page.fill("#function-q", "train_step")
    tab.follow(lambda: tab.page.press("#function-q", "Enter"))
    assert tab.query["q"] == "train_step"
    assert tab.query["sort"] == "name"
    expected = api("/functions", q="train_step")["items"]
    assert len(expected) == 2  # the example's and the scenario's
    assert {r["hash"] for r in read_function_rows(tab)} == {f["function_hash"] for f in expected}
    tab.open("/functions?q=definitely-not-a-function")
    assert "No function matches" in tab.text("main")

    # Pages of five, in the same order as the API's pages.
    tab.open("/functions?per_page=5")
    assert [r["hash"] for r in read_function_rows(tab)] == [f["function_hash"] for f in functions[:5]]
    assert f"Functions 1–5 of {len(functions)}" in tab.text("nav.pager")
    tab.follow(lambda: tab.page.click("nav.pager >> a[rel=next]"))
    assert tab.query == {"per_page": "5", "page": "2"}
    assert [r["hash"] for r in read_function_rows(tab)] == [f["function_hash"] for f in functions[5:10]]


def read_function_rows(tab: Tab) -> list[dict[str, str]]:
    return tab.page.eval_on_selector_all(
        "#functions-table tbody tr",
        """rows => rows.map(r => {
        const cell = name => r.querySelector('[data-col=' + name + ']');
        return {hash: r.dataset.functionHash, name: cell('name').querySelector('a').innerText,
                compiles: cell('compiles').innerText, recompiles: cell('recompiles').innerText,
                calls: cell('calls').innerText, cause: cell('dominant_cause').dataset.value,
                seconds: cell('compile_seconds').dataset.value, share: cell('compile_share').dataset.value,
                last: cell('last_compile').dataset.value};
    })""",
    )


def test_function_detail_explains_each_recompile(tab, api):
    step = function_named(api, "train_step")
    detail = api(f"/functions/{step['function_hash']}")
    events = all_events(api, step["function_hash"])
    compiles = [e for e in events if e["kind"] != Kind.STALE_CAPTURE]

    # From the table to the function, by its link.
    tab.open("/functions")
    tab.follow(lambda: tab.page.click(f"tr[data-function-hash='{step['function_hash']}'] th a"))
    assert tab.path == f"/functions/{step['function_hash']}"
    assert tab.text("h1") == "train_step"
    for metric in ("compiles", "recompiles", "calls"):
        assert int(tab.card(metric)["value"]) == detail[metric]
    assert approx(tab.card("compile_seconds")["value"], detail["compile_seconds"])
    assert approx(tab.card("run_seconds_est")["value"], detail["run_seconds_est"])
    assert detail["dominant_cause"] == Cause.NEW_SHAPE
    assert "new_shape" in tab.text(".card[data-metric=dominant_cause]")

    # The suggested fix is the storm's; the verdict is there.
    assert detail["storms"]
    assert tab.text("#fix") == detail["storms"][0]["fix"]
    assert "pad to powers of two" in tab.text("#fix")
    assert tab.text("#verdict")

    # Charts: the timeline has one marker per trace or compile, the causes and histogram agree.
    timeline = tab.chart("chart-timeline")
    assert timeline["plotly"]
    assert timeline["drawn"] >= 1
    assert timeline["alternative"]
    assert sum(len(t["x"]) for t in timeline["traces"]) == len(compiles)
    assert {t["name"]: len(t["x"]) for t in timeline["traces"]} == detail["causes"]
    chart = tab.chart("chart-causes")
    assert dict(zip(chart["traces"][0]["y"], chart["traces"][0]["x"], strict=False)) == detail["causes"]
    histogram = tab.chart("chart-histogram")
    assert histogram["plotly"]
    assert histogram["drawn"] >= 1
    assert len(histogram["traces"][0]["x"]) == detail["compiles"]

    # Every event, newest first, and each recompile's diff as the API has it.
    shown = read_events(tab)
    assert [e["id"] for e in shown] == [e["event_id"] for e in reversed(compiles)][:20]
    api_by_id = {e["event_id"]: e for e in compiles}
    diffs = 0
    for item in shown:
        event = api_by_id[item["id"]]
        assert item["cause"] == event["cause"]
        assert item["diff"] == [
            {"path": d["path"], "change": d["change"], "before": d["before"] or "", "after": d["after"] or ""}
            for d in event["diff"]
        ]
        diffs += len(event["diff"])
    assert diffs >= 8

    # A shape change reads as a before/after table: the shapes differ, the dtype is the same.
    shape_event = next(e for e in reversed(compiles) if e["cause"] == Cause.NEW_SHAPE)
    entry = shape_event["diff"][0]
    body = tab.page.locator(f"li[data-event-id='{shape_event['event_id']}'] tbody.diff-entry").first
    before = body.locator("tr.before td.shape").inner_text()
    after = body.locator("tr.after td.shape").inner_text()
    assert before.startswith(render.parse_described(entry["before"])["shape"])
    assert after.startswith(render.parse_described(entry["after"])["shape"])
    assert body.locator("tr.after td.shape.changed").count() == 1
    assert body.locator("tr.after td.dtype").inner_text() == render.parse_described(entry["after"])["dtype"]
    assert body.locator("tr.after td.dtype.changed").count() == 0
    # The weak-type flip of `lr` marks the weak type column.
    weak = next(e for e in compiles if e["cause"] == Cause.WEAK_TYPE)
    row = tab.page.locator(f"li[data-event-id='{weak['event_id']}'] tbody.diff-entry[data-path='lr']")
    assert row.locator("tr.before td.weak_type").inner_text().startswith("weak")
    assert row.locator("tr.after td.weak_type.changed").inner_text().startswith("no")

    # Call sites: every one the events name.
    sites = tab.page.eval_on_selector_all("#call-sites tbody th", "cells => cells.map(c => c.innerText)")
    assert set(sites) == {e["call_site"] for e in compiles}
    tab.shot("function-train_step")


def read_events(tab: Tab) -> list[dict[str, Any]]:
    return tab.page.eval_on_selector_all(
        "#events > li.event",
        """items => items.map(li => ({
        id: li.dataset.eventId, cause: li.dataset.cause,
        diff: Array.from(li.querySelectorAll('tbody.diff-entry')).map(b => ({
            path: b.dataset.path, change: b.dataset.change, before: b.dataset.before, after: b.dataset.after})),
    }))""",
    )


def test_function_events_page_with_filters(tab, api, store):
    lam = function_named(api, "lambda_in_loop.<locals>.<lambda>")
    run_id = api("/functions/" + lam["function_hash"] + "/events", limit=1)["items"][0]["run_id"]
    events = list(reversed(all_events(api, lam["function_hash"], run_id=run_id)))
    assert len(events) == 20
    tab.open(f"/functions/{lam['function_hash']}?run_id={run_id}&per_page=6")
    assert [e["id"] for e in read_events(tab)] == [e["event_id"] for e in events[:6]]
    assert "Events 1–6 of 20" in tab.text("#events-title ~ nav.pager")
    tab.follow(lambda: tab.page.locator("nav.pager a[rel=next]").first.click())
    assert tab.query == {"run_id": run_id, "per_page": "6", "page": "2"}
    assert [e["id"] for e in read_events(tab)] == [e["event_id"] for e in events[6:12]]
    # The fix comes from the storm: hoist the jit out of the loop, at the call site.
    fix = api(f"/functions/{lam['function_hash']}", run_id=run_id)["storms"][0]["fix"]
    assert tab.text("#fix") == fix
    assert "scenarios.py" in fix
    # The verdict is the analysis' own: 20 compiles for 20 calls do not pay off.
    with enginemod.connection(store[1]) as conn:
        row = storequeries.function_report(conn, Filters(run_id=run_id), function_hashes=[lam["function_hash"]])[0]
        verdict = verdicts.verdicts(conn, [row], Filters(run_id=run_id))[lam["function_hash"]]
    assert verdict.few_calls
    assert verdict.text.startswith("compiled 20 time(s) for 20 call(s)")
    assert tab.text("#verdict") == verdict.text[0].upper() + verdict.text[1:] + "."
    # The breadcrumb back to the table keeps the run.
    tab.follow(lambda: tab.page.click("nav.breadcrumbs a"))
    assert tab.path == "/functions"
    assert tab.query == {"run_id": run_id}


def test_stale_captures_and_unknown_function(tab, api):
    shifted = function_named(api, "seed_store.<locals>.shifted")
    stale = [e for e in all_events(api, shifted["function_hash"]) if e["kind"] == Kind.STALE_CAPTURE]
    assert len(stale) == 1
    assert shifted["stale_captures"] == 1
    tab.open("/functions?q=shifted")
    assert "stale capture" in tab.text(f"tr[data-function-hash='{shifted['function_hash']}']")
    tab.open(f"/functions/{shifted['function_hash']}")
    rows = tab.page.eval_on_selector_all(
        "#stale-captures tbody tr",
        """rows => rows.map(r => ({
        id: r.dataset.eventId, cells: Array.from(r.children).map(c => c.innerText)}))""",
    )
    entry = stale[0]["diff"][0]
    assert rows == [
        {
            "id": stale[0]["event_id"],
            "cells": [
                render.fmt_time(stale[0]["timestamp"]),
                entry["path"],
                entry["before"],
                entry["after"],
                render.short_site(stale[0]["call_site"]),
            ],
        }
    ]
    assert entry["path"] == "BIAS"
    assert (entry["before"], entry["after"]) == ("0.0", "1.0")

    # An unknown hash is a 404 page that points back to the functions (Chromium logs the 404).
    tab.allowed_errors.append("status of 404")
    tab.open("/functions/0123456789abcdef0123", status=404)
    assert tab.text("h1") == "No such function"
    assert "0123456789abcdef0123" in tab.text("main")
    tab.shot("not-found")


def test_run_filter_is_carried_through_links(tab, api):
    runs = api("/runs")["items"]
    assert [r["run_name"] for r in runs].count("pitfalls") == 1
    pitfalls = next(r for r in runs if r["run_name"] == "pitfalls")
    everything = api("/summary")

    tab.open("/")
    tab.page.select_option("#filter-run", pitfalls["run_id"])
    tab.follow(lambda: tab.page.click("#filter-form button[type=submit]"))
    assert tab.query == {"run_id": pitfalls["run_id"]}  # empty fields stay out of the URL
    summary = api("/summary", run_id=pitfalls["run_id"])
    assert summary["compiles"] < everything["compiles"]
    for metric in ("compiles", "recompiles", "functions", "active_storms"):
        assert int(tab.card(metric)["value"]) == summary[metric], metric
    assert "pitfalls" in tab.text(".scope")
    recompiles = tab.chart("chart-recompiles")
    assert sum(sum(t["y"]) for t in recompiles["traces"]) == summary["recompiles"]
    tab.shot("overview-run")

    # Every navigation link keeps the run; so does Refresh.
    tab.follow(lambda: tab.page.click("header nav >> text=Functions"))
    assert tab.path == "/functions"
    assert tab.query == {"run_id": pitfalls["run_id"]}
    functions = api("/functions", run_id=pitfalls["run_id"])["items"]
    rows = read_function_rows(tab)
    assert [r["hash"] for r in rows] == [f["function_hash"] for f in functions]
    assert [int(r["compiles"]) for r in rows] == [f["compiles"] for f in functions]
    tab.follow(lambda: tab.page.click("#refresh"))
    assert tab.path == "/functions"
    assert tab.query == {"run_id": pitfalls["run_id"]}
    tab.follow(lambda: tab.page.click("#functions-table tbody tr:first-child th a"))
    assert tab.query == {"run_id": pitfalls["run_id"]}
    detail = api(f"/functions/{functions[0]['function_hash']}", run_id=pitfalls["run_id"])
    assert int(tab.card("compiles")["value"]) == detail["compiles"]
    tab.follow(lambda: tab.page.click("header nav >> text=Storms"))
    assert tab.path == "/storms"
    assert tab.query == {"run_id": pitfalls["run_id"]}
    storms = api("/storms", run_id=pitfalls["run_id"])["items"]
    assert tab.page.locator("#storms > li").count() == len(storms)

    # The runs page: every run with the API's counts; a run's link filters the overview.
    tab.follow(lambda: tab.page.click("header nav >> text=Runs"))
    tab.follow(lambda: tab.page.click("text=Clear filters"))
    assert tab.path == "/runs"
    assert tab.query == {}
    shown = tab.page.eval_on_selector_all(
        "#runs-table tbody tr",
        """rows => rows.map(r => ({
        id: r.dataset.runId, text: r.innerText, events: r.querySelector('[data-col=events]').innerText,
        compiles: r.querySelector('[data-col=compiles]').innerText,
        seconds: r.querySelector('[data-col=compile_seconds]').dataset.value}))""",
    )
    assert [r["id"] for r in shown] == [r["run_id"] for r in runs]
    for row, run in zip(shown, runs, strict=False):
        assert int(row["events"]) == run["events"]
        assert int(row["compiles"]) == run["compiles"]
        assert approx(row["seconds"], run["compile_seconds"])
        for value in (
            run["run_name"],
            run["host"],
            str(run["pid"]),
            run["jax_version"],
            run["jaxlib_version"],
            *run["devices"],
        ):
            assert value in row["text"]
    tab.shot("runs")
    train = next(r for r in runs if r["run_name"] == "train-storms")
    tab.follow(lambda: tab.page.click(f"tr[data-run-id='{train['run_id']}'] a.run-link"))
    assert tab.path == "/"
    assert tab.query == {"run_id": train["run_id"]}
    assert int(tab.card("compiles")["value"]) == api("/summary", run_id=train["run_id"])["compiles"]


def test_time_filter(tab, api):
    pitfalls = next(r for r in api("/runs")["items"] if r["run_name"] == "pitfalls")
    first = min(f["first_compile"] for f in api("/functions", run_id=pitfalls["run_id"])["items"])
    first_time = render.utc(first)
    assert first_time is not None
    typed = first_time.strftime("%Y-%m-%dT%H:%M:%S")
    tab.open("/functions")
    tab.page.fill("#filter-since", typed)
    tab.follow(lambda: tab.page.click("#filter-form button[type=submit]"))
    assert list(tab.query) == ["since"]
    since = tab.query["since"]  # as the browser wrote it (it may drop ":00" seconds)
    assert parse_time("since", since) == math.floor(first)
    expected = api("/functions", since=since)["items"]
    assert 0 < len(expected) < len(api("/functions")["items"])
    assert [r["hash"] for r in read_function_rows(tab)] == [f["function_hash"] for f in expected]
    # The overview with the same range, by the nav link.
    tab.follow(lambda: tab.page.click("header nav >> text=Overview"))
    assert tab.query == {"since": since}
    summary = api("/summary", since=since)
    assert int(tab.card("compiles")["value"]) == summary["compiles"]
    assert parse_time("since", tab.page.input_value("#filter-since")) == math.floor(first)
    # A range with nothing in it says so, and offers to clear the filters.
    tab.open("/?since=2100-01-01T00:00:00Z")
    assert "Nothing matches these filters" in tab.text("main")
    tab.follow(lambda: tab.page.click(".empty >> text=Clear the filters"))
    assert tab.query == {}
    assert int(tab.card("compiles")["value"]) == api("/summary")["compiles"]
    # A time that is not one is named, and ignored.
    tab.open("/?since=yesterday")
    assert "since='yesterday' is not a time" in tab.text("[role=alert]")


def test_storms_page(tab, api):
    storms = api("/storms")["items"]
    assert storms
    ordered = sorted(storms, key=lambda s: (not s["active"], -s["end"]))
    tab.open("/storms")
    shown = tab.page.eval_on_selector_all(
        "#storms > li",
        """items => items.map(li => ({
        hash: li.dataset.functionHash, active: li.dataset.active === 'true',
        compiles: li.querySelector('.storm-compiles').innerText, fix: li.querySelector('.fix').innerText,
        href: li.querySelector('a.storm-name').getAttribute('href')}))""",
    )
    assert [(s["hash"], s["active"], int(s["compiles"])) for s in shown] == [
        (s["function_hash"], s["active"], s["compiles"]) for s in ordered
    ]
    assert [s["fix"] for s in shown] == ["Fix: " + s["fix"] for s in ordered]
    assert [s["active"] for s in shown] == sorted((s["active"] for s in shown), reverse=True)  # active first
    tab.shot("storms")
    tab.follow(lambda: tab.page.click("#storms > li:first-child a.storm-name"))
    assert tab.path == f"/functions/{ordered[0]['function_hash']}"
    assert tab.text("h1") == ordered[0]["short_name"]


def test_assets_come_from_the_installed_plotly(server):
    with httpx.Client(base_url=server.url, trust_env=False) as client:
        page = client.get("/").text
        src = next(part.split('"')[0] for part in page.split('<script src="')[1:] if "plotly" in part)
        assert src.startswith(render.PLOTLY_PATH + "?v=")
        plotly_spec = importlib.util.find_spec("plotly")
        assert plotly_spec is not None
        assert plotly_spec.origin is not None
        installed = Path(plotly_spec.origin).parent / "package_data" / "plotly.min.js"
        plain = client.get(src, headers={"Accept-Encoding": "identity"})
        assert plain.status_code == 200
        assert plain.content == installed.read_bytes()
        assert "immutable" in plain.headers["cache-control"]
        zipped = client.get(src, headers={"Accept-Encoding": "gzip"})
        assert zipped.headers["content-encoding"] == "gzip"
        assert zipped.content == installed.read_bytes()
        again = client.get(src, headers={"If-None-Match": plain.headers["etag"]})
        assert again.status_code == 304
        assert client.get("/static/dashboard.css").headers["content-type"].startswith("text/css")
        assert client.get("/static/../settings.py").status_code == 404
    # Served from the package, never copied into the repository.
    copies = []
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if d not in (".venv", ".venv-newest", ".git", "node_modules")]
        copies += [os.path.join(folder, f) for f in files if f.startswith("plotly") and f.endswith(".js")]
    assert copies == []


# ------------------------------------------------------------------ empty stores and the read token


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def empty_store(request, tmp_path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    request.getfixturevalue("pg_available")
    url = create_pg_database()
    try:
        # The local server trusts loopback, so a password here is ignored by it, but
        # must never reach the page.
        yield url.replace("postgres@", "postgres:hunter2-not-shown@", 1)
    finally:
        drop_pg_database(url)


def test_empty_store_says_what_to_do(chromium, empty_store, tmp_path):
    with kit.live_server(make_app(empty_store)) as live:
        context = chromium.new_context(viewport={"width": 1360, "height": 900})
        tab = Tab(context.new_page(), live.url, SCREENSHOTS / empty_store.split(":", 1)[0].split("+")[0])
        try:
            tab.open("/")
            shown = redact_url(empty_store)
            assert "No events yet" in tab.text("main")
            assert f"CACHEWATCH_STORE={shown}" in tab.text("main")
            assert "hunter2" not in tab.page.content()
            tab.shot("empty")
            for path in ("/functions", "/runs", "/storms"):
                tab.open(path)
                assert "No events yet" in tab.text("main"), path
            tab.assert_clean()
        finally:
            context.close()


def test_short_run_shows_a_compile_share(chromium, sqlite_url, use_store):
    # One compile and three calls at the default sampling (1 call in 100): the first
    # cache hit after the compile is timed, so the overview and the function page show
    # a compile share, not "not sampled".
    import jax.numpy as jnp

    use_store(sqlite_url)

    @cachewatch.jit
    def brief(x):
        return jnp.cos(x) + 1

    for _ in range(3):
        brief(jnp.ones(8))
    assert recorder.flush(30)
    with kit.live_server(make_app(sqlite_url)) as live:
        summary = httpx.get(live.url + "/api/v1/summary", trust_env=False).json()
        (row,) = [
            r
            for r in httpx.get(live.url + "/api/v1/functions", trust_env=False).json()["items"]
            if r["name"] == "brief"
        ]
        context = chromium.new_context(viewport={"width": 1360, "height": 900})
        tab = Tab(context.new_page(), live.url, SCREENSHOTS / "short-run")
        try:
            tab.open("/")
            share = tab.card("compile_share")
            assert share["text"].endswith("%")
            assert share["text"] == render.fmt_share(summary["compile_share"])
            assert approx(share["value"], summary["compile_share"])
            assert tab.card("run_seconds_est")["text"] != "not sampled"
            tab.open(f"/functions/{row['function_hash']}")
            assert tab.card("compile_share")["text"] == render.fmt_share(row["compile_share"])
            assert f"compile share {render.fmt_share(row['compile_share'])}" in tab.text("#verdict")
            tab.shot("short-run")
            tab.assert_clean()
        finally:
            context.close()


def test_redact_url():
    assert redact_url("postgresql://cw:s3cret@db:5432/cw") == "postgresql://cw:***@db:5432/cw"
    assert redact_url("sqlite:////data/cachewatch.db") == "sqlite:////data/cachewatch.db"


def test_read_token_login(chromium, seeded_sqlite, caplog):
    token = kit.READ_TOKEN
    with kit.live_server(make_app(seeded_sqlite, read_token=token)) as live:
        with httpx.Client(base_url=live.url, trust_env=False) as client:
            refused = client.get("/functions?run_id=abc")
            assert refused.status_code == 303
            assert refused.headers["location"] == "/login?next=%2Ffunctions%3Frun_id%3Dabc"
            assert client.get("/", headers=kit.auth(token)).status_code == 200
            assert client.get("/", headers=kit.auth("x" * len(token))).status_code == 303
            assert client.get("/api/v1/summary").status_code == 401  # the API still wants its bearer
            assert (
                client.post(
                    "/login", data={"token": token, "next": "https://elsewhere.example/"}, follow_redirects=False
                ).headers["location"]
                == "/"
            )

        context = chromium.new_context(viewport={"width": 1360, "height": 900})
        tab = Tab(context.new_page(), live.url, SCREENSHOTS / "sqlite")
        try:
            tab.open("/storms")
            assert tab.path == "/login"
            assert tab.query == {"next": "/storms"}
            tab.shot("login")
            tab.allowed_errors.append("status of 401")
            tab.page.fill("#token", "not-the-token-at-all")
            tab.follow(lambda: tab.page.click("form[action='/login'] button"))
            assert tab.path == "/login"
            assert "That token is not right" in tab.text("[role=alert]")
            tab.page.fill("#token", token)
            tab.follow(lambda: tab.page.click("form[action='/login'] button"))
            assert tab.path == "/storms"
            assert tab.text("h1") == "Storms"
            cookie = next(c for c in context.cookies() if c["name"] == "cachewatch_dashboard")
            assert cookie["httpOnly"]
            assert cookie["value"] != token
            assert token not in cookie["value"]
            assert token not in tab.page.content()
            tab.follow(lambda: tab.page.click("text=Sign out"))
            assert tab.path == "/login"
            tab.open("/runs")
            assert tab.path == "/login"
            tab.assert_clean()
        finally:
            context.close()
    assert token not in caplog.text


def test_function_page_shows_what_was_compiled_and_the_program_diff(tab, api):
    # A recompile that produced the program compiled before: a weak-type flip.
    h = function_named(api, "weak_type_flip.<locals>.h")
    tab.open(f"/functions/{h['function_hash']}")
    section = tab.page.locator("#program-diff")
    before, after = section.get_attribute("data-before"), section.get_attribute("data-after")
    change = api(f"/events/{after}/diff", against=before)
    assert section.get_attribute("data-same-program") == "true"
    assert change["same_program"]
    assert "Same optimised program as before" in tab.text("#same-program")
    shown = tab.page.eval_on_selector_all(
        "#diff-primitives tbody tr", "rows => rows.map(r => [r.dataset.name, +r.dataset.before, +r.dataset.after])"
    )
    assert shown == [[r["name"], r["before"], r["after"]] for r in change["eqns_by_primitive"]]
    wasted = tab.page.eval_on_selector_all(
        "#identical-recompiles li", "items => items.map(i => [i.dataset.cause, +i.dataset.recompiles])"
    )
    assert sorted(wasted) == [["new_structure", 1], ["weak_type", 1]]
    tab.shot("function-program-identical")

    # A recompile for a new batch shape: another program, its jaxpr diff marked line by line.
    step = function_named(api, "train_step")
    compiles = sorted(
        (e for e in all_events(api, step["function_hash"]) if e["compiled"] and e["program_fingerprint"]),
        key=lambda e: e["timestamp"],
    )
    before, after = next(
        (a["event_id"], b["event_id"])
        for a, b in zip(compiles, compiles[1:], strict=False)
        if b["cause"] == "new_shape" and a["program_fingerprint"] != b["program_fingerprint"]
    )
    tab.open(f"/functions/{step['function_hash']}?diff={after}&against={before}")
    section = tab.page.locator("#program-diff")
    assert (section.get_attribute("data-before"), section.get_attribute("data-after")) == (before, after)
    change = api(f"/events/{after}/diff", against=before)
    assert section.get_attribute("data-same-program") == "false"
    assert change["cause"] == "new_shape"
    added = tab.page.eval_on_selector_all("#jaxpr-diff .diff-add", "els => els.map(e => e.textContent)")
    removed = tab.page.eval_on_selector_all("#jaxpr-diff .diff-del", "els => els.map(e => e.textContent)")
    assert added == [line for line in change["jaxpr_diff"] if line.startswith("+") and not line.startswith("+++")]
    assert removed == [line for line in change["jaxpr_diff"] if line.startswith("-") and not line.startswith("---")]
    assert added
    assert removed
    colours = tab.page.evaluate(
        "() => ['.diff-add', '.diff-del'].map(s => getComputedStyle(document.querySelector('#jaxpr-diff ' + s)).backgroundColor)"
    )
    assert colours[0] != colours[1]
    figures = {
        name: tab.page.locator(f"#diff-xla tr[data-name='{name}']").get_attribute("data-after")
        for name in ("jaxpr_eqns", "hlo_ops")
    }
    assert figures == {name: str(change["xla"][name]["after"]) for name in figures}
    lines = tab.page.locator("#program-lines tbody tr")
    assert lines.count() >= 1
    # Program size against compile seconds: the function's latest compiles, oldest first,
    # as the API gives them (seconds: trace + lower + compile).
    growth = tab.page.eval_on_selector_all(
        "#program-growth tbody tr", "rows => rows.map(r => [r.dataset.event, +r.dataset.eqns, +r.dataset.seconds])"
    )
    sized = sorted(
        (e for e in all_events(api, step["function_hash"]) if e["compiled"] and e["jaxpr_eqns"] is not None),
        key=lambda e: e["timestamp"],
    )[-pages.GROWTH_SHOWN :]
    assert len(growth) > 1
    assert [g[:2] for g in growth] == [[e["event_id"], e["jaxpr_eqns"]] for e in sized]
    assert [g[2] for g in growth] == pytest.approx(
        [(e["trace_seconds"] or 0) + (e["lower_seconds"] or 0) + (e["compile_seconds"] or 0) for e in sized]
    )
    tab.shot("function-program-diff")
