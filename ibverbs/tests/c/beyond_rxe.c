/*
 * The verbs rxe lacks, as softroce offers them (spec-notes/beyond-rxe.md), through the C ABI
 * against the shim: on-demand paging (caps, explicit and implicit regions, memory mapped after
 * registration, ibv_advise_mr), ibv_rereg_mr of access rights, PD and memory, device memory, thread and
 * parent domains, completion timestamps and ibv_query_rt_values_ex. Traffic goes between two
 * RC QPs of this process over loopback.
 *
 * Prints "ok <checks>" and exits 0, or names the first failed check and exits 1. Every wait
 * is bounded (5 s).
 */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <unistd.h>
#include "loopback.h"

static struct ibv_qp *qp_a, *qp_b;

/* An RDMA WRITE of `len` bytes of src from qp_a into `va` with `rkey`: the completion. */
static struct ibv_wc write_to(uint64_t va, uint32_t rkey, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = len, .lkey = src_mr->lkey};
	struct ibv_send_wr wr = {
		.wr_id = 9,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = {.remote_addr = va, .rkey = rkey},
	}, *bad;
	CHECK(ibv_post_send(qp_a, &wr, &bad) == 0);
	struct ibv_wc wc = poll1(cq_a);
	CHECK(wc.wr_id == 9);
	return wc;
}

/* Moves both QPs of the pair back to RTS after an error. */
static void restate(void)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RESET};
	CHECK(ibv_modify_qp(qp_a, &a, IBV_QP_STATE) == 0);
	CHECK(ibv_modify_qp(qp_b, &a, IBV_QP_STATE) == 0);
	rc_to_rts(qp_a, qp_b->qp_num, ALL_REMOTE, 4);
	rc_to_rts(qp_b, qp_a->qp_num, ALL_REMOTE, 4);
	drain_cqs();
}

static void odp(void)
{
	struct ibv_device_attr_ex ax;
	CHECK(ibv_query_device_ex(ctx, NULL, &ax) == 0);
	CHECK(ax.odp_caps.general_caps & IBV_ODP_SUPPORT);
	CHECK(ax.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT);
	CHECK((ax.odp_caps.per_transport_caps.rc_odp_caps & 0x1f) == 0x1f);
	CHECK(ax.odp_caps.per_transport_caps.ud_odp_caps & IBV_ODP_SUPPORT_SEND);

	/* Address space reserved but not accessible: a plain registration fails as rxe's pin
	 * would, an on-demand one succeeds, and the memory becomes usable once mapped. */
	char *m = mmap(NULL, LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(m != MAP_FAILED);
	errno = 0;
	CHECK(ibv_reg_mr(pd, m, LEN, ALL_REMOTE) == NULL && errno == EFAULT);
	struct ibv_mr *mr = ibv_reg_mr(pd, m, LEN, ALL_REMOTE | IBV_ACCESS_ON_DEMAND);
	CHECK(mr != NULL);
	struct ibv_sge sge = {.addr = (uintptr_t)m, .length = 4096, .lkey = mr->lkey};
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
			    &sge, 1) == EFAULT);
	CHECK(write_to((uintptr_t)m, mr->rkey, 64).status == IBV_WC_REM_ACCESS_ERR);
	CHECK(mprotect(m, LEN, PROT_READ | PROT_WRITE) == 0);
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
			    &sge, 1) == 0);
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &sge, 1) == 0);
	/* Bad advice, flags, SGE count, ranges and keys. */
	CHECK(ibv_advise_mr(pd, 7, 0, &sge, 1) == EINVAL);
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 2, &sge, 1) == EINVAL);
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 0) == EINVAL);
	struct ibv_sge out = {.addr = (uintptr_t)m + LEN - 8, .length = 16, .lkey = mr->lkey};
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &out, 1) == EFAULT);
	struct ibv_sge plain = {.addr = (uintptr_t)src, .length = 64, .lkey = src_mr->lkey};
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &plain, 1) == EFAULT);
	struct ibv_mr *ro = ibv_reg_mr(pd, m, LEN, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ON_DEMAND);
	CHECK(ro != NULL);
	sge.lkey = ro->lkey;
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &sge, 1) == EPERM);
	CHECK(ibv_dereg_mr(ro) == 0);
	/* The access error above moved the pair to ERROR. */
	restate();
	memset(src, 0x6B, LEN);
	CHECK(write_to((uintptr_t)m, mr->rkey, LEN).status == IBV_WC_SUCCESS);
	CHECK(m[0] == 0x6B && m[LEN - 1] == 0x6B);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(munmap(m, LEN) == 0);

	/* The implicit region: the whole address space under one key, ON_DEMAND only. */
	errno = 0;
	CHECK(ibv_reg_mr(pd, NULL, SIZE_MAX, ALL_REMOTE) == NULL && errno == EINVAL);
	struct ibv_mr *all = ibv_reg_mr(pd, NULL, SIZE_MAX, ALL_REMOTE | IBV_ACCESS_ON_DEMAND);
	CHECK(all != NULL && all->addr == NULL && all->length == SIZE_MAX);
	char *dst = aligned_alloc(4096, LEN);
	CHECK(dst != NULL);
	memset(src, 0x3C, LEN);
	CHECK(write_to((uintptr_t)dst, all->rkey, LEN).status == IBV_WC_SUCCESS);
	CHECK(dst[0] == 0x3C && dst[LEN - 1] == 0x3C);
	CHECK(ibv_dereg_mr(all) == 0);
	free(dst);
}

static void rereg(void)
{
	char *m = aligned_alloc(4096, LEN);
	CHECK(m != NULL);
	struct ibv_mr *mr = ibv_reg_mr(pd, m, LEN, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr != NULL && mr->rkey == mr->lkey);
	uint32_t key = mr->lkey;
	CHECK(write_to((uintptr_t)m, key, 64).status == IBV_WC_REM_ACCESS_ERR);
	restate();
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, ALL_REMOTE) == 0);
	CHECK(mr->lkey == key && mr->rkey == key); /* the key a peer holds stays good */
	memset(src, 0x77, LEN);
	CHECK(write_to((uintptr_t)m, key, 64).status == IBV_WC_SUCCESS && m[63] == 0x77);
	/* libibverbs' input checks, and what the device refuses. */
	errno = 0;
	CHECK(ibv_rereg_mr(mr, 8, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL);
	CHECK(ibv_rereg_mr(mr, 0, NULL, NULL, 0, ALL_REMOTE) == IBV_REREG_MR_ERR_INPUT);
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 0, 0) ==
	      IBV_REREG_MR_ERR_INPUT);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_CMD &&
	      errno == EINVAL);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE) ==
		      IBV_REREG_MR_ERR_CMD &&
	      errno == EINVAL); /* remote write without local write */
	CHECK(ibv_dereg_mr(mr) == 0);
	free(m);
}

/* B posts a receive of 64 bytes at `va` under `lkey` (wr_id 5). */
static void recv_on_b(uint64_t va, uint32_t lkey)
{
	struct ibv_sge sge = {.addr = va, .length = 64, .lkey = lkey};
	struct ibv_recv_wr wr = {.wr_id = 5, .sg_list = &sge, .num_sge = 1}, *bad;
	CHECK(ibv_post_recv(qp_b, &wr, &bad) == 0);
}

/* A SEND of 64 bytes of src from qp_a: A's completion status. */
static enum ibv_wc_status send_64(void)
{
	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = 64, .lkey = src_mr->lkey};
	struct ibv_send_wr wr = {
		.wr_id = 6,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	CHECK(ibv_post_send(qp_a, &wr, &bad) == 0);
	struct ibv_wc wc = poll1(cq_a);
	CHECK(wc.wr_id == 6);
	return wc.status;
}

/*
 * ibv_rereg_mr of PD and of memory, under the same keys: a receive posted before the change
 * fails where its data lands (A learns a remote operational error), as rdma-core's
 * test_mr_rereg_pd and test_mr_rereg_addr expect.
 */
static void rereg_pd_and_memory(void)
{
	char *m = aligned_alloc(4096, LEN), *m2 = aligned_alloc(4096, LEN);
	CHECK(m != NULL && m2 != NULL);
	struct ibv_mr *mr = ibv_reg_mr(pd, m, LEN, ALL_REMOTE);
	CHECK(mr != NULL);
	uint32_t key = mr->lkey;
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	CHECK(pd2 != NULL);
	memset(src, 0x55, LEN);

	/* Another PD: B's receive posted before fails, and so do A's WRITEs under the key. */
	recv_on_b((uintptr_t)m, key);
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == 0);
	CHECK(mr->pd == pd2 && mr->lkey == key && mr->rkey == key);
	CHECK(ibv_dealloc_pd(pd2) == EBUSY); /* the region holds its new PD */
	CHECK(send_64() == IBV_WC_REM_OP_ERR);
	struct ibv_wc wc = poll1(cq_b);
	CHECK(wc.wr_id == 5 && wc.status == IBV_WC_LOC_QP_OP_ERR);
	restate();
	CHECK(write_to((uintptr_t)m, key, 64).status == IBV_WC_REM_ACCESS_ERR);
	restate();
	/* Back to the QPs' PD: traffic works again, and the PD it left can go. */
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, 0) == 0 && mr->pd == pd);
	CHECK(ibv_dealloc_pd(pd2) == 0);
	recv_on_b((uintptr_t)m, key);
	CHECK(send_64() == IBV_WC_SUCCESS);
	wc = poll1(cq_b);
	CHECK(wc.wr_id == 5 && wc.status == IBV_WC_SUCCESS && m[63] == 0x55);

	/* Other memory: the receive posted on the old memory fails; the new memory takes data. */
	recv_on_b((uintptr_t)m, key);
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, m2, LEN, 0) == 0);
	CHECK(mr->addr == m2 && mr->length == LEN && mr->lkey == key);
	CHECK(send_64() == IBV_WC_REM_OP_ERR);
	wc = poll1(cq_b);
	CHECK(wc.wr_id == 5 && wc.status == IBV_WC_LOC_QP_OP_ERR);
	restate();
	memset(m, 0, LEN);
	memset(src, 0x66, LEN);
	CHECK(write_to((uintptr_t)m2, key, 64).status == IBV_WC_SUCCESS && m2[63] == 0x66);
	CHECK(m[63] == 0); /* the old memory is no longer the region's */
	CHECK(write_to((uintptr_t)m, key, 64).status == IBV_WC_REM_ACCESS_ERR);
	restate();
	/* Memory that is not mapped is refused and leaves the region as it was. */
	char *gone = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(gone != MAP_FAILED && munmap(gone, 4096) == 0);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, gone, 4096, 0) ==
		      IBV_REREG_MR_ERR_CMD &&
	      errno == EFAULT);
	CHECK(mr->addr == m2 && write_to((uintptr_t)m2, key, 64).status == IBV_WC_SUCCESS);
	CHECK(ibv_dereg_mr(mr) == 0);
	free(m);
	free(m2);
}

static void device_memory(void)
{
	struct ibv_device_attr_ex ax;
	CHECK(ibv_query_device_ex(ctx, NULL, &ax) == 0);
	CHECK(ax.max_dm_size >= 4096);
	struct ibv_alloc_dm_attr big = {.length = ax.max_dm_size + 1};
	errno = 0;
	CHECK(ibv_alloc_dm(ctx, &big) == NULL && errno == ENOMEM);
	struct ibv_alloc_dm_attr masked = {.length = 64, .comp_mask = 1};
	CHECK(ibv_alloc_dm(ctx, &masked) == NULL && errno == EINVAL);
	struct ibv_alloc_dm_attr da = {.length = 4096, .log_align_req = 6};
	struct ibv_dm *dm = ibv_alloc_dm(ctx, &da);
	CHECK(dm != NULL && dm->context == ctx);
	char buf[64], back[64];
	memset(buf, 0x42, sizeof(buf));
	CHECK(ibv_memcpy_to_dm(dm, 128, buf, sizeof(buf)) == 0);
	CHECK(ibv_memcpy_from_dm(back, dm, 128, sizeof(back)) == 0);
	CHECK(memcmp(buf, back, sizeof(buf)) == 0);
	CHECK(ibv_memcpy_to_dm(dm, 2, buf, 4) == EINVAL);
	CHECK(ibv_memcpy_to_dm(dm, 4, buf, 3) == EINVAL);
	CHECK(ibv_memcpy_from_dm(back, dm, 4096, 4) == EFAULT);
	errno = 0;
	CHECK(ibv_reg_dm_mr(pd, dm, 0, 4096, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL);
	CHECK(ibv_reg_dm_mr(pd, dm, 0, 4100, IBV_ACCESS_ZERO_BASED) == NULL && errno == EINVAL);
	struct ibv_mr *mr = ibv_reg_dm_mr(pd, dm, 0, 4096, IBV_ACCESS_ZERO_BASED | ALL_REMOTE);
	CHECK(mr != NULL);
	/* The peer writes into device memory, addressed from 0. */
	memset(src, 0x19, LEN);
	CHECK(write_to(256, mr->rkey, 32).status == IBV_WC_SUCCESS);
	CHECK(ibv_memcpy_from_dm(back, dm, 256, 32) == 0 && back[0] == 0x19 && back[31] == 0x19);
	CHECK(ibv_free_dm(dm) == EBUSY); /* the region holds it */
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(ibv_free_dm(dm) == 0);
}

static void domains(void)
{
	struct ibv_td_init_attr tda = {.comp_mask = 1};
	errno = 0;
	CHECK(ibv_alloc_td(ctx, &tda) == NULL && errno == EINVAL);
	tda.comp_mask = 0;
	struct ibv_td *td = ibv_alloc_td(ctx, &tda);
	CHECK(td != NULL && td->context == ctx);
	struct ibv_parent_domain_init_attr pa = {.pd = pd, .td = td,
						 .comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS};
	CHECK(ibv_alloc_parent_domain(ctx, &pa) == NULL && errno == EINVAL); /* no functions */
	pa.comp_mask = 0;
	struct ibv_pd *parent = ibv_alloc_parent_domain(ctx, &pa);
	CHECK(parent != NULL && parent->context == ctx);
	pa.pd = parent;
	CHECK(ibv_alloc_parent_domain(ctx, &pa) == NULL && errno == EINVAL); /* not a PD */
	CHECK(ibv_dealloc_td(td) == EBUSY);
	CHECK(ibv_dealloc_pd(pd) == EBUSY);
	/* The parent domain stands for pd: a region made through it serves a QP of pd. */
	char *m = aligned_alloc(4096, LEN);
	CHECK(m != NULL);
	struct ibv_mr *mr = ibv_reg_mr(parent, m, LEN, ALL_REMOTE);
	CHECK(mr != NULL && mr->pd == parent);
	memset(src, 0x2D, LEN);
	CHECK(write_to((uintptr_t)m, mr->rkey, 128).status == IBV_WC_SUCCESS && m[127] == 0x2D);
	/* An extended CQ in the parent domain; a plain PD is no parent domain. */
	struct ibv_cq_init_attr_ex ca = {.cqe = 4, .wc_flags = IBV_WC_STANDARD_FLAGS,
					 .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD,
					 .parent_domain = pd};
	CHECK(ibv_create_cq_ex(ctx, &ca) == NULL && errno == EINVAL);
	ca.parent_domain = parent;
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &ca);
	CHECK(cq != NULL);
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0);
	CHECK(ibv_dereg_mr(mr) == 0);
	free(m);
	CHECK(ibv_dealloc_pd(parent) == 0);
	CHECK(ibv_dealloc_td(td) == 0);
}

static void timestamps(void)
{
	struct ibv_device_attr_ex ax;
	CHECK(ibv_query_device_ex(ctx, NULL, &ax) == 0);
	CHECK(ax.hca_core_clock == 1000000 && ax.completion_timestamp_mask == UINT64_MAX);
	struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
	struct timespec t0, t1, w0, w1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(ibv_query_rt_values_ex(ctx, &v) == 0 && v.comp_mask == IBV_VALUES_MASK_RAW_CLOCK);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	uint64_t raw = v.raw_clock.tv_sec * 1000000000ull + v.raw_clock.tv_nsec;
	CHECK(raw >= t0.tv_sec * 1000000000ull + t0.tv_nsec);
	CHECK(raw <= t1.tv_sec * 1000000000ull + t1.tv_nsec);

	struct ibv_cq_init_attr_ex ca = {
		.cqe = 16,
		.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
	};
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &ca);
	CHECK(cq != NULL);
	struct pair ab = pair_on(ibv_cq_ex_to_cq(cq), cq_b);
	struct ibv_qp *a = ab.a, *b = ab.b;
	char *m = aligned_alloc(4096, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, m, 4096, ALL_REMOTE);
	CHECK(m && mr);
	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = 64, .lkey = src_mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 5, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = (uintptr_t)m, .rkey = mr->rkey}}, *bad;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	clock_gettime(CLOCK_REALTIME, &w0);
	CHECK(ibv_post_send(a, &wr, &bad) == 0);
	struct ibv_poll_cq_attr pa = {0};
	double end = now() + 5;
	int r;
	while ((r = ibv_start_poll(cq, &pa)) == ENOENT)
		CHECK(now() < end);
	CHECK(r == 0 && cq->wr_id == 5 && cq->status == IBV_WC_SUCCESS);
	uint64_t ts = ibv_wc_read_completion_ts(cq), wall = ibv_wc_read_completion_wallclock_ns(cq);
	ibv_end_poll(cq);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	clock_gettime(CLOCK_REALTIME, &w1);
	CHECK(ts >= t0.tv_sec * 1000000000ull + t0.tv_nsec);
	CHECK(ts <= t1.tv_sec * 1000000000ull + t1.tv_nsec);
	CHECK(wall >= w0.tv_sec * 1000000000ull + w0.tv_nsec);
	CHECK(wall <= w1.tv_sec * 1000000000ull + w1.tv_nsec);
	CHECK(ibv_dereg_mr(mr) == 0);
	free(m);
	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0);
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0);
}

int main(void)
{
	struct ibv_device **list = loopback_open();
	struct pair p = new_pair();
	qp_a = p.a;
	qp_b = p.b;

	odp();
	rereg();
	rereg_pd_and_memory();
	device_memory();
	domains();
	timestamps();

	destroy_pair(p);
	loopback_close(list);
	return 0;
}
