"""The random walk of remade_jit.py with the fix cachewatch prints applied: the step is
jitted once, before the loop."""

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
    jitted = jax.jit(step)
    for i in range(STEPS):
        state = jitted(state, noise[i])
    print(f"{float(state.sum()):.6f}")


if __name__ == "__main__":
    main()
