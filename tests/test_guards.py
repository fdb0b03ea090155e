"""Recompile limits and freeze: they decide before JAX compiles, say why, and change no result."""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cachewatch
from cachewatch.capture import guards
from cachewatch.core.events import Cause, CompileEvent
from cachewatch.record import recorder

pytestmark = pytest.mark.usefixtures("hot_path")


@pytest.fixture
def events(sqlite_url, use_store):
    use_store(sqlite_url)
    seen: list[CompileEvent] = []
    recorder.add_listener(seen.append)
    yield seen
    recorder.remove_listener(seen.append)
    cachewatch.unfreeze()


def test_raise_past_the_limit_names_function_cause_and_diff_and_keeps_the_cache(events):
    @cachewatch.jit(max_recompiles=2, on_limit="raise")
    def limited_step(x):
        return x * 2

    for n in (1, 2, 3):  # first call and two recompiles: within the limit
        limited_step(jnp.ones(n))
    with pytest.raises(cachewatch.RecompileLimitError) as raised:
        limited_step(jnp.ones((4,)))
    message = str(raised.value)
    assert "limited_step" in message
    assert "limit of 2" in message
    assert "cause: new_shape" in message
    assert "new_shape=2" in message
    assert "x: float32[3] -> float32[4]" in message  # the diff against the closest signature
    assert raised.value.cause == Cause.NEW_SHAPE
    assert raised.value.causes == {"new_shape": 2}
    assert raised.value.diff[0]["path"] == "x"

    # Nothing was compiled for the refused signature, and what was compiled still runs.
    np.testing.assert_allclose(limited_step(jnp.ones(3)), [2.0, 2.0, 2.0])
    with pytest.raises(cachewatch.RecompileLimitError):
        limited_step(jnp.ones(4))
    cachewatch.flush(10)
    compiled = [e for e in events if e.function.name == "limited_step" and e.compiled]
    assert len(compiled) == 3
    refused = [e for e in events if e.function.name == "limited_step" and e.error]
    assert len(refused) == 2
    assert refused[0].error.startswith("RecompileLimitError")
    assert not any(e.compiled for e in refused)


def test_warn_once_with_the_causes_so_far_and_results_unchanged(events):
    @cachewatch.jit(max_recompiles=1)  # on_limit defaults to warn
    def warned_step(x):
        return x + 1

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outputs = [warned_step(jnp.ones(n)) for n in range(1, 6)]
        warned_step(jnp.float32(2.0))
    limit_warnings = [w for w in caught if issubclass(w.category, cachewatch.RecompileLimitWarning)]
    assert len(limit_warnings) == 1
    text = str(limit_warnings[0].message)
    assert "warned_step" in text
    assert "recompiled 2 times, past its limit of 1" in text
    assert "new_shape=2" in text
    assert "x: float32[2] -> float32[3]" in text
    for n, out in zip(range(1, 6), outputs, strict=False):
        np.testing.assert_allclose(out, np.full(n, 2.0))
    assert guards.tallies()[getattr(warned_step, "__cachewatch_state__").info.function_hash].recompiles == 5


def test_record_only_counts(events):
    @cachewatch.jit(max_recompiles=1, on_limit="record")
    def recorded_step(x):
        return x - 1

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning would fail the test
        for n in range(1, 5):
            recorded_step(jnp.ones(n))
    tally = guards.tallies()[getattr(recorded_step, "__cachewatch_state__").info.function_hash]
    assert tally.exceeded
    assert tally.recompiles == 3
    assert tally.causes == {"new_shape": 3}


def test_environment_limit_applies_to_every_watched_function(sqlite_url, use_store, monkeypatch):
    monkeypatch.setenv("CACHEWATCH_MAX_RECOMPILES", "1")
    monkeypatch.setenv("CACHEWATCH_ON_LIMIT", "raise")
    use_store(sqlite_url)

    @cachewatch.jit
    def env_limited(x):
        return x * 3

    env_limited(jnp.ones(1))
    env_limited(jnp.ones(2))
    with pytest.raises(cachewatch.RecompileLimitError, match="env_limited"):
        env_limited(jnp.ones(3))

    @cachewatch.jit(max_recompiles=0)  # an explicit 0 lifts the limit for this one
    def unlimited(x):
        return x * 3

    for n in range(1, 5):
        unlimited(jnp.ones(n))


def test_new_jit_object_counts_toward_the_function_limit(events):
    def body(x):
        return x * 5

    with pytest.raises(cachewatch.RecompileLimitError) as raised:
        for _ in range(4):
            # a new partial each time: a new jit object, as jax.jit(partial(...)) in a loop
            cachewatch.jit(functools.partial(body), max_recompiles=1, on_limit="raise")(jnp.ones(2))
    assert raised.value.cause == Cause.NEW_FUNCTION_OBJECT


def test_bad_limit_options_are_refused_when_wrapping():
    with pytest.raises(ValueError, match="on_limit"):
        cachewatch.jit(lambda x: x, on_limit="explode")
    with pytest.raises(ValueError, match="max_recompiles"):
        cachewatch.jit(lambda x: x, max_recompiles=-1)
    with pytest.raises(cachewatch.ConfigError, match="on_limit"):
        cachewatch.configure(on_limit="sometimes")


def test_freeze_raises_on_the_first_compile_after_it_and_not_before(events):
    @cachewatch.jit
    def frozen_step(x):
        return x * 2

    warm = [frozen_step(jnp.ones(n)) for n in (2, 3)]  # warm-up: compiles freely
    cachewatch.freeze()
    try:
        for n in (2, 3):  # cache hits after freeze are fine
            np.testing.assert_allclose(frozen_step(jnp.ones(n)), np.full(n, 2.0))
        with pytest.raises(cachewatch.FrozenCompileError) as raised:
            frozen_step(jnp.ones(4))
        assert isinstance(raised.value, cachewatch.RecompileLimitError)
        message = str(raised.value)
        assert "frozen_step" in message
        assert "freeze()" in message
        assert "cause: new_shape" in message
        assert "x: float32[3] -> float32[4]" in message
    finally:
        cachewatch.unfreeze()
    np.testing.assert_allclose(frozen_step(jnp.ones(4)), np.full(4, 2.0))
    # The warm-up results are right too: freezing after them changed none.
    assert [out.shape for out in warm] == [(2,), (3,)]
    for n, out in zip((2, 3), warm, strict=False):
        np.testing.assert_allclose(out, np.full(n, 2.0))


def test_freeze_names_a_context_change_with_its_option(events):
    """A compile after freeze() under a new matmul precision names the context, not the
    arguments (which did not change) and not a cleared cache."""

    @cachewatch.jit
    def frozen_ctx(x):
        return x @ x

    frozen_ctx(jnp.ones((3, 3)))
    cachewatch.freeze()
    try:
        with jax.default_matmul_precision("highest"), pytest.raises(cachewatch.FrozenCompileError) as raised:
            frozen_ctx(jnp.ones((3, 3)))
    finally:
        cachewatch.unfreeze()
    message = str(raised.value)
    assert "cause: new_context" in message
    assert "jax_default_matmul_precision: None -> 'highest'" in message


def test_freeze_as_a_context_manager_warns_and_restores(events):
    @cachewatch.jit
    def thawed(x):
        return x + 2

    thawed(jnp.ones(1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with cachewatch.freeze(on_compile="warn"):
            assert cachewatch.capture.guards.frozen() == "warn"
            out = thawed(jnp.ones(2))
        assert cachewatch.capture.guards.frozen() is None
        thawed(jnp.ones(3))  # unfrozen again: no warning
    frozen_warnings = [w for w in caught if issubclass(w.category, cachewatch.FrozenCompileWarning)]
    assert len(frozen_warnings) == 1  # the trace, not the lowering that followed it again
    assert "thawed" in str(frozen_warnings[0].message)
    assert Cause.NEW_SHAPE in str(frozen_warnings[0].message)
    np.testing.assert_allclose(out, [3.0, 3.0])


def test_freeze_covers_compiles_without_a_retrace(events):
    @cachewatch.jit
    def traced_first(x):
        return x * 7

    traced = traced_first.trace(jnp.ones(3))  # traced, never compiled
    # The trace is of this function at this shape: the compile below needs no retrace.
    assert traced.fun_name == "traced_first"
    assert [eqn.primitive.name for eqn in traced.jaxpr.eqns] == ["mul"]
    assert traced.out_info.shape == (3,)
    assert traced.out_info.dtype == jnp.float32
    with cachewatch.freeze():
        with pytest.raises(cachewatch.FrozenCompileError, match="without a retrace"):
            traced_first(jnp.ones(3))
    np.testing.assert_allclose(traced_first(jnp.ones(3)), np.full(3, 7.0))


def test_freeze_names_a_backward_pass_compile(events):
    @cachewatch.jit
    def smooth_loss(w):
        return jnp.sum(jnp.sin(w))

    _, pullback = jax.vjp(smooth_loss, jnp.ones(3))  # the forward program compiles here
    with cachewatch.freeze():
        with pytest.raises(cachewatch.FrozenCompileError, match="compiled for its backward pass"):
            pullback(jnp.float32(1.0))
    (grad,) = pullback(jnp.float32(1.0))
    np.testing.assert_allclose(grad, np.cos(np.ones(3)), rtol=1e-6)


def test_freeze_after_install_covers_jits_made_before_it(events):
    cachewatch.jit(lambda x: x)(jnp.ones(1))  # a watched `<lambda>`: the name says nothing
    made_before = jax.jit(lambda x: x * 11)
    made_before(jnp.ones(2))
    cachewatch.install()
    try:
        with cachewatch.freeze():
            np.testing.assert_allclose(made_before(jnp.ones(2)), np.full(2, 11.0))  # cached
            np.testing.assert_allclose(jnp.ones(9) + 1, np.full(9, 2.0))  # eager code is not a jit
            with pytest.raises(cachewatch.FrozenCompileError, match="before cachewatch.install"):
                made_before(jnp.ones(5))
    finally:
        cachewatch.uninstall()
    np.testing.assert_allclose(made_before(jnp.ones(5)), np.full(5, 11.0))


def test_freeze_without_install_leaves_unwatched_jits_alone(events):
    cachewatch.jit(lambda x: x)(jnp.ones(1))  # a watched function of the same name, `<lambda>`
    plain = jax.jit(lambda x: x * 13)
    with cachewatch.freeze():
        np.testing.assert_allclose(plain(jnp.ones(4)), np.full(4, 13.0))


def test_limits_and_freeze_are_off_by_default_and_change_nothing(events):
    @cachewatch.jit
    def free(x, n):
        return x * n

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outs = [free(jnp.ones(k), k) for k in range(1, 12)]
    for k, out in enumerate(outs, start=1):
        np.testing.assert_allclose(out, np.full(k, float(k)))
    assert guards.tallies() == {}


def test_a_warning_made_an_error_is_recorded_as_the_trace_that_raised(events):
    @cachewatch.jit
    def strict_step(x):
        return x / 2

    strict_step(jnp.ones(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", cachewatch.FrozenCompileWarning)  # as pytest -W error does
        with cachewatch.freeze(on_compile="warn"):
            with pytest.raises(cachewatch.FrozenCompileWarning, match="strict_step"):
                strict_step(jnp.ones(3))
    cachewatch.flush(10)
    failed = [e for e in events if e.function.name == "strict_step" and e.error]
    assert len(failed) == 1
    assert failed[0].error.startswith("FrozenCompileWarning")
    assert not failed[0].compiled
    np.testing.assert_allclose(strict_step(jnp.ones(3)), np.full(3, 0.5))


def test_expect_compiles_names_function_cause_and_diff(events):
    @cachewatch.jit
    def guarded_step(x):
        return x + 3

    guarded_step(jnp.ones(4))
    with pytest.raises(cachewatch.UnexpectedCompiles) as raised:
        with cachewatch.expect_compiles(guarded_step, at_most=0):
            guarded_step(jnp.ones(5))
    message = str(raised.value)
    assert "guarded_step` compiled 1 time(s), at most 0 expected" in message
    assert Cause.NEW_SHAPE in message
    assert "x: float32[4] -> float32[5]" in message
