"""growing_context.py with the printed fix applied: the context kept in a buffer of fixed
capacity written with ``.at[n].set``, the count passed, and the predictor reading position
n - 1 instead of the last one (the padding)."""

import jax
import jax.numpy as jnp

SEED, STEPS, WIDTH = 8, 24, 16


@jax.jit
def predict_next(w, context, n):
    h = jnp.tanh(context @ w["in"])  # one row per time step
    # the next value, from the last real position
    return jnp.sin(3.0 * jax.lax.dynamic_slice_in_dim(h @ w["out"], n - 1, 1) + 1.0)


def main():
    k_in, k_out = jax.random.split(jax.random.PRNGKey(0))
    w = {"in": jax.random.normal(k_in, (1, WIDTH)), "out": jax.random.normal(k_out, (WIDTH, 1)) / WIDTH}
    context = jnp.sin(jnp.arange(SEED, dtype=jnp.float32) / 3)[:, None]
    buf = jnp.zeros((SEED + STEPS, 1)).at[:SEED].set(context)
    outs = []
    for n in range(SEED, SEED + STEPS):
        outs.append(predict_next(w, buf, n))
        buf = buf.at[n].set(outs[-1][0])
    print(" ".join(f"{float(v):.5f}" for v in jnp.concatenate(outs)[:, 0]))


if __name__ == "__main__":
    main()
