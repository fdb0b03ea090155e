"""One process compiling one function with JAX's persistent compilation cache on.

python tests/cache_worker.py STORE CACHE_DIR
"""

from __future__ import annotations

import sys

import jax.numpy as jnp

import cachewatch

cachewatch.configure(store=sys.argv[1], persistent_cache_dir=sys.argv[2])


@cachewatch.jit
def cached_step(x):
    return jnp.sin(x) * 2 + 1


cached_step(jnp.ones(16))
assert cachewatch.flush(30)
