#!/usr/bin/env bash
# Install the operations tools the deploy tests need, only when they are missing:
#   promtool (and the prometheus binary)  <- Debian package "prometheus"
#   docker-compose (the v1 parser)        <- Debian package "docker-compose"
# Safe to run any number of times; a run with both tools present changes nothing.
set -euo pipefail

need=()
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
    need+=(prometheus)
fi
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)

if [ "${#need[@]}" -eq 0 ]; then
    echo "ensure-ops-tools: promtool, prometheus and docker-compose already present"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "ensure-ops-tools: need root (or sudo) to install: ${need[*]}" >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive

# The "prometheus" package ships a service that its postinst would start on :9090.
# Tests start their own prometheus, so forbid service starts for the duration of the
# install. An existing policy-rc.d (common in containers) is left as it is.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# temporary: set by ensure-ops-tools.sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    made_policy=1
fi
cleanup() {
    if [ "$made_policy" -eq 1 ]; then
        $SUDO rm -f "$policy"
    fi
}
trap cleanup EXIT

apt_install() {
    $SUDO apt-get install -y -q --no-install-recommends "$@"
}

# Only refresh the package lists when they are empty or the packages are unknown:
# apt-get update is the slow, network-bound part.
if ! apt-cache show "${need[@]}" >/dev/null 2>&1; then
    $SUDO apt-get update -q
fi
if ! apt_install "${need[@]}"; then
    # Stale lists can point at versions the mirror no longer has.
    $SUDO apt-get update -q
    apt_install "${need[@]}"
fi

# On a machine where systemd runs, the unit may still have been enabled and started
# (deb-systemd-invoke does not always consult policy-rc.d). Stop and disable it.
if [[ " ${need[*]} " == *" prometheus "* ]]; then
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        $SUDO systemctl disable --now prometheus.service >/dev/null 2>&1 || true
    elif [ -x /etc/init.d/prometheus ]; then
        # No-op when the daemon is not running; the init script stops it by its pidfile.
        $SUDO /etc/init.d/prometheus stop >/dev/null 2>&1 || true
    fi
fi

for tool in promtool prometheus docker-compose; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "ensure-ops-tools: $tool still missing after install" >&2
        exit 1
    fi
done
echo "ensure-ops-tools: installed ${need[*]}"
