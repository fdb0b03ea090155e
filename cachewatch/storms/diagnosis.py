"""Storms and first passes, from the compile events in a store.

A storm is a function with at least ``threshold`` non-``first_call`` compiles within
``window`` seconds (a ``StormRule``). Each burst of them is judged: a storm, or a first
pass the program went on from, served by the cache. Each storm names its dominant cause
and the fix its recompiles call for (fixes.py: which argument and axis varied and over
which sizes, which static argument took how many values, which line re-creates the jit),
priced over its run where padding applies (whatif/).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from typing import Any, Protocol, TypedDict, Unpack

import sqlalchemy as sa

from ..core.events import OP_BY_OP_MODULE, Cause, FunctionInfo
from ..core.figures import seconds_text
from ..programs import program_texts
from ..store import queries
from ..store.columns import Filters
from ..whatif import prices
from . import bursts, first_pass, kept_bursts, steady, storm_reads
from .fixes import is_library_function, short_site
from .results import (
    Burst,
    FirstPass,
    Storm,
)
from .site_fixes import first_pass_fix
from .storm_reads import Recompile

logger = logging.getLogger("cachewatch")


class StormReading(TypedDict, total=False):
    """Which storms :func:`find_storms` reads and how far it tells them."""

    now: float | None
    function_hashes: list[str] | None
    heard_until: float | None
    priced: bool
    described: bool


class StormRule(TypedDict):
    """What makes a storm: ``threshold`` recompiles within ``window`` seconds of each other.
    Set once (``storm_threshold`` and ``storm_window``, in the library's settings and the
    service's) and passed as one, from :func:`rule_of`."""

    threshold: int
    window: float


class _StormSettings(Protocol):
    @property
    def storm_threshold(self) -> int: ...
    @property
    def storm_window(self) -> float: ...


def rule_of(settings: _StormSettings) -> StormRule:
    """The storm rule a configuration sets: the library's ``Config`` or the service's settings."""
    return StormRule(threshold=settings.storm_threshold, window=settings.storm_window)


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
    (kept_bursts.py, found again only for the runs that changed) under the default
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
            dataclasses.replace(b, group=storm_reads.in_time_order(group))
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
    names = queries.function_infos(conn, {r.function_hash for r in every})
    groups = _bursts_read_whole(conn, every, names, threshold, window, function_hashes)
    storms, passes = _judged(conn, groups, threshold, heard_until)
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
            return bursts.of_site(key[5:], self.names, group, self.now, self.window, self.described)
        return bursts.of_function(key, self.names.get(key), group, self.now, self.window, self.described)

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
            self, names=queries.function_infos(self.conn, {r.function_hash for _, group in groups for r in group})
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
        (another shape, or another telling: the burst is told again)."""
        if not burst.description or burst.description.get("telling") != _TELLING:
            return None
        description = {name: value for name, value in burst.description.items() if name != "telling"}
        try:
            if not burst.storm:
                found = FirstPass.from_json(description, active=False)
                return found if self.described else dataclasses.replace(found, fix="")
            active = self.now - burst.ended <= self.window
            if not self.described:  # no fix, waste or recurrence: what telling it uncounted gives
                return Storm.from_json(
                    description,
                    active=active,
                    fix="",
                    priced_fix=None,
                    recurs_in_runs=1,
                    identical_programs=0,
                    identical_seconds=0.0,
                )
            return Storm.from_json(description, active=active, recurs_in_runs=len(self.runs_per_key[burst.key]))
        except (KeyError, TypeError, ValueError):
            return None

    def storms(self, judged: _Judged) -> tuple[Storm, ...]:
        found = [Storm(**_burst_fields(self.burst(key, group))) for key, _, group in self._read(judged)]
        if self.described:
            found = _with_recurrence_and_waste(self.conn, found, self.runs_per_key, priced=self.priced)
        return tuple(found)

    def first_passes(self, judged: _Judged) -> tuple[FirstPass, ...]:
        # A first pass is told no storm's fix (no padding): nothing, or jit the eager line.
        told = []
        for key, _, group in self._read(judged):
            burst = self.burst(key, group)
            seconds = sum(r.seconds for r in group)
            signatures = len({(r.function_hash, r.signature_hash) for r in group})
            line = burst.call_site if burst.of_line else None
            name = f"the code at {short_site(line)}" if line else f"`{burst.short_name}`"
            cost = seconds_text(seconds)
            fix = (
                first_pass_fix(name, line, storm_reads.with_diffs(self.conn, group), signatures, cost)
                if self.described
                else ""
            )
            told.append(
                FirstPass(**_burst_fields(burst, active=False, fix=fix), seconds=seconds, signatures=signatures)
            )
        return tuple(told)


def _judged(
    conn: sa.Connection,
    groups: list[tuple[str, str, list[Recompile], list[Recompile]]],
    threshold: int,
    heard_until: float | None,
) -> tuple[_Judged, _Judged]:
    """The bursts that are storms and those that are first passes, in the bursts' order,
    told from their compiles and the runs' statistics (diffs are read only for a burst of
    code whose calls are not counted that would be a first pass: see _uncounted_growth)."""
    # Whether the program went on after a burst is read only for the runs where a burst
    # could be a first pass: a store of a fleet's runs is never read whole for one page.
    possible = [first_pass.new_signatures_only(group, rows) for _, _, group, rows in groups]
    candidates = [(run_id, group) for (_, run_id, group, _), can in zip(groups, possible, strict=False) if can]
    work = steady.work(conn, {run for run, _ in candidates}, {r.function_hash for _, g in candidates for r in g})
    work.heard_until(heard_until)
    storms: _Judged = []
    passes: _Judged = []
    for (key, run_id, group, rows), can in zip(groups, possible, strict=False):
        if (can and first_pass.is_first_pass(conn, work, run_id, group, heard_until)) or (
            first_pass.from_code_that_ran_once(conn, run_id, group, rows)
        ):
            passes.append((key, run_id, group))
        elif max(collections.Counter(r.function_hash for r in group).values()) >= threshold:
            # A storm is a function that keeps compiling: a line whose many primitives
            # each compiled once or twice (one pass of set-up) is none.
            storms.append((key, run_id, group))
    return storms, passes


# What a kept description leaves out: each listing reads them anew.
_READ_ANEW = ("active", "recurs_in_runs")
# Raised when what a kept description says changes (not only its shape): 2, a jit's storm
# names the line that drives it; 3, a first pass of a library function that made a function
# anew for its jit says how to jit it. Descriptions of another telling are told again.
_TELLING = 3


def _description(told: Storm | FirstPass) -> dict[str, Any]:
    """A told burst as kept with it (kept_bursts.keep_descriptions)."""
    kept = {name: value for name, value in told.as_json().items() if name not in _READ_ANEW}
    return {**kept, "telling": _TELLING}


def _read_diffs(conn: sa.Connection, judged: _Judged) -> _Judged:
    """The bursts with their recompiles' diffs, read for just these events."""
    read = {r.event_id: r for r in storm_reads.with_diffs(conn, [r for _, _, group in judged for r in group])}
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
    return [
        (key, run_id, group, rows)
        for (key, run_id), rows in by_group.items()
        for group in bursts.runs_of(storm_reads.in_time_order(rows), threshold, window)
        if wanted is None or wanted & {r.function_hash for r in group}
    ]


def _with_recurrence_and_waste(
    conn: sa.Connection, storms: list[Storm], runs_per_key: dict[str, set[str]], *, priced: bool
) -> list[Storm]:
    """Each storm with the runs its group storms in (``runs_per_key``: of every storm
    found, shown or not), the recompiles that made a program already made, and
    (``priced``) for a new-shape storm of a jit, the padding fix priced over its run."""
    out = []
    # How many of each storm's recompiles produced the program the same function compiled
    # before: pure waste. Another function's program is no waste (same_program_as).
    spans = [program_texts.Span(tuple(s.function_hashes), s.run_id, s.start, s.end) for s in storms]
    for storm, (identical, seconds) in zip(storms, program_texts.wasted_in_spans(conn, spans), strict=True):
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
    infos = queries.function_infos(conn, {out[i].key for i in padded})
    padded = [i for i in padded if out[i].key in infos]
    found_prices = prices.priced_fixes(conn, [(infos[out[i].key], out[i].run_id) for i in padded])
    for i, price in zip(padded, found_prices, strict=True):
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
        "none compiled again."
    )


def first_pass_advice(found: FirstPass) -> str:
    """A first pass's fix where it offers one (what would spare its one-time cost: jit the
    eager line, a fixed shape with a mask), else nothing: most need none."""
    return found.fix if "Should " in found.fix else ""


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
