"""Many processes at once: 4 processes (started by fork and by spawn) x 8 threads record
into one SQLite file, into PostgreSQL, and through the service; every event is stored
exactly once and every process's final flush says so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import reliability  # noqa: E402  (the scenario the benchmark measures, here checked)
import serverkit as kit  # noqa: E402


@pytest.mark.parametrize("start", ["fork", "spawn"])
@pytest.mark.parametrize("kind", ["sqlite", "postgresql", "service"])
def test_every_event_stored_exactly_once(kind, start, tmp_path, request):
    if kind == "sqlite":
        store = reader = f"sqlite:///{tmp_path / 'store.db'}"
        context = None
    else:
        reader = request.getfixturevalue("pg_url")
        store = reader
        context = kit.serve_process(reader, tmp_path, reliability_env(), workers=2) if kind == "service" else None
    if context is not None:
        with context as url:
            result = reliability.run_writers(url, reader, start, processes=4, threads=8, events=60)
    else:
        result = reliability.run_writers(store, reader, start, processes=4, threads=8, events=60)
    assert result["processes"] == 4
    assert result["produced"] == 4 * 8 * 60
    assert result["stored"] == result["produced"]
    assert result["missing"] == 0
    assert result["duplicates"] == 0
    assert result["dropped"] == 0
    assert result["all_flushed"]


def reliability_env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("CACHEWATCH_", "PROMETHEUS_"))}
    env["JAX_PLATFORMS"] = "cpu"
    return env
