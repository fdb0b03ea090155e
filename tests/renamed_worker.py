"""One process compiling one function with JAX's persistent compilation cache on, whose
lowered module names a helper after a pointer, as code that names a callback after
``id()`` does: two processes lower modules that differ in that name alone.

python tests/renamed_worker.py STORE CACHE_DIR ADDRESS
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp

import cachewatch

cachewatch.configure(store=sys.argv[1], persistent_cache_dir=sys.argv[2], program_texts="stablehlo")


def callback(x):
    return jnp.where(x > 0, x, 0.0) * 3


callback.__name__ = f"callback_{sys.argv[3]}"  # what id() would make it in another process


@cachewatch.jit
def renamed_step(x):
    return jax.jit(callback)(x) + 1


renamed_step(jnp.ones(16))
assert cachewatch.flush(30)
