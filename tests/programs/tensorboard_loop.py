"""A tiny training loop that logs its own loss to TensorBoard: a jitted train step on a
toy linear regression, with a batch size that changes for a few steps (recompiles), and
a short wait per step for its data, so that the run lasts a few seconds.

    python tests/programs/tensorboard_loop.py LOGDIR

The loss goes to ``LOGDIR`` through tensorboardX's ``SummaryWriter``, tag ``loss``, one
point per step. Run under ``cachewatch run --log-to tensorboard:LOGDIR`` the run's
compile figures land in the same directory, beside it.
Prints one JSON line: the run id and the steps.
"""

from __future__ import annotations

import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from tensorboardX import SummaryWriter

import cachewatch

STEPS = 40
BATCH = 32
# Steps whose batch has another size: each new size is a recompile of the train step.
RAGGED = {5: 24, 9: 48, 14: 16, 20: 40, 27: 56}
DATA_WAIT = 0.05  # seconds per step: the batch being "loaded"
TRUE_W = np.array([1.5, -2.0, 0.5, 3.0], np.float32)


@cachewatch.jit
def train_step(w, x, y):
    def loss(w):
        return jnp.mean((x @ w - y) ** 2)

    value, grad = jax.value_and_grad(loss)(w)
    return w - 0.05 * grad, value


def main() -> None:
    logdir = sys.argv[1]
    # As a training loop writes it: into the directory `--log-to tensorboard:` names too.
    writer = SummaryWriter(logdir)
    rng = np.random.default_rng(0)
    w = np.zeros(4, np.float32)
    for step in range(STEPS):
        size = RAGGED.get(step, BATCH)
        time.sleep(DATA_WAIT)
        x = rng.normal(size=(size, 4)).astype(np.float32)
        y = x @ TRUE_W + 0.1 * rng.normal(size=size).astype(np.float32)
        w, value = train_step(w, x, y)
        writer.add_scalar("loss", float(value), step)
    writer.close()
    cachewatch.flush(30)

    from cachewatch.record import current

    print(json.dumps({"run_id": current.run_id(), "steps": STEPS}))


if __name__ == "__main__":
    main()
