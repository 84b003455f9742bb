#!/usr/bin/env bash
# deps.sh: installs the Debian packages redlockd needs, only when missing.
# Sourced by scripts/dev and scripts/test (so it sets no shell options of
# its own: scripts/test must keep going after a failing suite); safe to run
# on its own.

# Build: compiler, meson, the five libraries (OpenSSL for rediss://). Run:
# redis-server (for --dev and tests). Tests: cmocka, pytest for
# /usr/bin/python3, the openssl CLI (TLS test certificates), socat and curl
# for the examples, golang for the Go client, nodejs/npm for the Node client.
REDLOCKD_BUILD_PKGS="gcc pkg-config meson ninja-build libhiredis-dev libevent-dev uuid-dev libcjson-dev libssl-dev"
REDLOCKD_RUN_PKGS="redis-server"
REDLOCKD_TEST_PKGS="libcmocka-dev openssl python3 python3-pytest python3-yaml shellcheck socat curl valgrind clang nftables"
# The container suite: podman with the runc runtime, debootstrap for the
# local base image (no registry), podman-compose for docker/compose.yaml.
REDLOCKD_CONTAINER_PKGS="podman runc debootstrap podman-compose"
# The compat suite: debootstrap for the roots of the other servers.
REDLOCKD_COMPAT_PKGS="debootstrap"

redlockd_missing_pkgs() {
    local missing=()
    for p in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
            missing+=("$p")
        fi
    done
    echo "${missing[@]:-}"
}

redlockd_install() {
    local missing
    missing=$(redlockd_missing_pkgs "$@")
    if [ -n "$missing" ]; then
        echo "installing: $missing" >&2
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -q >&2
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q $missing >&2
    fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    # Lists of package names: split on purpose.
    # shellcheck disable=SC2086
    redlockd_install $REDLOCKD_BUILD_PKGS $REDLOCKD_RUN_PKGS $REDLOCKD_TEST_PKGS \
        $REDLOCKD_CONTAINER_PKGS $REDLOCKD_COMPAT_PKGS
fi
