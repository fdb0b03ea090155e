"""What to change at a line of the user's code whose eager code and library calls keep
compiling (a storm told per line, not per function), and what a first pass there calls for:
the library call that cannot be jitted as called, the host callback, the jit made at that
line, the count that grows, the code to move inside a jit."""

from __future__ import annotations

import ast
import builtins
import collections
import linecache
import re
from collections.abc import Sequence

from ..core.events import OP_BY_OP_MODULE, Cause, FunctionInfo, short_name
from ..core.warmup import enclosing_function, in_a_loop
from .fixes import (
    Diffed,
    batch_axis,
    display_name,
    line_at,
    next_pow2,
    remade_parameter,
    remade_parameter_fix,
    short_site,
)
from .sizes import dims_of, grows, new_sizes, operand_counts
from .storm_reads import Recompile

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
    names = [display_name(infos.get(h), h) for h, _ in per_function.most_common(4)]
    listed = ", ".join(f"`{n}`" for n in names) + (
        f" and {len(per_function) - 4} more" if len(per_function) > 4 else ""
    )
    what = _what_varied(infos, rows)
    library = library_called(rows)
    if library is not None:
        return _library_site_fix(call_site, infos, rows, library, listed, what)
    callback = _host_callback(call_site)
    if callback is not None:
        return (
            f"{call_site} runs inside `{callback}`, a host callback (jax.debug.callback and the like), on JAX "
            f"arrays: {listed} compiled {len(rows)} more times there{what}. Convert the callback's arguments "
            "to NumPy first (np.asarray(x)) and do that work in NumPy: nothing is compiled, and nothing needs "
            "a fixed shape."
        )
    parameter = remade_parameter(rows, lambda h: display_name(infos.get(h), h).removesuffix(" (op-by-op)"))
    if parameter is not None:
        return remade_parameter_fix(parameter, f" at {call_site}", len(rows))
    eager = sum(1 for h in per_function if infos.get(h) is not None and infos[h].module == OP_BY_OP_MODULE)
    jitted = _jit_made_at(call_site)
    if jitted is not None:
        head = f"The jit made at {call_site} (`{jitted}`) compiled {listed} {len(rows)} more times{what}."
    else:
        runs = (
            "op by op"
            if eager == len(per_function)
            else "outside any jit of yours (JAX's or a library's own jits)"
            if not eager
            else "op by op and through JAX's or a library's own jits"
        )
        head = (
            f"Un-jitted code at {call_site} runs {listed} {runs}, and JAX compiled them {len(rows)} more times{what}."
        )
    diffs = [r.diff for r in rows]
    if grows(new_sizes(diffs)) or grows(operand_counts(diffs)):
        return f"{head} {GROWING_FIX}"
    if jitted is not None:
        return f"{head} Keep its shapes fixed: pad what varies to a few sizes, with the padding masked."
    return (
        f"{head} Move that code inside a jitted function (or keep its shapes fixed: pad what varies to a "
        "few sizes), so it compiles once as part of one program."
    )


def _library_site_fix(
    call_site: str, infos: dict[str, FunctionInfo], rows: Sequence[Recompile], library: str, listed: str, what: str
) -> str:
    """At a line that calls into a library: jit the library's function where the library
    makes a function anew inside it, else what the user's code can change."""
    callee = function_called(rows)
    why = _library_remade(rows, infos, library) if callee is not None else ""
    if callee is not None and why:
        return jit_library_function_fix(call_site, library, callee, listed, f"{len(rows)} more times", why)
    cannot = JIT_IF_ARRAYS_ONLY if callee is not None else "That call is not one to wrap in jax.jit as it is made."
    return (
        f"The line at {call_site} calls into {library}, and {listed} compiled {len(rows)} more times inside "
        f"it{what}. {cannot} What your code can change is what "
        f"it hands {library}: the same shapes each time (pad to a fixed size, with the padding masked the way "
        f"{library} supports it) and the same objects (one per model, reused, rather than one built per call); "
        "otherwise nothing in your code removes these compiles."
    )


# A count that grows a step at a time (one more token, one more item in a list each step):
# no jit helps while it grows, a buffer of fixed capacity does.
GROWING_FIX = (
    "What varies grows a step at a time, so each step is a new program however it is jitted: keep it in a "
    "buffer of fixed capacity (write each new item with `.at[n].set(...)`, pass the count n and mask the "
    "unused entries), or pad it to a few sizes and mask the padding; where a result is read at the last "
    "position (`x[-1]`), read it at the last real one (`x[n - 1]`). A Python list of arrays that grows can "
    "stay on the host (NumPy) until it is needed whole."
)


def _jit_made_at(call_site: str) -> str | None:
    """The ``jax.jit(...)`` the line at ``call_site`` makes and calls, as written (None: the
    line makes no jit, or its source cannot be read)."""
    text = line_at(call_site).strip()
    found = re.search(r"\b(?:jax\.|eqx\.filter_|equinox\.filter_)?jit\([^()]*(?:\([^()]*\)[^()]*)*\)", text)
    return found.group(0) if found else None


def first_pass_fix(name: str, call_site: str | None, rows: Sequence[Recompile], signatures: int, cost: str) -> str:
    """What a first pass of ``signatures`` new signatures calls for: nothing (each compiled
    once, none again), or, at a line of un-jitted code (eager code over a pytree's leaves,
    one call), jit that code should its one-time cost matter; or, where one batch axis met
    many sizes as a loop went on (a batch cut by a mask) until every size had come, what a
    fixed shape with a mask would save."""
    over_loop = _sizes_over_a_loop(name, rows, cost)
    if over_loop:
        return over_loop
    text = (
        f"Nothing to fix: {name} compiled {signatures} new signatures once each ({cost}) and none of them "
        "again; no size varied as the program went on, so there is nothing to pad."
    )
    if len(rows) > signatures:  # code that ran once, inside which a library compiled some twice
        text = (
            f"Nothing repeats as the program goes on: {name} ran once and compiled {len(rows)} times there "
            f"({cost}), {len(rows) - signatures} of them a signature compiled before within that one call; no "
            "loop comes back to it, so there is nothing to pad."
        )
    library = library_called(rows) if call_site is not None else None
    if call_site is not None and library is not None and function_called(rows) and _remade_by_library(rows, {}):
        # A library function that made a function anew for its own jit at each step of the
        # one call: jitting it once makes that one program.
        return (
            f"{text} Should that one-time cost matter: {_jit_where_made(call_site, called_at(call_site))}; "
            f"inside a jit, what {library} makes afresh at each step is traced into one program."
        )
    if call_site is None or library is not None or _host_callback(call_site) is not None:
        return text
    return (
        f"{text} Should that one-time cost matter, jit the call at {short_site(call_site)} (jax.jit around the "
        "function it calls): it then compiles as one program per set of input shapes, not once per primitive "
        "and shape."
    )


# Fewer sizes than this along one axis are a first pass's few shapes (a ragged last batch,
# a test set), not sizes a loop keeps meeting.
_MANY_SIZES = 4


def _sizes_over_a_loop(name: str, rows: Sequence[Recompile], cost: str) -> str | None:
    """A first pass whose compiles came from a line of a loop, along one batch axis of many
    sizes: each compiled once as the loop came round to it, then served. True of this run,
    not of a longer one (more data, shuffled batches meet more sizes): padding to a fixed
    size with a mask makes it one compile."""
    sites = collections.Counter(r.call_site for r in rows if r.call_site)
    if not sites:
        return None
    site = sites.most_common(1)[0][0]
    found = batch_axis(rows)
    # Rows only: sequence lengths met in a first pass are buckets chosen already (a loader
    # that pads to multiples of 16 meets each again), not sizes left to chance.
    if not in_a_loop(site) or found is None or found[1] != 0 or len(found[2]) < _MANY_SIZES:
        return None
    path, _, seen = found
    where = "axis 0 of its operands" if path.startswith("operands[") else f"axis 0 of `{path}`"
    low, high = min(seen), max(seen)
    loop = "its loop" if short_site(site) in name else f"the loop at {short_site(site)}"
    return (
        f"No storm: {name} met {len(seen)} sizes of {where} ({low} to {high}) as {loop} "
        f"came round, compiled each once ({cost}), and the cache served every later call; the compiles end once "
        "every size has come. Should they matter (more data, or shuffled batches, meet more sizes): keep that "
        f"shape fixed, padding each batch to {next_pow2(high)} with a mask that gives the padded rows no weight "
        "wherever they would count (the loss's mean, a sum, a metric); one compile then serves every batch."
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
        f"(new_function_object: a new jit object, so JAX's cache cannot serve it even where the program is "
        f"the same). Fix: {fix}."
    )


def _what_varied(infos: dict[str, FunctionInfo], rows: Sequence[Recompile]) -> str:
    """ ", mostly because axis 0 of `gather`'s operands[1] took 9 sizes between 26 and 41"":
    the operand axis whose size changed in the most compiles, named where it varied."""
    sizes: dict[tuple[str, str, int], set[int]] = collections.defaultdict(set)
    statics: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    for r in rows:
        name = display_name(infos.get(r.function_hash), r.function_hash).removesuffix(" (op-by-op)")
        for e in r.diff or []:
            if e.get("change") == "shape" and e.get("axes"):
                for side in ("before", "after"):
                    dims = dims_of(e.get(side))
                    for axis in e["axes"]:
                        if dims is not None and axis < len(dims):
                            sizes[(name, e["path"], axis)].add(dims[axis])
            elif e.get("change") == "static":
                statics[(name, e["path"])].update(str(v) for v in (e.get("before"), e.get("after")) if v is not None)
    operands: dict[str, set[int]] = collections.defaultdict(set)
    for r in rows:
        for count in operand_counts([r.diff]):
            operands[display_name(infos.get(r.function_hash), r.function_hash).removesuffix(" (op-by-op)")].add(count)
    if operands and sum(len(v) for v in operands.values()) * 2 > len(rows):
        # Operands added (a Python list joined whole): their number is what varied.
        name, counts = max(operands.items(), key=lambda kv: len(kv[1]))
        return f", mostly because `{name}` was given {len(counts)} numbers of operands, from {min(counts)} to {max(counts)}"
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


def _library_remade(rows: Sequence[Recompile], infos: dict[str, FunctionInfo], library: str) -> str:
    """ ", because `safe_mask`'s parameter `fn` is made afresh at each call inside jax_md"",
    where the recompiles repeat for a function the library makes anew; "" otherwise (none
    made anew, or made by the user's code and handed to the library)."""
    remade = _remade_by_library(rows, infos)
    return made_afresh_inside(remade, library) if remade is not None else ""


def _remade_by_library(rows: Sequence[Recompile], infos: dict[str, FunctionInfo]) -> str | None:
    """The static parameter the recompiles were given anew ("`safe_mask`'s parameter `fn`"),
    where the library made it, not the user's code; None otherwise."""
    remade = remade_parameter(rows, lambda h: display_name(infos.get(h), h).removesuffix(" (op-by-op)"))
    return remade if remade is not None and remade_inside(rows, rows[0].call_site) else None


def made_afresh_inside(remade: str, library: str) -> str:
    """ ", because `safe_mask`'s parameter `fn` is made afresh at each call inside jax_md ..."."""
    return f", because {remade} is made afresh at each call inside {library} and JAX compares it by identity"


_FUNCTION_SHOWN = re.compile(r"<function ([\w.<>]+) at 0x")


def remade_inside(rows: Sequence[Diffed], site: str | None) -> bool:
    """Whether the static functions the compiles ``rows`` were given anew are made inside a
    library rather than by the user's code at ``site``: made by a function (``soft_sphere.
    <locals>.<lambda>``) that the user's file does not define. A function defined at a
    module's top level, in a loop, is the user's; so is one whose maker cannot be told."""
    afters = [str(e.get("after")) for r in rows for e in r.diff or [] if e.get("change") == "static"]
    shown = [m.group(1) for m in map(_FUNCTION_SHOWN.search, afters) if m]
    if not shown or site is None:
        return False
    makers = {name.split(".<locals>.")[0].rpartition(".")[2] for name in shown if ".<locals>." in name}
    if len(makers) != 1:
        return False
    text = "".join(linecache.getlines(site.rpartition(":")[0]))
    return bool(text) and re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(makers.pop())}\(", text, re.MULTILINE) is None


def _host_callback(call_site: str) -> str | None:
    """The function around ``call_site`` when the same file passes it to a host callback
    (``jax.debug.callback(log, ...)``, ``pure_callback``, ``io_callback``); None otherwise or
    when the source cannot be read (a store read on another host)."""
    around = enclosing_function(call_site)
    if around is None or around[1] == "<module>":
        return None
    file, name, _ = around
    text = "".join(linecache.getlines(file))
    if re.search(rf"callback\(\s*(?:functools\.)?(?:partial\(\s*)?{re.escape(name)}\b", text):
        return name
    return None


# Modules whose calls are the user's own eager code, not a call into a library: code that
# calls jax.numpy can move inside a jit.
NOT_A_LIBRARY = frozenset({"jax", "jaxlib", "numpy", "cachewatch", "builtins", ""})


def library_of(module: str) -> str | None:
    """The library a call into ``module`` is a call into (its top module), or None for the
    user's own eager code (JAX, NumPy) and for no module."""
    top = module.split(".", 1)[0]
    return None if top in NOT_A_LIBRARY else top


def library_called(rows: Sequence[Recompile]) -> str | None:
    """The library (its top module) that most of the recompiles' call site called into,
    where that is not JAX itself; None otherwise or when not recorded."""
    called = collections.Counter(library_of(r.into) for r in rows)
    top, count = called.most_common(1)[0] if called else (None, 0)
    return top if count * 2 > len(rows) else None


# For a library function whose inside compiles per size: jitting it may or may not be
# possible (JAX MD's `allocate` reads capacities from the data), and never removes a size.
JIT_IF_ARRAYS_ONLY = (
    "Where the function it calls only computes on arrays (it reads no size from their values and takes "
    "no Python branch on them), jitting it makes each size one program instead of one per operation; "
    "each new size still compiles."
)


def function_called(rows: Sequence[Recompile]) -> str | None:
    """The library function (its qualified name) most of the recompiles' call site called,
    where it is a function or a closure a library made, not a method of an object the
    library keeps state in (``MCMC.run``): a function that computes on arrays can be jitted
    as it is called. None otherwise or when not recorded."""
    called = collections.Counter(r.callee for r in rows if library_of(r.into) is not None)
    top, count = called.most_common(1)[0] if called else ("", 0)
    return top if count * 2 > len(rows) and is_plain_function(top) else None


def is_plain_function(qualname: str | None) -> bool:
    """A module's function (``kinetic_energy``) or one a function made (``pair.<locals>.fn``),
    not a method (``MCMC.run``, ``Model.predict``): only the last part of the name counts, so
    ``Sampler.build.<locals>.step``, made by a method, is a function."""
    if not qualname:
        return False
    parts = qualname.split(".")
    return len(parts) == 1 or parts[-2] == "<locals>"


def jit_library_function_fix(call_site: str, library: str, callee: str, listed: str, times: str, why: str) -> str:
    """At a line that calls a library's function op by op whose insides keep compiling: jit
    the function, once, where it is made; inside a jit what the library runs is traced into
    one program."""
    called = called_at(call_site)
    shown = short_name(callee)
    how = _jit_where_made(call_site, called)
    as_called = f" (as `{called}`)" if called and called != shown else ""
    return (
        f"The line at {short_site(call_site)} calls {library}'s function `{shown}`{as_called} op by op, and "
        f"{listed} compiled {times} inside it{why}. Jit the function you call: {how}. Inside a jit, "
        f"what {library} runs is traced into one program, compiled once per set of input shapes, not once per "
        "call. That holds where it takes arrays and does not branch in Python on their values, as functions "
        "written for jax.jit do; otherwise jit the function of yours that makes the call."
    )


def _jit_where_made(call_site: str, called: str | None) -> str:
    """How to jit the function the line calls: where its name was assigned, as the file
    spells jit."""
    jit = jit_as_imported(call_site)
    if called is None or not called.isidentifier():
        return f"wrap the function it calls in {jit} once, before the loop, and call the jitted function here"
    made = assigned_before(call_site, called)
    if made is None:
        return f"`{called} = {jit}({called})` once, before the loop that calls it"
    lines = f"line {made[0]}" if made[0] == made[1] else f"lines {made[0]}-{made[1]}"
    return f"`{called} = {jit}({called})` right after it is made ({lines})"


def jit_as_imported(call_site: str) -> str:
    """``jit`` where the file imports it by that name (``from jax import jit``), else ``jax.jit``."""
    file = call_site.rpartition(":")[0]
    text = "".join(linecache.getlines(file))
    return "jit" if re.search(r"^\s*from jax import [^\n]*\bjit\b", text, re.MULTILINE) else "jax.jit"


def called_at(call_site: str) -> str | None:
    """The function the line at ``call_site`` calls, as written (``energy_fn`` in
    ``PE += [energy_fn(state.position)]``, ``float(...)`` and other builtins looked through);
    None where the line is not one whole statement or calls nothing else."""
    text = line_at(call_site).strip()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    calls = sorted(
        (n for n in ast.walk(tree) if isinstance(n, ast.Call)), key=lambda n: (n.col_offset, -(n.end_col_offset or 0))
    )
    for call in calls:
        name = ast.unparse(call.func)
        if not (isinstance(call.func, ast.Name) and call.func.id in dir(builtins)):
            return name
    return None


def assigned_before(call_site: str, name: str) -> tuple[int, int] | None:
    """The first and last lines of the last statement above ``call_site`` in its file that
    assigns ``name`` (alone or in a tuple: ``neighbor_fn, energy_fn = ...``); None where none
    does or the file cannot be read."""
    file, _, line = call_site.rpartition(":")
    if not line.isdigit():
        return None
    try:
        tree = ast.parse("".join(linecache.getlines(file)))
    except (SyntaxError, ValueError):
        return None
    found = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and node.lineno < int(line):
            names = {t.id for target in node.targets for t in ast.walk(target) if isinstance(t, ast.Name)}
            if name in names and (found is None or node.lineno > found[0]):
                found = (node.lineno, node.end_lineno or node.lineno)
    return found
