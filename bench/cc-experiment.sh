#!/usr/bin/env bash
# A congestion experiment on loopback: N RDMA WRITE flows (the QPs of one `softroce perf write
# -q N` pair) through the impairment layer's marking bottleneck on the client's sends, once
# without congestion control and once with --cc dcqcn at both ends. Each flow's rate is sampled
# every 100 ms with `softroce stat --qp` while the fixed transfer runs. Writes, into the output
# directory:
#   rates.csv    run,flow,t_s,mbps,dcqcn_mbps (the flow's acknowledged-data rate from its
#                PSNs, and its DCQCN rate, empty at the line rate)
#   queue.csv    run,t_s,mean_queue_bytes (the mean depth the packets of each interval found)
#   rates.svg    `softroce plot --time rates.csv`: one panel per run, one line per flow
#   summary.md   per run: transfer time, goodput, queue max and mean, marks, drops,
#                retransmissions, ACK timeouts, CNPs, Jain's fairness index of the flows' mean
#                rates, and how steady the flows are (the coefficient of variation of each
#                flow's 100 ms rates, averaged over the flows)
#
#   bash bench/cc-experiment.sh [--out DIR] [--flows N] [--mb-per-flow M] [--rate MBPS]
#                               [--queue BYTES] [--mark BYTES] [--red KMAX PMAX] [--quick]
#
# --red KMAX PMAX marks as RED does between --mark (Kmin) and KMAX instead of a step at --mark.
# Defaults: 4 flows of 192 MiB each through 1000 Mb/s, a 1 MiB queue marking above 32 KiB,
# 64 KiB messages at MTU 4096; about 15 s per run. --quick (CI's smoke): 2 flows of 32 MiB.
# DCQCN runs with mlx5-like slow-start parameters scaled to this path (CC_PARAMS below): the
# paper's 55 us timers are tuned for a 40 Gb/s fabric whose queueing delay is microseconds;
# here a marked queue holds milliseconds.
#
# Run from the repository root; the release binary is built if missing (SOFTROCE= overrides).
# Every process runs under a deadline (`timeout`), and the trap stops what is left.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh

OUT=target/cc-experiment
FLOWS=4
MB=192
RATE=1000
QUEUE=$((1 << 20))
MARK=$((32 << 10))
MARK_MAX=
MARK_PROB=1
CC_PARAMS=${CC_PARAMS:-"rpg_max_rate=4000,rpg_time_reset=150,rpg_ai_rate=10,rpg_hai_rate=100,rpg_byte_reset=1000000,dce_tcp_rtt=300,rate_reduce_monitor_period=300"}
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT=$2; shift 2 ;;
        --flows) FLOWS=$2; shift 2 ;;
        --mb-per-flow) MB=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --queue) QUEUE=$2; shift 2 ;;
        --mark) MARK=$2; shift 2 ;;
        --red) MARK_MAX=$2; MARK_PROB=$3; shift 3 ;;
        --quick) FLOWS=2; MB=32; shift ;;
        *) echo "cc-experiment.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
SIZE=65536
MTU=4096
ITERS=$((MB * 1024 * 1024 / SIZE))
SR=${SOFTROCE:-target/release/softroce}
[ -x "$SR" ] || cargo build --release --locked --bin softroce >&2
mkdir -p "$OUT"
bench_tmp cc
export SOFTROCE_STAT_DIR=$TMP/stat
mkdir -p "$SOFTROCE_STAT_DIR"

echo "run,flow,t_s,mbps,dcqcn_mbps" >"$OUT/rates.csv"
echo "run,t_s,mean_queue_bytes" >"$OUT/queue.csv"
{
    echo "| run | transfer [s] | goodput [Mb/s] | queue max [KiB] | queue mean [KiB] | CE marks | drops | retransmitted | ACK timeouts | CNPs | Jain | rate CoV |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
} >"$OUT/summary.md"

# one RUN CCFLAGS...: one server/client pair; appends to the CSVs and the summary.
one() {
    local run=$1
    shift
    local tcp udp
    tcp=$(( (RANDOM % 2000) + 21000 ))
    udp=$(( (RANDOM % 2000) + 31000 ))
    local common=(perf write -q "$FLOWS" -s "$SIZE" -n "$ITERS" -m "$MTU" -p "$tcp" --roce-port "$udp" --counters "$@")
    timeout 120 "$SR" "${common[@]}" --bind 127.0.0.1 >"$TMP/$run.server.out" 2>"$TMP/$run.server.err" &
    started $!
    local spid=$!
    # The client fails at once while the server is not listening yet: start it again then.
    local cpid t0 i
    for i in $(seq 1 100); do
        # Not under `timeout`: stat needs softroce's own PID; the loop below is its deadline.
        "$SR" "${common[@]}" --json --bind 127.0.0.2 \
            --bottleneck "$RATE" --bottleneck-queue "$QUEUE" --bottleneck-mark "$MARK" \
            --bottleneck-mark-max "${MARK_MAX:-$MARK}" --bottleneck-mark-prob "$MARK_PROB" \
            127.0.0.1 >"$TMP/$run.client.out" 2>"$TMP/$run.client.err" &
        cpid=$!
        started $cpid
        t0=$(date +%s.%N)
        # Sample until the client ends; each sample is one `stat` (a few ms).
        while kill -0 "$cpid" 2>/dev/null; do
            if awk -v now="$(date +%s.%N)" -v t0="$t0" 'BEGIN { exit !(now - t0 > 120) }'; then
                kill "$cpid"
                echo "cc-experiment.sh: $run: the client ran past 120 s" >&2
            fi
            if "$SR" stat "$cpid" --qp >"$TMP/snap" 2>/dev/null; then
                echo "T $(date +%s.%N)" >>"$TMP/$run.samples"
                cat "$TMP/snap" >>"$TMP/$run.samples"
            fi
            sleep 0.1
        done
        if wait "$cpid"; then break; fi
        if ! grep -q "connect to" "$TMP/$run.client.err"; then
            cat "$TMP/$run.client.err" >&2
            return 1
        fi
        rm -f "$TMP/$run.samples"
        sleep 0.1
    done
    wait "$spid"
    # Per flow: acknowledged-data rate from the send PSNs (packets of MTU bytes), the DCQCN rate; the
    # queue's mean depth per interval from its cumulative counters.
    awk -v run="$run" -v t0="$t0" -v mtu="$MTU" -v rates="$OUT/rates.csv" -v queue="$OUT/queue.csv" '
        function field(name,   i) { for (i = 1; i < NF; i++) if ($i == name) return $(i + 1); return "" }
        $1 == "T" { t = $2 - t0; next }
        / qpn / {
            # Acknowledged PSN = next PSN - outstanding: unlike the next PSN, it never goes
            # back when go-back-N resends.
            q = field("qpn"); psn = (field("sq_psn") - field("outstanding") + 16777216) % 16777216; r = field("rate_mbps")
            if (q in lt) {
                d = psn - lp[q]; if (d < 0) d += 16777216
                dt = t - lt[q]
                if (dt > 0) printf "%s,qp%s,%.3f,%.1f,%s\n", run, q, t, d * mtu * 8 / dt / 1e6, (r == "line" ? "" : r) >> rates
            }
            lt[q] = t; lp[q] = psn; next
        }
        / bottleneck_pkts / {
            p = field("bottleneck_pkts"); s = field("bottleneck_queue_sum")
            if (havep && p > lastp) printf "%s,%.3f,%.0f\n", run, t, (s - lasts) / (p - lastp) >> queue
            lastp = p; lasts = s; havep = 1
        }' "$TMP/$run.samples"
    local c s secs
    c=$(grep '^counters:' "$TMP/$run.client.err" | tr ' ' '\n')
    s=$(grep '^counters:' "$TMP/$run.server.err" | tr ' ' '\n')
    get() { echo "$1" | awk -F= -v k="$2" '$1 == k { v = $2 } END { print v + 0 }'; }
    secs=$(sed -n 's/.*"seconds":\([0-9.e+-]*\).*/\1/p' "$TMP/$run.client.out" | head -1)
    local jain
    jain=$(awk -F, -v run="$run" '$1 == run { s[$2] += $4; n[$2]++ }
        END { for (f in s) { m = s[f] / n[f]; a += m; b += m * m; k++ } if (k && b) printf "%.3f", a * a / (k * b); else print "-" }' "$OUT/rates.csv")
    # How steady each flow's rate is: the standard deviation of its 100 ms samples over
    # their mean, averaged over the flows.
    local cov
    cov=$(awk -F, -v run="$run" '$1 == run { s[$2] += $4; q[$2] += $4 * $4; n[$2]++ }
        END { for (f in s) { m = s[f] / n[f]; v = q[f] / n[f] - m * m; if (m > 0) { c += sqrt(v > 0 ? v : 0) / m; k++ } } if (k) printf "%.2f", c / k; else print "-" }' "$OUT/rates.csv")
    local pkts sum
    pkts=$(get "$c" bottleneck_pkts)
    sum=$(get "$c" bottleneck_queue_sum)
    awk -v run="$run" -v secs="$secs" -v bytes=$((FLOWS * ITERS * SIZE)) -v qmax="$(get "$c" bottleneck_queue_max)" \
        -v pkts="$pkts" -v sum="$sum" -v marks="$(get "$c" bottleneck_marked)" -v drops="$(get "$c" bottleneck_dropped)" \
        -v rtx="$(get "$c" retransmit_pkts)" -v tmo="$(get "$c" timeouts)" -v cnps="$(get "$s" np_cnp_sent)" -v jain="$jain" -v cov="$cov" \
        'BEGIN { printf "| %s | %.2f | %.0f | %.0f | %.0f | %d | %d | %d | %d | %d | %s | %s |\n",
            run, secs, bytes * 8 / secs / 1e6, qmax / 1024, (pkts ? sum / pkts / 1024 : 0), marks, drops, rtx, tmo, cnps, jain, cov }' \
        >>"$OUT/summary.md"
}

one none --cc none
one dcqcn --cc dcqcn --cc-param "$CC_PARAMS"
if [ "$(wc -l <"$OUT/rates.csv")" -gt 1 ]; then
    "$SR" plot --time "$OUT/rates.csv" -o "$OUT/rates.svg"
else
    echo "cc-experiment.sh: the runs ended before two samples; no plot" >&2
fi
echo "$FLOWS flows x $MB MiB of 64 KiB WRITEs through $RATE Mb/s, queue $QUEUE B, marking above $MARK B:"
cat "$OUT/summary.md"
echo "(rates: $OUT/rates.csv, $OUT/rates.svg; queue: $OUT/queue.csv)"
