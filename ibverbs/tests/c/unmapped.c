/*
 * Registered memory that the application takes away while it is registered: unmapped with
 * munmap, or made read-only with mprotect, and then written, read or used atomically by the
 * peer (an RC QP of the same process over loopback, so that the process whose engine touches
 * the memory is the one checked). rxe keeps the pages pinned, so the access lands in pages the
 * application no longer sees; softroce cannot pin, and must never take the process down with
 * SIGSEGV from its engine: the access is refused as an on-demand-paging device refuses it, with
 * a remote access error NAK (IBV_WC_REM_ACCESS_ERR at the initiator) and the target's QP in
 * ERROR (spec-notes/memory-placement.md rule 15). The initiator's own buffer gone under a post
 * fails locally (IBV_WC_LOC_PROT_ERR), and a receive buffer gone fails the SEND (remote
 * operational error) and the receive (local QP operation error).
 *
 * Prints "ok <checks>" and exits 0, or names the first failed check and exits 1; on the code
 * before the guarded accesses the first case ends the process with SIGSEGV. Every wait is
 * bounded (5 s). A failed access moves both QPs of a pair to ERROR, so each case runs on a
 * fresh pair.
 */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <unistd.h>
#include "loopback.h"

/* A fresh anonymous mapping of LEN bytes, filled with `fill`, registered with every right. */
static char *mapped_region(char fill, struct ibv_mr **mr)
{
	char *m = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(m != MAP_FAILED);
	memset(m, fill, LEN);
	*mr = ibv_reg_mr(pd, m, LEN, ALL_REMOTE);
	CHECK(*mr != NULL);
	return m;
}

/* Posts one signaled work request on a towards the target region `mr` (at `off`) and returns
 * the initiator's completion status. */
static enum ibv_wc_status post_to(struct pair p, enum ibv_wr_opcode op, struct ibv_mr *mr,
				  size_t off, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = len, .lkey = src_mr->lkey};
	struct ibv_send_wr wr = {
		.wr_id = 7,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = (uintptr_t)mr->addr + off;
		wr.wr.atomic.rkey = mr->rkey;
		wr.wr.atomic.compare_add = 1;
	} else {
		wr.wr.rdma.remote_addr = (uintptr_t)mr->addr + off;
		wr.wr.rdma.rkey = mr->rkey;
	}
	CHECK(ibv_post_send(p.a, &wr, &bad) == 0);
	struct ibv_wc wc = poll1(cq_a);
	CHECK(wc.wr_id == 7);
	return wc.status;
}

/* The peer writes, reads and adds into a region the application unmapped while registered. */
static void unmapped_target(enum ibv_wr_opcode op, uint32_t len)
{
	struct ibv_mr *mr;
	char *m = mapped_region(0x11, &mr);
	CHECK(munmap(m, LEN) == 0);
	struct pair p = new_pair();
	enum ibv_wc_status st = post_to(p, op, mr, 0, len);
	if (st != IBV_WC_REM_ACCESS_ERR)
		fprintf(stderr, "opcode %d, %u bytes: %s\n", op, len, ibv_wc_status_str(st));
	CHECK(st == IBV_WC_REM_ACCESS_ERR);
	/* The region deregisters as usual once its memory is gone. */
	CHECK(ibv_dereg_mr(mr) == 0);
	destroy_pair(p);
}

/* Only the region's last page unmapped: a WRITE that spans it is refused (what landed before
 * the hole is the application's to ignore, as on an on-demand-paging device); one before the
 * hole lands. */
static void last_page_unmapped(void)
{
	long pg = sysconf(_SC_PAGESIZE);
	struct ibv_mr *mr;
	char *m = mapped_region(0x22, &mr);
	CHECK(munmap(m + LEN - pg, pg) == 0);
	struct pair p = new_pair();
	memset(src, 0x5C, LEN);
	CHECK(post_to(p, IBV_WR_RDMA_WRITE, mr, 0, 4096) == IBV_WC_SUCCESS);
	CHECK(m[0] == 0x5C && m[4095] == 0x5C && m[4096] == 0x22);
	CHECK(post_to(p, IBV_WR_RDMA_WRITE, mr, LEN - 2 * pg, 2 * pg) == IBV_WC_REM_ACCESS_ERR);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(munmap(m, LEN - pg) == 0);
	destroy_pair(p);
}

/* Made read-only after registration: a WRITE and an atomic are refused, the bytes stay; a READ
 * still works. */
static void protected_target(void)
{
	struct ibv_mr *mr;
	char *m = mapped_region(0x33, &mr);
	CHECK(mprotect(m, LEN, PROT_READ) == 0);
	struct pair p = new_pair();
	memset(src, 0, LEN);
	CHECK(post_to(p, IBV_WR_RDMA_READ, mr, 0, LEN) == IBV_WC_SUCCESS);
	CHECK(src[0] == 0x33 && src[LEN - 1] == 0x33);
	memset(src, 0x44, LEN);
	CHECK(post_to(p, IBV_WR_RDMA_WRITE, mr, 0, LEN) == IBV_WC_REM_ACCESS_ERR);
	destroy_pair(p);
	for (size_t i = 0; i < LEN; i++)
		CHECK(m[i] == 0x33);
	p = new_pair();
	CHECK(post_to(p, IBV_WR_ATOMIC_FETCH_AND_ADD, mr, 64, 8) == IBV_WC_REM_ACCESS_ERR);
	CHECK(m[64] == 0x33);
	destroy_pair(p);
	/* PROT_NONE: even a READ is refused. */
	CHECK(mprotect(m, LEN, PROT_NONE) == 0);
	p = new_pair();
	CHECK(post_to(p, IBV_WR_RDMA_READ, mr, 0, 4096) == IBV_WC_REM_ACCESS_ERR);
	destroy_pair(p);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(munmap(m, LEN) == 0);
}

/* The initiator's own source buffer unmapped under a WRITE: a local protection error, nothing
 * sent. */
static void unmapped_source(void)
{
	struct ibv_mr *target;
	char *t = mapped_region(0x55, &target);
	struct ibv_mr *own;
	char *m = mapped_region(0x66, &own);
	CHECK(munmap(m, LEN) == 0);
	struct pair p = new_pair();
	struct ibv_sge sge = {.addr = (uintptr_t)m, .length = 4096, .lkey = own->lkey};
	struct ibv_send_wr wr = {
		.wr_id = 8,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = {.remote_addr = (uintptr_t)t, .rkey = target->rkey},
	}, *bad;
	CHECK(ibv_post_send(p.a, &wr, &bad) == 0);
	struct ibv_wc wc = poll1(cq_a);
	CHECK(wc.wr_id == 8 && wc.status == IBV_WC_LOC_PROT_ERR);
	CHECK(t[0] == 0x55);
	CHECK(ibv_dereg_mr(own) == 0);
	CHECK(ibv_dereg_mr(target) == 0);
	CHECK(munmap(t, LEN) == 0);
	destroy_pair(p);
}

/* The target's receive buffer unmapped under a SEND: as rxe answers a receive WQE whose memory
 * it cannot reach (RESPST_ERR_MALFORMED_WQE), the SEND fails at the initiator with a remote
 * operational error and the receive completes with a local QP operation error. */
static void unmapped_receive_buffer(void)
{
	struct ibv_mr *mr;
	char *m = mapped_region(0x77, &mr);
	CHECK(munmap(m, LEN) == 0);
	struct pair p = new_pair();
	struct ibv_sge rs = {.addr = (uintptr_t)m, .length = LEN, .lkey = mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 9, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK(ibv_post_recv(p.b, &rwr, &rbad) == 0);
	CHECK(post_to(p, IBV_WR_SEND, mr, 0, 4096) == IBV_WC_REM_OP_ERR);
	struct ibv_wc wc = poll1(cq_b);
	CHECK(wc.wr_id == 9 && wc.status == IBV_WC_LOC_QP_OP_ERR);
	CHECK(ibv_dereg_mr(mr) == 0);
	destroy_pair(p);
}

/* After all that, the engine still moves data. */
static void still_works(void)
{
	struct ibv_mr *mr;
	char *m = mapped_region(0, &mr);
	struct pair p = new_pair();
	memset(src, 0x5A, LEN);
	CHECK(post_to(p, IBV_WR_RDMA_WRITE, mr, 0, LEN) == IBV_WC_SUCCESS);
	CHECK(m[0] == 0x5A && m[LEN - 1] == 0x5A);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(munmap(m, LEN) == 0);
	destroy_pair(p);
}

int main(void)
{
	struct ibv_device **list = loopback_open();

	unmapped_target(IBV_WR_RDMA_WRITE, LEN);
	unmapped_target(IBV_WR_RDMA_WRITE, 8);
	unmapped_target(IBV_WR_RDMA_READ, LEN);
	unmapped_target(IBV_WR_ATOMIC_FETCH_AND_ADD, 8);
	last_page_unmapped();
	protected_target();
	unmapped_source();
	unmapped_receive_buffer();
	still_works();

	loopback_close(list);
	return 0;
}
