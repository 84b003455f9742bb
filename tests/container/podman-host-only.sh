#!/bin/sh
# tests/container/podman-host-only.sh: the podman that podman-compose runs
# in the container suite (podman-compose --podman-path). It keeps every
# container on the host's loopback or on no network at all:
#
# - `podman network exists NAME` answers yes and `podman network create` is
#   refused: podman-compose (1.0.3, Debian bookworm) creates every network
#   the compose file declares and attaches each container to them even when
#   the service sets network_mode; here no network is ever created.
# - `podman run`/`create` must say --network host or --network none (the
#   test override gives every service one); the --net/--network-alias pair
#   that podman-compose adds for the declared networks is dropped, and so
#   are -p port mappings (meaningless without a network namespace of its
#   own: a host-network container listens on the host's ports itself).
# - Every command runs with the runc runtime (crun cannot run on a machine
#   with hybrid cgroups).
set -eu

case "${1:-}" in
network)
    case "${2:-}" in
    exists) exit 0 ;;
    create)
        echo "podman-host-only: refusing 'podman network create':" \
            "tests use --network host or none only" >&2
        exit 1
        ;;
    esac
    ;;
run | create)
    cmd=$1
    shift
    mode=""
    n=$#
    while [ "$n" -gt 0 ]; do
        a=$1
        shift
        n=$((n - 1))
        case $a in
        --net | --network-alias | -p | --publish)
            # Dropped with its value (podman-compose passes them split).
            shift
            n=$((n - 1))
            continue
            ;;
        --network)
            mode=$1
            set -- "$@" --network "$1"
            shift
            n=$((n - 1))
            continue
            ;;
        esac
        set -- "$@" "$a"
    done
    case $mode in
    host | none) ;;
    *)
        echo "podman-host-only: refusing 'podman $cmd' without" \
            "--network host or --network none (got '${mode:-default}')" >&2
        exit 1
        ;;
    esac
    exec podman --runtime runc "$cmd" "$@"
    ;;
esac
exec podman --runtime runc "$@"
