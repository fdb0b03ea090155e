"""What a fix would buy, priced on the run's own figures.

The run's compiles of one function are replayed in order through a padding policy on
the axis that varied: a signature is padded along it to its bucket, and a compile
happens where the padded signature is new to the cache. Each compile is priced from the
function's recorded compiles (seconds fitted against the size along the axis), each
call from the recorded run time per signature (fitted the same way: padding a call to
its bucket costs the run time of the bucket), and each executable kept from XLA's
memory figures. ``auto`` finds the ladder of at most N buckets that costs least.

    ev = whatif_reads.evidence(conn, function, run_id)
    result = analyse(ev, parse_policy("auto:4"))
    result.price.compiles, result.price.total_seconds, result.curve

Prices are models of this run: the compile count is exact (the replay is what JAX's
cache does), the seconds are as good as the fits the result reports.
"""

from __future__ import annotations

import collections
import math
import statistics
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..core.events import Cause, FunctionInfo
from ..core.figures import seconds_text
from ..core.texts import counted
from . import whatif_reads
from .policies import Fit, OtherFix, Policy, Price, SizeRow, Whatif, WhatifError
from .whatif_reads import CompileRecord, Leaf, RunEvidence

# The causes a padded signature can absorb: the cache is keyed on the signature alone.
# Any other compile (a new jit object, a cleared cache, another device or context)
# happens under every padding policy.
_SIGNATURE_CAUSES = frozenset(
    {
        Cause.FIRST_CALL,
        Cause.NEW_SHAPE,
        Cause.NEW_DTYPE,
        Cause.WEAK_TYPE,
        Cause.NEW_STATIC_VALUE,
        Cause.NEW_STRUCTURE,
        Cause.UNKNOWN,
    }
)
# A compile for these starts an empty cache: what was compiled before no longer serves.
_EMPTIES_CACHE = frozenset({Cause.NEW_FUNCTION_OBJECT, Cause.CACHE_CLEARED})

# Fewest timed signatures, at distinct sizes, a run time is fitted from: through two
# points any line fits, and its error says nothing.
MIN_TIMED_SIZES = 3
# A compile-seconds slope is used only when the line explains this much of the spread;
# compile time rarely depends on a batch size, and noise would pass for a trend.
MIN_COMPILE_R2 = 0.8
# JAX writes a compile to the persistent cache only past this many seconds by default
# (jax_persistent_cache_min_compile_time_secs).
PERSISTENT_MIN_SECONDS = 1.0
AUTO_DEFAULT_BUCKETS = 16
AUTO_MAX_RUNGS = 256


# ------------------------------------------------------------------ policies


# ------------------------------------------------------------------ results


# ------------------------------------------------------------------ fits


def fit_line(points: list[tuple[float, float]]) -> Fit | None:
    """Least squares through the points; None when x does not vary."""
    n = len(points)
    if n < 2:
        return None
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    var = sum((x - mean_x) ** 2 for x in xs)
    if var == 0:
        return None
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / var
    intercept = mean_y - slope * mean_x
    total = sum((y - mean_y) ** 2 for y in ys)
    resid = sum((y - intercept - slope * x) ** 2 for x, y in points)
    r2 = 1.0 - resid / total if total > 0 else None
    rel = _relative_error(points, lambda x: intercept + slope * x)
    return Fit(n, slope, intercept, r2, rel, "linear")


def _relative_error(points: list[tuple[float, float]], model: Callable[[float], float]) -> float:
    errors = [abs(model(x) - y) / y for x, y in points if y > 0]
    return sum(errors) / len(errors) if errors else 0.0


def _flat(points: list[tuple[float, float]]) -> Fit:
    median = statistics.median(p[1] for p in points)
    return Fit(len(points), 0.0, median, None, _relative_error(points, lambda x: median), "median")


def _compile_fit(points: list[tuple[float, float]]) -> Fit | None:
    if not points:
        return None
    line = fit_line(points) if len(points) >= 3 else None
    if line is not None and line.slope >= 0 and line.r2 is not None and line.r2 >= MIN_COMPILE_R2:
        return line
    return _flat(points)


# ------------------------------------------------------------------ the replay


@dataclass(frozen=True, slots=True)
class _Signature:
    """One recorded signature: its size along the axis (None: the leaf is not in it) and
    its identity with the axis left out."""

    signature_hash: str
    size: int | None
    rest: tuple[object, ...]


def _leaf_key(leaf: Leaf, blank: frozenset[int]) -> tuple[object, ...]:
    if leaf.static:
        return (leaf.path, "static", leaf.value)
    shape = None if leaf.shape is None else tuple(-1 if i in blank else d for i, d in enumerate(leaf.shape))
    return (leaf.path, shape, leaf.dtype, leaf.weak_type)


def _varying(compiles: tuple[CompileRecord, ...]) -> dict[tuple[str, int], dict[str, int]]:
    """Per (leaf path, axis): its size in each signature (by hash)."""
    sizes: dict[tuple[str, int], dict[str, int]] = {}
    for c in compiles:
        for leaf in c.signature:
            if leaf.static or leaf.shape is None:
                continue
            for axis, dim in enumerate(leaf.shape):
                sizes.setdefault((leaf.path, axis), {})[c.signature_hash] = dim
    return sizes


def _resolve_axis(
    sizes: dict[tuple[str, int], dict[str, int]], wanted: tuple[str, int] | None
) -> tuple[tuple[str, int] | None, str]:
    """The axis to pad, and why there is none (nothing to pad) where there is none."""
    varying = {key: seen for key, seen in sizes.items() if len(set(seen.values())) > 1}
    if wanted is None:
        if not varying:
            return None, "every compile had the same shapes: nothing to pad"
        # The axis that took the most sizes; the leading one on a tie (a batch).
        return max(varying, key=lambda k: (len(set(varying[k].values())), -k[1])), ""
    path, axis = wanted
    paths = sorted({p for p, _ in sizes})
    if path not in paths:
        near = [p for p in paths if p.startswith(path)]
        if len(near) != 1:
            named = ", ".join(paths[:8]) or "none"
            raise WhatifError(f"no array argument {path!r} in the recorded signatures (they have: {named})")
        path = near[0]
    if (path, axis) not in sizes:
        raise WhatifError(f"{path} has no axis {axis} in the recorded signatures")
    if (path, axis) not in varying:
        only = next(iter(set(sizes[(path, axis)].values())))
        raise WhatifError(f"{path} axis {axis} never varied in this run: it was {only} in every compile")
    return (path, axis), ""


def _signatures(
    compiles: tuple[CompileRecord, ...], main: tuple[str, int] | None, along: list[tuple[str, int]]
) -> dict[str, _Signature]:
    padded: dict[str, set[int]] = {}
    for path, axis in ([main] if main else []) + along:
        padded.setdefault(path, set()).add(axis)
    out: dict[str, _Signature] = {}
    same_leaves: dict[tuple[object, ...], list[str]] = {}
    blank = {p: frozenset(a) for p, a in padded.items()}
    # Each leaf's key, by the leaf's id (the store reads one object per distinct leaf, so
    # a storm's tens of thousands of signatures share their unchanged leaves): padded
    # axes blanked, and as recorded. The leaves live in ``compiles`` throughout.
    blanked: dict[int, tuple[object, ...]] = {}
    recorded: dict[int, tuple[object, ...]] = {}

    def key(leaf: Leaf, keys: dict[int, tuple[object, ...]], axes: dict[str, frozenset[int]]) -> tuple[object, ...]:
        found = keys.get(id(leaf))
        if found is None:
            found = keys[id(leaf)] = _leaf_key(leaf, axes.get(leaf.path, frozenset()))
        return found

    for c in compiles:
        if c.signature_hash in out:
            continue
        size = None
        if main is not None:
            leaf = next((x for x in c.signature if x.path == main[0] and not x.static), None)
            if leaf is not None and leaf.shape is not None and main[1] < len(leaf.shape):
                size = leaf.shape[main[1]]
        as_recorded = tuple(key(x, recorded, {}) for x in c.signature)
        rest = tuple(key(x, blanked, blank) for x in c.signature) if size is not None else as_recorded
        # Two signatures with the same leaves differ in what the leaves leave out
        # (placement, context): they stay two compiles.
        twins = same_leaves.setdefault(as_recorded, [])
        twins.append(c.signature_hash)
        out[c.signature_hash] = _Signature(c.signature_hash, size, (*rest, len(twins) - 1))
    return out


def _covarying(sizes: dict[tuple[str, int], dict[str, int]], main: tuple[str, int]) -> list[tuple[str, int]]:
    """Leaves whose axis had the main axis's size in every compile: a batch's inputs and labels."""
    ref = sizes[main]
    return [
        key
        for key, seen in sizes.items()
        if key != main
        and key[0] != main[0]
        and len(set(seen.values())) > 1
        and all(ref.get(h) == v for h, v in seen.items())
    ]


@dataclass(frozen=True, slots=True)
class _Replayed:
    compiles: int
    compile_seconds: float
    kept: frozenset[tuple[object, ...]]


class _Model:
    """The run's figures, fitted: what one compile, one call and one executable cost at a size."""

    def __init__(self, ev: RunEvidence, sigs: dict[str, _Signature]):
        self.ev, self.sigs = ev, sigs
        shaped = [c for c in ev.compiles if c.cause in _SIGNATURE_CAUSES and sigs[c.signature_hash].size is not None]
        first = ev.compiles[0]
        recompiles = [(float(sigs[c.signature_hash].size or 0), c.seconds) for c in shaped if c is not first]
        self.compile_fit = _compile_fit(recompiles or [(float(sigs[first.signature_hash].size or 0), first.seconds)])
        first_size = sigs[first.signature_hash].size
        # The run's first compile also pays JAX's own start-up; a policy's first compile will too.
        self.first_extra = 0.0
        if self.compile_fit is not None and first_size is not None and recompiles:
            self.first_extra = max(0.0, first.seconds - self.compile_fit.at(first_size))
        self.memory_at: dict[int, int] = {}
        mem_points = []
        for c in shaped:
            size = sigs[c.signature_hash].size
            if c.memory_bytes is not None and size is not None:
                self.memory_at.setdefault(size, c.memory_bytes)
                mem_points.append((float(size), float(c.memory_bytes)))
        self.memory_fit = fit_line(mem_points) if len(set(p[0] for p in mem_points)) >= 2 else None
        self.timed = {t.signature_hash: t for t in ev.timed if t.signature_hash in sigs}
        self.calls = self._calls()
        run_points = [(float(sigs[h].size or 0), t.median_seconds) for h, t in self.timed.items() if sigs[h].size]
        distinct = len({p[0] for p in run_points})
        self.run_fit: Fit | None = None
        self.run_fit_note = ""
        if distinct >= MIN_TIMED_SIZES:
            self.run_fit = fit_line(run_points)
            if self.run_fit is not None and self.run_fit.slope < 0:
                self.run_fit_note = (
                    f"the recorded run times fall with the size (slope {self.run_fit.slope:.3g} s per row): "
                    "padding is priced at no extra run time"
                )
                self.run_fit = Fit(
                    len(run_points), 0.0, statistics.median(p[1] for p in run_points), None, 0.0, "median"
                )
        elif ev.sample_every == 1:
            # Every call was timed but the one that compiles: the sizes were not met again.
            self.run_fit_note = (
                f"run time not priced: {distinct} size(s) along the axis had a timed call in this run, "
                f"and a fit needs {MIN_TIMED_SIZES}; a call that compiles is not timed, and the other sizes "
                "were not called again"
            )
        else:
            self.run_fit_note = (
                f"run time not priced: {distinct} size(s) along the axis had a timed call in this run, "
                f"and a fit needs {MIN_TIMED_SIZES}; record with CACHEWATCH_SAMPLE_EVERY=1 (and "
                "CACHEWATCH_SAMPLE_MAX_PER_SECOND higher) to time more"
            )

    def _calls(self) -> dict[str, float]:
        """Calls per signature: the compiling call, and the calls its timed samples stand for,
        scaled to the function's recorded calls (the counters count calls per function)."""
        raw = {h: 1.0 + (self.timed[h].calls if h in self.timed else 0.0) for h in self.sigs}
        total = sum(raw.values())
        if self.ev.calls <= 0 or total <= 0:
            return raw
        return {h: v * self.ev.calls / total for h, v in raw.items()}

    def compile_cost(self, size: int | None, recorded: float) -> float:
        if size is None or self.compile_fit is None:
            return recorded
        return max(0.0, self.compile_fit.at(size))

    def memory(self, size: int | None) -> float | None:
        if size is None:
            return None
        if size in self.memory_at:
            return float(self.memory_at[size])
        return max(0.0, self.memory_fit.at(size)) if self.memory_fit is not None else None

    def call_seconds(self, signature_hash: str, size: int | None) -> float:
        assert self.run_fit is not None
        if size is None:
            found = self.timed.get(signature_hash)
            return found.median_seconds if found is not None else max(0.0, self.run_fit.at(0))
        return max(0.0, self.run_fit.at(size))

    def replay(self, bucket_of: dict[int, int] | None) -> _Replayed:
        """The run's compiles through the policy (``None``: as recorded, seconds as recorded)."""
        seen: set[tuple[object, ...]] = set()
        compiles, seconds = 0, 0.0
        for c in self.ev.compiles:
            sig = self.sigs[c.signature_hash]
            bucket = sig.size if bucket_of is None or sig.size is None else bucket_of[sig.size]
            key = (*sig.rest, bucket)
            if c.cause in _EMPTIES_CACHE:
                seen.clear()
            elif c.cause in _SIGNATURE_CAUSES and key in seen:
                continue  # served by the padded program
            seen.add(key)
            compiles += 1
            if bucket_of is None or c.cause not in _SIGNATURE_CAUSES:
                seconds += c.seconds
            else:
                seconds += self.compile_cost(bucket, c.seconds) + (self.first_extra if compiles == 1 else 0.0)
        return _Replayed(compiles, seconds, frozenset(seen))

    def price(self, policy: str, bucket_of: dict[int, int] | None) -> Price:
        done = self.replay(bucket_of)
        run = padded = total = None
        if self.run_fit is not None:
            base = sum(self.calls[h] * self.call_seconds(h, s.size) for h, s in self.sigs.items())
            run = base
            if bucket_of is not None:
                run = sum(
                    self.calls[h] * self.call_seconds(h, s.size if s.size is None else bucket_of[s.size])
                    for h, s in self.sigs.items()
                )
            padded = max(0.0, run - base)
            total = done.compile_seconds + run
        sizes = [k[-1] for k in done.kept]
        mem = [self.memory(s if isinstance(s, int) else None) for s in sizes]
        memory = int(sum(m for m in mem if m is not None)) if mem and all(m is not None for m in mem) else None
        buckets = tuple(sorted({b for b in (bucket_of or {}).values()}))
        return Price(policy, buckets, done.compiles, done.compile_seconds, run, padded, total, len(done.kept), memory)


def _auto(model: _Model, sizes: list[int], most: int) -> list[tuple[int, ...]]:
    """The cheapest ladder of each number of buckets, 1 to ``most``, over the recorded sizes.

    A bucket that is no recorded size costs more than the largest size under it (the
    compile model and the run time do not fall with size), so the rungs are recorded
    sizes, the largest among them. Cost of a rung: its compiles (one per other-axis
    variant padded into it) and the extra run time of the calls padded up to it. Past
    ``AUTO_MAX_RUNGS`` sizes, the rungs are chosen among that many of them, evenly by rank
    (the search grows with the square of the candidates)."""
    assert model.run_fit is not None
    slope = model.run_fit.slope
    step = max(1, -(-len(sizes) // AUTO_MAX_RUNGS))
    rungs_at = sorted({*sizes[step - 1 :: step], sizes[-1]})
    group = {s: next(r for r in rungs_at if r >= s) for s in sizes}
    calls = {r: 0.0 for r in rungs_at}  # calls of the sizes a candidate rung takes in
    weighted = {r: 0.0 for r in rungs_at}  # their calls times their sizes
    rests_at: dict[int, set[tuple[object, ...]]] = {r: set() for r in rungs_at}
    for h, sig in model.sigs.items():
        if sig.size is not None:
            r = group[sig.size]
            calls[r] += model.calls[h]
            weighted[r] += model.calls[h] * sig.size
            rests_at[r].add(sig.rest)
    m = len(rungs_at)
    seg = [[0.0] * m for _ in range(m)]  # seg[j][i]: candidates j..i padded to rungs_at[i]
    for i in range(m):
        rests: set[tuple[object, ...]] = set()
        extra = 0.0
        for j in range(i, -1, -1):
            rests |= rests_at[rungs_at[j]]
            extra += (calls[rungs_at[j]] * rungs_at[i] - weighted[rungs_at[j]]) * slope
            seg[j][i] = len(rests) * model.compile_cost(rungs_at[i], 0.0) + extra
    inf = math.inf
    best = [[inf] * m for _ in range(most + 1)]  # best[n][i]: candidates 0..i in n buckets
    back = [[-1] * m for _ in range(most + 1)]
    for i in range(m):
        best[1][i] = seg[0][i]
    for n in range(2, most + 1):
        for i in range(m):
            for j in range(n - 2, i):
                cost = best[n - 1][j] + seg[j + 1][i]
                if cost < best[n][i]:
                    best[n][i], back[n][i] = cost, j
    ladders = []
    for n in range(1, min(most, m) + 1):
        if best[n][m - 1] == inf:
            continue
        rungs, i, k = [], m - 1, n
        while k >= 1 and i >= 0:
            rungs.append(rungs_at[i])
            i, k = back[k][i], k - 1
        ladders.append(tuple(sorted(rungs)))
    return ladders


# ------------------------------------------------------------------ the analysis


def analyse(
    ev: RunEvidence, policy: Policy, axis: tuple[str, int] | None = None, *, fallback: Policy | None = None
) -> Whatif:
    """Price ``policy`` on the run (raises WhatifError for an axis that cannot be padded).
    With ``fallback``, an ``auto`` policy that cannot weigh padding (no run time to fit)
    prices ``fallback`` instead, from the same reading of the run's signatures (a storm of
    new shapes has tens of thousands: reading them twice was half the price's time)."""
    if not ev.compiles:
        raise WhatifError(f"{ev.function.qualname} did not compile in run {ev.run_id}")
    sizes = _varying(ev.compiles)
    main, nothing = _resolve_axis(sizes, axis)
    along = _covarying(sizes, main) if main else []
    sigs = _signatures(ev.compiles, main, along)
    model = _Model(ev, sigs)
    seen = sorted({s.size for s in sigs.values() if s.size is not None})
    per_size = _size_rows(ev, sigs, model, seen)
    recorded = model.price("none", None)
    notes = []
    if ev.timed and ev.calls:
        notes.append("calls per signature are estimated from the calls each timed sample stands for")
    price: Price | None = None
    curve: tuple[Price, ...] = ()
    if main is None and policy.kind not in ("none",):
        nothing = f"{ev.function.qualname} {nothing} in run {ev.run_id}"
    elif policy.kind == "none":
        price = recorded
    elif policy.kind == "auto":
        try:
            price, curve = _auto_price(model, policy, seen)
        except WhatifError:
            if fallback is None:
                raise
            price = model.price(fallback.text, {s: fallback.bucket(s) for s in seen})
    else:
        price = model.price(policy.text, {s: policy.bucket(s) for s in seen})
    return Whatif(
        function_hash=ev.function.function_hash,
        qualname=ev.function.qualname,
        run_id=ev.run_id,
        run_name=ev.run_name,
        path=main[0] if main else None,
        axis=main[1] if main else None,
        along=tuple(f"{p} axis {a}" for p, a in along),
        sizes=tuple(per_size),
        calls=ev.calls,
        recorded=recorded,
        price=price,
        curve=curve,
        compile_fit=model.compile_fit,
        run_fit=model.run_fit,
        run_fit_note=model.run_fit_note,
        nothing_to_pad=nothing,
        fixes=other_fixes(ev),
        notes=tuple(notes),
    )


def _size_rows(ev: RunEvidence, sigs: dict[str, _Signature], model: _Model, seen: list[int]) -> list[SizeRow]:
    """Per size the padded axis took: its compiles, calls and median run time per call.

    The signatures and compiles are grouped once: a storm of new shapes has as many sizes
    as compiles (tens of thousands), and a pass over all of them per size was quadratic."""
    by_size: dict[int, list[str]] = {}
    for h, s in sigs.items():
        if s.size is not None:
            by_size.setdefault(s.size, []).append(h)
    compiles_of = collections.Counter(c.signature_hash for c in ev.compiles)
    per_size = []
    for size in seen:
        hashes = by_size.get(size, [])
        timed = [model.timed[h].median_seconds for h in hashes if h in model.timed]
        per_size.append(
            SizeRow(
                size,
                sum(compiles_of[h] for h in hashes),
                sum(model.calls[h] for h in hashes),
                statistics.median(timed) if timed else None,
            )
        )
    return per_size


def _auto_price(model: _Model, policy: Policy, seen: list[int]) -> tuple[Price, tuple[Price, ...]]:
    """The cheapest ladder of buckets (at most ``policy.most``, by default as many as
    powers of two would make, and no fewer than AUTO_DEFAULT_BUCKETS), and every ladder
    priced, the curve."""
    if model.run_fit is None:
        raise WhatifError(f"auto cannot weigh padding against compiles: {model.run_fit_note}")
    pow2 = len({Policy("pow2").bucket(s) for s in seen})
    most = policy.most if policy.most is not None else min(len(seen), max(AUTO_DEFAULT_BUCKETS, pow2))
    ladders = _auto(model, seen, most)
    curve = tuple(model.price(f"ladder:{','.join(map(str, rungs))}", _ladder_map(seen, rungs)) for rungs in ladders)
    return min(curve, key=lambda p: (p.total_seconds or 0.0, len(p.buckets))), curve


def _ladder_map(sizes: list[int], rungs: tuple[int, ...]) -> dict[int, int]:
    return {s: next((r for r in rungs if r >= s), s) for s in sizes}


def other_fixes(ev: RunEvidence) -> tuple[OtherFix, ...]:
    """The other fixes cachewatch names, priced where the run holds their figures."""
    total = len(ev.compiles)
    found = []
    # A remade jit object compiling a program the function had compiled: what hoisting
    # saves (an identical program after a weak-type flip is the weak-type fix's).
    identical = [c for c in ev.compiles if c.identical_to and c.cause == Cause.NEW_FUNCTION_OBJECT]
    if identical:
        saved = sum(c.seconds for c in identical)
        found.append(
            OtherFix(
                "hoist_jit",
                total,
                total - len(identical),
                saved,
                f"one jit object, made once outside the loop: {len(identical)} of {total} compiles were a new jit "
                "object compiling a program this function had compiled before in this run; "
                f"saves {seconds_text(saved)}",
            )
        )
    if any(c.cause == Cause.WEAK_TYPE for c in ev.compiles):
        keys: set[tuple[object, ...]] = set()
        wasted = []
        for c in ev.compiles:
            key = tuple((x.path, x.static, x.value, x.shape, x.dtype) for x in c.signature)
            if key in keys and c.cause in _SIGNATURE_CAUSES:
                wasted.append(c)
            keys.add(key)
        if wasted:
            saved = sum(c.seconds for c in wasted)
            found.append(
                OtherFix(
                    "weak_type",
                    total,
                    total - len(wasted),
                    saved,
                    f"pass typed arrays (jnp.float32(x)) instead of Python scalars: {counted(total - len(wasted), 'compile')} "
                    f"instead of {total}; saves {seconds_text(saved)}",
                )
            )
    missed = [c for c in ev.compiles if not c.persistent_cache_hit and c.xla_seconds > 0]
    if missed:
        xla = sum(c.xla_seconds for c in missed)
        written = [c for c in missed if c.xla_seconds >= PERSISTENT_MIN_SECONDS]
        rest = sum(c.seconds - c.xla_seconds for c in missed)
        text = (
            f"a persistent compilation cache would serve the next run's {len(missed)} XLA compiles: saves up to "
            f"{seconds_text(xla)} (tracing and lowering, {seconds_text(rest)}, remain)"
        )
        if len(written) < len(missed):
            text += (
                f"; with JAX's default minimum of {PERSISTENT_MIN_SECONDS:g} s per compile only {len(written)} "
                f"are written ({seconds_text(sum(c.xla_seconds for c in written))}): set "
                "jax_persistent_cache_min_compile_time_secs=0"
            )
        found.append(OtherFix("persistent_cache", total, total, xla, text))
    return tuple(found)


# ------------------------------------------------------------------ sentences


def fix_sentence(result: Whatif) -> str | None:
    """The priced padding fix, as a storm's fix quotes it; None where there is nothing to pad."""
    price = result.price
    if price is None or result.path is None:
        return None
    buckets = ", ".join(str(b) for b in price.buckets)
    saved = max(0.0, result.recorded.compile_seconds - price.compile_seconds)
    text = (
        f"pad {result.path} axis {result.axis} to {buckets}: {counted(price.compiles, 'compile')} instead of "
        f"{result.recorded.compiles}, saves {seconds_text(saved)} of {seconds_text(result.recorded.compile_seconds)} "
        "compiling"
    )
    if price.padded_run_seconds is not None:
        text += f", adds {seconds_text(price.padded_run_seconds)} of padded compute"
    else:
        text += " (padded compute not priced: too few timed signatures)"
    return text


def priced_fix(conn: sa.Connection, function_hash: str, run_id: str) -> str | None:
    """A storm's padding fix with its price over the run: the cheapest ladder where the run
    timed enough signatures, else powers of two. None where the run holds nothing to pad."""
    try:
        function = whatif_reads.find_function(conn, function_hash)
    except LookupError:
        return None
    (price,) = priced_fixes(conn, [(function, run_id)])
    return price


def priced_fixes(conn: sa.Connection, pairs: list[tuple[FunctionInfo, str]]) -> list[str | None]:
    """:func:`priced_fix` for each (function, run), their evidence read together and each
    (function, run) priced once (a function that stormed twice in a run has one price there)."""
    return [fix_sentence(found) if isinstance(found, Whatif) else None for found in auto_prices(conn, pairs)]


# ------------------------------------------------------------------ prices kept

# auto's price of each (function, run) already worked out, per store, by what the run's
# evidence was read at (whatif_reads.evidence_stamps): a storm's priced fix and the
# function page's ladder over the same run are one analysis, and a run that got nothing
# new is not read again. Bounded in entries and in the sizes the kept results hold (a
# storm of new shapes prices tens of thousands of sizes).
PRICES_KEPT = 64
PRICE_SIZES_KEPT = 100_000
_Kept = collections.OrderedDict[tuple[Any, ...], Whatif | WhatifError]
_kept_prices: weakref.WeakKeyDictionary[sa.Engine, _Kept] = weakref.WeakKeyDictionary()
_kept_lock = threading.Lock()


def auto_prices(conn: sa.Connection, pairs: list[tuple[FunctionInfo, str]]) -> list[Whatif | WhatifError]:
    """``auto`` priced on each (function, run), ``pow2`` where auto has no run time to weigh
    padding against; the error that says why where the run cannot be priced. A pair whose
    run changed in nothing since it was last priced is not read or analysed again."""
    distinct = list({(function.function_hash, run_id): (function, run_id) for function, run_id in pairs}.values())
    stamps = whatif_reads.evidence_stamps(conn, [(function.function_hash, run_id) for function, run_id in distinct])
    keys = [(f.function_hash, run_id, stamp) for (f, run_id), stamp in zip(distinct, stamps, strict=True)]
    with _kept_lock:
        kept = _kept_prices.setdefault(conn.engine, collections.OrderedDict())
        found = {key: kept[key] for key in keys if key in kept}
    missing = [(pair, key) for pair, key in zip(distinct, keys, strict=True) if key not in found]
    read = whatif_reads.evidence_of_many(conn, [pair for pair, _ in missing])
    for ev, (_, key) in zip(read, missing, strict=True):
        try:
            found[key] = analyse(ev, Policy("auto"), fallback=Policy("pow2"))
        except WhatifError as exc:
            found[key] = exc
    with _kept_lock:
        for key in keys:
            kept[key] = found[key]
            kept.move_to_end(key)
        while len(kept) > PRICES_KEPT or sum(_sizes_held(v) for v in kept.values()) > PRICE_SIZES_KEPT:
            kept.popitem(last=False)
    by_pair = {(key[0], key[1]): found[key] for key in keys}
    return [by_pair[(function.function_hash, run_id)] for function, run_id in pairs]


def _sizes_held(found: Whatif | WhatifError) -> int:
    return len(found.sizes) if isinstance(found, Whatif) else 0
