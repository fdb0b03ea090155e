"""An Equinox model whose softmax temperature is annealed at every step, kept as a
Python float field of the module. ``eqx.filter_jit`` holds every non-array leaf of its
arguments static, so each new temperature is a new static value: one compile a step."""

import cachewatch

cachewatch.install()

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

STEPS = 12


class Model(eqx.Module):
    layers: list
    temperature: float

    def __init__(self, key, temperature):
        k1, k2 = jax.random.split(key)
        self.layers = [eqx.nn.Linear(8, 32, key=k1), eqx.nn.Linear(32, 1, key=k2)]
        self.temperature = temperature

    def __call__(self, x):
        h = jax.nn.relu(self.layers[0](x) / self.temperature)
        return self.layers[1](h)


optimizer = optax.adam(1e-2)


@eqx.filter_jit
def step(model, opt_state, x, y):
    def loss(m):
        return jnp.mean((jax.vmap(m)(x)[:, 0] - y) ** 2)

    value, grads = eqx.filter_value_and_grad(loss)(model)
    updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), opt_state, value


def main():
    key = jax.random.PRNGKey(0)
    model = Model(key, 1.0)
    opt_state = optimizer.init(eqx.filter(model, eqx.is_array))
    x = jax.random.normal(key, (64, 8))
    y = jnp.sin(x.sum(1))
    for i in range(STEPS):
        model = eqx.tree_at(lambda m: m.temperature, model, 1.0 / (1 + 0.05 * i))
        model, opt_state, value = step(model, opt_state, x, y)
        print(f"{i} {float(value):.5f}")


if __name__ == "__main__":
    main()
