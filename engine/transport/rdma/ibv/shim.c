// The libibverbs shim (see shim.h). Compiled by cgo into the library.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "shim.h"

#pragma GCC visibility push(hidden)

// The entry points, resolved once by kvf_ibv_load (Go serializes the call).
// Their types are verbs_abi.h's, checked against rdma-core's prototypes by
// the layout test.
static struct {
	void *handle;
	kvf_ibv_get_device_list_fn get_device_list;
	kvf_ibv_free_device_list_fn free_device_list;
	kvf_ibv_get_device_name_fn get_device_name;
	kvf_ibv_open_device_fn open_device;
	kvf_ibv_close_device_fn close_device;
	kvf_ibv_query_device_fn query_device;
	kvf_ibv_query_port_fn query_port;
	kvf_ibv_query_gid_fn query_gid;
	kvf_ibv_query_gid_ex_fn query_gid_ex;
	kvf_ibv_alloc_pd_fn alloc_pd;
	kvf_ibv_dealloc_pd_fn dealloc_pd;
	kvf_ibv_reg_mr_fn reg_mr;
	kvf_ibv_reg_mr_iova2_fn reg_mr_iova2;
	kvf_ibv_reg_dmabuf_mr_fn reg_dmabuf_mr;
	kvf_ibv_dereg_mr_fn dereg_mr;
	kvf_ibv_create_comp_channel_fn create_comp_channel;
	kvf_ibv_destroy_comp_channel_fn destroy_comp_channel;
	kvf_ibv_create_cq_fn create_cq;
	kvf_ibv_destroy_cq_fn destroy_cq;
	kvf_ibv_get_cq_event_fn get_cq_event;
	kvf_ibv_ack_cq_events_fn ack_cq_events;
	kvf_ibv_create_qp_fn create_qp;
	kvf_ibv_modify_qp_fn modify_qp;
	kvf_ibv_query_qp_fn query_qp;
	kvf_ibv_destroy_qp_fn destroy_qp;
	kvf_ibv_get_async_event_fn get_async_event;
	kvf_ibv_ack_async_event_fn ack_async_event;
} T;

#pragma GCC visibility pop

// The extended context around ctx, or NULL when the provider allocated a
// plain one (verbs.h's verbs_get_ctx).
static struct verbs_context *ext_ctx(struct ibv_context *ctx) {
	if (ctx->abi_compat != KVF_VERBS_ABI_IS_EXTENDED) return NULL;
	return (struct verbs_context *)((char *)ctx - offsetof(struct verbs_context, context));
}

static void *sym(const char *name) { return dlsym(T.handle, name); }

int kvf_ibv_load(const char *path, char *err, int errlen) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(err, errlen, "%s", dlerror());
		return -1;
	}
	T.handle = h;
#define REQ(field, name)                                                   \
	do {                                                                   \
		*(void **)&T.field = sym(name);                                    \
		if (!T.field) {                                                    \
			snprintf(err, errlen, "%s: missing symbol %s", path, name);   \
			return -1;                                                     \
		}                                                                  \
	} while (0)
	REQ(get_device_list, "ibv_get_device_list");
	REQ(free_device_list, "ibv_free_device_list");
	REQ(get_device_name, "ibv_get_device_name");
	REQ(open_device, "ibv_open_device");
	REQ(close_device, "ibv_close_device");
	REQ(query_device, "ibv_query_device");
	REQ(query_port, "ibv_query_port");
	REQ(query_gid, "ibv_query_gid");
	REQ(alloc_pd, "ibv_alloc_pd");
	REQ(dealloc_pd, "ibv_dealloc_pd");
	REQ(reg_mr, "ibv_reg_mr");
	REQ(dereg_mr, "ibv_dereg_mr");
	REQ(create_comp_channel, "ibv_create_comp_channel");
	REQ(destroy_comp_channel, "ibv_destroy_comp_channel");
	REQ(create_cq, "ibv_create_cq");
	REQ(destroy_cq, "ibv_destroy_cq");
	REQ(get_cq_event, "ibv_get_cq_event");
	REQ(ack_cq_events, "ibv_ack_cq_events");
	REQ(create_qp, "ibv_create_qp");
	REQ(modify_qp, "ibv_modify_qp");
	REQ(query_qp, "ibv_query_qp");
	REQ(destroy_qp, "ibv_destroy_qp");
	REQ(get_async_event, "ibv_get_async_event");
	REQ(ack_async_event, "ibv_ack_async_event");
#undef REQ
	*(void **)&T.query_gid_ex = sym("_ibv_query_gid_ex");
	*(void **)&T.reg_mr_iova2 = sym("ibv_reg_mr_iova2");
	*(void **)&T.reg_dmabuf_mr = sym("ibv_reg_dmabuf_mr");
	return 0;
}

int kvf_ibv_has_dmabuf(void) { return T.reg_dmabuf_mr != NULL; }
int kvf_ibv_has_gid_ex(void) { return T.query_gid_ex != NULL; }

// Writes the device names, one per line, into buf; returns their count, or
// -errno when the list cannot be read (ENOSYS: no RDMA in this kernel).
int kvf_ibv_device_names(char *buf, int buflen) {
	int n = 0;
	errno = 0;
	struct ibv_device **l = T.get_device_list(&n);
	if (!l) return errno ? -errno : -ENODEV;
	int off = 0;
	buf[0] = 0;
	for (int i = 0; i < n; i++) {
		int w = snprintf(buf + off, buflen - off, "%s\n", T.get_device_name(l[i]));
		if (w < 0 || w >= buflen - off) { n = i; break; }
		off += w;
	}
	T.free_device_list(l);
	return n;
}

struct ibv_context *kvf_ibv_open(const char *name) {
	int n = 0;
	struct ibv_device **l = T.get_device_list(&n);
	if (!l) return NULL;
	struct ibv_context *c = NULL;
	errno = ENODEV;
	for (int i = 0; i < n; i++) {
		if (strcmp(T.get_device_name(l[i]), name) == 0) {
			c = T.open_device(l[i]);
			break;
		}
	}
	int saved = errno;
	T.free_device_list(l);
	errno = saved;
	return c;
}

int kvf_ibv_close(struct ibv_context *ctx) { return T.close_device(ctx); }
int kvf_ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr) { return T.query_device(ctx, attr); }
// As verbs.h's inline ibv_query_port: the extended context's query_port
// when the provider's verbs_context reaches that far and sets it, else the
// exported call over a zeroed struct.
int kvf_ibv_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr) {
	struct verbs_context *v = ext_ctx(ctx);
	if (v && v->sz >= sizeof(*v) - offsetof(struct verbs_context, query_port) && v->query_port)
		return v->query_port(ctx, port, attr, sizeof(*attr));
	memset(attr, 0, sizeof(*attr));
	return T.query_port(ctx, port, (struct _compat_ibv_port_attr *)attr);
}
// ibv_query_gid fails with -1 and errno (rdma-core's convention for it),
// not with the errno as most verbs do: the errno is returned.
int kvf_ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, uint8_t gid[16]) {
	union ibv_gid g;
	errno = 0;
	int rc = T.query_gid(ctx, port, index, &g);
	if (rc == 0) memcpy(gid, g.raw, 16);
	else if (rc < 0) rc = errno ? errno : EINVAL;
	return rc;
}
int kvf_ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, int index, uint32_t *type, uint32_t *ifindex) {
	struct ibv_gid_entry e;
	if (!T.query_gid_ex) return EOPNOTSUPP;
	int rc = T.query_gid_ex(ctx, port, index, &e, 0, sizeof(e));
	if (rc == 0) {
		*type = e.gid_type;
		*ifindex = e.ndev_ifindex;
	}
	return rc;
}
int kvf_ibv_async_fd(struct ibv_context *ctx) { return ctx->async_fd; }
int kvf_ibv_num_comp_vectors(struct ibv_context *ctx) { return ctx->num_comp_vectors; }
struct ibv_pd *kvf_ibv_alloc_pd(struct ibv_context *ctx) { return T.alloc_pd(ctx); }
int kvf_ibv_dealloc_pd(struct ibv_pd *pd) { return T.dealloc_pd(pd); }
// As verbs.h's ibv_reg_mr with access flags not known at compile time:
// ibv_reg_mr_iova2 with iova == addr, so that optional flags (relaxed
// ordering) are allowed; libraries before IBVERBS_1.8 lack it, and get the
// plain call without the optional flags.
struct ibv_mr *kvf_ibv_reg_mr(struct ibv_pd *pd, uint64_t addr, uint64_t length, int access) {
	void *p = (void *)(uintptr_t)addr;
	if (!T.reg_mr_iova2) return T.reg_mr(pd, p, length, access & ~IBV_ACCESS_OPTIONAL_RANGE);
	return T.reg_mr_iova2(pd, p, length, addr, (unsigned int)access);
}
struct ibv_mr *kvf_ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, uint64_t length, uint64_t iova, int fd, int access) {
	if (!T.reg_dmabuf_mr) { errno = EOPNOTSUPP; return NULL; }
	return T.reg_dmabuf_mr(pd, offset, length, iova, fd, access);
}
int kvf_ibv_dereg_mr(struct ibv_mr *mr) { return T.dereg_mr(mr); }
uint32_t kvf_ibv_mr_lkey(struct ibv_mr *mr) { return mr->lkey; }
uint32_t kvf_ibv_mr_rkey(struct ibv_mr *mr) { return mr->rkey; }
struct ibv_comp_channel *kvf_ibv_create_comp_channel(struct ibv_context *ctx) { return T.create_comp_channel(ctx); }
int kvf_ibv_destroy_comp_channel(struct ibv_comp_channel *ch) { return T.destroy_comp_channel(ch); }
int kvf_ibv_comp_channel_fd(struct ibv_comp_channel *ch) { return ch->fd; }
struct ibv_cq *kvf_ibv_create_cq(struct ibv_context *ctx, int cqe, struct ibv_comp_channel *ch, int vector) {
	return T.create_cq(ctx, cqe, NULL, ch, vector);
}
int kvf_ibv_destroy_cq(struct ibv_cq *cq) { return T.destroy_cq(cq); }
int kvf_ibv_req_notify_cq(struct ibv_cq *cq) { return cq->context->ops.req_notify_cq(cq, 0); }

// Takes one completion event from the (non-blocking) channel and
// acknowledges it: 1 when there was one, 0 when none, -errno on error.
int kvf_ibv_get_cq_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq;
	void *cq_ctx;
	if (T.get_cq_event(ch, &cq, &cq_ctx) != 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
		return -errno;
	}
	T.ack_cq_events(cq, 1);
	return 1;
}

int kvf_ibv_poll_cq(struct ibv_cq *cq, int n, struct kvf_wc *out) {
	struct ibv_wc wc[64];
	if (n > 64) n = 64;
	int got = cq->context->ops.poll_cq(cq, n, wc);
	for (int i = 0; i < got; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].vendor_err = wc[i].vendor_err;
		out[i].byte_len = wc[i].byte_len;
		out[i].qp_num = wc[i].qp_num;
		out[i].imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? __builtin_bswap32(wc[i].imm_data) : 0;
		out[i].wc_flags = wc[i].wc_flags;
		out[i].src_qp = wc[i].src_qp;
	}
	return got;
}

struct ibv_qp *kvf_ibv_create_qp(struct ibv_pd *pd, struct ibv_cq *send_cq, struct ibv_cq *recv_cq,
                                 uint32_t max_send_wr, uint32_t max_recv_wr, uint32_t max_sge,
                                 uint32_t max_inline, uint32_t *inline_out) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof(a));
	a.send_cq = send_cq;
	a.recv_cq = recv_cq;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 0;
	a.cap.max_send_wr = max_send_wr;
	a.cap.max_recv_wr = max_recv_wr;
	a.cap.max_send_sge = max_sge;
	a.cap.max_recv_sge = max_sge;
	a.cap.max_inline_data = max_inline;
	struct ibv_qp *qp = T.create_qp(pd, &a);
	if (qp) *inline_out = a.cap.max_inline_data;
	return qp;
}
int kvf_ibv_destroy_qp(struct ibv_qp *qp) { return T.destroy_qp(qp); }
uint32_t kvf_ibv_qp_num(struct ibv_qp *qp) { return qp->qp_num; }

int kvf_ibv_qp_to_init(struct ibv_qp *qp, uint8_t port, uint16_t pkey_index, int access) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = port;
	a.pkey_index = pkey_index;
	a.qp_access_flags = access;
	return T.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int kvf_ibv_qp_to_rtr(struct ibv_qp *qp, const struct kvf_rtr *r) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = (enum ibv_mtu)r->path_mtu;
	memcpy(a.ah_attr.grh.dgid.raw, r->dgid, 16);
	a.ah_attr.grh.sgid_index = r->sgid_index;
	a.ah_attr.grh.hop_limit = r->hop_limit;
	a.ah_attr.grh.traffic_class = r->traffic_class;
	a.ah_attr.dlid = r->dlid;
	a.ah_attr.sl = r->sl;
	a.ah_attr.is_global = r->is_global;
	a.ah_attr.port_num = r->port_num;
	a.dest_qp_num = r->dest_qp_num;
	a.rq_psn = r->rq_psn;
	a.max_dest_rd_atomic = r->max_dest_rd_atomic;
	a.min_rnr_timer = r->min_rnr_timer;
	return T.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV |
	                               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN);
}

int kvf_ibv_qp_to_rts(struct ibv_qp *qp, uint8_t timeout, uint8_t retry_cnt, uint8_t rnr_retry,
                      uint32_t sq_psn, uint8_t max_rd_atomic) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = timeout;
	a.retry_cnt = retry_cnt;
	a.rnr_retry = rnr_retry;
	a.sq_psn = sq_psn;
	a.max_rd_atomic = max_rd_atomic;
	return T.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
	                               IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

int kvf_ibv_qp_to_state(struct ibv_qp *qp, int state) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = (enum ibv_qp_state)state;
	return T.modify_qp(qp, &a, IBV_QP_STATE);
}

int kvf_ibv_qp_state(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int rc = T.query_qp(qp, &a, IBV_QP_STATE, &ia);
	if (rc) return -rc;
	return a.qp_state;
}

// Posts n work requests as one chain (one doorbell). On failure *bad is the
// index of the first request not posted.
int kvf_ibv_post_send(struct ibv_qp *qp, const struct kvf_wr *w, int n, int *bad) {
	struct ibv_send_wr wr[256];
	struct ibv_sge sge[256];
	if (n <= 0 || n > 256) { *bad = 0; return EINVAL; }
	memset(wr, 0, sizeof(struct ibv_send_wr) * n);
	for (int i = 0; i < n; i++) {
		sge[i].addr = w[i].local_addr;
		sge[i].length = w[i].length;
		sge[i].lkey = w[i].lkey;
		wr[i].wr_id = w[i].wr_id;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = w[i].length ? 1 : 0;
		wr[i].opcode = (enum ibv_wr_opcode)w[i].opcode;
		wr[i].send_flags = (w[i].signaled ? IBV_SEND_SIGNALED : 0) | (w[i].inline_data ? IBV_SEND_INLINE : 0);
		wr[i].imm_data = __builtin_bswap32(w[i].imm);
		wr[i].wr.rdma.remote_addr = w[i].remote_addr;
		wr[i].wr.rdma.rkey = w[i].rkey;
	}
	struct ibv_send_wr *b = NULL;
	int rc = qp->context->ops.post_send(qp, wr, &b);
	*bad = rc ? (b ? (int)(b - wr) : 0) : n;
	return rc;
}

int kvf_ibv_post_recv(struct ibv_qp *qp, const struct kvf_recv *w, int n, int *bad) {
	struct ibv_recv_wr wr[64];
	struct ibv_sge sge[64];
	if (n <= 0 || n > 64) { *bad = 0; return EINVAL; }
	memset(wr, 0, sizeof(struct ibv_recv_wr) * n);
	for (int i = 0; i < n; i++) {
		sge[i].addr = w[i].addr;
		sge[i].length = w[i].length;
		sge[i].lkey = w[i].lkey;
		wr[i].wr_id = w[i].wr_id;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = w[i].length ? 1 : 0;
	}
	struct ibv_recv_wr *b = NULL;
	int rc = qp->context->ops.post_recv(qp, wr, &b);
	*bad = rc ? (b ? (int)(b - wr) : 0) : n;
	return rc;
}

// Takes one asynchronous event from the (non-blocking) async fd and
// acknowledges it: 1 when there was one, 0 when none, -errno on error.
int kvf_ibv_get_async_event(struct ibv_context *ctx, struct kvf_async *out) {
	struct ibv_async_event ev;
	if (T.get_async_event(ctx, &ev) != 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
		return -errno;
	}
	out->event_type = ev.event_type;
	out->qp_num = 0;
	out->port_num = 0;
	switch (ev.event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		out->qp_num = ev.element.qp ? ev.element.qp->qp_num : 0;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		out->port_num = ev.element.port_num;
		break;
	default:
		break;
	}
	T.ack_async_event(&ev);
	return 1;
}
