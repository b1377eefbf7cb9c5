/*
 * For valgrind's memcheck (ibverbs/tests/stress.rs runs it so): ibv_resize_cq@IBVERBS_1.0 and
 * ibv_ack_cq_events@IBVERBS_1.0 on a 1.0 CQ that another thread creates and destroys round
 * after round. A 1.0 call that found its CQ live must keep it allocated until it returns
 * (issue #34: the 1.0 layer once checked its registry, let the lock go and read and wrote
 * the object, which a destroy meanwhile had freed: memcheck's "Invalid read/write ... free'd").
 * The calls succeed or fail with EINVAL; the destroys succeed or fail with EBUSY. Prints
 * "ok <checks> <outcome counts>" and exits 0, or names the failed check and exits 1.
 */
#define _GNU_SOURCE
#define CHECKS_ATOMIC
#include "common.h"
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

struct ctx10;
struct cq10;
static int (*resize_cq10)(struct cq10 *, int);
static void (*ack_cq_events10)(struct cq10 *, unsigned int);
static _Atomic(struct cq10 *) cur;
static atomic_int done;
static atomic_long calls_ok, calls_stale, destroy_busy;

static void *user(void *arg)
{
	(void)arg;
	while (!atomic_load(&done)) {
		struct cq10 *cq = atomic_load(&cur);
		if (!cq) {
			sched_yield();
			continue;
		}
		errno = 0;
		int r = resize_cq10(cq, 16);
		if (r == 0) {
			atomic_fetch_add(&calls_ok, 1);
		} else {
			CHECK(r == EINVAL && errno == EINVAL);
			atomic_fetch_add(&calls_stale, 1);
		}
		ack_cq_events10(cq, 0); /* acknowledges nothing, but reads and writes the CQ */
		/* Work of its own, outside the library: a destroy can find the CQ unused. */
		for (volatile int k = 0; k < 2000; k++)
			;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 300;
	void *lib = dlopen("libibverbs.so.1", RTLD_NOW);
	CHECK(lib != NULL);
	void **(*get_device_list10)(int *) = dlvsym(lib, "ibv_get_device_list", "IBVERBS_1.0");
	void (*free_device_list10)(void **) = dlvsym(lib, "ibv_free_device_list", "IBVERBS_1.0");
	struct ctx10 *(*open_device10)(void *) = dlvsym(lib, "ibv_open_device", "IBVERBS_1.0");
	int (*close_device10)(struct ctx10 *) = dlvsym(lib, "ibv_close_device", "IBVERBS_1.0");
	struct cq10 *(*create_cq10)(struct ctx10 *, int, void *, void *, int) =
		dlvsym(lib, "ibv_create_cq", "IBVERBS_1.0");
	int (*destroy_cq10)(struct cq10 *) = dlvsym(lib, "ibv_destroy_cq", "IBVERBS_1.0");
	resize_cq10 = dlvsym(lib, "ibv_resize_cq", "IBVERBS_1.0");
	ack_cq_events10 = dlvsym(lib, "ibv_ack_cq_events", "IBVERBS_1.0");
	CHECK(get_device_list10 && free_device_list10 && open_device10 && close_device10 &&
	      create_cq10 && destroy_cq10 && resize_cq10 && ack_cq_events10);
	void **list = get_device_list10(NULL);
	CHECK(list && list[0]);
	struct ctx10 *c = open_device10(list[0]);
	CHECK(c != NULL);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, user, NULL) == 0);
	for (int i = 0; i < rounds; i++) {
		struct cq10 *cq = create_cq10(c, 8, NULL, NULL, 0);
		CHECK(cq != NULL);
		atomic_store(&cur, cq);
		usleep(100);
		double until = now() + 60;
		for (;;) {
			errno = 0;
			int r = destroy_cq10(cq);
			if (r == 0)
				break;
			CHECK(r == EBUSY && errno == EBUSY);
			atomic_fetch_add(&destroy_busy, 1);
			if (now() > until)
				CHECK(!"the user let go within 60 s");
			/* Seldom a yield: under valgrind the destroy then mostly runs when the user
			 * thread's time slice ends, anywhere in its calls. */
			if (atomic_load(&destroy_busy) % 64 == 0)
				sched_yield();
		}
	}
	atomic_store(&cur, NULL);
	atomic_store(&done, 1);
	CHECK(pthread_join(t, NULL) == 0);
	CHECK(atomic_load(&calls_ok) > 0 && atomic_load(&destroy_busy) > 0);
	CHECK(close_device10(c) == 0);
	free_device_list10(list);
	printf("ok %ld checks; %d CQs: calls ok %ld, on a destroyed CQ %ld; destroys refused "
	       "while in use %ld\n",
	       atomic_load(&checks), rounds, atomic_load(&calls_ok), atomic_load(&calls_stale),
	       atomic_load(&destroy_busy));
	return 0;
}
