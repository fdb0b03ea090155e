"""eager_cond.py with the printed fix applied: the branches defined once, outside the
loop, and what they use passed as an operand."""

import jax
import jax.numpy as jnp

STEPS, GAIN = 10, 1.5


def lowered(v, gain):
    return v - gain


def raised(v, gain):
    return v + 1.0


def main():
    x = jnp.linspace(-1.0, 1.0, 8)
    for step in range(STEPS):
        x = jax.lax.cond(x.sum() > 0, lowered, raised, x, GAIN)
        print(f"{step} {float(x.sum()):.6f}")


if __name__ == "__main__":
    main()
