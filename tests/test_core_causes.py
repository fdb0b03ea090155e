"""Every classic pitfall gets the right cause, diff and count, matching JAX's own log."""

from __future__ import annotations

import os

import pytest
import scenarios

from cachewatch.core.events import Cause, DiffEntry
from cachewatch.store import engine as enginemod
from cachewatch.store import queries
from cachewatch.store.columns import EventRow

# Every test here runs with the C hot path and with its pure-Python twin.
pytestmark = pytest.mark.usefixtures("hot_path")


def stored_events(url: str, names: list[str]) -> list[EventRow]:
    with enginemod.connection(url) as conn:
        rows = queries.list_events(conn, limit=10_000)
    return [r for r in rows if r["name"] in names]


def run_scenario(name: str, url: str, use_store) -> tuple[list[EventRow], list[str]]:
    use_store(url)
    with scenarios.jax_compile_log() as messages:
        names = scenarios.ALL[name]()
    import cachewatch

    assert cachewatch.flush(30)
    return stored_events(url, names), messages


@pytest.mark.parametrize("name", list(scenarios.ALL))
def test_scenario_counts_and_causes(name, sqlite_url, use_store):
    events, messages = run_scenario(name, sqlite_url, use_store)
    compiled = [(e["name"], e["cause"]) for e in events if e["compiled"]]
    expected = scenarios.EXPECTED_COMPILES[name]
    if name == "threads":
        assert sorted(compiled) == sorted(expected)
    else:
        assert compiled == expected
    for function_name in {n for n, _ in expected} | {e["name"] for e in events}:
        ours = sum(1 for e in events if e["compiled"] and e["name"] == function_name)
        assert ours == scenarios.jax_compile_count(messages, function_name), function_name
    for event in events:
        assert event["explanation"]
        if event["cause"] not in (Cause.FIRST_CALL, Cause.CACHE_CLEARED):
            assert event["diff"] or event["cause"] == Cause.NEW_FUNCTION_OBJECT, event


def _by_cause(events, cause):
    return [e for e in events if e["cause"] == cause]


def test_new_shape_names_path_and_axis(sqlite_url, use_store):
    events, _ = run_scenario("batch_sizes", sqlite_url, use_store)
    shape_events = _by_cause(events, Cause.NEW_SHAPE)
    assert len(shape_events) == 2
    for event, (before, after) in zip(shape_events, [(8, 16), (16, 32)], strict=False):
        entry = event["diff"][0]
        assert entry["path"] == "batch['x']"
        assert entry["axes"] == [0]
        assert entry["before"] == f"float32[{before},3]"
        assert entry["after"] == f"float32[{after},3]"
        assert "batch['x']" in event["explanation"]
        assert "axis 0" in event["explanation"]
        shapes = {leaf["path"]: leaf["shape"] for leaf in event["signature"]}
        assert shapes == {"params['w']": [3, 2], "batch['x']": [after, 3]}


def test_weak_type_blamed_where_jax_blames_keys(sqlite_url, use_store):
    # JAX's explain_cache_misses compares with the latest key and blames the dict keys;
    # the closest earlier signature has the same keys and differs only in weak type.
    events, _ = run_scenario("weak_type_flip", sqlite_url, use_store)
    last = events[-1]
    assert last["cause"] == Cause.WEAK_TYPE
    assert [e["path"] for e in last["diff"]] == ["d['a']"]
    assert last["diff"][0]["before"] == "float32[] weak"
    assert last["diff"][0]["after"] == "float32[]"
    assert events[1]["diff"][0]["change"] == "added"
    assert events[1]["diff"][0]["path"] == "d['b']"


def test_static_value_diff(sqlite_url, use_store):
    events, _ = run_scenario("static_values", sqlite_url, use_store)
    statics = _by_cause(events, Cause.NEW_STATIC_VALUE)
    assert [e["diff"][0]["after"] for e in statics] == ["1", "2", "3", "4"]
    assert all(e["diff"][0]["path"] == "n" for e in statics)
    assert "5 distinct values" in statics[-1]["explanation"]


def test_a_static_of_flattened_pytrees_is_diffed_leaf_by_leaf(sqlite_url, use_store):
    # What eqx.filter_jit passes its inner jit: every non-array leaf of the arguments as
    # one static argument of (leaves, treedef) pairs.
    import jax
    import jax.numpy as jnp

    import cachewatch

    use_store(sqlite_url)

    @cachewatch.jit(static_argnums=1)
    def scaled(x, static):
        (leaves, treedef), _ = static
        return x / treedef.unflatten(leaves)["temperature"]

    def held_static(config: dict) -> tuple:
        flat, treedef = jax.tree_util.tree_flatten(config)
        return (tuple(flat), treedef), ((), jax.tree_util.tree_structure(()))

    for temperature in (1.0, 0.5, 0.25):
        scaled(jnp.ones(3), held_static({"temperature": temperature, "name": "annealed"}))
    assert cachewatch.flush(30)
    statics = _by_cause(stored_events(sqlite_url, ["scaled"]), Cause.NEW_STATIC_VALUE)
    # Only the leaf that changed is named, with its values, not the whole argument.
    assert [[(e["path"], e["before"], e["after"]) for e in s["diff"]] for s in statics] == [
        [("static[0]['temperature']", "1.0", "0.5")],
        [("static[0]['temperature']", "0.5", "0.25")],
    ]


def test_filter_jit_diffs_name_the_users_parameters_and_a_value_turned_array(sqlite_url, use_store):
    """eqx.filter_jit jits a function of its own whose arguments are the user's split in
    arrays and the rest (``dynamic_nodonate['rest'][1]``, ``static[2][0][1]``): a diff names
    the user's parameter or field, and a Python value that became an array (Equinox holds
    the one static, traces the other) is told as such, with the array as the fix."""
    import equinox as eqx
    import jax.numpy as jnp

    import cachewatch

    use_store(sqlite_url)
    cachewatch.install()
    try:

        class Scaled(eqx.Module):
            w: jnp.ndarray
            temperature: float

        def held_step(model, x, lr, *, scale):
            return (model.w * x).sum() * lr * scale / model.temperature

        step = eqx.filter_jit(held_step)
        model = Scaled(jnp.ones(3), 1.0)
        step(model, jnp.ones(3), 0.1, scale=2.0)
        step(model, jnp.ones(3), jnp.float32(0.1), scale=2.0)  # lr: a float, then an array
        step(model, jnp.ones(3), jnp.float32(0.1), scale=3.0)  # a new value of a kwarg held static
        step(Scaled(jnp.ones(3), 0.5), jnp.ones(3), jnp.float32(0.1), scale=3.0)  # a field held static
    finally:
        cachewatch.uninstall()
    assert cachewatch.flush(30)
    events = [e for e in stored_events(sqlite_url, ["held_step"]) if e["kind"] == "trace"]
    assert [e["cause"] for e in events] == ["first_call"] + ["new_static_value"] * 3
    firsts = [e["diff"][0] for e in events[1:]]
    assert [(d["path"], d["before"], d["after"], d.get("held_static")) for d in firsts] == [
        ("lr", "static 0.1", "float32[]", True),
        ("scale", "2.0", "3.0", True),
        ("model.temperature", "1.0", "0.5", True),
    ]
    assert "Argument lr was a Python value 0.1 and is now an array float32[]" in events[1]["explanation"]
    assert "jnp.asarray(value, jnp.float32)" in events[1]["explanation"]
    assert not any("dynamic_" in str(e["diff"]) or "static[" in str(e["diff"]) for e in events)


def test_dtype_and_structure_diffs(sqlite_url, use_store):
    events, _ = run_scenario("dtype_change", sqlite_url, use_store)
    assert events[1]["diff"][0]["change"] == "dtype"
    assert (events[1]["diff"][0]["before"], events[1]["diff"][0]["after"]) == ("float32[3]", "int32[3]")
    events, _ = run_scenario("positional_vs_keyword", sqlite_url, use_store)
    entry = events[1]["diff"][0]
    assert (entry["path"], entry["change"], entry["before"], entry["after"]) == (
        "w",
        "passed_as",
        "positional",
        "keyword",
    )
    events, _ = run_scenario("dict_keys_change", sqlite_url, use_store)
    assert [(e["path"], e["change"]) for e in events[1]["diff"]] == [("batch['mask']", "added")]


def test_jit_in_loop_points_at_call_site(sqlite_url, use_store):
    events, _ = run_scenario("lambda_in_loop", sqlite_url, use_store)
    recreated = _by_cause(events, Cause.NEW_FUNCTION_OBJECT)
    assert len(recreated) == 19
    sites = {e["call_site"] for e in recreated}
    assert len(sites) == 1
    site = sites.pop()
    assert site.startswith(scenarios.__file__ + ":")
    line = int(site.rsplit(":", 1)[1])
    with open(scenarios.__file__) as source:
        assert "cachewatch.jit(lambda x: unjitted_loop_body(x))(i)" in source.readlines()[line - 1]
    assert site in recreated[0]["explanation"]


def test_nested_trace_recorded_but_not_compiled(sqlite_url, use_store):
    events, messages = run_scenario("nested_jit", sqlite_url, use_store)
    inner = [e for e in events if e["name"] == "inner"]
    outer = [e for e in events if e["name"] == "outer"]
    assert len(inner) == 2
    assert inner[0]["nested"]
    assert not inner[0]["compiled"]
    assert inner[0]["compile_seconds"] is None
    assert inner[0]["kind"] == "trace"
    assert len(outer) == 1
    assert outer[0]["compiled"]
    assert outer[0]["compile_seconds"] is not None
    assert outer[0]["compile_seconds"] > 0
    # Called on its own later, inner compiles from the jaxpr JAX cached: no second trace.
    assert inner[1]["kind"] == "compile"
    assert inner[1]["compiled"]
    assert inner[1]["trace_seconds"] is None
    assert scenarios.jax_compile_count(messages, "inner") == 1


def test_threads_attributed_to_their_own_call(sqlite_url, use_store):
    events, _ = run_scenario("threads", sqlite_url, use_store)
    assert len(events) == 8
    for event in events:
        (leaf,) = event["signature"]
        assert event["thread"] == f"worker-{leaf['shape'][0]}"
        assert event["trace_seconds"] is not None
        assert event["compile_seconds"] is not None
    assert sorted(e["signature"][0]["shape"][0] for e in events) == list(range(1, 9))


def test_failing_traces_recorded_with_error(sqlite_url, use_store):
    events, _ = run_scenario("failing_traces", sqlite_url, use_store)
    errors = {e["name"]: e["error"] for e in events}
    assert errors["branchy"] is not None
    assert errors["branchy"].startswith("TracerBoolConversionError: ")
    assert errors["get_negatives"] is not None
    assert errors["get_negatives"].startswith("NonConcreteBooleanIndexError: ")
    assert all(not e["compiled"] for e in events)


def normalized(events: list[EventRow]) -> list[tuple]:
    """The parts of a row that must not depend on the store (ids and timings do)."""
    rows = [
        (
            e["name"],
            e["kind"],
            e["cause"],
            e["compiled"],
            e["nested"],
            repr(e["diff"]),
            repr(e["signature"]),
            e["signature_hash"],
            e["error"],
            e["explanation"].split(" at /")[0],
        )
        for e in events
    ]
    return sorted(rows)


def test_postgresql_stores_the_same_rows_as_sqlite(sqlite_url, pg_url, use_store):
    for name in (
        "batch_sizes",
        "weak_type_flip",
        "static_values",
        "lambda_in_loop",
        "failing_traces",
        "nested_jit",
        "positional_vs_keyword",
    ):
        on_sqlite, _ = run_scenario(name, sqlite_url, use_store)
        on_postgres, _ = run_scenario(name, pg_url, use_store)
        rows = normalized(on_postgres)
        assert rows == normalized(on_sqlite), name
        # Two stores that both lost the rows would agree too: the rows are there, with the
        # compiles and causes the scenario must produce.
        assert rows, name
        compiled = sorted((e["name"], e["cause"]) for e in on_postgres if e["compiled"])
        assert compiled == sorted(scenarios.EXPECTED_COMPILES[name]), name
        if name == "failing_traces":  # nothing compiles: the rows are the failed traces
            assert {e["name"] for e in on_postgres if e["error"]} == {"branchy", "get_negatives"}


DEVICE_SCRIPT = """
import logging, sys, jax, jax.numpy as jnp, cachewatch
messages = []
class Capture(logging.Handler):
    def emit(self, record):
        messages.append(record.getMessage())
logging.getLogger("jax").addHandler(Capture())
jax.config.update("jax_log_compiles", True)
cachewatch.configure(store=sys.argv[1])

@cachewatch.jit
def placed(x):
    return x * 2

a = jax.device_put(jnp.ones(4), jax.devices()[0])
b = jax.device_put(jnp.ones(4), jax.devices()[1])
placed(a); placed(b); placed(a)
cachewatch.flush(30)
print(sum(m.startswith("Finished XLA compilation of jit(placed) ") for m in messages))
"""


def test_new_device_compiles_without_retrace(sqlite_url):
    import os
    import subprocess
    import sys

    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, "-c", DEVICE_SCRIPT, sqlite_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    events = stored_events(sqlite_url, ["placed"])
    assert [(e["kind"], e["cause"], e["device"]) for e in events] == [
        ("trace", Cause.FIRST_CALL, "cpu:0"),
        ("compile", Cause.NEW_DEVICE_OR_SHARDING, "cpu:1"),
    ]
    assert events[1]["diff"] == [
        {
            "path": "<device>",
            "change": "device",
            "cause": Cause.NEW_DEVICE_OR_SHARDING,
            "before": "cpu:0",
            "after": "cpu:1",
        },
        {  # and the argument that moved
            "path": "x",
            "change": "placement",
            "cause": Cause.NEW_DEVICE_OR_SHARDING,
            "before": "committed to cpu:0",
            "after": "committed to cpu:1",
        },
    ]
    assert "(argument x: committed to cpu:0 -> committed to cpu:1)" in events[1]["explanation"]
    assert int(out.strip()) == sum(e["compiled"] for e in events) == 2


PERSISTENT_SCRIPT = """
import sys, jax, jax.numpy as jnp, cachewatch
jax.config.update("jax_compilation_cache_dir", sys.argv[2])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
cachewatch.configure(store=sys.argv[1])

@cachewatch.jit
def persisted(x):
    return jnp.sin(x) * 2

persisted(jnp.ones(4))
persisted.clear_cache()
jax.clear_caches()
persisted(jnp.ones(4))
cachewatch.flush(30)
"""


def test_persistent_cache_hits_are_recorded(sqlite_url, tmp_path):
    import os
    import subprocess
    import sys

    subprocess.run(
        [sys.executable, "-c", PERSISTENT_SCRIPT, sqlite_url, str(tmp_path / "xla-cache")],
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        timeout=120,
        check=True,
    )
    events = stored_events(sqlite_url, ["persisted"])
    assert [(e["cause"], e["persistent_cache_hit"]) for e in events] == [
        (Cause.FIRST_CALL, False),
        (Cause.CACHE_CLEARED, True),
    ]


def test_more_operands_are_a_growing_list_for_concatenate_only():
    """``jnp.concatenate([context] + outs)`` given one more operand is a list that grew;
    a ``scan`` given more operands is another program (a model with other carries)."""
    from cachewatch.capture import foreign_causes
    from cachewatch.explain.causes import Verdict

    added: DiffEntry = {
        "path": "operands[2]",
        "change": "added",
        "cause": "new_structure",
        "before": None,
        "after": "f32[1,1]",
    }
    verdict = Verdict(Cause.NEW_STRUCTURE, "", (added,))
    joined = foreign_causes._primitive_changed("`concatenate`", " at t.py:3", "", verdict)
    scanned = foreign_causes._primitive_changed("`scan`", " at t.py:9", "", verdict)
    assert "it was given more operands (operands[2] added: f32[1,1]), as when a Python list" in joined
    assert "it was given more operands (operands[2] added: f32[1,1])" in scanned
    assert "Python list" not in scanned


def test_a_compile_from_a_trace_made_inside_another_jit_is_no_first_call(tmp_path):
    url = f"sqlite:///{tmp_path / 'split.db'}"
    program = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs", "split_reused.py")
    done = scenarios.run_program_file(program, url, cwd=tmp_path)
    assert done.stderr.count("Finished XLA compilation of jit(_threefry_split)") == 2
    compiled = [(e["cause"], e["diff"]) for e in stored_events(url, ["_threefry_split"]) if e["compiled"]]
    assert [cause for cause, _ in compiled] == [Cause.FIRST_CALL, Cause.NEW_STATIC_VALUE]
