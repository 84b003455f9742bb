#!/bin/sh
# tests/compat/roots.sh: make the Debian roots whose servers the compat
# suite runs (tests/compat/redis-server), without any container registry:
# debootstrap each release from the Debian mirror this machine's apt
# already uses, with its servers installed.
#
#   tests/compat/roots.sh [RELEASE...]   make them (default: all)
#   tests/compat/roots.sh --check SERVER...
#                                        exit 0 when every server named
#                                        (redis-6.0, ...) can run; else
#                                        print why not and exit 1
#
#   bullseye  redis-server 6.0
#   trixie    redis-server 8.0 and valkey-server 8.1
#
# The roots are kept under $REDLOCKD_COMPAT_ROOTS (default
# /var/cache/redlockd-test/compat) and reused while younger than
# $REDLOCKD_BASE_MAX_AGE_DAYS (default 7), so only a machine's first run
# pays for debootstrap (about a minute each). Needs root and debootstrap;
# without them, or without a mirror, it says so, makes nothing and exits 1.
set -eu

roots=${REDLOCKD_COMPAT_ROOTS:-/var/cache/redlockd-test/compat}
max_age=${REDLOCKD_BASE_MAX_AGE_DAYS:-7}
here=$(cd "$(dirname "$0")" && pwd)

say() { printf 'compat roots: %s\n' "$*" >&2; }

packages() { # release -> the packages its root holds
    case $1 in
    bullseye) echo redis-server ;;
    trixie) echo redis-server,valkey-server ;;
    *) return 1 ;;
    esac
}

release_of() { # server -> the release of its root; "" for this machine's
    case $1 in
    redis-7.0) echo "" ;;
    redis-6.0) echo bullseye ;;
    redis-8.0 | valkey-8.1) echo trixie ;;
    *) return 1 ;;
    esac
}

binary_of() { # server -> its binary in the root
    case $1 in
    valkey-*) echo valkey-server ;;
    *) echo redis-server ;;
    esac
}

if [ "${1:-}" = --check ]; then
    shift
    for s in "$@"; do
        if ! rel=$(release_of "$s"); then
            say "unknown server $s"
            exit 1
        fi
        if [ -z "$rel" ]; then
            command -v redis-server >/dev/null ||
                { say "$s: no redis-server on PATH"; exit 1; }
            continue
        fi
        b=$roots/$rel/usr/bin/$(binary_of "$s")
        if [ ! -x "$b" ]; then
            say "$s: no $rel root ($b missing)"
            exit 1
        fi
    done
    exit 0
fi

[ $# -gt 0 ] || set -- bullseye trixie

why_not=
if [ "$(id -u)" -ne 0 ]; then
    why_not="not root (debootstrap needs it)"
elif ! command -v debootstrap >/dev/null; then
    why_not="no debootstrap (scripts/deps.sh installs it)"
fi

# shellcheck source=tests/container/debian-mirror.sh
. "$here/../container/debian-mirror.sh"

rc=0
for rel in "$@"; do
    pkgs=$(packages "$rel") || { say "unknown release $rel"; exit 2; }
    dir=$roots/$rel
    stamp=$dir/.redlockd-compat
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pkgs" ] &&
        [ -n "$(find "$stamp" -mtime -"$max_age")" ]; then
        say "reusing $dir"
        continue
    fi
    if [ -n "$why_not" ]; then
        say "cannot make the $rel root: $why_not"
        rc=1
        continue
    fi
    mirror=$(debian_mirror | head -n 1)
    if [ -z "$mirror" ]; then
        say "cannot make the $rel root: no Debian mirror in /etc/apt/sources.list*"
        rc=1
        continue
    fi
    mkdir -p "$roots"
    tmp=$(mktemp -d "$roots/$rel.XXXXXX")
    say "debootstrap --variant=minbase --include=$pkgs $rel from $mirror"
    if ! debootstrap --variant=minbase --include="$pkgs" "$rel" "$tmp" \
        "$mirror" >"$tmp.log" 2>&1; then
        tail -20 "$tmp.log" >&2
        rm -rf "$tmp" "$tmp.log"
        say "cannot make the $rel root: debootstrap failed"
        rc=1
        continue
    fi
    rm -f "$tmp.log"
    rm -rf "$tmp"/var/lib/apt/lists/* "$tmp"/var/cache/apt/archives/*.deb
    echo "$pkgs" >"$tmp/.redlockd-compat"
    rm -rf "$dir"
    mv "$tmp" "$dir"
done
exit $rc
