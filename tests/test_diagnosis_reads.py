"""The whole store's diagnosis reads: on PostgreSQL the compile-time regressions are found
in SQL (medians per signature and run, consecutive runs paired), and they must be what
comparing every compile in Python finds."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from cachewatch.core import runtimes
from cachewatch.core.events import Cause
from cachewatch.payoff import cost_reads, costmodel, kept_regressions
from cachewatch.store import engine as enginemod
from cachewatch.store import models, retention, rollup, writes
from cachewatch.store.columns import Filters


def _fill(url: str, seed: int) -> None:
    """Runs (some started at the same time) compiling shared signatures, once or a few
    times each, some of them served by the persistent cache, with seconds that drift up
    and down from run to run."""
    rng = random.Random(seed)
    enginemod.ensure_schema(url)
    runs: list[dict[str, Any]] = [
        {"run_id": f"{i:032d}", "started_at": float(i // 3), "jax_version": f"0.{i % 3}", "devices": []}
        for i in range(12)
    ]
    functions = [f"f{i}" for i in range(5)]
    events: list[dict[str, Any]] = []
    for run in runs:
        for function in functions:
            for signature in ("a", "b", "c"):
                base = {"f0": 0.1, "f1": 0.5}.get(function, 0.2) * (1 + rng.random() * 2)
                for _ in range(rng.choice((1, 1, 2, 3))):
                    events.append(
                        {
                            "event_id": f"e{len(events)}",
                            "function_hash": function,
                            "run_id": run["run_id"],
                            "timestamp": run["started_at"] + len(events),
                            "kind": "trace",
                            "cause": Cause.NEW_SHAPE,
                            "compiled": True,
                            "nested": False,
                            "signature_hash": signature,
                            "compile_seconds": base * rng.uniform(0.9, 1.1),
                            "persistent_cache_hit": rng.random() < 0.1,
                        }
                    )
    with enginemod.connection(url) as conn:
        conn.execute(sa.insert(models.runs), runs)
        conn.execute(
            sa.insert(models.functions),
            [{"function_hash": f, "name": f, "qualname": f, "first_seen": 0.0} for f in functions],
        )
        conn.execute(sa.insert(models.compile_events), events)


def _key(found: cost_reads.SlowerCompile) -> tuple[str, str, str, str]:
    return (found.function_hash, found.signature_hash, found.run_before, found.run_after)


@pytest.mark.postgres
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_regressions_found_in_sql_are_those_of_every_compile(pg_url, seed):
    _fill(pg_url, seed)
    with enginemod.connection(pg_url) as conn:
        assert conn.dialect.name == "postgresql"
        for factor, least in ((1.5, 0.05), (1.2, 0.0), (3.0, 0.01)):
            in_sql = sorted(cost_reads.slower_compiles(conn, factor, least).shown, key=_key)
            in_python = sorted(
                cost_reads.slower_compiles_of(cost_reads.uncached_compiles(conn), factor, least), key=_key
            )
            assert [_key(s) for s in in_sql] == [_key(s) for s in in_python]
            for a, b in zip(in_sql, in_python, strict=True):
                assert a.seconds_before == pytest.approx(b.seconds_before)
                assert a.seconds_after == pytest.approx(b.seconds_after)
        assert cost_reads.slower_compiles(conn, 1.2, 0.0).shown, "the filled store has regressions to compare"
        found = kept_regressions.compile_regressions(conn, 1.2, 0.0).shown
    assert all(r.jax_before.startswith("0.") and r.jax_after.startswith("0.") for r in found)
    assert all(r.ratio is not None and r.ratio >= 1.2 for r in found)


def _fill_sizes(url: str, seed: int) -> None:
    """Functions compiled at program sizes that grow (some by HLO count, some by jaxpr
    equations only), one at a single size, one twice only."""
    rng = random.Random(seed)
    enginemod.ensure_schema(url)
    growth = {"linear": 1.0, "square": 2.0, "flat": 0.0, "single": 1.0, "pair": 1.0}
    events: list[dict[str, Any]] = []
    for function, power in growth.items():
        sizes = {"single": [50], "pair": [10, 20]}.get(function, [rng.randint(10, 2000) for _ in range(12)])
        for size in sizes:
            seconds = 0.01 * (size / 10) ** power * rng.uniform(0.8, 1.2)
            events.append(
                {
                    "event_id": f"s{len(events)}",
                    "function_hash": function,
                    "run_id": "r" * 32,
                    "timestamp": float(len(events)),
                    "kind": "trace",
                    "cause": Cause.NEW_SHAPE,
                    "compiled": True,
                    "nested": False,
                    "hlo_ops": size if rng.random() < 0.7 else None,
                    "jaxpr_eqns": size,
                    "lower_seconds": seconds / 10,
                    "compile_seconds": seconds,
                }
            )
    with enginemod.connection(url) as conn:
        conn.execute(sa.insert(models.runs), [{"run_id": "r" * 32, "started_at": 0.0, "devices": []}])
        conn.execute(
            sa.insert(models.functions),
            [{"function_hash": f, "name": f, "qualname": f, "first_seen": 0.0} for f in growth],
        )
        conn.execute(sa.insert(models.compile_events), events)
        rollup.rebuild(conn)  # written behind the writers' back: count the kept totals


def _assert_same_fits(found: dict[str, cost_reads.SizeFit], wanted: dict[str, cost_reads.SizeFit]) -> None:
    assert set(found) == set(wanted)
    for name, fit in found.items():
        other = wanted[name]
        assert (fit.compiles, fit.distinct_sizes, fit.min_size, fit.max_size) == (
            other.compiles,
            other.distinct_sizes,
            other.min_size,
            other.max_size,
        ), name
        for mine, theirs in ((fit.slope, other.slope), (fit.loglog_slope, other.loglog_slope)):
            assert (mine is None) == (theirs is None), name
            if mine is not None:
                assert mine == pytest.approx(theirs, rel=1e-9, abs=1e-12), name


@pytest.mark.parametrize("seed", [1, 2])
def test_size_fits_kept_per_size_are_those_of_every_compile(store_url, seed):
    _fill_sizes(store_url, seed)
    with enginemod.connection(store_url) as conn:
        kept = {f.function_hash: f for f in cost_reads.size_fits(conn, Filters())}
        counted = {f.function_hash: f for f in cost_reads.size_fits_of(cost_reads.compile_sizes(conn, Filters()))}
        # Under a filter the fit is made from the compiles (in SQL on PostgreSQL).
        filtered = {f.function_hash: f for f in cost_reads.size_fits(conn, Filters(since=-1.0))}
    assert set(kept) == {"linear", "square", "flat", "single", "pair"}
    _assert_same_fits(kept, counted)
    _assert_same_fits(filtered, counted)
    assert kept["square"].loglog_slope == pytest.approx(2.0, abs=0.3)


@pytest.mark.postgres
@pytest.mark.parametrize("seed", [1, 2])
def test_size_fits_in_sql_are_those_of_every_compile(pg_url, seed):
    _fill_sizes(pg_url, seed)
    with enginemod.connection(pg_url) as conn:
        in_sql = {f.function_hash: f for f in cost_reads.size_fits(conn, Filters(since=-1.0))}
        in_python = {f.function_hash: f for f in cost_reads.size_fits_of(cost_reads.compile_sizes(conn, Filters()))}
        rows = {r.qualname: r for r in costmodel.cost_model(conn)}
    assert set(in_sql) == {"linear", "square", "flat", "single", "pair"}
    _assert_same_fits(in_sql, in_python)
    assert in_sql["single"].slope is None
    assert in_sql["single"].loglog_slope is None
    assert rows["square"].superlinear
    assert rows["square"].exponent == pytest.approx(2.0, abs=0.3)
    assert not rows["linear"].superlinear
    assert rows["pair"].exponent is None
    assert rows["pair"].note


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_regressions_are_the_steepest_first_and_a_limit_keeps_the_same_ones(dialect, sqlite_url, request):
    url = sqlite_url if dialect == "sqlite" else request.getfixturevalue("pg_url")
    _fill(url, 4)
    with enginemod.connection(url) as conn:
        every = cost_reads.slower_compiles_of(cost_reads.uncached_compiles(conn), 1.2, 0.0)
        steepest = sorted(every, key=lambda s: (-(s.seconds_after / s.seconds_before), _key(s)))
        assert len(every) > 5, "the filled store has enough regressions to cut"
        for limit in (None, 5, 1, 0):
            found = cost_reads.slower_compiles(conn, 1.2, 0.0, limit)
            assert found.total == len(every)
            wanted = steepest if limit is None else steepest[:limit]
            assert [(_key(s), s.seconds_after) for s in found.shown] == [
                (_key(s), pytest.approx(s.seconds_after)) for s in wanted
            ]
        listed = kept_regressions.compile_regressions(conn, 1.2, 0.0, limit=3)
    assert listed.total == len(every)
    ratios = [r.ratio or 0.0 for r in listed.shown]
    assert len(ratios) == 3
    assert ratios == sorted(ratios, reverse=True)


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_signature_costs_kept_are_those_of_the_events(dialect, sqlite_url, request):
    from cachewatch.core.events import Kind

    url = sqlite_url if dialect == "sqlite" else request.getfixturevalue("pg_url")
    _fill(url, 5)
    rng = random.Random(5)
    with enginemod.connection(url) as conn:
        # Eager run times on some events (of all but one function, which has no baseline),
        # and stale captures (which count nowhere).
        ids = [row.id for row in conn.execute(sa.select(models.compile_events.c.id))]
        timed = [
            row.id
            for row in conn.execute(
                sa.select(models.compile_events.c.id).where(models.compile_events.c.function_hash != "f4")
            )
        ]
        for event_id in rng.sample(timed, len(timed) // 3):
            conn.execute(
                sa.update(models.compile_events)
                .where(models.compile_events.c.id == event_id)
                .values(eager_run_seconds=rng.uniform(0.001, 0.01))
            )
        for event_id in rng.sample(ids, len(ids) // 10):
            conn.execute(
                sa.update(models.compile_events)
                .where(models.compile_events.c.id == event_id)
                .values(kind=Kind.STALE_CAPTURE, eager_run_seconds=5.0)
            )
        rollup.rebuild(conn)
        hashes = [f"f{i}" for i in range(5)]
        by_key = lambda c: (c.function_hash, c.signature_hash)  # noqa: E731
        kept = sorted(cost_reads.signature_costs(conn, Filters(), hashes), key=by_key)
        counted = sorted(cost_reads.signature_costs_of_events(conn, Filters(), hashes), key=by_key)
        # Of every function (no list of hashes), and only those with an eager baseline:
        # the verdicts' reads.
        everyone = sorted(cost_reads.signature_costs(conn, Filters(), None), key=by_key)
        eager_kept = sorted(cost_reads.signature_costs(conn, Filters(), hashes, eager_only=True), key=by_key)
        eager_counted = sorted(
            cost_reads.signature_costs_of_events(conn, Filters(), hashes, eager_only=True), key=by_key
        )
    assert [(c.function_hash, c.signature_hash, c.compiles) for c in kept] == [
        (c.function_hash, c.signature_hash, c.compiles) for c in counted
    ]
    assert [c for c in everyone if c.function_hash in hashes] == kept
    assert any(c.eager_seconds is not None for c in kept)
    assert any(c.eager_seconds is None for c in kept), "some signatures have no eager baseline"
    assert eager_kept == [c for c in kept if c.eager_seconds is not None]
    assert [by_key(c) for c in eager_counted] == [by_key(c) for c in eager_kept]
    for a, b in zip(kept, counted, strict=True):
        assert a.seconds == pytest.approx(b.seconds)
        assert (a.eager_seconds is None) == (b.eager_seconds is None)
        assert a.eager_seconds == pytest.approx(b.eager_seconds)


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_run_time_medians_found_in_sql_are_those_of_the_kept_buckets(dialect, sqlite_url, request):
    from cachewatch.store import queries

    url = sqlite_url if dialect == "sqlite" else request.getfixturevalue("pg_url")
    _fill(url, 6)
    rng = random.Random(6)
    rows: list[dict[str, Any]] = []
    for function in (f"f{i}" for i in range(5)):
        for signature in ("a", "b", "c", "d"):
            # Weights of zero (a sample standing for itself), ties at the half, lone buckets,
            # and a signature whose buckets hold no sample at all.
            for bucket in rng.sample(range(40), rng.choice((1, 2, 5, 9))):
                samples = 0 if signature == "d" else rng.choice((0, 1, 2, 5))
                rows.append(
                    {
                        "function_hash": function,
                        "signature_hash": signature,
                        "bucket": bucket,
                        "samples": samples,
                        "weight": rng.choice((0, samples, 2 * samples, 7)),
                    }
                )
    with enginemod.connection(url) as conn:
        conn.execute(sa.insert(models.run_time_buckets), rows)
        rollup.mark_all_kept_stale(conn)  # written behind the writers' back: a bulk load
        found = queries.signature_run_times(conn, Filters(), ["f0", "f1", "f2", "f3"])
    _assert_medians_of(found, rows)
    # Statistics through the write path add to some buckets and make new signatures: those
    # are marked, their medians found again, and the rest read as kept.
    stats = [
        {
            "run_id": f"{0:032d}",
            "function_hash": function,
            "signature_hash": signature,
            "timestamp": 10.0 + i,
            "calls": 50,
            "sampled_calls": samples,
            "sampled_seconds": samples * rng.choice((1e-5, 3e-4, 0.02)),
            "sample_every": 1,
        }
        for i, (function, signature, samples) in enumerate(
            [("f0", "a", 9), ("f1", "c", 40), ("f2", "new", 3), ("f3", "d", 5), ("f0", "a", 2)]
        )
    ]
    with enginemod.connection(url) as conn:
        rollup.add_call_stats(conn, stats)
        assert conn.execute(sa.select(sa.func.count()).select_from(models.stale_run_times)).scalar_one() == 4
        found = queries.signature_run_times(conn, Filters(), ["f0", "f1", "f2", "f3"])
        assert conn.execute(sa.select(sa.func.count()).select_from(models.stale_run_times)).scalar_one() == 0
        stored = [dict(r._mapping) for r in conn.execute(sa.select(models.run_time_buckets))]
    assert found["f2"]["new"]["samples"] == 3
    _assert_medians_of(found, stored)


def _assert_medians_of(found: dict[str, dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    """``found`` holds, for f0-f3, each signature's median by runtimes.median_seconds over ``rows``."""
    from cachewatch.core import runtimes

    expected: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["function_hash"] == "f4":
            continue
        buckets = expected.setdefault(row["function_hash"], {}).setdefault(row["signature_hash"], {})
        buckets[row["bucket"]] = [row["samples"], row["weight"]]
    assert set(found) == set(expected)
    for function, signatures in expected.items():
        assert set(found[function]) == set(signatures)
        for signature, buckets in signatures.items():
            got = found[function][signature]
            assert got["run_seconds"] == runtimes.median_seconds(buckets), (function, signature, buckets)
            assert got["samples"] == sum(v[0] for v in buckets.values())
            assert got["weight"] == sum(v[1] for v in buckets.values())
    assert any(t["run_seconds"] is None for sigs in found.values() for t in sigs.values())


def _as_listed(found: cost_reads.SlowerCompiles) -> list[tuple[Any, ...]]:
    return [(*_key(s), round(s.seconds_before, 9), round(s.seconds_after, 9)) for s in found.shown]


def _kept_and_counted(conn: sa.Connection, limit: int | None = None) -> tuple[list, int, list, int]:
    kept = kept_regressions.slower_compiles(conn, limit=limit)
    counted = cost_reads.slower_compiles(conn, kept_regressions.FACTOR, kept_regressions.MIN_SECONDS, limit)
    if kept_regressions.settle(conn):  # found again: the count kept beside them is theirs
        rows = conn.execute(sa.select(sa.func.count()).select_from(models.compile_regressions)).scalar_one()
        assert kept_regressions.kept_total(conn) == rows == counted.total
        assert kept_regressions.kept(conn, limit=1).total == rows
    return _as_listed(kept), kept.total, _as_listed(counted), counted.total


def _stored_events(conn: sa.Connection, run_id: str) -> list[dict[str, Any]]:
    e = models.compile_events
    return [
        dict(r._mapping)
        for r in conn.execute(sa.select(*[c for c in e.c if c.name != "id"]).where(e.c.run_id == run_id))
    ]


def _stale(conn: sa.Connection) -> int:
    return conn.execute(sa.select(sa.func.count()).select_from(models.stale_regressions)).scalar_one()


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_kept_regressions_are_those_counted_from_the_compiles_as_the_store_changes(dialect, sqlite_url, request):
    url = sqlite_url if dialect == "sqlite" else request.getfixturevalue("pg_url")
    _fill(url, 7)
    with enginemod.connection(url) as conn:
        rollup.rebuild(conn)  # a bulk load: every signature stale
        assert _stale(conn) > 0
        for limit in (None, 7, 1, 0):
            kept, kept_total, counted, counted_total = _kept_and_counted(conn, limit)
            assert kept == counted, limit
            assert kept_total == counted_total > 5
        assert _stale(conn) == 0, "found once, the signatures are no longer stale"
    # A later run through the write path, compiling f1's signatures three times slower and
    # f2's a little faster: those signatures are marked, found again, and rise.
    with enginemod.connection(url) as conn:
        events = _stored_events(conn, f"{11:032d}")
        later = {"run_id": "later" + "0" * 27, "started_at": 100.0, "jax_version": "0.9", "devices": []}
        moved = []
        for i, event in enumerate(events):
            factor = {"f1": 3.0, "f2": 0.8}.get(event["function_hash"], 1.0)
            seconds = event["compile_seconds"] * factor if event["compile_seconds"] is not None else None
            moved.append({**event, "event_id": f"later{i}", "run_id": later["run_id"], "compile_seconds": seconds})
        stored = writes.write_rows(conn, writes.TableRows([later], [], [writes.event_row(e) for e in moved], []))
        assert len(stored) == len(moved)
        assert 0 < _stale(conn) <= 15
        kept, kept_total, counted, counted_total = _kept_and_counted(conn)
        assert kept == counted
        assert kept_total == counted_total
        assert any(key[0] == "f1" and key[3] == later["run_id"] for key in kept), "the later run's rises are listed"
    # A prune of the oldest runs (each idle since just after its start): what the
    # remaining runs' compiles make is what is kept.
    with enginemod.connection(url) as conn:
        e, r = models.compile_events, models.runs
        start = sa.select(r.c.started_at).where(r.c.run_id == e.c.run_id).scalar_subquery()
        conn.execute(sa.update(e).values(timestamp=start + 0.5))
        rollup.rebuild(conn, tables=("run_totals",))
        kept_regressions.slower_compiles(conn)
        assert _stale(conn) == 0
    assert retention.prune(url, retention.Policy(keep_runs=6), now=1e9).runs == 6
    with enginemod.connection(url) as conn:
        assert _stale(conn) > 0
        kept, kept_total, counted, counted_total = _kept_and_counted(conn)
        assert kept == counted
        assert kept_total == counted_total
        runs = set(conn.execute(sa.select(models.runs.c.run_id)).scalars())
        assert {key[2] for key in kept} | {key[3] for key in kept} <= runs


def _slower_run(events: list[dict[str, Any]], name: str, started_at: float) -> writes.TableRows:
    """The events again, as a later run's, compiling four times slower."""
    run = {"run_id": name.ljust(32, "0"), "started_at": started_at, "jax_version": "0.9", "devices": []}
    slower = [
        {**e, "event_id": f"{name}{i}", "run_id": run["run_id"], "compile_seconds": (e["compile_seconds"] or 0.1) * 4}
        for i, e in enumerate(events)
    ]
    return writes.TableRows([run], [], [writes.event_row(e) for e in slower], [])


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_a_reader_whose_snapshot_missed_a_write_leaves_its_marks_standing(dialect, sqlite_url, request):
    url = sqlite_url if dialect == "sqlite" else request.getfixturevalue("pg_url")
    _fill(url, 8)
    with enginemod.connection(url) as conn:
        rollup.rebuild(conn)
        kept_regressions.slower_compiles(conn)
        events = _stored_events(conn, f"{11:032d}")
        writes.write_rows(conn, _slower_run(events, "first", 100.0))
        assert _stale(conn) > 0
    with enginemod.snapshot(url) as reader:
        seen = cost_reads.slower_compiles(reader, kept_regressions.FACTOR, kept_regressions.MIN_SECONDS)
        # A writer marks the same signatures again after the reader's snapshot began: the
        # reader cannot find them again (its marks are out of date), changes nothing,
        # and counts what its snapshot shows.
        with enginemod.connection(url) as writer:
            writes.write_rows(writer, _slower_run(events, "second", 200.0))
        assert kept_regressions.settle(reader) is False
        assert _as_listed(kept_regressions.slower_compiles(reader)) == _as_listed(seen)
    with enginemod.connection(url) as conn:
        assert _stale(conn) > 0, "the marks stand"
        kept, kept_total, counted, counted_total = _kept_and_counted(conn)
        assert kept == counted
        assert kept_total == counted_total
        assert "first".ljust(32, "0") in {key[3] for key in kept}, "the rise the reader could not keep is kept now"


@pytest.mark.postgres
def test_a_role_that_may_only_read_gets_the_regressions_counted_and_changes_nothing(pg_url):
    _fill(pg_url, 9)
    with enginemod.connection(pg_url) as conn:
        rollup.rebuild(conn)  # every signature stale
        stale = _stale(conn)
        counted = cost_reads.slower_compiles(conn, kept_regressions.FACTOR, kept_regressions.MIN_SECONDS)
    role = f"cw_reader_{uuid.uuid4().hex[:8]}"
    with enginemod.connection(pg_url) as conn:
        conn.execute(sa.text(f"CREATE ROLE {role} LOGIN"))
        conn.execute(sa.text(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"))
    reader_url = pg_url.replace("postgres@", f"{role}@", 1)
    try:
        with enginemod.connection(reader_url, ensure=False) as reader:
            found = kept_regressions.compile_regressions(reader)
        listed = [
            (
                r.function_hash,
                r.signature_hash,
                r.run_before,
                r.run_after,
                round(r.seconds_before, 9),
                round(r.seconds_after, 9),
            )
            for r in found.shown
        ]
        assert listed == _as_listed(counted)
        assert found.total == counted.total > 0
        with enginemod.connection(pg_url) as conn:
            assert _stale(conn) == stale, "a reader changes nothing"
    finally:
        enginemod.dispose_engines()
        with enginemod.connection(pg_url) as conn:
            conn.execute(sa.text(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}"))
            conn.execute(sa.text(f"DROP ROLE {role}"))


def _stats_rows(seed: int) -> list[dict[str, Any]]:
    """Call statistics of _fill's runs: buckets kept, rows written before buckets were
    (their samples at the mean), rows with no sample, and rows made while sampling was off."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for _ in range(120):
        calls = rng.choice((1, 40, 900))
        sampled = rng.choice((0, 1, 3, 8)) if calls > 1 else 0
        seconds = sampled * rng.choice((2e-5, 4e-4, 0.03))
        buckets: runtimes.Buckets = {}
        if sampled and rng.random() < 0.7:  # else a row from before buckets were kept
            for _ in range(rng.choice((1, 1, 3))):
                runtimes.add_sample(buckets, seconds / sampled * rng.uniform(0.5, 2.0), rng.choice((1, calls)))
        rows.append(
            {
                "run_id": f"{rng.randrange(12):032d}",
                "function_hash": f"f{rng.randrange(5)}",
                "signature_hash": rng.choice(("a", "b", "c", "")),
                "timestamp": float(rng.randrange(700)),
                "calls": calls,
                "sampled_calls": sampled,
                "sampled_seconds": seconds,
                "run_buckets": runtimes.to_json(buckets) if buckets else None,
                "sample_every": 0 if rng.random() < 0.2 else 10,
            }
        )
    return rows


def _within(f: Filters, row: dict[str, Any]) -> bool:
    return (
        (not f.run_id or row["run_id"] == f.run_id)
        and (f.run_ids is None or row["run_id"] in f.run_ids)
        and (f.since is None or row["timestamp"] >= f.since)
        and (f.until is None or row["timestamp"] < f.until)
    )


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_totals_over_the_store_a_span_or_a_run_are_those_counted_from_the_rows(dialect, sqlite_url, request):
    """The summary and the function listing over the store, a time span or a run read the
    events and statistics under it in one pass each, and count the runs from their kept
    first and last event: the same figures as counting every stored row by hand."""
    from cachewatch.store import queries

    url = sqlite_url if dialect == "sqlite" else request.getfixturevalue("pg_url")
    _fill(url, 8)
    stats = _stats_rows(8)
    with enginemod.connection(url) as conn:
        conn.execute(sa.insert(models.call_stats), stats)
        rollup.rebuild(conn)
        events = [dict(r._mapping) for r in conn.execute(sa.select(models.compile_events))]
    spans = [
        Filters(),  # the whole store, from the kept totals
        Filters(since=250.0),
        Filters(until=300.0),
        Filters(since=120.0, until=410.5),
        Filters(since=1e9),
        Filters(run_id=f"{3:032d}", since=100.0),
        Filters(run_ids=(f"{1:032d}", f"{7:032d}"), until=500.0),
    ]
    for f in spans:
        mine = [e for e in events if _within(f, e)]
        with enginemod.connection(url) as conn:
            found = queries.totals(conn, f)
            per_function = {c.function_hash: c for c in queries.call_totals(conn, f)}
            medians = queries.signature_run_times(conn, f)
        assert found.runs == len({e["run_id"] for e in mine}), f
        assert found.events == len(mine), f
        assert found.functions == len({e["function_hash"] for e in mine}), f
        assert found.compiles == sum(1 for e in mine if e["compiled"]), f
        assert found.compile_seconds == pytest.approx(sum(e["compile_seconds"] or 0.0 for e in mine)), f
        # The statistics by hand, with the store's own rule for each row's buckets.
        wanted: dict[str, dict[str, runtimes.Buckets]] = {}
        calls: dict[str, list[int]] = {}
        for row in (r for r in stats if _within(f, r)):
            totals = calls.setdefault(row["function_hash"], [0, 0, 0])
            totals[0] += row["calls"]
            totals[1] += row["sampled_calls"]
            totals[2] += row["calls"] if row["sample_every"] == 0 else 0
            buckets = rollup.row_buckets(row)
            if buckets:
                runtimes.merge(
                    wanted.setdefault(row["function_hash"], {}).setdefault(row["signature_hash"], {}), buckets
                )
        assert set(per_function) == set(calls), f
        for h, (n, sampled, unsampled) in calls.items():
            assert (per_function[h].calls, per_function[h].sampled_calls) == (n, sampled), f
            assert per_function[h].unsampled_calls == unsampled, f
            assert per_function[h].run_seconds_per_call == pytest.approx(runtimes.per_call_seconds(wanted.get(h, {})))
        assert found.calls == sum(n for n, _, _ in calls.values()), f
        assert {h: {s: m["run_seconds"] for s, m in sigs.items()} for h, sigs in medians.items()} == {
            h: {s: runtimes.median_seconds(b) for s, b in sigs.items()} for h, sigs in wanted.items()
        }, f
