"""What was compiled, read back: a compile's program in each format, the diff of two
compiles' programs, and the equation profile in the pprof format JAX's own
``eqn_count_pprof`` dump writes.

    with engine.connection(url) as conn:
        text = program_texts.program(conn, event_id, "jaxpr")
        change = program_texts.diff(conn, event_id)  # against the compile before it
"""

from __future__ import annotations

import dataclasses
import difflib
import gzip
import linecache
import re
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..core import sources
from ..core.events import MEMORY_PARTS, OP_BY_OP_MODULE, PROGRAM_FORMATS, Cause
from ..store.columns import EventRow, Filters
from . import program_reads


class ProgramNotFound(LookupError):
    """No such event, or the store kept no text of this format for it (the message says which)."""


def program(conn: sa.Connection, event_id: str, fmt: str = "jaxpr") -> str | bytes:
    """The program of one compile: a text (jaxpr, stablehlo, hlo) or the pprof profile (bytes)."""
    if fmt not in PROGRAM_FORMATS:
        raise ProgramNotFound(f"unknown format {fmt!r}; one of {', '.join(PROGRAM_FORMATS)}")
    row = program_reads.event(conn, event_id)
    if row is None:
        raise ProgramNotFound(f"no event {event_id!r} in the store")
    if not row["program_fingerprint"]:
        raise ProgramNotFound(f"event {event_id} has no program recorded (not a compile, or the program view was off)")
    if fmt == "stablehlo":  # the event's own lowered module, kept under its fingerprint
        module = program_reads.lowered_text(conn, row["lowered_fingerprint"])
        if module is not None:
            return module
    kept = program_reads.texts(conn, row["program_fingerprint"])
    if kept is None:
        raise ProgramNotFound(
            f"the store kept no texts of event {event_id}'s program, only its figures: the store's cap on "
            "program texts (CACHEWATCH_PROGRAM_STORE_MAX_BYTES) was reached, or the recorder sent none"
        )
    if fmt == "pprof":
        if kept.profile is None:
            raise ProgramNotFound(f"no equation profile kept for event {event_id}")
        return pprof(kept.profile)
    text = kept.texts.get(fmt)
    if text is None:
        raise ProgramNotFound(f"no {fmt} text kept for event {event_id}: {_why_missing(fmt, kept.left_out)}")
    return text


def _why_missing(fmt: str, left_out: list[str]) -> str:
    """Why a text is not in the store, as far as the store can tell: named in ``left_out``
    it was recorded and dropped under the per-program cap; otherwise it was never made."""
    if fmt in left_out:
        return (
            "left out when recorded, over the per-program text cap (CACHEWATCH_PROGRAM_TEXT_MAX_BYTES); "
            "the figures and the equation profile (format pprof) were kept"
        )
    return "not asked for (CACHEWATCH_PROGRAM_TEXTS)"


def default_against(conn: sa.Connection, compile: program_reads.CompileRef | EventRow) -> str | None:
    """What a compile is diffed with when no other is named: the function's earlier compile
    with the same program (a wasted recompile), else the compile of the function just
    before it. (Older stores link another function's compile too; that is no recompile.)"""
    if not isinstance(compile, program_reads.CompileRef):
        compile = program_reads.CompileRef.of(compile)
    earlier = program_reads.event(conn, compile.identical_to) if compile.identical_to else None
    if earlier is not None and earlier["function_hash"] == compile.function_hash:
        return str(compile.identical_to)
    return program_reads.previous_compile(conn, compile)


@dataclass(frozen=True)
class CountChange:
    """One row of a diff's equation counts: a primitive or a source line, before -> after."""

    name: str
    before: int
    after: int


@dataclass(frozen=True)
class FigureChange:
    """One of XLA's figures (or the compile seconds), before -> after; None where not recorded."""

    before: float | None
    after: float | None


@dataclass(frozen=True)
class ProgramDiff:
    """The change from one compile (``before``) to another (``after``), as
    ``cachewatch diff``, ``GET /api/v1/events/{id}/diff`` and the function page show it."""

    before: str  # event ids
    after: str
    function: str
    cause: str
    explanation: str
    key_diff: list[dict[str, Any]]  # the key diff cachewatch recorded for ``after``
    same_program: bool
    same_lowered_module: bool
    eqns_by_primitive: list[CountChange]  # the changed first, largest change first
    eqns_by_line: list[CountChange]
    jaxpr_diff: list[str] | None  # unified diff lines; None: a jaxpr text was not kept
    xla: dict[str, FigureChange]  # jaxpr_eqns, hlo_ops, fusions, flops, bytes_accessed, memory_*
    compile_seconds: FigureChange

    def as_json(self) -> dict[str, Any]:
        """The diff as ``--format json`` and the API write it."""
        return dataclasses.asdict(self)


def diff(conn: sa.Connection, event_id: str, against: str | None = None) -> ProgramDiff:
    """The change from ``against`` (default: :func:`default_against`) to ``event_id``: the
    key diff cachewatch recorded, equations by primitive and by line before -> after, a
    unified diff of the jaxpr texts, and XLA's figures before -> after."""
    after = program_reads.event(conn, event_id)
    if after is None:
        raise ProgramNotFound(f"no event {event_id!r} in the store")
    against = against or default_against(conn, after)
    if against is None:
        raise ProgramNotFound(f"event {event_id} has no earlier compile to diff with; name one")
    before = program_reads.event(conn, against)
    if before is None:
        raise ProgramNotFound(f"no event {against!r} in the store")
    jaxpr_before, jaxpr_after = _jaxpr(conn, before), _jaxpr(conn, after)
    jaxpr_diff = None
    if jaxpr_before is not None and jaxpr_after is not None:
        jaxpr_diff = list(
            difflib.unified_diff(
                jaxpr_before.splitlines(), jaxpr_after.splitlines(), against, event_id, lineterm="", n=2
            )
        )
    return ProgramDiff(
        before=against,
        after=event_id,
        function=after["qualname"],
        cause=after["cause"],
        explanation=after["explanation"],
        key_diff=after["diff"] or [],
        same_program=bool(after["program_fingerprint"])
        and after["program_fingerprint"] == before["program_fingerprint"],
        same_lowered_module=bool(after["lowered_fingerprint"])
        and after["lowered_fingerprint"] == before["lowered_fingerprint"],
        eqns_by_primitive=_pairs(before["eqns_by_primitive"] or {}, after["eqns_by_primitive"] or {}),
        eqns_by_line=_pairs(_lines(before["eqns_by_line"]), _lines(after["eqns_by_line"])),
        jaxpr_diff=jaxpr_diff,
        xla={
            "jaxpr_eqns": FigureChange(before["jaxpr_eqns"], after["jaxpr_eqns"]),
            "hlo_ops": FigureChange(before["hlo_ops"], after["hlo_ops"]),
            "fusions": FigureChange(before["fusions"], after["fusions"]),
            "flops": FigureChange(before["flops"], after["flops"]),
            "bytes_accessed": FigureChange(before["bytes_accessed"], after["bytes_accessed"]),
        }
        | {
            f"memory_{part}": FigureChange((before["memory"] or {}).get(part), (after["memory"] or {}).get(part))
            for part in MEMORY_PARTS
        },
        compile_seconds=FigureChange(before["compile_seconds"], after["compile_seconds"]),
    )


def _jaxpr(conn: sa.Connection, row: EventRow) -> str | None:
    kept = program_reads.texts(conn, row["program_fingerprint"])
    return kept.texts.get("jaxpr") if kept is not None else None


def latest_diff(conn: sa.Connection, function_hash: str) -> ProgramDiff | None:
    """The function's latest recompile diffed with its default (None: nothing to diff):
    what the dashboard's function page shows first."""
    for compile in program_reads.recent_compiles(conn, function_hash):
        against = default_against(conn, compile)
        if against is not None:
            return diff(conn, compile.event_id, against)
    return None


def _lines(rows: list[dict[str, Any]] | None) -> dict[str, int]:
    return {
        f"{r['file']}:{r['line']} ({r['function']})" if r["file"] else "(no user line)": r["eqns"] for r in rows or []
    }


def _pairs(before: dict[str, int], after: dict[str, int]) -> list[CountChange]:
    """Rows of name, before, after: the changed first (largest change first), then the same."""
    names = list(dict.fromkeys([*after, *before]))
    rows = [CountChange(n, before.get(n, 0), after.get(n, 0)) for n in names]
    return sorted(rows, key=lambda r: (r.before == r.after, -abs(r.after - r.before)))


def diff_text(change: ProgramDiff) -> str:
    """The diff as the command line prints it."""
    out = [f"{change.function}: {change.before} -> {change.after} ({change.cause})", change.explanation]
    if change.same_program:
        out.append(
            "Same optimised program as before: this recompile was wasted"
            + (
                "; the lowered module was the same too, so a persistent compilation cache would have served it."
                if change.same_lowered_module
                else "."
            )
        )
    changed = [r for r in change.eqns_by_primitive if r.before != r.after]
    out.append("equations by primitive (before -> after):")
    out += [f"  {r.name:32} {r.before:>8} -> {r.after}" for r in changed] or ["  (unchanged)"]
    lines = [r for r in change.eqns_by_line if r.before != r.after]
    out.append("equations by line (before -> after):")
    out += [f"  {r.name:60} {r.before:>8} -> {r.after}" for r in lines[:20]] or ["  (unchanged)"]
    out.append("XLA (before -> after):")
    for name, pair in change.xla.items():
        if pair.before is not None or pair.after is not None:
            out.append(f"  {name:24} {_num(pair.before):>14} -> {_num(pair.after)}")
    if change.jaxpr_diff is None:
        out.append("jaxpr diff: a jaxpr text was not kept for one of the two compiles")
    elif change.jaxpr_diff:
        out.append("jaxpr diff:")
        out += change.jaxpr_diff
    else:
        out.append("jaxpr diff: identical jaxprs")
    return "\n".join(out)


def _num(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.4g}"
    return f"{int(value):,}"


# ----------------------------------------------------------------- pprof


def pprof(rows: list[list[Any]]) -> bytes:
    """A gzip-compressed pprof ``Profile`` of equations per user source line and primitive,
    like JAX's ``eqn_count_pprof`` dump: sample type equations/count, a ``primitive`` label
    on each sample, one location (function, line) per source line."""
    strings: dict[str, int] = {"": 0}

    def s(text: str) -> int:
        return strings.setdefault(text, len(strings))

    functions: dict[tuple[str, str], int] = {}
    locations: dict[tuple[int, int], int] = {}
    samples = []
    for file, line, function, primitive, loop, count, *_ in rows:
        fkey = (file, function)
        fid = functions.setdefault(fkey, len(functions) + 1)
        lid = locations.setdefault((fid, int(line)), len(locations) + 1)
        labels = [_message(1, s("primitive")) + _message(2, s(primitive))]
        if loop:
            labels.append(_message(1, s("loop_body")) + _message(2, s("true")))
        sample = _packed(1, [lid]) + _packed(2, [int(count)]) + b"".join(_bytes(3, label) for label in labels)
        samples.append(sample)
    out = _bytes(1, _message(1, s("equations")) + _message(2, s("count")))
    out += b"".join(_bytes(2, sample) for sample in samples)
    for (fid, line), lid in locations.items():
        out += _bytes(4, _message(1, lid) + _bytes(4, _message(1, fid) + _message(2, line)))
    for (file, function), fid in functions.items():
        name = s(f"{file}:{function}" if file else "(no user line)")
        out += _bytes(5, _message(1, fid) + _message(2, name) + _message(3, name) + _message(4, s(file)))
    comment = s("equations per source line and primitive, recorded by cachewatch")
    for text in strings:  # the string table, in index order (dicts keep insertion order)
        out += _bytes(6, text.encode())
    out += _message(13, comment)
    return gzip.compress(out)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _message(field: int, value: int) -> bytes:  # a varint field
    return _varint(field << 3) + _varint(value)


def _bytes(field: int, payload: bytes) -> bytes:  # a length-delimited field
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _packed(field: int, values: list[int]) -> bytes:
    return _bytes(field, b"".join(_varint(v) for v in values))


# ------------------------------------------------- wasted compiles and compile cost

# JAX's default for jax_persistent_cache_min_compile_time_secs: faster compiles are not
# written to the persistent cache.
PERSISTENT_CACHE_MIN_SECONDS = 1.0

# What to do when a recompile produced the program compiled before, by its cause.
_IDENTICAL_FIXES = {
    Cause.WEAK_TYPE: "keep Python scalars out of the signature: pass a typed array (jnp.float32(x)) every time",
    Cause.NEW_FUNCTION_OBJECT: "hoist jax.jit out of the loop: jit the function once and call that",
    Cause.CACHE_CLEARED: "do not clear the cache (jax.clear_caches(), .clear_cache()) between calls",
    "new_context": "set the option or enter the context once around the whole program: the function does not "
    "depend on it",
    Cause.NEW_DEVICE_OR_SHARDING: "put the inputs on the same device and sharding every call (jax.device_put once)",
}


# A jit made anew that no line of the user's makes: one JAX makes for an operation run op
# by op (under an eager jax.vmap of a model's init, say), or a library's.
REMADE_NOT_YOURS_TOO = (
    "where a library, or JAX for eager code under a transformation such as jax.vmap, makes it, jit your code "
    "around it once so that it compiles as part of one program; a one-time set-up (a model's init) costs "
    "this once"
)
REMADE_NOT_YOURS = f"none of your lines makes this jit; {REMADE_NOT_YOURS_TOO}"


@dataclass(frozen=True)
class IdenticalRecompiles(program_reads.WastedRecompiles):
    """Recompiles of one function and cause that produced the program it compiled before:
    the store's figures and the sentence with the fix."""

    fix: str

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def identical_recompiles(
    conn: sa.Connection, filters: Filters = Filters(), function_hashes: list[str] | None = None
) -> list[IdenticalRecompiles]:
    """Recompiles that produced the program compiled earlier in the run, per function and
    cause: how many, their seconds, how many a persistent compilation cache would have
    served (the lowered module was the same too: the cache's key is taken before XLA
    optimises), and the fix. Most seconds first."""
    rows = program_reads.wasted_recompiles(conn, filters, function_hashes, PERSISTENT_CACHE_MIN_SECONDS)
    out = [IdenticalRecompiles(**dataclasses.asdict(row), fix=identical_fix(row)) for row in rows]
    out.sort(key=lambda r: -r.seconds)
    return out


def wasted_between(
    conn: sa.Connection, function_hashes: list[str], run_id: str, start: float, end: float
) -> tuple[int, float]:
    """Recompiles of the functions in the run between ``start`` and ``end`` (inclusive)
    that produced the program the same function compiled before, and their seconds."""
    return program_reads.wasted_between(conn, function_hashes, run_id, start, end)


Span = program_reads.Span  # a storm's functions, run, start and end


def wasted_in_spans(conn: sa.Connection, spans: list[program_reads.Span]) -> list[tuple[int, float]]:
    """:func:`wasted_between` for each span (the functions, run, start and end of a storm), in one read."""
    return program_reads.wasted_in_spans(conn, spans)


@dataclass(frozen=True)
class SharedPrograms(program_reads.SharedProgram):
    """Compiles of one function that produced another function's program, and the sentence."""

    text: str

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def shared_programs(conn: sa.Connection, filters: Filters = Filters()) -> list[SharedPrograms]:
    """Functions that compiled the same program as another function of the run
    (``same_program_as``): they could share one jit. Never waste, and never counted as
    such: each was a compile its own jit needed. Per pair, most compiles first."""
    out = [
        SharedPrograms(
            **dataclasses.asdict(row),
            text=(
                f"{row.qualname} compiled the same program as {row.other_qualname} "
                f"{row.compiles} time(s): they could share one jit (no waste: each compile was its own)."
            ),
        )
        for row in program_reads.shared_programs(conn, filters)
    ]
    out.sort(key=lambda r: -r.compiles)
    return out


def identical_fix(row: program_reads.WastedRecompiles) -> str:
    """The sentence for one function's wasted recompiles of one cause, with the fix."""
    text = (
        f"{row.recompiles} recompile(s) of {row.qualname} ({row.cause}) produced the program compiled before: "
        f"{row.seconds:.3f} s wasted."
    )
    fix = _IDENTICAL_FIXES.get(row.cause)
    if row.cause == Cause.NEW_FUNCTION_OBJECT and row.module == OP_BY_OP_MODULE:
        fix = REMADE_NOT_YOURS
    elif row.cause == Cause.NEW_FUNCTION_OBJECT and sources.is_library(row.file):
        fix = f"{fix} where your code makes it (jax.jit(f) run again at each step); {REMADE_NOT_YOURS_TOO}"
    if fix:
        text += f" Fix: {fix}."
    served = row.persistent_cache_would_serve
    if served:
        text += (
            f" A persistent compilation cache would have served {served} of them "
            "(jax.config.update('jax_compilation_cache_dir', DIR), or CACHEWATCH_PERSISTENT_CACHE_DIR)"
        )
        below = row.below_min_compile_time
        if below:
            text += (
                f"; {below} compiled in under jax_persistent_cache_min_compile_time_secs "
                f"({PERSISTENT_CACHE_MIN_SECONDS:g} s by default), which the cache would not keep unless you lower it"
            )
        text += "."
    return text


# A source line is an unrolled loop when it alone makes this share of the program and
# its primitives repeat at least this often.
UNROLLED_MIN_SHARE = 0.2
UNROLLED_MIN_REPEATS = 8
# Constants baked into a program above this many bytes are worth passing as arguments.
BIG_CONSTANT_BYTES = 1 << 20


# A line that maps one update over every leaf of a pytree (an optimizer's update, a
# tree_map): its operations repeat once per leaf, leaves of different shapes that no
# scan could take, so it is no unrolled loop.
_PYTREE_MAP = re.compile(r"tree_map|tree\.map|tree_util\.|\.update\(|apply_updates|apply_gradients|\btx\.|optax\.")


def _maps_over_a_pytree(file: str, line: int) -> bool:
    text = linecache.getline(file, line)
    return bool(text) and not text.lstrip().startswith("for ") and bool(_PYTREE_MAP.search(text))


@dataclass(frozen=True)
class ProgramFix:
    """A change that makes a function's program smaller: its kind (``unrolled_loop``,
    ``big_constant``), where (a source line, when it is one) and the sentence."""

    kind: str
    where: str | None
    text: str


@dataclass(frozen=True)
class GrowthPoint:
    """One compile's program size and its seconds (trace, lowering and XLA compile)."""

    event_id: str
    run_id: str
    jaxpr_eqns: int
    seconds: float


@dataclass(frozen=True)
class CompileProfile:
    """Where a function's compile cost comes from (see :func:`compile_profile`)."""

    function_hash: str
    top_lines: list[dict[str, Any]]  # the largest program's equations by source line, as the event keeps them
    event_id: str | None  # the compile of that program
    growth: list[GrowthPoint]  # oldest first
    fixes: list[ProgramFix]


def compile_profile(
    conn: sa.Connection, function_hash: str, filters: Filters = Filters(), limit: int = 200
) -> CompileProfile:
    """Where a function's compile cost comes from: the source lines with most equations in
    its largest recent program, program size against compile seconds over its compiles
    (per run), and the fixes a clear pattern names."""
    rows = program_reads.profiled_compiles(conn, function_hash, filters, limit)
    with_lines = [r for r in rows if r.eqns_by_line]
    largest = max(with_lines, key=lambda r: r.jaxpr_eqns or 0) if with_lines else None
    fixes = _unrolled_loop_fixes(largest) if largest is not None else []
    big = max(((r.memory or {}).get("constants", 0) for r in rows), default=0)
    if big >= BIG_CONSTANT_BYTES:
        fixes.append(
            ProgramFix(
                kind="big_constant",
                where=None,
                text=(
                    f"{big / 2**20:.1f} MiB of constants are baked into the program (an array the function "
                    "reads from a global or a closure, or builds with NumPy while it is traced, np.arange(n) "
                    "say): compiling and hashing them costs every compile. Pass the array as an argument, or "
                    "build it with jax.numpy inside the function (jnp.arange(n) is computed in the program)."
                ),
            )
        )
    growth = [
        GrowthPoint(r.event_id, r.run_id, r.jaxpr_eqns, r.seconds) for r in reversed(rows) if r.jaxpr_eqns is not None
    ]
    return CompileProfile(
        function_hash=function_hash,
        top_lines=(largest.eqns_by_line or []) if largest is not None else [],
        event_id=largest.event_id if largest is not None else None,
        growth=growth,
        fixes=fixes,
    )


def _unrolled_loop_fixes(largest: program_reads.ProfiledCompile) -> list[ProgramFix]:
    """The source lines of the largest program that look like a Python loop unrolled into it."""
    lines = largest.eqns_by_line or []
    total = largest.jaxpr_eqns or sum(line["eqns"] for line in lines)
    fixes: list[ProgramFix] = []
    for line in lines:
        repeats = min(line["primitives"].values()) if line["primitives"] else 0
        if (
            line["file"]
            # A library's loop is not the user's to rewrite (a solver's fixed step count).
            and not sources.is_installed(line["file"])
            and not line["loop_body"]
            and total
            and line["eqns"] >= UNROLLED_MIN_SHARE * total
            and repeats >= UNROLLED_MIN_REPEATS
            and not _maps_over_a_pytree(line["file"], line["line"])
        ):
            fixes.append(
                ProgramFix(
                    kind="unrolled_loop",
                    where=f"{line['file']}:{line['line']}",
                    text=(
                        f"{line['file']}:{line['line']} ({line['function']}) puts {line['eqns']} of the "
                        f"program's {total} equations in, its operations repeated {repeats}+ times: a Python "
                        "loop (or a helper called in one) unrolled into the program. Write the loop with "
                        "jax.lax.scan or jax.lax.fori_loop, so its body is compiled once."
                    ),
                )
            )
    return fixes
