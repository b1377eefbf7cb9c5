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
# UCX over softroce (ibverbs/tests/ucx.rs): ucx_info and ucx_perftest with their libraries.
command -v ucx_perftest >/dev/null 2>&1 || need_apt+=(ucx-utils libucx0)
# librdmacm programs under the shim (ibverbs/tests/rdmacm.rs): rping, ucmatose, rdma_server, qperf.
{ command -v rping && command -v qperf && [ -f /usr/include/rdma/rdma_cma.h ]; } >/dev/null 2>&1 || need_apt+=(rdmacm-utils librdmacm-dev qperf)
# rsockets under the shim (ibverbs/tests/rsockets.rs): iperf3 under librdmacm1's
# librspreload.so (rstream, riostream and rcopy come with rdmacm-utils).
command -v iperf3 >/dev/null 2>&1 || need_apt+=(iperf3)
# libfabric's verbs provider and OpenMPI over UCX (ibverbs/tests/libfabric.rs, mpi.rs,
# scripts/mpi-run.sh): fi_info, fi_pingpong, mpirun, mpicc.
{ command -v fi_pingpong && command -v mpirun && command -v mpicc; } >/dev/null 2>&1 || need_apt+=(libfabric-bin libfabric1 openmpi-bin libopenmpi-dev)
# rdma-core's rdmacm tests ask `ip -j addr` for the device's address; the libfabric MSG test
# makes a network namespace with `unshare -n` and `ip link`.
{ command -v ip && command -v unshare; } >/dev/null 2>&1 || need_apt+=(iproute2 util-linux)
if [ ${#need_apt[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    # tshark asks whether non-root users may capture; the default answer (no) is fine.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections 2>/dev/null || true
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

# rdma4py (PyPI `ibverbs`, ibverbs/tests/rdma4py.rs): its abi3 wheel, pinned by version and
# hash, unpacked where the test puts it on PYTHONPATH for Debian's python3. Any pip will do
# (the wheel is pure files); Debian's python3-pip when there is none.
rdma4py_version=2026.10.22
rdma4py_sha256=e4fc7aac60e9f2232633e841eaaab7fc8f3adc1014e6945221e028fedc148804
rdma4py_dir=target/python/rdma4py-$rdma4py_version
if [ ! -f "$rdma4py_dir/ibverbs/__init__.py" ]; then
    pip=(python3 -m pip)
    if ! python3 -m pip --version >/dev/null 2>&1; then
        SUDO=""
        [ "$(id -u)" -eq 0 ] || SUDO="sudo"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-pip
        pip=(/usr/bin/python3 -m pip)
    fi
    wheels=$(mktemp -d)
    "${pip[@]}" download -q --no-deps --only-binary=:all: --python-version 3.11 \
        --platform manylinux_2_28_x86_64 -d "$wheels" "ibverbs==$rdma4py_version"
    echo "$rdma4py_sha256  $(ls "$wheels"/ibverbs-*.whl)" | sha256sum -c --quiet
    rm -rf "$rdma4py_dir" && mkdir -p "$rdma4py_dir"
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
        "$wheels"/ibverbs-*.whl "$rdma4py_dir"
    rm -rf "$wheels"
fi

command -v cargo >/dev/null 2>&1 || { echo "setup: cargo (Rust) is required" >&2; exit 1; }
# Every crate the build and the tests need (dev-dependencies too), so that `cargo test
# --locked` after setup needs no network; building the tests offline proves it.
cargo fetch --locked
cargo build --release --locked
cargo test --locked --offline --no-run -q
echo "setup: done; the binary is target/release/softroce; the tests are built (cargo test --locked runs them offline)"
