"""A small training loop that falls into two recompilation storms, for cachewatch to explain.

    cachewatch serve &                                   # or any store URL
    CACHEWATCH_STORE=http://127.0.0.1:8000 python examples/storm_demo.py
    cachewatch report

``train_step`` sees its usual batch of 8 on every other step and a ragged batch of a
new size in between (8 shapes, 8 compiles, the usual one served from the cache all the
while), and a jitted lambda is created anew inside the loop (a compile every time).
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

import cachewatch


@cachewatch.jit
def train_step(params, batch):
    def loss(p):
        return jnp.mean((batch @ p["w"] + p["b"]) ** 2)

    grads = jax.grad(loss)(params)
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=24, help="training steps (default 24)")
    parser.add_argument("--sizes", type=int, default=8, help="distinct batch sizes (default 8)")
    parser.add_argument("--loop-jits", type=int, default=8, help="steps that jit a new lambda (default 8)")
    parser.add_argument(
        "--pause",
        type=float,
        default=0.0,
        help="seconds to wait after each step, to spread the storm over time (default 0)",
    )
    args = parser.parse_args(argv)

    key = jax.random.PRNGKey(0)
    params = {"w": jnp.zeros((4, 1)), "b": jnp.zeros((1,))}
    for step in range(args.steps):
        # The mistake: a loader that yields ragged batches between full ones.
        batch_size = 8 if step % 2 == 0 else 8 + 4 * (1 + (step // 2) % max(1, args.sizes - 1))
        batch = jax.random.normal(jax.random.fold_in(key, step), (batch_size, 4))
        params = train_step(params, batch)
        if step < args.loop_jits:
            # The mistake: a new jit object per step, so a new trace and compile per step.
            params["w"] = cachewatch.jit(lambda w: w * 0.999)(params["w"])
        if args.pause:
            time.sleep(args.pause)
    jax.block_until_ready(params)
    written = cachewatch.flush(30.0)
    waiting = f" ({written.spooled_batches} batch(es) wait in the spool)" if written.spooled_batches else ""
    print(f"trained {args.steps} steps; events written: {written.stored}{waiting}")
    return 0 if written else 1


if __name__ == "__main__":
    raise SystemExit(main())
