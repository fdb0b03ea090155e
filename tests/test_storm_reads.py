"""Storms are found from the runs and functions (or lines of user code) where enough
recompiles came close together, read through an index; the rest of a store never leaves
the database. What is found must be what reading every recompile finds."""

from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Any

import pytest
import sqlalchemy as sa

from cachewatch.core.events import Cause, Kind
from cachewatch.store import engine as enginemod
from cachewatch.store import models, retention, rollup, writes
from cachewatch.store.columns import Filters
from cachewatch.storms import diagnosis, kept_bursts, steady, storm_reads

NOW = 1_750_000_000.0
# Two jits of the user's, and two library functions reached from the same lines.
FUNCTIONS = {
    "step": ("train", "/p/train.py"),
    "evaluate": ("train", "/p/train.py"),
    "lib_a": ("jax._src.numpy.linalg", "/site-packages/jax/_src/numpy/linalg.py"),
    "lib_b": ("jax._src.numpy.linalg", "/site-packages/jax/_src/numpy/linalg.py"),
}
SITES = ("/p/train.py:40", "/p/train.py:77")
CAUSES = (Cause.NEW_SHAPE, Cause.NEW_SHAPE, Cause.NEW_STATIC_VALUE, Cause.WEAK_TYPE)


def _fill(url: str, seed: int) -> None:
    """Runs with storms, sparse recompiles, first calls, warm-up and ahead-of-time compiles,
    and library functions whose compiles are close together only counted per line."""
    rng = random.Random(seed)
    enginemod.ensure_schema(url)
    runs = [f"r{i}" for i in range(6)]
    events = []
    for run_index, run_id in enumerate(runs):
        start = NOW + run_index * 86400
        for name in FUNCTIONS:
            events.append(_event(run_id, name, start, Cause.FIRST_CALL, warmup=True))
        n = 0
        for _ in range(rng.randint(4, 9)):
            # A stretch of one jit, or of the library functions reached from one line
            # (alternating, so only the line is dense), close together in odd runs.
            names = [rng.choice(["step", "evaluate"])] if rng.random() < 0.5 else ["lib_a", "lib_b"]
            site = rng.choice(SITES)
            gap = rng.choice((2.0, 5.0, 30.0)) if run_index % 2 else rng.choice((400.0, 2000.0))
            for k in range(rng.randint(3, 14)):
                start += gap * rng.uniform(0.5, 1.5)
                n += 1
                events.append(
                    _event(
                        run_id,
                        names[k % len(names)],
                        start,
                        rng.choice(CAUSES),
                        site=site,
                        warmup=n < 3,
                        kind=Kind.AHEAD if rng.random() < 0.05 else "trace",
                        signature=f"s{n % 9}",
                    )
                )
            start += rng.choice((100.0, 3000.0))
    with enginemod.connection(url) as conn:
        conn.execute(sa.insert(models.runs), [{"run_id": r, "started_at": NOW, "jax_version": "0.10.2"} for r in runs])
        conn.execute(
            sa.insert(models.functions),
            [
                {
                    "function_hash": name,
                    "name": name,
                    "qualname": name,
                    "module": module,
                    "file": file,
                    "first_seen": NOW,
                }
                for name, (module, file) in FUNCTIONS.items()
            ],
        )
        conn.execute(sa.insert(models.compile_events), events)


def _event(run_id, name, t, cause, *, site=None, warmup=False, kind="trace", signature="s0") -> dict:
    return {
        "event_id": f"{run_id}-{name}-{t}",
        "function_hash": name,
        "run_id": run_id,
        "timestamp": t,
        "kind": kind,
        "cause": cause,
        "compiled": True,
        "nested": False,
        "warmup": warmup,
        "signature_hash": signature,
        "call_site": site,
        "trace_seconds": 0.01,
    }


@pytest.mark.parametrize("seed", [1, 2])
def test_storms_from_the_dense_pairs_are_the_storms_of_every_recompile(store_url, monkeypatch, seed):
    _fill(store_url, seed)
    reading_all = steady.recompiles

    def every_recompile(*args, dense=None, **kwargs):
        return reading_all(*args, **kwargs)

    storms = 0
    # Under filters too: a run, or a span that cuts runs in two (a burst half outside it
    # is no longer one).
    views = (Filters(), Filters(run_id="r3"), Filters(since=NOW + 3 * 86400 + 500), Filters(until=NOW + 86400 + 400))
    with enginemod.connection(store_url) as conn:
        for (threshold, window), view in itertools.product(((5, 60.0), (3, 10.0), (8, 600.0)), views):
            found = diagnosis.storms_and_first_passes(
                conn, view, threshold=threshold, window=window, now=NOW, priced=False
            )
            with monkeypatch.context() as patched:
                patched.setattr(steady, "recompiles", every_recompile)
                whole = diagnosis.storms_and_first_passes(
                    conn, view, threshold=threshold, window=window, now=NOW, priced=False
                )
            assert found == whole, (threshold, window, view)
            storms += len(found[0])
            # One function's storms (its detail): the window runs over its recompiles
            # and its lines' alone, and finds what reading every recompile finds.
            for name in FUNCTIONS:
                mine = diagnosis.storms_and_first_passes(
                    conn, Filters(), threshold=threshold, window=window, now=NOW, function_hashes=[name], priced=False
                )
                with monkeypatch.context() as patched:
                    patched.setattr(steady, "recompiles", every_recompile)
                    everyone = diagnosis.storms_and_first_passes(
                        conn,
                        Filters(),
                        threshold=threshold,
                        window=window,
                        now=NOW,
                        function_hashes=[name],
                        priced=False,
                    )
                assert mine == everyone
    assert storms, "the filled store has storms to compare"


def test_the_dense_pairs_leave_out_sparse_runs(store_url):
    _fill(store_url, 3)
    with enginemod.connection(store_url) as conn:
        dense = storm_reads.recompiles_past_first(conn, Filters(), diffs=False, dense=(5, 60.0))
        every = storm_reads.recompiles_past_first(conn, Filters(), diffs=False)
    assert {r.run_id for r, _ in dense} < {r.run_id for r, _ in every}  # the sparse runs stay in the store
    assert {r.run_id for r, _ in dense} <= {"r1", "r3", "r5"}
    kept = {r.event_id for r, _ in dense}
    assert kept <= {r.event_id for r, _ in every}


def test_the_recompile_condition_is_the_vocabulary_s():
    assert f"cause <> '{Cause.FIRST_CALL.value}'" in models.RECOMPILED
    assert f"kind <> '{Kind.AHEAD.value}'" in models.RECOMPILED


@pytest.mark.parametrize("seed", [1, 2])
def test_a_page_of_storms_is_that_page_of_the_whole_listing(store_url, seed):
    _fill(store_url, seed)
    now = NOW + 3 * 86400  # some storms active, most not
    with enginemod.connection(store_url) as conn:
        whole = diagnosis.detect_storms(conn, threshold=3, window=60.0, now=now)
        assert len(whole) > 3, "the filled store has pages of storms"
        assert any(s.recurs_in_runs > 1 for s in whole), "a page shows recurrence counted over every storm"
        active_first = sorted(whole, key=lambda s: (not s.active, -s.end))
        for offset, limit in ((0, 2), (1, 3), (len(whole) - 1, 5), (len(whole), 5)):
            page = diagnosis.find_storms(conn, page=(offset, limit), threshold=3, window=60.0, now=now)
            assert list(page.storms) == whole[offset : offset + limit]
            assert page.total == len(whole)
            assert page.active == sum(1 for s in whole if s.active)
            first = diagnosis.find_storms(
                conn, page=(offset, limit), active_first=True, threshold=3, window=60.0, now=now
            )
            assert list(first.storms) == active_first[offset : offset + limit]
            # A later page asks for no first passes: the same storms, none of them.
            bare = diagnosis.find_storms(
                conn, page=(offset, limit), with_first_passes=False, threshold=3, window=60.0, now=now
            )
            assert bare.storms == page.storms
            assert bare.total == page.total
            assert bare.active == page.active
            assert bare.first_passes == ()
        passes = diagnosis.first_passes(conn, threshold=3, window=60.0, now=now)
        assert passes, "the filled store has first passes"
        assert diagnosis.find_storms(conn, page=(0, 2), threshold=3, window=60.0, now=now).first_passes == tuple(passes)
        past = diagnosis.find_storms(conn, page=(0, 100), active=False, threshold=3, window=60.0, now=now)
    assert list(past.storms) == [s for s in whole if not s.active]
    assert past.total == len(past.storms)


def test_one_functions_storms_count_the_whole_line_it_was_reached_from(store_url):
    enginemod.ensure_schema(store_url)
    # lib_a and lib_b alternate at one line, a compile every 10 s: three of the line's fit
    # in 25 s, three of either function's do not. Only the line is dense.
    events = [_event("r0", name, NOW, Cause.FIRST_CALL, warmup=True) for name in ("lib_a", "lib_b")]
    for k in range(12):
        name = ("lib_a", "lib_b")[k % 2]
        events.append(_event("r0", name, NOW + 100 + 10 * k, Cause.NEW_SHAPE, site=SITES[0], signature=f"s{k}"))
    with enginemod.connection(store_url) as conn:
        conn.execute(sa.insert(models.runs), [{"run_id": "r0", "started_at": NOW, "jax_version": "0.10.2"}])
        conn.execute(
            sa.insert(models.functions),
            [
                {"function_hash": n, "name": n, "qualname": n, "module": m, "file": f, "first_seen": NOW}
                for n, (m, f) in FUNCTIONS.items()
            ],
        )
        conn.execute(sa.insert(models.compile_events), events)
        (storm,) = diagnosis.detect_storms(conn, threshold=3, window=25.0, now=NOW + 300, function_hashes=["lib_a"])
    assert storm.key == f"site:{SITES[0]}"
    assert storm.compiles == 12


def _kept_and_found(
    conn: sa.Connection, now: float, **options: Any
) -> tuple[diagnosis.StormsFound, diagnosis.StormsFound]:
    """The storms as the kept bursts give them (the finder's defaults, the whole store or
    one run) and as finding them from every run's recompiles does (a time bound that
    keeps every event: the kept bursts do not serve bounded views)."""
    view = options.pop("filters", Filters())
    options.setdefault("priced", False)
    kept = diagnosis.find_storms(conn, view, now=now, **options)
    found = diagnosis.find_storms(conn, dataclasses.replace(view, since=0.0), now=now, **options)
    return kept, found


def _stale_runs(conn: sa.Connection) -> int:
    return conn.execute(sa.select(sa.func.count()).select_from(models.stale_storms)).scalar_one()


def _assert_kept_storms_are_found_storms(conn: sa.Connection, now: float, priced: bool = False) -> int:
    whole = None
    views: tuple[dict[str, Any], ...] = (
        {},
        {"page": (1, 2)},
        {"page": (0, 3), "active_first": True, "with_first_passes": False},
        {"active": False},
        {"filters": Filters(run_id="r3")},
        *({"function_hashes": [name]} for name in FUNCTIONS),
    )
    for options in views:
        kept, found = _kept_and_found(conn, now, priced=priced, **options)
        assert kept == found, options
        whole = whole or kept
    assert whole is not None
    return whole.total


def test_kept_storms_are_those_found_from_the_recompiles_as_the_store_changes(store_url):
    _fill(store_url, 4)
    now = NOW + 3 * 86400
    with enginemod.connection(store_url) as conn:
        rollup.rebuild(conn)  # a bulk load: every run stale
        assert _stale_runs(conn) == 6
        total = _assert_kept_storms_are_found_storms(conn, now)
        assert total > 1, "the filled store has storms"
        assert _stale_runs(conn) == 0, "found once, the runs are no longer stale"
        kept_runs = set(conn.execute(sa.select(models.kept_bursts.c.run_id)).scalars())
        assert kept_runs, "the runs with bursts keep them"
        assert kept_runs <= {"r1", "r3", "r5"}, "only runs with bursts keep any"
    # A later run through the write path, storming in `step`: only it is marked, found,
    # and listed first.
    with enginemod.connection(store_url) as conn:
        start = NOW + 30 * 86400
        run = {"run_id": "later", "started_at": start, "jax_version": "0.10.2", "devices": []}
        stored = dict(conn.execute(sa.select(*models.compile_events.c).limit(1)).one()._mapping)
        del stored["id"]
        rows = [_event("later", "step", start, Cause.FIRST_CALL, warmup=True)]
        rows += [
            _event("later", "step", start + 100 + 5 * k, Cause.NEW_SHAPE, site=SITES[0], signature=f"n{k}")
            for k in range(8)
        ]
        events = [writes.event_row({**stored, **row}) for row in rows]  # every column a writer fills
        assert len(writes.write_rows(conn, writes.TableRows([run], [], events, []))) == 9
        assert _stale_runs(conn) == 1
        assert _assert_kept_storms_are_found_storms(conn, start + 200) == total + 1
        assert _stale_runs(conn) == 0, "the listing found the marked run's bursts again and kept them"
        (newest,) = diagnosis.find_storms(conn, now=start + 200, page=(0, 1), priced=False).storms
        assert (newest.run_id, newest.key, newest.compiles) == ("later", "step", 8)
        # Call statistics of the run (served calls after the burst can make it a first
        # pass): the run is marked again, and what is kept follows.
        stats = [
            {
                "run_id": "later",
                "function_hash": "step",
                "timestamp": start + 5000 + i,
                "calls": 400,
                "compiles": 0,
                "sampled_calls": 0,
                "sampled_seconds": 0.0,
                "signature_hash": "",
            }
            for i in range(3)
        ]
        writes.write_rows(conn, writes.TableRows([], [], [], stats))
        assert conn.execute(sa.select(sa.func.count()).select_from(models.call_stats)).scalar_one() == 3
        assert _stale_runs(conn) == 1
        _assert_kept_storms_are_found_storms(conn, start + 6000)
        assert _stale_runs(conn) == 0
    # A prune of all but the newest run (the others all ended before it began): the
    # pruned runs' bursts go, the newest run's stay as found.
    assert retention.prune(store_url, retention.Policy(keep_runs=1), now=1e10).runs == 6
    with enginemod.connection(store_url) as conn:
        assert _stale_runs(conn) == 6
        assert _assert_kept_storms_are_found_storms(conn, start + 6000) >= 0
        assert set(conn.execute(sa.select(models.kept_bursts.c.run_id)).scalars()) == {"later"}


def _described(conn: sa.Connection) -> dict[str, dict]:
    b = models.kept_bursts
    return dict(conn.execute(sa.select(b.c.burst_id, b.c.description).where(b.c.description.is_not(None))).all())


def _counting_tellings(monkeypatch) -> list[int]:
    """How many bursts each telling reads the recompiles of (kept_bursts.with_groups), in order."""
    told_bursts: list[int] = []
    with_groups = kept_bursts.with_groups

    def counting(conn, bursts, diffs=False):
        told_bursts.append(len(bursts))
        return with_groups(conn, bursts, diffs)

    monkeypatch.setattr(kept_bursts, "with_groups", counting)
    return told_bursts


def _reads_by_id(monkeypatch) -> list[str]:
    """The recompiles the reads of kept bursts' recompiles by id ask for."""
    asked: list[str] = []
    by_id = storm_reads.recompiles_by_id

    def counting(conn, event_ids, diffs=False):
        asked.extend(event_ids)
        return by_id(conn, event_ids, diffs)

    monkeypatch.setattr(storm_reads, "recompiles_by_id", counting)
    return asked


def test_a_listing_keeps_what_it_told_and_the_next_reads_it_until_the_run_changes(store_url, monkeypatch):
    _fill(store_url, 4)
    now = NOW + 3 * 86400
    told_bursts = _counting_tellings(monkeypatch)
    with enginemod.connection(store_url) as conn:
        rollup.rebuild(conn)
        whole = diagnosis.find_storms(conn, now=now)
        assert whole.total > 1, "the filled store has storms"
        assert told_bursts[-1] == whole.total + len(whole.first_passes), "the first listing tells every burst"
        described = _described(conn)
        assert len(described) == told_bursts[-1], "and keeps what it told"
        assert all("active" not in d and "recurs_in_runs" not in d for d in described.values())
        # Every view read from what was kept is the view found and told from the recompiles,
        # as of the time of the fill and long after it (no storm active any more).
        _assert_kept_storms_are_found_storms(conn, now, priced=True)
        _assert_kept_storms_are_found_storms(conn, now + 30 * 86400, priced=True)
        again = diagnosis.find_storms(conn, now=now)
        assert told_bursts[-1] == 0, "the next listing tells none"
        assert again == whole
        # A description in a shape this version does not read (another version wrote it):
        # that burst alone is told again.
        b = models.kept_bursts
        odd = next(iter(described))
        conn.execute(sa.update(b).where(b.c.burst_id == odd).values(description={**described[odd], "new_field": 1}))
        assert diagnosis.find_storms(conn, now=now) == whole
        assert told_bursts[-1] == 1
        # ... and what it told replaces the description it could not read.
        assert diagnosis.find_storms(conn, now=now) == whole
        assert told_bursts[-1] == 0
        # Unpriced, a listing tells its bursts itself (what is kept is priced).
        diagnosis.find_storms(conn, now=now, priced=False)
        assert told_bursts[-1] == whole.total + len(whole.first_passes)
    # A recompile written to a storming run: its bursts are found again under new ids and
    # told anew; what was told of the old ones cannot land on the new.
    stormy = whole.storms[0]
    with enginemod.connection(store_url) as conn:
        stored = dict(conn.execute(sa.select(*models.compile_events.c).limit(1)).one()._mapping)
        del stored["id"]
        row = _event(stormy.run_id, stormy.function_hash, stormy.end + 1.0, Cause.NEW_SHAPE, signature="late")
        row["call_site"] = stormy.call_site
        writes.write_rows(conn, writes.TableRows([], [], [writes.event_row({**stored, **row})], []))
        old_ids = {b for b in described if b in set(conn.execute(sa.select(models.kept_bursts.c.burst_id)).scalars())}
        read_back = _reads_by_id(monkeypatch)
        later = diagnosis.find_storms(conn, now=now)
        assert read_back == [], "the bursts just found again are told from the finding, the rest were kept"
        run_bursts = set(
            conn.execute(
                sa.select(models.kept_bursts.c.burst_id).where(models.kept_bursts.c.run_id == stormy.run_id)
            ).scalars()
        )
        assert run_bursts, "the run still has bursts"
        assert not run_bursts & old_ids, "found again under new ids"
        (grown,) = [s for s in later.storms if (s.run_id, s.key, s.start) == (stormy.run_id, stormy.key, stormy.start)]
        assert grown.compiles == stormy.compiles + 1, "told anew from the recompiles"
        assert kept_bursts.keep_descriptions(conn, {b: {"fix": "stale"} for b in old_ids | {"gone"}})
        assert all(d.get("fix") != "stale" for d in _described(conn).values())
        assert _assert_kept_storms_are_found_storms(conn, now, priced=True) == later.total


def test_active_storms_are_the_kept_ones_still_going_and_a_poll_tells_none_again(store_url, monkeypatch):
    _fill(store_url, 4)
    told_bursts = _counting_tellings(monkeypatch)
    window = diagnosis.STORM_WINDOW
    options: dict[str, Any] = {"threshold": diagnosis.STORM_THRESHOLD, "window": window, "active_only": True}
    with enginemod.connection(store_url) as conn:
        rollup.rebuild(conn)
        every = diagnosis.find_storms(conn, now=NOW + 30 * 86400)
        latest = max(every.storms, key=lambda s: s.end)
        now = latest.end + window / 3  # that storm (and any that ended with it) still going
        listed = diagnosis.find_storms(conn, now=now)
        wanted = [s for s in listed.storms if s.active]
        assert latest.key in {s.key for s in wanted}
        before = len(told_bursts)
        assert diagnosis.storms(conn, Filters(), now=now, **options) == wanted
        assert told_bursts[before:] == [0], "read from the kept bursts, told before: a poll tells none again"
        # A span open at its end that starts before the last 2 * window sees them all.
        assert diagnosis.storms(conn, Filters(since=now - 3 * window), now=now, **options) == wanted
        # Counting reads what was kept, less what only a description says.
        before = len(told_bursts)
        counted = diagnosis.storms(conn, Filters(), now=now, described=False, **options)
        assert told_bursts[before:] == [0]
        assert counted == [
            dataclasses.replace(
                s, fix="", priced_fix=None, recurs_in_runs=1, identical_programs=0, identical_seconds=0.0
            )
            for s in wanted
        ]
        # A span that starts inside the active window reads its own events, as before.
        inside = diagnosis.storms(conn, Filters(since=latest.end - window / 2), now=now, described=False, **options)
        assert {s.key for s in inside} <= {s.key for s in wanted}
        assert all(s.start >= latest.end - window / 2 for s in inside)


def test_diffs_read_for_a_runs_span_are_those_read_by_id(store_url, monkeypatch):
    _fill(store_url, 4)
    with enginemod.connection(store_url) as conn:
        every = [r for r, _ in storm_reads.recompiles_past_first(conn, Filters(), diffs=False)]
        # Every other one: a span's read meets recompiles that were not asked for.
        asked = every[::2]
        monkeypatch.setattr(storm_reads, "DIFFS_BY_RANGE", 10**9)
        by_id = storm_reads.with_diffs(conn, asked)
        monkeypatch.setattr(storm_reads, "DIFFS_BY_RANGE", 1)
        by_span = storm_reads.with_diffs(conn, asked)
    assert len({r.run_id for r in asked}) > 1
    assert sum(r.diff is not None for r in by_id) > len(asked) // 2
    assert by_span == by_id
