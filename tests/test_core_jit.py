"""cachewatch.jit behaves like jax.jit: same results, same API, same errors."""

from __future__ import annotations

import functools
import gc
import inspect
import logging
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scenarios

import cachewatch
from cachewatch.core import _guard
from cachewatch.core.events import Cause
from cachewatch.explain import signature as sigmod
from cachewatch.record import current, recorder

# Every test here runs with the C hot path and with its pure-Python twin.
pytestmark = pytest.mark.usefixtures("hot_path")


@pytest.fixture
def events(sqlite_url, use_store):
    use_store(sqlite_url)
    seen = []

    def listen(event):
        if event.function.module != "jax.op_by_op":  # JAX's own eager compiles are not under test here
            seen.append(event)

    recorder.add_listener(listen, at_once=True)
    yield seen
    recorder.remove_listener(listen)


def test_decorator_with_and_without_arguments(events):
    @cachewatch.jit
    def plain(x):
        """Doubles x."""
        return 2 * x

    @cachewatch.jit(static_argnames="n", donate_argnums=0)
    def configured(x, n):
        return x * n

    assert getattr(plain, "__name__") == "plain"
    assert plain.__doc__ == "Doubles x."
    assert plain.__wrapped__.__name__ == "plain"
    np.testing.assert_allclose(plain(jnp.arange(3.0)), [0.0, 2.0, 4.0])
    np.testing.assert_allclose(configured(jnp.arange(3.0), 3), [0.0, 3.0, 6.0])
    assert [e.function.name for e in events] == ["plain", "configured"]


def test_every_jit_keyword_passes_through(events):
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])

    def body(x, y, flag):
        return x + (y if flag else 0)

    ours = cachewatch.jit(
        body,
        static_argnums=(2,),
        in_shardings=(sharding, sharding),
        out_shardings=sharding,
        keep_unused=True,
        inline=False,
        donate_argnames="x",
    )
    theirs = jax.jit(
        body,
        static_argnums=(2,),
        in_shardings=(sharding, sharding),
        out_shardings=sharding,
        keep_unused=True,
        inline=False,
        donate_argnames="x",
    )
    np.testing.assert_allclose(ours(jnp.ones(2), jnp.ones(2), True), theirs(jnp.ones(2), jnp.ones(2), True))
    with pytest.raises(TypeError) as ours_error:
        cachewatch.jit(body, no_such_option=1)
    with pytest.raises(TypeError) as theirs_error:
        jax.jit(body, no_such_option=1)  # type: ignore[call-overload]  # the unknown option is the point
    assert str(ours_error.value) == str(theirs_error.value)


def test_wrapper_stands_in_for_the_function(events, hot_path):
    def scaled(x, k=2):
        """Scales x."""
        return x * k

    fn = cachewatch.jit(scaled, static_argnames="k")
    assert (getattr(fn, "__name__"), getattr(fn, "__qualname__"), fn.__module__, fn.__doc__) == (
        scaled.__name__,
        scaled.__qualname__,
        scaled.__module__,
        "Scales x.",
    )
    assert inspect.signature(fn) == inspect.signature(scaled)
    assert "scaled" in repr(fn)
    np.testing.assert_allclose(fn(jnp.ones(2), k=3), [3.0, 3.0])
    np.testing.assert_allclose(jax.jit(fn, static_argnames="k")(jnp.ones(2), k=4), [4.0, 4.0])

    # Dropping the wrapper frees it, as dropping a jax.jit function does.
    alive = weakref.ref(fn)
    del fn
    gc.collect()
    assert alive() is None


def test_errors_keep_their_traceback_whether_or_not_they_trace(events, hot_path):
    def fails(x):
        raise ValueError("from user code")

    fn = cachewatch.jit(fails)
    for _ in range(2):  # a failed trace is not cached: both calls trace, both are recorded
        with pytest.raises(ValueError, match="from user code") as info:
            fn(jnp.ones(2))
        assert any(entry.name == "fails" for entry in info.traceback)
    assert [(e.kind, e.compiled, e.error) for e in events] == [("trace", False, "ValueError: from user code")] * 2

    def power(x, n):
        return x**n

    ours, theirs = cachewatch.jit(power, static_argnums=1), jax.jit(power, static_argnums=1)
    with pytest.raises(ValueError) as ours_error:  # raised by JAX before any trace
        ours(1.0, [2])
    with pytest.raises(ValueError) as theirs_error:
        theirs(1.0, [2])
    assert str(ours_error.value) == str(theirs_error.value)
    assert len(events) == 2


def test_a_compile_ahead_of_time_is_recorded_as_jax_logs_it(events):
    @cachewatch.jit
    def f(x):
        return jnp.tanh(x @ x.T).sum()

    with scenarios.jax_compile_log() as messages:
        lowered = f.lower(jnp.ones((8, 8)))
        assert isinstance(lowered, jax.stages.Lowered)  # the type JAX gives, compile() recorded
        compiled = lowered.compile()
        for _ in range(3):  # JAX serves these from its caches: no compile, no event
            f.lower(jnp.ones((8, 8))).compile()
        again = f.trace(jnp.ones((4, 8))).lower().compile()
    assert float(compiled(jnp.ones((8, 8)))) == float(jax.jit(lambda x: jnp.tanh(x @ x.T).sum())(jnp.ones((8, 8))))
    assert again(jnp.ones((4, 8))).shape == ()
    assert cachewatch.flush(30)
    logged = [m for m in messages if m.startswith("Finished XLA compilation of jit(f)")]
    compiles = [e for e in events if e.compiled]
    assert len(compiles) == len(logged) == 2
    assert [e.cause for e in compiles] == [Cause.FIRST_CALL, Cause.FIRST_CALL]


def test_lower_trace_eval_shape_clear_cache(events):
    @cachewatch.jit
    def f(x):
        return jnp.sin(x) + 1

    lowered = f.lower(jnp.ones(4))
    assert "sine" in lowered.as_text()
    # The same program as jax.jit's trace: its equations, named, not only their number.
    ours, theirs = f.trace(jnp.ones(4)), jax.jit(lambda x: jnp.sin(x) + 1).trace(jnp.ones(4))
    assert [e.primitive.name for e in ours.jaxpr.eqns] == [e.primitive.name for e in theirs.jaxpr.eqns]
    assert [e.primitive.name for e in ours.jaxpr.eqns] == ["sin", "add"]
    assert ours.fun_name == "f"
    assert ours.out_info.shape == (4,)
    assert f.eval_shape(jnp.ones(5)).shape == (5,)
    f(jnp.ones(4))
    f.clear_cache()
    f(jnp.ones(4))
    kinds = [(e.kind, e.cause, e.compiled) for e in events]
    # lower() traces without compiling; the call compiles the jaxpr lower() traced.
    assert kinds[0] == ("trace", Cause.FIRST_CALL, False)
    assert ("trace", Cause.CACHE_CLEARED, True) in kinds
    assert events[0].lower_seconds is not None
    assert events[0].jaxpr_eqns == 2


def test_nesting_in_jit_vmap_grad_scan(events):
    @cachewatch.jit
    def square(x):
        return x * x

    x = jnp.arange(4.0)
    np.testing.assert_allclose(jax.jit(lambda v: square(v) + 1)(x), x * x + 1)
    np.testing.assert_allclose(jax.vmap(square)(x.reshape(2, 2)), (x * x).reshape(2, 2))
    np.testing.assert_allclose(jax.grad(lambda v: square(v).sum())(x), 2 * x)

    def scan_body(carry, v):
        return carry + square(v), None

    total, _ = jax.lax.scan(scan_body, 0.0, x)
    assert float(total) == float((x * x).sum())
    assert all(e.function.name == "square" for e in events)


def test_a_plain_jit_sharing_a_watched_name_is_not_recorded(events):
    watched = cachewatch.jit(lambda x: x + 1)  # a watched `<lambda>`
    watched(jnp.ones(2))
    plain = jax.jit(lambda x: x * 5)  # without install(), not watched, though of the same name
    plain(jnp.ones(3))
    jax.grad(lambda v: plain(v).sum())(jnp.ones(3))  # its backward pass is compiled outside any call
    assert cachewatch.flush(10)
    assert {e.function.function_hash for e in events} == {getattr(watched, "__cachewatch_state__").info.function_hash}


def test_methods_bind_like_jax_jit(events):
    class Model:
        def __init__(self, scale):
            self.scale = scale

        @functools.partial(cachewatch.jit, static_argnums=0)
        def apply(self, x):
            return x * self.scale

        def __hash__(self):
            return hash(self.scale)

        def __eq__(self, other):
            return isinstance(other, Model) and other.scale == self.scale

    np.testing.assert_allclose(Model(3.0).apply(jnp.ones(2)), [3.0, 3.0])
    np.testing.assert_allclose(Model(4.0).apply(jnp.ones(2)), [4.0, 4.0])
    assert [e.cause for e in events] == [Cause.FIRST_CALL, Cause.NEW_STATIC_VALUE]
    assert events[1].diff[0]["path"] == "self"

    m = Model(2.0)
    bound = cachewatch.jit(getattr(m.apply, "__wrapped__").__get__(m))  # jit of a bound method
    np.testing.assert_allclose(bound(jnp.ones(2)), [2.0, 2.0])


def test_bound_method_rejitted_shares_the_cache(events):
    class Counter:
        def step(self, x):
            return x + 1

    c = Counter()
    for _ in range(5):
        cachewatch.jit(c.step)(jnp.ones(2))
    assert len([e for e in events if e.compiled]) == 1


def test_user_and_jax_errors_reach_the_caller_unchanged(events):
    def boom(x):
        raise KeyError("user error")

    with pytest.raises(KeyError, match="user error"):
        cachewatch.jit(boom)(1.0)

    def needs_static(x, n):
        return jnp.ones(n) * x

    with pytest.raises(Exception) as ours:
        cachewatch.jit(needs_static)(1.0, 3)
    with pytest.raises(Exception) as theirs:
        jax.jit(needs_static)(1.0, 3)
    assert type(ours.value) is type(theirs.value)
    assert str(ours.value).splitlines()[0] == str(theirs.value).splitlines()[0]
    assert "needs_static" in str(ours.value)  # JAX still names the user's function


def test_cache_hits_add_no_argument_flattening(events):
    flattens = {"n": 0}

    @jax.tree_util.register_pytree_node_class
    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b

        def tree_flatten(self):
            flattens["n"] += 1
            return (self.a, self.b), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    def total(p):
        return p.a + p.b

    pair = Pair(jnp.ones(2), jnp.ones(2))
    counts = []
    for wrap in (jax.jit, functools.partial(cachewatch.jit)):
        fn = wrap(total)
        fn(pair)  # compile
        fn(pair)  # the first cache hit after a compile is timed: it waits for its inputs
        flattens["n"] = 0
        for _ in range(10):
            fn(pair)
        counts.append(flattens["n"])
    # jax.jit flattens the arguments once per cache hit; cachewatch.jit adds none of its own.
    # Exact counts, so a wrapper that never reached the pytree (0 == 0) fails too.
    assert counts == [10, 10]


def test_sampling_times_calls_and_can_be_off(sqlite_url, use_store):
    use_store(sqlite_url, sample_every=1, sample_max_per_second=1000)

    @cachewatch.jit
    def sampled(x):
        return x @ x

    from cachewatch.capture.counters import _stats

    # Counts are per function source, so they carry over from an earlier run of this test.
    stats = _stats[getattr(sampled, "__cachewatch_state__").info.function_hash]
    calls, sampled_calls, sampled_seconds = stats.calls, stats.sampled_calls, stats.sampled_seconds
    for _ in range(20):
        sampled(jnp.ones((8, 8)))
    assert stats.calls - calls == 20
    assert stats.sampled_calls - sampled_calls == 19  # every call but the one that compiled
    assert stats.sampled_seconds > sampled_seconds

    use_store(sqlite_url, sample_every=0)

    @cachewatch.jit
    def unsampled(x):
        return x + x

    stats = _stats[getattr(unsampled, "__cachewatch_state__").info.function_hash]
    calls, sampled_calls = stats.calls, stats.sampled_calls
    for _ in range(20):
        unsampled(jnp.ones(3))
    assert stats.calls - calls == 20
    assert stats.sampled_calls == sampled_calls


def test_internal_failure_never_reaches_the_user(sqlite_url, use_store, monkeypatch, caplog):
    use_store(sqlite_url, raise_internal_errors=False)

    def broken(*args, **kwargs):
        raise RuntimeError("bug inside cachewatch")

    monkeypatch.setattr(sigmod, "build", broken)
    with caplog.at_level(logging.WARNING, logger="cachewatch"):
        result = cachewatch.jit(lambda x: x * 3)(jnp.ones(2))
        cachewatch.jit(lambda x: x * 4)(jnp.ones(2))
    np.testing.assert_allclose(result, [3.0, 3.0])
    places = _guard.internal_errors()
    assert "jit.signature" in places
    assert sum(places.values()) >= 4
    warnings = [r for r in caplog.records if "internal error" in r.getMessage()]
    assert len(warnings) == len(places)  # one warning per place the bug surfaced, not one per call
    _guard.reset()
    current.configure(raise_internal_errors=True)


def test_disabled_is_plain_jax_jit(sqlite_url, use_store):
    use_store(sqlite_url, enabled=False)
    fn = cachewatch.jit(lambda x: x + 1)
    assert not cachewatch.is_watched(fn)
    np.testing.assert_allclose(fn(jnp.ones(1)), [2.0])
    current.configure(enabled=True)


def test_install_watches_every_jax_jit(events):
    cachewatch.install()
    try:
        assert jax.jit is cachewatch.jit

        def library_fn(x):
            return x - 1

        jax.jit(library_fn)(jnp.ones(2))
        jax.jit(library_fn)(jnp.ones(3))
    finally:
        cachewatch.uninstall()
    assert jax.jit is not cachewatch.jit
    assert [e.cause for e in events if e.function.name == "library_fn"] == [Cause.FIRST_CALL, Cause.NEW_SHAPE]


def test_expect_compiles_guard(events):
    @cachewatch.jit
    def guarded_step(x):
        return x * 2

    with cachewatch.expect_compiles(guarded_step, at_most=1):
        for _ in range(3):
            guarded_step(jnp.ones(4))
    with pytest.raises(cachewatch.UnexpectedCompiles) as info:
        with cachewatch.expect_compiles(guarded_step, at_most=1):
            for n in (5, 6, 7):
                guarded_step(jnp.ones(n))
    assert "compiled 3 time(s), at most 1 expected" in str(info.value)
    assert Cause.NEW_SHAPE in str(info.value)


def _sum_of_squares(w):
    return jnp.sum(jnp.tanh(w) ** 2)


def test_a_jit_of_a_transformed_function_is_not_served_the_plain_ones(events):
    """jax.grad, jax.value_and_grad and jax.vmap wrap with functools.wraps, which copies
    the wrapped function's attributes (its cached hooks; a watched jit's state) into the
    wrapper: a jit of the wrapper is the wrapper's, never the function's it wraps."""
    w = jnp.arange(4.0)
    rows = jnp.stack([w, 2 * w])
    expected_value, expected_grad = jax.value_and_grad(_sum_of_squares)(w)
    expected_rows = jax.vmap(_sum_of_squares)(rows)

    plain = cachewatch.jit(_sum_of_squares)
    assert float(plain(w)) == pytest.approx(float(expected_value))
    for inner in (_sum_of_squares, plain):  # a function, and a watched jit of it
        value, grad = cachewatch.jit(jax.value_and_grad(inner))(w)
        assert float(value) == pytest.approx(float(expected_value))
        np.testing.assert_allclose(grad, expected_grad, rtol=1e-6)
        np.testing.assert_allclose(cachewatch.jit(jax.grad(inner))(w), expected_grad, rtol=1e-6)
        np.testing.assert_allclose(cachewatch.jit(jax.vmap(inner))(rows), expected_rows, rtol=1e-6)
    assert not cachewatch.is_watched(jax.grad(plain))
    # The plain jit still serves the function itself.
    assert float(cachewatch.jit(_sum_of_squares)(w)) == pytest.approx(float(expected_value))
