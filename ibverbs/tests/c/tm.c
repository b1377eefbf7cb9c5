/*
 * Tag matching in software (spec-notes/beyond-rxe.md rule 13) through the C ABI: the device's
 * tm_caps, a TM SRQ and its creation errors, ibv_post_srq_ops (ADD, DEL, SYNC) with their
 * completions and TM errors, an extended CQ with IBV_WC_EX_WITH_TM_INFO, and RC SENDs with a
 * TMH arriving at the TM SRQ: matched EAGER data in the tag's buffer without its header,
 * unexpected and NO_TAG messages whole in ordinary SRQ receives, the unexpected count and
 * its synchronisation.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <infiniband/tm_types.h>
#include "loopback.h"

static struct ibv_cq_ex *cqx;
static struct ibv_srq *srq;
static struct ibv_qp *qp_a, *qp_b;
/* Tag buffers (tagbuf) and the SRQ's ordinary receive buffers (plain), both under dst_mr. */
static char *dst;
static struct ibv_mr *dst_mr;

struct cqe {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	unsigned int flags;
	uint32_t byte_len;
	struct ibv_wc_tm_info tm;
};

/* One completion of the extended CQ, read through its readers (the wait bounded by 5 s). */
static struct cqe poll_ex(void)
{
	struct ibv_poll_cq_attr attr = {0};
	double end = now() + 5;
	int r;
	while ((r = ibv_start_poll(cqx, &attr)) == ENOENT)
		CHECK(now() < end);
	CHECK(r == 0);
	struct cqe c = {
		.wr_id = cqx->wr_id,
		.status = cqx->status,
		.opcode = ibv_wc_read_opcode(cqx),
		.flags = ibv_wc_read_wc_flags(cqx),
		.byte_len = ibv_wc_read_byte_len(cqx),
	};
	ibv_wc_read_tm_info(cqx, &c.tm);
	ibv_end_poll(cqx);
	return c;
}

/* Posts one tag list operation on srq; returns ibv_post_srq_ops's result. */
static int op(struct ibv_ops_wr *wr)
{
	struct ibv_ops_wr *bad = NULL;
	return ibv_post_srq_ops(srq, wr, &bad);
}

/* Adds `tag` (mask 0xffff) over 256 bytes at dst + off; returns the handle. */
static uint32_t add_tag(uint64_t tag, size_t off, uint64_t wr_id, unsigned int *flags)
{
	struct ibv_sge sge = {.addr = (uintptr_t)dst + off, .length = 256, .lkey = dst_mr->lkey};
	struct ibv_ops_wr wr = {
		.wr_id = wr_id,
		.opcode = IBV_WR_TAG_ADD,
		.flags = IBV_OPS_SIGNALED,
		.tm = {.add = {.recv_wr_id = tag + 100,
			       .sg_list = &sge,
			       .num_sge = 1,
			       .tag = tag,
			       .mask = 0xffff}},
	};
	CHECK(op(&wr) == 0);
	struct cqe c = poll_ex();
	CHECK(c.status == IBV_WC_SUCCESS && c.opcode == IBV_WC_TM_ADD && c.wr_id == wr_id);
	*flags = c.flags;
	return wr.tm.handle;
}

/* An ordinary receive on the SRQ: 256 bytes at dst + off. */
static void srq_recv(size_t off, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)dst + off, .length = 256, .lkey = dst_mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
	CHECK(ibv_post_srq_recv(srq, &wr, &bad) == 0);
}

static void send_src(size_t len);

/* A SEND from qp_a of a TMH (op, app_ctx, tag) and `len` bytes of `fill`; waits for A's
 * completion. */
static void send_tagged(uint8_t tmh_op, uint32_t app_ctx, uint64_t tag, char fill, size_t len)
{
	struct ibv_tmh h = {.opcode = tmh_op, .app_ctx = htobe32(app_ctx), .tag = htobe64(tag)};
	memcpy(src, &h, sizeof(h));
	memset(src + sizeof(h), fill, len);
	send_src(sizeof(h) + len);
}

/* A SEND of src's first `len` bytes from qp_a; waits for A's completion. */
static void send_src(size_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = len, .lkey = src_mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 9,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	CHECK(ibv_post_send(qp_a, &wr, &bad) == 0);
	struct ibv_wc wc = poll1(cq_a);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 9);
}

static int all(const char *p, char c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != c)
			return 0;
	return 1;
}

static void caps(void)
{
	struct ibv_device_attr_ex a;
	CHECK(ibv_query_device_ex(ctx, NULL, &a) == 0);
	CHECK(a.tm_caps.flags & IBV_TM_CAP_RC);
	CHECK(a.tm_caps.max_num_tags >= 16 && a.tm_caps.max_ops >= 10);
	CHECK(a.tm_caps.max_rndv_hdr_size >= sizeof(struct ibv_tmh) + sizeof(struct ibv_rvh));
	CHECK(a.tm_caps.max_sge >= 1);
}

/* The TM SRQ and the errors of its creation and of ops on another SRQ. */
static void create(void)
{
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 64, .wc_flags = IBV_WC_EX_WITH_TM_INFO | IBV_WC_STANDARD_FLAGS};
	cqx = ibv_create_cq_ex(ctx, &ca);
	CHECK(cqx != NULL);
	struct ibv_srq_init_attr_ex sa = {
		.attr = {.max_wr = 16, .max_sge = 1},
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ,
		.srq_type = IBV_SRQT_TM,
		.pd = pd,
		.cq = ibv_cq_ex_to_cq(cqx),
		.tm_cap = {.max_num_tags = 4, .max_ops = 10},
	};
	CHECK(ibv_create_srq_ex(ctx, &sa) == NULL && errno == EINVAL); /* no IBV_SRQ_INIT_ATTR_TM */
	sa.comp_mask |= IBV_SRQ_INIT_ATTR_TM;
	sa.tm_cap.max_num_tags = 1u << 30;
	CHECK(ibv_create_srq_ex(ctx, &sa) == NULL && errno == EINVAL);
	sa.tm_cap.max_num_tags = 4;
	srq = ibv_create_srq_ex(ctx, &sa);
	CHECK(srq != NULL);

	struct ibv_srq_init_attr basic = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *plain = ibv_create_srq(pd, &basic);
	CHECK(plain != NULL);
	struct ibv_ops_wr sync = {.opcode = IBV_WR_TAG_SYNC, .flags = IBV_OPS_SIGNALED}, *bad;
	CHECK(ibv_post_srq_ops(plain, &sync, &bad) == EINVAL && bad == &sync);
	CHECK(ibv_destroy_srq(plain) == 0);
	/* The CQ is the TM SRQ's: busy while it lives. */
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) == EBUSY);
}

/* ADD up to max_num_tags, DEL, a DEL of a gone handle (IBV_WC_TM_ERR), a full list. */
static void list_ops(void)
{
	unsigned int f;
	uint32_t h[4];
	for (int i = 0; i < 4; i++) {
		h[i] = add_tag(50 + i, 0, 10 + i, &f);
		CHECK(f == 0);
	}
	struct ibv_sge sge = {.addr = (uintptr_t)dst, .length = 8, .lkey = dst_mr->lkey};
	struct ibv_ops_wr add = {.wr_id = 20,
				 .opcode = IBV_WR_TAG_ADD,
				 .tm = {.add = {.sg_list = &sge, .num_sge = 1, .tag = 1, .mask = 1}}};
	CHECK(op(&add) == 0); /* unsignaled, but a failure completes anyway */
	struct cqe c = poll_ex();
	CHECK(c.wr_id == 20 && c.status == IBV_WC_TM_ERR && c.opcode == IBV_WC_TM_ADD);
	for (int i = 0; i < 4; i++) {
		struct ibv_ops_wr del = {.wr_id = 30 + i,
					 .opcode = IBV_WR_TAG_DEL,
					 .flags = IBV_OPS_SIGNALED,
					 .tm = {.handle = h[i]}};
		CHECK(op(&del) == 0);
		c = poll_ex();
		CHECK(c.wr_id == 30u + i && c.status == IBV_WC_SUCCESS && c.opcode == IBV_WC_TM_DEL);
	}
	struct ibv_ops_wr del = {
		.wr_id = 40, .opcode = IBV_WR_TAG_DEL, .flags = IBV_OPS_SIGNALED, .tm = {.handle = h[0]}};
	CHECK(op(&del) == 0);
	c = poll_ex();
	CHECK(c.wr_id == 40 && c.status == IBV_WC_TM_ERR);
	struct ibv_ops_wr bogus = {.opcode = 7}, *bad;
	CHECK(ibv_post_srq_ops(srq, &bogus, &bad) == EINVAL && bad == &bogus);
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(ibv_cq_ex_to_cq(cqx), 1, &wc) == 0);
}

/*
 * Rendezvous: A sends a TMH and an RVH naming 200 bytes of its memory; B's match completes at
 * once (MATCH, the tag and app_ctx), B READs the data into the tag's buffer and completes it
 * (DATA_VALID), and A receives a FIN TMH with the tag.
 */
static void rendezvous(void)
{
	char *r = aligned_alloc(4096, 4096);
	CHECK(r != NULL);
	memset(r, 'r', 4096);
	struct ibv_mr *rmr = ibv_reg_mr(pd, r, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	CHECK(rmr != NULL);
	unsigned int f;
	add_tag(11, 768, 4, &f);
	CHECK(f == 0);
	/* A's receive for the FIN, at src + 4096. */
	struct ibv_sge rs = {.addr = (uintptr_t)src + 4096, .length = 64, .lkey = src_mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 55, .sg_list = &rs, .num_sge = 1}, *bad;
	CHECK(ibv_post_recv(qp_a, &rw, &bad) == 0);
	struct ibv_tmh h = {.opcode = IBV_TMH_RNDV, .app_ctx = htobe32(5), .tag = htobe64(11)};
	struct ibv_rvh v = {
		.va = htobe64((uintptr_t)r), .rkey = htobe32(rmr->rkey), .len = htobe32(200)};
	memcpy(src, &h, sizeof(h));
	memcpy(src + sizeof(h), &v, sizeof(v));
	send_src(sizeof(h) + sizeof(v));
	struct cqe c = poll_ex();
	CHECK(c.status == IBV_WC_SUCCESS && c.opcode == IBV_WC_TM_RECV && c.wr_id == 111);
	CHECK(c.flags == IBV_WC_TM_MATCH && c.tm.tag == 11 && c.tm.priv == 5);
	c = poll_ex();
	CHECK(c.status == IBV_WC_SUCCESS && c.opcode == IBV_WC_TM_RECV && c.wr_id == 111);
	CHECK(c.flags == IBV_WC_TM_DATA_VALID && c.byte_len == 200);
	CHECK(all(dst + 768, 'r', 200) && dst[768 + 200] == 0);
	struct ibv_wc wc = poll1(cq_a);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 55);
	struct ibv_tmh fin;
	memcpy(&fin, src + 4096, sizeof(fin));
	CHECK(wc.byte_len == sizeof(fin) && fin.opcode == IBV_TMH_FIN);
	CHECK(wc.wc_flags == 0); /* no IBV_WC_GRH, as mlx5 (rdma-core's test_tm_rndv) */
	CHECK(be64toh(fin.tag) == 11 && be32toh(fin.app_ctx) == 5);
	/* An RVH-less RNDV that matches is an invalid request: A's SEND fails. */
	add_tag(12, 1792, 5, &f);
	h.tag = htobe64(12);
	memcpy(src, &h, sizeof(h));
	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = sizeof(h), .lkey = src_mr->lkey};
	struct ibv_send_wr sw = {.wr_id = 13, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *sbad;
	CHECK(ibv_post_send(qp_a, &sw, &sbad) == 0);
	wc = poll1(cq_a);
	CHECK(wc.wr_id == 13 && wc.status == IBV_WC_REM_INV_REQ_ERR);
	c = poll_ex(); /* the consumed tag completes with the same error */
	CHECK(c.wr_id == 112 && c.status == IBV_WC_REM_INV_REQ_ERR);
	CHECK(ibv_dereg_mr(rmr) == 0);
	free(r);
}

/* Matched EAGER, unexpected EAGER with its sync, and NO_TAG over an RC pair. */
static void traffic(void)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = ibv_cq_ex_to_cq(cqx),
		.recv_cq = ibv_cq_ex_to_cq(cqx),
		.srq = srq,
		.cap = {.max_send_wr = 4, .max_send_sge = 1},
		.qp_type = IBV_QPT_RC,
	};
	qp_a = rc_qp(cq_a);
	qp_b = ibv_create_qp(pd, &ia);
	CHECK(qp_b != NULL);
	rc_to_rts(qp_a, qp_b->qp_num, ALL_REMOTE, 4);
	rc_to_rts(qp_b, qp_a->qp_num, ALL_REMOTE, 4);

	unsigned int f;
	add_tag(7, 0, 1, &f);
	add_tag(8, 256, 2, &f);
	/* Matched: the tag's buffer holds the data without the TMH; the completion names the
	 * tag's recv_wr_id, its tag and the TMH's app_ctx. */
	send_tagged(IBV_TMH_EAGER, 0xabcd, 0x30008, 'm', 100); /* 0x30008 & 0xffff == 8 */
	struct cqe c = poll_ex();
	CHECK(c.status == IBV_WC_SUCCESS && c.opcode == IBV_WC_TM_RECV && c.wr_id == 108);
	CHECK(c.flags == (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID) && c.byte_len == 100);
	CHECK(c.tm.tag == 0x30008 && c.tm.priv == 0xabcd);
	CHECK(all(dst + 256, 'm', 100));

	/* Unexpected: no tag 9, so the message lands whole in an ordinary receive and counts. */
	srq_recv(1024, 77);
	send_tagged(IBV_TMH_EAGER, 1, 9, 'u', 40);
	c = poll_ex();
	CHECK(c.status == IBV_WC_SUCCESS && c.opcode == IBV_WC_TM_RECV && c.wr_id == 77);
	CHECK(c.flags == 0 && c.tm.tag == 0 && c.byte_len == 56);
	CHECK(dst[1024] == IBV_TMH_EAGER && all(dst + 1024 + 16, 'u', 40));
	/* Software is behind by one: an ADD says so, and its tag is not matched until a sync. */
	add_tag(9, 512, 3, &f);
	CHECK(f == IBV_WC_TM_SYNC_REQ);
	srq_recv(1280, 78);
	send_tagged(IBV_TMH_EAGER, 2, 9, 'v', 40);
	c = poll_ex();
	CHECK(c.opcode == IBV_WC_TM_RECV && c.wr_id == 78 && c.flags == 0);
	struct ibv_ops_wr sync = {.wr_id = 27,
				  .opcode = IBV_WR_TAG_SYNC,
				  .flags = IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC,
				  .tm = {.unexpected_cnt = 2}};
	CHECK(op(&sync) == 0);
	c = poll_ex();
	CHECK(c.wr_id == 27 && c.opcode == IBV_WC_TM_SYNC && c.status == IBV_WC_SUCCESS);
	CHECK(c.flags == 0);
	send_tagged(IBV_TMH_EAGER, 3, 9, 'w', 40);
	c = poll_ex();
	CHECK(c.opcode == IBV_WC_TM_RECV && c.wr_id == 109);
	CHECK(c.flags == (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID) && all(dst + 512, 'w', 40));

	/* NO_TAG: an ordinary receive, whole, not counted (tag 7 stays). */
	srq_recv(1536, 79);
	send_tagged(IBV_TMH_NO_TAG, 0, 7, 'n', 30);
	c = poll_ex();
	CHECK(c.opcode == IBV_WC_TM_NO_TAG && c.wr_id == 79 && c.flags == 0 && c.byte_len == 46);
	CHECK(all(dst + 1536 + 16, 'n', 30));
	send_tagged(IBV_TMH_EAGER, 4, 7, 'z', 20);
	c = poll_ex();
	CHECK(c.opcode == IBV_WC_TM_RECV && c.wr_id == 107 && c.flags != 0);
	CHECK(all(dst, 'z', 20));

	rendezvous();
	CHECK(ibv_destroy_qp(qp_a) == 0 && ibv_destroy_qp(qp_b) == 0);
}

int main(void)
{
	struct ibv_device **list = loopback_open();
	dst = aligned_alloc(4096, LEN);
	CHECK(dst != NULL);
	memset(dst, 0, LEN);
	dst_mr = ibv_reg_mr(pd, dst, LEN, IBV_ACCESS_LOCAL_WRITE);
	CHECK(dst_mr != NULL);

	caps();
	create();
	list_ops();
	traffic();

	CHECK(ibv_destroy_srq(srq) == 0);
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) == 0);
	CHECK(ibv_dereg_mr(dst_mr) == 0);
	free(dst);
	loopback_close(list);
	return 0;
}
