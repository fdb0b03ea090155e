"""Logistic regression with a jitted loss and the gradient taken outside any jit.

A common first version of a training loop: only the loss is jitted, ``jax.grad`` of it
runs eagerly, and the parameters are updated eagerly with ``jax.tree.map``. JAX compiles
the loss's forward program inside each call and its transpose (the backward pass) after
the call has returned. 600 examples in batches of 128, so each epoch ends with a smaller
batch of 88.
"""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import random  # noqa: E402

N_EXAMPLES, N_FEATURES, BATCH, EPOCHS, LEARNING_RATE = 600, 16, 128, 2, 0.5


def make_data(key):
    k_x, k_w = random.split(key)
    x = random.normal(k_x, (N_EXAMPLES, N_FEATURES))
    w = random.normal(k_w, (N_FEATURES,))
    return x, (x @ w > 0).astype(jnp.float32)


@jax.jit
def loss(params, x, y):
    logits = x @ params["w"] + params["b"]
    return jnp.mean(jnp.logaddexp(0.0, logits) - y * logits)


def main():
    x, y = make_data(random.PRNGKey(0))
    params = {"w": jnp.zeros(N_FEATURES), "b": jnp.zeros(())}
    for epoch in range(EPOCHS):
        for start in range(0, N_EXAMPLES, BATCH):
            grads = jax.grad(loss)(params, x[start : start + BATCH], y[start : start + BATCH])
            params = jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)
        print(f"epoch {epoch}: loss {float(loss(params, x, y)):.3f}")


if __name__ == "__main__":
    main()
    cachewatch.flush(30)
