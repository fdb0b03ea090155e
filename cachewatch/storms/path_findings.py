"""Findings of calls JAX served through its Python dispatch path (callpaths/): a jit whose
such calls take a visible share of its run, told at the line where the fix goes (where a
jit is made anew; where a transformation is applied outside any jit, for every jit called
under it at once), ranked with the storms' findings by the seconds they cost."""

from __future__ import annotations

import collections
import hashlib
import linecache
import re

import sqlalchemy as sa

from ..callpaths import call_path_reads, slow_path
from ..core.events import short_name
from ..core.figures import seconds_text
from ..core.texts import counted
from ..store.columns import Filters
from . import finding_reads
from .fixes import line_at, short_site
from .results import Finding

# A jit's calls on JAX's Python path make a finding when they take this share of the run
# (or, where the run's length is unknown, this many seconds).
SLOW_PATH_SHARE = 0.01
SLOW_PATH_SECONDS = 1.0


def with_slow_paths(conn: sa.Connection, filters: Filters, found: list[Finding]) -> list[Finding]:
    """``found`` with a finding for each jit whose calls on JAX's Python dispatch path took
    a visible share of its run (callpaths/slow_path.py), ranked with them by seconds. The
    jits called under one transformation applied outside any jit (an eager ``jax.grad``) are
    one finding, at the line that applies it: one change there gives them all the fast path."""
    paths = slow_path.slow_paths(call_path_reads.path_counts(conn, filters))
    lengths = finding_reads.run_lengths(conn, {p.run_id for p in paths})
    transformed: dict[tuple[str, str], list[slow_path.SlowPath]] = collections.defaultdict(list)
    slow = []
    for p in paths:
        if p.transformed_at and _reason(p) == "under_transformation":
            transformed[(p.run_id, p.transformed_at)].append(p)
        elif _visible(_price(p), lengths.get(p.run_id)):
            slow.append(_slow_path_finding(p, lengths.get(p.run_id)))
    for (run_id, site), group in sorted(transformed.items()):
        price = sum(_price(p) or 0.0 for p in group)
        if _visible(price if any(_price(p) is not None for p in group) else None, lengths.get(run_id)):
            slow.append(_transformed_finding(run_id, site, group, price, lengths.get(run_id)))
    return sorted(found + slow, key=lambda f: (-f.seconds, -f.compiles, f.finding_id))


def _reason(found: slow_path.SlowPath) -> str:
    return max(found.reasons, key=lambda r: found.reasons[r])


def _price(found: slow_path.SlowPath) -> float | None:
    """What the Python path cost: beyond the function's own fast-path calls where it has
    some, else all the time those calls took."""
    return found.excess_seconds if found.excess_seconds is not None else found.seconds


def _visible(price: float | None, length: float | None) -> bool:
    if price is None:
        return False
    return price >= SLOW_PATH_SHARE * length if length else price >= SLOW_PATH_SECONDS


def _slow_path_finding(found: slow_path.SlowPath, length: float | None) -> Finding:
    reason = _reason(found)
    seconds = _price(found) or 0.0
    site = f"{found.function.file}:{found.function.line}" if found.function.file else None
    if reason == "new_jit_object" and found.made_at:
        site = found.made_at  # where the jit is made anew is where the fix goes
    digest = hashlib.sha256("\0".join([found.run_id, "slow_path", found.function.function_hash]).encode())
    name = short_name(found.function.qualname or found.function.name)
    remade = reason == "new_jit_object"
    return Finding(
        finding_id=digest.hexdigest()[:16],
        run_id=found.run_id,
        cause="slow_path",
        varying=f"a jit of `{name}` made anew for its calls"
        if remade
        else f"every call of `{name}` through JAX's Python dispatch path ({reason})",
        entry=site,
        entry_text=short_site(site) if site else "",
        functions=(found.function.qualname or found.function.name,),
        function_hashes=(found.function.function_hash,),
        compiles=0,
        compile_seconds=0.0,
        share_of_run=min(1.0, seconds / length) if length else None,
        fix=f"{found.text} {found.fix}",
        fix_kind="hoist_jit" if remade else "fast_path",
        library=None,
        storms=(),
        active=False,
        seconds=seconds,
    )


def _transformed_finding(
    run_id: str, site: str, group: list[slow_path.SlowPath], seconds: float, length: float | None
) -> Finding:
    """The jits called under one transformation applied at ``site``, outside any jit."""
    names = [short_name(p.function.qualname or p.function.name) for p in group]
    listed = ", ".join(f"`{n}`" for n in names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    calls = sum(p.slow_calls for p in group)
    applied, made = _transformation_at(site)
    if applied and made:
        jitted = f"`{made} = jax.jit({applied})` where it is made"
    elif applied:
        jitted = f"`step = jax.jit({applied})`"
    else:
        jitted = "`step = jax.jit(jax.grad(f))` (or the transformation used)"
    digest = hashlib.sha256("\0".join([run_id, "under_transformation", site]).encode())
    return Finding(
        finding_id=digest.hexdigest()[:16],
        run_id=run_id,
        cause="slow_path",
        varying=f"calls of {listed} under a transformation applied outside any jit",
        entry=site,
        entry_text=short_site(site),
        functions=tuple(p.function.qualname or p.function.name for p in group),
        function_hashes=tuple(p.function.function_hash for p in group),
        compiles=0,
        compile_seconds=0.0,
        share_of_run=min(1.0, seconds / length) if length else None,
        fix=(
            f"The line at {short_site(site)} applies a JAX transformation{f' (`{applied}`)' if applied else ''} "
            f"outside any jit, and under it {listed} ran through JAX's Python path, traced again at each call: "
            f"{counted(calls, 'call')}, about {seconds_text(seconds)}. Nothing recompiled; the jits inside cannot "
            f"take their fast path while the transformation around them runs eagerly. Jit the transformed "
            f"function once, before the loop: {jitted}, and call `{made or 'step'}` with the same arguments; the jits "
            "inside become part of its one program. A static argument stays static only if the new jit is "
            "told so again (static_argnums), and Python `if`s on values inside (not on shapes) must become "
            "jax.lax.cond or jnp.where first: eagerly they read concrete values, under the jit they cannot."
        ),
        fix_kind="jit_transformed",
        library=None,
        storms=(),
        active=False,
        seconds=seconds,
    )


# An eager transformation as written: `grad(bounce, 0)`, `jax.value_and_grad(loss)`,
# `jax.vmap(f, in_axes=(0, None))`; applied and called at once at a line, or made there.
_APPLIED = r"(?:jax\.)?(?:value_and_grad|grad|vmap|jacfwd|jacrev|hessian)\((?:[^()]|\([^()]*\))*\)"
_TRANSFORMATION = re.compile(rf"\b({_APPLIED})\s*\(")


def _transformation_at(site: str) -> tuple[str | None, str | None]:
    """The transformation the line at ``site`` applies and calls, as written, or the one
    the name it calls was made with in the same file (``loss_grad_fn = jax.value_and_grad(loss)``)
    and that name; (None, None) where its source cannot be read or it calls none."""
    text = line_at(site)
    found = _TRANSFORMATION.search(text)
    if found:
        return found.group(1), None
    source = "".join(linecache.getlines(site.rpartition(":")[0]))
    for name in re.findall(r"\b([A-Za-z_]\w*)\s*\(", text):
        made = re.search(rf"^\s*{re.escape(name)}\s*=\s*({_APPLIED})\s*$", source, re.MULTILINE)
        if made:
            return made.group(1), name
    return None, None
