"""A price for a terminal: the policies side by side, the sizes padded and the sentence
that says what the fix would save."""

from __future__ import annotations

from .policies import Price, Whatif
from .prices import fix_sentence


def text(result: Whatif) -> str:
    """The result as ``cachewatch whatif`` prints it."""
    lines = [f"{result.qualname} in run {result.run_id}{f' ({result.run_name})' if result.run_name else ''}"]
    if result.nothing_to_pad:
        lines.append(f"  {result.nothing_to_pad}.")
    else:
        along = f" (with {', '.join(result.along)})" if result.along else ""
        sizes = ", ".join(str(s.size) for s in result.sizes)
        lines.append(f"  varying: {result.path} axis {result.axis}{along}: {len(result.sizes)} sizes: {sizes}")
    lines.append(f"  calls: {result.calls:,}")
    for name, fit in (("compile seconds", result.compile_fit), ("run seconds per call", result.run_fit)):
        if fit is None:
            continue
        how = f"R² {fit.r2:.2f}, " if fit.r2 is not None else ""
        shape = (
            f"{fit.intercept:.3g} + {fit.slope:.3g} x size" if fit.model == "linear" else f"median {fit.intercept:.3g}"
        )
        lines.append(f"  {name}: {shape} ({fit.model}, {fit.points} points, {how}mean error {fit.relative_error:.0%})")
    if result.run_fit_note:
        lines.append(f"  {result.run_fit_note}")
    rows = [result.recorded]
    if result.price is not None and result.price is not result.recorded:
        rows.append(result.price)
    lines.append("")
    lines.extend(_table(rows))
    if result.curve:
        lines.append("")
        lines.append("  auto: the cheapest ladder of each number of buckets")
        lines.extend(_table(list(result.curve), number=True))
    if result.price is not None and result.price is not result.recorded:
        sentence = fix_sentence(result)
        if sentence:
            lines.append("")
            lines.append(f"  {sentence[0].upper()}{sentence[1:]}.")
    for fix in result.fixes:
        lines.append(f"  Also: {fix.text}.")
    for note in result.notes:
        lines.append(f"  ({note})")
    return "\n".join(lines)


def _bytes(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _table(prices: list[Price], number: bool = False) -> list[str]:
    head = [
        "buckets" if number else "policy",
        "compiles",
        "compile s",
        "padded run s",
        "run s",
        "total s",
        "executables",
    ]
    rows = []
    for p in prices:
        rows.append(
            [
                f"{len(p.buckets)}: {','.join(map(str, p.buckets))}" if number else p.policy,
                str(p.compiles),
                _cell(p.compile_seconds),
                _cell(p.padded_run_seconds),
                _cell(p.run_seconds),
                _cell(p.total_seconds),
                f"{p.executables}" + ("" if p.executable_bytes is None else f" ({_bytes(p.executable_bytes)})"),
            ]
        )
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return [
        "  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=False)))
        for r in [head, *rows]
    ]
