"""A training loop whose batch size varies (11 sizes): run once to record, run again with
``--warmup-from RUN`` to compile every size ahead of the loop in worker threads.

    python tests/programs/warm_loop.py [--warmup-from RUN] [--threads N]

Prints one JSON line: the run id, the loop's seconds to its first epoch's end and in all,
and, when warmed, what the warm-up compiled and skipped.
"""

from __future__ import annotations

import argparse
import json
import threading
import time

import jax
import jax.numpy as jnp

import cachewatch

SIZES = (8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64)


@cachewatch.jit(static_argnames="depth")
def train_step(params, batch, lr, depth):
    def loss(params):
        h = batch["x"]
        for _ in range(depth):
            h = jnp.tanh(h @ params["w"] + params["b"])
        return jnp.mean((h.sum(-1) - batch["y"]) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warmup-from", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    start = time.perf_counter()
    handle = None
    if args.warmup_from:
        handle = cachewatch.warmup(train_step, from_run=args.warmup_from, threads=args.threads)
    params = {"w": jnp.eye(16) * 0.5, "b": jnp.zeros(16)}
    first_epoch = None
    for _epoch in range(args.epochs):
        for size in SIZES:
            batch = {"x": jnp.ones((size, 16)), "y": jnp.zeros(size)}
            params, value = train_step(params, batch, 0.01, depth=6)
        jax.block_until_ready(value)
        if first_epoch is None:
            first_epoch = time.perf_counter() - start
    total = time.perf_counter() - start
    if handle is not None:
        handle.wait()
    from cachewatch.record import current

    print(
        json.dumps(
            {
                "run_id": current.run_id(),
                "first_epoch_seconds": first_epoch,
                "total_seconds": total,
                "thread": threading.current_thread().name,
                "compiled": len(handle.compiled) if handle else 0,
                "skipped": [[s.signature, s.reason] for s in handle.skipped] if handle else [],
            }
        )
    )
    cachewatch.flush(30)


if __name__ == "__main__":
    main()
