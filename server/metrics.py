"""Prometheus metrics computed from the store at scrape time.

Every worker of the service, and every restart of it, reads the same store, so they
agree on the counters and the counters do not start over with the process. The
``function`` label is the function's short qualified name (``step`` for
``train.<locals>.step``; functions that share one are summed); only the top
``metrics_top_n`` names by all-time compiles keep their own label, the rest are
summed as ``other``.

    registry = CollectorRegistry()
    registry.register(StoreCollector(settings, counters))
"""

from __future__ import annotations

import collections
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

import sqlalchemy as sa
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from cachewatch import fleet
from cachewatch.analysis import short_name
from cachewatch.events import STALE_CAPTURE
from cachewatch.store import engine as enginemod
from cachewatch.store import models, rollup

from . import queries
from .ingest import IngestCounters
from .settings import ServerSettings

logger = logging.getLogger("cachewatch.server")

# Upper bounds (seconds) of trace + lowering + compile per event, shared with the
# rollup that counts events per bucket.
BUCKETS: tuple[float, ...] = rollup.COST_BUCKETS
OTHER = "other"


# The pseudo label under which a scrape sums every function it reads no detail for.
# Not a valid function name, so never a real label.
REST = "\0rest"


@dataclass
class Snapshot:
    """Totals read from the store in one scrape, keyed by function label.

    Every label gets its totals (compiles, seconds, calls). The wide part, compiles per
    cause and the cost histogram, is read per function only for the ``detail`` labels
    (the top N, and the top N of the previous scrape, whose history may have to move
    into or out of ``other``); for all other functions it is the store-wide totals less
    the detail, under ``REST``. So a scrape reads a few rows per shown function, not
    per function.
    """

    total_compiles: dict[str, int] = field(default_factory=dict)  # label -> compiles
    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    run_seconds: dict[str, float] = field(default_factory=dict)
    measured: set[str] = field(default_factory=set)  # labels with a sampled run time
    storming: set[str] = field(default_factory=set)
    labeled: set[str] = field(default_factory=set)  # the top N: shown with their own label
    detail: set[str] = field(default_factory=set)
    compiles: dict[str, collections.Counter] = field(default_factory=dict)  # detail labels, REST -> cause -> n
    buckets: dict[str, list[int]] = field(default_factory=dict)  # detail labels, REST -> non-cumulative counts
    events: int = 0
    client_dropped: int = 0  # events the recorders reported lost, from the store

    def labels(self) -> set[str]:
        return set(self.total_compiles) | set(self.calls)


def function_labels(conn: sa.Connection) -> dict[str, str]:
    """function_hash -> its ``function`` label: the short qualified name (``train.<locals>.step`` -> ``step``)."""
    f = models.functions
    return {function_hash: (short_name(qualname) or name or function_hash[:12])
            for function_hash, name, qualname in enginemod.fetch_tuples(
                conn, sa.select(f.c.function_hash, f.c.name, f.c.qualname))}


def read_snapshot(conn: sa.Connection, settings: ServerSettings, keep: set[str] = frozenset(),
                  now: float | None = None) -> Snapshot:
    """One scrape's view of the store. ``keep``: labels to read in detail besides the top N."""
    labels = function_labels(conn)

    def label_of(function_hash: str) -> str:  # a function missing from `functions` still gets one
        return labels.get(function_hash) or function_hash[:12]

    snap = Snapshot()
    # Totals the writers keep beside the events: one row per function, whatever the
    # number of events. A stale capture is an event, but no trace or compile: no cost.
    t, h, f = models.function_totals, models.function_cost_buckets, models.function_compile_totals
    live = t.c.kind != STALE_CAPTURE
    hashes: dict[str, list[str]] = collections.defaultdict(list)
    for function_hash, events, live_events, compiles, seconds in enginemod.fetch_tuples(conn, sa.select(
            f.c.function_hash, f.c.events, f.c.live_events, f.c.compiles, f.c.cost_seconds)):
        snap.events += int(events)
        if not live_events:
            continue
        label = label_of(function_hash)
        hashes[label].append(function_hash)
        snap.total_compiles[label] = snap.total_compiles.get(label, 0) + int(compiles or 0)
        snap.seconds[label] = snap.seconds.get(label, 0.0) + float(seconds or 0.0)
    for function_hash, calls, run_seconds, measured in _call_totals(conn):
        label = label_of(function_hash)
        snap.calls[label] = snap.calls.get(label, 0) + calls
        snap.run_seconds[label] = snap.run_seconds.get(label, 0.0) + run_seconds
        if measured:
            snap.measured.add(label)

    present = snap.labels()
    ranked = sorted(present, key=lambda label: (-snap.total_compiles.get(label, 0), label))
    snap.labeled = set(ranked[: settings.metrics_top_n])
    snap.detail = (snap.labeled | set(keep)) & present
    for label in snap.detail:
        if label in snap.total_compiles:
            snap.compiles[label] = collections.Counter()
            snap.buckets[label] = [0] * (len(BUCKETS) + 1)
    detail_hashes = sorted(h_ for label in snap.detail for h_ in hashes.get(label, ()))
    # The rest: the store-wide totals less the detail read below. Read in this order, a
    # batch stored in between can only make the rest come out short (never long) for
    # one scrape; the counters' high-water marks hide that.
    c, b = models.cause_totals, models.cost_bucket_totals
    rest_compiles = collections.Counter()
    for cause, n in enginemod.fetch_tuples(conn, sa.select(c.c.cause, c.c.events)
                                           .where(c.c.kind != STALE_CAPTURE, c.c.compiled)):
        rest_compiles[cause] += int(n)
    rest_buckets = [0] * (len(BUCKETS) + 1)
    for bucket_index, n in enginemod.fetch_tuples(conn, sa.select(b.c.bucket, b.c.events)):
        rest_buckets[int(bucket_index)] += int(n)
    for start in range(0, len(detail_hashes), 500):
        chunk = detail_hashes[start:start + 500]
        for function_hash, cause, n in enginemod.fetch_tuples(conn, sa.select(
                t.c.function_hash, t.c.cause, sa.func.sum(t.c.events))
                .where(live, t.c.compiled, t.c.function_hash.in_(chunk)).group_by(t.c.function_hash, t.c.cause)):
            snap.compiles[label_of(function_hash)][cause] += int(n)
            rest_compiles[cause] -= int(n)
        for function_hash, bucket_index, n in enginemod.fetch_tuples(conn, sa.select(
                h.c.function_hash, h.c.bucket, h.c.events).where(h.c.function_hash.in_(chunk))):
            snap.buckets[label_of(function_hash)][int(bucket_index)] += int(n)
            rest_buckets[int(bucket_index)] -= int(n)
    # Counts are integers, so the rest is exact (seconds and calls are kept per label).
    snap.compiles[REST] = +rest_compiles
    snap.buckets[REST] = [max(n, 0) for n in rest_buckets]

    d = models.run_drops
    snap.client_dropped = int(conn.execute(sa.select(sa.func.coalesce(sa.func.sum(d.c.dropped), 0))).scalar_one())
    for storm in queries.storms(conn, queries.Filters(), threshold=settings.storm_threshold,
                                window=settings.storm_window, active_only=True, now=now):
        snap.storming.add(label_of(storm["function_hash"]))
    return snap


def _call_totals(conn: sa.Connection) -> Iterator[tuple[str, int, float, bool]]:
    """Per function: calls, estimated run seconds, and whether any call was timed.

    The estimate comes from the totals the writers keep: each statistics row valued at
    the mean known when it was written, so it only grows, as a Prometheus counter must
    (the report's plain ``mean x calls`` can shrink when the mean drops).
    """
    t = models.function_call_totals
    for function_hash, calls, run_seconds, sampled in enginemod.fetch_tuples(
            conn, sa.select(t.c.function_hash, t.c.calls, t.c.run_seconds, t.c.sampled_calls)):
        yield function_hash, int(calls or 0), float(run_seconds or 0.0), bool(sampled)


class _Fold:
    """Sums the labels outside the top N into ``other`` without letting it go down.

    The top N are ranked on all-time compiles, which only grow, so the set changes
    only when a function overtakes one in it. When that happens the newcomer leaves
    ``other`` with all its history, and ``other`` would drop: a counter reset to
    Prometheus, which ``increase()`` reads as a burst of compiles. So the history a
    label takes out of ``other`` stays in it (and a label dropping back into ``other``
    brings none): ``other`` continues from where it was. The carried amounts live in
    this process; several workers, or a restart right after such a change, can still
    disagree on ``other`` until the store keeps them.
    """

    def __init__(self) -> None:
        self.labeled: set[str] = set()
        self.seen: set[str] = set()
        self.carry: dict[Any, float] = collections.defaultdict(float)

    def fold(self, labeled: set[str], present: set[str],
             series: dict[Any, dict[str, float]]) -> dict[Any, float]:
        promoted = (labeled - self.labeled) & self.seen
        demoted = (self.labeled - labeled) & present
        for key, per_label in series.items():
            moved = (sum(per_label.get(label, 0) for label in promoted)
                     - sum(per_label.get(label, 0) for label in demoted))
            if moved:
                self.carry[key] += moved
        other = {key: sum(v for label, v in per_label.items() if label not in labeled) + self.carry.get(key, 0)
                 for key, per_label in series.items()}
        for key, carried in self.carry.items():
            other.setdefault(key, carried)
        self.labeled = set(labeled)
        self.seen = set(present)
        return other


class StoreCollector:
    """A custom collector: reads the store on every scrape."""

    def __init__(self, settings: ServerSettings, counters: IngestCounters):
        self.settings = settings
        self.counters = counters
        self._fold = _Fold()
        self._lock = threading.Lock()
        self._high: dict[tuple[Any, str], float] = {}

    def describe(self) -> list[Metric]:
        return []  # no store query when the collector is registered

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("cachewatch_store_up", "1 if the store answered this scrape's queries.")
        # One scrape at a time: each reads in detail the labels the previous one showed,
        # and moves the carry of ``other`` from there.
        with self._lock:
            try:
                with enginemod.connection(self.settings.store, ensure=False) as conn:
                    snap = read_snapshot(conn, self.settings, keep=self._fold.labeled)
            except Exception as exc:  # a down store must not hide the request metrics
                logger.warning("metrics: cannot read the store: %s", exc)
                snap = None
            families = list(self._families(snap)) if snap is not None else []
        if snap is None:
            up.add_metric([], 0)
            yield up  # no dropped-events series now: without the store's part it would go down
            return
        up.add_metric([], 1)
        yield up
        dropped = CounterMetricFamily("cachewatch_events_dropped", "Events lost before they reached the "
                                      "store: reported by the recorders (queue or spool full; kept in the "
                                      "store) and refused by this process (invalid or oversized batches).")
        dropped.add_metric([], snap.client_dropped + self.counters.rejected_events)
        yield dropped
        yield from families
        yield from fleet_and_cache_families(self.settings)

    def _families(self, snap: Snapshot) -> Iterator[Metric]:
        present, labeled = snap.labels(), snap.labeled
        # Per label only for the detail labels; the other functions come summed as REST,
        # which is never labeled, so the fold puts it in ``other``.
        series: dict[Any, dict[str, float]] = collections.defaultdict(dict)
        for label, per_cause in snap.compiles.items():
            for cause, n in per_cause.items():
                series[("compiles", cause)][label] = n
        for label, counts in snap.buckets.items():
            running = 0
            for i, n in enumerate(counts):
                running += n
                series[("bucket", i)][label] = running
        for key, per_label in ((("seconds",), snap.seconds), (("calls",), snap.calls),
                               (("run_seconds",), snap.run_seconds)):
            for label in snap.detail:
                series[key][label] = per_label.get(label, 0)
            series[key][REST] = sum(v for label, v in per_label.items() if label not in snap.detail)
        other = self._fold.fold(labeled, present, series)
        show_other = bool(present - labeled) or any(other.values())
        shown = sorted(labeled) + ([OTHER] if show_other else [])

        high = {}

        def value(key: Any, label: str) -> float:
            raw = other.get(key, 0) if label == OTHER else series.get(key, {}).get(label, 0)
            # Float sums come back in whatever order the database added them: a last-bit
            # wobble must not read as a counter reset.
            kept = max(raw, self._high.get((key, label), raw))
            high[(key, label)] = kept
            return kept

        compiles = CounterMetricFamily("cachewatch_compiles", "Compiles by function and cause.",
                                       labels=["function", "cause"])
        for label in shown:
            for key in sorted(k for k in series.keys() | other.keys() if k[0] == "compiles"):
                n = value(key, label)
                if n or (label != OTHER and key[1] in snap.compiles.get(label, {})):
                    compiles.add_metric([label, key[1]], n)
        yield compiles

        histogram = HistogramMetricFamily("cachewatch_compile_seconds", "Trace + lowering + compile seconds "
                                          "per event.", labels=["function"])
        for label in shown:
            cumulative = [value(("bucket", i), label) for i in range(len(BUCKETS) + 1)]
            buckets = [(floatToGoString(b), cumulative[i]) for i, b in enumerate(BUCKETS)]
            buckets.append(("+Inf", cumulative[-1]))
            histogram.add_metric([label], buckets, sum_value=value(("seconds",), label))
        yield histogram

        calls = CounterMetricFamily("cachewatch_calls", "Calls by function.", labels=["function"])
        run = CounterMetricFamily("cachewatch_run_seconds", "Estimated run seconds by function (sampled mean "
                                  "run time times calls).", labels=["function"])
        for label in shown:
            calls.add_metric([label], value(("calls",), label))
            run.add_metric([label], value(("run_seconds",), label))
        yield calls
        yield run

        share = GaugeMetricFamily("cachewatch_compile_share_ratio", "Compile seconds over compile plus "
                                  "estimated run seconds (functions with a sampled run time).",
                                  labels=["function"])
        for label in shown:
            members = [label] if label != OTHER else [m for m in present - labeled]
            measured = [m for m in members if m in snap.measured]
            if not measured:
                continue
            compile_s = sum(snap.seconds.get(m, 0.0) for m in measured)
            run_s = sum(snap.run_seconds.get(m, 0.0) for m in measured)
            if compile_s + run_s > 0:
                share.add_metric([label], compile_s / (compile_s + run_s))
        yield share

        storm = GaugeMetricFamily("cachewatch_storm_active", "1 while the function is in a recompilation "
                                  "storm.", labels=["function"])
        for label in shown:
            members = {label} if label != OTHER else present - labeled
            storm.add_metric([label], 1.0 if members & snap.storming else 0.0)
        yield storm

        ingested = CounterMetricFamily("cachewatch_events_ingested", "Compile events in the store.")
        ingested.add_metric([], snap.events)
        yield ingested
        self._high = high  # series not shown this time start afresh if they come back


# Jobs whose ranks /metrics compares: those with the most recently started runs (a
# bounded label set; an older job's series ends when it falls out).
RANK_DIVERGENCE_JOBS = 20


def fleet_and_cache_families(settings: ServerSettings) -> Iterator[Metric]:
    """``cachewatch_persistent_cache_requests_total{result}`` and ``cachewatch_rank_divergence{job}``."""
    try:
        with enginemod.connection(settings.store, ensure=False) as conn:
            t = models.persistent_cache_totals
            cache = {result: int(events) for result, events in conn.execute(sa.select(t.c.result, t.c.events))}
            saved = conn.execute(sa.select(sa.func.coalesce(sa.func.sum(t.c.saved_seconds), 0.0))).scalar_one()
            jobs = {job: fleet.compare_job(conn, job) for job in fleet.recent_jobs(conn, RANK_DIVERGENCE_JOBS)}
    except Exception as exc:
        logger.warning("metrics: cannot read jobs or cache totals: %s", exc)
        return
    requests = CounterMetricFamily("cachewatch_persistent_cache_requests", "Compiles that asked JAX's "
                                   "persistent compilation cache, by result.", labels=["result"])
    for result in ("hit", "miss"):
        requests.add_metric([result], cache.get(result, 0))
    yield requests
    saved_family = CounterMetricFamily("cachewatch_persistent_cache_saved_seconds", "Compile seconds the "
                                       "persistent compilation cache saved (JAX's own estimate).")
    saved_family.add_metric([], float(saved or 0.0))
    yield saved_family
    divergence = GaugeMetricFamily("cachewatch_rank_divergence", "Ranks of the job that compiled a signature "
                                   "the other ranks did not, or compiled it more often (0: the ranks agree).",
                                   labels=["job"])
    for job, report in jobs.items():
        if report is not None:
            divergence.add_metric([job], float(len(report["divergent_ranks"])))
    yield divergence
