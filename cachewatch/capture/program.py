"""What was compiled: the program behind each compile, read from the compile JAX already does.

JAX hands the jaxpr it lowers to ``jaxpr_util.maybe_dump_jaxpr_to_file`` and the lowered
module to ``compiler.compile_or_get_cached``, which returns the executable; pxla looks
both up through their module, so wrapping them sees every lowering and compile without
lowering or compiling anything again.

The compiling thread keeps references only (the jaxpr and the executable, which nothing
changes, and a bytecode copy of the lowered module, whose MLIR context is JAX's) in a
:class:`Pending`, which the monitoring listener hands to the record of that compile (see
``_tracking``) and the event carries to the recorder. The writer's thread reads the
figures there (``Pending.complete``) after the user's call has returned: equations by
primitive and by user source line (through nested jaxprs, loop bodies marked), XLA's
operation and fusion counts, ``cost_analysis`` and the compiled memory, the texts, and a
fingerprint of the optimised HLO printed without metadata and with canonical names, so
that a weak-type flip (a ``convert`` XLA removes) gives the same fingerprint and a
batch-size change does not. A figure the JAX in use cannot give is named with its reason.

Every JAX internal read here goes through the seam (``core/jaxcompat.py``: the hooks,
the print options, the MLIR reader, the source lines), which falls back and says so once
when the JAX in use lacks it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..core import _guard, jaxcompat
from ..core.events import PROGRAM_FORMATS, Cause, CompileEvent
from ..record import current
from .identity import in_stack, is_library_file

# Most source lines kept on an event (the full profile stays with the program's texts).
TOP_LINES = 20
_tls = threading.local()
_lock = threading.Lock()
_installed = False
# Whether a compile of this module name is wanted (set by _tracking: watched, install(),
# an eager primitive); cachewatch's own compiles are never looked at.
wanted: Callable[[str], bool] = lambda name: False  # noqa: E731

# Seconds spent on each part, over the process (the benchmark and the README read them).
# "on_compile_path" is what the compiling thread itself spent; the rest is the writer's.
spent: dict[str, float] = {
    "walk": 0.0,
    "fingerprint": 0.0,
    "xla": 0.0,
    "text": 0.0,
    "compile": 0.0,
    "on_compile_path": 0.0,
}


@dataclasses.dataclass(slots=True)
class Program:
    """The program of one compile, as the event and the store take it."""

    fingerprint: str | None = None
    lowered_fingerprint: str | None = None
    jaxpr_eqns: int | None = None
    eqns_by_primitive: dict[str, int] | None = None
    eqns_by_line: list[dict[str, Any]] | None = None
    hlo_ops: int | None = None
    fusions: int | None = None
    flops: float | None = None
    bytes_accessed: float | None = None
    memory: dict[str, int] | None = None
    # format -> text (jaxpr, hlo, stablehlo) and the equation profile rows; compressed
    # by the writer's side of ``texts_payload``.
    texts: dict[str, str] = dataclasses.field(default_factory=dict)
    profile: list[list[Any]] | None = None
    compile_seconds: float = 0.0
    event_id: str | None = None
    # Figure -> why the JAX in use could not give it (the event's ``figures_missing``).
    missing: dict[str, str] = dataclasses.field(default_factory=dict)


# ----------------------------------------------------------------- JAX internals


def _patch_lowering() -> bool:
    """Wrap ``jaxpr_util.maybe_dump_jaxpr_to_file``: pxla hands it every jaxpr it lowers."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def maybe_dump_jaxpr_to_file(fun_name: str, jaxpr: Any, *args: Any, **kwargs: Any) -> Any:
            _tls.jaxpr = (fun_name, jaxpr)
            return original(fun_name, jaxpr, *args, **kwargs)

        return maybe_dump_jaxpr_to_file

    return jaxcompat.wrap_jaxpr_lowering(make)


def _patch_compile() -> bool:
    """Wrap ``compiler.compile_or_get_cached``: it takes the lowered module and returns
    the executable (a persistent-cache hit included), once per in-memory cache miss."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def compile_or_get_cached(backend: Any, computation: Any, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            executable = original(backend, computation, *args, **kwargs)
            _after_compile(computation, executable, time.perf_counter() - start)
            return executable

        return compile_or_get_cached

    return jaxcompat.wrap_backend_compile(make)


def _optimised_hlo(executable: Any) -> str | None:
    modules = executable.hlo_modules()
    if not modules:
        return None
    options = jaxcompat.hlo_print_options()
    return modules[0].to_string(options) if options is not None else None


def _module_bytecode(module: Any) -> bytes | None:
    """The lowered module as bytecode, locations and all: the one read of it made on the
    compiling thread (a fraction of what stripping it there would cost)."""
    if not (jaxcompat.available("mlir_strip_debuginfo") and jaxcompat.available("mlir_context")):
        return None
    out = _BytesSink()
    module.operation.write_bytecode(file=out)
    return bytes(out.data)


def _read_lowered(bytecode: bytes, stablehlo: bool) -> tuple[bytes | None, str | None]:
    """In a fresh MLIR context of this thread's own: the module without locations, as
    bytecode (what JAX's persistent cache hashes for its key, ``cache_key._canonicalize_ir``),
    and its StableHLO text when asked for."""
    reader = jaxcompat.lowered_module_reader()
    if reader is None:
        return None, None
    with _reading_context(reader.make_context):
        module = reader.parse(bytecode)
        reader.strip_debuginfo(module)
        out = _BytesSink()
        module.operation.write_bytecode(file=out)
        text = _stablehlo_text(module) if stablehlo else None
    return bytes(out.data), text


# Modules read in one context before it is replaced: making one costs more than reading a
# small module, and a context keeps every type and attribute it has seen.
_MODULES_PER_CONTEXT = 256


def _reading_context(make: Callable[[], Any]) -> Any:
    """This thread's MLIR context for reading lowered modules (one per thread: a context
    is not safe to share between threads)."""
    held = getattr(_tls, "mlir_context", None)
    if held is None or held[1] >= _MODULES_PER_CONTEXT:
        held = [make(), 0]
        _tls.mlir_context = held
    held[1] += 1
    return held[0]


class _BytesSink:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, chunk: bytes) -> int:
        self.data += chunk
        return len(chunk)


def _stablehlo_text(module: Any) -> str:
    return str(module.operation.get_asm(enable_debug_info=False))


def _placed(
    source_info: Any,
    read: Callable[[Any], tuple[str, int, str] | None],
    read_stack: Callable[[Any], tuple[tuple[str, int, str], ...]],
    context: tuple[tuple[str, int, str], ...] | None,
    borrowed: bool,
) -> tuple[tuple[str, int, str] | None, tuple[tuple[str, int, str], ...]]:
    """An equation's user line and stack (see walk): its own at the top level; inside a
    nested jaxpr, the holding equation's stack and then its own line (the holder's line
    when the nested jaxpr is a library's, traced first under another caller)."""
    line = read(source_info)
    if context is None:
        return line, read_stack(source_info)
    if borrowed:
        line = next((f for f in reversed(context) if not is_library_file(f[0])), None)
    return line, context + ((line,) if line is not None and line not in context[-1:] else ())


def _library_function(jaxpr: Any) -> bool:
    """Whether a nested jaxpr traces a library's function (its debug info says where the
    function is defined: ``name at file:line``); False when unknown."""
    info = jaxcompat.jaxpr_debug_info(jaxpr)
    source = getattr(info, "func_src_info", None) or ""
    _, at, place = source.rpartition(" at ")
    return bool(at) and is_library_file(place.rsplit(":", 1)[0])


def _inner_jaxprs(params: dict[str, Any]) -> Iterator[Any]:
    """The jaxprs in an equation's parameters (a ClosedJaxpr's or a Jaxpr: 0.12 has no ClosedJaxpr)."""
    for value in params.values():
        if isinstance(value, (tuple, list)):
            for item in value:
                inner = _as_jaxpr(item)
                if inner is not None:
                    yield inner
        else:
            inner = _as_jaxpr(value)
            if inner is not None:
                yield inner


def _as_jaxpr(value: Any) -> Any | None:
    if hasattr(value, "eqns") and hasattr(value, "invars"):
        return value
    inner = getattr(value, "jaxpr", None)
    if inner is not None and hasattr(inner, "eqns") and hasattr(inner, "invars"):
        return inner
    return None


# Primitives whose inner jaxpr is a loop body: its equations run many times but are
# compiled once (a scan, a while loop, a fori_loop).
LOOP_PRIMITIVES = frozenset({"scan", "while"})


# ----------------------------------------------------------------- figures


# Frames of an equation's Python stack kept in the profile (the user's and libraries'
# code, JAX's left out): the innermost this many, what a flame graph nests.
STACK_FRAMES = 16


def walk(jaxpr: Any) -> tuple[int, dict[str, int], list[list[Any]]]:
    """Equations in all, by primitive, and the profile rows ``[file, line, function,
    primitive, in_loop_body, count, stack]`` (``stack``: the equation's frames outside
    JAX, outermost first, each ``[file, line, function]``), counted through nested
    jaxprs. A nested jaxpr is counted at every equation that holds it (an inner jit called
    by a helper a hundred times is in the program a hundred times) and read once (its
    counts are kept)."""
    read = jaxcompat.source_line_reader(is_library_file)
    read_stack = jaxcompat.source_stack_reader(in_stack, STACK_FRAMES)
    done: dict[tuple[Any, ...], tuple[int, dict[str, int], dict[tuple[Any, ...], int]]] = {}

    # A nested jaxpr (an inner jit's) may be JAX's cached trace from another call, its
    # tracebacks that call's: its equations are drawn under the stack of the equation that
    # holds it here (``context``, the outermost such), then their own user line (their
    # innermost frame is their own code; the frames outside it may be another caller's).
    Stack = tuple[tuple[str, int, str], ...]

    def visit(
        current: Any, in_loop: bool, context: Stack | None = None
    ) -> tuple[int, dict[str, int], dict[tuple[Any, ...], int]]:
        key = (id(current), in_loop, context)
        # A library's inner jit (jax.nn.softmax) traced first under another caller has that
        # caller's line as its equations' user line: here they belong to this call's line.
        borrowed = context is not None and _library_function(current)
        known = done.get(key)
        if known is not None:
            return known
        total = 0
        by_primitive: dict[str, int] = {}
        counts: dict[tuple[Any, ...], int] = {}
        for eqn in current.eqns:
            name = eqn.primitive.name
            total += 1
            by_primitive[name] = by_primitive.get(name, 0) + 1
            line, stack = _placed(eqn.source_info, read, read_stack, context, borrowed)
            row = (line, name, in_loop, stack)
            counts[row] = counts.get(row, 0) + 1
            if eqn.params:
                body = in_loop or name in LOOP_PRIMITIVES
                for inner in _inner_jaxprs(eqn.params):
                    inner_total, inner_primitives, inner_counts = visit(inner, body, context or stack)
                    total += inner_total
                    for prim, n in inner_primitives.items():
                        by_primitive[prim] = by_primitive.get(prim, 0) + n
                    for row, n in inner_counts.items():
                        counts[row] = counts.get(row, 0) + n
        done[key] = (total, by_primitive, counts)
        return done[key]

    total, by_primitive, counts = visit(jaxpr, False)
    rows = [
        [*(frame if frame is not None else ("", 0, "")), name, loop, n, [list(f) for f in stack]]
        for (frame, name, loop, stack), n in counts.items()
    ]
    return total, by_primitive, rows


def constant_bytes(jaxpr: Any) -> int:
    """Bytes of the arrays baked into the program as constants (globals and closure values
    the function read): its constvars."""
    total = 0
    for var in getattr(jaxpr, "constvars", ()):
        aval = var.aval
        size, dtype = getattr(aval, "size", None), getattr(aval, "dtype", None)
        if size is not None and dtype is not None:
            total += int(size) * int(dtype.itemsize)
    return total


def top_lines(rows: list[list[Any]], limit: int = TOP_LINES) -> list[dict[str, Any]]:
    """The source lines with the most equations, from profile rows."""
    lines: dict[tuple[str, int, str], list[Any]] = {}
    for file, line, function, primitive, loop, n, *_ in rows:
        entry = lines.setdefault((file, line, function), [0, False, {}])
        entry[0] += n
        entry[1] = entry[1] or loop
        entry[2][primitive] = entry[2].get(primitive, 0) + n
    ranked = sorted(lines.items(), key=lambda item: -item[1][0])[:limit]
    return [
        {
            "file": file,
            "line": line,
            "function": function,
            "eqns": n,
            "loop_body": loop,
            "primitives": dict(sorted(prims.items(), key=lambda kv: -kv[1])[:5]),
        }
        for (file, line, function), (n, loop, prims) in ranked
    ]


# XLA's GPU compiler stamps the module with a hash of it before scheduling, which covers
# the module's name: two functions' identical programs would differ by it alone.
_NAMED_STAMPS = re.compile(r'fingerprint_before_lhs="[^"]*",?')


def fingerprint_of(hlo_text: str) -> str:
    """A hash of the optimised HLO with the module's name and the parameters' names left
    out: a computation's header keeps only its result type (its parameters' names come
    from the program's argument names and numbering; their types are in the parameter
    instructions of its body), and the module's header drops the stamps made from its
    name."""
    lines = hlo_text.split("\n")
    if lines and lines[0].startswith("HloModule "):
        lines[0] = _NAMED_STAMPS.sub("", lines[0].partition(",")[2])
    for i, line in enumerate(lines):
        if line[-1:] == "{" and line[:1] not in (" ", "}", ""):
            cut = line.rfind(") -> ")
            if cut >= 0:
                lines[i] = line[cut:]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:32]


def hlo_counts(hlo_text: str) -> tuple[int, int]:
    """Operations (instructions of every computation, fused ones included) and fusions.
    Every instruction line, and no other, has one `` = `` (attributes print as ``a=b``)."""
    return hlo_text.count(" = "), hlo_text.count(" fusion(")


def _cost_figures(executable: Any, program: Program) -> None:
    try:
        cost = executable.cost_analysis()
    except Exception as exc:  # a backend without a cost model raises its own error
        reason = f"XLA's cost analysis failed on this backend ({type(exc).__name__}: {exc})"
        program.missing.update(flops=reason, bytes_accessed=reason)
        return
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    if not cost:
        program.missing.update(flops=_NO_COST, bytes_accessed=_NO_COST)
        return
    # XLA leaves a property out where it is zero (a program of copies and
    # transcendentals has no "flops").
    program.flops = max(float(cost.get("flops", 0.0)), 0.0)
    program.bytes_accessed = max(float(cost.get("bytes accessed", 0.0)), 0.0)


_NO_COST = "XLA's cost analysis gave nothing on this backend"


def _memory_figures(executable: Any, program: Program) -> None:
    try:
        stats = executable.get_compiled_memory_stats()
    except Exception as exc:  # not every backend serialises its buffer assignment
        program.missing["memory"] = f"the executable gave no compiled memory ({type(exc).__name__}: {exc})"
        return
    program.memory = (program.memory or {}) | {
        "generated_code": int(stats.generated_code_size_in_bytes),
        "argument": int(stats.argument_size_in_bytes),
        "output": int(stats.output_size_in_bytes),
        "temp": int(stats.temp_size_in_bytes),
        "code": int(stats.generated_code_size_in_bytes) or _serialized_size(executable),
    }


def _serialized_size(executable: Any) -> int:
    """The executable's serialized size, what JAX's cache holds where XLA reports no code
    size (the CPU); 0 where the backend cannot serialize it."""
    try:
        return len(executable.client.serialize_executable(executable))
    except Exception:  # a backend without serialization: no figure, never a failed event
        return 0


@dataclasses.dataclass(slots=True)
class Pending:
    """What one compile compiled, as the compiling thread leaves it: references only
    (the jaxpr, the executable, the lowered module's bytes), read by :meth:`complete`
    on the writer's thread once the user's call has returned."""

    jaxpr: Any
    executable: Any
    # The lowered module's bytecode, with its locations.
    bytecode: bytes | None
    seconds: float
    # Texts wanted, read from the settings when the compile ended.
    formats: frozenset[str]

    def complete(self, event: CompileEvent) -> CompileEvent:
        """The event with the program's figures, fingerprint, links and texts (the event
        as it was, should reading fail: the guard counts that)."""
        completed = dataclasses.replace(event, pending=None)
        with _guard.guard("program.complete"):
            program = build(self.jaxpr, self.executable, self.bytecode, self.seconds, self.formats)
            fields = event_fields(
                program,
                event.event_id,
                event.run_id,
                event.function.function_hash,
                first_compile=event.cause == Cause.FIRST_CALL,
            )
            completed = dataclasses.replace(completed, **fields)
        # The executable is no longer needed: let it go now, not when the event is stored.
        self.jaxpr = self.executable = self.bytecode = None
        return completed


def _after_compile(computation: Any, executable: Any, seconds: float) -> None:
    stashed = getattr(_tls, "jaxpr", None)
    _tls.jaxpr = None
    _tls.program = None
    if not _installed:
        return
    with _guard.guard("program.capture"):
        fun_name, jaxpr = stashed if stashed is not None else ("", None)
        cfg = current.config()
        if not wanted(f"jit({fun_name})" if stashed is not None else "") or not cfg.program_view:
            return
        start = time.perf_counter()
        # Only what cannot be read later is read here: the lowered module lives in an MLIR
        # context JAX owns (reading it from another thread could race JAX's own use), so
        # its bytecode is copied out; the jaxpr and the executable are immutable.
        formats = frozenset(f for f in cfg.program_texts.split(",") if f)
        bytecode = _module_bytecode(computation) if computation is not None else None
        _tls.program = Pending(jaxpr, executable, bytecode, seconds, formats)
        with _lock:
            spent["compile"] += seconds
            spent["on_compile_path"] += time.perf_counter() - start


def build(
    jaxpr: Any, executable: Any, bytecode: bytes | None, seconds: float, formats: frozenset[str] = frozenset()
) -> Program:
    """The figures, fingerprint and wanted texts of one compile (off the compile path)."""
    program = Program(compile_seconds=seconds)
    t0 = time.perf_counter()
    _jaxpr_figures(program, jaxpr)
    t1 = time.perf_counter()
    hlo = _optimised_hlo(executable)
    _fingerprints(program, hlo, bytecode, formats)
    t2 = time.perf_counter()
    _xla_figures(program, executable)
    t3 = time.perf_counter()
    if "hlo" in formats and hlo is not None:
        program.texts["hlo"] = hlo
    if "jaxpr" in formats and jaxpr is not None:
        program.texts["jaxpr"] = str(jaxpr)
    t4 = time.perf_counter()
    with _lock:
        spent["walk"] += t1 - t0
        spent["fingerprint"] += t2 - t1
        spent["xla"] += t3 - t2
        spent["text"] += t4 - t3
    return program


def _jaxpr_figures(program: Program, jaxpr: Any) -> None:
    """Equations by primitive and by source line, and the constants' bytes, off the jaxpr."""
    if jaxpr is None:
        program.missing["jaxpr"] = "JAX compiled this program without handing its jaxpr to the lowering"
        return
    program.jaxpr_eqns, by_primitive, rows = walk(jaxpr)
    program.eqns_by_primitive = dict(sorted(by_primitive.items(), key=lambda kv: -kv[1]))
    program.eqns_by_line = top_lines(rows)
    program.profile = rows
    constants = constant_bytes(jaxpr)
    if constants:
        program.memory = {"constants": constants}


def _fingerprints(program: Program, hlo: str | None, bytecode: bytes | None, formats: frozenset[str]) -> None:
    """The optimised program's fingerprint and op counts, the lowered module's fingerprint,
    and its StableHLO text when wanted; what cannot be read is said in ``missing``."""
    if hlo is not None:
        program.fingerprint = fingerprint_of(hlo)
        program.hlo_ops, program.fusions = hlo_counts(hlo)
    else:
        reason = (
            "this JAX cannot print HLO without names (hlo_print_options is off)"
            if not jaxcompat.available("hlo_print_options")
            else "the executable holds no HLO module"
        )
        program.missing.update(fingerprint=reason, hlo_ops=reason, fusions=reason)
    lowered, stablehlo = _read_lowered(bytecode, "stablehlo" in formats) if bytecode is not None else (None, None)
    if lowered is not None:
        program.lowered_fingerprint = hashlib.sha256(lowered).hexdigest()[:32]
    else:
        program.missing["lowered_fingerprint"] = "this JAX cannot read the lowered module off the compile path"
    if stablehlo is not None:
        program.texts["stablehlo"] = stablehlo


def _xla_figures(program: Program, executable: Any) -> None:
    """XLA's cost and memory figures: read once per fingerprint in this process, then
    taken from what was read for the same optimised program."""
    known = _figures_of.get(program.fingerprint) if program.fingerprint is not None else None
    if known is not None:  # the same optimised program: the same cost and memory
        program.flops, program.bytes_accessed, memory = known
        program.memory = (program.memory or {}) | memory
        return
    _cost_figures(executable, program)
    _memory_figures(executable, program)  # the dearest: XLA serialises the buffer assignment for it
    if program.fingerprint is not None and program.flops is not None and program.memory:
        with _lock:
            _figures_of[program.fingerprint] = (program.flops, program.bytes_accessed, program.memory)
            if len(_figures_of) > _MAX_FINGERPRINTS:
                del _figures_of[next(iter(_figures_of))]


def take() -> Pending | None:
    """What the compile that just ended on this thread compiled (once)."""
    program = getattr(_tls, "program", None)
    _tls.program = None
    return program


# ------------------------------------------------------------- events and run

# Per run and program fingerprint, the first event of each function that compiled it: a
# later compile of the same program by the same function is ``identical_to`` its first
# (a wasted recompile), one by another function is ``same_program_as`` the first of all
# (the two could share one jit; no waste). Bounded: the oldest are forgotten.
_MAX_FINGERPRINTS = 50_000
_first_of: dict[tuple[str, str], dict[str, str]] = {}
# XLA's figures per fingerprint in this process, so a recompile of the same program
# does not read them again.
_figures_of: dict[str, tuple[float | None, float | None, dict[str, int]]] = {}
# Fingerprints whose texts were already handed to the writer in this run (a new run may
# write to another store).
_texts_sent: set[tuple[str, str, str | None]] = set()


def event_fields(
    program: Program | None, event_id: str, run_id: str, function_hash: str = "", *, first_compile: bool = False
) -> dict[str, Any]:
    """The event's program fields, linked to the earlier compiles of the run with the
    same fingerprint; registers this one for later compiles. A ``first_compile`` (cause
    ``first_call``) is never ``identical_to`` anything: a first compile is no recompile,
    so it is no waste, whatever program an earlier jit object of the same name made."""
    if program is None:
        return {}
    fields: dict[str, Any] = {
        "program_fingerprint": program.fingerprint,
        "lowered_fingerprint": program.lowered_fingerprint,
        "eqns_by_primitive": program.eqns_by_primitive,
        "eqns_by_line": program.eqns_by_line,
        "hlo_ops": program.hlo_ops,
        "fusions": program.fusions,
        "flops": program.flops,
        "bytes_accessed": program.bytes_accessed,
        "memory": program.memory,
        "figures_missing": dict(program.missing) or None,
    }
    if program.jaxpr_eqns is not None:
        fields["jaxpr_eqns"] = program.jaxpr_eqns
    fingerprint = program.fingerprint
    if fingerprint is None:
        return fields
    with _lock:
        firsts = _first_of.get((run_id, fingerprint))
        if firsts is None:
            firsts = _first_of[(run_id, fingerprint)] = {}
            if len(_first_of) > _MAX_FINGERPRINTS:
                del _first_of[next(iter(_first_of))]
        mine = firsts.get(function_hash)
        if mine is not None:
            if not first_compile:
                fields["identical_to"] = mine
        else:
            if firsts:
                fields["same_program_as"] = next(iter(firsts.values()))
            firsts[function_hash] = event_id
        # A kept StableHLO text is the lowered module's: a module new to the run is sent
        # even when its optimised program is not (the names JAX's cache keys on differ).
        sent = (run_id, fingerprint, program.lowered_fingerprint if "stablehlo" in program.texts else None)
        send_texts = sent not in _texts_sent
        if send_texts:
            _texts_sent.add(sent)
            if len(_texts_sent) > _MAX_FINGERPRINTS:
                _texts_sent.clear()
    if send_texts:
        fields["program_texts"] = texts_payload(program)
    return fields


def texts_payload(program: Program) -> dict[str, Any]:
    """What the writer stores once per fingerprint (compressed there, off this thread):
    the texts within the per-program cap (a text over it is left out and named), and the
    equation profile, always."""
    budget = current.config().program_text_max_bytes
    out: dict[str, Any] = {"fingerprint": program.fingerprint, "texts": {}, "left_out": [], "profile": program.profile}
    for fmt in PROGRAM_FORMATS:
        text = program.texts.get(fmt)
        if text is None:
            continue
        if len(text) > budget:
            out["left_out"].append(fmt)
            continue
        budget -= len(text)
        out["texts"][fmt] = text
    return out


def install() -> bool:
    """Wrap JAX's lowering and compile once per process; False when JAX lacks either
    (the program view is then off, and the events say nothing of the program)."""
    global _installed
    with _lock:
        if _installed:
            return True
        if not jaxcompat.available("program_hooks"):
            return False
        ok = _patch_lowering() and _patch_compile()
        _installed = ok
        return ok
