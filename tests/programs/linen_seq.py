"""A Flax Linen LSTM that learns a running sum, trained with Optax."""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from flax import linen as nn  # noqa: E402

N_SEQUENCES, LENGTH, HIDDEN, BATCH, EPOCHS = 200, 12, 16, 32, 2


class Summer(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.RNN(nn.LSTMCell(HIDDEN))(x)
        return nn.Dense(1)(h)[..., 0]


model = Summer()
optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(3e-3))


def loss_fn(params, x, y):
    return jnp.mean(jnp.square(model.apply(params, x) - y))


@jax.jit
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def main():
    x = jax.random.uniform(jax.random.PRNGKey(0), (N_SEQUENCES, LENGTH, 1))
    y = jnp.cumsum(x[..., 0], axis=1)
    params = model.init(jax.random.PRNGKey(1), x[:1])
    opt_state = optimizer.init(params)
    for epoch in range(EPOCHS):
        for start in range(0, N_SEQUENCES, BATCH):  # 200 = 6 batches of 32 and one of 8
            params, opt_state, loss = train_step(params, opt_state, x[start : start + BATCH], y[start : start + BATCH])
        print(f"epoch {epoch}: loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
    cachewatch.flush(30)
