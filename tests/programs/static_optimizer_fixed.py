"""static_optimizer.py with the fix cachewatch gives it applied: the optimizer is made
once (optax.inject_hyperparams), and each epoch's learning rate goes in as an array
through its state's hyperparameters."""

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
tx = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
for epoch in range(8):
    opt_state = tx.init(params)
    opt_state.hyperparams["learning_rate"] = jnp.asarray(0.1 / (1 + epoch), jnp.float32)
    for _ in range(3):
        params, opt_state = step(params, opt_state, tx, x)
    print(f"{epoch} {float(params.sum()):.6f}")
