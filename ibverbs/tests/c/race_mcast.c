/*
 * ibv_attach_mcast racing ibv_destroy_qp (issue #34, race 3), checked against the kernel's
 * answer (uverbs_free_qp refuses to destroy a QP with multicast attachments: EBUSY; its
 * exclusive lock orders a destroy and an attach): a QP is never destroyed while attached.
 *
 * Attaching threads, each with a multicast group of its own, attach the current UD QP to their
 * group and, when that succeeded, detach it: since the destroy is refused while the QP is
 * attached, the detach must then succeed (a destroy slipped in between would make it fail
 * with EINVAL). An attach that fails finds the QP destroyed: EINVAL. A destroying thread
 * creates the UD QPs one after the other, hands each out and destroys it while the attachers
 * attach and detach it (they pause between), retrying while it is EBUSY (attached, or held
 * by a call in progress). Bounded in rounds and
 * in time (argv[1] seconds). Prints "ok <checks> <outcome counts>" and exits 0, or names the
 * failed check and exits 1.
 */
#define _GNU_SOURCE
#define CHECKS_ATOMIC
#include "common.h"
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#define ATTACHERS 3

static struct ibv_pd *pd;
static struct ibv_cq *cq;
static pthread_mutex_t cur_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_qp *cur; /* the QP the attachers use; may be destroyed under them */
static atomic_int done;

/* Outcomes, printed; those that show the race ran are asserted. */
static atomic_long attached, attach_gone, destroy_busy, destroyed;

static void *attacher(void *arg)
{
	int me = (int)(intptr_t)arg;
	unsigned seed = me;
	/* ::ffff:230.0.34.<me>: an IPv4-mapped multicast GID of this thread's own. */
	union ibv_gid mg = {.raw = {[10] = 0xff, [11] = 0xff, [12] = 230, [13] = 0, [14] = 34,
				    [15] = (uint8_t)(1 + me)}};
	while (!atomic_load(&done)) {
		pthread_mutex_lock(&cur_lock);
		struct ibv_qp *qp = cur;
		pthread_mutex_unlock(&cur_lock);
		if (!qp) {
			sched_yield();
			continue;
		}
		errno = 0;
		int r = ibv_attach_mcast(qp, &mg, 0);
		if (r != 0) {
			/* Destroyed before the attach took it. */
			CHECK(r == EINVAL && errno == EINVAL);
			atomic_fetch_add(&attach_gone, 1);
			sched_yield();
			continue;
		}
		atomic_fetch_add(&attached, 1);
		sched_yield();
		/* Attached, so not destroyed: the detach finds it, attached. */
		errno = 0;
		r = ibv_detach_mcast(qp, &mg, 0);
		CHECK(r == 0);
		/* A pause, in which the QP may be detached from every group. */
		usleep(rand_r(&seed) % 100);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3;
	double deadline = now() + seconds;
	struct ibv_device **list = open_first_device();
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(pd && cq);
	pthread_t t[ATTACHERS];
	for (int i = 0; i < ATTACHERS; i++)
		CHECK(pthread_create(&t[i], NULL, attacher, (void *)(intptr_t)i) == 0);

	long rounds = 0;
	for (; rounds < 20000 && (rounds < 50 || now() < deadline); rounds++) {
		struct ibv_qp_init_attr ia = {
			.send_cq = cq,
			.recv_cq = cq,
			.cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1,
				.max_recv_sge = 1},
			.qp_type = IBV_QPT_UD,
		};
		struct ibv_qp *qp = ibv_create_qp(pd, &ia);
		CHECK(qp != NULL);
		pthread_mutex_lock(&cur_lock);
		cur = qp;
		pthread_mutex_unlock(&cur_lock);
		for (int i = 0; i < (int)(rounds % 4); i++)
			sched_yield();
		/* Destroyed while the attachers still attach it: between their attachments. */
		double until = now() + 10;
		for (;;) {
			errno = 0;
			int r = ibv_destroy_qp(qp);
			if (r == 0)
				break;
			CHECK(r == EBUSY && errno == EBUSY);
			atomic_fetch_add(&destroy_busy, 1);
			if (now() > until)
				CHECK(!"a moment with the QP not attached within 10 s");
			sched_yield();
		}
		atomic_fetch_add(&destroyed, 1);
		pthread_mutex_lock(&cur_lock);
		cur = NULL;
		pthread_mutex_unlock(&cur_lock);
	}
	atomic_store(&done, 1);
	for (int i = 0; i < ATTACHERS; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	/* The race ran: attaches that held the destroy off. (An attach that comes after the
	 * destroy mostly finds the next QP at the same address, so it is counted, not asserted.) */
	CHECK(atomic_load(&attached) > 0 && atomic_load(&destroy_busy) > 0);
	CHECK(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0 && ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);
	printf("ok %ld checks; %ld QPs destroyed: attach then detach %ld, attach of a destroyed QP "
	       "%ld, destroy refused (attached or in use) %ld\n",
	       atomic_load(&checks), atomic_load(&destroyed), atomic_load(&attached),
	       atomic_load(&attach_gone), atomic_load(&destroy_busy));
	return 0;
}
