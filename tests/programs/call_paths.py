"""Four jitted steps called alike: a plain one, one that logs through jax.debug.callback,
one that reads a value back through an io_callback, one whose io_callback is ordered. JAX
serves the plain step's warm calls from its C++ fast path; the others have effects, so
every call of theirs goes through its Python path. A fifth step logs only behind a static
flag: its quiet variant takes the fast path, its verbose one the Python path. Last, a
jitted loss differentiated eagerly (jax.value_and_grad of the jit, outside any jit): each
of its calls is traced again under the transformation, through JAX's Python path; and the
same loss as the fix has it, the transformed function jitted once."""

import functools

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import io_callback  # noqa: E402

CALLS = 1000
seen: list[float] = []


@jax.jit
def plain_step(x):
    return jnp.tanh(x) * 0.5


@jax.jit
def logged_step(x):
    jax.debug.callback(lambda v: seen.append(float(v)), x.sum())
    return jnp.tanh(x) * 0.5


@jax.jit
def read_back_step(x):
    scale = io_callback(lambda: np.float32(0.5), jax.ShapeDtypeStruct((), jnp.float32))
    return jnp.tanh(x) * scale


@jax.jit
def ordered_step(x):
    scale = io_callback(lambda: np.float32(0.5), jax.ShapeDtypeStruct((), jnp.float32), ordered=True)
    return jnp.tanh(x) * scale


@functools.partial(jax.jit, static_argnames="verbose")
def flagged_step(x, verbose=False):
    if verbose:
        jax.debug.callback(lambda v: seen.append(float(v)), x.sum())
    return jnp.tanh(x) * 0.5


def loss_of(w):
    return jnp.sum(jnp.tanh(w) ** 2)


loss = jax.jit(loss_of)
graded_loss = jax.jit(jax.value_and_grad(loss_of))  # the fix: one jit of the transformed function


def main():
    x = jnp.ones(16)
    steps = (("plain", plain_step), ("logged", logged_step), ("read_back", read_back_step), ("ordered", ordered_step))
    for name, step in steps:
        for _ in range(CALLS):
            y = step(x)
        print(name, float(y.sum()))
    for verbose in (False, True):
        for _ in range(CALLS):
            y = flagged_step(x, verbose=verbose)
        print("flagged", verbose, float(y.sum()))
    w = jnp.ones(16)
    for _ in range(CALLS // 10):
        value, grad = jax.value_and_grad(loss)(w)
    print("graded", float(value), float(grad.sum()))
    for _ in range(CALLS // 10):
        value, grad = graded_loss(w)
    print("graded", float(value), float(grad.sum()))
    print("logged", len(seen))


if __name__ == "__main__":
    main()
