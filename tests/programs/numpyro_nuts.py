"""A Bayesian linear regression sampled with NumPyro's NUTS: the sampler's
initialisation finds a starting point and differentiates the model's log density
eagerly, outside any jit, before the jitted sampling loop runs."""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from numpyro.infer import MCMC, NUTS  # noqa: E402


def model(x, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    numpyro.sample("y", dist.Normal(x @ w + b, sigma), obs=y)


def main():
    x = jax.random.normal(jax.random.PRNGKey(0), (40, 3))
    y = x @ jnp.array([1.0, -2.0, 0.5]) + 0.3
    mcmc = MCMC(NUTS(model), num_warmup=30, num_samples=30, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(1), x, y)
    print(float(mcmc.get_samples()["w"].mean()))


if __name__ == "__main__":
    main()
