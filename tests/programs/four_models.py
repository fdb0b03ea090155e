"""Four hierarchical models of batting averages, each sampled with NumPyro's NUTS and then
used to predict, the way NumPyro's baseball example compares them.

Each ``mcmc.run`` sets NumPyro's sampler up afresh for a new model: its compiles happen
inside the library, from the user's one line, and no jit of the user's would remove them.
"""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from numpyro.infer import MCMC, NUTS, Predictive  # noqa: E402

PLAYERS, WARMUP, SAMPLES = 12, 40, 40


def fully_pooled(at_bats, hits=None):
    phi = numpyro.sample("phi", dist.Uniform(0, 1))
    with numpyro.plate("players", at_bats.shape[0]):
        return numpyro.sample("obs", dist.Binomial(at_bats, probs=phi), obs=hits)


def not_pooled(at_bats, hits=None):
    with numpyro.plate("players", at_bats.shape[0]):
        phi = numpyro.sample("phi", dist.Uniform(0, 1))
        return numpyro.sample("obs", dist.Binomial(at_bats, probs=phi), obs=hits)


def partially_pooled(at_bats, hits=None):
    m = numpyro.sample("m", dist.Uniform(0, 1))
    kappa = numpyro.sample("kappa", dist.Pareto(1, 1.5))
    with numpyro.plate("players", at_bats.shape[0]):
        phi = numpyro.sample("phi", dist.Beta(m * kappa, (1 - m) * kappa))
        return numpyro.sample("obs", dist.Binomial(at_bats, probs=phi), obs=hits)


def partially_pooled_with_logit(at_bats, hits=None):
    loc = numpyro.sample("loc", dist.Normal(-1, 1))
    scale = numpyro.sample("scale", dist.HalfCauchy(1))
    with numpyro.plate("players", at_bats.shape[0]):
        alpha = numpyro.sample("alpha", dist.Normal(loc, scale))
        return numpyro.sample("obs", dist.Binomial(at_bats, logits=alpha), obs=hits)


def run_inference(model, at_bats, hits, key):
    mcmc = MCMC(NUTS(model), num_warmup=WARMUP, num_samples=SAMPLES, progress_bar=False)
    mcmc.run(key, at_bats, hits)
    return mcmc.get_samples()


def predict(model, at_bats, samples, key):
    predictive = Predictive(model, posterior_samples=samples, return_sites=["obs"])
    return predictive(key, at_bats)["obs"]


def main():
    key = jax.random.PRNGKey(2)
    at_bats = jnp.full(PLAYERS, 45)
    hits = jax.random.binomial(key, 45, 0.27, shape=(PLAYERS,)).astype(jnp.int32)
    for model in (fully_pooled, not_pooled, partially_pooled, partially_pooled_with_logit):
        key, k_run, k_predict = jax.random.split(key, 3)
        samples = run_inference(model, at_bats, hits, k_run)
        predicted = predict(model, at_bats, samples, k_predict)
        print(model.__name__, f"{float(jnp.mean(predicted)):.2f}")


if __name__ == "__main__":
    main()
