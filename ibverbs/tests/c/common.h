/*
 * What the C tests under ibverbs/tests/c share: the CHECK macro and its count (the "ok
 * <checks>" line the Rust runner reads), the device they open with its GID, a monotonic clock,
 * the RC QP walk INIT -> RTR -> RTS towards a loopback peer, and a bounded wait for one
 * completion. Each test keeps its own checks; this only saves writing the scaffolding again.
 *
 * A test whose checks run on several threads defines CHECKS_ATOMIC before including this.
 * Functions are static inline so that a test which does not use one compiles with -Wall -Werror.
 */
#ifndef SOFTROCE_TESTS_C_COMMON_H
#define SOFTROCE_TESTS_C_COMMON_H

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef CHECKS_ATOMIC
#include <stdatomic.h>
static atomic_long checks;
#define COUNT_CHECK() atomic_fetch_add(&checks, 1)
#else
static long checks;
#define COUNT_CHECK() (checks++)
#endif

/* Counts the check; on failure names it (file, line, condition, errno) and exits 1. */
#define CHECK(cond)                                                                          \
	do {                                                                                 \
		COUNT_CHECK();                                                               \
		if (!(cond)) {                                                               \
			fprintf(stderr, "%s:%d: check failed: %s (errno %d %s)\n", __FILE__, \
				__LINE__, #cond, errno, strerror(errno));                    \
			exit(1);                                                             \
		}                                                                            \
	} while (0)

static struct ibv_context *ctx;
/* GID index 1 of port 1: the address both QPs of a loopback pair use. */
static union ibv_gid gid;

static inline double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Opens the first device into ctx and reads gid; returns the device list (the caller frees it). */
static inline struct ibv_device **open_first_device(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list && list[0]);
	ctx = ibv_open_device(list[0]);
	CHECK(ctx != NULL);
	CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0);
	return list;
}

/* Moves an RC QP to RTS towards QP `dest` at `dgid`, with `access` as its remote access and
 * `rd_atomic` reads/atomics in flight either way. */
static inline void rc_to_rts_at(struct ibv_qp *qp, uint32_t dest, union ibv_gid dgid,
				unsigned int access, uint8_t rd_atomic)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = access,
	};
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					IBV_QP_ACCESS_FLAGS) == 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = rd_atomic;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = dgid;
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
	a.max_rd_atomic = rd_atomic;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0);
}

/* rc_to_rts_at towards the opened device's own GID (a loopback pair). */
static inline void rc_to_rts(struct ibv_qp *qp, uint32_t dest, unsigned int access,
			     uint8_t rd_atomic)
{
	rc_to_rts_at(qp, dest, gid, access, rd_atomic);
}

/* An RC QP on `pd` with `cq` for both queues (16 WRs, one SGE each way). */
static inline struct ibv_qp *create_rc_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp != NULL);
	return qp;
}

/* One completion of a plain CQ (the wait bounded by 5 s). */
static inline struct ibv_wc poll1(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	double end = now() + 5;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		CHECK(now() < end);
	CHECK(n == 1);
	return wc;
}

#endif
