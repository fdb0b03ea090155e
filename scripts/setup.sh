#!/usr/bin/env bash
# Create the project's virtual environment (.venv) and install cachewatch into it,
# with the test tools. Safe to run again: an up-to-date environment is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.cachewatch-installed
# pip builds the C hot path (cachewatch/_fastcall.c) at install: a change to it needs one.
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ setup.py -nt "$stamp" ] || [ cachewatch/_fastcall.c -nt "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e '.[server,test]'
    touch "$stamp"
fi
