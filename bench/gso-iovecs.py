#!/usr/bin/env python3
# The kernel's cost of one UDP GSO send of 15 datagrams of 4112 bytes (a 4096-MTU WRITE's
# MIDDLE packets) from one contiguous buffer, against three iovecs per datagram (a 12-byte
# header, 4096 bytes of a page-aligned "region", a 4-byte tail): what the gathering transmit
# path (SOFTROCE_GATHER=1) hands to sendmmsg. Process CPU (user + system) per send, pairs
# interleaved; the receiving socket is drained after every send. Loopback only.
#
#   python3 bench/gso-iovecs.py [SENDS]
import socket, struct, resource, sys, mmap
UDP_SEGMENT = 103
N = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); rx.bind(("127.0.23.9", 0))
tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); tx.bind(("127.0.23.10", 0))
dst = rx.getsockname()
seg = 12 + 4096 + 4
contig = bytearray(15 * seg)
region = mmap.mmap(-1, 16 * 4096)   # page-aligned "registered region"
hdr = bytearray(12); tail = bytearray(4)
iov_parts = []
for k in range(15):
    iov_parts += [hdr, memoryview(region)[k * 4096:(k + 1) * 4096], tail]
cm = [(socket.SOL_UDP, UDP_SEGMENT, struct.pack("H", seg))]
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime, r.ru_stime
def run(bufs):
    c0, s0 = cpu()
    for _ in range(N):
        while True:
            try:
                tx.sendmsg(bufs, cm, 0, dst); break
            except BlockingIOError:
                pass
        # drain so the receiver's buffer never fills
        try:
            while True: rx.recv(65536, socket.MSG_DONTWAIT)
        except BlockingIOError:
            pass
    c1, s1 = cpu()
    return (c1 - c0) / N * 1e6, (s1 - s0) / N * 1e6
for i in range(3):
    a = run([contig]); b = run(iov_parts)
    print(f"pair {i+1}: contiguous {a[0]:.1f} us/msg (sys {a[1]:.1f}), 45 iovecs {b[0]:.1f} us/msg (sys {b[1]:.1f})")
