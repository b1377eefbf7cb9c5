#!/usr/bin/env bash
# OpenMPI (Debian's openmpi-bin, pml ucx) on softroce beside OpenMPI over TCP, on this machine
# in one run: tests/mpi/pingpong.c (8 B ping-pong latency, 1 MiB bandwidth, allreduce checked)
# with NP ranks (default 2), as a Markdown table on stdout.
#   scripts/mpi-run.sh [NP] [BIN_DIR]   (BIN_DIR default target/release; needs softroce and
#                                        libibverbs.so there, mpicc from libopenmpi-dev)
# softroce: every rank runs under `softroce run --bind 127.0.70.10` (one address for the host,
# shared by the ranks as rxe0 is), UCX_TLS=rc_verbs,
# ud_verbs on softroce0:1, `--mca btl self` (no vader); the RoCEv2 bytes between the ranks
# are counted from a capture (dumpcap, tshark's package) to show that they carried the data.
# TCP: --mca pml ob1 --mca btl tcp,self on lo. Every run is bounded (timeout 300 s).
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${1:-2}
BIN=${2:-target/release}
SOFTROCE=$(realpath "$BIN/softroce")
LIB=$(realpath "$BIN/libibverbs.so")
[ -x "$SOFTROCE" ] && [ -f "$LIB" ] || { echo "build first: cargo build --release" >&2; exit 1; }
command -v mpicc >/dev/null && command -v mpirun >/dev/null || { echo "install openmpi-bin libopenmpi-dev (scripts/setup.sh)" >&2; exit 1; }
LAT_N=${LAT_N:-2000}
BW_N=${BW_N:-100}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpicc -O2 -Wall -o "$work/pingpong" tests/mpi/pingpong.c
cat >"$work/rank.sh" <<EOF
#!/bin/sh
exec '$SOFTROCE' run --lib '$LIB' --bind 127.0.70.10 -- "\$@"
EOF
chmod +x "$work/rank.sh"
common=(--allow-run-as-root --oversubscribe --bind-to none -np "$NP" --mca oob_tcp_if_include lo)

# row NAME OUTPUT: the program's figures as a table row.
row() {
    local lat bw ok
    lat=$(awk '/^latency_us/ { print $2 }' <<<"$2")
    bw=$(awk '/^bandwidth_MBps/ { print $2 }' <<<"$2")
    ok=$(grep -c '^allreduce ok' <<<"$2" || true)
    echo "| $1 | $NP | ${lat:-failed} | ${bw:-failed} | $ok of $NP ranks |"
}

echo "| transport | ranks | latency 8 B (us, half round trip) | bandwidth 1 MiB (MB/s) | allreduce checked |"
echo "|---|---|---|---|---|"
out=$(timeout 300 mpirun "${common[@]}" --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo \
    "$work/pingpong" "$LAT_N" "$BW_N" 2>&1) || true
row "OpenMPI ob1, btl tcp on lo" "$out"

dumpcap -q -P -B 64 -i lo -f "udp port 4791 and net 127.0.70.0/24" -w "$work/roce.pcap" 2>"$work/dumpcap.err" &
cap=$!
for _ in $(seq 300); do grep -q "Capturing on" "$work/dumpcap.err" && break; sleep 0.1; done
out=$(timeout 300 mpirun "${common[@]}" --mca btl self --mca pml ucx \
    -x UCX_TLS=rc_verbs,ud_verbs -x UCX_NET_DEVICES=softroce0:1 -x UCX_LOG_LEVEL=info \
    "$work/rank.sh" "$work/pingpong" "$LAT_N" "$BW_N" 2>&1) || true
kill -INT "$cap"
wait "$cap" || true
row "OpenMPI pml ucx, rc_verbs+ud_verbs on softroce" "$out"
echo
echo "UCX endpoint configurations (softroce run):"
grep -o 'ep_cfg\[[0-9]*\]: .*' <<<"$out" | sort | uniq -c
echo
echo "RoCEv2 between the ranks in the capture, all on 127.0.70.10 (rank 0 sent $BW_N MiB to rank 1):"
tshark -r "$work/roce.pcap" -q -z io,stat,0 2>/dev/null | grep -E 'Frames|<>' || echo "(tshark not installed)"
