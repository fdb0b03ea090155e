"""masked_rows.py with the fix cachewatch gives it applied: every batch keeps its 128 rows
and the rows without a known label weigh nothing in the loss's mean (a mask), so the step
compiles once and trains as before."""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

rng = np.random.default_rng(0)
X = rng.normal(size=(4096, 16)).astype(np.float32)
y = (X @ rng.normal(size=16) > 0).astype(np.int32)
known = rng.random(4096) > 0.3

params = {"w": jnp.zeros((16, 2)), "b": jnp.zeros(2)}
opt = optax.adam(1e-2)
state = opt.init(params)


def loss_fn(p, xb, yb, mask):
    logits = xb @ p["w"] + p["b"]
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, yb)
    return jnp.sum(jnp.where(mask, losses, 0.0)) / jnp.sum(mask)


@jax.jit
def step(p, s, xb, yb, mask):
    loss, g = jax.value_and_grad(loss_fn)(p, xb, yb, mask)
    upd, s = opt.update(g, s, p)
    return optax.apply_updates(p, upd), s, loss


for epoch in range(3):
    for i in range(0, 4096, 128):
        xb, yb, kb = X[i : i + 128], y[i : i + 128], known[i : i + 128]
        params, state, loss = step(params, state, jnp.asarray(xb), jnp.asarray(yb), jnp.asarray(kb))
    print(epoch, f"{float(loss):.5f}")
