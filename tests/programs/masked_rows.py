"""A classifier trained only on the rows whose label is known: each batch of 128 is cut
down to its known rows with a boolean mask before the jitted step, so the step meets a
new batch size (80 to 99 rows) whenever a batch has a count it has not seen. The same
32 batches come round each epoch: every size is met in the first, then served."""

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


def loss_fn(p, xb, yb):
    logits = xb @ p["w"] + p["b"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()


@jax.jit
def step(p, s, xb, yb):
    loss, g = jax.value_and_grad(loss_fn)(p, xb, yb)
    upd, s = opt.update(g, s, p)
    return optax.apply_updates(p, upd), s, loss


for epoch in range(3):
    for i in range(0, 4096, 128):
        xb, yb, kb = X[i : i + 128], y[i : i + 128], known[i : i + 128]
        params, state, loss = step(params, state, jnp.asarray(xb[kb]), jnp.asarray(yb[kb]))
    print(epoch, f"{float(loss):.5f}")
