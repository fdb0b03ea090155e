"""A first pass over a finite set of shapes is no storm; a function that keeps compiling
new shapes as the program repeats its work is one, and only a batch-like axis is
advised to be bucketed."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import scenarios
import sqlalchemy as sa

import cachewatch
from cachewatch.core.events import Cause
from cachewatch.store import engine as enginemod
from cachewatch.store import models, queries
from cachewatch.storms import diagnosis, fixes
from cachewatch.storms.results import FirstPass, Storm
from cachewatch.storms.storm_reads import Recompile


def _layers(key, sizes):
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=False):
        key, sub = jax.random.split(key)
        params.append((jax.random.normal(sub, (n_in, n_out)) * 0.1, jnp.zeros(n_out)))
    return params


def _predict(params, x):
    # Eager, layer by layer, as stax's apply_fun is when called outside jit.
    for w, b in params[:-1]:
        x = jnp.tanh(jnp.dot(x, w) + b)
    w, b = params[-1]
    return jnp.dot(x, w) + b


def _accuracy(params, images, labels):
    return float(jnp.mean(jnp.argmax(_predict(params, images), axis=1) == labels))


def test_an_eager_evaluation_pass_over_two_set_sizes_is_a_first_pass_not_a_storm(sqlite_url, use_store):
    use_store(sqlite_url)
    rng = np.random.default_rng(0)
    # Three layers of other widths (no other test compiles these), wide enough that an
    # epoch is real work: the epochs after the first, served from the cache, outlast it,
    # by enough that a slow moment of the machine during the first one does not turn
    # the quiet stretch after the burst shorter than the burst.
    sizes = [12, 768, 640, 6]
    train_x, train_y = jnp.asarray(rng.normal(size=(600, 12)), jnp.float32), jnp.asarray(rng.integers(0, 6, 600))
    test_x, test_y = jnp.asarray(rng.normal(size=(140, 12)), jnp.float32), jnp.asarray(rng.integers(0, 6, 140))
    params = _layers(jax.random.PRNGKey(0), sizes)

    @cachewatch.jit
    def first_pass_update(params, x, y):
        def loss(p):
            logits = _predict(p, x)
            return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(x.shape[0]), y])

        grads = jax.grad(loss)(params)
        return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)

    cachewatch.install()
    try:
        with scenarios.jax_compile_log() as messages:
            for _epoch in range(150):
                for start in range(0, 600, 60):
                    params = first_pass_update(params, train_x[start : start + 60], train_y[start : start + 60])
                _accuracy(params, train_x, train_y)
                _accuracy(params, test_x, test_y)
    finally:
        cachewatch.uninstall()
    assert cachewatch.flush(30)
    with enginemod.connection(sqlite_url) as conn:
        dots = [e for e in queries.list_events(conn, limit=10_000) if e["name"] == "dot" and e["compiled"]]
        storms = diagnosis.detect_storms(conn, threshold=5, window=600)
        passes = diagnosis.first_passes(conn, threshold=5, window=600)
    # Three layer shapes times two set sizes, each compiled once, in the first epoch.
    assert len(dots) == scenarios.jax_compile_count(messages, "dot") == 6
    assert not [s for s in storms if s.name == "dot"], [diagnosis.describe_storm(s) for s in storms]
    # Found at the line of user code that ran it, with the other eager code of that line:
    # the hidden layers' line recompiled `dot` 3 times (the last layer's line twice, too
    # few for a burst).
    dot_passes = [p for p in passes if any(f.name == "dot" for f in p.functions)]
    assert [f.compiles for p in dot_passes for f in p.functions if f.name == "dot"] == [3]
    assert all((p.call_site or "").startswith(f"{__file__}:") for p in dot_passes)
    dot_pass = max(dot_passes, key=lambda p: p.compiles)
    assert not dot_pass.active
    assert dot_pass.signatures == dot_pass.compiles >= 5
    assert dot_pass.seconds > 0
    assert f"{dot_pass.compiles} compiles of {dot_pass.compiles} new signatures" in (
        diagnosis.describe_first_pass(dot_pass)
    )
    # The service shows it the same way: apart from the storms, with its cost.
    from cachewatch_server.main import create_app
    from cachewatch_server.settings import ServerSettings
    from fastapi.testclient import TestClient

    with TestClient(create_app(ServerSettings(store=sqlite_url))) as client:
        listing = client.get("/api/v1/storms").json()
        page = client.get("/storms").text
    assert not [s for s in listing["items"] if s["name"] == "dot"]
    (shown,) = [p for p in listing["first_passes"] if p["short_name"] == dot_pass.short_name]
    assert "dot 3x" in shown["short_name"]
    assert shown["signatures"] == dot_pass.signatures
    assert shown["seconds"] == dot_pass.seconds
    assert 'id="first-passes"' in page
    assert dot_pass.function_hash in page.split('id="first-passes"', 1)[1]


def test_a_loop_whose_batch_size_keeps_changing_is_still_a_storm(sqlite_url, use_store):
    use_store(sqlite_url)

    @cachewatch.jit
    def changing_batch(w, x):
        return jnp.tanh(x @ w).sum()

    w = jnp.ones((5, 3))
    for size in range(3, 15):
        changing_batch(w, jnp.ones((size, 5)))
    assert cachewatch.flush(30)
    with enginemod.connection(sqlite_url) as conn:
        storms = [s for s in diagnosis.detect_storms(conn, threshold=5, window=600) if s.name == "changing_batch"]
        passes = [p for p in diagnosis.first_passes(conn, threshold=5, window=600) if p.name == "changing_batch"]
    (storm,) = storms
    assert not passes
    assert storm.active
    assert storm.dominant_cause == Cause.NEW_SHAPE
    assert "Argument x axis 0 took 12 sizes between 3 and 14; pad to powers of two" in storm.fix


def _shape_change(path_shapes: list[tuple[str, str, str, list[int]]]) -> list[dict]:
    return [
        {"path": p, "change": "shape", "cause": Cause.NEW_SHAPE, "before": b, "after": a, "axes": axes}
        for p, b, a, axes in path_shapes
    ]


def test_layer_shapes_that_change_together_are_not_advised_to_be_padded():
    # jnp.dot over a model's layers: both operands change, in the contracted axis too.
    rows = [
        Recompile("h", "r", float(i), Cause.NEW_SHAPE, diff, None, f"s{i}")
        for i, diff in enumerate(
            [
                _shape_change([("a", "float32[60,784]", "float32[60,512]", [1]), ("b", "f", "f", [0, 1])]),
                _shape_change([("a", "float32[60,512]", "float32[60,256]", [1]), ("b", "f", "f", [0, 1])]),
                _shape_change([("a", "float32[60,256]", "float32[60,784]", [1]), ("b", "f", "f", [0, 1])]),
                _shape_change([("a", "float32[60,784]", "float32[60,128]", [1]), ("b", "f", "f", [0, 1])]),
                _shape_change([("a", "float32[60,128]", "float32[60,64]", [1]), ("b", "f", "f", [0, 1])]),
            ]
        )
    ]
    fix = fixes.suggest_fix("dot", Cause.NEW_SHAPE, rows)
    assert "pad to powers of two" not in fix
    assert "do not pad unrelated shapes to one size" in fix


def test_a_layer_of_equal_width_is_no_batch_axis():
    """An eager MLP run layer by layer: from one layer's dot to the next, the input changes
    on axis 1 and the weight on axis 0, both to the new width. That is the contraction of
    one matmul changing, not a batch; padding the weight's rows to a power of two would
    change the model."""

    def layer(n_in: int, n_out: int) -> list[dict]:
        return _shape_change(
            [
                ("operands[0]", f"float32[128,{n_in}]", f"float32[128,{n_out}]", [1]),
                ("operands[1]", f"float32[{n_in},64]", f"float32[{n_out},64]", [0]),
            ]
        )

    rows = [
        Recompile("h", "r", float(i), Cause.NEW_SHAPE, diff, None, f"s{i}")
        for i, diff in enumerate(
            [
                layer(784, 1024),
                layer(1024, 640),
                layer(640, 300),
                _shape_change([("operands[1]", "float32[300,64]", "float32[300,10]", [1])]),
                layer(300, 96),
            ]
        )
    ]
    fix = fixes.suggest_fix("dot", Cause.NEW_SHAPE, rows)
    assert "pad to powers of two" not in fix, fix
    assert "do not pad unrelated shapes to one size" in fix
    # The same two arguments changing on one axis together, as a batch does, still are one.
    batch = [
        Recompile("h", "r", float(i), Cause.NEW_SHAPE, diff, None, f"s{i}")
        for i, diff in enumerate(
            _shape_change(
                [
                    ("x", f"float32[{n},16]", f"float32[{n + 1},16]", [0]),
                    ("y", f"int32[{n}]", f"int32[{n + 1}]", [0]),
                ]
            )
            for n in range(9, 15)
        )
    ]
    assert "Argument x axis 0 took 7 sizes between 9 and 15; pad to powers of two" in fixes.suggest_fix(
        "step", Cause.NEW_SHAPE, batch
    )


def test_a_burst_judged_as_of_its_end_is_a_storm(sqlite_url, use_store):
    """Whether the program went on after a burst is told by what the run wrote after it.
    Judged as of the burst's end (as a notebook cell's report is, before the writer flushes
    the cell's call statistics), the same burst that later reads as a first pass is a storm."""
    use_store(sqlite_url)

    @cachewatch.jit
    def burst_then_quiet(x):
        return jnp.tanh(x).sum()

    for n in range(3, 10):
        burst_then_quiet(jnp.ones((n, 2)))
    ended = time.time()
    # The program goes on, served by the cache, for more calls than the burst made: the
    # calls counted after its last compile say so, however long they took.
    for _ in range(10):
        burst_then_quiet(jnp.ones((5, 2)))
    assert cachewatch.flush(30)
    with enginemod.connection(sqlite_url) as conn:
        later = diagnosis.detect_storms(conn, threshold=5, window=600)
        at_end = diagnosis.detect_storms(conn, threshold=5, window=600, heard_until=ended)
    assert not [s for s in later if s.name == "burst_then_quiet"]
    (storm,) = [s for s in at_end if s.name == "burst_then_quiet"]
    assert storm.active
    assert storm.compiles == 6


def _storms_and_passes(url: str, name: str) -> tuple[list[Storm], list[FirstPass]]:
    with enginemod.connection(url) as conn:
        storms, passes = diagnosis.storms_and_first_passes(conn, threshold=5, window=600)
    return [s for s in storms if s.name == name], [p for p in passes if p.name == name]


def test_a_loop_that_keeps_meeting_new_sizes_between_its_usual_one_is_a_storm_that_ended(sqlite_url, use_store):
    """A ragged loader: each epoch the usual batch of 32, a short batch of a new size, the
    usual batch again. The cache serves the usual size between the new ones and, once
    the loader is fixed, for the rest of the run: calls served after the burst, but the
    burst came while the program kept returning to its usual shape, so it is a storm."""
    use_store(sqlite_url)

    @cachewatch.jit
    def ragged_step(w, x):
        return jnp.tanh(x @ w).sum()

    w = jnp.ones((4, 3))
    for epoch in range(7):
        for size in (32, 32, 9 + epoch, 32):
            ragged_step(w, jnp.ones((size, 4)))
    for _ in range(300):
        ragged_step(w, jnp.ones((32, 4)))
    assert cachewatch.flush(30)
    with enginemod.connection(sqlite_url) as conn:
        repeating = conn.execute(
            sa.select(models.compile_events.c.cause, models.compile_events.c.while_repeating).where(
                models.compile_events.c.function_hash.in_(
                    sa.select(models.functions.c.function_hash).where(models.functions.c.name == "ragged_step")
                )
            )
        ).all()
    # The first new size came straight after the usual one compiled; every later one came
    # after the usual one had been served again.
    assert [bool(r.while_repeating) for r in repeating if r.cause == Cause.NEW_SHAPE] == [False] + [True] * 6
    storms, passes = _storms_and_passes(sqlite_url, "ragged_step")
    assert not passes
    (storm,) = storms
    assert storm.compiles == 7
    assert storm.dominant_cause == Cause.NEW_SHAPE


def test_eager_code_beside_a_ragged_loaders_jit_is_judged_as_that_jit_is(sqlite_url, use_store):
    """The ragged loader above, with each batch converted from NumPy op by op on the
    step's own line: the conversion's calls are not counted, and the step's, served for
    hundreds of calls afterwards, do not make it a first pass, since the step itself met
    each new size once between its usual ones: both are storms."""
    use_store(sqlite_url)

    @cachewatch.jit
    def ragged_convert_step(w, x):
        return jnp.tanh(x @ w).sum()

    w = jnp.ones((4, 3))
    full = np.full((32, 4), 0.5, np.float32)
    cachewatch.install()
    try:
        # Short batches of sizes that do not grow (a count that grows is never a first pass).
        for short in (13, 9, 15, 11, 14, 10, 12):
            for batch in (full, full, full[:short], full):
                ragged_convert_step(w, jnp.asarray(batch * 2))
        for _ in range(300):
            ragged_convert_step(w, jnp.asarray(full * 2))
    finally:
        cachewatch.uninstall()
    assert cachewatch.flush(30)
    with enginemod.connection(sqlite_url) as conn:
        storms, passes = diagnosis.storms_and_first_passes(conn, threshold=5, window=600)
    assert [s.name for s in storms if s.name == "ragged_convert_step"]
    eager = [s for s in storms if s.call_site and s.functions[0].name.endswith("(op-by-op)")]
    assert eager, [s.short_name for s in storms]
    assert not [p for p in passes if p.call_site and p.functions[0].name.endswith("(op-by-op)")]


def test_batches_of_a_few_bucketed_lengths_in_random_order_are_a_first_pass(sqlite_url, use_store):
    """Flax's sst2 example pads each batch to a multiple of 16 tokens and draws the batches
    in random order: the loop meets a length again before it has met them all (its
    compiles come while repeating, as a ragged loader's do), and then every length comes
    round again and again. The calls named after each compile show the lengths served
    again: a first pass, where the ragged loader's sizes, met once each, stay a storm."""
    use_store(sqlite_url)

    @cachewatch.jit
    def bucketed_step(w, x):
        return jnp.tanh(x @ w).sum()

    w = jnp.ones((4, 3))
    full = jnp.ones((16, 4))
    bucketed = [jnp.ones((width, 4)) for width in (32, 48, 64, 80, 96) for _ in range(3)]
    order = np.random.default_rng(0)
    for _ in range(4):
        # A full batch between two bucketed ones: the first call after each compile, timed
        # always, is of the full one; only the calls named after it meet the others again.
        for i in order.permutation(len(bucketed)):
            bucketed_step(w, full)
            bucketed_step(w, bucketed[i])
    assert cachewatch.flush(30)
    with enginemod.connection(sqlite_url) as conn:
        e = models.compile_events
        repeating = conn.execute(
            sa.select(e.c.while_repeating).where(
                e.c.compiled,
                e.c.function_hash.in_(
                    sa.select(models.functions.c.function_hash).where(models.functions.c.name == "bucketed_step")
                ),
            )
        ).scalars()
        assert any(repeating)  # without the named calls, the veto would make it a storm
    storms, passes = _storms_and_passes(sqlite_url, "bucketed_step")
    assert not storms
    (found,) = passes
    assert found.signatures == 5


def test_an_evaluation_pass_in_order_then_served_again_stays_a_first_pass(sqlite_url, use_store):
    """The evaluation pass meets its sizes in order and never returns mid-way: the next
    epoch's pass, served from the cache, makes it a first pass however short the run."""
    use_store(sqlite_url)

    @cachewatch.jit
    def evaluate_sizes(w, x):
        return jnp.tanh(x @ w).mean()

    w = jnp.ones((4, 3))
    for _ in range(3):
        for size in range(20, 27):
            evaluate_sizes(w, jnp.ones((size, 4)))
    assert cachewatch.flush(30)
    storms, passes = _storms_and_passes(sqlite_url, "evaluate_sizes")
    assert not storms
    (found,) = passes
    assert found.signatures == 6


def test_calls_counted_after_a_burst_outweigh_the_clock_however_late_the_run_is_heard_from(sqlite_url, use_store):
    """A jit whose calls are counted one by one: six calls after a burst that spanned
    thirty-one are no program going on, however long after the burst the run last wrote
    (a slow exit, a wait of the user's). Before, the quiet stretch on the clock made such
    a burst a first pass."""
    use_store(sqlite_url)

    @cachewatch.jit
    def sized_often(x):
        return jnp.tanh(x).sum()

    for n in range(3, 11):
        for _ in range(5):
            sized_often(jnp.ones(n))
    assert cachewatch.flush(30)  # a collection after the burst's last compile
    sized_often(jnp.ones(10))
    assert cachewatch.flush(30)
    with enginemod.connection(sqlite_url) as conn:
        stats = models.call_stats
        last = conn.execute(sa.select(sa.func.max(stats.c.timestamp))).scalar_one()
        # The run's last statistics written an hour later, as after a long wait.
        conn.execute(sa.update(stats).where(stats.c.timestamp == last).values(timestamp=last + 3600))
    storms, passes = _storms_and_passes(sqlite_url, "sized_often")
    assert not passes
    (storm,) = storms
    assert storm.compiles == 7


def test_several_models_of_one_factory_jitted_once_each_are_a_first_pass(sqlite_url, use_store):
    """Six models made by one factory (the same code, closures over other widths, as
    hk.transform's apply functions are), each jitted once before the loop and called at
    every round: each new jit object compiles once, at arguments unlike any before, and the
    cache serves them from then on. No storm, and no advice to hoist a jit already hoisted."""
    use_store(sqlite_url)

    def make(width):
        def apply_model(params, x):
            return jnp.tanh(x @ params).sum() * width

        return apply_model

    widths = (8, 16, 32, 64, 128, 256)
    jitted = [cachewatch.jit(make(w)) for w in widths]
    params = [jnp.ones((3, w)) for w in widths]
    x = jnp.ones((4, 3))
    for _ in range(30):
        for model, p in zip(jitted, params, strict=True):
            model(p, x)
    assert cachewatch.flush(30)
    storms, passes = _storms_and_passes(sqlite_url, "apply_model")
    assert not storms
    (found,) = passes
    assert found.compiles == 5
    with enginemod.connection(sqlite_url) as conn:
        e = models.compile_events
        told = conn.execute(sa.select(e.c.explanation).where(e.c.cause == Cause.NEW_FUNCTION_OBJECT)).scalars().all()
    assert len(told) == 5
    assert all("with arguments unlike any earlier one's" in text for text in told), told


def test_a_first_pass_in_a_later_run_of_the_process_is_a_first_pass(sqlite_url, use_store):
    """A notebook that begins a second run (configure with another run name) after a long
    first one: the second run's compiles say which of its own calls compiled, as the store
    counts calls per run. Numbered from the process's start, the first pass of the second
    run read as a burst no call was served after: a storm."""
    use_store(sqlite_url, run_name="first")

    @cachewatch.jit
    def evaluated_in_two_runs(w, x):
        return jnp.tanh(x @ w).mean()

    w = jnp.ones((4, 3))
    for _ in range(400):
        evaluated_in_two_runs(w, jnp.ones((8, 4)))
    cachewatch.configure(run_name="second")
    for _ in range(3):
        for size in range(20, 27):
            evaluated_in_two_runs(w, jnp.ones((size, 4)))
    assert cachewatch.flush(30)
    with enginemod.connection(sqlite_url) as conn:
        r = models.runs
        runs = dict(conn.execute(sa.select(r.c.run_name, r.c.run_id)).all())
        e, f, stats = models.compile_events, models.functions, models.call_stats
        numbers = conn.execute(
            sa.select(e.c.call_number)
            .join(f, f.c.function_hash == e.c.function_hash)
            .where(e.c.compiled, e.c.run_id == runs["second"], f.c.name == "evaluated_in_two_runs")
            .order_by(e.c.timestamp)
        ).scalars()
        calls = {
            name: conn.execute(sa.select(sa.func.sum(stats.c.calls)).where(stats.c.run_id == run)).scalar_one()
            for name, run in runs.items()
        }
    assert list(numbers) == [1, 2, 3, 4, 5, 6, 7]  # the second run's own calls: its first pass
    assert calls == {"first": 400, "second": 21}  # each run's calls under its own id
    storms, passes = _storms_and_passes(sqlite_url, "evaluated_in_two_runs")
    assert not storms
    (found,) = passes
    assert found.signatures == 6
