"""The pytest plugin, run as a user runs it: pytest in a subprocess over a test file,
with cachewatch found through its ``pytest11`` entry point."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest_plugins = ("pytester",)

HEADER = """
import jax.numpy as jnp
import pytest
import cachewatch

@cachewatch.jit
def train_step(x):
    return x * 2
"""


@pytest.fixture
def run(pytester, tmp_path, monkeypatch):
    monkeypatch.setenv("CACHEWATCH_STORE", f"sqlite:///{tmp_path / 'plugin.db'}")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.delenv("CACHEWATCH_RAISE_INTERNAL_ERRORS", raising=False)

    def _run(body: str, *args: str):
        pytester.makepyfile(test_user=HEADER + textwrap.dedent(body))
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)

    return _run


def test_max_compiles_marker_fails_with_function_cause_and_diff(run):
    result = run("""
        @pytest.mark.max_compiles(train_step, 1)
        def test_steady():
            for n in (8, 8, 9, 10):
                train_step(jnp.ones(n))

        @pytest.mark.max_compiles("train_step", 2)
        def test_within_limit():
            train_step(jnp.ones(8))   # compiled by the test before: a cache hit
            train_step(jnp.ones(11))
    """)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "MaxCompilesExceeded" in out
    assert "`train_step` compiled 3 time(s), at most 1 allowed (causes: new_shape=2, first_call=1)" in out
    assert (
        "#2 new_shape: `train_step` traced again. Argument x changed shape on axis 0: float32[8] -> float32[9]." in out
    )
    assert "x: float32[8] -> float32[9]  (new_shape)" in out
    assert "x: float32[9] -> float32[10]  (new_shape)" in out
    assert "test_user.py" in out  # the call site of each extra compile


def test_fixture_counts_compiles_and_undoes_freeze(run):
    result = run("""
        def test_counts(cachewatch):
            train_step(jnp.ones(3))
            train_step(jnp.ones(3))
            assert cachewatch.compiles(train_step) == 1
            assert cachewatch.compiles("train_step") == 1
            assert [e.cause for e in cachewatch.events] == ["first_call"]

        def test_freeze_in_test(cachewatch):
            cachewatch.freeze()
            with pytest.raises(cachewatch_module.FrozenCompileError, match="train_step"):
                train_step(jnp.ones(4))

        def test_not_frozen_after(cachewatch):
            train_step(jnp.ones(5))
            assert cachewatch.compiles(train_step) == 1

        def test_assert_compiles(cachewatch):
            train_step(jnp.ones(6)); train_step(jnp.float32(1.0))
            cachewatch.assert_compiles(train_step, at_most=1)

        cachewatch_module = cachewatch
    """)
    result.assert_outcomes(passed=3, failed=1)
    out = result.stdout.str()
    assert "test_assert_compiles" in out
    assert "x: float32[6] -> float32[]  (new_shape)" in out


def test_report_option_prints_the_session_table(run):
    result = run(
        """
        def test_a():
            for n in (1, 2, 3):
                train_step(jnp.ones(n))

        def test_b():
            train_step(jnp.ones(1))
    """,
        "--cachewatch-report",
    )
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "cachewatch compile report" in out
    row = next(line for line in out.splitlines() if line.startswith("train_step "))
    assert row.split()[1:4] == ["test_user.py:5", "3", "2"]  # the decorator's line
    assert row.endswith("new_shape=2, first_call=1")


def test_bad_marker_is_a_usage_error(run):
    result = run("""
        @pytest.mark.max_compiles("train_step")
        def test_bad():
            pass
    """)
    assert result.ret != 0
    assert "use @pytest.mark.max_compiles(fn_or_name, n)" in result.stdout.str() + result.stderr.str()


def test_importing_cachewatch_does_not_import_pytest_or_the_plugin():
    import importlib.metadata

    entry = [e for e in importlib.metadata.entry_points(group="pytest11") if e.name == "cachewatch"]
    assert entry
    assert entry[0].value == "cachewatch.pytest_plugin"
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, cachewatch; print('pytest' in sys.modules, 'cachewatch.pytest_plugin' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
    )
    assert probe.stdout.split() == ["False", "False"]
