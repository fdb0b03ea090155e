"""Thompson sampling with a Bayesian linear model refitted by NumPyro's SVI at every step.

Each step calls ``svi.run``, which jits a fresh closure of its update: the library
re-creates its jitted body every step, so it compiles again every step from the
user's one line.
"""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from numpyro.infer import SVI, Trace_ELBO  # noqa: E402
from numpyro.infer.autoguide import AutoNormal  # noqa: E402

ARMS, FEATURES, ROUNDS, FIT_STEPS = 3, 4, 7, 20


def model(x, y=None):
    w = numpyro.sample("w", dist.Normal(jnp.zeros(FEATURES), 1.0).to_event(1))
    numpyro.sample("y", dist.Normal(x @ w, 0.5), obs=y)


def main():
    key = jax.random.PRNGKey(0)
    true_w = jnp.linspace(-1.0, 1.0, FEATURES)
    arms = jax.random.normal(key, (ARMS, FEATURES))
    # A fixed-size history (the newest rows of a ring buffer), so shapes never change.
    xs, ys = jnp.zeros((16, FEATURES)), jnp.zeros(16)
    guide = AutoNormal(model)
    svi = SVI(model, guide, numpyro.optim.Adam(0.05), Trace_ELBO())
    for _step in range(ROUNDS):
        key, k_fit, k_draw = jax.random.split(key, 3)
        result = svi.run(k_fit, FIT_STEPS, xs, ys)  # refit every step
        w = result.params["w_auto_loc"]
        arm = int(jnp.argmax(arms @ w))
        reward = arms[arm] @ true_w + 0.1 * jax.random.normal(k_draw)
        xs = jnp.roll(xs, 1, axis=0).at[0].set(arms[arm])
        ys = jnp.roll(ys, 1).at[0].set(reward)
    print(float(result.losses[-1]))


if __name__ == "__main__":
    main()
