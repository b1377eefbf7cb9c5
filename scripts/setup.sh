#!/usr/bin/env bash
# Installs what softroce's build and tests need on a fresh Debian 12 machine and builds it.
# Idempotent; run as root (or with sudo available).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v tshark >/dev/null 2>&1 || need_apt+=(tshark)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
# libFuzzer (the fuzz targets, scripts/fuzz.sh) is C++.
command -v c++ >/dev/null 2>&1 || need_apt+=(g++)
# The libibverbs shim's tests: Debian's verbs programs run under it, and C tests compile
# against rdma-core's headers.
[ -f /usr/include/infiniband/verbs.h ] || need_apt+=(libibverbs-dev)
command -v ibv_rc_pingpong >/dev/null 2>&1 || need_apt+=(ibverbs-utils)
command -v ib_write_bw >/dev/null 2>&1 || need_apt+=(perftest)
# The shim's symbol test compares with the real libibverbs.so.1; tests/rdma_core/run.sh runs
# rdma-core's own test suite, which python3-pyverbs ships, on Debian's python3.
dpkg -s libibverbs1 >/dev/null 2>&1 || need_apt+=(libibverbs1)
dpkg -s python3-pyverbs >/dev/null 2>&1 || need_apt+=(python3-pyverbs)
if [ ${#need_apt[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    # tshark asks whether non-root users may capture; the default answer (no) is fine.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections 2>/dev/null || true
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

command -v cargo >/dev/null 2>&1 || { echo "setup: cargo (Rust) is required" >&2; exit 1; }
cargo build --release --locked
echo "setup: done; the binary is target/release/softroce"
