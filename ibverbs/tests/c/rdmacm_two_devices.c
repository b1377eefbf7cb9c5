/*
 * librdmacm with two devices in one process (`softroce run --bind A --bind B`): an identifier
 * is on the device whose address it binds or resolves from, `id->verbs` is that device's
 * context (the one rdma_get_devices lists: librdmacm opens each device once), and two
 * connections run inside the process, every byte checked:
 *
 *   1. a listener bound to A's address and a connector bound to B's: the connect request's
 *      identifier is on A, the connector on B; SENDs both ways, an RDMA WRITE and an RDMA
 *      READ across;
 *   2. a listener bound to the wildcard address, which listens on both devices (as the
 *      kernel's cma_listen_on_all): connectors from A to B's address and from B to A's each
 *      reach it, and each connect request's identifier is on the device it came to.
 *
 * usage: rdmacm_two_devices A B (the IPv4 addresses given to --bind, in order). Prints "ok N"
 * (N checks) or the first failure.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rdma_cma.h>

static long checks;

#define CHECK(cond, ...)                                                        \
	do {                                                                    \
		checks++;                                                       \
		if (!(cond)) {                                                  \
			fprintf(stderr, "FAIL line %d: ", __LINE__);            \
			fprintf(stderr, __VA_ARGS__);                           \
			fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno)); \
			exit(1);                                                \
		}                                                               \
	} while (0)

#define MSG 4096

static struct ibv_context **devs;
static const char *ip[2];

static struct sockaddr_in sin_of(const char *a, int port)
{
	struct sockaddr_in s;
	memset(&s, 0, sizeof s);
	s.sin_family = AF_INET;
	s.sin_port = htons(port);
	inet_pton(AF_INET, a, &s.sin_addr);
	return s;
}

/* The IPv4 address of a sockaddr, as text. */
static const char *ip_of(struct sockaddr *a)
{
	static char buf[2][INET_ADDRSTRLEN];
	static int which;
	which ^= 1;
	CHECK(a->sa_family == AF_INET, "family %d", a->sa_family);
	inet_ntop(AF_INET, &((struct sockaddr_in *)a)->sin_addr, buf[which], sizeof buf[which]);
	return buf[which];
}

/* Which device (0 or 1) a context is of, by its name and by rdma_get_devices' list. */
static int dev_index(struct ibv_context *v)
{
	CHECK(v != NULL, "no context");
	for (int i = 0; i < 2; i++) {
		if (v == devs[i]) {
			char want[16];
			snprintf(want, sizeof want, "softroce%d", i);
			CHECK(strcmp(ibv_get_device_name(v->device), want) == 0, "named %s",
			      ibv_get_device_name(v->device));
			return i;
		}
	}
	CHECK(0, "context %p is none of rdma_get_devices'", (void *)v);
	return -1;
}

/* The next event on `ch` (at most 5 s); the caller acknowledges it. */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 5000) == 1, "no event");
	struct rdma_cm_event *ev;
	CHECK(rdma_get_cm_event(ch, &ev) == 0, "get_cm_event");
	return ev;
}

/* The next event, which must be `type` about `id`; acknowledged. */
static void expect(struct rdma_event_channel *ch, struct rdma_cm_id *id, int type)
{
	struct rdma_cm_event *ev = next_event(ch);
	CHECK(ev->event == type && ev->id == id, "event %s on %p, want %s on %p (status %d)",
	      rdma_event_str(ev->event), (void *)ev->id, rdma_event_str(type), (void *)id,
	      ev->status);
	CHECK(rdma_ack_cm_event(ev) == 0, "ack");
}

/* One end of a connection: its identifier, CQ, QP (made by rdma_create_qp on the
 * identifier's device, on the device's PD) and a registered buffer. */
struct end {
	struct rdma_cm_id *id;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	unsigned char *buf;
};

static void make_qp(struct end *e)
{
	CHECK(e->id->verbs != NULL && e->id->pd != NULL, "identifier not on a device");
	CHECK(e->id->pd->context == e->id->verbs, "the device's PD is of its context");
	e->cq = ibv_create_cq(e->id->verbs, 16, NULL, NULL, 0);
	CHECK(e->cq != NULL, "create_cq");
	struct ibv_qp_init_attr a = {
		.send_cq = e->cq,
		.recv_cq = e->cq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	CHECK(rdma_create_qp(e->id, NULL, &a) == 0, "create_qp");
	CHECK(e->id->qp->context == e->id->verbs, "QP on the identifier's device");
	e->buf = calloc(1, 4 * MSG);
	CHECK(e->buf != NULL, "calloc");
	e->mr = ibv_reg_mr(e->id->pd, e->buf, 4 * MSG,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	CHECK(e->mr != NULL, "reg_mr");
}

static void free_end(struct end *e)
{
	rdma_destroy_qp(e->id);
	CHECK(ibv_dereg_mr(e->mr) == 0, "dereg_mr");
	CHECK(ibv_destroy_cq(e->cq) == 0, "destroy_cq");
	CHECK(rdma_destroy_id(e->id) == 0, "destroy_id");
	free(e->buf);
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 13 + seed * 101 + (i >> 8));
}

static int holds(const unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (unsigned char)(i * 13 + seed * 101 + (i >> 8)))
			return 0;
	return 1;
}

/* One completion of `e`'s CQ, successful (at most 5 s). */
static struct ibv_wc wait_wc(struct end *e)
{
	struct ibv_wc wc;
	int n;
	for (int spins = 0; (n = ibv_poll_cq(e->cq, 1, &wc)) == 0; spins++) {
		CHECK(spins < 5000, "no completion");
		struct timespec t = { 0, 1000000 };
		nanosleep(&t, NULL);
	}
	CHECK(n == 1 && wc.status == IBV_WC_SUCCESS, "completion status %d",
	      n == 1 ? (int)wc.status : -1);
	return wc;
}

static void post_recv(struct end *e)
{
	struct ibv_sge sge = { (uintptr_t)e->buf, MSG, e->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(ibv_post_recv(e->id->qp, &wr, &bad) == 0, "post_recv");
}

/* One signaled work request of `len` bytes from `e`'s buffer at `off`; waits for it. */
static void post1(struct end *e, enum ibv_wr_opcode op, size_t off, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { (uintptr_t)e->buf + off, MSG, e->mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = op,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	CHECK(ibv_post_send(e->id->qp, &wr, &bad) == 0, "post_send");
	struct ibv_wc wc = wait_wc(e);
	CHECK(wc.wr_id == (uint64_t)op, "wr_id");
}

/* A SEND of a pattern of `seed` from `s` to `r` (which has a receive posted), checked. */
static void send_checked(struct end *s, struct end *r, unsigned seed)
{
	memset(r->buf, 0, MSG);
	fill(s->buf + MSG, MSG, seed);
	post1(s, IBV_WR_SEND, MSG, 0, 0);
	struct ibv_wc wc = wait_wc(r);
	CHECK(wc.opcode == IBV_WC_RECV && wc.byte_len == MSG, "receive");
	CHECK(holds(r->buf, MSG, seed), "the bytes sent (seed %u)", seed);
}

/* Where a connector tells its peer its buffer is (the connect request's private data). */
struct region {
	uint64_t addr;
	uint32_t rkey;
};

/* A connector: on the device of `src`, resolved to `dst`, its QP made and a receive posted,
 * connecting with its buffer's region as private data. */
static void start_connector(struct rdma_event_channel *ch, struct end *c, const char *src,
			    const char *dst, int port, int want_dev)
{
	CHECK(rdma_create_id(ch, &c->id, c, RDMA_PS_TCP) == 0, "create_id");
	struct sockaddr_in s = sin_of(src, 0), d = sin_of(dst, port);
	CHECK(rdma_resolve_addr(c->id, (struct sockaddr *)&s, (struct sockaddr *)&d, 2000) == 0,
	      "resolve_addr");
	expect(ch, c->id, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(dev_index(c->id->verbs) == want_dev, "connector on the device of %s", src);
	CHECK(strcmp(ip_of(rdma_get_local_addr(c->id)), src) == 0, "local address %s",
	      ip_of(rdma_get_local_addr(c->id)));
	CHECK(rdma_resolve_route(c->id, 2000) == 0, "resolve_route");
	expect(ch, c->id, RDMA_CM_EVENT_ROUTE_RESOLVED);
	/* The route's path record: from this device's GID to the peer's. */
	CHECK(c->id->route.num_paths == 1, "one path");
	CHECK(memcmp(c->id->route.path_rec->sgid.raw + 12, &s.sin_addr, 4) == 0, "path sgid");
	CHECK(memcmp(c->id->route.path_rec->dgid.raw + 12, &d.sin_addr, 4) == 0, "path dgid");
	make_qp(c);
	post_recv(c);
	struct region r = { (uintptr_t)c->buf + 2 * MSG, c->mr->rkey };
	struct rdma_conn_param p = {
		.private_data = &r,
		.private_data_len = sizeof r,
		.responder_resources = 1,
		.initiator_depth = 1,
		.retry_count = 7,
		.rnr_retry_count = 7,
	};
	CHECK(rdma_connect(c->id, &p) == 0, "connect");
}

/* The passive side of a connect request `ev` (to `listener`): its identifier must be on the
 * device whose address it was sent to; QP made, receive posted, accepted. Returns the
 * connector's region from the private data. */
static struct region take_request(struct rdma_cm_event *ev, struct rdma_cm_id *listener,
				  struct end *s)
{
	CHECK(ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->listen_id == listener,
	      "event %s, want a connect request (status %d)", rdma_event_str(ev->event), ev->status);
	CHECK(ev->param.conn.private_data_len >= sizeof(struct region), "private data");
	struct region r;
	memcpy(&r, ev->param.conn.private_data, sizeof r);
	s->id = ev->id;
	const char *local = ip_of(rdma_get_local_addr(s->id));
	const char *peer = ip_of(rdma_get_peer_addr(s->id));
	int d = dev_index(s->id->verbs);
	CHECK(strcmp(local, ip[d]) == 0, "request to %s on softroce%d", local, d);
	CHECK(strcmp(peer, ip[1 - d]) == 0, "request from %s to softroce%d", peer, d);
	CHECK(s->id->port_num == 1, "port");
	CHECK(rdma_ack_cm_event(ev) == 0, "ack");
	make_qp(s);
	post_recv(s);
	struct rdma_conn_param p = {
		.responder_resources = 1,
		.initiator_depth = 1,
		.retry_count = 7,
		.rnr_retry_count = 7,
	};
	CHECK(rdma_accept(s->id, &p) == 0, "accept");
	return r;
}

/* Waits for `n` ESTABLISHED events, one for each of `ids`. */
static void established(struct rdma_event_channel *ch, struct rdma_cm_id **ids, int n)
{
	int seen[8] = { 0 };
	for (int k = 0; k < n; k++) {
		struct rdma_cm_event *ev = next_event(ch);
		CHECK(ev->event == RDMA_CM_EVENT_ESTABLISHED, "event %s (status %d), want ESTABLISHED",
		      rdma_event_str(ev->event), ev->status);
		int found = 0;
		for (int i = 0; i < n; i++)
			if (ev->id == ids[i] && !seen[i])
				seen[i] = found = 1;
		CHECK(found, "ESTABLISHED for an unexpected identifier");
		CHECK(rdma_ack_cm_event(ev) == 0, "ack");
	}
}

/* Disconnects the pair: `a` sends the DREQ; `b`, told by DISCONNECTED, answers with its own
 * rdma_disconnect (the DREP), after which `a` gets DISCONNECTED (a TIMEWAIT_EXIT of either may
 * come between them). */
static void disconnect(struct rdma_event_channel *ch, struct end *a, struct end *b)
{
	CHECK(rdma_disconnect(a->id) == 0, "disconnect");
	int got_a = 0, got_b = 0;
	while (!got_a || !got_b) {
		struct rdma_cm_event *ev = next_event(ch);
		CHECK(ev->id == a->id || ev->id == b->id, "an event about another identifier");
		if (ev->event != RDMA_CM_EVENT_TIMEWAIT_EXIT) {
			CHECK(ev->event == RDMA_CM_EVENT_DISCONNECTED, "event %s, want DISCONNECTED",
			      rdma_event_str(ev->event));
			CHECK(!(ev->id == a->id ? got_a : got_b), "DISCONNECTED twice");
			got_a |= ev->id == a->id;
			if (ev->id == b->id) {
				got_b = 1;
				CHECK(rdma_disconnect(b->id) == 0, "disconnect after the peer's");
			}
		}
		CHECK(rdma_ack_cm_event(ev) == 0, "ack");
	}
}

int main(int argc, char **argv)
{
	CHECK(argc >= 3, "usage: rdmacm_two_devices A B");
	ip[0] = argv[1];
	ip[1] = argv[2];
	int n = -1;
	devs = rdma_get_devices(&n);
	CHECK(devs != NULL && n == 2 && devs[0] && devs[1] && devs[2] == NULL, "two devices (%d)",
	      n);
	CHECK(dev_index(devs[0]) == 0 && dev_index(devs[1]) == 1, "in order");
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch != NULL, "create_event_channel");

	/* Binding picks the device of the address; no device has another address. */
	struct rdma_cm_id *t;
	for (int i = 0; i < 2; i++) {
		CHECK(rdma_create_id(ch, &t, NULL, RDMA_PS_TCP) == 0, "create_id");
		struct sockaddr_in a = sin_of(ip[i], 0);
		CHECK(rdma_bind_addr(t, (struct sockaddr *)&a) == 0, "bind %s", ip[i]);
		CHECK(dev_index(t->verbs) == i, "bound to %s: on softroce%d", ip[i], i);
		CHECK(t->pd != NULL && t->pd->context == devs[i], "the device's PD");
		CHECK(rdma_destroy_id(t) == 0, "destroy_id");
	}
	CHECK(rdma_create_id(ch, &t, NULL, RDMA_PS_TCP) == 0, "create_id");
	struct sockaddr_in none = sin_of("192.0.2.77", 0);
	errno = 0;
	CHECK(rdma_bind_addr(t, (struct sockaddr *)&none) == -1 && errno == EADDRNOTAVAIL,
	      "bind to no interface's address");
	CHECK(rdma_destroy_id(t) == 0, "destroy_id");

	/* 1. Listener on A, connector on B. */
	struct rdma_cm_id *listener;
	CHECK(rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP) == 0, "create_id");
	struct sockaddr_in la = sin_of(ip[0], 7471);
	CHECK(rdma_bind_addr(listener, (struct sockaddr *)&la) == 0, "bind listener");
	CHECK(dev_index(listener->verbs) == 0, "listener on softroce0");
	CHECK(rdma_listen(listener, 4) == 0, "listen");

	/* Without a source address, the device is the one that has the destination's address. */
	for (int i = 0; i < 2; i++) {
		CHECK(rdma_create_id(ch, &t, NULL, RDMA_PS_TCP) == 0, "create_id");
		struct sockaddr_in d = sin_of(ip[i], 7999);
		CHECK(rdma_resolve_addr(t, NULL, (struct sockaddr *)&d, 2000) == 0, "resolve");
		expect(ch, t, RDMA_CM_EVENT_ADDR_RESOLVED);
		CHECK(dev_index(t->verbs) == i, "resolved to %s from softroce%d", ip[i],
		      dev_index(t->verbs));
		CHECK(strcmp(ip_of(rdma_get_local_addr(t)), ip[i]) == 0, "source address");
		CHECK(rdma_destroy_id(t) == 0, "destroy_id");
	}

	struct end c1 = { 0 }, s1 = { 0 };
	start_connector(ch, &c1, ip[1], ip[0], 7471, 1);
	struct region r1 = take_request(next_event(ch), listener, &s1);
	CHECK(dev_index(s1.id->verbs) == 0, "the request came to softroce0");
	struct rdma_cm_id *pair1[2] = { c1.id, s1.id };
	established(ch, pair1, 2);
	CHECK(c1.id->qp->state == IBV_QPS_RTS && s1.id->qp->state == IBV_QPS_RTS, "QPs in RTS");
	CHECK(c1.id->qp->context != s1.id->qp->context, "the QPs are on two devices");

	send_checked(&c1, &s1, 1); /* B -> A */
	post_recv(&s1);
	send_checked(&s1, &c1, 2); /* A -> B */
	post_recv(&c1);
	/* RDMA WRITE from A into B's region, then READ it back from A into A's buffer. */
	fill(s1.buf + MSG, MSG, 3);
	post1(&s1, IBV_WR_RDMA_WRITE, MSG, r1.addr, r1.rkey);
	CHECK(holds(c1.buf + 2 * MSG, MSG, 3), "written into softroce1's region");
	fill(c1.buf + 2 * MSG, MSG, 4);
	memset(s1.buf + 3 * MSG, 0, MSG);
	post1(&s1, IBV_WR_RDMA_READ, 3 * MSG, r1.addr, r1.rkey);
	CHECK(holds(s1.buf + 3 * MSG, MSG, 4), "read from softroce1's region");

	disconnect(ch, &c1, &s1);
	free_end(&c1);
	free_end(&s1);
	CHECK(rdma_destroy_id(listener) == 0, "destroy listener");

	/* 2. A wildcard listener hears both devices. */
	struct rdma_cm_id *any;
	CHECK(rdma_create_id(ch, &any, NULL, RDMA_PS_TCP) == 0, "create_id");
	struct sockaddr_in wa = sin_of("0.0.0.0", 7472);
	CHECK(rdma_bind_addr(any, (struct sockaddr *)&wa) == 0, "bind wildcard");
	CHECK(any->verbs == NULL, "a wildcard identifier is on no device");
	CHECK(rdma_listen(any, 4) == 0, "listen on every device");

	struct end c[2] = { { 0 } }, s[2] = { { 0 } };
	struct region r[2];
	/* c[i] connects from device i to the other device's address. */
	for (int i = 0; i < 2; i++)
		start_connector(ch, &c[i], ip[i], ip[1 - i], 7472, i);
	struct rdma_cm_id *ids[4] = { c[0].id, c[1].id, NULL, NULL };
	for (int k = 0; k < 2; k++) {
		/* The request from device i's connector came to device 1 - i. */
		struct rdma_cm_event *ev = next_event(ch);
		CHECK(ev->event == RDMA_CM_EVENT_CONNECT_REQUEST, "event %s, want a connect request",
		      rdma_event_str(ev->event));
		int to = dev_index(ev->id->verbs);
		CHECK(s[to].id == NULL, "a second request to softroce%d", to);
		r[1 - to] = take_request(ev, any, &s[to]);
		ids[2 + k] = s[to].id;
	}
	established(ch, ids, 4);
	for (int i = 0; i < 2; i++) {
		struct end *a = &c[i], *b = &s[1 - i];
		CHECK(dev_index(a->id->verbs) == i && dev_index(b->id->verbs) == 1 - i, "devices");
		send_checked(a, b, 10 + i);
		fill(b->buf + MSG, MSG, 20 + i);
		post1(b, IBV_WR_RDMA_WRITE, MSG, r[i].addr, r[i].rkey);
		CHECK(holds(a->buf + 2 * MSG, MSG, 20 + i), "written across");
	}
	for (int i = 0; i < 2; i++) {
		disconnect(ch, &c[i], &s[1 - i]);
		free_end(&c[i]);
		free_end(&s[1 - i]);
	}
	CHECK(rdma_destroy_id(any) == 0, "destroy wildcard listener");

	rdma_destroy_event_channel(ch);
	rdma_free_devices(devs);
	printf("ok %ld\n", checks);
	return 0;
}
