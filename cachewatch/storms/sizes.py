"""The sizes a function's recompiles met, read from their diffs, and whether they are a
count that grows (one more observation, one more sample kept, one more token each time):
what tells a finding's driver (findings.py) and keeps a growing count from passing for a
first pass over a few shapes (diagnosis.py)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core.events import parse_described


def new_sizes(diffs: Iterable[Sequence[Mapping[str, Any]] | None]) -> list[int]:
    """The sizes each compile met on an axis that changed, in time order (from shape
    changes, and from shape-valued static parameters of operations run op by op)."""
    seen: list[int] = []
    for diff in diffs:
        for e in diff or ():
            before, after = dims_of(e.get("before")), dims_of(e.get("after"))
            if before is None or after is None or len(before) != len(after):
                continue
            seen.extend(a for a, b in zip(after, before, strict=True) if a != b)
    return seen


def operand_counts(diffs: Iterable[Sequence[Mapping[str, Any]] | None]) -> list[int]:
    """The number of operands each compile of an operation run op by op was given, where
    its diff says operands were added (``operands[9]`` added: ten), in time order: a
    Python list that grows, joined whole (``jnp.concatenate([context] + outs)``)."""
    seen: list[int] = []
    for diff in diffs:
        added = [_operand_index(e.get("path")) for e in diff or () if e.get("change") == "added"]
        if added and None not in added:
            seen.append(max(n for n in added if n is not None) + 1)
    return seen


def _operand_index(path: Any) -> int | None:
    found = re.fullmatch(r"operands\[(\d+)\]", str(path))
    return int(found.group(1)) if found else None


def dims_of(described: Any) -> tuple[int, ...] | None:
    """``float32[4,16]`` or a static ``(4, 16)`` as its sizes; None for anything else."""
    if not isinstance(described, str):
        return None
    parsed = parse_described(described)
    if parsed is not None:
        return tuple(d for d in parsed[1] if isinstance(d, int))
    if re.fullmatch(r"\(\s*\d+(\s*,\s*\d+)*\s*,?\s*\)", described):
        return tuple(int(d) for d in re.findall(r"\d+", described))
    return None


def grows(sizes: list[int]) -> bool:
    """Whether the sizes met are a count that grows: each new one larger than every one
    before, by the same step (one more observation, one more token), four or more of them.
    Batch lengths that happened to rise are no such count. A few new sizes below the
    largest, no more than one for every four that grew, are other axes met along the way
    (a broadcast's 1 beside the count inside a library's model code), not the count."""
    firsts, below = _rising(sizes)
    steps = {b - a for a, b in zip(firsts, firsts[1:], strict=False)}
    return len(firsts) >= 4 and len(steps) == 1 and below * 4 <= len(firsts)


def grown_sizes(sizes: list[int]) -> list[int]:
    """The sizes of a count that grows (see :func:`grows`), without the few met beside it."""
    return _rising(sizes)[0]


def _rising(sizes: list[int]) -> tuple[list[int], int]:
    """Each size larger than every one before it, in order; and how many new sizes came
    below the largest met by then."""
    firsts: list[int] = []
    below: set[int] = set()
    for n in sizes:
        if not firsts or n > firsts[-1]:
            firsts.append(n)
        elif n not in firsts:
            below.add(n)
    return firsts, len(below)
