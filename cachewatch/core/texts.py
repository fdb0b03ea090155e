"""Small text helpers every layer shares: a text cut to a length, the commonest of some
values, and a value's text without the addresses Python prints for plain objects (two
objects made alike differ only there)."""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Mapping
from typing import Any

# How Python prints where a plain object lives: ``<Trainer object at 0x7f...>``.
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def shortened(text: str, limit: int) -> str:
    """``text``, cut to ``limit`` characters with "..." where it was cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 compile``, ``3 compiles``: a count with its noun agreeing."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def commonest(values: Iterable[str | None]) -> str | None:
    """The value met most often (the first met among equals), empty ones left out."""
    counted = collections.Counter(v for v in values if v)
    return counted.most_common(1)[0][0] if counted else None


def without_addresses(text: str) -> str:
    return ADDRESS.sub("", text)


def static_made_anew(diff: Iterable[Mapping[str, Any]] | None) -> bool:
    """Whether all that changed for a compile is static values made anew: each has the
    same text before and after (addresses aside). JAX's cache compares such a value by
    identity (a jaxpr traced again from a function made afresh, an object without
    ``__eq__``), so the code that made it ran again and the program compiled is the one
    compiled before."""
    entries = list(diff or ())
    return bool(entries) and all(
        e.get("change") == "static"
        and e.get("before") is not None
        and without_addresses(str(e["before"])) == without_addresses(str(e.get("after")))
        for e in entries
    )
