#!/bin/sh
# docker/build.sh: the build stage of docker/Dockerfile, as a script so that
# tests/docker runs exactly the same steps outside a container.
#
#   docker/build.sh BUILD_DIR OUT_DIR
#
# Run from the root of a source tree (the Docker build context). Configures
# a release build in BUILD_DIR, compiles redlockd (and redlockctl when
# clients/redlockctl exists), and installs into OUT_DIR, which becomes
# /usr/local/bin of the runtime image:
#   redlockd               the daemon (stripped)
#   redlockctl             the CLI, when built; the health check uses it
#   redlockd-entrypoint    docker/entrypoint.sh
#   redlockd-healthcheck   docker/healthcheck.sh
set -eu

if [ "$#" -ne 2 ]; then
    echo "usage: docker/build.sh BUILD_DIR OUT_DIR" >&2
    exit 2
fi
build_dir=$1
out_dir=$2

if [ ! -f meson.build ] || [ ! -f docker/entrypoint.sh ]; then
    echo "docker/build.sh: run me from the top of the source tree" >&2
    exit 2
fi

# Only the two programs the image ships are compiled; meson still configures
# every subdir, so the test dependencies that meson.build asks for
# unconditionally (cmocka) must be installed in the build stage.
meson setup "$build_dir" --buildtype=release --prefix=/usr/local
targets=redlockd
if [ -f clients/redlockctl/meson.build ]; then
    targets="$targets redlockctl"
fi
# $targets is a list of plain target names: split it on purpose.
# shellcheck disable=SC2086
meson compile -C "$build_dir" $targets

mkdir -p "$out_dir"
install -m 0755 -s "$build_dir/sidecar/redlockd" "$out_dir/redlockd"
if [ -f clients/redlockctl/meson.build ]; then
    install -m 0755 -s "$build_dir/clients/redlockctl/redlockctl" \
        "$out_dir/redlockctl"
fi
install -m 0755 docker/entrypoint.sh "$out_dir/redlockd-entrypoint"
install -m 0755 docker/healthcheck.sh "$out_dir/redlockd-healthcheck"

"$out_dir/redlockd" --version
