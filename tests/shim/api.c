/* Every function the libibverbs shim exports (and the inline helpers of verbs.h that call
 * through its context ops), compiled against Debian 12's rdma-core 44 headers and run with the
 * shim first on LD_LIBRARY_PATH: the normal paths, and the error paths (NULL and bad handles,
 * double destroy, wrong QP states, out-of-range arguments, objects still in use) with the
 * errno values rxe/libibverbs give. Two RC QPs of one context talk to each other through the
 * device's own address (loopback) for the data path: SEND with a completion channel, RDMA
 * WRITE with immediate, RDMA READ and both atomics, on the program's own memory.
 *
 * Environment: SOFTROCE_BIND (the test sets it) = the IPv4 address whose GID index 1 is checked.
 * Prints "ok N checks" and exits 0, or prints the first failed check and exits 1. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <infiniband/verbs.h>

/* Exported by libibverbs but declared only in <infiniband/driver.h> (the provider header). */
int ibv_dontfork_range(void *base, size_t size);
int ibv_dofork_range(void *base, size_t size);
const char *ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);

static int checks;

#define CHECK(cond)                                                                        \
	do {                                                                               \
		checks++;                                                                  \
		if (!(cond)) {                                                             \
			fprintf(stderr, "%s:%d: check failed: %s (errno %d %s)\n", __FILE__, \
				__LINE__, #cond, errno, strerror(errno));                  \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

/* A call that must fail with NULL and errno E. */
#define FAILS_NULL(expr, E)                        \
	do {                                       \
		errno = 0;                         \
		CHECK((expr) == NULL && errno == (E)); \
	} while (0)

/* A call that must return -1 with errno E. */
#define FAILS_MINUS1(expr, E)                      \
	do {                                       \
		errno = 0;                         \
		CHECK((expr) == -1 && errno == (E)); \
	} while (0)

static void connect_qp(struct ibv_qp *qp, uint32_t dest_qpn, union ibv_gid *gid, int access)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = 1,
		.qp_access_flags = access,
	};
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				       IBV_QP_ACCESS_FLAGS) == 0);
	CHECK(qp->state == IBV_QPS_INIT);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = 100;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.sgid_index = 1;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				       IBV_QP_MIN_RNR_TIMER) == 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 100;
	a.max_rd_atomic = 4;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0);
	CHECK(qp->state == IBV_QPS_RTS);
}

/* Polls `cq` until one completion arrives (bounded: about 5 s). */
static struct ibv_wc poll_one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	for (int i = 0; i < 5000000; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			CHECK(n >= 0);
		if (n == 1)
			return wc;
		if (i % 1000 == 999)
			usleep(1000);
	}
	CHECK(!"completion timed out");
	return wc;
}

int main(void)
{
	const char *bind = getenv("SOFTROCE_BIND");
	CHECK(bind != NULL);

	/* ---- device list ---- */
	int n = -1;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list != NULL && n == 1 && list[0] != NULL && list[1] == NULL);
	CHECK(strcmp(ibv_get_device_name(list[0]), "softroce0") == 0);
	CHECK(ibv_get_device_guid(list[0]) != 0);
	CHECK(ibv_get_device_index(list[0]) == 0);
	FAILS_NULL(ibv_get_device_name(NULL), EINVAL);
	CHECK(ibv_get_device_index(NULL) == -1);
	FAILS_NULL(ibv_open_device(NULL), EINVAL);
	struct ibv_device fake = {0};
	FAILS_NULL(ibv_open_device(&fake), EINVAL);

	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx != NULL);
	CHECK(ctx->device == list[0]);
	ibv_free_device_list(list);
	ibv_free_device_list(NULL);

	/* ---- queries ---- */
	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0);
	CHECK(da.phys_port_cnt == 1 && da.max_qp_wr == 16384 && da.max_sge == 32);
	CHECK(da.max_cqe == 32767 && da.atomic_cap == IBV_ATOMIC_HCA && da.vendor_id == 0xffffff);
	CHECK(ibv_query_device(NULL, &da) == EINVAL);
	CHECK(ibv_query_device(ctx, NULL) == EINVAL);
	struct ibv_device_attr_ex dax;
	CHECK(ibv_query_device_ex(ctx, NULL, &dax) == 0); /* falls back to ibv_query_device */
	CHECK(dax.orig_attr.max_qp_wr == 16384);

	struct ibv_port_attr pa;
	CHECK(ibv_query_port(ctx, 1, &pa) == 0); /* the inline, through verbs_context */
	CHECK(pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET);
	CHECK(pa.max_mtu == IBV_MTU_4096 && pa.active_mtu == IBV_MTU_2048); /* SOFTROCE_MTU */
	/* rxe's GID table length; entries 0 and 1 are populated, the others empty. */
	CHECK(pa.gid_tbl_len == 1024 && pa.pkey_tbl_len == 1 && pa.lid == 0);
	CHECK(ibv_query_port(ctx, 2, &pa) == EINVAL);

	union ibv_gid gid, gid0;
	struct in_addr ip;
	CHECK(inet_pton(AF_INET, bind, &ip) == 1);
	CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0);
	CHECK(gid.raw[10] == 0xff && gid.raw[11] == 0xff && memcmp(&gid.raw[12], &ip, 4) == 0);
	CHECK(ibv_query_gid(ctx, 1, 0, &gid0) == 0);
	/* An empty entry is the zero GID (libibverbs on ENODATA); past the table, EINVAL. */
	memset(&gid0, 0xee, sizeof(gid0));
	CHECK(ibv_query_gid(ctx, 1, 2, &gid0) == 0);
	CHECK(gid0.global.subnet_prefix == 0 && gid0.global.interface_id == 0);
	CHECK(ibv_query_gid(ctx, 1, 1023, &gid0) == 0);
	FAILS_MINUS1(ibv_query_gid(ctx, 1, 1024, &gid0), EINVAL);
	FAILS_MINUS1(ibv_query_gid(ctx, 2, 0, &gid0), EINVAL);
	FAILS_MINUS1(ibv_query_gid(NULL, 1, 0, &gid0), EINVAL);
	struct ibv_gid_entry ge;
	CHECK(ibv_query_gid_ex(ctx, 1, 1, &ge, 0) == 0);
	CHECK(ge.gid_type == IBV_GID_TYPE_ROCE_V2 && memcmp(&ge.gid, &gid, 16) == 0);
	CHECK(ibv_query_gid_ex(ctx, 1, 5, &ge, 0) == ENODATA);
	CHECK(ibv_query_gid_ex(ctx, 1, 1024, &ge, 0) == EINVAL);
	struct ibv_gid_entry table[4];
	CHECK(ibv_query_gid_table(ctx, table, 4, 0) == 2);
	CHECK(ibv_query_gid_table(ctx, table, 1, 0) == -EINVAL);
	uint16_t pkey = 0;
	CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && pkey == 0xffff);
	FAILS_MINUS1(ibv_query_pkey(ctx, 1, 1, &pkey), EINVAL);
	CHECK(ibv_get_pkey_index(ctx, 1, 0xffff) == 0);
	CHECK(ibv_get_pkey_index(ctx, 1, htons(0x1234)) == -1);

	/* ---- PD and MRs on our own memory ---- */
	FAILS_NULL(ibv_alloc_pd(NULL), EINVAL);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL && pd->context == ctx);
	enum { LEN = 65536 };
	char *a = aligned_alloc(4096, LEN), *b = aligned_alloc(4096, LEN);
	CHECK(a && b);
	memset(a, 0, LEN);
	memset(b, 0, LEN);
	int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_ATOMIC;
	FAILS_NULL(ibv_reg_mr(NULL, a, LEN, all), EINVAL);
	FAILS_NULL(ibv_reg_mr(pd, NULL, LEN, all), EINVAL);
	FAILS_NULL(ibv_reg_mr(pd, a, 0, all), EINVAL);
	FAILS_NULL(ibv_reg_mr(pd, a, LEN, IBV_ACCESS_REMOTE_WRITE), EINVAL);
	/* ZERO_BASED is for device memory only (ibv_reg_dm_mr). */
	FAILS_NULL(ibv_reg_mr(pd, a, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED),
		   EOPNOTSUPP);
	/* Memory that is not mapped (rdma4py's test registers 0xDEAD0000): EFAULT, as rxe's
	 * pinning fails; also a range whose last page is gone. */
	FAILS_NULL(ibv_reg_mr(pd, (void *)0xDEAD0000, 4096, IBV_ACCESS_LOCAL_WRITE), EFAULT);
	{
		long pg = sysconf(_SC_PAGESIZE);
		char *m = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		CHECK(m != MAP_FAILED && munmap(m + pg, pg) == 0);
		FAILS_NULL(ibv_reg_mr(pd, m, 2 * pg, IBV_ACCESS_LOCAL_WRITE), EFAULT);
		struct ibv_mr *one = ibv_reg_mr(pd, m, pg, IBV_ACCESS_LOCAL_WRITE);
		CHECK(one != NULL && ibv_dereg_mr(one) == 0);
		CHECK(munmap(m, pg) == 0);
		/* ibv_reg_mr_iova and _iova2 (what ibv_reg_mr with optional flags calls) check the
		 * same way. */
		FAILS_NULL(ibv_reg_mr_iova(pd, (void *)0xDEAD0000, 4096, 0x1000,
					   IBV_ACCESS_LOCAL_WRITE), EFAULT);
		FAILS_NULL(ibv_reg_mr_iova2(pd, (void *)0xDEAD0000, 4096, 0x1000,
					    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING), EFAULT);
		/* A read-only mapping: rxe pins for write when any right writes the region (local
		 * or remote write, remote atomics, window binding: ib_access_writable), and the pin
		 * fails on it (EFAULT); remote read only is fine. A PROT_NONE mapping fails even
		 * for reading (Linux 6.2 and later; spec-notes/libibverbs-abi.md rule 19). */
		char *ro = mmap(NULL, 2 * pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		CHECK(ro != MAP_FAILED);
		FAILS_NULL(ibv_reg_mr(pd, ro, 2 * pg, IBV_ACCESS_LOCAL_WRITE), EFAULT);
		FAILS_NULL(ibv_reg_mr(pd, ro, pg, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE),
			   EFAULT);
		FAILS_NULL(ibv_reg_mr(pd, ro, pg, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC),
			   EFAULT);
		FAILS_NULL(ibv_reg_mr(pd, ro, pg, IBV_ACCESS_MW_BIND), EFAULT);
		FAILS_NULL(ibv_reg_mr_iova(pd, ro, pg, 0, IBV_ACCESS_LOCAL_WRITE), EFAULT);
		struct ibv_mr *rd = ibv_reg_mr(pd, ro, 2 * pg, IBV_ACCESS_REMOTE_READ);
		CHECK(rd != NULL && rd->rkey != 0 && ibv_dereg_mr(rd) == 0);
		rd = ibv_reg_mr(pd, ro, pg, 0);
		CHECK(rd != NULL && ibv_dereg_mr(rd) == 0);
		/* Writable, then its second page made read-only: the range is refused for writing. */
		CHECK(mprotect(ro, pg, PROT_READ | PROT_WRITE) == 0);
		struct ibv_mr *w = ibv_reg_mr(pd, ro, pg, IBV_ACCESS_LOCAL_WRITE);
		CHECK(w != NULL && ibv_dereg_mr(w) == 0);
		FAILS_NULL(ibv_reg_mr(pd, ro, 2 * pg, IBV_ACCESS_LOCAL_WRITE), EFAULT);
		CHECK(mprotect(ro, 2 * pg, PROT_NONE) == 0);
		FAILS_NULL(ibv_reg_mr(pd, ro, pg, IBV_ACCESS_REMOTE_READ), EFAULT);
		CHECK(munmap(ro, 2 * pg) == 0);
	}
	struct ibv_mr *mra = ibv_reg_mr(pd, a, LEN, all);
	CHECK(mra && mra->addr == a && mra->length == LEN && mra->lkey && mra->rkey == mra->lkey);
	CHECK(mra->pd == pd && mra->context == ctx);
	/* b is addressed by the peer from iova 0x10000 (ibv_reg_mr_iova) */
	struct ibv_mr *mrb = ibv_reg_mr_iova(pd, b, LEN, 0x10000, all);
	CHECK(mrb && mrb->rkey);
	struct ibv_mr *local_only = ibv_reg_mr(pd, a, 64, IBV_ACCESS_LOCAL_WRITE);
	/* rkey == lkey even without remote rights (spec-notes/beyond-rxe.md rule 5) */
	CHECK(local_only && local_only->rkey == local_only->lkey);
	CHECK(ibv_dereg_mr(local_only) == 0);
	CHECK(ibv_dereg_mr(local_only) == EINVAL); /* double */
	CHECK(ibv_dereg_mr(NULL) == EINVAL);
	/* optional access flags go through ibv_reg_mr_iova2 (non-constant access) */
	volatile int relaxed = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING;
	struct ibv_mr *r2 = ibv_reg_mr(pd, a, 128, relaxed);
	CHECK(r2 != NULL);
	CHECK(ibv_dereg_mr(r2) == 0);
	CHECK(ibv_dealloc_pd(pd) == EBUSY); /* MRs in it */

	/* ---- completion channel and CQs ---- */
	FAILS_NULL(ibv_create_comp_channel(NULL), EINVAL);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(ch && ch->fd >= 0 && ch->context == ctx);
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0);
	struct ibv_cq *evcq;
	void *evctx;
	FAILS_MINUS1(ibv_get_cq_event(ch, &evcq, &evctx), EAGAIN); /* nothing yet */
	FAILS_MINUS1(ibv_get_cq_event(NULL, &evcq, &evctx), EINVAL);

	FAILS_NULL(ibv_create_cq(ctx, 0, NULL, NULL, 0), EINVAL);
	FAILS_NULL(ibv_create_cq(ctx, 1 << 20, NULL, NULL, 0), EINVAL);
	FAILS_NULL(ibv_create_cq(NULL, 16, NULL, NULL, 0), EINVAL);
	FAILS_NULL(ibv_create_cq(ctx, 16, NULL, (struct ibv_comp_channel *)&fake, 0), EINVAL);
	int tag = 42;
	struct ibv_cq *cq = ibv_create_cq(ctx, 256, &tag, ch, 0);
	CHECK(cq && cq->channel == ch && cq->cq_context == &tag && cq->cqe >= 256);
	struct ibv_cq *cq2 = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	CHECK(cq2);
	CHECK(ibv_resize_cq(cq2, 512) == 0 && cq2->cqe == 512); /* ibverbs/tests/c/ex.c: more */
	CHECK(ibv_req_notify_cq(cq2, 0) == 0);
	CHECK(ibv_destroy_comp_channel(ch) == EBUSY); /* a CQ uses it */
	struct ibv_cq_init_attr_ex cqx = {.cqe = 16};
	struct ibv_cq_ex *cq3 = ibv_create_cq_ex(ctx, &cqx); /* ibverbs/tests/c/ex.c: more */
	CHECK(cq3 && ibv_destroy_cq(ibv_cq_ex_to_cq(cq3)) == 0);

	/* ---- QPs ---- */
	struct ibv_qp_init_attr ia = {
		.send_cq = cq2,
		.recv_cq = cq,
		.cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 2, .max_recv_sge = 2,
			.max_inline_data = 64},
		.qp_type = IBV_QPT_RC,
	};
	FAILS_NULL(ibv_create_qp(NULL, &ia), EINVAL);
	FAILS_NULL(ibv_create_qp(pd, NULL), EINVAL);
	/* An XRC target QP needs its XRC domain, which only ibv_create_qp_ex can give. */
	ia.qp_type = IBV_QPT_XRC_RECV;
	FAILS_NULL(ibv_create_qp(pd, &ia), EOPNOTSUPP);
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 1 << 20;
	FAILS_NULL(ibv_create_qp(pd, &ia), EINVAL);
	ia.cap.max_send_wr = 64;
	ia.send_cq = (struct ibv_cq *)&fake;
	FAILS_NULL(ibv_create_qp(pd, &ia), EINVAL);
	ia.send_cq = cq2;
	ia.qp_context = &tag;
	struct ibv_qp *q1 = ibv_create_qp(pd, &ia);
	struct ibv_qp *q2 = ibv_create_qp(pd, &ia);
	CHECK(q1 && q2 && q1->qp_num != q2->qp_num && q1->state == IBV_QPS_RESET);
	CHECK(q1->pd == pd && q1->send_cq == cq2 && q1->recv_cq == cq && q1->qp_context == &tag);
	CHECK(ibv_qp_to_qp_ex(q1) == NULL);
	CHECK(ibv_destroy_cq(cq) == EBUSY); /* QPs use it */

	/* wrong state and bad attributes */
	struct ibv_qp_attr qa = {.qp_state = IBV_QPS_RTR};
	CHECK(ibv_modify_qp(q1, &qa, IBV_QP_STATE) == EINVAL); /* RESET -> RTR */
	CHECK(ibv_modify_qp(NULL, &qa, IBV_QP_STATE) == EINVAL);
	CHECK(ibv_modify_qp(q1, NULL, IBV_QP_STATE) == EINVAL);
	qa.qp_state = IBV_QPS_INIT;
	CHECK(ibv_modify_qp(q1, &qa, IBV_QP_STATE | (1 << 30)) == EINVAL); /* unknown bit */
	qa.qp_state = 77;
	CHECK(ibv_modify_qp(q1, &qa, IBV_QP_STATE) == EINVAL);
	struct ibv_send_wr swr = {0}, *bad_s = NULL;
	struct ibv_recv_wr rwr = {0}, *bad_r = NULL;
	struct ibv_sge sge = {.addr = (uintptr_t)a, .length = 64, .lkey = mra->lkey};
	swr.sg_list = &sge;
	swr.num_sge = 1;
	swr.opcode = IBV_WR_SEND;
	CHECK(ibv_post_send(q1, &swr, &bad_s) == EINVAL && bad_s == &swr); /* RESET */

	connect_qp(q1, q2->qp_num, &gid, all);
	connect_qp(q2, q1->qp_num, &gid, all);
	struct ibv_qp_attr got;
	struct ibv_qp_init_attr got_init;
	CHECK(ibv_query_qp(q1, &got, IBV_QP_STATE | IBV_QP_CAP, &got_init) == 0);
	CHECK(got.qp_state == IBV_QPS_RTS && got.dest_qp_num == q2->qp_num && got.sq_psn == 100);
	CHECK(got.path_mtu == IBV_MTU_1024 && got.ah_attr.is_global == 1);
	CHECK(memcmp(&got.ah_attr.grh.dgid, &gid, 16) == 0);
	CHECK(got_init.cap.max_send_wr >= 64 && got_init.cap.max_inline_data >= 64);
	CHECK(got_init.qp_type == IBV_QPT_RC && got_init.send_cq == cq2);
	CHECK(ibv_query_qp(NULL, &got, 0, &got_init) == EINVAL);

	/* bad work requests: bad_wr names the first refused */
	struct ibv_send_wr w2 = swr;
	swr.next = &w2;
	w2.num_sge = 33;
	bad_s = NULL;
	CHECK(ibv_post_send(q1, &swr, &bad_s) == EINVAL && bad_s == &w2);
	swr.next = NULL;
	w2.num_sge = 1;
	w2.opcode = 99;
	CHECK(ibv_post_send(q1, &w2, &bad_s) == EINVAL && bad_s == &w2);
	rwr.num_sge = -1;
	CHECK(ibv_post_recv(q2, &rwr, &bad_r) == EINVAL && bad_r == &rwr);
	/* the first SEND of the bad list went to q2 with no receive posted: RNR retries until
	 * the receive below. */

	/* ---- SEND through the completion channel ---- */
	/* local addresses of an MR registered at an iova are iova-based too */
	struct ibv_sge rsge = {.addr = 0x10000, .length = 4096, .lkey = mrb->lkey};
	rwr.sg_list = &rsge;
	rwr.num_sge = 1;
	for (int i = 0; i < 4; i++) {
		rwr.wr_id = 1000 + i;
		CHECK(ibv_post_recv(q2, &rwr, &bad_r) == 0);
	}
	CHECK(ibv_req_notify_cq(cq, 0) == 0);
	/* the RNR-retried SEND arrives in the first receive */
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	CHECK(poll(&pfd, 1, 5000) == 1);
	CHECK(ibv_get_cq_event(ch, &evcq, &evctx) == 0);
	CHECK(evcq == cq && evctx == &tag);
	ibv_ack_cq_events(cq, 1);
	CHECK(cq->comp_events_completed == 1);
	struct ibv_wc wc = poll_one(cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 1000);
	CHECK(wc.byte_len == 64 && wc.qp_num == q2->qp_num && wc.src_qp == q1->qp_num);

	memcpy(a, "hello from the shim", 20);
	swr.wr_id = 7;
	swr.send_flags = IBV_SEND_SIGNALED;
	swr.opcode = IBV_WR_SEND_WITH_IMM;
	swr.imm_data = htonl(0xabcdef01);
	sge.length = 20;
	CHECK(ibv_req_notify_cq(cq, 0) == 0);
	CHECK(ibv_post_send(q1, &swr, &bad_s) == 0);
	wc = poll_one(cq2);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.wr_id == 7);
	CHECK(poll(&pfd, 1, 5000) == 1);
	CHECK(ibv_get_cq_event(ch, &evcq, &evctx) == 0 && evcq == cq);
	ibv_ack_cq_events(cq, 1);
	wc = poll_one(cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 1001);
	CHECK((wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 0xabcdef01);
	CHECK(wc.byte_len == 20 && memcmp(b, "hello from the shim", 20) == 0);
	FAILS_MINUS1(ibv_get_cq_event(ch, &evcq, &evctx), EAGAIN); /* not re-armed */

	/* ---- inline data from unregistered memory: the SGE's lkey means nothing ---- */
	char stackmsg[32] = "inline from the stack";
	struct ibv_sge isge = {.addr = (uintptr_t)stackmsg, .length = 22, .lkey = 0};
	struct ibv_send_wr iw = {.wr_id = 77, .sg_list = &isge, .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
	CHECK(ibv_post_send(q1, &iw, &bad_s) == 0);
	memset(stackmsg, 0, sizeof(stackmsg)); /* copied at post time */
	wc = poll_one(cq2);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.wr_id == 77);
	wc = poll_one(cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 1002);
	CHECK(wc.byte_len == 22 && memcmp(b, "inline from the stack", 22) == 0);
	isge.addr = (uintptr_t)a;
	isge.length = 65; /* more than max_inline_data (64) */
	CHECK(ibv_post_send(q1, &iw, &bad_s) == EINVAL && bad_s == &iw);

	/* ---- RDMA WRITE with immediate into b (at iova 0x10000 + 256) ---- */
	for (int i = 0; i < 3000; i++)
		a[i] = (char)(i * 7);
	sge.length = 3000;
	swr.wr_id = 8;
	swr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	swr.imm_data = htonl(5);
	swr.wr.rdma.remote_addr = 0x10000 + 256;
	swr.wr.rdma.rkey = mrb->rkey;
	CHECK(ibv_post_send(q1, &swr, &bad_s) == 0);
	wc = poll_one(cq2);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE);
	wc = poll_one(cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK(ntohl(wc.imm_data) == 5 && memcmp(b + 256, a, 3000) == 0);

	/* ---- RDMA READ of b into a ---- */
	memcpy(b + 8192, "read me back", 13);
	sge.addr = (uintptr_t)a + 4096;
	sge.length = 13;
	swr.wr_id = 9;
	swr.opcode = IBV_WR_RDMA_READ;
	swr.wr.rdma.remote_addr = 0x10000 + 8192;
	CHECK(ibv_post_send(q1, &swr, &bad_s) == 0);
	wc = poll_one(cq2);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ && wc.byte_len == 13);
	CHECK(memcmp(a + 4096, "read me back", 13) == 0);

	/* ---- atomics on b's word at 16384 ---- */
	uint64_t *word = (uint64_t *)(b + 16384);
	*word = 40;
	sge.addr = (uintptr_t)a + 8192;
	sge.length = 8;
	swr.wr_id = 10;
	swr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	swr.wr.atomic.remote_addr = 0x10000 + 16384;
	swr.wr.atomic.rkey = mrb->rkey;
	swr.wr.atomic.compare_add = 2;
	CHECK(ibv_post_send(q1, &swr, &bad_s) == 0);
	wc = poll_one(cq2);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD);
	CHECK(*(uint64_t *)(a + 8192) == 40 && *word == 42);
	swr.wr_id = 11;
	swr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	swr.wr.atomic.compare_add = 42;
	swr.wr.atomic.swap = 7;
	CHECK(ibv_post_send(q1, &swr, &bad_s) == 0);
	wc = poll_one(cq2);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_COMP_SWAP);
	CHECK(*(uint64_t *)(a + 8192) == 42 && *word == 7);

	/* ---- a bad rkey fails the WR with a remote access error ---- */
	swr.wr_id = 12;
	swr.opcode = IBV_WR_RDMA_WRITE;
	swr.wr.rdma.remote_addr = 0x10000;
	swr.wr.rdma.rkey = mrb->rkey + 1;
	CHECK(ibv_post_send(q1, &swr, &bad_s) == 0);
	wc = poll_one(cq2);
	CHECK(wc.wr_id == 12 && wc.status == IBV_WC_REM_ACCESS_ERR);
	CHECK(strcmp(ibv_wc_status_str(wc.status), "remote access error") == 0);
	CHECK(ibv_query_qp(q1, &got, IBV_QP_STATE, &got_init) == 0 && got.qp_state == IBV_QPS_ERR);

	/* ---- SRQs ---- */
	struct ibv_srq_init_attr sia = {.srq_context = &tag, .attr = {.max_wr = 4, .max_sge = 1}};
	FAILS_NULL(ibv_create_srq(NULL, &sia), EINVAL);
	FAILS_NULL(ibv_create_srq(pd, NULL), EINVAL);
	sia.attr.max_wr = 1 << 24;
	FAILS_NULL(ibv_create_srq(pd, &sia), EINVAL);
	sia.attr.max_wr = 4;
	struct ibv_srq *srq = ibv_create_srq(pd, &sia);
	CHECK(srq && srq->pd == pd && srq->srq_context == &tag);
	struct ibv_srq_attr sa;
	CHECK(ibv_query_srq(srq, &sa) == 0 && sa.max_wr >= 4 && sa.max_sge >= 1);
	sa.srq_limit = 2;
	CHECK(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT) == 0);
	CHECK(ibv_query_srq(srq, &sa) == 0 && sa.srq_limit == 2);
	CHECK(ibv_modify_srq(srq, &sa, 1 << 5) == EINVAL);
	struct ibv_recv_wr sw = {.wr_id = 1, .sg_list = &rsge, .num_sge = 1}, *bad_sw = NULL;
	CHECK(ibv_post_srq_recv(srq, &sw, &bad_sw) == 0);
	sw.num_sge = 5; /* more than max_sge */
	CHECK(ibv_post_srq_recv(srq, &sw, &bad_sw) == EINVAL && bad_sw == &sw);
	struct ibv_qp_init_attr sqa = {.send_cq = cq2, .recv_cq = cq2, .srq = srq,
				       .cap = {.max_send_wr = 4, .max_send_sge = 1},
				       .qp_type = IBV_QPT_RC};
	struct ibv_qp *sq = ibv_create_qp(pd, &sqa);
	CHECK(sq && sq->srq == srq);
	CHECK(ibv_destroy_srq(srq) == EBUSY); /* a QP uses it */
	CHECK(ibv_destroy_qp(sq) == 0);
	CHECK(ibv_destroy_srq(srq) == 0);
	CHECK(ibv_destroy_srq(srq) == EINVAL);

	/* ---- address handles ---- */
	struct ibv_ah_attr aha = {.is_global = 0, .port_num = 1};
	FAILS_NULL(ibv_create_ah(pd, &aha), EINVAL); /* RoCE needs the GRH */
	aha.is_global = 1;
	aha.grh.dgid = gid;
	aha.grh.sgid_index = 1;
	FAILS_NULL(ibv_create_ah(NULL, &aha), EINVAL);
	aha.grh.sgid_index = 9;
	FAILS_NULL(ibv_create_ah(pd, &aha), EINVAL);
	aha.grh.sgid_index = 1;
	struct ibv_ah *ah = ibv_create_ah(pd, &aha);
	CHECK(ah && ah->pd == pd);
	CHECK(ibv_destroy_ah(ah) == 0);
	CHECK(ibv_destroy_ah(ah) == EINVAL);

	/* ---- unsupported objects: the errno libibverbs gives for a provider without them ---- */
	/* ---- memory windows: a type softroce has not is EINVAL (rxe), the others allocate ---- */
	FAILS_NULL(ibv_alloc_mw(pd, 3), EINVAL);
	struct ibv_mw *mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	CHECK(mw1 && mw1->pd == pd && mw1->context == ctx && mw1->type == IBV_MW_TYPE_1);
	CHECK(ibv_dealloc_pd(pd) == EBUSY); /* the window holds its PD */
	CHECK(ibv_dealloc_mw(mw1) == 0);

	/* ---- multicast: UD QPs attach to IPv4-mapped multicast GIDs (ib_attach_mcast's checks,
	 * rxe's limits and its EBUSY for destroying an attached QP) ---- */
	struct ibv_device_attr mda;
	CHECK(ibv_query_device(ctx, &mda) == 0 && mda.max_mcast_grp > 0 &&
	      mda.max_mcast_qp_attach == 56 &&
	      mda.max_total_mcast_qp_attach == mda.max_mcast_grp * mda.max_mcast_qp_attach);
	union ibv_gid mg = {.raw = {[10] = 0xff, [11] = 0xff, [12] = 230, [13] = 0, [14] = 31, [15] = 77}};
	CHECK(ibv_attach_mcast(q1, &gid, 0) == EINVAL); /* the device's own GID is no group */
	CHECK(ibv_attach_mcast(q1, &mg, 0) == EINVAL);  /* an RC QP */
	struct ibv_qp_init_attr uda = {.send_cq = cq2, .recv_cq = cq2, .qp_type = IBV_QPT_UD,
				       .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *ud = ibv_create_qp(pd, &uda);
	CHECK(ud != NULL);
	CHECK(ibv_detach_mcast(ud, &mg, 0) == EINVAL); /* not attached */
	CHECK(ibv_attach_mcast(ud, &mg, 0) == 0);
	CHECK(ibv_attach_mcast(ud, &mg, 0) == 0); /* again: nothing changes */
	CHECK(ibv_destroy_qp(ud) == EBUSY);       /* attached */
	CHECK(ibv_detach_mcast(ud, &mg, 0) == 0);
	CHECK(ibv_detach_mcast(ud, &mg, 0) == EINVAL);
	CHECK(ibv_destroy_qp(ud) == 0);

	/* ---- async events: none; a non-blocking fd says so ---- */
	CHECK(fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK) == 0);
	struct ibv_async_event ev;
	FAILS_MINUS1(ibv_get_async_event(ctx, &ev), EAGAIN);
	FAILS_MINUS1(ibv_get_async_event(NULL, &ev), EINVAL);

	/* ---- a second context of the process shares the device (one address, one socket) ---- */
	struct ibv_device **list2 = ibv_get_device_list(NULL);
	struct ibv_context *ctx2 = ibv_open_device(list2[0]);
	ibv_free_device_list(list2);
	CHECK(ctx2 != NULL && ctx2 != ctx);
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx2);
	CHECK(pd2 != NULL);
	CHECK(ibv_dealloc_pd(pd2) == 0);
	CHECK(ibv_close_device(ctx2) == 0);

	/* ---- teardown, with double destroys ---- */
	CHECK(ibv_destroy_qp(q1) == 0);
	CHECK(ibv_destroy_qp(q1) == EINVAL);
	CHECK(ibv_destroy_qp(q2) == 0);
	CHECK(ibv_destroy_qp(NULL) == EINVAL);
	CHECK(ibv_destroy_cq(cq) == 0);
	CHECK(ibv_destroy_cq(cq) == EINVAL);
	CHECK(ibv_destroy_cq(cq2) == 0);
	CHECK(ibv_destroy_comp_channel(ch) == 0);
	CHECK(ibv_destroy_comp_channel(ch) == EINVAL);
	CHECK(ibv_dereg_mr(mra) == 0);
	CHECK(ibv_dereg_mr(mrb) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_dealloc_pd(pd) == EINVAL);
	CHECK(ibv_close_device(ctx) == 0);
	FAILS_MINUS1(ibv_close_device(ctx), EINVAL);
	FAILS_MINUS1(ibv_close_device(NULL), EINVAL);
	free(a);
	free(b);

	/* ---- helpers ---- */
	CHECK(ibv_fork_init() == 0);
	CHECK(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED);
	char range[64];
	CHECK(ibv_dontfork_range(range, sizeof(range)) == 0);
	CHECK(ibv_dofork_range(range, sizeof(range)) == 0);
	CHECK(strcmp(ibv_wc_status_str(IBV_WC_SUCCESS), "success") == 0);
	CHECK(strcmp(ibv_wc_status_str(IBV_WC_RNR_RETRY_EXC_ERR), "RNR retry counter exceeded") == 0);
	CHECK(strcmp(ibv_wc_status_str(1000), "unknown") == 0);
	CHECK(strcmp(ibv_port_state_str(IBV_PORT_ACTIVE), "PORT_ACTIVE") == 0);
	CHECK(strcmp(ibv_port_state_str(99), "invalid state") == 0);
	CHECK(strcmp(ibv_node_type_str(IBV_NODE_CA), "InfiniBand channel adapter") == 0);
	CHECK(strcmp(ibv_node_type_str(-1), "unknown") == 0);
	CHECK(strcmp(ibv_event_type_str(IBV_EVENT_PORT_ACTIVE), "port active") == 0);
	CHECK(strcmp(ibv_event_type_str(999), "unknown") == 0);
	CHECK(ibv_rate_to_mult(IBV_RATE_10_GBPS) == 4 && ibv_rate_to_mult(IBV_RATE_MAX) == 0);
	CHECK(mult_to_ibv_rate(4) == IBV_RATE_10_GBPS && mult_to_ibv_rate(3) == IBV_RATE_MAX);
	CHECK(ibv_rate_to_mbps(IBV_RATE_25_GBPS) == 25000 && ibv_rate_to_mbps(IBV_RATE_MAX) == 0);
	CHECK(mbps_to_ibv_rate(100000) == IBV_RATE_100_GBPS && mbps_to_ibv_rate(1) == IBV_RATE_MAX);
	CHECK(strcmp(ibv_get_sysfs_path(), "/sys") == 0);
	char buf[8];
	FAILS_MINUS1(ibv_read_sysfs_file("/nonexistent", "x", buf, sizeof(buf)), ENOENT);

	printf("ok %d checks\n", checks);
	return 0;
}
