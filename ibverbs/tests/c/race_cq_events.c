/*
 * ibv_get_cq_event and ibv_ack_cq_events racing ibv_destroy_cq (issue #34, race 2), checked
 * against rdma-core's contract (ibv_get_cq_event(3): "destroying a CQ will wait for all
 * completion events to be acknowledged"; libibverbs' ibv_cmd_destroy_cq waits until
 * comp_events_completed reaches the kernel's count of events read):
 *
 *  - ibv_get_cq_event never returns a CQ that ibv_destroy_cq has already reported destroyed,
 *  - ibv_destroy_cq does not return while an event it returned is unacknowledged,
 *  - acknowledging a CQ that ibv_get_cq_event returned always succeeds (no EINVAL),
 *  - ibv_get_cq_event fails only with EAGAIN (the channel's fd is non-blocking).
 *
 * A destroying thread creates a CQ on the channel (its cq_context a tag unique to the round:
 * addresses are reused, tags are not) with a QP, arms it, makes one completion (a receive
 * flushed by moving the QP to the error state) and destroys QP and CQ, in three ways by
 * round: (0) once the waiter holds the event unacknowledged, which it then acknowledges only
 * a millisecond after the destroy was called, so the destroy must wait for it; (1) once the
 * waiter has acknowledged it; (2) at once, racing the
 * waiter's ibv_get_cq_event, which then gets the event (and the destroy waits) or does not
 * (the event dropped with the CQ). Each round is bounded, and so is the run (argv[1] seconds).
 * Prints "ok <checks> <outcome counts>" and exits 0, or names the failed check and exits 1.
 */
#define _GNU_SOURCE
#define CHECKS_ATOMIC
#include "common.h"
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

static struct ibv_comp_channel *chan;
static struct ibv_pd *pd;
static char buf[4096];
static struct ibv_mr *mr;

/* Each round's tag is its CQ's cq_context. The last tag whose ibv_destroy_cq returned, the
 * last whose ibv_destroy_cq was called, the tag the waiter holds an unacknowledged event of
 * (0: none), and the last it acknowledged. */
static atomic_long destroyed_tag, destroying_tag, holding_tag, acked_tag;
static atomic_int done;

/* Outcomes, printed; the forced ones are asserted. */
static atomic_long destroy_waited, acked_first, raced_got, raced_dropped, spurious_wakeups;

static void *waiter(void *arg)
{
	(void)arg;
	unsigned seed = 1;
	while (!atomic_load(&done)) {
		struct pollfd pfd = {.fd = chan->fd, .events = POLLIN};
		int r = poll(&pfd, 1, 5);
		CHECK(r >= 0 || errno == EINTR);
		if (r <= 0)
			continue;
		struct ibv_cq *cq = NULL;
		void *cq_ctx = NULL;
		errno = 0;
		if (ibv_get_cq_event(chan, &cq, &cq_ctx) != 0) {
			CHECK(errno == EAGAIN);
			atomic_fetch_add(&spurious_wakeups, 1);
			continue;
		}
		long tag = (long)(uintptr_t)cq_ctx;
		CHECK(cq != NULL && cq->cq_context == cq_ctx && tag > 0);
		/* Not a CQ whose destroy already returned. */
		CHECK(atomic_load(&destroyed_tag) < tag);
		atomic_store(&holding_tag, tag);
		if (tag % 3 == 0) {
			/* Round mode 0: hold the event until its CQ's destroy has been called, and
			 * then a millisecond, in which that destroy must not return. */
			double end = now() + 10;
			while (atomic_load(&destroying_tag) < tag) {
				if (now() > end)
					CHECK(!"the destroy of the CQ whose event is held was called");
				sched_yield();
			}
			usleep(1000);
		} else {
			usleep(rand_r(&seed) % 300);
		}
		CHECK(atomic_load(&destroyed_tag) < tag);
		atomic_store(&holding_tag, 0);
		/* Refused, it would set errno EINVAL (a success may leave another value:
		 * a futex wait of a lock sets EAGAIN). */
		errno = 0;
		ibv_ack_cq_events(cq, 1);
		CHECK(errno != EINVAL);
		atomic_store(&acked_tag, tag);
	}
	return NULL;
}

static struct ibv_qp *new_qp(struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
	};
	return ibv_create_qp(pd, &ia);
}

/* Waits (bounded: 10 s) until *v == want. */
static void wait_for_tag(atomic_long *v, long want)
{
	double end = now() + 10;
	while (atomic_load(v) != want) {
		if (now() > end)
			CHECK(!"the waiter got the round's event within 10 s");
		sched_yield();
	}
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3;
	double deadline = now() + seconds;
	struct ibv_device **list = open_first_device();
	pd = ibv_alloc_pd(ctx);
	chan = ibv_create_comp_channel(ctx);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(pd && chan && mr);
	CHECK(fcntl(chan->fd, F_SETFL, fcntl(chan->fd, F_GETFL) | O_NONBLOCK) == 0);
	pthread_t w;
	CHECK(pthread_create(&w, NULL, waiter, NULL) == 0);

	long rounds = 0;
	for (long tag = 1; tag <= 3000 && (tag <= 30 || now() < deadline); tag++, rounds++) {
		int mode = tag % 3;
		struct ibv_cq *cq = ibv_create_cq(ctx, 8, (void *)(uintptr_t)tag, chan, 0);
		CHECK(cq != NULL);
		struct ibv_qp *qp = new_qp(cq);
		CHECK(qp != NULL);
		CHECK(ibv_req_notify_cq(cq, 0) == 0);
		struct ibv_qp_attr qa = {.qp_state = IBV_QPS_INIT, .port_num = 1};
		CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						 IBV_QP_ACCESS_FLAGS) == 0);
		struct ibv_sge sge = {(uintptr_t)buf, 64, mr->lkey};
		struct ibv_recv_wr rwr = {.wr_id = tag, .sg_list = &sge, .num_sge = 1}, *bad;
		CHECK(ibv_post_recv(qp, &rwr, &bad) == 0);
		qa.qp_state = IBV_QPS_ERR;
		CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE) == 0);
		if (mode == 0)
			wait_for_tag(&holding_tag, tag);
		else if (mode == 1)
			wait_for_tag(&acked_tag, tag);
		CHECK(ibv_destroy_qp(qp) == 0);
		int held = atomic_load(&holding_tag) == tag;
		atomic_store(&destroying_tag, tag);
		errno = 0;
		CHECK(ibv_destroy_cq(cq) == 0);
		/* Returned: no event of this CQ may be held unacknowledged any more. */
		CHECK(atomic_load(&holding_tag) != tag);
		atomic_store(&destroyed_tag, tag);
		if (mode == 0) {
			CHECK(held);
			atomic_fetch_add(&destroy_waited, 1);
		} else if (mode == 1) {
			atomic_fetch_add(&acked_first, 1);
		} else if (held || atomic_load(&acked_tag) == tag) {
			atomic_fetch_add(&raced_got, 1);
		} else {
			atomic_fetch_add(&raced_dropped, 1);
		}
	}
	atomic_store(&done, 1);
	CHECK(pthread_join(w, NULL) == 0);
	/* The forced interleavings ran: destroys that had to wait for an acknowledgement, and
	 * destroys after one. */
	CHECK(atomic_load(&destroy_waited) >= 10 && atomic_load(&acked_first) >= 10);
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_destroy_comp_channel(chan) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0 && ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);
	printf("ok %ld checks; %ld rounds: destroy waited for the ack %ld, after the ack %ld, "
	       "racing get_cq_event: event got %ld, dropped with the CQ %ld; empty wake-ups %ld\n",
	       atomic_load(&checks), rounds, atomic_load(&destroy_waited),
	       atomic_load(&acked_first), atomic_load(&raced_got), atomic_load(&raced_dropped),
	       atomic_load(&spurious_wakeups));
	return 0;
}
