"""The fix a storm calls for, written from its recompiles: which argument and axis varied
over which sizes (pad to buckets), which static argument took how many values, which
line re-creates the jit, which library call remakes its own, which eager line compiles."""

from __future__ import annotations

import collections
import linecache
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from ..core import sources
from ..core.events import OP_BY_OP_MODULE, Cause, FunctionInfo, parse_described, short_name
from ..core.texts import ADDRESS, commonest, shortened, static_made_anew, without_addresses
from ..explain.causes import REMADE_PARAMETER_ADVICE
from .storm_reads import Recompile


def fix_for(name: str, qualname: str, module: str, cause: str, rows: Sequence[Recompile], file: str = "") -> str:
    """What to change about a function's recompiles (``rows``: their events), most of them
    of ``cause``; an eager compile's function is its primitive, ``name``."""
    if module == OP_BY_OP_MODULE:
        return _op_by_op_fix(name, rows)
    if is_library_function(module, file):
        return _library_fix(short_name(qualname), module, cause, [r for r in rows if r.cause == cause])
    return suggest_fix(short_name(qualname), cause, [r for r in rows if r.cause == cause])


def short_site(site: str) -> str:
    """``/home/u/proj/train.py:42`` -> ``train.py:42``."""
    return site.rsplit("/", 1)[-1]


def line_at(call_site: str) -> str:
    """The source text of a ``file:line`` call site ("" where it cannot be read)."""
    file, _, line = call_site.rpartition(":")
    return linecache.getline(file, int(line)) if line.isdigit() else ""


def is_library_function(module: str, file: str) -> bool:
    """A jit defined by JAX or an installed library (jax.random's ``_normal``, made at import
    and wrapped when install() came first): its options are not the user's to change."""
    return module.split(".", 1)[0] in sources.JAX_PACKAGES or sources.is_installed(file)


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


class Diffed(Protocol):
    """A recompile as storms (``Recompile``) and findings (``StormCompile``) read it."""

    @property
    def function_hash(self) -> str: ...
    @property
    def cause(self) -> str: ...
    @property
    def diff(self) -> Sequence[Mapping[str, Any]] | None: ...


def remade_parameter(rows: Sequence[Diffed], name_of: Callable[[str], str]) -> str | None:
    """ "`cond`'s parameter `branches`" where most of the recompiles are compiles of a
    primitive (named by ``name_of`` its function hash) whose static parameter was made
    anew (the same text, compared by identity: functions defined again at each pass and
    traced into new jaxprs); else None."""
    made = [r for r in rows if r.cause == Cause.NEW_STATIC_VALUE and static_made_anew(r.diff)]
    if not made or len(made) * 2 <= len(rows):
        return None
    return commonest(
        f"`{name_of(r.function_hash)}`'s parameter `{e['path']}`"
        for r in made
        for e in r.diff or []
        if e.get("change") == "static"
    )


def remade_parameter_fix(named: str, at: str, count: int) -> str:
    return (
        f"{named} is made anew each time{at}, with the same text, and JAX compares it by "
        f"identity: it compiled the same program {count} more times. {REMADE_PARAMETER_ADVICE}"
    )


def _op_by_op_fix(primitive: str, rows: Sequence[Recompile]) -> str:
    remade = remade_parameter(rows, lambda _: primitive)
    if remade is not None:
        return remade_parameter_fix(remade, _sites_text(rows), len(rows))
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


def _remade_fix(name: str, at: str) -> str:
    """A jit made anew on every call: of a lambda or partial, of a method of an object made
    anew, or made inside a function the loop calls."""
    if "<lambda>" in name or name.startswith("partial("):
        return (
            f"`{name}` is wrapped by a new jit object on every call{at}: jax.jit(lambda ...) or "
            "jax.jit(partial(...)) inside a loop. Create the jitted function once, outside the loop, "
            "and call that; pass changing values as arguments."
        )
    owner, dot, _ = name.rpartition(".")
    if dot and owner and "<locals>" not in owner and "(" not in owner:
        return (
            f"`{name}` is jitted anew with each `{owner}` object{at}: a new `{owner}` is made on every "
            f"call, and its jit with it. Make the `{owner}` once, outside the loop (or the function the "
            "loop calls), and reuse it; pass what changes as arguments."
        )
    return (
        f"`{name}` is wrapped by a new jit object on every call{at}: its jax.jit(...) runs inside the "
        "loop, or inside a function the loop calls. Create the jitted function once, outside, and call "
        "that; pass changing values as arguments."
    )


def suggest_fix(name: str, cause: str, rows: Sequence[Recompile]) -> str:
    """A concrete fix for a storm of one cause, naming the argument and call site."""
    sites = _sites_text(rows)
    at = f" (called{sites})" if sites else ""
    if cause == Cause.NEW_SHAPE:
        return _shape_fix(name, rows) + at
    if cause == Cause.NEW_STATIC_VALUE:
        return _static_value_fix(name, rows, at)
    if cause == Cause.NEW_FUNCTION_OBJECT:
        return _remade_fix(name, at)
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
        # Objects made anew first: an attribute that holds one (an NNX module's optimizer)
        # wants building once, not a Variable.
        remade = remade_static_objects(r.diff for r in rows)
        if remade is not None:
            return _remade_static_objects_fix(name, *remade, at)
        held = _static_attribute(rows)
        if held is not None:
            return _static_attribute_fix(name, *held, at)
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


# A named attribute a treedef holds as static data, as Flax NNX's graph definition shows it.
_STATIC_ATTRIBUTE = re.compile(r"\('(\w+)', Static\(value=(.*?)\)\)")


def static_attribute_values(diffs: Iterable[Sequence[Mapping[str, Any]] | None]) -> dict[tuple[str, str], set[str]]:
    """The values each argument's attribute held in its pytree's static data took, where
    structure changes (these compiles' diffs) differ only there: (argument, attribute):
    values."""
    values: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    for diff in diffs:
        for e in diff or []:
            if e.get("change") != "structure":
                continue
            was = _STATIC_ATTRIBUTE.search(str(e.get("before") or ""))
            now = _STATIC_ATTRIBUTE.search(str(e.get("after") or ""))
            if was and now and was.group(1) == now.group(1):
                values[(e["path"], now.group(1))].update((was.group(2), now.group(2)))
    return values


def _static_attribute(rows: Sequence[Recompile]) -> tuple[str, str, int] | None:
    """The argument and attribute most of these structure changes are, and how many
    values it took; None when the structures differ otherwise."""
    values = static_attribute_values(r.diff for r in rows)
    if not values:
        return None
    (path, attribute), seen = max(values.items(), key=lambda item: len(item[1]))
    return path, attribute, len(seen)


def made_anew(values: Iterable[str]) -> bool:
    """Whether static values (their text) are objects made anew: several, with addresses,
    the same text but for them (compared by identity: a new object each time)."""
    texts = list(values)
    return len(texts) > 1 and all(ADDRESS.search(t) for t in texts) and len({without_addresses(t) for t in texts}) == 1


def remade_static_objects(diffs: Iterable[Sequence[Mapping[str, Any]] | None]) -> tuple[str, str] | None:
    """The argument and the text of the objects, where every structure change of these
    diffs is objects held as static data made anew (the same but for their addresses:
    compared by identity), as an optimizer built again holds new functions; else None."""
    changes = [e for diff in diffs for e in diff or [] if e.get("change") == "structure"]
    if not changes or not all(ADDRESS.search(str(e.get("after") or "")) for e in changes):
        return None
    if any(without_addresses(str(e.get("before"))) != without_addresses(str(e.get("after"))) for e in changes):
        return None
    return changes[-1]["path"], without_addresses(str(changes[-1]["after"])).strip(".")


def _remade_static_objects_fix(name: str, path: str, shown: str, at: str) -> str:
    return (
        f"The structure of {path} passed to `{name}` changes only in objects it holds as static data that "
        f"are made anew each time and compared by identity ({shortened(shown, 120)}){at}: an optimizer "
        "built again (optax's functions are new with each one), a model's apply function, a new train state "
        "made with them. Build them once, before the loop, and reuse them; a hyperparameter that changes "
        "goes in as an array (optax.inject_hyperparams(optax.sgd)(learning_rate=...), set through "
        "opt_state.hyperparams), so one compile serves every value."
    )


def _static_attribute_fix(name: str, path: str, attribute: str, count: int, at: str) -> str:
    return (
        f"The structure of {path} passed to `{name}` changes only in `{attribute}`, a Python value it holds "
        f"as static data ({count} values, one compile each{at}): a Flax NNX module's plain attribute is part "
        "of its graph definition, which nnx.jit keys its cache on. Hold it in an nnx.Variable of a fixed "
        f"dtype (self.{attribute} = nnx.Variable(jnp.asarray(value, jnp.float32)); set it with "
        f"model.{attribute}.value = ..., read self.{attribute}.value): it is traced, so one compile serves "
        "every value, and as no nnx.Param neither the gradient nor the optimizer changes it."
    )


def _static_value_fix(name: str, rows: Sequence[Recompile], at: str) -> str:
    """The fix for a storm of new static values: the static argument that took the most,
    and how many distinct values it took."""
    static_paths = collections.Counter(e["path"] for r in rows for e in (r.diff or []) if e.get("change") == "static")
    values: dict[str, set] = collections.defaultdict(set)
    for r in rows:
        for e in r.diff or []:
            if e.get("change") == "static":
                values[e["path"]].update(
                    str(v).removeprefix("static ") for v in (e.get("before"), e.get("after")) if v is not None
                )
    if static_paths:
        path = static_paths.most_common(1)[0][0]
        if made_anew(values[path]):
            return (
                f"Static argument {path} of `{name}` is an object made anew each time ({len(values[path])} of "
                f"them, one compile each{at}, the same program): JAX hashes a static argument, and an object "
                "without __hash__ and __eq__ of its own (or holding functions, as an optax optimizer does) is "
                "equal only to itself. Build it once, before the loop, and reuse it; a hyperparameter that "
                "changes goes in as an array (optax.inject_hyperparams(optax.sgd)(learning_rate=...), set "
                "through opt_state.hyperparams), so one compile serves every value."
            )
        held = any(e.get("held_static") for r in rows for e in (r.diff or []) if e["path"] == path)
        if held or "[" in path or "." in path:  # a leaf inside a static argument (signature._static_leaves)
            seen = ", ".join(sorted(values[path])[:3])
            counts = all(v.lstrip("-").isdigit() for v in values[path])  # a Python int: maybe a shape or a count
            dtype, kind = ("jnp.int32", "int") if counts else ("jnp.float32", "float")
            in_model = "[" in path or "." in path
            return (
                f"`{name}` holds every non-array leaf of its arguments static (a wrapper such as "
                f"eqx.filter_jit does: only JAX arrays are traced), and {'the leaf' if in_model else 'its argument'} "
                f"{path} took {len(values[path])} distinct values ({seen}, ...), one compile each{at}. Where it "
                f"only feeds arithmetic, make it a JAX array of a fixed dtype (jnp.asarray(value, {dtype}): "
                f"without the dtype a Python {kind}'s array is weakly typed, another signature) so it is traced "
                "and one compile serves every value. "
                + (
                    "An array in a model is a parameter to eqx.filter(model, eqx.is_array) and to the optimizer: "
                    "make it one from the start (the optimizer's state then has its slot) and read it through "
                    "jax.lax.stop_gradient where it is used, so training leaves it as you set it. "
                    if in_model
                    else ""
                )
                + "If it must stay a Python value (a shape, a count of steps), limit it to a few."
            )
        return (
            f"Static argument {path} of `{name}` took {len(values[path])} distinct values, one compile "
            f"each{at}. If it only feeds arithmetic, make it a traced argument (drop it from "
            "static_argnums/static_argnames); if it must stay static, limit it to a few values."
        )
    # No static argument changed: each compile is another program at the same argument types.
    return (
        f"Each recompile of `{name}`{at} is another program at the same argument types: something fixed "
        "when it is traced changed (a value it closes over, a Python branch on a value, or, for a backward "
        "pass, which of its outputs carry a gradient). `cachewatch diff` between two of its compiles shows "
        "the equations that differ; where a Python `if` picks the program, jnp.where or jax.lax.cond lets "
        "one program serve every case."
    )


def _paths(rows: Sequence[Recompile], change: str | None) -> str:
    counts = collections.Counter(
        e["path"] for r in rows for e in (r.diff or []) if change is None or e.get("change") == change
    )
    if not counts:
        return "?"
    return ", ".join(p for p, _ in counts.most_common(3))


def _axis_sizes(rows: Sequence[Recompile]) -> tuple[dict[tuple[str, int], set[int]], dict[tuple[str, int], int]]:
    """Per (argument, axis) that changed, the sizes it took; and the compiles in which it
    changed alone, as a batch axis does."""
    sizes: dict[tuple[str, int], set[int]] = collections.defaultdict(set)
    lone: dict[tuple[str, int], int] = collections.Counter()
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
    return sizes, lone


def _batch_like(
    rows: Sequence[Recompile], sizes: dict[tuple[str, int], set[int]], lone: dict[tuple[str, int], int]
) -> dict[tuple[str, int], set[int]]:
    # Bucketing is advice for a batch or sequence length: one axis (the same in every
    # argument it is in) that varies on its own, the leading axis or the second, behind a
    # batch axis that stays put ([batch, sequence] token ids). Shapes that change in
    # several arguments or axes together are other programs (layers of other widths),
    # and padding them to one size would change the model.
    return {
        key: seen
        for key, seen in sizes.items()
        if lone.get(key, 0) * 2 >= len(rows) and (key[1] == 0 or (key[1] == 1 and (key[0], 0) not in sizes))
    }


def batch_axis(rows: Sequence[Recompile]) -> tuple[str, int, set[int]] | None:
    """The one batch or sequence axis the compiles' shapes varied along (argument, axis,
    the sizes it took), where there is one."""
    batch_like = _batch_like(rows, *_axis_sizes(rows))
    return _most_varied(batch_like) if batch_like else None


def _most_varied(batch_like: dict[tuple[str, int], set[int]]) -> tuple[str, int, set[int]]:
    """The axis that took the most sizes (the leading one where two took as many)."""
    (path, axis), seen = max(batch_like.items(), key=lambda kv: (len(kv[1]), -kv[0][1]))
    return path, axis, seen


def _shape_fix(name: str, rows: Sequence[Recompile]) -> str:
    sizes, lone = _axis_sizes(rows)
    if not sizes:
        return (
            f"Array arguments of `{name}` keep changing rank or shape; pad inputs to a fixed shape "
            "or a few bucket sizes."
        )
    batch_like = _batch_like(rows, sizes, lone)
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
    path, axis, seen = _most_varied(batch_like)
    along = [f"{p} axis {a}" for (p, a), other in batch_like.items() if (p, a) != (path, axis) and other == seen]
    low, high = min(seen), max(seen)
    buckets = sorted({next_pow2(s) for s in seen})
    with_it = f"{', '.join(along[:3])}{' and more' if len(along) > 3 else ''}" if along else ""
    if len(buckets) >= len(seen):
        # One size a bucket already (padded to 2**k + 1, say): powers of two save nothing.
        text = (
            f"Argument {path} axis {axis} took {len(seen)} sizes between {low} and {high} "
            f"({', '.join(str(s) for s in sorted(seen)[:8])}), one for each power of two already, so padding "
            f"to powers of two would not make them fewer; pad to {high} for one compile, with a mask over "
            "the padding."
        )
    else:
        text = (
            f"Argument {path} axis {axis} took {len(seen)} sizes between {low} and {high}; pad to powers of "
            f"two: {len(buckets)} compile(s) instead of {len(seen)} (buckets {', '.join(str(b) for b in buckets)}; "
            f"or pad to {high} for one)."
        )
    if axis:
        text += (
            f" It is a sequence length{f' ({with_it} with it)' if with_it else ''}: pad each batch to a "
            "bucketed length rather than to its longest sequence, with a mask over the padding."
        )
    elif with_it:
        text += f" Pad {with_it} with it."
    if not axis:
        text += (
            " Give the padded rows no weight wherever rows are reduced (a mean, a sum, a metric: "
            "`jnp.sum(jnp.where(mask, x, 0)) / jnp.sum(mask)`), or the padding changes the result."
        )
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
        combos.add(tuple(next_pow2(current[g[0]]) for g in groups if g[0] in current))
    parts = []
    for group in groups:
        sizes = seen[group[0]]
        if not sizes:
            continue
        buckets = ", ".join(str(b) for b in sorted({next_pow2(s) for s in sizes}))
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


def _dims(described: Any) -> tuple[int, ...] | None:
    parsed = parse_described(described)
    return parsed[1] if parsed is not None else None


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 2 ** math.ceil(math.log2(n))


def display_name(info: FunctionInfo | None, function_hash: str) -> str:
    if info is None:
        return function_hash
    if info.module == OP_BY_OP_MODULE:
        return info.qualname  # "gather (op-by-op)"
    return short_name(info.qualname)
