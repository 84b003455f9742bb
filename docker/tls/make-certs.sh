#!/bin/sh
# make-certs.sh DIR: a throw-away CA and the certificates that
# docker/compose.tls.yaml mounts, made with the openssl CLI:
#   ca.crt                   the CA the sidecar trusts (--tls-ca-file)
#   server.crt, server.key   every node's (names redis-1 .. redis-5)
#   client.crt, client.key   the sidecar's, for mutual TLS
# Run it as root: it hands each key to the uid of the container that reads
# it (redis: 999, redlockd: 10001) with mode 0600, since redlockd refuses a
# key file that others may read. For a demo only: in production the
# certificates come from your CA (or cert-manager) and a secret store.
set -eu
dir=${1:?usage: make-certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
umask 077
# The key options, as the positional parameters (POSIX sh has no arrays).
set -- -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes
openssl req -x509 -new "$@" -keyout ca.key -out ca.crt -days 365 \
    -subj /CN=redlockd-demo-ca 2>/dev/null
leaf() { # name, subjectAltName (or ""), extendedKeyUsage
    ext=$(mktemp)
    {
        echo "basicConstraints=CA:FALSE"
        [ -z "$2" ] || echo "subjectAltName=$2"
        echo "extendedKeyUsage=$3"
    } >"$ext"
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
        -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$1" 2>/dev/null
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
        -out "$1.crt" -days 365 -sha256 -extfile "$ext" 2>/dev/null
    rm -f "$ext" "$1.csr"
}
leaf server "DNS:redis-1,DNS:redis-2,DNS:redis-3,DNS:redis-4,DNS:redis-5" \
    serverAuth
leaf client "" clientAuth
rm -f ca.key ca.srl
chmod 0644 ca.crt server.crt client.crt
chmod 0600 server.key client.key
if [ "$(id -u)" -eq 0 ]; then
    chown 999:999 server.key
    chown 10001:10001 client.key
else
    echo "make-certs.sh: not root: chown 999 server.key and 10001" \
        "client.key before docker compose up" >&2
fi
echo "certificates in $dir"
