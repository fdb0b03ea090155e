"""Whether a burst of recompiles was a first pass: new signatures met once, after which
the program went on served from the cache (the next epoch, the rest of the loop), or, for
code whose calls are not counted, ran once through with no loop coming round to it.

What tells it, strongest first: the calls counted after the burst (a jit of the user's,
whose compiles say which call compiled), the calls named after each compile (whether the
loop came back to the new signatures), the quiet stretch on the clock after the burst,
and the user's frames of every compile over its span.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import sqlalchemy as sa

from ..core.events import Cause
from ..core.warmup import WarmupWatch, in_a_loop, innermost_loop, one_map_call, ran_once
from . import steady, storm_reads
from .sizes import grows, new_sizes
from .storm_reads import Recompile


def is_first_pass(
    conn: sa.Connection, work: steady.Work, run_id: str, group: list[Recompile], heard_until: float | None
) -> bool:
    """Whether a burst of new signatures is a first pass: the program went on, served from
    the cache, or (code whose calls are not counted) it ran once through, with no loop
    coming round to it; never a count that grows."""
    served = _served_after(work, run_id, group, heard_until)
    if _calls_counted(group):
        # Calls counted one by one say whether the program went on; the clock would take a
        # slow exit (or a wait of the user's) after the burst for work served from the cache.
        went_on = served
    else:
        compiling = functools.partial(storm_reads.compile_seconds_between, conn, run_id)
        went_on = _went_on(group, work.last_after(run_id, group[-1].timestamp), compiling, served)
        went_on = went_on or _served_beside(conn, run_id, group, heard_until)
    if any(r.while_repeating for r in group) and not _served_its_new_shapes(conn, run_id, group):
        return False
    return (went_on or _one_pass(conn, run_id, group)) and not _uncounted_growth(conn, group)


def _served_its_new_shapes(conn: sa.Connection, run_id: str, group: list[Recompile]) -> bool:
    """Whether a burst that came back to signatures it had compiled between new ones
    (``while_repeating``) had most of its new signatures served from the cache again: a
    loop over batches of a few bucketed lengths in random order meets a length again
    before it has met them all, and every length comes round again; a ragged loader's
    short batches, a new size each epoch, are met once and never again (a storm, however
    long the program was quiet after them). Calls are named after each compile
    (capture/counters.py), so a signature served again has calls of its own; one never
    named has none."""
    if _calls_counted(group) is None:
        return False
    new = {r.signature_hash for r in group if r.signature_hash}
    served = storm_reads.served_signatures(conn, run_id, group[0].function_hash, new)
    return len(served) * 2 > len(new)


def _uncounted_growth(conn: sa.Connection, group: list[Recompile]) -> bool:
    """Whether a burst of code whose calls are not counted met a count that grows (each
    size one step past the last: a list appended to in a loop): no finite set of shapes,
    however long the program went on after it without that line. Read only for a burst
    about to be judged a first pass; counted calls tell it without this."""
    if _calls_counted(group) is not None:
        return False
    return grows(new_sizes(r.diff for r in storm_reads.with_diffs(conn, group)))


def _calls_counted(group: list[Recompile]) -> tuple[int, int] | None:
    """The numbers of the calls that made the burst's first and last compiles, where it is
    one function's and its compiles say which call compiled; else None."""
    first, last = group[0].call_number, group[-1].call_number
    if first is None or last is None or len({r.function_hash for r in group}) != 1:
        return None
    return first, last


def _served_after(work: steady.Work, run_id: str, group: list[Recompile], heard_until: float | None) -> bool:
    """Whether the cache served the burst's function after it, as much as the burst itself:
    counted exactly where the compiles say which call compiled (the calls counted since
    the last one outnumber those from the first to the last); else told by statistics
    covering only time after the burst."""
    counted = _calls_counted(group)
    if counted is not None:
        first, last = counted
        return work.calls(run_id, group[-1].function_hash, heard_until) - last >= last - first + 1
    return work.served_after(run_id, {r.function_hash for r in group}, group[-1].timestamp)


# The causes of compiles that a first pass over new shapes is made of: each a signature
# the function had not compiled before.
# A new trace context (the abstract mesh an eager grad's backward pass runs under) is a
# signature not compiled before too.
# A new jit object at a signature the function had not compiled (several models made by
# one factory, each jitted once: the same code, other closures) is one too; one made anew
# at a signature compiled before is never (its signature repeats).
_NEW_SIGNATURE_CAUSES = frozenset(
    {
        Cause.NEW_SHAPE,
        Cause.NEW_DTYPE,
        Cause.WEAK_TYPE,
        Cause.NEW_STATIC_VALUE,
        Cause.NEW_STRUCTURE,
        Cause.NEW_CONTEXT,
        Cause.NEW_FUNCTION_OBJECT,
    }
)


def new_signatures_only(group: list[Recompile], rows: list[Recompile]) -> bool:
    """What a first pass must be made of, told from the burst alone: every compile a
    signature not compiled before in the run, and none compiled again later (whether it
    came back to signatures it had compiled between new ones is told by
    :func:`_served_its_new_shapes`)."""
    if any(r.cause not in _NEW_SIGNATURE_CAUSES or not r.signature_hash for r in group):
        return False
    hashes = [(r.function_hash, r.signature_hash) for r in group]
    if len(set(hashes)) != len(hashes):
        return False
    end = group[-1].timestamp
    return not any(r.timestamp > end for r in rows)  # it compiled again after the burst


def from_code_that_ran_once(conn: sa.Connection, run_id: str, group: list[Recompile], rows: list[Recompile]) -> bool:
    """Whether a burst came, compile by compile, from user code that ran once (a top-level
    line with no loop around it, every frame whole: one eager call of a library's set-up or
    energy function) and nothing compiled again after it: one pass, whatever the library
    compiled inside that one call, twice over included (its first-pass text says so and
    what it cost). A loop of the user's that comes round to it is never this."""
    if any(r.timestamp > group[-1].timestamp for r in rows):
        return False
    # The innermost frame is the call site: one in a loop settles it before the frames are read.
    if any(in_a_loop(site) for site in {r.call_site for r in group if r.call_site}):
        return False
    mine = {r.event_id for r in group}
    span = storm_reads.compiles_in_span(conn, run_id, group[0].timestamp, group[-1].timestamp)
    stacks = [c.user_stack for c in span if c.event_id in mine]
    return len(stacks) == len(mine) and all(stack and ran_once(stack) for stack in stacks)


def _one_pass(conn: sa.Connection, run_id: str, group: list[Recompile]) -> bool:
    """Whether a burst of code whose calls are not counted (eager code, library jits)
    ran as one pass: every compile of the run over its span has its user frames, and none
    of the burst's came back to a call made before with the code around it having moved
    on and returned (core.warmup.WarmupWatch over them all: no loop around it). A loop
    that meets a new size each time it comes round is a storm however the run ends. A
    function mapped over a pytree's leaves comes back once per leaf within one call: no
    loop of the user's (:func:`core.warmup.one_map_call`)."""
    if any(r.call_number is not None for r in group):
        return False  # counted calls tell a first pass by the calls served after it
    span = storm_reads.compiles_in_span(conn, run_id, group[0].timestamp, group[-1].timestamp)
    if any(c.user_stack is None for c in span):
        return False  # frames not recorded: no telling, as before
    mine = {r.event_id for r in group}
    watch = WarmupWatch()
    made: set[tuple[tuple[str, ...], str]] = set()  # (the user's lines, function) compiled so far
    for c in span:
        lines = tuple(frame["site"] for frame in c.user_stack or ())
        again = (lines, c.function_hash) in made
        made.add((lines, c.function_hash))
        came_back = watch.sees_work_again(c.call_site, c.function_hash, c.cause, "", c.user_stack)
        # The same call compiling again inside a for or while is that loop coming round,
        # though no other line compiled in between (a one-line loop body).
        looped = came_back or (again and any(in_a_loop(line) for line in lines))
        if c.event_id in mine and looped and not one_map_call(c.user_stack or ()):
            return False
    return True


def _served_beside(conn: sa.Connection, run_id: str, group: list[Recompile], heard_until: float | None) -> bool:
    """Whether code whose calls are not counted (eager code at a line of a loop: a batch
    cut by a mask, then converted) met its new signatures beside a jit of the same loop
    whose calls are counted, which compiled new signatures of its own up to the burst's
    end and was then served from the cache as many calls as the burst spanned: the loop
    came round again and again, and the line's code compiled nothing more. The same sizes
    arrive at both; the jit's counted calls say what the eager code's cannot."""
    loops = {loop for loop in map(innermost_loop, {r.call_site for r in group if r.call_site}) if loop}
    if not loops or len(group) < 2:
        return False
    start, end = group[0].timestamp, group[-1].timestamp
    step = (end - start) / (len(group) - 1)
    own = {r.function_hash for r in group}
    beside: dict[str, list[storm_reads.CountedCompile]] = {}
    for c in storm_reads.counted_compiles_in_span(conn, run_id, start, end + 2 * step):
        if c.function_hash not in own and _in_loops(c.call_site, loops):
            beside.setdefault(c.function_hash, []).append(c)
    for function_hash, compiles in beside.items():
        if len(compiles) < 2:
            continue  # one compile (its first) is no jit that met the burst's signatures
        # Its compiles went on to the burst's end: no more of the burst's came after its
        # last than it saw on average between two of its own.
        after = sum(1 for r in group if r.timestamp > compiles[-1].timestamp)
        if after > len(group) / len(compiles):
            continue
        first, last = compiles[0].call_number, compiles[-1].call_number
        calls = sum(
            f.calls
            for f in storm_reads.flushes_of(conn, [run_id], [function_hash])
            if heard_until is None or f.timestamp <= heard_until
        )
        if calls - last < last - first + 1:
            continue
        # A jit that kept coming back to its usual signature between new ones (a ragged
        # loader's short batches) is a storm itself, unless most of its new ones came round
        # again: the line's code is judged as that jit is (see _served_its_new_shapes).
        new = {c.signature_hash for c in compiles if c.signature_hash}
        if any(c.while_repeating for c in compiles):
            served = storm_reads.served_signatures(conn, run_id, function_hash, new)
            if len(served) * 2 <= len(new):
                continue
        return True
    return False


def _in_loops(call_site: str, loops: set[tuple[str, int, int]]) -> bool:
    file, _, line = call_site.rpartition(":")
    return line.isdigit() and any(f == file and start <= int(line) <= stop for f, start, stop in loops)


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
    # The burst's own span less the compiles in it (its own, and a jit's first pass met in
    # the same loop): work against work, not against compile time.
    busy = after - group[0].timestamp - compiling_after(group[0].timestamp, end)
    return quiet > busy
