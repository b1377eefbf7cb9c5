#!/usr/bin/env bash
# softroce's datapath benchmark: softroce's figures beside raw baselines on the same loopback,
# in one run. Prints a markdown table and writes it to a file.
#
#   bash bench/run.sh [--quick] [--out FILE.md] [--update FILE.md] [--profile]
#
#   --quick        CI's smoke: tiny sizes, one run per figure, well under two minutes. Its
#                  numbers mean nothing; it shows that every row can be produced.
#   --out FILE     where the markdown goes (default target/bench.md).
#   --update FILE  also replace the part of FILE between the lines <!-- bench:begin --> and
#                  <!-- bench:end --> with the result (BENCHMARKS.md keeps its table there).
#   --profile      then run bench/profile.sh (perf record, strace -c of the WRITE client) and,
#                  with --update, put its output between <!-- profile:begin/end -->.
#
# What it measures (each figure the median of 3 runs; --quick: 1):
#   - iperf3, one TCP stream over loopback (127.0.0.2 -> 127.0.0.1);
#   - bench/baselines udp_blast: 4128-byte UDP datagrams (a RoCEv2 WRITE_FIRST packet of MTU 4096:
#     4096 data + 12 BTH + 16 RETH + 4 ICRC, the largest UDP payload softroce sends), plain (sendmmsg/recvmmsg) and GSO/GRO;
#   - bench/baselines udp_pingpong: 2-byte ping-pong between two processes, blocking recv
#     and busy-polling recv(MSG_DONTWAIT), one-way p50 = half the round trip (perftest's rule),
#     and busy-polling with a 20-byte ack datagram beside each message (--acks, an RC
#     ping-pong's datagrams); each one's p99 against its p50;
#   - softroce perf --json: 64 KiB WRITE/SEND/READ, 2-byte SEND latency (and with
#     --busy-poll when the binary has it; p50, and p99 and p999 against it), 64-byte WRITE message rate on 1..64 QPs, 1024 QPs
#     (aggregate 64 KiB WRITE, and peak RSS with 1 vs 1024 QPs for the memory per QP);
#   - README's "impair the link" example, word for word at both ends (README_IMPAIR below), and
#     `softroce decode --analyze` of its client's capture: the wall-clock seconds of the pair
#     (check-rows.sh holds it to README's promise of seconds, not minutes);
#   - the shim: Debian's perftest (ib_write_bw -s 65536 and -s 64, ib_send_lat -s 2 with its
#     99% and 99.9% percentiles, all -x 1) under `softroce run` at both ends beside `softroce perf` with the same flags, both read from
#     perftest's table (so the units are perftest's either way);
#   - UCX (Debian's ucx-utils): ucx_perftest between two processes, over softroce (both under
#     `softroce run` with the release shim, 127.0.77.1 and 127.0.77.2, UCX_NET_DEVICES=softroce0:1)
#     beside the same test over UCX's TCP transport on lo: UCT put_bw -D zcopy (64 KiB) and am_lat
#     (8 B) on rc_verbs, UCP ucp_put_bw (64 KiB) and tag_lat (8 B) with UCX_TLS=rc_verbs,ud_verbs
#     as ibverbs/tests/ucx.rs runs them; the lanes UCP chose (UCX_LOG_LEVEL=info) go in the notes;
#   - OpenMPI (Debian's openmpi-bin): tests/mpi/pingpong.c on 2 ranks, pml ucx over softroce
#     (both ranks under `softroce run --bind 127.0.70.10`) beside pml ob1 with btl tcp on lo: 8 B
#     ping-pong latency and 1 MiB bandwidth (scripts/mpi-run.sh runs the same with a capture);
#   - what a message costs, both processes (the kernel's rusage, all threads; the difference of
#     a run of N and one of 3N messages, iperf3 IPERF_SECS and 3x): CPU seconds per GB of the
#     64 KiB WRITE beside iperf3's, CPU per 64-byte WRITE and per 2-byte round trip, and the
#     busier process's context switches and system calls (perf stat -e raw_syscalls:sys_enter,
#     where the kernel lets perf count it) per message of each; and the user-space instructions
#     per 64-byte WRITE of each end (callgrind, bench/insn-per-msg.sh);
#   - `softroce perf send -q 4 --check` (perftest's SEND shape on 4 QPs): wall clock of the pair
#     against the measured interval, and the RNR NAKs the client received (--counters);
#   - the sweep: `softroce perf write -a` and `send -a` (every size 2 B..8 MiB, one run each) and,
#     without --quick, iperf3 TCP with the same write sizes up to 1 MiB (-l SIZE, a fixed block count),
#     drawn by `softroce plot` as bandwidth and message rate by size: target/bench-sweep.svg,
#     or bench/sweep.svg with --update (BENCHMARKS.md shows that picture).
#
# Units: MB/s = 10^6 bytes/s (iperf3's bits/s / 8e6; softroce's bw_avg_mbps), except in the
# rows that read perftest's or ucx_perftest's own tables, which say so (2^20 bytes/s there).
# Benchmarks are not tests: nothing here asserts a timing. bench/check-rows.sh checks that
# every row was produced. Every process runs under timeout(1); all talk only to loopback
# (127.0.0.1-3, 127.0.77.1-2 for UCX, 127.0.70.10 for MPI); an exit trap stops whatever this script started.
set -euo pipefail
cd "$(dirname "$0")/.."

CMDLINE="bash bench/run.sh${*:+ $*}"
QUICK=0
OUT=target/bench.md
UPDATE=""
PROFILE=0
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK=1 ;;
        --out) OUT=${2:?--out needs a file}; shift ;;
        --update) UPDATE=${2:?--update needs a file}; shift ;;
        --profile) PROFILE=1 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench/run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

# ---- what the run needs ------------------------------------------------------------------
need_apt=()
command -v iperf3 >/dev/null 2>&1 || need_apt+=(iperf3)
command -v jq >/dev/null 2>&1 || need_apt+=(jq)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
command -v ib_write_bw >/dev/null 2>&1 || need_apt+=(perftest)
command -v ucx_perftest >/dev/null 2>&1 || need_apt+=(ucx-utils)
command -v mpicc >/dev/null 2>&1 || need_apt+=(openmpi-bin libopenmpi-dev)
# The system calls per message (perf stat's raw_syscalls tracepoint) and the instructions per
# message (callgrind).
command -v perf >/dev/null 2>&1 || need_apt+=(linux-perf)
command -v valgrind >/dev/null 2>&1 || need_apt+=(valgrind)
if [ ${#need_apt[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    # iperf3's package asks whether to start a daemon; no.
    echo "iperf3 iperf3/start_daemon boolean false" | $SUDO debconf-set-selections 2>/dev/null || true
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi
command -v cargo >/dev/null 2>&1 || { echo "bench/run.sh: cargo (Rust) is required" >&2; exit 1; }
echo "== building softroce and the baselines (release)" >&2
cargo build --release --locked -q
cargo build --release --locked -q --manifest-path bench/baselines/Cargo.toml \
    --target-dir target/bench-baselines
# SOFTROCE_BIN: another softroce binary to measure (default: the release build above).
BIN=${SOFTROCE_BIN:-target/release/softroce}
BL=target/bench-baselines/release

# ---- sizes ---------------------------------------------------------------------------------
if [ $QUICK = 1 ]; then
    RUNS=1 T=30 IPERF_SECS=1 UDP_BYTES=50000000 BW_ITERS=300 LAT_ITERS=500 RATE_MSGS=5000
    Q1024_ITERS=1 SWEEP_ITERS=5 SHIM_BW_ITERS=300 SHIM_RATE_ITERS=5000 SENDQ4_ITERS=200
    UCX_BW_ITERS=300 MPI_LAT_N=200 MPI_BW_N=10
else
    RUNS=3 T=90 IPERF_SECS=2 UDP_BYTES=1000000000 BW_ITERS=5000 LAT_ITERS=10000 RATE_MSGS=100000
    Q1024_ITERS=5 SWEEP_ITERS=1000 SHIM_BW_ITERS=20000 SHIM_RATE_ITERS=100000 SENDQ4_ITERS=5000
    UCX_BW_ITERS=20000 MPI_LAT_N=5000 MPI_BW_N=200
fi
RATE_QPS="1 2 4 8 16 32 64"
MTU=4096
ROCE_UDP_PAYLOAD=$((MTU + 12 + 16 + 4)) # data + BTH + RETH + ICRC: 4128, softroce's largest datagram
# Read the help whole first: `| grep -q` could stop reading early and, under pipefail, turn
# softroce's broken pipe into "no flag".
PERF_HELP=$("$BIN" perf --help 2>/dev/null || true)
BUSY=0
[[ $PERF_HELP == *--busy-poll* ]] && BUSY=1

# ---- process bookkeeping -------------------------------------------------------------------
# shellcheck source=bench/common.sh
. bench/common.sh
bench_tmp bench
# Every run gets its own ports (TCP for the out-of-band exchange and iperf3, UDP for RoCE and
# the baselines), so no run waits for another's TIME_WAIT or stray datagrams. measure() moves
# PORT on by 10 before each run (a run is a subshell and may take a few ports of its own).
PORT=${BENCH_PORT_BASE:-19700}
next_port() { PORT=$((PORT + 1)); }
FAILED=0
fail() { echo "bench/run.sh: $*" >&2; FAILED=1; }

# A server in the background (its pid kept for the trap), then the client, retried while the
# server is still starting (its port refuses connections). The client's stdout goes to $1.
# Usage: pair OUTFILE :: SERVER_CMD... :: CLIENT_CMD...
pair() {
    local out=$1; shift; shift
    local srv=() cli=()
    while [ "$1" != "::" ]; do srv+=("$1"); shift; done
    shift
    cli=("$@")
    timeout "$T" "${srv[@]}" >"$TMP/server.out" 2>"$TMP/server.err" &
    local spid=$!
    started "$spid"
    local ok=0 i
    for i in $(seq 50); do
        if timeout "$T" "${cli[@]}" >"$out" 2>"$TMP/client.err"; then ok=1; break; fi
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.1
    done
    local src=0
    wait "$spid" || src=$?
    if [ $ok = 0 ] || [ $src != 0 ]; then
        echo "-- client: ${cli[*]}" >&2; tail -3 "$TMP/client.err" >&2
        echo "-- server (exit $src): ${srv[*]}" >&2; tail -3 "$TMP/server.err" >&2
        return 1
    fi
}

# One softroce perf pair; prints the client's JSON field $2 (a jq path). Extra perf flags
# follow. With RSS_TAG set, both processes run under maxrss and their peaks (KiB) go to
# $TMP/$RSS_TAG.{server,client}.
# SYSCOUNT=1 where perf can count this machine's system calls (root, or a permissive
# perf_event_paranoid, and tracefs): the cost rows then give system calls per message.
SYSCOUNT=0
perf stat -e raw_syscalls:sys_enter -x, -o /dev/null -- true >/dev/null 2>&1 && SYSCOUNT=1
# sys_wrap FILE: the command prefix that counts a process's system calls (all threads) into FILE.
sys_wrap() {
    [ $SYSCOUNT = 1 ] && echo "perf stat -e raw_syscalls:sys_enter -x, -o $1 --"
}
softroce() {
    local field=$1; shift
    next_port
    local wrap_s=() wrap_c=()
    if [ -n "${RSS_TAG:-}" ]; then
        # shellcheck disable=SC2207 # sys_wrap's words, none with spaces ($TMP is mktemp's)
        wrap_s=($(sys_wrap "$TMP/$RSS_TAG.server.sys") "$BL/maxrss" "$TMP/$RSS_TAG.server" --)
        # shellcheck disable=SC2207
        wrap_c=($(sys_wrap "$TMP/$RSS_TAG.client.sys") "$BL/maxrss" "$TMP/$RSS_TAG.client" --)
    fi
    # CLIENT_BIND: the client's device address (default: perf's, 127.0.0.2 for a server on
    # 127.0.0.1); 127.0.0.1 puts both ends on one shared address.
    local bind_c=()
    [ -n "${CLIENT_BIND:-}" ] && bind_c=(--bind "$CLIENT_BIND")
    pair "$TMP/sr.json" :: "${wrap_s[@]}" "$BIN" perf "$@" -p "$PORT" --roce-port "$PORT" --json \
        :: "${wrap_c[@]}" "$BIN" perf "$@" "${bind_c[@]}" -p "$PORT" --roce-port "$PORT" --json 127.0.0.1 || return 1
    if [ -n "${TAILS:-}" ]; then
        jq -er '"\(.lat_us.p99) \(.lat_us.p999)"' "$TMP/sr.json" >>"$TMP/tails.$TAILS" || return 1
    fi
    jq -er "$field" "$TMP/sr.json"
}

iperf_tcp() {
    next_port
    # iperf3 -J exits 0 even when it could not connect; the JSON's error field tells, so the
    # client is wrapped to fail (and be retried) then.
    pair /dev/null :: iperf3 -s -1 -B 127.0.0.1 -p "$PORT" \
        :: bash -c 'iperf3 -c 127.0.0.1 -B 127.0.0.2 -p "$1" -t "$2" -J >"$3" && jq -e ".error == null" "$3" >/dev/null' \
        iperf_client "$PORT" "$IPERF_SECS" "$TMP/iperf.json" || return 1
    jq -er '.end.sum_received.bits_per_second / 8e6' "$TMP/iperf.json"
}

udp_blast() { # plain|gso
    next_port
    local sflag=() rflag=()
    [ "$1" = gso ] && sflag=(--gso) rflag=(--gro)
    # The receiver is the server here: it must be listening before the first datagram.
    timeout "$T" "$BL/udp_blast" recv --bind "127.0.0.1:$PORT" --bytes "$UDP_BYTES" "${rflag[@]}" \
        >"$TMP/blast.json" 2>"$TMP/blast.err" &
    local rpid=$!
    started "$rpid"
    sleep 0.3
    timeout "$T" "$BL/udp_blast" send --bind "127.0.0.2:$PORT" --to "127.0.0.1:$PORT" \
        --bytes "$UDP_BYTES" --size "$ROCE_UDP_PAYLOAD" "${sflag[@]}" >/dev/null 2>>"$TMP/blast.err" || true
    if ! wait "$rpid"; then tail -3 "$TMP/blast.err" >&2; return 1; fi
    jq -er '.mbps' "$TMP/blast.json"
}

udp_pingpong() { # extra flags (--busy)
    next_port
    pair "$TMP/pp.json" :: "$BL/udp_pingpong" server --bind "127.0.0.1:$PORT" "$@" \
        :: "$BL/udp_pingpong" client --bind "127.0.0.2:$PORT" --to "127.0.0.1:$PORT" \
        -n "$LAT_ITERS" --size 2 "$@" || return 1
    # Its p99 as well: how long a tail this machine gives the plainest ping-pong.
    jq -er '.lat_us.p99' "$TMP/pp.json" >>"$TMP/pp_p99$(printf '%s' "$@" | tr -d ' -')" || return 1
    jq -er '.lat_us.p50' "$TMP/pp.json"
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) exit 1; print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# tails KEY: the p99 and p999 that the runs of `TAILS=KEY measure KEY ...` left in
# $TMP/tails.KEY (one "P99 P999" line per run) as VAL/SAMPLES[KEY_p99] and [KEY_p999].
tails() {
    local key=$1 c
    for c in 1 2; do
        local k=${key}_p99
        [ $c = 2 ] && k=${key}_p999
        if [[ ${VAL[$key]} == FAILED* || ! -s $TMP/tails.$key ]]; then
            VAL[$k]=${VAL[$key]}
            continue
        fi
        SAMPLES[$k]=$(awk -v c=$c '{printf "%.6g ", $c}' "$TMP/tails.$key")
        VAL[$k]=$(awk -v c=$c '{print $c}' "$TMP/tails.$key" | median)
    done
}

# measure KEY CMD...: runs CMD $RUNS times, keeps the values as SAMPLES[KEY] and the median
# as VAL[KEY] (FAILED when any run failed).
declare -A VAL SAMPLES
measure() {
    local key=$1; shift
    local vals=() v i
    echo "== $key" >&2
    for i in $(seq "$RUNS"); do
        PORT=$((PORT + 10))
        if v=$("$@"); then vals+=("$v"); else fail "$key: run $i failed"; VAL[$key]=FAILED; return 0; fi
    done
    SAMPLES[$key]=$(printf '%.6g ' "${vals[@]}")
    VAL[$key]=$(printf '%s\n' "${vals[@]}" | median)
}

# ---- the runs ------------------------------------------------------------------------------
START=$(date +%s)
measure tcp iperf_tcp
measure udp_plain udp_blast plain
measure udp_gso udp_blast gso
measure write softroce .bw_avg_mbps write -s 65536 -n "$BW_ITERS"
# The shared device (spec-notes/shared-device.md): both ends on one address, and both ends
# holding their addresses alone (no steering program), against the write row's own addresses.
CLIENT_BIND=127.0.0.1 measure write_shared softroce .bw_avg_mbps write -s 65536 -n "$BW_ITERS"
SOFTROCE_SHARE=0 measure write_alone softroce .bw_avg_mbps write -s 65536 -n "$BW_ITERS"
measure send softroce .bw_avg_mbps send -s 65536 -n "$BW_ITERS"
measure read softroce .bw_avg_mbps read -s 65536 -n "$BW_ITERS"
measure pp_block udp_pingpong
TAILS=lat measure lat softroce .lat_us.p50 send --lat -s 2 -n "$LAT_ITERS"
tails lat
CLIENT_BIND=127.0.0.1 measure lat_shared softroce .lat_us.p50 send --lat -s 2 -n "$LAT_ITERS"
measure pp_busy udp_pingpong --busy
# The same with an acknowledgement datagram beside each message (udp_pingpong --acks), as
# an RC ping-pong carries the ACK that rxe's requester asks for every message: the floor of
# the busy-poll latency row below.
measure pp_busy_acks udp_pingpong --busy --acks
if [ $BUSY = 1 ]; then
    TAILS=lat_busy measure lat_busy softroce .lat_us.p50 send --lat -s 2 -n "$LAT_ITERS" --busy-poll
else
    VAL[lat_busy]="n/a (flag missing)"
fi
tails lat_busy
for q in $RATE_QPS; do
    n=$(( (RATE_MSGS + q - 1) / q ))
    measure "rate_q$q" softroce .msg_rate_mpps write -s 64 -n "$n" -q "$q"
done
measure write_q1024 softroce .bw_avg_mbps write -s 65536 -n "$Q1024_ITERS" -q 1024
# README's impairment example: these flags at both ends, the client with --pcap, then
# `softroce decode --analyze` of the capture. Keep them word for word as README prints them.
README_IMPAIR=(--check -u 8 -n 1000 -s 16384 --drop 0.05 --dup 0.01 --reorder 0.01 --corrupt 0.01 --seed 7 --counters)
readme_impair() {
    next_port
    local t0 t1
    t0=$(date +%s.%N)
    pair "$TMP/impair.out" :: "$BIN" perf write "${README_IMPAIR[@]}" -p "$PORT" --roce-port "$PORT" \
        :: "$BIN" perf write "${README_IMPAIR[@]}" -p "$PORT" --roce-port "$PORT" \
        --pcap "$TMP/impair.pcap" 127.0.0.1 || return 1
    t1=$(date +%s.%N)
    grep -q "Data check      : passed" "$TMP/impair.out" || { fail "impair: no passed verdict"; return 1; }
    "$BIN" decode --analyze --port "$PORT" "$TMP/impair.pcap" >"$TMP/impair.analysis" || return 1
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f\n", b - a}'
}
measure readme_impair readme_impair
# ---- what a message costs: CPU time and context switches, both processes -----------------
# Figures a noisy machine moves little, beside the ratios above (ISSUE 35's rule): the kernel's
# rusage of each process (bench/baselines maxrss), all threads. Each is the difference of a
# run of N and one of 3N messages (iperf3: IPERF_SECS and 3 x IPERF_SECS), so that start-up,
# connection and exit cancel out.
# cost_of TAG: "CPU_S CSW_SERVER CSW_CLIENT SYS_SERVER SYS_CLIENT" of the pair that a
# RSS_TAG=TAG run left (the system calls 0 where they were not counted: iperf3's runs, or no
# SYSCOUNT).
cost_of() {
    local ss=0 sc=0
    if [ -f "$TMP/$1.server.sys" ] && [ -f "$TMP/$1.client.sys" ]; then
        ss=$(sys_count "$TMP/$1.server.sys") && sc=$(sys_count "$TMP/$1.client.sys") || return 1
    fi
    awk -v ss="$ss" -v sc="$sc" '{for (i = 1; i < NF; i++) { if ($i == "cpu_s") c += $(i + 1); if ($i == "csw") w[NR] = $(i + 1) }}
        END {printf "%s %s %s %s %s\n", c, w[1], w[2], ss, sc}' "$TMP/$1.server" "$TMP/$1.client"
}
# sys_count FILE: the count in a `perf stat -x,` output file.
sys_count() { awk -F, '/raw_syscalls:sys_enter/ {print $1; f = 1} END {exit !f}' "$1"; }
# msg_cost KEY N PERF_ARGS...: CPU microseconds per message of both processes, printed; the
# context switches per message of the busier process go to $TMP/csw.KEY (one line a run), and
# its system calls per message to $TMP/sys.KEY when they are counted.
msg_cost() {
    local key=$1 n=$2; shift 2
    RSS_TAG=cost1 softroce .iters "$@" -n "$n" >/dev/null || return 1
    RSS_TAG=cost3 softroce .iters "$@" -n $((3 * n)) >/dev/null || return 1
    local a b
    a=$(cost_of cost1) && b=$(cost_of cost3) || return 1
    # A difference below zero means the two runs' start-up and exit differed by more than
    # the 2N messages cost (short runs, --quick): the 3N run's whole figure per message, an
    # upper bound, is given instead.
    awk -v a="$a" -v b="$b" -v n="$n" -v sysf="$TMP/sys.$key.new" '
        function per(x1, x3, scale) { v = (x3 - x1) * scale / (2 * n); return v < 0 ? x3 * scale / (3 * n) : v }
        BEGIN {
        split(a, x, " "); split(b, y, " ")
        s = per(x[2], y[2], 1); c = per(x[3], y[3], 1)
        m = (s > c) ? s : c
        printf "%.4g\n", m > "/dev/stderr"
        s = per(x[4], y[4], 1); c = per(x[5], y[5], 1)
        m = (s > c) ? s : c
        printf "%.4g\n", m > sysf
        printf "%.4g\n", per(x[1], y[1], 1e6) }' 2>>"$TMP/csw.$key"
    [ $SYSCOUNT = 1 ] && cat "$TMP/sys.$key.new" >>"$TMP/sys.$key"
    rm -f "$TMP/sys.$key.new" "$TMP"/cost[13].*.sys
}
# tcp_cost: iperf3's CPU seconds per GB received, both processes.
tcp_run() { # TAG SECS; prints the bytes received
    next_port
    pair /dev/null :: "$BL/maxrss" "$TMP/$1.server" -- iperf3 -s -1 -B 127.0.0.1 -p "$PORT" \
        :: bash -c '"$1" "$2" -- iperf3 -c 127.0.0.1 -B 127.0.0.2 -p "$3" -t "$4" -J >"$5" && jq -e ".error == null" "$5" >/dev/null' \
        iperf_cost "$BL/maxrss" "$TMP/$1.client" "$PORT" "$2" "$TMP/iperf_cost.json" || return 1
    jq -er '.end.sum_received.bytes' "$TMP/iperf_cost.json"
}
tcp_cost() {
    local b1 b3 a b
    b1=$(tcp_run cost1 "$IPERF_SECS") && a=$(cost_of cost1) || return 1
    b3=$(tcp_run cost3 $((3 * IPERF_SECS))) && b=$(cost_of cost3) || return 1
    # As msg_cost: a difference below zero gives the longer run's whole figure instead.
    awk -v a="$a" -v b="$b" -v b1="$b1" -v b3="$b3" 'BEGIN {
        split(a, x, " "); split(b, y, " "); v = (y[1] - x[1]) / ((b3 - b1) / 1e9)
        printf "%.4g\n", (v < 0 || b3 <= b1) ? y[1] / (b3 / 1e9) : v }'
}
# csw KEY: the median of what msg_cost's runs left in $TMP/csw.KEY, as VAL[KEY_csw], and of
# $TMP/sys.KEY as VAL[KEY_sys] ("n/a (perf cannot count)" where the system calls were not).
csw() {
    if [[ ${VAL[$1]} == FAILED* || ! -s $TMP/csw.$1 ]]; then
        VAL[${1}_csw]=${VAL[$1]}; VAL[${1}_sys]=${VAL[$1]}; return
    fi
    SAMPLES[${1}_csw]=$(paste -sd' ' "$TMP/csw.$1")
    VAL[${1}_csw]=$(median <"$TMP/csw.$1")
    if [ -s "$TMP/sys.$1" ]; then
        SAMPLES[${1}_sys]=$(paste -sd' ' "$TMP/sys.$1")
        VAL[${1}_sys]=$(median <"$TMP/sys.$1")
    else
        VAL[${1}_sys]="n/a (perf cannot count)"
    fi
}
measure tcp_cpu tcp_cost
measure write_cost msg_cost write_cost "$BW_ITERS" write -s 65536
csw write_cost
measure rate_cost msg_cost rate_cost "$RATE_MSGS" write -s 64
csw rate_cost
measure lat_cost msg_cost lat_cost "$LAT_ITERS" send --lat -s 2
csw lat_cost
# Instructions per 64-byte WRITE, each end (callgrind: user space only, and a figure the
# machine's load does not move much). Once: callgrind runs the pair some 50 times slower.
insn_64b() {
    command -v valgrind >/dev/null 2>&1 || { echo "n/a (valgrind missing)"; return 0; }
    local n=$((RATE_MSGS / 100))
    [ $n -lt 200 ] && n=200
    BENCH_PORT_BASE=$((PORT + 5)) bash bench/insn-per-msg.sh --bin "$BIN" "$n" $((3 * n)) -- write -s 64 \
        >"$TMP/insn.out" 2>"$TMP/insn.err" || { tail -3 "$TMP/insn.err" >&2; return 1; }
    cat "$TMP/insn.out" >&2
    # "...: instructions per message, server S, client C (n ...)": the server's, which receives
    # and acknowledges each WRITE; the client's includes the passes its thread runs while it
    # waits for completions (standby.rs), which callgrind's slowness multiplies.
    sed -n 's/.*server \([0-9]*\), client \([0-9]*\).*/\1 \2/p' "$TMP/insn.out" |
        awk '{print $1; print "client " $2 > "/dev/stderr"}' 2>"$TMP/insn.ends"
}
RUNS=1 measure insn_64b insn_64b
# Memory: peak RSS (ru_maxrss, i.e. VmHWM) of each process of a small WRITE run with 1 QP and
# with 1024 QPs; the difference over 1023 is what one more QP costs.
rss_run() { # QPS
    RSS_TAG="rss$1" softroce .iters write -s 2 -n 10 -q "$1" >/dev/null || return 1
}
rss_per_qp() { # client|server
    rss_run 1 && rss_run 1024 || return 1
    local a b
    a=$(awk '{print $2}' "$TMP/rss1.$1")
    b=$(awk '{print $2}' "$TMP/rss1024.$1")
    echo "$a $b" >>"$TMP/rss.$1.raw"
    awk -v a="$a" -v b="$b" 'BEGIN {printf "%.0f\n", (b - a) * 1024 / 1023}'
}
measure mem_client rss_per_qp client
measure mem_server rss_per_qp server

# ---- the shim beside softroce perf -------------------------------------------------------------
# perftest's table: the line after the one naming the columns; prints its field COL.
table_field() { # COL FILE
    awk -v col="$1" '/#bytes/ {getline; print $col; exit}' "$2" | grep -E '^[0-9.]+$'
}
SHIM=0
command -v ib_write_bw >/dev/null 2>&1 && command -v ib_send_lat >/dev/null 2>&1 && SHIM=1
# A perftest program under `softroce run`, server 127.0.0.2, client 127.0.0.3; with
# SHIM_BUSY=1 both under `softroce run --busy-poll`.
shim_perftest() { # COL PROGRAM ARGS...
    local col=$1 prog=$2; shift 2
    local busy=()
    [ -n "${SHIM_BUSY:-}" ] && busy=(--busy-poll)
    next_port
    pair "$TMP/shim.out" :: "$BIN" run --bind 127.0.0.2 "${busy[@]}" -- "$prog" "$@" -p "$PORT" \
        :: "$BIN" run --bind 127.0.0.3 "${busy[@]}" -- "$prog" "$@" -p "$PORT" 127.0.0.2 || return 1
    if [ -n "${TAILS:-}" ]; then # perftest's latency table: 99% and 99.9% percentile
        echo "$(table_field 8 "$TMP/shim.out") $(table_field 9 "$TMP/shim.out")" >>"$TMP/tails.$TAILS" || return 1
    fi
    table_field "$col" "$TMP/shim.out"
}
# softroce perf with the same flags, its perftest-shaped table read the same way.
softroce_table() { # COL OP ARGS...
    local col=$1; shift
    next_port
    pair "$TMP/srt.out" :: "$BIN" perf "$@" -p "$PORT" --roce-port "$PORT" \
        :: "$BIN" perf "$@" -p "$PORT" --roce-port "$PORT" 127.0.0.1 || return 1
    table_field "$col" "$TMP/srt.out"
}
if [ $SHIM = 1 ]; then
    measure shim_write shim_perftest 4 ib_write_bw -x 1 -s 65536 -n "$SHIM_BW_ITERS"
    measure shim_write_sr softroce_table 4 write -x 1 -s 65536 -n "$SHIM_BW_ITERS"
    measure shim_rate shim_perftest 5 ib_write_bw -x 1 -s 64 -n "$SHIM_RATE_ITERS"
    measure shim_rate_sr softroce_table 5 write -x 1 -s 64 -n "$SHIM_RATE_ITERS"
    TAILS=shim_lat measure shim_lat shim_perftest 5 ib_send_lat -x 1 -s 2 -n "$LAT_ITERS"
    measure shim_lat_sr softroce_table 5 send --lat -x 1 -s 2 -n "$LAT_ITERS"
    TAILS=shim_lat_busy SHIM_BUSY=1 measure shim_lat_busy shim_perftest 5 ib_send_lat -x 1 -s 2 -n "$LAT_ITERS"
    measure shim_lat_busy_sr softroce_table 5 send --lat --busy-poll -x 1 -s 2 -n "$LAT_ITERS"
else
    for k in shim_write shim_write_sr shim_rate shim_rate_sr shim_lat shim_lat_sr shim_lat_busy shim_lat_busy_sr; do VAL[$k]="n/a (perftest missing)"; done
fi
tails shim_lat
tails shim_lat_busy
# ---- UCX over softroce beside UCX over TCP -------------------------------------------------------
# ucx_perftest's server (-p PORT) and client, each side either under `softroce run` with the
# release shim and UCX_NET_DEVICES=softroce0:1 (server 127.0.77.1, client 127.0.77.2), or plain
# with UCX's TCP transport on lo; the client reaches the server's port on 127.0.77.1 either way.
# UCT tests name their transport and device (-x, -d): rc_verbs on softroce0:1, tcp on lo. UCP
# tests take UCX_TLS: rc_verbs,ud_verbs over softroce (UCP wires rc_verbs up over ud_verbs;
# ibverbs/tests/ucx.rs runs the same), tcp otherwise. UCX_LOG_LEVEL=info makes UCP print the
# lanes it chose ("ep_cfg[0]: tag(rc_verbs/softroce0:1)"); the client's are kept for the notes.
# softroce run gives the port the active MTU rxe would have on the address's interface unless
# told (--mtu): 4096 on lo; UCX sets its QPs' path MTU from it; with UCX_RUN_MTU set both ends
# get --mtu (1024: a 1500-byte link's).
# Prints column COL of the client's Final row: 3 = the latency percentile (-R, default the
# 50th, over ucx_perftest's timing queue of the last 2048 iterations; half the round trip in
# the ping-pong tests), 7 = the bandwidth over the whole run (ucx_perftest's MB/s, 2^20 bytes
# per second as perftest's: 65536 B / its overall overhead in us / 1.048576; column 6 is only
# the last report interval's).
UCX=0
command -v ucx_perftest >/dev/null 2>&1 && UCX=1
UCX_LIB=$(dirname "$BIN")/libibverbs.so
ucx_perftest_pair() { # softroce|tcp uct|ucp COL TEST ARGS...
    local via=$1 api=$2 col=$3 test=$4; shift 4
    next_port
    local env=(UCX_LOG_LEVEL=info) srv=() cli=() uct=() run_flags=()
    [ -n "${UCX_RUN_MTU:-}" ] && run_flags=(--mtu "$UCX_RUN_MTU")
    [ -n "${UCX_RUN_BUSY:-}" ] && run_flags+=(--busy-poll)
    if [ "$via" = softroce ]; then
        env+=(UCX_NET_DEVICES=softroce0:1 UCX_TLS=rc_verbs,ud_verbs)
        srv=("$BIN" run --lib "$UCX_LIB" --bind 127.0.77.1 "${run_flags[@]}" --)
        cli=("$BIN" run --lib "$UCX_LIB" --bind 127.0.77.2 "${run_flags[@]}" --)
        uct=(-x rc_verbs -d softroce0:1)
    else
        env+=(UCX_NET_DEVICES=lo UCX_TLS=tcp)
        uct=(-x tcp -d lo)
    fi
    [ "$api" = uct ] || uct=()
    pair "$TMP/ucx.out" :: env "${env[@]}" "${srv[@]}" ucx_perftest -p "$PORT" \
        :: env "${env[@]}" "${cli[@]}" ucx_perftest 127.0.77.1 -p "$PORT" -t "$test" "${uct[@]}" "$@" || return 1
    if [ "$api" = ucp ]; then
        local lane
        lane=$(grep -h -o 'ep_cfg\[0\]: .*' "$TMP/ucx.out" "$TMP/client.err" | sed -n 1p || true)
        echo "${lane:-(no ep_cfg line)}" >>"$TMP/ucx_lanes.$via.$test"
    fi
    awk -v col="$col" '$1 == "Final:" {print $col; exit}' "$TMP/ucx.out" | grep -E '^[0-9.]+$'
}
ucx_lanes() { # softroce|tcp TEST: the distinct lanes UCP printed over the runs
    sort -u "$TMP/ucx_lanes.$1.$2" 2>/dev/null | paste -sd';' | sed 's/;/; /g'
}
UCX_KEYS="ucx_put_bw ucx_put_bw_mtu1024 ucx_put_bw_busy ucx_put_bw_tcp ucx_am_lat ucx_am_lat_busy ucx_am_lat_tcp ucx_ucp_put_bw ucx_ucp_put_bw_tcp ucx_tag_lat ucx_tag_lat_tcp"
if [ $UCX = 1 ]; then
    for via in softroce tcp; do
        sfx=""
        [ $via = tcp ] && sfx=_tcp
        measure "ucx_put_bw$sfx" ucx_perftest_pair $via uct 7 put_bw -D zcopy -s 65536 -n "$UCX_BW_ITERS"
        [ $via = softroce ] && UCX_RUN_MTU=1024 measure ucx_put_bw_mtu1024 \
            ucx_perftest_pair $via uct 7 put_bw -D zcopy -s 65536 -n "$UCX_BW_ITERS"
        [ $via = softroce ] && UCX_RUN_BUSY=1 measure ucx_put_bw_busy \
            ucx_perftest_pair $via uct 7 put_bw -D zcopy -s 65536 -n "$UCX_BW_ITERS"
        measure "ucx_am_lat$sfx" ucx_perftest_pair $via uct 3 am_lat -s 8 -n "$LAT_ITERS"
        [ $via = softroce ] && UCX_RUN_BUSY=1 measure ucx_am_lat_busy \
            ucx_perftest_pair $via uct 3 am_lat -s 8 -n "$LAT_ITERS"
        measure "ucx_ucp_put_bw$sfx" ucx_perftest_pair $via ucp 7 ucp_put_bw -s 65536 -n "$UCX_BW_ITERS"
        measure "ucx_tag_lat$sfx" ucx_perftest_pair $via ucp 3 tag_lat -s 8 -n "$LAT_ITERS"
    done
else
    for k in $UCX_KEYS; do VAL[$k]="n/a (ucx-utils missing)"; done
fi

# ---- OpenMPI over UCX on softroce beside OpenMPI's TCP BTL ---------------------------------------
# tests/mpi/pingpong.c on 2 ranks, as scripts/mpi-run.sh runs it (which also shows, with a
# capture, that RoCEv2 carried the bytes): 8 B ping-pong latency (half the round trip, over
# MPI_LAT_N round trips) and 1 MiB bandwidth (MPI_BW_N messages, each checked), the allreduce
# checked. softroce: both ranks under `softroce run --bind 127.0.70.10` (one address for the
# host, shared as rxe0 is), pml ucx with UCX_TLS=rc_verbs,ud_verbs and btl self (no shared
# memory); TCP: pml ob1, btl tcp,self on lo. One mpirun gives both figures: the latency is the
# measured value, the bandwidth goes to $TMP/mpi_bw.VIA, and its median to VAL[mpi_bw(_tcp)].
MPI=0
command -v mpirun >/dev/null 2>&1 && command -v mpicc >/dev/null 2>&1 && MPI=1
MPI_KEYS="mpi_lat mpi_lat_busy mpi_lat_tcp mpi_bw mpi_bw_busy mpi_bw_tcp"
mpi_pingpong() { # softroce|busy|tcp (busy: softroce run --busy-poll, the ranks' spinning runs the engine)
    local out flags=(--allow-run-as-root --oversubscribe --bind-to none -np 2 --mca oob_tcp_if_include lo)
    if [ "$1" != tcp ]; then
        local rank=$TMP/mpi_rank.sh
        [ "$1" = busy ] && rank=$TMP/mpi_rank_busy.sh
        out=$(timeout "$T" mpirun "${flags[@]}" --mca btl self --mca pml ucx \
            -x UCX_TLS=rc_verbs,ud_verbs -x UCX_NET_DEVICES=softroce0:1 \
            "$rank" "$TMP/mpi_pingpong" "$MPI_LAT_N" "$MPI_BW_N" 2>&1) || { echo "$out" >&2; return 1; }
    else
        out=$(timeout "$T" mpirun "${flags[@]}" --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo \
            "$TMP/mpi_pingpong" "$MPI_LAT_N" "$MPI_BW_N" 2>&1) || { echo "$out" >&2; return 1; }
    fi
    [ "$(grep -c '^allreduce ok 3 rank' <<<"$out")" = 2 ] || { echo "$out" >&2; return 1; }
    awk '/^bandwidth_MBps/ {print $2}' <<<"$out" | grep -E '^[0-9.]+$' >>"$TMP/mpi_bw.$1"
    awk '/^latency_us/ {print $2}' <<<"$out" | grep -E '^[0-9.]+$'
}
if [ $MPI = 1 ] && mpicc -O2 -Wall -o "$TMP/mpi_pingpong" tests/mpi/pingpong.c; then
    for busy in "" --busy-poll; do
        printf '#!/bin/sh\nexec %q run --lib %q --bind 127.0.70.10 %s -- "$@"\n' \
            "$(realpath "$BIN")" "$(realpath "$UCX_LIB")" "$busy" >"$TMP/mpi_rank${busy:+_busy}.sh"
        chmod +x "$TMP/mpi_rank${busy:+_busy}.sh"
    done
    for via in softroce busy tcp; do
        sfx=""
        [ $via = tcp ] && sfx=_tcp
        [ $via = busy ] && sfx=_busy
        : >"$TMP/mpi_bw.$via"
        measure "mpi_lat$sfx" mpi_pingpong $via
        VAL[mpi_bw$sfx]=$(median <"$TMP/mpi_bw.$via" || echo FAILED)
        SAMPLES[mpi_bw$sfx]=$(paste -sd' ' "$TMP/mpi_bw.$via")
    done
else
    for k in $MPI_KEYS; do VAL[$k]="n/a (openmpi missing)"; done
fi

# perf send -q 4 --check: the pair's wall clock, the measured interval (bytes / BW average of
# the client, perftest's MB = 2^20 bytes) and the client's RNR NAKs received.
send_q4() {
    next_port
    local t0 t1 bw
    t0=$(date +%s.%N)
    pair "$TMP/q4.out" :: "$BIN" perf send -q 4 --check --counters -n "$SENDQ4_ITERS" -p "$PORT" --roce-port "$PORT" \
        :: "$BIN" perf send -q 4 --check --counters -n "$SENDQ4_ITERS" -p "$PORT" --roce-port "$PORT" 127.0.0.1 || return 1
    t1=$(date +%s.%N)
    grep -q "Data check      : passed" "$TMP/q4.out" || { fail "send -q 4: no passed verdict"; return 1; }
    bw=$(table_field 4 "$TMP/q4.out") || return 1
    local rnr
    rnr=$(grep -o 'rcvd_rnr_err=[0-9]*' "$TMP/client.err" | cut -d= -f2 || true)
    echo "${rnr:-0}" >>"$TMP/q4.rnr"
    awk -v a="$t0" -v b="$t1" -v bw="$bw" -v n="$SENDQ4_ITERS" \
        'BEGIN {printf "%.3f %.3f\n", b - a, 4 * n * 65536 / (bw * 1048576)}' >>"$TMP/q4.times"
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f\n", b - a}'
}
: >"$TMP/q4.rnr"
: >"$TMP/q4.times"
measure send_q4_wall send_q4
VAL[send_q4_rnr]=$(sort -g "$TMP/q4.rnr" | tail -1)
VAL[send_q4_meas]=$(awk '{print $2}' "$TMP/q4.times" | median || echo FAILED)

# ---- the sweep: bandwidth by message size ------------------------------------------------------
# One run each (a sweep is 23 runs already); the client's --json lines are the picture's input.
sweep_softroce() { # OP
    echo "== sweep $1 -a" >&2
    PORT=$((PORT + 10))
    pair "$TMP/sweep_$1.jsonl" :: "$BIN" perf "$1" -a -n "$SWEEP_ITERS" -p "$PORT" --roce-port "$PORT" --json \
        :: "$BIN" perf "$1" -a -n "$SWEEP_ITERS" -p "$PORT" --roce-port "$PORT" --json 127.0.0.1
}
# iperf3 with softroce's sizes up to its largest block, 1 MiB: -l SIZE writes, SWEEP_ITERS of
# them (at least 2 MiB in all); one JSON line per size in perf --json's fields.
sweep_tcp() {
    echo "== sweep iperf3 TCP" >&2
    local i size blocks
    : >"$TMP/sweep_tcp.jsonl"
    for i in $(seq 1 20); do
        size=$((1 << i))
        blocks=$(( SWEEP_ITERS > (2097152 / size) ? SWEEP_ITERS : (2097152 / size) ))
        next_port
        pair /dev/null :: iperf3 -s -1 -B 127.0.0.1 -p "$PORT" \
            :: bash -c 'iperf3 -c 127.0.0.1 -B 127.0.0.2 -p "$1" -l "$2" -k "$3" -J >"$4" && jq -e ".error == null" "$4" >/dev/null' \
            iperf_client "$PORT" "$size" "$blocks" "$TMP/iperf_sweep.json" || return 1
        jq -c --argjson size "$size" --argjson blocks "$blocks" \
            '.end.sum_received | {bytes: $size, bw_avg_mibps: (.bits_per_second / 8 / 1048576), msg_rate_mpps: ($blocks / .seconds / 1e6)}' \
            "$TMP/iperf_sweep.json" >>"$TMP/sweep_tcp.jsonl"
    done
}
SWEEP_SVG=target/bench-sweep.svg
[ -n "$UPDATE" ] && SWEEP_SVG=bench/sweep.svg
PLOT_RUNS=()
sweep_softroce write && PLOT_RUNS+=("$TMP/sweep_write.jsonl=softroce RC WRITE, loopback") || fail "sweep write failed"
sweep_softroce send && PLOT_RUNS+=("$TMP/sweep_send.jsonl=softroce RC SEND, loopback") || fail "sweep send failed"
if [ $QUICK = 0 ]; then
    sweep_tcp && PLOT_RUNS+=("$TMP/sweep_tcp.jsonl=iperf3 TCP, 1 stream, loopback") || fail "sweep TCP failed"
fi
VAL[sweep_rows]=$(wc -l <"$TMP/sweep_write.jsonl" 2>/dev/null || echo 0)
VAL[sweep_peak]=$(jq -s 'map(.bw_avg_mbps) | max' "$TMP/sweep_write.jsonl" 2>/dev/null || echo FAILED)
mkdir -p "$(dirname "$SWEEP_SVG")"
if [ ${#PLOT_RUNS[@]} -gt 0 ]; then
    "$BIN" plot -o "$SWEEP_SVG" "${PLOT_RUNS[@]}" || fail "softroce plot failed"
fi
ELAPSED=$(( $(date +%s) - START ))

# ---- the table -----------------------------------------------------------------------------
is_num() { [[ $1 =~ ^-?[0-9.]+([eE][-+]?[0-9]+)?$ ]]; }
fmt() { # VALUE PRINTF_FORMAT
    if is_num "$1"; then printf "$2" "$1"; else printf '%s' "$1"; fi
}
ratio() { # A B
    if is_num "$1" && is_num "$2" && awk -v b="$2" 'BEGIN {exit !(b != 0)}'; then
        awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2fx", a / b}'
    else
        printf -- '-'
    fi
}
met() { # RATIO_TEXT OP GOAL
    local r=${1%x}
    if is_num "$r"; then
        awk -v r="$r" -v g="$3" -v op="$2" 'BEGIN {ok = (op == ">=") ? (r >= g) : (r <= g); printf ok ? "yes" : "no"}'
    else
        printf -- '-'
    fi
}
ROWS=()
# row ID FIGURE SOFTROCE_TEXT BASELINE_TEXT RATIO GOAL MET
row() { ROWS+=("| $1 | $2 | $3 | $4 | $5 | $6 | $7 |"); }
mbs() { fmt "$1" '%.0f MB/s'; }
us() { fmt "$1" '%.2f us'; }
mpps() { fmt "$1" '%.3f Mpps'; }

r=$(ratio "${VAL[write]}" "${VAL[tcp]}")
row write-64k-vs-tcp "64 KiB RC WRITE, MTU 4096, 1 QP vs iperf3 TCP, 1 stream" "$(mbs "${VAL[write]}")" "$(mbs "${VAL[tcp]}")" "$r" ">= 1.1x" "$(met "$r" '>=' 1.1)"
r=$(ratio "${VAL[write]}" "${VAL[udp_gso]}")
row write-64k-vs-udp-gso "64 KiB RC WRITE vs raw UDP GSO/GRO, 4128-byte datagrams" "$(mbs "${VAL[write]}")" "$(mbs "${VAL[udp_gso]}")" "$r" ">= 0.6x" "$(met "$r" '>=' 0.6)"
r=$(ratio "${VAL[write]}" "${VAL[udp_plain]}")
row write-64k-vs-udp-plain "64 KiB RC WRITE vs raw UDP without GSO/GRO (sendmmsg/recvmmsg)" "$(mbs "${VAL[write]}")" "$(mbs "${VAL[udp_plain]}")" "$r" "-" "-"
r=$(ratio "${VAL[write_shared]}" "${VAL[write]}")
row shared-write-64k "64 KiB RC WRITE, both ends on one shared address vs each on its own" "$(mbs "${VAL[write_shared]}")" "$(mbs "${VAL[write]}")" "$r" ">= 0.95x" "$(met "$r" '>=' 0.95)"
r=$(ratio "${VAL[write]}" "${VAL[write_alone]}")
row shared-write-64k-vs-alone "64 KiB RC WRITE, each end a member of its address's group (the default) vs holding its address alone (SOFTROCE_SHARE=0)" "$(mbs "${VAL[write]}")" "$(mbs "${VAL[write_alone]}")" "$r" ">= 0.95x" "$(met "$r" '>=' 0.95)"
r=$(ratio "${VAL[send]}" "${VAL[write]}")
row send-64k "64 KiB SEND vs 64 KiB WRITE" "$(mbs "${VAL[send]}")" "$(mbs "${VAL[write]}")" "$r" ">= 0.8x" "$(met "$r" '>=' 0.8)"
r=$(ratio "${VAL[read]}" "${VAL[write]}")
row read-64k "64 KiB READ vs 64 KiB WRITE" "$(mbs "${VAL[read]}")" "$(mbs "${VAL[write]}")" "$r" ">= 0.8x" "$(met "$r" '>=' 0.8)"
gb() { fmt "$1" '%.3f s/GB'; }
per_msg() { fmt "$1" '%.3f /msg'; }
# CPU microseconds per 64 KiB message -> seconds per GB (10^9 bytes).
write_gb=$(is_num "${VAL[write_cost]}" && awk -v c="${VAL[write_cost]}" 'BEGIN {printf "%.4g", c * 1e3 / 65536}' || echo "${VAL[write_cost]}")
r=$(ratio "$write_gb" "${VAL[tcp_cpu]}")
row write-64k-cpu "CPU seconds per GB moved, both processes: 64 KiB RC WRITE vs iperf3 TCP, 1 stream (rusage; runs of N and 3N messages, difference)" "$(gb "$write_gb")" "$(gb "${VAL[tcp_cpu]}")" "$r" "<= 1.5x" "$(met "$r" '<=' 1.5)"
row write-64k-csw "context switches per 64 KiB WRITE, the busier process (same runs)" "$(per_msg "${VAL[write_cost_csw]}")" "-" "-" "<= 0.2" "$(met "${VAL[write_cost_csw]}x" '<=' 0.2)"
row rate-64b-cpu "CPU per 64-byte WRITE, both processes, 1 QP (same method)" "$(us "${VAL[rate_cost]}")" "-" "-" "-" "-"
row rate-64b-csw "context switches per 64-byte WRITE, the busier process" "$(per_msg "${VAL[rate_cost_csw]}")" "-" "-" "-" "-"
row lat-2b-cpu "CPU per 2-byte SEND round trip, both processes (blocking)" "$(us "${VAL[lat_cost]}")" "-" "-" "-" "-"
row lat-2b-csw "context switches per 2-byte SEND round trip, the busier process (blocking)" "$(per_msg "${VAL[lat_cost_csw]}")" "-" "-" "-" "-"
row write-64k-sys "system calls per 64 KiB WRITE, the busier process (same runs; perf stat raw_syscalls)" "$(per_msg "${VAL[write_cost_sys]}")" "-" "-" "-" "-"
row rate-64b-sys "system calls per 64-byte WRITE, the busier process" "$(per_msg "${VAL[rate_cost_sys]}")" "-" "-" "-" "-"
row lat-2b-sys "system calls per 2-byte SEND round trip, the busier process (blocking; a blocking UDP ping-pong makes 2)" "$(per_msg "${VAL[lat_cost_sys]}")" "2 /msg" "-" "-" "-"
row insn-64b "user-space instructions per 64-byte WRITE received, the server (callgrind, bench/insn-per-msg.sh; the $(cat "$TMP/insn.ends" 2>/dev/null || echo "client n/a"), with its waiting passes)" "$(fmt "${VAL[insn_64b]}" '%.0f /msg')" "-" "-" "<= 1500" "$(met "${VAL[insn_64b]}x" '<=' 1500)"
r=$(ratio "${VAL[lat]}" "${VAL[pp_block]}")
row lat-2b "2-byte SEND one-way p50 vs blocking UDP ping-pong" "$(us "${VAL[lat]}")" "$(us "${VAL[pp_block]}")" "$r" "<= 1.3x" "$(met "$r" '<=' 1.3)"
r=$(ratio "${VAL[lat_shared]}" "${VAL[lat]}")
row shared-lat-2b "2-byte SEND one-way p50, both ends on one shared address vs each on its own" "$(us "${VAL[lat_shared]}")" "$(us "${VAL[lat]}")" "$r" "<= 1.05x" "$(met "$r" '<=' 1.05)"
r=$(ratio "${VAL[lat_busy]}" "${VAL[pp_busy]}")
row lat-2b-busy "2-byte SEND one-way p50, --busy-poll vs busy-polling UDP ping-pong" "$(us "${VAL[lat_busy]}")" "$(us "${VAL[pp_busy]}")" "$r" "<= 1.5x" "$(met "$r" '<=' 1.5)"
r=$(ratio "${VAL[pp_busy_acks]}" "${VAL[pp_busy]}")
row pp-2b-busy-acks "busy-polling UDP ping-pong with a 20-byte ack datagram beside each message (sendmmsg and recvmmsg of 2, as an RC ping-pong's SEND and ACK) vs without: the floor of lat-2b-busy's ratio" "$(us "${VAL[pp_busy_acks]}")" "$(us "${VAL[pp_busy]}")" "$r" "-" "-"
r=$(ratio "${VAL[lat_busy]}" "${VAL[pp_busy_acks]}")
row lat-2b-busy-vs-acks "2-byte SEND one-way p50, --busy-poll vs that ping-pong with acks" "$(us "${VAL[lat_busy]}")" "$(us "${VAL[pp_busy_acks]}")" "$r" "-" "-"
# tail_rows ID KEY WHAT: the p99 and p999 of a latency row against its own p50.
tail_rows() {
    local p
    for p in 99 999; do
        local goal=2 name="p$p"
        [ $p = 999 ] && goal=5
        r=$(ratio "${VAL[${2}_p$p]}" "${VAL[$2]}")
        row "$1-p$p" "$3: one-way $name vs its own p50 (same runs)" "$(us "${VAL[${2}_p$p]}")" "$(us "${VAL[$2]}")" "$r" "<= ${goal}x" "$(met "$r" '<=' $goal)"
    done
}
tail_rows lat-2b lat "2-byte SEND, blocking"
tail_rows lat-2b-busy lat_busy "2-byte SEND, --busy-poll"
# The raw UDP ping-pongs' own tails, the same way: what the machine gives before softroce adds
# anything (a tail row above that fails by as much as these is the machine's).
for v in block busy; do
    p99=$( { [ $v = block ] && median <"$TMP/pp_p99"; } || { [ $v = busy ] && median <"$TMP/pp_p99busy"; } || echo "n/a")
    id=pp-2b-p99 what=blocking
    [ $v = busy ] && id=pp-2b-busy-p99 what=busy-polling
    r=$(ratio "$p99" "${VAL[pp_$v]}")
    row "$id" "raw UDP ping-pong, $what: one-way p99 vs its own p50 (same runs)" "$(us "$p99")" "$(us "${VAL[pp_$v]}")" "$r" "-" "-"
done
r=$(ratio "${VAL[rate_q1]}" 2)
row rate-64b-q1 "64-byte WRITE message rate, 1 QP vs the 2 Mpps goal" "$(mpps "${VAL[rate_q1]}")" "2 Mpps" "$r" ">= 1x" "$(met "$r" '>=' 1)"
for q in $RATE_QPS; do
    [ "$q" = 1 ] && continue
    r=$(ratio "${VAL[rate_q$q]}" "${VAL[rate_q1]}")
    row "rate-64b-q$q" "64-byte WRITE message rate, $q QPs vs 1 QP" "$(mpps "${VAL[rate_q$q]}")" "$(mpps "${VAL[rate_q1]}")" "$r" "-" "-"
done
r=$(ratio "${VAL[write_q1024]}" "${VAL[write]}")
row write-64k-q1024 "64 KiB WRITE, 1024 QPs (aggregate) vs 1 QP" "$(mbs "${VAL[write_q1024]}")" "$(mbs "${VAL[write]}")" "$r" ">= 0.8x" "$(met "$r" '>=' 0.8)"
r=$(ratio "${VAL[shim_write]}" "${VAL[shim_write_sr]}")
row shim-write-64k "ib_write_bw -x 1 -s 65536 through the shim (softroce run, both ends) vs softroce perf write, same flags (perftest's MB/sec)" "$(mbs "${VAL[shim_write]}")" "$(mbs "${VAL[shim_write_sr]}")" "$r" ">= 0.9x" "$(met "$r" '>=' 0.9)"
r=$(ratio "${VAL[shim_rate]}" "${VAL[shim_rate_sr]}")
row shim-write-64b "ib_write_bw -x 1 -s 64 message rate through the shim vs softroce perf write -s 64" "$(mpps "${VAL[shim_rate]}")" "$(mpps "${VAL[shim_rate_sr]}")" "$r" ">= 0.9x" "$(met "$r" '>=' 0.9)"
r=$(ratio "${VAL[shim_lat]}" "${VAL[shim_lat_sr]}")
row shim-lat-2b "ib_send_lat -x 1 -s 2 t_typical through the shim vs softroce perf send --lat -s 2" "$(us "${VAL[shim_lat]}")" "$(us "${VAL[shim_lat_sr]}")" "$r" "<= 1.1x" "$(met "$r" '<=' 1.1)"
r=$(ratio "${VAL[shim_lat_busy]}" "${VAL[shim_lat_busy_sr]}")
row shim-lat-2b-busy "ib_send_lat -x 1 -s 2 t_typical through the shim under softroce run --busy-poll vs softroce perf send --lat --busy-poll -s 2" "$(us "${VAL[shim_lat_busy]}")" "$(us "${VAL[shim_lat_busy_sr]}")" "$r" "<= 1.1x" "$(met "$r" '<=' 1.1)"
tail_rows shim-lat-2b shim_lat "ib_send_lat -x 1 -s 2 through the shim (perftest's 99% and 99.9% percentiles; p50 its t_typical)"
tail_rows shim-lat-2b-busy shim_lat_busy "the same under softroce run --busy-poll"
r=$(ratio "${VAL[ucx_put_bw]}" "${VAL[ucx_put_bw_tcp]}")
row ucx-put-bw-64k "UCX put_bw -D zcopy -s 65536 (UCT rc_verbs on softroce0:1, both ends under softroce run) vs UCT tcp on lo (ucx_perftest's MB/s, 2^20 B/s)" "$(mbs "${VAL[ucx_put_bw]}")" "$(mbs "${VAL[ucx_put_bw_tcp]}")" "$r" ">= 1x" "$(met "$r" '>=' 1)"
r=$(ratio "${VAL[ucx_put_bw_mtu1024]}" "${VAL[ucx_put_bw_tcp]}")
row ucx-put-bw-64k-mtu1024 "the same with softroce run --mtu 1024 at both ends (a 1500-byte link's MTU; UCX takes the port's active MTU, 4096 by default on loopback) vs UCT tcp on lo" "$(mbs "${VAL[ucx_put_bw_mtu1024]}")" "$(mbs "${VAL[ucx_put_bw_tcp]}")" "$r" "-" "-"
r=$(ratio "${VAL[ucx_put_bw_busy]}" "${VAL[ucx_put_bw_tcp]}")
row ucx-put-bw-64k-busy "the same with softroce run --busy-poll at both ends (UCX's threads, which spin on ibv_poll_cq, run the engine) vs UCT tcp on lo" "$(mbs "${VAL[ucx_put_bw_busy]}")" "$(mbs "${VAL[ucx_put_bw_tcp]}")" "$r" ">= 1x" "$(met "$r" '>=' 1)"
r=$(ratio "${VAL[ucx_am_lat]}" "${VAL[ucx_am_lat_tcp]}")
row ucx-am-lat-8b "UCX am_lat -s 8 one-way p50 (UCT rc_verbs) vs UCT tcp on lo" "$(us "${VAL[ucx_am_lat]}")" "$(us "${VAL[ucx_am_lat_tcp]}")" "$r" "<= 1.3x" "$(met "$r" '<=' 1.3)"
r=$(ratio "${VAL[ucx_am_lat_busy]}" "${VAL[ucx_am_lat_tcp]}")
row ucx-am-lat-8b-busy "the same with softroce run --busy-poll at both ends vs UCT tcp on lo" "$(us "${VAL[ucx_am_lat_busy]}")" "$(us "${VAL[ucx_am_lat_tcp]}")" "$r" "<= 1.3x" "$(met "$r" '<=' 1.3)"
r=$(ratio "${VAL[ucx_ucp_put_bw]}" "${VAL[ucx_ucp_put_bw_tcp]}")
row ucx-ucp-put-bw-64k "UCX ucp_put_bw -s 65536 (UCP, UCX_TLS=rc_verbs,ud_verbs) vs UCX_TLS=tcp (ucx_perftest's MB/s, 2^20 B/s)" "$(mbs "${VAL[ucx_ucp_put_bw]}")" "$(mbs "${VAL[ucx_ucp_put_bw_tcp]}")" "$r" ">= 1x" "$(met "$r" '>=' 1)"
r=$(ratio "${VAL[ucx_tag_lat]}" "${VAL[ucx_tag_lat_tcp]}")
row ucx-tag-lat-8b "UCX tag_lat -s 8 one-way p50 (UCP, UCX_TLS=rc_verbs,ud_verbs) vs UCX_TLS=tcp" "$(us "${VAL[ucx_tag_lat]}")" "$(us "${VAL[ucx_tag_lat_tcp]}")" "$r" "<= 1.3x" "$(met "$r" '<=' 1.3)"
r=$(ratio "${VAL[mpi_lat_tcp]}" "${VAL[mpi_lat]}")
row mpi-lat-8b "OpenMPI 8 B ping-pong, half the round trip (pml ucx, rc_verbs on softroce0:1, 2 ranks on one shared address) vs pml ob1 btl tcp on lo (ratio: TCP's over softroce's, so higher is better)" "$(us "${VAL[mpi_lat]}")" "$(us "${VAL[mpi_lat_tcp]}")" "$r" ">= 1x" "$(met "$r" '>=' 1)"
r=$(ratio "${VAL[mpi_bw]}" "${VAL[mpi_bw_tcp]}")
row mpi-bw-1m "OpenMPI 1 MiB bandwidth, each message checked (pml ucx on softroce) vs pml ob1 btl tcp on lo (MB/s, 10^6 B/s)" "$(mbs "${VAL[mpi_bw]}")" "$(mbs "${VAL[mpi_bw_tcp]}")" "$r" ">= 1x" "$(met "$r" '>=' 1)"
r=$(ratio "${VAL[mpi_lat_tcp]}" "${VAL[mpi_lat_busy]}")
row mpi-lat-8b-busy "the same latency with softroce run --busy-poll for both ranks (their spinning on ibv_poll_cq runs the engine) vs pml ob1 btl tcp on lo (TCP's over softroce's)" "$(us "${VAL[mpi_lat_busy]}")" "$(us "${VAL[mpi_lat_tcp]}")" "$r" ">= 1x" "$(met "$r" '>=' 1)"
r=$(ratio "${VAL[mpi_bw_busy]}" "${VAL[mpi_bw_tcp]}")
row mpi-bw-1m-busy "the same bandwidth with softroce run --busy-poll for both ranks vs pml ob1 btl tcp on lo" "$(mbs "${VAL[mpi_bw_busy]}")" "$(mbs "${VAL[mpi_bw_tcp]}")" "$r" ">= 1x" "$(met "$r" '>=' 1)"
r=$(ratio "${VAL[send_q4_wall]}" "${VAL[send_q4_meas]}")
row send-q4-wall "perf send -q 4 --check (64 KiB, -n $SENDQ4_ITERS per QP), both ends' wall clock vs the measured interval" "$(fmt "${VAL[send_q4_wall]}" '%.2f s')" "$(fmt "${VAL[send_q4_meas]}" '%.2f s')" "$r" "<= 2x" "$(met "$r" '<=' 2)"
row send-q4-rnr "perf send -q 4 --check: RNR NAKs the sender received (the most of the runs)" "$(fmt "${VAL[send_q4_rnr]}" '%.0f NAKs')" "-" "-" "0" "$( [ "${VAL[send_q4_rnr]}" = 0 ] && echo yes || echo no)"
row sweep-write "WRITE sweep (-a, 2 B..8 MiB, ${VAL[sweep_rows]} sizes): best size's bandwidth (picture: $SWEEP_SVG)" "$(mbs "${VAL[sweep_peak]}")" "-" "-" "-" "-"
row readme-impair "README's impairment example (1000 x 16 KiB WRITEs, 5% drop, 1% dup/reorder/corrupt, --check, -u 8), both ends, wall clock" "$(fmt "${VAL[readme_impair]}" '%.2f s')" "-" "-" "<= 30 s" "$(met "${VAL[readme_impair]}x" '<=' 30)"
row mem-per-qp-client "memory per QP, requester process (peak RSS, 1024 QPs vs 1)" "$(fmt "${VAL[mem_client]}" '%.0f B')" "-" "-" "-" "-"
row mem-per-qp-server "memory per QP, responder process (peak RSS, 1024 QPs vs 1)" "$(fmt "${VAL[mem_server]}" '%.0f B')" "-" "-" "-" "-"

rss_note() { # client|server
    [ -f "$TMP/rss.$1.raw" ] || { echo "n/a"; return; }
    awk '{printf "%s%s -> %s KiB", (NR > 1 ? ", " : ""), $1, $2}' "$TMP/rss.$1.raw"
}
{
    echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src Cargo.toml Cargo.lock bench/baselines 2>/dev/null || echo ' (with local changes to the code)'), $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), Linux $(uname -r), ${ELAPSED} s:"
    echo
    echo "    $CMDLINE"
    echo
    echo "| row | figure | softroce | baseline | ratio | goal | met |"
    echo "|---|---|---|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
    echo
    echo "Each figure is the median of $RUNS run(s); the runs, in order:"
    echo
    for k in tcp udp_plain udp_gso write write_shared write_alone send read pp_block lat lat_shared lat_p99 lat_p999 pp_busy pp_busy_acks lat_busy lat_busy_p99 lat_busy_p999 $(for q in $RATE_QPS; do echo "rate_q$q"; done) write_q1024 shim_write shim_write_sr shim_rate shim_rate_sr shim_lat shim_lat_p99 shim_lat_p999 shim_lat_sr shim_lat_busy shim_lat_busy_p99 shim_lat_busy_p999 shim_lat_busy_sr $UCX_KEYS $MPI_KEYS send_q4_wall readme_impair mem_client mem_server tcp_cpu write_cost write_cost_csw write_cost_sys rate_cost rate_cost_csw rate_cost_sys lat_cost lat_cost_csw lat_cost_sys insn_64b; do
        echo "- $k: ${SAMPLES[$k]:-${VAL[$k]}}"
    done
    echo "- send_q4: RNR NAKs per run $(paste -sd' ' "$TMP/q4.rnr" 2>/dev/null); measured intervals $(awk '{print $2}' "$TMP/q4.times" 2>/dev/null | paste -sd' ')"
    echo "- peak RSS with 1 -> 1024 QPs: requester $(rss_note client); responder $(rss_note server)"
    if [ $UCX = 1 ]; then
        echo "- UCP's lanes (UCX_LOG_LEVEL=info, client): ucp_put_bw over softroce $(ucx_lanes softroce ucp_put_bw), over TCP $(ucx_lanes tcp ucp_put_bw);" \
            "tag_lat over softroce $(ucx_lanes softroce tag_lat), over TCP $(ucx_lanes tcp tag_lat)"
    fi
    echo
    echo "Sizes: iperf3 -t $IPERF_SECS; UDP $UDP_BYTES bytes in ${ROCE_UDP_PAYLOAD}-byte datagrams; 64 KiB runs -n $BW_ITERS;" \
        "latency -n $LAT_ITERS; message rate $RATE_MSGS messages over all QPs; 1024 QPs -n $Q1024_ITERS each;" \
        "memory: write -s 2 -n 10; sweep -n $SWEEP_ITERS per size;" \
        "UCX: 64 KiB -n $UCX_BW_ITERS, 8 B latency -n $LAT_ITERS (ucx_perftest's default warm-up, at most a tenth of -n);" \
        "MPI: $MPI_LAT_N round trips of 8 B, $MPI_BW_N messages of 1 MiB."
    [ $BUSY = 1 ] || echo "This softroce has no --busy-poll flag: its row says n/a."
} >"$TMP/table.md"

mkdir -p "$(dirname "$OUT")"
cp "$TMP/table.md" "$OUT"
cat "$OUT"
echo >&2
echo "bench/run.sh: wrote $OUT" >&2

# Replaces the lines between <!-- NAME:begin --> and <!-- NAME:end --> of FILE with SOURCE.
splice() { # FILE NAME SOURCE
    grep -q "^<!-- $2:begin -->" "$1" && grep -q "^<!-- $2:end -->" "$1" || {
        fail "$1 has no <!-- $2:begin --> / <!-- $2:end --> lines"; return 0; }
    awk -v name="$2" -v src="$3" '
        $0 == "<!-- " name ":begin -->" { print; while ((getline l < src) > 0) print l; skip = 1; next }
        $0 == "<!-- " name ":end -->" { skip = 0 }
        !skip { print }' "$1" >"$TMP/splice" && cp "$TMP/splice" "$1"
    echo "bench/run.sh: updated the $2 section of $1" >&2
}
[ -n "$UPDATE" ] && splice "$UPDATE" bench "$OUT"
if [ $PROFILE = 1 ]; then
    bash bench/profile.sh --out "$TMP/profile.md" $( [ $QUICK = 1 ] && echo --quick)
    [ -n "$UPDATE" ] && splice "$UPDATE" profile "$TMP/profile.md"
fi
exit $FAILED
