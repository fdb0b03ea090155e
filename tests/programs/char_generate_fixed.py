"""char_generate.py with the fix cachewatch gives it applied: the characters live in a
buffer of fixed capacity written with ``.at[n].set``, the step takes the count and reads
the logits at the last real position (n - 1), and it compiles once."""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

VOCAB, WIDTH, NEW_TOKENS = 27, 32, 24
PROMPT = [8, 5, 12, 12, 15]  # "hello"
CAPACITY = 32  # the longest context, rounded up to a power of two


def init(key):
    k_embed, k_out = jax.random.split(key)
    return {
        "embed": jax.random.normal(k_embed, (VOCAB, WIDTH)),
        "out": jax.random.normal(k_out, (WIDTH, VOCAB)) / WIDTH**0.5,
    }


@jax.jit
def next_logits(params, context, n):
    h = params["embed"][context]
    # Causal: each position sees the running mean of the characters up to it, so the
    # padding after position n - 1 changes nothing before it.
    h = jnp.cumsum(h, axis=0) / jnp.arange(1, context.shape[0] + 1)[:, None]
    logits = jnp.tanh(h) @ params["out"]
    return logits[n - 1]


def main():
    params = init(jax.random.PRNGKey(0))
    buffer = jnp.zeros(CAPACITY, dtype=jnp.int32).at[: len(PROMPT)].set(jnp.array(PROMPT))
    n = len(PROMPT)
    for _step in range(NEW_TOKENS):
        token = jnp.argmax(next_logits(params, buffer, n))
        buffer = buffer.at[n].set(token)
        n += 1
    tokens = [int(t) for t in buffer[:n]]
    print("".join(chr(ord("a") + t - 1) if t else " " for t in tokens))


if __name__ == "__main__":
    main()
