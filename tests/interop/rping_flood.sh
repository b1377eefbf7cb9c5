#!/usr/bin/env bash
# Issue 34's REQ flood against Debian's rping on kernel rxe (not a suite case: the outcome is
# rping 44's race, exit 255 or SIGSEGV by the interleaving). With the lab up (lab.sh up):
#   bash tests/interop/rping_flood.sh [N]      (N REQs, default 50)
# Starts `rping -s` in guest a, sends N valid REQs from the namespace with the rping_flood test
# binary's ignored `flood_tool`, prints the server's output and the guest's CM counters, then
# runs a real client in guest b. Every step is under a timeout.
set -u
cd "$(dirname "$0")/../.."
N=${1:-50}
LAB=(bash tests/interop/lab.sh)
PORT=7174
BIN=$(ls -t target/release/deps/rping_flood-* 2>/dev/null | grep -v '\.d$' | head -1)
[ -x "$BIN" ] || { echo "build it first: cargo test --release -p softroce-ibverbs --test rping_flood --no-run" >&2; exit 2; }
timeout 30 "${LAB[@]}" exec a "rm -f /tmp/s.log; (rping -s -a 192.0.2.11 -p $PORT -C 3 -v > /tmp/s.log 2>&1; echo \"exit \$?\" >> /tmp/s.log) & sleep 1; echo started"
FLOOD_FROM=192.0.2.1 FLOOD_TO=192.0.2.11 FLOOD_PORT=$PORT FLOOD_N=$N \
    timeout 60 ip netns exec "${SOFTROCE_LAB_NETNS:-srlab}" "$BIN" --ignored --exact flood_tool --nocapture 2>&1 | grep sent
sleep 3
echo "--- server (guest a) after the flood:"
timeout 30 "${LAB[@]}" exec a 'cat /tmp/s.log; ps | grep -c "[r]ping -s" | sed "s/^/rping servers running: /"; cd /sys/class/infiniband/rxe0/ports/1; for f in cm_rx_msgs/req cm_tx_msgs/rej cm_tx_msgs/rep; do echo "$f $(cat $f)"; done'
echo "--- a real client (guest b):"
timeout 60 "${LAB[@]}" exec b "timeout 30 rping -c -a 192.0.2.11 -p $PORT -C 3 -v; echo client exit \$?"
