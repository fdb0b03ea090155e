"""Every compile of a real program: training scripts written with stax, Flax NNX, Flax
Linen with Optax, Equinox, per-example gradients with vmap, and a jitted loss under an
eager jax.grad (tests/programs/), run under ``cachewatch.install()`` beside JAX's own
compile log; and the pieces of that, one at a time, in this process."""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
import scenarios
import sqlalchemy as sa

import cachewatch
from cachewatch.capture import counters
from cachewatch.core.events import Cause, Kind
from cachewatch.record import recorder
from cachewatch.store import columns, models, queries, rollup
from cachewatch.store import engine as enginemod
from cachewatch.storms import diagnosis

PROGRAMS = os.path.join(os.path.dirname(__file__), "programs")
# The user's own jitted steps in each program.
STEPS = {
    "stax_mlp": ["update"],
    "nnx_vae": ["train_step", "eval_step"],
    "linen_seq": ["train_step"],
    "equinox_mlp": ["train_step"],
    "vmap_convnet": ["private_step"],
    "eager_grad": ["loss"],
}
_JAX_COMPILED = re.compile(r"Finished XLA compilation of jit\((.*?)\) in")


def run_python(
    args: list[str], store: str, extra_env: dict[str, str] | None = None, **kwargs
) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "CACHEWATCH_STORE": store,
        # The CPU unless the suite was started with JAX_PLATFORMS naming another.
        "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
        "JAX_LOG_COMPILES": "1",
        "CACHEWATCH_RAISE_INTERNAL_ERRORS": "1",
        **(extra_env or {}),
    }
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=300, **kwargs)


def compiled_rows(url: str) -> list[sa.Row]:
    e, f = models.compile_events, models.functions
    with enginemod.connection(url) as conn:
        return list(
            conn.execute(
                sa.select(
                    f.c.name,
                    f.c.module,
                    f.c.file,
                    f.c.line,
                    e.c.cause,
                    e.c.call_site,
                    e.c.warmup,
                    e.c.explanation,
                    e.c.diff,
                )
                .join(f, f.c.function_hash == e.c.function_hash)
                .where(e.c.compiled)
                .order_by(e.c.timestamp)
            )
        )


@pytest.mark.parametrize("program", sorted(STEPS))
def test_every_compile_of_a_training_program_is_recorded(program, sqlite_url):
    path = os.path.join(PROGRAMS, f"{program}.py")
    done = run_python([path], sqlite_url)
    assert done.returncode == 0, done.stderr[-3000:]
    logged = collections.Counter(_JAX_COMPILED.findall(done.stderr))
    rows = compiled_rows(sqlite_url)
    recorded = collections.Counter(r.name for r in rows)
    assert sum(logged.values()) > 10
    assert recorded == logged  # per function name, as JAX names them

    source = Path(path).read_text().splitlines()
    for step in STEPS[program]:
        def_line = next(i for i, text in enumerate(source, 1) if text.startswith(f"def {step}("))
        events = [r for r in rows if r.name == step]
        assert events, step
        for event in events:
            # Defined at the user's function (a decorator line counts), called from the user's file,
            # even where a library (nnx.jit, eqx.filter_jit) made the jit.
            assert event.file == path, (event.file, event.line)
            assert def_line - 2 <= event.line <= def_line, (event.file, event.line)
            assert event.call_site.startswith(path + ":")
        assert events[0].cause == Cause.FIRST_CALL
    # None of these programs clears a cache; what cannot be explained stays rare.
    causes = collections.Counter(r.cause for r in rows)
    assert causes[Cause.CACHE_CLEARED] == 0, [(r.name, r.explanation) for r in rows if r.cause == Cause.CACHE_CLEARED]
    assert causes[Cause.UNKNOWN] <= 0.02 * len(rows), [
        (r.name, r.explanation) for r in rows if r.cause == Cause.UNKNOWN
    ]

    with enginemod.connection(sqlite_url) as conn:
        assert diagnosis.detect_storms(conn) == []  # set-up and one smaller last batch are no storm
    assert "alembic" not in done.stderr.lower()

    report = subprocess.run(
        [sys.executable, "-m", "cachewatch", "report", "--store", sqlite_url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    total = sum(logged.values())
    assert f"Compiles recorded: {total}; attributed to a function or an eager primitive: {total} (" in report.stdout


def test_a_smaller_last_batch_is_one_explained_recompile(sqlite_url):
    path = os.path.join(PROGRAMS, "linen_seq.py")
    done = run_python([path], sqlite_url)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [r for r in compiled_rows(sqlite_url) if r.name == "train_step"]
    assert [r.cause for r in steps] == [Cause.FIRST_CALL, Cause.NEW_SHAPE]
    assert steps[0].warmup
    assert not steps[1].warmup
    assert "changed shape on axis 0: float32[32,12,1] -> float32[8,12,1]" in steps[1].explanation


def test_eager_code_right_after_install_is_recorded(sqlite_url):
    script = textwrap.dedent("""
        import cachewatch
        cachewatch.install()
        import jax, jax.numpy as jnp
        x = jnp.arange(6.0)
        y = jax.lax.sin(x) + 1.0
        z = jnp.mean(y.reshape(2, 3), axis=1)
        cachewatch.flush(30)
    """)
    done = run_python(["-c", script], sqlite_url)
    assert done.returncode == 0, done.stderr[-3000:]
    logged = collections.Counter(_JAX_COMPILED.findall(done.stderr))
    assert logged
    assert collections.Counter(r.name for r in compiled_rows(sqlite_url)) == logged


def test_cli_output_into_a_closed_pipe_ends_quietly(sqlite_url):
    done = run_python(
        [
            "-c",
            "import cachewatch, jax.numpy as jnp; cachewatch.install(); "
            "[jnp.ones(n).sum() for n in range(2, 9)]; cachewatch.flush(30)",
        ],
        sqlite_url,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = subprocess.run(
        f"{sys.executable} -m cachewatch report --store '{sqlite_url}' | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.stdout.startswith("function")
    assert report.stderr == ""


def test_opening_the_store_writes_nothing_to_the_programs_log(tmp_path):
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    script = textwrap.dedent("""
        import logging
        logging.basicConfig(level=logging.INFO)   # as absl and many training scripts do
        import cachewatch, jax.numpy as jnp
        step = cachewatch.jit(lambda x: x * 2)
        step(jnp.ones(3))
        assert cachewatch.flush(30)
    """)
    done = run_python(["-c", script], url, extra_env={"JAX_LOG_COMPILES": "0"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "alembic" not in done.stderr.lower()
    assert "Running upgrade" not in done.stderr


# ------------------------------------------------------------ the same, in this process


@pytest.fixture
def heard(sqlite_url, use_store):
    """The events this test records, as the recorder hands them to its listeners."""
    use_store(sqlite_url)
    seen: list = []
    recorder.add_listener(seen.append)
    yield seen
    recorder.remove_listener(seen.append)


@pytest.fixture
def installed(sqlite_url, use_store):
    use_store(sqlite_url)
    jax.clear_caches()  # earlier tests may have compiled the same shapes
    cachewatch.install()
    seen: list = []
    recorder.add_listener(seen.append)
    yield seen
    recorder.remove_listener(seen.append)
    cachewatch.uninstall()


def _line() -> int:
    return sys._getframe(1).f_lineno


def test_jax_helpers_recompile_at_new_shapes_with_causes(installed):
    for n in (7, 11, 13):
        jnp.mean(jnp.ones((n, 3)), axis=0)
    line = _line() - 1
    assert cachewatch.flush(30)
    means = [e for e in installed if e.function.name == "_mean" and e.compiled]
    assert [e.cause for e in means] == [Cause.FIRST_CALL, Cause.NEW_SHAPE, Cause.NEW_SHAPE]
    assert means[1].diff[0]["path"] == "a"
    assert means[1].diff[0]["before"] == "float32[7,3]"
    assert all(e.call_site == f"{__file__}:{line}" for e in means)
    assert means[0].function.module == "jax._src.numpy.reductions"


def test_eager_primitive_recompile_names_the_operand(installed):
    for n in (5, 9):
        jax.lax.sin(jnp.zeros(n, dtype=jnp.float16))
    assert cachewatch.flush(30)
    sines = [e for e in installed if e.function.qualname == "sin (op-by-op)"]
    assert [e.cause for e in sines] == [Cause.FIRST_CALL, Cause.NEW_SHAPE]
    assert "operand operands[0] changed shape: float16[5] -> float16[9]" in sines[1].explanation
    assert sines[1].diff[0]["path"] == "operands[0]"


def test_jit_made_before_install_is_recorded_with_static_values(sqlite_url, use_store):
    use_store(sqlite_url)

    def scale(x, power):
        return x**power

    made_before = jax.jit(scale, static_argnums=1)  # like a library's jit made at import
    jax.clear_caches()
    cachewatch.install()
    try:
        seen: list = []
        recorder.add_listener(seen.append, at_once=True)
        made_before(jnp.ones(4), 2)
        made_before(jnp.ones(4), 3)
        made_before(jnp.ones(6), 3)
        recorder.remove_listener(seen.append)
    finally:
        cachewatch.uninstall()
    events = [e for e in seen if e.function.name == "scale"]
    assert [e.cause for e in events] == [Cause.FIRST_CALL, Cause.NEW_STATIC_VALUE, Cause.NEW_SHAPE]
    assert events[1].diff[0]["path"] == "power"
    assert events[1].diff[0]["after"] == "3"
    assert events[0].function.file == __file__


def test_warm_up_ends_when_the_users_step_runs_again(sqlite_url, use_store):
    use_store(sqlite_url)
    seen: list = []
    recorder.add_listener(seen.append, at_once=True)

    @cachewatch.jit
    def step(x):
        return x + 1.0

    step(jnp.ones(3))  # set-up: first compile
    step(jnp.ones(3))  # from the cache: the loop runs
    step(jnp.ones(4))  # a recompile in steady state
    recorder.remove_listener(seen.append)
    flags = [e.warmup for e in seen if e.function.name == "step"]
    assert flags == [True, False]


def test_eager_set_up_before_the_loop_is_warm_up_not_a_storm(sqlite_url, use_store):
    url = use_store(sqlite_url)
    for n in range(2, 10):
        jnp.zeros((n, 7)) + 1.0  # like initialising one parameter per shape
    assert cachewatch.flush(30)
    with enginemod.connection(url) as conn:
        assert not [s for s in diagnosis.detect_storms(conn) if "(op-by-op)" in s.qualname]
        events = queries.list_events(conn, limit=1000)
    assert events
    assert all(e["warmup"] for e in events)


def test_storms_are_found_per_run(store_url):
    enginemod.ensure_schema(store_url)
    now = 1_700_000_000.0

    def insert(name: str, per_run: int, runs: int) -> None:
        with enginemod.connection(store_url) as conn:
            conn.execute(
                sa.insert(models.functions),
                [{"function_hash": name, "name": name, "qualname": name, "first_seen": now}],
            )
            for r in range(runs):
                run_id = uuid.uuid4().hex
                conn.execute(
                    sa.insert(models.runs),
                    [{"run_id": run_id, "started_at": now + 100 * r, "jax_version": "0.10.2", "devices": []}],
                )
                conn.execute(
                    sa.insert(models.compile_events),
                    [
                        {
                            "event_id": uuid.uuid4().hex,
                            "function_hash": name,
                            "run_id": run_id,
                            "timestamp": now + 100 * r + i,
                            "kind": "trace",
                            "cause": Cause.NEW_STATIC_VALUE,
                            "compiled": True,
                            "nested": False,
                            "signature_hash": str(i),
                        }
                        for i in range(per_run)
                    ],
                )
            rollup.rebuild(conn)

    insert("twice_per_run", per_run=2, runs=3)
    insert("storming", per_run=5, runs=3)
    with enginemod.connection(store_url) as conn:
        storms = diagnosis.detect_storms(conn, threshold=5, window=600, now=now + 1000)
    assert {s.qualname for s in storms} == {"storming"}
    assert len(storms) == 3
    assert all(s.compiles == 5 and s.recurs_in_runs == 3 for s in storms)
    assert len({s.run_id for s in storms}) == 3
    assert "Recurs in 3 runs." in diagnosis.describe_storm(storms[0])


def test_grad_outside_jit_records_the_backward_compile_of_a_wrapped_function(heard, sqlite_url):
    # jax.grad over a watched function, taken outside any jit: JAX compiles the forward
    # program inside the function's call and its transpose after the call has returned.
    # Both are the function's compiles, as JAX's log counts them.
    @cachewatch.jit
    def loss(w, x):
        return jnp.sum(jnp.tanh(x @ w))

    def loss_elsewhere():  # another watched function named `loss`: JAX's debug info tells them apart
        def loss(w):
            return jnp.sum(w)

        return cachewatch.jit(loss)

    loss_elsewhere()
    w = jnp.ones((4, 3))
    with scenarios.jax_compile_log() as messages:
        for n in (2, 2, 5):
            jax.grad(loss)(w, jnp.ones((n, 4)))
        line = _line() - 1
    assert cachewatch.flush(30)
    function_hash = getattr(loss, "__cachewatch_state__").info.function_hash
    events = [e for e in heard if e.function.function_hash == function_hash and e.compiled]
    assert scenarios.jax_compile_count(messages, "loss") == 4
    assert len(events) == 4
    assert [(e.kind, e.cause) for e in events] == [
        (Kind.TRACE, Cause.FIRST_CALL),
        (Kind.COMPILE, Cause.FIRST_CALL),
        (Kind.TRACE, Cause.NEW_SHAPE),
        (Kind.COMPILE, Cause.NEW_SHAPE),
    ]
    backward = events[3]
    assert "backward pass" in backward.explanation
    assert (backward.diff[0]["before"], backward.diff[0]["after"]) == ("float32[2,4]", "float32[5,4]")
    assert all(e.call_site == f"{__file__}:{line}" for e in events)
    with enginemod.connection(sqlite_url) as conn:
        (row,) = queries.function_report(conn, columns.Filters(), function_hashes=[function_hash])
    assert (row["compiles"], row["recompiles"]) == (4, 2)


def test_transformations_outside_jit_compile_programs_of_their_own(heard):
    # grad or vmap of a watched function at a signature JAX has traced already: JAX builds
    # the transformed program from its cached jaxpr and compiles it without a trace. It is
    # neither the plain program again nor a new device.
    @cachewatch.jit
    def energy(w, x):
        return jnp.sum(jnp.tanh(x @ w))

    w, x = jnp.ones((4, 3)), jnp.ones((2, 4))
    with scenarios.jax_compile_log() as messages:
        energy(w, x)  # the function itself: traced and compiled
        jax.grad(energy)(w, x)  # its linearization from the cached jaxpr, then its backward pass
        jax.vmap(energy, in_axes=(None, 0))(w, jnp.ones((5, 2, 4)))
        jax.vmap(energy, in_axes=(None, 0))(w, jnp.ones((6, 2, 4)))
    assert cachewatch.flush(30)
    function_hash = getattr(energy, "__cachewatch_state__").info.function_hash
    events = [e for e in heard if e.function.function_hash == function_hash and e.compiled]
    assert scenarios.jax_compile_count(messages, "energy") == 5
    assert len(events) == 5
    assert [(e.kind, e.cause) for e in events] == [
        (Kind.TRACE, Cause.FIRST_CALL),
        (Kind.COMPILE, Cause.FIRST_CALL),
        (Kind.COMPILE, Cause.FIRST_CALL),
        (Kind.COMPILE, Cause.FIRST_CALL),
        (Kind.COMPILE, Cause.NEW_SHAPE),
    ]
    assert "under linearize (grad)" in events[1].explanation
    assert "backward pass" in events[2].explanation
    assert "under vmap" in events[3].explanation
    assert "(5, 2, 4) -> (6, 2, 4)" in events[4].explanation


def test_checkpoint_outside_jit_records_the_programs_compiled_after_the_call(heard):
    # grad of jax.checkpoint over a watched function, outside any jit: the call is made while
    # remat traces, and the forward, the recomputation and the backward programs are
    # compiled after it. Each is recorded, and each is compared with itself at other shapes.
    @cachewatch.jit
    def block(w, x):
        return jnp.sum(jnp.tanh(x @ w))

    w = jnp.ones((4, 3))
    with scenarios.jax_compile_log() as messages:
        for n in (9, 9, 10):
            jax.grad(jax.checkpoint(block))(w, jnp.ones((n, 4)))
    assert cachewatch.flush(30)
    function_hash = getattr(block, "__cachewatch_state__").info.function_hash
    events = [e for e in heard if e.function.function_hash == function_hash and e.compiled]
    assert scenarios.jax_compile_count(messages, "block") == 6
    assert len(events) == 6
    assert [e.cause for e in events] == [Cause.FIRST_CALL] * 3 + [Cause.NEW_SHAPE] * 3
    assert all("outside its own call" in e.explanation for e in events)
    assert all(any("[9," in d["before"] and "[10," in d["after"] for d in e.diff) for e in events[3:])


def test_calls_made_while_tracing_are_not_executions(sqlite_url, use_store):
    use_store(sqlite_url)

    @cachewatch.jit
    def inner(x):
        return x * 3.0

    @jax.jit
    def outer(x):
        return inner(x) + 1.0

    stats = counters.all_call_stats()
    inner_hash = getattr(inner, "__cachewatch_state__").info.function_hash
    counter = next(s for s in stats if s.function.function_hash == inner_hash)
    before = counter.calls
    outer(jnp.ones(5))
    outer(jnp.ones(5))  # from the cache: inner is not called at all
    inner(jnp.ones(2))  # one execution
    assert counter.calls - before == 1


@pytest.mark.parametrize("program", ["eager_loss", "eager_grad", "numpyro_nuts"])
def test_eager_differentiation_is_never_taken_for_a_cleared_cache(program, sqlite_url):
    """Programs JAX builds when it differentiates code outside any jit (linearized copies of
    the primitives, a sampler's initialisation) share a primitive's name and argument types
    with the primitive run op by op: each is its own program, with its own history."""
    done = run_python([os.path.join(PROGRAMS, f"{program}.py")], sqlite_url)
    assert done.returncode == 0, done.stderr[-3000:]
    logged = collections.Counter(_JAX_COMPILED.findall(done.stderr))
    rows = compiled_rows(sqlite_url)
    assert collections.Counter(r.name for r in rows) == logged
    causes = collections.Counter(r.cause for r in rows)
    assert causes[Cause.CACHE_CLEARED] == 0, [(r.name, r.explanation) for r in rows if r.cause == Cause.CACHE_CLEARED]
    assert causes[Cause.UNKNOWN] <= 0.02 * len(rows), [
        (r.name, r.explanation) for r in rows if r.cause == Cause.UNKNOWN
    ]
    assert rows[0].cause == Cause.FIRST_CALL


def test_a_program_jax_rebuilds_for_each_eager_transformation_is_named_so(sqlite_url, use_store):
    use_store(sqlite_url)

    def rebuilt_loss(w, x):
        return jnp.sum(jnp.sin(x @ w) ** 2)

    cachewatch.install()
    try:
        with scenarios.jax_compile_log() as messages:
            w, x = jnp.ones((7, 2)), jnp.ones((9, 7))
            for _ in range(2):  # a new lambda every step: JAX traces it into a new jaxpr each time
                jax.grad(rebuilt_loss)(w, x)
                jax.jvp(lambda w: rebuilt_loss(w, x), (w,), (w,))
                jax.linearize(lambda w: rebuilt_loss(w, x), w)
    finally:
        cachewatch.uninstall()
    assert cachewatch.flush(30)
    with enginemod.connection(sqlite_url) as conn:
        rows = [r for r in queries.list_events(conn, limit=10_000) if r["compiled"]]
    assert len(rows) == len(_JAX_COMPILED.findall("\n".join(messages)))
    causes = collections.Counter(r["cause"] for r in rows)
    assert not causes[Cause.CACHE_CLEARED], causes
    assert not causes[Cause.UNKNOWN], causes
    rebuilt = [r for r in rows if r["cause"] == Cause.NEW_FUNCTION_OBJECT]
    assert rebuilt
    assert all("rebuilt by JAX as a new jaxpr object" in r["explanation"] for r in rebuilt)


def test_a_static_shape_drawn_after_a_symbolic_build_is_a_new_static_value(sqlite_url, use_store):
    """Keras builds a model symbolically first (jax.eval_shape traces every initializer),
    then draws the weights eagerly: each draw compiles without a trace of its own, at the
    same argument types (a key and two bounds); only the static shape, and so what the
    program returns, differs. That is a new static value, not a jaxpr rebuilt."""
    use_store(sqlite_url)

    def kernel(shape, key):
        return jax.random.truncated_normal(key, -2.0, 2.0, shape) * 0.05

    shapes = ((128, 256), (512, 16))
    key = jax.random.PRNGKey(0)
    cachewatch.install()
    try:
        for shape in shapes:
            jax.eval_shape(lambda k, shape=shape: kernel(shape, k), key)
        drawn = [kernel(shape, key).shape for shape in shapes]
    finally:
        cachewatch.uninstall()
    assert drawn == list(shapes)
    assert cachewatch.flush(30)
    with enginemod.connection(sqlite_url) as conn:
        rows = [
            r for r in queries.list_events(conn, limit=10_000) if r["compiled"] and r["name"] == "_truncated_normal"
        ]
    rows.sort(key=lambda r: r["timestamp"])
    assert [r["cause"] for r in rows] == [Cause.FIRST_CALL, Cause.NEW_STATIC_VALUE]
    assert "returns float32[512,16] where it returned float32[128,256]" in rows[1]["explanation"]
    assert rows[1]["diff"][0]["before"] == "float32[128,256]"
    # Another program is another variant: its signature names what it returns.
    assert rows[0]["signature_hash"] != rows[1]["signature_hash"]
