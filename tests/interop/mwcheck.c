/*
 * sr_mwcheck: memory windows across the wire, between two libibverbs devices (kernel rxe in
 * the lab's guest at one end, softroce's libibverbs shim under `softroce run` at the other),
 * with every post through the extended work-request API (ibv_create_qp_ex, ibv_wr_*) and every
 * completion read through ibv_cq_ex.
 *
 *   sr_mwcheck [-p PORT] [-x GID_INDEX] [SERVER]
 *
 * The server owns the windows, the client (SERVER given) accesses them; both ends run this
 * program (same architecture: the out-of-band messages are raw structs) and meet on TCP PORT.
 * Five RC QP pairs, because an access the owner refuses moves its pair to the error state:
 *
 *   QP 0  type 1 window W1, bound with ibv_bind_mw; the client WRITEs it whole and READs it
 *         back; after the owner rebinds it (a new key), a WRITE under the new key lands and a
 *         READ under the old key is NAKed (remote access error).
 *   QP 1  type 2 window W2, bound on QP 1 with ibv_wr_bind_mw; WRITE and READ back; after the
 *         owner's LOCAL_INV (ibv_wr_local_inv) a WRITE under its key is NAKed.
 *   QP 2  type 2 window W3, bound on QP 2; WRITE and READ back; the client's SEND_WITH_INV
 *         (ibv_wr_send_inv) invalidates it remotely: the owner's receive completion carries
 *         IBV_WC_WITH_INV and the key, and a later WRITE under the key is NAKed.
 *   QP 3  a WRITE under W2's key from a QP W2 is not bound to: NAKed.
 *   QP 4  a WRITE running 32 bytes past W1's end: NAKed.
 *
 * The owner checks its region at the end: each window holds exactly what the accepted accesses
 * wrote, and no refused access changed a byte anywhere. Each end tells the other its verdict.
 * Prints one line per check and a summary; exit status 0 only if every check passed at both
 * ends. Every completion is waited for at most 10 s.
 *
 * Build: gcc -O2 -Wall -o sr_mwcheck mwcheck.c -libverbs
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define OOB_PROGRAM "sr_mwcheck"
#include "oob.h"

enum { NQP = 5, REGION = 65536, WIN_LEN = 4096, W1 = 4096, W2 = 16384, W3 = 32768,
       RECV_AT = 61440, MSG = 64, OOB_OVER = 32, INV_LEN = 16 };

static int failures, checks;

/* Kernel rxe (Linux 6.1) differs from the IBTA in two ways this program meets, both on rxe's
 * side as the owner:
 * - it checks an access through a window against the range of the window's memory region,
 *   not the window's (drivers/infiniband/sw/rxe/rxe_resp.c check_rkey calls mr_check_range on
 *   the MR; rxe_mw.c rxe_lookup_mw checks key, PD, QP, access and state, no range), so a
 *   WRITE past a window's end inside the region lands: the accessor skips that probe against
 *   an rxe owner (it would write the owner's region where the other checks look);
 * - its receive completion of a SEND_WITH_INV carries the kernel's IB_WC_WITH_INVALIDATE
 *   (1 << 2) in wc_flags, passed to libibverbs unchanged, where that bit is IBV_WC_IP_CSUM_OK
 *   (IBV_WC_WITH_INV is 1 << 3): on rxe the owner accepts either bit. */
enum { KERNEL_IB_WC_WITH_INVALIDATE = 1 << 2 };

/* One named check: printed either way, counted when it fails. */
static void check(int ok, const char *fmt, ...)
{
	va_list ap;
	checks++;
	failures += !ok;
	printf("%s: ", ok ? "ok" : "FAILED");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static uint8_t pattern(int win, int k)
{
	return (uint8_t)(win * 0x3b + k * 7 + 1);
}

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq_ex *cq;
static struct ibv_qp *qp[NQP];
static struct ibv_qp_ex *qpx[NQP];
static uint8_t *buf;
static struct ibv_mr *mr;
static int on_rxe; /* this end's device is kernel rxe */

struct completion {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	unsigned flags;
	uint32_t qp_num, byte_len, inv_rkey;
};

/* The next completion on the CQ, through ibv_start_poll / ibv_end_poll. */
static struct completion next_completion(void)
{
	struct ibv_poll_cq_attr pa = {0};
	struct completion c = {0};
	struct timespec t0, t;
	int r;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while ((r = ibv_start_poll(cq, &pa)) == ENOENT) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 10)
			die("no completion for 10 s");
	}
	if (r)
		die("ibv_start_poll: %s", strerror(r));
	c.wr_id = cq->wr_id;
	c.status = cq->status;
	c.opcode = ibv_wc_read_opcode(cq);
	c.flags = ibv_wc_read_wc_flags(cq);
	c.qp_num = ibv_wc_read_qp_num(cq);
	c.byte_len = ibv_wc_read_byte_len(cq);
	if (c.flags & (IBV_WC_WITH_INV | (on_rxe ? KERNEL_IB_WC_WITH_INVALIDATE : 0)))
		c.inv_rkey = ibv_wc_read_invalidated_rkey(cq);
	ibv_end_poll(cq);
	return c;
}

/* The completion of work request `id`, skipping flushes of QPs an earlier check broke. */
static struct completion completion_of(uint64_t id)
{
	for (;;) {
		struct completion c = next_completion();
		if (c.wr_id == id)
			return c;
		if (c.status != IBV_WC_WR_FLUSH_ERR)
			die("unexpected completion: wr_id %llu, %s", (unsigned long long)c.wr_id,
			    ibv_wc_status_str(c.status));
	}
}

static void post_done(struct ibv_qp_ex *x, const char *what)
{
	int r = ibv_wr_complete(x);
	if (r)
		die("ibv_wr_complete (%s): %s", what, strerror(r));
}

static uint64_t next_id = 1;

/* An RDMA WRITE (or READ) of `len` bytes at local `off` to/from (addr, rkey) on QP `i`;
 * the status it completed with. */
static enum ibv_wc_status rdma(int i, int is_read, uint64_t addr, uint32_t rkey, int off,
			       uint32_t len)
{
	uint64_t id = next_id++;
	ibv_wr_start(qpx[i]);
	qpx[i]->wr_id = id;
	qpx[i]->wr_flags = IBV_SEND_SIGNALED;
	if (is_read)
		ibv_wr_rdma_read(qpx[i], rkey, addr);
	else
		ibv_wr_rdma_write(qpx[i], rkey, addr);
	ibv_wr_set_sge(qpx[i], mr->lkey, (uintptr_t)buf + off, len);
	post_done(qpx[i], is_read ? "RDMA READ" : "RDMA WRITE");
	struct completion c = completion_of(id);
	if (c.status == IBV_WC_SUCCESS && c.opcode != (is_read ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE))
		die("completion of a %s has opcode %d", is_read ? "READ" : "WRITE", c.opcode);
	return c.status;
}

/* Binds the type 2 window `mw` on QP `i` to [off, off + WIN_LEN) of the region, remote read
 * and write, through ibv_wr_bind_mw; returns the window's new key. */
static uint32_t bind2(int i, struct ibv_mw *mw, int off)
{
	uint32_t key = ibv_inc_rkey(mw->rkey);
	struct ibv_mw_bind_info info = {.mr = mr, .addr = (uintptr_t)buf + off, .length = WIN_LEN,
					.mw_access_flags = IBV_ACCESS_REMOTE_WRITE |
							   IBV_ACCESS_REMOTE_READ};
	uint64_t id = next_id++;
	ibv_wr_start(qpx[i]);
	qpx[i]->wr_id = id;
	qpx[i]->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(qpx[i], mw, key, &info);
	post_done(qpx[i], "bind");
	struct completion c = completion_of(id);
	check(c.status == IBV_WC_SUCCESS && c.opcode == IBV_WC_BIND_MW,
	      "type 2 window bound on QP %d with ibv_wr_bind_mw (%s)", i, ibv_wc_status_str(c.status));
	return key;
}

/* Binds the type 1 window `mw` to [off, off + WIN_LEN) with ibv_bind_mw on QP 0; its new key. */
static uint32_t bind1(struct ibv_mw *mw, int off)
{
	struct ibv_mw_bind b = {.wr_id = next_id++, .send_flags = IBV_SEND_SIGNALED,
				.bind_info = {.mr = mr, .addr = (uintptr_t)buf + off, .length = WIN_LEN,
					      .mw_access_flags = IBV_ACCESS_REMOTE_WRITE |
								 IBV_ACCESS_REMOTE_READ}};
	uint32_t before = mw->rkey;
	int r = ibv_bind_mw(qp[0], mw, &b);
	if (r)
		die("ibv_bind_mw: %s", strerror(r));
	struct completion c = completion_of(b.wr_id);
	check(c.status == IBV_WC_SUCCESS && c.opcode == IBV_WC_BIND_MW && mw->rkey != before,
	      "type 1 window bound with ibv_bind_mw, key 0x%08x -> 0x%08x (%s)", before, mw->rkey,
	      ibv_wc_status_str(c.status));
	return mw->rkey;
}

struct conn {
	uint32_t qpn[NQP], psn[NQP];
	union ibv_gid gid;
};

static void connect_qps(const struct conn *mine, const struct conn *peer, int gid_index)
{
	for (int i = 0; i < NQP; i++) {
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_INIT, .port_num = 1,
			.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					   IBV_ACCESS_REMOTE_READ,
		};
		if (ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						     IBV_QP_ACCESS_FLAGS))
			die("QP %d: INIT failed", i);
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTR;
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = peer->qpn[i];
		a.rq_psn = peer->psn[i];
		a.max_dest_rd_atomic = 4;
		a.min_rnr_timer = 12;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = peer->gid;
		a.ah_attr.grh.sgid_index = gid_index;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.port_num = 1;
		if (ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
						     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
						     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
			die("QP %d: RTR failed", i);
		a.qp_state = IBV_QPS_RTS;
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.sq_psn = mine->psn[i];
		a.max_rd_atomic = 4;
		if (ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
						     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
						     IBV_QP_MAX_QP_RD_ATOMIC))
			die("QP %d: RTS failed", i);
	}
}

/* What the owner tells the accessor. */
struct keys {
	uint64_t addr[3];
	uint32_t rkey[3];
	uint32_t owner_is_rxe;
};


static int all_equal(int off, int len, uint8_t v)
{
	for (int k = 0; k < len; k++)
		if (buf[off + k] != v)
			return 0;
	return 1;
}

static int holds_pattern(int off, int win, int from, int to)
{
	for (int k = from; k < to; k++)
		if (buf[off + k] != pattern(win, k))
			return 0;
	return 1;
}

/* The owner's region outside the three windows and the receive area is all zero. */
static int outside_untouched(void)
{
	for (int k = 0; k < RECV_AT; k++) {
		int in = (k >= W1 && k < W1 + WIN_LEN) || (k >= W2 && k < W2 + WIN_LEN) ||
			 (k >= W3 && k < W3 + WIN_LEN);
		if (!in && buf[k])
			return 0;
	}
	return 1;
}

static void owner(void)
{
	struct ibv_mw *mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	struct ibv_mw *mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	struct ibv_mw *mw3 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	if (!mw1 || !mw2 || !mw3)
		die("ibv_alloc_mw: %s", strerror(errno));
	struct keys k = {.addr = {(uintptr_t)buf + W1, (uintptr_t)buf + W2, (uintptr_t)buf + W3},
			 .owner_is_rxe = on_rxe};
	k.rkey[0] = bind1(mw1, W1);
	k.rkey[1] = bind2(1, mw2, W2);
	k.rkey[2] = bind2(2, mw3, W3);

	/* The receive the client's SEND_WITH_INV lands in. */
	struct ibv_sge s = {(uintptr_t)buf + RECV_AT, MSG, mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 0xfeed, .sg_list = &s, .num_sge = 1}, *bad;
	if (ibv_post_recv(qp[2], &rw, &bad))
		die("ibv_post_recv failed");

	struct keys none;
	xchg(&k, &none, sizeof(k));
	int step;
	read_all(&step, sizeof(step)); /* the client has accessed the windows */
	check(holds_pattern(W1, 0, 0, WIN_LEN) && holds_pattern(W2, 1, 0, WIN_LEN) &&
		      holds_pattern(W3, 2, 0, WIN_LEN),
	      "owner: each window holds the client's WRITE");
	check(outside_untouched(), "owner: nothing outside the windows written (past W1's end, W2 from QP 3)");

	/* Invalidation: a rebind gives W1 a new key; LOCAL_INV ends W2. */
	k.rkey[0] = bind1(mw1, W1);
	uint64_t id = next_id++;
	ibv_wr_start(qpx[1]);
	qpx[1]->wr_id = id;
	qpx[1]->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_local_inv(qpx[1], k.rkey[1]);
	post_done(qpx[1], "LOCAL_INV");
	struct completion c = completion_of(id);
	check(c.status == IBV_WC_SUCCESS && c.opcode == IBV_WC_LOCAL_INV,
	      "owner: LOCAL_INV of W2 (key 0x%08x) with ibv_wr_local_inv (%s)", k.rkey[1],
	      ibv_wc_status_str(c.status));
	write_all(&k, sizeof(k));

	read_all(&step, sizeof(step)); /* the client is done */
	c = completion_of(0xfeed);
	unsigned inv_flag = IBV_WC_WITH_INV | (on_rxe ? KERNEL_IB_WC_WITH_INVALIDATE : 0);
	check(c.status == IBV_WC_SUCCESS && c.opcode == IBV_WC_RECV && (c.flags & inv_flag) &&
		      c.inv_rkey == k.rkey[2] && c.byte_len == INV_LEN && c.qp_num == qp[2]->qp_num,
	      "owner: SEND_WITH_INV received: %s, %u bytes, flags 0x%x, invalidated key 0x%08x "
	      "(W3's 0x%08x)",
	      ibv_wc_status_str(c.status), c.byte_len, c.flags, c.inv_rkey, k.rkey[2]);
	check(all_equal(W1, MSG, 0x5a) && holds_pattern(W1, 0, MSG, WIN_LEN),
	      "owner: W1 holds the WRITE under its new key");
	check(holds_pattern(W2, 1, 0, WIN_LEN) && holds_pattern(W3, 2, 0, WIN_LEN) &&
		      outside_untouched(),
	      "owner: no WRITE under an invalidated key changed a byte");
	ibv_dealloc_mw(mw1);
	ibv_dealloc_mw(mw2);
	ibv_dealloc_mw(mw3);
}

static const char *st(enum ibv_wc_status s)
{
	return ibv_wc_status_str(s);
}

static void accessor(void)
{
	struct keys k, none;
	memset(&none, 0, sizeof(none));
	enum ibv_wc_status s;
	xchg(&none, &k, sizeof(k));
	/* Local layout: [0, 3 * WIN_LEN) what is written, [REGION / 2, ...) what is read back. */
	for (int w = 0; w < 3; w++) {
		int src = w * WIN_LEN, dst = REGION / 2 + w * WIN_LEN;
		for (int b = 0; b < WIN_LEN; b++)
			buf[src + b] = pattern(w, b);
		s = rdma(w, 0, k.addr[w], k.rkey[w], src, WIN_LEN);
		check(s == IBV_WC_SUCCESS, "WRITE %d B through W%d (type %d, key 0x%08x) on QP %d: %s",
		      WIN_LEN, w + 1, w ? 2 : 1, k.rkey[w], w, st(s));
		s = rdma(w, 1, k.addr[w], k.rkey[w], dst, WIN_LEN);
		check(s == IBV_WC_SUCCESS && !memcmp(buf + src, buf + dst, WIN_LEN),
		      "READ %d B back through W%d on QP %d: %s, %s", WIN_LEN, w + 1, w, st(s),
		      memcmp(buf + src, buf + dst, WIN_LEN) ? "DIFFERENT" : "same bytes");
	}
	memset(buf, 0xee, MSG);
	s = rdma(3, 0, k.addr[1], k.rkey[1], 0, MSG);
	check(s == IBV_WC_REM_ACCESS_ERR, "WRITE through type 2 W2 from QP 3 (bound on QP 1): %s",
	      st(s));
	if (k.owner_is_rxe) {
		printf("skipped: a WRITE past W1's end (rxe checks the region's range, not the "
		       "window's)\n");
	} else {
		s = rdma(4, 0, k.addr[0] + WIN_LEN - (MSG - OOB_OVER), k.rkey[0], 0, MSG);
		check(s == IBV_WC_REM_ACCESS_ERR, "WRITE running %d B past W1's end: %s", OOB_OVER,
		      st(s));
	}
	int step = 1;
	write_all(&step, sizeof(step));

	uint32_t old1 = k.rkey[0], key2 = k.rkey[1], key3 = k.rkey[2];
	read_all(&k, sizeof(k)); /* W1 rebound, W2 invalidated */
	memset(buf, 0x5a, MSG);
	s = rdma(0, 0, k.addr[0], k.rkey[0], 0, MSG);
	check(s == IBV_WC_SUCCESS, "WRITE through W1 under its new key 0x%08x: %s", k.rkey[0], st(s));
	s = rdma(0, 1, k.addr[0], old1, REGION / 2, MSG);
	check(s == IBV_WC_REM_ACCESS_ERR, "READ through W1 under its old key 0x%08x: %s", old1, st(s));
	memset(buf, 0xee, MSG);
	s = rdma(1, 0, k.addr[1], key2, 0, MSG);
	check(s == IBV_WC_REM_ACCESS_ERR, "WRITE through W2 after the owner's LOCAL_INV: %s", st(s));

	uint64_t id = next_id++;
	ibv_wr_start(qpx[2]);
	qpx[2]->wr_id = id;
	qpx[2]->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_inv(qpx[2], key3);
	ibv_wr_set_sge(qpx[2], mr->lkey, (uintptr_t)buf + REGION - INV_LEN, INV_LEN);
	post_done(qpx[2], "SEND_WITH_INV");
	struct completion c = completion_of(id);
	check(c.status == IBV_WC_SUCCESS && c.opcode == IBV_WC_SEND,
	      "SEND_WITH_INV of W3's key 0x%08x with ibv_wr_send_inv: %s", key3, st(c.status));
	s = rdma(2, 0, k.addr[2], key3, 0, MSG);
	check(s == IBV_WC_REM_ACCESS_ERR, "WRITE through W3 after its remote invalidation: %s",
	      st(s));
	write_all(&step, sizeof(step));
}

int main(int argc, char **argv)
{
	int port = 18515, gid_index = 1, c;
	const char *server = NULL;
	while ((c = getopt(argc, argv, "p:x:")) != -1) {
		switch (c) {
		case 'p': port = atoi(optarg); break;
		case 'x': gid_index = atoi(optarg); break;
		default: die("usage: sr_mwcheck [-p PORT] [-x GID_INDEX] [SERVER]");
		}
	}
	if (optind < argc)
		server = argv[optind];
	is_client = server != NULL;

	oob_connect(server, port);

	struct ibv_device **devs = ibv_get_device_list(NULL);
	if (!devs || !devs[0])
		die("no RDMA device");
	ctx = ibv_open_device(devs[0]);
	if (!ctx)
		die("ibv_open_device failed");
	on_rxe = !strncmp(ibv_get_device_name(devs[0]), "rxe", 3);
	pd = ibv_alloc_pd(ctx);
	buf = calloc(1, REGION);
	if (!pd || !buf)
		die("allocation failed");
	/* The owner's region may carry windows; the accessor's is a plain local buffer. */
	mr = ibv_reg_mr(pd, buf, REGION,
			IBV_ACCESS_LOCAL_WRITE |
				(is_client ? 0 : IBV_ACCESS_MW_BIND | IBV_ACCESS_REMOTE_WRITE |
							 IBV_ACCESS_REMOTE_READ));
	struct ibv_cq_init_attr_ex ca = {.cqe = 256, .wc_flags = IBV_WC_STANDARD_FLAGS};
	cq = ibv_create_cq_ex(ctx, &ca);
	if (!mr || !cq)
		die("ibv_reg_mr / ibv_create_cq_ex failed: %s", strerror(errno));
	struct conn mine = {0}, peer;
	srand48(getpid() * time(NULL));
	for (int i = 0; i < NQP; i++) {
		struct ibv_qp_init_attr_ex ia = {
			.send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = ibv_cq_ex_to_cq(cq),
			.cap = {.max_send_wr = 8, .max_recv_wr = 4, .max_send_sge = 1,
				.max_recv_sge = 1},
			.qp_type = IBV_QPT_RC,
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
			.pd = pd,
			.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
					  IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_INV |
					  IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV,
		};
		qp[i] = ibv_create_qp_ex(ctx, &ia);
		if (!qp[i])
			die("ibv_create_qp_ex: %s", strerror(errno));
		qpx[i] = ibv_qp_to_qp_ex(qp[i]);
		mine.qpn[i] = qp[i]->qp_num;
		mine.psn[i] = lrand48() & 0xffffff;
	}
	if (ibv_query_gid(ctx, 1, gid_index, &mine.gid))
		die("no GID index %d", gid_index);
	xchg(&mine, &peer, sizeof(mine));
	connect_qps(&mine, &peer, gid_index);
	int ready = 1, pready;
	xchg(&ready, &pready, sizeof(ready));

	if (is_client)
		accessor();
	else
		owner();

	int verdict = failures == 0, pverdict = 0;
	xchg(&verdict, &pverdict, sizeof(verdict));
	close(sock);
	printf("sr_mwcheck %s: %d checks, %s at this end, %s at the peer\n",
	       is_client ? "accessor" : "owner", checks, failures ? "FAILED" : "all passed",
	       pverdict == 1 ? "all passed" : "FAILED");
	for (int i = 0; i < NQP; i++)
		ibv_destroy_qp(qp[i]);
	ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(devs);
	return failures || pverdict != 1;
}
