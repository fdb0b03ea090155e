"""An RL-style training loop (a PureJaxRL-like rollout and update, jitted) whose update
logs episode statistics through ``jax.debug.callback``; the callback picks the finished
episodes with a boolean mask, so how many it picks changes at every update."""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

ENVS, STEPS, UPDATES = 64, 4, 12
logged: list[float] = []


def log_episodes(returns, done):
    finished = returns[done]  # boolean-mask indexing: as many as are done
    if finished.shape[0]:
        logged.append(float(finished.mean()))


@jax.jit
def update(params, key):
    def step(carry, k):
        state, ret = carry
        action = jax.random.normal(k, (ENVS,)) * params
        state = state + action
        return (state, ret + jnp.tanh(state)), state

    keys = jax.random.split(key, STEPS)
    (state, returns), _ = jax.lax.scan(step, (jnp.zeros(ENVS), jnp.zeros(ENVS)), keys)
    done = jax.random.uniform(key, (ENVS,)) < 0.5
    jax.debug.callback(log_episodes, returns, done)
    return params + 0.01 * returns.mean()


def main():
    params = jnp.float32(0.5)
    key = jax.random.PRNGKey(0)
    for _ in range(UPDATES):
        key, sub = jax.random.split(key)
        params = update(params, sub)
    jax.effects_barrier()
    print(len(logged))


if __name__ == "__main__":
    main()
