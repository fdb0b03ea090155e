"""Checked by mypy in tests/test_typing.py (never run): cachewatch.jit keeps the types of
the function it wraps, in both decorator forms, and offers the jit object's methods."""

from typing import assert_type

import jax
import jax.numpy as jnp

import cachewatch


@cachewatch.jit
def step(params: jax.Array, lr: float) -> tuple[jax.Array, float]:
    return params * lr, lr


@cachewatch.jit(static_argnames="n")
def repeat(x: jax.Array, n: int) -> jax.Array:
    return jnp.tile(x, n)


def plain(x: jax.Array) -> jax.Array:
    return x + 1


x = jnp.ones(3)
assert_type(step(x, 0.1), tuple[jax.Array, float])
assert_type(repeat(x, n=2), jax.Array)
assert_type(cachewatch.jit(plain)(x), jax.Array)
assert_type(step.lower(x, 0.1), jax.stages.Lowered)
step.clear_cache()


class Model:
    @cachewatch.jit
    def apply(self, x: jax.Array) -> jax.Array:
        return x * 2


assert_type(Model().apply(x), jax.Array)
