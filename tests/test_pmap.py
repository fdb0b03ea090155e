"""A pmapped function under install(): its compiles and calls under the user's name, and
a retrace for a changed abstract sharding named as such (JAX's log counts the compiles)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import sqlalchemy as sa

from cachewatch.core.events import Cause
from cachewatch.store import engine, models, queries
from cachewatch.store.columns import Filters

PROGRAM = textwrap.dedent("""
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import json, logging
    import jax, jax.numpy as jnp
    import cachewatch
    cachewatch.install()
    messages = []
    class Handler(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())
    logging.getLogger("jax").addHandler(Handler())
    jax.config.update("jax_log_compiles", True)

    def update(w, x):
        return w - 0.1 * jax.lax.pmean(jnp.mean(x) * w, "i")

    step = jax.pmap(update, axis_name="i")
    w = jnp.ones((4, 3))                     # a plain array, then the pmap's sharded output
    for _ in range(7):
        w = step(w, jnp.ones((4, 8)))
    cachewatch.flush(30)
    from cachewatch.record import current
    compiles = sum(1 for m in messages if m.startswith("Finished XLA compilation of jit(_fun)"))
    print(json.dumps({"run_id": current.run_id(), "logged": compiles}))
""")


def test_pmap_is_recorded_under_the_users_function_with_its_calls(sqlite_url):
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "CACHEWATCH_STORE": sqlite_url},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    e, f = models.compile_events, models.functions
    with engine.connection(sqlite_url) as conn:
        rows = conn.execute(
            sa.select(f.c.name, e.c.cause, e.c.explanation, e.c.diff)
            .join(f, f.c.function_hash == e.c.function_hash)
            .where(e.c.run_id == found["run_id"], e.c.compiled, f.c.name == "update")
            .order_by(e.c.timestamp)
        ).all()
        report = {r["name"]: r for r in queries.function_report(conn, Filters(run_id=found["run_id"]))}
    assert found["logged"] == len(rows) == 2  # every compile JAX logged for the pmap, under `update`
    assert [r.cause for r in rows] == [Cause.FIRST_CALL, Cause.NEW_DEVICE_OR_SHARDING]
    assert "abstract sharding" in rows[1].explanation
    assert "mesh(i=4)" in rows[1].explanation
    assert rows[1].diff[0]["change"] == "sharding"
    assert rows[1].diff[0]["before"] == "unsharded (no mesh)"
    assert report["update"]["calls"] == 7
    assert not any(name.startswith("_cached_shard_map") for name in report)
