#!/usr/bin/env bash
# tests/fuzz/run.sh: builds the libFuzzer targets with clang (ASan+UBSan)
# and runs each for a bounded time (FUZZ_SECONDS, default 30) on its seed
# corpus. Prints "fuzz ok <target>" per clean run; exits non-zero on a crash
# (the reproducer is left in the work dir and printed).
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_EACH=${FUZZ_SECONDS:-30}
if ! command -v clang >/dev/null; then
    echo "clang not installed (apt-get install -y clang)" >&2
    exit 1
fi
WORK=$(mktemp -d /tmp/redlockd-fuzz.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
status=0
for target in proto http resp; do
    src="tests/fuzz/fuzz_${target}.c"
    mods="sidecar/proto.c sidecar/proto_encode.c sidecar/util.c"
    [ "$target" = http ] && mods="sidecar/http.c $mods"
    [ "$target" = resp ] && mods="sidecar/resp.c"
    # shellcheck disable=SC2086
    clang -g -O1 -fsanitize=fuzzer,address,undefined \
        -fno-sanitize-recover=undefined -D_GNU_SOURCE -Isidecar \
        $mods "$src" -lcjson -o "$WORK/fuzz_$target"
    mkdir -p "$WORK/corpus_$target"
    cp tests/fuzz/corpus_"$target"/* "$WORK/corpus_$target/"
    if (cd "$WORK" && "./fuzz_$target" -max_total_time="$SECONDS_EACH" \
        -max_len=4096 -timeout=10 -print_final_stats=1 \
        "corpus_$target" >"$WORK/$target.log" 2>&1); then
        echo "fuzz ok $target ($(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$WORK/$target.log" | grep -o '[0-9]*$') runs)"
    else
        echo "fuzz FAILED $target" >&2
        tail -40 "$WORK/$target.log" >&2
        ls "$WORK"/crash-* "$WORK"/leak-* 2>/dev/null >&2 || true
        for f in "$WORK"/crash-* "$WORK"/leak-*; do
            [ -f "$f" ] && { echo "reproducer $f:" >&2; od -c "$f" | head -20 >&2; }
        done
        status=1
    fi
done
exit $status
