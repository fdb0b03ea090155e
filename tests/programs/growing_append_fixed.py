"""growing_append.py with the printed fix applied: the samples collected in a Python list
and made into one array after the loop."""

import jax
import jax.numpy as jnp

SAMPLING, THINNING, AFTER = 300, 10, 30000


@jax.jit
def step(key, x):
    return 0.9 * x + jax.random.normal(key)


def main():
    key = jax.random.PRNGKey(0)
    x = jnp.float32(0.0)
    kept = []
    for i in range(SAMPLING):
        key, sub = jax.random.split(key)
        x = step(sub, x)
        if i % THINNING == 0:
            kept.append(x)
    samples = jnp.stack(kept)
    for _ in range(AFTER):
        key, sub = jax.random.split(key)
        x = step(sub, x)
    print(samples.shape[0], f"{float(samples.sum()):.4f}", f"{float(x):.4f}")


if __name__ == "__main__":
    main()
