#!/usr/bin/env bash
# Set up everything the test suite needs and run it. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/ensure-ops-tools.sh
bash scripts/ensure-browser.sh
LINTED="cachewatch server tests benchmarks examples migrations deploy"
.venv/bin/ruff check $LINTED
.venv/bin/ruff format --check $LINTED
.venv/bin/mypy  # cachewatch/ and server/, configured in pyproject.toml
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
exec .venv/bin/python -m pytest "$@"
