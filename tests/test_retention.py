"""Retention (`cachewatch db prune`, CACHEWATCH_RETENTION) on SQLite and PostgreSQL: the
runs kept read the same before and after (reports, storms, /metrics), the counters of
/metrics never go back, the space is given back, a dry run and bad arguments change
nothing, and ingest beside a prune loses nothing.

The store is built from real compile events (serverkit.run_jax_workload), copied into
runs started 40 and 35 days ago (pruned by 30d, and by keeping 2 runs) and 2 days and
an hour ago (kept), stored through the service's ingest."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
import time
import uuid

import pytest
import serverkit as kit
import sqlalchemy as sa
from cachewatch_server.main import create_app
from cachewatch_server.settings import ServerSettings, SettingsError, load
from fastapi.testclient import TestClient

from cachewatch import cli
from cachewatch.core.events import CompileEvent, RunInfo
from cachewatch.record import current
from cachewatch.store import engine as enginemod
from cachewatch.store import models, queries, retention, writes
from cachewatch.store.columns import Filters
from cachewatch.storms import diagnosis
from cachewatch.storms.results import Storm

DAY = 86400.0
# Wide enough that the newest kept run's storm is active for as long as a test runs.
STORM_WINDOW = 4 * 3600.0
IDENTICAL = "cachewatch_identical_recompile_seconds_total"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> kit.Recorded:
    current.configure(store=f"sqlite:///{tmp_path_factory.mktemp('lib') / 'lib.db'}")
    return kit.run_jax_workload()


@dataclasses.dataclass
class Built:
    url: str
    now: float
    old: list[RunInfo]  # pruned by 30d and by keeping 2 runs
    kept: list[RunInfo]
    old_fingerprints: set[str]  # texts only the old runs refer to
    shared_fingerprints: set[str]  # texts the old and the kept runs refer to


def client_for(url: str, **settings) -> TestClient:
    values = {"store": url, "write_token": None, "read_token": None, "storm_window": STORM_WINDOW, **settings}
    return TestClient(create_app(ServerSettings(**values)))


def copy_pass(
    recorded: kit.Recorded, run: RunInfo, start: float, *, own_texts: bool, padding: int = 0
) -> list[CompileEvent]:
    """One pass of the recorded events in ``run`` from ``start``, with ids of their own
    (identical_to and same_program_as follow them). With ``own_texts``, the programs of
    `step` and the lambda get fingerprints (and texts, ``padding`` random bytes longer)
    no other run has; `scale`'s stay shared."""
    ids = {e.event_id: uuid.uuid4().hex for e in recorded.events}
    out = []
    for i, e in enumerate(recorded.events):
        changes: dict = {
            "identical_to": ids.get(e.identical_to) if e.identical_to else None,
            "same_program_as": ids.get(e.same_program_as) if e.same_program_as else None,
        }
        if own_texts and e.program_fingerprint and e.function.name != "scale":
            fp = hashlib.sha256((e.program_fingerprint + run.run_id).encode()).hexdigest()[:32]
            changes["program_fingerprint"] = fp
            if e.program_texts:
                texts = dict(e.program_texts["texts"])
                texts["jaxpr"] = texts.get("jaxpr", "") + "\n# " + os.urandom(padding).hex()
                changes["program_texts"] = {**e.program_texts, "fingerprint": fp, "texts": texts}
        event = kit.copy_event(e, run, start + i * 0.5, **changes)
        out.append(dataclasses.replace(event, event_id=ids[e.event_id]))
    return out


def build(url: str, recorded: kit.Recorded, *, old_passes: int = 12, padding: int = 3000) -> Built:
    now = time.time()
    step, scale = recorded.function("step"), recorded.function("scale")
    starts = {"old": [now - 40 * DAY, now - 35 * DAY], "kept": [now - 2 * DAY, now - 3600]}
    runs: dict[str, list[RunInfo]] = {"old": [], "kept": []}
    with client_for(url) as client:
        for group, begin in starts.items():
            for n, started in enumerate(begin):
                run = kit.new_run(recorded.run, started_at=started, name=f"{group}-{n}")
                runs[group].append(run)
                passes = old_passes if group == "old" else 2
                events = [
                    e
                    for p in range(passes)
                    for e in copy_pass(recorded, run, started + 60 * p, own_texts=group == "old", padding=padding)
                ]
                stats = [
                    kit.stats(run, step, started + 30, calls=100, sampled=4, seconds=0.004 * (n + 1)),
                    kit.stats(run, scale, started + 90, calls=7),
                ]
                drops = {"queue_full": 3} if group == "old" and n == 0 else {"spool_full": 2} if n == 1 else {}
                body = kit.payload(run, events, stats, dropped_by=drops, dropped=sum(drops.values()))
                r = client.post("/api/v1/events", json=body)
                assert r.status_code == 200, r.text
    fp_of = lambda names: {  # noqa: E731
        e.program_fingerprint for e in recorded.events if e.program_fingerprint and e.function.name in names
    }
    with enginemod.connection(url) as conn:
        old_fps = {
            fp
            for fp in conn.execute(
                sa.select(models.compile_events.c.program_fingerprint).where(
                    models.compile_events.c.run_id.in_([r.run_id for r in runs["old"]])
                )
            ).scalars()
            if fp
        } - fp_of({"scale"})
    return Built(url, now, runs["old"], runs["kept"], old_fps, fp_of({"scale"}))


def run_report(url: str, run_id: str, capsys) -> list[dict]:
    capsys.readouterr()
    assert cli.main(["report", "--store", url, "--run", run_id, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def storms(url: str, run_id: str | None, now: float) -> list[Storm]:
    with enginemod.connection(url) as conn:
        return diagnosis.storms(conn, Filters(run_id=run_id), threshold=5, window=STORM_WINDOW, now=now)


def scrape(url: str) -> dict:
    with client_for(url) as client:
        r = client.get("/metrics")
        assert r.status_code == 200
        return {
            key: value for key, value in kit.parse_metrics(r.text).items() if not key[0].startswith("cachewatch_http_")
        }


def counts(url: str) -> dict[str, int]:
    """Rows of every table: what a change to the store would show."""
    with enginemod.connection(url) as conn:
        return {
            name: conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
            for name, table in models.Base.metadata.tables.items()
        }


def state(url: str, built: Built, capsys) -> dict:
    """What a user of the kept runs reads: their reports and storms, the runs listing,
    the all-time figures of the unfiltered report."""
    with enginemod.connection(url) as conn:
        whole = {
            r["function_hash"]: {k: r[k] for k in ("traces", "compiles", "recompiles", "causes", "compile_seconds")}
            for r in queries.function_report(conn)
        }
        totals = queries.totals(conn, Filters())
    with client_for(url) as client:
        listed = {r["run_id"]: r for r in client.get("/api/v1/runs").json()["items"]}
    return {
        "reports": {r.run_id: run_report(url, r.run_id, capsys) for r in built.kept},
        "storms": {r.run_id: storms(url, r.run_id, built.now) for r in built.kept},
        "runs": {r.run_id: listed[r.run_id] for r in built.kept},
        "whole": whole,
        "totals": {k: getattr(totals, k) for k in ("events", "compiles", "recompiles", "causes", "calls")},
    }


def sqlite_bytes(url: str) -> int:
    """The file's size with the write-ahead log folded into it."""
    with enginemod.get_engine(url).connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    path = url.removeprefix("sqlite:///")
    return os.path.getsize(path) + (os.path.getsize(path + "-wal") if os.path.exists(path + "-wal") else 0)


def pg_table_stats(url: str, table: str) -> dict:
    with enginemod.connection(url) as conn:
        conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        row = conn.execute(sa.text(f"SELECT * FROM pgstattuple('{table}')")).mappings().one()
        return dict(row)


@pytest.mark.parametrize("how", [["--older-than", "30d"], ["--keep-runs", "2"]], ids=["age", "runs"])
def test_prune_keeps_the_kept_runs_and_the_counters_and_gives_space_back(store_url, recorded, how, capsys):
    built = build(store_url, recorded)
    before, metrics_before = state(store_url, built, capsys), scrape(store_url)
    assert all(before["storms"].values()), "each kept run has a storm of step"
    assert any(m[0] == "cachewatch_storm_active" and v == 1 for m, v in metrics_before.items())
    assert storms(store_url, built.old[0].run_id, built.now)  # the old runs have theirs
    events_before = counts(store_url)["compile_events"]
    if store_url.startswith("sqlite"):
        size_before = sqlite_bytes(store_url)
    else:
        pg_before = pg_table_stats(store_url, "compile_events")

    capsys.readouterr()
    assert cli.main(["db", "prune", "--store", store_url, *how, "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)

    old_ids = [r.run_id for r in built.old]
    with enginemod.connection(store_url) as conn:
        e, s, r = models.compile_events, models.call_stats, models.runs
        assert conn.execute(sa.select(sa.func.count()).where(e.c.run_id.in_(old_ids))).scalar_one() == 0
        assert conn.execute(sa.select(sa.func.count()).where(s.c.run_id.in_(old_ids))).scalar_one() == 0
        assert set(conn.execute(sa.select(r.c.run_id)).scalars()) == {
            *(k.run_id for k in built.kept),
            retention.PRUNED_RUN_ID,
        }
        texts = set(conn.execute(sa.select(models.programs.c.fingerprint)).scalars())
    assert result["runs"] == 2
    assert result["skipped_runs"] == 0
    assert result["reclaim_error"] is None
    assert result["events"] == events_before - counts(store_url)["compile_events"] == 2 * 12 * len(recorded.events)
    assert result["call_stats"] == 4
    assert result["program_texts"] == len(built.old_fingerprints) > 0
    assert not texts & built.old_fingerprints
    assert built.shared_fingerprints <= texts

    after, metrics_after = state(store_url, built, capsys), scrape(store_url)
    assert after == before
    # Every series the same, counters included; the one that goes back is the subject of
    # test_identical_recompile_seconds_survive_a_prune.
    assert {k: v for k, v in metrics_after.items() if k[0] != IDENTICAL} == {
        k: v for k, v in metrics_before.items() if k[0] != IDENTICAL
    }
    assert kit.sample(metrics_after, "cachewatch_events_dropped_total", reason="queue_full") == 3

    if store_url.startswith("sqlite"):
        assert result["bytes_after"] < 0.6 * result["bytes_before"]
        assert sqlite_bytes(store_url) < 0.6 * size_before
    else:
        # Plain VACUUM: no dead rows left, their space free for new rows in the table.
        pg_after = pg_table_stats(store_url, "compile_events")
        assert pg_after["dead_tuple_count"] == 0
        freed = pg_before["tuple_len"] - pg_after["tuple_len"]
        assert freed > 0
        assert pg_after["free_space"] - pg_before["free_space"] >= freed // 2


def test_identical_recompile_seconds_survive_a_prune(sqlite_url, recorded):
    """The seconds of wasted recompiles are a kept total: a prune never takes them back."""
    built = build(sqlite_url, recorded, old_passes=1, padding=0)
    before = {k: v for k, v in scrape(sqlite_url).items() if k[0] == IDENTICAL}
    assert any(v > 0 for v in before.values())  # the pruned runs held some
    retention.prune(sqlite_url, retention.Policy(older_than=30 * DAY), now=built.now)
    assert {k: v for k, v in scrape(sqlite_url).items() if k[0] == IDENTICAL} == before


def test_texts_only_drops_the_old_runs_texts_and_keeps_their_events(store_url, recorded, capsys):
    built = build(store_url, recorded)
    metrics_before = scrape(store_url)  # the first scrape records the functions' labels
    before = state(store_url, built, capsys)
    old_report = run_report(store_url, built.old[0].run_id, capsys)
    rows = counts(store_url)  # after the reads: a report's regressions bring the kept ones up to date

    capsys.readouterr()
    assert cli.main(["db", "prune", "--store", store_url, "--older-than", "30d", "--texts-only"]) == 0
    out = capsys.readouterr().out
    assert f"dropped {len(built.old_fingerprints)} program texts" in out
    assert "of 2 runs" in out

    with enginemod.connection(store_url) as conn:
        texts = set(conn.execute(sa.select(models.programs.c.fingerprint)).scalars())
    assert not texts & built.old_fingerprints
    assert built.shared_fingerprints <= texts
    assert counts(store_url) == {**rows, "programs": rows["programs"] - len(built.old_fingerprints)}
    assert state(store_url, built, capsys) == before
    assert scrape(store_url) == metrics_before
    # The old runs' events stay, with their figures; only the texts are gone.
    assert run_report(store_url, built.old[0].run_id, capsys) == old_report


def test_dry_run_changes_nothing_and_says_what_a_prune_drops(store_url, recorded, capsys):
    built = build(store_url, recorded)
    rows = counts(store_url)
    dry = retention.prune(store_url, retention.Policy(keep_runs=2), dry_run=True)
    capsys.readouterr()
    assert cli.main(["db", "prune", "--store", store_url, "--keep-runs", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert (
        f"would drop 2 runs, {dry.events} events, 4 call-statistics rows, {len(built.old_fingerprints)} program texts"
        in out
    )
    assert counts(store_url) == rows
    assert dry.bytes_after is None
    done = retention.prune(store_url, retention.Policy(keep_runs=2))
    assert (done.runs, done.events, done.call_stats, done.program_texts, done.program_text_bytes) == (
        dry.runs,
        dry.events,
        dry.call_stats,
        dry.program_texts,
        dry.program_text_bytes,
    )


def test_keep_runs_leaves_a_run_still_written_to(sqlite_url, recorded):
    """An older run that recorded anything after the oldest kept run started may still be
    running: it is kept beside the newest N."""
    built = build(sqlite_url, recorded, old_passes=1, padding=0)
    late = kit.stats(built.old[0], recorded.function("step"), built.now - 60, calls=5)
    with enginemod.connection(sqlite_url) as conn:
        writes.write_rows(conn, writes.table_rows(kit.batch(built.old[0], [], [late])))
    result = retention.prune(sqlite_url, retention.Policy(keep_runs=2))
    assert result.runs == 1
    with enginemod.connection(sqlite_url) as conn:
        left = set(conn.execute(sa.select(models.runs.c.run_id)).scalars())
    assert built.old[0].run_id in left
    assert built.old[1].run_id not in left


def test_a_run_written_to_after_it_was_chosen_is_left_alone(store_url, recorded):
    built = build(store_url, recorded, old_passes=1, padding=0)
    run = built.old[0]
    with enginemod.connection(store_url) as conn:
        cut, scope = retention._scope(conn, retention.Policy(older_than=30 * DAY), built.now)
    assert cut is not None
    assert run.run_id in {r.run_id for r in scope}
    # A batch arrives for it before the prune gets to it.
    fresh = copy_pass(recorded, run, built.now - 5, own_texts=False)
    with enginemod.connection(store_url) as conn:
        writes.write_rows(conn, writes.table_rows(kit.batch(run, fresh)))
        before = conn.execute(
            sa.select(sa.func.count()).where(models.compile_events.c.run_id == run.run_id)
        ).scalar_one()
    done = retention._drop_run(store_url, run.run_id, cut, chunk=5)
    assert done.skipped
    assert not done.dropped
    assert done.events == 0
    with enginemod.connection(store_url) as conn:
        after = conn.execute(
            sa.select(sa.func.count()).where(models.compile_events.c.run_id == run.run_id)
        ).scalar_one()
    assert after == before


def test_ingest_beside_a_prune_loses_nothing(store_url, recorded):
    """New runs ingested while a prune deletes in small transactions are all stored."""
    built = build(store_url, recorded, old_passes=6, padding=0)
    stored: list[str] = []
    errors: list[BaseException] = []

    def ingest() -> None:
        try:
            with client_for(store_url) as client:
                for n in range(8):
                    run = kit.new_run(recorded.run, started_at=time.time(), name=f"new-{n}")
                    events = copy_pass(recorded, run, time.time(), own_texts=False)
                    r = client.post("/api/v1/events", json=kit.payload(run, events))
                    assert r.status_code == 200, r.text
                    stored.extend(e.event_id for e in events)
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)

    writer = threading.Thread(target=ingest)
    writer.start()
    result = retention.prune(store_url, retention.Policy(older_than=30 * DAY), chunk=7)
    writer.join(120)
    assert not writer.is_alive()
    assert not errors
    assert result.runs == 2
    with enginemod.connection(store_url) as conn:
        ids = set(conn.execute(sa.select(models.compile_events.c.event_id)).scalars())
        kept = set(
            conn.execute(
                sa.select(models.compile_events.c.event_id).where(
                    models.compile_events.c.run_id.in_([r.run_id for r in built.kept])
                )
            ).scalars()
        )
    assert set(stored) <= ids
    assert len(kept) == 2 * 2 * len(recorded.events)


def test_two_prunes_at_once_drop_each_run_once(store_url, recorded):
    """The service's workers each run the schedule: two prunes together drop each run once."""
    build(store_url, recorded, old_passes=2, padding=0)
    results: list[retention.PruneResult] = []
    policy = retention.Policy(older_than=30 * DAY)
    threads = [threading.Thread(target=lambda: results.append(retention.prune(store_url, policy, chunk=5)))]
    threads.append(threading.Thread(target=lambda: results.append(retention.prune(store_url, policy, chunk=5))))
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 2
    assert sum(r.runs for r in results) == 2
    assert sum(r.events for r in results) == 2 * 2 * len(recorded.events)
    assert sum(r.skipped_runs for r in results) == 0


BAD = [
    ([], "one of the arguments --older-than --keep-runs is required"),
    (["--older-than", "30d", "--keep-runs", "3"], "not allowed with"),
    (["--older-than", "soon"], "cannot read the age"),
    (["--older-than=-3d"], "cannot read the age"),
    (["--older-than", "0d"], "more than zero"),
    (["--keep-runs", "-1"], "0 or more"),
    (["--keep-runs", "many"], "whole number"),
]


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a) or "none" for a, _ in BAD])
def test_bad_arguments_exit_2_and_change_nothing(sqlite_url, recorded, args, message, capsys):
    build(sqlite_url, recorded, old_passes=1, padding=0)
    path = sqlite_url.removeprefix("sqlite:///")
    enginemod.dispose_engines()
    with open(path, "rb") as f:
        content = f.read()
    with pytest.raises(SystemExit) as exit_:
        cli.main(["db", "prune", "--store", sqlite_url, *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    with open(path, "rb") as f:
        assert f.read() == content


def test_an_unknown_store_exits_2_and_creates_nothing(tmp_path, pg_available, capsys):
    missing = tmp_path / "nowhere" / "store.db"
    assert cli.main(["db", "prune", "--store", f"sqlite:///{missing}", "--older-than", "30d"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()
    assert cli.main(["db", "prune", "--store", "mysql://db/x", "--keep-runs", "1"]) == 2
    assert "unsupported store URL" in capsys.readouterr().err
    absent = "postgresql://postgres@127.0.0.1:5432/cachewatch_no_such_database"
    assert cli.main(["db", "prune", "--store", absent, "--keep-runs", "1"]) == 2
    assert "cachewatch_no_such_database" in capsys.readouterr().err
    empty = tmp_path / "empty.db"
    empty.touch()
    assert cli.main(["db", "prune", "--store", f"sqlite:///{empty}", "--keep-runs", "1"]) == 2
    assert "db upgrade" in capsys.readouterr().err
    assert empty.stat().st_size == 0


def test_the_service_prunes_on_its_schedule(store_url, recorded):
    built = build(store_url, recorded, old_passes=1, padding=0)
    app = create_app(
        ServerSettings(store=store_url, write_token=None, read_token=None, retention="30d", retention_interval=0.05)
    )
    schedule = app.state.retention
    with TestClient(app):
        deadline = time.monotonic() + 120  # a bound on a stuck thread, not a timing assumption
        while schedule.prunes < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert schedule.prunes >= 3
        assert schedule.failures == 0
    assert schedule.last is not None
    assert schedule.last.runs == 0
    with enginemod.connection(store_url) as conn:
        left = set(conn.execute(sa.select(models.runs.c.run_id)).scalars())
    assert left == {*(r.run_id for r in built.kept), retention.PRUNED_RUN_ID}
    assert not schedule._thread or not schedule._thread.is_alive()  # stopped with the service


@pytest.mark.parametrize(
    "value,problem",
    [("3x", "cannot read the retention"), ("runs:-1", "whole number"), ("runs:", "whole number"), ("0d", "retention")],
)
def test_a_bad_retention_setting_refuses_to_start(monkeypatch, value, problem):
    monkeypatch.setenv("CACHEWATCH_RETENTION", value)
    with pytest.raises(SettingsError, match="CACHEWATCH_RETENTION") as refused:
        load()
    assert problem in str(refused.value)
    monkeypatch.setenv("CACHEWATCH_RETENTION", "runs:100")
    monkeypatch.setenv("CACHEWATCH_RETENTION_INTERVAL", "soon")
    with pytest.raises(SettingsError, match="CACHEWATCH_RETENTION_INTERVAL"):
        load()


def test_retention_values():
    assert retention.parse_age("90m") == 5400
    assert retention.parse_age("2w") == 14 * DAY
    assert retention.parse_policy("runs:1000") == retention.Policy(keep_runs=1000)
    assert retention.parse_policy("texts:7d") == retention.Policy(older_than=7 * DAY, texts_only=True)
    assert load(retention="12h", retention_interval="6h").retention_interval == 6 * 3600
    assert load().retention_policy() is None
