"""A Flax NNX model whose temperature is annealed at every step, kept as a plain Python
attribute of the module. A plain attribute is part of the module's graph definition,
which ``nnx.jit`` keys its cache on: each new temperature compiles the step again."""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

STEPS = 12


class Model(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(8, 32, rngs=rngs)
        self.l2 = nnx.Linear(32, 1, rngs=rngs)
        self.temperature = 1.0

    def __call__(self, x):
        return self.l2(jax.nn.relu(self.l1(x) / self.temperature))


@nnx.jit
def step(model, optimizer, x, y):
    def loss(m):
        return jnp.mean((m(x)[:, 0] - y) ** 2)

    value, grads = nnx.value_and_grad(loss)(model)
    optimizer.update(model, grads)
    return value


def main():
    model = Model(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    x = jax.random.normal(jax.random.PRNGKey(0), (64, 8))
    y = jnp.sin(x.sum(1))
    for i in range(STEPS):
        model.temperature = 1.0 / (1 + 0.05 * i)
        print(f"{i} {float(step(model, optimizer, x, y)):.5f}")


if __name__ == "__main__":
    main()
