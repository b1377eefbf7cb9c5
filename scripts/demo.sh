#!/usr/bin/env bash
# The main job: a RoCEv2 ping-pong between two softroce processes on loopback (server on
# 127.0.0.1, client on 127.0.0.2), captured and decoded. Run scripts/setup.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/release/softroce
[ -x "$bin" ] || { echo "demo: build first (bash scripts/setup.sh)" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

"$bin" pingpong -n 1000 -s 4096 --timeout 20 >"$dir/server.txt" 2>&1 &
server=$!
# The client starts once the server listens; retry briefly, as a user would.
for _ in $(seq 1 50); do
    if "$bin" pingpong -n 1000 -s 4096 --timeout 20 --pcap "$dir/client.pcap" 127.0.0.1 \
        >"$dir/client.txt" 2>"$dir/client.err"; then
        break
    fi
    grep -q "connect to" "$dir/client.err" || { cat "$dir/client.err" >&2; exit 1; }
    sleep 0.1
done
wait "$server"
echo "== server"; cat "$dir/server.txt"
echo "== client"; cat "$dir/client.txt"
echo "== the client's capture, decoded (last lines)"
"$bin" decode --analyze "$dir/client.pcap" | tail -n 25
