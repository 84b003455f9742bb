#!/bin/sh
# tests/container/base-image.sh: make the local base image
# localhost/debian:bookworm-slim that docker/Dockerfile builds on
# (DEBIAN_IMAGE), without any container registry: debootstrap a minimal
# bookworm from the Debian mirror this machine's apt already uses, and
# `podman import` it.
#
#   tests/container/base-image.sh [IMAGE]
#
# The root file system is kept as a tarball in $REDLOCKD_CONTAINER_CACHE
# (default /var/cache/redlockd-test) and reused while it is younger than
# $REDLOCKD_BASE_MAX_AGE_DAYS (default 7), so only the first run on a
# machine pays for debootstrap. An image already in podman's store is kept.
# Prints what it does on stderr; exit 0 when the image exists at the end.
set -eu

image=${1:-localhost/debian:bookworm-slim}
cache=${REDLOCKD_CONTAINER_CACHE:-/var/cache/redlockd-test}
max_age=${REDLOCKD_BASE_MAX_AGE_DAYS:-7}
tarball=$cache/debian-bookworm-minbase.tar

say() { printf 'base-image: %s\n' "$*" >&2; }

if podman image exists "$image"; then
    say "$image is already in podman's store"
    exit 0
fi

# shellcheck source=tests/container/debian-mirror.sh
. "$(dirname "$0")/debian-mirror.sh"

mkdir -p "$cache"
if [ -f "$tarball" ] && [ -n "$(find "$tarball" -mtime -"$max_age")" ]; then
    say "reusing $tarball"
else
    mirror=$(debian_mirror | head -n 1)
    if [ -z "$mirror" ]; then
        say "no Debian bookworm mirror in /etc/apt/sources.list*"
        exit 1
    fi
    root=$(mktemp -d "$cache/rootfs.XXXXXX")
    trap 'rm -rf "$root"' EXIT
    say "debootstrap --variant=minbase bookworm from $mirror (once per machine)"
    debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 ||
        { tail -20 "$root.log" >&2; rm -f "$root.log"; exit 1; }
    rm -f "$root.log"
    # What debian:bookworm-slim also leaves out: apt lists and caches.
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
        "$root"/var/cache/apt/archives/*.deb
    tar -C "$root" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
fi
say "podman import $tarball -> $image"
podman import --quiet "$tarball" "$image" >/dev/null
