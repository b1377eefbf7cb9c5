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
# Then the same three of the client of Debian's `ib_write_bw -x 1 -s 65536` under `softroce run`
# (the libibverbs.so.1 shim, both ends), when ib_write_bw is installed (perftest).
#
# perf samples cpu-clock (a software timer) when the machine has no hardware counters (`perf
# stat -e instructions` says <not supported> in most VMs), and says so. A section that comes
# out empty fails the script with the tool's own error instead of printing nothing.
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

# Hardware counters or the software clock.
PERF_EVENT=()
EVENT_NOTE="cycles"
if perf stat -x, -e instructions true 2>&1 | grep -q 'not supported'; then
    PERF_EVENT=(-e cpu-clock)
    EVENT_NOTE="cpu-clock: no hardware counters here"
fi
# Fails the script when a section FILE is empty, with the tool's output LOG.
nonempty() { # FILE WHAT LOG
    if [ ! -s "$1" ]; then
        echo "bench/profile.sh: the $2 section came out empty; the tool said:" >&2
        cat "$3" >&2 || true
        exit 1
    fi
}

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
profiled "$ITERS" perf record -q "${PERF_EVENT[@]}" -g -o "$TMP/perf.data" --
perf_mbps=$(jq -r '.bw_avg_mbps' "$TMP/client.out")
# The reports go to files first: head closing a pipe early would fail the script (pipefail).
report() { # OUT_FILE LINES SORT_KEYS [PERF_DATA]
    perf report -i "${4:-$TMP/perf.data}" --stdio --no-children -g none --percent-limit 0.3 \
        --sort "$3" >"$TMP/report.txt" 2>"$TMP/report.err" || true
    grep -E '^ +[0-9.]+%' "$TMP/report.txt" >"$TMP/report.lines" || true
    # perf pads the columns of keys it has no value for with "-"; those go.
    head -n "$2" "$TMP/report.lines" | sed -E 's/( +-)+ *$//; s/ +$//' >"$1"
    nonempty "$1" "perf report --sort $3" "$TMP/report.err"
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
# Summarises a callgrind output CG_OUT into TXT (top 20 functions); prints the total.
cg_summary() { # CG_OUT TXT LOG
    callgrind_annotate --auto=no --threshold=100 "$1" >"$TMP/cg.full" 2>"$TMP/cg.err" || true
    local total
    total=$(awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}' "$TMP/cg.full")
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
        total="${total:-1}" "$TMP/cg.full" | sort -rn >"$TMP/cg.sorted"
    head -n 20 "$TMP/cg.sorted" >"$2"
    cat "$TMP/cg.err" "$3" >"$TMP/cg.log" 2>/dev/null || true
    nonempty "$2" callgrind "$TMP/cg.log"
    echo "$total"
}
cg_total=$(cg_summary "$TMP/cg.out" "$TMP/cg.txt" "$TMP/client.err")

# The shim: Debian's ib_write_bw under `softroce run`, both ends (server 127.0.0.2, client
# 127.0.0.3). Usage: shim_profiled ITERS OUTER... -- INNER...  (OUTER wraps `softroce run`,
# INNER wraps ib_write_bw inside it; either may be empty). Prints the client's BW average.
SHIM_ARGS=(-x 1 -s 65536)
shim_profiled() {
    local iters=$1; shift
    local outer=() inner=()
    while [ "$1" != :: ]; do outer+=("$1"); shift; done
    shift
    inner=("$@")
    PORT=$((PORT + 1))
    local args=(ib_write_bw "${SHIM_ARGS[@]}" -n "$iters" -p "$PORT")
    timeout 300 "$BIN" run --bind 127.0.0.2 -- "${args[@]}" >"$TMP/shim-server.out" 2>&1 &
    local spid=$!
    local i
    for i in $(seq 50); do
        sleep 0.2
        if timeout 300 "${outer[@]}" "$BIN" run --bind 127.0.0.3 -- "${inner[@]}" "${args[@]}" 127.0.0.2 \
            >"$TMP/shim-client.out" 2>"$TMP/shim-client.err"; then
            wait "$spid"
            awk '/BW average/ {getline; print $4; exit}' "$TMP/shim-client.out"
            return 0
        fi
        kill -0 "$spid" 2>/dev/null || break
    done
    cat "$TMP/shim-client.out" "$TMP/shim-client.err" "$TMP/shim-server.out" >&2
    return 1
}
SHIM=0
if command -v ib_write_bw >/dev/null 2>&1; then
    SHIM=1
    echo "== shim: perf record -g" >&2
    shim_mbps=$(shim_profiled "$ITERS" perf record -q "${PERF_EVENT[@]}" -g -o "$TMP/shim.data" -- ::)
    report "$TMP/shim-comm.txt" 5 comm "$TMP/shim.data"
    report "$TMP/shim-dso.txt" 8 comm,dso "$TMP/shim.data"
    report "$TMP/shim-sym.txt" 30 comm,dso,symbol "$TMP/shim.data"
    echo "== shim: strace -c -f" >&2
    shim_strace_mbps=$(shim_profiled "$ITERS" strace -c -f -o "$TMP/shim-strace.txt" -- ::)
    echo "== shim: callgrind" >&2
    shim_profiled "$CG_ITERS" :: valgrind --tool=callgrind --callgrind-out-file="$TMP/shim-cg.out" >/dev/null
    shim_cg_total=$(cg_summary "$TMP/shim-cg.out" "$TMP/shim-cg.txt" "$TMP/shim-client.err")
fi

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
    echo "**perf record -g** ($EVENT_NOTE), $ITERS messages ($(printf '%.0f' "$perf_mbps") MB/s under perf). Self time by thread:"
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
    if [ $SHIM = 1 ]; then
        echo
        echo "The client of Debian's \`ib_write_bw ${SHIM_ARGS[*]}\` under \`softroce run\` (the libibverbs.so.1 shim), against the same under \`softroce run\`:"
        echo
        echo "**perf record -g** ($EVENT_NOTE), $ITERS messages ($(printf '%.0f' "$shim_mbps") MB/s BW average under perf). Self time by thread:"
        echo
        echo '```'
        cat "$TMP/shim-comm.txt"
        echo '```'
        echo
        echo "by DSO:"
        echo
        echo '```'
        cat "$TMP/shim-dso.txt"
        echo '```'
        echo
        echo "top symbols (self time):"
        echo
        echo '```'
        cat "$TMP/shim-sym.txt"
        echo '```'
        echo
        echo "**strace -c -f**, $ITERS messages ($(printf '%.0f' "$shim_strace_mbps") MB/s under strace; \`softroce run\`'s own setup included); calls per message in the last column:"
        echo
        echo '```'
        strace_table "$TMP/shim-strace.txt" "$ITERS"
        echo '```'
        echo
        echo "**callgrind** (valgrind inside \`softroce run\`), $CG_ITERS messages: $shim_cg_total instructions in user space in all, $(awk -v t="$shim_cg_total" -v n="$CG_ITERS" 'BEGIN {printf "%.0f", t / n}') per message (setup and perftest's spinning on ibv_poll_cq included). Top functions by instructions:"
        echo
        echo '```'
        cat "$TMP/shim-cg.txt"
        echo '```'
    fi
} >"$TMP/profile.md"
mkdir -p "$(dirname "$OUT")"
cp "$TMP/profile.md" "$OUT"
cat "$OUT"
echo "bench/profile.sh: wrote $OUT" >&2
