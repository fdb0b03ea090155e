"""A data-parallel step with ``jax.pmap`` over the host's devices (run with
``XLA_FLAGS=--xla_force_host_platform_device_count=4``): the same shapes every step, so
after its first compiles it only runs."""

import cachewatch

cachewatch.install()

from functools import partial  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

STEPS = 20


@partial(jax.pmap, axis_name="devices")
def step(w, x):
    grads = jax.grad(lambda w: jnp.mean((x @ w) ** 2))(w)
    return w - 0.01 * jax.lax.pmean(grads, "devices")


def main():
    n = jax.local_device_count()
    w = jnp.ones((n, 4, 2))
    for i in range(STEPS):
        w = step(w, jnp.full((n, 8, 4), 0.1 * i))
    print(n, float(w.sum()))


if __name__ == "__main__":
    main()
