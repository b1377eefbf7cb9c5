/* What the single-process librdmacm C tests share: a check that prints the first failure on
 * stdout and exits 1, addresses, and waiting for an event on a channel's pollable fd. */
#ifndef SOFTROCE_TESTS_C_RDMACM_COMMON_H
#define SOFTROCE_TESTS_C_RDMACM_COMMON_H

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

static int checks;

#define CHECK(cond, ...)                                                        \
	do {                                                                    \
		checks++;                                                       \
		if (!(cond)) {                                                  \
			printf("FAIL line %d: ", __LINE__);                     \
			printf(__VA_ARGS__);                                    \
			printf(" (errno %d %s)\n", errno, strerror(errno));     \
			exit(1);                                                \
		}                                                               \
	} while (0)

static inline struct sockaddr_in sin_of(const char *ip, int port)
{
	struct sockaddr_in s;
	memset(&s, 0, sizeof s);
	s.sin_family = AF_INET;
	s.sin_port = htons(port);
	inet_pton(AF_INET, ip, &s.sin_addr);
	return s;
}

/* Whether `ch` has an event queued within `ms` (nothing is read). */
static inline int pending(struct rdma_event_channel *ch, int ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	return poll(&p, 1, ms) == 1;
}

/* The next event on `ch`, which must be `type`, waiting at most `ms` on the fd. */
static inline struct rdma_cm_event *expect_within(struct rdma_event_channel *ch, int type, int ms)
{
	CHECK(pending(ch, ms), "no event in %d ms (want %s)", ms, rdma_event_str(type));
	struct rdma_cm_event *ev;
	CHECK(rdma_get_cm_event(ch, &ev) == 0, "get_cm_event");
	CHECK(ev->event == type, "event %s, want %s (status %d)", rdma_event_str(ev->event),
	      rdma_event_str(type), ev->status);
	return ev;
}

/* The next event on `ch`, which must be `type` (waiting at most 5 s). */
static inline struct rdma_cm_event *expect(struct rdma_event_channel *ch, int type)
{
	return expect_within(ch, type, 5000);
}

#endif
