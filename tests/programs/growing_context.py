"""Autoregressive prediction of a sine wave that rebuilds its whole context at every step:
the seed window concatenated with the Python list of predictions so far
(``jnp.concatenate([context] + outs)``: one more operand each step), fed to a jitted
predictor that reads its last position. Both compile again at every step."""

import jax
import jax.numpy as jnp

SEED, STEPS, WIDTH = 8, 24, 16


@jax.jit
def predict_next(w, context):
    h = jnp.tanh(context @ w["in"])  # one row per time step
    return jnp.sin(3.0 * (h @ w["out"])[-1:] + 1.0)  # the next value, from the last position


def main():
    k_in, k_out = jax.random.split(jax.random.PRNGKey(0))
    w = {"in": jax.random.normal(k_in, (1, WIDTH)), "out": jax.random.normal(k_out, (WIDTH, 1)) / WIDTH}
    context = jnp.sin(jnp.arange(SEED, dtype=jnp.float32) / 3)[:, None]
    outs: list[jax.Array] = []
    for _ in range(STEPS):
        full_context = jnp.concatenate([context] + outs)
        outs.append(predict_next(w, full_context))
    print(" ".join(f"{float(v):.5f}" for v in jnp.concatenate(outs)[:, 0]))


if __name__ == "__main__":
    main()
