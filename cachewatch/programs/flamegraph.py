"""A compile's program as a flame graph (an icicle: the outermost frame on top), in one
self-contained HTML document (inline SVG, CSS and script; nothing is fetched) or a plain
SVG without script.

    root = flamegraph.tree(flamegraph.samples(profile_rows), "train_step")
    document = flamegraph.html(root, title="train_step: 1,234 equations")
    picture = flamegraph.svg(root)

Width is equations. A frame is a source line, ``function (file:line)``: the Python
stack that emitted each equation, outermost first (the user's and libraries' frames;
JAX's own are left out, ``capture/program.py`` keeps the innermost sixteen), then the
equation's primitive as the leaf. A profile kept before stacks were has the innermost
user line alone above each primitive. The user's frames are coloured apart from libraries' and JAX's; hovering a
frame says its equations and share; clicking one zooms into it, clicking the root
zooms out. :func:`diff` colours the frames of a second program by the equations each
gained or lost against a first.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from html import escape
from typing import Any

import sqlalchemy as sa

from ..core import sources
from . import program_reads, program_texts

# The picture's geometry, in CSS pixels; labels are cut to what a frame's width holds of
# a 12 px monospace font.
WIDTH = 1200
ROW = 20
CHAR_WIDTH = 7.3
# Frames gone from the second program that a diff lists.
GONE_SHOWN = 50


class FrameKind(enum.StrEnum):
    """Whose code a frame is: the user's, an installed library's or the standard
    library's, or JAX's (its primitives included); the root is the whole program."""

    ROOT = "root"
    USER = "user"
    LIBRARY = "library"
    JAX = "jax"


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of a stack: its label, whose code it is, and what the tooltip adds."""

    label: str
    kind: FrameKind
    note: str = ""


@dataclass(frozen=True, slots=True)
class Sample:
    """Equations emitted under one stack (outermost frame first)."""

    stack: tuple[Frame, ...]
    count: int
    loop_body: bool = False


@dataclass(eq=False, slots=True)
class Node:
    """A frame of the graph: its equations (itself and every frame under it), those in a
    loop body, and, in a diff, its equations in the first program."""

    frame: Frame
    eqns: int = 0
    loop_eqns: int = 0
    before: int | None = None
    children: list[Node] = dataclasses.field(default_factory=list)
    _index: dict[Frame, Node] = dataclasses.field(default_factory=dict, repr=False)

    def child(self, frame: Frame) -> Node:
        found = self._index.get(frame)
        if found is None:
            found = self._index[frame] = Node(frame)
            self.children.append(found)
        return found

    def widest_first(self) -> None:
        self.children.sort(key=lambda node: (-node.eqns, node.frame.label))
        for node in self.children:
            node.widest_first()


@dataclass(frozen=True, slots=True)
class Gone:
    """A frame of the first program that the second has no more: its path of labels
    (below the root) and the equations it had."""

    path: tuple[str, ...]
    eqns: int


# ----------------------------------------------------------------- frames


def frame_kind(file: str) -> FrameKind:
    """Whose code ``file`` is, by its path alone (the profile may come from another
    machine; core/sources.py): an installed library's (JAX's for jax and jaxlib) or the
    standard library's, else the user's. No file is JAX's: an equation JAX made with no
    frame outside it."""
    if not file or sources.is_jax(file):
        return FrameKind.JAX
    if sources.is_library(file):
        return FrameKind.LIBRARY
    return FrameKind.USER


def source_frame(file: str, line: int, function: str) -> Frame:
    """The frame of one source line, labelled ``function (file:line)`` with the file's
    name (its whole path is the frame's note, in its tooltip)."""
    if not file:
        return Frame("(no user line)", FrameKind.JAX, "equations JAX made with no frame outside JAX")
    name = file.replace("\\", "/").rsplit("/", 1)[-1]
    return Frame(f"{function} ({name}:{line})", frame_kind(file), f"{file}:{line}")


def samples(rows: Iterable[list[Any]]) -> list[Sample]:
    """The profile's rows (file, line, function, primitive, in a loop body, equations, and
    where kept the equation's stack outside JAX, outermost first) as stacks: the stack (or
    the innermost user line alone, for a profile kept before stacks were), then the primitive."""
    out = []
    for file, line, function, primitive, loop, count, *kept in rows:
        leaf = Frame(str(primitive), FrameKind.JAX, "a JAX primitive")
        stack = kept[0] if kept and kept[0] else [[file, line, function]]
        frames = tuple(source_frame(f, int(n), fn) for f, n, fn in stack)
        out.append(Sample((*frames, leaf), int(count), bool(loop)))
    return out


def tree(found: Iterable[Sample], root_label: str = "program") -> Node:
    """The flame graph's frames: every stack merged from the root down, the widest child
    first. A frame's equations are its own and all its children's."""
    root = Node(Frame(root_label, FrameKind.ROOT, "the whole program"))
    for sample in found:
        loop = sample.count if sample.loop_body else 0
        node = root
        node.eqns += sample.count
        node.loop_eqns += loop
        for frame in sample.stack:
            node = node.child(frame)
            node.eqns += sample.count
            node.loop_eqns += loop
    root.widest_first()
    return root


def diff(before: Node, after: Node) -> list[Gone]:
    """Marks each frame of ``after`` with its equations in ``before`` (0: a new frame)
    and returns the frames of ``before`` gone from ``after``, most equations first."""
    gone = _mark(before, after, ())
    return sorted(gone, key=lambda g: -g.eqns)


def _mark(before: Node | None, after: Node, path: tuple[str, ...]) -> list[Gone]:
    after.before = before.eqns if before is not None else 0
    earlier = {node.frame: node for node in before.children} if before is not None else {}
    gone: list[Gone] = []
    for node in after.children:
        gone += _mark(earlier.pop(node.frame, None), node, (*path, node.frame.label))
    gone += [Gone((*path, node.frame.label), node.eqns) for node in earlier.values()]
    return gone


# ----------------------------------------------------------------- layout


@dataclass(frozen=True, slots=True)
class Box:
    """Where a frame is drawn: its depth (the root's is 0) and its share of the root's
    width, from ``x0`` to ``x1`` (0 to 1)."""

    node: Node
    depth: int
    x0: float
    x1: float


def layout(root: Node) -> list[Box]:
    """Every frame with equations, parents before children; a child starts where its
    elder sibling ends, from its parent's left edge."""
    total = root.eqns or 1
    boxes: list[Box] = []
    stack: list[tuple[Node, int, float]] = [(root, 0, 0.0)]
    while stack:
        node, depth, x0 = stack.pop()
        boxes.append(Box(node, depth, x0, x0 + node.eqns / total))
        offsets, at = [], x0
        for child in node.children:
            if child.eqns > 0:
                offsets.append((child, depth + 1, at))
                at += child.eqns / total
        stack.extend(reversed(offsets))
    return boxes


def fit(label: str, width: float) -> str:
    """The label cut to what ``width`` pixels hold ('' when not even a few characters do)."""
    room = int((width - 6) / CHAR_WIDTH)
    if room < 3:
        return ""
    return label if len(label) <= room else label[: room - 1] + "\u2026"


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "0%"


def _tooltip(node: Node, total: int) -> str:
    text = f"{node.frame.label}\n{node.eqns:,} equations, {_share(node.eqns, total)} of the program"
    if node.loop_eqns:
        text += f"; {node.loop_eqns:,} in a loop body"
    if node.before is not None:
        text += f"\nbefore: {node.before:,} ({node.eqns - node.before:+,})"
    if node.frame.note:
        text += f"\n{node.frame.note}"
    return text


def _diff_fill(change: int, largest: int) -> str:
    """Red for a frame that grew, blue for one that shrank, stronger the more it changed
    against the frame that changed most; grey for the same."""
    if not change or not largest:
        return "#dcdcdc"
    t = min(abs(change) / largest, 1.0)
    low, high = ((250, 220, 210), (200, 40, 30)) if change > 0 else ((215, 228, 245), (40, 100, 190))
    r, g, b = (round(lo + (hi - lo) * (0.25 + 0.75 * t)) for lo, hi in zip(low, high, strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"


def _frame_svg(box: Box, number: int, total: int, largest: int | None, interactive: bool) -> str:
    node, esc = box.node, escape
    x, width, y = box.x0 * WIDTH, (box.x1 - box.x0) * WIDTH, box.depth * ROW
    data = (
        f'data-id="{number}" data-depth="{box.depth}" data-x0="{box.x0!r}" data-x1="{box.x1!r}" '
        f'data-eqns="{node.eqns}" data-label="{esc(node.frame.label)}"'
    )
    if node.frame.note:
        data += f' data-note="{esc(node.frame.note)}"'
    if node.loop_eqns:
        data += f' data-loop="{node.loop_eqns}"'
    fill = ""
    if largest is not None and node.before is not None:
        data += f' data-before="{node.before}"'
        fill = f' fill="{_diff_fill(node.eqns - node.before, largest)}"'
    focus = ' tabindex="0"' if interactive else ""
    return (
        f'<g class="f {node.frame.kind}" {data}{focus}><title>{esc(_tooltip(node, total))}</title>'
        f'<rect x="{x:.2f}" y="{y}" width="{width:.2f}" height="{ROW - 1}"{fill}/>'
        f'<text x="{x + 3:.2f}" y="{y + 14}">{esc(fit(node.frame.label, width))}</text></g>'
    )


def _svg(root: Node, *, interactive: bool, style: str = "") -> str:
    boxes = layout(root)
    diffed = root.before is not None
    largest = max((abs(b.node.eqns - (b.node.before or 0)) for b in boxes[1:]), default=0) if diffed else None
    height = (max(b.depth for b in boxes) + 1) * ROW
    label = f"Flame graph of {root.frame.label}: {root.eqns:,} equations"
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" id="flamegraph" class="{"diff" if diffed else "kinds"}" '
        f'width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" data-width="{WIDTH}" '
        f'data-char-width="{CHAR_WIDTH}" aria-label="{escape(label)}">'
    )
    frames = [_frame_svg(box, i, root.eqns, largest, interactive) for i, box in enumerate(boxes)]
    return head + (f"<style>{style}</style>" if style else "") + "\n".join(frames) + "</svg>"


# ----------------------------------------------------------------- documents

_COLOURS = {"root": "#5b6b7c", "user": "#f2a05a", "library": "#8fb8de", "jax": "#c9c9c9"}
_SVG_CSS = (
    "".join(f"svg.kinds .f.{kind} rect{{fill:{colour}}}" for kind, colour in _COLOURS.items())
    + "svg.diff .f.root rect{fill:#5b6b7c}"
    + ".f rect{stroke:#fff;stroke-width:.5}.f text{font:12px ui-monospace,Menlo,Consolas,monospace;"
    "fill:#1b1b1b;pointer-events:none}.f.root text{fill:#fff}.f.hidden{display:none}"
)
_PAGE_CSS = (
    "body{font:14px system-ui,sans-serif;margin:16px;color:#1b1b1b}h1{font-size:18px;margin:0 0 4px}"
    ".sub{margin:0 0 8px;color:#444}.legend{display:flex;gap:14px;margin:0 0 8px;padding:0;list-style:none}"
    ".key::before{content:'';display:inline-block;width:12px;height:12px;margin-right:5px;"
    "vertical-align:-1px;background:var(--c)}"
    + "".join(f".key.{kind}{{--c:{colour}}}" for kind, colour in _COLOURS.items())
    + ".key.grew{--c:#c8281e}.key.shrank{--c:#2864be}.key.same{--c:#dcdcdc}"
    "#detail{min-height:1.4em;margin:0 0 8px;font:13px ui-monospace,Menlo,Consolas,monospace}"
    "svg{display:block}.f{cursor:pointer}.f:hover rect,.f:focus rect{stroke:#000;stroke-width:1}"
    ".f:focus{outline:none}" + _SVG_CSS
)
_HINT = "Hover a frame for its equations; click one to zoom into it, the root to zoom out."
_SCRIPT = """(function () {
  "use strict";
  var svg = document.getElementById("flamegraph");
  var detail = document.getElementById("detail");
  var hint = detail.textContent;
  var width = Number(svg.getAttribute("data-width"));
  var charWidth = Number(svg.getAttribute("data-char-width"));
  var frames = Array.prototype.slice.call(svg.querySelectorAll("g.f"));
  var root = frames[0], zoomed = root, EPS = 1e-9;
  function num(g, key) { return Number(g.getAttribute("data-" + key)); }
  function fit(label, w) {
    var room = Math.floor((w - 6) / charWidth);
    if (room < 3) return "";
    return label.length <= room ? label : label.slice(0, room - 1) + "\\u2026";
  }
  function place(g, x, w) {
    g.classList.toggle("hidden", w <= 0);
    g.querySelector("rect").setAttribute("x", x.toFixed(2));
    g.querySelector("rect").setAttribute("width", w.toFixed(2));
    g.querySelector("text").setAttribute("x", (x + 3).toFixed(2));
    g.querySelector("text").textContent = fit(g.getAttribute("data-label"), w);
  }
  function zoom(target) {
    var a = num(target, "x0"), b = num(target, "x1"), depth = num(target, "depth");
    var scale = width / (b - a);
    frames.forEach(function (g) {
      var x0 = num(g, "x0"), x1 = num(g, "x1"), d = num(g, "depth");
      if (d < depth && x0 <= a + EPS && x1 >= b - EPS) place(g, 0, width);
      else if (d >= depth && x0 >= a - EPS && x1 <= b + EPS) place(g, (x0 - a) * scale, (x1 - x0) * scale);
      else place(g, 0, 0);
    });
    zoomed = target;
    svg.setAttribute("data-zoomed", target.getAttribute("data-id"));
  }
  function share(part, whole) { return whole ? (100 * part / whole).toFixed(1) + "%" : "0%"; }
  function describe(g) {
    var eqns = num(g, "eqns");
    var text = g.getAttribute("data-label") + ": " + eqns.toLocaleString("en") + " equations, " +
      share(eqns, num(root, "eqns")) + " of the program";
    if (zoomed !== root && zoomed !== g) text += ", " + share(eqns, num(zoomed, "eqns")) + " of the zoomed frame";
    if (g.hasAttribute("data-loop")) text += "; " + num(g, "loop").toLocaleString("en") + " in a loop body";
    if (g.hasAttribute("data-before")) {
      var change = eqns - num(g, "before");
      text += "; before " + num(g, "before").toLocaleString("en") + " (" + (change > 0 ? "+" : "") + change + ")";
    }
    if (g.hasAttribute("data-note")) text += " \u2014 " + g.getAttribute("data-note");
    return text;
  }
  function frameOf(event) { return event.target.closest ? event.target.closest("g.f") : null; }
  svg.addEventListener("click", function (event) { var g = frameOf(event); if (g) zoom(g); });
  svg.addEventListener("keydown", function (event) {
    var g = frameOf(event);
    if (g && (event.key === "Enter" || event.key === " ")) { event.preventDefault(); zoom(g); }
  });
  svg.addEventListener("mouseover", function (event) { var g = frameOf(event); if (g) detail.textContent = describe(g); });
  svg.addEventListener("focusin", function (event) { var g = frameOf(event); if (g) detail.textContent = describe(g); });
  svg.addEventListener("mouseleave", function () { detail.textContent = hint; });
  document.documentElement.setAttribute("data-flamegraph", "ready");
})();"""


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


# The document runs its own script and style and nothing else, and loads nothing (its
# labels are the store's file and function names). The document carries the policy, so
# that it holds when opened from a file; a server sends it as a header with
# frame-ancestors too, which a <meta> policy cannot say.
_DOCUMENT_POLICY = (
    f"default-src 'none'; script-src {_sha256(_SCRIPT)}; style-src {_sha256(_PAGE_CSS)}; "
    "base-uri 'none'; form-action 'none'"
)
CONTENT_SECURITY_POLICY = _DOCUMENT_POLICY + "; frame-ancestors 'none'"


def svg(root: Node) -> str:
    """The flame graph as a standalone SVG: no script, a tooltip (``<title>``) on each
    frame, labels cut to the frames' widths."""
    return _svg(root, interactive=False, style=_SVG_CSS) + "\n"


def html(root: Node, *, title: str, subtitle: str = "", gone: list[Gone] | None = None) -> str:
    """The flame graph as one self-contained HTML document: zoom on click, the hovered
    frame's equations and share; in a diff (``root.before`` set) the frames gone since
    the first program are listed below."""
    esc = escape
    drawn = {box.node.frame.kind for box in layout(root)}
    kinds = [kind for kind in (FrameKind.USER, FrameKind.LIBRARY, FrameKind.JAX) if kind in drawn]
    keys = ("grew", "shrank", "same") if root.before is not None else tuple(kinds)
    names = {"user": "your code", "library": "libraries", "jax": "JAX", "grew": "grew", "shrank": "shrank"}
    legend = "".join(f'<li class="key {key}">{names.get(key, key)}</li>' for key in keys)
    meta = f'<meta http-equiv="Content-Security-Policy" content="{_DOCUMENT_POLICY}">'
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n{meta}\n'
        f"<title>{esc(title)}</title>\n<style>{_PAGE_CSS}</style>\n</head>\n<body>\n"
        f"<h1>{esc(title)}</h1>\n"
        + (f'<p class="sub">{esc(subtitle)}</p>\n' if subtitle else "")
        + f'<ul class="legend">{legend}</ul>\n'
        f'<p id="detail" aria-live="polite">{_HINT}</p>\n{_svg(root, interactive=True)}\n'
        f"{_gone_list(gone or [])}<script>{_SCRIPT}</script>\n</body>\n</html>\n"
    )


def _gone_list(gone: list[Gone]) -> str:
    if not gone:
        return ""
    arrow = " \u2192 "
    items = "".join(f"<li>{escape(arrow.join(g.path))}: \u2212{g.eqns:,}</li>" for g in gone[:GONE_SHOWN])
    more = f"<li>and {len(gone) - GONE_SHOWN} more</li>" if len(gone) > GONE_SHOWN else ""
    return f'<details id="gone"><summary>Frames gone since the first program ({len(gone)})</summary><ul>{items}{more}</ul></details>\n'


# ----------------------------------------------------------------- a compile's, from the store


def _profile_of(conn: sa.Connection, event_id: str) -> tuple[str, list[list[Any]]]:
    """The compile's function and its program's profile rows, or ProgramNotFound saying why."""
    row = program_reads.event(conn, event_id)
    if row is None:
        raise program_texts.ProgramNotFound(f"no event {event_id!r} in the store")
    if not row["program_fingerprint"]:
        raise program_texts.ProgramNotFound(
            f"event {event_id} has no program recorded (not a compile, or the program view was off)"
        )
    kept = program_reads.profile(conn, row["program_fingerprint"])
    if kept is None or kept.rows is None:
        raise program_texts.ProgramNotFound(
            f"no equation profile kept for event {event_id}: the store's cap on program texts "
            "(CACHEWATCH_PROGRAM_STORE_MAX_BYTES) was reached, or the recorder sent none"
        )
    return str(row["qualname"]), kept.rows


_ABOUT = "Width is equations; each equation under the Python stack that emitted it (your code and libraries; JAX's own frames left out), then its primitive."


def for_event(conn: sa.Connection, event_id: str, *, as_svg: bool = False) -> str:
    """The flame graph of one compile's program, an HTML document (or a plain SVG):
    ``cachewatch program EVENT_ID --format flamegraph``."""
    function, rows = _profile_of(conn, event_id)
    root = tree(samples(rows), function)
    if as_svg:
        return svg(root)
    return html(root, title=f"{function}: {root.eqns:,} equations (event {event_id})", subtitle=_ABOUT)


def for_diff(conn: sa.Connection, event_id: str, against: str | None = None) -> str:
    """The HTML flame graph of ``event_id``'s program, each frame coloured by the
    equations it gained or lost against ``against`` (default: the compile
    ``cachewatch diff`` would take)."""
    function, rows = _profile_of(conn, event_id)
    if against is None:
        row = program_reads.event(conn, event_id)
        against = program_texts.default_against(conn, row) if row is not None else None
        if against is None:
            raise program_texts.ProgramNotFound(f"event {event_id} has no earlier compile to diff with; name one")
    _, earlier = _profile_of(conn, against)
    before, after = tree(samples(earlier), function), tree(samples(rows), function)
    gone = diff(before, after)
    title = f"{function}: {before.eqns:,} \u2192 {after.eqns:,} equations ({against} \u2192 {event_id})"
    return html(after, title=title, subtitle=_ABOUT + " Colour: equations gained (red) or lost (blue).", gone=gone)
