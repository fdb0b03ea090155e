"""A perturbed loss over a pytree, run eagerly (no jit), the way Optax's
``examples/perturbations.ipynb`` ends: a tuple and dict of vectors of four different
lengths, a function mapped over its leaves with ``jax.tree.map``, its value, then its
gradient with an eager ``jax.grad``, then its value once more after one gradient step.

No loop comes round to new shapes: JAX compiles each primitive once per leaf shape
inside one call (dozens of compiles), and the later calls over the same shapes are
served from the cache. Nothing varies over time; there is nothing to pad.
"""

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
    init_loss = pert_loss(tree, key)
    grads = jax.grad(pert_loss)(tree, key)
    stepped = jax.tree.map(lambda p, g: p - ETA * g, tree, grads)
    step_loss = pert_loss(stepped, key)
    print(f"initial loss {float(init_loss):.6f}")
    print(f"loss after step {float(step_loss):.6f}")
    print("grads", [round(float(v), 6) for leaf in jax.tree.leaves(grads) for v in leaf])


if __name__ == "__main__":
    main()
