"""The library a training program imports never reaches up into the service."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_the_library_never_imports_the_service():
    script = textwrap.dedent("""
        import sys
        import cachewatch, cachewatch.cli, cachewatch.analysis, cachewatch.store.queries, cachewatch.pytest_plugin
        import jax.numpy as jnp
        cachewatch.jit(lambda x: x + 1)(jnp.ones(3))
        loaded = sorted(m for m in sys.modules
                        if m.split(".")[0] in ("cachewatch_server", "server", "fastapi", "uvicorn", "starlette"))
        print(",".join(loaded))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={"JAX_PLATFORMS": "cpu", "CACHEWATCH_ENABLED": "0", "PATH": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == ""
