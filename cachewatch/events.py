"""The plain, frozen objects that travel from the traced program to the store.

They are built off the hot path (only when JAX traces or compiles), carry nothing
but JSON-ready values, and convert to row dictionaries with :meth:`as_dict`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

CAUSES: tuple[str, ...] = (
    "first_call",
    "new_shape",
    "new_dtype",
    "weak_type",
    "new_static_value",
    "new_structure",
    "new_function_object",
    "cache_cleared",
    "new_device_or_sharding",
    "unknown",
    "stale_capture",  # not a compile: see STALE_CAPTURE below
)

KINDS: tuple[str, ...] = ("trace", "compile", "stale_capture")

# Not a reason to compile: a global or closure value read at trace time (and baked in
# as a constant) changed afterwards, so cached executables still use the old value.
STALE_CAPTURE = "stale_capture"


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
        return {"function_hash": self.function_hash, "name": self.name, "qualname": self.qualname,
                "module": self.module, "file": self.file, "line": self.line}


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

    def as_dict(self) -> dict[str, Any]:
        row = dataclasses.asdict(self)
        row["devices"] = list(self.devices)
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
    diff: tuple[dict[str, Any], ...]
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
    cache_key: dict[str, str] | None = None

    def as_dict(self) -> dict[str, Any]:
        row = {name: getattr(self, name) for name in _EVENT_FIELDS}
        row["function_hash"] = self.function.function_hash
        row["diff"] = list(self.diff)
        row["signature"] = list(self.signature)
        return row


def new_event_id() -> str:
    """A client-made event id: 32 hex digits, microseconds since the epoch then 72 random
    bits. Ids made later sort later, so the store's unique index on them grows at its
    end instead of at random pages (a random id makes every insert into a large store
    touch a page that is rarely in cache)."""
    return f"{time.time_ns() // 1000:014x}{os.urandom(9).hex()}"


# Row fields of a CompileEvent, computed once (as_dict runs for every stored event).
_EVENT_FIELDS = tuple(f.name for f in dataclasses.fields(CompileEvent) if f.name != "function")


@dataclasses.dataclass(frozen=True, slots=True)
class CallStats:
    """Calls of one function since the previous flush, with the sampled run time."""

    run_id: str
    function: FunctionInfo
    timestamp: float
    calls: int
    sampled_calls: int
    sampled_seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "function_hash": self.function.function_hash,
                "timestamp": self.timestamp, "calls": self.calls,
                "sampled_calls": self.sampled_calls, "sampled_seconds": self.sampled_seconds}


def event_from_dict(data: dict[str, Any]) -> CompileEvent:
    """Inverse of ``CompileEvent.as_dict`` plus its ``function`` (for spool files and ingest)."""
    fields = {f.name for f in dataclasses.fields(CompileEvent)}
    values = {k: v for k, v in data.items() if k in fields and k != "function"}
    values["function"] = FunctionInfo(**data["function"])
    values["diff"] = tuple(data.get("diff") or ())
    values["signature"] = tuple(data.get("signature") or ())
    return CompileEvent(**values)


def event_to_dict(event: CompileEvent) -> dict[str, Any]:
    row = event.as_dict()
    row["function"] = event.function.as_dict()
    return row


def run_from_dict(data: dict[str, Any]) -> RunInfo:
    values = dict(data)
    values["devices"] = tuple(values.get("devices") or ())
    return RunInfo(**values)


def stats_to_dict(stats: CallStats) -> dict[str, Any]:
    row = stats.as_dict()
    row["function"] = stats.function.as_dict()
    return row


def stats_from_dict(data: dict[str, Any]) -> CallStats:
    return CallStats(run_id=data["run_id"], function=FunctionInfo(**data["function"]),
                     timestamp=data["timestamp"], calls=data["calls"],
                     sampled_calls=data["sampled_calls"], sampled_seconds=data["sampled_seconds"])


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
_CACHE_KEY_VALUES = {"jax_lib version": ("jax", "jaxlib"), "backend version": ("backend",),
                     "accelerator_config": ("device_kind",), "XLA flags": ("xla_flags",)}


def explain_cache_miss(before: dict[str, str], after: dict[str, str], *, earlier_run: str,
                       earlier_hit: bool | None) -> dict[str, Any]:
    """Why a compile missed the persistent cache when the same function and signature was
    in it for ``earlier_run``: the parts of the key whose hash changed."""
    changed = [part for part, _ in CACHE_KEY_PARTS if part in before and part in after and before[part] != after[part]]
    phrases = []
    for part, meaning in CACHE_KEY_PARTS:
        if part not in changed:
            continue
        values = [(name, before.get(name), after.get(name)) for name in _CACHE_KEY_VALUES.get(part, ())]
        shown = [f"{name} {old!r} -> {new!r}" for name, old, new in values if old != new]
        phrases.append(meaning + (f" ({', '.join(shown)})" if shown else ""))
    was = "hit the cache" if earlier_hit else "was compiled with the cache on"
    if phrases:
        text = (f"Missed the persistent compilation cache: the same function and signature {was} in run "
                f"{earlier_run[:12]}, and since then the cache key changed in " + "; ".join(phrases) + ".")
    else:
        text = (f"Missed the persistent compilation cache with the same key as in run {earlier_run[:12]}: the "
                "entry is not in this cache directory (another directory, evicted, or never written because "
                "it was below JAX's size or compile-time threshold).")
    return {"earlier_run_id": earlier_run, "earlier_hit": earlier_hit,
            "changed": changed, "explanation": text}
