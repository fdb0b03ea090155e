"""A persistent-cache miss whose lowered module differs from the earlier run's in its
names only is explained down to those names: private symbols renumbered (jax#38828) or
a pointer baked into a symbol. Each lowered module's StableHLO text is kept under the
module's own fingerprint, so both are in the store to compare."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
import sqlalchemy as sa

import cachewatch
from cachewatch import cli
from cachewatch.core.events import CACHE_KEY_PARTS, explain_cache_miss
from cachewatch.core.lowered import NameChange, diff_modules
from cachewatch.store import engine as enginemod
from cachewatch.store import models, queries, retention

WORKER = Path(__file__).with_name("renamed_worker.py")
BEFORE, AFTER = "0x7f3a5c001230", "0x7f3a5c00a8f0"


def lowered_text() -> str:
    """A real lowered module with numbered private symbols: jnp.where and jnp.clip lower
    as private functions, and a second signature of each gets MLIR's uniquing number."""

    def f(x):
        y = jnp.clip(jnp.where(x > 0, x, 0.0), 0.0, 1.0)
        w = jnp.where(y[:2] > 0.5, y[:2], 2.0)
        return y.sum() + w.sum() + jnp.clip(x[:3], -1.0, 1.0).sum()

    return jax.jit(f).lower(jnp.ones(4)).as_text(debug_info=False)


def test_renumbered_private_symbols_are_named():
    text = lowered_text()
    # Numbered as MLIR's uniquing counter, shared by every name of the module, does.
    assert "@_where_0" in text
    assert "@clip_1" in text
    # jax#38828: a helper lowered and then dropped moves the counter by one.
    renumbered = text.replace("@clip_1", "@clip_2").replace("@_where_0", "@_where_1")
    found = diff_modules(text, renumbered)
    assert found.names_only
    assert found.names == (
        NameChange("@_where_0", "@_where_1", "renumbered"),
        NameChange("@clip_1", "@clip_2", "renumbered"),
    )
    assert found.describe() == "private symbols renumbered: @_where_0 -> @_where_1, @clip_1 -> @clip_2"
    # A symbol that gains a number counts as renumbered too.
    assert diff_modules(text, text.replace("@clip(", "@clip_7(")).names[0].kind == "renumbered"


def test_a_pointer_in_a_name_or_in_the_text_is_told_and_a_long_list_is_cut():
    text = lowered_text()
    module = text.replace("@clip_1", "@callback_0x7f3a5c001230")
    moved = diff_modules(module, module.replace("0x7f3a5c001230", "0x7f3a5c00a8f0"))
    assert moved.describe() == "a pointer baked into the symbol @callback_0x7f3a5c001230 -> @callback_0x7f3a5c00a8f0"
    # custom_partitioning once wrote id() into the custom call's backend_config.
    call = 'stablehlo.custom_call @CustomSPMDPartitioning(%arg0) {backend_config = "140234567890123"}'
    assert diff_modules(call, call.replace("140234567890123", "140299887766554")).describe() == (
        "a pointer baked into the module's text 140234567890123 -> 140299887766554"
    )
    many = "\n".join(f"call @f_{i}(%x)" for i in range(6))
    said = diff_modules(many, many.replace("@f_", "@f_1")).describe()
    assert said.startswith("private symbols renumbered: @f_0 -> @f_10, @f_1 -> @f_11, @f_2 -> @f_12 and 3 more")
    assert diff_modules(many, many.replace("@f_0", "@g")).describe() == "symbols renamed: @f_0 -> @g"


def test_a_module_that_differs_beyond_its_names_says_where():
    text = lowered_text()
    changed = text.replace("stablehlo.maximum", "stablehlo.minimum", 1).replace("@clip_1", "@clip_2")
    found = diff_modules(text, changed)
    assert not found.names_only
    assert found.lines_differing == 1
    assert found.describe().startswith("1 line differs beyond the names, the first `%2 = stablehlo.maximum")
    same = diff_modules(text, text)
    assert (same.names, same.lines_differing, same.describe()) == ((), 0, "")


def test_the_explanation_names_what_differs_when_both_modules_are_kept():
    base = {part: "a" for part, _ in CACHE_KEY_PARTS}
    text = lowered_text()
    # The same optimised program from two lowered modules, with or without their texts.
    explain = functools.partial(
        explain_cache_miss,
        base,
        {**base, "computation": "b"},
        earlier_run="r" * 32,
        earlier_hit=True,
        programs=(("p1", "m1"), ("p1", "m2")),
    )
    found = explain(module_diff=diff_modules(text, text.replace("@clip_1", "@clip_2")))
    assert found["changed"] == ["computation"]
    assert (
        "the same optimised program from a lowered module that differs in its names only "
        "(private symbols renumbered: @clip_1 -> @clip_2), and the cache keys on the module's text"
    ) in found["explanation"]
    # Without the texts the fingerprints still tell the kind of change, and say how to name it.
    blind = explain()
    assert "differs in its names only, such as" in blind["explanation"]
    assert "CACHEWATCH_PROGRAM_TEXTS" in blind["explanation"]


def test_one_run_keeps_each_lowered_module_of_one_program(sqlite_url, use_store, capsys):
    use_store(sqlite_url, program_texts="stablehlo")

    def helper_named(name: str):
        def helper(x):
            return jnp.where(x > 0, x, 0.0) * 3

        helper.__name__ = name
        return jax.jit(helper)

    def step(x, name):
        return helper_named(name)(x) + 1

    jitted = cachewatch.jit(step, static_argnames="name")
    for name in ("helper_a", "helper_b"):
        jitted(jnp.ones(8), name=name)
    assert cachewatch.flush(30)
    with enginemod.connection(sqlite_url) as conn:
        rows = [r for r in queries.list_events(conn) if r["name"] == "step" and r["compiled"]]
    assert len(rows) == 2
    assert rows[0]["program_fingerprint"] == rows[1]["program_fingerprint"]
    for row, name in zip(rows, ("helper_a", "helper_b"), strict=True):
        assert cli.main(["program", row["event_id"], "--store", sqlite_url, "--format", "stablehlo"]) == 0
        assert f"call @{name}(" in capsys.readouterr().out


# ----------------------------------------------------- two real processes


def run_process(store: str, cache_dir: Path, address: str) -> None:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("CACHEWATCH_RAISE_INTERNAL_ERRORS", None)
    proc = subprocess.run(
        [sys.executable, str(WORKER), store, str(cache_dir), address],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def renamed_store(tmp_path_factory) -> str:
    work = tmp_path_factory.mktemp("renamed")
    store = f"sqlite:///{work / 'store.db'}"
    run_process(store, work / "cache", BEFORE)  # compiles, writes the entry
    run_process(store, work / "cache", AFTER)  # the helper's name differs: another key
    return store


def events_of(store: str) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-m", "cachewatch", "events", "--store", store, "--function", "renamed_step"]
        + ["--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [r for r in json.loads(out.stdout) if r["compiled"]]


def test_a_pointer_baked_into_a_helper_name_is_named_in_the_miss(renamed_store, capsys):
    first, second = events_of(renamed_store)
    assert [first["persistent_cache_hit"], second["persistent_cache_hit"]] == [False, False]
    assert first["program_fingerprint"] == second["program_fingerprint"]  # XLA made one program
    assert first["lowered_fingerprint"] != second["lowered_fingerprint"]
    miss = second["cache_miss"]
    assert miss["earlier_run_id"] == first["run_id"]
    assert miss["changed"] == ["computation"]
    assert (
        "a lowered module that differs in its names only (a pointer baked into the symbol "
        f"@callback_{BEFORE} -> @callback_{AFTER})"
    ) in miss["explanation"]
    # Each compile's own module, not the first one of its optimised program.
    for event, address in ((first, BEFORE), (second, AFTER)):
        assert cli.main(["program", event["event_id"], "--store", renamed_store, "--format", "stablehlo"]) == 0
        module = capsys.readouterr().out
        assert f"@callback_{address}" in module


def test_pruning_a_run_drops_its_module_text(renamed_store, tmp_path):
    store = f"sqlite:///{tmp_path / 'copy.db'}"
    Path(store.removeprefix("sqlite:///")).write_bytes(Path(renamed_store.removeprefix("sqlite:///")).read_bytes())
    first, second = events_of(store)
    p = models.programs

    def kept() -> set[str]:
        with enginemod.connection(store) as conn:
            return set(conn.execute(sa.select(p.c.fingerprint).where(p.c.stablehlo.is_not(None))).scalars())

    assert {first["lowered_fingerprint"], second["lowered_fingerprint"]} <= kept()
    result = retention.prune(store, retention.Policy(keep_runs=1), now=second["timestamp"] + 3600)
    assert result.runs == 1
    assert first["lowered_fingerprint"] not in kept()
    assert second["lowered_fingerprint"] in kept()
