"""Everything cachewatch takes from JAX beyond its public API, behind named capabilities.

Each capability is probed once, at first use, against the JAX in this process: does the
frame cachewatch reads exist with the locals it reads, does JAX still emit the monitoring
event under the name cachewatch listens for, does the logger still say what cachewatch
parses. One that fails turns off with one warning naming the feature lost on this JAX
version, never silently; the rest of cachewatch goes on with less detail. A capability
can also turn off later, when its hook fails at run time (``turn_off``).

    from cachewatch.core import jaxcompat
    if jaxcompat.available("trace_frame"):
        ...

``cachewatch doctor``, the dashboard's health page and ``cachewatch_capability{name}`` on
/metrics list the same table (``status()``). Where JAX has a public API for a thing, the
public API is used and the capability only says so.

Only this package imports ``jax._src``, walks JAX's frames or reads their locals, and reads
JAX's log records; capture asks through the typed accessors (accessors.py), each saying which JAX
versions it serves and what it gives when the JAX in use lacks the thing
(``tests/test_layout.py`` refuses such reads anywhere else).
"""

from __future__ import annotations

from .accessors import (
    CACHE_FRAMES,
    JitLowering,
    JitTrace,
    LoweredModuleReader,
    _fun_name_as_in_jax,
    caller_frame,
    dispatched_function,
    dispatched_functions,
    distributed_initialized,
    find_frame,
    fun_name,
    hlo_print_options,
    is_eager_primitive,
    jaxpr_debug_info,
    jit_cache_size,
    jit_lowering,
    jit_static_arguments,
    jit_trace,
    key_bits,
    lowered_argument_devices,
    lowered_module_reader,
    persistent_cache_directory,
    persistent_cache_entry_bytes,
    persistent_cache_key,
    primitive_names,
    primitive_params,
    primitive_type,
    read_cache_key_log,
    reset_persistent_cache,
    slow_path_reason,
    source_line_reader,
    source_stack_reader,
    trace_context,
    trace_context_names,
    traced_equations,
    traced_jit_function,
    transform_of,
    unspecified_sharding,
    wrap_backend_compile,
    wrap_fastpath_decision,
    wrap_jaxpr_lowering,
)
from .capabilities import (
    ATTRIBUTES,
    CACHE_KEY_LOGGER,
    CACHE_KEY_MESSAGE,
    EVENTS,
    FRAMES,
    TRACER_CLASSES,
    TRANSFORMATION_MODULES,
    Capability,
    CapabilityStatus,
    CapabilityWarning,
    ClearListener,
    attribute_probe_each,
    available,
    capability,
    off,
    register_cache_for_clearing,
    reset,
    status,
    turn_off,
)

__all__ = [
    "slow_path_reason",
    "wrap_fastpath_decision",
    "ATTRIBUTES",
    "CACHE_FRAMES",
    "CACHE_KEY_LOGGER",
    "CACHE_KEY_MESSAGE",
    "Capability",
    "CapabilityStatus",
    "CapabilityWarning",
    "ClearListener",
    "EVENTS",
    "FRAMES",
    "JitLowering",
    "JitTrace",
    "LoweredModuleReader",
    "TRACER_CLASSES",
    "TRANSFORMATION_MODULES",
    "_fun_name_as_in_jax",
    "attribute_probe_each",
    "available",
    "caller_frame",
    "capability",
    "dispatched_function",
    "dispatched_functions",
    "distributed_initialized",
    "find_frame",
    "fun_name",
    "hlo_print_options",
    "is_eager_primitive",
    "jaxpr_debug_info",
    "jit_cache_size",
    "jit_lowering",
    "jit_static_arguments",
    "jit_trace",
    "lowered_argument_devices",
    "lowered_module_reader",
    "off",
    "persistent_cache_directory",
    "persistent_cache_entry_bytes",
    "persistent_cache_key",
    "primitive_names",
    "primitive_params",
    "primitive_type",
    "read_cache_key_log",
    "register_cache_for_clearing",
    "reset",
    "reset_persistent_cache",
    "source_line_reader",
    "source_stack_reader",
    "status",
    "trace_context",
    "trace_context_names",
    "traced_equations",
    "traced_jit_function",
    "transform_of",
    "turn_off",
    "key_bits",
    "unspecified_sharding",
    "wrap_backend_compile",
    "wrap_jaxpr_lowering",
]
