#!/usr/bin/env bash
# UCX 1.13's ucx_perftest on softroce (UCX_TLS=rc_verbs,ud_verbs and ud_verbs, each process under
# `softroce run`) beside UCX over TCP (UCX_TLS=tcp on lo), on this machine in one run: the
# Final row of each client, as a Markdown table on stdout.
#   scripts/ucx-perf.sh [BIN_DIR]   (default target/release; needs softroce and libibverbs.so)
# Every run is bounded (timeout 120 s) and uses loopback addresses only.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release}
SOFTROCE=$BIN/softroce
LIB=$BIN/libibverbs.so
[ -x "$SOFTROCE" ] && [ -f "$LIB" ] || { echo "build first: cargo build --release" >&2; exit 1; }
command -v ucx_perftest >/dev/null || { echo "install ucx-utils (scripts/setup.sh)" >&2; exit 1; }

LAT_N=${LAT_N:-10000}
BW_N=${BW_N:-1000}
port=13500

# Waits (at most 30 s) until something listens on TCP port $1.
listening() {
    local hex
    hex=$(printf ':%04X' "$1")
    for _ in $(seq 300); do
        if awk -v p="$hex" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' /proc/net/tcp /proc/net/tcp6; then
            return 0
        fi
        sleep 0.1
    done
    return 1
}

# run TLS TEST SIZE ITERS: prints the client's Final row.
run() {
    local tls=$1 test=$2 size=$3 iters=$4 srv cli
    port=$((port + 1))
    if [ "$tls" = tcp ]; then
        srv=(env UCX_TLS=tcp UCX_NET_DEVICES=lo)
        cli=(env UCX_TLS=tcp UCX_NET_DEVICES=lo)
    else
        srv=("$SOFTROCE" run --lib "$LIB" --bind 127.0.40.1 -- env UCX_TLS="$tls" UCX_NET_DEVICES=softroce0:1)
        cli=("$SOFTROCE" run --lib "$LIB" --bind 127.0.40.2 -- env UCX_TLS="$tls" UCX_NET_DEVICES=softroce0:1)
    fi
    timeout 120 "${srv[@]}" ucx_perftest -p "$port" >/dev/null 2>&1 &
    local spid=$!
    listening "$port" || { echo "| $tls | $test | server did not listen |"; kill "$spid" 2>/dev/null; return; }
    local row
    row=$(timeout 120 "${cli[@]}" ucx_perftest 127.0.0.1 -p "$port" -t "$test" -s "$size" -n "$iters" 2>&1 |
        awk '/^Final:/ { $1 = ""; print }') || true
    wait "$spid" 2>/dev/null || true
    # shellcheck disable=SC2086
    set -- $row
    if [ $# -ge 8 ]; then
        echo "| $tls | $test | $size | $1 | $2 | $3 | $6 | $8 |"
    else
        echo "| $tls | $test | $size | failed | | | | |"
    fi
}

echo "| UCX_TLS | test | size (B) | iterations | median lat (us) | avg lat (us) | overall BW (MB/s) | overall msg/s |"
echo "|---|---|---|---|---|---|---|---|"
for tls in tcp rc_verbs,ud_verbs ud_verbs; do
    run "$tls" tag_lat 8 "$LAT_N"
    run "$tls" tag_bw 65536 "$BW_N"
    run "$tls" ucp_put_bw 65536 "$BW_N"
    run "$tls" ucp_get 65536 "$BW_N"
done
