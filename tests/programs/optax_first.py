"""An Equinox regressor trained with Optax, Optax imported before anything else.

Optax makes jits at its import (optax.tree_utils' bias correction, called by Adam's
update). This program calls ``cachewatch.install()`` after that import, as a user adding
cachewatch to an existing script would; under ``cachewatch run`` install() is in effect
before the first line, so those jits are wrapped too. The optimizer's update runs
outside the jitted step, so the bias correction is a jit call of its own.

    python optax_first.py [--steps N] [--vary-batch] [--exit CODE] [--raise]
"""

import optax  # noqa: I001  (first: before cachewatch, before JAX is imported by anything else)

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402

import cachewatch  # noqa: E402

cachewatch.install()  # under `cachewatch run`, already in effect: a no-op

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

N_FEATURES, BATCH = 4, 16


def loss_fn(model, x, y):
    return jnp.mean(jnp.square(jax.vmap(model)(x)[:, 0] - y))


@eqx.filter_jit
def grad_step(model, x, y):
    return eqx.filter_value_and_grad(loss_fn)(model, x, y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--vary-batch", action="store_true", help="a new batch size at every step: a storm")
    parser.add_argument("--exit", type=int, default=0)
    parser.add_argument("--raise", dest="raise_", action="store_true")
    args = parser.parse_args()
    # What the program sees of how it was started, for the tests to hold against python's.
    print(json.dumps({"argv": sys.argv, "name": __name__, "file": __file__, "main": sys.modules["__main__"].__file__}))
    model = eqx.nn.MLP(N_FEATURES, 1, width_size=8, depth=1, key=jax.random.PRNGKey(0))
    optimizer = optax.adam(1e-2)
    params = eqx.filter(model, eqx.is_array)
    opt_state = optimizer.init(params)
    for step in range(args.steps):
        batch = BATCH + step if args.vary_batch else BATCH
        # The data is made with NumPy: the compiles are the step's and the optimizer's only.
        x = np.random.default_rng(step).normal(size=(batch, N_FEATURES)).astype(np.float32)
        y = np.sin(x).sum(axis=1)
        loss, grads = grad_step(model, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        model = eqx.apply_updates(model, updates)
        params = eqx.filter(model, eqx.is_array)
    print(f"loss {float(loss):.4f}")
    if args.raise_:
        raise RuntimeError("the program's own error")
    cachewatch.flush(30)
    sys.exit(args.exit)


if __name__ == "__main__":
    main()
