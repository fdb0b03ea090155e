"""An MLP classifier trained with jax.example_libraries (stax and optimizers).

1,000 examples in batches of 128, so each epoch ends with a smaller batch of 104;
accuracy is computed eagerly on the whole training set after each epoch.
"""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import random  # noqa: E402
from jax.example_libraries import optimizers, stax  # noqa: E402

N_EXAMPLES, N_FEATURES, N_CLASSES, BATCH, EPOCHS = 1000, 20, 4, 128, 2


def make_data(key):
    k_x, k_w = random.split(key)
    x = random.normal(k_x, (N_EXAMPLES, N_FEATURES))
    w = random.normal(k_w, (N_FEATURES, N_CLASSES))
    labels = jnp.argmax(x @ w, axis=1)
    return x, jax.nn.one_hot(labels, N_CLASSES)


def loss(params, batch):
    inputs, targets = batch
    logits = predict(params, inputs)
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * targets, axis=1))


def accuracy(params, batch):
    inputs, targets = batch
    predicted = jnp.argmax(predict(params, inputs), axis=1)
    return jnp.mean(predicted == jnp.argmax(targets, axis=1))


init_random_params, predict = stax.serial(stax.Dense(64), stax.Relu, stax.Dense(64), stax.Relu, stax.Dense(N_CLASSES))
opt_init, opt_update, get_params = optimizers.adam(1e-3)


@jax.jit
def update(i, opt_state, batch):
    params = get_params(opt_state)
    return opt_update(i, jax.grad(loss)(params, batch), opt_state)


def main():
    x, y = make_data(random.PRNGKey(0))
    _, params = init_random_params(random.PRNGKey(1), (-1, N_FEATURES))
    opt_state = opt_init(params)
    step = 0
    for epoch in range(EPOCHS):
        for start in range(0, N_EXAMPLES, BATCH):
            opt_state = update(step, opt_state, (x[start : start + BATCH], y[start : start + BATCH]))
            step += 1
        params = get_params(opt_state)
        print(f"epoch {epoch}: train accuracy {float(accuracy(params, (x, y))):.3f}")


if __name__ == "__main__":
    main()
    cachewatch.flush(30)
