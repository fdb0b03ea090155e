#!/usr/bin/env bash
# Create a virtual environment (.venv unless VENV names another) and install cachewatch
# into it, with the test tools. PYTHON picks the interpreter (python3 by default).
# Safe to run again: an up-to-date environment is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
stamp=$VENV/.cachewatch-installed
# pip builds the C hot path (cachewatch/capture/_fastcall.c) at install: a change to it needs one.
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ setup.py -nt "$stamp" ] || [ cachewatch/capture/_fastcall.c -nt "$stamp" ]; then
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e '.[server,test]'
    touch "$stamp"
fi
