#!/usr/bin/env bash
# Print the newest CPython 3.12+ on this machine (the interpreter that gets the newest JAX:
# JAX 0.11 and later need Python 3.12 or newer), or nothing. NEWEST_PYTHON overrides.
set -euo pipefail
if [ -n "${NEWEST_PYTHON:-}" ]; then
    echo "$NEWEST_PYTHON"
    exit 0
fi
candidates=()
if command -v pyenv >/dev/null 2>&1; then
    root=$(pyenv root)
    for dir in $(ls -d "$root"/versions/3.1[2-9]* 2>/dev/null | sort -V -r); do
        candidates+=("$dir/bin/python")
    done
fi
for name in python3.14 python3.13 python3.12; do
    if command -v "$name" >/dev/null 2>&1; then
        candidates+=("$(command -v "$name")")
    fi
done
for python in "${candidates[@]}"; do
    if [ -x "$python" ] && "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
        echo "$python"
        exit 0
    fi
done
