"""First use: many processes opening one empty store at the same moment create its
schema once and all go on; SchemaOutdated only for a schema that really is older."""

from __future__ import annotations

import multiprocessing
import traceback

import pytest
import sqlalchemy as sa

from cachewatch.store import engine as enginemod

PROCESSES = 8


def _open(url: str, barrier, results) -> None:
    try:
        barrier.wait(60)
        enginemod.ensure_schema(url)
        with enginemod.connection(url) as conn:
            conn.execute(sa.text("SELECT count(*) FROM compile_events")).scalar_one()
        results.put("ok")
    except BaseException:
        results.put(traceback.format_exc())


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_processes_opening_an_empty_store_at_once_create_it_once(store_url, start_method):
    ctx = multiprocessing.get_context(start_method)
    barrier, results = ctx.Barrier(PROCESSES), ctx.Queue()
    enginemod.dispose_engines()  # a forked child must not inherit a connection
    procs = [ctx.Process(target=_open, args=(store_url, barrier, results)) for _ in range(PROCESSES)]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=180) for _ in procs]
    for proc in procs:
        proc.join(30)
    assert outcomes == ["ok"] * PROCESSES, "\n".join(o for o in outcomes if o != "ok")
    with enginemod.get_engine(store_url).connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all() == [
            enginemod.head_revision()
        ]


def test_an_older_schema_is_still_refused(store_url):
    enginemod.upgrade(store_url, "0004")
    enginemod.dispose_engines()
    with pytest.raises(enginemod.SchemaOutdated, match="0004.*cachewatch db upgrade"):
        enginemod.ensure_schema(store_url)
    enginemod.upgrade(store_url)
    enginemod.ensure_schema(store_url)
