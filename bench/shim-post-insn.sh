#!/usr/bin/env bash
# Instructions per ibv_post_send through the shim, counted by callgrind (a figure the machine's
# load does not move): Debian's ib_write_bw client under valgrind --tool=callgrind, both ends
# under `softroce run`, and the inclusive cost of the shim's post_send op divided by its calls
# and by the WRs they carried.
#
#   bash bench/shim-post-insn.sh [--bin SOFTROCE] [N] [-- EXTRA ib_write_bw FLAGS]
#
# Default: -s 64, N = 5000 iterations; e.g. `-- -l 16` posts chains of 16 WRs (perftest's
# post list). Talks to 127.0.0.61 and 127.0.0.62 only; every process runs under timeout(1).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/target/release/softroce
if [ "${1:-}" = "--bin" ]; then BIN=$(realpath "$2"); shift 2; fi
N=${1:-5000}
[ $# -ge 1 ] && shift
[ "${1:-}" = "--" ] && shift
EXTRA=("$@")
command -v valgrind >/dev/null || { echo "bench/shim-post-insn.sh: needs valgrind" >&2; exit 1; }
command -v ib_write_bw >/dev/null || { echo "bench/shim-post-insn.sh: needs perftest" >&2; exit 1; }
# shellcheck source=bench/common.sh
. bench/common.sh
bench_tmp shim-insn
PORT=${BENCH_PORT_BASE:-$((19950 + RANDOM % 40))}
args=(ib_write_bw -x 1 -p "$PORT" -n "$N" -s 64 "${EXTRA[@]}")
timeout 300 "$BIN" run --bind 127.0.0.61 "${args[@]}" >"$TMP/s.out" 2>&1 &
spid=$!
started "$spid"
sleep 1
timeout 300 "$BIN" run --bind 127.0.0.62 valgrind --tool=callgrind \
    --callgrind-out-file="$TMP/client.cg" "${args[@]}" 127.0.0.61 >"$TMP/c.out" 2>&1
wait "$spid"
callgrind_annotate --inclusive=yes --tree=calling "$TMP/client.cg" >"$TMP/callees" 2>/dev/null
callgrind_annotate --inclusive=yes --tree=caller "$TMP/client.cg" >"$TMP/callers" 2>/dev/null
# "INCLUSIVE (...)  * FILE:FUNCTION": the shim's post op with its callees; the "< CALLER (Nx)"
# lines above it in the caller tree: the calls made to it.
total=$(awk '/\* .*objects::post::op_post_send( |$)/ {gsub(",", "", $1); print $1; exit}' "$TMP/callees")
calls=$(awk '/^ *[0-9,]+ .*< / {n = $0; sub(/.*\(/, "", n); sub(/x\).*/, "", n); gsub(",", "", n); s += n; next}
    /\* .*objects::post::op_post_send( |$)/ {print s; exit} {s = 0}' "$TMP/callers")
if [ -z "$total" ] || [ "${calls:-0}" = 0 ]; then
    echo "bench/shim-post-insn.sh: no post_send calls in the profile; the client said:" >&2
    tail -5 "$TMP/c.out" >&2
    exit 1
fi
post_list=1
for ((i = 0; i < ${#EXTRA[@]}; i++)); do
    [ "${EXTRA[$i]}" = "-l" ] && post_list=${EXTRA[$((i + 1))]}
done
awk -v t="$total" -v c="$calls" -v l="$post_list" 'BEGIN {
    printf "op_post_send: %d calls, %.0f instructions per call, %.0f per WR (chains of %d)\n", c, t / c, t / c / l, l }'
