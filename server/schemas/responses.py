"""The service's responses: one model per route's JSON, each kept field for field with the
library's result it serialises (``tests/test_schema_drift.py``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class FunctionOut(BaseModel):
    name: str
    qualname: str
    module: str
    file: str
    line: int
    function_hash: str
    traces: int
    compiles: int
    recompiles: int = Field(description="Compiles whose cause is not first_call.")
    causes: dict[str, int] = Field(description="Cause -> number of events (stale captures not included).")
    recompile_causes: dict[str, int] = Field(
        default_factory=dict,
        description="Cause -> recompiles (compiles whose cause is not first_call); traces that compiled "
        "nothing are left out.",
    )
    dominant_cause: str | None = Field(
        description="The most frequent cause other than first_call (first_call when that is all); null without events."
    )
    stale_captures: int = Field(0, description="Times a global read at trace time changed afterwards.")
    compile_seconds: float = Field(description="Trace + lowering + XLA compile seconds, summed.")
    calls: int
    sampled_calls: int
    run_seconds_mean: float | None = Field(
        description="Run time of one call: the median of its sampled calls "
        "per signature (log-spaced buckets), weighted by the calls each "
        "signature's samples stand for."
    )
    run_seconds_est: float | None = Field(description="run_seconds_mean times calls.")
    compile_share: float | None = Field(description="compile_seconds / (compile_seconds + run_seconds_est).")
    run_time_note: str | None = Field(
        None,
        description='Why there is no run time: "never called", '
        '"called only while compiling", "sampling off", "no call timed yet".',
    )
    first_compile: float | None
    last_compile: float | None


class FunctionPage(BaseModel):
    items: list[FunctionOut]
    next_cursor: str | None


class BurstFunctionOut(BaseModel):
    function_hash: str
    name: str
    compiles: int = Field(description="The burst's compiles of this function.")


class _BurstOut(BaseModel):
    """What a storm and a first pass share (``cachewatch.storms.results.Burst``)."""

    key: str = Field(description="The function's hash, or `site:<file:line>` for a line of user code.")
    function_hash: str = Field(description="The jit, or the function that compiled most at the line.")
    function_hashes: list[str] = Field(description="The burst's functions, most compiles first.")
    call_site: str | None = Field(description="The line of user code, for a burst of eager code or library jits.")
    functions: list[BurstFunctionOut]
    name: str
    qualname: str
    short_name: str = ""
    start: float
    end: float
    compiles: int
    causes: dict[str, int]
    dominant_cause: str
    active: bool = Field(description="The burst's last compile is within the storm window of now.")
    run_id: str = Field("", description="The run (one process) the burst happened in; storms are found per run.")
    run_ids: list[str]
    fix: str = Field(description="A concrete change that stops the recompiles.")


class StormOut(_BurstOut):
    recurs_in_runs: int = Field(1, description="In how many runs this function had a storm.")
    identical_programs: int = Field(
        0, description="Recompiles of the storm that produced the program compiled before (pure waste)."
    )
    identical_seconds: float = Field(0.0, description="Their seconds.")
    priced_fix: str | None = Field(
        None, description="Padding priced over the run, for a new-shape storm of a jit (absent otherwise)."
    )


class FindingOut(BaseModel):
    """One root cause of recompiles across the functions it drives (cachewatch.storms.findings)."""

    finding_id: str
    run_id: str
    cause: str = Field(description="The cause most of its compiles name.")
    varying: str = Field(description="What changes: an argument axis, a static value, a re-created object.")
    entry: str | None = Field(description="The user's line where it enters (file:line).")
    entry_text: str = Field(description="The entry as told: a line, or the loop around the lines that reach it.")
    functions: list[str] = Field(description="The functions it drives, most compiles first.")
    function_hashes: list[str]
    compiles: int
    compile_seconds: float
    share_of_run: float | None = Field(description="Its compile seconds over the run's length so far.")
    fix: str
    fix_kind: str = Field(
        description="pad_and_mask, pad, jit_code, host_buffer, hoist_object, hoist_jit, hoist_function, library_api, "
        "library_boundary, jit_library_function, jit_transformed, static_value, storm, or fast_path (calls on JAX's Python dispatch path, cause slow_path)."
    )
    library: str | None = Field(description="The library the entry line calls into, where it calls one.")
    storms: list[str] = Field(description="The keys of the storms it gathers (/api/v1/storms has them).")
    active: bool
    seconds: float = Field(
        description="What it costs, what findings rank by: compile seconds, or the time of calls on JAX's Python path."
    )
    text: str = Field(description="The finding in one sentence, as the command line prints it.")


class FindingList(BaseModel):
    threshold: int
    window: float
    items: list[FindingOut] = Field(description="Most compile seconds first.")


class FirstPassOut(_BurstOut):
    signatures: int = Field(description="New signatures compiled once each in the pass.")
    seconds: float = Field(description="What the pass cost: its compiles' trace, lowering and compile seconds.")
    text: str = Field(description="The pass in one sentence, as the command line prints it.")


class StormPage(BaseModel):
    threshold: int
    window: float
    items: list[StormOut]
    next_cursor: str | None
    first_passes: list[FirstPassOut] = Field(
        default=[],
        description="Bursts that are no storm: a first pass over a few shapes (an evaluation pass, a first "
        "epoch) that the cache served afterwards, with their cost; on the first page only.",
    )


class SignatureVerdictOut(BaseModel):
    signature_hash: str
    compiles: int
    compile_seconds_per_compile: float | None
    run_seconds: float | None = Field(description="Median sampled run time of one call of this signature.")
    eager_seconds: float
    break_even_calls: int | None


class VerdictOut(BaseModel):
    """Whether compiling paid for itself (cachewatch.storms.verdicts.jit_verdict)."""

    compiles: int
    calls: int
    compile_seconds: float
    run_seconds_mean: float | None
    run_seconds_est: float | None = None
    compile_share: float | None = Field(None, description="The report's compile share, from the same numbers.")
    eager_seconds_mean: float | None = Field(description="Op-by-op run time per call, when measured (eager_baseline).")
    compile_seconds_per_compile: float | None = None
    break_even_calls: int | None = Field(description="Calls after which the time saved repays one compile.")
    break_even_calls_total: int | None = Field(None, description="Calls after which it repays all the compiles.")
    jit_saves_seconds: float | None = Field(description="Eager total minus jit total (compiles + runs).")
    repaid: bool | None = Field(None, description="Whether the calls repaid the compiles (eager_baseline).")
    signatures: list[SignatureVerdictOut] = Field([], description="Break-even per signature with an eager baseline.")
    few_calls: bool = Field(description="Called at most a few times per compile.")
    worth_it: bool | None
    text: str


class SlowPathOut(BaseModel):
    """A function's calls in one run that JAX served through its Python dispatch path."""

    run_id: str
    calls: int
    compiles: int
    slow_calls: int = Field(description="Calls through JAX's Python path (the compiling calls not among them).")
    fast_calls: int = Field(description="Calls through its C++ fast path: calls less compiles less slow calls.")
    reasons: dict[str, int] = Field(description="The slow-path calls by why (ordered_effects, unordered_effects, ...).")
    seconds: float | None = Field(
        description="What those calls took: a call's median run time (sampled) times their count; for jit "
        "objects made anew (new_jit_object), what making them took (measured)."
    )
    slow_call_seconds: float | None = Field(
        None, description="The median run time of a call of its variants on the Python path (None: none timed)."
    )
    fast_call_seconds: float | None = Field(
        None, description="The median run time of a call of its variants on the fast path (None: it has none)."
    )
    excess_seconds: float | None = Field(
        None,
        description="What the slow-path calls took beyond the same function's fast-path calls "
        "(None: no fast-path call of it to measure against).",
    )
    made_at: str | None = Field(
        None, description="Where the user's code made the jit objects counted under new_jit_object (file:line)."
    )
    transformed_at: str | None = Field(
        None,
        description="Where the user's code applied the transformation (an eager jax.grad, jax.vmap) the calls "
        "counted under under_transformation ran under (file:line).",
    )
    text: str
    fix: str


class FunctionDetail(FunctionOut):
    storms: list[StormOut] = Field(description="The newest storms, at most storms_limit (active ones come first).")
    storms_total: int = Field(description="Every storm of the function, listed or not.")
    verdict: VerdictOut | None = Field(None, description="Is jit worth it for this function.")
    slow_paths: list[SlowPathOut] = Field(
        default=[], description="Per run, its calls on JAX's Python dispatch path (empty: none took it)."
    )


class CostModelOut(BaseModel):
    function_hash: str
    qualname: str
    compiles: int
    min_size: float = Field(description="Smallest program (HLO ops when recorded, else jaxpr equations).")
    max_size: float
    seconds_per_1000_ops: float | None
    exponent: float | None = Field(description="Slope of compile seconds against size on log-log axes.")
    superlinear: bool
    points: int = Field(0, description="Compiles the fit used.")
    distinct_sizes: int = 0
    note: str | None = Field(None, description="Why there is no exponent.")


class RegressionOut(BaseModel):
    function_hash: str
    qualname: str = ""
    signature_hash: str
    run_before: str
    run_after: str
    seconds_before: float
    seconds_after: float
    ratio: float | None
    jax_before: str
    jax_after: str


class DiagnosisOut(BaseModel):
    verdicts: dict[str, VerdictOut] = Field(description="By function hash: is jit worth it.")
    cost_model: list[CostModelOut] = Field(description="Compile seconds against program size, fastest-growing first.")
    regressions: list[RegressionOut] = Field(
        description="Same function and signature compiling slower in a later run, the steepest first "
        "(at most regressions_limit)."
    )
    regressions_total: int = Field(description="Every regression found, listed or not.")


class EventOut(BaseModel):
    event_id: str
    function_hash: str
    name: str
    qualname: str
    run_id: str
    timestamp: float
    kind: str
    cause: str
    explanation: str
    diff: list[dict[str, Any]]
    signature: list[dict[str, Any]]
    signature_hash: str
    compiled: bool
    nested: bool
    trace_seconds: float | None
    lower_seconds: float | None
    compile_seconds: float | None
    persistent_cache_hit: bool | None
    cache_time_saved_seconds: float | None
    device: str | None
    backend: str | None
    call_site: str | None
    jaxpr_eqns: int | None
    flops: float | None
    bytes_accessed: float | None
    error: str | None
    thread: str | None
    hlo_ops: int | None = None
    compiled_run_seconds: float | None = None
    eager_run_seconds: float | None = None
    captured: dict[str, str] | None = None
    warmup: bool = False
    cache_key: dict[str, str] | None = None
    program_fingerprint: str | None = None
    lowered_fingerprint: str | None = None
    identical_to: str | None = Field(
        default=None, description="The earlier event of the run that compiled the same program (a wasted recompile)."
    )
    eqns_by_primitive: dict[str, int] | None = None
    eqns_by_line: list[dict[str, Any]] | None = None
    fusions: int | None = None
    memory: dict[str, int] | None = None
    same_program_as: str | None = Field(
        default=None, description="Another function's earlier event of the run that compiled the same program."
    )
    figures_missing: dict[str, str] | None = Field(
        default=None, description="Figures of the program that could not be read: figure -> reason."
    )
    while_repeating: bool | None = Field(
        default=None, description="The program had come back to a signature compiled before the previous compile."
    )
    call_number: int | None = Field(default=None, description="Which call of the function compiled (from 1).")
    host_bytes: int | None = None
    host_bytes_before: int | None = None
    peak_host_bytes: int | None = Field(default=None, description="High-water mark of host memory during the compile.")
    persistent_cache: str | None = Field(default=None, description="hit | written | not_written | off")
    persistent_cache_reason: str | None = None
    persistent_cache_key: str | None = None
    persistent_cache_bytes: int | None = None
    persistent_cache_dir: str | None = None
    call_path: str | None = Field(default=None, description="fast (JAX's C++ dispatch) or slow (its Python path).")
    slow_reason: str | None = Field(default=None, description="Why JAX gave the executable no fast path.")
    user_stack: list[dict[str, str]] | None = Field(
        default=None, description="The user's frames from the call site outwards: {site, into, callee}."
    )
    cache_miss: dict[str, Any] | None = Field(
        default=None,
        description="For a persistent-cache miss of a "
        "function and signature stored in an earlier run: that run and "
        "the parts of the cache key that changed.",
    )


class EventPage(BaseModel):
    items: list[EventOut]
    next_cursor: str | None


class RunOut(BaseModel):
    run_id: str
    run_name: str
    host: str
    pid: int
    started_at: float
    jax_version: str
    jaxlib_version: str
    backend: str
    devices: list[str]
    python_version: str
    job: str = ""
    process_index: int | None = None
    process_count: int | None = None
    events: int = Field(description="Compile events recorded by this run.")
    compiles: int
    compile_seconds: float
    dropped: dict[str, int] = Field(
        default={}, description="Events the run's recorder lost before the store, by reason (queue_full, ...)."
    )
    capabilities_off: list[str] = Field(
        default=[], description="Capabilities of cachewatch's JAX seam that were off in the run (`cachewatch doctor`)."
    )


class RunPage(BaseModel):
    items: list[RunOut]
    next_cursor: str | None


class Summary(BaseModel):
    functions: int = Field(description="Functions with at least one event.")
    runs: int = Field(description="Runs with at least one event.")
    events: int
    traces: int
    compiles: int
    recompiles: int
    causes: dict[str, int] = Field(description="Cause -> number of events (stale captures not included).")
    stale_captures: int
    compile_seconds: float
    calls: int
    run_seconds_est: float | None = Field(
        description="Sum of the functions' estimated run seconds (those with a sampled run time)."
    )
    compile_share: float | None = Field(
        description="Compile seconds over compile plus estimated run seconds, "
        "over the functions with a sampled run time."
    )
    run_time_note: str | None = Field(None, description="Why no function has a run time (null when one has).")
    active_storms: int
    storm_threshold: int
    storm_window: float


class Health(BaseModel):
    status: str
    store: str


class RankOut(BaseModel):
    process_index: int = Field(description="The rank (-1 for runs of the job that carry none).")
    run_ids: list[str]
    hosts: list[str]
    compiles: int
    divergent: bool


class DivergenceOut(BaseModel):
    process_index: int
    function_hash: str
    function: str
    signature_hash: str
    signature: list[dict[str, Any]]
    compiles: int = Field(description="Compiles of this function and signature on this rank.")
    others: dict[str, int] = Field(description="Rank -> compiles of the same function and signature.")
    reason: str = Field(description="only_this_rank | more_compiles")
    explanation: str
    last_explanation: str = Field(description="Why this rank's latest compile of it happened.")


class JobOut(BaseModel):
    job: str
    process_count: int
    ranks: list[RankOut]
    missing_ranks: list[int] = Field(
        description="Ranks below process_count with no run in the store (the first 10,000)."
    )
    divergent_ranks: list[int]
    divergences: list[DivergenceOut]
    divergences_total: int


class JobSummary(BaseModel):
    job: str
    process_count: int
    ranks: int
    divergent_ranks: list[int]
    missing_ranks: list[int]


class ComparedRunOut(BaseModel):
    run_id: str
    run_name: str
    job: str
    started_at: float
    jax_version: str
    compiles: int
    recompiles: int
    compile_seconds: float


class ComparedFiguresOut(BaseModel):
    compiles: int
    recompiles: int
    causes: dict[str, int] = Field(description="Cause -> compiles and traces of this function in this run.")
    compile_seconds: float
    calls: int
    program_size: int | None = Field(description="The largest compiled program's StableHLO operations, if recorded.")


class ComparedFunctionOut(BaseModel):
    function_hash: str
    name: str
    qualname: str
    short_name: str
    module: str
    status: str = Field(description="new | gone | changed | same")
    baseline: ComparedFiguresOut | None = Field(description="Null for a function new in the run.")
    run: ComparedFiguresOut | None = Field(description="Null for a function gone from the run.")
    extra_compiles: int
    extra_recompiles: int
    extra_seconds: float = Field(description="Compile seconds in the run minus in the baseline.")
    causes_delta: dict[str, int] = Field(description="Cause -> change in count (non-zero only).")
    cause: str | None = Field(description="The cause behind most of the extra recompiles.")


class RunComparisonOut(BaseModel):
    baseline: ComparedRunOut
    run: ComparedRunOut
    extra_compiles: int
    extra_seconds: float
    compile_time_ratio: float | None = Field(
        description="Run compile seconds over the baseline's; null when it had none."
    )
    functions: list[ComparedFunctionOut] = Field(description="Most extra compile seconds first.")
    new: list[str]
    gone: list[str]


class WhatifFitOut(BaseModel):
    points: int = Field(description="Figures the line was fitted through.")
    slope: float
    intercept: float
    r2: float | None = Field(description="How much of the spread the line explains; null where the figures are flat.")
    relative_error: float = Field(description="Mean |fitted - recorded| / recorded.")
    model: str = Field(description="linear | median (where a line explains too little)")


class WhatifPriceOut(BaseModel):
    policy: str = Field(description="none (as recorded) | pow2 | multiple:K | ladder:A,B,C")
    buckets: list[int]
    compiles: int
    compile_seconds: float
    run_seconds: float | None = Field(description="All the function's calls under the policy; null where not priced.")
    padded_run_seconds: float | None = Field(description="What the padding adds to the run time.")
    total_seconds: float | None = Field(description="compile_seconds + run_seconds.")
    executables: int = Field(description="Executables the cache keeps at the end of the run.")
    executable_bytes: int | None = Field(
        description="Their memory from XLA's figures (code, arguments, outputs, temporaries)."
    )


class WhatifSizeOut(BaseModel):
    size: int
    compiles: int
    calls: float = Field(description="Calls estimated from the timed samples.")
    run_seconds: float | None = Field(description="The median timed call at this size.")


class WhatifFixOut(BaseModel):
    fix: str = Field(description="hoist_jit | weak_type | persistent_cache")
    compiles: int
    compiles_after: int
    seconds_saved: float
    text: str


class WhatifOut(BaseModel):
    function_hash: str
    qualname: str
    run_id: str
    run_name: str
    path: str | None = Field(description="The argument leaf whose axis is padded; null where nothing varied.")
    axis: int | None
    along: list[str] = Field(description="Other leaves padded with it (the same size in every compile).")
    sizes: list[WhatifSizeOut]
    calls: int
    recorded: WhatifPriceOut
    price: WhatifPriceOut | None = Field(description="The policy asked for (auto: the cheapest ladder).")
    curve: list[WhatifPriceOut] = Field(description="auto: the cheapest ladder of each number of buckets.")
    compile_fit: WhatifFitOut | None
    run_fit: WhatifFitOut | None
    run_fit_note: str
    nothing_to_pad: str
    fix: str | None = Field(description="The priced fix as a sentence.")
    fixes: list[WhatifFixOut]
    notes: list[str]


class CacheVariantOut(BaseModel):
    """One executable of one function: a compile for a signature, placement and context."""

    event_id: str
    run_id: str
    function_hash: str
    signature_hash: str
    device: str | None
    created_at: float
    compile_seconds: float
    cause: str
    warmup: bool
    calls: int | None = Field(description="Calls it served from the cache (hits); None where calls are not counted.")
    calls_exact: bool = Field(description="True: counted exactly; False: from the sampled calls.")
    run_seconds: float | None
    last_hit: float | None
    live: bool
    released_at: float | None
    released_by: str | None = Field(description="jax.clear_caches() or clear_cache().")
    memory: dict[str, int] | None = Field(description="XLA's figures: generated_code, argument, output, temp.")
    executable_bytes: int
    host_bytes: int | None
    peak_host_bytes: int | None
    persistent_cache: str | None
    persistent_cache_reason: str | None
    persistent_cache_key: str | None
    persistent_cache_bytes: int | None
    call_path: str | None = Field(
        default=None, description="How JAX serves its calls: fast (its C++ dispatch) or slow (its Python path)."
    )
    slow_reason: str | None = Field(default=None, description="Why JAX gave it no fast path.")


class CacheLivePoint(BaseModel):
    timestamp: float
    live: int
    bytes: int


class CacheReleaseOut(BaseModel):
    timestamp: float
    by: str


class CacheFunctionOut(BaseModel):
    """One function's executables in one run."""

    run_id: str
    function_hash: str
    name: str
    qualname: str
    module: str
    executables: int
    live: int
    live_bytes: int
    peak_live: int
    calls_counted: Literal["exact", "sampled", "not counted"]
    never_hit: int
    never_hit_compile_seconds: float
    releases: list[CacheReleaseOut]
    timeline: list[CacheLivePoint]
    variants: list[CacheVariantOut]
    persistent: PersistentCacheFiguresOut | None = Field(
        default=None, description="The persistent cache for this function's compiles in the run (none asked: null)."
    )


class PersistentCacheFiguresOut(BaseModel):
    """What the persistent compilation cache did for a set of compiles."""

    results: dict[str, int] = Field(description="hit, written, not_written, off -> compiles.")
    not_written: dict[str, int] = Field(description="Why compiles were not written -> compiles.")
    saved_seconds: float = Field(description="Compile time the hits saved, as JAX reports it.")
    missed_seconds: float = Field(
        description="XLA compile seconds of the compiles that asked the cache and compiled: what hits would have saved."
    )
    hit_rate: float | None


class PersistentCacheRunOut(PersistentCacheFiguresOut):
    run_id: str


class CachePage(BaseModel):
    items: list[CacheFunctionOut]
    persistent: list[PersistentCacheRunOut] = Field(description="The persistent cache per run of this page.")
    next_cursor: str | None


class CountChangeOut(BaseModel):
    name: str = Field(description="A primitive, or a source line (file:line).")
    before: int
    after: int


class FigureChangeOut(BaseModel):
    # Integer figures (operation counts, bytes) stay integers: the union keeps an int an int.
    before: int | float | None
    after: int | float | None


class ProgramDiffOut(BaseModel):
    before: str = Field(description="The earlier compile's event id.")
    after: str = Field(description="The compile diffed, its event id.")
    function: str
    cause: str
    explanation: str
    key_diff: list[dict[str, Any]] = Field(description="The key diff cachewatch recorded for the later compile.")
    same_program: bool
    same_lowered_module: bool
    eqns_by_primitive: list[CountChangeOut] = Field(description="The changed first, largest change first.")
    eqns_by_line: list[CountChangeOut]
    jaxpr_diff: list[str] | None = Field(description="Unified diff lines; null when a jaxpr text was not kept.")
    xla: dict[str, FigureChangeOut] = Field(description="XLA's figures, before -> after.")
    compile_seconds: FigureChangeOut
