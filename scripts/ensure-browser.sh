#!/usr/bin/env bash
# Install what the browser tests need, only when it is missing:
#   /usr/bin/chromium            <- Debian package "chromium"
#   playwright (Python, in .venv) <- PyPI; it drives the system Chromium, and no
#                                    browser build of its own is ever downloaded.
# Safe to run any number of times; a run with both present changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

# The interpreter that runs the tests (the project's .venv unless told otherwise).
PY=${PYTHON:-.venv/bin/python}
CHROMIUM=/usr/bin/chromium

if [ ! -x "$CHROMIUM" ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            SUDO="sudo"
        else
            echo "ensure-browser: need root (or sudo) to install chromium" >&2
            exit 1
        fi
    fi
    export DEBIAN_FRONTEND=noninteractive
    # apt-get update is the slow, network-bound part: only when the lists do not know chromium.
    if ! apt-cache show chromium >/dev/null 2>&1; then
        $SUDO apt-get update -q
    fi
    if ! $SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core; then
        # Stale lists can point at versions the mirror no longer has.
        $SUDO apt-get update -q
        $SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
    fi
    if [ ! -x "$CHROMIUM" ]; then
        echo "ensure-browser: $CHROMIUM still missing after install" >&2
        exit 1
    fi
    echo "ensure-browser: installed chromium"
fi

if ! "$PY" -c "import playwright.sync_api" >/dev/null 2>&1; then
    # PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD: the package alone, never a browser download.
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 "$PY" -m pip install --quiet "playwright>=1.40"
    echo "ensure-browser: installed playwright"
fi
echo "ensure-browser: chromium and playwright present"
