#!/usr/bin/env bash
# Instructions executed in user space per message, on both ends of `softroce perf`, counted by
# callgrind: a figure that does not move with the machine's load, unlike wall-clock bandwidth.
#
#   bash bench/insn-per-msg.sh [--bin BINARY] [N1 N2] [-- EXTRA PERF FLAGS]
#
# Runs the pair (server 127.0.0.1, client 127.0.0.2, both under valgrind --tool=callgrind)
# twice, with N1 and N2 messages (default 500 and 1500), and prints for each end
# (I(N2) - I(N1)) / (N2 - N1): the setup, the connection and valgrind's own start cancel out.
# The test is `write -s 65536` unless extra flags follow `--` (they replace it, e.g.
# `-- send --lat -s 2`). Every process runs under timeout(1).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=$PWD/target/release/softroce
if [ "${1:-}" = "--bin" ]; then BIN=$(realpath "$2"); shift 2; fi
N1=${1:-500}
N2=${2:-1500}
[ $# -ge 2 ] && shift 2
[ "${1:-}" = "--" ] && shift
TEST=("$@")
[ ${#TEST[@]} -eq 0 ] && TEST=(write -s 65536)
command -v valgrind >/dev/null || { echo "bench/insn-per-msg.sh: needs valgrind" >&2; exit 1; }

# shellcheck source=bench/common.sh
. bench/common.sh
bench_tmp insn
PORT=${BENCH_PORT_BASE:-19700}

# One callgrind pair of N messages; prints "SERVER_INSTRUCTIONS CLIENT_INSTRUCTIONS".
run() { # N
    PORT=$((PORT + 1))
    local args=(perf "${TEST[@]}" -n "$1" -p "$PORT" --roce-port "$PORT")
    local cg=(valgrind --tool=callgrind --callgrind-out-file=/dev/null)
    timeout 600 "${cg[@]}" "$BIN" "${args[@]}" >"$TMP/s.out" 2>"$TMP/s.err" &
    local spid=$!
    started "$spid"
    local i ok=0
    for i in $(seq 60); do
        sleep 0.5
        if timeout 600 "${cg[@]}" "$BIN" "${args[@]}" 127.0.0.1 >"$TMP/c.out" 2>"$TMP/c.err"; then
            ok=1
            break
        fi
        kill -0 "$spid" 2>/dev/null || break
    done
    wait "$spid" || ok=0
    if [ $ok = 0 ]; then
        tail -5 "$TMP/c.err" "$TMP/s.err" >&2
        return 1
    fi
    # callgrind's summary line: "==PID== Collected : N"
    local s c
    s=$(awk '/Collected :/ {print $NF}' "$TMP/s.err" | tail -1)
    c=$(awk '/Collected :/ {print $NF}' "$TMP/c.err" | tail -1)
    echo "$s $c"
}

read -r s1 c1 < <(run "$N1")
read -r s2 c2 < <(run "$N2")
awk -v s1="$s1" -v s2="$s2" -v c1="$c1" -v c2="$c2" -v n1="$N1" -v n2="$N2" -v t="${TEST[*]}" \
    'BEGIN {printf "%s: instructions per message, server %.0f, client %.0f (n %d and %d)\n",
            t, (s2 - s1) / (n2 - n1), (c2 - c1) / (n2 - n1), n1, n2}'
