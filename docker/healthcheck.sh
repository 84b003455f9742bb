#!/bin/sh
# redlockd-healthcheck (docker/healthcheck.sh): ask the daemon over its unix
# socket, the way a bot reaches it.
#
#   redlockd-healthcheck [health|ping]
#
#   health (default)  GET /v1/health: healthy while a quorum of nodes is
#                     connected (readiness, Docker HEALTHCHECK)
#   ping              GET /v1/ping: the daemon answers (liveness; a lost
#                     quorum is not cured by restarting the sidecar)
#
# Uses redlockctl when the image has it, else curl. Prints the daemon's
# answer (Docker keeps it in the container's health log) and exits 0 when
# healthy, 1 otherwise (Docker reserves other statuses), 2 on bad usage.
# Environment: REDLOCKD_SOCKET (default /run/redlockd/redlockd.sock),
# REDLOCKD_HEALTHCHECK_TIMEOUT_MS (default 3000).
set -u

route=${1:-health}
case $route in
health | ping) ;;
*)
    echo "usage: redlockd-healthcheck [health|ping]" >&2
    exit 2
    ;;
esac
sock=${REDLOCKD_SOCKET:-/run/redlockd/redlockd.sock}
timeout_ms=${REDLOCKD_HEALTHCHECK_TIMEOUT_MS:-3000}
case $timeout_ms in
'' | *[!0-9]*)
    echo "redlockd-healthcheck: REDLOCKD_HEALTHCHECK_TIMEOUT_MS must be" \
        "a number of milliseconds" >&2
    exit 2
    ;;
esac

if command -v redlockctl >/dev/null 2>&1; then
    if redlockctl --socket "$sock" --timeout "$timeout_ms" "$route"; then
        exit 0
    fi
    exit 1
fi
if command -v curl >/dev/null 2>&1; then
    # curl takes seconds; round up so that 1 ms does not become 0 (no limit).
    timeout_s=$(((timeout_ms + 999) / 1000))
    if curl --silent --show-error --fail-with-body --max-time "$timeout_s" \
        --unix-socket "$sock" "http://localhost/v1/$route"; then
        echo
        exit 0
    fi
    echo
    exit 1
fi
echo "redlockd-healthcheck: neither redlockctl nor curl is installed" >&2
exit 1
