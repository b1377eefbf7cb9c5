/* rdma_create_srq_ex under the shim, as librdmacm's (cma.c): the attributes must name the
 * type; without a PD the identifier's is taken; an XRC SRQ without a domain or a CQ gets
 * rdma_cm's XRC domain and a receive CQ the identifier keeps until rdma_destroy_srq; a basic
 * and a tag-matching SRQ go to ibv_create_srq_ex as they are. Prints "ok N" (N checks) or the
 * first failure, and exits 0 only if every check passed. */
#include <infiniband/verbs.h>
#include <rdma/rdma_verbs.h>

#include "rdmacm_common.h"

int main(int argc, char **argv)
{
	const char *ip = argc > 1 ? argv[1] : "127.0.0.1";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch != NULL, "create_event_channel");
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create_id");
	struct ibv_srq_init_attr_ex a;

	/* Not on a device yet, or no type: EINVAL. */
	memset(&a, 0, sizeof a);
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE;
	errno = 0;
	CHECK(rdma_create_srq_ex(id, &a) == -1 && errno == EINVAL, "unbound identifier");
	struct sockaddr_in here = sin_of(ip, 7392);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&here) == 0, "bind");
	memset(&a, 0, sizeof a);
	a.attr.max_wr = 16;
	a.attr.max_sge = 1;
	errno = 0;
	CHECK(rdma_create_srq_ex(id, &a) == -1 && errno == EINVAL, "no type");

	/* A basic SRQ on the PD the attributes name (the identifier keeps the PD rdma_cm gave it
	 * at bind, as librdmacm's does). */
	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	CHECK(pd != NULL, "alloc_pd");
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
	a.srq_type = IBV_SRQT_BASIC;
	a.pd = pd;
	CHECK(rdma_create_srq_ex(id, &a) == 0, "basic srq");
	CHECK(id->srq != NULL && id->srq->pd == pd, "the identifier has the SRQ, on that PD");
	CHECK(id->pd != NULL && id->pd != pd, "rdma_cm's PD of the device kept");
	struct ibv_recv_wr wr = { .wr_id = 1 }, *bad;
	CHECK(ibv_post_srq_recv(id->srq, &wr, &bad) == 0, "post to the SRQ");
	rdma_destroy_srq(id);
	CHECK(id->srq == NULL, "destroy_srq");

	/* rdma_create_srq goes the same way, a basic SRQ on a basic identifier, its sizes
	 * written back. */
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 5, .max_sge = 1 } };
	CHECK(rdma_create_srq(id, pd, &sa) == 0, "rdma_create_srq");
	CHECK(id->srq != NULL && id->srq->pd == pd && sa.attr.max_wr >= 5, "its SRQ and sizes");
	rdma_destroy_srq(id);
	CHECK(id->srq == NULL, "destroy_srq");

	/* An XRC SRQ with neither domain nor CQ: rdma_cm's domain, a receive CQ of its own. */
	memset(&a, 0, sizeof a);
	a.attr.max_wr = 8;
	a.attr.max_sge = 1;
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE;
	a.srq_type = IBV_SRQT_XRC;
	CHECK(rdma_create_srq_ex(id, &a) == 0, "xrc srq");
	CHECK(id->srq != NULL && id->recv_cq != NULL && id->recv_cq_channel != NULL,
	      "the SRQ and its receive CQ");
	CHECK(a.xrcd != NULL && a.cq == id->recv_cq && a.pd == id->pd, "the defaults written back");
	uint32_t num = 0;
	CHECK(ibv_get_srq_num(id->srq, &num) == 0 && num != 0, "an XRC SRQ number");
	rdma_destroy_srq(id);
	CHECK(id->srq == NULL && id->recv_cq == NULL && id->recv_cq_channel == NULL,
	      "destroy_srq frees the CQ it made");

	/* A tag-matching SRQ goes through as ibv_create_srq_ex takes it. */
	struct ibv_device_attr_ex dev;
	CHECK(ibv_query_device_ex(id->verbs, NULL, &dev) == 0, "query_device_ex");
	if (dev.tm_caps.max_num_tags > 0) {
		struct ibv_cq *cq = ibv_create_cq(id->verbs, 16, NULL, NULL, 0);
		CHECK(cq != NULL, "create_cq");
		memset(&a, 0, sizeof a);
		a.attr.max_wr = 8;
		a.attr.max_sge = 1;
		a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
		a.srq_type = IBV_SRQT_TM;
		a.cq = cq;
		a.tm_cap.max_num_tags = 4;
		a.tm_cap.max_ops = 4;
		CHECK(rdma_create_srq_ex(id, &a) == 0, "tag-matching srq");
		CHECK(id->srq != NULL, "the identifier has it");
		rdma_destroy_srq(id);
		CHECK(ibv_destroy_cq(cq) == 0, "destroy_cq");
	}

	CHECK(rdma_destroy_id(id) == 0, "destroy_id");
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
	rdma_destroy_event_channel(ch);
	printf("ok %d\n", checks);
	return 0;
}
