"""Findings: one root cause of recompiles, told once across every function it drives.

A storm is one function (or one line of user code) that keeps compiling. One cause often
drives many: a Gaussian-process loop that adds an observation per step recompiles every
operation on the data (the kernel, the Cholesky factor, the solve, the append), a
re-created solver recompiles its library's jit. A finding gathers the storms of one run
that share what varies:

- the same sizes (an axis of their arguments took overlapping sets of sizes, over
  overlapping stretches of the run): one count or length, growing or varying;
- the same object re-created (their compiles are ``new_function_object`` from one line);
- the same static values.

It names what varies, the user's line where it enters (the frame the compiles' user
stacks share: the one line that reaches them all, or the loop around the lines that do,
or the call into a library), every function it drives, its whole price (compiles,
compile seconds, share of the run) and one fix that fits: pad with a mask (and read the
last real position) for a growing length; keep a growing host list on the host or in a
fixed buffer; build a re-created object once, pointed at its construction; at a call
into a library, what happens inside it and what the user's own code can change there,
never "jit it" (finding_fixes.py writes them). The storms stay as its detail (``storms``).
A jit whose calls go through JAX's Python dispatch path for a visible share of its run
is a finding too (cause ``slow_path``, callpaths/), ranked with the others by ``seconds``.

    for finding in findings.find(conn, Filters(run_id=run_id)):
        print(finding.compile_seconds, finding.varying, finding.entry, finding.fix)
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import time
from collections.abc import Sequence
from typing import TypedDict, Unpack

import sqlalchemy as sa

from ..core.events import Cause, FunctionInfo
from ..core.figures import seconds_text
from ..core.texts import commonest
from ..core.warmup import enclosing_function, loops_in
from ..store import queries
from ..store.columns import Filters
from . import diagnosis, finding_reads
from .finding_fixes import Called, Driver, construction, finding_fix, outwards
from .finding_reads import StormCompile
from .fixes import (
    is_library_function,
    made_anew,
    remade_parameter,
    remade_static_objects,
    short_site,
    static_attribute_values,
)
from .path_findings import with_slow_paths
from .results import Finding, Storm
from .site_fixes import library_of, remade_inside
from .sizes import grown_sizes, grows, new_sizes, operand_counts

# The newest storms a listing of findings gathers: each is read once more with its compiles.
STORMS_READ = 500


@dataclasses.dataclass(frozen=True)
class Found:
    """Findings and the storms they were gathered from (a page showing both reads once)."""

    storms: tuple[Storm, ...]
    findings: list[Finding]


class FindOptions(TypedDict, total=False):
    """How findings are found: the storm rule (``threshold`` recompiles within ``window``
    seconds), the time they are judged at (``now``) and the newest storms gathered."""

    threshold: int
    window: float
    now: float | None
    storms_read: int


def find(conn: sa.Connection, filters: Filters = Filters(), **options: Unpack[FindOptions]) -> list[Finding]:
    """The findings of the storms the filters keep (the newest ``storms_read`` of them),
    most compile seconds first."""
    return find_with_storms(conn, filters, **options).findings


def find_with_storms(
    conn: sa.Connection,
    filters: Filters = Filters(),
    *,
    threshold: int = diagnosis.STORM_THRESHOLD,
    window: float = diagnosis.STORM_WINDOW,
    now: float | None = None,
    storms_read: int = STORMS_READ,
) -> Found:
    """:func:`find`'s findings with the storms they gather (the options as it takes them)."""
    now = time.time() if now is None else now
    found = diagnosis.find_storms(
        conn,
        filters,
        threshold=threshold,
        window=window,
        now=now,
        page=(0, storms_read),
        with_first_passes=False,
    )
    return Found(found.storms, with_slow_paths(conn, filters, of_storms(conn, found.storms)))


def of_storms(conn: sa.Connection, storms: Sequence[Storm]) -> list[Finding]:
    """The findings of storms found already (every storm of the runs they are of: a
    finding of a page of storms is only part of one), most compile seconds first."""
    if not storms:
        return []
    compiles = finding_reads.storm_compiles(conn, storms)
    lengths = finding_reads.run_lengths(conn, {s.run_id for s in storms})
    infos = queries.function_infos(conn, {s.key for s in storms if not s.key.startswith("site:")})
    return gather(storms, compiles, lengths, infos)


def gather(
    storms: Sequence[Storm],
    compiles: dict[tuple[str, str, float], list[StormCompile]],
    run_lengths: dict[str, float],
    infos: dict[str, FunctionInfo] | None = None,
) -> list[Finding]:
    """The storms gathered by root cause (``compiles``: each storm's recompiles, by run,
    key and start; ``infos``: where the jits of the user's among them are defined), most
    compile seconds first."""
    rows = {id(s): compiles.get((s.run_id, s.key, s.start), []) for s in storms}
    drivers = {id(s): _driver(s, rows[id(s)]) for s in storms}
    groups = _grouped(list(storms), drivers)
    out = [
        _finding(group, [r for s in group for r in rows[id(s)]], drivers, run_lengths, infos or {}) for group in groups
    ]
    out.sort(key=lambda f: (-f.seconds, -f.compiles, f.finding_id))
    return out


# ------------------------------------------------------------------ what varies


def _driver(storm: Storm, rows: list[StormCompile]) -> Driver:
    cause = storm.dominant_cause
    if cause in (Cause.NEW_FUNCTION_OBJECT, Cause.CACHE_CLEARED):
        return Driver("object", entry=_entry(rows)[0] or storm.call_site)
    values = {str(e.get("after")) for r in rows for e in r.diff if e.get("change") == "static"}
    if cause == Cause.NEW_STATIC_VALUE:
        if made_anew(values):  # a static `self`, an optimizer, made anew: compared by identity
            return Driver("object", entry=_entry(rows)[0] or storm.call_site)
        names = {f.function_hash: f.name.removesuffix(" (op-by-op)") for f in storm.functions}
        remade = remade_parameter(rows, lambda h: names.get(h, h))
        if remade is not None:  # lax.cond's branches defined in a loop, a library's lambda: one program
            return Driver("object", entry=_entry(rows)[0] or storm.call_site, remade=remade)
    sizes = new_sizes(r.diff for r in rows)
    if cause in (Cause.NEW_SHAPE, Cause.NEW_STATIC_VALUE) and len(set(sizes)) >= 2:
        if grows(sizes):
            return Driver("size", frozenset(grown_sizes(sizes)), True)
        return Driver("size", frozenset(sizes), False)
    # A list that grows, joined whole: one more operand of `concatenate` each time.
    joins = all(f.name.startswith("concatenate") for f in storm.functions)
    counts = operand_counts(r.diff for r in rows) if joins and cause == Cause.NEW_STRUCTURE else []
    if grows(counts):
        return Driver("size", frozenset(counts), True, operands=True)
    if cause == Cause.NEW_STATIC_VALUE:
        return Driver("static", values=frozenset(values))
    if cause == Cause.NEW_STRUCTURE and remade_static_objects(r.diff for r in rows) is not None:
        return Driver("object", entry=_entry(rows)[0] or storm.call_site)
    held = static_attribute_values(r.diff for r in rows) if cause == Cause.NEW_STRUCTURE else {}
    if held:  # a structure that differs only in an attribute it holds static (a Flax NNX module's)
        return Driver("static", values=frozenset(f"{a}={v}" for (_, a), seen in held.items() for v in seen))
    return Driver("own")


def _grouped(storms: list[Storm], drivers: dict[int, Driver]) -> list[list[Storm]]:
    """The storms joined where one run's share what varies (see the module's docstring)."""
    parent = list(range(len(storms)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, a in enumerate(storms):
        for j in range(i + 1, len(storms)):
            b = storms[j]
            if a.run_id == b.run_id and _same_cause(a, b, drivers[id(a)], drivers[id(b)]):
                parent[root(j)] = root(i)
    groups: dict[int, list[Storm]] = collections.defaultdict(list)
    for i, s in enumerate(storms):
        groups[root(i)].append(s)
    return list(groups.values())


def _same_cause(a: Storm, b: Storm, da: Driver, db: Driver) -> bool:
    if da.kind != db.kind or da.kind == "own":
        return False
    if da.kind == "object":
        return da.entry is not None and da.entry == db.entry
    overlapping_time = a.start <= b.end and b.start <= a.end
    if da.kind == "static":
        return overlapping_time and bool(da.values) and da.values == db.values
    shared = len(da.sizes & db.sizes)
    return overlapping_time and shared >= 2 and shared * 2 >= min(len(da.sizes), len(db.sizes))


# ------------------------------------------------------------------ where it enters


def _entry(rows: Sequence[StormCompile]) -> tuple[str | None, str, str | None, str | None]:
    """The user's line where what varies enters the compiles ``rows`` make: (the line, how
    it is told, the library that line calls into, the library function it calls).

    The innermost function of the user's that every compile's stack passes through; at it,
    the one line they all come from, or else the innermost loop around those lines. Without
    stacks (an older store), the line most of them were made from."""
    stacks = [r.user_stack for r in rows if r.user_stack]
    if not stacks or len(stacks) < len(rows):
        site = commonest(r.call_site for r in rows)
        return site, short_site(site) if site else "", None, None
    per_compile = [[(_home(f["site"]), f) for f in stack] for stack in stacks]
    shared = set.intersection(*({home for home, _ in frames if home is not None} for frames in per_compile))
    if not shared:
        site = commonest(r.call_site for r in rows)
        return site, short_site(site) if site else "", None, None
    # The innermost shared function, as the first stack nests them.
    home = next(h for h, _ in per_compile[0] if h in shared)
    at_home = [[f for h, f in frames if h == home][-1] for frames in per_compile]
    lines = collections.Counter(f["site"] for f in at_home)
    # The library most of the compiles came from, at that line: JAX's own conversions of
    # the arguments handed to it on the same line (`mcmc.run(key, jnp.asarray(x[:n]))`)
    # come along and do not make the call any less a library's.
    into = collections.Counter(library_of(f.get("into", "")) for f in at_home)
    library, most = into.most_common(1)[0]
    library = library if most * 2 > len(at_home) else None
    callees = collections.Counter(f.get("callee") for f in at_home if library_of(f.get("into", "")) == library)
    callee = callees.most_common(1)[0][0] if len(callees) == 1 and library is not None else None
    if len(lines) == 1:
        site = next(iter(lines))
        return site, short_site(site), library, callee
    loop = _loop_around(home, [int(s.rpartition(":")[2]) for s in lines])
    if loop is not None:
        site = f"{home[0]}:{loop}"
        listed = ", ".join(str(int(s.rpartition(":")[2])) for s, _ in lines.most_common(4))
        return site, f"the loop at {short_site(site)} (lines {listed})", library, None
    site = lines.most_common(1)[0][0]
    return site, short_site(site), library, None


def _home(site: str) -> tuple[str, str, int] | None:
    return enclosing_function(site)


def _loop_around(home: tuple[str, str, int], lines: list[int]) -> int | None:
    """The first line of the innermost ``for``/``while`` in the function ``home`` that holds
    every one of ``lines``; None when none does or the source cannot be read."""
    best = None
    for start, stop in loops_in(home[0]):
        if all(start <= n <= stop for n in lines) and (best is None or start > best[0]):
            best = (start, stop)
    return best[0] if best is not None else None


# ------------------------------------------------------------------ one finding


def _finding(
    group: list[Storm],
    rows: list[StormCompile],
    drivers: dict[int, Driver],
    run_lengths: dict[str, float],
    infos: dict[str, FunctionInfo],
) -> Finding:
    lead = max(group, key=lambda s: (sum(1 for _ in s.functions), s.compiles))
    seconds = sum(r.seconds for r in rows)
    per_function, names = _functions_of(group)
    causes = collections.Counter(r.cause for r in rows) or collections.Counter(
        {s.dominant_cause: s.compiles for s in group}
    )
    cause = causes.most_common(1)[0][0]
    driver = _group_driver(group, drivers)
    # Where a size or a value varies, a new jit object among the compiles (another model's
    # first call, made elsewhere) is not what it drives: it does not place the entry.
    driven = [r for r in rows if r.cause != Cause.NEW_FUNCTION_OBJECT] if driver.kind != "object" else rows
    entry, entry_text, library, callee = (
        _entry(driven or rows) if rows else (lead.call_site, short_site(lead.call_site or ""), None, None)
    )
    if any(_users_own_jit(s, infos) for s in group):
        library = None  # the user's own jit behind a library's wrapper (nnx.jit, eqx.filter_jit) is theirs to fix
    run_id = group[0].run_id
    length = run_lengths.get(run_id)
    compiles = sum(s.compiles for s in group)
    functions = tuple(names[h] for h, _ in per_function.most_common())
    inside = library is not None and driver.remade != "" and remade_inside(rows, entry)
    varying = _varying(driver, group, names, library, inside)
    # A re-built object enters where it is built: the line to change.
    rebuilt = driver.kind == "object" and not driver.remade
    made = next(filter(None, map(construction, outwards(entry, rows))), None) if rebuilt else None
    if made is not None:
        entry, entry_text = made[1], short_site(made[1])
    called = Called(entry, entry_text, library, callee, inside)
    fix, kind = finding_fix(driver, group, made, called, functions, compiles, seconds, infos)
    digest = hashlib.sha256("\0".join([run_id, driver.kind, entry or "", *sorted(s.key for s in group)]).encode())
    return Finding(
        finding_id=digest.hexdigest()[:16],
        run_id=run_id,
        cause=cause,
        varying=varying,
        entry=entry,
        entry_text=entry_text,
        functions=functions,
        function_hashes=tuple(h for h, _ in per_function.most_common()),
        compiles=compiles,
        compile_seconds=seconds,
        share_of_run=min(1.0, seconds / length) if length else None,
        fix=fix,
        fix_kind=kind,
        library=library,
        storms=tuple(s.key for s in sorted(group, key=lambda s: -s.compiles)),
        active=any(s.active for s in group),
        seconds=seconds,
    )


def _functions_of(group: list[Storm]) -> tuple[collections.Counter[str], dict[str, str]]:
    """The group's functions: their compiles over its storms, and their names."""
    per_function: collections.Counter[str] = collections.Counter()
    names: dict[str, str] = {}
    for storm in group:
        for f in storm.functions:
            per_function[f.function_hash] += f.compiles
            names.setdefault(f.function_hash, f.name)
    return per_function, names


def _users_own_jit(storm: Storm, infos: dict[str, FunctionInfo]) -> bool:
    info = infos.get(storm.key)
    return info is not None and not is_library_function(info.module, info.file)


def _group_driver(group: list[Storm], drivers: dict[int, Driver]) -> Driver:
    """What varies for the group: for sizes, those most of its storms met (a kernel's
    other operand is not the count) and whether most of its compiles met them growing."""
    lead = drivers[id(max(group, key=lambda s: s.compiles))]
    sized = [(s, drivers[id(s)]) for s in group if drivers[id(s)].kind == "size"]
    if lead.kind != "size" or not sized:
        return lead
    # A list's length joins the finding; the sizes it tells are the data's, where it has some.
    sized = [(s, d) for s, d in sized if not d.operands] or sized
    lead = max(sized, key=lambda sd: sd[0].compiles)[1]
    met = collections.Counter(n for _, d in sized for n in d.sizes)
    core = frozenset(n for n, count in met.items() if count * 2 >= len(sized)) or lead.sizes
    growing = sum(s.compiles for s, d in sized if d.growing) * 2 >= sum(s.compiles for s, _ in sized)
    return dataclasses.replace(lead, sizes=core, growing=growing)


def _varying(driver: Driver, group: list[Storm], names: dict[str, str], library: str | None, inside: bool) -> str:
    if library is not None and driver.kind != "object" and not (driver.kind == "size" and driver.growing):
        return f"what {library} is given at each call ({len(names)} functions compile inside it)"
    if driver.kind == "size":
        sizes = sorted(driver.sizes)
        how = "a count that grows" if driver.growing else "a size that varies"
        return f"{how}: {len(sizes)} sizes between {sizes[0]} and {sizes[-1]}"
    if driver.kind == "object" and driver.remade:
        where = f"at each call inside {library}" if inside else "at each pass (functions defined in the loop)"
        return f"{driver.remade} made afresh {where}, the same program each time"
    if driver.kind == "object":
        # Where most compiles were no program compiled before, each call brought its own
        # (a new model per call, made by the library): not the same program again.
        same = sum(s.identical_programs for s in group) * 2 >= sum(s.compiles for s in group)
        each = "the same program each time" if same else "mostly a program not compiled before each time"
        return f"a jit (or the object that holds it) made afresh on every call, {each}"
    if driver.kind == "static" and not driver.values:
        return "another program at the same argument types each time"
    if driver.kind == "static":
        return f"a static value: {len(driver.values)} values ({', '.join(sorted(driver.values)[:4])})"
    return f"{group[0].dominant_cause} of {group[0].short_name}"


def describe(finding: Finding) -> str:
    """One line for a finding, as the command line and the runner's summary print it."""
    share = f", {finding.share_of_run:.0%} of the run" if finding.share_of_run is not None else ""
    if finding.cause == "slow_path":
        # Its entry is where the function is defined (its calls are not placed), or, for a
        # jit made anew, the line that makes it, or the line applying a transformation.
        placed = {"hoist_jit": "made at", "jit_transformed": "at"}.get(finding.fix_kind, "defined at")
        defined = f", {placed} {finding.entry_text}" if finding.entry_text else ""
        return f"{finding.varying}{defined}: {seconds_text(finding.seconds)}{share}."
    state = "ACTIVE" if finding.active else "ended"
    where = f" at {finding.entry_text}" if finding.entry_text else ""
    return (
        f"[{state}] {finding.varying}{where}: {finding.compiles} compiles, "
        f"{seconds_text(finding.compile_seconds)}{share}; {len(finding.storms)} storm(s) of "
        f"{len(finding.functions)} function(s)."
    )
