"""Storms and their fixes, from the compile events in a store.

A storm is a function with at least ``threshold`` non-``first_call`` compiles within
``window`` seconds. Each storm names its dominant cause and a concrete fix built from
the events themselves: which argument and axis varied and over which sizes, which
static argument took how many values, which line re-creates the jit.
"""

from __future__ import annotations

import collections
import math
import time
from typing import Any, Iterable

import sqlalchemy as sa

from .store import models
from .store.queries import Filters


def detect_storms(conn: sa.Connection, filters: Filters = Filters(), *, threshold: int = 5,
                  window: float = 600.0, now: float | None = None,
                  function_hashes: list[str] | None = None) -> list[dict[str, Any]]:
    """Every storm in the store, newest first (a function can have several, apart in time)."""
    now = time.time() if now is None else now
    e, f = models.compile_events, models.functions
    q = filters.apply(e, sa.select(e.c.function_hash, e.c.timestamp, e.c.cause, e.c.diff, e.c.call_site,
                                   e.c.run_id, e.c.signature)
                      .where(e.c.compiled, e.c.cause != "first_call")
                      .order_by(e.c.function_hash, e.c.timestamp))
    if function_hashes is not None:
        q = q.where(e.c.function_hash.in_(function_hashes))
    by_function: dict[str, list[Any]] = collections.defaultdict(list)
    for row in conn.execute(q):
        by_function[row.function_hash].append(row)
    if not by_function:
        return []
    names = {r.function_hash: r for r in conn.execute(
        sa.select(f.c.function_hash, f.c.name, f.c.qualname, f.c.file, f.c.line)
        .where(f.c.function_hash.in_(list(by_function))))}
    storms = []
    for function_hash, rows in by_function.items():
        for group in _bursts(rows, threshold, window):
            info = names.get(function_hash)
            storms.append(_describe(function_hash, info, group, now, window))
    storms.sort(key=lambda s: -s["end"])
    return storms


def _bursts(rows: list[Any], threshold: int, window: float) -> Iterable[list[Any]]:
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
            yield rows[start: i + threshold - 1]
            start = None
        i += 1
    if start is not None:
        yield rows[start:]


def _describe(function_hash: str, info: Any, rows: list[Any], now: float, window: float) -> dict[str, Any]:
    cause_counts = collections.Counter(r.cause for r in rows)
    dominant, _ = cause_counts.most_common(1)[0]
    name = info.qualname if info else function_hash
    return {
        "function_hash": function_hash,
        "name": info.name if info else "",
        "qualname": name,
        "start": rows[0].timestamp,
        "end": rows[-1].timestamp,
        "compiles": len(rows),
        "causes": dict(cause_counts),
        "dominant_cause": dominant,
        "active": now - rows[-1].timestamp <= window,
        "run_ids": sorted({r.run_id for r in rows}),
        "fix": suggest_fix(name, dominant, [r for r in rows if r.cause == dominant]),
    }


def suggest_fix(name: str, cause: str, rows: list[Any]) -> str:
    """A concrete fix for a storm of one cause, naming the argument and call site."""
    sites = collections.Counter(r.call_site for r in rows if r.call_site)
    site = sites.most_common(1)[0][0] if sites else None
    at = f" (called at {site})" if site else ""
    if cause == "new_shape":
        return _shape_fix(name, rows) + at
    if cause == "new_static_value":
        paths = collections.Counter(e["path"] for r in rows for e in (r.diff or []) if e.get("change") == "static")
        values: dict[str, set] = collections.defaultdict(set)
        for r in rows:
            for e in r.diff or []:
                if e.get("change") == "static":
                    values[e["path"]].update(v for v in (e.get("before"), e.get("after")) if v is not None)
        if paths:
            path = paths.most_common(1)[0][0]
            return (f"Static argument {path} of `{name}` took {len(values[path])} distinct values, one compile "
                    f"each{at}. If it only feeds arithmetic, make it a traced argument (drop it from "
                    "static_argnums/static_argnames); if it must stay static, limit it to a few values.")
        return f"A static argument of `{name}` keeps taking new values{at}; make it traced or bound its values."
    if cause == "new_function_object":
        return (f"`{name}` is wrapped by a new jit object on every call{at}: jax.jit(lambda ...) or "
                "jax.jit(partial(...)) inside a loop. Create the jitted function once, outside the loop, "
                "and call that; pass changing values as arguments.")
    if cause == "weak_type":
        paths = _paths(rows, "weak_type")
        return (f"Argument {paths} of `{name}` flips between a Python scalar and a typed array{at}. "
                "Pass it the same way every time, e.g. jnp.asarray(x, dtype) before the call.")
    if cause == "new_dtype":
        paths = _paths(rows, "dtype")
        return f"Argument {paths} of `{name}` changes dtype{at}; cast it once (x.astype(...)) before the call."
    if cause == "new_structure":
        paths = _paths(rows, None)
        return (f"The argument pytree of `{name}` keeps changing ({paths}){at}: keep dict keys, list lengths "
                "and keyword-versus-positional calls the same; fill optional entries with placeholders.")
    if cause == "cache_cleared":
        return (f"`{name}` is recompiled after its cache is cleared{at}: avoid clear_cache()/jax.clear_caches() "
                "in the loop, or enable the persistent compilation cache.")
    if cause == "new_device_or_sharding":
        return (f"`{name}` is compiled again for other devices or shardings{at}: place inputs once "
                "(jax.device_put with a fixed sharding) before the loop.")
    return f"`{name}` recompiles for a reason cachewatch could not establish{at}; see its events' diffs."


def _paths(rows: list[Any], change: str | None) -> str:
    counts = collections.Counter(e["path"] for r in rows for e in (r.diff or [])
                                 if change is None or e.get("change") == change)
    if not counts:
        return "?"
    return ", ".join(p for p, _ in counts.most_common(3))


def _shape_fix(name: str, rows: list[Any]) -> str:
    sizes: dict[tuple[str, int], set[int]] = collections.defaultdict(set)
    for r in rows:
        for e in r.diff or []:
            if e.get("change") != "shape" or not e.get("axes"):
                continue
            for side in ("before", "after"):
                dims = _dims(e.get(side))
                if dims is None:
                    continue
                for axis in e["axes"]:
                    if axis < len(dims):
                        sizes[(e["path"], axis)].add(dims[axis])
    if not sizes:
        return (f"Array arguments of `{name}` keep changing rank or shape; pad inputs to a fixed shape "
                "or a few bucket sizes.")
    (path, axis), seen = max(sizes.items(), key=lambda kv: len(kv[1]))
    low, high = min(seen), max(seen)
    buckets = len({_next_pow2(s) for s in seen})
    return (f"Argument {path} axis {axis} took {len(seen)} sizes between {low} and {high}; pad to powers of "
            f"two: {buckets} compile(s) instead of {len(seen)} (or pad to {high} for one).")


def _dims(described: Any) -> list[int] | None:
    # "float32[8,784] weak" -> [8, 784]
    if not isinstance(described, str) or "[" not in described:
        return None
    inside = described[described.index("[") + 1: described.index("]")]
    if not inside:
        return []
    try:
        return [int(d) for d in inside.split(",")]
    except ValueError:
        return None


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 2 ** math.ceil(math.log2(n))
