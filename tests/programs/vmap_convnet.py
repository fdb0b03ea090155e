"""A small convolutional classifier with per-example gradients (vmap of grad), as used for
differentially private training: clipped per-example gradients, averaged, then an SGD step.
The last batch is smaller, and the test accuracy is computed eagerly."""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax, random  # noqa: E402

N_TRAIN, N_TEST, SIDE, CLASSES, BATCH, EPOCHS, CLIP = 160, 64, 8, 3, 48, 2, 1.0


def init_params(key):
    k1, k2 = random.split(key)
    return {
        "conv": random.normal(k1, (4, 1, 3, 3)) * 0.3,
        "dense": random.normal(k2, (4 * SIDE * SIDE, CLASSES)) * 0.05,
    }


def logits_of(params, image):
    h = lax.conv_general_dilated(image[None, None], params["conv"], (1, 1), "SAME")
    h = jax.nn.relu(h).reshape(-1)
    return h @ params["dense"]


def example_loss(params, image, label):
    return -jax.nn.log_softmax(logits_of(params, image))[label]


def clipped_grad(params, image, label):
    grads = jax.grad(example_loss)(params, image, label)
    norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree_util.tree_leaves(grads)))
    return jax.tree_util.tree_map(lambda g: g / jnp.maximum(1.0, norm / CLIP), grads)


@jax.jit
def private_step(params, images, labels):
    grads = jax.vmap(clipped_grad, in_axes=(None, 0, 0))(params, images, labels)
    mean = jax.tree_util.tree_map(lambda g: g.mean(axis=0), grads)
    return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, mean)


def main():
    k_data, k_labels, k_params = random.split(random.PRNGKey(0), 3)
    images = random.normal(k_data, (N_TRAIN + N_TEST, SIDE, SIDE))
    labels = random.randint(k_labels, (N_TRAIN + N_TEST,), 0, CLASSES)
    params = init_params(k_params)
    for epoch in range(EPOCHS):
        for start in range(0, N_TRAIN, BATCH):  # 160 = 3 batches of 48 and one of 16
            params = private_step(params, images[start : start + BATCH], labels[start : start + BATCH])
        test_logits = jax.vmap(logits_of, in_axes=(None, 0))(params, images[N_TRAIN:])
        accuracy = jnp.mean(jnp.argmax(test_logits, axis=1) == labels[N_TRAIN:])
        print(f"epoch {epoch}: test accuracy {float(accuracy):.3f}")


if __name__ == "__main__":
    main()
    cachewatch.flush(30)
