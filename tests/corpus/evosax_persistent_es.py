# ruff: noqa
# mypy: ignore-errors
# From https://github.com/RobertTLange/evosax/blob/d4b4127708cb2cd0cc906b910ddcd091013153a9/examples/07_persistent_es.ipynb
# (Apache-2.0, the repository's LICENSE; the notebook carries no license header of its own):
# its code cells, concatenated in order and unchanged, each under a "# %% [code cell N]" line
# naming its cell; the markdown cells are left out, and so are code cells 3 and 5, which hold
# nothing but an IPython magic (`%pip install -U "jax[cuda]"`, `%pip install -U "evosax[examples]"`).
# Shrunk: both generation loops `range(5000)` -> `range(1000)` (evaluation at generations 0 and
# 500; population 128, T=100 and K=10 unchanged).

# %% [code cell 7]
from functools import partial

import jax
import jax.numpy as jnp
import optax
from evosax.algorithms import NoiseReuseES, PersistentES

# %% [code cell 8]
seed = 0
key = jax.random.key(seed)

# %% [code cell 10]
def loss(x):
    """Inner loss."""
    return (
        jnp.sqrt(x[0] ** 2 + 5)
        - jnp.sqrt(5)
        + jnp.sin(x[1]) ** 2 * jnp.exp(-5 * x[0] ** 2)
        + 0.25 * jnp.abs(x[1] - 100)
    )


def update(state, i):
    """Perform a single inner problem update, e.g., a single unroll step."""
    (L, x, theta, t_curr, T, K) = state
    lr = jnp.exp(theta[0]) * (T - t_curr) / T + jnp.exp(theta[1]) * t_curr / T
    x = x - lr * jax.grad(loss)(x)
    L += loss(x) * (t_curr < T)
    t_curr += 1
    return (L, x, theta, t_curr, T, K), x


@partial(jax.jit, static_argnames=("T", "K"))
def unroll(x_init, theta, t0, T, K):
    """Unroll the inner problem for K steps."""
    L = 0.0
    initial_state = (L, x_init, theta, t0, T, K)
    state, outputs = jax.lax.scan(update, initial_state, None, length=K)
    (L, x_curr, theta, t_curr, T, K) = state
    return L, x_curr

# %% [code cell 12]
population_size = 128

strategy = PersistentES(
    population_size=population_size,
    solution=jnp.zeros(2),
    std_schedule=optax.constant_schedule(0.2),
)
params = strategy.default_params.replace(T=100, K=10)

key, subkey = jax.random.split(key)
state = strategy.init(subkey, jnp.zeros(2), params)

# Initialize inner parameters
xs = jnp.ones((population_size, 2)) * jnp.array([1.0, 1.0])

params

# %% [code cell 14]
for i in range(1000):
    key, key_ask, key_tell = jax.random.split(key, 3)

    if state.inner_step_counter == 0:
        # Reset the inner problem: iteration, parameters
        xs = jnp.ones((population_size, 2)) * jnp.array([1.0, 1.0])

    population, state = strategy.ask(key_ask, state, params)

    # Unroll inner problem for K steps using antithetic perturbations
    fitness, xs = jax.vmap(unroll, in_axes=(0, 0, None, None, None))(
        xs, population, state.inner_step_counter, params.T, params.K
    )

    state, metrics = strategy.tell(key_tell, population, fitness, state, params)

    # Evaluation!
    if i % 500 == 0:
        L, _ = unroll(jnp.array([1.0, 1.0]), state.mean, 0, params.T, params.T)
        print(f"Generation {i:4d} | Mean fitness: {L:.2f}")

# %% [code cell 16]
population_size = 128

strategy = NoiseReuseES(
    population_size=population_size,
    solution=jnp.zeros(2),
    std_schedule=optax.constant_schedule(0.2),
)
params = strategy.default_params.replace(T=100, K=10)

key, subkey = jax.random.split(key)
state = strategy.init(subkey, jnp.zeros(2), params)

# Initialize inner parameters
xs = jnp.ones((population_size, 2)) * jnp.array([1.0, 1.0])

params

# %% [code cell 17]
for i in range(1000):
    key, key_ask, key_tell = jax.random.split(key, 3)

    if state.inner_step_counter == 0:
        # Reset the inner problem: iteration, parameters
        xs = jnp.ones((population_size, 2)) * jnp.array([1.0, 1.0])

    population, state = strategy.ask(key_ask, state, params)

    # Unroll inner problem for K steps using antithetic perturbations
    fitness, xs = jax.vmap(unroll, in_axes=(0, 0, None, None, None))(
        xs, population, state.inner_step_counter, params.T, params.K
    )

    state, metrics = strategy.tell(key_tell, population, fitness, state, params)

    # Evaluation!
    if i % 500 == 0:
        L, _ = unroll(jnp.array([1.0, 1.0]), state.mean, 0, params.T, params.T)
        print(f"Generation {i:4d} | Mean fitness: {L:.2f}")
