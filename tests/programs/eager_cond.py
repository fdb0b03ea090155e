"""An eager loop (no jit of its own) that picks its update with ``lax.cond``, the branches
written as lambdas in the loop's body: each pass traces them into new jaxprs, which JAX's
op-by-op cache compares by identity, so ``cond`` compiles again at every pass."""

import jax
import jax.numpy as jnp

STEPS, GAIN = 10, 1.5


def main():
    x = jnp.linspace(-1.0, 1.0, 8)
    for step in range(STEPS):
        x = jax.lax.cond(x.sum() > 0, lambda v: v - GAIN, lambda v: v + 1.0, x)
        print(f"{step} {float(x.sum()):.6f}")


if __name__ == "__main__":
    main()
