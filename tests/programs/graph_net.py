"""A message-passing graph network trained on graphs of varying size, written by hand
(as jraph's GraphNetwork would do it): each batch is a few molecules put together, so
its node and edge counts change from batch to batch, and so do the senders and
receivers arrays that index them."""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

FEATURES, HIDDEN, STEPS = 3, 8, 12


def init(key):
    k1, k2, k3 = jax.random.split(key, 3)
    return {
        "edge": jax.random.normal(k1, (2 * FEATURES + 1, HIDDEN)) * 0.1,
        "node": jax.random.normal(k2, (FEATURES + HIDDEN, HIDDEN)) * 0.1,
        "out": jax.random.normal(k3, (HIDDEN, 1)) * 0.1,
    }


def loss(params, nodes, edges, senders, receivers, target):
    messages = jnp.concatenate([nodes[senders], nodes[receivers], edges], axis=1) @ params["edge"]
    incoming = jax.ops.segment_sum(jax.nn.relu(messages), receivers, num_segments=nodes.shape[0])
    hidden = jax.nn.relu(jnp.concatenate([nodes, incoming], axis=1) @ params["node"])
    return (jnp.mean(hidden @ params["out"]) - target) ** 2


@jax.jit
def train_step(params, nodes, edges, senders, receivers, target):
    grads = jax.grad(loss)(params, nodes, edges, senders, receivers, target)
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads)


def random_graph(rng):
    n_nodes = int(rng.integers(5, 40))
    n_edges = int(rng.integers(n_nodes, 3 * n_nodes))
    nodes = rng.normal(size=(n_nodes, FEATURES)).astype(np.float32)
    edges = rng.normal(size=(n_edges, 1)).astype(np.float32)
    senders = rng.integers(0, n_nodes, n_edges).astype(np.int32)
    receivers = rng.integers(0, n_nodes, n_edges).astype(np.int32)
    return nodes, edges, senders, receivers, np.float32(n_nodes / 40)


def main():
    rng = np.random.default_rng(0)
    params = init(jax.random.PRNGKey(0))
    for _ in range(STEPS):
        params = train_step(params, *random_graph(rng))
    print(float(params["out"].sum()))


if __name__ == "__main__":
    main()
