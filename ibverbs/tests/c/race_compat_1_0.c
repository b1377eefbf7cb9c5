/*
 * The IBVERBS_1.0 compatibility layer with many threads (issue #34, race 1): 1.0 calls racing
 * the destroy of the 1.0 objects they use, and the 1.0 event path racing ibv_destroy_cq@1.0.
 * Each function is looked up at its version with dlvsym, the 1.0 objects declared in their
 * own layouts (rdma-core 44's compat-1_0.c), as in compat_1_0.c.
 *
 * A destroying thread makes, round after round, a 1.0 PD, MR, CQ (on a completion channel, its
 * cq_context the round's tag) and RC QP, hands them out, makes one completion on the CQ (a
 * receive flushed by the error state, through the 1.0 context's ops) and destroys them all,
 * retrying each destroy while it is EBUSY. Using threads meanwhile resize the CQ, query the
 * QP and register and deregister MRs on the PD: every call succeeds, or fails with EINVAL
 * once its object is destroyed; a destroy fails only with EBUSY while a call or another 1.0
 * object holds the object. A waiting thread takes the events with ibv_get_cq_event@1.0 and
 * acknowledges them with ibv_ack_cq_events@1.0; as in race_cq_events.c the rounds force a
 * destroy that must wait for the acknowledgement (0), one after it (1), and one racing the
 * event (2): the event's CQ is never one whose destroy returned, and ibv_get_cq_event fails
 * only with EAGAIN. Bounded in rounds and time (argv[1] seconds). Prints "ok <checks>
 * <outcome counts>" and exits 0, or names the failed check and exits 1.
 */
#define _GNU_SOURCE
#define CHECKS_ATOMIC
#include "common.h"
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

/* verbs.h turns these into its own inline versions; here they name the 1.0 functions. */
#undef ibv_reg_mr

struct dev10 {
	void *obsolete[2];
	struct ibv_device *real_device;
	void *ops[2];
};
struct cq10;
struct qp10;
struct rwr10;
struct ops10 {
	void *control[7];
	int (*poll_cq)(struct cq10 *, int, struct ibv_wc *);
	int (*req_notify_cq)(struct cq10 *, int);
	void *cq[7];
	void *post_srq_recv;
	void *qp[4];
	void *post_send;
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
	void *srq;
	uint32_t handle, qp_num;
	enum ibv_qp_state state;
	enum ibv_qp_type qp_type;
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	uint32_t events_completed;
	struct ibv_qp *real_qp;
};
struct qp_init10 {
	void *qp_context;
	struct cq10 *send_cq, *recv_cq;
	void *srq;
	struct ibv_qp_cap cap;
	enum ibv_qp_type qp_type;
	int sq_sig_all;
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
	CHECK(f != NULL);
	return f;
}

static struct dev10 **(*get_device_list10)(int *);
static void (*free_device_list10)(struct dev10 **);
static struct ctx10 *(*open_device10)(struct dev10 *);
static int (*close_device10)(struct ctx10 *);
static struct pd10 *(*alloc_pd10)(struct ctx10 *);
static int (*dealloc_pd10)(struct pd10 *);
static struct mr10 *(*reg_mr10)(struct pd10 *, void *, size_t, int);
static int (*dereg_mr10)(struct mr10 *);
static struct cq10 *(*create_cq10)(struct ctx10 *, int, void *, struct ibv_comp_channel *, int);
static int (*resize_cq10)(struct cq10 *, int);
static int (*destroy_cq10)(struct cq10 *);
static int (*get_cq_event10)(struct ibv_comp_channel *, struct cq10 **, void **);
static void (*ack_cq_events10)(struct cq10 *, unsigned int);
static struct qp10 *(*create_qp10)(struct pd10 *, struct qp_init10 *);
static int (*query_qp10)(struct qp10 *, struct ibv_qp_attr *, int, struct qp_init10 *);
static int (*modify_qp10)(struct qp10 *, struct ibv_qp_attr *, int);
static int (*destroy_qp10)(struct qp10 *);

static struct ctx10 *ctx10;
static struct ibv_comp_channel *chan;
static atomic_int done;

/* The round's objects, which the users take; NULL between rounds. */
static pthread_mutex_t cur_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pd10 *cur_pd;
static struct cq10 *cur_cq;
static struct qp10 *cur_qp;

/* As in race_cq_events.c: the last tag whose CQ's destroy returned, the last whose destroy
 * was called, the tag of the event the waiter holds unacknowledged, the last it acked. */
static atomic_long destroyed_tag, destroying_tag, holding_tag, acked_tag;

/* Outcomes, printed; those that show the races ran are asserted. */
static atomic_long uses_ok, uses_stale, destroy_busy, destroy_waited, acked_first, raced_got,
	raced_dropped, empty_wakeups;

static void *waiter(void *arg)
{
	(void)arg;
	unsigned seed = 7;
	while (!atomic_load(&done)) {
		struct pollfd pfd = {.fd = chan->fd, .events = POLLIN};
		int r = poll(&pfd, 1, 5);
		CHECK(r >= 0 || errno == EINTR);
		if (r <= 0)
			continue;
		struct cq10 *cq = NULL;
		void *cq_ctx = NULL;
		errno = 0;
		if (get_cq_event10(chan, &cq, &cq_ctx) != 0) {
			CHECK(errno == EAGAIN);
			atomic_fetch_add(&empty_wakeups, 1);
			continue;
		}
		long tag = (long)(uintptr_t)cq_ctx;
		CHECK(cq != NULL && cq->cq_context == cq_ctx && tag > 0);
		CHECK(atomic_load(&destroyed_tag) < tag);
		atomic_store(&holding_tag, tag);
		if (tag % 3 == 0) {
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
		ack_cq_events10(cq, 1);
		CHECK(errno != EINVAL);
		atomic_store(&acked_tag, tag);
	}
	return NULL;
}

/* A call on an object another thread may have destroyed: 0, or EINVAL (errno too). */
static void used(int r)
{
	if (r == 0) {
		atomic_fetch_add(&uses_ok, 1);
	} else {
		CHECK(r == EINVAL && errno == EINVAL);
		atomic_fetch_add(&uses_stale, 1);
	}
}

static void *user(void *arg)
{
	static char buf[2][4096];
	char *mine = buf[(intptr_t)arg];
	unsigned seed = 11 + (unsigned)(intptr_t)arg;
	while (!atomic_load(&done)) {
		pthread_mutex_lock(&cur_lock);
		struct pd10 *pd = cur_pd;
		struct cq10 *cq = cur_cq;
		struct qp10 *qp = cur_qp;
		pthread_mutex_unlock(&cur_lock);
		if (!pd) {
			sched_yield();
			continue;
		}
		errno = 0;
		used(resize_cq10(cq, 16));
		struct ibv_qp_attr a;
		struct qp_init10 init;
		errno = 0;
		int r = query_qp10(qp, &a, IBV_QP_STATE, &init);
		used(r);
		if (r == 0)
			CHECK(init.send_cq == init.recv_cq && init.qp_type == IBV_QPT_RC);
		errno = 0;
		struct mr10 *mr = reg_mr10(pd, mine, 4096, IBV_ACCESS_LOCAL_WRITE);
		used(mr ? 0 : errno);
		if (mr) {
			errno = 0;
			CHECK(dereg_mr10(mr) == 0);
		}
		/* A pause, in which the destroys may find the objects unused. */
		usleep(rand_r(&seed) % 50);
	}
	return NULL;
}

/* Destroys with `destroy` until it succeeds: EBUSY (errno too) while something holds it. */
#define DESTROY_UNTIL_DONE(call)                                                    \
	do {                                                                        \
		double until_ = now() + 10;                                         \
		for (;;) {                                                          \
			errno = 0;                                                  \
			int r_ = (call);                                            \
			if (r_ == 0)                                                \
				break;                                              \
			CHECK(r_ == EBUSY && errno == EBUSY);                       \
			atomic_fetch_add(&destroy_busy, 1);                         \
			if (now() > until_)                                         \
				CHECK(!"the users let go within 10 s");             \
			sched_yield();                                              \
		}                                                                   \
	} while (0)

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
	lib = dlopen("libibverbs.so.1", RTLD_NOW);
	CHECK(lib != NULL);
	get_device_list10 = v10("ibv_get_device_list");
	free_device_list10 = v10("ibv_free_device_list");
	open_device10 = v10("ibv_open_device");
	close_device10 = v10("ibv_close_device");
	alloc_pd10 = v10("ibv_alloc_pd");
	dealloc_pd10 = v10("ibv_dealloc_pd");
	reg_mr10 = v10("ibv_reg_mr");
	dereg_mr10 = v10("ibv_dereg_mr");
	create_cq10 = v10("ibv_create_cq");
	resize_cq10 = v10("ibv_resize_cq");
	destroy_cq10 = v10("ibv_destroy_cq");
	get_cq_event10 = v10("ibv_get_cq_event");
	ack_cq_events10 = v10("ibv_ack_cq_events");
	create_qp10 = v10("ibv_create_qp");
	query_qp10 = v10("ibv_query_qp");
	modify_qp10 = v10("ibv_modify_qp");
	destroy_qp10 = v10("ibv_destroy_qp");

	struct dev10 **list = get_device_list10(NULL);
	CHECK(list != NULL && list[0] != NULL);
	ctx10 = open_device10(list[0]);
	CHECK(ctx10 != NULL);
	chan = ibv_create_comp_channel(ctx10->real_context);
	CHECK(chan != NULL);
	CHECK(fcntl(chan->fd, F_SETFL, fcntl(chan->fd, F_GETFL) | O_NONBLOCK) == 0);
	pthread_t w, u[2];
	CHECK(pthread_create(&w, NULL, waiter, NULL) == 0);
	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&u[i], NULL, user, (void *)(intptr_t)i) == 0);

	static char rbuf[4096];
	long rounds = 0;
	for (long tag = 1; tag <= 3000 && (tag <= 30 || now() < deadline); tag++, rounds++) {
		int mode = tag % 3;
		struct pd10 *pd = alloc_pd10(ctx10);
		CHECK(pd != NULL && pd->context == ctx10);
		struct mr10 *mr = reg_mr10(pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
		CHECK(mr != NULL && mr->pd == pd);
		struct cq10 *cq = create_cq10(ctx10, 8, (void *)(uintptr_t)tag, chan, 0);
		CHECK(cq != NULL && cq->context == ctx10);
		struct qp_init10 ia = {
			.send_cq = cq,
			.recv_cq = cq,
			.cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1,
				.max_recv_sge = 1},
			.qp_type = IBV_QPT_RC,
		};
		struct qp10 *qp = create_qp10(pd, &ia);
		CHECK(qp != NULL && qp->send_cq == cq && qp->pd == pd);
		pthread_mutex_lock(&cur_lock);
		cur_pd = pd;
		cur_cq = cq;
		cur_qp = qp;
		pthread_mutex_unlock(&cur_lock);

		/* One completion, and its event. */
		struct ibv_qp_attr qa = {.qp_state = IBV_QPS_INIT, .port_num = 1};
		CHECK(modify_qp10(qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					       IBV_QP_ACCESS_FLAGS) == 0);
		CHECK(qp->state == IBV_QPS_INIT);
		struct ibv_sge sge = {(uintptr_t)rbuf, 64, mr->lkey};
		struct rwr10 rwr = {.wr_id = tag, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
		CHECK(ctx10->ops.req_notify_cq(cq, 0) == 0);
		CHECK(ctx10->ops.post_recv(qp, &rwr, &bad) == 0);
		qa.qp_state = IBV_QPS_ERR;
		CHECK(modify_qp10(qp, &qa, IBV_QP_STATE) == 0);
		if (mode == 0)
			wait_for_tag(&holding_tag, tag);
		else if (mode == 1)
			wait_for_tag(&acked_tag, tag);

		/* Destroyed while the users still use them. The CQ is held by the QP until it goes;
		 * the PD by the QP and MRs. */
		errno = 0;
		CHECK(destroy_cq10(cq) == EBUSY && errno == EBUSY);
		DESTROY_UNTIL_DONE(destroy_qp10(qp));
		int held = atomic_load(&holding_tag) == tag;
		atomic_store(&destroying_tag, tag);
		DESTROY_UNTIL_DONE(destroy_cq10(cq));
		CHECK(atomic_load(&holding_tag) != tag);
		atomic_store(&destroyed_tag, tag);
		errno = 0;
		CHECK(destroy_cq10(cq) == EINVAL && errno == EINVAL);
		CHECK(dereg_mr10(mr) == 0);
		DESTROY_UNTIL_DONE(dealloc_pd10(pd));
		pthread_mutex_lock(&cur_lock);
		cur_pd = NULL;
		cur_cq = NULL;
		cur_qp = NULL;
		pthread_mutex_unlock(&cur_lock);
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
	for (int i = 0; i < 2; i++)
		CHECK(pthread_join(u[i], NULL) == 0);
	CHECK(pthread_join(w, NULL) == 0);
	/* The races ran: destroys refused while a call held the object, calls that found their
	 * object destroyed or held it through the destroy, destroys that waited for an ack. */
	CHECK(atomic_load(&destroy_busy) > 0 && atomic_load(&uses_ok) > 0);
	CHECK(atomic_load(&destroy_waited) >= 10 && atomic_load(&acked_first) >= 10);
	CHECK(ibv_destroy_comp_channel(chan) == 0);
	CHECK(close_device10(ctx10) == 0);
	free_device_list10(list);
	printf("ok %ld checks; %ld rounds: calls ok %ld, on a destroyed object %ld; destroys "
	       "refused while in use %ld; destroy waited for the ack %ld, after the ack %ld, "
	       "racing get_cq_event: event got %ld, dropped with the CQ %ld; empty wake-ups %ld\n",
	       atomic_load(&checks), rounds, atomic_load(&uses_ok), atomic_load(&uses_stale),
	       atomic_load(&destroy_busy), atomic_load(&destroy_waited),
	       atomic_load(&acked_first), atomic_load(&raced_got), atomic_load(&raced_dropped),
	       atomic_load(&empty_wakeups));
	return 0;
}
