"""The store: migrations give the models' schema, an outdated schema is refused, the
command line reads what the library wrote."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from typing import Any

import pytest
import scenarios
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

import cachewatch
from cachewatch import cli
from cachewatch.core.events import Cause, new_event_id
from cachewatch.payoff import cost_reads
from cachewatch.store import engine as enginemod
from cachewatch.store import models, rollup
from cachewatch.storms import diagnosis


def test_migrating_an_empty_store_gives_the_models_schema(store_url):
    enginemod.ensure_schema(store_url)
    assert enginemod.current_revision(store_url) == enginemod.head_revision()
    with enginemod.get_engine(store_url).connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, models.Base.metadata) == []


def test_outdated_schema_is_refused_with_the_fixing_command(store_url):
    enginemod.ensure_schema(store_url)
    with enginemod.get_engine(store_url).begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0000'"))
    enginemod.dispose_engines()
    with pytest.raises(enginemod.SchemaOutdated) as info:
        enginemod.ensure_schema(store_url)
    assert "cachewatch db upgrade --store" in str(info.value)


def test_foreign_tables_without_revision_are_refused(sqlite_url):
    with enginemod.get_engine(sqlite_url).begin() as conn:
        conn.execute(sa.text("CREATE TABLE something_else (id INTEGER)"))
    with pytest.raises(enginemod.SchemaOutdated):
        enginemod.ensure_schema(sqlite_url)


def test_db_upgrade_command(sqlite_url, capsys):
    assert cli.main(["db", "upgrade", "--store", sqlite_url]) == 0
    assert enginemod.head_revision() in capsys.readouterr().out


def test_bad_store_url_is_a_clear_error(capsys):
    assert cli.main(["report", "--store", "mysql://nowhere/db"]) == 2
    assert "unsupported store URL" in capsys.readouterr().err


def test_report_and_events_json(store_url, use_store, capsys):
    use_store(store_url)
    scenarios.batch_sizes()
    scenarios.static_values()
    assert cachewatch.flush(30)
    assert cli.main(["report", "--store", store_url, "--format", "json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    step = rows["train_step"]
    for field in (
        "name",
        "qualname",
        "module",
        "file",
        "line",
        "function_hash",
        "traces",
        "compiles",
        "recompiles",
        "causes",
        "compile_seconds",
        "calls",
        "run_seconds_est",
    ):
        assert field in step
    assert (step["traces"], step["compiles"], step["recompiles"], step["calls"]) == (3, 3, 2, 4)
    assert step["causes"] == {Cause.FIRST_CALL: 1, Cause.NEW_SHAPE: 2}
    assert step["file"] == scenarios.__file__
    assert step["compile_seconds"] > 0
    assert rows["repeat_add"]["causes"] == {Cause.FIRST_CALL: 1, Cause.NEW_STATIC_VALUE: 4}

    assert cli.main(["events", "--store", store_url, "--function", "train_step", "--format", "json"]) == 0
    events = json.loads(capsys.readouterr().out)
    assert [e["cause"] for e in events] == [Cause.FIRST_CALL, Cause.NEW_SHAPE, Cause.NEW_SHAPE]
    assert all(e["name"] == "train_step" and e["function_hash"] == step["function_hash"] for e in events)
    assert events[1]["diff"][0]["path"] == "batch['x']"

    assert cli.main(["report", "--store", store_url]) == 0
    table = capsys.readouterr().out
    assert "train_step" in table
    assert "new_shape=2" in table


def test_python_dash_m_is_the_same_program(sqlite_url):
    out = subprocess.run(
        [sys.executable, "-m", "cachewatch", "report", "--store", sqlite_url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "No compile events" in out


def test_library_and_cli_share_the_default_store(tmp_path):
    # No settings anywhere: the script and `cachewatch report` meet in one SQLite file.
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "JAX_PLATFORMS": "cpu",
    }
    script = (
        "import cachewatch, jax.numpy as jnp\nf = cachewatch.jit(lambda x: x + 1)\nf(jnp.ones(2)); f(jnp.ones(3))\n"
    )
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=120)
    out = subprocess.run(
        [sys.executable, "-m", "cachewatch", "report", "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    (row,) = [r for r in json.loads(out) if r["module"] != "jax.op_by_op"]
    assert row["compiles"] == 2
    assert row["causes"] == {Cause.FIRST_CALL: 1, Cause.NEW_SHAPE: 1}
    assert (tmp_path / "data" / "cachewatch" / "cachewatch.db").exists()


def _rollup_rows(url: str) -> list[tuple]:
    found = []
    with enginemod.connection(url) as conn:
        for table in (models.Base.metadata.tables[name] for name in rollup.TABLES):
            rows = conn.execute(sa.select(table).order_by(*table.primary_key.columns)).all()
            found += [(table.name, *(round(v, 9) if isinstance(v, float) else v for v in row)) for row in rows]
    return found


def test_rollup_counts_each_event_once_and_matches_a_recount(store_url, use_store):
    from cachewatch.record import current
    from cachewatch.store import writes

    use_store(store_url)
    scenarios.batch_sizes()
    scenarios.static_values()
    assert cachewatch.flush(30)
    kept = _rollup_rows(store_url)
    with enginemod.connection(store_url) as conn:
        stored = conn.execute(sa.select(sa.func.count()).select_from(models.compile_events)).scalar_one()
    assert sum(row[5] for row in kept if row[0] == "function_totals") == stored > 0
    assert sum(row[2] for row in kept if row[0] == "run_totals") == stored
    # A batch sent again (a retry, a spool replay) adds nothing.
    with enginemod.connection(store_url) as conn:
        events = [
            dict(r._mapping) for r in conn.execute(sa.select(*[c for c in models.compile_events.c if c.name != "id"]))
        ]
        assert (
            writes.write_rows(
                conn, writes.TableRows([current.run_info().as_dict()], [], [writes.event_row(e) for e in events], [])
            )
            == set()
        )
    assert _rollup_rows(store_url) == kept
    with enginemod.connection(store_url) as conn:
        rollup.rebuild(conn)
    assert _rollup_rows(store_url) == kept
    # A batch mixing stored and new events stores and counts only the new ones.
    fresh = [{**event, "event_id": new_event_id()} for event in events[:3]]
    mixed = events[3:] + fresh[:2] + events[:3] + fresh[2:]
    with enginemod.connection(store_url) as conn:
        assert writes.write_rows(
            conn, writes.TableRows([current.run_info().as_dict()], [], [writes.event_row(e) for e in mixed], [])
        ) == {event["event_id"] for event in fresh}
    grown = _rollup_rows(store_url)
    assert sum(row[2] for row in grown if row[0] == "run_totals") == stored + 3
    with enginemod.connection(store_url) as conn:
        rollup.rebuild(conn)
    assert _rollup_rows(store_url) == grown


@pytest.mark.parametrize("revision", ["0002", "0003", "0030"])
def test_upgrade_fills_the_rollup_from_existing_events(store_url, use_store, revision):
    use_store(store_url)
    scenarios.dtype_change()
    scenarios.stale_global()
    assert cachewatch.flush(30)
    expected = _rollup_rows(store_url)
    enginemod.dispose_engines()
    from alembic import command

    # From before any totals (0002: rebuilt from the events), and from before the
    # store-wide ones (0003: summed from the per-function totals), and from before the
    # hourly totals counted recompiles (0030: refilled from the events).
    command.downgrade(enginemod.alembic_config(store_url), revision)
    enginemod.dispose_engines()
    enginemod.upgrade(store_url)
    assert _rollup_rows(store_url) == expected
    assert expected
    assert {row[0] for row in expected} >= set(rollup.TABLES) - {"function_call_totals", "run_time_buckets"}
    assert rollup.cost_bucket(0.0) == 0
    assert rollup.cost_bucket(0.005) == 0
    assert rollup.cost_bucket(1e9) == 15


def test_an_upgrade_that_changes_the_judging_finds_every_runs_bursts_again(store_url, use_store):
    """A store's kept bursts were judged by the rule of the cachewatch that wrote them;
    the migration that comes with a new rule marks every run stale, so the next reader
    judges its bursts again instead of showing the old verdicts."""
    use_store(store_url)
    scenarios.dtype_change()
    assert cachewatch.flush(30)
    with enginemod.connection(store_url) as conn:
        diagnosis.detect_storms(conn)  # settles: the run's bursts are kept, nothing stale
        assert conn.execute(sa.select(sa.func.count()).select_from(models.stale_storms)).scalar() == 0
        runs = set(conn.execute(sa.select(models.runs.c.run_id)).scalars())
    enginemod.dispose_engines()
    from alembic import command

    command.downgrade(enginemod.alembic_config(store_url), "0033")
    enginemod.dispose_engines()
    enginemod.upgrade(store_url)
    with enginemod.connection(store_url) as conn:
        assert set(conn.execute(sa.select(models.stale_storms.c.run_id)).scalars()) == runs


def test_run_time_estimate_only_grows_and_values_early_calls(sqlite_url):
    enginemod.ensure_schema(sqlite_url)
    with enginemod.connection(sqlite_url) as conn:
        conn.execute(sa.insert(models.runs), [{"run_id": "r" * 32, "started_at": 0.0, "devices": []}])
        conn.execute(
            sa.insert(models.functions), [{"function_hash": "f", "name": "f", "qualname": "f", "first_seen": 0.0}]
        )

    def write(timestamp, calls, sampled, seconds):
        with enginemod.connection(sqlite_url) as conn:
            rollup.add_call_stats(
                conn,
                [
                    {
                        "run_id": "r" * 32,
                        "function_hash": "f",
                        "timestamp": timestamp,
                        "calls": calls,
                        "sampled_calls": sampled,
                        "sampled_seconds": seconds,
                    }
                ],
            )
            return conn.execute(sa.select(models.function_call_totals)).one()

    first = write(1.0, 100, 0, 0.0)  # no sample yet: the calls wait to be valued
    assert (first.calls, first.run_seconds, first.unvalued_calls) == (100, 0.0, 100)
    second = write(2.0, 10, 2, 0.2)  # mean 0.1 s: these 10 calls and the 100 waiting ones
    # Rows written before run times were kept in buckets: their samples at their mean
    # (within the bucket's 4.5%).
    assert second.unvalued_calls == 0
    assert second.run_seconds == pytest.approx(110 * 0.1, rel=0.05)
    # Eight faster samples: the run time per call (the median of the ten) drops to about
    # 0.01 s, and the estimate still grows.
    third = write(3.0, 10, 8, 0.08)
    assert third.run_seconds_per_call == pytest.approx(0.01, rel=0.05)
    assert third.run_seconds == pytest.approx(second.run_seconds + 10 * third.run_seconds_per_call)
    assert third.run_seconds > second.run_seconds
    assert (third.calls, third.sampled_calls) == (120, 10)


def test_event_ids_fit_the_column_and_grow_with_time():
    before = time.time_ns() // 1000
    ids = [new_event_id() for _ in range(2000)]
    after = time.time_ns() // 1000
    assert len(set(ids)) == len(ids)
    # 32 lowercase hex digits: the width of the event_id column, and one spelling per id.
    assert [i for i in ids if not re.fullmatch(r"[0-9a-f]{32}", i)] == []
    # The prefix is the microsecond the id was made at; the rest is random, distinct per id.
    stamps = [int(i[:14], 16) for i in ids]
    assert before <= stamps[0]
    assert stamps[-1] <= after
    assert len({i[14:] for i in ids}) == len(ids)
    # The time prefix never goes back, so the unique index grows at its end.
    prefixes = [i[:14] for i in ids]
    assert prefixes == sorted(prefixes)


def test_a_page_of_functions_is_the_same_in_sql_as_from_the_whole_report(store_url, use_store):
    # Over the whole store a listing pages in SQL over the kept totals; with a filter it
    # cuts the full report. Both must show the same functions in the same order.
    from cachewatch.store import columns, listings, queries

    use_store(store_url, sample_every=1)
    for scenario in (
        scenarios.batch_sizes,
        scenarios.static_values,
        scenarios.dtype_change,
        scenarios.weak_type_flip,
        scenarios.lambda_in_loop,
        scenarios.stale_global,
        scenarios.nested_jit,
    ):
        scenario()
    assert cachewatch.flush(30)
    whole = columns.Filters()
    # The same view, through the events instead of the totals: a time range holding everything.
    ranged = columns.Filters(since=0.0, until=4e9)
    with enginemod.connection(store_url) as conn:
        everything = len(queries.function_report(conn, whole))
        assert everything >= 7
        for key in listings.SORT_KEYS:
            for sort in (key, "-" + key):
                for q, cause in ((None, None), ("o", None), (None, Cause.NEW_SHAPE)):
                    listed: dict[str, Any] = dict(sort=sort, q=q, cause=cause)
                    in_sql, total = listings.function_page(conn, whole, offset=0, limit=1000, **listed)
                    cut, cut_total = listings.function_page(conn, ranged, offset=0, limit=1000, **listed)
                    assert total == cut_total, listed
                    assert [r["function_hash"] for r in in_sql] == [r["function_hash"] for r in cut], listed
                    assert in_sql == cut, listed
                    for view in (whole, ranged):  # each page's rows, the calls read for that page alone
                        pages = [
                            listings.function_page(conn, view, offset=o, limit=3, **listed)[0]
                            for o in range(0, total, 3)
                        ]
                        assert [r for page in pages for r in page] == in_sql, listed
        with pytest.raises(ValueError):
            listings.function_page(conn, whole, offset=0, limit=10, sort="-event_id")


def test_pages_of_runs_in_sql_make_up_the_whole_listing(store_url):
    # The dashboard pages runs with an offset, the API with a cursor: both in SQL, newest
    # first, ties broken by run id the same way.
    from cachewatch.store import columns, listings

    enginemod.ensure_schema(store_url)
    started = [100.0, 200.0, 200.0, 300.0, 300.0, 300.0, 400.0]
    with enginemod.connection(store_url) as conn:
        conn.execute(
            sa.insert(models.runs),
            [
                {"run_id": f"{i:032x}", "run_name": f"run {i}", "started_at": t, "devices": []}
                for i, t in enumerate(started)
            ],
        )
        whole = listings.run_rows(conn, columns.Filters(), limit=100)
        assert [r["started_at"] for r in whole] == sorted(started, reverse=True)
        by_offset = [listings.run_rows(conn, columns.Filters(), limit=3, offset=o) for o in range(0, len(started), 3)]
        assert [r for page in by_offset for r in page] == whole
        by_cursor, after = [], None
        while True:
            page = listings.run_rows(conn, columns.Filters(), limit=3, after=after)
            if not page:
                break
            by_cursor += page
            after = (page[-1]["started_at"], page[-1]["run_id"])
        assert by_cursor == whole
        assert all(r["events"] == 0 and r["compiles"] == 0 for r in whole)


def test_json_an_older_writer_left_in_sqlite_text_is_still_read(sqlite_url):
    import math

    with enginemod.connection(sqlite_url) as conn:
        conn.execute(
            sa.insert(models.runs), [{"run_id": "r1", "started_at": 1.0, "jax_version": "0.10.2", "devices": []}]
        )
    # The standard library's encoder wrote NaN and integers of any size; orjson refuses both.
    with enginemod.connection(sqlite_url) as conn:
        conn.execute(
            sa.text("UPDATE runs SET devices = :text"), {"text": '[{"id": NaN, "big": 123456789012345678901234}]'}
        )
        (devices,) = conn.execute(sa.select(models.runs.c.devices)).one()
    assert math.isnan(devices[0]["id"])
    assert devices[0]["big"] == 123456789012345678901234
    assert enginemod.json_loads(b'{"a": [1, 2.5, null]}') == {"a": [1, 2.5, None]}


def test_reads_by_id_cross_the_in_list_limit_without_losing_a_row(store_url):
    # Reads by a list of ids split it into IN (...) lists of columns.IN_CHUNK values:
    # a list one past two chunks comes back whole, each row once.
    from cachewatch.store import columns

    assert [len(c) for c in columns.in_chunks(list(range(2 * columns.IN_CHUNK + 1)))] == [500, 500, 1]
    assert list(columns.in_chunks([])) == []
    enginemod.ensure_schema(store_url)
    count = 2 * columns.IN_CHUNK + 1
    runs: list[dict[str, Any]] = [
        {"run_id": f"{i:032x}", "started_at": float(i), "devices": [], "jax_version": f"0.{i}", "jaxlib_version": "x"}
        for i in range(count)
    ]
    with enginemod.connection(store_url) as conn:
        conn.execute(sa.insert(models.runs), runs)
        found = cost_reads.run_versions(conn, [r["run_id"] for r in runs] + [runs[0]["run_id"]])
    assert len(found) == count
    assert found == {r["run_id"]: (r["jax_version"], "x") for r in runs}
