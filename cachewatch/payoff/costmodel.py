"""The compile cost model: how compile seconds grow with program size, per function, fitted
from its compiles (an exponent only where enough distinct sizes span enough)."""

from __future__ import annotations

import sqlalchemy as sa

from ..store import queries
from ..store.columns import Filters
from . import cost_reads
from .results import CostModelRow

# Fewest compiles, distinct program sizes, and largest-to-smallest size ratio a growth
# exponent is fitted from: a slope through four nearby points is mostly noise.
EXPONENT_MIN_POINTS = 5


EXPONENT_MIN_SIZES = 4


EXPONENT_MIN_SPAN = 4.0


def cost_model(conn: sa.Connection, filters: Filters = Filters(), min_points: int = 3) -> list[CostModelRow]:
    """Compile seconds against program size per function, fastest-growing first.

    Size is the HLO operation count when recorded (cost_analysis), else the jaxpr
    equation count. ``exponent`` is the slope on log-log axes: 1 is linear growth,
    2 quadratic; functions above 1.5 are flagged. ``points`` is how many compiles the
    fit used; with fewer than ``EXPONENT_MIN_POINTS`` over ``EXPONENT_MIN_SIZES`` sizes
    spanning ``EXPONENT_MIN_SPAN``x there is no exponent, and ``note`` says why.
    """
    fits = cost_reads.size_fits(conn, filters)
    if not fits:
        return []
    names = {h: info.qualname for h, info in queries.function_infos(conn, {f.function_hash for f in fits}).items()}
    rows = [_cost_row(fit, names.get(fit.function_hash, ""), min_points) for fit in fits]
    rows.sort(key=lambda r: (-(r.exponent or 0.0), -(r.seconds_per_1000_ops or 0.0)))
    return rows


def _cost_row(fit: cost_reads.SizeFit, qualname: str, min_points: int) -> CostModelRow:
    """One function's fit of compile seconds against program size."""
    n, distinct, low, high = fit.compiles, fit.distinct_sizes, fit.min_size, fit.max_size
    per_1000 = exponent = note = None
    if n >= min_points and distinct >= 2 and fit.slope is not None:
        per_1000 = fit.slope * 1000
    if n >= EXPONENT_MIN_POINTS and distinct >= EXPONENT_MIN_SIZES and high >= EXPONENT_MIN_SPAN * low:
        exponent = fit.loglog_slope
    else:
        note = (
            f"no growth exponent from {n} compile(s) over {distinct} size(s) "
            f"({low:.0f}-{high:.0f}): it needs {EXPONENT_MIN_POINTS} over "
            f"{EXPONENT_MIN_SIZES} sizes spanning {EXPONENT_MIN_SPAN:.0f}x"
        )
    return CostModelRow(
        function_hash=fit.function_hash,
        qualname=qualname,
        compiles=n,
        points=n,
        distinct_sizes=distinct,
        min_size=low,
        max_size=high,
        seconds_per_1000_ops=per_1000,
        exponent=exponent,
        superlinear=exponent is not None and exponent > 1.5,
        note=note,
    )
