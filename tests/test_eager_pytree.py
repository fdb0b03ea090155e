"""Eager (un-jitted) code mapped over a pytree whose leaves differ in shape, called once:
JAX compiles each primitive once per leaf shape inside that one call (Optax's
examples/perturbations.ipynb ends so). Nothing varies over time: a first pass, never a
storm, never advice to pad; its one fix, should the cost matter, is to jit the call,
which tests/programs/eager_pytree_once_fixed.py applies. A loop that maps over leaves
growing at every step is still a storm."""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import scenarios
import sqlalchemy as sa

import cachewatch
from cachewatch.store import engine as enginemod
from cachewatch.store import models
from cachewatch.storms import diagnosis

PROGRAMS = os.path.join(os.path.dirname(__file__), "programs")
_JAX_COMPILED = re.compile(r"Finished XLA compilation of jit\((.*?)\) in")
_PADDING = ("pad what varies", "pad to powers of two", "powers of two", "bucket")


def _run(tmp_path, name: str) -> tuple[str, subprocess.CompletedProcess]:
    url = f"sqlite:///{tmp_path / (name + '.db')}"
    return url, scenarios.run_program_file(os.path.join(PROGRAMS, f"{name}.py"), url)


def _recorded(url: str) -> int:
    e = models.compile_events
    with enginemod.connection(url) as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(e).where(e.c.compiled)).scalar_one()


def _printed(done: subprocess.CompletedProcess) -> list[float]:
    return [float(v) for v in re.findall(r"-?\d+\.\d+", done.stdout)]


def test_eager_code_over_a_pytree_called_once_is_a_first_pass_with_no_padding_advice(tmp_path):
    url, done = _run(tmp_path, "eager_pytree_once")
    logged = collections.Counter(_JAX_COMPILED.findall(done.stderr))
    assert _recorded(url) == sum(logged.values()) > 100  # dozens of compiles in one call
    with enginemod.connection(url) as conn:
        storms, passes = diagnosis.storms_and_first_passes(conn, threshold=5, window=600)
    assert storms == [], [diagnosis.describe_storm(s) for s in storms]
    program = os.path.join(PROGRAMS, "eager_pytree_once.py")
    with open(program) as f:
        source = f.read().splitlines()
    sites = {p.call_site or "" for p in passes}
    # The lines of the function mapped over the leaves, and the eager grad's backward pass.
    for text in ("jax.nn.softmax(", "return jnp.sum((soft_argmax", "grads = jax.grad(pert_loss)"):
        (line,) = [i for i, code in enumerate(source, 1) if text in code]
        assert f"{program}:{line}" in sites, (text, sorted(sites))
    for found in passes:
        assert found.signatures == found.compiles
        assert found.fix.startswith("Nothing to fix"), found.fix
        assert not any(word in found.fix.lower() for word in _PADDING), found.fix
        assert "jit the call at eager_pytree_once.py:" in found.fix
    said = "\n".join(line for line in done.stderr.splitlines() if "Finished XLA" not in line)
    assert "were a first pass over a few shapes" in said
    assert "Storm [" not in said
    assert "Finding [" not in said
    assert not any(word in said.lower() for word in _PADDING), said[-3000:]
    told = subprocess.run(
        [sys.executable, "-m", "cachewatch", "findings", "--store", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert told.returncode == 0, told.stderr[-3000:]
    assert not any(word in told.stdout.lower() for word in _PADDING), told.stdout


def test_jitting_the_call_compiles_far_less_and_prints_the_same(tmp_path):
    eager_url, eager = _run(tmp_path, "eager_pytree_once")
    fixed_url, fixed = _run(tmp_path, "eager_pytree_once_fixed")
    assert _recorded(fixed_url) * 5 < _recorded(eager_url)
    assert len(_printed(eager)) == len(_printed(fixed)) == 16
    for before, after in zip(_printed(eager), _printed(fixed), strict=True):
        assert abs(before - after) <= 2e-6, (eager.stdout, fixed.stdout)


def _grow(x):
    y = jnp.tanh(x * 2.0 + 1.0)
    return (y * y).sum()


def test_a_loop_mapping_over_leaves_that_grow_at_every_step_is_still_a_storm(sqlite_url, use_store):
    use_store(sqlite_url)
    cachewatch.install()
    try:
        # Two lines of the loop compile: it is seen coming round (a one-line loop body
        # compiling only inside the map reads as warm-up, as it did before).
        for n in range(3, 12):
            tree = {"a": jnp.arange(n + 40.0) / n, "b": jnp.arange(n + 60.0) / n}
            jax.tree.map(_grow, tree)
    finally:
        cachewatch.uninstall()
    assert cachewatch.flush(30)
    with enginemod.connection(sqlite_url) as conn:
        storms = diagnosis.detect_storms(conn, threshold=5, window=600)
    here = [s for s in storms if (s.call_site or "").startswith(f"{__file__}:")]
    assert here, [diagnosis.describe_storm(s) for s in storms]
