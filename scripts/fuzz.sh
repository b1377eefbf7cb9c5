#!/usr/bin/env bash
# Runs the cargo-fuzz targets in fuzz/ for a given time each, seeded with the committed corpus.
#
#   bash scripts/fuzz.sh TARGET|all SECONDS
#
# Installs cargo-fuzz if it is missing and builds every target once (release, with debug
# assertions and overflow checks). New inputs the fuzzer finds go to a temporary directory, so
# the committed corpus only changes when someone copies a reproducer into it on purpose.
# Exits non-zero at the first crash, hang or invariant failure, naming the reproducer (kept in
# fuzz/artifacts/TARGET/); prints each target's executions and time. libFuzzer needs nightly
# compiler features: the stable toolchain allows them with RUSTC_BOOTSTRAP=1.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -ne 2 ] || ! [[ "$2" =~ ^[0-9]+$ ]]; then
    echo "usage: $0 TARGET|all SECONDS" >&2
    exit 2
fi
which_target=$1
seconds=$2

export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi
command -v c++ >/dev/null 2>&1 || { echo "fuzz: a C++ compiler is needed for libFuzzer (apt-get install g++)" >&2; exit 1; }

cd fuzz
mapfile -t all_targets < <(cargo fuzz list)
if [ "$which_target" = all ]; then
    targets=("${all_targets[@]}")
else
    printf '%s\n' "${all_targets[@]}" | grep -qx "$which_target" \
        || { echo "fuzz: no target $which_target (have: ${all_targets[*]})" >&2; exit 2; }
    targets=("$which_target")
fi

echo "== building ${#targets[@]} target(s)"
cargo fuzz build -O -a

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
status=0
summary=()
for t in "${targets[@]}"; do
    mkdir -p "$scratch/$t" "artifacts/$t"
    log="$scratch/$t.log"
    echo "== $t for ${seconds}s"
    # -timeout: one input taking 30 s is a hang. -rss_limit_mb: a leak or unbounded queue.
    if cargo fuzz run -O -a "$t" "$scratch/$t" "corpus/$t" -- \
        -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 \
        -artifact_prefix="artifacts/$t/" -print_final_stats=1 >"$log" 2>&1; then
        runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
        summary+=("$t: $runs executions in ${seconds}s, no failure")
    else
        status=1
        # The failure (panic message or libFuzzer's verdict), then how to reproduce it; the
        # input's bytes, which libFuzzer prints in full, are left out.
        grep -m1 -A4 -E "panicked at|ERROR: libFuzzer|==ERROR|Test unit written" "$log" || true
        grep -v "^\s*\[" "$log" | grep -A8 -m1 "Failing input" || tail -n 20 "$log"
        summary+=("$t: FAILED (reproducer in fuzz/artifacts/$t/; log above)")
        break
    fi
done
echo "== fuzz summary"
printf '%s\n' "${summary[@]}"
exit $status
