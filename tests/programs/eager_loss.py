"""A regression trained with ``jax.grad`` of a loss that is not jitted at all.

Every primitive of the loss runs op by op, and differentiating it eagerly makes JAX
build linearized programs of those primitives (outside any jit) on every step; the
last batch of each epoch is smaller.
"""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import random  # noqa: E402

N_EXAMPLES, N_FEATURES, N_OUT, BATCH, EPOCHS = 200, 6, 3, 64, 3


def loss(w, x, y):
    pred = jnp.tanh(x @ w)
    return jnp.mean((pred - y) ** 2) + 0.01 * jnp.sum(w**2)


def main():
    k_x, k_w = random.split(random.PRNGKey(0))
    x = random.normal(k_x, (N_EXAMPLES, N_FEATURES))
    y = jnp.tanh(x @ random.normal(k_w, (N_FEATURES, N_OUT)))
    w = jnp.zeros((N_FEATURES, N_OUT))
    for _ in range(EPOCHS):
        for start in range(0, N_EXAMPLES, BATCH):
            value, grads = jax.value_and_grad(loss)(w, x[start : start + BATCH], y[start : start + BATCH])
            w = w - 0.1 * grads
    print(float(value))


if __name__ == "__main__":
    main()
