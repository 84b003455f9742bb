#!/bin/sh
# Entrypoint of the container suite's redis image: the compose file's own
# redis-server command line, plus a unix socket at $REDIS_SOCKET (in a
# directory shared with the sidecar) when it is set, so that a node with
# --network none is still reachable.
set -eu
if [ -n "${REDIS_SOCKET:-}" ]; then
    set -- "$@" --unixsocket "$REDIS_SOCKET" --unixsocketperm 777
fi
exec "$@"
