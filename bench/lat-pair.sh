#!/usr/bin/env bash
# One 2-byte SEND latency pair on loopback, for A/B comparisons of two builds:
#   bench/lat-pair.sh SOFTROCE_BINARY PORT [PERF_FLAGS...]   (e.g. --busy-poll)
# prints the server's one-way p50, p99 and p999 in microseconds (softroce perf's --json).
# Both ends on 127.0.0.1, UDP and TCP port PORT; bounded (30 s per end).
set -euo pipefail
bin=$1 port=$2
shift 2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
timeout 30 "$bin" perf send --lat -s 2 -n 20000 "$@" -p "$port" --roce-port "$port" \
    --json >"$out/server.json" 2>/dev/null &
server=$!
# The client is retried while the server is not listening yet (at most 10 times).
for _ in $(seq 10); do
    sleep 0.2
    timeout 30 "$bin" perf send --lat -s 2 -n 20000 "$@" -p "$port" --roce-port "$port" \
        --json 127.0.0.1 >"$out/client.json" 2>/dev/null && break
done
wait "$server"
jq -r '[.lat_us.p50, .lat_us.p99, .lat_us.p999] | map(. * 100 | round / 100) | @tsv' "$out/server.json"
