"""SQLAlchemy models: the schema of a cachewatch store (SQLite or PostgreSQL).

Rows stay inside the store package; callers get plain dictionaries or the frozen
objects of ``cachewatch.core.events``. Timestamps are seconds since the epoch (double
precision), which sort and subtract the same way on every backend.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import JSON, BigInteger, Boolean, Float, ForeignKey, Index, Integer, LargeBinary, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ..core.events import Cause, Kind


class Base(DeclarativeBase):
    pass


class RunRow(Base):
    __tablename__ = "runs"

    run_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    run_name: Mapped[str] = mapped_column(String(200), default="")
    host: Mapped[str] = mapped_column(String(255), default="")
    pid: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[float] = mapped_column(Float, index=True)
    jax_version: Mapped[str] = mapped_column(String(64), default="")
    jaxlib_version: Mapped[str] = mapped_column(String(64), default="")
    backend: Mapped[str] = mapped_column(String(64), default="")
    devices: Mapped[list] = mapped_column(JSON, default=list)
    python_version: Mapped[str] = mapped_column(String(32), default="")
    # The ranks of one multi-process job share ``job``; the service compares them.
    job: Mapped[str] = mapped_column(String(200), default="", server_default="", index=True)
    process_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    process_count: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Capabilities of cachewatch's JAX seam that were off in this run (its JAX lacked them).
    capabilities_off: Mapped[list | None] = mapped_column(JSON, nullable=True, default=list)


class FunctionRow(Base):
    __tablename__ = "functions"

    function_hash: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    qualname: Mapped[str] = mapped_column(String(512))
    module: Mapped[str] = mapped_column(String(512), default="")
    file: Mapped[str] = mapped_column(String(1024), default="")
    line: Mapped[int] = mapped_column(Integer, default=0)
    first_seen: Mapped[float] = mapped_column(Float)


# What makes an event a recompile (core.events.is_recompile: compiled, not a first call,
# not made ahead of time by cachewatch.warmup), as SQL the partial indexes below and the
# queries they serve share word for word.
RECOMPILED = f"compiled AND cause <> '{Cause.FIRST_CALL.value}' AND kind <> '{Kind.AHEAD.value}'"
# The compiles that wrote a persistent-cache entry, as the partial index below and the
# read of /metrics (store/scrape.py's persistent_entries) share it.
PERSISTENT_WRITTEN = "persistent_cache = 'written' AND persistent_cache_key IS NOT NULL"
# Recompiles that produced a program the function compiled before (programs/program_reads.py's
# wasted reads), and what a function's page reads of each event beside its function and
# time (store/charts.py): the partial index and the covering index below.
WASTED = "identical_to IS NOT NULL"
FUNCTION_PAGE_COLUMNS = [
    "id",
    "kind",
    "cause",
    "compiled",
    "call_site",
    "trace_seconds",
    "lower_seconds",
    "compile_seconds",
]
# What the reads over a time span (the summary, the functions listed since a time, the
# charts of a span) count of each event beside its time: the covering index below.
SPAN_COLUMNS = ["function_hash", "kind", "cause", "compiled", "trace_seconds", "lower_seconds", "compile_seconds"]


def _recompiles_index(name: str, member: str) -> Index:
    """A partial index of the recompiles by run, then ``member``, then time."""
    return Index(
        name, "run_id", member, "timestamp", postgresql_where=sa.text(RECOMPILED), sqlite_where=sa.text(RECOMPILED)
    )


class CompileEventRow(Base):
    __tablename__ = "compile_events"

    # A surrogate key keeps indexes small and gives a stable cursor order; the
    # client-made event_id makes a retried batch idempotent.
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(String(32), unique=True)
    function_hash: Mapped[str] = mapped_column(String(40), ForeignKey("functions.function_hash"))
    run_id: Mapped[str] = mapped_column(String(32), ForeignKey("runs.run_id"))
    timestamp: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(16))
    cause: Mapped[str] = mapped_column(String(32))
    explanation: Mapped[str] = mapped_column(Text, default="")
    diff: Mapped[list] = mapped_column(JSON, default=list)
    signature: Mapped[list] = mapped_column(JSON, default=list)
    signature_hash: Mapped[str] = mapped_column(String(40), default="")
    compiled: Mapped[bool] = mapped_column(Boolean, default=False)
    nested: Mapped[bool] = mapped_column(Boolean, default=False)
    trace_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    lower_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    compile_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    persistent_cache_hit: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    cache_time_saved_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    device: Mapped[str | None] = mapped_column(String(255), nullable=True)
    backend: Mapped[str | None] = mapped_column(String(64), nullable=True)
    call_site: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    jaxpr_eqns: Mapped[int | None] = mapped_column(Integer, nullable=True)
    flops: Mapped[float | None] = mapped_column(Float, nullable=True)
    bytes_accessed: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    thread: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # Size of the lowered program (StableHLO operations), for the compile cost model.
    hlo_ops: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Opt-in "is jit worth it" measurement for this signature: one steady-state run
    # compiled and one op by op (eagerly), in seconds.
    compiled_run_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    eager_run_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Module globals and closure cells the function read at trace time (baked in as
    # constants): name -> short summary of the value.
    captured: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    # Made during the run's warm-up (set-up and first compiles): never part of a storm.
    warmup: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sa.false())
    # The persistent compilation cache key of this compile, part by part (the program,
    # jaxlib, backend, XLA flags, compile options, devices): part -> short hash, and a
    # few readable values; a miss is explained by the parts that changed since a hit.
    cache_key: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    # What was compiled (docs/program.md): the optimised program's fingerprint (names and
    # source locations left out), the lowered module's (what the persistent cache keys
    # on), the earlier event of the run with the same program, and the program's shape.
    program_fingerprint: Mapped[str | None] = mapped_column(String(64), nullable=True)
    lowered_fingerprint: Mapped[str | None] = mapped_column(String(64), nullable=True)
    identical_to: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # Another function's earlier compile of the run with the same program (never waste:
    # the two could share one jit), and why a figure of the program is missing.
    same_program_as: Mapped[str | None] = mapped_column(String(32), nullable=True)
    figures_missing: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    # The program had come back to a signature compiled before the previous compile (events.py).
    while_repeating: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    # Which call of the function compiled (events.py): the calls the cache served after it.
    call_number: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    eqns_by_primitive: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    eqns_by_line: Mapped[list | None] = mapped_column(JSON, nullable=True)
    fusions: Mapped[int | None] = mapped_column(Integer, nullable=True)
    memory: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    # Host memory around the backend compile (bytes): gained and kept (may be negative),
    # the resident set before, and the high-water mark during the compile.
    host_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    host_bytes_before: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    peak_host_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # The persistent compilation cache for this compile: hit, written, not_written (with
    # the reason) or off, and the entry's key (its file name in the cache directory).
    persistent_cache: Mapped[str | None] = mapped_column(String(16), nullable=True)
    persistent_cache_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)
    persistent_cache_key: Mapped[str | None] = mapped_column(String(512), nullable=True)
    persistent_cache_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # The cache directory the entry was read from or written to (absolute where local).
    persistent_cache_dir: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    # The user's frames from the call site outwards (events.py): where a varying value enters.
    user_stack: Mapped[list | None] = mapped_column(JSON, nullable=True)
    # How JAX serves the signature's later calls: fast (C++) or slow (Python), and why slow.
    call_path: Mapped[str | None] = mapped_column(String(8), nullable=True)
    slow_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)

    __table_args__ = (
        # A function's events by time, carrying (on PostgreSQL) what its page counts and
        # charts: the page reads this index alone, not the function's wide rows.
        Index(
            "ix_compile_events_function_time",
            "function_hash",
            "timestamp",
            postgresql_include=FUNCTION_PAGE_COLUMNS,
        ),
        # The recompiles that produced a program compiled before: a function's wasted
        # recompiles are found without reading its other events.
        Index(
            "ix_compile_events_wasted",
            "function_hash",
            postgresql_where=sa.text(WASTED),
            sqlite_where=sa.text(WASTED),
        ),
        Index("ix_compile_events_run_time", "run_id", "timestamp"),
        # A run's compiles per function and signature, read from the index alone: the
        # ranks of a job compared (the jobs pages, /metrics' rank divergence).
        Index("ix_compile_events_run_signature", "run_id", "function_hash", "signature_hash", "compiled"),
        # The events by time, carrying (on PostgreSQL) what a span's totals count: a week
        # of a fleet's is read from this index alone, not from forty thousand wide rows.
        Index("ix_compile_events_time", "timestamp", postgresql_include=SPAN_COLUMNS),
        # The recompiles (storms are made of them) per run and function, and per run and
        # line of user code, in time order: where a burst can be is found in this index
        # alone (storms/storm_reads.py's _dense), never in the wide rows.
        _recompiles_index("ix_recompiles_run_function", "function_hash"),
        _recompiles_index("ix_recompiles_run_site", "call_site"),
        # The entries written to the persistent cache, key and bytes: /metrics counts and
        # sums them every scrape from this index alone.
        Index(
            "ix_persistent_written",
            "persistent_cache_key",
            "persistent_cache_bytes",
            postgresql_where=sa.text(PERSISTENT_WRITTEN),
            sqlite_where=sa.text(PERSISTENT_WRITTEN),
        ),
    )


class CallStatsRow(Base):
    __tablename__ = "call_stats"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(32), ForeignKey("runs.run_id"))
    function_hash: Mapped[str] = mapped_column(String(40), ForeignKey("functions.function_hash"))
    timestamp: Mapped[float] = mapped_column(Float)
    calls: Mapped[int] = mapped_column(BigInteger, default=0)
    sampled_calls: Mapped[int] = mapped_column(BigInteger, default=0)
    sampled_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    # The signature the samples are of ("" on a row with calls and no samples), their
    # log-spaced buckets (bucket -> [samples, calls they stand for]; cachewatch.core.runtimes),
    # and the process's sampling setting (0: off; NULL: written before it was recorded).
    signature_hash: Mapped[str] = mapped_column(String(40), default="")
    run_buckets: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    sample_every: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # A row that records a release of the function's executables (calls 0): by what.
    released_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Of the calls, those JAX served through its Python path, by why (events.CallStats).
    slow_calls: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    # What making the jit objects counted under slow_calls['new_jit_object'] took, and the
    # user's line that made one of them.
    jit_object_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    jit_made_at: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    # The user's line that applied a transformation (an eager jax.grad, jax.vmap) around
    # calls counted under slow_calls['under_transformation'].
    transformed_at: Mapped[str | None] = mapped_column(String(1024), nullable=True)

    __table_args__ = (
        Index("ix_call_stats_function_time", "function_hash", "timestamp"),
        Index("ix_call_stats_run", "run_id"),
        Index("ix_call_stats_time", "timestamp"),
        # The rows that counted slow-path calls: what /metrics and the reports sum.
        Index(
            "ix_call_stats_slow",
            "function_hash",
            postgresql_where=sa.text("slow_calls IS NOT NULL"),
            sqlite_where=sa.text("slow_calls IS NOT NULL"),
        ),
    )


class FunctionTotalsRow(Base):
    """Event count and cost per function, kind, cause and compiled flag (see rollup.py)."""

    __tablename__ = "function_totals"

    function_hash: Mapped[str] = mapped_column(String(40), ForeignKey("functions.function_hash"), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    cause: Mapped[str] = mapped_column(String(32), primary_key=True)
    compiled: Mapped[bool] = mapped_column(Boolean, primary_key=True)
    events: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    first_ts: Mapped[float] = mapped_column(Float)
    last_ts: Mapped[float] = mapped_column(Float)


class FunctionCostBucketRow(Base):
    """Traces and compiles per function and cost bucket: the compile-time histogram."""

    __tablename__ = "function_cost_buckets"

    function_hash: Mapped[str] = mapped_column(String(40), ForeignKey("functions.function_hash"), primary_key=True)
    bucket: Mapped[int] = mapped_column(Integer, primary_key=True)
    events: Mapped[int] = mapped_column(BigInteger, default=0)


class FunctionCompileTotalsRow(Base):
    """Per function, everything ``function_totals`` holds summed over kinds and causes:
    one row a function, for ranking functions without grouping their rows."""

    __tablename__ = "function_compile_totals"

    function_hash: Mapped[str] = mapped_column(String(40), ForeignKey("functions.function_hash"), primary_key=True)
    events: Mapped[int] = mapped_column(BigInteger, default=0)
    live_events: Mapped[int] = mapped_column(BigInteger, default=0)  # traces and compiles (not stale captures)
    compiles: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    # Seconds of recompiles that produced the program the same function compiled before
    # (``identical_to``; never a first compile): kept, so a prune never takes them back.
    identical_seconds: Mapped[float] = mapped_column(Float, default=0.0)


class SignatureTotalsRow(Base):
    """Per function and signature (stale captures left out): compiles, the seconds of its
    traces and compiles, and its eager run times summed with their count. A verdict's
    break-even per signature reads these rows instead of grouping the function's events."""

    __tablename__ = "signature_totals"

    function_hash: Mapped[str] = mapped_column(String(40), ForeignKey("functions.function_hash"), primary_key=True)
    signature_hash: Mapped[str] = mapped_column(String(40), primary_key=True)
    compiles: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    eager_seconds: Mapped[float] = mapped_column(Float, default=0.0)  # summed over the events that measured one
    eager_runs: Mapped[int] = mapped_column(BigInteger, default=0)  # how many did


class SizeTotalsRow(Base):
    """Per function and program size (HLO operations, else jaxpr equations): the compiles
    the cost model counts (payoff.cost_reads._cost_points), their lowering plus XLA compile seconds
    and the sum of those seconds' logarithms. A function's fit of compile seconds against
    size, straight and on log-log axes, is made from its few rows (a program's size seldom
    varies), not from every compile of the store."""

    __tablename__ = "compile_size_totals"

    function_hash: Mapped[str] = mapped_column(String(40), ForeignKey("functions.function_hash"), primary_key=True)
    size: Mapped[float] = mapped_column(Float, primary_key=True)
    compiles: Mapped[int] = mapped_column(BigInteger, default=0)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    log_seconds: Mapped[float] = mapped_column(Float, default=0.0)


class RegressionRow(Base):
    """A compile-time regression kept (payoff/regressions.py): a function and signature
    whose median uncached XLA compile seconds rose by ``regressions.FACTOR`` times and
    ``regressions.MIN_SECONDS`` or more from one run that compiled it to the next (by the
    runs' start). ``steepest_first`` orders them, ascending: the ratio negated, or 1 for a
    rise from zero seconds (no ratio: those come last). Found again per signature once
    it is stale."""

    __tablename__ = "compile_regressions"
    __table_args__ = (
        Index("ix_compile_regressions_steepest", "steepest_first", "function_hash", "signature_hash", "run_after"),
    )

    function_hash: Mapped[str] = mapped_column(String(40), primary_key=True)
    signature_hash: Mapped[str] = mapped_column(String(40), primary_key=True)
    run_after: Mapped[str] = mapped_column(String(32), primary_key=True)
    run_before: Mapped[str] = mapped_column(String(32))
    seconds_before: Mapped[float] = mapped_column(Float)
    seconds_after: Mapped[float] = mapped_column(Float)
    steepest_first: Mapped[float] = mapped_column(Float)


class KeptCountRow(Base):
    """How many rows a kept table holds (``name``: the table), kept beside it by whatever
    changes it, so a listing's total is one row read, not a count of hundreds of
    thousands (``compile_regressions``' total on every diagnosis)."""

    __tablename__ = "kept_counts"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    rows: Mapped[int] = mapped_column(BigInteger, default=0)


class StaleRegressionsRow(Base):
    """The signatures whose kept regressions are out of date: an uncached compile of theirs
    was stored or pruned since they were last found. ``marks`` counts those changes, so a
    finder deletes only the marks it read (a writer meanwhile leaves its mark standing)."""

    __tablename__ = "stale_regressions"

    function_hash: Mapped[str] = mapped_column(String(40), primary_key=True)
    signature_hash: Mapped[str] = mapped_column(String(40), primary_key=True)
    marks: Mapped[int] = mapped_column(BigInteger, default=0)


class CauseTotalsRow(Base):
    """``function_totals`` summed over functions: a few rows for the whole store."""

    __tablename__ = "cause_totals"

    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    cause: Mapped[str] = mapped_column(String(32), primary_key=True)
    compiled: Mapped[bool] = mapped_column(Boolean, primary_key=True)
    events: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_seconds: Mapped[float] = mapped_column(Float, default=0.0)


class CompileHourTotalsRow(Base):
    """Compiles per hour and cause for the whole store: the overview's chart of compiles
    over time reads these rows (a year is at most 8,760 hours a cause) instead of every
    compile. ``hour``: the hour's start, in epoch seconds. ``recompiles``: those of the
    compiles that are recompiles (core.events.is_recompile: no warm-up's)."""

    __tablename__ = "compile_hour_totals"

    hour: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    cause: Mapped[str] = mapped_column(String(32), primary_key=True)
    compiles: Mapped[int] = mapped_column(BigInteger, default=0)
    recompiles: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class CostBucketTotalsRow(Base):
    """``function_cost_buckets`` summed over functions: the store-wide histogram."""

    __tablename__ = "cost_bucket_totals"

    bucket: Mapped[int] = mapped_column(Integer, primary_key=True)
    events: Mapped[int] = mapped_column(BigInteger, default=0)


class RunTotalsRow(Base):
    """Event count, compiles and compile cost per run."""

    __tablename__ = "run_totals"

    run_id: Mapped[str] = mapped_column(String(32), ForeignKey("runs.run_id"), primary_key=True)
    events: Mapped[int] = mapped_column(BigInteger, default=0)
    compiles: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    first_ts: Mapped[float] = mapped_column(Float)
    last_ts: Mapped[float] = mapped_column(Float)


class FunctionCallTotalsRow(Base):
    """Calls, sampled run time, and the run-time estimate per function (see rollup.py).

    ``run_seconds`` values each statistics row at the sampled mean known when it was
    written, so it only grows; calls written before any sample wait in
    ``unvalued_calls`` and are valued at the first mean.
    """

    __tablename__ = "function_call_totals"

    function_hash: Mapped[str] = mapped_column(String(40), ForeignKey("functions.function_hash"), primary_key=True)
    calls: Mapped[int] = mapped_column(BigInteger, default=0)
    sampled_calls: Mapped[int] = mapped_column(BigInteger, default=0)
    sampled_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    run_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    unvalued_calls: Mapped[int] = mapped_column(BigInteger, default=0)
    # Calls counted while sampling was off (nothing can be timed there).
    unsampled_calls: Mapped[int] = mapped_column(BigInteger, default=0)
    # Run time of one call as of the last write (runtimes.per_call_seconds over the
    # buckets below): set, not added, by every write.
    run_seconds_per_call: Mapped[float | None] = mapped_column(Float, nullable=True)


class RunTimeBucketRow(Base):
    """Sampled run times per function, signature and log-spaced bucket (cachewatch.core.runtimes):
    how many samples fell in the bucket and how many calls they stand for."""

    __tablename__ = "run_time_buckets"

    function_hash: Mapped[str] = mapped_column(String(40), ForeignKey("functions.function_hash"), primary_key=True)
    signature_hash: Mapped[str] = mapped_column(String(40), primary_key=True)
    bucket: Mapped[int] = mapped_column(Integer, primary_key=True)
    samples: Mapped[int] = mapped_column(BigInteger, default=0)
    weight: Mapped[int] = mapped_column(BigInteger, default=0)


class RunTimeMedianRow(Base):
    """Each signature's median run-time bucket over the kept buckets (runtimes.median_seconds's
    rule; None: no sample), with its samples and the calls they stand for: kept, and
    found again for a signature once new buckets mark it stale (``stale_run_times``)."""

    __tablename__ = "run_time_medians"

    function_hash: Mapped[str] = mapped_column(String(40), primary_key=True)
    signature_hash: Mapped[str] = mapped_column(String(40), primary_key=True)
    median_bucket: Mapped[int | None] = mapped_column(Integer, nullable=True)
    samples: Mapped[int] = mapped_column(BigInteger, default=0)
    weight: Mapped[int] = mapped_column(BigInteger, default=0)


class StaleRunTimesRow(Base):
    """The signatures whose kept median run time is out of date (settling.py)."""

    __tablename__ = "stale_run_times"

    function_hash: Mapped[str] = mapped_column(String(40), primary_key=True)
    signature_hash: Mapped[str] = mapped_column(String(40), primary_key=True)
    marks: Mapped[int] = mapped_column(BigInteger, default=0)


class KeptBurstRow(Base):
    """A burst of recompiles the storm finder found in a run (kept_bursts.py): a storm, or
    a first pass (``storm`` false), of one group (a jit of the user's: its function hash;
    a line of user code: ``site:`` and the line), from its first recompile to its last.
    Found again per run once the run is stale (``stale_storms``); its recompiles are in
    ``kept_burst_events``."""

    __tablename__ = "kept_bursts"
    __table_args__ = (Index("ix_kept_bursts_newest", "storm", "ended"), Index("ix_kept_bursts_run", "run_id"))

    burst_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(32))
    group_key: Mapped[str] = mapped_column(String(1029))  # a function hash, or "site:" and a call site
    storm: Mapped[bool] = mapped_column(Boolean)
    started: Mapped[float] = mapped_column(Float)
    ended: Mapped[float] = mapped_column(Float)
    # What a listing told of the burst (a storm's or first pass's JSON, less what each
    # listing reads anew: whether it is active, the runs its group storms in); None until
    # a listing told it. A burst found again is a new row (a new id) without one.
    description: Mapped[dict | None] = mapped_column(JSON(none_as_null=True), nullable=True)


class KeptBurstEventRow(Base):
    """A recompile of a kept burst, by event id, with its function (what a function's
    storms are found by)."""

    __tablename__ = "kept_burst_events"
    __table_args__ = (Index("ix_kept_burst_events_function", "function_hash"),)

    burst_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    event_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    function_hash: Mapped[str] = mapped_column(String(40))


class StaleStormsRow(Base):
    """The runs whose kept bursts are out of date: an event or call statistics of theirs was
    stored or pruned since their bursts were last found (settling.py)."""

    __tablename__ = "stale_storms"

    run_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    marks: Mapped[int] = mapped_column(BigInteger, default=0)


class KeptRankTotalsRow(Base):
    """Every compile of one rank of a job (its restarts added up; rank -1: the job's runs
    that carry no process index), kept (fleet/fleet_reads.py). Found again per job once the
    job is stale (``stale_jobs``); jobs with no name are never kept."""

    __tablename__ = "kept_rank_totals"

    job: Mapped[str] = mapped_column(String(200), primary_key=True)
    rank: Mapped[int] = mapped_column(Integer, primary_key=True)
    compiles: Mapped[int] = mapped_column(BigInteger, default=0)


class KeptRankDisagreementRow(Base):
    """The compiles of one rank of a job for a signature its ranks disagree on (not every
    rank compiled it, or not equally often), kept with ``kept_rank_totals``; the
    signatures every rank compiled alike are not kept."""

    __tablename__ = "kept_rank_disagreements"

    job: Mapped[str] = mapped_column(String(200), primary_key=True)
    rank: Mapped[int] = mapped_column(Integer, primary_key=True)
    function_hash: Mapped[str] = mapped_column(String(40), primary_key=True)
    signature_hash: Mapped[str] = mapped_column(String(40), primary_key=True)
    compiles: Mapped[int] = mapped_column(BigInteger, default=0)


class StaleJobsRow(Base):
    """The jobs whose kept rank comparison is out of date: a run of theirs was stored or
    pruned, or stored or lost events, since it was last found (settling.py)."""

    __tablename__ = "stale_jobs"

    job: Mapped[str] = mapped_column(String(200), primary_key=True)
    marks: Mapped[int] = mapped_column(BigInteger, default=0)


class RunDropsRow(Base):
    """Events a run's recorder lost before they reached the store, by reason
    (cachewatch.core.events.DropReason: queue full, store refused, spool full, ...)."""

    __tablename__ = "run_drops"

    run_id: Mapped[str] = mapped_column(String(32), ForeignKey("runs.run_id"), primary_key=True)
    reason: Mapped[str] = mapped_column(String(32), primary_key=True, default="unreported")
    dropped: Mapped[int] = mapped_column(BigInteger, default=0)


class MetricLabelRow(Base):
    """Whether a function has its own ``function`` label on /metrics: decided once, kept.

    ``label`` NULL means the function is summed into ``other``. Kept in the store so
    that every worker and replica answers the same, and never changed, so a function
    never moves between its own series and ``other`` (which would read as a counter
    reset).
    """

    __tablename__ = "metric_labels"

    function_hash: Mapped[str] = mapped_column(String(40), ForeignKey("functions.function_hash"), primary_key=True)
    label: Mapped[str | None] = mapped_column(String(600), unique=True, nullable=True)
    decided_at: Mapped[float] = mapped_column(Float)


class PersistentCacheTotalsRow(Base):
    """Compiles that asked JAX's persistent compilation cache, by result (hit, miss)."""

    __tablename__ = "persistent_cache_totals"

    result: Mapped[str] = mapped_column(String(8), primary_key=True)
    events: Mapped[int] = mapped_column(BigInteger, default=0)
    saved_seconds: Mapped[float] = mapped_column(Float, default=0.0)


class ProgramRow(Base):
    """The texts of one compiled program, zlib-compressed, stored once per fingerprint.

    ``profile`` is the equation profile (rows of file, line, function, primitive, in a
    loop body, equations) from which the pprof export is made; ``left_out`` names the
    texts over the per-program cap. A lowered module's StableHLO text has a row of its
    own, keyed by the module's fingerprint (``lowered_fingerprint``), with no other text.
    """

    __tablename__ = "programs"

    fingerprint: Mapped[str] = mapped_column(String(64), primary_key=True)
    stored_at: Mapped[float] = mapped_column(Float)
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    jaxpr: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    hlo: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    stablehlo: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    profile: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    left_out: Mapped[list] = mapped_column(JSON, default=list)


def _table(row: type[Base]) -> sa.Table:
    """A mapped class's table, typed as the Table it is (SQLAlchemy types it as a FromClause)."""
    table = row.__table__
    assert isinstance(table, sa.Table)
    return table


runs = _table(RunRow)
functions = _table(FunctionRow)
compile_events = _table(CompileEventRow)
call_stats = _table(CallStatsRow)
function_totals = _table(FunctionTotalsRow)
function_cost_buckets = _table(FunctionCostBucketRow)
run_totals = _table(RunTotalsRow)
function_compile_totals = _table(FunctionCompileTotalsRow)
cause_totals = _table(CauseTotalsRow)
cost_bucket_totals = _table(CostBucketTotalsRow)
compile_hour_totals = _table(CompileHourTotalsRow)
signature_totals = _table(SignatureTotalsRow)
compile_regressions = _table(RegressionRow)
compile_size_totals = _table(SizeTotalsRow)
stale_regressions = _table(StaleRegressionsRow)
kept_counts = _table(KeptCountRow)
function_call_totals = _table(FunctionCallTotalsRow)
run_time_buckets = _table(RunTimeBucketRow)
run_time_medians = _table(RunTimeMedianRow)
stale_run_times = _table(StaleRunTimesRow)
kept_bursts = _table(KeptBurstRow)
kept_burst_events = _table(KeptBurstEventRow)
stale_storms = _table(StaleStormsRow)
kept_rank_totals = _table(KeptRankTotalsRow)
kept_rank_disagreements = _table(KeptRankDisagreementRow)
stale_jobs = _table(StaleJobsRow)
run_drops = _table(RunDropsRow)
metric_labels = _table(MetricLabelRow)
persistent_cache_totals = _table(PersistentCacheTotalsRow)
programs = _table(ProgramRow)

# A compile event as the writers hand it over: a tuple of these columns, in this order
# (tuples, not dicts: the writer builds one per event).
EVENT_COLUMNS: tuple[str, ...] = tuple(c.name for c in compile_events.c if c.name != "id")
