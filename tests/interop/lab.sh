#!/usr/bin/env bash
# rxe lab: Linux kernel soft-RoCE (rdma_rxe) peers under QEMU (TCG), inside a
# network namespace this script creates, for interop tests and packet fixtures.
#
# Usage (as root, Debian 12):
#   tests/interop/lab.sh deps       install host packages (apt, idempotent)
#   tests/interop/lab.sh build      kernel + busybox initramfs into the cache dir
#   tests/interop/lab.sh up         netns + bridge + taps, boot guests a and b
#   tests/interop/lab.sh exec G CMD run CMD in guest G (a|b); prints output, exits with CMD's status
#   tests/interop/lab.sh console G  interactive serial console of guest G (Ctrl-] quits)
#   tests/interop/lab.sh status     what is running
#   tests/interop/lab.sh capture    run rxe<->rxe tests under tshark, write tests/data/rxe/*
#   tests/interop/lab.sh down       stop QEMU and tshark, delete the netns
#   tests/interop/lab.sh run-all    deps, build, up, capture, down
#   tests/interop/lab.sh nsexec CMD run a host command inside the lab namespace
#
# Layout (all addresses live only inside the namespace; nothing outside is touched):
#   netns  $NETNS (default "srlab")
#   bridge srbr0  192.0.2.1/24 (TEST-NET-1)  <- a user-space engine under test binds here
#   tap    srtap-a -> guest a, eth0 192.0.2.11, MAC 52:54:00:c0:02:0b, rxe0
#   tap    srtap-b -> guest b, eth0 192.0.2.12, MAC 52:54:00:c0:02:0c, rxe0
# The guests' serial consoles are unix sockets $LAB_DIR/run/G/console.sock with
# everything the guest prints logged in $LAB_DIR/run/G/console.log.
#
# Environment:
#   SOFTROCE_LAB_DIR       cache/run dir (default /var/tmp/softroce-lab), outside the repo
#   SOFTROCE_LAB_NETNS     namespace name (default srlab)
#   SOFTROCE_LAB_KPKG      kernel package (default: what linux-image-amd64 depends on)
#   SOFTROCE_LAB_FIXTURES  where `capture` writes (default <repo>/tests/data/rxe)
#   SOFTROCE_LAB_ONLY      space-separated fixture names to (re)capture (default: all)
#   SOFTROCE_LAB_BOOT_TIMEOUT  seconds to wait for a guest to boot (default 240)
#
# Connecting a user-space engine to a guest later: run the engine inside the
# namespace (`lab.sh nsexec <engine ...>`, or `ip netns exec srlab ...`) bound to
# 192.0.2.1 UDP 4791, and drive the kernel peer with `lab.sh exec a '...'`, e.g.
#   lab.sh exec a 'ibv_rc_pingpong -g 1 -n 10 192.0.2.1'
# (the guest's IPv4-mapped GID is index 1: -g 1 for ibv_*_pingpong, -x 1 for perftest).
#
# Running the same tests on a real Linux machine without the VM
# ---------------------------------------------------------------
# Any Linux host whose kernel has CONFIG_RDMA_RXE (Debian/Ubuntu stock kernels do)
# can be a peer directly; use two machines (or two network namespaces with a veth
# pair) because rxe does not talk to itself over one netdev in a useful way:
#   apt-get install rdma-core ibverbs-utils ibverbs-providers perftest rdmacm-utils tshark
#   modprobe rdma_rxe            # plus crc32_generic if `rdma link add` says ENOENT
#   rdma link add rxe0 type rxe netdev <if>      # <if>: the Ethernet interface
#   rdma link show; ibv_devinfo -v | grep -A3 GID # the IPv4-mapped GID is usually index 1
#   server: ibv_rc_pingpong -d rxe0 -g 1 -n 20 -s 4096
#   client: ibv_rc_pingpong -d rxe0 -g 1 -n 20 -s 4096 <server-ip>
#   capture: tshark -i <if> -f 'udp port 4791' -w out.pcapng
#   cleanup: rdma link delete rxe0
# softroce as the other end (on the second machine, no rxe needed there):
#   rxe host:      ibv_rc_pingpong -d rxe0 -g 1 -c          | ib_write_bw -d rxe0 -x 1 -F
#   softroce host: softroce pingpong -g 1 -c --bind <my-ip> <rxe-host>
#                  softroce perf write -x 1 --bind <my-ip> <rxe-host>
#   data check:    sr_datacheck write -x 1 (gcc -O2 -o sr_datacheck tests/interop/datacheck.c
#                  -libverbs) against `softroce perf write --check -x 1 --bind <my-ip> <host>`
#   and the reverse roles. The flags of every case are in tests/interop/suite.sh.
# The commands `capture` runs are listed in capture_all() below and in
# tests/data/rxe/README.md; run the server half on one host and the client half
# (with the server's address appended) on the other. Keep such traffic on a
# private test link; do not point it at machines that are not yours.

set -euo pipefail

LAB_DIR=${SOFTROCE_LAB_DIR:-/var/tmp/softroce-lab}
DATACHECK_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/datacheck.c
MWCHECK_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/mwcheck.c
OOB_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/oob.h # included by both
NETNS=${SOFTROCE_LAB_NETNS:-srlab}
BOOT_TIMEOUT=${SOFTROCE_LAB_BOOT_TIMEOUT:-240}
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
FIXTURES=${SOFTROCE_LAB_FIXTURES:-$REPO_ROOT/tests/data/rxe}
RUN_DIR=$LAB_DIR/run
BRIDGE=srbr0
HOST_IP=192.0.2.1
NET_PREFIX=24
GUESTS=(a b)
declare -A GUEST_IP=([a]=192.0.2.11 [b]=192.0.2.12)
declare -A GUEST_MAC=([a]=52:54:00:c0:02:0b [b]=52:54:00:c0:02:0c)
GUEST_MEM=512

export DEBIAN_FRONTEND=noninteractive
export LC_ALL=C

log() { printf '[lab %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }

# ---------------------------------------------------------------- deps
DEB_PKGS=(qemu-system-x86 busybox-static cpio kmod socat ibverbs-utils ibverbs-providers
          rdmacm-utils perftest rdma-core tshark wireshark-common iproute2 procps coreutils
          gcc libc6-dev libibverbs-dev)

cmd_deps() {
    need_root
    local missing=() p
    for p in "${DEB_PKGS[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then log "deps: all installed"; return 0; fi
    log "deps: installing ${missing[*]}"
    echo 'wireshark-common wireshark-common/install-setuid boolean false' | debconf-set-selections
    timeout 600 apt-get update -qq
    timeout 1200 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    log "deps: done"
}

# ---------------------------------------------------------------- build
kernel_pkg() {
    if [ -n "${SOFTROCE_LAB_KPKG:-}" ]; then echo "$SOFTROCE_LAB_KPKG"; return; fi
    if [ -f "$LAB_DIR/kernel.pkg" ]; then cat "$LAB_DIR/kernel.pkg"; return; fi
    local p
    p=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
    if [ -z "$p" ]; then timeout 600 apt-get update -qq; p=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}'); fi
    [ -n "$p" ] || die "cannot find the kernel package linux-image-amd64 depends on"
    echo "$p"
}

# sch_htb: the rate limit the congestion cases mark behind (fq_codel is built in).
GUEST_MODULES=(virtio_pci virtio_net rdma_rxe ib_uverbs rdma_ucm crc32_generic sch_netem sch_htb)
GUEST_BINS=(ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_srq_pingpong ibv_devinfo ibv_devices
            ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw ib_send_lat ib_write_lat ib_read_lat ib_atomic_lat
            rping udaddy ucmatose mckey rstream riostream rdma_xserver rdma_xclient rdma tc)

write_guest_init() {
    cat >"$1" <<'EOF'
#!/bin/sh
# rxe lab guest init (generated by tests/interop/lab.sh)
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox --install -s /bin
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
dmesg -n 1
while read -r m; do insmod "$m" || echo "lab: insmod $m failed"; done </etc/lab/modules
hostname "lab-${lab_name:-x}"
ip link set lo up
ip link set eth0 up
[ -n "${lab_ip:-}" ] && ip addr add "$lab_ip" dev eth0
rdma link add rxe0 type rxe netdev eth0 || echo "lab: rdma link add failed"
# wait (bounded) for the IPv4-mapped GID (index 1) to appear
i=0
while [ $i -lt 50 ]; do
    g=$(cat /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null || true)
    case "$g" in 0000:0000:0000:0000:0000:ffff:*) break;; esac
    i=$((i+1)); sleep 0.2
done
echo "lab: gid1=$g"
echo "LAB-READY ${lab_name:-x} $(cut -d' ' -f1 /proc/uptime)"
# The serial console: a non-interactive shell reading commands from ttyS0, with
# echo off (no prompt, no echo: easy to drive from a script). For an
# interactive shell type `stty echo; sh -i`.
while :; do
    setsid sh -c 'stty -echo 2>/dev/null; exec sh /dev/ttyS0' </dev/ttyS0 >/dev/ttyS0 2>&1
    sleep 1
done
EOF
    chmod 755 "$1"
}

cmd_build() {
    need_root
    command -v qemu-system-x86_64 >/dev/null || die "run '$0 deps' first"
    mkdir -p "$LAB_DIR"
    local kpkg kver kdir deb
    kpkg=$(kernel_pkg)
    echo "$kpkg" >"$LAB_DIR/kernel.pkg"
    kdir=$LAB_DIR/kernel
    if [ ! -f "$kdir/.unpacked" ]; then
        deb=$(ls "$LAB_DIR"/"$kpkg"_*.deb 2>/dev/null | head -1 || true)
        if [ -z "$deb" ]; then
            log "build: downloading $kpkg"
            (cd "$LAB_DIR" && timeout 900 apt-get download "$kpkg" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2) || true
            deb=$(ls "$LAB_DIR"/"$kpkg"_*.deb 2>/dev/null | head -1 || true)
            [ -n "$deb" ] || die "apt-get download $kpkg failed"
        fi
        log "build: unpacking $(basename "$deb")"
        rm -rf "$kdir"; mkdir -p "$kdir"
        dpkg -x "$deb" "$kdir"
        kver=$(ls "$kdir/lib/modules")
        depmod -b "$kdir" "$kver"
        touch "$kdir/.unpacked"
    fi
    kver=$(ls "$kdir/lib/modules")
    echo "$kver" >"$LAB_DIR/kernel.version"
    ln -sf "kernel/boot/vmlinuz-$kver" "$LAB_DIR/vmlinuz"

    # initramfs, rebuilt when this script (or the kernel) changes
    local stamp
    stamp=$( { echo "$kver"; sha256sum "${BASH_SOURCE[0]}" "$DATACHECK_SRC" "$MWCHECK_SRC" "$OOB_SRC" | cut -d' ' -f1; dpkg-query -W busybox-static rdma-core ibverbs-providers perftest iproute2 rdmacm-utils ibverbs-utils libc6; } | sha256sum | cut -d' ' -f1)
    if [ -f "$LAB_DIR/initrd.cpio.gz" ] && [ "$(cat "$LAB_DIR/initrd.stamp" 2>/dev/null)" = "$stamp" ]; then
        log "build: up to date ($kver, $LAB_DIR/initrd.cpio.gz)"
        return 0
    fi
    log "build: initramfs for $kver"
    local root=$LAB_DIR/initramfs
    rm -rf "$root"
    mkdir -p "$root"/{bin,sbin,proc,sys,dev,tmp,run,root,etc/lab,usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu/libibverbs,lib64,etc/libibverbs.d}
    ln -s usr/lib "$root/lib"
    cp /bin/busybox "$root/bin/busybox"
    ln -s busybox "$root/bin/sh"

    # kernel modules: closure in load order
    local m line f
    : >"$root/etc/lab/modules"
    for m in "${GUEST_MODULES[@]}"; do
        modprobe -d "$kdir" -S "$kver" --show-depends "$m" >"$LAB_DIR/.deps" || die "modprobe --show-depends $m failed"
        while read -r line; do
            case "$line" in insmod\ *) ;; *) continue;; esac
            f=${line#insmod }; f=${f%% *}; f=${f#"$kdir"}
            grep -qxF "$f" "$root/etc/lab/modules" && continue
            mkdir -p "$root$(dirname "$f")"
            case "$f" in
                *.ko) cp "$kdir$f" "$root$f" ;;
                *) die "unexpected module file $f (compressed modules not handled)" ;;
            esac
            echo "$f" >>"$root/etc/lab/modules"
        done <"$LAB_DIR/.deps"
    done

    # user space + every library ldd lists
    local b p libs=()
    for b in "${GUEST_BINS[@]}"; do
        p=$(command -v "$b") || die "binary $b not found (run deps)"
        case "$p" in */sbin/*) cp -L "$p" "$root/usr/sbin/$b" ;; *) cp -L "$p" "$root/usr/bin/$b" ;; esac
        libs+=("$p")
    done
    # sr_datacheck (datacheck.c): the data-integrity peer of `softroce perf --check`
    gcc -O2 -Wall -o "$root/usr/bin/sr_datacheck" "$DATACHECK_SRC" -libverbs || die "building sr_datacheck failed (run deps)"
    libs+=("$root/usr/bin/sr_datacheck")
    # sr_mwcheck (mwcheck.c): memory windows bound, accessed and invalidated across the wire
    gcc -O2 -Wall -o "$root/usr/bin/sr_mwcheck" "$MWCHECK_SRC" -libverbs || die "building sr_mwcheck failed (run deps)"
    libs+=("$root/usr/bin/sr_mwcheck")
    libs+=(/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so)
    cp -L /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so "$root/usr/lib/x86_64-linux-gnu/libibverbs/"
    cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
    local gcc_s
    gcc_s=$(ls /usr/lib/x86_64-linux-gnu/libgcc_s.so.1 /lib/x86_64-linux-gnu/libgcc_s.so.1 2>/dev/null | head -1)
    [ -n "$gcc_s" ] || die "libgcc_s.so.1 not found"
    libs+=("$gcc_s")
    local dep
    { for b in "${libs[@]}"; do ldd "$b" 2>/dev/null | awk '/=> \//{print $3} /^\t\//{print $1}'; done; echo "$gcc_s"; } | sort -u |
    while read -r dep; do
        [ -e "$dep" ] || continue
        # store under /usr/lib (ld.so.cache below resolves /lib paths too, /lib -> usr/lib)
        case "$dep" in
            /lib64/*) cp -L "$dep" "$root/lib64/" ;;
            /lib/*) mkdir -p "$root/usr$(dirname "$dep")"; cp -L "$dep" "$root/usr$dep" ;;
            /usr/lib/*) mkdir -p "$root$(dirname "$dep")"; cp -L "$dep" "$root$dep" ;;
            *) die "unexpected library path $dep" ;;
        esac
    done
    [ -e "$root/lib64/ld-linux-x86-64.so.2" ] || cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
    [ -d /usr/lib/tc ] && mkdir -p "$root/usr/lib/tc" && cp -a /usr/lib/tc/. "$root/usr/lib/tc/"
    mkdir -p "$root/etc/ld.so.conf.d"
    echo /usr/lib/x86_64-linux-gnu >"$root/etc/ld.so.conf.d/x86_64-linux-gnu.conf"
    echo 'include /etc/ld.so.conf.d/*.conf' >"$root/etc/ld.so.conf"
    ldconfig -r "$root"
    printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
    printf 'root:x:0:\n' >"$root/etc/group"
    printf '127.0.0.1 localhost\n%s host\n%s lab-a\n%s lab-b\n' "$HOST_IP" "${GUEST_IP[a]}" "${GUEST_IP[b]}" >"$root/etc/hosts"
    printf 'hosts: files\n' >"$root/etc/nsswitch.conf"
    write_guest_init "$root/init"
    (cd "$root" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) >"$LAB_DIR/initrd.cpio.gz.tmp"
    mv "$LAB_DIR/initrd.cpio.gz.tmp" "$LAB_DIR/initrd.cpio.gz"
    echo "$stamp" >"$LAB_DIR/initrd.stamp"
    log "build: wrote $LAB_DIR/initrd.cpio.gz ($(du -h "$LAB_DIR/initrd.cpio.gz" | cut -f1)), kernel $kver"
}

# ---------------------------------------------------------------- up / down
nsx() { ip netns exec "$NETNS" "$@"; }
gdir() { echo "$RUN_DIR/$1"; }
qemu_pid() { local f; f="$(gdir "$1")/qemu.pid"; [ -s "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && cat "$f"; }

netns_up() {
    if ! ip netns list | grep -qw "^$NETNS"; then
        ip netns add "$NETNS"
    fi
    nsx ip link set lo up
    if ! nsx ip link show "$BRIDGE" >/dev/null 2>&1; then
        nsx ip link add "$BRIDGE" type bridge stp_state 0 forward_delay 0
        nsx ip addr add "$HOST_IP/$NET_PREFIX" dev "$BRIDGE"
        # no IPv6 on the host side: keeps the bridge quiet (no DAD/RS frames)
        nsx sysctl -qw "net.ipv6.conf.$BRIDGE.disable_ipv6=1" 2>/dev/null || true
    fi
    nsx ip link set "$BRIDGE" up
    local g
    for g in "${GUESTS[@]}"; do
        if ! nsx ip link show "srtap-$g" >/dev/null 2>&1; then
            nsx ip tuntap add "srtap-$g" mode tap
            nsx ip link set "srtap-$g" master "$BRIDGE"
        fi
        nsx ip link set "srtap-$g" up
    done
}

guest_start() {
    local g=$1 d
    d=$(gdir "$g")
    if qemu_pid "$g" >/dev/null; then log "guest $g already running"; return 0; fi
    mkdir -p "$d"
    rm -f "$d/console.sock" "$d/console.log" "$d/qemu.pid" "$d/monitor.sock"
    [ -f "$LAB_DIR/initrd.cpio.gz" ] || die "run '$0 build' first"
    log "guest $g: starting QEMU (${GUEST_IP[$g]})"
    nsx qemu-system-x86_64 -name "srlab-$g" -accel tcg -m "$GUEST_MEM" -smp 1 \
        -nodefaults -display none -vga none -no-reboot \
        -kernel "$LAB_DIR/vmlinuz" -initrd "$LAB_DIR/initrd.cpio.gz" \
        -append "console=ttyS0,115200 panic=-1 loglevel=4 lab_name=$g lab_ip=${GUEST_IP[$g]}/$NET_PREFIX" \
        -netdev "tap,id=n0,ifname=srtap-$g,script=no,downscript=no" \
        -device "virtio-net-pci,netdev=n0,mac=${GUEST_MAC[$g]},romfile=" \
        -chardev "socket,id=c0,path=$d/console.sock,server=on,wait=off,logfile=$d/console.log" \
        -serial chardev:c0 \
        -monitor "unix:$d/monitor.sock,server=on,wait=off" \
        -pidfile "$d/qemu.pid" -daemonize \
        2>"$d/qemu.stderr" || { cat "$d/qemu.stderr" >&2; die "QEMU for guest $g failed to start"; }
    date +%s.%N >"$d/started"
}

guest_wait_ready() {
    local g=$1 d t0 now
    d=$(gdir "$g")
    t0=$(date +%s)
    while :; do
        if grep -q "LAB-READY $g" "$d/console.log" 2>/dev/null; then
            log "guest $g: ready $(awk -v a="$(cat "$d/started")" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s after QEMU start; $(grep -a 'lab: gid1' "$d/console.log" | tr -d '\r')"
            return 0
        fi
        qemu_pid "$g" >/dev/null || { dump_console "$g"; die "guest $g: QEMU exited during boot"; }
        now=$(date +%s)
        if [ $((now - t0)) -ge "$BOOT_TIMEOUT" ]; then dump_console "$g"; die "guest $g: not ready after ${BOOT_TIMEOUT}s"; fi
        sleep 1
    done
}

dump_console() {
    local d; d=$(gdir "$1")
    log "---- last 60 lines of guest $1 console ($d/console.log) ----"
    tail -n 60 "$d/console.log" 2>/dev/null | tr -d '\r' >&2 || true
    log "---- end of guest $1 console ----"
}

cmd_up() {
    need_root
    [ -f "$LAB_DIR/initrd.cpio.gz" ] || die "run '$0 build' first"
    local t0 g; t0=$(date +%s)
    netns_up
    for g in "${GUESTS[@]}"; do guest_start "$g"; done
    for g in "${GUESTS[@]}"; do guest_wait_ready "$g"; done
    # sanity: both guests reach each other
    gexec a 30 "ping -c 1 -W 5 ${GUEST_IP[b]} >/dev/null && echo ping-ok" >/dev/null || die "guest a cannot ping guest b"
    log "up: lab ready in $(( $(date +%s) - t0 ))s (netns $NETNS, bridge $BRIDGE $HOST_IP)"
}

kill_pid_file() { # pidfile name
    local f=$1 pid i
    [ -s "$f" ] || return 0
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
}

cmd_down() {
    need_root
    local g p
    kill_pid_file "$RUN_DIR/tshark.pid"
    for g in "${GUESTS[@]}"; do kill_pid_file "$(gdir "$g")/qemu.pid"; done
    if ip netns list | grep -qw "^$NETNS"; then
        # anything else still running in our namespace was started by this lab
        for p in $(ip netns pids "$NETNS" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
        sleep 0.5
        for p in $(ip netns pids "$NETNS" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
        ip netns del "$NETNS"
    fi
    log "down: done"
}

cmd_status() {
    local g
    if ip netns list | grep -qw "^$NETNS"; then
        echo "netns $NETNS:"; nsx ip -br addr | sed 's/^/  /'
    else echo "netns $NETNS: absent"; fi
    for g in "${GUESTS[@]}"; do
        if p=$(qemu_pid "$g"); then echo "guest $g: running (pid $p) ${GUEST_IP[$g]}"; else echo "guest $g: stopped"; fi
    done
}

# ---------------------------------------------------------------- guest exec
# gexec GUEST TIMEOUT 'shell command'  -> prints the command's output, returns its status
# (124 on timeout). The command runs in the guest's console shell with stdin from
# /dev/null; its output is delimited by unique markers in the console log.
GEXEC_SEQ=0
gexec() {
    local g=$1 to=$2 cmd=$3 d log sock id start deadline out rc spid
    d=$(gdir "$g"); log=$d/console.log; sock=$d/console.sock
    qemu_pid "$g" >/dev/null || die "guest $g is not running (run '$0 up')"
    GEXEC_SEQ=$((GEXEC_SEQ + 1))
    id="$$x${GEXEC_SEQ}x$RANDOM"
    start=$(stat -c %s "$log")
    # The connection must stay open until the guest has read everything: QEMU drops
    # unread input when the client half-closes (socat's default at EOF), hence
    # shut-none and a background socat that is killed once the end marker is seen.
    # socat also reads (and discards) console output so QEMU never blocks on it.
    printf "printf '\\\\n%%s_%%s\\\\n' @@LABB %s; { %s\n} </dev/null\nprintf '\\\\n%%s_%%s_RC=%%s\\\\n' @@LABE %s \"\$?\"\n" \
        "$id" "$cmd" "$id" >"$d/cmd.in"
    socat -t $((to + 10)) - "UNIX-CONNECT:$sock,shut-none" <"$d/cmd.in" >/dev/null 2>"$d/socat.err" &
    spid=$!
    deadline=$(( $(date +%s) + to ))
    while ! tail -c +$((start + 1)) "$log" | grep -aq "@@LABE_${id}_RC="; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            log "gexec $g: timeout after ${to}s: $cmd"; dump_console "$g"
            # interrupt whatever is hanging; the guest restarts its console shell
            kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true
            printf '\003\n' >"$d/cmd.in"
            timeout 3 socat -t 2 - "UNIX-CONNECT:$sock,shut-none" <"$d/cmd.in" >/dev/null 2>&1 || true
            return 124
        fi
        qemu_pid "$g" >/dev/null || { dump_console "$g"; die "guest $g died during: $cmd"; }
        kill -0 "$spid" 2>/dev/null || { cat "$d/socat.err" >&2; dump_console "$g"; die "console connection to guest $g lost"; }
        sleep 0.2
    done
    kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true
    out=$(tail -c +$((start + 1)) "$log" | tr -d '\r' | awk -v b="@@LABB_$id" -v e="@@LABE_${id}_RC=" '
        $0 == b { on = 1; next }
        on && index($0, e) { p = index($0, e); pre = substr($0, 1, p - 1); if (pre != "") print pre; print "RC=" substr($0, p + length(e)); exit }
        on { print }')
    rc=$(printf '%s\n' "$out" | tail -n 1); rc=${rc#RC=}
    out=$(printf '%s\n' "$out" | sed '$d')
    # drop the empty line the end marker's leading \n produces
    [ -n "$out" ] && printf '%s\n' "$out" | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}'
    [[ "$rc" =~ ^[0-9]+$ ]] || rc=255
    return "$rc"
}

cmd_exec() {
    [ $# -ge 2 ] || die "usage: $0 exec GUEST 'command' [timeout]"
    local rc=0
    gexec "$1" "${3:-120}" "$2" || rc=$?
    return $rc
}

cmd_console() {
    local d; d=$(gdir "${1:?usage: console GUEST}")
    echo "guest $1 console (no prompt/echo: type 'stty echo; sh -i' for an interactive shell; Ctrl-] quits)" >&2
    socat -,raw,echo=0,escape=0x1d "UNIX-CONNECT:$d/console.sock"
}

# ---------------------------------------------------------------- capture
TSHARK_FIELDS=(frame.number frame.len ip.src ip.dst udp.srcport infiniband.bth.opcode infiniband.bth.destqp
               infiniband.bth.psn infiniband.bth.a infiniband.bth.se infiniband.bth.padcnt infiniband.bth.p_key
               infiniband.aeth.syndrome infiniband.aeth.msn infiniband.reth.va infiniband.reth.r_key
               infiniband.reth.dmalen infiniband.deth.q_key infiniband.deth.srcqp infiniband.atomiceth.swapdt
               infiniband.atomiceth.cmpdt infiniband.atomicacketh.origremdt infiniband.immdt infiniband.invariant.crc)

tshark_start() { # pcapng-file
    local f=$1 i
    rm -f "$f" "$RUN_DIR/tshark.err"
    nsx tshark -i "$BRIDGE" -f 'udp port 4791' -w "$f" -F pcapng -q -a duration:600 \
        </dev/null >/dev/null 2>"$RUN_DIR/tshark.err" &
    echo $! >"$RUN_DIR/tshark.pid"
    for i in $(seq 1 100); do
        grep -q "Capturing on" "$RUN_DIR/tshark.err" 2>/dev/null && return 0
        kill -0 "$(cat "$RUN_DIR/tshark.pid")" 2>/dev/null || break
        sleep 0.2
    done
    cat "$RUN_DIR/tshark.err" >&2; die "tshark did not start"
}

tshark_stop() {
    local pid i
    pid=$(cat "$RUN_DIR/tshark.pid" 2>/dev/null) || return 0
    sleep 1 # let the last frames reach the capture
    kill -INT "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -f "$RUN_DIR/tshark.pid"
}

# wait_listen GUEST TCPPORT: bounded wait until a TCP port listens in the guest
wait_listen() {
    local hex; hex=$(printf '%04X' "$2")
    gexec "$1" 60 "i=0; while [ \$i -lt 200 ] && ! grep -q ':$hex 00000000:0000 0A' /proc/net/tcp; do i=\$((i+1)); sleep 0.2; done; grep -q ':$hex 00000000:0000 0A' /proc/net/tcp" >/dev/null
}

want() { [ -z "${SOFTROCE_LAB_ONLY:-}" ] || [[ " $SOFTROCE_LAB_ONLY " == *" $1 "* ]]; }

# capture_one NAME PORT 'server cmd' 'client cmd (server address appended)' ['setup on a'] ['teardown on a']
# PORT: TCP port to wait for on b before starting the client ("" -> sleep instead).
capture_one() {
    local name=$1 port=$2 srv=$3 cli=$4 setup=${5:-} teardown=${6:-}
    want "$name" || return 0
    local cap=$RUN_DIR/captures t0 out rc_c=0 rc_s=0 outs="" n
    mkdir -p "$cap" "$FIXTURES"
    t0=$(date +%s)
    log "capture $name: $cli ${GUEST_IP[b]}"
    [ -n "$setup" ] && { gexec a 30 "$setup" || die "setup failed: $setup"; }
    tshark_start "$cap/$name.pcapng"
    gexec b 20 "rm -f /tmp/srv.log; timeout 120 $srv >/tmp/srv.log 2>&1 & echo \$! >/tmp/srv.pid" >/dev/null
    if [ -n "$port" ]; then wait_listen b "$port" || { gexec b 10 'cat /tmp/srv.log' || true; die "$name: server not listening"; }
    else sleep 3; fi
    out=$(gexec a 150 "timeout 120 $cli ${GUEST_IP[b]} 2>&1") || rc_c=$?
    outs=$(gexec b 150 "wait \$(cat /tmp/srv.pid); r=\$?; cat /tmp/srv.log; echo server-exit=\$r") || rc_s=$?
    tshark_stop
    [ -n "$teardown" ] && { gexec a 30 "$teardown" || true; }
    if [ $rc_c -ne 0 ] || ! grep -q 'server-exit=0' <<<"$outs"; then
        printf '%s\n' "---- client (rc=$rc_c):" "$out" "---- server:" "$outs" >&2
        die "$name: test failed"
    fi
    editcap -F pcap "$cap/$name.pcapng" "$cap/$name.pcap"
    n=$(tshark -r "$cap/$name.pcap" -Y infiniband 2>/dev/null | wc -l)
    chmod 644 "$cap/$name.pcapng" "$cap/$name.pcap"
    cp "$cap/$name.pcap" "$FIXTURES/$name.pcap"
    [ "${KEEP_PCAPNG:-}" = "$name" ] && cp "$cap/$name.pcapng" "$FIXTURES/$name.pcapng"
    tshark -r "$cap/$name.pcap" -Y infiniband -T fields -E header=y -E separator=/t \
        $(printf -- '-e %s ' "${TSHARK_FIELDS[@]}") >"$FIXTURES/$name.txt" 2>/dev/null
    {
        echo "# fixture $name ($(cat "$LAB_DIR/kernel.version"), captured on $BRIDGE with tshark -f 'udp port 4791')"
        [ -n "$setup" ] && echo "# setup on a (${GUEST_IP[a]}): $setup"
        echo "# server on b (${GUEST_IP[b]}): $srv"
        echo "# client on a (${GUEST_IP[a]}): $cli ${GUEST_IP[b]}"
        echo "# ---- client output"; printf '%s\n' "$out"
        echo "# ---- server output"; printf '%s\n' "$outs"
    } >"$FIXTURES/$name.log"
    log "capture $name: $n RoCE frames, $(stat -c %s "$FIXTURES/$name.pcap") bytes, $(( $(date +%s) - t0 ))s"
}

capture_all() {
    local pp="-g 1" pt="-x 1 -F -d rxe0"
    # ibv_*_pingpong: TCP 18515 for the out-of-band exchange; perftest: 18515 too.
    KEEP_PCAPNG=rc_pingpong_4096
    capture_one rc_pingpong_4096 18515 "ibv_rc_pingpong $pp -n 20 -s 4096" "ibv_rc_pingpong $pp -n 20 -s 4096"
    capture_one rc_pingpong_100  18515 "ibv_rc_pingpong $pp -n 10 -s 100"  "ibv_rc_pingpong $pp -n 10 -s 100"
    capture_one uc_pingpong      18515 "ibv_uc_pingpong $pp -n 10 -s 2048" "ibv_uc_pingpong $pp -n 10 -s 2048"
    capture_one ud_pingpong      18515 "ibv_ud_pingpong $pp -n 10 -s 512"  "ibv_ud_pingpong $pp -n 10 -s 512"
    capture_one srq_pingpong     18515 "ibv_srq_pingpong $pp -n 10 -s 256 -q 2" "ibv_srq_pingpong $pp -n 10 -s 256 -q 2"
    capture_one write_bw         18515 "ib_write_bw $pt -s 8192 -n 20" "ib_write_bw $pt -s 8192 -n 20"
    capture_one read_bw          18515 "ib_read_bw $pt -s 8192 -n 20"  "ib_read_bw $pt -s 8192 -n 20"
    capture_one send_bw          18515 "ib_send_bw $pt -s 4096 -n 20"  "ib_send_bw $pt -s 4096 -n 20"
    capture_one atomic_fetch_add 18515 "ib_atomic_bw $pt -A FETCH_AND_ADD -n 20" "ib_atomic_bw $pt -A FETCH_AND_ADD -n 20"
    capture_one atomic_cmp_swap  18515 "ib_atomic_bw $pt -A CMP_AND_SWAP -n 20"  "ib_atomic_bw $pt -A CMP_AND_SWAP -n 20"
    capture_one write_lat        18515 "ib_write_lat $pt -s 64 -n 10" "ib_write_lat $pt -s 64 -n 10"
    capture_one rping            ""    "rping -s -a ${GUEST_IP[b]} -C 3 -S 64 -v" "rping -c -C 3 -S 64 -v -a"
    # rsockets (librdmacm) move data with RDMA WRITE WITH IMMEDIATE (perftest 4.5 has no
    # immediate-data option); connection setup is rdma_cm (CM MADs on QP1).
    capture_one rstream_write_imm "" "rstream -b ${GUEST_IP[b]} -S 4096 -C 10" "rstream -S 4096 -C 10 -s"
    capture_one rc_pingpong_loss 18515 "ibv_rc_pingpong $pp -n 20 -s 4096" "ibv_rc_pingpong $pp -n 20 -s 4096" \
        "/usr/sbin/tc qdisc add dev eth0 root netem loss 10%" "/usr/sbin/tc qdisc del dev eth0 root"
    capture_one write_bw_loss    18515 "ib_write_bw $pt -s 4096 -n 10" "ib_write_bw $pt -s 4096 -n 10" \
        "/usr/sbin/tc qdisc add dev eth0 root netem loss 10%" "/usr/sbin/tc qdisc del dev eth0 root"
}

cmd_capture() {
    need_root
    local g
    for g in "${GUESTS[@]}"; do qemu_pid "$g" >/dev/null || die "guest $g not running (run '$0 up')"; done
    command -v tshark >/dev/null || die "tshark missing (run '$0 deps')"
    local t0; t0=$(date +%s)
    capture_all
    log "capture: all done in $(( $(date +%s) - t0 ))s; fixtures in $FIXTURES"
}

cmd_run_all() {
    local t0 rc=0; t0=$(date +%s)
    cmd_deps
    cmd_build
    cmd_down >/dev/null 2>&1 || true
    trap 'cmd_down' EXIT
    cmd_up
    cmd_capture || rc=$?
    log "run-all: ${rc} after $(( $(date +%s) - t0 ))s"
    return $rc
}

main() {
    local c=${1:-help}; shift || true
    case "$c" in
        deps) cmd_deps ;;
        build) cmd_build ;;
        up) cmd_up ;;
        down) cmd_down ;;
        status) cmd_status ;;
        exec) cmd_exec "$@" ;;
        console) cmd_console "$@" ;;
        capture) cmd_capture ;;
        run-all) cmd_run_all ;;
        nsexec) need_root; nsx "$@" ;;
        help|-h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' ;;
        *) die "unknown command $c (try help)" ;;
    esac
}

main "$@"
