#!/usr/bin/env bash
# Set up everything the test suite needs and run it. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/ensure-ops-tools.sh
bash scripts/ensure-browser.sh
.venv/bin/ruff check cachewatch server tests benchmarks examples migrations deploy
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
exec .venv/bin/python -m pytest "$@"
