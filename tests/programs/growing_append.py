"""A sampler that keeps every tenth sample with ``jnp.append`` in its loop, then runs on
for much longer: the kept samples grow by one each time, a new shape for ``append`` at
every one, which no later stretch of the run makes a first pass."""

import jax
import jax.numpy as jnp

SAMPLING, THINNING, AFTER = 300, 10, 30000


@jax.jit
def step(key, x):
    return 0.9 * x + jax.random.normal(key)


def main():
    key = jax.random.PRNGKey(0)
    x = jnp.float32(0.0)
    samples = jnp.array([])
    for i in range(SAMPLING):
        key, sub = jax.random.split(key)
        x = step(sub, x)
        if i % THINNING == 0:
            samples = jnp.append(samples, x)
    for _ in range(AFTER):
        key, sub = jax.random.split(key)
        x = step(sub, x)
    print(samples.shape[0], f"{float(samples.sum()):.4f}", f"{float(x):.4f}")


if __name__ == "__main__":
    main()
