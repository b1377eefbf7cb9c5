/*
 * The fixture of the C tests that run traffic between RC QPs of this one process over
 * loopback (beyond_rxe.c, unmapped.c): the first device opened, a PD, two CQs, the initiator's
 * LEN-byte buffer registered for local write, and connected pairs of RC QPs on them that grant
 * every remote right. Include after defining _GNU_SOURCE, as common.h.
 */
#ifndef SOFTROCE_TEST_LOOPBACK_H
#define SOFTROCE_TEST_LOOPBACK_H

#include <stdint.h>
#include "common.h"

enum { LEN = 65536, ALL_REMOTE = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC };

static struct ibv_pd *pd;
/* The initiator's CQ (a) and the target's (b). */
static struct ibv_cq *cq_a, *cq_b;
/* The initiator's buffer (a plain region: LOCAL_WRITE). */
static char *src;
static struct ibv_mr *src_mr;

/* Two RC QPs of this process connected to each other: a initiates, b is the target. */
struct pair {
	struct ibv_qp *a, *b;
};

/* An RC QP on pd with `cq` for both queues (create_rc_qp). */
static inline struct ibv_qp *rc_qp(struct ibv_cq *cq)
{
	return create_rc_qp(pd, cq);
}

/* A fresh pair at RTS: a on `ca`, b on `cb`. */
static inline struct pair pair_on(struct ibv_cq *ca, struct ibv_cq *cb)
{
	struct pair p = {rc_qp(ca), rc_qp(cb)};
	rc_to_rts(p.a, p.b->qp_num, ALL_REMOTE, 4);
	rc_to_rts(p.b, p.a->qp_num, ALL_REMOTE, 4);
	return p;
}

/* A fresh pair at RTS: a on cq_a, b on cq_b. */
static inline struct pair new_pair(void)
{
	return pair_on(cq_a, cq_b);
}

/* Empties both CQs: what a pair in error flushed is none of the next case's business. */
static inline void drain_cqs(void)
{
	struct ibv_wc wc;
	while (ibv_poll_cq(cq_a, 1, &wc) > 0)
		;
	while (ibv_poll_cq(cq_b, 1, &wc) > 0)
		;
}

static inline void destroy_pair(struct pair p)
{
	CHECK(ibv_destroy_qp(p.a) == 0);
	CHECK(ibv_destroy_qp(p.b) == 0);
	drain_cqs();
}

/* Opens the first device and makes pd, cq_a, cq_b, src and src_mr; returns the device list,
 * for loopback_close. */
static inline struct ibv_device **loopback_open(void)
{
	struct ibv_device **list = open_first_device();
	pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL);
	cq_a = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	cq_b = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(cq_a && cq_b);
	src = aligned_alloc(4096, LEN);
	CHECK(src != NULL);
	src_mr = ibv_reg_mr(pd, src, LEN, IBV_ACCESS_LOCAL_WRITE);
	CHECK(src_mr != NULL);
	return list;
}

/* Undoes loopback_open (every pair destroyed first) and prints "ok <checks>". */
static inline void loopback_close(struct ibv_device **list)
{
	CHECK(ibv_dereg_mr(src_mr) == 0);
	CHECK(ibv_destroy_cq(cq_a) == 0 && ibv_destroy_cq(cq_b) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);
	free(src);
	printf("ok %ld\n", checks);
}

#endif
