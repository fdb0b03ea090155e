"""Two lowered modules (StableHLO text) compared for what JAX's persistent cache keys on.

The cache hashes the module's text without locations, so two modules that XLA optimises
to the same program still miss each other's entry when a name in them differs: private
symbols renumbered (a helper lowered and then dropped moves MLIR's uniquing counter,
jax#38828) or a pointer baked into a name. ``diff_modules`` says which names::

    >>> diff_modules("call @_where_0(%a)", "call @_where_1(%a)").describe()
    'private symbols renumbered: @_where_0 -> @_where_1'
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

# An MLIR symbol reference (``@name`` or ``@"quoted name"``), or a number long enough to
# be an address: the tokens a module may differ by while its program stays the same.
_NAME = re.compile(r'@"(?:[^"\\]|\\.)*"|@[A-Za-z_$.][\w$.-]*|\b0x[0-9a-fA-F]{6,}\b|\b\d{10,}\b')
# A pointer inside a name: 0x and six or more hexadecimal digits, or ten or more digits.
_POINTER = re.compile(r"0x[0-9a-fA-F]{6,}|\d{10,}")
# The number MLIR's uniquing appends to a clashing symbol (``@_where_3``).
_NUMBERED = re.compile(r"^(@\"?.*?)(?:_\d+)?(\"?)$")
# Past these many lines a line diff is not tried (difflib is quadratic at worst).
_MAX_DIFF_LINES = 20_000


@dataclass(frozen=True, slots=True)
class NameChange:
    """One name that differs between two modules, at its first place; ``kind`` is
    ``renumbered`` (the same symbol, another number), ``pointer`` (the same name but for
    an address in it) or ``renamed``."""

    before: str
    after: str
    kind: str


@dataclass(frozen=True, slots=True)
class ModuleDiff:
    """How two lowered modules differ: the names (symbols, addresses) that differ, in
    the order they first appear, and the lines that differ beyond them (0: names only)."""

    names: tuple[NameChange, ...]
    lines_differing: int
    first_line: tuple[str, str] | None  # the first differing line pair beyond names

    @property
    def names_only(self) -> bool:
        return self.lines_differing == 0 and bool(self.names)

    def describe(self, most: int = 3) -> str:
        """The difference in a few words, naming up to ``most`` names of each kind."""
        if not self.names_only:
            if not self.lines_differing:
                return ""
            n = self.lines_differing
            lines = f"{n} line differs" if n == 1 else f"{n} lines differ"
            if self.first_line is None:
                return f"{lines} beyond the names"
            old, new = (_short(line) for line in self.first_line)
            return f"{lines} beyond the names, the first `{old}` -> `{new}`"
        phrases = []
        renumbered = [c for c in self.names if c.kind == "renumbered"]
        if renumbered:
            phrases.append(
                "private symbols renumbered: " + _listed([f"{c.before} -> {c.after}" for c in renumbered], most)
            )
        pointers = [c for c in self.names if c.kind == "pointer"]
        if pointers:
            where = "the symbol" if pointers[0].before.startswith("@") else "the module's text"
            shown = [f"{c.before} -> {c.after}" for c in pointers]
            phrases.append(f"a pointer baked into {where} " + _listed(shown, most))
        renamed = [c for c in self.names if c.kind == "renamed"]
        if renamed:
            phrases.append("symbols renamed: " + _listed([f"{c.before} -> {c.after}" for c in renamed], most))
        return "; ".join(phrases)


def diff_modules(before: str, after: str) -> ModuleDiff:
    """What differs between two lowered modules' texts: when they match once every
    symbol and long number is blanked, the names that differ (each pair once); else how
    many lines differ and the first of them."""
    skeleton_before, names_before = _split(before)
    skeleton_after, names_after = _split(after)
    if skeleton_before == skeleton_after:
        seen: dict[tuple[str, str], None] = {}
        for old, new in zip(names_before, names_after, strict=True):
            if old != new:
                seen.setdefault((old, new))
        return ModuleDiff(tuple(NameChange(old, new, _kind(old, new)) for old, new in seen), 0, None)
    lines_before, lines_after = before.splitlines(), after.splitlines()
    if max(len(lines_before), len(lines_after)) > _MAX_DIFF_LINES:
        return ModuleDiff((), abs(len(lines_before) - len(lines_after)) or 1, None)
    # Lines compared with names blanked, so a renumbering does not count as a change.
    blank_before = [_NAME.sub("@", line) for line in lines_before]
    blank_after = [_NAME.sub("@", line) for line in lines_after]
    differing, first = 0, None
    matcher = difflib.SequenceMatcher(None, blank_before, blank_after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        differing += max(i2 - i1, j2 - j1)
        if first is None:
            first = (lines_before[i1].strip() if i1 < i2 else "", lines_after[j1].strip() if j1 < j2 else "")
    return ModuleDiff((), differing, first)


def _split(text: str) -> tuple[str, list[str]]:
    """The text with each name blanked, and the names in order."""
    names = _NAME.findall(text)
    return _NAME.sub("@", text), names


def _kind(old: str, new: str) -> str:
    if _POINTER.search(old) and _POINTER.sub("#", old) == _POINTER.sub("#", new):
        return "pointer"
    if old.startswith("@") and new.startswith("@") and _NUMBERED.sub(r"\1\2", old) == _NUMBERED.sub(r"\1\2", new):
        return "renumbered"
    return "renamed"


def _listed(items: list[str], most: int) -> str:
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


def _short(line: str, width: int = 80) -> str:
    return line if len(line) <= width else line[: width - 3] + "..."
