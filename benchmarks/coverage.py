"""How many of a real program's compiles cachewatch records, against JAX's own log.

    .venv/bin/python benchmarks/coverage.py

Runs each training program of tests/programs/ (stax, per-example gradients with vmap,
Flax NNX, Flax Linen with Optax, Equinox, a jitted loss under an eager jax.grad) with
``cachewatch.install()`` as its first lines and ``JAX_LOG_COMPILES=1``,
and counts, per program: the compiles JAX logged, the compiles recorded, those tied
to a function or an eager primitive, those whose name and count match JAX's log, those
of JAX's own jitted helpers and eager primitives, how many were called ``cache_cleared``
(none of these programs clears a cache) or ``unknown``, and the storms reported. It
prints the interpreter and JAX it ran on: run it with each virtualenv.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# The CPU unless JAX_PLATFORMS names another (JAX_PLATFORMS=cuda on a GPU machine).
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import sqlalchemy as sa

from cachewatch.core.events import UNATTRIBUTED_MODULE, Cause
from cachewatch.store import engine as enginemod
from cachewatch.store import models
from cachewatch.storms import diagnosis

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = [
    "stax_mlp",
    "vmap_convnet",
    "nnx_vae",
    "linen_seq",
    "equinox_mlp",
    "eager_grad",
    "eager_loss",
    "numpyro_nuts",
    "optax_first",
]
_JAX_COMPILED = re.compile(r"Finished XLA compilation of jit\((.*?)\) in")


def measure(program: str, tmp: str) -> dict[str, object]:
    url = f"sqlite:///{tmp}/{program}.db"
    env = {**os.environ, "CACHEWATCH_STORE": url, "JAX_LOG_COMPILES": "1"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "programs" / f"{program}.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(f"{program} failed:\n{done.stderr[-2000:]}")
    logged = collections.Counter(_JAX_COMPILED.findall(done.stderr))
    e, f = models.compile_events, models.functions
    with enginemod.connection(url) as conn:
        rows = list(
            conn.execute(
                sa.select(f.c.name, f.c.module, e.c.cause)
                .join(f, f.c.function_hash == e.c.function_hash)
                .where(e.c.compiled)
            )
        )
        storms = diagnosis.detect_storms(conn)
    recorded = collections.Counter(r.name for r in rows)
    return {
        "logged": sum(logged.values()),
        "recorded": len(rows),
        "attributed": sum(1 for r in rows if r.module != UNATTRIBUTED_MODULE),
        "jax_own": sum(1 for r in rows if r.module == "jax.op_by_op" or r.module.startswith("jax._src")),
        "names": sum(min(logged[n], recorded[n]) for n in logged),
        "cache_cleared": sum(1 for r in rows if r.cause == Cause.CACHE_CLEARED),
        "unknown": sum(1 for r in rows if r.cause == Cause.UNKNOWN),
        "storms": len(storms),
    }


def main() -> None:
    import jax

    with tempfile.TemporaryDirectory() as tmp:
        results = {program: measure(program, tmp) for program in PROGRAMS}
    print(f"Python {sys.version.split()[0]}, JAX {jax.__version__}")
    print(
        "| program | compiles in JAX's log | recorded | attributed | matching JAX's name and count | coverage "
        "| JAX's own jits and eager primitives | cache_cleared | unknown | storms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for program, r in results.items():
        print(
            f"| `tests/programs/{program}.py` | {r['logged']} | {r['recorded']} | {r['attributed']} | {r['names']} "
            f"| {r['recorded'] / r['logged']:.0%} | {r['jax_own']} | {r['cache_cleared']} | {r['unknown']} "
            f"| {r['storms']} |"
        )
    total = sum(int(r["recorded"]) for r in results.values())  # type: ignore[call-overload]
    unknown = sum(int(r["unknown"]) for r in results.values())  # type: ignore[call-overload]
    print(f"unknown: {unknown} of {total} compiles ({unknown / max(total, 1):.1%})")


if __name__ == "__main__":
    main()
