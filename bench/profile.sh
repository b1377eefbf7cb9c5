#!/usr/bin/env bash
# Where the time of softroce's 64 KiB RDMA WRITE goes: profiles the requester (the client of
# `softroce perf write -s 65536`) three ways and writes the summaries as markdown.
#
#   bash bench/profile.sh [--quick] [--out FILE.md]
#
#   perf record -g   samples of the whole client (both its threads, user and kernel): the
#                    top symbols by self time, and the split by thread and by DSO;
#   strace -c -f     every system call of the client, counted, and per 64 KiB message;
#   callgrind        instructions executed in user space per message (a smaller run: valgrind
#                    is about 50x slower).
#
# Installs linux-perf, strace and valgrind when missing (Debian). Talks only to 127.0.0.1 and
# 127.0.0.2; every process runs under timeout(1). bench/run.sh --profile calls this.
set -euo pipefail
cd "$(dirname "$0")/.."

QUICK=0
OUT=target/profile.md
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK=1 ;;
        --out) OUT=${2:?--out needs a file}; shift ;;
        *) echo "bench/profile.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
if [ $QUICK = 1 ]; then ITERS=500 CG_ITERS=50 LAT_ITERS=200; else ITERS=20000 CG_ITERS=500 LAT_ITERS=5000; fi

need_apt=()
command -v perf >/dev/null 2>&1 || need_apt+=(linux-perf)
command -v strace >/dev/null 2>&1 || need_apt+=(strace)
command -v valgrind >/dev/null 2>&1 || need_apt+=(valgrind)
if [ ${#need_apt[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi
cargo build --release --locked -q
BIN=$PWD/target/release/softroce

# shellcheck source=bench/common.sh
. bench/common.sh
bench_tmp profile
PORT=${BENCH_PORT_BASE:-19900}

# One run: server plain, client under the given tool (retried while the server starts).
# Usage: profiled ITERS TOOL_CMD...   (the client command line is appended to TOOL_CMD)
# TEST holds the test's own flags (default: the 64 KiB WRITE bandwidth test).
TEST_WRITE=(write -s 65536)
profiled() {
    local iters=$1; shift
    PORT=$((PORT + 1))
    local test=("${TEST_WRITE[@]}")
    [ -n "${TEST:-}" ] && read -r -a test <<<"$TEST"
    local args=(perf "${test[@]}" -n "$iters" -p "$PORT" --roce-port "$PORT" --json)
    timeout 300 "$BIN" "${args[@]}" >"$TMP/server.out" 2>&1 &
    local spid=$!
    started "$spid"
    local i
    for i in $(seq 50); do
        sleep 0.2
        if timeout 300 "$@" "$BIN" "${args[@]}" 127.0.0.1 >"$TMP/client.out" 2>"$TMP/client.err"; then
            wait "$spid"
            return 0
        fi
        kill -0 "$spid" 2>/dev/null || break
    done
    cat "$TMP/client.err" "$TMP/server.out" >&2
    return 1
}

echo "== perf record -g" >&2
profiled "$ITERS" perf record -q -g -o "$TMP/perf.data" --
perf_mbps=$(jq -r '.bw_avg_mbps' "$TMP/client.out")
# The reports go to files first: head closing a pipe early would fail the script (pipefail).
report() { # OUT_FILE LINES SORT_KEYS
    perf report -i "$TMP/perf.data" --stdio --no-children -g none --percent-limit 0.3 \
        --sort "$3" >"$TMP/report.txt" 2>/dev/null || true
    grep -E '^ +[0-9.]+%' "$TMP/report.txt" >"$TMP/report.lines" || true
    # perf pads the columns of keys it has no value for with "-"; those go.
    head -n "$2" "$TMP/report.lines" | sed -E 's/( +-)+ *$//; s/ +$//' >"$1"
}
report "$TMP/comm.txt" 5 comm
report "$TMP/dso.txt" 8 comm,dso
report "$TMP/sym.txt" 30 comm,dso,symbol

echo "== strace -c -f" >&2
profiled "$ITERS" strace -c -f -o "$TMP/strace.txt" --
strace_mbps=$(jq -r '.bw_avg_mbps' "$TMP/client.out")

echo "== strace -c -f, 2-byte SEND latency" >&2
TEST="send --lat -s 2" profiled "$LAT_ITERS" strace -c -f -o "$TMP/strace-lat.txt" --
strace_lat=$(jq -r '.lat_us.p50' "$TMP/client.out")

echo "== callgrind" >&2
profiled "$CG_ITERS" valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.out" --
callgrind_annotate --auto=no --threshold=100 "$TMP/cg.out" >"$TMP/cg.full" 2>/dev/null || true
cg_total=$(awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}' "$TMP/cg.full")
# callgrind_annotate lists file:function pairs, so a function with code inlined from several
# files appears once per file; the instructions are summed per function here.
awk '/file:function/ {on = 1; next}
     on && seen && !NF {on = 0}
     on && $1 ~ /^[0-9,]+$/ {
         seen = 1; ir = $1; gsub(",", "", ir)
         line = $0; sub(/^ *[0-9,]+ +\( *[0-9.]+%\) +/, "", line)
         sub(/ \[[^]]*\]$/, "", line)
         fn = substr(line, index(line, ":") + 1)
         sum[fn] += ir
     }
     END {for (f in sum) printf "%14d %6.2f%%  %s\n", sum[f], 100 * sum[f] / total, f}' \
    total="$cg_total" "$TMP/cg.full" | sort -rn >"$TMP/cg.sorted"
head -n 20 "$TMP/cg.sorted" >"$TMP/cg.txt"

strace_table() { # FILE DIVISOR
    awk -v n="$2" '
        /^% time/ {print $0 "   per op"; next}
        /^-/ {print; next}
        NF >= 5 && $4 ~ /^[0-9]+$/ {if ($4 / n >= 0.01 || $NF == "total") printf "%s   %8.2f\n", $0, $4 / n; next}
        {print}' "$1"
}
{
    echo "Profiled $(date -u '+%Y-%m-%d %H:%M UTC') at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src Cargo.toml Cargo.lock bench/baselines 2>/dev/null || echo ' (with local changes to the code)'):"
    echo "the client (requester) of \`softroce perf write -s 65536\` against a plain server,"
    echo "\`bash bench/profile.sh$( [ $QUICK = 1 ] && echo ' --quick')\`."
    echo
    echo "**perf record -g**, $ITERS messages ($(printf '%.0f' "$perf_mbps") MB/s under perf). Self time by thread:"
    echo
    echo '```'
    cat "$TMP/comm.txt"
    echo '```'
    echo
    echo "by DSO:"
    echo
    echo '```'
    cat "$TMP/dso.txt"
    echo '```'
    echo
    echo "top symbols (self time):"
    echo
    echo '```'
    cat "$TMP/sym.txt"
    echo '```'
    echo
    echo "**strace -c -f**, $ITERS messages of 64 KiB = $((ITERS * 16)) data packets ($(printf '%.0f' "$strace_mbps") MB/s under strace); calls per message in the last column (calls below 0.01 per message left out):"
    echo
    echo '```'
    strace_table "$TMP/strace.txt" "$ITERS"
    echo '```'
    echo
    echo "**strace -c -f** of the client of \`perf send --lat -s 2\`, $LAT_ITERS round trips (p50 one-way $(printf '%.1f' "$strace_lat") us under strace); calls per round trip in the last column:"
    echo
    echo '```'
    strace_table "$TMP/strace-lat.txt" "$LAT_ITERS"
    echo '```'
    echo
    echo "**callgrind**, $CG_ITERS messages: $cg_total instructions in user space in all, $(awk -v t="$cg_total" -v n="$CG_ITERS" 'BEGIN {printf "%.0f", t / n}') per message (setup included). Top functions by instructions:"
    echo
    echo '```'
    cat "$TMP/cg.txt"
    echo '```'
} >"$TMP/profile.md"
mkdir -p "$(dirname "$OUT")"
cp "$TMP/profile.md" "$OUT"
cat "$OUT"
echo "bench/profile.sh: wrote $OUT" >&2
