"""Small real programs with the classic recompilation pitfalls.

Each scenario defines its jitted functions afresh (so JAX's own caches start cold on
every run), runs them, and returns the function names it exercised. The tests run
them with ``jax_log_compiles`` on and compare cachewatch's record with JAX's log.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import jax
import jax.numpy as jnp

import cachewatch
from cachewatch.core.events import Cause


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def jax_compile_log() -> Iterator[list[str]]:
    """JAX's own account: jax_log_compiles on, its log lines captured through logging."""
    handler = _ListHandler()
    logger = logging.getLogger("jax")
    logger.addHandler(handler)
    previous = jax.config.values["jax_log_compiles"]
    jax.config.update("jax_log_compiles", True)
    try:
        yield handler.messages
    finally:
        jax.config.update("jax_log_compiles", previous)
        logger.removeHandler(handler)


def jax_compile_count(messages: list[str], name: str) -> int:
    return sum(1 for m in messages if m.startswith(f"Finished XLA compilation of jit({name}) "))


def lambda_in_loop():
    def unjitted_loop_body(prev_i):
        return prev_i + 1

    i = 0
    while i < 20:
        i = cachewatch.jit(lambda x: unjitted_loop_body(x))(i)
    return ["<lambda>"]


def lambda_hoisted():
    def hoisted_body(prev_i):
        return prev_i + 1

    step = cachewatch.jit(hoisted_body)
    i = 0
    while i < 20:
        i = step(i)
    return ["hoisted_body"]


def same_function_rewrapped():
    # jax.jit(f) in a loop with the same f shares JAX's cache: one compile.
    def rewrapped_body(prev_i):
        return prev_i + 1

    i = 0
    while i < 20:
        i = cachewatch.jit(rewrapped_body)(i)
    return ["rewrapped_body"]


def partial_in_loop():
    def partial_body(prev_i):
        return prev_i + 1

    i = 0
    while i < 20:
        i = cachewatch.jit(functools.partial(partial_body))(i)
    return ["partial_body"]


def static_values():
    @functools.partial(cachewatch.jit, static_argnames="n")
    def repeat_add(x, n):
        for _ in range(n):
            x = x + 1
        return x

    for n in range(5):
        repeat_add(jnp.ones(4), n=n)
    repeat_add(jnp.ones(4), n=2)  # seen before: no compile
    return ["repeat_add"]


def batch_sizes():
    @cachewatch.jit
    def train_step(params, batch):
        return jnp.tanh(batch["x"] @ params["w"]).sum()

    params = {"w": jnp.ones((3, 2))}
    for size in (8, 16, 8, 32):
        train_step(params, {"x": jnp.ones((size, 3))})
    return ["train_step"]


def dtype_change():
    @cachewatch.jit
    def scale(x):
        return x * 2

    scale(jnp.ones(3, jnp.float32))
    scale(jnp.ones(3, jnp.int32))
    return ["scale"]


def weak_type_flip():
    @cachewatch.jit
    def h(d):
        return d["a"] * 2

    h({"a": 1.0})
    h({"a": 1.0, "b": 2.0})
    h({"a": jnp.float32(1.0)})
    return ["h"]


def scalar_flip():
    @cachewatch.jit
    def add_bias(x, bias):
        return x + bias

    add_bias(jnp.ones(3), 0.5)
    add_bias(jnp.ones(3), jnp.float32(0.5))
    return ["add_bias"]


def dict_keys_change():
    @cachewatch.jit
    def loss(batch):
        return sum(v.sum() for v in batch.values())

    loss({"x": jnp.ones(2)})
    loss({"x": jnp.ones(2), "mask": jnp.ones(2)})
    return ["loss"]


def positional_vs_keyword():
    @cachewatch.jit
    def affine(x, w):
        return x * w

    affine(jnp.ones(2), jnp.ones(2))
    affine(jnp.ones(2), w=jnp.ones(2))
    return ["affine"]


def clear_cache():
    @cachewatch.jit
    def cleared(x):
        return x - 1

    cleared(jnp.ones(2))
    cleared.clear_cache()
    cleared(jnp.ones(2))
    return ["cleared"]


def nested_jit():
    @cachewatch.jit
    def inner(x):
        return jnp.sin(x)

    @cachewatch.jit
    def outer(x):
        return inner(x) * 2

    outer(jnp.ones(3))
    outer(jnp.ones(3))
    # The jaxpr of inner is cached from the nested trace: a compile with no trace.
    inner(jnp.ones(3))
    return ["inner", "outer"]


def threads():
    @cachewatch.jit
    def per_thread(x):
        return jnp.cumsum(x * x)

    barrier = threading.Barrier(8)
    errors = []

    def work(n):
        try:
            barrier.wait(timeout=30)
            per_thread(jnp.ones(n))
        except Exception as exc:  # surfaced by the test below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(n,), name=f"worker-{n}") for n in range(1, 9)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    if errors:
        raise errors[0]
    return ["per_thread"]


def failing_traces():
    @cachewatch.jit
    def branchy(x):
        if x > 0:
            return x
        return -x

    @cachewatch.jit
    def get_negatives(x):
        return x[x < 0]

    raised = []
    for fn, arg in ((branchy, 1.0), (get_negatives, jnp.arange(-3.0, 3.0))):
        try:
            fn(arg)
        except Exception as exc:
            raised.append(type(exc).__name__)
    assert raised == ["TracerBoolConversionError", "NonConcreteBooleanIndexError"], raised
    return ["branchy", "get_negatives"]


SCALE = 1.0


def stale_global():
    """A global read at trace time, changed later (not a compile: a stale capture)."""
    global SCALE

    @cachewatch.jit
    def scaled(x):
        return x * SCALE

    SCALE = 1.0
    scaled(jnp.ones(2))
    SCALE = 3.0
    scaled(jnp.ones(3))  # traces again, reads 3.0, and the change is reported
    return ["scaled"]


ALL = {
    f.__name__: f
    for f in (
        lambda_in_loop,
        lambda_hoisted,
        same_function_rewrapped,
        partial_in_loop,
        static_values,
        batch_sizes,
        dtype_change,
        weak_type_flip,
        scalar_flip,
        dict_keys_change,
        positional_vs_keyword,
        clear_cache,
        nested_jit,
        threads,
        failing_traces,
    )
}

# (function name, cause) of every *compiled* event each scenario must produce, in order
# (order is free for the threads scenario).
EXPECTED_COMPILES = {
    "lambda_in_loop": [("<lambda>", Cause.FIRST_CALL)] + [("<lambda>", Cause.NEW_FUNCTION_OBJECT)] * 19,
    "lambda_hoisted": [("hoisted_body", Cause.FIRST_CALL)],
    "same_function_rewrapped": [("rewrapped_body", Cause.FIRST_CALL)],
    "partial_in_loop": [("partial_body", Cause.FIRST_CALL)] + [("partial_body", Cause.NEW_FUNCTION_OBJECT)] * 19,
    "static_values": [("repeat_add", Cause.FIRST_CALL)] + [("repeat_add", Cause.NEW_STATIC_VALUE)] * 4,
    "batch_sizes": [("train_step", Cause.FIRST_CALL), ("train_step", Cause.NEW_SHAPE), ("train_step", Cause.NEW_SHAPE)],
    "dtype_change": [("scale", Cause.FIRST_CALL), ("scale", Cause.NEW_DTYPE)],
    "weak_type_flip": [("h", Cause.FIRST_CALL), ("h", Cause.NEW_STRUCTURE), ("h", Cause.WEAK_TYPE)],
    "scalar_flip": [("add_bias", Cause.FIRST_CALL), ("add_bias", Cause.WEAK_TYPE)],
    "dict_keys_change": [("loss", Cause.FIRST_CALL), ("loss", Cause.NEW_STRUCTURE)],
    "positional_vs_keyword": [("affine", Cause.FIRST_CALL), ("affine", Cause.NEW_STRUCTURE)],
    "clear_cache": [("cleared", Cause.FIRST_CALL), ("cleared", Cause.CACHE_CLEARED)],
    "nested_jit": [("outer", Cause.FIRST_CALL), ("inner", Cause.FIRST_CALL)],
    "threads": [("per_thread", Cause.FIRST_CALL)] + [("per_thread", Cause.NEW_SHAPE)] * 7,
    "failing_traces": [],
}


def run_program_file(path: str, url: str, extra_env: dict[str, str] | None = None, cwd=None):
    """Run a program file under ``cachewatch run`` into the store ``url``, on the CPU, beside
    JAX's own compile log (stderr), with cachewatch's internal errors raised; it must succeed."""
    env = {
        **os.environ,
        "CACHEWATCH_STORE": url,
        "JAX_PLATFORMS": "cpu",
        "JAX_LOG_COMPILES": "1",
        "CACHEWATCH_RAISE_INTERNAL_ERRORS": "1",
        "TQDM_DISABLE": "1",
        **(extra_env or {}),
    }
    done = subprocess.run(
        [sys.executable, "-m", "cachewatch", "run", path], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done
