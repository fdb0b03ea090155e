"""Prometheus metrics computed from the store at scrape time.

/metrics is a function of the store alone: every worker of the service, every replica
on the same database, and every restart answer the same values for the same store, and
while the store only grows no counter goes down. Nothing is kept between scrapes:

* Whether a function has its own ``function`` label is decided once, the first time
  a scrape sees it, and kept in the store (``metric_labels``): while fewer than
  ``metrics_top_n`` functions have a label it gets one (most compiles first among
  functions seen together), otherwise it is summed into ``other`` for good (JAX's own
  op-by-op compiles always are). So the
  label set is bounded and a function never moves between its own series and
  ``other``. A label is the function's short qualified name (``step`` for
  ``train.<locals>.step``), with its module when another function shares that name.
* A function not decided yet is in no series; it joins its series (a new one, or
  ``other``, which only grows by it) once decided, a moment later.
* A scrape reads one consistent snapshot (REPEATABLE READ on PostgreSQL, one read
  transaction on SQLite), so ``other`` (store-wide totals less the labeled and the
  undecided functions) is exact.

    registry = CollectorRegistry()
    registry.register(StoreCollector(settings))
"""

from __future__ import annotations

import collections
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import sqlalchemy as sa
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from cachewatch.cache import cache_reads
from cachewatch.callpaths import call_path_reads
from cachewatch.core import _guard, jaxcompat
from cachewatch.core.events import DROP_REASONS, OP_BY_OP_MODULE, UNATTRIBUTED_MODULE, held_bytes, short_name
from cachewatch.core.figures import compile_share
from cachewatch.fleet import divergence
from cachewatch.store import engine as enginemod
from cachewatch.store import rollup, scrape
from cachewatch.store.columns import Filters
from cachewatch.storms import diagnosis

from .settings import ServerSettings

# What a scrape meets when the store is down or refuses: read as cachewatch_store_up 0.
STORE_ERRORS = (enginemod.StoreError, sa.exc.SQLAlchemyError, OSError)

logger = logging.getLogger("cachewatch.server")

# Upper bounds (seconds) of trace + lowering + compile per event, shared with the
# rollup that counts events per bucket.
BUCKETS: tuple[float, ...] = rollup.COST_BUCKETS
OTHER = "other"
_NBUCKETS = len(BUCKETS) + 1


@dataclass
class Series:
    """The counters of one ``function`` label (a labeled function, or ``other``)."""

    compiles: collections.Counter = field(default_factory=collections.Counter)  # cause -> compiles
    buckets: list[int] = field(default_factory=lambda: [0] * _NBUCKETS)  # non-cumulative
    seconds: float = 0.0
    calls: int = 0
    run_seconds: float = 0.0
    run_now: float = 0.0  # calls times the run time of one call now, for the compile share
    measured: bool = False  # a call was timed: the compile share is known
    storming: bool = False
    program_eqns: int | None = None  # jaxpr equations of the latest compiled program
    identical_seconds: float = 0.0  # seconds of recompiles that produced the program compiled before


@dataclass
class Snapshot:
    """One scrape's view of the store: the labeled functions' series and ``other``'s."""

    labeled: dict[str, Series] = field(default_factory=dict)  # label -> series
    other: Series | None = None  # None while no function is summed into it
    other_share: float | None = None  # compile share of other's functions with a timed call
    undecided: list[str] = field(default_factory=list)  # functions no scrape has decided yet
    events: int = 0
    client_dropped: dict[str, int] = field(default_factory=dict)  # events the recorders reported lost, by reason


def _detail(conn: sa.Connection, hashes: list[str]) -> dict[str, Series]:
    """Compiles per cause and cost buckets of these functions."""
    return {h: _series(found) for h, found in scrape.causes_and_buckets(conn, hashes).items()}


def _series(found: scrape.CausesAndBuckets) -> Series:
    """A series holding these compiles per cause and events per cost bucket."""
    return Series(
        compiles=collections.Counter(found.compiles), buckets=[found.buckets.get(i, 0) for i in range(_NBUCKETS)]
    )


def _choose_label(info: tuple[str, str, str], function_hash: str, taken: set[str], names: collections.Counter) -> str:
    """The short name; with the module when another function shares it; with the hash
    when even that is taken (two versions of one function's source)."""
    name, qualname, module = info
    label = short_name(qualname) or name or function_hash[:12]
    if names[label] > 1 and module:
        label = f"{module}.{label}"
    label = label[:580]  # the column holds 600, with room for the hash
    if label in taken or label == OTHER:
        label = f"{label}@{function_hash[:12]}"
    return label


def _jax_own(module: str) -> bool:
    return module in (OP_BY_OP_MODULE, UNATTRIBUTED_MODULE) or module == "jax" or module.startswith(("jax.", "jaxlib."))


def decide_labels(url: str, top_n: int, now: float | None = None) -> int:
    """Decide the functions no scrape has decided yet: a label while fewer than ``top_n``
    functions have one (most compiles first), else ``other``. Returns how many were decided.

    One decider at a time (an advisory lock on PostgreSQL, the write lock on SQLite), so
    the count of labels never passes ``top_n`` and two functions never get one label.
    """
    with enginemod.exclusive(url, enginemod.LABELS_LOCK) as conn:
        store = scrape.function_totals(conn)
        undecided = sorted(store.present() - set(store.labels), key=lambda h: (-store.compiles.get(h, 0), h))
        if not undecided:
            return 0
        infos = scrape.function_names(conn)
        names = collections.Counter(short_name(q) or n or h[:12] for h, (n, q, _m) in infos.items())
        taken = {label for label in store.labels.values() if label is not None}
        decided_at = time.time() if now is None else now
        rows = []
        for function_hash in undecided:
            label = None
            info = infos.get(function_hash, (function_hash[:12], function_hash[:12], ""))
            # JAX's own compiles (one "function" per eager primitive, its jitted helpers such
            # as jnp.mean, compiles known only by name) would take the slots before the
            # program's own functions: they are summed in `other`.
            if len(taken) < top_n and not _jax_own(info[2]):
                label = _choose_label(info, function_hash, taken, names)
                taken.add(label)
            rows.append({"function_hash": function_hash, "label": label, "decided_at": decided_at})
        scrape.add_labels(conn, rows)
        return len(rows)


def read_snapshot(conn: sa.Connection, settings: ServerSettings, now: float | None = None) -> Snapshot:
    """One scrape's view of the store (``conn`` should be a consistent snapshot)."""
    store = scrape.function_totals(conn)
    present = store.present()
    labeled = sorted(h for h, label in store.labels.items() if label is not None and h in present)
    in_other = sorted(h for h, label in store.labels.items() if label is None and h in present)
    undecided = sorted(present - set(store.labels))
    snap = Snapshot(events=store.events, undecided=undecided)
    detail = _detail(conn, labeled + undecided)
    for function_hash in labeled:
        series = detail[function_hash]
        series.seconds = store.seconds.get(function_hash, 0.0)
        series.calls, series.run_seconds, series.measured = store.calls.get(function_hash, (0, 0.0, False))
        series.run_now = store.run_now.get(function_hash, 0.0)
        label = store.labels[function_hash]
        assert label is not None  # labeled: it has its own
        snap.labeled[label] = series

    if in_other:
        snap.other, snap.other_share = _other_series(conn, store, detail, in_other)
    _program_figures(conn, store, snap)
    snap.client_dropped = scrape.client_drops(conn)
    _mark_storms(conn, settings, store, snap, now)
    return snap


def _other_series(
    conn: sa.Connection, store: scrape.FunctionTotals, detail: dict[str, Series], in_other: list[str]
) -> tuple[Series, float | None]:
    """The series of the functions summed into ``other``, and their compile share."""
    # Counts: the store-wide totals less the other functions' (exact integers in one
    # snapshot). Seconds: summed per function with fsum, whose result does not depend
    # on the order, so it never wobbles down.
    other = _series(scrape.store_causes_and_buckets(conn))
    for series in detail.values():
        other.compiles.subtract(series.compiles)
        other.buckets = [a - d for a, d in zip(other.buckets, series.buckets, strict=False)]
    other.compiles = +other.compiles
    other.seconds = math.fsum(store.seconds.get(h, 0.0) for h in in_other)
    other.calls = sum(store.calls.get(h, (0, 0.0, False))[0] for h in in_other)
    other.run_seconds = math.fsum(store.calls.get(h, (0, 0.0, False))[1] for h in in_other)
    measured = [h for h in in_other if store.calls.get(h, (0, 0.0, False))[2]]
    other.measured = bool(measured)
    share = compile_share(
        math.fsum(store.seconds.get(h, 0.0) for h in measured),
        math.fsum(store.run_now.get(h, 0.0) for h in measured),
    )
    return other, share


def _mark_storms(
    conn: sa.Connection, settings: ServerSettings, store: scrape.FunctionTotals, snap: Snapshot, now: float | None
) -> None:
    """Mark the series of every function in an active storm (``other`` for one without a label)."""
    for storm in diagnosis.storms(
        conn,
        Filters(),
        **diagnosis.rule_of(settings),
        active_only=True,
        now=now,
        described=False,  # which functions storm is all a series shows
    ):
        label = store.labels.get(storm.function_hash, "")
        if label:
            snap.labeled[label].storming = True
        elif label is None and snap.other is not None:
            snap.other.storming = True


def _program_figures(conn: sa.Connection, store: scrape.FunctionTotals, snap: Snapshot) -> None:
    """Per function: the latest compiled program's size, and the seconds spent on
    recompiles that produced the program compiled before (``other`` sums the latter)."""
    for function_hash, seconds in scrape.identical_seconds(conn).items():
        label = store.labels.get(function_hash, "")
        if label:
            snap.labeled[label].identical_seconds = seconds
        elif label is None and snap.other is not None:
            snap.other.identical_seconds += seconds
    # Only the labeled functions show a size.
    labeled = {h: label for h, label in store.labels.items() if label}
    for function_hash, eqns in scrape.latest_program_sizes(conn, labeled).items():
        snap.labeled[labeled[function_hash]].program_eqns = eqns


class StoreCollector:
    """A custom collector: reads the store on every scrape, keeps nothing between scrapes."""

    def __init__(self, settings: ServerSettings):
        self.settings = settings

    def describe(self) -> list[Metric]:
        return []  # no store query when the collector is registered

    def scrape(self) -> Snapshot:
        url = self.settings.store
        with enginemod.snapshot(url) as conn:
            snap = read_snapshot(conn, self.settings)
        # Functions seen for the first time: decide them, then read again (functions that
        # arrive in between are left out of this scrape and decided by the next).
        if snap.undecided:
            try:
                decided = decide_labels(url, self.settings.metrics_top_n)
            except enginemod.StoreError as exc:  # e.g. a read-only database user: serve what was read
                logger.warning("metrics: cannot record the label of new functions: %s", exc)
                decided = 0
            if decided:
                with enginemod.snapshot(url) as conn:
                    snap = read_snapshot(conn, self.settings)
        return snap

    def collect(self) -> Iterator[Metric]:
        yield capability_family()  # whether or not the store answers
        up = GaugeMetricFamily("cachewatch_store_up", "1 if the store answered this scrape's queries.")
        try:
            snap = self.scrape()
        except STORE_ERRORS as exc:  # a down store must not hide the request metrics
            logger.warning("metrics: cannot read the store: %s", exc)
            up.add_metric([], 0)
            yield up  # and no store series now: they would read as a counter reset
            return
        except Exception as exc:  # a bug in the figures: counted, never read as a down store
            _guard.report("metrics.scrape", exc)
            if _guard.raise_errors:
                raise
            return
        up.add_metric([], 1)
        yield up
        dropped = CounterMetricFamily(
            "cachewatch_events_dropped",
            "Events the recorders lost before they reached the store, by reason (queue_full, "
            "store_refused, spool_full, set_aside, out_of_bounds, unencodable; unreported from older clients), "
            "as they reported them to the store.",
            labels=["reason"],
        )
        # Every reason has its series from the first scrape: an alert on increase() sees the first loss.
        for reason in sorted(set(DROP_REASONS) | set(snap.client_dropped)):
            dropped.add_metric([reason], snap.client_dropped.get(reason, 0))
        yield dropped
        yield from _built("metrics.families", lambda: families(snap))
        yield from _built("metrics.fleet", lambda: fleet_and_cache_families(self.settings))
        yield from _built("metrics.executables", lambda: executable_families(self.settings))
        yield from _built("metrics.slow_path", lambda: slow_path_families(self.settings))


def _built(where: str, build: Callable[[], Iterable[Metric]]) -> list[Metric]:
    """Families built in full before any is served: a bug in building them is counted by
    the guard (and raised under the project's tests), and leaves only them out of the
    scrape, never fails it."""
    with _guard.guard(where):
        return list(build())
    return []


def capability_family() -> Metric:
    """``cachewatch_capability{name}``: 1 where the service's JAX gives cachewatch that
    capability, 0 where a JAX release took it away (``cachewatch doctor`` says what is lost)."""
    family = GaugeMetricFamily(
        "cachewatch_capability",
        "1 if this capability of cachewatch's JAX seam works on the JAX the service runs, else 0.",
        labels=["name"],
    )
    for status in jaxcompat.status():
        family.add_metric([status.name], 1 if status.available else 0)
    return family


def families(snap: Snapshot) -> Iterator[Metric]:
    shown = sorted(snap.labeled.items()) + ([(OTHER, snap.other)] if snap.other is not None else [])

    yield from _compile_families(shown)
    yield from _call_families(snap, shown)
    yield from _storm_and_program_families(shown)
    ingested = CounterMetricFamily("cachewatch_events_ingested", "Compile events in the store.")
    ingested.add_metric([], snap.events)
    yield ingested


def _compile_families(shown: Sequence[tuple[str, Series]]) -> Iterator[Metric]:
    """Compiles by function and cause, and the histogram of their seconds."""
    compiles = CounterMetricFamily(
        "cachewatch_compiles", "Compiles by function and cause.", labels=["function", "cause"]
    )
    for label, series in shown:
        for cause, n in sorted(series.compiles.items()):
            if n > 0:
                compiles.add_metric([label, cause], n)
    yield compiles

    histogram = HistogramMetricFamily(
        "cachewatch_compile_seconds", "Trace + lowering + compile seconds per event.", labels=["function"]
    )
    for label, series in shown:
        cumulative, running = [], 0
        for n in series.buckets:
            running += max(n, 0)
            cumulative.append(running)
        buckets = [(floatToGoString(b), cumulative[i]) for i, b in enumerate(BUCKETS)]
        buckets.append(("+Inf", cumulative[-1]))
        histogram.add_metric([label], buckets, sum_value=series.seconds)
    yield histogram


def _call_families(snap: Snapshot, shown: Sequence[tuple[str, Series]]) -> Iterator[Metric]:
    """Calls, estimated run seconds and the compile share, by function."""
    calls = CounterMetricFamily("cachewatch_calls", "Calls by function.", labels=["function"])
    run = CounterMetricFamily(
        "cachewatch_run_seconds",
        "Estimated run seconds by function (each batch of "
        "calls valued at the run time of one call known when it was stored).",
        labels=["function"],
    )
    for label, series in shown:
        calls.add_metric([label], series.calls)
        run.add_metric([label], series.run_seconds)
    yield calls
    yield run

    share = GaugeMetricFamily(
        "cachewatch_compile_share_ratio",
        "Compile seconds over compile plus "
        "estimated run seconds (calls times the run time of one call), for functions "
        "with a timed call; as `cachewatch report` shows it.",
        labels=["function"],
    )
    for label, series in shown:
        value = (
            snap.other_share
            if label == OTHER
            else (compile_share(series.seconds, series.run_now) if series.measured else None)
        )
        if value is not None:
            share.add_metric([label], value)
    yield share


def _storm_and_program_families(shown: Sequence[tuple[str, Series]]) -> Iterator[Metric]:
    """Whether each function storms, the size of its latest program, and the seconds its
    identical recompiles wasted."""
    storm = GaugeMetricFamily(
        "cachewatch_storm_active", "1 while the function is in a recompilation storm.", labels=["function"]
    )
    for label, series in shown:
        storm.add_metric([label], 1.0 if series.storming else 0.0)
    yield storm

    size = GaugeMetricFamily(
        "cachewatch_program_eqns",
        "Jaxpr equations of the function's latest compiled program (through nested jaxprs).",
        labels=["function"],
    )
    wasted = CounterMetricFamily(
        "cachewatch_identical_recompile_seconds",
        "Seconds spent on recompiles that produced the program compiled before in the run.",
        labels=["function"],
    )
    for label, series in shown:
        if series.program_eqns is not None:
            size.add_metric([label], series.program_eqns)
        wasted.add_metric([label], series.identical_seconds)
    yield size
    yield wasted


# Runs whose executables /metrics counts: the most recently started that compiled. Each
# function is counted in its newest of them (a run that ended, or whose process died,
# keeps what it held at its last record until a newer run of the function compiles).
EXECUTABLE_RUNS = 20


def executable_families(settings: ServerSettings) -> Iterator[Metric]:
    """``cachewatch_live_executables{function}``, ``cachewatch_executable_bytes{function}``,
    ``cachewatch_persistent_cache_entries`` and ``cachewatch_persistent_cache_bytes``."""
    try:
        with enginemod.connection(settings.store, ensure=False) as conn:
            live, size = _live_executables(conn)
            labels = scrape.labels(conn)
            entries, entry_bytes = scrape.persistent_entries(conn)
    except STORE_ERRORS as exc:
        logger.warning("metrics: cannot read the executables: %s", exc)
        return
    by_label: dict[str, list[int]] = {}
    for function_hash, n in live.items():
        if function_hash not in labels:
            continue  # not decided yet: joins its series at the next scrape
        found = by_label.setdefault(labels[function_hash] or OTHER, [0, 0])
        found[0] += n
        found[1] += size.get(function_hash, 0)
    live_family = GaugeMetricFamily(
        "cachewatch_live_executables",
        "Compiled executables the function holds in JAX's caches (not released by jax.clear_caches() "
        "or clear_cache()), in its newest run.",
        labels=["function"],
    )
    bytes_family = GaugeMetricFamily(
        "cachewatch_executable_bytes",
        "What JAX's cache holds for the function's live executables, in bytes: their code (XLA's "
        "generated code, or the serialized executable where XLA reports none); not a call's buffers.",
        labels=["function"],
    )
    for label, (n, nbytes) in sorted(by_label.items()):
        live_family.add_metric([label], n)
        bytes_family.add_metric([label], nbytes)
    yield live_family
    yield bytes_family
    entries_family = GaugeMetricFamily(
        "cachewatch_persistent_cache_entries",
        "Persistent compilation cache entries recorded as written (distinct keys); entries JAX's size "
        "limit evicted or another program wrote are not seen.",
    )
    entries_family.add_metric([], entries)
    yield entries_family
    size_family = GaugeMetricFamily(
        "cachewatch_persistent_cache_bytes", "Bytes of those entries as JAX wrote them (compressed)."
    )
    size_family.add_metric([], entry_bytes)
    yield size_family


def slow_path_families(settings: ServerSettings) -> Iterator[Metric]:
    """``cachewatch_slow_path_calls_total{function, reason}``: calls of watched jits that
    JAX served through its Python dispatch path, by why (capture/dispatch_path.py)."""
    try:
        with enginemod.connection(settings.store, ensure=False) as conn:
            counted = call_path_reads.slow_calls_by_reason(conn)
            labels = scrape.labels(conn)
    except STORE_ERRORS as exc:
        logger.warning("metrics: cannot read the slow-path calls: %s", exc)
        return
    family = CounterMetricFamily(
        "cachewatch_slow_path_calls",
        "Calls of a jit that JAX served through its Python dispatch path, not its C++ fast path, by why "
        "(an effect such as jax.debug.print inside it, mutable references, non-array outputs).",
        labels=["function", "reason"],
    )
    by_label: dict[tuple[str, str], int] = {}
    for (function_hash, reason), n in counted.items():
        if function_hash in labels:  # not decided yet: joins its series at the next scrape
            key = (labels[function_hash] or OTHER, reason)
            by_label[key] = by_label.get(key, 0) + n
    for (label, reason), n in sorted(by_label.items()):
        family.add_metric([label, reason], n)
    yield family


def _live_executables(conn: sa.Connection) -> tuple[dict[str, int], dict[str, int]]:
    found = cache_reads.live_executables(conn, EXECUTABLE_RUNS, held_bytes)
    return {x.function_hash: x.live for x in found}, {x.function_hash: x.memory_bytes for x in found}


# Jobs whose ranks /metrics compares: those with the most recently started runs (a
# bounded label set; an older job's series ends when it falls out).
RANK_DIVERGENCE_JOBS = 20


def fleet_and_cache_families(settings: ServerSettings) -> Iterator[Metric]:
    """``cachewatch_persistent_cache_requests_total{result}`` and ``cachewatch_rank_divergence{job}``."""
    try:
        with enginemod.connection(settings.store, ensure=False) as conn:
            cache, saved = scrape.persistent_cache_totals(conn)
            jobs = divergence.compare_jobs(conn, divergence.recent_jobs(conn, RANK_DIVERGENCE_JOBS))
    except STORE_ERRORS as exc:
        logger.warning("metrics: cannot read jobs or cache totals: %s", exc)
        return
    requests = CounterMetricFamily(
        "cachewatch_persistent_cache_requests",
        "Compiles that asked JAX's persistent compilation cache, by result.",
        labels=["result"],
    )
    for result in ("hit", "miss"):
        requests.add_metric([result], cache.get(result, 0))
    yield requests
    saved_family = CounterMetricFamily(
        "cachewatch_persistent_cache_saved_seconds",
        "Compile seconds the persistent compilation cache saved (JAX's own estimate).",
    )
    saved_family.add_metric([], float(saved or 0.0))
    yield saved_family
    divergent = GaugeMetricFamily(
        "cachewatch_rank_divergence",
        "Ranks of the job that compiled a signature "
        "the other ranks did not, or compiled it more often (0: the ranks agree).",
        labels=["job"],
    )
    for report in jobs:
        divergent.add_metric([report.job], float(len(report.divergent_ranks)))
    yield divergent
