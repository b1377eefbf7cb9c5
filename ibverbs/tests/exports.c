/* The exports that rdma-core 44 has for features rxe's provider lacks, the query_device_ex op,
 * the capabilities, create_cq's comp_vector check and the uverbs conversion helpers, through
 * the C ABI: compiled against Debian 12's headers, linked as any program is (-libverbs, so the
 * symbols bind at the real library's versions), run with the shim first on LD_LIBRARY_PATH.
 * Prints "ok N checks" and exits 0, or prints the first failed check and exits 1. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <infiniband/sa.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

/* Exported by libibverbs, declared in headers that Debian does not install (marshall.h,
 * driver.h). */
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src);
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src);
int ibv_cmd_alloc_pd(struct ibv_context *context, struct ibv_pd *pd, void *cmd, size_t cmd_size,
		     void *resp, size_t resp_size);
struct ibv_context *verbs_open_device(struct ibv_device *device, void *private_data);

static int checks;

#define CHECK(cond)                                                                          \
	do {                                                                                 \
		checks++;                                                                    \
		if (!(cond)) {                                                               \
			fprintf(stderr, "%s:%d: check failed: %s (errno %d %s)\n", __FILE__, \
				__LINE__, #cond, errno, strerror(errno));                    \
			exit(1);                                                             \
		}                                                                            \
	} while (0)

#define FAILS_NULL(expr, E)                                \
	do {                                               \
		errno = 0;                                 \
		CHECK((expr) == NULL && errno == (E));     \
	} while (0)

static void device_attrs(struct ibv_context *ctx, struct ibv_pd *pd)
{
	struct ibv_device_attr a;
	CHECK(ibv_query_device(ctx, &a) == 0);

	/* The extended query through verbs_context's op, as rxe fills it. */
	struct ibv_device_attr_ex ex;
	memset(&ex, 0xa5, sizeof(ex));
	CHECK(ibv_query_device_ex(ctx, NULL, &ex) == 0);
	CHECK(memcmp(&ex.orig_attr, &a, sizeof(a)) == 0);
	CHECK(ex.phys_port_cnt_ex == 1 && ex.orig_attr.phys_port_cnt == 1);
	/* The legacy flags, and rxe's IBTA 1.5 bits softroce honours (rdma-core 44's headers lack
	 * their names): FLUSH_GLOBAL (1 << 38) and ATOMIC_WRITE (1 << 40), not FLUSH_PERSISTENT. */
	const uint64_t placement = (1ULL << 38) | (1ULL << 40);
	CHECK(ex.device_cap_flags_ex == (a.device_cap_flags | placement));
	/* Beyond rxe (spec-notes/beyond-rxe.md): ODP, device memory, a 1 GHz clock. */
	CHECK(ex.comp_mask == 0 && ex.odp_caps.general_caps == 3 && ex.max_dm_size == 256 << 10);
	CHECK(ex.completion_timestamp_mask == UINT64_MAX && ex.hca_core_clock == 1000000);
	struct ibv_query_device_ex_input in = {.comp_mask = 1};
	CHECK(ibv_query_device_ex(ctx, &in, &ex) == EINVAL);
	/* An older program's shorter struct: nothing written past the size it passes. */
	struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_device_ex);
	CHECK(vctx != NULL);
	unsigned char buf[sizeof(struct ibv_device_attr_ex) + 16];
	size_t short_len = offsetof(struct ibv_device_attr_ex, phys_port_cnt_ex);
	memset(buf, 0x5a, sizeof(buf));
	CHECK(vctx->query_device_ex(ctx, NULL, (void *)buf, short_len) == 0);
	CHECK(buf[short_len] == 0x5a && buf[short_len + 3] == 0x5a);
	CHECK(((struct ibv_device_attr_ex *)buf)->device_cap_flags_ex ==
	      (a.device_cap_flags | placement));
	CHECK(vctx->query_device_ex(ctx, NULL, (void *)buf, sizeof(a) - 1) == EINVAL);
	CHECK(vctx->query_device_ex(NULL, NULL, (void *)buf, sizeof(buf)) == EINVAL);

	/* Capabilities as softroce honours them. */
	CHECK(a.max_srq > 0 && a.max_ah > 0);
	CHECK(a.max_srq_wr == a.max_qp_wr && a.max_srq_sge == a.max_sge);
	/* Memory windows of type 1 and 2B, as rxe. */
	CHECK(a.max_mw > 0);
	CHECK(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
	CHECK(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
	CHECK(a.max_res_rd_atom == 0x3f000);
	struct ibv_port_attr p;
	CHECK(ibv_query_port(ctx, 1, &p) == 0);
	CHECK(p.max_msg_sz == 1u << 31);

	/* An SRQ at the limits it reports is created; one past them is not. */
	struct ibv_srq_init_attr si = {.attr = {.max_wr = a.max_srq_wr, .max_sge = a.max_srq_sge}};
	struct ibv_srq *srq = ibv_create_srq(pd, &si);
	CHECK(srq != NULL);
	/* IBV_DEVICE_SRQ_RESIZE: max_wr changes, within the limit. */
	CHECK(a.device_cap_flags & IBV_DEVICE_SRQ_RESIZE);
	struct ibv_srq_attr sa = {.max_wr = 16};
	CHECK(ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR) == 0);
	CHECK(ibv_query_srq(srq, &sa) == 0 && sa.max_wr >= 16 && sa.max_wr < a.max_srq_wr);
	sa.max_wr = a.max_srq_wr + 1;
	CHECK(ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR) == EINVAL);
	CHECK(ibv_destroy_srq(srq) == 0);
	si.attr.max_wr = a.max_srq_wr + 1;
	FAILS_NULL(ibv_create_srq(pd, &si), EINVAL);
	si.attr.max_wr = 1;
	si.attr.max_sge = a.max_srq_sge + 1;
	FAILS_NULL(ibv_create_srq(pd, &si), EINVAL);
}

static void comp_vectors(struct ibv_context *ctx)
{
	CHECK(ctx->num_comp_vectors == 1);
	FAILS_NULL(ibv_create_cq(ctx, 4, NULL, NULL, ctx->num_comp_vectors), EINVAL);
	FAILS_NULL(ibv_create_cq(ctx, 4, NULL, NULL, -1), EINVAL);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, ctx->num_comp_vectors - 1);
	CHECK(cq != NULL);
	CHECK(ibv_destroy_cq(cq) == 0);
}

static void absent_features(struct ibv_context *ctx, struct ibv_pd *pd)
{
	/* Imports: a non-character fd is EINVAL, a character device no device owns ENODEV. */
	int fds[2];
	CHECK(pipe(fds) == 0);
	FAILS_NULL(ibv_import_device(fds[0]), EINVAL);
	FAILS_NULL(ibv_import_device(-1), EINVAL);
	int null_fd = open("/dev/null", O_RDWR);
	CHECK(null_fd >= 0);
	FAILS_NULL(ibv_import_device(null_fd), ENODEV);
	/* softroce0's own command fd: found, but its provider (as rxe's) cannot import. */
	int own = dup(ctx->cmd_fd);
	CHECK(own >= 0);
	FAILS_NULL(ibv_import_device(own), EOPNOTSUPP);
	close(own);
	close(null_fd);
	close(fds[0]);
	close(fds[1]);
	FAILS_NULL(ibv_import_pd(ctx, 1), EOPNOTSUPP);
	FAILS_NULL(ibv_import_mr(pd, 1), EOPNOTSUPP);
	FAILS_NULL(ibv_import_dm(ctx, 1), EOPNOTSUPP);
	ibv_unimport_pd(pd); /* does nothing: the PD stays usable (dealloc below) */

	FAILS_NULL(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, 0, IBV_ACCESS_LOCAL_WRITE), EOPNOTSUPP);

	/* Re-registration: libibverbs' argument checks, then a new translation under the same
	 * keys (issue 36: rxe answers EOPNOTSUPP; softroce moves the region, as mlx5 does). */
	static char mem[8192];
	struct ibv_mr *mr = ibv_reg_mr(pd, mem, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr != NULL);
	uint32_t lkey = mr->lkey;
	errno = 0;
	CHECK(ibv_rereg_mr(mr, 8, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 4096, 0) ==
		      IBV_REREG_MR_ERR_INPUT &&
	      errno == EINVAL);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, IBV_ACCESS_LOCAL_WRITE) ==
		      IBV_REREG_MR_ERR_INPUT &&
	      errno == EINVAL);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, mem + 4096, 4096, 0) == 0);
	CHECK(mr->addr == (void *)(mem + 4096) && mr->length == 4096 && mr->lkey == lkey);
	struct ibv_mr fake = *mr;
	errno = 0;
	CHECK(ibv_rereg_mr(&fake, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, 0) ==
		      IBV_REREG_MR_ERR_INPUT &&
	      errno == EINVAL);
	CHECK(ibv_dereg_mr(mr) == 0);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, 0) ==
		      IBV_REREG_MR_ERR_INPUT &&
	      errno == EINVAL);

	/* In-order data: not promised, as libibverbs answers for rxe. */
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	CHECK(cq != NULL);
	struct ibv_qp_init_attr qi = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &qi);
	CHECK(qp != NULL);
	CHECK(ibv_query_qp_data_in_order(qp, IBV_WR_RDMA_WRITE, 0) == 0);
	CHECK(ibv_query_qp_data_in_order(qp, IBV_WR_SEND, 0) == 0);
	CHECK(ibv_destroy_qp(qp) == 0);
	CHECK(ibv_destroy_cq(cq) == 0);

	/* The provider interface answers instead of aborting the process. */
	struct ibv_pd dummy;
	errno = 0;
	CHECK(ibv_cmd_alloc_pd(ctx, &dummy, NULL, 0, NULL, 0) == EOPNOTSUPP && errno == EOPNOTSUPP);
	FAILS_NULL(verbs_open_device(ctx->device, NULL), EOPNOTSUPP);
	/* ibv_register_driver exists only as the non-default IBVERBS_1.1 version. */
	void *lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
	CHECK(lib != NULL);
	void (*reg)(const char *, void *) = (void (*)(const char *, void *))dlvsym(
		lib, "ibv_register_driver", "IBVERBS_1.1");
	CHECK(reg != NULL);
	reg("old", NULL);
	CHECK(dlvsym(lib, "ibv_rereg_mr", "IBVERBS_1.1") == (void *)ibv_rereg_mr);
	CHECK(dlvsym(lib, "ibv_query_qp_data_in_order", "IBVERBS_1.14") ==
	      (void *)ibv_query_qp_data_in_order);
	dlclose(lib);
}

static void conversions(void)
{
	struct ibv_sa_path_rec rec, back;
	memset(&rec, 0, sizeof(rec));
	for (int i = 0; i < 16; i++) {
		rec.dgid.raw[i] = i;
		rec.sgid.raw[i] = 0x80 + i;
	}
	rec.dlid = 0x1234;
	rec.slid = 0x5678;
	rec.raw_traffic = 1;
	rec.flow_label = 0xabcde;
	rec.hop_limit = 64;
	rec.traffic_class = 3;
	rec.reversible = 1;
	rec.numb_path = 2;
	rec.pkey = 0xffff;
	rec.sl = 5;
	rec.mtu_selector = 2;
	rec.mtu = IBV_MTU_4096;
	rec.rate_selector = 2;
	rec.rate = IBV_RATE_100_GBPS;
	rec.packet_life_time_selector = 2;
	rec.packet_life_time = 18;
	rec.preference = 1;
	struct ib_user_path_rec k;
	memset(&k, 0, sizeof(k));
	ibv_copy_path_rec_to_kern(&k, &rec);
	CHECK(memcmp(k.dgid, rec.dgid.raw, 16) == 0 && memcmp(k.sgid, rec.sgid.raw, 16) == 0);
	CHECK(k.dlid == 0x1234 && k.slid == 0x5678 && k.flow_label == 0xabcde && k.mtu == IBV_MTU_4096);
	CHECK(k.reversible == 1 && k.pkey == 0xffff && k.sl == 5 && k.packet_life_time == 18);
	memset(&back, 0, sizeof(back));
	ibv_copy_path_rec_from_kern(&back, &k);
	CHECK(memcmp(&back, &rec, sizeof(rec)) == 0);

	struct ib_uverbs_qp_attr kq;
	memset(&kq, 0, sizeof(kq));
	kq.qp_state = IBV_QPS_RTS;
	kq.cur_qp_state = IBV_QPS_RTR;
	kq.path_mtu = IBV_MTU_1024;
	kq.qkey = 0x11111111;
	kq.dest_qp_num = 0x123456;
	kq.max_send_wr = 7;
	kq.max_inline_data = 64;
	kq.ah_attr.grh.dgid[15] = 9;
	kq.ah_attr.grh.sgid_index = 1;
	kq.ah_attr.is_global = 1;
	kq.ah_attr.port_num = 1;
	kq.alt_ah_attr.dlid = 0x42;
	kq.pkey_index = 3;
	kq.timeout = 14;
	kq.alt_timeout = 15;
	struct ibv_qp_attr q;
	memset(&q, 0, sizeof(q));
	q.qp_state = IBV_QPS_SQD; /* rdma-core leaves qp_state and rate_limit as they were */
	q.rate_limit = 77;
	ibv_copy_qp_attr_from_kern(&q, &kq);
	CHECK(q.qp_state == IBV_QPS_SQD && q.rate_limit == 77);
	CHECK(q.cur_qp_state == IBV_QPS_RTR && q.path_mtu == IBV_MTU_1024 && q.qkey == 0x11111111);
	CHECK(q.dest_qp_num == 0x123456 && q.cap.max_send_wr == 7 && q.cap.max_inline_data == 64);
	CHECK(q.ah_attr.grh.dgid.raw[15] == 9 && q.ah_attr.grh.sgid_index == 1);
	CHECK(q.ah_attr.is_global == 1 && q.ah_attr.port_num == 1 && q.alt_ah_attr.dlid == 0x42);
	CHECK(q.pkey_index == 3 && q.timeout == 14 && q.alt_timeout == 15);
	struct ibv_ah_attr ah;
	memset(&ah, 0xff, sizeof(ah));
	ibv_copy_ah_attr_from_kern(&ah, &kq.ah_attr);
	CHECK(ah.grh.dgid.raw[15] == 9 && ah.grh.dgid.raw[0] == 0 && ah.dlid == 0 && ah.sl == 0);
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list != NULL && n == 1);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx != NULL);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL);

	device_attrs(ctx, pd);
	comp_vectors(ctx);
	absent_features(ctx, pd);
	conversions();

	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);
	printf("ok %d checks\n", checks);
	return 0;
}
