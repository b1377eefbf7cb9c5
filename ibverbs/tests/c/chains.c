/*
 * Chains of work requests in one ibv_post_send / ibv_post_recv / ibv_post_srq_recv call, as
 * perftest's post lists and MPI's eager paths post them: the shim queues a chain under one
 * lock and rings its engine once (ibverbs/src/objects/post.rs, src/verbs/post_batch.rs).
 * Checked here: every WR of a 64-WR chain of RDMA WRITEs and SENDs lands with its own bytes
 * and completes in order with its own wr_id; a chain whose middle WR is bad posts the WRs
 * before it (they complete), names the bad one in *bad_wr and posts none after it; an inline
 * WR inside a chain carries its own bytes, not those of the inline WR before it; receive and
 * SRQ receive chains are consumed in order.
 *
 * Prints "ok <checks>" and exits 0, or names the first failed check and exits 1. Every wait
 * is bounded (5 s).
 */
#include "common.h"

enum { N = 64, SZ = 256, ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE };

static struct ibv_pd *pd;
static struct ibv_cq *cq_a, *cq_b;
static char *buf_a, *buf_b;
static struct ibv_mr *mr_a, *mr_b;

static struct ibv_qp *rc_qp(struct ibv_cq *cq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq,
		.recv_cq = cq,
		.srq = srq,
		.cap = {.max_send_wr = 2 * N, .max_recv_wr = 2 * N, .max_send_sge = 2,
			.max_recv_sge = 2, .max_inline_data = 64},
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp != NULL);
	return qp;
}

static void fill(char *p, int seed, int len)
{
	for (int i = 0; i < len; i++)
		p[i] = (char)(seed * 31 + i);
}

static int same(const char *p, int seed, int len)
{
	for (int i = 0; i < len; i++)
		if (p[i] != (char)(seed * 31 + i))
			return 0;
	return 1;
}

/* A chain of N signaled WRITEs from a to b, each SZ bytes into its own slot. */
static void write_chain(struct ibv_qp *a)
{
	struct ibv_send_wr w[N], *bad = NULL;
	struct ibv_sge s[N];
	for (int i = 0; i < N; i++) {
		fill(buf_a + i * SZ, i, SZ);
		s[i] = (struct ibv_sge){(uintptr_t)(buf_a + i * SZ), SZ, mr_a->lkey};
		w[i] = (struct ibv_send_wr){
			.wr_id = 100 + i,
			.next = i + 1 < N ? &w[i + 1] : NULL,
			.sg_list = &s[i],
			.num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE,
			.send_flags = IBV_SEND_SIGNALED,
			.wr.rdma = {(uintptr_t)(buf_b + i * SZ), mr_b->rkey},
		};
	}
	memset(buf_b, 0, N * SZ);
	CHECK(ibv_post_send(a, w, &bad) == 0 && bad == NULL);
	for (int i = 0; i < N; i++) {
		struct ibv_wc wc = poll1(cq_a);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)(100 + i));
	}
	for (int i = 0; i < N; i++)
		CHECK(same(buf_b + i * SZ, i, SZ));
}

/* A chain of SENDs, every other one inline, into a receive chain of b (or its SRQ). */
static void send_chain(struct ibv_qp *a, struct ibv_qp *b, struct ibv_srq *srq)
{
	struct ibv_recv_wr r[N], *rbad = NULL;
	struct ibv_sge rs[N];
	memset(buf_b, 0, N * SZ);
	for (int i = 0; i < N; i++) {
		rs[i] = (struct ibv_sge){(uintptr_t)(buf_b + i * SZ), SZ, mr_b->lkey};
		r[i] = (struct ibv_recv_wr){
			.wr_id = 500 + i, .next = i + 1 < N ? &r[i + 1] : NULL, .sg_list = &rs[i],
			.num_sge = 1};
	}
	if (srq)
		CHECK(ibv_post_srq_recv(srq, r, &rbad) == 0 && rbad == NULL);
	else
		CHECK(ibv_post_recv(b, r, &rbad) == 0 && rbad == NULL);
	struct ibv_send_wr w[N], *bad = NULL;
	struct ibv_sge s[N];
	for (int i = 0; i < N; i++) {
		int len = i % 2 ? 48 : SZ; /* odd ones inline (48 <= max_inline_data) */
		fill(buf_a + i * SZ, 1000 + i, len);
		s[i] = (struct ibv_sge){(uintptr_t)(buf_a + i * SZ), len, i % 2 ? 0 : mr_a->lkey};
		w[i] = (struct ibv_send_wr){
			.wr_id = 300 + i,
			.next = i + 1 < N ? &w[i + 1] : NULL,
			.sg_list = &s[i],
			.num_sge = 1,
			.opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED | (i % 2 ? IBV_SEND_INLINE : 0),
		};
	}
	CHECK(ibv_post_send(a, w, &bad) == 0 && bad == NULL);
	/* An inline WR's bytes are taken at the post: overwriting them now changes nothing. */
	for (int i = 1; i < N; i += 2)
		memset(buf_a + i * SZ, 0x5a, 48);
	for (int i = 0; i < N; i++) {
		struct ibv_wc wc = poll1(cq_a);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)(300 + i));
		wc = poll1(cq_b);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)(500 + i));
		CHECK(wc.byte_len == (uint32_t)(i % 2 ? 48 : SZ));
		CHECK(same(buf_b + i * SZ, 1000 + i, wc.byte_len));
	}
}

/* A chain of 5 WRITEs whose third has 33 SGEs: two posted and completed, bad_wr = &w[2], the
 * last two not posted (nothing of them lands). */
static void bad_in_the_middle(struct ibv_qp *a)
{
	struct ibv_send_wr w[5], *bad = NULL;
	struct ibv_sge s[5];
	memset(buf_b, 0, 5 * SZ);
	for (int i = 0; i < 5; i++) {
		fill(buf_a + i * SZ, 2000 + i, SZ);
		s[i] = (struct ibv_sge){(uintptr_t)(buf_a + i * SZ), SZ, mr_a->lkey};
		w[i] = (struct ibv_send_wr){
			.wr_id = 700 + i,
			.next = i + 1 < 5 ? &w[i + 1] : NULL,
			.sg_list = &s[i],
			.num_sge = i == 2 ? 33 : 1,
			.opcode = IBV_WR_RDMA_WRITE,
			.send_flags = IBV_SEND_SIGNALED,
			.wr.rdma = {(uintptr_t)(buf_b + i * SZ), mr_b->rkey},
		};
	}
	CHECK(ibv_post_send(a, w, &bad) == EINVAL && bad == &w[2]);
	for (int i = 0; i < 2; i++) {
		struct ibv_wc wc = poll1(cq_a);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)(700 + i));
		CHECK(same(buf_b + i * SZ, 2000 + i, SZ));
	}
	/* A fenceless marker WRITE after the failed chain: once it completes, anything of w[3]
	 * or w[4] would have landed before it (one QP's WRITEs are placed in order). */
	s[0].length = 1;
	w[0].next = NULL;
	w[0].wr_id = 799;
	CHECK(ibv_post_send(a, &w[0], &bad) == 0);
	struct ibv_wc wc = poll1(cq_a);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 799);
	struct ibv_wc none;
	CHECK(ibv_poll_cq(cq_a, 1, &none) == 0);
	for (int i = 2; i < 5; i++)
		for (int j = 0; j < SZ; j++)
			CHECK(buf_b[i * SZ + j] == 0);
}

int main(void)
{
	struct ibv_device **list = open_first_device();
	pd = ibv_alloc_pd(ctx);
	cq_a = ibv_create_cq(ctx, 4 * N, NULL, NULL, 0);
	cq_b = ibv_create_cq(ctx, 4 * N, NULL, NULL, 0);
	CHECK(pd && cq_a && cq_b);
	buf_a = calloc(N, SZ);
	buf_b = calloc(N, SZ);
	CHECK(buf_a && buf_b);
	mr_a = ibv_reg_mr(pd, buf_a, N * SZ, ACCESS);
	mr_b = ibv_reg_mr(pd, buf_b, N * SZ, ACCESS);
	CHECK(mr_a && mr_b);
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 2 * N, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(srq != NULL);

	struct ibv_qp *a = rc_qp(cq_a, NULL), *b = rc_qp(cq_b, NULL), *c = rc_qp(cq_b, srq);
	struct ibv_qp *a2 = rc_qp(cq_a, NULL);
	rc_to_rts(a, b->qp_num, ACCESS, 1);
	rc_to_rts(b, a->qp_num, ACCESS, 1);
	rc_to_rts(a2, c->qp_num, ACCESS, 1);
	rc_to_rts(c, a2->qp_num, ACCESS, 1);

	write_chain(a);
	send_chain(a, b, NULL);
	send_chain(a2, c, srq);
	bad_in_the_middle(a);

	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0);
	CHECK(ibv_destroy_qp(a2) == 0 && ibv_destroy_qp(c) == 0);
	CHECK(ibv_destroy_srq(srq) == 0);
	CHECK(ibv_dereg_mr(mr_a) == 0 && ibv_dereg_mr(mr_b) == 0);
	CHECK(ibv_destroy_cq(cq_a) == 0 && ibv_destroy_cq(cq_b) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);
	printf("ok %ld\n", checks);
	return 0;
}
