"""Tables for people: as HTML for a notebook, as aligned text for a terminal.

    html_table(["function", "cause"], [["step", "new_shape"]])
    text_table(["function", "cause"], [["step", "new_shape"]])

Cells are plain strings, escaped here; a notebook shows the HTML, IPython in a terminal the text.
"""

from __future__ import annotations

import html
from collections.abc import Sequence


def html_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, caption: str = "", css_class: str = "") -> str:
    head = "".join(f'<th style="text-align:left">{html.escape(h)}</th>' for h in headers)
    body = "".join(
        "<tr>" + "".join(f'<td style="text-align:left">{html.escape(str(c))}</td>' for c in row) + "</tr>"
        for row in rows
    )
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    cls = f' class="{html.escape(css_class)}"' if css_class else ""
    return f"<table{cls}>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, widest: int = 60) -> str:
    """Columns padded to their widest cell (at most ``widest``); the last column runs on."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row[:-1]):
            widths[i] = min(max(widths[i], len(c)), widest)
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=False)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in cells]
    return "\n".join(lines)
