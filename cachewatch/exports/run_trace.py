"""A run's trace read from its store: what ``cachewatch export RUN --format perfetto`` writes
and ``GET /api/v1/runs/{run_id}/trace`` answers, the same JSON from both.

    with engine.connection(url) as conn:
        trace = run_trace.run_trace(conn, "exp-42", diagnosis.rule_of(cfg))   # RunNotFound
"""

from __future__ import annotations

import sqlalchemy as sa

from ..store.columns import Filters
from ..store.runs import find_run
from ..storms import diagnosis
from . import perfetto, trace_reads


def run_trace(conn: sa.Connection, run: str, rule: diagnosis.StormRule) -> perfetto.ChromeTrace:
    """The trace of the run named ``run`` (an id, a unique id prefix, a run name or job),
    its storms found with ``rule``; raises ``store.runs.RunNotFound``."""
    found = find_run(conn, run)
    records = trace_reads.read_run(conn, found.run_id)
    # Unpriced: the fix's sentence is the same, and a large run exports without replaying it.
    storms = diagnosis.detect_storms(conn, Filters(run_id=found.run_id), **rule, priced=False)
    return perfetto.build(found, records, storms)
