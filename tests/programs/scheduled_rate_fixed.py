"""The scheduled-rate loop with the fix cachewatch prints applied: the rate goes to
``eqx.filter_jit``'s step as a float32 array, traced by its type, so one compile serves
every step."""

import cachewatch

cachewatch.install()

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

STEPS = 12


class Model(eqx.Module):
    w: jax.Array

    def __call__(self, x):
        return jnp.tanh(x @ self.w)


@eqx.filter_jit
def step(model, x, lr):
    loss, grads = eqx.filter_value_and_grad(lambda m: jnp.mean(m(x) ** 2))(model)
    return jax.tree.map(lambda p, g: p - lr * g, model, grads), loss


def main():
    model = Model(jnp.full((8, 8), 0.1, jnp.float32))
    x = jnp.ones((4, 8))
    for i in range(STEPS):
        lr = jnp.asarray(0.1 * 0.95**i, jnp.float32)
        model, loss = step(model, x, lr)
        print(i, f"{float(loss):.6f}")


if __name__ == "__main__":
    main()
