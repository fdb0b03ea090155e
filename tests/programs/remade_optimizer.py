"""A linen model trained with a learning rate set by hand each epoch: a new optax
optimizer and a new TrainState every epoch. The optimizer's functions are new objects,
held in the state's static data and compared by identity: each epoch compiles the step
again, the same program each time."""

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
for epoch in range(8):
    # a new optimizer and train state each epoch (a learning-rate schedule by hand)
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.sgd(0.1 / (1 + epoch)))
    for _ in range(4):
        state, value = train_step(state, x, y)
    params = state.params
    print(f"{epoch} {float(value):.6f}")
