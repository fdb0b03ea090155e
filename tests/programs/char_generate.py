"""Sampling text from a tiny character-level language model, one character at a time.

The context grows by one character per step: the Python list of sampled ids becomes an
array (``jnp.array(tokens)``) and the jitted step is called on it, so both compile
again at every new length. The step reads the logits at the last position."""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

VOCAB, WIDTH, NEW_TOKENS = 27, 32, 24
PROMPT = [8, 5, 12, 12, 15]  # "hello"


def init(key):
    k_embed, k_out = jax.random.split(key)
    return {
        "embed": jax.random.normal(k_embed, (VOCAB, WIDTH)),
        "out": jax.random.normal(k_out, (WIDTH, VOCAB)) / WIDTH**0.5,
    }


@jax.jit
def next_logits(params, context):
    h = params["embed"][context]
    # Causal: each position sees the running mean of the characters up to it.
    h = jnp.cumsum(h, axis=0) / jnp.arange(1, context.shape[0] + 1)[:, None]
    logits = jnp.tanh(h) @ params["out"]
    return logits[-1]


def main():
    params = init(jax.random.PRNGKey(0))
    tokens = list(PROMPT)
    for _step in range(NEW_TOKENS):
        context = jnp.array(tokens)
        tokens.append(int(jnp.argmax(next_logits(params, context))))
    print("".join(chr(ord("a") + t - 1) if t else " " for t in tokens))


if __name__ == "__main__":
    main()
