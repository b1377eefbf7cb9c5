#!/usr/bin/env bash
# rdma-core's own conformance suite for libibverbs (tests/ of rdma-core v44.0, run with
# Debian 12's python3-pyverbs 44.0) against the softroce shim, under `softroce run`.
#
# The tests are not in this repository: Debian ships them in python3-pyverbs
# (/usr/share/doc/rdma-core/tests, some files gzipped), built from the same v44.0 tarball as
# pyverbs itself. Where dpkg left the doc files out (a path-exclude for /usr/share/doc), the
# package is downloaded again with apt and unpacked to a scratch folder.
#
# usage: tests/rdma_core/run.sh [--update]
#   Writes the per-module table to target/rdma_core/RESULTS.md and fails if a test fails or
#   errors, the run does not finish, or a module has fewer passing tests than the committed
#   tests/rdma_core/RESULTS.md. --update rewrites the committed table instead.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
update=0
[ "${1:-}" = "--update" ] && update=1

py=/usr/bin/python3 # Debian's: pyverbs is in its dist-packages, not in another python's
want_version=44.0
have=$(dpkg-query -W -f '${Version}' python3-pyverbs 2>/dev/null || true)
case "$have" in
    "$want_version"-*) ;;
    *) echo "rdma_core: python3-pyverbs $want_version-* is needed (have '${have:-none}'); scripts/setup.sh installs it" >&2; exit 1 ;;
esac

work=$root/target/rdma_core
rm -rf "$work/tests"
mkdir -p "$work"
src=/usr/share/doc/rdma-core/tests
if [ ! -f "$src/run_tests.py" ]; then
    (cd "$work" && rm -f python3-pyverbs_*.deb && apt-get download -q "python3-pyverbs=$have" >/dev/null)
    rm -rf "$work/deb" && dpkg-deb -x "$work"/python3-pyverbs_*.deb "$work/deb"
    src=$work/deb/usr/share/doc/rdma-core/tests
fi
cp -r "$src" "$work/tests"
gunzip -f "$work"/tests/*.gz

cargo build --locked -q
softroce=$root/target/debug/softroce

# The device's address: 127.0.0.1, the first address of its interface (lo), which is where
# rdma-core's rdmacm tests take the address they bind and connect to (base.py: the
# interface under /sys/class/infiniband/softroce0/device/net, then `ip addr show` of it), as
# on rxe, whose GIDs are its interface's addresses. Its own UDP port (14791, not RoCE's
# 4791) keeps it apart from the shim tests that cargo runs in parallel, some on
# 127.0.0.1:4791; every process of the run has the same SOFTROCE_BIND and so sends to that
# port. GID index 1 is the IPv4-mapped address (RoCE v2).
#
# Two devices, as on a host with two rxe devices: softroce0 at 127.0.0.1 and softroce1 at
# 127.0.0.2 (same UDP port). The run names no device (no --dev), so the tests that take one
# take the first with an IP GID, softroce0, and test_device's tests that go through the
# device list (open, query device, port, P_Key and GID) do so for both. No test of v44 needs
# a second device otherwise.
# Huge pages: test_odp's two huge-page tests and test_parent_domain's need 2 MiB pages
# reserved in the system (they skip when /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
# is 0). As root (CI) the run reserves HUGE_PAGES of them if none are, and gives them back
# when it ends, whatever the end; otherwise those three tests skip.
huge=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
HUGE_PAGES=16 # 32 MiB: each test maps one or two pages per player
if [ "$(id -u)" -eq 0 ] && [ -w "$huge" ] && [ "$(cat "$huge")" -eq 0 ]; then
    trap 'echo 0 > "$huge"' EXIT
    echo "$HUGE_PAGES" > "$huge" || true
fi
SECONDS=0
set +e
# The suite draws QP attributes at random (caps, and whether ibv_create_qp_ex gets creation
# flags, which send it to the extended verbs softroce lacks): Python's random is seeded, so
# that two runs of one build give one table (RDMA_CORE_SEED picks another draw).
seed=${RDMA_CORE_SEED:-44}
(cd "$work" && timeout 300 "$softroce" run --bind 127.0.0.1:14791 --bind 127.0.0.2:14791 -- \
    "$py" -c 'import random, runpy, sys
random.seed(int(sys.argv[1]))
sys.path.insert(0, "tests")
sys.argv = ["tests/run_tests.py"] + sys.argv[2:]
runpy.run_path("tests/run_tests.py", run_name="__main__")' \
    "$seed" --gid 1 -v) >"$work/output.txt" 2>&1
rc=$?
set -e
echo "rdma_core: run_tests.py (seed $seed) exited $rc after ${SECONDS} s; output in $work/output.txt"

if [ $update -eq 1 ]; then
    "$py" tests/rdma_core/table.py "$work/output.txt" tests/rdma_core/RESULTS.md
else
    "$py" tests/rdma_core/table.py "$work/output.txt" "$work/RESULTS.md" \
        --baseline tests/rdma_core/RESULTS.md
fi
