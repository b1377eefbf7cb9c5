/*
 * The device shared within and across processes, through the shim (spec-notes/shared-device.md):
 *
 *  threads: four threads each open the device, allocate a PD and a CQ, make an RC QP and close
 *           it all again, ROUNDS times, while the main thread keeps its own context open; each
 *           round also moves one SEND between its QP and a QP on the main context, data checked
 *           (every SEND crosses the address's steering, laid out anew at each open and close).
 *           rxe runs the same program; before the address was shared, ibv_alloc_pd on a fresh
 *           context failed with EADDRINUSE.
 *  fork:    the parent has a context with a connected pair; a child forked from it finds that
 *           context closed (its calls fail, none hangs), opens the device anew and moves data
 *           on a pair of its own, and exits; the parent's pair still works after the child is
 *           gone (the child let go of the parent's socket, and closed nothing of the parent's).
 *
 *   shared ROUNDS
 */
#define CHECKS_ATOMIC
#include "common.h"

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

static struct ibv_device **list;

/* One RC end: PD, 4 KiB MR, CQ, QP in RESET. */
struct end {
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	char buf[4096];
};

static void end_open(struct end *e, struct ibv_context *c)
{
	struct ibv_qp_init_attr qa = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	e->pd = ibv_alloc_pd(c);
	CHECK(e->pd != NULL);
	e->mr = ibv_reg_mr(e->pd, e->buf, sizeof(e->buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(e->mr != NULL);
	e->cq = ibv_create_cq(c, 8, NULL, NULL, 0);
	CHECK(e->cq != NULL);
	qa.send_cq = qa.recv_cq = e->cq;
	e->qp = ibv_create_qp(e->pd, &qa);
	CHECK(e->qp != NULL);
}

static void end_close(struct end *e)
{
	CHECK(ibv_destroy_qp(e->qp) == 0);
	CHECK(ibv_destroy_cq(e->cq) == 0);
	CHECK(ibv_dereg_mr(e->mr) == 0);
	CHECK(ibv_dealloc_pd(e->pd) == 0);
}

/* Connects a and b to each other and SENDs `len` bytes of `seed`'s pattern from a to b. */
static void connect_and_send(struct end *a, struct end *b, unsigned seed)
{
	struct ibv_sge ss = { (uintptr_t)a->buf, 256, a->mr->lkey };
	struct ibv_sge rs = { (uintptr_t)b->buf, 256, b->mr->lkey };
	struct ibv_send_wr sw = { .wr_id = 1, .sg_list = &ss, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_recv_wr rw = { .wr_id = 2, .sg_list = &rs, .num_sge = 1 }, *brw;
	struct ibv_send_wr *bsw;
	struct ibv_wc wc;
	int i;

	rc_to_rts(a->qp, b->qp->qp_num, 0, 1);
	rc_to_rts(b->qp, a->qp->qp_num, 0, 1);
	for (i = 0; i < 256; i++)
		a->buf[i] = (char)(seed * 31 + i);
	memset(b->buf, 0, 256);
	CHECK(ibv_post_recv(b->qp, &rw, &brw) == 0);
	CHECK(ibv_post_send(a->qp, &sw, &bsw) == 0);
	wc = poll1(b->cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == 256);
	CHECK(memcmp(a->buf, b->buf, 256) == 0);
	wc = poll1(a->cq);
	CHECK(wc.status == IBV_WC_SUCCESS);
}

static int rounds;

static void *opener(void *arg)
{
	long t = (long)arg;
	int r;
	for (r = 0; r < rounds; r++) {
		struct ibv_context *c = ibv_open_device(list[0]);
		struct end mine, theirs;
		CHECK(c != NULL);
		end_open(&mine, c);
		end_open(&theirs, ctx);
		connect_and_send(&mine, &theirs, (unsigned)(t * 1000 + r));
		end_close(&mine);
		end_close(&theirs);
		CHECK(ibv_close_device(c) == 0);
	}
	return NULL;
}

static void threads(void)
{
	pthread_t th[4];
	long i;
	for (i = 0; i < 4; i++)
		CHECK(pthread_create(&th[i], NULL, opener, (void *)i) == 0);
	for (i = 0; i < 4; i++)
		CHECK(pthread_join(th[i], NULL) == 0);
}

static void forked(void)
{
	struct end a, b;
	pid_t child;
	int status;

	end_open(&a, ctx);
	end_open(&b, ctx);
	connect_and_send(&a, &b, 1);
	child = fork();
	CHECK(child >= 0);
	if (child == 0) {
		struct ibv_context *c;
		struct end x, y;
		/* The parent's context has no engine here: refused, not hung. */
		CHECK(ibv_alloc_pd(ctx) == NULL);
		c = ibv_open_device(list[0]);
		CHECK(c != NULL);
		end_open(&x, c);
		end_open(&y, c);
		connect_and_send(&x, &y, 2);
		end_close(&x);
		end_close(&y);
		CHECK(ibv_close_device(c) == 0);
		_exit(0);
	}
	CHECK(waitpid(child, &status, 0) == child);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* The parent's pair still carries SENDs. */
	{
		struct ibv_sge ss = { (uintptr_t)a.buf, 64, a.mr->lkey };
		struct ibv_sge rs = { (uintptr_t)b.buf, 64, b.mr->lkey };
		struct ibv_send_wr sw = { .wr_id = 3, .sg_list = &ss, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
		struct ibv_recv_wr rw = { .wr_id = 4, .sg_list = &rs, .num_sge = 1 }, *brw;
		struct ibv_send_wr *bsw;
		struct ibv_wc wc;
		memset(a.buf, 0x5a, 64);
		CHECK(ibv_post_recv(b.qp, &rw, &brw) == 0);
		CHECK(ibv_post_send(a.qp, &sw, &bsw) == 0);
		wc = poll1(b.cq);
		CHECK(wc.status == IBV_WC_SUCCESS && b.buf[63] == 0x5a);
		wc = poll1(a.cq);
		CHECK(wc.status == IBV_WC_SUCCESS);
	}
	end_close(&a);
	end_close(&b);
}

int main(int argc, char **argv)
{
	rounds = argc > 1 ? atoi(argv[1]) : 200;
	list = open_first_device();
	threads();
	forked();
	CHECK(ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);
	printf("ok %ld checks\n", (long)checks);
	return 0;
}
