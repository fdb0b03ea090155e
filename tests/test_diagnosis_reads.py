"""The whole store's diagnosis reads: on PostgreSQL the compile-time regressions are found
in SQL (medians per signature and run, consecutive runs paired), and they must be what
comparing every compile in Python finds."""

from __future__ import annotations

import random
from typing import Any

import pytest
import sqlalchemy as sa

from cachewatch.analysis import diagnosis
from cachewatch.core.events import Cause
from cachewatch.store import engine as enginemod
from cachewatch.store import evidence, models


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


def _key(found: evidence.SlowerCompile) -> tuple[str, str, str, str]:
    return (found.function_hash, found.signature_hash, found.run_before, found.run_after)


@pytest.mark.postgres
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_regressions_found_in_sql_are_those_of_every_compile(pg_url, seed):
    _fill(pg_url, seed)
    with enginemod.connection(pg_url) as conn:
        assert conn.dialect.name == "postgresql"
        for factor, least in ((1.5, 0.05), (1.2, 0.0), (3.0, 0.01)):
            in_sql = sorted(evidence.slower_compiles(conn, factor, least), key=_key)
            in_python = sorted(evidence.slower_compiles_of(evidence.uncached_compiles(conn), factor, least), key=_key)
            assert [_key(s) for s in in_sql] == [_key(s) for s in in_python]
            for a, b in zip(in_sql, in_python, strict=True):
                assert a.seconds_before == pytest.approx(b.seconds_before)
                assert a.seconds_after == pytest.approx(b.seconds_after)
        assert evidence.slower_compiles(conn, 1.2, 0.0), "the filled store has regressions to compare"
        found = diagnosis.compile_regressions(conn, 1.2, 0.0)
    assert all(r.jax_before.startswith("0.") and r.jax_after.startswith("0.") for r in found)
    assert all(r.ratio is not None and r.ratio >= 1.2 for r in found)
