"""A model sharded over a mesh of the host's devices (run with
``XLA_FLAGS=--xla_force_host_platform_device_count=4``), the way FSDP shards one: the
weights split over the devices on one axis, each batch split over them on its first,
placed with ``jax.device_put`` before the first step. The same shapes and shardings every
step, so after its first compiles it only runs; an evaluation at the end of each epoch
runs from its own first compile on."""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P

EPOCHS, STEPS, BATCH, WIDTH = 3, 8, 16, 32


def loss(params, x, y):
    h = jnp.tanh(x @ params["w1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


@jax.jit
def train_step(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - 0.05 * g, params, grads)


@jax.jit
def evaluate(params, x, y):
    return loss(params, x, y)


def main():
    mesh = Mesh(jax.devices(), ("data",))
    by_row = NamedSharding(mesh, P("data", None))
    params = jax.device_put(
        {"w1": jnp.ones((WIDTH, WIDTH)) * 0.1, "w2": jnp.ones((WIDTH, 1)) * 0.1},
        {"w1": by_row, "w2": NamedSharding(mesh, P())},
    )
    for _epoch in range(EPOCHS):
        for step in range(STEPS):
            x = jax.device_put(jnp.full((BATCH, WIDTH), 0.01 * step), by_row)
            y = jax.device_put(jnp.zeros((BATCH, 1)), by_row)
            params = train_step(params, x, y)
        value = evaluate(params, x, y)
    print(len(jax.devices()), float(value))


if __name__ == "__main__":
    main()
