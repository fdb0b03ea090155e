"""Bayesian optimisation of a 1-D function with a Gaussian process written in plain jax.numpy.

Each step adds the newest observation to the data and refits: the posterior is computed
eagerly (no jit of the user's) on one more point than the step before, so every
primitive in it compiles again at each new size, all driven by one growing count.
"""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

STEPS, START = 14, 3


def objective(x):
    return jnp.sin(3.0 * x) + 0.5 * x


def kernel(a, b, scale=0.3):
    return jnp.exp(-0.5 * (a[:, None] - b[None, :]) ** 2 / scale**2)


def posterior(xs, ys, grid):
    k = kernel(xs, xs) + 1e-4 * jnp.eye(xs.shape[0])
    chol = jnp.linalg.cholesky(k)
    alpha = jax.scipy.linalg.cho_solve((chol, True), ys)
    cross = kernel(grid, xs)
    mean = cross @ alpha
    v = jax.scipy.linalg.solve_triangular(chol, cross.T, lower=True)
    var = 1.0 - jnp.sum(v * v, axis=0)
    return mean, var


def main():
    grid = jnp.linspace(-2.0, 2.0, 64)
    xs = jnp.linspace(-1.5, 1.5, START)
    ys = objective(xs)
    for _step in range(STEPS):
        mean, var = posterior(xs, ys, grid)  # one more observation every step
        x_next = grid[jnp.argmax(mean + 2.0 * jnp.sqrt(jnp.maximum(var, 0.0)))]
        xs = jnp.append(xs, x_next)
        ys = jnp.append(ys, objective(x_next))
    print(f"best {float(jnp.max(ys)):.4f} after {xs.shape[0]} observations")


if __name__ == "__main__":
    main()
