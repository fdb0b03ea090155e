"""Shared fixtures: real SQLite and PostgreSQL stores, a fresh run per test, and a
guard that fails any test during which cachewatch swallowed an internal error."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

# cachewatch's own bugs must fail its tests, not be swallowed.
os.environ["CACHEWATCH_RAISE_INTERNAL_ERRORS"] = "1"
# Each pytest process (each xdist worker too: they inherit the controller's environment)
# spools and keeps its default store apart from the others'.
_MARK = "CACHEWATCH_TEST_PROCESS"
if os.environ.get(_MARK) != str(os.getpid()):
    os.environ[_MARK] = str(os.getpid())
    os.environ["CACHEWATCH_SPOOL_DIR"] = os.path.join("/tmp", f"cachewatch-test-spool-{os.getpid()}")
    # The default store of whatever a test runs without a store of its own: never the
    # machine's (~/.local/share/cachewatch), which another checkout may hold at another
    # schema revision (a write there is refused and spooled, and a flush reports it).
    os.environ["XDG_DATA_HOME"] = os.path.join("/tmp", f"cachewatch-test-data-{os.getpid()}")

import pytest
import sqlalchemy as sa

import cachewatch
from cachewatch.capture import guards
from cachewatch.core import _guard
from cachewatch.explain import causes
from cachewatch.record import current, recorder
from cachewatch.store import engine as enginemod

PG_ADMIN_URL = os.environ.get("CACHEWATCH_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def _pg_admin_engine() -> sa.Engine:
    # No pool: each database made or dropped would otherwise leave an idle connection
    # open until the engine is collected, and a whole suite of them reaches the
    # server's max_connections.
    return sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)


@pytest.fixture(scope="session")
def pg_available() -> None:
    try:
        with _pg_admin_engine().connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except Exception as exc:  # the suite needs the real server; say so plainly
        pytest.fail(f"PostgreSQL is not reachable at {PG_ADMIN_URL}: {exc}")


def create_pg_database() -> str:
    name = f"cachewatch_test_{uuid.uuid4().hex[:12]}"
    with _pg_admin_engine().connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def drop_pg_database(url: str) -> None:
    enginemod.dispose_engines()
    name = url.rsplit("/", 1)[1]
    with _pg_admin_engine().connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def pg_url(pg_available) -> Iterator[str]:
    url = create_pg_database()
    yield url
    drop_pg_database(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path) -> Iterator[str]:
    """A fresh, empty store of each kind."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
    else:
        request.getfixturevalue("pg_available")
        url = create_pg_database()
        yield url
        drop_pg_database(url)


@pytest.fixture
def use_store(request):
    """Point the library at a store for this test, in a run of its own."""

    def _use(url: str, **settings) -> str:
        current.reset_configuration()
        current.configure(store=url, **settings)
        new_run()
        return url

    yield _use
    recorder.flush(10)
    current.reset_configuration()


def new_run() -> None:
    """Start a fresh run: a new run id and no memory of earlier traces."""
    recorder.flush(10)
    causes.reset()
    guards.reset()
    current._new_run()


@pytest.fixture(autouse=True)
def no_internal_errors():
    before = _guard.internal_error_count()
    yield
    cachewatch.flush(10)
    errors = _guard.internal_errors()
    assert _guard.internal_error_count() == before, f"cachewatch swallowed internal errors: {errors}"


@pytest.fixture(params=["c", "python"])
def hot_path(request, monkeypatch):
    """Run a test with the C cache-hit path of cachewatch.jit and again with its
    pure-Python twin (which subprocesses get through CACHEWATCH_PURE_PYTHON)."""
    import sys

    jitmod = sys.modules["cachewatch.capture.jit"]  # the module; `cachewatch.jit` the name is the function
    if request.param == "python":
        monkeypatch.setattr(jitmod, "_Watched", None)
        monkeypatch.setenv("CACHEWATCH_PURE_PYTHON", "1")
    else:
        assert jitmod._Watched is not None, "cachewatch.capture._fastcall was not built: pip install needs a C compiler"
    return request.param


class WallClock:
    """The process's wall clock (``time.time`` and ``time.time_ns``), moved forward by a
    test instead of sleeping. Everything stamped after :meth:`advance` (compile events,
    call statistics, the writer's collections) reads that much later, as if the program
    had gone on for that long, and nothing waits for it. Real time still passes
    underneath: during the test the clock never goes back. Timers and timeouts read
    ``time.monotonic``, which is left alone."""

    def __init__(self) -> None:
        self.offset = 0.0
        self._time = time.time
        self._time_ns = time.time_ns

    def advance(self, seconds: float) -> None:
        assert seconds >= 0, "the wall clock only moves forward"
        self.offset += seconds

    def time(self) -> float:
        return self._time() + self.offset

    def time_ns(self) -> int:
        return self._time_ns() + round(self.offset * 1e9)


@pytest.fixture
def wall_clock(monkeypatch) -> WallClock:
    """A wall clock the test moves forward (see :class:`WallClock`), for this test only."""
    clock = WallClock()
    monkeypatch.setattr(time, "time", clock.time)
    monkeypatch.setattr(time, "time_ns", clock.time_ns)
    return clock
