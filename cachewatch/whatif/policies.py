"""What a user asks a price for and what it answers: a padding policy (``pow2``,
``multiple:K``, ``ladder:A,B,C``, ``auto[:N]``, ``none``) as written on the command line or
the API, the axis it pads, and the price, its fits and the sizes it weighed."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


class WhatifError(ValueError):
    """A policy or axis that cannot be priced on this run; the message says why."""


@dataclass(frozen=True, slots=True)
class Policy:
    """How the varying size is padded: ``none`` (as recorded), ``pow2``, ``multiple:K``,
    ``ladder:A,B,C`` (sizes above C stay as they are) or ``auto[:N]``."""

    kind: str
    multiple: int = 0
    ladder: tuple[int, ...] = ()
    most: int | None = None

    @property
    def text(self) -> str:
        if self.kind == "multiple":
            return f"multiple:{self.multiple}"
        if self.kind == "ladder":
            return "ladder:" + ",".join(str(b) for b in self.ladder)
        if self.kind == "auto" and self.most is not None:
            return f"auto:{self.most}"
        return self.kind

    def bucket(self, size: int) -> int:
        if self.kind == "pow2":
            return 1 if size <= 1 else 1 << (size - 1).bit_length()
        if self.kind == "multiple":
            return -(-size // self.multiple) * self.multiple
        if self.kind == "ladder":
            return next((b for b in self.ladder if b >= size), size)
        return size


_WHOLE = re.compile(r"^[0-9]+$")


def _whole(text: str, what: str) -> int:
    if not _WHOLE.match(text.strip()):
        raise WhatifError(f"{what} must be a whole number, not {text!r}")
    value = int(text)
    if value < 1:
        raise WhatifError(f"{what} must be 1 or more, not {value}")
    return value


def parse_policy(text: str) -> Policy:
    """``pow2``, ``multiple:K``, ``ladder:A,B,C``, ``auto`` or ``auto:N`` (and ``none``)."""
    word, _, rest = text.strip().partition(":")
    word = word.lower()
    if word in ("none", "pow2") and not rest:
        return Policy(word)
    if word == "multiple" and rest:
        return Policy("multiple", multiple=_whole(rest, "multiple:K's K"))
    if word == "ladder" and rest:
        rungs = tuple(_whole(part, "a ladder's bucket") for part in rest.split(","))
        if list(rungs) != sorted(set(rungs)):
            raise WhatifError(f"a ladder's buckets must rise: {rest!r}")
        return Policy("ladder", ladder=rungs)
    if word == "auto":
        return Policy("auto", most=_whole(rest, "auto:N's N") if rest else None)
    raise WhatifError(f"not a padding policy: {text!r} (use pow2, multiple:K, ladder:A,B,C or auto[:N])")


def parse_axis(text: str) -> tuple[str, int]:
    """``ARG:AXIS``: a leaf path as the signature names it (``batch['x']:0``)."""
    path, sep, axis = text.strip().rpartition(":")
    if not sep or not path or not re.match(r"^-?[0-9]+$", axis.strip()):
        raise WhatifError(f"not an axis: {text!r} (use ARG:AXIS, as in batch['x']:0)")
    return path.strip(), int(axis)


@dataclass(frozen=True, slots=True)
class Fit:
    """A straight line through the run's figures, and how well it fits them."""

    points: int
    slope: float
    intercept: float
    r2: float | None  # None where the figures do not vary
    relative_error: float  # mean |fitted - recorded| / recorded
    model: str  # "linear", or "median" where the line explains too little

    def at(self, x: float) -> float:
        return self.intercept + self.slope * x


@dataclass(frozen=True, slots=True)
class Price:
    """One policy over the run: compiles and their seconds, calls and their run seconds
    (``padded_run_seconds`` is what the padding adds), and the executables the cache keeps."""

    policy: str
    buckets: tuple[int, ...]
    compiles: int
    compile_seconds: float
    run_seconds: float | None
    padded_run_seconds: float | None
    total_seconds: float | None
    executables: int
    executable_bytes: int | None


@dataclass(frozen=True, slots=True)
class SizeRow:
    """One size along the axis: its signatures' compiles, estimated calls and timed run time."""

    size: int
    compiles: int
    calls: float
    run_seconds: float | None  # the median call, where one was timed


@dataclass(frozen=True, slots=True)
class OtherFix:
    """Another fix priced on the run: a jit hoisted out of a loop, a weak-type fix, a persistent cache."""

    fix: str
    compiles: int
    compiles_after: int
    seconds_saved: float
    text: str


@dataclass(frozen=True, slots=True)
class Whatif:
    function_hash: str
    qualname: str
    run_id: str
    run_name: str
    path: str | None
    axis: int | None
    along: tuple[str, ...]  # other leaves padded with it (the same size in every compile)
    sizes: tuple[SizeRow, ...]
    calls: int
    recorded: Price
    price: Price | None  # the policy asked for; None where there is nothing to pad
    curve: tuple[Price, ...]  # auto: the cheapest ladder of each number of buckets
    compile_fit: Fit | None
    run_fit: Fit | None
    run_fit_note: str  # why the run time is not priced, where it is not
    nothing_to_pad: str
    fixes: tuple[OtherFix, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())
