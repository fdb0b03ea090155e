"""Covariance factorisations at many sizes with no jit of the user's own: every compile
is JAX's (``jnp.linalg.cholesky``, op-by-op primitives), reached from the user's loop."""

import cachewatch

cachewatch.install()

import jax.numpy as jnp  # noqa: E402

SIZES = range(4, 12)


def main():
    total = 0.0
    for n in SIZES:
        cov = jnp.eye(n) + 0.1
        chol = jnp.linalg.cholesky(cov)
        total += float(chol[-1, -1])
    print(total)


if __name__ == "__main__":
    main()
