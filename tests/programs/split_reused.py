"""`jax.random.split` of 2 keys, then of 3 inside another jit, then of 3 on its own: the
last compiles `_threefry_split` at a new static count (JAX 0.12 compiles it from the trace
made inside the jit, without tracing again). A recompile for a new static value, no first
call, on every JAX."""

import jax

key = jax.random.PRNGKey(0)
first, second = jax.random.split(key)


@jax.jit
def three_inside(k):
    return jax.random.split(k, 3)


three_inside(key)
print(jax.random.split(key, 3).shape)
