/*
 * Two devices in one process (`softroce run --bind A --bind B`), as on a host with two rxe
 * devices: the device list holds softroce0 and softroce1 with the GUIDs and GIDs of their
 * addresses, each opens an engine at its own address (its UDP socket is there), and an RC QP
 * on each, connected to the other inside the process, moves data both ways: SENDs, RDMA
 * WRITEs and an RDMA READ, every byte checked.
 *
 * usage: two_devices A B [UDP-PORT]   (A, B: the IPv4 addresses given to --bind, in order;
 * UDP-PORT: their port, 4791 unless given). Prints "ok N" (N checks) or the first failure.
 */
#include <arpa/inet.h>
#include <endian.h>

#include "common.h"

#define MSG 8192

struct dev {
	struct ibv_context *ctx;
	union ibv_gid gid;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	unsigned char *buf;
};

/* Whether a UDP socket on this host is bound to `ip`:`port` (/proc/net/udp). */
static int udp_bound(const char *ip, unsigned port)
{
	struct in_addr a;
	CHECK(inet_pton(AF_INET, ip, &a) == 1);
	char want[32];
	/* /proc/net/udp prints the address as the host-order value of the network-order word. */
	snprintf(want, sizeof want, "%08X:%04X", a.s_addr, port);
	FILE *f = fopen("/proc/net/udp", "r");
	CHECK(f != NULL);
	char line[512];
	int found = 0;
	while (fgets(line, sizeof line, f)) {
		char local[64];
		if (sscanf(line, " %*s %63s", local) == 1 && strcmp(local, want) == 0)
			found = 1;
	}
	fclose(f);
	return found;
}

/* Moves `qp` to RTS towards QP `dest` at `dgid` (GID index 1: the IPv4-mapped address). */
static void connect_rc(struct ibv_qp *qp, uint32_t dest, union ibv_gid dgid)
{
	rc_to_rts_at(qp, dest, dgid,
		     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, 4);
}

/* Fills `n` bytes at `p` with a pattern of `seed`. */
static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 7 + seed * 131 + (i >> 8));
}

/* Whether `n` bytes at `p` hold the pattern of `seed`. */
static int holds(const unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (unsigned char)(i * 7 + seed * 131 + (i >> 8)))
			return 0;
	return 1;
}

static void post_recv(struct dev *d, size_t off, size_t len)
{
	struct ibv_sge sge = { (uintptr_t)d->buf + off, (uint32_t)len, d->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 0x5ec, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(ibv_post_recv(d->qp, &wr, &bad) == 0);
}

/* Posts one signaled work request from `d` (`len` bytes of its buffer at `off`), and for a
 * WRITE or READ the remote region `raddr`/`rkey`; waits for its completion. */
static void post1(struct dev *d, enum ibv_wr_opcode op, size_t off, size_t len, uint64_t raddr,
		  uint32_t rkey)
{
	struct ibv_sge sge = { (uintptr_t)d->buf + off, (uint32_t)len, d->mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = op,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	CHECK(ibv_post_send(d->qp, &wr, &bad) == 0);
	struct ibv_wc wc = poll1(d->cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)op);
}

int main(int argc, char **argv)
{
	CHECK(argc >= 3);
	const char *ip[2] = { argv[1], argv[2] };
	unsigned port = argc > 3 ? (unsigned)atoi(argv[3]) : 4791;

	/* The list: two devices, named and numbered in the order of the addresses. */
	int n = -1;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list != NULL && n == 2 && list[0] && list[1] && list[2] == NULL);
	CHECK(list[0] != list[1]);
	struct dev d[2];
	memset(d, 0, sizeof d);
	for (int i = 0; i < 2; i++) {
		char name[16];
		snprintf(name, sizeof name, "softroce%d", i);
		CHECK(strcmp(ibv_get_device_name(list[i]), name) == 0);
		CHECK(ibv_get_device_index(list[i]) == i);
		char dev_name[32];
		snprintf(dev_name, sizeof dev_name, "uverbs_%s", name);
		CHECK(strcmp(list[i]->dev_name, dev_name) == 0);
		char path[64];
		snprintf(path, sizeof path, "/sys/class/infiniband/%s", name);
		CHECK(strcmp(list[i]->ibdev_path, path) == 0);
		/* The GUID: the EUI-64 of the MAC 02:00:a:b:c:d of address a.b.c.d. */
		struct in_addr a;
		CHECK(inet_pton(AF_INET, ip[i], &a) == 1);
		const unsigned char *o = (const unsigned char *)&a.s_addr;
		uint64_t want = ((uint64_t)o[0] << 40) | 0xfffeULL << 24 | (uint64_t)o[1] << 16 |
				(uint64_t)o[2] << 8 | o[3];
		CHECK(be64toh(ibv_get_device_guid(list[i])) == want);
	}
	CHECK(ibv_get_device_guid(list[0]) != ibv_get_device_guid(list[1]));

	/* Each opens on its own device, with that device's GIDs and attributes. */
	for (int i = 0; i < 2; i++) {
		d[i].ctx = ibv_open_device(list[i]);
		CHECK(d[i].ctx != NULL && d[i].ctx->device == list[i]);
		struct ibv_device_attr attr;
		CHECK(ibv_query_device(d[i].ctx, &attr) == 0);
		CHECK(attr.node_guid == ibv_get_device_guid(list[i]));
		CHECK(attr.phys_port_cnt == 1);
		struct ibv_port_attr pa;
		CHECK(ibv_query_port(d[i].ctx, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE);
		CHECK(ibv_query_gid(d[i].ctx, 1, 1, &d[i].gid) == 0);
		unsigned char mapped[16] = { [10] = 0xff, [11] = 0xff };
		CHECK(inet_pton(AF_INET, ip[i], mapped + 12) == 1);
		CHECK(memcmp(d[i].gid.raw, mapped, 16) == 0);
		union ibv_gid g0;
		CHECK(ibv_query_gid(d[i].ctx, 1, 0, &g0) == 0 && memcmp(g0.raw, mapped, 16) == 0);
	}
	/* A second context of a device is of the same device. */
	struct ibv_context *again = ibv_open_device(list[1]);
	CHECK(again != NULL && again->device == list[1]);
	union ibv_gid g;
	CHECK(ibv_query_gid(again, 1, 1, &g) == 0 && memcmp(g.raw, d[1].gid.raw, 16) == 0);
	CHECK(ibv_close_device(again) == 0);

	for (int i = 0; i < 2; i++) {
		d[i].pd = ibv_alloc_pd(d[i].ctx);
		CHECK(d[i].pd != NULL);
		d[i].cq = ibv_create_cq(d[i].ctx, 16, NULL, NULL, 0);
		CHECK(d[i].cq != NULL);
		d[i].buf = calloc(1, 4 * MSG);
		CHECK(d[i].buf != NULL);
		d[i].mr = ibv_reg_mr(d[i].pd, d[i].buf, 4 * MSG,
				     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					     IBV_ACCESS_REMOTE_READ);
		CHECK(d[i].mr != NULL);
		struct ibv_qp_init_attr qa = {
			.send_cq = d[i].cq,
			.recv_cq = d[i].cq,
			.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
				 .max_recv_sge = 1 },
			.qp_type = IBV_QPT_RC,
		};
		d[i].qp = ibv_create_qp(d[i].pd, &qa);
		CHECK(d[i].qp != NULL && d[i].qp->context == d[i].ctx);
	}
	/* Objects of one device are not the other's: a QP on device 1 with device 0's CQ. */
	struct ibv_qp_init_attr cross = {
		.send_cq = d[0].cq,
		.recv_cq = d[0].cq,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	errno = 0;
	CHECK(ibv_create_qp(d[1].pd, &cross) == NULL && errno == EINVAL);

	/* Each device's engine has its own socket, at its own address. */
	CHECK(udp_bound(ip[0], port));
	CHECK(udp_bound(ip[1], port));

	connect_rc(d[0].qp, d[1].qp->qp_num, d[1].gid);
	connect_rc(d[1].qp, d[0].qp->qp_num, d[0].gid);

	/* SEND from device 0 to device 1, and back. */
	for (int from = 0; from < 2; from++) {
		struct dev *s = &d[from], *r = &d[1 - from];
		memset(r->buf, 0, MSG);
		post_recv(r, 0, MSG);
		fill(s->buf + MSG, MSG, 10 + from);
		post1(s, IBV_WR_SEND, MSG, MSG, 0, 0);
		struct ibv_wc wc = poll1(r->cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV);
		CHECK(wc.byte_len == MSG && wc.wr_id == 0x5ec && wc.qp_num == r->qp->qp_num);
		CHECK(wc.src_qp == s->qp->qp_num);
		CHECK(holds(r->buf, MSG, 10 + from));
	}

	/* RDMA WRITE from each into the other's region. */
	for (int from = 0; from < 2; from++) {
		struct dev *s = &d[from], *r = &d[1 - from];
		memset(r->buf + 2 * MSG, 0, MSG);
		fill(s->buf + MSG, MSG, 20 + from);
		post1(s, IBV_WR_RDMA_WRITE, MSG, MSG, (uintptr_t)r->buf + 2 * MSG, r->mr->rkey);
		CHECK(holds(r->buf + 2 * MSG, MSG, 20 + from));
	}

	/* RDMA READ by each of the other's region. */
	for (int from = 0; from < 2; from++) {
		struct dev *s = &d[from], *r = &d[1 - from];
		fill(r->buf + 3 * MSG, MSG, 30 + from);
		memset(s->buf, 0, MSG);
		post1(s, IBV_WR_RDMA_READ, 0, MSG, (uintptr_t)r->buf + 3 * MSG, r->mr->rkey);
		CHECK(holds(s->buf, MSG, 30 + from));
	}

	for (int i = 0; i < 2; i++) {
		CHECK(ibv_destroy_qp(d[i].qp) == 0);
		CHECK(ibv_dereg_mr(d[i].mr) == 0);
		CHECK(ibv_destroy_cq(d[i].cq) == 0);
		CHECK(ibv_dealloc_pd(d[i].pd) == 0);
		CHECK(ibv_close_device(d[i].ctx) == 0);
		free(d[i].buf);
	}
	ibv_free_device_list(list);
	printf("ok %ld\n", checks);
	return 0;
}
