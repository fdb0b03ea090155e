"""An Equinox MLP regressor trained with eqx.filter_jit and Optax."""

import cachewatch

cachewatch.install()

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

N_EXAMPLES, N_FEATURES, BATCH, EPOCHS = 300, 8, 64, 2


def loss_fn(model, x, y):
    return jnp.mean(jnp.square(jax.vmap(model)(x)[:, 0] - y))


optimizer = optax.adam(1e-2)


@eqx.filter_jit
def train_step(model, opt_state, x, y):
    loss, grads = eqx.filter_value_and_grad(loss_fn)(model, x, y)
    updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), opt_state, loss


def main():
    key_x, key_model = jax.random.split(jax.random.PRNGKey(0))
    x = jax.random.normal(key_x, (N_EXAMPLES, N_FEATURES))
    y = jnp.sin(x).sum(axis=1)
    model = eqx.nn.MLP(N_FEATURES, 1, width_size=32, depth=2, key=key_model)
    opt_state = optimizer.init(eqx.filter(model, eqx.is_array))
    for epoch in range(EPOCHS):
        for start in range(0, N_EXAMPLES, BATCH):  # 300 = 4 batches of 64 and one of 44
            model, opt_state, loss = train_step(model, opt_state, x[start : start + BATCH], y[start : start + BATCH])
        print(f"epoch {epoch}: loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
    cachewatch.flush(30)
