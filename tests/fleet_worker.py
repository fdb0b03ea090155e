"""One rank of a two-process JAX job on the CPU backend, joined over loopback.

    python tests/fleet_worker.py RANK PORT STORE [--extra-shape]

Each rank runs the same training step over the same batch sizes; with --extra-shape
this rank also meets one batch of another size (a recompile the other rank does not
have). The job name comes from CACHEWATCH_JOB; the rank from JAX.
"""

from __future__ import annotations

import sys

import jax

rank, port, store = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
extra = "--extra-shape" in sys.argv[4:]
jax.distributed.initialize(
    coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=rank, initialization_timeout=120
)

import jax.numpy as jnp  # noqa: E402

import cachewatch  # noqa: E402

cachewatch.configure(store=store)


@cachewatch.jit
def fleet_step(w, batch):
    return jnp.tanh(batch @ w).sum()


w = jnp.ones((8, 4))
sizes = [32, 32, 16, 32] + ([24] if extra else []) + [32]
for size in sizes:
    fleet_step(w, jnp.ones((size, 8)))
assert cachewatch.flush(30)
print("rank", jax.process_index(), "of", jax.process_count(), "done")
jax.distributed.shutdown()
