"""Configuration and context managers JAX keys its tracing cache on, and the placement of
arguments, each named as the cause of the compile it makes, with JAX's own compile log
counting the same compiles."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import scenarios

import cachewatch
from cachewatch.core.events import Cause
from cachewatch.explain import context as ctxmod
from cachewatch.store import engine as enginemod
from cachewatch.store import queries
from cachewatch.store.columns import EventRow


def compiled_events(url: str, names: set[str]) -> list[EventRow]:
    assert cachewatch.flush(30)
    with enginemod.connection(url) as conn:
        rows = queries.list_events(conn, limit=10_000)
    return [r for r in rows if r["name"] in names and r["compiled"]]


def options(event: EventRow) -> dict[str, tuple[str, str]]:
    return {e["path"]: (e["before"], e["after"]) for e in event["diff"] if e["change"] == "context"}


def test_the_trace_context_is_read_by_name_on_this_jax():
    assert ctxmod.unreadable_reason() is None
    before = ctxmod.snapshot()
    with jax.numpy_rank_promotion("warn"):
        during = ctxmod.snapshot()
    assert before != during
    assert ctxmod.diff(before, during) == [
        {
            "path": "jax_numpy_rank_promotion",
            "change": "context",
            "cause": Cause.NEW_CONTEXT,
            "before": "'allow'",
            "after": "'warn'",
        }
    ]
    assert ctxmod.diff(before, ctxmod.snapshot()) == []


def test_a_new_user_context_is_named_and_not_compared_by_position():
    before = ctxmod.snapshot()
    jax.make_user_context()  # registers one more entry: every position after it could shift
    after = ctxmod.snapshot()
    assert len(after) == len(before) + 1
    entries = ctxmod.diff(before, after)
    assert [(e["path"], e["before"], e["after"]) for e in entries] == [(entries[0]["path"], "(not registered)", "None")]
    assert entries[0]["path"].startswith("user_context")


def _contexts(mm, a):
    mm(a)
    with jax.default_matmul_precision("highest"):
        mm(a)
        mm(a)  # the same context again: a hit
    with jax.numpy_dtype_promotion("strict"):
        mm(a)
    with jax.numpy_rank_promotion("warn"):
        mm(a)
    mm(a)  # back in the first context: a hit
    previous = jax.config.values["jax_default_matmul_precision"]
    jax.config.update("jax_default_matmul_precision", "float32")
    try:
        mm(a)
    finally:
        jax.config.update("jax_default_matmul_precision", previous)


EXPECTED_OPTIONS = [
    None,
    ("jax_default_matmul_precision", "None", "'highest'"),
    ("jax_numpy_dtype_promotion", "'standard'", "'strict'"),
    ("jax_numpy_rank_promotion", "'allow'", "'warn'"),
    ("jax_default_matmul_precision", "None", "'float32'"),
]


def test_context_managers_and_config_updates_are_new_context(sqlite_url, use_store):
    use_store(sqlite_url)

    @cachewatch.jit
    def ctx_matmul(a):
        return a @ a

    with scenarios.jax_compile_log() as messages:
        _contexts(ctx_matmul, jnp.ones((5, 5)))
    events = compiled_events(sqlite_url, {"ctx_matmul"})
    assert len(events) == scenarios.jax_compile_count(messages, "ctx_matmul") == 5
    assert [e["cause"] for e in events] == [Cause.FIRST_CALL] + [Cause.NEW_CONTEXT] * 4
    for event, expected in zip(events[1:], EXPECTED_OPTIONS[1:], strict=False):
        assert expected is not None
        name, before, after = expected
        assert options(event) == {name: (before, after)}, event["diff"]
        assert f"{name}: {before} -> {after}" in event["explanation"]
        assert "clear" not in event["explanation"]


def test_jax_own_jits_under_install_are_new_context(sqlite_url, use_store):
    use_store(sqlite_url)
    cachewatch.install()
    try:
        v = jnp.arange(11.0)  # a size no other test compiles these for
        with scenarios.jax_compile_log() as messages:
            jnp.clip(v, 1.0, 4.0)
            jnp.fft.fft(v)
            with jax.numpy_rank_promotion("warn"):
                jnp.clip(v, 1.0, 4.0)
                jnp.fft.fft(v)
                jnp.clip(v, 1.0, 4.0)
    finally:
        cachewatch.uninstall()
    events = compiled_events(sqlite_url, {"clip", "fft", "_moveaxis"})
    for name in ("clip", "fft", "_moveaxis"):
        ours = [e for e in events if e["name"] == name]
        assert len(ours) == scenarios.jax_compile_count(messages, name), name
        under_context = [e for e in ours if e["cause"] == Cause.NEW_CONTEXT]
        assert under_context, (name, [(e["cause"], e["explanation"]) for e in ours])
        for event in under_context:
            assert options(event) == {"jax_numpy_rank_promotion": ("'allow'", "'warn'")}
    assert not [e for e in events if e["cause"] in (Cause.CACHE_CLEARED, Cause.UNKNOWN)]


def test_jax_own_jit_under_install_through_every_context_change(sqlite_url, use_store):
    """The same context managers and config update as under cachewatch.jit, around one of
    JAX's own jits seen through install(): each compile named by the option that changed."""
    use_store(sqlite_url)
    cachewatch.install()
    try:
        with scenarios.jax_compile_log() as messages:
            _contexts(lambda a: jnp.clip(a, 1.0, 4.0), jnp.arange(13.0))  # a size no other test uses
    finally:
        cachewatch.uninstall()
    events = compiled_events(sqlite_url, {"clip"})
    assert len(events) == scenarios.jax_compile_count(messages, "clip") == 5
    assert [e["cause"] for e in events] == [Cause.FIRST_CALL] + [Cause.NEW_CONTEXT] * 4
    for event, expected in zip(events[1:], EXPECTED_OPTIONS[1:], strict=False):
        assert expected is not None
        name, before, after = expected
        assert options(event) == {name: (before, after)}, event["diff"]


def test_context_comes_before_the_arguments_and_the_diff_keeps_both(sqlite_url, use_store):
    use_store(sqlite_url)

    @cachewatch.jit
    def ctx_first(a):
        return a * 2

    ctx_first(jnp.ones(3))
    with jax.numpy_rank_promotion("warn"):
        ctx_first(jnp.ones(4))
    first, second = compiled_events(sqlite_url, {"ctx_first"})
    assert second["cause"] == Cause.NEW_CONTEXT
    assert [(e["change"], e["cause"]) for e in second["diff"]] == [
        ("context", Cause.NEW_CONTEXT),
        ("shape", Cause.NEW_SHAPE),
    ]


def test_cache_cleared_names_the_clear_and_a_repeat_without_one_is_not_a_clear(sqlite_url, use_store):
    use_store(sqlite_url)

    @cachewatch.jit
    def ctx_cleared(a):
        return a - 1

    ctx_cleared(jnp.ones(3))
    jax.clear_caches()
    ctx_cleared(jnp.ones(3))
    events = compiled_events(sqlite_url, {"ctx_cleared"})
    assert [e["cause"] for e in events] == [Cause.FIRST_CALL, Cause.CACHE_CLEARED]
    assert "jax.clear_caches()" in events[1]["explanation"]

    class Unequal:
        """A static argument equal to no other (not even a twin) under one hash: JAX misses
        its cache while every part of the signature cachewatch reads stays the same."""

        def __hash__(self):
            return 7

        def __eq__(self, other):
            return False

        def __repr__(self):
            return "Unequal()"

    @cachewatch.jit(static_argnums=1)
    def ctx_unequal(a, tag):
        return a + 1

    with scenarios.jax_compile_log() as messages:
        ctx_unequal(jnp.ones(3), Unequal())
        ctx_unequal(jnp.ones(3), Unequal())
    events = compiled_events(sqlite_url, {"ctx_unequal"})
    assert len(events) == scenarios.jax_compile_count(messages, "ctx_unequal") == 2
    assert [e["cause"] for e in events] == [Cause.FIRST_CALL, Cause.UNKNOWN]
    assert "no cache was cleared" in events[1]["explanation"]


def test_a_signature_first_traced_inside_an_outer_jit_is_compared_with_what_compiled(sqlite_url, use_store):
    """A compile of a signature JAX had traced only inside another jit is no move to another
    device: it is the first compile at that signature, compared with those compiled before."""
    use_store(sqlite_url)

    @cachewatch.jit
    def inner_first(a):
        return a * 2

    outer = jax.jit(lambda a: inner_first(a) + 1)
    inner_first(jnp.ones(4))
    outer(jnp.ones(6))  # inner_first traced at 6 inside outer's trace, not compiled on its own
    inner_first(jnp.ones(6))  # compiled at 6 from JAX's trace cache
    events = compiled_events(sqlite_url, {"inner_first"})
    assert [e["cause"] for e in events] == [Cause.FIRST_CALL, Cause.NEW_SHAPE]
    assert "only traced (by .lower(), or inside another transformation" in events[1]["explanation"]
    assert [(d["path"], d["before"], d["after"]) for d in events[1]["diff"]] == [("a", "float32[4]", "float32[6]")]


def test_uncommitted_then_committed_on_one_device(sqlite_url, use_store):
    use_store(sqlite_url)

    @cachewatch.jit
    def placed_once(x):
        return x + 1

    a = jnp.ones(6)
    with scenarios.jax_compile_log() as messages:
        placed_once(a)
        placed_once(jax.device_put(a, jax.devices()[0]))
        placed_once(a)  # both compiled: hits
        placed_once(jax.device_put(a, jax.devices()[0]))
    events = compiled_events(sqlite_url, {"placed_once"})
    assert len(events) == scenarios.jax_compile_count(messages, "placed_once") == 2
    second = events[1]
    assert (second["kind"], second["cause"]) == ("compile", Cause.NEW_DEVICE_OR_SHARDING)
    device = str(jax.devices()[0])
    assert second["diff"] == [
        {
            "path": "x",
            "change": "committed",
            "cause": Cause.NEW_DEVICE_OR_SHARDING,
            "before": f"uncommitted on {device}",
            "after": f"committed to {device}",
        }
    ]
    assert f"argument x is now committed to {device}" in second["explanation"]
    assert "committed and uncommitted arrays compile separately" in second["explanation"]
    assert "another device" not in second["explanation"]


# Four CPU devices exist only if XLA_FLAGS is set before JAX starts: a process of its own.
DEVICES_SCRIPT = """
import json, sys, jax, jax.numpy as jnp, cachewatch
from jax.sharding import NamedSharding, PartitionSpec as P
sys.path.insert(0, sys.argv[2])
import scenarios
cachewatch.configure(store=sys.argv[1])
mesh = jax.make_mesh((4,), ("data",))
x = jax.device_put(jnp.arange(16.0), NamedSharding(mesh, P("data")))

@cachewatch.jit
def sharded(v):
    return v * 2 + 1

@cachewatch.jit
def on_default(v):
    return v + 1

counts = {}
with scenarios.jax_compile_log() as messages:
    sharded(x)
    with jax.set_mesh(mesh):
        sharded(x)
        sharded(x)
    sharded(x)
    on_default(jnp.ones(8))
    with jax.default_device(jax.devices()[1]):
        on_default(jnp.ones(8))
    cachewatch.install()
    v = jnp.arange(7.0)
    jnp.clip(v, 0.0, 3.0)
    with jax.set_mesh(mesh):
        jnp.clip(v, 0.0, 3.0)
    with jax.default_device(jax.devices()[1]):
        jnp.clip(v, 0.0, 3.0)
    cachewatch.uninstall()
for name in ("sharded", "on_default", "clip"):
    counts[name] = scenarios.jax_compile_count(messages, name)
cachewatch.flush(30)
print(json.dumps(counts))
"""


def test_mesh_and_default_device_contexts_on_four_devices(sqlite_url):
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run(
        [sys.executable, "-c", DEVICES_SCRIPT, sqlite_url, here],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    ).stdout
    counts = json.loads(out.strip().splitlines()[-1])
    events = compiled_events(sqlite_url, {"sharded", "on_default", "clip"})
    for name, n in counts.items():
        assert len([e for e in events if e["name"] == name]) == n, name
    sharded = [e for e in events if e["name"] == "sharded"]
    assert [e["cause"] for e in sharded] == [Cause.FIRST_CALL, Cause.NEW_CONTEXT]
    # Outside any mesh JAX 0.10 holds None there, JAX 0.11 and later an empty AbstractMesh.
    no_mesh = "None" if jax.__version_info__ < (0, 11) else "AbstractMesh((), ())"
    assert options(sharded[1]) == {"abstract_mesh_context_manager": (no_mesh, "AbstractMesh(('data',), (4,))")}
    on_default = [e for e in events if e["name"] == "on_default"]
    assert [e["cause"] for e in on_default] == [Cause.FIRST_CALL, Cause.NEW_CONTEXT]
    assert options(on_default[1]) == {"jax_default_device": ("None", "cpu:1")}
    clip = [e for e in events if e["name"] == "clip"]
    assert [e["cause"] for e in clip] == [Cause.FIRST_CALL, Cause.NEW_CONTEXT, Cause.NEW_CONTEXT]
    assert list(options(clip[1])) == ["abstract_mesh_context_manager"]
    assert options(clip[2]) == {"jax_default_device": ("None", "cpu:1")}


def test_a_committed_argument_to_jax_own_jit_under_install(sqlite_url, use_store):
    use_store(sqlite_url)
    a = jnp.arange(17.0)  # a size no other test compiles clip for
    cachewatch.install()
    try:
        with scenarios.jax_compile_log() as messages:
            jnp.clip(a, 1.0, 3.0)
            jnp.clip(jax.device_put(a, jax.devices()[0]), 1.0, 3.0)
            jnp.clip(a, 1.0, 3.0)  # both compiled: hits
    finally:
        cachewatch.uninstall()
    events = compiled_events(sqlite_url, {"clip"})
    assert len(events) == scenarios.jax_compile_count(messages, "clip") == 2
    second = events[1]
    assert (second["kind"], second["cause"]) == ("compile", Cause.NEW_DEVICE_OR_SHARDING)
    device = str(jax.devices()[0])
    assert [(e["path"], e["change"], e["before"], e["after"]) for e in second["diff"]] == [
        ("arr", "committed", f"uncommitted on {device}", f"committed to {device}")
    ]
    assert "committed and uncommitted arrays compile separately" in second["explanation"]


def test_new_context_through_the_service_metrics_and_dashboard(store_url, use_store):
    """The word goes everywhere causes go: the API's causes, /metrics' cause label, the
    dashboard's legend with its own colour."""
    import serverkit as kit
    from cachewatch_server.dashboard import render
    from cachewatch_server.main import create_app
    from cachewatch_server.settings import ServerSettings
    from fastapi.testclient import TestClient

    use_store(store_url)

    @cachewatch.jit
    def served_ctx(a):
        return a * 3

    served_ctx(jnp.ones(3))
    with jax.default_matmul_precision("highest"):
        served_ctx(jnp.ones(3))
    (first, second) = compiled_events(store_url, {"served_ctx"})
    assert second["cause"] == Cause.NEW_CONTEXT
    with TestClient(create_app(ServerSettings(store=store_url, write_token=None, read_token=None))) as client:
        detail = client.get(f"/api/v1/functions/{second['function_hash']}").json()
        assert detail["causes"] == {"first_call": 1, "new_context": 1}
        events = client.get(f"/api/v1/functions/{second['function_hash']}/events").json()["items"]
        assert {e["cause"] for e in events} == {"first_call", "new_context"}
        samples = kit.parse_metrics(client.get("/metrics").text)
        assert kit.sample(samples, "cachewatch_compiles_total", function="served_ctx", cause="new_context") == 1
        page = client.get(f"/functions/{second['function_hash']}").text
    colour = render.cause_color(Cause.NEW_CONTEXT)
    assert colour not in {render.cause_color(c) for c in Cause if c != Cause.NEW_CONTEXT}
    assert "new_context" in page


def test_a_structure_change_leads_a_shape_change_of_an_earlier_argument(sqlite_url, use_store):
    """JAX's cache compares the pytree before the leaves' types: an added key in the second
    argument is the cause even when the first argument changed shape too."""
    use_store(sqlite_url)

    @cachewatch.jit
    def structured(a, batch):
        return a.sum() + sum(v.sum() for v in batch.values())

    structured(jnp.ones(3), {"x": jnp.ones(2)})
    structured(jnp.ones(5), {"x": jnp.ones(2), "y": jnp.ones(2)})
    events = compiled_events(sqlite_url, {"structured"})
    assert [e["cause"] for e in events] == [Cause.FIRST_CALL, Cause.NEW_STRUCTURE]
    assert [(d["path"], d["change"]) for d in events[1]["diff"]] == [("batch['y']", "added"), ("a", "shape")]
    assert "The argument pytree changed: batch['y'] was added" in events[1]["explanation"]


def test_a_new_layout_of_a_committed_argument_is_named(sqlite_url, use_store):
    """JAX compiles once per input layout of committed arrays: a compile without a retrace
    for another layout names the argument and both layouts, not a move to another device."""
    try:
        from jax.experimental.layout import Format, Layout
    except ImportError:  # the older name of the same class
        # (gone from the JAX versions the type checker sees)
        from jax.experimental.layout import DeviceLocalLayout as Layout  # type: ignore[attr-defined,no-redef]
        from jax.experimental.layout import Format
    from jax.sharding import SingleDeviceSharding

    use_store(sqlite_url)

    @cachewatch.jit
    def laid_out(m):
        return m * 3

    device = jax.devices()[0]
    m = jnp.arange(40.0).reshape(5, 8)
    default = jax.device_put(m, device)
    transposed = jax.device_put(m, Format(Layout(major_to_minor=(1, 0)), SingleDeviceSharding(device)))
    with scenarios.jax_compile_log() as messages:
        laid_out(default)
        laid_out(transposed)
        laid_out(default)  # both compiled: hits
    events = compiled_events(sqlite_url, {"laid_out"})
    assert len(events) == scenarios.jax_compile_count(messages, "laid_out") == 2
    second = events[1]
    assert (second["kind"], second["cause"]) == ("compile", Cause.NEW_DEVICE_OR_SHARDING)
    assert [(e["path"], e["change"], e["before"], e["after"]) for e in second["diff"]] == [
        ("m", "layout", f"major_to_minor={tuple(default.format.layout.major_to_minor)}", "major_to_minor=(1, 0)")
    ]
    assert "now has the layout major_to_minor=(1, 0)" in second["explanation"]
