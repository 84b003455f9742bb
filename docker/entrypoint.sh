#!/bin/sh
# redlockd-entrypoint (docker/entrypoint.sh): configure redlockd from the
# environment and exec it, so that it runs as PID 1 and gets SIGTERM itself.
#
# The daemon reads these itself; they stay in the environment, out of argv
# (node URIs may carry passwords, and argv is visible in ps):
#   REDLOCKD_NODES            comma separated node URIs; required unless
#                             REDLOCKD_DEV=1 (or --node / --config is given)
#   REDLOCKD_SOCKET           default /run/redlockd/redlockd.sock
#   REDLOCKD_PREFIX, REDLOCKD_LOG_LEVEL, REDLOCKD_LOG_FORMAT,
#   REDLOCKD_REDIS_PASSWORD
# These become flags:
#   REDLOCKD_SOCKET_MODE      --socket-mode (daemon default 0660)
#   REDLOCKD_METRICS_LISTEN   --metrics-listen, default 0.0.0.0:9477;
#                             "off" disables the TCP listener
#   REDLOCKD_PASSWORD_FILE    --redis-password-file (a mounted secret)
#   REDLOCKD_DEV=1            --dev: five throw-away redis-servers (needs a
#                             redis-server binary, which the image lacks)
#   REDLOCKD_EXTRA_ARGS       more flags, split on blanks (no quoting, no
#                             globbing), e.g. "--node-timeout-ms 50"
#   REDLOCKD_BIN              the daemon, default /usr/local/bin/redlockd
# Arguments given to the container are passed on after all of these, so
# they win. A first argument that is not an option (nor "redlockd") is run
# instead of the daemon: `docker run IMAGE redlockctl --help`.
#
# Exit status: the daemon's; 2 (like the daemon's own configuration
# errors) when the environment is wrong.
set -eu

prog=redlockd-entrypoint

die() {
    printf '%s: %s\n' "$prog" "$*" >&2
    exit 2
}

if [ "$#" -gt 0 ]; then
    case $1 in
    -*) ;;
    redlockd) shift ;; # `docker run IMAGE redlockd --flag`: still configured
    *) exec "$@" ;;
    esac
fi

bin=${REDLOCKD_BIN:-/usr/local/bin/redlockd}
if [ ! -f "$bin" ] || [ ! -x "$bin" ]; then
    die "REDLOCKD_BIN=$bin is not an executable file"
fi

# The daemon reads REDLOCKD_SOCKET; the default here is the image's volume.
REDLOCKD_SOCKET=${REDLOCKD_SOCKET:-/run/redlockd/redlockd.sock}
export REDLOCKD_SOCKET

# Flags are appended after the original arguments, which are rotated to the
# end at the last moment.
n_args=$#

case ${REDLOCKD_DEV:-0} in
1)
    if [ -n "${REDLOCKD_NODES:-}" ]; then
        die "REDLOCKD_DEV=1 starts its own nodes: unset REDLOCKD_NODES"
    fi
    set -- "$@" --dev
    ;;
0) ;;
*) die "REDLOCKD_DEV must be 1 or 0, not '$REDLOCKD_DEV'" ;;
esac

if [ -n "${REDLOCKD_SOCKET_MODE:-}" ]; then
    set -- "$@" --socket-mode "$REDLOCKD_SOCKET_MODE"
fi

metrics=${REDLOCKD_METRICS_LISTEN:-0.0.0.0:9477}
if [ "$metrics" != off ]; then
    set -- "$@" --metrics-listen "$metrics"
fi

if [ -n "${REDLOCKD_PASSWORD_FILE:-}" ]; then
    if [ ! -f "$REDLOCKD_PASSWORD_FILE" ] ||
        [ ! -r "$REDLOCKD_PASSWORD_FILE" ]; then
        die "REDLOCKD_PASSWORD_FILE=$REDLOCKD_PASSWORD_FILE is not a" \
            "readable file (mount the secret there)"
    fi
    set -- "$@" --redis-password-file "$REDLOCKD_PASSWORD_FILE"
fi

if [ -n "${REDLOCKD_EXTRA_ARGS:-}" ]; then
    set -f
    # Word splitting is the point: one variable, several flags.
    # shellcheck disable=SC2086
    set -- "$@" $REDLOCKD_EXTRA_ARGS
    set +f
fi

# What the arguments (the container's, the extra ones, --dev) say.
has_nodes=no
wants_exit=no
for arg in "$@"; do
    case $arg in
    --node | --node=* | --config | --config=* | --dev) has_nodes=yes ;;
    -h | --help | -V | --version) wants_exit=yes ;;
    esac
done

if [ -z "${REDLOCKD_NODES:-}" ] && [ "$has_nodes" = no ] &&
    [ "$wants_exit" = no ]; then
    die "REDLOCKD_NODES is not set: give the five Redis nodes as" \
        "comma separated URIs, e.g." \
        "REDLOCKD_NODES=redis://redis-1:6379?persistent=1,redis://redis-2:6379?persistent=1,..." \
        "(or REDLOCKD_DEV=1 for throw-away local nodes)"
fi

# The socket's directory must exist and be writable by this user: in a
# container it is the shared volume.
sock_dir=$(dirname -- "$REDLOCKD_SOCKET")
if [ "$wants_exit" = no ]; then
    if [ ! -d "$sock_dir" ]; then
        die "socket directory $sock_dir does not exist (mount a volume there)"
    fi
    if [ ! -w "$sock_dir" ] || [ ! -x "$sock_dir" ]; then
        die "socket directory $sock_dir is not writable by uid $(id -u)" \
            "(give the volume to uid/gid $(id -u):$(id -g))"
    fi
fi

# Move the container's own arguments behind the flags built above.
while [ "$n_args" -gt 0 ]; do
    set -- "$@" "$1"
    shift
    n_args=$((n_args - 1))
done

exec "$bin" "$@"
