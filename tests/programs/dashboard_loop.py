"""A short training loop that logs to a training dashboard: ragged batches (a storm of
recompiles), an evaluation jit released by ``clear_cache()``, a loss per step.

    python tests/programs/dashboard_loop.py [--wandb] [--mlflow] [--log-scalars N] [--exit-code K]

``--wandb`` / ``--mlflow``: the program starts its own run (W&B's mode and directory, and
MLflow's tracking URI, from the environment) and logs its loss at each step.
``--log-scalars N``: ``cachewatch.log_scalars`` into those runs every N steps
(``wandb.log``, ``mlflow.log_metrics``), and once more at the end, after ``cachewatch.flush``.
Prints one JSON line: the run id, the steps, and which dashboards' libraries were imported.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

import cachewatch

SIZES = (8, 8, 12, 8, 16, 8, 20, 24, 8, 28, 32, 8)
LIBRARIES = ("wandb", "mlflow", "tensorboardX")


@cachewatch.jit
def train_step(w, x, y):
    def loss(w):
        return jnp.mean((jnp.tanh(x @ w).sum(-1) - y) ** 2)

    value, grad = jax.value_and_grad(loss)(w)
    return w - 0.05 * grad, value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wandb", action="store_true")
    parser.add_argument("--mlflow", action="store_true")
    parser.add_argument("--log-scalars", type=int, default=0, metavar="N")
    parser.add_argument("--exit-code", type=int, default=0)
    args = parser.parse_args()
    writers: list[Callable[..., object]] = []
    if args.wandb:
        import wandb

        wandb.init(project="dashboard-loop", config={"sizes": SIZES})
        writers.append(lambda named, step: wandb.log(named, step=step))
    if args.mlflow:
        import mlflow

        mlflow.start_run(run_name="dashboard-loop")
        writers.append(mlflow.log_metrics)

    w = np.full((4, 4), 0.5, np.float32)
    rng = np.random.default_rng(0)
    for step, size in enumerate(SIZES):
        x = rng.normal(size=(size, 4)).astype(np.float32)
        w, value = train_step(w, x, np.zeros(size, np.float32))
        loss = float(value)
        for write in writers:
            write({"loss": loss}, step=step)
        if args.log_scalars and step % args.log_scalars == 0:
            for write in writers:
                cachewatch.log_scalars(write, step)
    evaluate = cachewatch.jit(lambda w: jnp.abs(w).sum())
    evaluate(w)
    evaluate.clear_cache()  # released: no longer a live executable
    cachewatch.flush(30)
    if args.log_scalars:
        for write in writers:
            cachewatch.log_scalars(write, len(SIZES))

    from cachewatch.record import current

    imported = sorted(name for name in LIBRARIES if name in sys.modules)
    print(json.dumps({"run_id": current.run_id(), "steps": len(SIZES), "imported": imported}))
    sys.exit(args.exit_code)


if __name__ == "__main__":
    main()
