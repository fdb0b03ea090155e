"""The fix a finding gives, written for the code in front of it (findings.py gathers the
storms; this says what to change where it enters): pad with a mask and read the last real
position for a count that grows, keep a growing host list on the host or in a fixed
buffer, build a re-created object once (pointed at its construction), pad varying sizes
where the data is made, and at a call into a library say what happens inside it and what
the user's own code can change, never "jit it"."""

from __future__ import annotations

import ast
import dataclasses
import functools
import linecache
import re

from ..core.events import Cause, FunctionInfo
from ..core.figures import seconds_text
from ..core.texts import counted
from ..core.warmup import enclosing_function, loops_in
from .finding_reads import StormCompile
from .fixes import line_at, next_pow2, short_site
from .results import Storm
from .site_fixes import JIT_IF_ARRAYS_ONLY, is_plain_function, jit_library_function_fix, made_afresh_inside


@dataclasses.dataclass(frozen=True)
class Driver:
    """What varies for a storm (or a finding's storms, as most of them met it)."""

    kind: str  # "size", "object", "static" or "own"
    sizes: frozenset[int] = frozenset()
    growing: bool = False  # a count that grows: each new size larger by the same step
    values: frozenset[str] = frozenset()
    entry: str | None = None  # for "object": the line that reaches the re-created jit
    remade: str = ""  # for "object": the primitive's parameter made anew ("`cond`'s parameter `branches`")
    operands: bool = False  # for "size": the sizes are operand counts (a list that grows, joined whole)


@dataclasses.dataclass(frozen=True)
class Called:
    """The user's line where a finding's cause enters, and what it calls there."""

    site: str | None  # file:line
    text: str  # how it is told ("train.py:87", "the loop at train.py:80 (lines 84, 87)")
    library: str | None = None  # the library the line calls into (its top module)
    callee: str | None = None  # the library function it calls (qualified name)
    # Whether the functions made afresh (a driver's ``remade``) are made inside the library,
    # not by the user's code around the call (a lambda the user's loop defines and hands it).
    remade_inside: bool = False


def finding_fix(
    driver: Driver,
    group: list[Storm],
    made: tuple[str, str, str] | None,
    called: Called,
    functions: tuple[str, ...],
    compiles: int,
    seconds: float,
    infos: dict[str, FunctionInfo],
) -> tuple[str, str]:
    """One fix that applies at the entry, and its kind."""
    entry_text, library = called.text, called.library
    lead = max(group, key=lambda s: s.compiles)
    price = f"{counted(compiles, 'compile')}, {seconds_text(seconds)}"
    named = ", ".join(f"`{n}`" for n in functions[:4]) + (
        f" and {len(functions) - 4} more" if len(functions) > 4 else ""
    )
    if driver.kind == "object" and made is not None:
        name, where, when = made
        recompiled = (
            f"{named}, which takes it as a static argument (hashed by identity: its class defines no "
            "__hash__ or __eq__), compiles again for each new one"
            if lead.dominant_cause == Cause.NEW_STATIC_VALUE
            else "the jit it holds compiles again with it"
        )
        return (
            f"`{name}` is built anew at {short_site(where)} {when}, and {recompiled} ({price}, the same "
            f"program each time). Build `{name}` once, before the loop that calls it, and reuse it: one "
            "compile.",
            "hoist_object",
        )
    if library is not None and called.site and is_plain_function(called.callee) and called.remade_inside:
        # A function of the library's, called op by op, that hands its own jit a function
        # made anew at each call: inside one jit that is traced, not compiled per call
        # (JAX MD's energy functions, made to be jitted). A function that makes a jit
        # anew (JAX MD's `allocate`, which reads sizes from the data) is no such case.
        why = made_afresh_inside(driver.remade, library)
        times = f"{compiles} more times ({seconds_text(seconds)})"
        fix = jit_library_function_fix(called.site, library, called.callee or "", named, times, why)
        return fix, "jit_library_function"
    if driver.kind == "object":
        if driver.remade:
            return lead.fix, "hoist_function"
        if library is not None and sum(s.identical_programs for s in group) * 2 < compiles:
            # A jit the library makes anew, but mostly for programs not compiled before (a
            # new model or format per call): that is the models' price, not a cache missed.
            jittable = is_plain_function(called.callee)
            return _library_boundary(driver, group, entry_text, library, named, price, jittable), "library_boundary"
        return lead.fix, "library_api" if library else "hoist_jit"
    if library is not None:
        jittable = is_plain_function(called.callee)
        return _library_boundary(driver, group, entry_text, library, named, price, jittable), "library_boundary"
    if driver.kind == "size":
        return _size_fix(driver, group, entry_text, named, price, infos)
    if driver.kind == "static":
        return lead.fix, "static_value"
    return lead.fix, "storm"


def _size_fix(
    driver: Driver, group: list[Storm], entry_text: str, named: str, price: str, infos: dict[str, FunctionInfo]
) -> tuple[str, str]:
    """The fix for sizes that vary: a growing host list, a growing count, varying sizes."""
    conversions = [found for s in group if s.of_line and (found := _list_conversion(s.call_site))]
    kept = _host_list_fix(driver, group, conversions, price)
    if kept is not None:
        return kept, "host_buffer"
    sizes = sorted(driver.sizes)
    buckets = sorted({next_pow2(n) for n in sizes})
    if driver.growing:
        return _growing_fix(group, sizes, buckets, conversions, entry_text, named, price, infos), "pad_and_mask"
    jits = [s for s in group if not s.key.startswith("site:")]
    if jits:
        # A jit of the user's is padded by its own priced bucketing; what else the same
        # sizes recompile goes with it.
        own = max(jits, key=lambda s: s.compiles)
        others = [s for s in group if s is not own]
        also = ", ".join(s.short_name for s in others[:3])
        more = (
            f" The same sizes also recompile {also}: pad where the data is made, before any of them sees it, "
            "and they compile once per bucket too."
            if others
            else ""
        )
        return own.fix + more, "pad"
    if len(buckets) >= len(sizes):
        # Few sizes, each its own bucket (the widths of several models, say): nothing to pad.
        return (
            f"{len(sizes)} sizes ({', '.join(str(s) for s in sizes[:8])}) enter at {entry_text}, and {named} "
            f"compile again at each one ({price}). Powers of two would not make them fewer, and where they are "
            "the sizes of different models or data sets, padding would change what is computed. Jit the code "
            f"at {entry_text} (jax.jit around the function it calls): each size then compiles as one program, "
            "not once per operation and size.",
            "jit_code",
        )
    return (
        f"A size that varies ({len(sizes)} sizes between {sizes[0]} and {sizes[-1]}) enters at {entry_text}, "
        f"and {named} compile again at each one ({price}). Pad what varies to powers of two "
        f"({', '.join(str(b) for b in buckets[:6])}) with a mask over the padding, and {_jit_at(entry_text)}: "
        f"{len(buckets)} size(s) to compile for instead of {len(sizes)}.",
        "pad",
    )


def _jit_at(entry_text: str) -> str:
    """Where to jit: the code at a line, or a loop's body, made one function (a loop is
    not what jax.jit wraps)."""
    if entry_text.startswith("the loop at "):
        return f"make the body of {entry_text} one function of what changes each pass, jitted once"
    return f"jit the code at {entry_text} once"


def _host_list_fix(driver: Driver, group: list[Storm], conversions: list[tuple[str, str]], price: str) -> str | None:
    """Where every storm is a line turning a growing Python list into an array, or growing
    an array by itself and one more item: keep the list, make the array once."""
    # A conversion whose sizes do not grow is of data that varies (a NumPy batch), no list.
    if driver.growing and conversions and len(conversions) == len(group):
        site, text = conversions[0]
        return (
            f"`{text}` at {site} turns a Python list that grows each step into a new array: a new shape every "
            f"time, and JAX compiles the conversion again ({price}). Jitting that line cannot help while the "
            "list grows. Keep the list on the host (a NumPy array, `np.asarray(...)`) until it is needed "
            "whole, or keep the values in a fixed-size device buffer written with `buf.at[i].set(x)` beside "
            "a count."
        )
    accumulators = [grown for s in group if s.of_line and (grown := _accumulator(s.call_site))]
    if driver.growing and accumulators and len(accumulators) == len(group):
        site, text, name = accumulators[0]
        return (
            f"`{text}` at {site} makes `{name}` one item longer each time it runs: a new shape every time, "
            f"and JAX compiles it again ({price}). Jitting that line cannot help while `{name}` grows. Collect "
            f"the items in a Python list (`{name}.append(x)`) and make the array once, after the loop "
            f"(`jnp.stack({name})`), or write them into a buffer made once at its final size "
            f"(`buf = buf.at[i].set(x)`)."
        )
    return None


def _growing_fix(
    group: list[Storm],
    sizes: list[int],
    buckets: list[int],
    conversions: list[tuple[str, str]],
    entry_text: str,
    named: str,
    price: str,
    infos: dict[str, FunctionInfo],
) -> str:
    """A count that grows: a fixed buffer, the count passed, the padding masked; the list
    conversions and the reads of position -1 named where they are."""
    text = (
        f"A count that grows from {sizes[0]} to {sizes[-1]} enters at {entry_text}, and {named} compile "
        f"again at each new size ({price})."
    )
    for site, conversion in conversions[:2]:
        text += (
            f" At {site}, `{conversion}` makes a new array of the growing Python list each step: keep the "
            "items in the fixed buffer below instead (`buf = buf.at[n].set(item)`), or in a NumPy array on "
            "the host until needed whole; jitting that line cannot help while the list grows."
        )
    text += (
        f" Keep the data in a buffer of fixed capacity ({sizes[-1]}, or powers of two: {len(buckets)} sizes), "
        "write each new item with `.at[n].set(...)`, pass the count n, mask the unused entries wherever they "
        f"would count (a sum, a mean, attention, a kernel's rows and columns past n), and jit the step once "
        f"over the buffer: {len(buckets)} size(s) to compile for instead of {len(sizes)}."
    )
    last = [found for s in group if (found := _reads_last(infos.get(s.key)))]
    if last:
        name, site = last[0]
        text += (
            f" `{name}` reads the last position (`[-1]` at {site}): in a padded buffer that is padding, so "
            "read position n - 1 instead, or the result changes."
        )
    else:
        text += (
            " Where a result is read at the last position (`x[-1]`), read it at the last real one "
            "(`x[n - 1]`): padding moves the end."
        )
    return text


def _library_boundary(
    driver: Driver, group: list[Storm], entry_text: str, library: str, named: str, price: str, jittable: bool
) -> str:
    """At a call into a library: what compiles inside it, what that costs, what the user's
    own code can change, and never "jit it" where the call is a method of an object the
    library keeps state in (``jittable``: a function, which jitting makes one program per size)."""
    inside = f"The line at {entry_text} calls into {library}, and {named} compile again inside it ({price})."
    cannot = JIT_IF_ARRAYS_ONLY.rstrip(".") if jittable else "That call is not one to wrap in jax.jit as it is made"
    if driver.kind == "size" and driver.growing:
        sizes = sorted(driver.sizes)
        return (
            f"{inside} What changes is the size of what your code passes it: it grows over {len(sizes)} sizes "
            f"between {sizes[0]} and {sizes[-1]}. {cannot}; what "
            f"your code can change is the data it hands {library}: a fixed size (pad to {sizes[-1]}, or to "
            f"powers of two) with the padding masked out the way {library} supports it (in NumPyro, "
            "`numpyro.handlers.mask` or an observation mask), or fewer distinct sizes (refit every few steps). "
            "Otherwise nothing in your code removes these compiles."
        )
    identical = sum(s.identical_programs for s in group)
    wasted = sum(s.identical_seconds for s in group)
    again = (
        f" {identical} of them compiled a program compiled before in the run ({seconds_text(wasted)})."
        if identical
        else ""
    )
    return (
        f"{inside}{again} They are {library}'s own work for what each call is given (a new model, new "
        f"shapes, a new object). {cannot}. What your code can change: where it repeats work, give the library "
        "the same again (keep one object per model and call it again rather than building a new one; keep "
        "the data one size). Where each call is given a different model, these compiles are that model's "
        "price, and nothing in your code removes them."
    )


def _list_conversion(call_site: str | None) -> tuple[str, str] | None:
    """(the short site, ``jnp.array(tokens)``) when a line turns a Python list into an array
    (JAX stacks its items: one compile per length); None otherwise or without its source."""
    if call_site is None:
        return None
    text = line_at(call_site)
    found = re.search(r"\b((?:jnp|np|numpy|jax\.numpy)\.(?:array|asarray|stack)\(\s*\w+\s*\))", text) or re.search(
        # ``jnp.concatenate([context] + outs)``: a list that grows, joined whole
        r"\b((?:jnp|np|numpy|jax\.numpy)\.(?:concatenate|stack|vstack|hstack)\(\s*\[[^\]]*\]\s*\+\s*\w+\s*\))",
        text,
    )
    return (short_site(call_site), found.group(1)) if found else None


# ``samples = jnp.append(samples, x)``, ``out = jnp.concatenate([out, x])``: an array that
# takes itself and one more item each time.
_ACCUMULATES = re.compile(
    r"^\s*(?P<name>\w+)\s*=\s*(?P<call>(?:jnp|np|numpy|jax\.numpy)\.(?:append|concatenate|vstack|hstack)"
    r"\(\s*[\[(]?\s*(?P=name)\b.*\))\s*(?:#.*)?$"
)


def _accumulator(call_site: str | None) -> tuple[str, str, str] | None:
    """(the short site, ``jnp.append(samples, x)``, ``samples``) when a line grows an array
    by itself and one more item; None otherwise or without its source."""
    if call_site is None:
        return None
    found = _ACCUMULATES.match(line_at(call_site).rstrip())
    return (short_site(call_site), found.group("call"), found.group("name")) if found else None


def _reads_last(info: FunctionInfo | None) -> tuple[str, str] | None:
    """(its name, the line) when a jit of the user's reads a result at position -1."""
    if info is None or not info.file or not info.line:
        return None
    for start, stop in _definitions_in(info.file):
        if start == info.line:
            for number in range(start, stop + 1):
                if re.search(r"\[\s*(?:\.\.\.\s*,\s*|:\s*,\s*)?-1\s*:?\s*\]", linecache.getline(info.file, number)):
                    return info.name, f"{short_site(info.file)}:{number}"
    return None


@functools.lru_cache(maxsize=64)
def _definitions_in(file: str) -> tuple[tuple[int, int], ...]:
    """Every function's first line (its first decorator's, as its code object counts it) and last."""
    try:
        tree = ast.parse("".join(linecache.getlines(file)))
    except (SyntaxError, ValueError):
        return ()
    return tuple(
        (min([node.lineno, *(d.lineno for d in node.decorator_list)]), node.end_lineno or node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    )


def outwards(entry: str | None, rows: list[StormCompile]) -> list[str]:
    """The entry and the user's lines out from it (a method of the user's that calls the
    jit, then the line that called the method), up to three."""
    stack = [f["site"] for f in (rows[0].user_stack if rows else [])]
    if entry in stack:
        return stack[stack.index(entry) : stack.index(entry) + 3]
    return [entry] if entry else []


def construction(entry: str | None) -> tuple[str, str, str] | None:
    """Where the object whose method the entry line calls is built anew, in the same
    function: (its name, the building line, when it is built: each time the function
    runs, or on each pass of a loop), for ``solver = Solver(...)`` above
    ``solver.run(...)``; None when the line calls no such method, the object is built once
    before the loop that calls it, or the source cannot be read."""
    if entry is None:
        return None
    around = enclosing_function(entry)
    file, _, line = entry.rpartition(":")
    if around is None or not line.isdigit():
        return None
    called = re.search(r"\b([A-Za-z_]\w*)\.\w+\(", linecache.getline(file, int(line)))
    if called is None:
        return None
    name = called.group(1)
    built = None
    for number in range(around[2], int(line)):
        text = linecache.getline(file, number)
        if re.match(rf"\s*{re.escape(name)}\s*=\s*[\w.]+\(", text):
            built = number
    if built is None:
        return None
    loops = loops_in(file)
    # Built anew on each pass of a loop that also calls it (a new object each epoch).
    both = [start for start, stop in loops if start <= built <= stop and start <= int(line) <= stop]
    if both:
        return name, f"{file}:{built}", f"on each pass of the loop at {short_site(f'{file}:{max(both)}')}"
    # Built once before a loop that only calls it: not rebuilt per call (the library
    # makes its jit afresh inside the call).
    if any(start <= int(line) <= stop for start, stop in loops):
        return None
    return name, f"{file}:{built}", f"each time `{around[1]}` runs"
