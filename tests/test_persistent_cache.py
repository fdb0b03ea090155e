"""JAX's persistent compilation cache, explained: a hit across two processes, and a miss
after an XLA flag changed, named as the part of the cache key that changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from cachewatch_server.main import create_app
from cachewatch_server.settings import ServerSettings
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from cachewatch.core.events import CACHE_KEY_PARTS, explain_cache_miss
from cachewatch.store import engine as enginemod
from cachewatch.store import models

WORKER = Path(__file__).with_name("cache_worker.py")


def run_process(store: str, cache_dir: Path, **env: str) -> None:
    full = {**os.environ, "JAX_PLATFORMS": "cpu", **env}
    full.pop("CACHEWATCH_RAISE_INTERNAL_ERRORS", None)
    proc = subprocess.run(
        [sys.executable, str(WORKER), store, str(cache_dir)], env=full, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def cache_store(tmp_path_factory) -> str:
    work = tmp_path_factory.mktemp("pcache")
    store = f"sqlite:///{work / 'store.db'}"
    run_process(store, work / "cache")  # compiles, writes the entry
    run_process(store, work / "cache")  # same key: a hit
    run_process(store, work / "cache", XLA_FLAGS="--xla_cpu_enable_fast_math=true")  # a miss
    return store


def cli_events(store: str) -> list[dict]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "cachewatch",
            "events",
            "--store",
            store,
            "--function",
            "cached_step",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def test_hit_across_processes_and_miss_after_an_xla_flag_explained(cache_store):
    rows = [r for r in cli_events(cache_store) if r["compiled"] or r["persistent_cache_hit"] is not None]
    assert [r["persistent_cache_hit"] for r in rows] == [False, True, False]
    first, hit, miss = rows
    assert first["cache_miss"] is None  # nothing earlier to compare with
    assert hit["cache_miss"] is None
    assert hit["cache_key"] == first["cache_key"]
    assert miss["cache_miss"]["earlier_run_id"] == hit["run_id"]
    assert miss["cache_miss"]["earlier_hit"] is True
    assert "XLA flags" in miss["cache_miss"]["changed"]
    assert "computation" not in miss["cache_miss"]["changed"]
    assert "jax_lib version" not in miss["cache_miss"]["changed"]
    assert "xla_flags '' -> '--xla_cpu_enable_fast_math=true'" in miss["cache_miss"]["explanation"]

    table = subprocess.run(
        [sys.executable, "-m", "cachewatch", "events", "--store", cache_store, "--function", "cached_step"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Persistent cache: hit." in table
    assert "the cache key changed in" in table


def test_api_function_page_and_metrics_show_it(cache_store):
    with TestClient(create_app(ServerSettings(store=cache_store))) as client:
        functions = client.get("/api/v1/functions", params={"q": "cached_step"}).json()["items"]
        function_hash = functions[0]["function_hash"]
        items = client.get(f"/api/v1/functions/{function_hash}/events").json()["items"]
        misses = [e for e in items if e["cache_miss"]]
        assert len(misses) == 1
        assert "XLA flags" in misses[0]["cache_miss"]["changed"]
        page = client.get(f"/functions/{function_hash}").text
        assert "persistent cache hit" in page
        assert "the cache key changed in the XLA flags" in page
        families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
        requests = {
            s.labels["result"]: s.value
            for s in families["cachewatch_persistent_cache_requests"].samples
            if s.name.endswith("_total")
        }
    # Every compile that asked the cache is counted: cached_step's (one hit, two misses) and
    # those of the eager code around it (jnp.ones), recorded as op-by-op compiles.
    e = models.compile_events
    with enginemod.connection(cache_store) as conn:
        stored: dict[bool, int] = dict(
            conn.execute(
                sa.select(e.c.persistent_cache_hit, sa.func.count())
                .where(e.c.persistent_cache_hit.is_not(None))
                .group_by(e.c.persistent_cache_hit)
            ).all()
        )
    assert requests == {"hit": float(stored.get(True, 0)), "miss": float(stored.get(False, 0))}
    assert requests["hit"] >= 1
    assert requests["miss"] >= 2


def test_each_changed_part_is_named():
    base = {
        "computation": "a",
        "jax_lib version": "b",
        "backend version": "c",
        "accelerator_config": "d",
        "XLA flags": "e",
        "compile_options": "f",
        "jax": "0.9",
        "jaxlib": "0.9",
        "backend": "cpu",
        "device_kind": "cpu",
        "xla_flags": "",
    }
    cases = {
        "computation": "the program",
        "jax_lib version": "the jax/jaxlib version",
        "backend version": "the backend",
        "accelerator_config": "the device kind",
        "compile_options": "the compile options",
    }
    for part, words in cases.items():
        found = explain_cache_miss(base, {**base, part: "z"}, earlier_run="r" * 32, earlier_hit=True)
        assert found["changed"] == [part]
        assert words in found["explanation"]
    upgraded = explain_cache_miss(
        base, {**base, "jax_lib version": "z", "jax": "0.10", "jaxlib": "0.10"}, earlier_run="r" * 32, earlier_hit=True
    )
    assert "jax '0.9' -> '0.10'" in upgraded["explanation"]
    same = explain_cache_miss(base, dict(base), earlier_run="r" * 32, earlier_hit=False)
    assert same["changed"] == []
    assert "same key" in same["explanation"]


def test_a_module_that_changed_in_its_names_only_is_told_from_a_changed_program():
    base = {part: "a" for part, _ in CACHE_KEY_PARTS}
    moved = {**base, "computation": "b"}
    renamed = explain_cache_miss(
        base, moved, earlier_run="r" * 32, earlier_hit=True, programs=(("p1", "m1"), ("p1", "m2"))
    )
    assert renamed["changed"] == ["computation"]
    assert "differs in its names only" in renamed["explanation"]
    assert "private symbols renumbered" in renamed["explanation"]
    changed = explain_cache_miss(
        base, moved, earlier_run="r" * 32, earlier_hit=True, programs=(("p1", "m1"), ("p2", "m2"))
    )
    assert "the program itself changed" in changed["explanation"]
    assert "names only" not in changed["explanation"]
    unknown = explain_cache_miss(base, moved, earlier_run="r" * 32, earlier_hit=True, programs=None)
    assert unknown["explanation"].endswith("the program (the lowered computation).")


def test_a_cache_directory_that_cannot_be_made_is_a_clear_error(tmp_path):
    import cachewatch

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(cachewatch.ConfigError, match="persistent_cache_dir"):
        cachewatch.configure(persistent_cache_dir=str(blocker / "cache"))
    cachewatch.configure(run_name="after-a-refused-setting")  # the refused directory was not kept
    cachewatch.configure(run_name="")
