"""remade_optimizer.py with the fix cachewatch gives it applied: the optimizer is built
once (optax.inject_hyperparams), and each epoch's learning rate goes in as an array
through the optimizer state's hyperparameters."""

import cachewatch

cachewatch.install()

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from flax.training import train_state  # noqa: E402


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(1)(nn.relu(nn.Dense(16)(x)))


@jax.jit
def train_step(state, x, y):
    def loss(p):
        return jnp.mean((state.apply_fn(p, x)[:, 0] - y) ** 2)

    value, grads = jax.value_and_grad(loss)(state.params)
    return state.apply_gradients(grads=grads), value


model = MLP()
x = jnp.linspace(-1, 1, 64).reshape(32, 2)
y = jnp.sin(x.sum(1))
params = model.init(jax.random.PRNGKey(0), x)
tx = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
for epoch in range(8):
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)
    state.opt_state.hyperparams["learning_rate"] = jnp.asarray(0.1 / (1 + epoch), jnp.float32)
    for _ in range(4):
        state, value = train_step(state, x, y)
    params = state.params
    print(f"{epoch} {float(value):.6f}")
