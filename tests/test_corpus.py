"""A corpus of public example programs, run unchanged under ``cachewatch run``.

tests/corpus/ holds example programs JAX users train with, taken from the libraries' own
repositories (JAX, NumPyro, Flax, Optax, Equinox, Diffrax, Haiku, jraph, BlackJAX, evosax,
JAX MD, Keras; tests/corpus/SOURCES.md names each file and commit) and kept as published but for their sizes (steps, samples, warm-up). A notebook is
kept as its code cells, concatenated in order and unchanged. Where a program reads
what this machine lacks, a stand-in module lies next to it and the program is not touched:
examples/datasets.py gives random arrays of MNIST's shapes instead of a download, and
matplotlib/ and seaborn/ draw nothing (found ahead of installed ones). The NumPyro examples assert the
NumPyro version they were published with (0.21.0); they run with PYTHONOPTIMIZE=1, which
drops that assert (and their shape asserts), so that their text stays as published. The Keras
examples do not choose a backend; they run with KERAS_BACKEND=jax. JAX MD's examples run with
READTHEDOCS=1, their own switch for the small sizes of their documentation build.

Each program runs once beside JAX's own compile log. For every one: every compile JAX
logged is recorded, no cause is ``cache_cleared`` and hardly any ``unknown``, no first
compile is taken for a repeat, and the storms are where reading the program puts them
(EXPECTED, written from the programs' text, not from what cachewatch reports). Where
cachewatch disagrees with a reader today, the expectation stays and the case is an
expected failure that says what cachewatch gets wrong.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
from typing import Required, TypedDict

import pytest
import scenarios
import sqlalchemy as sa

from cachewatch.callpaths import call_path_reads
from cachewatch.core.events import Cause
from cachewatch.store import engine as enginemod
from cachewatch.store import models
from cachewatch.store.columns import Filters
from cachewatch.storms import diagnosis, findings

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
_JAX_COMPILED = re.compile(r"Finished XLA compilation of jit\((.*?)\) in")


class Expected(TypedDict, total=False):
    storms_at: Required[list[str]]  # text of the user's lines each storm must be told at
    no_storm: Required[bool]  # no storm at all, anywhere in the run
    notes: Required[str]  # why, from reading the program
    # Unseeded programs: where the last new program comes early and the loop goes on
    # served from the cache, a burst at storms_at is a first pass (at the same line).
    or_first_pass: bool
    # Every finding the run must lead with, one per root cause: the text of the user's line
    # where its cause enters, and the kind of fix that applies there (none: no finding).
    findings: list[tuple[str, str]]
    # Findings told only where their share of the run passes a threshold, which the machine's
    # speed moves (calls on JAX's Python path: 1% of the run): may be there or not.
    findings_may: list[tuple[str, str]]
    # Kinds of finding the run must have, wherever told (a line the program has twice).
    finding_kinds: list[str]
    # Advice no storm of the run may give (it cannot help the code in front of it).
    storm_fix_not: list[str]


EXPECTED: dict[str, Expected] = {
    "jax_mnist_classifier": {
        "storms_at": [],
        "no_storm": True,
        "notes": "`update` is jitted and sees two batch shapes: 128 rows, and the 56 left over from "
        "3000 (two compiles, then served from the cache). `accuracy` runs un-jitted after each "
        "epoch on the train (3000 rows) and test (500 rows) sets: its ops compile at both sizes "
        "in the first epoch and are served from the cache for the other nine. A first pass, no storm.",
    },
    "jax_advi": {
        "storms_at": [],
        "no_storm": True,
        "notes": "`update` and `objective` are jitted and called with the same shapes every iteration "
        "(the iteration number is a Python int: one weak int32 signature). `_mesh_eval` is static "
        "in its function, limits and tick count: two lambdas made once, so two compiles for 100 "
        "callbacks. The eager vmap of `diag_gaussian_sample` sees the same shapes every time.",
    },
    "numpyro_gp": {
        "storms_at": [],
        "no_storm": True,
        "notes": "One NUTS run (one sampler compile), then one un-jitted `vmap(predict)` over the "
        "posterior samples: `kernel` runs at the 25 training and 400 test points once each, and "
        "the program ends. Nothing compiles again for a shape it had; there is no loop to fix.",
    },
    "numpyro_bnn": {
        "storms_at": [],
        "no_storm": True,
        "notes": "One NUTS run, then one un-jitted `vmap(predict)` over the samples at the 500 test "
        "points and a few slices for the plot, each once. No loop compiles again.",
    },
    "numpyro_funnel": {
        "storms_at": [],
        "no_storm": True,
        "notes": "Two NUTS runs from the same line (`mcmc.run(rng_key)` in `run_inference`), of two "
        "different models (centered and reparameterized): each model's sampler compiles once, "
        "then `Predictive` once. Compiling a second model is no storm: nothing to fix.",
    },
    "numpyro_hmm": {
        "storms_at": [],
        "no_storm": True,
        "notes": "`simulate_data` runs an eager loop of 600 steps whose shapes never change (compiled "
        "at the first step, served after); one NUTS run over a `lax.scan`; `print_results` and "
        "the plot index concrete JAX arrays with Python ints, which JAX serves without a compile "
        "per index. No storm.",
    },
    "flax_nnx_lifted_transforms": {
        "storms_at": [],
        "no_storm": True,
        "notes": "`train_step` (nnx.jit through `nnx.cached_partial`) is called 10,000 times with "
        "batches of 32: one compile. `test_step` runs every 1,000 steps on the whole 100-point "
        "set: one compile. The final `model(X)` runs eagerly once.",
    },
    "equinox_train_rnn": {
        "storms_at": [],
        "no_storm": True,
        "notes": "`make_step` (eqx.filter_jit, made once in `main`) is called 200 times; the dataloader "
        "yields only whole batches of 32 (`while end <= dataset_size`), so one compile. `get_data` "
        "runs eagerly once, and the final eager `jax.vmap(model)(xs)` (a `lax.scan` over 16 steps) "
        "runs once on the whole set. `loss.item()` per step reads a result, compiles nothing.",
    },
    "optax_freezing_parameters": {
        "storms_at": [],
        "no_storm": True,
        "notes": "Four cells each define their own `train_step` (jax.jit, own optimizer: freeze, "
        "masked set_to_zero, partition, ...) and call it 200 times with the same two 1-element "
        "params: one compile each, four different programs. One cell trains eagerly for 400 "
        "steps and swaps the optimizer at step 200: its ops compile in the first step and are "
        "served after (the new optimizer has the same shapes). A first pass per cell, no storm.",
    },
    "optax_flax_example": {
        "storms_at": [],
        "no_storm": True,
        # `loss_grad_fn = jax.value_and_grad(loss)` of the jit `loss`, called eagerly each step:
        # every call of `mse` traced again under it (a few percent of this short run).
        "findings_may": [("loss_val, grads = loss_grad_fn(model)", "jit_transformed")],
        "notes": "`loss = jax.jit(mse)` is made once; `jax.value_and_grad(loss)` runs eagerly around "
        "it for 100 steps on the same 20 samples, and `nnx.Optimizer.update` runs op-by-op: all "
        "compile in the first step and are served for the other 99. No storm.",
    },
    "optax_meta_learning": {
        "storms_at": [],
        "no_storm": True,
        "notes": "`outer_step` (jax.jit, made once) is called 500 times with the same pytree: seven "
        "(x, y) scalar pairs in a list, scalar eta/theta and the same optimizer states: one "
        "compile. The sample generator's eager random ops and the eager `jax.nn.sigmoid(eta)` per "
        "step see scalars every time: compiled at the first step (a dtype or weak-type variant "
        "or two as eta turns from a NumPy scalar into a JAX array), served after. No storm.",
    },
    "keras_demo_functional": {
        "storms_at": [],
        "no_storm": True,
        "notes": "A functional model built at construction (its Dense kernels drawn eagerly by "
        "`_uniform`, static in the shape: one compile per kernel shape, (100, 512), (512, 512) and "
        "(512, 16)). `model.fit` with validation_split=0.2 trains on 4000 rows, 125 whole batches "
        "of 32 in each of 5 epochs: `train_step` compiles once. The 1000 validation rows are 31 "
        "batches and one of 8, and `model.evaluate` on all 5000 rows ends on a batch of 8 too: "
        "`test_step` compiles at 32 and at 8, both in the first epoch. `model.predict` on 5000 "
        "rows: `predict_step` at 32 and at 8. A first pass, no storm.",
    },
    "keras_demo_custom_layer": {
        "storms_at": [],
        "no_storm": True,
        "notes": "A subclassed model built by `model.fit` (its custom layers' kernels drawn by "
        "GlorotNormal, i.e. `_truncated_normal`, static in the shape: (128, 256) twice, one "
        "compile, then (512, 16), a second). Training on 3000 rows with batches of 32 is 93 whole "
        "batches and one of 24 each epoch: `train_step` compiles at 32 and at 24 in the first "
        "epoch and at neither in the other four. The dropout's SeedGenerator state is a variable "
        "of the same shape every step. A first pass, no storm.",
    },
    "jax_physical_optimization": {
        "storms_at": ["board_grad = grad(bounce, 0)(board, x0, y0, vx, vy)"],
        "no_storm": False,
        "or_first_pass": True,
        # The three jits' calls under the eager gradient, at its line (a third of the run);
        # and the backward passes' storm there, where the loop does not end on the cache.
        "findings": [("board_grad = grad(bounce, 0)(board, x0, y0, vx, vy)", "jit_transformed")],
        "findings_may": [("board_grad = grad(bounce, 0)(board, x0, y0, vx, vy)", "static_value")],
        "notes": "`grad(bounce)` runs eagerly every step and differentiates through three module-level "
        "jits. `build_surface` returns a list of 24 [slope, intercept] pairs and `bounce` uses only "
        "the pair of the first segment the ball meets (Python `if` on concrete values), so the other "
        "23 pairs' cotangents are symbolic zeros: the backward pass of `build_surface` (its transpose, "
        "compiled at the `grad(...)` line) is another program for each segment first hit, at the same "
        "argument types. The segment hit depends on the random `vx`, `vy` and the changing board: "
        "about 20 of the 24 segments in 300 steps, so some 20 compiles of `build_surface` spread over "
        "the loop, a storm, and not something the program's arguments change. `solve_t` compiles its "
        "forward once and its backward once per pair of outputs used ((sol1, y_1) or (sol2, y_2)); "
        "`dist_from_hoop` its forward and its one backward. The jit was made once (a decorator): "
        "nothing is re-wrapped in the loop.",
    },
    "jax_mnist_vae": {
        "storms_at": [],
        "no_storm": True,
        "notes": "`run_epoch` (jit, a `lax.fori_loop` over the 94 batches inside) and `evaluate` (jit) "
        "are called once per epoch with the same key, optimizer-state and image shapes: one compile "
        "each. The eager `random.key(epoch)` per epoch takes a Python int each time; stax's "
        "initializers draw each kernel shape once. A first pass, no storm.",
    },
    "jax_newton_method": {
        "storms_at": [],
        "no_storm": True,
        "notes": "Eager Newton iterations (no jit): `jax.grad`, `jax.hessian` and the Wolfe line search "
        "run op by op on a 4-vector and compile each operation at its shapes in the first iteration; "
        "the loop converges in 5. `alpha` starts as the Python int 1 and becomes a float once the "
        "line search halves it, so `alpha * dk` compiles at a weak int and at a weak float: two "
        "variants, both met by the second iteration. A first pass, no storm.",
    },
    "diffrax_neural_ode": {
        "storms_at": [],
        "no_storm": True,
        "notes": "`make_step` (eqx.filter_jit) is called 100 times at each of the two lengths of "
        "`length_strategy` (10 and then 100 time points): a compile per length, by design. One more at "
        "its second call: `Func.out_scale = jnp.array(1.0)` is weakly typed, and the first optax update "
        "hands back a strong float32 (weak_type, the same program again). `diffeqsolve` runs eagerly "
        "under the vmap of `get_data` and once for the plot, with another vector field. The eager ops "
        "(a random draw per weight shape, `ts[:n]`, the batch gathers) compile once per shape. A first "
        "pass, no storm; the weak-typed `out_scale` is no loop's doing.",
    },
    "haiku_vae": {
        "storms_at": [],
        "no_storm": True,
        "notes": "`update` (jit) takes batches of 128 from a pipeline that batches before it repeats: "
        "each pass over the 50,000 training rows ends in a batch of 80, so one more compile at the "
        "first short batch (step 389), served from the cache after. `loss_fn` (jit) is traced inside "
        "`update` and compiles once of its own, at the first evaluation (128 rows for both splits). "
        "`model.init` and `optimizer.init` run op by op once. No storm.",
    },
    "jraph_sat": {
        "storms_at": [],
        "no_storm": True,
        "notes": "Every problem is padded with `jraph.pad_with_graphs` to its split's budget (121 nodes and "
        "210 edges for training, 211 and 380 for the test split): `update` compiles once for its 2,000 "
        "steps, `prediction_loss` once per budget at the first evaluation and is served from the cache "
        "at the second. `network.init` runs once, eagerly, under a vmap: the kernels' random draws "
        "compile once per shape. The padding is the fix already made; no storm.",
    },
    "jraph_game_of_life": {
        "storms_at": [],
        "no_storm": True,
        "notes": "`cg = jax.jit(net.apply)(params, cg)` makes a jit object for each of the 100 steps, of "
        "the same function at the same shapes (400 nodes, 3,200 edges): JAX's caches are keyed by the "
        "function, so `apply_fn` compiles once. Making the objects takes a few milliseconds in a run of "
        "seconds: told in the call paths, no finding. The grid's display indexes concrete arrays, "
        "compiled at the first step and served after. No storm.",
    },
    "haiku_lstms": {
        "storms_at": [
            "outs, _ = jax.jit(model.apply)(trained_params, None, full_context)",
            "full_context = jnp.concatenate([context] + ar_outs)",
            "ar_outs.append(outs[-1:])",
        ],
        "no_storm": False,
        "findings": [("for _ in range(seq_len - context.shape[0]):\n    full_context", "pad_and_mask")],
        "storm_fix_not": ["Move that code inside a jitted function", "outside any jit of yours"],
        "notes": "`autoregressive_predict` feeds the whole context so far to `jax.jit(model.apply)` (a jit "
        "made at the line, of Haiku's apply) for each of 56 steps: the context grows from 8 to 63 rows, a "
        "new program each step. The same loop joins a growing Python list with `jnp.concatenate` (one "
        "more operand each step) and slices the last row of each new output eagerly: three storms, one "
        "root cause, the count that grows at the loop. Jitting those lines cannot help while the count "
        "grows: a buffer of fixed capacity, masked, read at the last real position, does. "
        "`fast_ar_predict` (a `hk.dynamic_unroll` in one jit) compiles once. Training (`update`) "
        "compiles once.",
    },
    "evosax_persistent_es": {
        "storms_at": [],
        "no_storm": True,
        # The same loop body twice (one loop per strategy): told at one of its two vmap lines.
        "findings_may": [("fitness, xs = jax.vmap(unroll, in_axes=(0, 0, None, None, None))(", "jit_transformed")],
        "finding_kinds": ["jit_transformed"],
        "notes": "Two strategies (Persistent ES, then Noise-Reuse ES) each run 1,000 ask/evaluate/tell "
        "generations. `unroll` (jax.jit, T and K static) is called under an eager `jax.vmap` every "
        "generation with K=10, and at each evaluation directly with K=T=100: two compiles, then the cache; "
        "but the eager vmap of a jit runs JAX's Python path for every one of its 2,000 calls: a finding at "
        "the vmap line (jit the vmapped function once, T and K static by position). evosax's ask, tell and "
        "init are jits with `self` static: once per strategy object, and ask and tell once more each, as "
        "the state `_init` builds from Python floats is weakly typed until the first tell. Nothing "
        "recompiles in a loop: no storm.",
    },
    "blackjax_quickstart": {
        "storms_at": [],
        "no_storm": True,
        "notes": "`inference_loop` runs an eager `jax.lax.scan` over a `@jax.jit one_step` defined anew "
        "in each call, around another kernel each time: HMC over 1,000 keys, NUTS over 200, NUTS with "
        "the adapted step size over 200. Three samplers are three programs, one scan compile each; "
        "`window_adaptation.run` compiles BlackJAX's own scan once. `jax.random.split` with 2, 1,000, "
        "200 and 3 keys compiles once per count. Nothing in a loop compiles again: no storm.",
    },
    "jax_custom_derivative_rules": {
        "storms_at": [],
        "no_storm": True,
        "notes": "A tutorial: each cell defines a function with a custom JVP or VJP and evaluates it "
        "once, eagerly, from a top-level line: plainly, under `grad`, `grad(grad(...))`, `jvp`, `vmap` "
        "or `jit(vmap(...))`. No line runs in a loop. `fixed_point`'s eager `lax.while_loop` is traced "
        "anew at each of those lines (its body a closure made per call), so its program compiles "
        "again under each transformation, the same program more than once: waste inside lines that "
        "each ran once, no loop to fix. A first pass, no storm.",
    },
    "jaxmd_nve_simulation": {
        "storms_at": ["PE += [energy_fn(state.position)]"],
        "no_storm": False,
        "findings": [("PE += [energy_fn(state.position)]", "jit_library_function")],
        "storm_fix_not": ["not one to wrap in jax.jit", "functions defined in the loop"],
        "notes": "`step` is jitted once (the `lax.fori_loop` around it is served from the cache after its "
        "first call), but each of the 50 steps then calls `energy_fn` eagerly: JAX MD's `soft_sphere` makes "
        "a new lambda at each call and hands it to `safe_mask`, a jit that takes it as a static argument, so "
        "`safe_mask` compiles the same program again at every step. A storm at that line, inside jax_md; "
        "`energy_fn = jit(energy_fn)` (JAX MD's functions are written to be jitted) compiles it once.",
    },
    "jaxmd_nve_neighbor_list": {
        "storms_at": [],
        "no_storm": True,
        "notes": "`energy_fn` and `exact_energy_fn` are jitted once and called at one shape. The neighbor "
        "list is allocated once, op by op (its capacity is read from the data), and the simulation's "
        "`lax.fori_loop` runs eagerly 20 times with the same shapes: its scan compiles once. The neighbor "
        "list never overflows at this temperature, so nothing is allocated again. A first pass, no storm.",
    },
    "brax_basics": {
        "storms_at": [],
        "no_storm": True,
        # `jax.jit(pipeline.step)` made anew at every step of three loops (2,100 calls on
        # JAX's Python path): a finding where that passes 1% of the run, as the machine runs.
        "findings_may": [
            ("state = jax.jit(pipeline.step)(ball, state, None)", "hoist_jit"),
            ("state = jax.jit(pipeline.step)(pendulum, state, None)", "hoist_jit"),
            ("state = jax.jit(generalized_pipeline.step)(pointing_pendulum, state, act)", "hoist_jit"),
        ],
        "notes": "Three systems (a ball on the positional pipeline, two pendulums on the generalized "
        "one), each stepped by `jax.jit(pipeline.step)` made anew at every step: JAX's cache still "
        "serves it (one compile per system, and Brax's hash wrappers of the system bring one more), "
        "through its Python path. The pendulum's `pipeline.init` runs eagerly once at the top "
        "level: its operations compile at a few shapes inside that one call, a few twice, and it "
        "never runs again. First passes, no storm.",
    },
}

# How often reading the program says a function compiles, and why each compile after its
# first happens (programs not named here: not checked). Names as JAX logs them.
COMPILES: dict[str, dict[str, tuple[int, set[str]]]] = {
    "keras_demo_functional": {
        "train_step": (1, set()),
        "test_step": (2, {Cause.NEW_SHAPE}),  # 32 rows, then the last batch of 8
        "predict_step": (2, {Cause.NEW_SHAPE}),
        "_uniform": (3, {Cause.NEW_STATIC_VALUE}),  # `shape` is static in jax.random.uniform
    },
    "keras_demo_custom_layer": {
        "train_step": (2, {Cause.NEW_SHAPE}),  # 32 rows, then the last batch of 24
        "_truncated_normal": (2, {Cause.NEW_STATIC_VALUE}),  # `shape`: (128, 256) -> (512, 16)
    },
    # `build_surface` is left out: how many of its 24 segments the ball hits is random (unseeded).
    "jax_physical_optimization": {
        # forward; backward for (sol1, y_1); backward for (sol2, y_2): the same argument types,
        # another program (which outputs carry a cotangent), as a static value would make
        "solve_t": (3, {Cause.NEW_STATIC_VALUE}),
        "dist_from_hoop": (2, set()),  # forward, and its one backward (one output)
    },
    "jax_mnist_vae": {
        "run_epoch": (1, set()),
        "evaluate": (1, set()),
    },
    # 10 time points, out_scale strong after the first update, then 100 time points
    "diffrax_neural_ode": {"make_step": (3, {Cause.WEAK_TYPE, Cause.NEW_SHAPE})},
    "haiku_vae": {
        "update": (2, {Cause.NEW_SHAPE}),  # 128 rows, then each pass's last batch of 80
        "loss_fn": (1, set()),
    },
    "jraph_sat": {
        "update": (1, set()),
        "prediction_loss": (2, {Cause.NEW_SHAPE}),  # the training budget, then the test split's
    },
    "jraph_game_of_life": {"apply_fn": (1, set())},
    "haiku_lstms": {"update": (1, set())},
    "evosax_persistent_es": {
        "unroll": (2, {Cause.NEW_STATIC_VALUE}),  # K=10 under the vmap, K=T=100 at evaluation
        "init": (2, {Cause.NEW_STATIC_VALUE}),  # `self` static: one strategy object, then another
    },
    # at each of the 50 steps' eager `energy_fn`, one per pair of species (three: a new lambda each)
    "jaxmd_nve_simulation": {"safe_mask": (151, {Cause.NEW_STATIC_VALUE})},
    # `jax.random.split` of 2, 1,000, 200 and 3 keys: the count is static
    "blackjax_quickstart": {"_threefry_split": (4, {Cause.NEW_STATIC_VALUE})},
}

# The cause each burst of recompiles must be told for, by the function that recompiles
# (programs whose compile counts are not fixed, so COMPILES cannot name them). The physical
# optimisation's throws are not seeded: where the last new segment is hit early and the
# loop goes on served from the cache, its burst is a first pass, else a storm; its cause
# is the same either way.
STORM_CAUSES: dict[str, dict[str, str]] = {
    # Each backward compile is another program at the same argument types (which of its 48
    # outputs the loss read): what cachewatch calls a new static value when a program changes
    # at the same types. The jit is made once; no jit object is new.
    "jax_physical_optimization": {"build_surface": Cause.NEW_STATIC_VALUE},
}

# Where cachewatch names a recompile's cause other than reading the program does, per
# program: what it gets wrong (the counts are still checked by their own test).
CAUSE_WRONG_TODAY: dict[str, str] = {}

# Today's cachewatch against a reader, per program: what it gets wrong, and whether it gets
# it wrong every time (strict) or as the machine's timing falls.
WRONG_TODAY: dict[str, tuple[str, bool]] = {}

# Programs that do not run to their end under `cachewatch run` with its internal errors
# raised (as run_program_file runs them) though they do on their own: every test of theirs.
FAILS_TODAY: dict[str, str] = {}

# The NumPyro examples assert `numpyro.__version__.startswith("0.21.0")`; NumPyro here is
# newer. -O drops asserts (that one, and the models' shape checks), leaving the text as it is.
ENV = {name: {"PYTHONOPTIMIZE": "1"} for name in EXPECTED if name.startswith("numpyro_")}
# Keras's default backend is TensorFlow (not installed); KERAS_HOME (relative: in the run's own
# directory) keeps its keras.json out of the home directory.
ENV.update(
    {name: {"KERAS_BACKEND": "jax", "KERAS_HOME": "keras_home"} for name in EXPECTED if name.startswith("keras_")}
)


# JAX MD's examples shrink themselves where READTHEDOCS is set (their documentation build).
ENV.update({name: {"READTHEDOCS": "1"} for name in EXPECTED if name.startswith("jaxmd_")})


class Ran:
    """One run of a corpus program: its store's compiles and storms, and JAX's own log."""

    def __init__(self, url: str, done: subprocess.CompletedProcess) -> None:
        self.url = url
        self.stdout, self.stderr = done.stdout, done.stderr
        self.logged = collections.Counter(_JAX_COMPILED.findall(done.stderr))
        with enginemod.connection(url) as conn:
            self.storms, self.passes = diagnosis.storms_and_first_passes(conn, threshold=5, window=600)
            e, f = models.compile_events, models.functions
            rows = conn.execute(
                sa.select(f.c.name, e.c.compiled, e.c.cause, e.c.identical_to).join(
                    e, e.c.function_hash == f.c.function_hash
                )
            ).all()
            self.findings = findings.find(conn, threshold=5, window=600)
            # Calls JAX served through its Python path, by function and why.
            self.slow_paths = {c.function.qualname: dict(c.slow) for c in call_path_reads.path_counts(conn, Filters())}
        self.compiles = collections.Counter(row.name for row in rows if row.compiled)
        self.recompile_causes: dict[str, set[str]] = collections.defaultdict(set)
        for row in rows:
            if row.compiled and row.cause != Cause.FIRST_CALL:
                self.recompile_causes[row.name].add(row.cause)
        self.causes = collections.Counter(row.cause for row in rows)
        self.events = len(rows)
        self.first_compiles_linked = [
            row.name for row in rows if row.compiled and row.cause == Cause.FIRST_CALL and row.identical_to
        ]


def _path(program: str) -> str:
    return os.path.join(CORPUS, f"{program}.py")


def run_program(tmp_path, name: str) -> Ran:
    url = f"sqlite:///{tmp_path / (name + '.db')}"
    # cwd: whatever a program writes beside it lands in tmp_path.
    done = scenarios.run_program_file(_path(name), url, ENV.get(name), cwd=tmp_path)
    return Ran(url, done)


def _line_of(program: str, text: str) -> int:
    """The number of the one line holding ``text``; a text of several lines (a line that
    occurs twice, told by the lines after it) is found at its first."""
    (number,) = _lines_of(program, text)
    return number


def _lines_of(program: str, text: str) -> list[int]:
    parts = text.split("\n")
    with open(_path(program)) as f:
        lines = f.read().splitlines()
    return [
        i + 1 for i in range(len(lines) - len(parts) + 1) if all(part in lines[i + k] for k, part in enumerate(parts))
    ]


_RUNS: dict[str, Ran | str] = {}


@pytest.fixture(scope="module")
def ran_corpus(tmp_path_factory):
    """Runs each program once for all of this module's tests (a failed run fails each)."""

    def ran(name: str) -> Ran:
        if name not in _RUNS:
            try:
                _RUNS[name] = run_program(tmp_path_factory.mktemp(name), name)
            except AssertionError as exc:  # the run failed: say so in every test that needs it
                _RUNS[name] = f"{name} did not run to its end: {exc}"
        got = _RUNS[name]
        if isinstance(got, str):
            pytest.fail(got)
        return got

    return ran


def _said(ran: Ran) -> str:
    """What cachewatch wrote to stderr (JAX's own log left out)."""
    return "\n".join(line for line in ran.stderr.splitlines() if "cachewatch" in line.lower())[-3000:]


def _described(ran: Ran) -> list[str]:
    told = [f"{s.call_site} {[f.name for f in s.functions]} {s.dominant_cause}: {s.fix[:200]}" for s in ran.storms]
    return told + [f"first pass {p.call_site} {[f.name for f in p.functions]}" for p in ran.passes]


def _case(program: str, wrong: tuple[str, bool] | None = None):
    """A program as a test case: an expected failure where its run fails today (FAILS_TODAY) or
    where cachewatch gets this test's point wrong (``wrong``: the reason, and whether strict)."""
    if program in FAILS_TODAY:
        return pytest.param(program, marks=pytest.mark.xfail(strict=True, reason=FAILS_TODAY[program]))
    if wrong is not None:
        reason, strict = wrong
        return pytest.param(program, marks=pytest.mark.xfail(strict=strict, reason=reason))
    return program


@pytest.mark.parametrize("program", [_case(name) for name in EXPECTED])
def test_every_compile_jax_logged_is_recorded(ran_corpus, program):
    ran = ran_corpus(program)
    assert sum(ran.logged.values()) > 0, "JAX logged no compile: JAX_LOG_COMPILES did not reach the program"
    assert sum(ran.compiles.values()) == sum(ran.logged.values()), _said(ran)
    both = set(ran.compiles) & set(ran.logged)
    assert {n: ran.compiles[n] for n in both} == {n: ran.logged[n] for n in both}


@pytest.mark.parametrize("program", [_case(name) for name in EXPECTED])
def test_no_cache_cleared_and_hardly_any_unknown(ran_corpus, program):
    ran = ran_corpus(program)
    assert ran.causes[Cause.CACHE_CLEARED] == 0
    assert ran.causes[Cause.UNKNOWN] < 0.01 * ran.events, ran.causes


@pytest.mark.parametrize("program", [_case(name) for name in EXPECTED])
def test_no_first_compile_is_identical_to_an_earlier_one(ran_corpus, program):
    ran = ran_corpus(program)
    assert ran.first_compiles_linked == []


# Calls on JAX's Python path that reading the program predicts, by function and why
# (programs not named here: none told as "other", the reason cachewatch could not name).
SLOW_PATHS: dict[str, dict[str, str]] = {
    # `jax.value_and_grad(loss)` applied eagerly to the jit `loss`: every call of it after
    # the first is traced again under the transformation, through Python.
    "optax_flax_example": {"make_mse_func.<locals>.mse": "under_transformation"},
    # `grad(bounce)` run eagerly around three module-level jits: every call is traced again.
    "jax_physical_optimization": {
        "build_surface": "under_transformation",
        "solve_t": "under_transformation",
        "dist_from_hoop": "under_transformation",
    },
    # `jax.jit(net.apply)` made anew for each of the 100 steps.
    "jraph_game_of_life": {"without_apply_rng.<locals>.apply_fn": "new_jit_object"},
    # `jax.jit(pipeline.step)` made anew at each step of each loop.
    "brax_basics": {"step": "new_jit_object"},
}


@pytest.mark.parametrize("program", [_case(name) for name in EXPECTED])
def test_calls_on_the_python_path_are_named_for_what_the_program_does(ran_corpus, program):
    ran = ran_corpus(program)
    for function, reason in SLOW_PATHS.get(program, {}).items():
        assert set(ran.slow_paths.get(function, {})) == {reason}, ran.slow_paths
    assert not [f for f, reasons in ran.slow_paths.items() if "other" in reasons], ran.slow_paths


def _as_read(program: str):
    return _case(program, WRONG_TODAY.get(program))


@pytest.mark.parametrize("program", [_as_read(name) for name in EXPECTED])
def test_storms_are_where_reading_the_program_puts_them(ran_corpus, program):
    ran = ran_corpus(program)
    expected = EXPECTED[program]
    if expected["no_storm"]:
        assert not ran.storms, _described(ran)
        assert "Storm [" not in ran.stderr
        return
    sites = {f"{_path(program)}:{_line_of(program, text)}": text for text in expected["storms_at"]}
    told = collections.Counter(s.call_site for s in ran.storms)
    if expected.get("or_first_pass"):
        passed = {p.call_site for p in ran.passes}
        assert set(told) <= set(sites), _described(ran)  # nowhere else
        assert set(sites) <= set(told) | passed, _described(ran)  # each one, a storm or a first pass
    else:
        assert set(told) == set(sites), _described(ran)  # each one, and nowhere else
    assert all(count == 1 for count in told.values()), _described(ran)
    for storm in ran.storms:
        assert storm.fix, storm
        assert storm.dominant_cause in {cause.value for cause in Cause}, storm
        assert not [words for words in expected.get("storm_fix_not", []) if words in storm.fix], storm.fix


def _findings_at(program: str, expected: list[tuple[str, str]]) -> collections.Counter[tuple[str, str]]:
    return collections.Counter((f"{_path(program)}:{_line_of(program, text)}", kind) for text, kind in expected)


@pytest.mark.parametrize("program", [_as_read(name) for name in EXPECTED])
def test_findings_are_one_per_root_cause_at_the_users_line(ran_corpus, program):
    ran = ran_corpus(program)
    expected = EXPECTED[program]
    want = _findings_at(program, expected.get("findings", []))
    # A line the program has twice may be told at either.
    may = collections.Counter(
        (f"{_path(program)}:{line}", kind)
        for text, kind in expected.get("findings_may", [])
        for line in _lines_of(program, text)
    )
    told = collections.Counter((f.entry, f.fix_kind) for f in ran.findings)
    described = [f"{f.entry_text} {f.fix_kind}: {findings.describe(f)[:300]}" for f in ran.findings]
    assert not told - want - may, described  # nowhere else
    assert not want - told, described
    assert set(expected.get("finding_kinds", [])) <= {f.fix_kind for f in ran.findings}, described
    for found in ran.findings:
        if found.library is not None:  # a call into a library cannot be jitted as called
            assert "inside a jitted function" not in found.fix, described


@pytest.mark.parametrize("program", [_case(name) for name in COMPILES])
def test_functions_compile_as_often_as_reading_the_program_says(ran_corpus, program):
    ran = ran_corpus(program)
    expected = {function: count for function, (count, _) in COMPILES[program].items()}
    assert {function: ran.compiles[function] for function in expected} == expected, _said(ran)


def _causes_as_read(program: str):
    return _case(program, (CAUSE_WRONG_TODAY[program], True) if program in CAUSE_WRONG_TODAY else None)


@pytest.mark.parametrize("program", [_causes_as_read(name) for name in COMPILES])
def test_recompiles_are_told_for_what_the_program_changes(ran_corpus, program):
    ran = ran_corpus(program)
    expected = {function: {str(cause) for cause in causes} for function, (_, causes) in COMPILES[program].items()}
    assert {function: ran.recompile_causes.get(function, set()) for function in expected} == expected


@pytest.mark.parametrize("program", list(STORM_CAUSES))
def test_storms_are_told_for_what_the_program_changes(ran_corpus, program):
    ran = ran_corpus(program)
    told = {f.name: burst.dominant_cause for burst in (*ran.passes, *ran.storms) for f in burst.functions}
    assert {function: told.get(function) for function in STORM_CAUSES[program]} == STORM_CAUSES[program]


def _energies(stdout: str) -> list[list[str]]:
    """The step, kinetic, potential and total energy columns JAX MD's NVE example prints
    (its last column, seconds per step, is the clock's)."""
    return [line.split("\t")[:4] for line in stdout.splitlines() if line[:1].isdigit()]


def test_a_library_function_jitted_where_the_finding_says_compiles_once_and_changes_nothing(ran_corpus, tmp_path):
    """JAX MD's NVE example, with the finding's fix applied as printed to a copy: the
    statement it names, after the line it names. `safe_mask` is then traced inside the
    jitted energy function and never compiled on its own; the energies are the same."""
    program = "jaxmd_nve_simulation"
    ran = ran_corpus(program)
    (found,) = ran.findings
    edit = re.search(r"`(\w+ = [\w.]+\(\w+\))` right after it is made \(lines? (?:\d+-)?(\d+)\)", found.fix)
    assert edit, found.fix
    with open(_path(program)) as f:
        lines = f.read().splitlines(keepends=True)
    lines.insert(int(edit.group(2)), edit.group(1) + "\n")
    copy = tmp_path / f"{program}.py"
    copy.write_text("".join(lines))
    url = f"sqlite:///{tmp_path / 'fixed.db'}"
    # Its stand-ins (seaborn, matplotlib) are found beside the published program, not the copy.
    env = {**ENV[program], "PYTHONPATH": CORPUS}
    fixed = Ran(url, scenarios.run_program_file(str(copy), url, env, cwd=tmp_path))
    assert _energies(fixed.stdout) == _energies(ran.stdout) != []
    assert "safe_mask" not in fixed.logged
    assert "safe_mask" not in fixed.compiles
    assert sum(fixed.compiles.values()) == sum(fixed.logged.values()) < sum(ran.compiles.values()) - 140
    assert fixed.storms == []
    assert fixed.findings == []
