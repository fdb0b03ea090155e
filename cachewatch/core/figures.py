"""The figures every reader shows the same way: the compile share of a function and how
seconds and shares are written (the report, the advice, the dashboard, /metrics)."""

from __future__ import annotations

import math


def compile_share(compile_seconds: float, run_seconds: float | None) -> float | None:
    """Compile seconds over compile plus run seconds; None without a run time to set against.

    >>> compile_share(3.0, 1.0)
    0.75
    """
    if run_seconds is None or compile_seconds + run_seconds <= 0:
        return None
    return compile_seconds / (compile_seconds + run_seconds)


def share_text(share: float | None, missing: str = "-") -> str:
    """``99.5%``; ``missing`` when there is no share."""
    if share is None or not math.isfinite(share):
        return missing
    return f"{100 * share:.1f}%"


def seconds_text(value: float) -> str:
    """Seconds in a sentence, three significant figures in the unit that suits them:
    ``1.99 s``, ``9.97 ms``, ``120 us``."""
    if value >= 1:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} us"


def seconds_cell(value: float | None, missing: str = "-") -> str:
    """Seconds in a table column: fixed decimals while small, grouped digits when large."""
    if value is None:
        return missing
    if not math.isfinite(value):
        return f"invalid ({value!r})"
    if value == 0:
        return "0 s"
    if abs(value) < 10:
        return f"{value:.3f} s"
    if abs(value) < 1000:
        return f"{value:.1f} s"
    return f"{value:,.0f} s"


def bytes_text(n: int | None) -> str:
    """Bytes for a reader, in binary units (``-`` when unknown)."""
    if n is None:
        return "-"
    sign, value = ("-" if n < 0 else ""), float(abs(n))
    if value < 1024:
        return f"{sign}{value:.0f} B"
    for unit in ("KB", "MB"):
        value /= 1024
        if value < 1024:
            return f"{sign}{value:.1f} {unit}"
    return f"{sign}{value / 1024:.1f} GB"
