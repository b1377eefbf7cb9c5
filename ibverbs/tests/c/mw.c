/*
 * Memory windows through the C ABI (the inline ibv_alloc_mw, ibv_bind_mw and ibv_dealloc_mw of
 * Debian's verbs.h calling the shim's context ops, IBV_WR_BIND_MW, IBV_WR_LOCAL_INV and
 * IBV_WR_SEND_WITH_INV, and the ibv_wr_bind_mw/ibv_wr_local_inv/ibv_wr_send_inv builders),
 * with RDMA WRITEs through the windows between RC QPs over loopback. Prints "ok <checks>" and
 * exits 0, or names the first failed check and exits 1. Every wait is bounded (5 s).
 *
 * A failed access moves both QPs of a pair to the error state, so each case that expects one
 * runs on a fresh pair.
 */
#define _GNU_SOURCE
#include "common.h"

static struct ibv_pd *pd;
/* The target's region (MW_BIND); [0, 4096) is outside every window, [4096, 8192) inside. */
static struct ibv_mr *mr;
static char *buf;
/* The initiator's source buffer (plain region). */
static struct ibv_mr *src_mr;
static char *src;
static struct ibv_cq *cq_a, *cq_b;

enum { WIN = 4096, WIN_LEN = 4096, MSG = 64 };

static void to_rts(struct ibv_qp *qp, uint32_t dest)
{
	rc_to_rts(qp, dest, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
		  4);
}

/* The RC builder QP, with the window operations. */
static struct ibv_qp *ex_qp(struct ibv_cq *cq)
{
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND |
				  IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
				  IBV_QP_EX_WITH_SEND_WITH_INV,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &ia);
	CHECK(qp != NULL);
	return qp;
}

static void pair(struct ibv_qp *a, struct ibv_qp *b)
{
	to_rts(a, b->qp_num);
	to_rts(b, a->qp_num);
}

/* Empties a CQ (flushed WRs of a pair in error). */
static void drain(struct ibv_cq *cq)
{
	struct ibv_wc wc[16];
	while (ibv_poll_cq(cq, 16, wc) > 0)
		;
}

/* A fresh connected pair of plain RC QPs: *a on cq_a, *b on cq_b. */
static void new_pair(struct ibv_qp **a, struct ibv_qp **b)
{
	*a = create_rc_qp(pd, cq_a);
	*b = create_rc_qp(pd, cq_b);
	pair(*a, *b);
}

/* Destroys a pair and empties both CQs of what its QPs flushed. */
static void end_pair(struct ibv_qp *a, struct ibv_qp *b)
{
	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0);
	drain(cq_a);
	drain(cq_b);
}

/* An RDMA WRITE of MSG bytes of `src` (filled with `fill`) from `qp` to `addr` under `rkey`;
 * its completion's status. */
static enum ibv_wc_status write_via(struct ibv_qp *qp, struct ibv_cq *cq, uint64_t addr,
				    uint32_t rkey, char fill)
{
	memset(src, fill, MSG);
	struct ibv_sge s = {.addr = (uintptr_t)src, .length = MSG, .lkey = src_mr->lkey};
	struct ibv_send_wr w = {.wr_id = 0x77,
				.sg_list = &s,
				.num_sge = 1,
				.opcode = IBV_WR_RDMA_WRITE,
				.send_flags = IBV_SEND_SIGNALED},
			   *bad;
	w.wr.rdma.remote_addr = addr;
	w.wr.rdma.rkey = rkey;
	CHECK(ibv_post_send(qp, &w, &bad) == 0);
	struct ibv_wc wc = poll1(cq);
	CHECK(wc.wr_id == 0x77 && wc.opcode == IBV_WC_RDMA_WRITE);
	return wc.status;
}

static int all(const char *p, char c, int n)
{
	for (int i = 0; i < n; i++)
		if (p[i] != c)
			return 0;
	return 1;
}

/* Binds the type 2 window `mw` on `qp` to the window range of `mr` with remote write, through
 * IBV_WR_BIND_MW; returns the new key. */
static uint32_t bind2(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mw *mw)
{
	uint32_t key = ibv_inc_rkey(mw->rkey);
	struct ibv_send_wr w = {.wr_id = 0xb2, .opcode = IBV_WR_BIND_MW,
				.send_flags = IBV_SEND_SIGNALED},
			   *bad;
	w.bind_mw.mw = mw;
	w.bind_mw.rkey = key;
	w.bind_mw.bind_info.mr = mr;
	w.bind_mw.bind_info.addr = (uintptr_t)buf + WIN;
	w.bind_mw.bind_info.length = WIN_LEN;
	w.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	CHECK(ibv_post_send(qp, &w, &bad) == 0);
	struct ibv_wc wc = poll1(cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 0xb2);
	return key;
}

/* ---------------------------------------------------------------------------------------- */

static void alloc_dealloc(void)
{
	struct ibv_device_attr a;
	CHECK(ibv_query_device(ctx, &a) == 0);
	CHECK(a.max_mw > 0 && (a.device_cap_flags & IBV_DEVICE_MEM_WINDOW) &&
	      (a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B));

	errno = 0;
	CHECK(ibv_alloc_mw(pd, 3) == NULL && errno == EINVAL);
	struct ibv_mw *m1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	struct ibv_mw *m2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(m1 && m1->type == IBV_MW_TYPE_1 && m1->pd == pd && m1->context == ctx);
	CHECK(m2 && m2->type == IBV_MW_TYPE_2 && m2->pd == pd && m2->context == ctx);
	CHECK(m1->rkey != m2->rkey && m1->rkey != mr->rkey && m2->rkey != mr->rkey);
	CHECK(m1->handle != m2->handle);
	CHECK(ibv_dealloc_mw(m1) == 0 && ibv_dealloc_mw(m2) == 0);

	/* A window holds its PD: ibv_dealloc_pd is EBUSY until the window is gone. */
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	CHECK(pd2 != NULL);
	struct ibv_mw *m3 = ibv_alloc_mw(pd2, IBV_MW_TYPE_2);
	CHECK(m3 != NULL);
	CHECK(ibv_dealloc_pd(pd2) == EBUSY);
	CHECK(ibv_dealloc_mw(m3) == 0);
	CHECK(ibv_dealloc_pd(pd2) == 0);

	/* MW_BIND is an access right ibv_reg_mr takes now. */
	struct ibv_mr *r = ibv_reg_mr(pd, src, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	CHECK(r != NULL && ibv_dereg_mr(r) == 0);
}

/* Type 1: ibv_bind_mw on one QP of the PD, WRITEs through the window from the peer, the
 * region's deregistration refused while it is bound, unbinding (length 0), then the stale key
 * refused by the responder. */
static void type1(void)
{
	struct ibv_qp *a, *b;
	new_pair(&a, &b);
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	CHECK(mw != NULL);
	uint32_t old = mw->rkey;
	struct ibv_mw_bind bind = {
		.wr_id = 0xb1,
		.send_flags = IBV_SEND_SIGNALED,
		.bind_info = {.mr = mr,
			      .addr = (uintptr_t)buf + WIN,
			      .length = WIN_LEN,
			      /* LOCAL_WRITE as rdma-core's test_mr passes it: taken, grants nothing. */
			      .mw_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE},
	};
	CHECK(ibv_bind_mw(b, mw, &bind) == 0);
	CHECK(mw->rkey == ibv_inc_rkey(old));
	struct ibv_wc wc = poll1(cq_b);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 0xb1);
	uint32_t key = mw->rkey;

	/* Through the window: the bytes land in the region. */
	memset(buf, 0, 8192);
	CHECK(write_via(a, cq_a, (uintptr_t)buf + WIN + 128, key, 'w') == IBV_WC_SUCCESS);
	CHECK(all(buf + WIN + 128, 'w', MSG) && all(buf + WIN, 0, 128));

	/* Bound: the region stays (EINVAL, as rxe), and keeps working. */
	CHECK(ibv_dereg_mr(mr) == EINVAL);
	CHECK(write_via(a, cq_a, (uintptr_t)buf + WIN, key, 'x') == IBV_WC_SUCCESS);
	CHECK(all(buf + WIN, 'x', MSG));

	/* A type 2 bind through ibv_bind_mw is libibverbs' EINVAL. */
	struct ibv_mw *t2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(t2 && ibv_bind_mw(b, t2, &bind) == EINVAL);
	CHECK(ibv_dealloc_mw(t2) == 0);

	/* Unbind (length 0): the window's key changes again, the region may go. */
	struct ibv_mw_bind unbind = {.wr_id = 0xb0,
				     .send_flags = IBV_SEND_SIGNALED,
				     .bind_info = {.mr = mr, .addr = (uintptr_t)buf}};
	CHECK(ibv_bind_mw(b, mw, &unbind) == 0);
	wc = poll1(cq_b);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 0xb0);
	CHECK(mw->rkey == ibv_inc_rkey(key));

	/* The stale key: a remote access error, and the bytes untouched. */
	CHECK(write_via(a, cq_a, (uintptr_t)buf + WIN, key, 'y') == IBV_WC_REM_ACCESS_ERR);
	CHECK(all(buf + WIN, 'x', MSG));
	CHECK(ibv_dealloc_mw(mw) == 0);
	end_pair(a, b);
}

/* Type 2 through IBV_WR_BIND_MW: WRITE through it, outside it refused; LOCAL_INV, then the
 * key refused. */
static void type2_local_inv(void)
{
	struct ibv_qp *a, *b;
	new_pair(&a, &b);
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw != NULL);
	uint32_t key = bind2(b, cq_b, mw);
	memset(buf, 0, 8192);
	CHECK(write_via(a, cq_a, (uintptr_t)buf + WIN + WIN_LEN - MSG, key, 'v') ==
	      IBV_WC_SUCCESS);
	CHECK(all(buf + WIN + WIN_LEN - MSG, 'v', MSG));
	CHECK(ibv_dereg_mr(mr) == EINVAL);

	struct ibv_send_wr w = {.wr_id = 0x1f, .opcode = IBV_WR_LOCAL_INV,
				.send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = key},
			   *bad;
	CHECK(ibv_post_send(b, &w, &bad) == 0);
	struct ibv_wc wc = poll1(cq_b);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV && wc.wr_id == 0x1f);

	CHECK(write_via(a, cq_a, (uintptr_t)buf + WIN, key, 'z') == IBV_WC_REM_ACCESS_ERR);
	CHECK(all(buf + WIN, 0, MSG));
	CHECK(ibv_dealloc_mw(mw) == 0);
	end_pair(a, b);

	/* Outside the window's range: refused (on a fresh pair, with a fresh window). */
	new_pair(&a, &b);
	mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw != NULL);
	key = bind2(b, cq_b, mw);
	CHECK(write_via(a, cq_a, (uintptr_t)buf + WIN - MSG, key, 'o') == IBV_WC_REM_ACCESS_ERR);
	CHECK(all(buf + WIN - MSG, 0, MSG));
	CHECK(ibv_dealloc_mw(mw) == 0);
	end_pair(a, b);
}

/* A bind the device refuses (a region without MW_BIND) completes IBV_WC_MW_BIND_ERR and the
 * window keeps its key; deallocating a bound window kills its key. */
static void bind_error_and_dealloc(void)
{
	struct ibv_qp *a, *b;
	new_pair(&a, &b);
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw != NULL);
	uint32_t before = mw->rkey;
	struct ibv_send_wr w = {.wr_id = 0xbe, .opcode = IBV_WR_BIND_MW,
				.send_flags = IBV_SEND_SIGNALED},
			   *bad;
	w.bind_mw.mw = mw;
	w.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	w.bind_mw.bind_info.mr = src_mr; /* LOCAL_WRITE only */
	w.bind_mw.bind_info.addr = (uintptr_t)src;
	w.bind_mw.bind_info.length = MSG;
	w.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	CHECK(ibv_post_send(b, &w, &bad) == 0);
	struct ibv_wc wc = poll1(cq_b);
	CHECK(wc.wr_id == 0xbe && wc.status == IBV_WC_MW_BIND_ERR);
	CHECK(mw->rkey == before);
	CHECK(ibv_dealloc_mw(mw) == 0);
	end_pair(a, b);

	new_pair(&a, &b);
	mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw != NULL);
	uint32_t key = bind2(b, cq_b, mw);
	CHECK(write_via(a, cq_a, (uintptr_t)buf + WIN, key, 'd') == IBV_WC_SUCCESS);
	CHECK(ibv_dealloc_mw(mw) == 0);
	CHECK(write_via(a, cq_a, (uintptr_t)buf + WIN, key, 'D') == IBV_WC_REM_ACCESS_ERR);
	CHECK(all(buf + WIN, 'd', MSG));
	end_pair(a, b);
}

/* SEND_WITH_INV: the receiver's completion says IBV_WC_WITH_INV with the key, which then is
 * refused. */
static void send_with_inv(void)
{
	struct ibv_qp *a, *b;
	new_pair(&a, &b);
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw != NULL);
	uint32_t key = bind2(b, cq_b, mw);

	struct ibv_sge rs = {.addr = (uintptr_t)buf, .length = 256, .lkey = mr->lkey};
	struct ibv_recv_wr r = {.wr_id = 0x5e, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK(ibv_post_recv(b, &r, &rbad) == 0);
	memset(src, 's', MSG);
	struct ibv_sge s = {.addr = (uintptr_t)src, .length = MSG, .lkey = src_mr->lkey};
	struct ibv_send_wr w = {.wr_id = 0x51, .sg_list = &s, .num_sge = 1,
				.opcode = IBV_WR_SEND_WITH_INV, .send_flags = IBV_SEND_SIGNALED,
				.invalidate_rkey = key},
			   *bad;
	CHECK(ibv_post_send(a, &w, &bad) == 0);
	struct ibv_wc wc = poll1(cq_a);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.wr_id == 0x51);
	wc = poll1(cq_b);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 0x5e);
	CHECK(wc.byte_len == MSG && all(buf, 's', MSG));
	CHECK(wc.wc_flags & IBV_WC_WITH_INV);
	CHECK(!(wc.wc_flags & IBV_WC_WITH_IMM));
	CHECK(wc.invalidated_rkey == key);

	CHECK(write_via(a, cq_a, (uintptr_t)buf + WIN, key, 'q') == IBV_WC_REM_ACCESS_ERR);
	CHECK(ibv_dealloc_mw(mw) == 0);
	end_pair(a, b);
}

/* The builders: ibv_wr_bind_mw, ibv_wr_local_inv on an extended QP, ibv_wr_send_inv from it
 * to a plain QP whose receive completion is read through the extended CQ API
 * (ibv_wc_read_invalidated_rkey). */
static void builders(void)
{
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS};
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &ca);
	CHECK(cqx != NULL);
	struct ibv_qp *x = ex_qp(cq_b);
	struct ibv_qp_init_attr ia = {
		.send_cq = cq_a,
		.recv_cq = ibv_cq_ex_to_cq(cqx),
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *c = ibv_create_qp(pd, &ia);
	CHECK(c != NULL);
	pair(c, x);
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(x);
	CHECK(qx && qx->wr_bind_mw && qx->wr_local_inv && qx->wr_send_inv);

	/* Bind a type 2 window on x with the builder; c writes through it. */
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw != NULL);
	uint32_t key = ibv_inc_rkey(mw->rkey);
	struct ibv_mw_bind_info info = {.mr = mr,
					.addr = (uintptr_t)buf + WIN,
					.length = WIN_LEN,
					.mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
	ibv_wr_start(qx);
	qx->wr_id = 0xe1;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(qx, mw, key, &info);
	CHECK(ibv_wr_complete(qx) == 0);
	struct ibv_wc wc = poll1(cq_b);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 0xe1);
	memset(buf, 0, 8192);
	CHECK(write_via(c, cq_a, (uintptr_t)buf + WIN + 8, key, 'e') == IBV_WC_SUCCESS);
	CHECK(all(buf + WIN + 8, 'e', MSG));

	/* Local invalidation with the builder. */
	ibv_wr_start(qx);
	qx->wr_id = 0xe2;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_local_inv(qx, key);
	CHECK(ibv_wr_complete(qx) == 0);
	wc = poll1(cq_b);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV && wc.wr_id == 0xe2);

	/* SEND_WITH_INV with the builder, invalidating a window c bound. */
	struct ibv_mw *mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw2 != NULL);
	uint32_t key2 = bind2(c, cq_a, mw2);
	struct ibv_sge rs = {.addr = (uintptr_t)buf, .length = 256, .lkey = mr->lkey};
	struct ibv_recv_wr r = {.wr_id = 0xe4, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK(ibv_post_recv(c, &r, &rbad) == 0);
	memset(src, 'i', MSG);
	ibv_wr_start(qx);
	qx->wr_id = 0xe3;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_inv(qx, key2);
	ibv_wr_set_sge(qx, src_mr->lkey, (uintptr_t)src, MSG);
	CHECK(ibv_wr_complete(qx) == 0);
	wc = poll1(cq_b);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.wr_id == 0xe3);
	struct ibv_poll_cq_attr pa = {};
	double end = now() + 5;
	int rc;
	while ((rc = ibv_start_poll(cqx, &pa)) == ENOENT)
		CHECK(now() < end);
	CHECK(rc == 0);
	CHECK(cqx->status == IBV_WC_SUCCESS && cqx->wr_id == 0xe4);
	CHECK(ibv_wc_read_opcode(cqx) == IBV_WC_RECV && ibv_wc_read_byte_len(cqx) == MSG);
	CHECK(ibv_wc_read_wc_flags(cqx) & IBV_WC_WITH_INV);
	CHECK(ibv_wc_read_invalidated_rkey(cqx) == key2);
	ibv_end_poll(cqx);
	CHECK(all(buf, 'i', MSG));

	/* Both keys are dead now: x's (local invalidation), and c's, which x's WRITE finds. */
	ibv_wr_start(qx);
	qx->wr_id = 0xe5;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qx, key2, (uintptr_t)buf + WIN);
	ibv_wr_set_sge(qx, src_mr->lkey, (uintptr_t)src, MSG);
	CHECK(ibv_wr_complete(qx) == 0);
	wc = poll1(cq_b);
	CHECK(wc.wr_id == 0xe5 && wc.status == IBV_WC_REM_ACCESS_ERR);

	CHECK(ibv_dealloc_mw(mw) == 0 && ibv_dealloc_mw(mw2) == 0);
	CHECK(ibv_destroy_qp(c) == 0 && ibv_destroy_qp(x) == 0);
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) == 0);
	drain(cq_a);
	drain(cq_b);
}

int main(void)
{
	struct ibv_device **list = open_first_device();
	pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL);
	buf = aligned_alloc(4096, 8192);
	src = aligned_alloc(4096, 4096);
	CHECK(buf && src);
	memset(buf, 0, 8192);
	mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	src_mr = ibv_reg_mr(pd, src, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr && src_mr);
	cq_a = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	cq_b = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(cq_a && cq_b);

	alloc_dealloc();
	type1();
	type2_local_inv();
	bind_error_and_dealloc();
	send_with_inv();
	builders();

	/* Every window gone: the region deregisters. */
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(ibv_dereg_mr(src_mr) == 0);
	CHECK(ibv_destroy_cq(cq_a) == 0 && ibv_destroy_cq(cq_b) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);
	free(buf);
	free(src);
	printf("ok %ld\n", checks);
	return 0;
}
