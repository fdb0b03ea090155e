"""A random walk whose step is jitted anew at every iteration (``jax.jit(step)(...)``):
JAX's caches are keyed by the function, so it compiles once, but jax.jit's own set-up
runs three thousand times."""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

STEPS = 3000


def step(state, noise):
    return state * 0.99 + 0.01 * noise


def main():
    noise = jax.random.normal(jax.random.PRNGKey(0), (STEPS, 64))
    state = jnp.zeros(64)
    for i in range(STEPS):
        state = jax.jit(step)(state, noise[i])
    print(f"{float(state.sum()):.6f}")


if __name__ == "__main__":
    main()
