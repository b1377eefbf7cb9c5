#!/usr/bin/env bash
# Goodput of 64 KiB RDMA WRITEs between two softroce processes on loopback, loss-free and
# with every packet dropped with probability LOSS in each direction (both ends run
# `--drop LOSS`; each end impairs what it sends). Runs are interleaved (loss-free, lossy,
# loss-free, ...) so that machine noise hits both alike; prints every run and the medians.
#
#   scripts/bench-loss.sh [RUNS] [LOSS] [QP_TIMEOUT] [ITERS]
#
# Defaults: 7 runs, 10% loss, -u 4 (4.096 us x 2^4 = 65.5 us), 2000 iterations.
# Needs a release build (scripts/setup.sh makes one). Talks only to 127.0.0.1/127.0.0.2.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-7}
LOSS=${2:-0.1}
U=${3:-4}
ITERS=${4:-2000}
BIN=target/release/softroce
[ -x "$BIN" ] || cargo build --release --locked
TCP=${BENCH_TCP_PORT:-19501}
UDP=${BENCH_UDP_PORT:-19502}

one() { # extra flags...
    local out
    timeout 120 "$BIN" perf write -s 65536 -n "$ITERS" -u "$U" -p "$TCP" --roce-port "$UDP" \
        --bind 127.0.0.1 "$@" >/dev/null 2>&1 &
    local server=$!
    for _ in $(seq 50); do
        if out=$(timeout 120 "$BIN" perf write -s 65536 -n "$ITERS" -u "$U" -p "$TCP" \
            --roce-port "$UDP" --bind 127.0.0.2 --json "$@" 127.0.0.1 2>/dev/null); then
            break
        fi
        sleep 0.1
    done
    wait "$server"
    echo "$out" | sed -n 's/.*"bw_avg_mbps":\([0-9.]*\).*/\1/p'
}

median() { sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.0f", m}'; }

clean=()
lossy=()
for i in $(seq "$RUNS"); do
    c=$(one)
    l=$(one --drop "$LOSS" --seed "$i")
    printf 'run %d: loss-free %.0f MB/s, %s loss %.0f MB/s\n' "$i" "$c" "$LOSS" "$l"
    clean+=("$c")
    lossy+=("$l")
done
mc=$(printf '%s\n' "${clean[@]}" | median)
ml=$(printf '%s\n' "${lossy[@]}" | median)
echo "median: loss-free $mc MB/s, $LOSS loss $ml MB/s, ratio $(awk -v a="$ml" -v b="$mc" 'BEGIN {printf "%.2f", a/b}')"
