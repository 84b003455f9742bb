#!/usr/bin/env bash
# tests/bench/run.sh: redlockd benchmarks, one command.
#
# Starts throw-away redis-server nodes under mktemp -d (--save ''
# --appendonly no), each listening on TCP loopback (127.0.0.1, a random free
# port) and on a unix socket, and an optimized redlockd against five of
# them over TCP, then runs interleaved repetitions of the acquire/release
# cycle at each concurrency: the daemon, the floor sidecar (rlbench --serve:
# the minimal limit's engine behind a lean unix-socket server, the cheapest
# correct sidecar), the minimal in-process limit (the cheapest correct
# Redlock cycle: SET NX PX, then one compare-and-delete), the in-process
# limit on the daemon's own scripts, and node-redlock; the daemon, the floor
# and the limits swap order every repetition. Each run reports
# cycles/s, latency, and the nodes' Redis commands and CPU per cycle (INFO
# commandstats and INFO cpu). Then the renew run (100,000 renewing locks by
# default); writes BENCHMARKS.md plus a PNG.
#
#   tests/bench/run.sh              the comparison + renew (about 9 min)
#   tests/bench/run.sh --unix       ... and the comparison again with the
#                                   nodes on unix sockets (about 16 min)
#   tests/bench/run.sh --quick      a smoke run, about 2 minutes; writes its
#                                   report under tests/bench/out/quick/ only
#   tests/bench/run.sh --scaling    "How cost grows": node count, client
#                                   connections, held locks
#   tests/bench/run.sh --profile    perf (cpu-clock) and callgrind of the
#                                   daemon under the cycle load
#   tests/bench/run.sh --renew      only the renewing-locks run
#   tests/bench/run.sh --tls        "TLS cost per cycle": the daemon's cycle
#                                   with the nodes over TLS (rediss://, a
#                                   throw-away CA made with the openssl CLI)
#                                   against plain TCP, interleaved; about 4
#                                   min; writes under tests/bench/out/tls/
#                                   (with --pin TITLE: a kept section of
#                                   BENCHMARKS.md)
#   tests/bench/run.sh --server KINDS
#                                   "Per server kind": the daemon's cycle
#                                   against five nodes of each kind of the
#                                   comma-separated list (redis-6.0,
#                                   redis-7.0, redis-8.0, valkey-8.1: the
#                                   servers of tests/compat/redis-server,
#                                   roots from tests/compat/roots.sh);
#                                   writes under tests/bench/out/servers/
#                                   (with --pin TITLE: a kept section of
#                                   BENCHMARKS.md)
#   tests/bench/run.sh --all        everything above but --quick
#   options: --no-node (skip node-redlock), --node-ap (add node-redlock
#            with auto-pipelining), --uuid (add the limit with the daemon's
#            libuuid tokens), --no-build, --reps N,
#            --report-only (regenerate BENCHMARKS.md from tests/bench/out),
#            --pin TITLE (instead of regenerating BENCHMARKS.md, add this
#            run's Redis-work tables at the top of its "Current
#            measurements" as a section TITLE that later regenerations
#            keep; the full report goes to the out dir)
#
# Environment (defaults in brackets, --quick ones after the slash):
#   BENCH_DURATION [5/2]  measured seconds per run
#   BENCH_WARMUP [1/0.5]  unmeasured seconds before each run
#   BENCH_REPS [5/1]      repetitions; tables show medians
#   BENCH_CONC [1,64,256]
#   BENCH_RENEW_LOCKS [100000/10000]  BENCH_RENEW_TTL [30000]
#   BENCH_RENEW_DURATION [45/10]      BENCH_RENEW_RAMP [10/2] (seconds over
#                         which the renewing locks are taken, so that their
#                         renewals spread out; 0 = as fast as possible)
#   BENCH_SCALING_DURATION [5]  BENCH_SCALING_NODES [1,3,5,7]
#   BENCH_SCALING_CONNS [1,10,100,1000,10000]
#   BENCH_SCALING_HELD [1,1000,10000,100000]
#   BENCH_PROFILE_DURATION [10]
#   BENCH_OUT [tests/bench/out]  where raw results and logs go (set: the
#                                report goes there too, not to BENCHMARKS.md)
#
# Every load loop is bounded (rlbench and node_redlock_bench.mjs stop by
# themselves; each is also run under `timeout`), everything listens on
# 127.0.0.1 or unix sockets only, and every process this script starts is
# stopped on exit.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

QUICK=0 SCALING=0 PROFILE=0 COMPARE=1 RENEW=1 NODE=1 BUILD=1 REPORT_ONLY=0
UNIX=0 NODE_AP=0 UUID=0 TLS=0 SERVERS=
REPS_ARG= PIN=
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --scaling) SCALING=1 COMPARE=0 RENEW=0 ;;
    --profile) PROFILE=1 COMPARE=0 RENEW=0 ;;
    --renew) RENEW=1 COMPARE=0 ;;
    --all) SCALING=1 PROFILE=1 COMPARE=1 RENEW=1 TLS=1 ;;
    --no-node) NODE=0 ;;
    --node-ap) NODE_AP=1 ;;
    --uuid) UUID=1 ;;
    --unix) UNIX=1 ;;
    --tls) TLS=1 COMPARE=0 RENEW=0 ;;
    --server) SERVERS=$2 COMPARE=0 RENEW=0; shift ;;
    --pin) PIN=$2; shift ;;
    --no-build) BUILD=0 ;;
    --reps) REPS_ARG=$2; shift ;;
    --report-only) REPORT_ONLY=1 COMPARE=0 RENEW=0 ;;
    -h | --help) sed -n '2,/^set /{/^#/p}' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [ "$QUICK" = 1 ]; then
    COMPARE=1 RENEW=1
fi

OUT=${BENCH_OUT:-$HERE/out}
# --tls alone has its own out dir and report (BENCHMARKS.md only with
# --pin), so that it neither mixes with nor replaces the full run's.
TLS_ONLY=0
if [ "$TLS" = 1 ] && [ "$QUICK$COMPARE$RENEW$SCALING$PROFILE" = 00000 ]; then
    TLS_ONLY=1
    OUT=$OUT/tls
fi
# --server alone likewise, under servers/.
SERVERS_ONLY=0
if [ -n "$SERVERS" ] &&
    [ "$QUICK$COMPARE$RENEW$SCALING$PROFILE$TLS" = 000000 ]; then
    SERVERS_ONLY=1
    OUT=$OUT/servers
fi
if [ "$QUICK" = 1 ]; then
    OUT=$OUT/quick
    DUR=${BENCH_DURATION:-2} WARM=${BENCH_WARMUP:-0.5} REPS=${BENCH_REPS:-1}
    RENEW_LOCKS=${BENCH_RENEW_LOCKS:-10000}
    RENEW_DUR=${BENCH_RENEW_DURATION:-10} RENEW_RAMP=${BENCH_RENEW_RAMP:-2}
else
    DUR=${BENCH_DURATION:-5} WARM=${BENCH_WARMUP:-1} REPS=${BENCH_REPS:-5}
    RENEW_LOCKS=${BENCH_RENEW_LOCKS:-100000}
    RENEW_DUR=${BENCH_RENEW_DURATION:-45} RENEW_RAMP=${BENCH_RENEW_RAMP:-10}
fi
[ -n "$REPS_ARG" ] && REPS=$REPS_ARG
CONC=${BENCH_CONC:-1,64,256}
RENEW_TTL=${BENCH_RENEW_TTL:-30000}
SC_DUR=${BENCH_SCALING_DURATION:-5}
SC_NODES=${BENCH_SCALING_NODES:-1,3,5,7}
SC_CONNS=${BENCH_SCALING_CONNS:-1,10,100,1000,10000}
SC_HELD=${BENCH_SCALING_HELD:-1,1000,10000,100000}
PROF_DUR=${BENCH_PROFILE_DURATION:-10}
mkdir -p "$OUT"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

log() { printf '%s run.sh: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# Which daemon a section measured: the commit the binary was built from
# (+dirty when sidecar/ had uncommitted changes then), and when it ran.
BUILD_COMMIT=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo none)
if [ -n "$(cd "$ROOT" && git status --porcelain -- sidecar 2>/dev/null)" ]; then
    BUILD_COMMIT="$BUILD_COMMIT+dirty"
fi
# The third word is the last commit that changed the daemon's sources
# (sidecar/), which names the daemon measured even when HEAD only changed
# the bench.
SIDECAR_COMMIT=$(cd "$ROOT" && git log -1 --format=%h -- sidecar 2>/dev/null ||
    echo none)
stamp() {
    printf '%s %s %s\n' "$BUILD_COMMIT" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
        "${SIDECAR_COMMIT:-none}" >"$OUT/commit-$1.txt"
}

report() {
    local md=$ROOT/BENCHMARKS.md png=$HERE/throughput_p99.png
    # A quick run, a --tls run, or a run with its own BENCH_OUT (whose
    # results are not the ones BENCHMARKS.md was made from) writes its
    # report to its out dir, unless it pins a section.
    if [ "$QUICK" = 1 ] || { [ -z "$PIN" ] &&
        { [ "$TLS_ONLY" = 1 ] || [ "$SERVERS_ONLY" = 1 ] ||
            [ -n "${BENCH_OUT:-}" ]; }; }; then
        md=$OUT/BENCHMARKS.md png=$OUT/throughput_p99.png
    fi
    if [ -n "$PIN" ] && [ "$QUICK" != 1 ]; then
        # The full report to the out dir; only the pinned section to
        # BENCHMARKS.md.
        "$PY" "$HERE/report.py" --out-dir "$OUT" --md "$OUT/BENCHMARKS.md" \
            --png "$OUT/throughput_p99.png" --root "$ROOT"
        "$PY" "$HERE/report.py" --out-dir "$OUT" --md "$md" --png "$png" \
            --root "$ROOT" --pin "$PIN"
        return
    fi
    "$PY" "$HERE/report.py" --out-dir "$OUT" --md "$md" --png "$png" \
        --root "$ROOT"
}

if [ "$REPORT_ONLY" = 1 ]; then
    report
    exit 0
fi

# ---- build ------------------------------------------------------------------
BIN=$OUT/bin
mkdir -p "$BIN"
DAEMON= RLBENCH=
CFLAGS_BENCH="-std=c11 -D_GNU_SOURCE -O2 -g -fno-omit-frame-pointer"
if [ "$BUILD" = 1 ]; then
    log "building an optimized daemon (build-bench, --buildtype=release)"
    if { [ -d "$ROOT/build-bench" ] ||
        meson setup "$ROOT/build-bench" "$ROOT" --buildtype=release \
            >"$OUT/meson-setup.log" 2>&1; } &&
        ninja -C "$ROOT/build-bench" sidecar/redlockd \
            >"$OUT/ninja.log" 2>&1; then
        DAEMON=$ROOT/build-bench/sidecar/redlockd
        if ninja -C "$ROOT/build-bench" tests/bench/rlbench \
            >>"$OUT/ninja.log" 2>&1; then
            RLBENCH=$ROOT/build-bench/tests/bench/rlbench
        fi
    else
        log "meson build failed (see $OUT/ninja.log); building with gcc -O2"
        (cd "$ROOT" && gcc $CFLAGS_BENCH -DREDLOCKD_VERSION='"0.1.0"' \
            -Isidecar sidecar/*.c -lhiredis -levent -luuid -lcjson -lm \
            -o "$BIN/redlockd")
        DAEMON=$BIN/redlockd
    fi
    if [ -z "$RLBENCH" ]; then
        gcc $CFLAGS_BENCH -Wall -Wextra -I"$ROOT/sidecar" "$HERE/rlbench.c" \
            "$ROOT/sidecar/scripts.c" "$ROOT/sidecar/redlock.c" \
            -lhiredis -levent -luuid -lm \
            -o "$BIN/rlbench"
        RLBENCH=$BIN/rlbench
    fi
else
    DAEMON=${REDLOCKD:-$ROOT/build-bench/sidecar/redlockd}
    if [ -z "${RLBENCH:-}" ]; then
        RLBENCH=$ROOT/build-bench/tests/bench/rlbench
        [ -x "$RLBENCH" ] || RLBENCH=$BIN/rlbench
    fi
fi
[ -x "$DAEMON" ] || { echo "run.sh: no daemon at $DAEMON" >&2; exit 1; }
[ -x "$RLBENCH" ] || { echo "run.sh: no rlbench at $RLBENCH" >&2; exit 1; }
log "daemon: $DAEMON; rlbench: $RLBENCH"

# ---- node-redlock -------------------------------------------------------------
if [ "$NODE" = 1 ] && [ "$COMPARE" = 1 ]; then
    if command -v node >/dev/null && command -v npm >/dev/null; then
        if [ ! -d "$HERE/node_modules/redlock" ] ||
            [ ! -d "$HERE/node_modules/ioredis" ]; then
            log "installing node-redlock and ioredis (npm ci)"
            (cd "$HERE" && timeout 300 npm ci --no-audit --no-fund \
                >"$OUT/npm.log" 2>&1) || {
                log "npm ci failed (see $OUT/npm.log): skipping node-redlock"
                NODE=0
            }
        fi
    else
        log "node or npm not found: skipping node-redlock"
        NODE=0
    fi
fi

# ---- processes ----------------------------------------------------------------
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
TMP=$(mktemp -d "${TMPDIR:-/tmp}/rlbench.XXXXXX")
REDIS_PIDS=()
DAEMON_PID= FLOOR_PID=
stop_nodes() {
    local p
    for p in "${REDIS_PIDS[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in "${REDIS_PIDS[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    REDIS_PIDS=()
}
cleanup() {
    local rc=$?
    for p in "$DAEMON_PID" "$FLOOR_PID"; do
        [ -n "$p" ] || continue
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    stop_nodes
    rm -rf "$TMP"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

MAXN=5
[ "$SCALING" = 1 ] && MAXN=7
# Free TCP ports on 127.0.0.1, chosen by the kernel; a port taken by someone
# else before redis binds it makes that node fail to start, and the node is
# retried on a new port.
free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# With --tls, a throw-away CA and a certificate for 127.0.0.1 that it
# signed (P-256 keys, quick to make), and every node also listens with TLS
# on a second port. The plain port stays on: the plain-TCP runs and the
# bench's INFO accounting use it; the TLS runs' daemon only knows rediss://.
make_certs() {
    local d=$TMP/tls key=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1
        -nodes)
    mkdir -p "$d"
    printf 'basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\n%s\n' \
        'extendedKeyUsage=serverAuth' >"$d/server.ext"
    if ! { openssl req -x509 -new "${key[@]}" -keyout "$d/ca.key" \
        -out "$d/ca.crt" -days 2 -subj /CN=redlockd-bench-ca &&
        openssl req -new "${key[@]}" -keyout "$d/server.key" \
            -out "$d/server.csr" -subj /CN=127.0.0.1 &&
        openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" \
            -CAkey "$d/ca.key" -CAcreateserial -out "$d/server.crt" \
            -days 2 -sha256 -extfile "$d/server.ext"; } \
        >"$OUT/openssl.log" 2>&1; then
        echo "run.sh: openssl could not make the certificates" \
            "(see $OUT/openssl.log)" >&2
        exit 1
    fi
    chmod 600 "$d/server.key" "$d/ca.key"
}
if [ "$TLS" = 1 ]; then
    command -v openssl >/dev/null ||
        { echo "run.sh: --tls needs the openssl CLI" >&2; exit 1; }
    make_certs
fi
REDIS_PORTS=()
TLS_PORTS=()
# The nodes' server: this machine's, or (--server) the compat launcher,
# which picks the kind from REDLOCKD_COMPAT_SERVERS.
REDIS_SERVER=redis-server
start_redis() { # index
    local i=$1 try port tls=()
    for try in 1 2 3 4 5; do
        port=$(free_port)
        if [ "$TLS" = 1 ]; then
            TLS_PORTS[$i]=$(free_port)
            tls=(--tls-port "${TLS_PORTS[$i]}"
                --tls-cert-file "$TMP/tls/server.crt"
                --tls-key-file "$TMP/tls/server.key"
                --tls-ca-cert-file "$TMP/tls/ca.crt"
                --tls-auth-clients no)
        fi
        rm -f "$TMP/r$i.sock"
        "$REDIS_SERVER" --port "$port" --bind 127.0.0.1 \
            --unixsocket "$TMP/r$i.sock" --unixsocketperm 700 \
            --save '' --appendonly no --dir "$TMP" --daemonize no \
            --maxclients 20000 --logfile "$TMP/r$i.log" "${tls[@]}" &
        REDIS_PIDS[$i]=$!
        REDIS_PORTS[$i]=$port
        for _ in $(seq 1 100); do
            if [ -S "$TMP/r$i.sock" ] &&
                redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1; then
                return 0
            fi
            kill -0 "${REDIS_PIDS[$i]}" 2>/dev/null || break
            sleep 0.05
        done
        kill -TERM "${REDIS_PIDS[$i]}" 2>/dev/null || true
        wait "${REDIS_PIDS[$i]}" 2>/dev/null || true
    done
    echo "run.sh: redis $i did not start (see $TMP/r$i.log)" >&2
    exit 1
}
for i in $(seq 1 $MAXN); do
    start_redis "$i"
done
redis_pids() { # first N redis pids, comma separated
    local n=$1 s= i
    for i in $(seq 1 "$n"); do s="$s${s:+,}${REDIS_PIDS[$i]}"; done
    echo "$s"
}
# TRANSPORT says how the daemon, the limits and node-redlock reach the
# nodes: tcp (127.0.0.1, the default, as in production) or unix; tls is
# for the daemon only (rediss://), while rlbench's accounting reads INFO
# over the plain TCP ports.
TRANSPORT=tcp
redis_addrs() { # first N node addresses (plain), comma separated
    local n=$1 s= i
    for i in $(seq 1 "$n"); do
        if [ "$TRANSPORT" = unix ]; then
            s="$s${s:+,}$TMP/r$i.sock"
        else
            s="$s${s:+,}127.0.0.1:${REDIS_PORTS[$i]}"
        fi
    done
    echo "$s"
}
redis_uri() { # the daemon's --node of node i
    if [ "$TRANSPORT" = unix ]; then
        echo "unix://$TMP/r$1.sock"
    elif [ "$TRANSPORT" = tls ]; then
        echo "rediss://127.0.0.1:${TLS_PORTS[$1]}"
    else
        echo "redis://127.0.0.1:${REDIS_PORTS[$1]}"
    fi
}
SOCK=$TMP/rl.sock
DAEMON_LOG=$OUT/daemon.log

start_daemon() { # start_daemon N_NODES [extra flags...]
    local n=$1
    shift
    stop_daemon
    local args=() i
    for i in $(seq 1 "$n"); do args+=(--node "$(redis_uri "$i")"); done
    if [ "$TRANSPORT" = tls ]; then
        args+=(--tls-ca-file "$TMP/tls/ca.crt")
    fi
    "$DAEMON" "${args[@]}" --socket "$SOCK" --log-level warn \
        --max-connections 20000 "$@" >>"$DAEMON_LOG" 2>&1 &
    DAEMON_PID=$!
    "$RLBENCH" --socket "$SOCK" --wait-ready 20 ||
        { echo "run.sh: the daemon did not become ready" >&2; exit 1; }
}
# stop_pid PID NAME: SIGTERM, wait, and a note when it did not exit 0.
stop_pid() {
    [ -n "$1" ] || return 0
    kill -TERM "$1" 2>/dev/null || true
    local rc=0
    wait "$1" 2>/dev/null || rc=$?
    if [ "$rc" != 0 ]; then
        log "note: the $2 exited with status $rc"
        echo "NOTE ${2// /_}_exit=$rc" >>"$OUT/notes.txt"
    fi
}
stop_daemon() {
    stop_pid "$DAEMON_PID" daemon
    DAEMON_PID=
}

# The floor sidecar: rlbench --serve on a socket of its own, against the
# same nodes as the daemon, reached the same way (TRANSPORT). It exits by
# itself after --serve-max-s, a bound above any comparison's length.
FLOOR_SOCK=$TMP/floor.sock
start_floor() { # start_floor N_NODES
    stop_floor
    "$RLBENCH" --serve "$FLOOR_SOCK" --redis "$(redis_addrs "$1")" \
        --serve-max-s 7200 >>"$OUT/floor.log" 2>&1 &
    FLOOR_PID=$!
    "$RLBENCH" --socket "$FLOOR_SOCK" --wait-ready 20 ||
        { echo "run.sh: the floor sidecar did not become ready" >&2; exit 1; }
}
stop_floor() {
    stop_pid "$FLOOR_PID" "floor sidecar"
    FLOOR_PID=
}

bound() { # seconds a run of $1 concurrencies may take
    awk -v n="$1" -v d="$DUR" -v w="$WARM" 'BEGIN{print int(n*(d+w+8)+60)}'
}

# Runs one measurement; its output goes to rlbench.log and its RESULT lines
# (tagged) to $1.
rl() {
    local file=$1 tag=$2 last=$OUT/.last.log
    shift 2
    timeout -k 5 "$(bound 1)" "$RLBENCH" --tag "$tag" "$@" >"$last" 2>&1 ||
        log "rlbench exited with $? ($tag)"
    cat "$last" >>"$OUT/rlbench.log"
    grep '^RESULT ' "$last" >>"$file" || true
}
nodejs() {
    local file=$1 tag=$2 last=$OUT/.last.log
    shift 2
    (cd "$HERE" && timeout -k 5 "$(bound 1)" node node_redlock_bench.mjs \
        --tag "$tag" "$@" >"$last" 2>&1) ||
        log "node_redlock_bench exited with $? ($tag)"
    cat "$last" >>"$OUT/node.log"
    grep '^RESULT ' "$last" >>"$file" || true
}

machine_info() {
    {
        echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "uname: $(uname -srmo)"
        lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|Hypervisor|L3)' |
            sed 's/  */ /g'
        echo "memory: $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
        echo "redis: $(redis-server --version | head -1)"
        echo "node: $(node --version 2>/dev/null || echo none)"
        echo "hiredis: $(pkg-config --modversion hiredis 2>/dev/null || echo ?)"
        echo "libevent: $(pkg-config --modversion libevent 2>/dev/null || echo ?)"
        echo "gcc: $(gcc -dumpfullversion 2>/dev/null || echo ?)"
        echo "git: $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo 'no commit')"
        echo "loadavg at start: $(cat /proc/loadavg)"
    } >"$OUT/machine.txt"
}

# ---- the comparison -------------------------------------------------------------
# compare FILE: every repetition, every concurrency: the daemon, the floor
# sidecar, the minimal limit, both sidecars on shared connections and the
# scripts limit (odd repetitions in that order, even ones reversed, so that
# none always meets the machine in the same state), then node-redlock. Each
# RESULT line is tagged with its repetition.
compare() {
    local res=$1 rep c
    : >"$res"
    start_daemon 5
    start_floor 5
    RP=$(redis_pids 5)
    log "comparison over $TRANSPORT: $REPS rep(s) x concurrency $CONC, ${DUR}s each (+${WARM}s warmup)"
    run_daemon() { # rep concurrency
        log "rep $1, $2 client(s): daemon ($TRANSPORT)"
        rl "$res" "r$1" --socket "$SOCK" --mode cycle --concurrency "$2" \
            --duration "$DUR" --warmup "$WARM" --daemon-pid "$DAEMON_PID" \
            --redis-pids "$RP" --redis "$(redis_addrs 5)"
    }
    # The same clients sharing connections, pipelined and matched by id,
    # as the client libraries talk (one connection per client object, many
    # requests in flight): a connection per 16 clients.
    run_daemon_shared() { # rep concurrency
        [ "$2" -ge 32 ] || return 0
        log "rep $1, $2 client(s): daemon, $(($2 / 16)) shared connections"
        rl "$res" "r$1" --socket "$SOCK" --mode cycle --concurrency "$2" \
            --conns $(($2 / 16)) --impl daemon-shared \
            --duration "$DUR" --warmup "$WARM" --daemon-pid "$DAEMON_PID" \
            --redis-pids "$RP" --redis "$(redis_addrs 5)"
    }
    # The floor sidecar driven by the very same generator command as the
    # daemon: per client a connection, and (run_floor_shared) a connection
    # per 16 clients. Its CPU is reported in the daemon's column.
    run_floor() { # rep concurrency
        log "rep $1, $2 client(s): floor sidecar ($TRANSPORT)"
        rl "$res" "r$1" --socket "$FLOOR_SOCK" --mode cycle \
            --concurrency "$2" --impl floor \
            --duration "$DUR" --warmup "$WARM" --daemon-pid "$FLOOR_PID" \
            --redis-pids "$RP" --redis "$(redis_addrs 5)"
    }
    run_floor_shared() { # rep concurrency
        [ "$2" -ge 32 ] || return 0
        log "rep $1, $2 client(s): floor sidecar, $(($2 / 16)) shared connections"
        rl "$res" "r$1" --socket "$FLOOR_SOCK" --mode cycle \
            --concurrency "$2" --conns $(($2 / 16)) --impl floor-shared \
            --duration "$DUR" --warmup "$WARM" --daemon-pid "$FLOOR_PID" \
            --redis-pids "$RP" --redis "$(redis_addrs 5)"
    }
    run_limit() { # rep concurrency minimal|scripts
        log "rep $1, $2 client(s): in-process limit, $3 ($TRANSPORT)"
        rl "$res" "r$1" --inproc --limit "$3" --redis "$(redis_addrs 5)" \
            --mode cycle --concurrency "$2" --duration "$DUR" \
            --warmup "$WARM" --redis-pids "$RP"
        if [ "$3" = minimal ] && [ "$UUID" = 1 ] &&
            { [ "$2" = 1 ] || [ "$2" = 64 ]; }; then
            # The price of the daemon's token source (libuuid), right
            # after the plain limit so that both see the same machine.
            log "rep $1, $2 client(s): in-process limit, libuuid tokens"
            rl "$res" "r$1" --inproc --redis "$(redis_addrs 5)" \
                --mode cycle --concurrency "$2" --duration "$DUR" \
                --warmup "$WARM" --redis-pids "$RP" --token uuid \
                --impl limit-uuid
        fi
    }
    for rep in $(seq 1 "$REPS"); do
        for c in ${CONC//,/ }; do
            if [ $((rep % 2)) = 1 ]; then
                run_daemon "$rep" "$c"
                run_floor "$rep" "$c"
                run_limit "$rep" "$c" minimal
                run_daemon_shared "$rep" "$c"
                run_floor_shared "$rep" "$c"
                run_limit "$rep" "$c" scripts
            else
                run_limit "$rep" "$c" scripts
                run_floor_shared "$rep" "$c"
                run_daemon_shared "$rep" "$c"
                run_limit "$rep" "$c" minimal
                run_floor "$rep" "$c"
                run_daemon "$rep" "$c"
            fi
            if [ "$NODE" = 1 ]; then
                log "rep $rep, $c client(s): node-redlock ($TRANSPORT)"
                nodejs "$res" "r$rep" --redis "$(redis_addrs 5)" \
                    --concurrency "$c" --duration "$DUR" --warmup "$WARM" \
                    --redis-pids "$RP"
                if [ "$NODE_AP" = 1 ]; then
                    log "rep $rep, $c client(s): node-redlock, auto-pipelining"
                    nodejs "$res" "r$rep" --redis "$(redis_addrs 5)" \
                        --concurrency "$c" --duration "$DUR" \
                        --warmup "$WARM" --redis-pids "$RP" --auto-pipelining
                fi
            fi
        done
    done
    stop_floor
}

if [ "$COMPARE" = 1 ]; then
    stamp compare
    machine_info
    rm -f "$OUT/notes.txt" "$OUT/results-unix.txt" "$OUT/results-tls.txt"
    : >"$OUT/rlbench.log"
    : >"$OUT/node.log"
    : >"$OUT/daemon.log"
    : >"$OUT/floor.log"
    TRANSPORT=tcp
    compare "$OUT/results.txt"

    # Contention: the daemon's FIFO wait queues (no comparison).
    log "contended: 64 clients on 4 resources, wait_ms 1000"
    rl "$OUT/results.txt" "contended" --socket "$SOCK" --mode contended \
        --concurrency 64 --resources 4 --wait-ms 1000 --duration "$DUR" \
        --warmup "$WARM" --daemon-pid "$DAEMON_PID" --redis-pids "$RP" \
        --redis "$(redis_addrs 5)"
    stop_daemon

    if [ "$UNIX" = 1 ]; then
        TRANSPORT=unix
        compare "$OUT/results-unix.txt"
        stop_daemon
        TRANSPORT=tcp
    fi
fi

# ---- TLS cost per cycle ---------------------------------------------------------
# Every repetition, every concurrency: a daemon on the plain TCP ports and a
# daemon on the TLS ports of the same five nodes, one after the other (order
# swapped every repetition), each freshly started so that neither's idle
# connections add to the other's Redis accounting.
# all_up tcp|tls: waits (at most 10 s) until the daemon's health shows all
# five nodes up and, over tls, each with "tls":"verified", so that both runs
# start alike and a TLS run is known to be one.
all_up() {
    "$PY" - "$SOCK" "$1" <<'PY' ||
import json, socket, sys, time
deadline, h = time.monotonic() + 10, None
while time.monotonic() < deadline:
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(2)
        s.connect(sys.argv[1])
        s.sendall(b'{"op":"health","id":"bench"}\n')
        buf = b""
        while not buf.endswith(b"\n"):
            d = s.recv(65536)
            if not d:
                break
            buf += d
        s.close()
        h = json.loads(buf)
        n = h.get("nodes") or []
        if len(n) == 5 and all(x.get("up") is True and
                               (sys.argv[2] != "tls" or
                                x.get("tls") == "verified") for x in n):
            sys.exit(0)
    except (OSError, ValueError):
        pass
    time.sleep(0.05)
sys.exit("run.sh: not every node up%s: %s" % (
    " over verified TLS" if sys.argv[2] == "tls" else "", h))
PY
        exit 1
}
tls_compare() {
    local res=$1 rep c
    : >"$res"
    RP=$(redis_pids 5)
    log "TLS cost: $REPS rep(s) x concurrency $CONC, ${DUR}s each (+${WARM}s warmup), plain TCP and TLS"
    run_over() { # rep concurrency tcp|tls
        TRANSPORT=$3
        start_daemon 5
        all_up "$3"
        log "rep $1, $2 client(s): daemon, nodes over $3"
        rl "$res" "r$1" --impl "$([ "$3" = tls ] && echo daemon-tls ||
            echo daemon)" --socket "$SOCK" --mode cycle --concurrency "$2" \
            --duration "$DUR" --warmup "$WARM" --daemon-pid "$DAEMON_PID" \
            --redis-pids "$RP" --redis "$(redis_addrs 5)"
        stop_daemon
    }
    for rep in $(seq 1 "$REPS"); do
        for c in ${CONC//,/ }; do
            if [ $((rep % 2)) = 1 ]; then
                run_over "$rep" "$c" tcp
                run_over "$rep" "$c" tls
            else
                run_over "$rep" "$c" tls
                run_over "$rep" "$c" tcp
            fi
        done
    done
    TRANSPORT=tcp
}

if [ "$TLS" = 1 ]; then
    stamp tls
    if [ "$TLS_ONLY" = 1 ]; then
        machine_info
        rm -f "$OUT/notes.txt" "$OUT/results.txt" "$OUT/results-unix.txt" \
            "$OUT/renew.txt" "$OUT/scaling.txt"
        : >"$OUT/rlbench.log"
        : >"$OUT/daemon.log"
    fi
    tls_compare "$OUT/results-tls.txt"
fi

# ---- per server kind -------------------------------------------------------------
# For each kind: five fresh nodes of it through tests/compat/redis-server
# (its root's own loader and libraries), a fresh daemon, and the daemon's
# cycle at each concurrency; the kind is in the RESULT line's impl
# (daemon@KIND). The nodes of the other sections stay as they were.
servers_compare() {
    local res=$1 kind rep c i
    : >"$res"
    for kind in ${SERVERS//,/ }; do
        stop_daemon
        stop_nodes
        export REDLOCKD_COMPAT_SERVERS=$kind
        REDIS_SERVER=$ROOT/tests/compat/redis-server
        for i in 1 2 3 4 5; do
            start_redis "$i"
        done
        echo "server $kind: $("$REDIS_SERVER" --version | head -1)" \
            >>"$OUT/machine.txt"
        RP=$(redis_pids 5)
        start_daemon 5
        all_up tcp
        for rep in $(seq 1 "$REPS"); do
            for c in ${CONC//,/ }; do
                log "rep $rep, $c client(s): daemon, five $kind nodes"
                rl "$res" "r$rep" --impl "daemon@$kind" --socket "$SOCK" \
                    --mode cycle --concurrency "$c" --duration "$DUR" \
                    --warmup "$WARM" --daemon-pid "$DAEMON_PID" \
                    --redis-pids "$RP" --redis "$(redis_addrs 5)"
            done
        done
        stop_daemon
    done
    stop_nodes
    unset REDLOCKD_COMPAT_SERVERS
    REDIS_SERVER=redis-server
}

if [ -n "$SERVERS" ]; then
    stamp servers
    if [ "$SERVERS_ONLY" = 1 ]; then
        machine_info
        rm -f "$OUT/notes.txt" "$OUT/results.txt" "$OUT/results-unix.txt" \
            "$OUT/results-tls.txt" "$OUT/renew.txt" "$OUT/scaling.txt"
        : >"$OUT/rlbench.log"
        : >"$OUT/daemon.log"
    fi
    servers_compare "$OUT/results-servers.txt"
fi

# ---- renewing locks -------------------------------------------------------------
if [ "$RENEW" = 1 ]; then
    stamp renew
    log "renew: $RENEW_LOCKS renewing locks, ttl $RENEW_TTL ms, ${RENEW_DUR}s"
    DAEMON_LOG=$OUT/daemon-renew.log
    : >"$DAEMON_LOG"
    start_daemon 5 # a fresh daemon, so its RSS starts from nothing
    RENEW_OUT=$OUT/renew.txt
    : >"$RENEW_OUT"
    timeout -k 5 $((RENEW_DUR + RENEW_RAMP + 400)) "$RLBENCH" --socket "$SOCK" \
        --mode renew --locks "$RENEW_LOCKS" --ttl-ms "$RENEW_TTL" \
        --duration "$RENEW_DUR" --ramp "$RENEW_RAMP" --daemon-pid "$DAEMON_PID" \
        --tag renew >"$OUT/renew.log" 2>&1 || log "renew run exited with $?"
    grep -E '^(RESULT|SAMPLE)' "$OUT/renew.log" >>"$RENEW_OUT" || true
    stop_daemon
    DAEMON_LOG=$OUT/daemon.log
fi

# ---- how cost grows -----------------------------------------------------------
if [ "$SCALING" = 1 ]; then
    stamp scaling
    SC=$OUT/scaling.txt
    : >"$SC"
    SAVE_DUR=$DUR
    DUR=$SC_DUR
    for n in ${SC_NODES//,/ }; do
        log "scaling: $n node(s)"
        start_daemon "$n"
        rl "$SC" "nodes$n" --socket "$SOCK" --mode cycle --concurrency 64 \
            --duration "$DUR" --warmup 1 --daemon-pid "$DAEMON_PID" \
            --redis-pids "$(redis_pids "$n")" --redis "$(redis_addrs "$n")"
        rl "$SC" "nodes$n" --inproc --redis "$(redis_addrs "$n")" --mode cycle \
            --concurrency 64 --duration "$DUR" --warmup 1 \
            --redis-pids "$(redis_pids "$n")"
    done
    start_daemon 5
    RP=$(redis_pids 5)
    for c in ${SC_CONNS//,/ }; do
        log "scaling: $c client connection(s), one request in flight each"
        rl "$SC" "conns$c" --socket "$SOCK" --mode cycle --concurrency "$c" \
            --duration "$DUR" --warmup 1 --drain 20 --daemon-pid "$DAEMON_PID" \
            --redis-pids "$RP" --redis "$(redis_addrs 5)"
    done
    for c in ${SC_CONNS//,/ }; do
        log "scaling: $c idle connection(s) + 16 active clients"
        start_daemon 5
        rl "$SC" "idle$c" --socket "$SOCK" --mode connections --idle "$c" \
            --concurrency 16 --duration "$DUR" --warmup 1 \
            --daemon-pid "$DAEMON_PID" --redis-pids "$RP" \
            --redis "$(redis_addrs 5)"
    done
    for h in ${SC_HELD//,/ }; do
        log "scaling: $h held lock(s) + 64 active clients"
        start_daemon 5
        rl "$SC" "held$h" --socket "$SOCK" --mode cycle --held "$h" \
            --concurrency 64 --duration "$DUR" --warmup 1 \
            --daemon-pid "$DAEMON_PID" --redis-pids "$RP" \
            --redis "$(redis_addrs 5)"
    done
    stop_daemon
    DUR=$SAVE_DUR
fi

# ---- profile --------------------------------------------------------------------
if [ "$PROFILE" = 1 ]; then
    stamp profile
    PROF=$OUT/profile
    mkdir -p "$PROF"
    start_daemon 5
    if perf record -e cpu-clock -o "$PROF/probe.data" -- true >/dev/null 2>&1; then
        log "profile: perf record (cpu-clock sampling), 64 clients, ${PROF_DUR}s"
        perf record -e cpu-clock -F 2000 -g -p "$DAEMON_PID" \
            -o "$PROF/perf.data" -- sleep $((PROF_DUR + 1)) \
            >"$PROF/perf-record.log" 2>&1 &
        PERF_PID=$!
        timeout -k 5 $((PROF_DUR + 60)) "$RLBENCH" --socket "$SOCK" \
            --mode cycle --concurrency 64 --duration "$PROF_DUR" --warmup 0.5 \
            --daemon-pid "$DAEMON_PID" --tag perf >"$PROF/perf-load.log" 2>&1 || true
        wait "$PERF_PID" || true
        perf report -i "$PROF/perf.data" --stdio --no-children \
            --sort dso,sym 2>/dev/null | grep -v '^#' | grep '%' |
            grep -v -- '--' | head -60 >"$PROF/perf-self.txt" || true
        perf report -i "$PROF/perf.data" --stdio --children \
            --sort sym 2>/dev/null | grep -v '^#' | grep -E '^ +[0-9]' |
            head -60 >"$PROF/perf-children.txt" || true
    fi
    stop_daemon
    if command -v valgrind >/dev/null; then
        log "profile: callgrind, 64 clients, ${PROF_DUR}s (the daemon runs ~50x slower)"
        args=()
        for i in 1 2 3 4 5; do args+=(--node "$(redis_uri "$i")"); done
        valgrind --tool=callgrind --callgrind-out-file="$PROF/callgrind.out" \
            "$DAEMON" "${args[@]}" --socket "$SOCK" --log-level warn \
            --node-timeout-ms 2000 >"$PROF/callgrind.log" 2>&1 &
        DAEMON_PID=$!
        "$RLBENCH" --socket "$SOCK" --wait-ready 60 || true
        timeout -k 5 $((PROF_DUR + 60)) "$RLBENCH" --socket "$SOCK" \
            --mode cycle --concurrency 64 --duration "$PROF_DUR" --warmup 0.5 \
            --tag callgrind >"$PROF/callgrind-load.log" 2>&1 || true
        stop_daemon
        callgrind_annotate --inclusive=no "$PROF/callgrind.out" 2>/dev/null |
            head -70 >"$PROF/callgrind-self.txt" || true
        callgrind_annotate --inclusive=yes "$PROF/callgrind.out" 2>/dev/null |
            head -70 >"$PROF/callgrind-inclusive.txt" || true
    fi
fi

# ---- report ---------------------------------------------------------------------
if ! command -v gnuplot >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        log "installing gnuplot-nox for the PNG"
        timeout 300 apt-get install -y -qq gnuplot-nox >"$OUT/apt.log" 2>&1 ||
            { timeout 300 apt-get update -qq >>"$OUT/apt.log" 2>&1 &&
                timeout 300 apt-get install -y -qq gnuplot-nox >>"$OUT/apt.log" 2>&1; } ||
            log "gnuplot could not be installed: no PNG"
    fi
fi
report
log "done: results in $OUT"
