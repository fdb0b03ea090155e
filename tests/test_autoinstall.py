"""CACHEWATCH_INSTALL=1: the .pth file the package ships installs cachewatch at interpreter
start, in this environment's editable install as in a wheel (tests/test_layout.py holds the
wheel to it); without the variable an interpreter imports nothing of cachewatch or JAX."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = textwrap.dedent("""
    import sys
    print("cachewatch" in sys.modules, "jax" in sys.modules)
    import jax, cachewatch
    print(cachewatch.installed(), jax.jit is cachewatch.jit)
""")


def probe(value: str | None) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "CACHEWATCH_ENABLED": "0"}
    env.pop("CACHEWATCH_INSTALL", None)
    if value is not None:
        env["CACHEWATCH_INSTALL"] = value
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)


def test_the_editable_install_put_the_pth_file_in_site_packages():
    installed = [Path(d) / "cachewatch-install.pth" for d in site.getsitepackages()]
    found = [p for p in installed if p.exists()]
    assert found, f"no cachewatch-install.pth in {site.getsitepackages()}; run scripts/setup.sh"
    assert found[0].read_text() == (ROOT / "cachewatch" / "cachewatch-install.pth").read_text()


def test_the_variable_installs_at_start_and_its_absence_imports_nothing():
    on = probe("1")
    assert on.returncode == 0, on.stderr
    assert on.stdout.split() == ["True", "True", "True", "True"]
    for value in (None, "0", ""):
        off = probe(value)
        assert off.returncode == 0, off.stderr
        assert off.stdout.split() == ["False", "False", "False", "False"]


def test_a_bad_setting_is_one_line_and_the_program_still_runs():
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "CACHEWATCH_INSTALL": "1", "CACHEWATCH_QUEUE_SIZE": "none"}
    done = subprocess.run([sys.executable, "-c", "print('ran')"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    assert done.stdout == "ran\n"
    assert done.stderr.startswith("cachewatch: CACHEWATCH_INSTALL is set, but recording did not start: ")
    assert "CACHEWATCH_QUEUE_SIZE" in done.stderr
