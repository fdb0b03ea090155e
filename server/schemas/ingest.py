"""What the service accepts: the ingest batch, exactly what ``cachewatch.core.events.Batch.to_wire()``
produces (plus an optional ``batch_id`` and ``dropped`` count), and the bounded types every
model shares. String limits follow the store's column sizes; unknown fields are ignored
so that an older service accepts batches from a newer library.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from cachewatch.core.events import (
    CAUSES,
    KINDS,
    MAX_COUNT,
    MAX_MEASURE,
    MAX_SECONDS,
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    SlowReason,
    dropped_by_reason,
)

Cause = Literal[CAUSES]  # type: ignore[valid-type]
Kind = Literal[KINDS]  # type: ignore[valid-type]

# Every measure is bounded (cachewatch.core.events): a value outside could not be shown or
# summed, and one such row used to break every page that formatted it.
Timestamp = Annotated[
    float,
    Field(
        ge=MIN_TIMESTAMP,
        lt=MAX_TIMESTAMP,
        allow_inf_nan=False,
        description="Seconds since the epoch, between 2000 and 2100.",
    ),
]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]


def _finite_or_none(value: Any) -> Any:
    # A measurement JAX could not make (NaN, inf) is "unknown", not a reason to refuse
    # the whole batch and leave it stuck in a client's spool.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


Seconds = Annotated[
    Annotated[float, Field(ge=0.0, le=MAX_SECONDS)] | None,
    BeforeValidator(_finite_or_none),
    Field(description="Seconds, at most a week; NaN or infinite reads as unknown (null)."),
]
Measure = Annotated[Annotated[float, Field(ge=0.0, le=MAX_MEASURE)] | None, BeforeValidator(_finite_or_none)]


def _text(max_length: int, description: str = "", min_length: int = 0):
    return Field(min_length=min_length, max_length=max_length, description=description)


class _In(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FunctionIn(_In):
    function_hash: Annotated[str, _text(40, "Stable id of the function's source.", 1)]
    name: Annotated[str, _text(255)]
    qualname: Annotated[str, _text(512)]
    module: Annotated[str, _text(512)] = ""
    file: Annotated[str, _text(1024)] = ""
    line: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0


class RunIn(_In):
    run_id: Annotated[str, _text(32, "One process that records events.", 1)]
    run_name: Annotated[str, _text(200)] = ""
    host: Annotated[str, _text(255)] = ""
    pid: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0
    started_at: Timestamp
    jax_version: Annotated[str, _text(64)] = ""
    jaxlib_version: Annotated[str, _text(64)] = ""
    backend: Annotated[str, _text(64)] = ""
    devices: Annotated[list[Annotated[str, _text(255)]], Field(max_length=65536)] = []
    python_version: Annotated[str, _text(32)] = ""
    job: Annotated[str, _text(200, "Name shared by the ranks of one multi-process job.")] = ""
    process_index: Annotated[int | None, Field(ge=0, le=2**31 - 1)] = None
    process_count: Annotated[int | None, Field(ge=1, le=2**31 - 1)] = None
    capabilities_off: Annotated[
        list[Annotated[str, _text(64)]],
        Field(max_length=256, description="Capabilities of cachewatch's JAX seam that were off in the run."),
    ] = []


class ProgramTextsIn(_In):
    fingerprint: Annotated[str, _text(64, "The program fingerprint the texts are of.", 1)]
    texts: Annotated[
        dict[Literal["jaxpr", "hlo", "stablehlo"], Annotated[str, Field(max_length=64_000_000)]],
        Field(description="format -> text"),
    ] = {}
    left_out: list[Annotated[str, _text(16)]] = []
    profile: Annotated[
        list[list[Any]] | None,
        Field(max_length=1_000_000, description="[file, line, function, primitive, in_loop_body, equations] rows."),
    ] = None


class EventIn(_In):
    event_id: Annotated[str, _text(32, "Client-made id; a retried event with the same id is stored once.", 1)]
    function: FunctionIn
    function_hash: Annotated[str | None, _text(40, "If given, must equal function.function_hash.")] = None
    run_id: Annotated[str, _text(32, "Must equal the batch's run.run_id.", 1)]
    timestamp: Timestamp
    kind: Kind
    cause: Cause
    explanation: Annotated[str, _text(16384)] = ""
    diff: list[dict[str, Any]] = []
    signature: list[dict[str, Any]] = []
    signature_hash: Annotated[str, _text(40)] = ""
    compiled: bool = False
    nested: bool = False
    trace_seconds: Seconds = None
    lower_seconds: Seconds = None
    compile_seconds: Seconds = None
    persistent_cache_hit: bool | None = None
    cache_time_saved_seconds: Seconds = None
    device: Annotated[str | None, _text(255)] = None
    backend: Annotated[str | None, _text(64)] = None
    call_site: Annotated[str | None, _text(1024)] = None
    jaxpr_eqns: Annotated[int | None, Field(ge=0, le=2**31 - 1)] = None
    flops: Measure = None
    bytes_accessed: Measure = None
    error: Annotated[str | None, _text(65536)] = None
    thread: Annotated[str | None, _text(255)] = None
    hlo_ops: Annotated[int | None, Field(ge=0, le=2**31 - 1)] = None
    compiled_run_seconds: Seconds = None
    eager_run_seconds: Seconds = None
    captured: Annotated[
        dict[str, Annotated[str, _text(4096)]] | None,
        Field(max_length=10_000, description="Globals and closure values read at trace time: name -> short summary."),
    ] = None
    warmup: Annotated[bool, Field(description="Made during the run's warm-up; never counted in a storm.")] = False
    cache_key: Annotated[
        dict[str, Annotated[str, _text(512)]] | None,
        Field(max_length=64, description="Persistent compilation cache key, part -> short hash (and readable values)."),
    ] = None
    program_fingerprint: Annotated[
        str | None, _text(64, "XLA's optimised program, hashed without names and source locations.")
    ] = None
    lowered_fingerprint: Annotated[str | None, _text(64, "The lowered module without locations, hashed.")] = None
    identical_to: Annotated[str | None, _text(32, "The earlier event of the run that compiled the same program.")] = (
        None
    )
    eqns_by_primitive: Annotated[
        dict[Annotated[str, _text(128)], Annotated[int, Field(ge=0, le=2**31 - 1)]] | None,
        Field(max_length=2000, description="Jaxpr equations per primitive, through nested jaxprs."),
    ] = None
    eqns_by_line: Annotated[
        list[dict[str, Any]] | None, Field(max_length=200, description="The user source lines with most equations.")
    ] = None
    fusions: Annotated[int | None, Field(ge=0, le=2**31 - 1)] = None
    same_program_as: Annotated[
        str | None, _text(32, "Another function's earlier event of the run that compiled the same program.")
    ] = None
    figures_missing: Annotated[
        dict[Annotated[str, _text(32)], Annotated[str, _text(512)]] | None,
        Field(max_length=32, description="Figures of the program that could not be read: figure -> reason."),
    ] = None
    while_repeating: Annotated[
        bool, Field(description="The program had come back to a signature compiled before the previous compile.")
    ] = False
    call_number: Annotated[Count | None, Field(description="Which call of the function compiled (from 1).")] = None
    memory: Annotated[
        dict[Annotated[str, _text(32)], Annotated[int, Field(ge=0, le=MAX_COUNT)]] | None,
        Field(max_length=16, description="Compiled memory in bytes: generated_code, argument, output, temp."),
    ] = None
    program_texts: Annotated[
        ProgramTextsIn | None, Field(description="The program's texts, once per fingerprint (stored compressed).")
    ] = None
    host_bytes: Annotated[
        int | None,
        Field(ge=-MAX_COUNT, le=MAX_COUNT, description="Host memory the process gained and kept over the compile."),
    ] = None
    host_bytes_before: Annotated[
        int | None, Field(ge=0, le=MAX_COUNT, description="The process's resident set before the compile (bytes).")
    ] = None
    peak_host_bytes: Annotated[
        int | None, Field(ge=0, le=MAX_COUNT, description="The resident set's high-water mark during the compile.")
    ] = None
    persistent_cache: Annotated[
        Literal["hit", "written", "not_written", "off"] | None,
        Field(description="What JAX's persistent compilation cache did for this compile."),
    ] = None
    persistent_cache_reason: Annotated[
        Literal["min_compile_time", "not_process_0", "error_or_other"] | None,
        Field(description="Why a compile that asked the persistent cache wrote no entry."),
    ] = None
    persistent_cache_key: Annotated[str | None, _text(512, "The entry's key in the cache directory.")] = None
    persistent_cache_bytes: Annotated[
        int | None, Field(ge=0, le=MAX_COUNT, description="The entry's size as written (compressed bytes).")
    ] = None
    persistent_cache_dir: Annotated[
        str | None, _text(1024, "The cache directory the entry was read from or written to.")
    ] = None
    call_path: Annotated[
        Literal["fast", "slow"] | None,
        Field(description="How JAX serves the signature's later calls: its C++ fast path or its Python path."),
    ] = None
    slow_reason: Annotated[
        SlowReason | None,
        Field(description="Why JAX gave the executable no fast path."),
    ] = None
    user_stack: Annotated[
        list[dict[Literal["site", "into", "callee"], Annotated[str, _text(1024)]]] | None,
        Field(
            max_length=16,
            description="The user's frames from the call site outwards: site (file:line) and, where that "
            "line called into a library, into (the library's module) and callee (the qualified name of the "
            "function it called).",
        ),
    ] = None


class CallStatsIn(_In):
    run_id: Annotated[str, _text(32, "Must equal the batch's run.run_id.", 1)]
    function: FunctionIn
    function_hash: Annotated[str | None, _text(40)] = None
    timestamp: Timestamp
    calls: Count
    sampled_calls: Count = 0
    sampled_seconds: Annotated[float, Field(ge=0, le=MAX_SECONDS * MAX_COUNT, allow_inf_nan=False)] = 0.0
    signature_hash: Annotated[str, _text(40)] = ""
    run_buckets: Annotated[
        dict[Annotated[str, Field(pattern=r"^[0-9]{1,4}$")], Annotated[list[Count], Field(min_length=2, max_length=2)]]
        | None,
        Field(
            max_length=1000,
            description="Sampled run times of this signature: log-spaced bucket -> [samples, calls they stand for].",
        ),
    ] = None
    sample_every: Annotated[Count | None, Field(description="The process's sampling setting (0: off).")] = None
    slow_calls: Annotated[
        dict[SlowReason, Count] | None,
        Field(description="Of the calls, those JAX served through its Python path, by why."),
    ] = None
    released_by: Annotated[
        str | None, _text(64, "Set on a row recording a release of the function's executables: by what.")
    ] = None
    jit_object_seconds: Annotated[
        float | None,
        Field(
            ge=0,
            le=MAX_SECONDS * MAX_COUNT,
            allow_inf_nan=False,
            description="What making the jit objects counted under slow_calls['new_jit_object'] took.",
        ),
    ] = None
    jit_made_at: Annotated[str | None, _text(1024, "The user's line that made one of those jit objects.")] = None
    transformed_at: Annotated[
        str | None,
        _text(
            1024, "The user's line that applied a transformation around calls under slow_calls['under_transformation']."
        ),
    ] = None


class BatchIn(_In):
    """One batch from a recorder: its run, compile events and call statistics."""

    batch_id: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=64,
            pattern=r"^[A-Za-z0-9_.-]+$",
            description="Client-made id of the batch; a retried batch is stored once.",
        ),
    ] = None
    run: RunIn
    events: list[EventIn] = []
    stats: list[CallStatsIn] = []
    dropped: Annotated[
        Count, Field(description="Events the client dropped since its previous batch, all reasons together.")
    ] = 0
    dropped_by: Annotated[
        dict[Annotated[str, _text(32, "", 1)], Count],
        Field(
            max_length=64,
            description="The same losses by reason (queue_full, store_refused, spool_full, set_aside, "
            "out_of_bounds); a client that sends only `dropped` has them counted as unreported.",
        ),
    ] = {}

    def drops(self) -> dict[str, int]:
        return dropped_by_reason(self.dropped, self.dropped_by)


class IngestResult(BaseModel):
    batch_id: str | None
    events: int = Field(description="Events in the batch.")
    stored_events: int = Field(description="Events new to the store.")
    duplicate_events: int = Field(description="Events the store already had (a retried batch).")
    stats: int
    stored_stats: int
    duplicate_stats: int
