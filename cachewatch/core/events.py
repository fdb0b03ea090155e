"""The plain, frozen objects that travel from the traced program to the store.

They are built off the hot path (only when JAX traces or compiles), carry nothing
but JSON-ready values, and convert to row dictionaries with :meth:`as_dict`.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any, Literal, NotRequired, Protocol, TypedDict, get_args

import orjson

from . import tables
from .figures import seconds_text
from .lowered import ModuleDiff


class Cause(enum.StrEnum):
    """Why a function was traced or compiled: the single spelling of the vocabulary.

    Members are strings (``Cause.NEW_SHAPE == "new_shape"``), so rows, JSON and the API
    carry the plain word.
    """

    FIRST_CALL = "first_call"
    NEW_SHAPE = "new_shape"
    NEW_DTYPE = "new_dtype"
    WEAK_TYPE = "weak_type"
    NEW_STATIC_VALUE = "new_static_value"
    NEW_STRUCTURE = "new_structure"
    NEW_FUNCTION_OBJECT = "new_function_object"
    CACHE_CLEARED = "cache_cleared"
    NEW_DEVICE_OR_SHARDING = "new_device_or_sharding"
    # A configuration option or context manager JAX keys its tracing cache on changed
    # (``config.trace_context()``: a mesh, matmul precision, promotion mode, x64, ...).
    NEW_CONTEXT = "new_context"
    UNKNOWN = "unknown"
    # Not a reason to compile: a global or closure value read at trace time (and baked in
    # as a constant) changed afterwards, so cached executables still use the old value.
    STALE_CAPTURE = "stale_capture"


class Kind(enum.StrEnum):
    """What an event records."""

    TRACE = "trace"
    COMPILE = "compile"
    STALE_CAPTURE = "stale_capture"
    # Traced and compiled ahead, before a call needed it, by cachewatch.warmup or
    # `run --warmup-from` (never a recompile or storm). Not the run's warm-up, its set-up
    # phase (the events' ``warmup`` flag, core/warmup.py). The stored word stays "warmup":
    # it is what every store and the API's consumers already hold.
    AHEAD = "warmup"


CAUSES: tuple[str, ...] = tuple(cause.value for cause in Cause)
KINDS: tuple[str, ...] = tuple(kind.value for kind in Kind)


def is_recompile(kind: str, cause: str, compiled: bool) -> bool:
    """A compile that is no function's first and none that cachewatch.warmup made ahead of
    the hot path (the fix, not the storm): what recompile counts, storms and waste are
    made of. The same rule in SQL: store.columns.recompiled, store.models.RECOMPILED."""
    return bool(compiled) and cause != Cause.FIRST_CALL and kind != Kind.AHEAD


class DropReason(enum.StrEnum):
    """Why events never reached the store (``cachewatch_events_dropped_total{reason}``)."""

    QUEUE_FULL = "queue_full"  # the recorder's queue was full: the program recorded faster than the store took
    STORE_REFUSED = "store_refused"  # the store refused the batch for good (invalid to it)
    SPOOL_FULL = "spool_full"  # the store was down and the disk spool full or unwritable
    SET_ASIDE = "set_aside"  # spooled batches set aside for good (refused or unreadable on replay)
    OUT_OF_BOUNDS = "out_of_bounds"  # an event whose times or measures no store can hold
    UNREPORTED = "unreported"  # a client that reported a total without reasons
    UNENCODABLE = "unencodable"  # an event holding a value JSON cannot write (dropped alone, never its batch)


DROP_REASONS: tuple[str, ...] = tuple(reason.value for reason in DropReason)


# The module every eager (op-by-op) compile is filed under; its functions are primitives.
OP_BY_OP_MODULE = "jax.op_by_op"
# The module of a compile tied to no function cachewatch knows, only to the name JAX gave it.
UNATTRIBUTED_MODULE = "<unattributed>"
# The package's version, kept here so the service can name it without importing capture.
VERSION = "0.1.0"


class DiffEntry(TypedDict):
    """One difference between a compile's signature (or context) and the closest earlier
    one: the argument path or option name, what changed, the cause it makes, and the
    values before and after as text. The event's ``diff`` field and its wire format."""

    path: str
    change: str  # shape, dtype, weak_type, static, sharding, added, removed, context, ...
    cause: str
    before: Any
    after: Any
    changes: NotRequired[list[str]]  # every change of a leaf, the telling one first
    axes: NotRequired[list[int]]  # the axes that changed size (a shape change)
    # A static change of a function whose wrapper holds every non-array leaf of its
    # arguments static (eqx.filter_jit): not the user's static_argnums, and an array
    # passed there instead is traced.
    held_static: NotRequired[bool]


# How a diff or a signature names an array: ``float32[8,784]``, `` weak`` when weakly typed.
# An extended dtype names its implementation in angle brackets (a PRNG key array: key<fry>).
_DESCRIBED = re.compile(r"^(?P<dtype>[A-Za-z0-9_]+(?:<[A-Za-z0-9_]+>)?)\[(?P<dims>[0-9, ]*)\](?P<weak> weak)?$")


def describe_array(dtype: object, shape: Iterable[int | str], weak_type: bool) -> str:
    return f"{dtype}[{','.join(str(d) for d in shape)}]" + (" weak" if weak_type else "")


def parse_described(text: object) -> tuple[str, tuple[int, ...], bool] | None:
    """The dtype, dimensions and weak type of an array as :func:`describe_array` wrote it;
    None for anything else (a static value, a repr)."""
    match = _DESCRIBED.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        return None
    dims = tuple(int(d) for d in match["dims"].replace(" ", "").split(",") if d)
    return match["dtype"], dims, bool(match["weak"])


# Bounds of every measure a store takes, checked by the service at ingest and by the
# library's own SQL writer: a row outside them could not be shown or summed sensibly.
MIN_TIMESTAMP = 946_684_800.0  # 2000-01-01 UTC
MAX_TIMESTAMP = 4_102_444_800.0  # 2100-01-01 UTC
MAX_SECONDS = 7 * 86_400.0  # one trace, lowering, compile or timed run
MAX_COUNT = 2**53  # calls and sizes: exact as a double, far beyond any real count
MAX_MEASURE = 1e30  # XLA flops and bytes accessed

# The texts of a compiled program that can be kept and shown, and the equation profile
# exported in the format JAX's eqn_count_pprof dump writes.
PROGRAM_TEXT_FORMATS = ("jaxpr", "hlo", "stablehlo")
PROGRAM_FORMATS = (*PROGRAM_TEXT_FORMATS, "pprof")
# The compiled memory of a program, in bytes, as XLA reports it, and the constants baked
# into the program (read from its jaxpr).
MEMORY_PARTS = ("generated_code", "argument", "output", "temp", "constants")

# Why JAX's jit gives an executable no C++ fast path, so that every call of it goes
# through its Python path (capture/dispatch_path.py), in the order JAX asks:
SlowReason = Literal[
    "ordered_effects",  # an ordered effect: io_callback(ordered=True), jax.debug.print(ordered=True)
    "unordered_effects",  # jax.debug.print, jax.debug.callback, an unordered io_callback
    "ref_effects",  # mutable array references
    "profile_rebuild",  # a profile-guided (PGLE) rebuild pending
    "non_array_outputs",  # an output that is not a plain jax.Array
    # called with tracers under a transformation applied outside any jit (jax.grad of a
    # jit, eagerly): no executable of its own ran, the call was traced again in Python
    "under_transformation",
    # a jit object made anew for the call (jax.jit(f) run again before calling it): no
    # recompile (JAX's caches are keyed by the function), but jax.jit's Python set-up ran
    "new_jit_object",
    "other",  # an executable JAX's C++ path does not take
]
SLOW_REASONS: tuple[str, ...] = get_args(SlowReason)


def held_bytes(memory: Any) -> int:
    """What JAX's cache holds for one executable: its code (``code``: XLA's generated code
    size, or where XLA reports none, as on CPU, the executable's serialized size; an
    event recorded before ``code`` was kept counts its generated code). A call's arguments,
    outputs and temporaries are the caller's buffers, not the cache's."""
    if not isinstance(memory, dict):
        return 0
    held = memory.get("code", memory.get("generated_code"))
    return int(held) if isinstance(held, (int, float)) and held > 0 else 0


# The event fields that are durations in seconds.
SECONDS_FIELDS = (
    "trace_seconds",
    "lower_seconds",
    "compile_seconds",
    "cache_time_saved_seconds",
    "compiled_run_seconds",
    "eager_run_seconds",
)
# The event fields read around a backend compile (capture/cachestate.py), each group taken
# whole or left None: the host's memory (when it was read) and what JAX's persistent
# cache did (when it was asked).
HOST_MEMORY_FIELDS = ("host_bytes", "host_bytes_before", "peak_host_bytes")
PERSISTENT_CACHE_FIELDS = (
    "persistent_cache",
    "persistent_cache_reason",
    "persistent_cache_key",
    "persistent_cache_bytes",
    "persistent_cache_dir",
)


def timestamp_ok(value: Any) -> bool:
    return isinstance(value, (int, float)) and MIN_TIMESTAMP <= value < MAX_TIMESTAMP


def seconds_ok(value: Any) -> bool:
    """None (unknown) or a finite, non-negative duration of at most MAX_SECONDS."""
    return value is None or (isinstance(value, (int, float)) and 0.0 <= value <= MAX_SECONDS)


def short_name(qualname: str) -> str:
    """``train.<locals>.step`` -> ``step``: the readable tail of a qualified name."""
    return qualname.rsplit("<locals>.", 1)[-1]


@dataclasses.dataclass(frozen=True, slots=True)
class FunctionInfo:
    """Where a jitted function comes from; ``function_hash`` is stable across processes and hosts."""

    function_hash: str
    name: str
    qualname: str
    module: str
    file: str
    line: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "function_hash": self.function_hash,
            "name": self.name,
            "qualname": self.qualname,
            "module": self.module,
            "file": self.file,
            "line": self.line,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class RunInfo:
    """One process that records events."""

    run_id: str
    run_name: str
    host: str
    pid: int
    started_at: float
    jax_version: str
    jaxlib_version: str
    backend: str
    devices: tuple[str, ...]
    python_version: str
    job: str = ""
    process_index: int | None = None
    process_count: int | None = None
    # Capabilities of cachewatch's JAX seam found off in this process (its JAX lacks them).
    capabilities_off: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        row = dataclasses.asdict(self)
        row["devices"] = list(self.devices)
        row["capabilities_off"] = list(self.capabilities_off)
        return row


@dataclasses.dataclass(frozen=True, slots=True)
class CompileEvent:
    """One trace, or one backend compile that happened without a trace."""

    event_id: str
    function: FunctionInfo
    run_id: str
    timestamp: float
    kind: str
    cause: str
    explanation: str
    diff: tuple[DiffEntry, ...]
    signature: tuple[dict[str, Any], ...]
    signature_hash: str
    compiled: bool
    nested: bool
    trace_seconds: float | None = None
    lower_seconds: float | None = None
    compile_seconds: float | None = None
    persistent_cache_hit: bool | None = None
    cache_time_saved_seconds: float | None = None
    device: str | None = None
    backend: str | None = None
    call_site: str | None = None
    jaxpr_eqns: int | None = None
    flops: float | None = None
    bytes_accessed: float | None = None
    error: str | None = None
    thread: str | None = None
    hlo_ops: int | None = None
    compiled_run_seconds: float | None = None
    eager_run_seconds: float | None = None
    captured: dict[str, str] | None = None
    # Made during the run's warm-up (model and optimizer set-up, first compile of each
    # step): shown as such and never counted towards a storm.
    warmup: bool = False
    cache_key: dict[str, str] | None = None
    # What was compiled (capture/program.py): XLA's optimised program without names and
    # source locations, hashed; the lowered module's hash (what the persistent cache keys
    # on); the earlier compile of the run with the same program; the program's shape.
    program_fingerprint: str | None = None
    lowered_fingerprint: str | None = None
    identical_to: str | None = None
    eqns_by_primitive: dict[str, int] | None = None
    eqns_by_line: list[dict[str, Any]] | None = None
    fusions: int | None = None
    memory: dict[str, int] | None = None
    # Another function's earlier compile of the run with the same program (the two could
    # share one jit; never a wasted recompile), and, per figure of the program the JAX in
    # use could not give (flops, memory, the jaxpr text, ...), the reason.
    same_program_as: str | None = None
    figures_missing: dict[str, str] | None = None
    # Since the function's previous compile, the cache had served a call of a signature
    # compiled before that one: the program was repeating its work and still met a new
    # signature (a storm's mark; a first pass over new shapes never comes back mid-way).
    # Known only for the jits whose calls cachewatch times.
    while_repeating: bool = False
    # Which call of the function (counting from 1 in the process) compiled: with the
    # calls counted later, how many the cache served after it. None where calls are not
    # counted (op-by-op code, foreign jits).
    call_number: int | None = None
    # The program's texts and equation profile, on the first event of its fingerprint
    # in the process: ``{"fingerprint", "texts": {format: text}, "left_out", "profile"}``.
    # Stored once per fingerprint (not an event column).
    program_texts: dict[str, Any] | None = None
    # What was compiled, still to be read (a :class:`PendingProgram`): the figures above
    # are read off the compile path, by the writer's thread, before the event is stored.
    # Never stored itself, nor sent.
    pending: PendingProgram | None = dataclasses.field(default=None, compare=False, repr=False)
    # Host memory around the backend compile (capture/hostmemory.py): what the process's
    # resident set gained and kept (after minus before, may be negative), the resident
    # set before, and its high-water mark during the compile (absolute bytes).
    host_bytes: int | None = None
    host_bytes_before: int | None = None
    peak_host_bytes: int | None = None
    # JAX's persistent compilation cache for this compile (a PersistentCache word), why
    # nothing was written (a NotWrittenReason word) and the entry's key (its file name
    # in the cache directory without JAX's suffix).
    persistent_cache: str | None = None
    persistent_cache_reason: str | None = None
    persistent_cache_key: str | None = None
    # The entry's size in bytes, as JAX wrote it (compressed): on a compile that wrote it.
    persistent_cache_bytes: int | None = None
    # The cache directory JAX's persistent cache used (absolute where local): an entry
    # written there and gone from it later was evicted by its size limit, or deleted.
    persistent_cache_dir: str | None = None
    # The user's frames from the call site outwards (``{"site": "file:line", "into":
    # "library.module", "callee": "Class.method"}``, ``into`` and ``callee`` where that frame
    # called into a library): where a value that drives several functions' compiles enters
    # (cachewatch/storms/findings.py), and whether what it called can be jitted.
    user_stack: list[dict[str, str]] | None = None
    # How JAX serves this signature's later calls (capture/dispatch_path.py): ``fast`` (its
    # C++ path) or ``slow`` (its Python path, every call), and why for ``slow``.
    call_path: str | None = None
    slow_reason: str | None = None

    def __post_init__(self) -> None:
        # Plain strings at the store's boundary: a database driver may write an enum member
        # by its name rather than its value.
        object.__setattr__(self, "cause", str(self.cause))
        object.__setattr__(self, "kind", str(self.kind))

    @property
    def seconds(self) -> float:
        """What this event cost: trace, lowering and XLA compile."""
        return sum(s or 0.0 for s in (self.trace_seconds, self.lower_seconds, self.compile_seconds))

    def cells(self) -> list[str]:
        """The event as a row of :data:`EVENT_COLUMNS` (a notebook's table, the text beside it)."""
        diff = "; ".join(f"{d.get('path')}: {d.get('before')} -> {d.get('after')}" for d in self.diff)
        why = self.error or self.explanation
        return [
            short_name(self.function.qualname or self.function.name),
            str(self.cause) + (" (warm-up)" if self.warmup else ""),
            why + (f" [{diff}]" if diff else ""),
            seconds_text(self.seconds),
            self.call_site or "",
        ]

    def _repr_html_(self) -> str:
        return tables.html_table(EVENT_COLUMNS, [self.cells()])

    def as_dict(self) -> dict[str, Any]:
        row = {name: getattr(self, name) for name in _EVENT_FIELDS}
        row["function_hash"] = self.function.function_hash
        row["diff"] = list(self.diff)
        row["signature"] = list(self.signature)
        return row


EVENT_COLUMNS = ("function", "cause", "why (diff)", "seconds", "call site")


def new_event_id() -> str:
    """A client-made event id: 32 hex digits, microseconds since the epoch then 72 random
    bits. Ids made later sort later, so the store's unique index on them grows at its
    end instead of at random pages (a random id makes every insert into a large store
    touch a page that is rarely in cache)."""
    return f"{time.time_ns() // 1000:014x}{os.urandom(9).hex()}"


# Row fields of a CompileEvent, computed once (as_dict runs for every stored event).
_EVENT_FIELDS = tuple(f.name for f in dataclasses.fields(CompileEvent) if f.name not in ("function", "pending"))


class PendingProgram(Protocol):
    """What a compile compiled, held until the writer's thread reads its figures."""

    def complete(self, event: CompileEvent) -> CompileEvent:
        """The event with the program's figures (and ``pending`` None)."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class CallStats:
    """Calls of one function since the previous flush, with the sampled run time.

    One row per signature that had timed calls (``signature_hash``, its samples and
    ``run_buckets``: log-spaced bucket -> [samples, calls they stand for], see
    ``runtimes``); the function's calls are on the first of its rows. ``sample_every``
    is the process's setting (0: sampling off), so a function with no timed call can
    say why.
    """

    run_id: str
    function: FunctionInfo
    timestamp: float
    calls: int
    sampled_calls: int
    sampled_seconds: float
    signature_hash: str = ""
    run_buckets: dict[str, list[int]] | None = None
    sample_every: int | None = None
    # Set on a row that records a release of the function's compiled executables instead of
    # calls (calls 0): what released them, e.g. ``jax.clear_caches()`` or ``clear_cache()``.
    released_by: str | None = None
    # Of ``calls``, those JAX served through its Python dispatch path (not its C++ fast
    # path), by why (``jaxcompat.SLOW_REASONS``); None where none were or paths are not watched.
    slow_calls: dict[str, int] | None = None
    # What making the new jit objects counted under ``slow_calls['new_jit_object']`` took,
    # and the user's line that made one of them.
    jit_object_seconds: float | None = None
    jit_made_at: str | None = None
    # The user's line that applied a transformation outside any jit (an eager jax.grad or
    # jax.vmap) around the calls counted under ``slow_calls['under_transformation']``.
    transformed_at: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "function_hash": self.function.function_hash,
            "timestamp": self.timestamp,
            "calls": self.calls,
            "sampled_calls": self.sampled_calls,
            "sampled_seconds": self.sampled_seconds,
            "signature_hash": self.signature_hash,
            "run_buckets": self.run_buckets,
            "sample_every": self.sample_every,
            "released_by": self.released_by,
            "slow_calls": self.slow_calls,
            "jit_object_seconds": self.jit_object_seconds,
            "jit_made_at": self.jit_made_at,
            "transformed_at": self.transformed_at,
        }


def _encodable(wire: dict[str, Any]) -> bool:
    """Whether both encoders a batch meets can write this: orjson (the SQL and HTTP sinks)
    and the standard library's (the spool)."""
    try:
        orjson.dumps(wire, option=orjson.OPT_NON_STR_KEYS)
        json.dumps(wire)
    except (TypeError, ValueError):
        return False
    return True


class Batch:
    """What the writer hands a sink: the run, compile events, and call statistics.

    Its wire format (``to_wire``/``from_wire``) is the JSON a spool file holds and the
    body the HTTP sink posts to the service's ``POST /api/v1/events``.
    """

    __slots__ = ("run", "events", "stats", "dropped_by")

    def __init__(
        self,
        run: RunInfo,
        events: list[CompileEvent],
        stats: list[CallStats],
        dropped_by: Mapping[str, int] | None = None,
    ):
        self.run = run
        self.events = events
        self.stats = stats
        # Events this process lost since the previous batch, by DropReason (SQL sinks store it).
        self.dropped_by = {reason: n for reason, n in (dropped_by or {}).items() if n}

    @property
    def dropped(self) -> int:
        return sum(self.dropped_by.values())

    def to_wire(self) -> dict[str, Any]:
        return {
            "run": self.run.as_dict(),
            "events": [{**e.as_dict(), "function": e.function.as_dict()} for e in self.events],
            "stats": [{**s.as_dict(), "function": s.function.as_dict()} for s in self.stats],
            "dropped": self.dropped,  # the total, as clients before the reasons sent it
            "dropped_by": dict(self.dropped_by),
        }

    def without_unencodable(self) -> tuple[Batch, int]:
        """The batch less the events whose wire form JSON cannot write (with the JSON
        encoders the sinks and the spool use), and how many those were: one such event
        never costs the others. The writer asks only after a write failed, so a batch that
        writes pays nothing for it."""
        kept = [e for e in self.events if _encodable({**e.as_dict(), "function": e.function.as_dict()})]
        if len(kept) == len(self.events):
            return self, 0
        return Batch(self.run, kept, self.stats, self.dropped_by), len(self.events) - len(kept)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Batch:
        return cls(
            run=_run_from_wire(data["run"]),
            events=[_event_from_wire(e) for e in data["events"]],
            stats=[_stats_from_wire(s) for s in data["stats"]],
            dropped_by=dropped_by_reason(data.get("dropped"), data.get("dropped_by")),
        )


def dropped_by_reason(total: Any, by_reason: Mapping[str, Any] | None) -> dict[str, int]:
    """Losses by reason as a batch reports them; a client that sent only a total gives
    ``unreported`` for it."""
    if by_reason:
        return {str(reason): int(n) for reason, n in by_reason.items() if int(n or 0) > 0}
    return {DropReason.UNREPORTED.value: int(total)} if total else {}


_EVENT_INIT_FIELDS = frozenset(f.name for f in dataclasses.fields(CompileEvent)) - {"function", "pending"}


def _event_from_wire(data: dict[str, Any]) -> CompileEvent:
    values = {k: v for k, v in data.items() if k in _EVENT_INIT_FIELDS}
    values["function"] = FunctionInfo(**data["function"])
    values["diff"] = tuple(data.get("diff") or ())
    values["signature"] = tuple(data.get("signature") or ())
    return CompileEvent(**values)


def _run_from_wire(data: dict[str, Any]) -> RunInfo:
    values = dict(data)
    values["devices"] = tuple(values.get("devices") or ())
    values["capabilities_off"] = tuple(values.get("capabilities_off") or ())
    return RunInfo(**values)


_STATS_FIELDS = frozenset(f.name for f in dataclasses.fields(CallStats)) - {"function"}


def _stats_from_wire(data: dict[str, Any]) -> CallStats:
    # Every field as_dict wrote (a field left out here was lost with a spooled batch).
    values = {name: value for name, value in data.items() if name in _STATS_FIELDS}
    values["signature_hash"] = values.get("signature_hash") or ""
    return CallStats(function=FunctionInfo(**data["function"]), **values)


class PersistentCache(enum.StrEnum):
    """What JAX's persistent compilation cache did for one compile (``persistent_cache``)."""

    HIT = "hit"  # read from the cache: no XLA compile
    WRITTEN = "written"  # compiled and written to the cache
    NOT_WRITTEN = "not_written"  # compiled and not written: see NotWrittenReason
    OFF = "off"  # no cache directory, or the cache not used for this compile


class NotWrittenReason(enum.StrEnum):
    """Why a compile that asked the persistent cache wrote no entry (``persistent_cache_reason``)."""

    MIN_COMPILE_TIME = "min_compile_time"  # under jax_persistent_cache_min_compile_time_secs
    NOT_PROCESS_0 = "not_process_0"  # only process 0 of a multi-process job writes
    # JAX wrote nothing for another reason: an error writing it (JAX warns), a host
    # callback in the program, or an entry under jax_persistent_cache_min_entry_size_bytes.
    ERROR_OR_OTHER = "error_or_other"


PERSISTENT_CACHE_RESULTS: tuple[str, ...] = tuple(r.value for r in PersistentCache)
NOT_WRITTEN_REASONS: tuple[str, ...] = tuple(r.value for r in NotWrittenReason)


# The parts of JAX's persistent compilation cache key (as JAX names them), in its order,
# and what each means to a person reading why a compile missed the cache.
CACHE_KEY_PARTS: tuple[tuple[str, str], ...] = (
    ("computation", "the program (the lowered computation)"),
    ("jax_lib version", "the jax/jaxlib version"),
    ("backend version", "the backend"),
    ("accelerator_config", "the device kind or topology"),
    ("XLA flags", "the XLA flags"),
    ("compile_options", "the compile options"),
    ("compression", "the cache's compression"),
    ("custom_hook", "the custom cache-key hook"),
)
# Readable values kept beside the hashes: shown next to the part that changed.
_CACHE_KEY_VALUES = {
    "jax_lib version": ("jax", "jaxlib"),
    "backend version": ("backend",),
    "accelerator_config": ("device_kind",),
    "XLA flags": ("xla_flags",),
}


class CacheMissExplanation(TypedDict):
    """Why a compile missed the persistent cache that served its function and signature in
    an earlier run (an event row's ``cache_miss``)."""

    earlier_run_id: str
    earlier_hit: bool | None
    changed: list[str]  # the parts of the cache key whose hash changed
    explanation: str


def explain_cache_miss(
    before: dict[str, str],
    after: dict[str, str],
    *,
    earlier_run: str,
    earlier_hit: bool | None,
    programs: tuple[tuple[str | None, str | None], tuple[str | None, str | None]] | None = None,
    module_diff: ModuleDiff | None = None,
) -> CacheMissExplanation:
    """Why a compile missed the persistent cache when the same function and signature was
    in it for ``earlier_run``: the parts of the key whose hash changed. ``programs``: the
    two compiles' (optimised program, lowered module) fingerprints, which tell a program
    that changed from a module that changed only in its names; ``module_diff``: the two
    lowered modules' texts compared, when the store kept both (it names those names)."""
    changed = [part for part, _ in CACHE_KEY_PARTS if part in before and part in after and before[part] != after[part]]
    phrases = []
    for part, meaning in CACHE_KEY_PARTS:
        if part not in changed:
            continue
        values = [(name, before.get(name), after.get(name)) for name in _CACHE_KEY_VALUES.get(part, ())]
        shown = [f"{name} {old!r} -> {new!r}" for name, old, new in values if old != new]
        if part == "computation":
            shown.append(_computation_change(programs, module_diff))
        phrases.append(meaning + (f" ({', '.join(s for s in shown if s)})" if any(shown) else ""))
    was = "hit the cache" if earlier_hit else "was compiled with the cache on"
    if phrases:
        text = (
            f"Missed the persistent compilation cache: the same function and signature {was} in run "
            f"{earlier_run[:12]}, and since then the cache key changed in " + "; ".join(phrases) + "."
        )
    else:
        text = (
            f"Missed the persistent compilation cache with the same key as in run {earlier_run[:12]}: the "
            "entry is not in this cache directory (another directory, evicted, or never written because "
            "it was below JAX's size or compile-time threshold)."
        )
    return {"earlier_run_id": earlier_run, "earlier_hit": earlier_hit, "changed": changed, "explanation": text}


def _computation_change(
    programs: tuple[tuple[str | None, str | None], tuple[str | None, str | None]] | None,
    module_diff: ModuleDiff | None = None,
) -> str:
    """What changed in the lowered computation, told by the programs' fingerprints: XLA's
    optimised program (names and locations left out) and the lowered module (locations
    left out). The same program from a module that differs means the module differs in
    its names alone: private symbols renumbered by a helper lowered and then dropped
    (jax#38828), or a pointer baked into a name (custom_partitioning). With both
    modules' texts, ``module_diff`` names them."""
    if programs is None:
        return ""
    (program_before, lowered_before), (program_after, lowered_after) = programs
    if not (program_before and program_after):
        return ""
    if program_before != program_after:
        return "XLA's optimised program differs: the program itself changed"
    if not (lowered_before and lowered_after and lowered_before != lowered_after):
        return ""
    said = module_diff.describe() if module_diff is not None else ""
    if module_diff is not None and module_diff.names_only and said:
        return (
            f"the same optimised program from a lowered module that differs in its names only ({said}), "
            "and the cache keys on the module's text"
        )
    if said:
        return f"the same optimised program from a lowered module in which {said}: the cache keys on the module's text"
    return (
        "the same optimised program from a lowered module that differs in its names only, such as "
        "private symbols renumbered by a helper lowered and then dropped, or a pointer baked into a name: "
        "the cache keys on the module's text (CACHEWATCH_PROGRAM_TEXTS with stablehlo keeps the modules, "
        "and the names are then named)"
    )
