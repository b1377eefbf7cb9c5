/*
 * The extended verbs as rxe's provider offers them, through the C ABI (the inline functions
 * of Debian's verbs.h calling the shim's ops and function pointers): ibv_create_cq_ex and the
 * ibv_cq_ex polling API, ibv_resize_cq, ibv_create_qp_ex and the ibv_wr_* work-request API,
 * with traffic between two RC QPs (and two UD QPs) over loopback. Prints "ok <checks>" and
 * exits 0, or names the first failed check and exits 1. Every wait is bounded (5 s).
 */
#define _GNU_SOURCE
#include "common.h"
#include <endian.h>

static struct ibv_device_attr dattr;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
/* [0, 4096): the sender's side; [4096, 8192): the receiver's. */
static char *buf;

static void to_rts(struct ibv_qp *qp, uint32_t dest)
{
	rc_to_rts(qp, dest,
		  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			  IBV_ACCESS_REMOTE_ATOMIC,
		  4);
}

static void post_recv(struct ibv_qp *qp, uint64_t wr_id, uint64_t addr, uint32_t len)
{
	struct ibv_sge s = {.addr = addr, .length = len, .lkey = mr->lkey};
	struct ibv_recv_wr w = {.wr_id = wr_id, .sg_list = &s, .num_sge = 1}, *bad;
	CHECK(ibv_post_recv(qp, &w, &bad) == 0);
}

/* One completion as the extended API reads it. */
struct exwc {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len, qp_num, src_qp, vendor_err, slid;
	unsigned int wc_flags;
	__be32 imm;
	uint8_t sl, dlid_path_bits;
};

static void read_ex(struct ibv_cq_ex *cq, struct exwc *w)
{
	w->wr_id = cq->wr_id;
	w->status = cq->status;
	w->opcode = ibv_wc_read_opcode(cq);
	w->byte_len = ibv_wc_read_byte_len(cq);
	w->qp_num = ibv_wc_read_qp_num(cq);
	w->src_qp = ibv_wc_read_src_qp(cq);
	w->vendor_err = ibv_wc_read_vendor_err(cq);
	w->wc_flags = ibv_wc_read_wc_flags(cq);
	w->imm = w->wc_flags & IBV_WC_WITH_IMM ? ibv_wc_read_imm_data(cq) : 0;
	w->slid = ibv_wc_read_slid(cq);
	w->sl = ibv_wc_read_sl(cq);
	w->dlid_path_bits = ibv_wc_read_dlid_path_bits(cq);
}

/* n completions of an extended CQ in one poll (start_poll, then next_poll), each wait bounded
 * by 5 s; ENOENT from next_poll keeps the poll, which end_poll ends. */
static void poll_ex(struct ibv_cq_ex *cq, int n, struct exwc *out)
{
	struct ibv_poll_cq_attr pa = {};
	double end = now() + 5;
	int r;
	while ((r = ibv_start_poll(cq, &pa)) == ENOENT)
		CHECK(now() < end);
	CHECK(r == 0);
	read_ex(cq, &out[0]);
	for (int i = 1; i < n; i++) {
		while ((r = ibv_next_poll(cq)) == ENOENT)
			CHECK(now() < end);
		CHECK(r == 0);
		read_ex(cq, &out[i]);
	}
	ibv_end_poll(cq);
}

static struct ibv_qp *plain_qp(struct ibv_cq *scq, struct ibv_cq *rcq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = scq,
		.recv_cq = rcq,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 2},
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp != NULL);
	return qp;
}

/* ---------------------------------------------------------------------------------------- */

static void cq_ex_creation(void)
{
	struct ibv_cq_init_attr_ex a = {.cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS};
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &a);
	CHECK(cq != NULL);
	CHECK(cq->context == ctx && cq->cqe == 16);
	CHECK(cq->start_poll && cq->next_poll && cq->end_poll && cq->read_opcode &&
	      cq->read_vendor_err && cq->read_wc_flags && cq->read_byte_len &&
	      cq->read_imm_data && cq->read_qp_num && cq->read_src_qp && cq->read_slid &&
	      cq->read_sl && cq->read_dlid_path_bits);
	/* No timestamps on rxe: their readers stay unset. */
	CHECK(cq->read_completion_ts == NULL && cq->read_completion_wallclock_ns == NULL);
	/* An empty CQ: ENOENT, and the poll is not held (a second start_poll answers too). */
	struct ibv_poll_cq_attr pa = {};
	CHECK(ibv_start_poll(cq, &pa) == ENOENT && errno == ENOENT);
	CHECK(ibv_start_poll(cq, &pa) == ENOENT);
	/* The base CQ works with the plain API as well. */
	CHECK(ibv_req_notify_cq(ibv_cq_ex_to_cq(cq), 0) == 0);
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0);

	/* Readers only for the fields asked for, as rxe. */
	a.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
	cq = ibv_create_cq_ex(ctx, &a);
	CHECK(cq != NULL && cq->read_byte_len && !cq->read_imm_data && !cq->read_qp_num &&
	      cq->read_wc_flags && cq->read_opcode);
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0);

	/* What rxe refuses: the non-standard fields (but the timestamps and the tag matching
	 * info, which softroce writes: beyond_rxe.c, tm.c), unknown comp_mask bits,
	 * IGNORE_OVERRUN (the kernel's rxe takes no CQ flag). */
	uint64_t refused[] = {IBV_WC_EX_WITH_CVLAN, IBV_WC_EX_WITH_FLOW_TAG};
	for (unsigned i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		a.wc_flags = IBV_WC_STANDARD_FLAGS | refused[i];
		errno = 0;
		CHECK(ibv_create_cq_ex(ctx, &a) == NULL && errno == EOPNOTSUPP);
	}
	a.wc_flags = 0;
	a.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
	a.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
	CHECK(ibv_create_cq_ex(ctx, &a) == NULL && errno == EOPNOTSUPP);
	a.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
	cq = ibv_create_cq_ex(ctx, &a);
	CHECK(cq != NULL);
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0);
	a.comp_mask = 1 << 5;
	a.flags = 0;
	CHECK(ibv_create_cq_ex(ctx, &a) == NULL && errno == EOPNOTSUPP);
	/* Then as ibv_create_cq: EINVAL for too many entries or a bad vector. */
	a.comp_mask = 0;
	a.cqe = dattr.max_cqe + 1;
	CHECK(ibv_create_cq_ex(ctx, &a) == NULL && errno == EINVAL);
	a.cqe = 4;
	a.comp_vector = ctx->num_comp_vectors;
	CHECK(ibv_create_cq_ex(ctx, &a) == NULL && errno == EINVAL);
}

static void cq_ex_traffic(void)
{
	struct ibv_cq_init_attr_ex a = {.cqe = 32, .wc_flags = IBV_WC_STANDARD_FLAGS};
	struct ibv_cq_ex *scq = ibv_create_cq_ex(ctx, &a), *rcq = ibv_create_cq_ex(ctx, &a);
	CHECK(scq && rcq);
	struct ibv_qp *qa = plain_qp(ibv_cq_ex_to_cq(scq), ibv_cq_ex_to_cq(scq));
	struct ibv_qp *qb = plain_qp(ibv_cq_ex_to_cq(rcq), ibv_cq_ex_to_cq(rcq));
	to_rts(qa, qb->qp_num);
	to_rts(qb, qa->qp_num);

	/* A SEND with immediate, then three plain SENDs read in one poll. */
	for (int i = 0; i < 4; i++)
		post_recv(qb, 100 + i, (uint64_t)(uintptr_t)(buf + 4096 + 64 * i), 64);
	for (int i = 0; i < 4; i++) {
		memset(buf + 64 * i, 'a' + i, 64);
		struct ibv_sge s = {.addr = (uintptr_t)(buf + 64 * i), .length = 10 + i,
				    .lkey = mr->lkey};
		struct ibv_send_wr w = {.wr_id = 200 + i, .sg_list = &s, .num_sge = 1,
					.opcode = i ? IBV_WR_SEND : IBV_WR_SEND_WITH_IMM,
					.send_flags = IBV_SEND_SIGNALED,
					.imm_data = htobe32(0x1234)},
				   *bad;
		CHECK(ibv_post_send(qa, &w, &bad) == 0);
	}
	struct exwc r[4], s[4];
	poll_ex(rcq, 1, r);
	CHECK(r[0].status == IBV_WC_SUCCESS && r[0].wr_id == 100);
	CHECK(r[0].opcode == IBV_WC_RECV && r[0].byte_len == 10);
	CHECK(r[0].wc_flags & IBV_WC_WITH_IMM && r[0].imm == htobe32(0x1234));
	CHECK(r[0].qp_num == qb->qp_num && r[0].src_qp == qa->qp_num);
	CHECK(r[0].vendor_err == 0 && r[0].slid == 0 && r[0].sl == 0 && r[0].dlid_path_bits == 0);
	CHECK(buf[4096] == 'a');
	poll_ex(rcq, 3, r + 1);
	for (int i = 1; i < 4; i++) {
		CHECK(r[i].status == IBV_WC_SUCCESS && r[i].wr_id == 100 + (uint64_t)i);
		CHECK(r[i].opcode == IBV_WC_RECV && r[i].byte_len == 10 + (uint32_t)i);
		CHECK(!(r[i].wc_flags & IBV_WC_WITH_IMM));
		CHECK(buf[4096 + 64 * i] == 'a' + i);
	}
	poll_ex(scq, 4, s);
	for (int i = 0; i < 4; i++) {
		CHECK(s[i].status == IBV_WC_SUCCESS && s[i].wr_id == 200 + (uint64_t)i);
		CHECK(s[i].opcode == IBV_WC_SEND && s[i].qp_num == qa->qp_num);
	}
	/* Drained: the next poll finds nothing. */
	struct ibv_poll_cq_attr pa = {};
	CHECK(ibv_start_poll(scq, &pa) == ENOENT);

	CHECK(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0);
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(scq)) == 0);
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(rcq)) == 0);
}

/* ---------------------------------------------------------------------------------------- */

static void resize(void)
{
	struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	CHECK(scq && rcq);
	struct ibv_qp *qa = plain_qp(scq, scq), *qb = plain_qp(rcq, rcq);
	to_rts(qa, qb->qp_num);
	to_rts(qb, qa->qp_num);
	/* Bad sizes: EINVAL, the CQ unchanged. */
	CHECK(ibv_resize_cq(rcq, 0) == EINVAL && errno == EINVAL && rcq->cqe == 4);
	CHECK(ibv_resize_cq(rcq, -1) == EINVAL && rcq->cqe == 4);
	CHECK(ibv_resize_cq(rcq, dattr.max_cqe + 1) == EINVAL && rcq->cqe == 4);
	/* Grow to 8, then take 6 receive completions, which 4 entries could not hold. */
	CHECK(ibv_resize_cq(rcq, 8) == 0 && rcq->cqe == 8);
	for (int i = 0; i < 6; i++)
		post_recv(qb, 300 + i, (uint64_t)(uintptr_t)(buf + 4096 + 64 * i), 64);
	for (int i = 0; i < 6; i++) {
		struct ibv_sge s = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
		struct ibv_send_wr w = {.wr_id = 400 + i, .sg_list = &s, .num_sge = 1,
					.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
				   *bad;
		CHECK(ibv_post_send(qa, &w, &bad) == 0);
	}
	/* The sends are acknowledged only after the responder completed each receive (rxe's
	 * order, and softroce's): 6 send completions mean 6 receive completions wait. */
	for (int i = 0; i < 6; i++)
		CHECK(poll1(scq).wr_id == 400 + (uint64_t)i);
	/* Below the completions waiting: EINVAL, as rxe; down to exactly them: fine. */
	CHECK(ibv_resize_cq(rcq, 5) == EINVAL && rcq->cqe == 8);
	CHECK(ibv_resize_cq(rcq, 1) == EINVAL);
	CHECK(ibv_resize_cq(rcq, 6) == 0 && rcq->cqe == 6);
	/* Every completion kept, in order. */
	for (int i = 0; i < 6; i++) {
		struct ibv_wc wc = poll1(rcq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 300 + (uint64_t)i);
	}
	/* Empty now: any size from 1 up. */
	CHECK(ibv_resize_cq(rcq, 1) == 0 && rcq->cqe == 1);
	CHECK(ibv_resize_cq(rcq, 64) == 0 && rcq->cqe == 64);
	CHECK(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0);
	CHECK(ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq) == 0);
	CHECK(ibv_resize_cq(rcq, 8) == EINVAL);
}

/* ---------------------------------------------------------------------------------------- */

static struct ibv_qp *ex_qp(struct ibv_cq *cq, enum ibv_qp_type t, uint64_t ops, uint32_t inl)
{
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 2,
			.max_inline_data = inl},
		.qp_type = t,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = ops,
	};
	return ibv_create_qp_ex(ctx, &ia);
}

enum {
	RC_OPS = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
		 IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
		 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
		 IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV |
		 IBV_QP_EX_WITH_ATOMIC_WRITE,
};

static void qp_ex_creation(struct ibv_cq *cq)
{
	/* comp_mask PD alone is ibv_create_qp (verbs.h): a plain QP, no ibv_qp_ex. */
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = pd,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &ia);
	CHECK(qp != NULL && ibv_qp_to_qp_ex(qp) == NULL);
	CHECK(ibv_destroy_qp(qp) == 0);
	/* Creation flags: 0 is what rxe takes (test_qp draws exactly that on a non-Mellanox
	 * device); an ibv_qp_ex with the setters but no operation. */
	ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	qp = ibv_create_qp_ex(ctx, &ia);
	CHECK(qp != NULL);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	CHECK(x != NULL && (void *)x == (void *)qp && x->qp_base.qp_num == qp->qp_num);
	CHECK(x->wr_start && x->wr_complete && x->wr_abort && x->wr_set_sge && !x->wr_send);
	CHECK(ibv_destroy_qp(qp) == 0);
	ia.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
	CHECK(ibv_create_qp_ex(ctx, &ia) == NULL && errno == EOPNOTSUPP);
	ia.create_flags = 0;
	/* comp_mask bits rxe does not take; no PD. */
	ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
	CHECK(ibv_create_qp_ex(ctx, &ia) == NULL && errno == EOPNOTSUPP);
	ia.comp_mask = IBV_QP_INIT_ATTR_CREATE_FLAGS;
	CHECK(ibv_create_qp_ex(ctx, &ia) == NULL && errno == EINVAL);

	/* Every operation softroce posts, on RC: each builder set, the two it lacks NULL. */
	qp = ex_qp(cq, IBV_QPT_RC, RC_OPS, 0);
	CHECK(qp != NULL);
	x = ibv_qp_to_qp_ex(qp);
	CHECK(x && x->wr_send && x->wr_send_imm && x->wr_rdma_write && x->wr_rdma_write_imm &&
	      x->wr_rdma_read && x->wr_atomic_cmp_swp && x->wr_atomic_fetch_add &&
	      x->wr_set_ud_addr && x->wr_set_inline_data && x->wr_set_inline_data_list &&
	      x->wr_set_sge_list && x->wr_bind_mw && x->wr_local_inv && x->wr_send_inv &&
	      x->wr_atomic_write);
	CHECK(!x->wr_send_tso && !x->wr_set_xrc_srqn);
	CHECK(ibv_destroy_qp(qp) == 0);
	/* Only the operations asked for: the others stay NULL (as rdma-core leaves them). */
	qp = ex_qp(cq, IBV_QPT_RC, IBV_QP_EX_WITH_SEND, 0);
	x = ibv_qp_to_qp_ex(qp);
	CHECK(x && x->wr_send && !x->wr_send_imm && !x->wr_rdma_write && !x->wr_rdma_read &&
	      !x->wr_atomic_cmp_swp && !x->wr_bind_mw && !x->wr_local_inv && !x->wr_send_inv);
	CHECK(ibv_destroy_qp(qp) == 0);
	/* What softroce lacks (TSO), and what the QP type cannot do (windows and invalidation on
	 * UD, ATOMIC WRITE on UC and UD): EOPNOTSUPP, as rxe for bits it does not support. */
	CHECK(ex_qp(cq, IBV_QPT_UC, IBV_QP_EX_WITH_ATOMIC_WRITE, 0) == NULL && errno == EOPNOTSUPP);
	CHECK(ex_qp(cq, IBV_QPT_UD, IBV_QP_EX_WITH_ATOMIC_WRITE, 0) == NULL && errno == EOPNOTSUPP);
	uint64_t refused[] = {IBV_QP_EX_WITH_TSO};
	for (unsigned i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		CHECK(ex_qp(cq, IBV_QPT_RC, IBV_QP_EX_WITH_SEND | refused[i], 0) == NULL &&
		      errno == EOPNOTSUPP);
	CHECK(ex_qp(cq, IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE, 0) == NULL && errno == EOPNOTSUPP);
	CHECK(ex_qp(cq, IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_BIND_MW, 0) == NULL &&
	      errno == EOPNOTSUPP);
	CHECK(ex_qp(cq, IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_LOCAL_INV, 0) == NULL &&
	      errno == EOPNOTSUPP);
	CHECK(ex_qp(cq, IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_READ, 0) == NULL && errno == EOPNOTSUPP);
	qp = ex_qp(cq, IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND, 0);
	CHECK(qp != NULL && ibv_destroy_qp(qp) == 0);
	/* XRC: an initiator takes RC's operations but ATOMIC WRITE (XRC has no such opcode),
	 * and only it has wr_set_xrc_srqn (spec-notes/xrc.md). */
	qp = ex_qp(cq, IBV_QPT_XRC_SEND, IBV_QP_EX_WITH_SEND, 0);
	x = qp ? ibv_qp_to_qp_ex(qp) : NULL;
	CHECK(x && x->wr_send && x->wr_set_xrc_srqn && ibv_destroy_qp(qp) == 0);
	CHECK(ex_qp(cq, IBV_QPT_XRC_SEND, IBV_QP_EX_WITH_ATOMIC_WRITE, 0) == NULL &&
	      errno == EOPNOTSUPP);
}

static void qp_ex_rc(struct ibv_cq *scq, struct ibv_cq *rcq)
{
	struct ibv_qp *qa = ex_qp(scq, IBV_QPT_RC, RC_OPS, 64);
	struct ibv_qp *qb = plain_qp(rcq, rcq);
	CHECK(qa && qb);
	to_rts(qa, qb->qp_num);
	to_rts(qb, qa->qp_num);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qa);
	char *src = buf, *dst = buf + 4096;
	uint64_t rdst = (uintptr_t)dst;
	memset(buf, 0, 8192);
	for (int i = 0; i < 4; i++)
		post_recv(qb, 500 + i, rdst + 256 * i, 256);

	/* One batch: SEND (one SGE), SEND with immediate (an SGE list), RDMA WRITE (inline
	 * data), RDMA WRITE with immediate (an inline list, which takes a receive WR). */
	memcpy(src, "hello", 5);
	memcpy(src + 64, "wor", 3);
	memcpy(src + 128, "ld", 2);
	char inl[16] = "inline!", p1[4] = "abc", p2[4] = "defg";
	ibv_wr_start(x);
	x->wr_id = 1;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)src, 5);
	x->wr_id = 2;
	ibv_wr_send_imm(x, htobe32(0xabcd));
	struct ibv_sge list[2] = {{(uintptr_t)(src + 64), 3, mr->lkey},
				  {(uintptr_t)(src + 128), 2, mr->lkey}};
	ibv_wr_set_sge_list(x, 2, list);
	x->wr_id = 3;
	ibv_wr_rdma_write(x, mr->rkey, rdst + 2048);
	ibv_wr_set_inline_data(x, inl, 7);
	/* The inline bytes are copied at the call: changing them now changes nothing. */
	inl[0] = 'X';
	x->wr_id = 4;
	ibv_wr_rdma_write_imm(x, mr->rkey, rdst + 2100, htobe32(77));
	struct ibv_data_buf bl[2] = {{p1, 3}, {p2, 4}};
	ibv_wr_set_inline_data_list(x, 2, bl);
	CHECK(ibv_wr_complete(x) == 0);
	for (int i = 0; i < 4; i++) {
		struct ibv_wc wc = poll1(scq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 1 + (uint64_t)i);
		CHECK(wc.opcode == (i < 2 ? IBV_WC_SEND : IBV_WC_RDMA_WRITE));
	}
	struct ibv_wc r = poll1(rcq);
	CHECK(r.wr_id == 500 && r.opcode == IBV_WC_RECV && r.byte_len == 5);
	CHECK(memcmp(dst, "hello", 5) == 0);
	r = poll1(rcq);
	CHECK(r.wr_id == 501 && r.byte_len == 5 && (r.wc_flags & IBV_WC_WITH_IMM) &&
	      r.imm_data == htobe32(0xabcd));
	CHECK(memcmp(dst + 256, "world", 5) == 0);
	r = poll1(rcq);
	CHECK(r.wr_id == 502 && r.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
	      r.imm_data == htobe32(77) && r.byte_len == 7);
	CHECK(memcmp(dst + 2048, "inline!", 7) == 0);
	CHECK(memcmp(dst + 2100, "abcdefg", 7) == 0);

	/* READ and both atomics, unsignaled except the last (sq_sig_all is 0). */
	memcpy(dst + 3000, "remote", 6);
	uint64_t *word = (uint64_t *)(dst + 3072), *old = (uint64_t *)(src + 1024);
	*word = 10;
	ibv_wr_start(x);
	x->wr_flags = 0;
	x->wr_id = 10;
	ibv_wr_rdma_read(x, mr->rkey, rdst + 3000);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)(src + 512), 6);
	x->wr_id = 11;
	ibv_wr_atomic_cmp_swp(x, mr->rkey, rdst + 3072, 10, 25);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)old, 8);
	x->wr_id = 12;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_fetch_add(x, mr->rkey, rdst + 3072, 5);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)(old + 1), 8);
	CHECK(ibv_wr_complete(x) == 0);
	struct ibv_wc wc = poll1(scq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 12 && wc.opcode == IBV_WC_FETCH_ADD);
	CHECK(memcmp(src + 512, "remote", 6) == 0);
	CHECK(old[0] == 10 && old[1] == 25 && *word == 30);

	/* ATOMIC WRITE (IBTA 1.5): the 8 bytes are copied at the call (changing them after it
	 * changes nothing) and land in one piece; a misaligned address is the responder's invalid
	 * request, as on rxe (tested in the transport: it moves both QPs to ERROR). */
	uint64_t value = 0x0102030405060708ULL;
	ibv_wr_start(x);
	x->wr_id = 13;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(x, mr->rkey, rdst + 3072, &value);
	value = 0;
	CHECK(ibv_wr_complete(x) == 0);
	wc = poll1(scq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 13 && wc.opcode == IBV_WC_ATOMIC_WRITE);
	CHECK(*word == 0x0102030405060708ULL);
	/* A NULL value pointer fails the batch (rxe's provider would read it); ibv_post_send with
	 * IBV_WR_ATOMIC_WRITE is EINVAL (rxe's provider posts it without its key or value). */
	ibv_wr_start(x);
	ibv_wr_atomic_write(x, mr->rkey, rdst + 3072, NULL);
	CHECK(ibv_wr_complete(x) == EINVAL);
	struct ibv_sge aw_sge = {(uintptr_t)&value, 8, mr->lkey};
	struct ibv_send_wr aw = {.wr_id = 14, .sg_list = &aw_sge, .num_sge = 1,
				 .opcode = IBV_WR_ATOMIC_WRITE, .send_flags = IBV_SEND_SIGNALED};
	aw.wr.rdma.remote_addr = rdst + 3072;
	aw.wr.rdma.rkey = mr->rkey;
	struct ibv_send_wr *bad = NULL;
	CHECK(ibv_post_send(qa, &aw, &bad) == EINVAL && bad == &aw);
	CHECK(*word == 0x0102030405060708ULL);

	/* wr_abort: nothing of the batch goes out; the next batch does. */
	ibv_wr_start(x);
	x->wr_id = 20;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)src, 5);
	ibv_wr_abort(x);
	memcpy(src, "after", 5);
	ibv_wr_start(x);
	x->wr_id = 21;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)src, 5);
	CHECK(ibv_wr_complete(x) == 0);
	wc = poll1(scq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 21);
	r = poll1(rcq);
	CHECK(r.wr_id == 503 && memcmp(dst + 768, "after", 5) == 0);

	/* Errors kept until wr_complete, which then posts nothing of the batch: too many SGEs,
	 * too much inline data (both ENOSPC, as rxe), more WRs than the queue holds (ENOSPC), a
	 * setter before any operation (EINVAL). The QP's 64 bytes of inline data give it 4 SGEs
	 * for the 2 asked, as rxe sizes a send WQE: 5 are too many. */
	struct ibv_sge five[5] = {list[0], list[1], list[0], list[1], list[0]};
	ibv_wr_start(x);
	x->wr_id = 30;
	ibv_wr_send(x);
	ibv_wr_set_sge_list(x, 5, five);
	CHECK(ibv_wr_complete(x) == ENOSPC);
	char big[65] = {0};
	ibv_wr_start(x);
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, big, 65);
	CHECK(ibv_wr_complete(x) == ENOSPC);
	ibv_wr_start(x);
	for (int i = 0; i < 17; i++) {
		ibv_wr_rdma_write(x, mr->rkey, rdst);
		ibv_wr_set_sge(x, mr->lkey, (uintptr_t)src, 1);
	}
	CHECK(ibv_wr_complete(x) == ENOSPC);
	ibv_wr_start(x);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)src, 1);
	CHECK(ibv_wr_complete(x) == EINVAL);
	/* None of them went out: the next signaled WR is the next completion. */
	post_recv(qb, 504, rdst, 64);
	ibv_wr_start(x);
	x->wr_id = 40;
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, "last", 4);
	CHECK(ibv_wr_complete(x) == 0);
	wc = poll1(scq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 40 && wc.opcode == IBV_WC_SEND);
	r = poll1(rcq);
	CHECK(r.wr_id == 504 && r.byte_len == 4 && memcmp(dst, "last", 4) == 0);
	struct ibv_wc none;
	CHECK(ibv_poll_cq(scq, 1, &none) == 0 && ibv_poll_cq(rcq, 1, &none) == 0);
	CHECK(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0);
}

static void qp_ex_ud(struct ibv_cq *scq, struct ibv_cq *rcq)
{
	struct ibv_qp *qa = ex_qp(scq, IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
				  0);
	struct ibv_qp *qb = ex_qp(rcq, IBV_QPT_UD, IBV_QP_EX_WITH_SEND, 0);
	CHECK(qa && qb);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11};
	for (int i = 0; i < 2; i++) {
		struct ibv_qp *q = i ? qb : qa;
		a.qp_state = IBV_QPS_INIT;
		CHECK(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						 IBV_QP_QKEY) == 0);
		a.qp_state = IBV_QPS_RTR;
		CHECK(ibv_modify_qp(q, &a, IBV_QP_STATE) == 0);
		a.qp_state = IBV_QPS_RTS;
		CHECK(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
	}
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1,
				 .grh = {.dgid = gid, .sgid_index = 1, .hop_limit = 1}};
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah != NULL);
	char *src = buf, *dst = buf + 4096;
	memcpy(src, "datagram", 8);
	post_recv(qb, 600, (uintptr_t)dst, 40 + 64);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qa);
	/* No address: EINVAL at wr_complete. */
	ibv_wr_start(x);
	x->wr_id = 60;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)src, 8);
	CHECK(ibv_wr_complete(x) == EINVAL);
	ibv_wr_start(x);
	x->wr_id = 61;
	ibv_wr_send_imm(x, htobe32(9));
	ibv_wr_set_ud_addr(x, ah, qb->qp_num, 0x11);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)src, 8);
	CHECK(ibv_wr_complete(x) == 0);
	struct ibv_wc wc = poll1(scq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 61);
	struct ibv_wc r = poll1(rcq);
	CHECK(r.status == IBV_WC_SUCCESS && r.wr_id == 600 && r.byte_len == 40 + 8);
	CHECK(r.src_qp == qa->qp_num && (r.wc_flags & IBV_WC_WITH_IMM) && r.imm_data == htobe32(9));
	CHECK(memcmp(dst + 40, "datagram", 8) == 0);
	CHECK(ibv_destroy_ah(ah) == 0);
	CHECK(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0);
}

static void qp_ex(void)
{
	struct ibv_cq *scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(scq && rcq);
	qp_ex_creation(scq);
	qp_ex_rc(scq, rcq);
	qp_ex_ud(scq, rcq);
	CHECK(ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq) == 0);
}

int main(void)
{
	struct ibv_device **list = open_first_device();
	CHECK(ibv_query_device(ctx, &dattr) == 0);
	pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL);
	buf = aligned_alloc(4096, 8192);
	CHECK(buf != NULL);
	memset(buf, 0, 8192);
	mr = ibv_reg_mr(pd, buf, 8192,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(mr != NULL);

	cq_ex_creation();
	cq_ex_traffic();
	resize();
	qp_ex();

	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);
	free(buf);
	printf("ok %ld\n", checks);
	return 0;
}
