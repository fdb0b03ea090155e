"""A Flax bag-of-embeddings text classifier whose batches are padded to their longest
sentence: the token ids are [batch, sequence], and the sequence length changes from
batch to batch while the batch size stays the same."""

import cachewatch

cachewatch.install()

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

VOCAB, BATCH, BATCHES = 50, 4, 9


class Classifier(nn.Module):
    @nn.compact
    def __call__(self, ids, mask):
        x = nn.Embed(VOCAB, 16)(ids)
        x = (x * mask[..., None]).sum(axis=1) / jnp.maximum(mask.sum(axis=1, keepdims=True), 1.0)
        return nn.Dense(2)(nn.relu(nn.Dense(16)(x)))


model = Classifier()
tx = optax.adam(1e-2)


@jax.jit
def train_step(params, opt_state, ids, mask, labels):
    def loss_fn(p):
        logits = model.apply(p, ids, mask)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    grads = jax.grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


def batches(rng):
    for _ in range(BATCHES):
        lengths = rng.integers(3, 64, BATCH)
        longest = int(lengths.max())  # padded to the longest sentence of the batch
        ids = np.zeros((BATCH, longest), np.int32)
        mask = np.zeros((BATCH, longest), np.float32)
        for row, n in enumerate(lengths):
            ids[row, :n] = rng.integers(1, VOCAB, n)
            mask[row, :n] = 1.0
        yield ids, mask, (lengths > 20).astype(np.int32)


def main():
    rng = np.random.default_rng(1)
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((BATCH, 4), jnp.int32), jnp.ones((BATCH, 4)))
    opt_state = tx.init(params)
    for ids, mask, labels in batches(rng):
        params, opt_state = train_step(params, opt_state, ids, mask, labels)
    print("done")


if __name__ == "__main__":
    main()
