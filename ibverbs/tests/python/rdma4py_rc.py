"""rdma4py (PyPI `ibverbs`, pinned by scripts/setup.sh) over the softroce shim.

Run under `softroce run` by ibverbs/tests/rdma4py.rs. Uses only rdma4py's public API, as its
README's quick start does: two RC QPs on the device's first GID connected to each other with
`connect_rc`, then an RDMA WRITE, an RDMA READ, a SEND and a SEND with immediate, each with
its bytes checked; and the registration of an address nothing is mapped at, which every
provider refuses (rxe: EFAULT from ib_umem_get).

Prints one line per check on stderr; exits 0 only if every check passed.
"""

import ctypes
import errno
import sys

import ibverbs as ib

PORT = 1
SIZE = 64 * 1024
ACCESS = (
    ib.AccessFlags.LOCAL_WRITE
    | ib.AccessFlags.REMOTE_WRITE
    | ib.AccessFlags.REMOTE_READ
)


def log(msg):
    print("rdma4py: " + msg, file=sys.stderr, flush=True)


def wait(cq, want, what):
    """The next completion of `cq`, which must be successful and carry wr_id `want`."""
    for _ in range(2_000_000):
        wcs = cq.poll(1)
        if wcs:
            wc = wcs[0]
            wc.raise_for_status()
            if wc.wr_id != want:
                raise AssertionError("%s: wr_id %d, expected %d" % (what, wc.wr_id, want))
            return wc
    raise AssertionError("%s: no completion" % what)


def pattern(seed):
    return bytes((seed + 7 * i) & 0xFF for i in range(SIZE))


def main():
    devs = ib.get_device_list()
    if not devs:
        raise AssertionError("no device")
    ctx = devs[0].open()
    log("device %s" % ctx.name)
    pd = ctx.alloc_pd()
    gid = ctx.query_gid(PORT, 0)
    port_attr = ctx.query_port(PORT)

    bufs = [ctypes.create_string_buffer(SIZE) for _ in range(2)]
    mrs = [pd.reg_mr(ctypes.addressof(b), SIZE, ACCESS) for b in bufs]
    cqs = [ctx.create_cq(16) for _ in range(2)]
    qps = [
        pd.create_qp(ib.QPInitAttr(send_cq=cq, recv_cq=cq, qp_type=ib.QPType.RC))
        for cq in cqs
    ]
    infos = [ib.local_qp_info(qp, port_attr, gid, port=PORT, psn=100 * (i + 1))
             for i, qp in enumerate(qps)]
    for i, qp in enumerate(qps):
        ib.connect_rc(qp, infos[1 - i], port=PORT, sgid_index=0, access=ACCESS,
                      local_psn=infos[i].psn)
    log("connected qp %d <-> qp %d" % (qps[0].qp_num, qps[1].qp_num))

    # RDMA WRITE: a -> b.
    ctypes.memmove(bufs[0], pattern(1), SIZE)
    qps[0].post_send(ib.SendWR(
        wr_id=1, sg_list=[mrs[0].sge()], opcode=ib.WROpcode.RDMA_WRITE,
        send_flags=ib.SendFlags.SIGNALED, remote_addr=mrs[1].addr, rkey=mrs[1].rkey))
    wait(cqs[0], 1, "write")
    if bufs[1].raw != pattern(1):
        raise AssertionError("write: the target's bytes differ")
    log("write ok")

    # RDMA READ: a reads b's second half into its first half.
    ctypes.memmove(bufs[1], pattern(2), SIZE)
    half = SIZE // 2
    qps[0].post_send(ib.SendWR(
        wr_id=2, sg_list=[mrs[0].sge(length=half)], opcode=ib.WROpcode.RDMA_READ,
        send_flags=ib.SendFlags.SIGNALED, remote_addr=mrs[1].addr + half,
        rkey=mrs[1].rkey))
    wait(cqs[0], 2, "read")
    if bufs[0].raw[:half] != pattern(2)[half:]:
        raise AssertionError("read: the bytes read differ")
    log("read ok")

    # SEND and SEND with immediate: b -> a, into posted receives.
    for wr_id, opcode, imm in ((3, ib.WROpcode.SEND, 0),
                               (4, ib.WROpcode.SEND_WITH_IMM, 0x12345678)):
        ctypes.memset(bufs[0], 0, SIZE)
        ctypes.memmove(bufs[1], pattern(wr_id), SIZE)
        qps[0].post_recv(ib.RecvWR(wr_id=10 + wr_id, sg_list=[mrs[0].sge()]))
        qps[1].post_send(ib.SendWR(
            wr_id=wr_id, sg_list=[mrs[1].sge(length=1000)], opcode=opcode,
            send_flags=ib.SendFlags.SIGNALED, imm_data=imm))
        wait(cqs[1], wr_id, "send %d" % wr_id)
        wc = wait(cqs[0], 10 + wr_id, "receive %d" % wr_id)
        if wc.byte_len != 1000 or bufs[0].raw[:1000] != pattern(wr_id)[:1000]:
            raise AssertionError("send %d: %d bytes received, or they differ"
                                 % (wr_id, wc.byte_len))
        if imm and (not wc.wc_flags & ib.WCFlags.WITH_IMM or wc.imm_data != imm):
            raise AssertionError("send with immediate: flags %r, imm %r"
                                 % (wc.wc_flags, wc.imm_data))
        if bufs[0].raw[1000:1001] != b"\0":
            raise AssertionError("send %d: a byte past the message was written" % wr_id)
    log("send ok")

    # Registering memory that is not there.
    try:
        pd.reg_mr(0xDEAD0000, 4096, ib.AccessFlags.LOCAL_WRITE)
    except ib.VerbsError as e:
        if e.errno != errno.EFAULT:
            raise AssertionError("bad address: errno %d, expected EFAULT" % e.errno)
        log("bad address refused (EFAULT)")
    else:
        raise AssertionError("bad address: registered")

    for o in qps + mrs + cqs + [pd, ctx]:
        o.close()
    log("all checks passed")


if __name__ == "__main__":
    main()
