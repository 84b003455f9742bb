#!/usr/bin/env bash
# tests/container/host-setup.sh: make this machine able to build and run the
# redlockd images with podman, for the container suite (scripts/test
# --suite container). Run as root; prints every change it makes.
#
# 1. /etc/containers/containers.conf: podman's default ulimits for a
#    container are above the hard limits of some machines, and setrlimit is
#    then refused inside every container. When the file is missing, or has
#    no default_ulimits, it gets default_ulimits set to this machine's own
#    hard limits (nofile and nproc, as podman runs under them). A file that
#    sets them already is left alone.
# 2. The local base image localhost/debian:bookworm-slim
#    (tests/container/base-image.sh): debootstrapped, no registry.
#
# Exit 0 when the machine is ready; 1 with the reason on stderr otherwise.
set -eu
here=$(cd "$(dirname "$0")" && pwd)

say() { printf 'host-setup: %s\n' "$*" >&2; }

conf=${REDLOCKD_CONTAINERS_CONF:-/etc/containers/containers.conf}

# The hard limits podman itself runs under, which may be lower than the
# shell's (podman lowers its own nproc on some machines): read from a
# short-lived `podman system service`; the shell's own as a fallback.
podman_hard_limit() { # "Max processes" or "Max open files"
    local dir pid v=""
    dir=$(mktemp -d)
    podman system service --time=5 "unix://$dir/podman.sock" \
        >/dev/null 2>&1 &
    pid=$!
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        sleep 0.2
        v=$(awk -v k="$1" 'index($0, k) == 1 { print $(NF - 1) }' \
            "/proc/$pid/limits" 2>/dev/null)
        [ -n "$v" ] && break
    done
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rm -rf "$dir"
    echo "$v"
}
nofile=$(podman_hard_limit "Max open files")
nproc=$(podman_hard_limit "Max processes")
[ -n "$nofile" ] || nofile=$(ulimit -Hn)
[ -n "$nproc" ] || nproc=$(ulimit -Hu)
[ "$nofile" = unlimited ] && nofile=1048576
[ "$nproc" = unlimited ] && nproc=4194304
line="default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]"

if [ ! -f "$conf" ]; then
    mkdir -p "$(dirname "$conf")"
    printf '# Written by redlockd tests/container/host-setup.sh: podman'"'"'s\n# default ulimits exceed this machine'"'"'s hard limits.\n[containers]\n%s\n' \
        "$line" >"$conf"
    say "wrote $conf: $line (this machine's hard limits)"
elif ! grep -q '^[[:space:]]*default_ulimits' "$conf"; then
    if grep -q '^[[:space:]]*\[containers\]' "$conf"; then
        tmp=$(mktemp "$conf.XXXXXX")
        awk -v l="$line" '{ print } /^[[:space:]]*\[containers\]/ && !done {
            print "# added by redlockd tests/container/host-setup.sh"; print l; done = 1 }' \
            "$conf" >"$tmp"
        chmod 0644 "$tmp"
        mv "$tmp" "$conf"
    else
        printf '\n# added by redlockd tests/container/host-setup.sh\n[containers]\n%s\n' \
            "$line" >>"$conf"
    fi
    say "added to $conf: $line (this machine's hard limits)"
fi

"$here/base-image.sh" localhost/debian:bookworm-slim
