"""Storms and their fixes, from the compile events in a store.

A storm is a function with at least ``threshold`` non-``first_call`` compiles within
``window`` seconds. Each storm names its dominant cause and a concrete fix built from
the events themselves: which argument and axis varied and over which sizes, which
static argument took how many values, which line re-creates the jit.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import linecache
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypedDict, Unpack

import sqlalchemy as sa

from ..core.events import OP_BY_OP_MODULE, Cause, FunctionInfo, parse_described, short_name
from ..core.figures import compile_share, seconds_text, share_text
from ..store import evidence, kept_bursts, queries, regressions
from ..store.columns import Filters, FunctionReport
from ..store.evidence import Recompile, SignatureCost
from . import programs, steady, whatif
from .results import (
    Burst,
    BurstFunction,
    CostModelRow,
    FirstPass,
    Regression,
    SignatureVerdict,
    Storm,
    Summary,
    Verdict,
)

logger = logging.getLogger("cachewatch")


class StormReading(TypedDict, total=False):
    """Which storms :func:`find_storms` reads and how far it tells them."""

    now: float | None
    function_hashes: list[str] | None
    heard_until: float | None
    priced: bool
    described: bool


class StormOptions(StormReading, total=False):
    """:func:`find_storms`'s keyword arguments for all of its storms, taken as they are by
    the functions that give one of its lists."""

    threshold: int
    window: float


def detect_storms(conn: sa.Connection, filters: Filters = Filters(), **options: Unpack[StormOptions]) -> list[Storm]:
    """Every storm in the store, newest first (a function can have several, apart in time).

    Storms are found per run (one process): recompiles of two runs of the same program
    never add up to one storm. A function that storms in several runs has one storm per
    run, each saying in how many runs it recurs. Compiles made during a run's warm-up
    (set-up, and the first compile of each step) are left out, and so is a first pass
    (see :func:`first_passes`). The options are :func:`find_storms`'s.
    """
    return list(find_storms(conn, filters, **options).storms)


def first_passes(conn: sa.Connection, filters: Filters = Filters(), **options: Unpack[StormOptions]) -> list[FirstPass]:
    """Bursts of compiles that are no storm: a first pass over a finite set of shapes (one
    evaluation pass, a first epoch, layer-by-layer eager code), each signature compiled
    once, after which the program went on, served from the cache, for longer than the
    burst itself lasted. Each carries its compiles and their cost, newest first."""
    return list(find_storms(conn, filters, **options).first_passes)


def storms_and_first_passes(
    conn: sa.Connection, filters: Filters = Filters(), **options: Unpack[StormOptions]
) -> tuple[list[Storm], list[FirstPass]]:
    """Both, from one reading of the recompiles: what a page showing both needs (the
    options as :func:`find_storms` takes them)."""
    found = find_storms(conn, filters, **options)
    return list(found.storms), list(found.first_passes)


@dataclasses.dataclass(frozen=True)
class StormsFound:
    """Storms (a page of them, newest first, or active ones first), how many there are in
    all and how many of those are active, and the first passes."""

    storms: tuple[Storm, ...]
    total: int
    active: int
    first_passes: tuple[FirstPass, ...]


STORM_THRESHOLD = 5  # recompiles ...
STORM_WINDOW = 600.0  # ... within this many seconds of each other make a burst
FOUND_HELD = 100_000  # recompiles of bursts found again held for telling (see _bursts_of)


def find_storms(
    conn: sa.Connection,
    filters: Filters = Filters(),
    *,
    threshold: int = STORM_THRESHOLD,
    window: float = STORM_WINDOW,
    now: float | None = None,
    function_hashes: list[str] | None = None,
    heard_until: float | None = None,
    priced: bool = True,
    described: bool = True,
    page: tuple[int, int] | None = None,
    active_first: bool = False,
    active: bool | None = None,
    with_first_passes: bool = True,
) -> StormsFound:
    """Storms and first passes, from one reading of the recompiles.

    A jit of the user's own storms as itself; eager code and library jits are grouped
    under the line of user code that reached them (the compile's call site): one finding
    per line, which is what the user can change. ``function_hashes`` keeps the storms that involve
    one of those functions. ``heard_until`` judges the runs as of that time: what was
    written after it does not show that the program went on. Without ``priced``, a
    storm's padding fix is not priced over its run; without ``described`` (what counting
    storms needs), a storm carries no fix, waste or recurrence, and no diff is read.

    With ``page`` (offset, limit) only that page of the storms is described: every burst
    is judged (storm or first pass) from its compiles alone, and only the storms shown
    have their diffs read and their fix written, weighed and priced. ``active_first``
    orders the active ones first (newest first within each); ``active`` keeps only the
    active storms (True) or only the past ones (False), counted and paged as such.
    Without ``with_first_passes`` none is described or returned (later pages show none).
    The bursts are the store's kept ones where they serve (see :func:`_bursts_of`)."""
    now = time.time() if now is None else now

    def is_active(burst: kept_bursts.Judged) -> bool:
        return now - burst.ended <= window

    found = _bursts_of(conn, filters, threshold, window, function_hashes, heard_until)
    found.sort(key=lambda b: (-b.ended, b.run_id, b.key, b.started))
    storms = [b for b in found if b.storm]
    passes = [b for b in found if not b.storm]
    runs_per_key: dict[str, set[str]] = collections.defaultdict(set)
    for burst in storms:
        runs_per_key[burst.key].add(burst.run_id)
    if active is not None:
        storms = [b for b in storms if is_active(b) == active]
    active_count = sum(1 for b in storms if is_active(b))
    if active_first:
        storms.sort(key=lambda b: not is_active(b))
    shown = storms if page is None else storms[page[0] : page[0] + page[1]]
    telling = _Telling(conn, {}, now, window, described, priced, runs_per_key)
    told_storms, told_passes = telling.kept_or_told(shown, passes if with_first_passes else [])
    return StormsFound(told_storms, len(storms), active_count, told_passes)


def _bursts_of(
    conn: sa.Connection,
    filters: Filters,
    threshold: int,
    window: float,
    function_hashes: list[str] | None,
    heard_until: float | None,
) -> list[kept_bursts.Judged]:
    """The bursts of the recompiles the filters keep, judged: the kept ones
    (store/kept_bursts.py, found again only for the runs that changed) under the default
    threshold and window, judged as of now, over the whole store or one run; else found
    from the recompiles now."""
    # The recompiles of the bursts this reading finds again (a run written since), by
    # burst: told from here, not read back from the store (at a storm's first reading
    # after a write, tens of thousands of rows read twice). Up to FOUND_HELD of them: a
    # store whose every run is found again (after a bulk load) reads back what it tells.
    found: dict[tuple[str, str, float], list[Recompile]] = {}
    held = 0

    def finding(conn: sa.Connection, stale: Filters) -> list[kept_bursts.Judged]:
        nonlocal held
        judged = _judged_bursts(conn, stale)
        for b in judged:
            if b.group and held + len(b.group) <= FOUND_HELD:
                found[(b.run_id, b.key, b.started)] = b.group
                held += len(b.group)
        return judged

    if _kept_serve(filters, threshold, window, heard_until) and kept_bursts.settle(conn, finding):
        kept = kept_bursts.read(conn, function_hashes, filters.run_id)
        return [
            dataclasses.replace(b, group=evidence.in_time_order(group))
            if (group := found.get((b.run_id, b.key, b.started)))
            else b
            for b in kept
        ]
    return _judged_bursts(conn, filters, threshold, window, function_hashes, heard_until)


def _kept_serve(filters: Filters, threshold: int, window: float, heard_until: float | None) -> bool:
    """Whether the kept bursts answer a reading: the default threshold and window, judged
    as of now, over the whole store or one run."""
    defaults = (threshold, window, heard_until) == (STORM_THRESHOLD, STORM_WINDOW, None)
    return defaults and filters.since is None and filters.until is None and filters.run_ids is None


def settle_storms(conn: sa.Connection) -> bool:
    """Find the stale runs' bursts again and keep them (kept_bursts.settle); False when
    this connection cannot write them."""
    return kept_bursts.settle(conn, _judged_bursts)


def _judged_bursts(
    conn: sa.Connection,
    filters: Filters,
    threshold: int = STORM_THRESHOLD,
    window: float = STORM_WINDOW,
    function_hashes: list[str] | None = None,
    heard_until: float | None = None,
) -> list[kept_bursts.Judged]:
    """Every burst of the recompiles the filters keep, judged a storm or a first pass,
    with its recompiles (without their diffs)."""
    # Only the functions and lines with enough recompiles close together to make a burst;
    # the diffs, the bulk of each row, are read later for the bursts told.
    every = steady.recompiles(conn, filters, function_hashes, diffs=False, dense=(threshold, window))
    if not every:
        return []
    names = evidence.function_infos(conn, {r.function_hash for r in every})
    bursts = _bursts_read_whole(conn, every, names, threshold, window, function_hashes)
    storms, passes = _judged(conn, bursts, threshold, heard_until)
    return [
        kept_bursts.Judged(key, run_id, storm, group[0].timestamp, group[-1].timestamp, group)
        for judged, storm in ((storms, True), (passes, False))
        for key, run_id, group in judged
    ]


_Judged = list[tuple[str, str, list[Recompile]]]  # (group key, run, the burst's recompiles)


@dataclasses.dataclass(frozen=True)
class _Telling:
    """How judged bursts become storms and first passes: described (their diffs read, their
    fixes written; storms weighed and, with ``priced``, priced) or only counted."""

    conn: sa.Connection
    names: dict[str, FunctionInfo]
    now: float
    window: float
    described: bool
    priced: bool
    runs_per_key: dict[str, set[str]]  # recurrence counts every storm, shown or not

    def burst(self, key: str, group: list[Recompile]) -> Burst:
        if key.startswith("site:"):
            return _describe_site(key[5:], self.names, group, self.now, self.window, self.described)
        return _describe(key, self.names.get(key), group, self.now, self.window, self.described)

    def _read(self, judged: _Judged) -> _Judged:
        return _read_diffs(self.conn, judged) if self.described else judged

    def kept_or_told(
        self, storms: list[kept_bursts.Judged], passes: list[kept_bursts.Judged]
    ) -> tuple[tuple[Storm, ...], tuple[FirstPass, ...]]:
        """The storms and first passes of these bursts, in their order: a kept burst that
        a listing described before is read as it was told (whether it is active and the
        runs its group storms in read anew); the others are told now (their recompiles
        read, with their diffs when described) and, described and priced as a listing
        describes them, kept with their bursts (kept_bursts.keep_descriptions)."""
        keep = self.described and self.priced  # what a kept description holds
        told: dict[int, Storm | FirstPass] = {}  # by id() of the burst
        if keep or not self.described:  # counting needs less than a kept description says
            told.update((id(b), found) for b in storms + passes if (found := self._as_told(b)) is not None)
        # Kept descriptions this version cannot read (another version wrote them): told
        # now, and what is told replaces them.
        unreadable = {b.burst_id for b in storms + passes if b.description and id(b) not in told}
        groups = kept_bursts.with_groups(self.conn, [b for b in storms + passes if id(b) not in told], self.described)
        telling = dataclasses.replace(
            self, names=evidence.function_infos(self.conn, {r.function_hash for _, group in groups for r in group})
        )
        for is_storm, tell in ((True, telling.storms), (False, telling.first_passes)):
            mine = [(b, group) for b, group in groups if b.storm == is_storm]
            told.update(zip([id(b) for b, _ in mine], tell([(b.key, b.run_id, g) for b, g in mine]), strict=True))
        if keep:
            kept_bursts.keep_descriptions(
                self.conn, {b.burst_id: _description(told[id(b)]) for b, _ in groups if b.burst_id}, unreadable
            )
        # A kept burst whose recompiles a prune took since it was read has nothing told.
        return (
            tuple(s for b in storms if isinstance(s := told.get(id(b)), Storm)),
            tuple(p for b in passes if isinstance(p := told.get(id(b)), FirstPass)),
        )

    def _as_told(self, burst: kept_bursts.Judged) -> Storm | FirstPass | None:
        """The burst as its kept description tells it (only what counting gives, when not
        ``described``); None without one, or with one another version of cachewatch wrote
        in another shape (the burst is told again)."""
        if not burst.description:
            return None
        try:
            if not burst.storm:
                found = FirstPass.from_json(burst.description, active=False)
                return found if self.described else dataclasses.replace(found, fix="")
            active = self.now - burst.ended <= self.window
            if not self.described:  # no fix, waste or recurrence: what telling it uncounted gives
                return Storm.from_json(
                    burst.description,
                    active=active,
                    fix="",
                    priced_fix=None,
                    recurs_in_runs=1,
                    identical_programs=0,
                    identical_seconds=0.0,
                )
            return Storm.from_json(burst.description, active=active, recurs_in_runs=len(self.runs_per_key[burst.key]))
        except (KeyError, TypeError, ValueError):
            return None

    def storms(self, judged: _Judged) -> tuple[Storm, ...]:
        found = [Storm(**_burst_fields(self.burst(key, group))) for key, _, group in self._read(judged)]
        if self.described:
            found = _with_recurrence_and_waste(self.conn, found, self.runs_per_key, priced=self.priced)
        return tuple(found)

    def first_passes(self, judged: _Judged) -> tuple[FirstPass, ...]:
        return tuple(
            FirstPass(
                **_burst_fields(self.burst(key, group), active=False),
                seconds=sum(r.seconds for r in group),
                signatures=len({(r.function_hash, r.signature_hash) for r in group}),
            )
            for key, _, group in self._read(judged)
        )


def _judged(
    conn: sa.Connection,
    bursts: list[tuple[str, str, list[Recompile], list[Recompile]]],
    threshold: int,
    heard_until: float | None,
) -> tuple[_Judged, _Judged]:
    """The bursts that are storms and those that are first passes, in the bursts' order,
    told from their compiles and the runs' statistics (no diff is needed)."""
    # Whether the program went on after a burst is read only for the runs where a burst
    # could be a first pass: a store of a fleet's runs is never read whole for one page.
    possible = [_new_signatures_only(group, rows) for _, _, group, rows in bursts]
    candidates = [(run_id, group) for (_, run_id, group, _), can in zip(bursts, possible, strict=False) if can]
    work = steady.work(conn, {run for run, _ in candidates}, {r.function_hash for _, g in candidates for r in g})
    work.heard_until(heard_until)
    storms: _Judged = []
    passes: _Judged = []
    for (key, run_id, group, _), can in zip(bursts, possible, strict=False):
        compiling = functools.partial(evidence.compile_seconds_between, conn, run_id)
        heard = work.last_after(run_id, group[-1].timestamp)
        if can and _went_on(group, heard, compiling, _served_after(work, run_id, group, heard_until)):
            passes.append((key, run_id, group))
        elif max(collections.Counter(r.function_hash for r in group).values()) >= threshold:
            # A storm is a function that keeps compiling: a line whose many primitives
            # each compiled once or twice (one pass of set-up) is none.
            storms.append((key, run_id, group))
    return storms, passes


# What a kept description leaves out: each listing reads them anew.
_READ_ANEW = ("active", "recurs_in_runs")


def _description(told: Storm | FirstPass) -> dict[str, Any]:
    """A told burst as kept with it (kept_bursts.keep_descriptions)."""
    return {name: value for name, value in told.as_json().items() if name not in _READ_ANEW}


def _read_diffs(conn: sa.Connection, judged: _Judged) -> _Judged:
    """The bursts with their recompiles' diffs, read for just these events."""
    read = {r.event_id: r for r in evidence.with_diffs(conn, [r for _, _, group in judged for r in group])}
    return [(key, run_id, [read[r.event_id] for r in group]) for key, run_id, group in judged]


def _burst_fields(burst: Burst, **changed: Any) -> dict[str, Any]:
    """A burst's fields (one level deep), to make a storm or a first pass of it."""
    fields = {f.name: getattr(burst, f.name) for f in dataclasses.fields(Burst)}
    return {**fields, **changed}


def _bursts_read_whole(
    conn: sa.Connection,
    every: list[Recompile],
    names: dict[str, FunctionInfo],
    threshold: int,
    window: float,
    function_hashes: list[str] | None,
) -> list[tuple[str, str, list[Recompile], list[Recompile]]]:
    """The bursts of recompiles per group (a jit of the user's, or a line of user code) and
    run, as (group key, run, the burst's recompiles, all the group's recompiles in that
    run); only those involving ``function_hashes`` when given."""
    by_group: dict[tuple[str, str], list[Recompile]] = collections.defaultdict(list)
    for row in every:
        by_group[(_group_key(row, names.get(row.function_hash)), row.run_id)].append(row)
    wanted = set(function_hashes) if function_hashes is not None else None
    bursts = [
        (key, run_id, group, rows)
        for (key, run_id), rows in by_group.items()
        for group in _bursts(evidence.in_time_order(rows), threshold, window)
        if wanted is None or wanted & {r.function_hash for r in group}
    ]
    return bursts


def _with_recurrence_and_waste(
    conn: sa.Connection, storms: list[Storm], runs_per_key: dict[str, set[str]], *, priced: bool
) -> list[Storm]:
    """Each storm with the runs its group storms in (``runs_per_key``: of every storm
    found, shown or not), the recompiles that made a program already made, and
    (``priced``) for a new-shape storm of a jit, the padding fix priced over its run."""
    out = []
    # How many of each storm's recompiles produced the program the same function compiled
    # before: pure waste. Another function's program is no waste (same_program_as).
    spans = [programs.Span(tuple(s.function_hashes), s.run_id, s.start, s.end) for s in storms]
    for storm, (identical, seconds) in zip(storms, programs.wasted_in_spans(conn, spans), strict=True):
        out.append(
            dataclasses.replace(
                storm,
                recurs_in_runs=len(runs_per_key[storm.key]),
                identical_programs=identical,
                identical_seconds=seconds,
            )
        )
    if not priced:
        return out
    # What padding would save and cost over its run, priced on the run's own figures, for
    # a new-shape storm of a jit (a line of user code has no one function to pad).
    padded = [i for i, s in enumerate(out) if not s.key.startswith("site:") and s.dominant_cause == Cause.NEW_SHAPE]
    infos = evidence.function_infos(conn, {out[i].key for i in padded})
    padded = [i for i in padded if out[i].key in infos]
    prices = whatif.priced_fixes(conn, [(infos[out[i].key], out[i].run_id) for i in padded])
    for i, price in zip(padded, prices, strict=True):
        if price:
            out[i] = dataclasses.replace(out[i], priced_fix=price, fix=f"{out[i].fix} Priced over this run: {price}.")
    return out


def _group_key(row: Recompile, info: FunctionInfo | None) -> str:
    """A user's jit is a finding of its own; eager code and library jits are one finding
    per line of user code that reached them (their own name when no line is known)."""
    library = info is not None and (info.module == OP_BY_OP_MODULE or is_library_function(info.module, info.file))
    if library and row.call_site:
        return f"site:{row.call_site}"
    return row.function_hash


def _served_after(work: steady.Work, run_id: str, group: list[Recompile], heard_until: float | None) -> bool:
    """Whether the cache served the burst's function after it, as much as the burst itself:
    counted exactly where the compiles say which call compiled (the calls counted since
    the last one outnumber those from the first to the last); else told by statistics
    covering only time after the burst."""
    first, last = group[0], group[-1]
    if first.call_number is not None and last.call_number is not None and len({r.function_hash for r in group}) == 1:
        after = work.calls(run_id, last.function_hash, heard_until) - last.call_number
        return after >= last.call_number - first.call_number + 1
    return work.served_after(run_id, {r.function_hash for r in group}, last.timestamp)


# The causes of compiles that a first pass over new shapes is made of: each a signature
# the function had not compiled before.
_NEW_SIGNATURE_CAUSES = frozenset(
    {Cause.NEW_SHAPE, Cause.NEW_DTYPE, Cause.WEAK_TYPE, Cause.NEW_STATIC_VALUE, Cause.NEW_STRUCTURE}
)


def _new_signatures_only(group: list[Recompile], rows: list[Recompile]) -> bool:
    """What a first pass must be made of, told from the burst alone: every compile a
    signature not compiled before in the run, none compiled again later, and none that
    came while the program kept returning to signatures it had compiled
    (``while_repeating``: a loop whose usual shape the cache served between new ones is a
    storm however long the program was quiet after it; a first pass meets its new
    shapes before it comes back to any)."""
    if any(r.cause not in _NEW_SIGNATURE_CAUSES or not r.signature_hash or r.while_repeating for r in group):
        return False
    hashes = [(r.function_hash, r.signature_hash) for r in group]
    if len(set(hashes)) != len(hashes):
        return False
    end = group[-1].timestamp
    return not any(r.timestamp > end for r in rows)  # it compiled again after the burst


def _went_on(
    group: list[Recompile],
    last_heard: float | None,
    compiling_after: Callable[[float, float], float],
    served_after: bool = False,
) -> bool:
    """Whether the program went on after a burst, with no compile of this function, for
    longer than the burst lasted: it repeated its work, and the cache served it. A
    function that keeps compiling as the program goes on leaves no such quiet stretch.
    ``served_after``: the cache served the function after the burst as much as during it
    (the next epoch's evaluation pass; see :func:`_served_after`), which shows it however
    short the stretch."""
    if last_heard is None:
        return False
    if served_after:
        return True
    # Measured from the end of the burst's last compile (an event is stamped when its
    # trace began) to the run's last word, less the time the run spent compiling other
    # functions meanwhile (that is not the program repeating its work): longer than the
    # burst itself, so more than the writer's own delay after a loop that compiled up to
    # its end.
    end = group[-1].timestamp
    after = end + group[-1].seconds
    quiet = last_heard - after - compiling_after(after, last_heard)
    return quiet > end - group[0].timestamp


def describe_storm(storm: Storm) -> str:
    """One line for a storm, as the command line and the report print it."""
    state = "ACTIVE" if storm.active else "ended"
    causes = sorted(storm.causes.items(), key=lambda kv: -kv[1])
    others = ", ".join(f"{count} {cause}" for cause, count in causes[1:])
    text = (
        f"[{state}] {storm.short_name}: {storm.compiles} recompiles in run {storm.run_id[:8]}, "
        f"mostly {storm.dominant_cause}" + (f" (also {others})" if others else "") + "."
    )
    if storm.recurs_in_runs > 1:
        text += f" Recurs in {storm.recurs_in_runs} runs."
    if storm.identical_programs:
        text += (
            f" {storm.identical_programs} of them produced the program compiled before "
            f"({storm.identical_seconds:.3f} s wasted)."
        )
    return text


def describe_first_pass(found: FirstPass) -> str:
    """One line for a first pass, with what it cost."""
    return (
        f"{found.short_name}: {found.compiles} compiles of {found.signatures} new signatures in run "
        f"{found.run_id[:8]} ({seconds_text(found.seconds)}), mostly {found.dominant_cause}; "
        "then served from the cache as the program went on."
    )


def _bursts(rows: list[Recompile], threshold: int, window: float) -> Iterable[list[Recompile]]:
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


def _describe(
    function_hash: str, info: FunctionInfo | None, rows: list[Recompile], now: float, window: float, fixed: bool = True
) -> Burst:
    """A burst of a jit of the user's, with its fix (``fixed``; it reads the diffs)."""
    span = _span(rows, now, window)
    name = short_name(info.qualname) if info else function_hash
    return Burst(
        key=function_hash,
        function_hash=function_hash,
        function_hashes=(function_hash,),
        call_site=None,
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


def _describe_site(
    call_site: str, infos: dict[str, FunctionInfo], rows: list[Recompile], now: float, window: float, fixed: bool = True
) -> Burst:
    """A storm of eager code and library jits reached from one line of user code, with its
    fix (``fixed``; it reads the diffs)."""
    per_function = collections.Counter(r.function_hash for r in rows)
    top_hash = per_function.most_common(1)[0][0]
    span = _span(rows, now, window)
    names = {h: _display_name(infos.get(h), h) for h in per_function}
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
        short_name=f"{_short_site(call_site)} ({inside}{more})",
        **span,
        fix=site_fix(call_site, infos, rows, span["dominant_cause"]) if fixed else "",
    )


def _display_name(info: FunctionInfo | None, function_hash: str) -> str:
    if info is None:
        return function_hash
    if info.module == OP_BY_OP_MODULE:
        return info.qualname  # "gather (op-by-op)"
    return short_name(info.qualname)


def _short_site(call_site: str) -> str:
    """``/home/u/proj/train.py:42`` -> ``train.py:42``."""
    return call_site.rsplit("/", 1)[-1]


def fix_for(name: str, qualname: str, module: str, cause: str, rows: Sequence[Recompile], file: str = "") -> str:
    """What to change about a function's recompiles (``rows``: their events), most of them
    of ``cause``; an eager compile's function is its primitive, ``name``."""
    if module == OP_BY_OP_MODULE:
        return _op_by_op_fix(name, rows)
    if is_library_function(module, file):
        return _library_fix(short_name(qualname), module, cause, [r for r in rows if r.cause == cause])
    return suggest_fix(short_name(qualname), cause, [r for r in rows if r.cause == cause])


# Library functions that make a jit afresh each time they run, and what to call instead.
# Keyed by the module and the qualified name of the maker (the part before ``<locals>``).
KNOWN_REMADE: dict[tuple[str, str], str] = {
    ("numpyro.infer.svi", "SVI.run"): (
        "keep the SVI state and call `svi.update` in the loop instead of `svi.run`: "
        "`state = svi.init(key, *args)` once, then `state, loss = update(state, *args)` each step, "
        "with `update = jax.jit(svi.update)` made once before the loop"
    ),
}


def site_fix(call_site: str, infos: dict[str, FunctionInfo], rows: Sequence[Recompile], dominant: str) -> str:
    """What to change at one line of user code whose eager code and library calls keep compiling."""
    per_function = collections.Counter(r.function_hash for r in rows)
    if dominant in (Cause.NEW_FUNCTION_OBJECT, Cause.CACHE_CLEARED):
        remade = collections.Counter(r.function_hash for r in rows if r.cause == dominant)
        function_hash, count = remade.most_common(1)[0]
        return _remade_library_fix(call_site, infos.get(function_hash), count, dominant)
    names = [_display_name(infos.get(h), h) for h, _ in per_function.most_common(4)]
    listed = ", ".join(f"`{n}`" for n in names) + (
        f" and {len(per_function) - 4} more" if len(per_function) > 4 else ""
    )
    what = _what_varied(infos, rows)
    callback = _host_callback(call_site)
    if callback is not None:
        return (
            f"{call_site} runs inside `{callback}`, a host callback (jax.debug.callback and the like), on JAX "
            f"arrays: {listed} compiled {len(rows)} more times there{what}. Convert the callback's arguments "
            "to NumPy first (np.asarray(x)) and do that work in NumPy: nothing is compiled, and nothing needs "
            "a fixed shape."
        )
    eager = sum(1 for h in per_function if infos.get(h) is not None and infos[h].module == OP_BY_OP_MODULE)
    runs = (
        "op by op"
        if eager == len(per_function)
        else "outside any jit of yours (JAX's or a library's own jits)"
        if not eager
        else "op by op and through JAX's or a library's own jits"
    )
    return (
        f"Un-jitted code at {call_site} runs {listed} {runs}, and JAX compiled them {len(rows)} more times"
        f"{what}. Move that code inside a jitted function (or keep its shapes fixed: pad what varies to a "
        "few sizes), so it compiles once as part of one program."
    )


def _remade_library_fix(call_site: str, info: FunctionInfo | None, count: int, cause: str) -> str:
    if info is None:
        return f"A library jit reached from {call_site} is compiled again {count} times ({cause})."
    name = short_name(info.qualname)
    library = info.module.split(".", 1)[0] or "a library"
    maker = info.qualname.split(".<locals>.", 1)[0] if ".<locals>." in info.qualname else ""
    if cause == Cause.CACHE_CLEARED:
        return (
            f"`{name}` ({info.module}) is compiled again {count} times after its cache is cleared (called at "
            f"{call_site}): find what clears it (jax.clear_caches(), a library's reset) and move it out of the loop."
        )
    made = (
        f"`{name}` is a jit that {library} makes afresh each time `{maker}` runs"
        if maker
        else f"`{name}` ({info.module}) is wrapped by a new jit object on every call"
    )
    known = KNOWN_REMADE.get((info.module, maker))
    fix = (
        known
        if known
        else (
            "call the library's own step function in the loop (one it jits once) instead of the one that "
            "builds the jit, or jit your loop body once around the call so the library's code is part of "
            "one program compiled once"
        )
    )
    return (
        f"{made} (called at {call_site}): each call compiles it again, {count} times here "
        f"(new_function_object, the same program every time). Fix: {fix}."
    )


def _what_varied(infos: dict[str, FunctionInfo], rows: Sequence[Recompile]) -> str:
    """ ", mostly because axis 0 of `gather`'s operands[1] took 9 sizes between 26 and 41"":
    the operand axis whose size changed in the most compiles, named where it varied."""
    sizes: dict[tuple[str, str, int], set[int]] = collections.defaultdict(set)
    statics: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    for r in rows:
        name = _display_name(infos.get(r.function_hash), r.function_hash).removesuffix(" (op-by-op)")
        for e in r.diff or []:
            if e.get("change") == "shape" and e.get("axes"):
                for side in ("before", "after"):
                    dims = _dims(e.get(side))
                    for axis in e["axes"]:
                        if dims is not None and axis < len(dims):
                            sizes[(name, e["path"], axis)].add(dims[axis])
            elif e.get("change") == "static":
                statics[(name, e["path"])].update(str(v) for v in (e.get("before"), e.get("after")) if v is not None)
    if sizes:
        (name, path, axis), seen = max(sizes.items(), key=lambda kv: len(kv[1]))
        return (
            f", mostly because axis {axis} of `{name}`'s {path} took {len(seen)} sizes between "
            f"{min(seen)} and {max(seen)}"
        )
    if statics:
        (name, path), values = max(statics.items(), key=lambda kv: len(kv[1]))
        return f", mostly because `{name}`'s parameter {path} took {len(values)} different values"
    return ""


def _host_callback(call_site: str) -> str | None:
    """The function around ``call_site`` when the same file passes it to a host callback
    (``jax.debug.callback(log, ...)``, ``pure_callback``, ``io_callback``); None otherwise or
    when the source cannot be read (a store read on another host)."""
    around = steady.enclosing_function(call_site)
    if around is None or around[1] == "<module>":
        return None
    file, name, _ = around
    text = "".join(linecache.getlines(file))
    if re.search(rf"callback\(\s*(?:functools\.)?(?:partial\(\s*)?{re.escape(name)}\b", text):
        return name
    return None


def is_library_function(module: str, file: str) -> bool:
    """A jit defined by JAX or an installed library (jax.random's ``_normal``, made at import
    and wrapped when install() came first): its options are not the user's to change."""
    top = module.split(".", 1)[0]
    return top in ("jax", "jaxlib") or any(part in file for part in ("/site-packages/", "/dist-packages/"))


def _library_fix(name: str, module: str, cause: str, rows: Sequence[Recompile]) -> str:
    """Advice on the calls, not on the function: a library's jit and its static arguments
    are the library's; what the user controls is what they pass it, and from where."""
    sites = _sites_text(rows)
    at = f" (called{sites})" if sites else " (from your code)"
    changed = collections.Counter(e["path"] for r in rows for e in (r.diff or []))
    what = ""
    if changed:
        path = changed.most_common(1)[0][0]
        values = {
            v for r in rows for e in (r.diff or []) if e["path"] == path for v in (e.get("before"), e.get("after"))
        }
        values.discard(None)
        kind = "static argument" if cause == Cause.NEW_STATIC_VALUE else "argument"
        what = f": its {kind} {path} took {len(values)} different values"
    return (
        f"`{name}` is a jit of {module or 'a library'}, compiled again {len(rows)} times{what}{at}. "
        "Its jit options are the library's: pass it fewer distinct values from your code (fixed "
        "shapes, a few sizes), or call it inside one of your jitted functions, where it becomes part "
        "of one program compiled once per signature."
    )


def _op_by_op_fix(primitive: str, rows: Sequence[Recompile]) -> str:
    firsts = [(r.diff or [])[0] for r in rows if r.diff]
    what = ""
    if firsts:
        path, _ = collections.Counter(e["path"] for e in firsts).most_common(1)[0]
        values = {v for e in firsts if e["path"] == path for v in (e.get("before"), e.get("after")) if v is not None}
        kind = "parameter" if any(e.get("change") == "static" for e in firsts if e["path"] == path) else "operand"
        what = f", mostly because its {kind} {path} took {len(values)} different values"
    return (
        f"Un-jitted code{_sites_text(rows)} runs `{primitive}` op by op, and JAX compiled it {len(rows)} "
        f"more times{what}. Move that code inside a jitted function (or keep its shapes fixed), so it "
        "compiles once as part of one program."
    )


def _sites_text(rows: Sequence[Recompile]) -> str:
    """Where the compiles came from: " at file:line", or the main places when there are several."""
    sites = collections.Counter(r.call_site for r in rows if r.call_site)
    if not sites:
        return ""
    if len(sites) == 1:
        return f" at {next(iter(sites))}"
    top = ", ".join(f"{site} ({count}x)" for site, count in sites.most_common(3))
    more = f" and {len(sites) - 3} more" if len(sites) > 3 else ""
    return f" at {len(sites)} places: {top}{more}"


def suggest_fix(name: str, cause: str, rows: Sequence[Recompile]) -> str:
    """A concrete fix for a storm of one cause, naming the argument and call site."""
    sites = _sites_text(rows)
    at = f" (called{sites})" if sites else ""
    if cause == Cause.NEW_SHAPE:
        return _shape_fix(name, rows) + at
    if cause == Cause.NEW_STATIC_VALUE:
        return _static_value_fix(name, rows, at)
    if cause == Cause.NEW_FUNCTION_OBJECT:
        return (
            f"`{name}` is wrapped by a new jit object on every call{at}: jax.jit(lambda ...) or "
            "jax.jit(partial(...)) inside a loop. Create the jitted function once, outside the loop, "
            "and call that; pass changing values as arguments."
        )
    if cause == Cause.WEAK_TYPE:
        paths = _paths(rows, "weak_type")
        return (
            f"Argument {paths} of `{name}` flips between a Python scalar and a typed array{at}. "
            "Pass it the same way every time, e.g. jnp.asarray(x, dtype) before the call."
        )
    if cause == Cause.NEW_DTYPE:
        paths = _paths(rows, "dtype")
        return f"Argument {paths} of `{name}` changes dtype{at}; cast it once (x.astype(...)) before the call."
    if cause == Cause.NEW_STRUCTURE:
        paths = _paths(rows, None)
        return (
            f"The argument pytree of `{name}` keeps changing ({paths}){at}: keep dict keys, list lengths "
            "and keyword-versus-positional calls the same; fill optional entries with placeholders."
        )
    if cause == Cause.CACHE_CLEARED:
        return (
            f"`{name}` is recompiled after its cache is cleared{at}: avoid clear_cache()/jax.clear_caches() "
            "in the loop, or enable the persistent compilation cache."
        )
    if cause == Cause.NEW_CONTEXT:
        options = _paths(rows, "context")
        return (
            f"`{name}` is traced again whenever a configuration option or context manager JAX keys its "
            f"cache on changes ({options}){at}: set the option once at start-up, or call `{name}` inside "
            "the same context every time (hoist the `with` block out of the loop)."
        )
    if cause == Cause.NEW_DEVICE_OR_SHARDING:
        return (
            f"`{name}` is compiled again for other devices or shardings{at}: place inputs once "
            "(jax.device_put with a fixed sharding) before the loop."
        )
    return f"`{name}` recompiles for a reason cachewatch could not establish{at}; see its events' diffs."


def _static_value_fix(name: str, rows: Sequence[Recompile], at: str) -> str:
    """The fix for a storm of new static values: the static argument that took the most,
    and how many distinct values it took."""
    static_paths = collections.Counter(e["path"] for r in rows for e in (r.diff or []) if e.get("change") == "static")
    values: dict[str, set] = collections.defaultdict(set)
    for r in rows:
        for e in r.diff or []:
            if e.get("change") == "static":
                values[e["path"]].update(v for v in (e.get("before"), e.get("after")) if v is not None)
    if static_paths:
        path = static_paths.most_common(1)[0][0]
        return (
            f"Static argument {path} of `{name}` took {len(values[path])} distinct values, one compile "
            f"each{at}. If it only feeds arithmetic, make it a traced argument (drop it from "
            "static_argnums/static_argnames); if it must stay static, limit it to a few values."
        )
    return f"A static argument of `{name}` keeps taking new values{at}; make it traced or bound its values."


def _paths(rows: Sequence[Recompile], change: str | None) -> str:
    counts = collections.Counter(
        e["path"] for r in rows for e in (r.diff or []) if change is None or e.get("change") == change
    )
    if not counts:
        return "?"
    return ", ".join(p for p, _ in counts.most_common(3))


def _shape_fix(name: str, rows: Sequence[Recompile]) -> str:
    sizes: dict[tuple[str, int], set[int]] = collections.defaultdict(set)
    lone: dict[tuple[str, int], int] = collections.Counter()  # compiles where it changed as a batch axis
    for r in rows:
        shape_entries = [e for e in r.diff or [] if e.get("change") == "shape"]
        if _one_batch_size(shape_entries):
            for e in shape_entries:
                lone[(e["path"], e["axes"][0])] += 1
        for e in shape_entries:
            if not e.get("axes"):
                continue
            for side in ("before", "after"):
                dims = _dims(e.get(side))
                if dims is None:
                    continue
                for axis in e["axes"]:
                    if axis < len(dims):
                        sizes[(e["path"], axis)].add(dims[axis])
    if not sizes:
        return (
            f"Array arguments of `{name}` keep changing rank or shape; pad inputs to a fixed shape "
            "or a few bucket sizes."
        )
    # Bucketing is advice for a batch or sequence length: one axis (the same in every
    # argument it is in) that varies on its own, the leading axis or the second, behind a
    # batch axis that stays put ([batch, sequence] token ids). Shapes that change in
    # several arguments or axes together are other programs (layers of other widths),
    # and padding them to one size would change the model.
    batch_like = {
        key: seen
        for key, seen in sizes.items()
        if lone.get(key, 0) * 2 >= len(rows) and (key[1] == 0 or (key[1] == 1 and (key[0], 0) not in sizes))
    }
    if batch_like:
        return _bucket_fix(batch_like)
    ragged = _ragged_axes(rows, sizes)
    if ragged:
        return _ragged_fix(name, rows, ragged)
    (path, axis), seen = max(sizes.items(), key=lambda kv: len(kv[1]))
    return (
        f"`{name}` is compiled for {len(rows) + 1} different combinations of argument shapes "
        f"(e.g. {path} axis {axis}: {', '.join(str(v) for v in sorted(seen)[:6])}), changing together "
        "rather than along one batch or sequence axis: they are different programs, each compiled "
        "once. If they keep coming, jit the larger function that calls it with all of them, so one "
        "compile covers them; do not pad unrelated shapes to one size."
    )


def _bucket_fix(batch_like: dict[tuple[str, int], set[int]]) -> str:
    """Pad one batch or sequence axis to powers of two, naming the buckets."""
    (path, axis), seen = max(batch_like.items(), key=lambda kv: (len(kv[1]), -kv[0][1]))
    along = [f"{p} axis {a}" for (p, a), other in batch_like.items() if (p, a) != (path, axis) and other == seen]
    low, high = min(seen), max(seen)
    buckets = sorted({_next_pow2(s) for s in seen})
    with_it = f"{', '.join(along[:3])}{' and more' if len(along) > 3 else ''}" if along else ""
    text = (
        f"Argument {path} axis {axis} took {len(seen)} sizes between {low} and {high}; pad to powers of two: "
        f"{len(buckets)} compile(s) instead of {len(seen)} (buckets {', '.join(str(b) for b in buckets)}; "
        f"or pad to {high} for one)."
    )
    if axis:
        text += (
            f" It is a sequence length{f' ({with_it} with it)' if with_it else ''}: pad each batch to a "
            "bucketed length rather than to its longest sequence, with a mask over the padding."
        )
    elif with_it:
        text += f" Pad {with_it} with it."
    return text


def _ragged_axes(rows: Sequence[Recompile], sizes: dict[tuple[str, int], set[int]]) -> list[list[str]]:
    """Arguments whose leading axes vary independently of each other, grouped by the
    arguments that always share a size (a graph's nodes; its edges, senders and
    receivers): each a count of items, not a layer's width. Empty when any argument
    varies on another axis."""
    if any(axis != 0 for _, axis in sizes) or len(sizes) < 2:
        return []
    sequences: dict[str, list[int | None]] = {path: [] for path, _ in sizes}
    for r in rows:
        after = {
            e["path"]: _dims(e.get("after"))
            for e in r.diff or []
            if e.get("change") == "shape" and e.get("axes") == [0]
        }
        for path, seq in sequences.items():
            dims = after.get(path)
            seq.append(dims[0] if dims else None)
    groups: dict[tuple[int | None, ...], list[str]] = collections.defaultdict(list)
    for path, seq in sequences.items():
        groups[tuple(seq)].append(path)
    return list(groups.values()) if len(groups) >= 2 else []


_GRAPH_WORDS = ("node", "edge", "sender", "receiver", "graph", "senders", "receivers")


def _ragged_fix(name: str, rows: Sequence[Recompile], groups: list[list[str]]) -> str:
    """Pad each independently varying count (nodes, edges) to its own budget."""
    current: dict[str, int] = {}
    for r in rows[:1]:
        for e in r.diff or []:
            dims = _dims(e.get("before"))
            if e.get("change") == "shape" and dims:
                current[e["path"]] = dims[0]
    combos: set[tuple[int, ...]] = set()
    seen: dict[str, set[int]] = collections.defaultdict(set)
    steps: list[Recompile | None] = [None, *rows]  # the sizes before the first recompile, then after each
    for step in steps:
        if step is not None:
            for e in step.diff or []:
                dims = _dims(e.get("after"))
                if e.get("change") == "shape" and dims:
                    current[e["path"]] = dims[0]
        for group in groups:
            if group[0] in current:
                seen[group[0]].add(current[group[0]])
        combos.add(tuple(_next_pow2(current[g[0]]) for g in groups if g[0] in current))
    parts = []
    for group in groups:
        sizes = seen[group[0]]
        if not sizes:
            continue
        buckets = ", ".join(str(b) for b in sorted({_next_pow2(s) for s in sizes}))
        parts.append(
            f"{'/'.join(group)} axis 0: {len(sizes)} sizes between {min(sizes)} and {max(sizes)} (buckets {buckets})"
        )
    graph = any(word in path.lower() for group in groups for path in group for word in _GRAPH_WORDS)
    helper = (
        " With jraph, jraph.pad_with_graphs(graph, n_node, n_edge) pads a batch of graphs to such a budget "
        "(a padding graph takes the spare nodes and edges), and the loss masks it out with "
        "jraph.get_graph_padding_mask / get_node_padding_mask."
        if graph
        else ""
    )
    return (
        f"`{name}` is compiled for {len(rows) + 1} combinations of {len(groups)} counts that vary independently "
        f"({'; '.join(parts)}): a ragged or graph batch. Pad each to a budget of its own, a power of two above "
        f"its size, and mask the padding: {len(combos)} compile(s) instead of {len(rows) + 1}.{helper}"
    )


def _one_batch_size(entries: list[dict[str, Any]]) -> bool:
    """Whether the shapes that changed in one compile changed as a batch does: one axis
    each, the same axis everywhere, all to the same new size (the inputs and labels of one
    batch), not a layer's input and weights changing together (``x[n, 784] @ w[784, k]``
    to ``h[n, 1024] @ w[1024, k]`` changes axis 1 of one and axis 0 of the other)."""
    sizes, axes = set(), set()
    for e in entries:
        dims = _dims(e.get("after"))
        if not e.get("axes") or len(e["axes"]) != 1 or dims is None or e["axes"][0] >= len(dims):
            return False
        sizes.add(dims[e["axes"][0]])
        axes.add(e["axes"][0])
    return len(sizes) == 1 and len(axes) == 1


def _rank(rows: Sequence[Recompile], path: str) -> int:
    for r in rows:
        for e in r.diff or []:
            if e.get("path") == path:
                dims = _dims(e.get("after"))
                if dims is not None:
                    return len(dims)
    return 0


def _dims(described: Any) -> tuple[int, ...] | None:
    parsed = parse_described(described)
    return parsed[1] if parsed is not None else None


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 2 ** math.ceil(math.log2(n))


# ------------------------------------------------------------------ is jit worth it


def jit_verdict(
    compile_seconds: float,
    compiles: int,
    calls: int,
    run_mean: float | None,
    eager_mean: float | None,
    few_calls: int = 5,
    run_note: str | None = None,
    signatures: Sequence[SignatureVerdict] | None = None,
) -> Verdict:
    """Whether compiling paid for itself, from the numbers the report shows.

    ``run_mean`` is the report's run time of one call, so the compile share here is the
    report's. With an eager baseline (op-by-op run time per call), ``break_even_calls``
    is the calls after which the time saved per call has repaid one compile (the mean
    compile), and ``repaid`` whether this view's calls repaid all its compiles.

        jit_verdict(compile_seconds=0.5, compiles=1, calls=1000, run_mean=0.001, eager_mean=0.004)
    """
    run_est = calls * run_mean if run_mean is not None else None
    share = compile_share(compile_seconds, run_est)  # the report's, from the same numbers
    per_compile = compile_seconds / compiles if compiles else None
    few = compiles > 0 and calls <= few_calls * compiles
    text = []
    if compiles and few:
        text.append(f"compiled {compiles} time(s) for {calls} call(s)")
    if run_mean is None:
        text.append(f"no run time ({run_note or 'no call timed'}), so no compile share")
    else:
        heavier = (
            "compiling costs more than running"
            if share is not None and share >= 0.5
            else "running costs more than compiling"
        )
        text.append(
            f"{heavier}: compile share {share_text(share)} ({compile_seconds:.3g} s compiling, {run_est:.3g} s running)"
        )
    found = _against_eager(compile_seconds, calls, run_mean, eager_mean, per_compile)
    return Verdict(
        compiles=compiles,
        calls=calls,
        compile_seconds=compile_seconds,
        run_seconds_mean=run_mean,
        run_seconds_est=run_est,
        compile_share=share,
        eager_seconds_mean=eager_mean,
        compile_seconds_per_compile=per_compile,
        break_even_calls=found.break_even_calls,
        break_even_calls_total=found.break_even_calls_total,
        jit_saves_seconds=found.jit_saves_seconds,
        repaid=found.repaid,
        signatures=tuple(signatures or ()),
        few_calls=few,
        text="; ".join([*text, *found.text]),
        worth_it=found.repaid,
    )


@dataclasses.dataclass(frozen=True)
class _AgainstEager:
    """The verdict's fields that say whether the compiles were repaid against running
    eagerly, and their sentences."""

    break_even_calls: int | None = None
    break_even_calls_total: int | None = None
    jit_saves_seconds: float | None = None
    repaid: bool | None = None
    text: tuple[str, ...] = ()


def _against_eager(
    compile_seconds: float, calls: int, run_mean: float | None, eager_mean: float | None, per_compile: float | None
) -> _AgainstEager:
    """Whether the compiles were repaid against running eagerly: break-even calls, seconds
    jit saves, repaid, and the sentences that say so."""
    if run_mean is not None and eager_mean is not None:
        saved_per_call = eager_mean - run_mean
        saves = calls * saved_per_call - compile_seconds
        repaid = saves >= 0
        one = total = None
        text: list[str] = []
        if saved_per_call > 0 and per_compile is not None:
            one = math.ceil(per_compile / saved_per_call)
            total = math.ceil(compile_seconds / saved_per_call)
            text.append(
                f"one compile is repaid after {one} calls ({seconds_text(saved_per_call)} saved per call against eager)"
            )
        elif saved_per_call <= 0:
            text.append("eager is as fast per call, so compiling never pays off")
        if repaid:
            text.append(f"this run repaid its compiles: jit saves {saves:.3g} s over running eagerly")
        else:
            text.append(
                f"this run did not repay its compiles: jit costs {-saves:.3g} s more than running eagerly"
                + (f" (it would pay off after {total} calls)" if total is not None else "")
            )
        return _AgainstEager(one, total, saves, repaid, tuple(text))
    if eager_mean is not None and calls * eager_mean < compile_seconds:
        # No jit run time, but even a free run could not have saved the compile time.
        return _AgainstEager(
            repaid=False,
            text=(
                f"this run did not repay its compiles: {calls} call(s) save at most "
                f"{calls * eager_mean:.3g} s against eager, for {compile_seconds:.3g} s compiling",
            ),
        )
    if run_mean is not None:
        return _AgainstEager(text=("eager baseline off, so no break-even",))
    return _AgainstEager()


# The most functions whose verdicts read their signatures by name; more read every function's.
VERDICTS_NAME_FUNCTIONS = 100


def verdicts(
    conn: sa.Connection, report_rows: Sequence[FunctionReport], filters: Filters = Filters(), few_calls: int = 5
) -> dict[str, Verdict]:
    """The jit verdict per function of a report, from the row's own numbers, with eager
    baselines and a break-even per signature where measured."""
    hashes = [row["function_hash"] for row in report_rows if row.get("module") != OP_BY_OP_MODULE]
    if not hashes:
        return {}
    # A verdict of most of the store's functions reads every function's signatures: a
    # list of hundreds of hashes costs more to send and plan than the few rows it saves.
    asked = hashes if len(hashes) <= VERDICTS_NAME_FUNCTIONS else None
    # Only a signature with an eager baseline has a break-even (and needs its run time).
    per_signature: dict[str, list[SignatureCost]] = collections.defaultdict(list)
    for r in evidence.signature_costs(conn, filters, asked, eager_only=True):
        per_signature[r.function_hash].append(r)
    run_times = queries.signature_run_times(conn, filters, asked) if per_signature else {}
    out = {}
    for row in report_rows:
        if row.get("module") == OP_BY_OP_MODULE or not row["calls"] or not row["compiles"]:
            # JAX's own eager compiles, a jit whose calls are not counted (one cachewatch
            # did not wrap, seen through JAX's compile events), or one that never ran on
            # its own (only traced inside other jits): no evidence to weigh.
            continue
        function_hash = row["function_hash"]
        timed = run_times.get(function_hash, {})
        signatures, eager = _signature_break_evens(per_signature.get(function_hash, []), timed)
        out[function_hash] = jit_verdict(
            row["compile_seconds"],
            row["compiles"],
            row["calls"],
            row.get("run_seconds_mean"),
            eager,
            few_calls,
            run_note=row.get("run_time_note"),
            signatures=signatures,
        )
    return out


def _signature_break_evens(
    costs: list[SignatureCost], timed: dict[str, Any]
) -> tuple[list[SignatureVerdict], float | None]:
    """Per signature with an eager baseline, its compiles, run and eager time and
    break-even; and the function's eager run time per call (weighted by the calls timed
    per signature, a plain mean where none was)."""
    signatures = []
    eager_weighted, eager_weight, eager_plain = 0.0, 0, []
    for sig in costs:
        if sig.eager_seconds is None:
            continue
        run = timed.get(sig.signature_hash)
        run_s, weight = (run["run_seconds"], run["weight"]) if run is not None else (None, 0)
        eager_plain.append(sig.eager_seconds)
        eager_weighted += weight * sig.eager_seconds
        eager_weight += weight
        compiles = sig.compiles
        per_compile = sig.seconds / compiles if compiles else None
        saved = sig.eager_seconds - run_s if run_s is not None else None
        signatures.append(
            SignatureVerdict(
                signature_hash=sig.signature_hash,
                compiles=compiles,
                compile_seconds_per_compile=per_compile,
                run_seconds=run_s,
                eager_seconds=sig.eager_seconds,
                break_even_calls=(
                    math.ceil(per_compile / saved) if saved is not None and saved > 0 and per_compile else None
                ),
            )
        )
    eager = (
        eager_weighted / eager_weight
        if eager_weight
        else (sum(eager_plain) / len(eager_plain) if eager_plain else None)
    )
    return signatures, eager


# ------------------------------------------------------------------ compile cost model


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
    fits = evidence.size_fits(conn, filters)
    if not fits:
        return []
    names = {h: info.qualname for h, info in evidence.function_infos(conn, {f.function_hash for f in fits}).items()}
    rows = [_cost_row(fit, names.get(fit.function_hash, ""), min_points) for fit in fits]
    rows.sort(key=lambda r: (-(r.exponent or 0.0), -(r.seconds_per_1000_ops or 0.0)))
    return rows


def _cost_row(fit: evidence.SizeFit, qualname: str, min_points: int) -> CostModelRow:
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


# Regressions a diagnosis lists, steepest first: a fleet's store holds tens of thousands
# of rises between noisy runs, and the steepest are the ones to look at.
REGRESSIONS_SHOWN = 100


@dataclasses.dataclass(frozen=True)
class Regressions:
    """The steepest regressions (at most the limit asked for) and how many there are."""

    shown: list[Regression]
    total: int


def compile_regressions(
    conn: sa.Connection,
    factor: float = regressions.FACTOR,
    min_seconds: float = regressions.MIN_SECONDS,
    limit: int | None = None,
) -> Regressions:
    """The same function and signature compiling markedly slower in a later run,
    steepest first (``limit`` of them when given; ``total`` counts every one).

    Compares the median compile time per (function, signature) between consecutive
    runs that compiled it, and names the JAX versions of both runs.
    """
    slower = regressions.slower_compiles(conn, factor, min_seconds, limit)
    versions = evidence.run_versions(conn, {s.run_before for s in slower.shown} | {s.run_after for s in slower.shown})
    infos = evidence.function_infos(conn, {s.function_hash for s in slower.shown}) if slower.shown else {}
    found = [
        Regression(
            function_hash=s.function_hash,
            signature_hash=s.signature_hash,
            run_before=s.run_before,
            run_after=s.run_after,
            seconds_before=s.seconds_before,
            seconds_after=s.seconds_after,
            ratio=s.seconds_after / s.seconds_before if s.seconds_before else None,
            jax_before="/".join(versions.get(s.run_before, ("", ""))),
            jax_after="/".join(versions.get(s.run_after, ("", ""))),
            qualname=infos[s.function_hash].qualname if s.function_hash in infos else "",
        )
        for s in slower.shown
    ]
    return Regressions(found, slower.total)


def storms(
    conn: sa.Connection,
    filters: Filters,
    *,
    threshold: int,
    window: float,
    active_only: bool = False,
    **options: Unpack[StormReading],
) -> list[Storm]:
    """Storms, newest first, found with ``threshold`` and ``window`` as the service is set
    (the other options as :func:`find_storms` takes them); with ``active_only``, the
    active ones: those whose last compile is within ``window`` of now.

    Active storms are read from the kept bursts where those serve (the defaults, the whole
    store or one run, or a span open at its end that starts before the last
    ``2 * window``: such a span sees every active storm, and one that began before the
    span is counted whole). Otherwise only the events of the last ``2 * window`` are read:
    the ``threshold`` compiles that make a storm span at most ``window``, and an active
    storm's last is within ``window`` of now.
    """
    now = options.get("now")
    now = options["now"] = time.time() if now is None else now
    if not active_only:
        return detect_storms(conn, filters, threshold=threshold, window=window, **options)
    horizon = now - 2 * window
    whole = Filters(run_id=filters.run_id, run_ids=filters.run_ids)
    sees_all = filters.until is None and (filters.since is None or filters.since <= horizon)
    if sees_all and _kept_serve(whole, threshold, window, options.get("heard_until")):
        # The kept bursts still going: found again only for the runs written since, and
        # told once (a storm's description is kept), not judged and told on every poll.
        active = find_storms(
            conn, whole, threshold=threshold, window=window, active=True, with_first_passes=False, **options
        )
        return list(active.storms)
    recent = Filters(
        run_id=filters.run_id,
        until=filters.until,
        since=horizon if filters.since is None else max(filters.since, horizon),
    )
    return [s for s in detect_storms(conn, recent, threshold=threshold, window=window, **options) if s.active]


def summary(
    conn: sa.Connection, filters: Filters, *, threshold: int, window: float, active: Sequence[Storm] | None = None
) -> Summary:
    """The store's totals (or the filtered part's) and how many storms are active now
    (``active``: found already, by a page that shows them)."""
    if active is None:
        active = storms(conn, filters, threshold=threshold, window=window, active_only=True, described=False)
    totals = queries.totals(conn, filters)
    return Summary.of(
        totals,
        active_storms=len(active),
        storm_threshold=threshold,
        storm_window=window,
    )


def verdicts_or_none(conn: sa.Connection, rows: Sequence[FunctionReport], filters: Filters) -> dict[str, Verdict]:
    """:func:`verdicts`, or none when a stored row it cannot weigh (a run time measured
    op by op without its compiled twin, written before the store refused such rows) would
    fail the whole page: the page shows what is there, without the verdicts."""
    try:
        return verdicts(conn, rows, filters)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
        logger.warning("verdicts left out: a stored row cannot be weighed: %s: %s", type(exc).__name__, exc)
        return {}
