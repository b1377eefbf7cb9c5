#!/usr/bin/env bash
# Checks that a table written by bench/run.sh has every row, each with a softroce figure (a
# number, or "n/a (flag missing)" where the binary lacks --busy-poll, "n/a (perftest missing)"
# for the shim's rows where perftest could not be installed, "n/a (ucx-utils missing)" for the
# UCX rows where ucx_perftest could not be installed, "n/a (openmpi missing)" for the MPI rows
# where OpenMPI could not be installed, "n/a (perf cannot count)" for the system-call rows where
# perf cannot count system calls, "n/a (valgrind missing)" for the instruction row). It does not judge how
# fast anything was (benchmarks are not tests with timing assertions), with one exception: the
# README impairment example must finish in seconds, as README promises (see the end).
#
#   bash bench/check-rows.sh FILE.md
set -euo pipefail
f=${1:?usage: bench/check-rows.sh FILE.md}
rows="write-64k-vs-tcp write-64k-vs-udp-gso write-64k-vs-udp-plain shared-write-64k
shared-write-64k-vs-alone shared-lat-2b send-64k read-64k lat-2b
lat-2b-busy lat-2b-p99 lat-2b-p999 lat-2b-busy-p99 lat-2b-busy-p999 pp-2b-p99 pp-2b-busy-p99 pp-2b-busy-acks lat-2b-busy-vs-acks rate-64b-q1 rate-64b-q2 rate-64b-q4 rate-64b-q8 rate-64b-q16 rate-64b-q32
rate-64b-q64 write-64k-q1024 shim-write-64k shim-write-64b shim-lat-2b shim-lat-2b-busy
shim-lat-2b-p99 shim-lat-2b-p999 shim-lat-2b-busy-p99 shim-lat-2b-busy-p999
ucx-put-bw-64k ucx-put-bw-64k-mtu1024 ucx-put-bw-64k-busy ucx-am-lat-8b ucx-am-lat-8b-busy
ucx-ucp-put-bw-64k ucx-tag-lat-8b mpi-lat-8b mpi-bw-1m mpi-lat-8b-busy mpi-bw-1m-busy send-q4-wall send-q4-rnr
readme-impair sweep-write mem-per-qp-client mem-per-qp-server write-64k-cpu write-64k-csw
rate-64b-cpu rate-64b-csw lat-2b-cpu lat-2b-csw write-64k-sys rate-64b-sys lat-2b-sys insn-64b"
bad=0
n=0
for r in $rows; do
    n=$((n + 1))
    line=$(grep -F "| $r |" "$f" || true)
    if [ -z "$line" ]; then
        echo "check-rows: row $r is missing" >&2; bad=1; continue
    fi
    # | id | figure | softroce | baseline | ...: the softroce column is the fourth field.
    sr=$(echo "$line" | awk -F'|' '{gsub(/^ +| +$/, "", $4); print $4}')
    base=$(echo "$line" | awk -F'|' '{gsub(/^ +| +$/, "", $5); print $5}')
    if ! [[ $sr =~ ^[0-9.]+\ (MB/s|us|Mpps|B|s|NAKs|s/GB|/msg)$ || $sr == "n/a (flag missing)" || $sr == "n/a (perftest missing)"
        || $sr == "n/a (perf cannot count)" || $sr == "n/a (valgrind missing)"
        || $sr == "n/a (ucx-utils missing)" || $sr == "n/a (openmpi missing)" ]]; then
        echo "check-rows: row $r has no softroce figure: '$sr'" >&2; bad=1
    fi
    if [[ $base == FAILED* ]]; then
        echo "check-rows: row $r: its baseline failed" >&2; bad=1
    fi
done
# One figure is a promise rather than a measurement: README says its impairment example shows
# recovery in seconds (it took 63 s at perftest's default -u 14). 30 s is ten times what it
# takes on a 2-core machine; more means the example (or the recovery) regressed.
impair=$(grep -F "| readme-impair |" "$f" | awk -F'|' '{gsub(/^ +| s +$/, "", $4); print $4}' || true)
if [[ $impair =~ ^[0-9.]+$ ]] && awk -v t="$impair" 'BEGIN {exit !(t > 30)}'; then
    echo "check-rows: README's impairment example took $impair s (more than 30 s)" >&2; bad=1
fi
[ $bad = 0 ] && echo "check-rows: all $n rows present in $f"
exit $bad
