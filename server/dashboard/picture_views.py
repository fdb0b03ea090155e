"""Which pictures a dashboard page shows, read once per page: the overview draws the view's
jits on the compile-versus-run scatter and, for a run, the run's timeline; a function's
page draws the run it was seen in (the view's run, else its latest) with that function
marked on both. The pictures themselves are pictures.py's."""

from __future__ import annotations

import dataclasses
from typing import Any

import sqlalchemy as sa

from cachewatch.store import queries
from cachewatch.store.columns import Filters, FunctionReport
from cachewatch.store.runs import RunNotFound
from cachewatch.storms import diagnosis, findings
from cachewatch.whatif import whatif_reads

from . import pictures


@dataclasses.dataclass(frozen=True)
class Pictures:
    """A page's pictures: whether each jit pays for itself, and a run's timeline; each
    None where the page has nothing for it. ``focus``: the function a function's page
    marks on both; ``run_id``/``run_name``: the run they show, where they show one."""

    payoff: pictures.PayoffView | None
    timeline: pictures.RunTimeline | None
    focus: str | None = None
    run_id: str | None = None
    run_name: str = ""

    @property
    def charts(self) -> dict[str, dict[str, Any]]:
        found = {
            "payoff": pictures.payoff_chart(self.payoff.points, self.focus) if self.payoff else None,
            "run_timeline": pictures.timeline_chart(self.timeline, self.focus) if self.timeline else None,
        }
        return {name: chart for name, chart in found.items() if chart is not None}


NONE = Pictures(None, None)


def overview(
    conn: sa.Connection,
    filters: Filters,
    run_id: str | None,
    report: list[FunctionReport],
    found: findings.Found,
    rule: diagnosis.StormRule,
) -> Pictures:
    """The overview's: every jit of the view weighed (``found``: the view's findings and
    storms, which the page lists too) and, with a run chosen (``run_id``), its timeline:
    the run's whole span, whatever time range the view has."""
    payoff = pictures.payoff_view(conn, report, filters, found)
    timeline = None
    if run_id is not None:
        whole = Filters(run_id=run_id)
        timeline = pictures.run_timeline(conn, run_id, found if filters == whole else _found(conn, whole, rule))
    return Pictures(payoff if payoff.points else None, timeline)


def function(conn: sa.Connection, function_hash: str, run: str | None, rule: diagnosis.StormRule) -> Pictures:
    """A function's page's: the run named (``run``), else the function's latest, with
    every jit of that run on the scatter and every compile on its timeline, the function's
    own marked. NONE where it compiled in no run the store holds."""
    try:
        run_id, run_name = whatif_reads.run_of(conn, function_hash, run)
    except RunNotFound:
        return NONE
    whole = Filters(run_id=run_id)
    found = _found(conn, whole, rule)
    payoff = pictures.payoff_view(conn, queries.function_report(conn, whole), whole, found)
    return Pictures(
        payoff if payoff.points else None,
        pictures.run_timeline(conn, run_id, found),
        focus=function_hash,
        run_id=run_id,
        run_name=run_name,
    )


def _found(conn: sa.Connection, filters: Filters, rule: diagnosis.StormRule) -> findings.Found:
    return findings.find_with_storms(conn, filters, **rule)
