/* librdmacm under the shim: the error paths of the exported functions and their errno values,
 * the event channel's pollable fd, options, migrate_id, notify and the refused families
 * (multicast, rsockets), all in one process on loopback: a listener and a client id connect
 * to each other through the device (SOFTROCE_BIND). Prints "ok N" (N checks) or the first
 * failure, and exits 0 only if every check passed. Compiled against Debian's librdmacm-dev
 * headers and linked with -lrdmacm -libverbs, as any program. */
#include <fcntl.h>
#include <rdma/rsocket.h>

#include "rdmacm_common.h"

/* A call that must fail with -1 and errno `e`. */
#define FAILS(call, e)                                                          \
	do {                                                                    \
		errno = 0;                                                      \
		int r_ = (call);                                                \
		CHECK(r_ == -1 && errno == (e), "%s gave %d, want -1/%d", #call, r_, (e)); \
	} while (0)

int main(int argc, char **argv)
{
	const char *ip = argc > 1 ? argv[1] : "127.0.0.1";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch && ch->fd >= 0, "create_event_channel");

	/* Bad handles and arguments. */
	struct rdma_cm_id *id = NULL;
	FAILS(rdma_create_id(ch, NULL, NULL, RDMA_PS_TCP), EINVAL);
	FAILS(rdma_create_id(ch, &id, NULL, 0x4242), EINVAL);
	FAILS(rdma_ack_cm_event((struct rdma_cm_event *)&checks), EINVAL);
	FAILS(rdma_ack_cm_event(NULL), EINVAL);
	FAILS(rdma_get_cm_event(ch, NULL), EINVAL);
	FAILS(rdma_destroy_id((struct rdma_cm_id *)&checks), EINVAL);
	CHECK(strcmp(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT), "RDMA_CM_EVENT_TIMEWAIT_EXIT") == 0,
	      "event_str");
	CHECK(strcmp(rdma_event_str(99), "UNKNOWN EVENT") == 0, "event_str unknown");

	/* A non-blocking channel with nothing queued: EAGAIN. */
	int fl = fcntl(ch->fd, F_GETFL);
	CHECK(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "fcntl");
	struct rdma_cm_event *ev;
	FAILS(rdma_get_cm_event(ch, &ev), EAGAIN);
	CHECK(fcntl(ch->fd, F_SETFL, fl) == 0, "fcntl");

	/* Binding: another address of this host is ENODEV, one of no interface EADDRNOTAVAIL,
	 * a second bind EINVAL, a port in use EADDRINUSE (REUSEADDR allows it). */
	struct rdma_cm_id *listener;
	CHECK(rdma_create_id(ch, &listener, (void *)0x1234, RDMA_PS_TCP) == 0, "create_id");
	struct sockaddr_in other = sin_of(strcmp(ip, "127.0.0.1") ? "127.0.0.1" : "127.0.0.2", 7390);
	FAILS(rdma_bind_addr(listener, (struct sockaddr *)&other), ENODEV);
	struct sockaddr_in none = sin_of("192.0.2.1", 7390);
	FAILS(rdma_bind_addr(listener, (struct sockaddr *)&none), EADDRNOTAVAIL);
	struct sockaddr_in here = sin_of(ip, 7390);
	CHECK(rdma_bind_addr(listener, (struct sockaddr *)&here) == 0, "bind");
	CHECK(listener->verbs != NULL && listener->port_num == 1, "bound to the device");
	CHECK(ntohs(rdma_get_src_port(listener)) == 7390, "src port");
	FAILS(rdma_bind_addr(listener, (struct sockaddr *)&here), EINVAL);
	struct rdma_cm_id *twin;
	CHECK(rdma_create_id(ch, &twin, NULL, RDMA_PS_TCP) == 0, "create_id");
	FAILS(rdma_bind_addr(twin, (struct sockaddr *)&here), EADDRINUSE);

	/* Options. */
	uint8_t tos = 32;
	CHECK(rdma_set_option(twin, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1) == 0, "tos");
	FAILS(rdma_set_option(twin, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 4), EINVAL);
	int one = 1;
	CHECK(rdma_set_option(twin, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof one) == 0,
	      "afonly");
	FAILS(rdma_set_option(twin, RDMA_OPTION_ID, 77, &one, sizeof one), ENOSYS);
	FAILS(rdma_set_option(twin, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &one, sizeof one), ENOSYS);
	CHECK(rdma_destroy_id(twin) == 0, "destroy twin");

	/* Calls out of order: EINVAL. */
	struct rdma_cm_id *client;
	CHECK(rdma_create_id(ch, &client, (void *)0x5678, RDMA_PS_TCP) == 0, "create_id");
	FAILS(rdma_resolve_route(client, 1000), EINVAL);
	FAILS(rdma_connect(client, NULL), EINVAL);
	FAILS(rdma_accept(client, NULL), EINVAL);
	FAILS(rdma_disconnect(client), EINVAL);
	FAILS(rdma_establish(client), EINVAL);
	FAILS(rdma_notify(client, IBV_EVENT_COMM_EST), EINVAL);
	FAILS(rdma_get_request(client, &id), EINVAL); /* not a synchronous listener */
	FAILS(rdma_create_qp(client, NULL, NULL), EINVAL);

	/* Multicast out of order: not on the device (EINVAL), a group not joined
	 * (EADDRNOTAVAIL), attributes librdmacm refuses (EINVAL, ENOTSUP). */
	struct sockaddr_in mc = sin_of("239.1.1.1", 0);
	FAILS(rdma_join_multicast(client, (struct sockaddr *)&mc, NULL), EINVAL);
	FAILS(rdma_leave_multicast(client, (struct sockaddr *)&mc), EADDRNOTAVAIL);
	struct rdma_cm_join_mc_attr_ex mca = {
		.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS, .addr = (struct sockaddr *)&mc};
	FAILS(rdma_join_multicast_ex(client, &mca, NULL), EINVAL);
	mca.comp_mask |= RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	mca.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER + 1;
	FAILS(rdma_join_multicast_ex(client, &mca, NULL), EINVAL);
	mca.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
	mca.comp_mask = 1 << 2;
	FAILS(rdma_join_multicast_ex(client, &mca, NULL), ENOTSUP);

	/* A datagram rsocket of a protocol not UDP's (the datagram ones run in rsocket_dgram.c). */
	FAILS(rsocket(AF_INET, SOCK_DGRAM, IPPROTO_TCP), ENOTSUP);
	/* rsockets' own checks (tests/rsockets.rs runs the stream ones end to end). */
	FAILS(rsocket(AF_UNIX, SOCK_STREAM, 0), ENOTSUP);
	FAILS(rclose(-1), EBADF);
	struct rdma_cm_id *ud;
	CHECK(rdma_create_id(ch, &ud, NULL, RDMA_PS_UDP) == 0, "create_id udp");
	CHECK(ud->qp_type == IBV_QPT_UD, "udp id is UD");
	/* UDP identifiers listen for SIDR_REQs; IPoIB's port space is not RoCE's. */
	CHECK(rdma_listen(ud, 1) == 0, "listen udp");
	CHECK(rdma_destroy_id(ud) == 0, "destroy ud");
	struct rdma_cm_id *ipoib;
	CHECK(rdma_create_id(ch, &ipoib, NULL, RDMA_PS_IPOIB) == 0, "create_id ipoib");
	FAILS(rdma_listen(ipoib, 1), ENOSYS);
	CHECK(rdma_destroy_id(ipoib) == 0, "destroy ipoib");

	/* An identifier destroyed with an event still queued: the event goes with it (the
	 * kernel's ucma_cleanup_ctx_events), the channel has nothing for the application. */
	struct rdma_cm_id *gone;
	CHECK(rdma_create_id(ch, &gone, (void *)0x9abc, RDMA_PS_TCP) == 0, "create_id gone");
	struct sockaddr_in gone_dst = sin_of(ip, 7391);
	CHECK(rdma_resolve_addr(gone, NULL, (struct sockaddr *)&gone_dst, 1000) == 0,
	      "resolve_addr gone");
	struct pollfd gp = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&gp, 1, 5000) == 1, "ADDR_RESOLVED queued");
	CHECK(rdma_destroy_id(gone) == 0, "destroy gone");
	CHECK(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "fcntl");
	FAILS(rdma_get_cm_event(ch, &ev), EAGAIN);
	CHECK(fcntl(ch->fd, F_SETFL, fl) == 0, "fcntl");

	/* Listen, then connect to ourselves through the device. */
	CHECK(rdma_listen(listener, 4) == 0, "listen");
	struct sockaddr_in dst = sin_of(ip, 7390);
	CHECK(rdma_resolve_addr(client, NULL, (struct sockaddr *)&dst, 1000) == 0, "resolve_addr");
	ev = expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(ev->id == client && ev->status == 0, "addr event id");
	CHECK(rdma_ack_cm_event(ev) == 0, "ack");
	FAILS(rdma_ack_cm_event(ev), EINVAL); /* twice */
	CHECK(client->verbs && ntohs(rdma_get_dst_port(client)) == 7390, "dst port");
	CHECK(rdma_resolve_route(client, 1000) == 0, "resolve_route");
	ev = expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	CHECK(client->route.num_paths == 1 && client->route.path_rec, "path record");
	rdma_ack_cm_event(ev);

	struct ibv_pd *pd = ibv_alloc_pd(client->verbs);
	CHECK(pd != NULL, "alloc_pd");
	struct ibv_qp_init_attr qa;
	memset(&qa, 0, sizeof qa);
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.qp_type = IBV_QPT_RC;
	CHECK(rdma_create_qp(client, pd, &qa) == 0, "create_qp (library CQs)");
	CHECK(client->qp && client->qp->state == IBV_QPS_INIT && client->send_cq && client->recv_cq_channel,
	      "QP in INIT with CQs");
	FAILS(rdma_create_qp(client, pd, &qa), EINVAL); /* a second QP */

	char big[100];
	memset(big, 7, sizeof big);
	struct rdma_conn_param cp;
	memset(&cp, 0, sizeof cp);
	cp.private_data = big;
	cp.private_data_len = 57; /* the REQ carries 56 after rdma_cm's header */
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	FAILS(rdma_connect(client, &cp), EINVAL);
	cp.private_data_len = 56;
	cp.responder_resources = 200; /* more than the device's */
	FAILS(rdma_connect(client, &cp), EINVAL);
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	CHECK(rdma_connect(client, &cp) == 0, "connect");

	ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *child = ev->id;
	CHECK(ev->listen_id == listener && child->context == (void *)0x1234, "request ids");
	CHECK(ev->param.conn.private_data_len >= 56 &&
	      memcmp(ev->param.conn.private_data, big, 56) == 0, "request private data");
	CHECK(ev->param.conn.initiator_depth == 1, "request depth");
	rdma_ack_cm_event(ev);
	FAILS(rdma_accept(child, NULL), EINVAL); /* no QP yet */
	CHECK(rdma_create_qp(child, pd, &qa) == 0, "child create_qp");
	/* A second event channel takes the child's events from here on. */
	struct rdma_event_channel *ch2 = rdma_create_event_channel();
	CHECK(ch2 && rdma_migrate_id(child, ch2) == 0 && child->channel == ch2, "migrate_id");
	const char reply[] = "accepted";
	cp.private_data = reply;
	cp.private_data_len = sizeof reply;
	CHECK(rdma_accept(child, &cp) == 0, "accept");
	CHECK(child->qp->state == IBV_QPS_RTS, "child QP in RTS");
	ev = expect(ch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(ev->id == client && ev->param.conn.private_data_len >= sizeof reply &&
	      strcmp(ev->param.conn.private_data, reply) == 0, "established with the REP's data");
	rdma_ack_cm_event(ev);
	CHECK(client->qp->state == IBV_QPS_RTS, "client QP in RTS");
	ev = expect(ch2, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(ev->id == child, "child established on the migrated channel");
	rdma_ack_cm_event(ev);
	CHECK(rdma_notify(client, IBV_EVENT_COMM_EST) == 0, "notify");
	FAILS(rdma_reject(client, NULL, 0), EINVAL); /* not a request */

	/* Disconnect: both sides see DISCONNECTED. */
	CHECK(rdma_disconnect(client) == 0, "disconnect");
	CHECK(client->qp->state == IBV_QPS_ERR, "client QP in ERROR");
	ev = expect(ch2, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(ev->id == child, "child disconnected");
	rdma_ack_cm_event(ev);
	/* The DREP goes when the passive side disconnects too (as the kernel's rdma_cm). */
	CHECK(rdma_disconnect(child) == 0, "child disconnect (DREP)");
	ev = expect(ch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(ev->id == client, "client disconnected");
	rdma_ack_cm_event(ev);

	/* A reject: the requester sees REJECTED with reason 28 (consumer defined) and the data. */
	struct rdma_cm_id *c2;
	CHECK(rdma_create_id(ch, &c2, NULL, RDMA_PS_TCP) == 0, "create_id");
	CHECK(rdma_resolve_addr(c2, NULL, (struct sockaddr *)&dst, 1000) == 0, "resolve_addr");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(rdma_resolve_route(c2, 1000) == 0, "resolve_route");
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	CHECK(rdma_create_qp(c2, pd, &qa) == 0, "create_qp");
	CHECK(rdma_connect(c2, NULL) == 0, "connect");
	ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *child2 = ev->id;
	rdma_ack_cm_event(ev);
	const char no[] = "no thanks";
	CHECK(rdma_reject(child2, no, sizeof no) == 0, "reject");
	ev = expect(ch, RDMA_CM_EVENT_REJECTED);
	CHECK(ev->id == c2 && ev->status == 28, "rejected status %d", ev->status);
	CHECK(ev->param.conn.private_data_len >= sizeof no &&
	      strcmp(ev->param.conn.private_data, no) == 0, "reject data");
	rdma_ack_cm_event(ev);

	/* Teardown. */
	rdma_destroy_qp(c2);
	CHECK(c2->qp == NULL && c2->send_cq == NULL, "destroy_qp frees the library's CQs");
	CHECK(rdma_destroy_id(c2) == 0 && rdma_destroy_id(child2) == 0, "destroy ids");
	rdma_destroy_qp(child);
	rdma_destroy_qp(client);
	CHECK(rdma_destroy_id(child) == 0 && rdma_destroy_id(client) == 0, "destroy ids");
	CHECK(rdma_destroy_id(listener) == 0, "destroy listener");
	FAILS(rdma_destroy_id(listener), EINVAL);
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
	rdma_destroy_event_channel(ch2);
	rdma_destroy_event_channel(ch);
	printf("ok %d\n", checks);
	return 0;
}
