#!/usr/bin/env bash
# The main job on the embedded default store (SQLite): set up, run the example
# training loop that falls into the classic recompilation storms, print the report,
# then serve the dashboard over that data (Ctrl-C stops it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
# The default store may come from an older cachewatch: bring its schema up to date first.
.venv/bin/cachewatch db upgrade
.venv/bin/cachewatch run examples/train_storms.py
.venv/bin/cachewatch report
port=${CACHEWATCH_PORT:-8000}
echo
echo "cachewatch dashboard: http://127.0.0.1:${port}/   (Ctrl-C to stop)"
exec .venv/bin/cachewatch serve --port "$port"
