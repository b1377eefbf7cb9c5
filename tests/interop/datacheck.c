/*
 * sr_datacheck: the peer of `softroce perf OP --check` on a real libibverbs device (kernel
 * rxe in the lab), so that data crossing between rxe and softroce is verified byte for byte.
 *
 * perftest fills its buffers with random bytes and checks nothing, and ibv_rc_pingpong -c only
 * covers SEND; this program speaks what `softroce perf --check` speaks for the bandwidth tests
 * with one QP: perftest 4.5's out-of-band exchange (src/oob/perftest.rs), softroce's test
 * signature after the version string, one memory region per message (a stride of the size
 * rounded up to 8 bytes, one slot per iteration, the peer's half advertised at base + half),
 * the pattern byte(i, k) = (i * 0x9E3779B9 + k * 31) >> 3 of src/cli/perf/ops.rs, and a one-byte
 * verdict exchange so that both ends fail on a mismatch.
 *
 *   sr_datacheck write|read|send|atomic [-s SIZE] [-n ITERS] [-p PORT] [-x GID_INDEX]
 *                [-m MTU] [-t TX_DEPTH] [SERVER]
 *
 * As in softroce perf: the client is the requester (WRITE, READ, atomics) or sender (SEND);
 * WRITEs and SENDs are checked where they land (the server), READs and fetch-and-add results at
 * the client, and the atomic target's final value at the server. Exit status 0 only if every
 * byte matched at both ends.
 *
 * Build: gcc -O2 -Wall -o sr_datacheck datacheck.c -libverbs
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
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define OOB_PROGRAM "sr_datacheck"
#include "oob.h"

enum op { OP_SEND = 1, OP_WRITE = 2, OP_READ = 3, OP_ATOMIC = 4 }; /* softroce's Program codes */

static int failures;
static char first_failure[256];

static void fail(const char *fmt, ...)
{
	va_list ap;
	if (failures++ == 0) {
		va_start(ap, fmt);
		vsnprintf(first_failure, sizeof(first_failure), fmt, ap);
		va_end(ap);
	}
}

struct keys {
	unsigned lid, out_reads, qpn, psn, rkey, srqn;
	unsigned long long vaddr;
	union ibv_gid gid;
};

/* perftest's 108-byte key message (KEY_PRINT_FMT_GID). */
static void handshake(const struct keys *mine, struct keys *theirs)
{
	char out[108] = {0}, in[108], *p;
	int i, k;
	p = out + sprintf(out, "%04x:%04x:%06x:%06x:%08x:%016llx:", mine->lid, mine->out_reads,
			  mine->qpn, mine->psn, mine->rkey, mine->vaddr);
	for (i = 0; i < 16; i++)
		p += sprintf(p, "%02x:", mine->gid.raw[i]);
	sprintf(p, "%08x:", mine->srqn);
	xchg(out, in, sizeof(in));
	in[107] = 0;
	if (!theirs)
		return;
	if (sscanf(in, "%x:%x:%x:%x:%x:%llx:%n", &theirs->lid, &theirs->out_reads, &theirs->qpn,
		   &theirs->psn, &theirs->rkey, &theirs->vaddr, &k) != 6)
		die("malformed key message from the peer: %s", in);
	p = in + k;
	for (i = 0; i < 16; i++) {
		unsigned b;
		if (sscanf(p, "%2x:", &b) != 1)
			die("malformed GID in the peer's key message: %s", in);
		theirs->gid.raw[i] = b;
		p += 3;
	}
}

static uint8_t pattern_byte(uint64_t iter, uint64_t off)
{
	return (uint8_t)((iter * 0x9E3779B9ULL + off * 31ULL) >> 3);
}

static void fill(uint8_t *buf, uint64_t len, uint64_t iter)
{
	for (uint64_t k = 0; k < len; k++)
		buf[k] = pattern_byte(iter, k);
}

static void check(const uint8_t *buf, uint64_t len, uint64_t iter, const char *where)
{
	for (uint64_t k = 0; k < len; k++)
		if (buf[k] != pattern_byte(iter, k)) {
			fail("%s: message %llu, byte %llu: got 0x%02x, expected 0x%02x", where,
			     (unsigned long long)iter, (unsigned long long)k, buf[k],
			     pattern_byte(iter, k));
			return;
		}
}

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	struct timespec t0, t;
	int n;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			die("ibv_poll_cq failed");
		if (n == 1) {
			if (wc->status != IBV_WC_SUCCESS)
				die("completion with error: %s (wr_id %llu)", ibv_wc_status_str(wc->status),
				    (unsigned long long)wc->wr_id);
			return 1;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 60)
			die("no completion for 60 s");
	}
}

int main(int argc, char **argv)
{
	uint64_t size = 0, iters = 100, stride, half;
	int port = 18515, gid_index = 1, mtu = 1024, tx_depth = 16, c;
	enum op op;
	const char *server = NULL;

	if (argc < 2)
		die("usage: sr_datacheck write|read|send|atomic [-s SIZE] [-n ITERS] [-p PORT] [-x GID] [-m MTU] [-t DEPTH] [SERVER]");
	if (!strcmp(argv[1], "send"))
		op = OP_SEND;
	else if (!strcmp(argv[1], "write"))
		op = OP_WRITE;
	else if (!strcmp(argv[1], "read"))
		op = OP_READ;
	else if (!strcmp(argv[1], "atomic"))
		op = OP_ATOMIC;
	else
		die("unknown operation %s", argv[1]);
	optind = 2;
	while ((c = getopt(argc, argv, "s:n:p:x:m:t:")) != -1) {
		switch (c) {
		case 's': size = strtoull(optarg, NULL, 0); break;
		case 'n': iters = strtoull(optarg, NULL, 0); break;
		case 'p': port = atoi(optarg); break;
		case 'x': gid_index = atoi(optarg); break;
		case 'm': mtu = atoi(optarg); break;
		case 't': tx_depth = atoi(optarg); break;
		default: die("bad flag");
		}
	}
	if (optind < argc)
		server = argv[optind];
	is_client = server != NULL;
	if (!size)
		size = op == OP_ATOMIC ? 8 : 65536;
	if (op == OP_ATOMIC && size != 8)
		die("atomics are 8 bytes");
	if (!iters || iters > 1000000 || size > (1u << 24) || tx_depth < 1 || tx_depth > 512)
		die("-n 1..1000000, -s up to 16 MiB, -t 1..512");
	stride = (size < 8 ? 8 : size + 7) / 8 * 8;
	half = stride * iters;

	/* The out-of-band connection. */
	oob_connect(server, port);

	/* Versions with softroce's signature: both ends must run the same checked test. */
	uint8_t ver[16] = "6.06", pver[16];
	ver[5] = 'S';
	ver[6] = op;
	ver[7] = 1 | (1 << 2); /* --check (bit 0), not --reversed (bit 1), one QP (bits 2-7) */
	uint32_t be = htonl((uint32_t)size);
	memcpy(ver + 8, &be, 4);
	be = htonl((uint32_t)iters);
	memcpy(ver + 12, &be, 4);
	xchg(ver, pver, 16);
	if (memcmp(ver + 5, pver + 5, 11) || atof((char *)pver) < 5.70)
		die("the peer runs another test or is not `softroce perf --check` (its version message differs)");
	/* System data and MTU: with one region per message neither changes the layout. */
	uint32_t sys[2] = {htonl(4096), htonl(64)}, psys;
	xchg(&sys[0], &psys, 4);
	xchg(&sys[1], &psys, 4);
	int mtu_enum = mtu == 256 ? 1 : mtu == 512 ? 2 : mtu == 1024 ? 3 : mtu == 2048 ? 4 : 5;
	char mmsg[2] = {(char)('0' + mtu_enum), 0}, pm[2];
	xchg(mmsg, pm, 2);
	if (pm[0] >= '1' && pm[0] <= '5' && pm[0] - '0' < mtu_enum)
		mtu_enum = pm[0] - '0';

	/* Verbs resources. */
	struct ibv_device **devs = ibv_get_device_list(NULL);
	if (!devs || !devs[0])
		die("no RDMA device");
	struct ibv_context *ctx = ibv_open_device(devs[0]);
	if (!ctx)
		die("ibv_open_device failed");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	uint8_t *buf = calloc(1, 2 * half);
	if (!pd || !buf)
		die("allocation failed");
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 2 * half,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	struct ibv_cq *cq = ibv_create_cq(ctx, 2048, NULL, NULL, 0);
	struct ibv_qp_init_attr qia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = tx_depth, .max_recv_wr = 512, .max_send_sge = 1, .max_recv_sge = 1},
	};
	struct ibv_qp *qp = mr && cq ? ibv_create_qp(pd, &qia) : NULL;
	if (!qp)
		die("ibv_reg_mr/ibv_create_cq/ibv_create_qp failed");
	struct keys mine = {0}, peer = {0};
	srand48(getpid() * time(NULL));
	mine.out_reads = 16;
	mine.qpn = qp->qp_num;
	mine.psn = lrand48() & 0xffffff;
	mine.rkey = mr->rkey;
	mine.vaddr = (uintptr_t)buf + half;
	if (ibv_query_gid(ctx, 1, gid_index, &mine.gid))
		die("no GID index %d", gid_index);
	if (op == OP_READ && !is_client)
		for (uint64_t i = 0; i < iters; i++)
			fill(buf + half + i * stride, size, i);

	handshake(&mine, &peer);
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
	};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("INIT failed");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu_enum;
	a.dest_qp_num = peer.qpn;
	a.rq_psn = peer.psn;
	a.max_dest_rd_atomic = mine.out_reads;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer.gid;
	a.ah_attr.grh.sgid_index = gid_index;
	a.ah_attr.grh.hop_limit = 0xFF;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("RTR failed");
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = mine.psn;
	a.max_rd_atomic = peer.out_reads < 1 ? 1 : peer.out_reads > 16 ? 16 : peer.out_reads;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS failed");
	handshake(&mine, NULL);
	handshake(&mine, NULL);

	uint64_t rx_depth = iters < 512 ? iters : 512;
	struct ibv_wc wc;
	if (op == OP_SEND && !is_client)
		for (uint64_t m = 0; m < rx_depth; m++) {
			struct ibv_sge sge = {(uintptr_t)buf + half + m * stride, (uint32_t)size, mr->lkey};
			struct ibv_recv_wr wr = {.wr_id = m, .sg_list = &sge, .num_sge = 1}, *bad;
			if (ibv_post_recv(qp, &wr, &bad))
				die("ibv_post_recv failed");
		}
	if (op == OP_SEND)
		handshake(&mine, NULL);

	struct timeval t0, t1;
	gettimeofday(&t0, NULL);
	if (is_client) {
		uint64_t posted = 0, done = 0;
		while (done < iters) {
			while (posted < iters && posted - done < (uint64_t)tx_depth) {
				uint64_t off = posted * stride;
				struct ibv_sge sge = {(uintptr_t)buf + off, (uint32_t)size, mr->lkey};
				struct ibv_send_wr wr = {.wr_id = posted, .sg_list = &sge, .num_sge = 1,
							 .send_flags = IBV_SEND_SIGNALED}, *bad;
				switch (op) {
				case OP_SEND: wr.opcode = IBV_WR_SEND; break;
				case OP_WRITE: wr.opcode = IBV_WR_RDMA_WRITE; break;
				case OP_READ: wr.opcode = IBV_WR_RDMA_READ; break;
				case OP_ATOMIC: wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD; break;
				}
				if (op == OP_ATOMIC) {
					wr.wr.atomic.remote_addr = peer.vaddr;
					wr.wr.atomic.rkey = peer.rkey;
					wr.wr.atomic.compare_add = 1;
				} else {
					wr.wr.rdma.remote_addr = peer.vaddr + off;
					wr.wr.rdma.rkey = peer.rkey;
				}
				if (op == OP_SEND || op == OP_WRITE)
					fill(buf + off, size, posted);
				if (ibv_post_send(qp, &wr, &bad))
					die("ibv_post_send failed");
				posted++;
			}
			poll_one(cq, &wc);
			if (op == OP_READ)
				check(buf + wc.wr_id * stride, size, wc.wr_id, "READ data at the client");
			if (op == OP_ATOMIC) {
				uint64_t v;
				memcpy(&v, buf + wc.wr_id * stride, 8);
				if (v != wc.wr_id)
					fail("fetch-and-add %llu returned %llu", (unsigned long long)wc.wr_id,
					     (unsigned long long)v);
			}
			done++;
		}
	} else if (op == OP_SEND) {
		for (uint64_t got = 0; got < iters; got++) {
			poll_one(cq, &wc);
			if (wc.byte_len != size)
				fail("message %llu: %u bytes, expected %llu", (unsigned long long)wc.wr_id,
				     wc.byte_len, (unsigned long long)size);
			check(buf + half + wc.wr_id * stride, size, wc.wr_id, "SEND data at the server");
			uint64_t next = wc.wr_id + rx_depth;
			if (next < iters) {
				struct ibv_sge sge = {(uintptr_t)buf + half + next * stride, (uint32_t)size, mr->lkey};
				struct ibv_recv_wr wr = {.wr_id = next, .sg_list = &sge, .num_sge = 1}, *bad;
				if (ibv_post_recv(qp, &wr, &bad))
					die("ibv_post_recv failed");
			}
		}
	}
	gettimeofday(&t1, NULL);
	double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_usec - t0.tv_usec) / 1e6;

	if (op != OP_SEND) {
		handshake(&mine, NULL); /* the client is done */
		if (!is_client && op == OP_WRITE)
			for (uint64_t i = 0; i < iters; i++)
				check(buf + half + i * stride, size, i, "WRITE data at the server");
		if (!is_client && op == OP_ATOMIC) {
			uint64_t v;
			memcpy(&v, buf + half, 8);
			if (v != iters)
				fail("the atomic target holds %llu after %llu fetch-and-adds",
				     (unsigned long long)v, (unsigned long long)iters);
		}
	}
	uint8_t verdict = failures == 0, pverdict;
	xchg(&verdict, &pverdict, 1);
	if (op != OP_SEND) {
		/* perftest's bandwidth report: five big-endian 8-byte values. */
		double bw = is_client && secs > 0 ? size * iters / secs / 1048576.0 : 0;
		double rate = is_client && secs > 0 ? iters / secs / 1e6 : 0;
		uint64_t vals[5], in;
		double d[3] = {bw, bw, rate};
		vals[0] = is_client ? size : 0;
		vals[1] = is_client ? iters : 0;
		for (int i = 0; i < 3; i++)
			memcpy(&vals[2 + i], &d[i], 8);
		for (int i = 0; i < 5; i++) {
			uint64_t v = ((uint64_t)htonl(vals[i] & 0xffffffff) << 32) | htonl(vals[i] >> 32);
			xchg(&v, &in, 8);
		}
	}
	handshake(&mine, NULL);
	write_all("done", 5);
	close(sock);

	printf("sr_datacheck %s %s: %llu messages of %llu bytes, %s at this end, %s at the peer\n",
	       argv[1], is_client ? "client" : "server", (unsigned long long)iters,
	       (unsigned long long)size, failures ? "MISMATCH" : "all verified",
	       pverdict == 1 ? "all verified" : "MISMATCH");
	if (failures)
		printf("first mismatch: %s\n", first_failure);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(devs);
	return failures || pverdict != 1;
}
