/* A listener's backlog under the shim counts the connect requests the application has not
 * read, as the kernel's ucma does: a request read but not answered leaves room for the next,
 * and a request that finds the backlog full is dropped without a REJ (the kernel's CM: "do not
 * reject to allow future retries"), so that its requester's retransmitted REQ gets in once the
 * application reads. One process on loopback (SOFTROCE_BIND): a listener with backlog 1 and
 * four clients. Prints "ok N" or the first failure; exits 0 only if every check passed. */
#include "rdmacm_common.h"

/* A client on `ch` that has sent its REQ to `dst`. */
static struct rdma_cm_id *connect_to(struct rdma_event_channel *ch, struct sockaddr_in *dst,
				     struct ibv_pd **pd)
{
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create_id");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)dst, 1000) == 0, "resolve_addr");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(rdma_resolve_route(id, 1000) == 0, "resolve_route");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	if (!*pd)
		*pd = ibv_alloc_pd(id->verbs);
	CHECK(*pd != NULL, "alloc_pd");
	struct ibv_qp_init_attr qa;
	memset(&qa, 0, sizeof qa);
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.qp_type = IBV_QPT_RC;
	CHECK(rdma_create_qp(id, *pd, &qa) == 0, "create_qp");
	CHECK(rdma_connect(id, NULL) == 0, "connect");
	return id;
}

/* Reads the next connect request on `ch` (within `ms`) and returns its identifier. */
static struct rdma_cm_id *read_request(struct rdma_event_channel *ch, int ms)
{
	struct rdma_cm_event *ev = expect_within(ch, RDMA_CM_EVENT_CONNECT_REQUEST, ms);
	struct rdma_cm_id *child = ev->id;
	rdma_ack_cm_event(ev);
	return child;
}

int main(int argc, char **argv)
{
	const char *ip = argc > 1 ? argv[1] : "127.0.0.1";
	struct rdma_event_channel *server = rdma_create_event_channel();
	struct rdma_event_channel *clients = rdma_create_event_channel();
	CHECK(server && clients, "create_event_channel");
	struct rdma_cm_id *listener;
	CHECK(rdma_create_id(server, &listener, NULL, RDMA_PS_TCP) == 0, "create_id");
	struct sockaddr_in here = sin_of(ip, 7391);
	CHECK(rdma_bind_addr(listener, (struct sockaddr *)&here) == 0, "bind");
	CHECK(rdma_listen(listener, 1) == 0, "listen");
	struct ibv_pd *pd = NULL;

	/* A's request, read and left unanswered, does not hold the one place: B's gets in. */
	struct rdma_cm_id *a = connect_to(clients, &here, &pd);
	struct rdma_cm_id *ca = read_request(server, 5000);
	struct rdma_cm_id *b = connect_to(clients, &here, &pd);
	struct rdma_cm_id *cb = read_request(server, 5000);

	/* C's request is queued unread: D's finds the backlog full and is dropped, not
	 * rejected (the clients hear nothing). */
	struct rdma_cm_id *c = connect_to(clients, &here, &pd);
	CHECK(pending(server, 5000), "C's request queued");
	struct rdma_cm_id *d = connect_to(clients, &here, &pd);
	CHECK(!pending(clients, 1500), "no answer to D's REQ (nor to anyone)");
	/* Once C's is read, D's retransmitted REQ (about 4.8 s after the first) gets in. */
	struct rdma_cm_id *cc = read_request(server, 5000);
	struct rdma_cm_id *cd = read_request(server, 10000);

	/* Every request still waits for its answer: each rejection reaches its client. */
	struct rdma_cm_id *reqs[] = { ca, cb, cc, cd };
	for (int i = 0; i < 4; i++)
		CHECK(rdma_reject(reqs[i], NULL, 0) == 0, "reject %d", i);
	for (int i = 0; i < 4; i++) {
		struct rdma_cm_event *ev = expect(clients, RDMA_CM_EVENT_REJECTED);
		CHECK(ev->status == 28, "consumer reject, status %d", ev->status);
		rdma_ack_cm_event(ev);
	}
	struct rdma_cm_id *ids[] = { a, b, c, d };
	for (int i = 0; i < 4; i++) {
		rdma_destroy_qp(ids[i]);
		CHECK(rdma_destroy_id(ids[i]) == 0 && rdma_destroy_id(reqs[i]) == 0, "destroy %d", i);
	}
	CHECK(rdma_destroy_id(listener) == 0, "destroy listener");
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
	rdma_destroy_event_channel(clients);
	rdma_destroy_event_channel(server);
	printf("ok %d\n", checks);
	return 0;
}
