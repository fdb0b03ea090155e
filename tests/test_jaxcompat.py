"""Every JAX internal cachewatch reads sits behind a capability that says when it stops
working: broken on purpose (as a JAX release that renamed it would), each one turns off
with one warning naming the feature lost, `cachewatch doctor` shows it off, and the
program's results do not change."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
import types
import warnings

import pytest

from cachewatch.core import jaxcompat

# How to break each capability: the seam's expectation renamed, as if JAX had renamed
# the frame, event, logger text or attribute.
BREAK = {
    "trace_frame": 'jaxcompat.FRAMES["trace_frame"] = ("jax._src.pjit", ("_trace_for_jit_renamed",), ("fun",))',
    "lowering_frame": 'jaxcompat.FRAMES["lowering_frame"] = ("jax._src.interpreters.pxla", ("_lowering_renamed",), ("in_avals",))',
    "dispatch_frame": 'jaxcompat.FRAMES["dispatch_frame"] = ("jax._src.pjit", ("cache_miss",), ("fun_renamed",))',
    "transpose_frame": 'jaxcompat.FRAMES["transpose_frame"] = ("jax._src.pjit", ("_transpose_renamed",), ())',
    "primitive_params": 'jaxcompat.FRAMES["primitive_params"] = ("jax._src.dispatch", ("prim_fun",), ("params_renamed",))',
    "compile_events": 'jaxcompat.EVENTS["trace"] = "/jax/core/compile/renamed_trace_duration"',
    "persistent_cache_events": 'jaxcompat.EVENTS["cache_hit"] = "/jax/compilation_cache/renamed_hits"',
    "cache_key_log": 'jaxcompat.capabilities.CACHE_KEY_MESSAGE = "renamed hash of %s: %s"',
    "trace_equations": 'jaxcompat.ATTRIBUTES["trace_equations"] = ("jax._src.core", "trace_ctx_renamed")',
    "primitives": 'jaxcompat.ATTRIBUTES["primitives"] = ("jax._src.core", "PrimitiveRenamed")',
    "primitive_marker": 'jaxcompat.ATTRIBUTES["primitive_marker"] = ("jax._src.dispatch", "_apply_primitive_renamed")',
    "jaxpr_debug_info": 'jaxcompat.ATTRIBUTES["jaxpr_debug_info"] = ("jax._src.core", "Jaxpr", "debug_info_renamed")',
    "jit_cache_size": 'jaxcompat.ATTRIBUTES["jit_cache_size"] = ("_cache_size_renamed",)',
    "transform_tracers": 'jaxcompat.TRACER_CLASSES["BatchTracerRenamed"] = jaxcompat.TRACER_CLASSES.pop("BatchTracer")',
    "distributed_state": 'jaxcompat.ATTRIBUTES["distributed_state"] = ("jax.distributed", "is_initialized_renamed")',
    "persistent_cache_reset": 'jaxcompat.ATTRIBUTES["persistent_cache_reset"] = ("jax.experimental.compilation_cache.compilation_cache", "renamed")',
    "trace_context": 'jaxcompat.ATTRIBUTES["trace_context"] = ("jax._src.config", "trace_context", "names_renamed")',
    "clear_caches_hook": 'jaxcompat.ATTRIBUTES["clear_caches_hook"] = ("jax._src.util", "register_cache_renamed")',
    "program_hooks": 'jaxcompat.ATTRIBUTES["program_hooks"] = ("jax._src.compiler", "compile_renamed")',
    "fastpath_decision": 'jaxcompat.ATTRIBUTES["fastpath_decision"] = ("jax._src.pjit", "_get_fastpath_data_renamed")',
    "hlo_print_options": 'jaxcompat.ATTRIBUTES["hlo_print_options"] = ("jax._src.lib", "hlo", "PrintOptionsRenamed")',
    "traceback_lines": 'jaxcompat.ATTRIBUTES["traceback_lines"] = ("jax._src.lib", "xla_client", "Traceback", "renamed")',
    "mlir_strip_debuginfo": 'jaxcompat.ATTRIBUTES["mlir_strip_debuginfo"] = ("jax._src.lib.mlir", "passmanager", "Renamed")',
    "mlir_context": 'jaxcompat.ATTRIBUTES["mlir_context"] = ("jax._src.interpreters.mlir", "make_ir_context_renamed")',
    "persistent_cache_directory": 'jaxcompat.ATTRIBUTES["persistent_cache_directory"] = ("jax._src.compilation_cache", "_renamed")',
}

# A small program that exercises every path: a watched jit at two shapes, a vmap and a
# grad through it, JAX's own jits and eager code under install(), the persistent cache.
PROGRAM = textwrap.dedent("""
    import json, sys, warnings
    warnings.simplefilter("always")
    from cachewatch.core import jaxcompat
    BREAK
    import jax, jax.numpy as jnp
    import cachewatch
    from cachewatch.record import recorder

    class Collect:
        events = []
        def write(self, batch):
            self.events.extend(batch.events)

    sink = Collect()
    recorder.use_sink(sink)
    cachewatch.configure(persistent_cache_dir=sys.argv[1])
    cachewatch.install()

    @cachewatch.jit
    def step(x, y):
        return jnp.sin(x) * y + 1.0

    results = [step(jnp.ones(3), 2.0), step(jnp.ones(5), 2.0)]
    results.append(jax.vmap(step, in_axes=(0, None))(jnp.ones((2, 3)), 3.0))
    results.append(jax.grad(lambda x: step(x, 2.0).sum())(jnp.ones(4)))
    results.append(jnp.fft.fft(jnp.arange(8.0)).real)
    results.append(jnp.arange(6.0).reshape(2, 3) + 1)
    cachewatch.flush(30)
    from cachewatch import doctor
    states = {c.name: c.available for c in jaxcompat.status()}
    mine = [e for e in sink.events if e.function.name == "step"]
    print(json.dumps({
        "results": [[float(v) for v in jnp.ravel(r)] for r in results],
        "states": states,
        "events": len(sink.events),
        "step_causes": [e.cause for e in mine],
        "trace_seconds": [e.trace_seconds for e in mine],
        "jaxpr_eqns": [e.jaxpr_eqns for e in mine],
        "doctor": doctor.render(doctor.checkup()),
    }))
""")


def _run(tmp_path, breaking: str) -> tuple[dict, str]:
    script = tmp_path / "program.py"
    script.write_text(PROGRAM.replace("BREAK", breaking))
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "jax-cache")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "CACHEWATCH_STORE": f"sqlite:///{tmp_path / 'store.db'}"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("unbroken"), "pass")


def test_every_capability_works_on_the_jax_under_test(unbroken):
    found, stderr = unbroken
    assert found["states"] == {name: True for name in BREAK}
    assert "CapabilityWarning" not in stderr
    assert found["step_causes"][:2] == ["first_call", "new_shape"]
    assert all(s is not None for s in found["trace_seconds"][:2])
    assert "all capabilities work on this JAX" in found["doctor"]


def test_the_breaks_cover_every_capability():
    assert set(BREAK) == {status.name for status in jaxcompat.status()}


@pytest.mark.parametrize("name", sorted(BREAK))
def test_a_broken_capability_turns_off_with_one_warning_and_changes_no_result(tmp_path, unbroken, name):
    found, stderr = _run(tmp_path, BREAK[name])
    expected, _ = unbroken
    assert found["results"] == expected["results"]  # the program computes exactly the same
    assert found["states"][name] is False
    assert [n for n, works in found["states"].items() if not works] == [name]  # only this one
    warnings = [line for line in stderr.splitlines() if "CapabilityWarning" in line]
    assert len(warnings) == 1, stderr[-2000:]
    assert f"the capability {name!r} is off" in warnings[0], stderr[-2000:]
    doctor_line = next(line for line in found["doctor"].splitlines() if line.strip().startswith(name + " "))
    assert "OFF" in doctor_line
    assert "is lost" in doctor_line
    assert "1 capability(ies) off: " + name in found["doctor"]
    assert found["events"] > 0  # compiles are still recorded, with less detail


def test_without_the_compile_events_no_seconds_are_made_up(tmp_path):
    found, _ = _run(tmp_path, BREAK["compile_events"])
    assert found["step_causes"][:2] == ["first_call", "new_shape"]  # the trace hook still sees each trace
    assert found["trace_seconds"][:2] == [None, None]
    assert "trace_seconds missing" in found["doctor"]


def test_without_the_trace_equations_the_count_comes_from_the_compiled_program(tmp_path, unbroken):
    found, _ = _run(tmp_path, BREAK["trace_equations"])
    assert found["jaxpr_eqns"][:2] == unbroken[0]["jaxpr_eqns"][:2]
    assert found["jaxpr_eqns"][0] > 0


def test_without_either_source_the_count_is_left_empty(tmp_path):
    found, _ = _run(tmp_path, BREAK["trace_equations"] + "; " + BREAK["program_hooks"])
    assert found["jaxpr_eqns"][:2] == [None, None]


@pytest.fixture
def fresh_probes():
    """Capabilities probed afresh, and forgotten again after the test turned one off."""
    jaxcompat.reset()
    yield
    jaxcompat.reset()


def _capability_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, jaxcompat.CapabilityWarning)]


def test_a_capability_turned_off_at_run_time_warns_once_and_the_doctor_shows_it_off(fresh_probes):
    from cachewatch import doctor

    assert jaxcompat.available("lowering_frame")  # probed: it works on this JAX
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jaxcompat.turn_off("lowering_frame", "its jaxpr could not be read: AttributeError: eqns")
        jaxcompat.turn_off("lowering_frame", "a second failure of the same hook")
        assert not jaxcompat.available("lowering_frame")  # not probed again
    found = _capability_warnings(caught)
    assert len(found) == 1
    assert "the capability 'lowering_frame' is off" in found[0]
    assert "AttributeError: eqns" in found[0]
    assert jaxcompat.off() == ["lowering_frame"]
    shown = doctor.render(doctor.checkup())
    line = next(line for line in shown.splitlines() if line.strip().startswith("lowering_frame "))
    assert "OFF" in line
    assert "is lost: its jaxpr could not be read" in line
    assert "1 capability(ies) off: lowering_frame" in shown


def test_a_jaxpr_the_lowering_frame_cannot_read_turns_the_capability_off(fresh_probes):
    from cachewatch.capture import foreign

    assert jaxcompat.available("lowering_frame")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert foreign.program_key(object()) is None  # as if JAX's jaxpr had no eqns
        assert foreign.program_key(object()) is None
    found = _capability_warnings(caught)
    assert len(found) == 1
    assert "'lowering_frame' is off" in found[0]
    assert "its jaxpr could not be read" in found[0]
    assert not jaxcompat.available("lowering_frame")


def test_shardings_the_lowering_frame_cannot_read_turn_the_capability_off(fresh_probes):
    # As if JAX's lowering frame held shardings of another kind (no device_set).
    lowering = jaxcompat.JitLowering((), None, (), None, 0, types.SimpleNamespace(shardings=[object()]))
    assert jaxcompat.available("lowering_frame")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert jaxcompat.lowered_argument_devices(lowering, 1) is None
    found = _capability_warnings(caught)
    assert len(found) == 1
    assert "its shardings could not be read" in found[0]
    assert not jaxcompat.available("lowering_frame")


def test_a_function_is_named_as_jax_names_it_in_its_events():
    from jax._src import util

    def step(x, y):
        return x

    class Layer:
        def __call__(self, x):
            return x

    for fun in (step, functools.partial(step, 1), functools.partial(functools.partial(step, 1), 2), Layer()):
        assert jaxcompat.fun_name(fun) == util.fun_name(fun) == jaxcompat._fun_name_as_in_jax(fun)
    assert jaxcompat.fun_name(functools.partial(step, 1)) == "step"
    assert jaxcompat.fun_name(Layer()) == "<unnamed function>"


@pytest.mark.parametrize(
    "table, expected",
    [
        (  # a local of the lowering frame cachewatch reads for placement, renamed
            "FRAMES",
            (
                "jax._src.interpreters.pxla",
                ("_cached_lowering_to_hlo",),
                ("closed_jaxpr", "in_avals", "num_const_args", "semantic_in_shardings_renamed"),
            ),
        ),
        ("ATTRIBUTES", ("jax._src.interpreters.pxla", "UnspecifiedValueRenamed")),  # its unspecified sharding
    ],
)
def test_the_lowering_frame_probe_checks_everything_read_there(fresh_probes, monkeypatch, table, expected):
    monkeypatch.setitem(getattr(jaxcompat, table), "lowering_frame", expected)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not jaxcompat.available("lowering_frame")
    found = _capability_warnings(caught)
    missing = "semantic_in_shardings_renamed" if table == "FRAMES" else "UnspecifiedValueRenamed"
    assert len(found) == 1
    assert missing in found[0]


def test_recording_leaves_the_trace_context_jax_keys_on_as_it_was(tmp_path):
    """cachewatch's own imports must not add options to JAX's trace context: a function
    traced before them would miss JAX's cache and be traced and compiled again."""
    program = textwrap.dedent("""
        import json, logging
        import jax, jax.numpy as jnp
        from jax._src import config
        messages = []
        class Handler(logging.Handler):
            def emit(self, record):
                messages.append(record.getMessage())
        logging.getLogger("jax").addHandler(Handler())
        jax.config.update("jax_log_compiles", True)
        step = jax.jit(lambda x: x * 2.0)
        step(jnp.ones(3))                     # traced before cachewatch is imported
        names = len(config.trace_context_names())
        import cachewatch

        @cachewatch.jit
        def watched(x):
            return x + 1.0

        watched(jnp.ones(3))
        watched(jnp.ones(4))
        cachewatch.flush(30)
        step(jnp.ones(3))                     # the same signature: served from the cache
        compiles = sum(m.startswith(("Finished XLA compilation of jit(<lambda>)", "Finished XLA compilation of jit(watched)")) for m in messages)
        print(json.dumps({"before": names, "after": len(config.trace_context_names()), "compiles": compiles}))
    """)
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "CACHEWATCH_STORE": f"sqlite:///{tmp_path / 'store.db'}"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["after"] == found["before"]
    assert found["compiles"] == 3  # step once, the watched lambda at two shapes
