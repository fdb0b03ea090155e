"""A trainer whose step is a method jitted with ``self`` static, built anew each epoch.
A static argument is hashed: a class without ``__hash__`` hashes by identity, so each new
trainer compiles the step again, though the program is the same."""

import cachewatch

cachewatch.install()

from functools import partial  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

EPOCHS, STEPS = 8, 5


class Trainer:
    def __init__(self, lr):
        self.lr = lr

    @partial(jax.jit, static_argnums=0)
    def step(self, w, x, y):
        g = jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
        return w - self.lr * g


def main():
    w = jnp.zeros(4)
    x = jnp.arange(64.0).reshape(16, 4) / 64
    y = jnp.ones(16)
    for epoch in range(EPOCHS):
        trainer = Trainer(0.1)
        for _ in range(STEPS):
            w = trainer.step(w, x, y)
        print(f"{epoch} {float(w.sum()):.6f}")


if __name__ == "__main__":
    main()
