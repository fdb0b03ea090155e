"""A step jitted with its optax optimizer as a static argument, and a new optimizer made
each epoch for a learning rate set by hand: an optimizer holds functions, hashed by
identity, so each new one compiles the step again, the same program each time."""

import cachewatch

cachewatch.install()

from functools import partial  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402


@partial(jax.jit, static_argnums=2)
def step(params, opt_state, tx, x):
    grads = jax.grad(lambda p: jnp.mean((x @ p) ** 2))(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


params = jnp.ones(4)
x = jnp.arange(32.0).reshape(8, 4) / 32
for epoch in range(8):
    tx = optax.sgd(0.1 / (1 + epoch))  # a new optimizer each epoch
    opt_state = tx.init(params)
    for _ in range(3):
        params, opt_state = step(params, opt_state, tx, x)
    print(f"{epoch} {float(params.sum()):.6f}")
