"""Alternating least squares with a small solver object that jits its update when it is
built. The helper builds a new solver for every half-step, so its jit is new each time
and compiles again, though the program is the same: the fix is to build it once."""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

ROUNDS, STEPS = 6, 20


class GradientSolver:
    def __init__(self, loss, rate=0.05):
        self.loss = loss
        self.rate = rate
        self._update = jax.jit(self._step)

    def _step(self, params, data):
        return params - self.rate * jax.grad(self.loss)(params, data)

    def run(self, params, data):
        for _ in range(STEPS):
            params = self._update(params, data)
        return params


def loss(w, data):
    x, y = data
    return jnp.mean((x @ w - y) ** 2)


def half_step(w, data):
    solver = GradientSolver(loss)
    return solver.run(w, data)


def main():
    key = jax.random.PRNGKey(0)
    x = jax.random.normal(key, (64, 8))
    y = x @ jnp.arange(8.0)
    w = jnp.zeros(8)
    for _round in range(ROUNDS):
        w = half_step(w, (x, y))
        w = half_step(w, (x, y + 0.01))
    print(f"loss {float(loss(w, (x, y))):.4f}")


if __name__ == "__main__":
    main()
