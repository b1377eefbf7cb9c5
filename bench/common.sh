# Sourced by bench/run.sh and bench/profile.sh (from the repository root): the run's temporary
# directory and the trap that, however the script ends, stops every process the run started
# in the background and removes the directory.
#
# Runs happen in command substitutions (subshells), so the pids of what they start are kept in
# a file ($TMP/pids, appended by `started PID`), not in a variable.

# bench_tmp NAME: creates $TMP and installs the traps.
bench_tmp() {
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/softroce-$1.XXXXXX")
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
}

started() { echo "$1" >>"$TMP/pids"; }

bench_cleanup() {
    local p
    if [ -f "$TMP/pids" ]; then
        while read -r p; do kill "$p" 2>/dev/null || true; done <"$TMP/pids"
    fi
    rm -rf "$TMP"
}
