"""A Flax NNX model evaluated through its own ``nnx.jit`` on batches of ragged sizes (the
last batch of each pass through a shuffled dataset of varying length): the user's jit,
behind Flax's wrapper, compiles again for each new batch size."""

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
def mean_score(model, x):
    return jnp.mean(model(x))


def main():
    model = Scorer(nnx.Rngs(0))
    total = 0.0
    for size in (32, 32, 13, 32, 7, 32, 21, 32, 5, 32, 29, 32, 11):
        x = jnp.ones((size, 8)) * (size / 32)
        total += float(mean_score(model, x))
    print(f"{total:.4f}")


if __name__ == "__main__":
    main()
