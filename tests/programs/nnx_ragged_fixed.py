"""nnx_ragged.py with the fix cachewatch gives it applied: each batch is padded to the
next power of two and the mean is taken over the real rows only (a mask), so the jit
compiles once per bucket."""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402


class Scorer(nnx.Module):
    def __init__(self, rngs):
        self.hidden = nnx.Linear(8, 16, rngs=rngs)
        self.out = nnx.Linear(16, 1, rngs=rngs)

    def __call__(self, x):
        return self.out(jax.nn.relu(self.hidden(x)))


@nnx.jit
def mean_score(model, x, mask):
    scores = model(x)[:, 0]
    return jnp.sum(jnp.where(mask, scores, 0.0)) / jnp.sum(mask)


def bucket(n):
    return 1 << (n - 1).bit_length()


def main():
    model = Scorer(nnx.Rngs(0))
    total = 0.0
    for size in (32, 32, 13, 32, 7, 32, 21, 32, 5, 32, 29, 32, 11):
        padded = bucket(size)
        x = jnp.ones((padded, 8)) * (size / 32)
        mask = jnp.arange(padded) < size
        total += float(mean_score(model, x, mask))
    print(f"{total:.4f}")


if __name__ == "__main__":
    main()
