"""Bursts of compiles: the maximal runs in which ``threshold`` compiles fit in a window,
and each told as a Burst (a jit of the user's, or the line of user code that reaches
eager code and library jits) with its span, causes and fix. diagnosis.py judges them."""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any

from ..core.events import FunctionInfo, short_name
from ..core.texts import commonest
from .fixes import display_name, fix_for, short_site
from .results import Burst, BurstFunction
from .site_fixes import site_fix
from .storm_reads import Recompile


def runs_of(rows: list[Recompile], threshold: int, window: float) -> Iterable[list[Recompile]]:
    """Maximal runs of compiles in which every ``threshold`` consecutive ones fit in ``window``."""
    if len(rows) < threshold:
        return
    start = None  # index where the current burst began
    i = 0
    n = len(rows)
    while i + threshold - 1 < n:
        if rows[i + threshold - 1].timestamp - rows[i].timestamp <= window:
            if start is None:
                start = i
            i += 1
            continue
        if start is not None:
            yield rows[start : i + threshold - 1]
            start = None
        i += 1
    if start is not None:
        yield rows[start:]


def of_function(
    function_hash: str, info: FunctionInfo | None, rows: list[Recompile], now: float, window: float, fixed: bool = True
) -> Burst:
    """A burst of a jit of the user's, with its fix (``fixed``; it reads the diffs)."""
    span = _span(rows, now, window)
    name = short_name(info.qualname) if info else function_hash
    return Burst(
        key=function_hash,
        function_hash=function_hash,
        function_hashes=(function_hash,),
        # The user's line most of a jit's recompiles came from (where the value that
        # varies enters); the storm stays keyed by the function.
        call_site=commonest(r.call_site for r in rows),
        functions=(BurstFunction(function_hash, name, len(rows)),),
        name=info.name if info else "",
        qualname=info.qualname if info else function_hash,
        short_name=name,
        **span,
        fix=_fix_of(function_hash, info, rows, span["dominant_cause"]) if fixed else "",
    )


def _span(rows: list[Recompile], now: float, window: float) -> dict[str, Any]:
    """A burst's fields that its compiles alone give: when, how many, why, which run."""
    cause_counts = collections.Counter(r.cause for r in rows)
    return {
        "start": rows[0].timestamp,
        "end": rows[-1].timestamp,
        "compiles": len(rows),
        "causes": dict(cause_counts),
        "dominant_cause": cause_counts.most_common(1)[0][0],
        "active": now - rows[-1].timestamp <= window,
        "run_id": rows[0].run_id,
        "run_ids": (rows[0].run_id,),
    }


def _fix_of(function_hash: str, info: FunctionInfo | None, rows: list[Recompile], dominant: str) -> str:
    if info is None:
        return fix_for(function_hash, function_hash, "", dominant, rows)
    return fix_for(info.name, info.qualname, info.module, dominant, rows, file=info.file)


def of_site(
    call_site: str, infos: dict[str, FunctionInfo], rows: list[Recompile], now: float, window: float, fixed: bool = True
) -> Burst:
    """A storm of eager code and library jits reached from one line of user code, with its
    fix (``fixed``; it reads the diffs)."""
    per_function = collections.Counter(r.function_hash for r in rows)
    top_hash = per_function.most_common(1)[0][0]
    span = _span(rows, now, window)
    names = {h: display_name(infos.get(h), h) for h in per_function}
    inside = ", ".join(f"{names[h]} {n}x" for h, n in per_function.most_common(4))
    more = f" and {len(per_function) - 4} more" if len(per_function) > 4 else ""
    top = infos.get(top_hash)
    return Burst(
        key=f"site:{call_site}",
        function_hash=top_hash,
        function_hashes=tuple(h for h, _ in per_function.most_common()),
        call_site=call_site,
        functions=tuple(BurstFunction(h, names[h], n) for h, n in per_function.most_common()),
        name=top.name if top else "",
        qualname=top.qualname if top else top_hash,
        short_name=f"{short_site(call_site)} ({inside}{more})",
        **span,
        fix=site_fix(call_site, infos, rows, span["dominant_cause"]) if fixed else "",
    )
