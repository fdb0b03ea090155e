# ruff: noqa
# mypy: ignore-errors
# From https://github.com/blackjax-devs/blackjax/blob/371540e0c35b1de3e314b7dcd57380ce4e30f537/docs/examples/quickstart.md
# (Apache-2.0, the repository's LICENSE; the notebook carries no license header of its own):
# a jupytext (MyST markdown) notebook; its ```{code-cell} blocks, concatenated in order and
# unchanged, each under a "# %% [code cell N]" line, N counting the code cells only, from 0;
# the markdown is left out, and so are the cells' ":tags:" metadata lines. Four cells (8, 12,
# 14, 15) begin with the IPython cell magic "%%time", which is not Python: that line alone is
# left out of each (unavoidable), the rest of the cell is kept. Plots go to the stand-in matplotlib/.
# Shrunk: HMC inference_loop 10_000 -> 1_000 samples (cell 8), NUTS inference_loop
# 4_000 -> 200 samples (cell 12), window_adaptation num_steps=1000 -> 200 (cell 14),
# adapted NUTS inference_loop 1_000 -> 200 samples (cell 15).

# %% [code cell 0]
import matplotlib.pyplot as plt
import numpy as np

import jax
import jax.numpy as jnp
import jax.scipy.stats as stats

import blackjax

# %% [code cell 1]
from datetime import date
rng_key = jax.random.key(int(date.today().strftime("%Y%m%d")))

# %% [code cell 2]
loc, scale = 10, 20
observed = np.random.normal(loc, scale, size=1_000)

# %% [code cell 3]
def logdensity_fn(loc, log_scale, observed=observed):
    """Univariate Normal"""
    scale = jnp.exp(log_scale)
    logpdf = stats.norm.logpdf(observed, loc, scale)
    return jnp.sum(logpdf)


logdensity = lambda x: logdensity_fn(**x)

# %% [code cell 4]
inv_mass_matrix = np.array([0.5, 0.01])
num_integration_steps = 60
step_size = 1e-3

hmc = blackjax.hmc(logdensity, step_size, inv_mass_matrix, num_integration_steps)

# %% [code cell 5]
initial_position = {"loc": 1.0, "log_scale": 1.0}
initial_state = hmc.init(initial_position)
initial_state

# %% [code cell 6]
hmc_kernel = jax.jit(hmc.step)

# %% [code cell 7]
def inference_loop(rng_key, kernel, initial_state, num_samples):
    @jax.jit
    def one_step(state, rng_key):
        state, _ = kernel(rng_key, state)
        return state, state

    keys = jax.random.split(rng_key, num_samples)
    _, states = jax.lax.scan(one_step, initial_state, keys)

    return states

# %% [code cell 8]
rng_key, sample_key = jax.random.split(rng_key)
states = inference_loop(sample_key, hmc_kernel, initial_state, 1_000)

mcmc_samples = states.position
mcmc_samples["scale"] = jnp.exp(mcmc_samples["log_scale"]).block_until_ready()

# %% [code cell 9]
fig, (ax, ax1) = plt.subplots(ncols=2, figsize=(15, 6))
ax.plot(mcmc_samples["loc"])
ax.set_xlabel("Samples")
ax.set_ylabel("loc")

ax1.plot(mcmc_samples["scale"])
ax1.set_xlabel("Samples")
ax1.set_ylabel("scale");

# %% [code cell 10]
inv_mass_matrix = np.array([0.5, 0.01])
step_size = 1e-3

nuts = blackjax.nuts(logdensity, step_size, inv_mass_matrix)

# %% [code cell 11]
initial_position = {"loc": 1.0, "log_scale": 1.0}
initial_state = nuts.init(initial_position)
initial_state

# %% [code cell 12]
rng_key, sample_key = jax.random.split(rng_key)
states = inference_loop(sample_key, nuts.step, initial_state, 200)

mcmc_samples = states.position
mcmc_samples["scale"] = jnp.exp(mcmc_samples["log_scale"]).block_until_ready()

# %% [code cell 13]
fig, (ax, ax1) = plt.subplots(ncols=2, figsize=(15, 6))
ax.plot(mcmc_samples["loc"])
ax.set_xlabel("Samples")
ax.set_ylabel("loc")

ax1.plot(mcmc_samples["scale"])
ax1.set_xlabel("Samples")
ax1.set_ylabel("scale");

# %% [code cell 14]

warmup = blackjax.window_adaptation(blackjax.nuts, logdensity)
rng_key, warmup_key, sample_key = jax.random.split(rng_key, 3)
(state, parameters), _ = warmup.run(warmup_key, initial_position, num_steps=200)

# %% [code cell 15]

kernel = blackjax.nuts(logdensity, **parameters).step
states = inference_loop(sample_key, kernel, state, 200)

mcmc_samples = states.position
mcmc_samples["scale"] = jnp.exp(mcmc_samples["log_scale"]).block_until_ready()

# %% [code cell 16]
fig, (ax, ax1) = plt.subplots(ncols=2, figsize=(15, 6))
ax.plot(mcmc_samples["loc"])
ax.set_xlabel("Samples")
ax.set_ylabel("loc")

ax1.plot(mcmc_samples["scale"])
ax1.set_xlabel("Samples")
ax1.set_ylabel("scale");
