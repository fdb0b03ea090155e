"""eager_pytree_once.py with the one fix cachewatch offers a costly first pass of
eager code applied: the loss and its gradient are jitted where they are called, so each
compiles once as one program for the tree's shapes instead of once per primitive and
leaf shape. Same values printed."""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

N_SAMPLES, SCALE, ETA = 64, 0.5, 0.1


def make_tree():
    return (
        jnp.array([0.1, 0.4, 0.5]),
        {"k1": jnp.array([0.1, 0.2]), "k2": jnp.array([0.3, 0.1, 0.6, 0.2, 0.5])},
        jnp.array([0.4, 0.3, 0.2, 0.1]),
    )


def soft_argmax(x, noise):
    perturbed = x[None, :] + SCALE * noise
    weights = jax.nn.softmax(perturbed / SCALE, axis=-1)
    return jnp.mean(weights, axis=0)


def leaf_loss(x, key):
    noise = jax.random.gumbel(key, (N_SAMPLES, x.shape[0]))
    target = jax.nn.one_hot(jnp.argmax(x), x.shape[0])
    return jnp.sum((soft_argmax(x, noise) - target) ** 2 / 4)


def pert_loss(tree, key):
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.tree.unflatten(treedef, list(jax.random.split(key, len(leaves))))
    losses = jax.tree.map(leaf_loss, tree, keys)
    return sum(jax.tree.leaves(losses))


def main():
    tree = make_tree()
    key = jax.random.PRNGKey(0)
    loss = jax.jit(pert_loss)
    init_loss = loss(tree, key)
    grads = jax.jit(jax.grad(pert_loss))(tree, key)
    stepped = jax.tree.map(lambda p, g: p - ETA * g, tree, grads)
    step_loss = loss(stepped, key)
    print(f"initial loss {float(init_loss):.6f}")
    print(f"loss after step {float(step_loss):.6f}")
    print("grads", [round(float(v), 6) for leaf in jax.tree.leaves(grads) for v in leaf])


if __name__ == "__main__":
    main()
