"""Stand-in for JAX's examples/datasets.py (which downloads MNIST): random arrays of
MNIST's processed shapes and dtypes, fewer rows (3000 train, 500 test: an epoch of 24 steps), no download.

As the original's ``mnist()`` returns them: images flattened to 784 float32 values in
[0, 1), labels one-hot float32 over 10 classes."""

import numpy as np

NUM_TRAIN = 3000
NUM_TEST = 500


def _one_hot(x, k, dtype=np.float32):
    return np.array(x[:, None] == np.arange(k), dtype)


def mnist_raw():
    rng = np.random.RandomState(0)
    train_images = rng.randint(0, 256, size=(NUM_TRAIN, 28, 28)).astype(np.uint8)
    train_labels = rng.randint(0, 10, size=NUM_TRAIN).astype(np.uint8)
    test_images = rng.randint(0, 256, size=(NUM_TEST, 28, 28)).astype(np.uint8)
    test_labels = rng.randint(0, 10, size=NUM_TEST).astype(np.uint8)
    return train_images, train_labels, test_images, test_labels


def mnist(permute_train=False):
    train_images, train_labels, test_images, test_labels = mnist_raw()
    train_images = np.reshape(train_images, (NUM_TRAIN, -1)) / np.float32(255.0)
    test_images = np.reshape(test_images, (NUM_TEST, -1)) / np.float32(255.0)
    train_labels = _one_hot(train_labels, 10)
    test_labels = _one_hot(test_labels, 10)
    if permute_train:
        perm = np.random.RandomState(0).permutation(train_images.shape[0])
        train_images = train_images[perm]
        train_labels = train_labels[perm]
    return train_images, train_labels, test_images, test_labels
