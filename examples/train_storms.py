"""A small training loop that falls into the classic recompilation storms.

    python examples/train_storms.py            # records into the default store
    cachewatch report                          # then see what it cost and why

Each storm is one realistic mistake: a data loader whose batches vary in size, a
learning rate that is sometimes a Python float and sometimes an array, a static
argument that takes a new value every epoch, ``jax.jit`` re-created inside a loop,
and a batch dict that sometimes carries a mask. The last epochs do it right.
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
import jax.numpy as jnp

import cachewatch


def init_params(key, sizes=(16, 32, 4)):
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=False):
        key, sub = jax.random.split(key)
        params.append({"w": jax.random.normal(sub, (fan_in, fan_out)) / jnp.sqrt(fan_in), "b": jnp.zeros(fan_out)})
    return params


def forward(params, x):
    for layer in params[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, batch):
    pred = forward(params, batch["x"])
    err = (pred - batch["y"]) ** 2
    if "mask" in batch:
        err = err * batch["mask"][:, None]
    return err.mean()


@cachewatch.jit
def train_step(params, batch, lr):
    grads = jax.grad(loss_fn)(params, batch)
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)


@functools.partial(cachewatch.jit, static_argnames="num_steps")
def smooth(x, num_steps):
    for _ in range(num_steps):
        x = 0.5 * (x + jnp.roll(x, 1))
    return x


def normalize(x):
    return (x - x.mean()) / (x.std() + 1e-6)


def make_batch(key, size, with_mask=False):
    kx, ky = jax.random.split(key)
    batch = {"x": jax.random.normal(kx, (size, 16)), "y": jax.random.normal(ky, (size, 4))}
    if with_mask:
        batch["mask"] = jnp.ones(size)
    return batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--run-name", default="train-storms")
    args = parser.parse_args()
    cachewatch.configure(run_name=args.run_name)

    key = jax.random.PRNGKey(0)
    params = init_params(key)
    started = time.perf_counter()
    for epoch in range(args.epochs):
        # Storm 1: the loader yields ragged batches (variable-length data, a short last batch).
        for size in (32, 32, 17 + epoch, 32, 9 + 3 * epoch):
            key, sub = jax.random.split(key)
            # Storm 2: the learning rate is a Python float in early epochs, an array later.
            lr = 0.01 if epoch < 3 else jnp.float32(0.01)
            params = train_step(params, make_batch(sub, size, with_mask=(epoch % 2 == 1)), lr)
        # Storm 3: a static argument that takes a new value every epoch.
        smooth(jnp.ones(64), num_steps=epoch + 1)
        # Storm 4: jit re-created in a loop, around a lambda and around a partial.
        for _ in range(3):
            cachewatch.jit(lambda x: normalize(x))(jnp.arange(8.0))
            cachewatch.jit(functools.partial(normalize))(jnp.arange(8.0))

    # Done right: one shape, one dtype, one jit object. Compiles once, then only runs.
    key, sub = jax.random.split(key)
    batch = make_batch(sub, 32)
    lr = jnp.float32(0.01)
    for _ in range(300):
        params = train_step(params, batch, lr)
    jax.block_until_ready(params)
    elapsed = time.perf_counter() - started
    written = cachewatch.flush(timeout=30)
    waiting = f" ({written.spooled_batches} batch(es) wait in the spool)" if written.spooled_batches else ""
    print(f"trained {args.epochs} epochs in {elapsed:.1f}s; events written: {written.stored}{waiting}")


if __name__ == "__main__":
    main()
