#!/usr/bin/env bash
# Set up everything the test suite needs and run it at both ends of the JAX users have:
# Python 3.11 with JAX 0.10 (.venv), then the newest Python 3.12+ on the machine with the
# newest JAX the package index serves (.venv-newest). Extra arguments go to pytest.
# SKIP_NEWEST=1 runs the first leg only.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/ensure-ops-tools.sh
bash scripts/ensure-browser.sh
LINTED="cachewatch server tests benchmarks examples migrations deploy"
.venv/bin/ruff check $LINTED
.venv/bin/ruff format --check $LINTED
.venv/bin/mypy  # cachewatch/, server/ (as cachewatch_server) and tests/, configured in pyproject.toml
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}

# The suite's test files run side by side, one process per core this process may use (up
# to four; TEST_WORKERS overrides): most of its time is programs run under
# `cachewatch run`, one core each. A file's tests stay in one process, in their order.
workers=${TEST_WORKERS:-$(python3 -c 'import os; print(max(1, min(4, len(os.sched_getaffinity(0)))))')}

leg() {  # leg VENV LABEL ARGS...: the suite on one interpreter
    local venv=$1 label=$2
    shift 2
    echo "=== tests on $label: $("$venv/bin/python" -c 'import sys, jax; print(f"Python {sys.version.split()[0]}, JAX {jax.__version__}")') ($workers processes)"
    "$venv/bin/python" -m pytest -n "$workers" --dist loadfile "$@"
}

status=0
leg .venv "the project's Python" "$@" || status=$?

if [ "${SKIP_NEWEST:-0}" = "1" ]; then
    echo "=== the newest-JAX leg was skipped (SKIP_NEWEST=1)"
    exit $status
fi
newest=$(bash scripts/newest-python.sh)
if [ -z "$newest" ]; then
    banner="NO PYTHON 3.12+ ON THIS MACHINE: the suite did NOT run on the newest JAX (0.11+ needs Python 3.12+)"
    printf '\n%s\n%s\n%s\n\n' "$(printf '!%.0s' {1..100})" "$banner" "$(printf '!%.0s' {1..100})" >&2
    exit $status
fi
PYTHON=$newest VENV=.venv-newest bash scripts/setup.sh
PYTHON=.venv-newest/bin/python bash scripts/ensure-browser.sh
newest_status=0
leg .venv-newest "the newest Python" "$@" || newest_status=$?
[ $status -ne 0 ] && exit $status
exit $newest_status
