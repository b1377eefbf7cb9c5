/* The IBVERBS_1.0 compatibility layer, as a program linked against libibverbs 1.0 would use
 * it: each function looked up at its version with dlvsym, the 1.0 objects in their own
 * layouts (declared below from rdma-core 44's compat-1_0.c, which defines them; no header
 * has them), the data path through the 1.0 context's ops. Two RC QPs of one context talk
 * over the device's loopback: SEND with a completion channel, RDMA WRITE, a failed post whose
 * bad_wr must name the 1.0 WR. Run with the shim first on LD_LIBRARY_PATH.
 * Prints "ok N checks" and exits 0, or prints the first failed check and exits 1. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

/* verbs.h turns these into its own inline versions; here they name the 1.0 functions. */
#undef ibv_query_port
#undef ibv_reg_mr

static int checks;

#define CHECK(cond)                                                                          \
	do {                                                                                 \
		checks++;                                                                    \
		if (!(cond)) {                                                               \
			fprintf(stderr, "%s:%d: check failed: %s (errno %d %s)\n", __FILE__, \
				__LINE__, #cond, errno, strerror(errno));                    \
			exit(1);                                                             \
		}                                                                            \
	} while (0)

struct dev10 {
	void *obsolete[2];
	struct ibv_device *real_device;
	void *ops[2];
};
struct cq10;
struct qp10;
struct srq10;
struct swr10;
struct rwr10;
struct ops10 {
	void *control[7];
	int (*poll_cq)(struct cq10 *, int, struct ibv_wc *);
	int (*req_notify_cq)(struct cq10 *, int);
	void *cq[7];
	int (*post_srq_recv)(struct srq10 *, struct rwr10 *, struct rwr10 **);
	void *qp[4];
	int (*post_send)(struct qp10 *, struct swr10 *, struct swr10 **);
	int (*post_recv)(struct qp10 *, struct rwr10 *, struct rwr10 **);
	void *ah_mcast[4];
};
struct ctx10 {
	struct dev10 *device;
	struct ops10 ops;
	int cmd_fd, async_fd, num_comp_vectors;
	struct ibv_context *real_context;
};
struct pd10 {
	struct ctx10 *context;
	uint32_t handle;
	struct ibv_pd *real_pd;
};
struct mr10 {
	struct ctx10 *context;
	struct pd10 *pd;
	uint32_t handle, lkey, rkey;
	struct ibv_mr *real_mr;
};
struct srq10 {
	struct ctx10 *context;
	void *srq_context;
	struct pd10 *pd;
	uint32_t handle;
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	uint32_t events_completed;
	struct ibv_srq *real_srq;
};
struct cq10 {
	struct ctx10 *context;
	void *cq_context;
	uint32_t handle;
	int cqe;
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	uint32_t comp_events_completed, async_events_completed;
	struct ibv_cq *real_cq;
};
struct qp10 {
	struct ctx10 *context;
	void *qp_context;
	struct pd10 *pd;
	struct cq10 *send_cq, *recv_cq;
	struct srq10 *srq;
	uint32_t handle, qp_num;
	enum ibv_qp_state state;
	enum ibv_qp_type qp_type;
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	uint32_t events_completed;
	struct ibv_qp *real_qp;
};
struct ah10 {
	struct ctx10 *context;
	struct pd10 *pd;
	uint32_t handle;
	struct ibv_ah *real_ah;
};
struct qp_init10 {
	void *qp_context;
	struct cq10 *send_cq, *recv_cq;
	struct srq10 *srq;
	struct ibv_qp_cap cap;
	enum ibv_qp_type qp_type;
	int sq_sig_all;
};
struct swr10 {
	struct swr10 *next;
	uint64_t wr_id;
	struct ibv_sge *sg_list;
	int num_sge;
	enum ibv_wr_opcode opcode;
	int send_flags;
	__be32 imm_data;
	union {
		struct {
			uint64_t remote_addr;
			uint32_t rkey;
		} rdma;
		struct {
			uint64_t remote_addr, compare_add, swap;
			uint32_t rkey;
		} atomic;
		struct {
			struct ah10 *ah;
			uint32_t remote_qpn, remote_qkey;
		} ud;
	} wr;
};
struct rwr10 {
	struct rwr10 *next;
	uint64_t wr_id;
	struct ibv_sge *sg_list;
	int num_sge;
};

static void *lib;
static void *v10(const char *name)
{
	void *f = dlvsym(lib, name, "IBVERBS_1.0");
	if (!f) {
		fprintf(stderr, "%s@IBVERBS_1.0 missing\n", name);
		exit(1);
	}
	checks++;
	return f;
}
#define F10(ret, name, ...) ret (*name)(__VA_ARGS__) = v10(#name)

static struct ibv_wc poll10(struct ctx10 *ctx, struct cq10 *cq)
{
	struct ibv_wc wc;
	for (int i = 0; i < 5000000; i++) {
		int n = ctx->ops.poll_cq(cq, 1, &wc);
		CHECK(n >= 0);
		if (n == 1)
			return wc;
	}
	CHECK(!"a completion within the bound");
	return wc;
}

int main(void)
{
	lib = dlopen("libibverbs.so.1", RTLD_NOW);
	CHECK(lib != NULL);
	F10(struct dev10 **, ibv_get_device_list, int *);
	F10(void, ibv_free_device_list, struct dev10 **);
	F10(const char *, ibv_get_device_name, struct dev10 *);
	F10(__be64, ibv_get_device_guid, struct dev10 *);
	F10(struct ctx10 *, ibv_open_device, struct dev10 *);
	F10(int, ibv_close_device, struct ctx10 *);
	F10(int, ibv_get_async_event, struct ctx10 *, struct ibv_async_event *);
	F10(int, ibv_query_device, struct ctx10 *, struct ibv_device_attr *);
	F10(int, ibv_query_port, struct ctx10 *, uint8_t, struct ibv_port_attr *);
	F10(int, ibv_query_gid, struct ctx10 *, uint8_t, int, union ibv_gid *);
	F10(int, ibv_query_pkey, struct ctx10 *, uint8_t, int, __be16 *);
	F10(struct pd10 *, ibv_alloc_pd, struct ctx10 *);
	F10(int, ibv_dealloc_pd, struct pd10 *);
	F10(struct mr10 *, ibv_reg_mr, struct pd10 *, void *, size_t, int);
	F10(int, ibv_dereg_mr, struct mr10 *);
	F10(struct cq10 *, ibv_create_cq, struct ctx10 *, int, void *, struct ibv_comp_channel *,
	    int);
	F10(int, ibv_resize_cq, struct cq10 *, int);
	F10(int, ibv_destroy_cq, struct cq10 *);
	F10(int, ibv_get_cq_event, struct ibv_comp_channel *, struct cq10 **, void **);
	F10(void, ibv_ack_cq_events, struct cq10 *, unsigned int);
	F10(struct srq10 *, ibv_create_srq, struct pd10 *, struct ibv_srq_init_attr *);
	F10(int, ibv_modify_srq, struct srq10 *, struct ibv_srq_attr *, int);
	F10(int, ibv_query_srq, struct srq10 *, struct ibv_srq_attr *);
	F10(int, ibv_destroy_srq, struct srq10 *);
	F10(struct qp10 *, ibv_create_qp, struct pd10 *, struct qp_init10 *);
	F10(int, ibv_query_qp, struct qp10 *, struct ibv_qp_attr *, int, struct qp_init10 *);
	F10(int, ibv_modify_qp, struct qp10 *, struct ibv_qp_attr *, int);
	F10(int, ibv_destroy_qp, struct qp10 *);
	F10(struct ah10 *, ibv_create_ah, struct pd10 *, struct ibv_ah_attr *);
	F10(int, ibv_destroy_ah, struct ah10 *);
	F10(int, ibv_attach_mcast, struct qp10 *, union ibv_gid *, uint16_t);
	F10(int, ibv_detach_mcast, struct qp10 *, union ibv_gid *, uint16_t);
	F10(void, ibv_ack_async_event, struct ibv_async_event *);
	(void)ibv_ack_async_event;

	/* Devices. */
	int n = -1;
	struct dev10 **list = ibv_get_device_list(&n);
	CHECK(list != NULL && n == 1 && list[1] == NULL);
	CHECK(strcmp(ibv_get_device_name(list[0]), "softroce0") == 0);
	struct ibv_device **cur = (struct ibv_device **)dlsym(lib, "ibv_get_device_list") ?
		((struct ibv_device * *(*)(int *))dlsym(lib, "ibv_get_device_list"))(NULL) : NULL;
	CHECK(cur != NULL && list[0]->real_device == cur[0]);
	CHECK(ibv_get_device_guid(list[0]) != 0);
	errno = 0;
	struct dev10 bogus_dev = {.real_device = cur[0]};
	CHECK(ibv_get_device_name(&bogus_dev) == NULL && errno == EINVAL);

	/* Context and queries. */
	struct ctx10 *ctx = ibv_open_device(list[0]);
	CHECK(ctx != NULL && ctx->device == list[0] && ctx->real_context != NULL);
	CHECK(ctx->num_comp_vectors == 1 && ctx->async_fd >= 0);
	CHECK(ctx->ops.poll_cq && ctx->ops.req_notify_cq && ctx->ops.post_send &&
	      ctx->ops.post_recv && ctx->ops.post_srq_recv);
	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0 && da.phys_port_cnt == 1);
	struct ibv_port_attr pa;
	CHECK(ibv_query_port(ctx, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE);
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0);
	CHECK(gid.raw[10] == 0xff && gid.raw[11] == 0xff && gid.raw[12] == 127);
	__be16 pkey;
	CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && pkey == 0xffff);
	struct ibv_async_event ev;
	errno = 0;
	CHECK(ibv_get_async_event((struct ctx10 *)&da, &ev) == -1 && errno == EINVAL);

	/* PD, MR, CQ with a channel, SRQ. */
	struct pd10 *pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL && pd->context == ctx && pd->real_pd != NULL);
	errno = 0;
	CHECK(ibv_alloc_pd((struct ctx10 *)&da) == NULL && errno == EINVAL);
	static char buf[2][4096];
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct mr10 *mr = ibv_reg_mr(pd, buf, sizeof(buf), access);
	CHECK(mr != NULL && mr->pd == pd && mr->lkey == mr->real_mr->lkey &&
	      mr->rkey == mr->real_mr->rkey);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx->real_context);
	CHECK(ch != NULL);
	struct cq10 *cq = ibv_create_cq(ctx, 16, (void *)0x1234, ch, 0);
	CHECK(cq != NULL && cq->context == ctx && cq->cq_context == (void *)0x1234 && cq->cqe == 16);
	errno = 0;
	CHECK(ibv_create_cq(ctx, 16, NULL, NULL, 1) == NULL && errno == EINVAL);
	struct ibv_srq_init_attr si = {.srq_context = (void *)0x77, .attr = {.max_wr = 4, .max_sge = 1}};
	struct srq10 *srq = ibv_create_srq(pd, &si);
	CHECK(srq != NULL && srq->srq_context == (void *)0x77 && srq->pd == pd);
	struct ibv_srq_attr sa = {.srq_limit = 2};
	CHECK(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT) == 0);
	CHECK(ibv_query_srq(srq, &sa) == 0 && sa.max_wr >= 4 && sa.srq_limit == 2);

	/* Two RC QPs, connected to each other. */
	struct qp10 *qp[2];
	for (int i = 0; i < 2; i++) {
		struct qp_init10 ia = {
			.qp_context = (void *)(long)(0x100 + i),
			.send_cq = cq,
			.recv_cq = cq,
			.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
			.qp_type = IBV_QPT_RC,
		};
		qp[i] = ibv_create_qp(pd, &ia);
		CHECK(qp[i] != NULL && qp[i]->qp_num == qp[i]->real_qp->qp_num);
		CHECK(qp[i]->send_cq == cq && qp[i]->qp_type == IBV_QPT_RC && qp[i]->pd == pd);
		CHECK(ia.cap.max_send_wr >= 8);
	}
	struct qp_init10 qi;
	struct ibv_qp_attr qa;
	CHECK(ibv_query_qp(qp[0], &qa, IBV_QP_STATE, &qi) == 0);
	CHECK(qi.send_cq == cq && qi.recv_cq == cq && qi.srq == NULL && qi.qp_context == (void *)0x100);
	CHECK(qa.qp_state == IBV_QPS_RESET);
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access};
		CHECK(ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						       IBV_QP_ACCESS_FLAGS) == 0);
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTR;
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = qp[1 - i]->qp_num;
		a.rq_psn = 100;
		a.max_dest_rd_atomic = 4;
		a.min_rnr_timer = 12;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = gid;
		a.ah_attr.grh.sgid_index = 1;
		a.ah_attr.grh.hop_limit = 1;
		a.ah_attr.port_num = 1;
		CHECK(ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
						       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
						       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTS;
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.sq_psn = 100;
		a.max_rd_atomic = 4;
		CHECK(ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
						       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
						       IBV_QP_MAX_QP_RD_ATOMIC) == 0);
		CHECK(qp[i]->state == IBV_QPS_RTS);
	}

	/* SEND through the 1.0 ops, completion event through the 1.0 CQ. */
	struct ibv_sge rsge = {.addr = (uintptr_t)buf[1], .length = 64, .lkey = mr->lkey};
	struct rwr10 rwr = {.wr_id = 7, .sg_list = &rsge, .num_sge = 1}, *rbad = NULL;
	CHECK(ctx->ops.post_recv(qp[1], &rwr, &rbad) == 0);
	CHECK(ctx->ops.req_notify_cq(cq, 0) == 0);
	strcpy(buf[0], "hello from 1.0");
	struct ibv_sge ssge = {.addr = (uintptr_t)buf[0], .length = 64, .lkey = mr->lkey};
	struct swr10 swr = {.wr_id = 9, .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND,
			    .send_flags = IBV_SEND_SIGNALED}, *sbad = NULL;
	CHECK(ctx->ops.post_send(qp[0], &swr, &sbad) == 0);
	struct cq10 *evcq = NULL;
	void *evctx = NULL;
	CHECK(ibv_get_cq_event(ch, &evcq, &evctx) == 0);
	CHECK(evcq == cq && evctx == (void *)0x1234);
	ibv_ack_cq_events(cq, 1);
	CHECK(cq->comp_events_completed == 1);
	int got_send = 0, got_recv = 0;
	for (int i = 0; i < 2; i++) {
		struct ibv_wc wc = poll10(ctx, cq);
		CHECK(wc.status == IBV_WC_SUCCESS);
		if (wc.opcode == IBV_WC_SEND)
			got_send = wc.wr_id == 9 && wc.qp_num == qp[0]->qp_num;
		if (wc.opcode == IBV_WC_RECV)
			got_recv = wc.wr_id == 7 && wc.byte_len == 64 && wc.qp_num == qp[1]->qp_num;
	}
	CHECK(got_send && got_recv);
	CHECK(strcmp(buf[1], "hello from 1.0") == 0);

	/* RDMA WRITE: the 1.0 wr.rdma lands where the current WR has it. */
	strcpy(buf[0] + 1024, "written through wr.rdma");
	struct ibv_sge wsge = {.addr = (uintptr_t)(buf[0] + 1024), .length = 32, .lkey = mr->lkey};
	struct swr10 wwr = {.wr_id = 11, .sg_list = &wsge, .num_sge = 1,
			    .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
	wwr.wr.rdma.remote_addr = (uintptr_t)(buf[1] + 2048);
	wwr.wr.rdma.rkey = mr->rkey;
	CHECK(ctx->ops.post_send(qp[0], &wwr, &sbad) == 0);
	struct ibv_wc wc = poll10(ctx, cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 11 && wc.opcode == IBV_WC_RDMA_WRITE);
	CHECK(strcmp(buf[1] + 2048, "written through wr.rdma") == 0);

	/* A failed post names the 1.0 WR that failed. */
	struct swr10 second = swr, first = swr;
	second.num_sge = 100;
	first.next = &second;
	first.send_flags = 0;
	sbad = NULL;
	CHECK(ctx->ops.post_send(qp[0], &first, &sbad) != 0 && sbad == &second);
	struct rwr10 r2 = rwr, r1 = rwr;
	r2.num_sge = 100;
	r1.next = &r2;
	rbad = NULL;
	CHECK(ctx->ops.post_recv(qp[1], &r1, &rbad) != 0 && rbad == &r2);
	rbad = NULL;
	CHECK(ctx->ops.post_srq_recv(srq, &r2, &rbad) != 0 && rbad == &r2);
	CHECK(ctx->ops.post_srq_recv(srq, &rwr, &rbad) == 0);

	/* Address handle, multicast, resize. */
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.dgid = gid, .sgid_index = 1}};
	struct ah10 *ah = ibv_create_ah(pd, &aa);
	CHECK(ah != NULL && ah->pd == pd && ah->real_ah != NULL);
	CHECK(ibv_destroy_ah(ah) == 0);
	CHECK(ibv_destroy_ah(ah) == EINVAL);
	/* The device's GID is no multicast group: EINVAL, as ib_attach_mcast says. */
	CHECK(ibv_attach_mcast(qp[1], &gid, 0) == EINVAL);
	CHECK(ibv_detach_mcast(qp[1], &gid, 0) == EINVAL);
	CHECK(ibv_resize_cq(cq, 32) == 0); /* forwarded to the current CQ, as rdma-core */

	/* Teardown, with the usage checks of the current objects. */
	CHECK(ibv_dealloc_pd(pd) == EBUSY);
	CHECK(ibv_destroy_srq(srq) == 0);
	CHECK(ibv_destroy_qp(qp[0]) == 0 && ibv_destroy_qp(qp[1]) == 0);
	CHECK(ibv_destroy_qp(qp[0]) == EINVAL);
	CHECK(ibv_destroy_cq(cq) == 0);
	CHECK(ibv_destroy_comp_channel(ch) == 0);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	errno = 0;
	CHECK(ibv_close_device(ctx) == -1 && errno == EINVAL);
	ibv_free_device_list(list);
	((void (*)(struct ibv_device **))dlsym(lib, "ibv_free_device_list"))(cur);
	printf("ok %d checks\n", checks);
	return 0;
}
