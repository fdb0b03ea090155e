"""The dashboard's HTML pages: overview, functions, one function, runs, storms, login.

Every page reads the filters (``run_id``, ``since``, ``until``) from the query string
and carries them in every link it renders, so a URL is a shareable view. Pages are
rendered on the server from the same queries as the JSON API.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute

from cachewatch.cache import cache_reads, cache_view
from cachewatch.comparison import side_by_side
from cachewatch.core import jaxcompat
from cachewatch.core.events import OP_BY_OP_MODULE, FunctionInfo, Kind
from cachewatch.fleet import divergence
from cachewatch.payoff.results import Verdict
from cachewatch.programs import program_texts
from cachewatch.store import charts as chartreads
from cachewatch.store import engine as enginemod
from cachewatch.store import listings, queries
from cachewatch.store.charts import TimelinePoint
from cachewatch.store.columns import EventRow, Filters, FunctionReport
from cachewatch.store.runs import RunNotFound
from cachewatch.storms import diagnosis, findings
from cachewatch.views import compose
from cachewatch.whatif import policies, prices, whatif_reads

from ..deps import Connection, parse_time
from . import auth, picture_views, render

logger = logging.getLogger("cachewatch.server")

FUNCTIONS_PER_PAGE = 50
EVENTS_PER_PAGE = 20
RUNS_PER_PAGE = 50
STORMS_PER_PAGE = 50
MIN_PER_PAGE = 1
MAX_PER_PAGE = 500
TOP_OFFENDERS = 8
OVERVIEW_FINDINGS = 3
STALE_SHOWN = 50
GROWTH_SHOWN = 20  # compiles in the function page's program size against compile seconds table
COST_CHART_FUNCTIONS = 10

_SORT_LABELS = {
    "name": "Function",
    "compiles": "Compiles",
    "recompiles": "Recompiles",
    "dominant_cause": "Dominant cause",
    "compile_seconds": "Compile time",
    "calls": "Calls",
    "compile_share": "Compile share",
    "last_compile": "Last compile",
}
SORT_KEYS = {key: _SORT_LABELS[key] for key in listings.SORT_KEYS}  # the read module's sort keys, labelled
DEFAULT_SORT = "-compile_seconds"

_env = render.make_environment()

# Headers for every page: pages hold store data, so no caching by shared proxies, and
# nothing but this site's own scripts may run (plotly.js adds its own <style> elements).
_PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


# Asks a page for its form in a static report (server/static_report.py): no filter form and
# no sign-out, which need a server.
STATIC_HEADER = "x-cachewatch-static-report"


class PageRoute(APIRoute):
    """A dashboard page: asks for the token first (by redirecting to /login), and turns
    an unreachable store into a page that says so rather than a JSON error."""

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            if not auth.allowed(request):
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse("/login?" + urllib.parse.urlencode({"next": target}), status_code=303)
            try:
                return await handler(request)
            except enginemod.StoreError as exc:
                logger.warning("dashboard: store error on %s: %s", request.url.path, exc)
                return page(
                    request,
                    "error.html",
                    status=503,
                    title="Store unavailable",
                    view=None,
                    message=f"The store is unavailable: {exc}. Try again in a moment.",
                )

        return guarded


router = APIRouter(route_class=PageRoute, include_in_schema=False)


# ------------------------------------------------------------------ the view: filters in the URL


@dataclasses.dataclass
class View:
    """The filters of this request, and links that keep them."""

    path: str
    query: dict[str, str]
    run_id: str | None
    since: str | None
    until: str | None
    filters: Filters
    problems: list[str]
    runs: list[listings.RunChoice] = dataclasses.field(default_factory=list)
    run: listings.RunChoice | None = None

    FILTER_KEYS = ("run_id", "since", "until")

    @classmethod
    def from_request(cls, request: Request) -> View:
        query = {k: v for k, v in request.query_params.items() if v != ""}
        problems = []
        run_id = query.get("run_id")
        if run_id is not None and len(run_id) > 32:
            problems.append("run_id is too long to be a run id; it was ignored.")
            run_id = None
        times: dict[str, str | None] = {}
        parsed: dict[str, float | None] = {}
        for name in ("since", "until"):
            raw = query.get(name)
            try:
                parsed[name] = parse_time(name, raw)
                times[name] = raw
            except RequestValidationError:
                problems.append(
                    f"{name}={raw!r} is not a time; use epoch seconds or ISO 8601 such as "
                    "2026-11-22T01:00:00Z. It was ignored."
                )
                parsed[name], times[name] = None, None
        for key in cls.FILTER_KEYS:
            query.pop(key, None)
        for key, value in (("run_id", run_id), ("since", times["since"]), ("until", times["until"])):
            if value is not None:
                query[key] = value
        return cls(
            path=request.url.path,
            query=query,
            run_id=run_id,
            since=times["since"],
            until=times["until"],
            filters=Filters(run_id=run_id, since=parsed["since"], until=parsed["until"]),
            problems=problems,
        )

    @property
    def filter_params(self) -> dict[str, str]:
        return {k: self.query[k] for k in self.FILTER_KEYS if k in self.query}

    @property
    def filtered(self) -> bool:
        return bool(self.filter_params)

    def link(self, path: str, **params: Any) -> str:
        """``path`` with this view's filters and ``params`` (None drops a parameter)."""
        merged: dict[str, Any] = dict(self.filter_params)
        merged.update(params)
        clean = {k: v for k, v in merged.items() if v is not None and v != ""}
        return path + ("?" + urllib.parse.urlencode(clean) if clean else "")

    def here(self, **params: Any) -> str:
        """This page with the same query string, changed by ``params``."""
        merged: dict[str, Any] = dict(self.query)
        merged.update(params)
        clean = {k: v for k, v in merged.items() if v is not None and v != ""}
        return self.path + ("?" + urllib.parse.urlencode(clean) if clean else "")

    def without_filters(self) -> str:
        return self.here(run_id=None, since=None, until=None, page=None)

    def input_time(self, name: str) -> str:
        """The filter as a datetime-local value (UTC), whatever form the URL used."""
        seconds = getattr(self.filters, name)
        if seconds is None:
            return ""
        when = render.utc(seconds)
        return "" if when is None else when.strftime("%Y-%m-%dT%H:%M:%S")


def page(request: Request, template: str, *, status: int = 200, view: View | None, **context: Any) -> HTMLResponse:
    settings = request.app.state.settings
    html = _env.get_template(template).render(
        request_path=request.url.path,
        view=view,
        rendered_at=time.time(),
        login_enabled=settings.read_secret() is not None,
        static_report=request.headers.get(STATIC_HEADER) == "1",
        **context,
    )
    return HTMLResponse(html, status_code=status, headers=_PAGE_HEADERS)


def _open_view(request: Request, conn) -> View:
    view = View.from_request(request)
    view.runs = listings.run_choices(conn)
    if view.run_id:
        view.run = next((r for r in view.runs if r["run_id"] == view.run_id), None) or listings.run_info(
            conn, view.run_id
        )
        if view.run is None:
            view.problems.append(f"There is no run {view.run_id!r} in the store.")
    return view


def _page_number(request: Request) -> int:
    try:
        number = int(request.query_params.get("page", "1"))
    except ValueError:
        return 1
    return max(1, min(number, 1_000_000))


def _per_page(request: Request, default: int) -> int:
    """Rows per page: ``per_page`` from the URL (kept in every page link), within bounds."""
    try:
        wanted = int(request.query_params.get("per_page", default))
    except ValueError:
        return default
    return max(MIN_PER_PAGE, min(wanted, MAX_PER_PAGE))


def _pager(view: View, number: int, per_page: int, total: int) -> dict[str, Any]:
    pages = max(1, math.ceil(total / per_page))
    number = min(number, pages)
    return {
        "number": number,
        "pages": pages,
        "total": total,
        "per_page": per_page,
        "first": (number - 1) * per_page + 1 if total else 0,
        "last": min(total, number * per_page),
        "offset": (number - 1) * per_page,
        "prev": view.here(page=number - 1 if number > 2 else None) if number > 1 else None,
        "next": view.here(page=number + 1) if number < pages else None,
    }


def _empty_state(request: Request, conn, view: View) -> dict[str, Any] | None:
    """What to tell a person when there is nothing to show, and what to do about it."""
    if chartreads.has_events(conn):
        if view.filtered:
            return {"kind": "filtered", "reset_url": view.without_filters()}
        return None
    return {"kind": "empty", "store": enginemod.redact_url(request.app.state.settings.store)}


def _storm_rule(request: Request) -> diagnosis.StormRule:
    return diagnosis.rule_of(request.app.state.settings)


# ------------------------------------------------------------------ pages


@router.get("/", response_class=HTMLResponse)
def overview(request: Request, conn: Connection) -> HTMLResponse:
    view = _open_view(request, conn)
    storms = diagnosis.storms(conn, view.filters, active_only=True, **_storm_rule(request))
    summary = compose.summary(conn, view.filters, _storm_rule(request), active=storms)
    report = queries.function_report(conn, view.filters)
    over_time = chartreads.compiles_over_time(conn, view.filters)
    empty = _empty_state(request, conn, view) if not summary.events else None
    offenders = sorted(
        (r for r in report if r["recompiles"]), key=lambda r: (-r["recompiles"], -r["compile_seconds"], r["qualname"])
    )[:TOP_OFFENDERS]
    costly = report[:COST_CHART_FUNCTIONS]
    charts = {}
    if over_time["rows"]:
        charts["recompiles"] = render.recompiles_chart(over_time)
    if costly:
        charts["cost"] = render.cost_chart(costly)
    if summary.causes:
        charts["causes"] = render.causes_chart(summary.causes)
    pictured, leading = picture_views.NONE, []
    if not empty:
        # The findings lead the page and colour the scatter: the storms are read once for both.
        found = findings.find_with_storms(conn, view.filters, **_storm_rule(request))
        leading = found.findings
        run_id = view.run_id if view.run is not None else None
        pictured = picture_views.overview(conn, view.filters, run_id, report, found, _storm_rule(request))
    charts.update(pictured.charts)
    return page(
        request,
        "overview.html",
        view=view,
        title="Overview",
        summary=summary,
        offenders=offenders,
        costly=costly,
        storms=storms,
        over_time=over_time,
        charts=charts,
        empty=empty,
        storm_hashes={s.function_hash for s in storms},
        payoff=pictured.payoff,
        timeline=pictured.timeline,
        findings=leading[:OVERVIEW_FINDINGS],
        findings_total=len(leading),
    )


@router.get("/functions", response_class=HTMLResponse)
def functions(request: Request, conn: Connection) -> HTMLResponse:
    q = (request.query_params.get("q") or "").strip()[:200]
    cause = request.query_params.get("cause") or None
    sort = request.query_params.get("sort") or DEFAULT_SORT
    if sort.lstrip("-") not in SORT_KEYS:
        sort = DEFAULT_SORT
    number, per_page = _page_number(request), _per_page(request, FUNCTIONS_PER_PAGE)
    view = _open_view(request, conn)
    listing = functools.partial(listings.function_page, conn, view.filters, q=q, cause=cause, sort=sort, limit=per_page)
    shown, total = listing(offset=(number - 1) * per_page)
    pager = _pager(view, number, per_page, total)
    if pager["number"] != number:  # past the last page: show the last
        shown, total = listing(offset=pager["offset"])
    # Which functions storm is all the listing marks.
    storms = diagnosis.storms(conn, view.filters, active_only=True, described=False, **_storm_rule(request))
    all_causes = render.cause_order(listings.causes_present(conn, view.filters))
    empty = _empty_state(request, conn, view) if not listings.has_functions(conn, view.filters) else None
    return page(
        request,
        "functions.html",
        view=view,
        title="Functions",
        rows=shown,
        pager=pager,
        q=q,
        cause=cause,
        sort=sort,
        sort_keys=SORT_KEYS,
        all_causes=all_causes,
        empty=empty,
        storm_hashes={s.function_hash for s in storms},
    )


def _verdict_text(row: FunctionReport, verdict: Verdict | None) -> str:
    if row.get("module") == OP_BY_OP_MODULE:
        return "These are JAX's own op-by-op compiles of un-jitted code: there is no jit to weigh."
    if verdict is None or not row["compiles"]:
        return "No compiles in this view, so there is nothing to weigh."
    # The analysis' own sentence: from the numbers the cards show, so they agree.
    text = verdict.text
    return text[0].upper() + text[1:] + "."


@router.get("/functions/{function_hash}", response_class=HTMLResponse)
def function_detail(request: Request, conn: Connection, function_hash: str) -> HTMLResponse:
    view = _open_view(request, conn)
    detail = (
        compose.function_detail(
            conn, function_hash, view.filters, _storm_rule(request), storms_limit=compose.STORMS_SHOWN
        )
        if len(function_hash) <= 40
        else None
    )
    if detail is None:
        return page(
            request, "not_found.html", status=404, view=view, title="No such function", function_hash=function_hash
        )
    row, storms, verdict = detail.report, detail.storms, detail.verdict
    fix = compose.suggested_fix(conn, detail, view.filters, render.label(row))
    points = chartreads.timeline(conn, function_hash, view.filters)
    sites, over_time = chartreads.function_charts(conn, function_hash, view.filters)
    # The call sites hold every trace and compile of the view once: their sum is the pager's count.
    pager, events = _compile_events_page(request, conn, function_hash, view, sum(site["events"] for site in sites))
    program = _program_view(conn, request, function_hash, view)
    ladder = _ladder_view(conn, function_hash, view)
    stale_total = row["stale_captures"]
    stale = (
        chartreads.events_page(conn, function_hash, view.filters, limit=STALE_SHOWN, offset=0, kind=Kind.STALE_CAPTURE)
        if stale_total
        else []
    )
    compile_costs = [p["seconds"] for p in points if p["compiled"]]
    charts = _function_charts(points, row["causes"], compile_costs, ladder)
    pictured = picture_views.function(conn, function_hash, view.run_id, _storm_rule(request))
    charts.update(pictured.charts)
    return page(
        request,
        "function.html",
        view=view,
        title=render.label(row),
        row=row,
        storms=storms,
        storms_total=detail.storms_total,
        verdict=verdict,
        verdict_text=_verdict_text(row, verdict),
        slow_paths=detail.slow_paths,
        fix=fix,
        sites=sites,
        events=events,
        pager=pager,
        stale=stale,
        stale_total=stale_total,
        charts=charts,
        points=points,
        over_time=over_time,
        compile_costs=compile_costs,
        histogram=render.histogram_table(compile_costs),
        active_storm=any(s.active for s in storms),
        program=program,
        ladder=ladder,
        pictured=pictured,
    )


def _compile_events_page(
    request: Request, conn: Connection, function_hash: str, view: View, total: int
) -> tuple[dict[str, Any], list[EventRow]]:
    """The pager and the page of the function's ``total`` traces and compiles this
    request asks for, each cache miss explained."""
    number = _page_number(request)
    pager = _pager(view, number, _per_page(request, EVENTS_PER_PAGE), total)
    events = chartreads.events_page(
        conn, function_hash, view.filters, limit=pager["per_page"], offset=pager["offset"], kind="compiles"
    )
    cache_reads.explain_cache_misses(conn, events)
    return pager, events


def _function_charts(
    points: list[TimelinePoint], causes: dict[str, int], compile_costs: list[float], ladder: LadderView
) -> dict[str, dict[str, Any]]:
    """The function page's charts, each only where it has something to draw."""
    charts = {}
    if points:
        charts["timeline"] = render.timeline_chart(points)
    if causes:
        charts["causes"] = render.causes_chart(causes)
    if compile_costs:
        charts["histogram"] = render.histogram_chart(compile_costs)
    if ladder.result is not None and ladder.result.price is not None and ladder.result.curve:
        charts["ladder"] = render.ladder_chart(ladder.result.curve, ladder.result.price)
    return charts


@dataclasses.dataclass(frozen=True)
class LadderView:
    """The function page's padding prices: auto's curve over the view's run, or why there is none."""

    result: policies.Whatif | None
    sentence: str | None
    note: str


def _ladder_view(conn: sa.Connection, function_hash: str, view: View) -> LadderView:
    """What padding the varying axis would buy over the run shown (the function's latest
    run when the view names none): the cheapest ladder of each number of buckets."""
    try:
        function = whatif_reads.find_function(conn, function_hash)
        run_id, run_name = whatif_reads.run_of(conn, function_hash, view.filters.run_id)
    except LookupError as exc:
        return LadderView(None, None, str(exc.args[0]) if exc.args else "")
    # Without a run time to weigh padding against, powers of two are priced instead (the
    # price a storm of this run quotes, kept until the run changes).
    (found,) = prices.auto_prices(conn, [(function, run_id)])
    if isinstance(found, policies.WhatifError):
        return LadderView(None, None, str(found.args[0]) if found.args else "")
    result = dataclasses.replace(found, run_name=run_name)
    if result.nothing_to_pad:
        return LadderView(None, None, "")
    return LadderView(result, prices.fix_sentence(result), result.run_fit_note if result.run_fit is None else "")


@dataclasses.dataclass(frozen=True)
class ProgramView:
    """The function page's "What was compiled": its compile-cost profile, its recompiles
    that produced the same program, a program diff (or why there is none), and the
    latest compiles' size against compile seconds."""

    profile: program_texts.CompileProfile
    identical: list[program_texts.IdenticalRecompiles]
    diff: program_texts.ProgramDiff | None
    problem: str | None
    growth: list[program_texts.GrowthPoint]
    growth_total: int


def _program_view(conn: sa.Connection, request: Request, function_hash: str, view: View) -> ProgramView:
    """What the function compiled: its compile-cost profile, its recompiles that produced
    the same program, and a program diff (the latest recompile's, or ``?diff=EVENT&against=EVENT``)."""
    profile = program_texts.compile_profile(conn, function_hash, view.filters)
    identical = program_texts.identical_recompiles(conn, view.filters, [function_hash])
    wanted, against = request.query_params.get("diff"), request.query_params.get("against")
    change, problem = None, None
    try:
        if wanted:
            change = program_texts.diff(conn, wanted[:32], against[:32] if against else None)
        else:
            change = program_texts.latest_diff(conn, function_hash)
    except program_texts.ProgramNotFound as exc:
        problem = str(exc)
    # The latest compiles only: enough to see whether compile seconds follow program size.
    return ProgramView(
        profile=profile,
        identical=identical,
        diff=change,
        problem=problem,
        growth=profile.growth[-GROWTH_SHOWN:],
        growth_total=len(profile.growth),
    )


@router.get("/runs", response_class=HTMLResponse)
def runs(request: Request, conn: Connection) -> HTMLResponse:
    view = _open_view(request, conn)
    total = listings.count_runs(conn, view.filters)
    pager = _pager(view, _page_number(request), _per_page(request, RUNS_PER_PAGE), total)
    runs = listings.run_rows(conn, view.filters, limit=pager["per_page"], offset=pager["offset"])
    spans = listings.run_spans(conn, [r["run_id"] for r in runs])
    empty = _empty_state(request, conn, view) if not runs else None
    rows = [{**run, "span": spans.get(run["run_id"])} for run in runs]
    return page(request, "runs.html", view=view, title="Runs", rows=rows, pager=pager, empty=empty)


@router.get("/runs/compare", response_class=HTMLResponse)
def runs_compare(request: Request, conn: Connection) -> HTMLResponse:
    """Two runs chosen on the runs page, compared as `cachewatch compare` does."""
    baseline = request.query_params.get("baseline") or None
    run = request.query_params.get("run") or None
    view = _open_view(request, conn)
    try:
        if any(v is not None and len(v) > 200 for v in (baseline, run)):
            raise RunNotFound("a run is named by its id or run name, of at most 200 characters")
        result = side_by_side.compare(conn, baseline, run)
    except RunNotFound as exc:
        return page(request, "compare.html", status=404, view=view, title="Compare runs", problem=exc.args[0])
    return page(request, "compare.html", view=view, title="Compare runs", result=result, problem=None)


@router.get("/storms", response_class=HTMLResponse)
def storms_page(request: Request, conn: Connection) -> HTMLResponse:
    view = _open_view(request, conn)
    number, per_page = _page_number(request), _per_page(request, STORMS_PER_PAGE)
    function = _storms_function(request, conn)
    # Every storm is judged and counted; only the page's are described and priced.
    listing = functools.partial(
        diagnosis.find_storms,
        conn,
        view.filters,
        active_first=True,
        function_hashes=None if function is None else [function[0]],
        **_storm_rule(request),
    )
    # The first passes ride on the first page only, as in the API.
    found = listing(page=((number - 1) * per_page, per_page), with_first_passes=number == 1)
    pager = _pager(view, number, per_page, found.total)
    if pager["number"] != number:  # past the last page: show the last
        found = listing(page=(pager["offset"], per_page), with_first_passes=pager["number"] == 1)
    passes = found.first_passes
    # The findings lead the first page: every storm of the view by root cause.
    leading = findings.find(conn, view.filters, **_storm_rule(request)) if found.total and pager["number"] == 1 else []
    if function is not None:
        leading = [f for f in leading if function[0] in f.function_hashes]
    empty = _empty_state(request, conn, view) if not found.total and not passes else None
    run_names = {r["run_id"]: r["run_name"] for r in view.runs}
    return page(
        request,
        "storms.html",
        view=view,
        title="Storms" if function is None else f"Storms of {function[1].qualname if function[1] else function[0]}",
        function=function,
        storms=found.storms,
        pager=pager,
        empty=empty,
        active_count=found.active,
        run_names=run_names,
        first_passes=[(p, diagnosis.describe_first_pass(p), diagnosis.first_pass_advice(p)) for p in passes],
        findings=[(f, findings.describe(f)) for f in leading],
        **_storm_rule(request),
    )


def _storms_function(request: Request, conn: Connection) -> tuple[str, FunctionInfo | None] | None:
    """The function the storms page is narrowed to (``function_hash`` in the URL, as the
    API takes it) with what the store knows of it (None: no such function, so no storms)."""
    wanted = request.query_params.get("function_hash", "")
    if not wanted:
        return None
    return wanted, queries.function_infos(conn, [wanted]).get(wanted) if len(wanted) <= 40 else None


CACHE_FUNCTIONS = 200  # (run, function) pairs the cache page reads, newest runs first
CACHE_CHARTED = 10  # functions drawn in its charts (most executables at their peak)


@router.get("/cache", response_class=HTMLResponse)
def cache_page(request: Request, conn: Connection) -> HTMLResponse:
    """JAX's caches: live executables and their memory over time per function, the
    variants that never served a call, and the persistent cache's hit rate per run."""
    view = _open_view(request, conn)
    pairs = [(r, f) for r, f, _ in cache_reads.cache_functions(conn, view.filters)[:CACHE_FUNCTIONS]]
    report = cache_view.cache_report(cache_reads.read_cache(conn, view.filters, pairs))
    empty = _empty_state(request, conn, view) if not report.functions else None
    run_names = {r["run_id"]: r["run_name"] for r in view.runs}
    charted = sorted(report.functions, key=lambda fn: -fn.peak_live)[:CACHE_CHARTED]
    labels = [(f"{fn.name} ({run_names.get(fn.run_id) or fn.run_id[:8]})", fn.timeline) for fn in charted]
    rates = [(run_names.get(p.run_id) or p.run_id[:8], p.hit_rate) for p in report.persistent if p.hit_rate is not None]
    charts = {}
    if charted:
        charts["live"] = render.live_executables_chart(labels, field="live")
        charts["bytes"] = render.live_executables_chart(labels, field="bytes")
    if rates:
        charts["hit_rate"] = render.hit_rate_chart([(name, rate) for name, rate in rates if rate is not None])
    names = {fn.function_hash: fn.name for fn in report.functions}
    return page(
        request,
        "cache.html",
        view=view,
        title="Cache",
        report=report,
        charted=labels,
        charts=charts,
        never_hit=report.never_hit[:200],
        names=names,
        run_names=run_names,
        empty=empty,
    )


JOBS_LISTED = 100


@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(request: Request, conn: Connection) -> HTMLResponse:
    view = _open_view(request, conn)
    reports = divergence.compare_jobs(conn, divergence.recent_jobs(conn, JOBS_LISTED))
    return page(request, "jobs.html", view=view, title="Jobs", reports=reports)


@router.get("/jobs/{job}", response_class=HTMLResponse)
def job_page(request: Request, conn: Connection, job: str) -> HTMLResponse:
    view = _open_view(request, conn)
    report = divergence.compare_job(conn, job) if len(job) <= 200 else None
    if report is None:
        return page(request, "not_found.html", status=404, view=view, title="No such job", job=job)
    return page(
        request, "job.html", view=view, title=f"Job {job}", report=report, signature_text=divergence.signature_text
    )


@router.get("/health", response_class=HTMLResponse)
def health_page(request: Request, conn: Connection) -> HTMLResponse:
    """What works on the JAX in use: the capabilities of cachewatch's JAX seam on the
    service's JAX, and the recent runs whose own JAX lacked some."""
    import jax

    view = _open_view(request, conn)
    runs = [r for r in listings.run_rows(conn, Filters(), limit=RUNS_PER_PAGE) if r["capabilities_off"]]
    return page(
        request,
        "health.html",
        view=view,
        title="Health",
        jax_version=jax.__version__,
        capabilities=jaxcompat.status(),
        runs=runs,
    )
