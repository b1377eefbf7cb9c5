/*
 * Many threads racing the create/use/destroy of the shim's objects on one device, each call
 * checked against what rdma-core (over the kernel) answers: success, or the errno it gives
 * (EBUSY for destroying an object in use, EINVAL for a handle already destroyed). Every loop is
 * bounded in iterations and by a deadline. At the end every object is destroyed and each
 * destroy must succeed (nothing left in use), and the counts of creations and destructions of
 * each kind must match. Prints "ok <checks> <figures...>" and exits 0, or names the first
 * failed check and exits 1.
 *
 * Usage: stress [seconds] (the deadline of the racing phase; default 10).
 */
#define _GNU_SOURCE
#define CHECKS_ATOMIC
#include "common.h"
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

/* libibverbs' provider log (IBVERBS_PRIVATE_34), which libefa calls: must return, not abort. */
void __verbs_log(struct verbs_context *ctx, uint32_t level, const char *fmt, ...);

/* The racing phase ends at the first of: each thread's iteration bound, this deadline. */
static double deadline;
static atomic_int stop;

static int running(void)
{
	if (atomic_load(&stop))
		return 0;
	if (now() > deadline) {
		atomic_store(&stop, 1);
		return 0;
	}
	return 1;
}

/* Creations and successful destructions per kind, compared at the end. */
enum { PD, MR, CQ, QP, CHAN, CTX, KINDS };
static const char *kind_name[KINDS] = {"pd", "mr", "cq", "qp", "channel", "context"};
static atomic_long created[KINDS], destroyed[KINDS];
/* How often each refusal was seen (figures, not asserted: they depend on the schedule). */
static atomic_long busy_seen, stale_seen, events_seen, completions_seen;


/* A destroy that may meet the object in use: EBUSY (errno EBUSY too) until the user lets go. */
#define DESTROY_UNTIL_DONE(call, kind)                                       \
	do {                                                                 \
		for (long tries_ = 0;; tries_++) {                           \
			errno = 0;                                           \
			int r_ = (call);                                     \
			if (r_ == 0) {                                       \
				atomic_fetch_add(&destroyed[kind], 1);       \
				break;                                       \
			}                                                    \
			CHECK(r_ == EBUSY && errno == EBUSY);                \
			atomic_fetch_add(&busy_seen, 1);                     \
			CHECK(tries_ < 10000000); /* users always let go */ \
			sched_yield();                                       \
		}                                                            \
	} while (0)

static void to_rts(struct ibv_qp *qp, uint32_t dest)
{
	rc_to_rts(qp, dest, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 1);
}

static struct ibv_qp *new_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = scq,
		.recv_cq = rcq,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
	};
	return ibv_create_qp(pd, &ia);
}

/* ---------------------------------------------------------------------------------------- */
/* 1. ibv_reg_mr on PDs that another thread deallocates. */

static pthread_mutex_t pd_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_pd *cur_pd; /* the PD the registering threads use; may be deallocated */

static void *pd_churn(void *arg)
{
	(void)arg;
	for (int i = 0; i < 20000 && running(); i++) {
		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		CHECK(pd != NULL);
		atomic_fetch_add(&created[PD], 1);
		pthread_mutex_lock(&pd_lock);
		cur_pd = pd;
		pthread_mutex_unlock(&pd_lock);
		sched_yield();
		/* EBUSY while MRs or a registration in progress use it; never freed under them. */
		DESTROY_UNTIL_DONE(ibv_dealloc_pd(pd), PD);
	}
	return NULL;
}

static void *mr_user(void *arg)
{
	char *buf = arg;
	for (int i = 0; i < 200000 && running(); i++) {
		pthread_mutex_lock(&pd_lock);
		struct ibv_pd *pd = cur_pd;
		pthread_mutex_unlock(&pd_lock);
		if (!pd)
			continue;
		errno = 0;
		struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
		if (!mr) {
			/* The PD was deallocated before the call took it. */
			CHECK(errno == EINVAL);
			atomic_fetch_add(&stale_seen, 1);
			continue;
		}
		atomic_fetch_add(&created[MR], 1);
		CHECK(mr->pd == pd && mr->addr == buf && mr->length == 4096);
		/* While the MR lives its PD cannot be deallocated: the churn thread spins on EBUSY. */
		errno = 0;
		CHECK(ibv_dereg_mr(mr) == 0);
		atomic_fetch_add(&destroyed[MR], 1);
	}
	return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* 2. ibv_create_qp on CQs that another thread destroys, and a shared PD and CQ that QPs of
 *    every thread use, which must stay EBUSY throughout. */

static struct ibv_pd *shared_pd;
static struct ibv_cq *shared_cq;
static pthread_mutex_t cq_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_cq *cur_cq;

static void *cq_churn(void *arg)
{
	(void)arg;
	for (int i = 0; i < 20000 && running(); i++) {
		struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		CHECK(cq != NULL);
		atomic_fetch_add(&created[CQ], 1);
		pthread_mutex_lock(&cq_lock);
		cur_cq = cq;
		pthread_mutex_unlock(&cq_lock);
		sched_yield();
		DESTROY_UNTIL_DONE(ibv_destroy_cq(cq), CQ);
		/* The shared objects are in use by the persistent pair: always EBUSY. */
		errno = 0;
		CHECK(ibv_destroy_cq(shared_cq) == EBUSY && errno == EBUSY);
		errno = 0;
		CHECK(ibv_dealloc_pd(shared_pd) == EBUSY && errno == EBUSY);
	}
	return NULL;
}

static void *qp_user(void *arg)
{
	(void)arg;
	for (int i = 0; i < 200000 && running(); i++) {
		pthread_mutex_lock(&cq_lock);
		struct ibv_cq *cq = cur_cq;
		pthread_mutex_unlock(&cq_lock);
		if (!cq)
			continue;
		errno = 0;
		struct ibv_qp *qp = new_qp(shared_pd, cq, shared_cq);
		if (!qp) {
			CHECK(errno == EINVAL); /* the CQ was destroyed first */
			atomic_fetch_add(&stale_seen, 1);
			continue;
		}
		atomic_fetch_add(&created[QP], 1);
		CHECK(qp->send_cq == cq && qp->recv_cq == shared_cq && qp->state == IBV_QPS_RESET);
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr ia;
		CHECK(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) == 0 && a.qp_state == IBV_QPS_RESET);
		CHECK(ibv_destroy_qp(qp) == 0);
		atomic_fetch_add(&destroyed[QP], 1);
	}
	return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* 3. Traffic on a persistent connected pair (post and poll) while the threads above create and
 *    destroy QPs on the same PD and CQ, and another thread queries and re-modifies the pair. */

static struct ibv_qp *p1, *p2;
static struct ibv_mr *traffic_mr;
static char traffic_buf[2 * 4096];

/* Polls one completion off `cq`; 0 if none came within 20 s (the engine shares two cores
 * with a dozen busy threads here). */
static int poll_until(struct ibv_cq *cq, struct ibv_wc *wc)
{
	double until = now() + 20;
	for (int i = 0;; i++) {
		int n = ibv_poll_cq(cq, 1, wc);
		CHECK(n >= 0);
		if (n == 1)
			return 1;
		if (i % 100 == 99) {
			if (now() > until)
				return 0;
			usleep(50);
		}
	}
}

static void *traffic(void *arg)
{
	(void)arg;
	struct ibv_sge rs = {(uintptr_t)traffic_buf + 4096, 64, traffic_mr->lkey};
	struct ibv_sge ss = {(uintptr_t)traffic_buf, 64, traffic_mr->lkey};
	for (uint64_t i = 1; i <= 100000 && running(); i++) {
		struct ibv_recv_wr rwr = {.wr_id = i, .sg_list = &rs, .num_sge = 1}, *bad_r;
		struct ibv_send_wr swr = {.wr_id = i,
					  .sg_list = &ss,
					  .num_sge = 1,
					  .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED},
				   *bad_s;
		memcpy(traffic_buf, &i, sizeof(i));
		CHECK(ibv_post_recv(p2, &rwr, &bad_r) == 0);
		CHECK(ibv_post_send(p1, &swr, &bad_s) == 0);
		/* p1 sends on its own CQ and receives on the shared one; p2 the other way round. */
		struct ibv_wc wc;
		CHECK(poll_until(p1->send_cq, &wc));
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == i && wc.opcode == IBV_WC_SEND);
		CHECK(poll_until(p2->recv_cq, &wc));
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == i && wc.opcode == IBV_WC_RECV);
		uint64_t got;
		memcpy(&got, traffic_buf + 4096, sizeof(got));
		CHECK(got == i && wc.byte_len == 64);
		atomic_fetch_add(&completions_seen, 1);
	}
	return NULL;
}

static void *querier(void *arg)
{
	(void)arg;
	for (int i = 0; i < 200000 && running(); i++) {
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr ia;
		CHECK(ibv_query_qp(p1, &a, IBV_QP_STATE, &ia) == 0);
		CHECK(a.qp_state == IBV_QPS_RTS && ia.send_cq == p1->send_cq);
		CHECK(p1->state == IBV_QPS_RTS);
		/* A no-op modify (RTS -> RTS) racing the other queries: rewrites `state` under the
		 * QP's mutex. */
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTS;
		CHECK(ibv_modify_qp(p1, &a, IBV_QP_STATE) == 0);
		/* A refused one: EINVAL, and errno says so. */
		a.qp_state = IBV_QPS_RTR;
		errno = 0;
		CHECK(ibv_modify_qp(p1, &a, IBV_QP_STATE) == EINVAL && errno == EINVAL);
		sched_yield();
	}
	return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* 4. ibv_get_cq_event on a channel whose CQs another thread creates, fires and destroys. */

static struct ibv_comp_channel *chan;
static atomic_int events_done;
static int tag_a, tag_b;

static void *event_waiter(void *arg)
{
	(void)arg;
	while (!atomic_load(&events_done)) {
		struct pollfd pfd = {.fd = chan->fd, .events = POLLIN};
		int r = poll(&pfd, 1, 10);
		CHECK(r >= 0 || errno == EINTR);
		if (r <= 0)
			continue;
		struct ibv_cq *cq = NULL;
		void *cq_ctx = NULL;
		errno = 0;
		if (ibv_get_cq_event(chan, &cq, &cq_ctx) == 0) {
			CHECK(cq != NULL && (cq_ctx == &tag_a || cq_ctx == &tag_b));
			/* The CQ's destroy waits for this acknowledgement (rdma-core's does): so
			 * the CQ is still there, and the ack succeeds. Refused, it would set errno
			 * EINVAL (a success may leave another value: a futex wait sets EAGAIN). */
			errno = 0;
			ibv_ack_cq_events(cq, 1);
			CHECK(errno != EINVAL);
			atomic_fetch_add(&events_seen, 1);
		} else {
			/* The event's CQ was destroyed: its count is skipped and the fd is empty. */
			CHECK(errno == EAGAIN);
		}
	}
	return NULL;
}

static void *event_churn(void *arg)
{
	(void)arg;
	for (int i = 0; i < 5000 && running(); i++) {
		struct ibv_cq *cq = ibv_create_cq(ctx, 16, i % 2 ? &tag_a : &tag_b, chan, 0);
		CHECK(cq != NULL && cq->channel == chan);
		atomic_fetch_add(&created[CQ], 1);
		struct ibv_qp *a = new_qp(shared_pd, cq, cq);
		CHECK(a != NULL);
		atomic_fetch_add(&created[QP], 1);
		struct ibv_qp *b = NULL;
		CHECK(ibv_req_notify_cq(cq, 0) == 0);
		struct ibv_sge rs = {(uintptr_t)traffic_buf + 4096 + 128, 64, traffic_mr->lkey};
		struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *bad_r;
		struct ibv_wc wc;
		/* Four ways round: a receive flushed (no network) and polled, or left pending when
		 * the CQ is destroyed; a loopback transfer polled, or destroyed in flight. Each is the
		 * first work of a QP just created, which the engine once lost when it raced the
		 * engine's pass. */
		int mode = i % 4;
		if (mode < 2) {
			/* A completion without the network: a receive flushed by moving the QP to the
			 * error state (IBV_WC_WR_FLUSH_ERR), which fires the channel. */
			struct ibv_qp_attr qa = {.qp_state = IBV_QPS_INIT, .port_num = 1};
			CHECK(ibv_modify_qp(a, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
							 IBV_QP_ACCESS_FLAGS) == 0);
			CHECK(ibv_post_recv(a, &rwr, &bad_r) == 0);
			qa.qp_state = IBV_QPS_ERR;
			CHECK(ibv_modify_qp(a, &qa, IBV_QP_STATE) == 0);
			if (mode == 0) {
				CHECK(poll_until(cq, &wc));
				CHECK(wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 1);
			}
		} else {
			/* A loopback transfer between two QPs of the CQ. */
			b = new_qp(shared_pd, cq, cq);
			CHECK(b != NULL);
			atomic_fetch_add(&created[QP], 1);
			to_rts(a, b->qp_num);
			to_rts(b, a->qp_num);
			struct ibv_sge ss = {(uintptr_t)traffic_buf + 128, 64, traffic_mr->lkey};
			struct ibv_send_wr swr = {.wr_id = 2,
						  .sg_list = &ss,
						  .num_sge = 1,
						  .opcode = IBV_WR_SEND,
						  .send_flags = IBV_SEND_SIGNALED},
					   *bad_s;
			CHECK(ibv_post_recv(b, &rwr, &bad_r) == 0);
			CHECK(ibv_post_send(a, &swr, &bad_s) == 0);
			if (mode == 2)
				CHECK(poll_until(cq, &wc) && poll_until(cq, &wc));
		}
		DESTROY_UNTIL_DONE(ibv_destroy_qp(a), QP);
		if (b)
			DESTROY_UNTIL_DONE(ibv_destroy_qp(b), QP);
		/* Waits while the waiter holds an event of it unacknowledged. */
		DESTROY_UNTIL_DONE(ibv_destroy_cq(cq), CQ);
	}
	return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* 5. Contexts opened and closed while they still have objects, and channels created and
 *    destroyed, on other threads than the objects' users. */

static void *ctx_churn(void *arg)
{
	struct ibv_device *dev = arg;
	for (int i = 0; i < 2000 && running(); i++) {
		struct ibv_context *c = ibv_open_device(dev);
		CHECK(c != NULL);
		atomic_fetch_add(&created[CTX], 1);
		struct ibv_pd *pd = ibv_alloc_pd(c);
		CHECK(pd != NULL && pd->context == c);
		atomic_fetch_add(&created[PD], 1);
		struct ibv_comp_channel *ch = ibv_create_comp_channel(c);
		CHECK(ch != NULL);
		atomic_fetch_add(&created[CHAN], 1);
		struct ibv_cq *cq = ibv_create_cq(c, 4, NULL, ch, 0);
		CHECK(cq != NULL);
		atomic_fetch_add(&created[CQ], 1);
		errno = 0;
		CHECK(ibv_destroy_comp_channel(ch) == EBUSY && errno == EBUSY && ch->refcnt == 1);
		/* Closing does not need the objects gone; they stay destroyable afterwards. */
		CHECK(ibv_close_device(c) == 0);
		atomic_fetch_add(&destroyed[CTX], 1);
		errno = 0;
		CHECK(ibv_close_device(c) == -1 && errno == EINVAL);
		DESTROY_UNTIL_DONE(ibv_destroy_cq(cq), CQ);
		DESTROY_UNTIL_DONE(ibv_destroy_comp_channel(ch), CHAN);
		DESTROY_UNTIL_DONE(ibv_dealloc_pd(pd), PD);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10;
	deadline = now() + seconds;
	struct ibv_device **list = open_first_device();
	atomic_fetch_add(&created[CTX], 1);
	__verbs_log(NULL, 0, "provider message %d\n", 1);

	shared_pd = ibv_alloc_pd(ctx);
	shared_cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	struct ibv_cq *p1_send = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	chan = ibv_create_comp_channel(ctx);
	CHECK(shared_pd && shared_cq && p1_send && chan);
	atomic_fetch_add(&created[PD], 1);
	atomic_fetch_add(&created[CQ], 2);
	atomic_fetch_add(&created[CHAN], 1);
	int fl = fcntl(chan->fd, F_GETFL);
	CHECK(fcntl(chan->fd, F_SETFL, fl | O_NONBLOCK) == 0);
	traffic_mr = ibv_reg_mr(shared_pd, traffic_buf, sizeof(traffic_buf),
				IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(traffic_mr != NULL);
	atomic_fetch_add(&created[MR], 1);
	p1 = new_qp(shared_pd, p1_send, shared_cq);
	p2 = new_qp(shared_pd, shared_cq, shared_cq);
	CHECK(p1 && p2);
	atomic_fetch_add(&created[QP], 2);
	to_rts(p1, p2->qp_num);
	to_rts(p2, p1->qp_num);

	static char mr_bufs[2][4096];
	pthread_t t[11];
	int n = 0;
	CHECK(pthread_create(&t[n++], NULL, pd_churn, NULL) == 0);
	CHECK(pthread_create(&t[n++], NULL, mr_user, mr_bufs[0]) == 0);
	CHECK(pthread_create(&t[n++], NULL, mr_user, mr_bufs[1]) == 0);
	CHECK(pthread_create(&t[n++], NULL, cq_churn, NULL) == 0);
	CHECK(pthread_create(&t[n++], NULL, qp_user, NULL) == 0);
	CHECK(pthread_create(&t[n++], NULL, qp_user, NULL) == 0);
	CHECK(pthread_create(&t[n++], NULL, traffic, NULL) == 0);
	CHECK(pthread_create(&t[n++], NULL, querier, NULL) == 0);
	CHECK(pthread_create(&t[n++], NULL, event_churn, NULL) == 0);
	CHECK(pthread_create(&t[n++], NULL, ctx_churn, list[0]) == 0);
	pthread_t waiter;
	CHECK(pthread_create(&waiter, NULL, event_waiter, NULL) == 0);
	for (int i = 0; i < n; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	atomic_store(&events_done, 1);
	CHECK(pthread_join(waiter, NULL) == 0);

	/* Every thread made progress: the races above were run, not skipped. */
	CHECK(atomic_load(&completions_seen) > 0);
	CHECK(atomic_load(&destroyed[MR]) > 0 && atomic_load(&destroyed[PD]) > 0);
	CHECK(atomic_load(&destroyed[QP]) > 0 && atomic_load(&destroyed[CTX]) > 0);
	CHECK(atomic_load(&events_seen) > 0);

	/* Tear down: nothing is left in use, so each destroy succeeds the first time. */
	CHECK(ibv_destroy_qp(p1) == 0 && ibv_destroy_qp(p2) == 0);
	atomic_fetch_add(&destroyed[QP], 2);
	CHECK(ibv_dereg_mr(traffic_mr) == 0);
	atomic_fetch_add(&destroyed[MR], 1);
	CHECK(ibv_destroy_cq(p1_send) == 0 && ibv_destroy_cq(shared_cq) == 0);
	atomic_fetch_add(&destroyed[CQ], 2);
	CHECK(ibv_destroy_comp_channel(chan) == 0);
	atomic_fetch_add(&destroyed[CHAN], 1);
	CHECK(ibv_dealloc_pd(shared_pd) == 0);
	atomic_fetch_add(&destroyed[PD], 1);
	CHECK(ibv_close_device(ctx) == 0);
	atomic_fetch_add(&destroyed[CTX], 1);
	ibv_free_device_list(list);
	for (int k = 0; k < KINDS; k++) {
		if (atomic_load(&created[k]) != atomic_load(&destroyed[k]))
			fprintf(stderr, "%s: %ld created, %ld destroyed\n", kind_name[k],
				atomic_load(&created[k]), atomic_load(&destroyed[k]));
		CHECK(atomic_load(&created[k]) == atomic_load(&destroyed[k]));
	}
	printf("ok %ld checks; pd %ld mr %ld cq %ld qp %ld ctx %ld; ebusy %ld stale %ld events %ld "
	       "sends %ld\n",
	       atomic_load(&checks), atomic_load(&created[PD]), atomic_load(&created[MR]),
	       atomic_load(&created[CQ]), atomic_load(&created[QP]), atomic_load(&created[CTX]),
	       atomic_load(&busy_seen), atomic_load(&stale_seen), atomic_load(&events_seen),
	       atomic_load(&completions_seen));
	return 0;
}
