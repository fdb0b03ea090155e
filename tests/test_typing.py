"""`cachewatch.jit` is typed: a type checker sees the wrapped function's parameters and result."""

from pathlib import Path

# mypy is a test dependency (the [test] extra that scripts/setup.sh installs): a broken
# install fails here instead of skipping the type checks.
from mypy import api as mypy_api

HERE = Path(__file__).resolve().parent


def _mypy(path: Path) -> tuple[str, int]:
    out, err, status = mypy_api.run(
        ["--no-incremental", "--cache-dir", "/dev/null", "--python-version", "3.11", str(path)]
    )
    return out + err, status


def test_jit_keeps_the_wrapped_signature():
    out, status = _mypy(HERE / "typed" / "jit_signature.py")
    assert status == 0, out


def test_a_wrong_call_is_reported(tmp_path):
    wrong = tmp_path / "wrong_call.py"
    wrong.write_text(
        "import jax\nimport cachewatch\n\n"
        "@cachewatch.jit\n"
        "def step(params: jax.Array, lr: float) -> jax.Array:\n"
        "    return params * lr\n\n"
        "step('not an array')\n"
    )
    out, status = _mypy(wrong)
    assert status == 1
    assert 'Missing positional argument "lr"' in out, out
    assert '"str"' in out, out
