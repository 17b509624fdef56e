// A fake libibverbs provider for kvferry's tests: a test fixture, never a
// transport users can pick. It exports the libibverbs entry points the
// shim in engine/transport/rdma/ibv opens, and its contexts carry an ops
// table (post_send, post_recv, poll_cq, req_notify_cq) that verbs.h's
// inline functions call. Built by the tests into libibverbs.so.1 and loaded
// through KVFERRY_IBVERBS_LIB. Compiled against the shim's own declaration
// of the verbs ABI (engine/transport/rdma/ibv/verbs_abi.h), so no rdma-core
// header is needed.
//
// Model: every process that opens a device is a host with that NIC. Its
// GID (index 1; index 0 is a null entry) encodes the process id, the
// device index and the context's sequence number (two engines in one
// process are two hosts). Each opened device context runs
//   - a responder: a small per-device broker listening on a Unix socket
//     FAKEVERBS_DIR/<pid>-<dev>-<n>.s; it receives requests from peers' QPs,
//     checks the destination QP (state RTR/RTS, connected to the sender),
//     the rkey (same PD, access rights, bounds: else IBV_WC_REM_ACCESS_ERR)
//     and moves the bytes with process_vm_readv/process_vm_writev between
//     the requester's memory and its own registered memory;
//   - a requester thread that executes each QP's send queue in order, as a
//     NIC would, and writes completions (signaled ones, and every error or
//     flush) to the CQ, raising a completion event when the CQ is armed.
// RC READ, WRITE, WRITE_WITH_IMM, SEND (with/without immediate) and RECV
// are implemented; the QP state machine (RESET/INIT/RTR/RTS/ERR) is
// enforced as the verbs specify.
//
// Memory registration checks what the kernel would: ibv_reg_mr pins only
// memory the process may touch (a range that is not mapped readable, and
// writable when the access asks for writes, fails with EFAULT, as GPU memory
// does without a peer-memory module). ibv_reg_dmabuf_mr imports the fake
// libcuda's dma-bufs (tests/fakecuda: a memfd naming the exporter's backing
// memfd, offset and size) by mapping the bytes itself; the MR is addressed
// by its iova and the data path goes through that mapping, as a NIC DMAs
// into GPU memory.
//
// Environment: FAKEVERBS_DEVICES (comma list, default "fake_mlx5_0"; empty:
// no device), FAKEVERBS_DIR (socket directory, default /tmp),
// FAKEVERBS_LIST_ERRNO (make ibv_get_device_list fail with that errno),
// FAKEVERBS_DMABUF=0 (ibv_reg_dmabuf_mr fails with EOPNOTSUPP, as on a
// kernel or provider without dma-buf support), FAKEVERBS_PEERMEM=<libcuda>
// (a peer-memory client: ibv_reg_mr of memory the CPU cannot touch asks
// that already loaded fake libcuda's fakecuda_backing for the bytes, as
// nvidia-peermem asks the GPU driver), FAKEVERBS_MAX_MR_SIZE (the device's
// max_mr_size; larger registrations fail with EINVAL), FAKEVERBS_GIDS (GID
// table length, default 2: index 0 is null, every other index a RoCE v2 GID
// of the port), FAKEVERBS_RTR_EINVAL_GIDS (comma list of source GID indexes
// whose INIT->RTR fails with EINVAL, as a stale GID entry does).
// Fault injection (exported for tests, and through FAKEVERBS_* variables
// read at open): fakeverbs_set_port (port down/up with PORT_ERR/ACTIVE
// events), fakeverbs_fail_next (next completions with an error status),
// fakeverbs_qp_error (force a QP to ERROR with a QP_FATAL event),
// fakeverbs_set_delay_us (a slow device). fakeverbs_bytes reports the bytes
// a device moved as requester.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* The shim's declaration of the verbs ABI, by a path relative to this file,
 * so every builder (fakeverbs.Build, tests/python) needs no -I. */
#include "../../../../engine/transport/rdma/ibv/verbs_abi.h"

#define MAXDEV 8
#define MAXSGE 4
#define DROP (-1) /* responder silently dropped the packet */
#define RNR (-2)  /* responder had no receive posted */

struct fdev {
	struct ibv_device dev;
	int idx;
	atomic_int port_up;
	atomic_int delay_us;
	atomic_int fail_count;
	atomic_int fail_status;
	atomic_ullong bytes;
};

static struct fdev devs[MAXDEV];
static struct ibv_device *devptrs[MAXDEV + 1];
static int ndev;
static char sockdir[80] = "/tmp";
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t G = PTHREAD_MUTEX_INITIALIZER; /* QP, MR and context lists */
static uint32_t next_key;
static uint32_t next_qpn;
static int ngids = 2;              /* GID table length */
static uint32_t rtr_einval_gids;   /* bit i: RTR from source GID i fails */
static uint64_t max_mr_size = 1ull << 40;
static int dmabuf_enabled = 1;
static char peermem_lib[512];

struct fctx;
struct fqp;

struct fmr {
	struct ibv_mr mr;
	int access;
	/* For dma-buf and peer-memory MRs: where the bytes are in this process
	 * (the MR is addressed by mr.addr, its iova); map/map_len is what
	 * ibv_dereg_mr unmaps (dma-buf imports only). */
	char *view;
	void *map;
	size_t map_len;
	struct fmr *next;
};
static struct fmr *mrs;

struct fch {
	struct ibv_comp_channel ch;
	int wfd;
};

struct fcq {
	struct ibv_cq cq;
	pthread_mutex_t mu;
	struct ibv_wc *ring;
	int cap, head, n;
	int armed;
	int overflow;
};

struct fwr {
	uint64_t wr_id;
	int opcode;
	int flags;
	uint32_t imm; /* network order, as in the WR */
	int nsge;
	struct ibv_sge sge[MAXSGE];
	uint64_t raddr;
	uint32_t rkey;
};

struct frecv {
	uint64_t wr_id;
	int nsge;
	struct ibv_sge sge[MAXSGE];
};

struct fqp {
	struct ibv_qp qp;
	struct fctx *c;
	pthread_mutex_t mu;
	int access;
	uint8_t port;
	uint8_t sgid_index;
	uint32_t dest_qpn;
	union ibv_gid dgid;
	int timeout, retry_cnt, rnr_retry;
	int sig_all;
	uint32_t max_send, max_recv, max_sge;
	struct fwr *sq;
	uint32_t sq_head, sq_n;
	struct frecv *rq;
	uint32_t rq_head, rq_n;
	int busy;
	int remote_fd;
	int dead;
	pthread_cond_t idle;
	struct fqp *next;
};
static struct fqp *qps;

struct fctx {
	struct ibv_context ctx;
	struct fdev *d;
	union ibv_gid gid;
	int listen_fd;
	char sock[108];
	int async_w;
	pthread_t resp, req;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop;
	int work; /* pending WRs on this context's QPs */
	struct fctx *next;
};
static struct fctx *ctxs;

struct req {
	uint32_t op, dst_qpn, src_qpn, rkey, len, imm, nsge;
	int32_t pid;
	uint8_t src_gid[16];
	uint64_t raddr;
	struct { uint64_t addr; uint32_t len, pad; } sge[MAXSGE];
};

static void init(void) {
	const char *d = getenv("FAKEVERBS_DIR");
	if (d && *d) snprintf(sockdir, sizeof(sockdir), "%s", d);
	const char *l = getenv("FAKEVERBS_DEVICES");
	if (!l) l = "fake_mlx5_0";
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", l);
	char *save = NULL;
	for (char *t = strtok_r(buf, ",", &save); t && ndev < MAXDEV; t = strtok_r(NULL, ",", &save)) {
		if (!*t) continue;
		struct fdev *f = &devs[ndev];
		f->idx = ndev;
		atomic_store(&f->port_up, 1);
		f->dev.node_type = IBV_NODE_CA;
		f->dev.transport_type = IBV_TRANSPORT_IB;
		snprintf(f->dev.name, sizeof(f->dev.name), "%s", t);
		snprintf(f->dev.dev_name, sizeof(f->dev.dev_name), "uverbs%d", ndev);
		snprintf(f->dev.dev_path, sizeof(f->dev.dev_path), "/sys/class/infiniband_verbs/uverbs%d", ndev);
		snprintf(f->dev.ibdev_path, sizeof(f->dev.ibdev_path), "/sys/class/infiniband/%s", t);
		devptrs[ndev] = &f->dev;
		ndev++;
	}
	const char *g = getenv("FAKEVERBS_GIDS");
	if (g && atoi(g) >= 2 && atoi(g) <= 16) ngids = atoi(g);
	const char *bad = getenv("FAKEVERBS_RTR_EINVAL_GIDS");
	if (bad) {
		snprintf(buf, sizeof(buf), "%s", bad);
		for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
			if (atoi(t) >= 0 && atoi(t) < 32) rtr_einval_gids |= 1u << atoi(t);
	}
	const char *mm = getenv("FAKEVERBS_MAX_MR_SIZE");
	if (mm && strtoull(mm, NULL, 0) > 0) max_mr_size = strtoull(mm, NULL, 0);
	const char *db = getenv("FAKEVERBS_DMABUF");
	if (db && strcmp(db, "0") == 0) dmabuf_enabled = 0;
	const char *pm = getenv("FAKEVERBS_PEERMEM");
	if (pm) snprintf(peermem_lib, sizeof(peermem_lib), "%s", pm);
	unsigned seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
	next_key = (seed & 0xfff) << 12;
	next_qpn = 0x100 + (seed & 0xff) * 0x100;
}

static struct fdev *devof(const char *name) {
	pthread_once(&once, init);
	for (int i = 0; i < ndev; i++)
		if (strcmp(devs[i].dev.name, name) == 0) return &devs[i];
	return NULL;
}

/* ---- device list ---- */

struct ibv_device **ibv_get_device_list(int *num) {
	pthread_once(&once, init);
	const char *e = getenv("FAKEVERBS_LIST_ERRNO");
	if (e && *e) {
		errno = atoi(e);
		if (num) *num = 0;
		return NULL;
	}
	struct ibv_device **l = calloc(ndev + 1, sizeof(*l));
	if (!l) return NULL;
	memcpy(l, devptrs, sizeof(*l) * ndev);
	if (num) *num = ndev;
	return l;
}

void ibv_free_device_list(struct ibv_device **list) { free(list); }
const char *ibv_get_device_name(struct ibv_device *d) { return d->name; }

/* ---- completion queues ---- */

static void cq_push(struct fcq *q, const struct ibv_wc *wc) {
	pthread_mutex_lock(&q->mu);
	if (q->n == q->cap) {
		q->overflow = 1;
	} else {
		q->ring[(q->head + q->n) % q->cap] = *wc;
		q->n++;
	}
	int notify = q->armed && q->cq.channel;
	q->armed = 0;
	pthread_mutex_unlock(&q->mu);
	if (notify) {
		struct fch *ch = (struct fch *)q->cq.channel;
		void *p = q;
		ssize_t w = write(ch->wfd, &p, sizeof(p));
		(void)w;
	}
}

static int fake_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc) {
	struct fcq *q = (struct fcq *)cq;
	pthread_mutex_lock(&q->mu);
	int got = 0;
	while (got < num && q->n > 0) {
		wc[got++] = q->ring[q->head];
		q->head = (q->head + 1) % q->cap;
		q->n--;
	}
	pthread_mutex_unlock(&q->mu);
	return got;
}

static int fake_req_notify_cq(struct ibv_cq *cq, int solicited_only) {
	(void)solicited_only;
	struct fcq *q = (struct fcq *)cq;
	pthread_mutex_lock(&q->mu);
	q->armed = 1;
	int pending = q->n > 0;
	pthread_mutex_unlock(&q->mu);
	(void)pending; /* like hardware: only new entries raise events */
	return 0;
}

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx) {
	struct fch *ch = calloc(1, sizeof(*ch));
	int p[2];
	if (!ch || pipe2(p, O_CLOEXEC) != 0) { free(ch); return NULL; }
	ch->ch.context = ctx;
	ch->ch.fd = p[0];
	ch->wfd = p[1];
	return &ch->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *c) {
	struct fch *ch = (struct fch *)c;
	close(ch->ch.fd);
	close(ch->wfd);
	free(ch);
	return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context, struct ibv_comp_channel *ch, int vec) {
	(void)vec;
	if (cqe <= 0 || cqe > (1 << 20)) { errno = EINVAL; return NULL; }
	struct fcq *q = calloc(1, sizeof(*q));
	if (!q) return NULL;
	q->ring = calloc(cqe, sizeof(struct ibv_wc));
	if (!q->ring) { free(q); return NULL; }
	q->cap = cqe;
	pthread_mutex_init(&q->mu, NULL);
	q->cq.context = ctx;
	q->cq.channel = ch;
	q->cq.cq_context = cq_context;
	q->cq.cqe = cqe;
	return &q->cq;
}

int ibv_destroy_cq(struct ibv_cq *cq) {
	struct fcq *q = (struct fcq *)cq;
	free(q->ring);
	free(q);
	return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *c, struct ibv_cq **cq, void **cq_context) {
	void *p;
	ssize_t r = read(c->fd, &p, sizeof(p));
	if (r != sizeof(p)) {
		if (r >= 0) errno = EIO;
		return -1;
	}
	*cq = &((struct fcq *)p)->cq;
	*cq_context = (*cq)->cq_context;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n) { (void)cq; (void)n; }

/* ---- async events ---- */

struct aev { int type; int port; struct ibv_qp *qp; };

static void async_push(struct fctx *c, int type, int port, struct ibv_qp *qp) {
	struct aev e = {type, port, qp};
	ssize_t w = write(c->async_w, &e, sizeof(e));
	(void)w;
}

int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev) {
	struct aev e;
	ssize_t r = read(ctx->async_fd, &e, sizeof(e));
	if (r != sizeof(e)) {
		if (r >= 0) errno = EIO;
		return -1;
	}
	memset(ev, 0, sizeof(*ev));
	ev->event_type = e.type;
	if (e.qp) ev->element.qp = e.qp;
	else ev->element.port_num = e.port;
	return 0;
}

void ibv_ack_async_event(struct ibv_async_event *ev) { (void)ev; }

/* ---- QPs ---- */

/* With q->mu held: to ERROR, flushing the receive queue. */
static void qp_set_err_locked(struct fqp *q) {
	q->qp.state = IBV_QPS_ERR;
	while (q->rq_n > 0) {
		struct frecv *r = &q->rq[q->rq_head];
		struct ibv_wc wc;
		memset(&wc, 0, sizeof(wc));
		wc.wr_id = r->wr_id;
		wc.status = IBV_WC_WR_FLUSH_ERR;
		wc.opcode = IBV_WC_RECV;
		wc.qp_num = q->qp.qp_num;
		cq_push((struct fcq *)q->qp.recv_cq, &wc);
		q->rq_head = (q->rq_head + 1) % q->max_recv;
		q->rq_n--;
	}
}

static void ctx_kick(struct fctx *c) {
	pthread_mutex_lock(&c->mu);
	c->work++;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a) {
	if (a->qp_type != IBV_QPT_RC || !a->send_cq || !a->recv_cq || a->cap.max_send_wr == 0 ||
	    a->cap.max_send_wr > 16384 || a->cap.max_recv_wr > 16384 || a->cap.max_send_sge > MAXSGE ||
	    a->cap.max_recv_sge > MAXSGE) {
		errno = EINVAL;
		return NULL;
	}
	struct fqp *q = calloc(1, sizeof(*q));
	if (!q) return NULL;
	q->max_send = a->cap.max_send_wr;
	q->max_recv = a->cap.max_recv_wr ? a->cap.max_recv_wr : 1;
	q->max_sge = a->cap.max_send_sge ? a->cap.max_send_sge : 1;
	q->sq = calloc(q->max_send, sizeof(struct fwr));
	q->rq = calloc(q->max_recv, sizeof(struct frecv));
	pthread_mutex_init(&q->mu, NULL);
	pthread_cond_init(&q->idle, NULL);
	q->c = (struct fctx *)pd->context;
	q->sig_all = a->sq_sig_all;
	q->remote_fd = -1;
	q->qp.context = pd->context;
	q->qp.qp_context = a->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = a->send_cq;
	q->qp.recv_cq = a->recv_cq;
	q->qp.srq = NULL;
	q->qp.qp_type = IBV_QPT_RC;
	q->qp.state = IBV_QPS_RESET;
	a->cap.max_inline_data = 0;
	pthread_mutex_lock(&G);
	q->qp.qp_num = (next_qpn++) & 0xffffff;
	q->next = qps;
	qps = q;
	pthread_mutex_unlock(&G);
	return &q->qp;
}

int ibv_destroy_qp(struct ibv_qp *qp) {
	struct fqp *q = (struct fqp *)qp;
	pthread_mutex_lock(&G);
	for (struct fqp **p = &qps; *p; p = &(*p)->next)
		if (*p == q) { *p = q->next; break; }
	pthread_mutex_unlock(&G);
	pthread_mutex_lock(&q->mu);
	q->dead = 1;
	while (q->busy) pthread_cond_wait(&q->idle, &q->mu);
	if (q->remote_fd >= 0) close(q->remote_fd);
	pthread_mutex_unlock(&q->mu);
	/* The requester may still see q in a snapshot: it checks q->dead under
	 * q->mu, so the memory is kept (a test fixture may leak). */
	return 0;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init) {
	(void)mask;
	struct fqp *q = (struct fqp *)qp;
	memset(attr, 0, sizeof(*attr));
	pthread_mutex_lock(&q->mu);
	attr->qp_state = qp->state;
	attr->cur_qp_state = qp->state;
	attr->dest_qp_num = q->dest_qpn;
	attr->port_num = q->port;
	pthread_mutex_unlock(&q->mu);
	if (init) memset(init, 0, sizeof(*init));
	return 0;
}

#define NEED(m) (((mask) & (m)) == (m))

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
	struct fqp *q = (struct fqp *)qp;
	if (!(mask & IBV_QP_STATE)) return EINVAL;
	pthread_mutex_lock(&q->mu);
	int cur = qp->state, next = a->qp_state, rc = 0;
	switch (next) {
	case IBV_QPS_RESET:
		q->sq_n = q->rq_n = 0;
		q->sq_head = q->rq_head = 0;
		q->dest_qpn = 0;
		if (q->remote_fd >= 0) { close(q->remote_fd); q->remote_fd = -1; }
		qp->state = IBV_QPS_RESET;
		break;
	case IBV_QPS_ERR:
		qp_set_err_locked(q);
		break;
	case IBV_QPS_INIT:
		if (cur != IBV_QPS_RESET && cur != IBV_QPS_INIT) { rc = EINVAL; break; }
		if (cur == IBV_QPS_RESET &&
		    !NEED(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) { rc = EINVAL; break; }
		if ((mask & IBV_QP_PORT) && a->port_num != 1) { rc = EINVAL; break; }
		if (mask & IBV_QP_PORT) q->port = a->port_num;
		if (mask & IBV_QP_ACCESS_FLAGS) q->access = a->qp_access_flags;
		qp->state = IBV_QPS_INIT;
		break;
	case IBV_QPS_RTR: {
		if (cur != IBV_QPS_INIT) { rc = EINVAL; break; }
		if (!NEED(IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) { rc = EINVAL; break; }
		union ibv_gid zero;
		memset(&zero, 0, sizeof(zero));
		int sgid = a->ah_attr.grh.sgid_index;
		if (!a->ah_attr.is_global || memcmp(&a->ah_attr.grh.dgid, &zero, sizeof(zero)) == 0 ||
		    sgid < 1 || sgid >= ngids || (rtr_einval_gids & (1u << sgid)) ||
		    a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096) {
			rc = EINVAL; /* RoCE needs a GRH with a real (and valid) source GID */
			break;
		}
		q->sgid_index = (uint8_t)sgid;
		q->dest_qpn = a->dest_qp_num;
		q->dgid = a->ah_attr.grh.dgid;
		qp->state = IBV_QPS_RTR;
		break;
	}
	case IBV_QPS_RTS:
		if (cur != IBV_QPS_RTR && cur != IBV_QPS_RTS) { rc = EINVAL; break; }
		if (cur == IBV_QPS_RTR && !NEED(IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		                                IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)) { rc = EINVAL; break; }
		q->timeout = a->timeout;
		q->retry_cnt = a->retry_cnt;
		q->rnr_retry = a->rnr_retry;
		qp->state = IBV_QPS_RTS;
		break;
	default:
		rc = EINVAL;
	}
	pthread_mutex_unlock(&q->mu);
	if (rc == 0 && next == IBV_QPS_ERR) ctx_kick(q->c); /* flush the send queue */
	return rc;
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
	struct fqp *q = (struct fqp *)qp;
	int rc = 0, queued = 0;
	pthread_mutex_lock(&q->mu);
	for (; wr; wr = wr->next) {
		if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR) { rc = EINVAL; break; }
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->max_sge) { rc = EINVAL; break; }
		if (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM &&
		    wr->opcode != IBV_WR_RDMA_READ && wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM) {
			rc = EINVAL;
			break;
		}
		if (q->sq_n == q->max_send) { rc = ENOMEM; break; }
		struct fwr *w = &q->sq[(q->sq_head + q->sq_n) % q->max_send];
		w->wr_id = wr->wr_id;
		w->opcode = wr->opcode;
		w->flags = wr->send_flags;
		w->imm = wr->imm_data;
		w->nsge = wr->num_sge;
		memcpy(w->sge, wr->sg_list, sizeof(struct ibv_sge) * wr->num_sge);
		w->raddr = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
		q->sq_n++;
		queued++;
	}
	pthread_mutex_unlock(&q->mu);
	if (rc) *bad = wr;
	if (queued) ctx_kick(q->c);
	return rc;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
	struct fqp *q = (struct fqp *)qp;
	int rc = 0;
	pthread_mutex_lock(&q->mu);
	for (; wr; wr = wr->next) {
		if (qp->state == IBV_QPS_RESET) { rc = EINVAL; break; }
		if (wr->num_sge < 0 || wr->num_sge > MAXSGE) { rc = EINVAL; break; }
		if (q->rq_n == q->max_recv) { rc = ENOMEM; break; }
		struct frecv *r = &q->rq[(q->rq_head + q->rq_n) % q->max_recv];
		r->wr_id = wr->wr_id;
		r->nsge = wr->num_sge;
		memcpy(r->sge, wr->sg_list, sizeof(struct ibv_sge) * wr->num_sge);
		q->rq_n++;
	}
	if (qp->state == IBV_QPS_ERR) qp_set_err_locked(q);
	pthread_mutex_unlock(&q->mu);
	if (rc) *bad = wr;
	return rc;
}

/* ---- memory regions ---- */

struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx) {
	struct ibv_pd *pd = calloc(1, sizeof(*pd));
	if (pd) pd->context = ctx;
	return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd) { free(pd); return 0; }

/* host_ok reports whether [addr, addr+len) is mapped in this process
 * readable (and writable when write is set), as get_user_pages needs it to
 * be: the fake libcuda's device memory is mapped PROT_NONE. */
static int host_ok(uint64_t addr, uint64_t len, int write) {
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f) return 0;
	uint64_t at = addr, end = addr + len;
	char line[512];
	while (at < end && fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi;
		char perms[8];
		if (sscanf(line, "%llx-%llx %7s", &lo, &hi, perms) != 3) continue;
		if (at < lo || at >= hi) continue; /* maps is sorted: skip until ours */
		if (perms[0] != 'r' || (write && perms[1] != 'w')) break;
		at = hi;
	}
	fclose(f);
	return at >= end;
}

/* peermem_view asks the peer-memory client (FAKEVERBS_PEERMEM: the fake
 * libcuda, already loaded) where the bytes of GPU range [addr, addr+len)
 * are, as nvidia-peermem asks the GPU driver; NULL when it does not know. */
static char *peermem_view(uint64_t addr, uint64_t len) {
	if (!peermem_lib[0]) return NULL;
	void *h = dlopen(peermem_lib, RTLD_NOW | RTLD_NOLOAD);
	if (!h) return NULL;
	void *(*backing)(unsigned long long) = (void *(*)(unsigned long long))dlsym(h, "fakecuda_backing");
	char *v = NULL;
	if (backing) {
		char *first = backing(addr), *last = backing(addr + len - 1);
		if (first && last == first + (len - 1)) v = first; /* one contiguous allocation */
	}
	dlclose(h);
	return v;
}

static struct ibv_mr *reg(struct ibv_pd *pd, uint64_t iova, size_t len, int access, char *view, void *map, size_t map_len) {
	if (len == 0 || len > max_mr_size ||
	    ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))) {
		errno = EINVAL;
		return NULL;
	}
	struct fmr *m = calloc(1, sizeof(*m));
	if (!m) return NULL;
	struct fctx *c = (struct fctx *)pd->context;
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = (void *)(uintptr_t)iova;
	m->mr.length = len;
	m->access = access;
	m->view = view;
	m->map = map;
	m->map_len = map_len;
	pthread_mutex_lock(&G);
	uint32_t k = ((uint32_t)(c->d->idx + 1) << 28) | ((next_key++) & 0x0fffffff);
	m->mr.lkey = k;
	m->mr.rkey = k;
	m->mr.handle = k;
	m->next = mrs;
	mrs = m;
	pthread_mutex_unlock(&G);
	return &m->mr;
}

static struct ibv_mr *reg_host(struct ibv_pd *pd, void *addr, size_t len, int access) {
	if (len == 0 || len > max_mr_size) {
		errno = EINVAL;
		return NULL;
	}
	int write = (access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)) != 0;
	if (!host_ok((uintptr_t)addr, len, write)) {
		char *v = peermem_view((uintptr_t)addr, len);
		if (!v) {
			errno = EFAULT; /* not pinnable, and no peer-memory client knows it */
			return NULL;
		}
		return reg(pd, (uintptr_t)addr, len, access, v, NULL, 0);
	}
	return reg(pd, (uintptr_t)addr, len, access, NULL, NULL, 0);
}

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access) {
	return reg_host(pd, addr, len, access);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned int access) {
	if (iova != (uintptr_t)addr) { errno = EOPNOTSUPP; return NULL; }
	return reg_host(pd, addr, len, (int)(access & ~IBV_ACCESS_OPTIONAL_RANGE));
}

/* The fake libcuda's dma-buf (tests/fakecuda/fake_cuda.c). */
#define DMABUF_MAGIC 0x46424d44u
struct fake_dmabuf {
	uint32_t magic, pid;
	int32_t fd;
	uint32_t pad;
	uint64_t offset, size;
};

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova, int fd, int access) {
	if (!dmabuf_enabled) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct fake_dmabuf h;
	if (fd < 0 || pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) || h.magic != DMABUF_MAGIC) {
		errno = EBADF; /* not a dma-buf */
		return NULL;
	}
	if (len == 0 || offset > h.size || len > h.size - offset) {
		errno = EINVAL; /* outside the exported range */
		return NULL;
	}
	char path[64];
	snprintf(path, sizeof(path), "/proc/%u/fd/%d", h.pid, h.fd);
	int mfd = open(path, O_RDWR | O_CLOEXEC);
	if (mfd < 0) {
		errno = EBADF;
		return NULL;
	}
	uint64_t at = h.offset + offset, page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t pad = at % page;
	size_t map_len = (size_t)(pad + len);
	void *m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, (off_t)(at - pad));
	close(mfd);
	if (m == MAP_FAILED) return NULL;
	struct ibv_mr *mr = reg(pd, iova, len, access, (char *)m + pad, m, map_len);
	if (!mr) munmap(m, map_len);
	return mr;
}

int ibv_dereg_mr(struct ibv_mr *mr) {
	pthread_mutex_lock(&G);
	for (struct fmr **p = &mrs; *p; p = &(*p)->next)
		if (&(*p)->mr == mr) {
			struct fmr *m = *p;
			*p = m->next;
			if (m->map) munmap(m->map, m->map_len);
			free(m);
			break;
		}
	pthread_mutex_unlock(&G);
	return 0;
}

/* mr_host is where address addr of m is in this process. */
static uint64_t mr_host(const struct fmr *m, uint64_t addr) {
	return m->view ? (uintptr_t)m->view + (addr - (uintptr_t)m->mr.addr) : addr;
}

/* With G held: the MR of pd with key k covering [addr, addr+len). */
static struct fmr *mr_find(struct ibv_pd *pd, uint32_t k, int remote, uint64_t addr, uint64_t len) {
	for (struct fmr *m = mrs; m; m = m->next) {
		if (m->mr.pd != pd || (remote ? m->mr.rkey : m->mr.lkey) != k) continue;
		uint64_t b = (uintptr_t)m->mr.addr, e = b + m->mr.length;
		if (addr < b || addr + len > e || addr + len < addr) return NULL;
		return m;
	}
	return NULL;
}

/* ---- responder ---- */

static int rd_full(int fd, void *p, size_t n) {
	char *b = p;
	while (n > 0) {
		ssize_t r = read(fd, b, n);
		if (r <= 0) {
			if (r < 0 && errno == EINTR) continue;
			return -1;
		}
		b += r;
		n -= r;
	}
	return 0;
}

static int wr_full(int fd, const void *p, size_t n) {
	const char *b = p;
	while (n > 0) {
		ssize_t r = send(fd, b, n, MSG_NOSIGNAL);
		if (r <= 0) {
			if (r < 0 && errno == EINTR) continue;
			return -1;
		}
		b += r;
		n -= r;
	}
	return 0;
}

static int serve(struct fctx *c, const struct req *r) {
	if (!atomic_load(&c->d->port_up)) return DROP;
	pthread_mutex_lock(&G);
	struct fqp *q = NULL;
	for (struct fqp *x = qps; x; x = x->next)
		if (x->c == c && x->qp.qp_num == r->dst_qpn) { q = x; break; }
	if (!q) { pthread_mutex_unlock(&G); return DROP; }
	pthread_mutex_lock(&q->mu);
	int st = q->qp.state;
	if ((st != IBV_QPS_RTR && st != IBV_QPS_RTS) || q->dest_qpn != r->src_qpn ||
	    memcmp(q->dgid.raw, r->src_gid, 16) != 0) {
		pthread_mutex_unlock(&q->mu);
		pthread_mutex_unlock(&G);
		return DROP;
	}
	struct iovec remote[MAXSGE];
	for (uint32_t i = 0; i < r->nsge; i++) {
		remote[i].iov_base = (void *)(uintptr_t)r->sge[i].addr;
		remote[i].iov_len = r->sge[i].len;
	}
	int status = IBV_WC_SUCCESS;
	uint64_t laddr = r->raddr;
	uint32_t llen = r->len;
	struct frecv rv;
	memset(&rv, 0, sizeof(rv));
	int use_recv = r->op == IBV_WR_SEND || r->op == IBV_WR_SEND_WITH_IMM || r->op == IBV_WR_RDMA_WRITE_WITH_IMM;
	if (r->op != IBV_WR_SEND && r->op != IBV_WR_SEND_WITH_IMM) {
		int need = r->op == IBV_WR_RDMA_READ ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
		struct fmr *m = mr_find(q->qp.pd, r->rkey, 1, r->raddr, r->len);
		if (!m || !(m->access & need) || !(q->access & need)) status = IBV_WC_REM_ACCESS_ERR;
		else laddr = mr_host(m, r->raddr);
	}
	if (status == IBV_WC_SUCCESS && use_recv) {
		if (q->rq_n == 0) {
			pthread_mutex_unlock(&q->mu);
			pthread_mutex_unlock(&G);
			return RNR;
		}
		rv = q->rq[q->rq_head];
		q->rq_head = (q->rq_head + 1) % q->max_recv;
		q->rq_n--;
		if (r->op != IBV_WR_RDMA_WRITE_WITH_IMM) {
			uint64_t cap = 0;
			for (int i = 0; i < rv.nsge; i++) cap += rv.sge[i].length;
			struct fmr *rm = rv.nsge == 1 ? mr_find(q->qp.pd, rv.sge[0].lkey, 0, rv.sge[0].addr, r->len) : NULL;
			if (r->len > cap || !rm) status = IBV_WC_REM_INV_REQ_ERR;
			else laddr = mr_host(rm, rv.sge[0].addr);
		}
	}
	ssize_t moved = r->len;
	if (status == IBV_WC_SUCCESS && r->len > 0) {
		struct iovec local = {(void *)(uintptr_t)laddr, llen};
		if (r->op == IBV_WR_RDMA_READ)
			moved = process_vm_writev(r->pid, &local, 1, remote, r->nsge, 0);
		else
			moved = process_vm_readv(r->pid, &local, 1, remote, r->nsge, 0);
		if (moved != (ssize_t)r->len) status = IBV_WC_REM_OP_ERR;
	}
	if (use_recv && status != DROP) {
		struct ibv_wc wc;
		memset(&wc, 0, sizeof(wc));
		wc.wr_id = rv.wr_id;
		wc.status = status == IBV_WC_SUCCESS ? IBV_WC_SUCCESS : IBV_WC_LOC_LEN_ERR;
		wc.opcode = r->op == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
		wc.byte_len = r->len;
		wc.qp_num = q->qp.qp_num;
		wc.src_qp = r->src_qpn;
		if (r->op != IBV_WR_SEND) {
			wc.wc_flags = IBV_WC_WITH_IMM;
			wc.imm_data = r->imm;
		}
		cq_push((struct fcq *)q->qp.recv_cq, &wc);
		if (status != IBV_WC_SUCCESS) qp_set_err_locked(q);
	}
	pthread_mutex_unlock(&q->mu);
	pthread_mutex_unlock(&G);
	return status;
}

struct conn { struct fctx *c; int fd; };

static void *conn_main(void *arg) {
	struct conn *k = arg;
	struct req r;
	while (rd_full(k->fd, &r, sizeof(r)) == 0) {
		int32_t st = r.nsge > MAXSGE ? IBV_WC_REM_INV_REQ_ERR : serve(k->c, &r);
		if (wr_full(k->fd, &st, sizeof(st)) != 0) break;
	}
	close(k->fd);
	free(k);
	return NULL;
}

static void *resp_main(void *arg) {
	struct fctx *c = arg;
	for (;;) {
		int fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED) continue;
			return NULL;
		}
		struct conn *k = malloc(sizeof(*k));
		k->c = c;
		k->fd = fd;
		pthread_t t;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &at, conn_main, k) != 0) { close(fd); free(k); }
		pthread_attr_destroy(&at);
	}
}

/* ---- requester ---- */

static void sock_path(char *out, size_t n, const uint8_t gid[16]) {
	uint32_t pid = ((uint32_t)gid[8] << 24) | ((uint32_t)gid[9] << 16) | ((uint32_t)gid[10] << 8) | gid[11];
	snprintf(out, n, "%s/%u-%u-%u.s", sockdir, pid, gid[12], ((unsigned)gid[13] << 8) | gid[14]);
}

static void msleep(int ms) {
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* Runs one WR of q (not holding any lock); returns its completion status. */
static int execute(struct fqp *q, const struct fwr *w, int fd_in, int *fd_out) {
	struct fctx *c = q->c;
	struct fdev *d = c->d;
	*fd_out = fd_in;
	int us = atomic_load(&d->delay_us);
	if (us > 0) usleep(us);
	int fc = atomic_load(&d->fail_count);
	while (fc > 0) {
		if (atomic_compare_exchange_weak(&d->fail_count, &fc, fc - 1)) return atomic_load(&d->fail_status);
	}
	if (!atomic_load(&d->port_up)) {
		msleep(20); /* the transport timeout, shortened */
		return IBV_WC_RETRY_EXC_ERR;
	}
	uint64_t len = 0, host[MAXSGE];
	pthread_mutex_lock(&G);
	for (int i = 0; i < w->nsge; i++) {
		int need = w->opcode == IBV_WR_RDMA_READ ? IBV_ACCESS_LOCAL_WRITE : 0;
		struct fmr *m = mr_find(q->qp.pd, w->sge[i].lkey, 0, w->sge[i].addr, w->sge[i].length);
		if (!m || (m->access & need) != need) { pthread_mutex_unlock(&G); return IBV_WC_LOC_PROT_ERR; }
		host[i] = mr_host(m, w->sge[i].addr);
		len += w->sge[i].length;
	}
	pthread_mutex_unlock(&G);
	struct req r;
	memset(&r, 0, sizeof(r));
	r.op = w->opcode;
	r.dst_qpn = q->dest_qpn;
	r.src_qpn = q->qp.qp_num;
	memcpy(r.src_gid, c->gid.raw, 16);
	r.src_gid[15] = q->sgid_index; /* the source GID the QP was brought up with */
	r.rkey = w->rkey;
	r.raddr = w->raddr;
	r.len = (uint32_t)len;
	r.imm = w->imm;
	r.pid = getpid();
	r.nsge = w->nsge;
	for (int i = 0; i < w->nsge; i++) {
		r.sge[i].addr = host[i];
		r.sge[i].len = w->sge[i].length;
	}
	/* The ACK timeout: 4.096 us * 2^timeout per try, (retry_cnt + 1) tries,
	 * capped at 2 s so tests stay quick. */
	long tmo_us = (long)(4.096 * (double)(1L << (q->timeout > 20 ? 20 : q->timeout))) * (q->retry_cnt + 1);
	if (tmo_us < 10000) tmo_us = 10000;
	if (tmo_us > 2000000) tmo_us = 2000000;
	int fd = fd_in;
	for (int rnr = 0;; rnr++) {
		if (fd < 0) {
			fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
			struct sockaddr_un sa;
			memset(&sa, 0, sizeof(sa));
			sa.sun_family = AF_UNIX;
			sock_path(sa.sun_path, sizeof(sa.sun_path), q->dgid.raw);
			if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
				if (fd >= 0) close(fd);
				*fd_out = -1;
				msleep(20);
				return IBV_WC_RETRY_EXC_ERR;
			}
			struct timeval tv = {tmo_us / 1000000, tmo_us % 1000000};
			setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		}
		int32_t st;
		if (wr_full(fd, &r, sizeof(r)) != 0 || rd_full(fd, &st, sizeof(st)) != 0) {
			close(fd);
			*fd_out = -1;
			return IBV_WC_RETRY_EXC_ERR;
		}
		*fd_out = fd;
		if (st == DROP) return IBV_WC_RETRY_EXC_ERR;
		if (st == RNR) {
			if (rnr >= 200) return IBV_WC_RNR_RETRY_EXC_ERR;
			msleep(1);
			continue;
		}
		if (st == IBV_WC_SUCCESS) atomic_fetch_add(&d->bytes, len);
		return st;
	}
}

static int wc_opcode(int wr_opcode) {
	switch (wr_opcode) {
	case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM: return IBV_WC_SEND;
	default: return IBV_WC_RDMA_WRITE;
	}
}

static void *req_main(void *arg) {
	struct fctx *c = arg;
	for (;;) {
		pthread_mutex_lock(&c->mu);
		while (!c->stop && c->work == 0) pthread_cond_wait(&c->cv, &c->mu);
		if (c->stop) { pthread_mutex_unlock(&c->mu); return NULL; }
		c->work = 0;
		pthread_mutex_unlock(&c->mu);
		int progress = 1;
		while (progress) {
			progress = 0;
			/* Snapshot this context's QPs. */
			struct fqp *list[1024];
			int n = 0;
			pthread_mutex_lock(&G);
			for (struct fqp *x = qps; x && n < 1024; x = x->next)
				if (x->c == c) list[n++] = x;
			pthread_mutex_unlock(&G);
			for (int i = 0; i < n; i++) {
				struct fqp *q = list[i];
				pthread_mutex_lock(&q->mu);
				if (q->dead || q->sq_n == 0) { pthread_mutex_unlock(&q->mu); continue; }
				struct fwr w = q->sq[q->sq_head];
				int err_state = q->qp.state == IBV_QPS_ERR;
				q->busy = 1;
				int fd = q->remote_fd;
				pthread_mutex_unlock(&q->mu);
				int st, nfd = fd;
				if (err_state) st = IBV_WC_WR_FLUSH_ERR;
				else st = execute(q, &w, fd, &nfd);
				pthread_mutex_lock(&q->mu);
				q->remote_fd = nfd;
				if (q->sq_n > 0 && !q->dead) {
					q->sq_head = (q->sq_head + 1) % q->max_send;
					q->sq_n--;
				}
				if (st != IBV_WC_SUCCESS && st != IBV_WC_WR_FLUSH_ERR) qp_set_err_locked(q);
				q->busy = 0;
				pthread_cond_broadcast(&q->idle);
				int dead = q->dead;
				pthread_mutex_unlock(&q->mu);
				if (!dead && (st != IBV_WC_SUCCESS || (w.flags & IBV_SEND_SIGNALED) || q->sig_all)) {
					struct ibv_wc wc;
					memset(&wc, 0, sizeof(wc));
					wc.wr_id = w.wr_id;
					wc.status = st;
					wc.opcode = wc_opcode(w.opcode);
					wc.qp_num = q->qp.qp_num;
					if (w.opcode == IBV_WR_RDMA_READ)
						for (int k = 0; k < w.nsge; k++) wc.byte_len += w.sge[k].length;
					if (st != IBV_WC_SUCCESS) wc.vendor_err = 0x81;
					cq_push((struct fcq *)q->qp.send_cq, &wc);
				}
				progress = 1;
			}
		}
	}
}

/* ---- contexts ---- */

int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *a) {
	struct fctx *c = (struct fctx *)ctx;
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "fake-1.0");
	a->node_guid = 0x0002c90300000000ull | (uint64_t)getpid() << 8 | c->d->idx;
	a->vendor_id = 0x02c9;
	a->vendor_part_id = 4123;
	a->max_mr_size = max_mr_size;
	a->max_qp = 1 << 16;
	a->max_qp_wr = 16384;
	a->max_sge = MAXSGE;
	a->max_cq = 1 << 16;
	a->max_cqe = 1 << 20;
	a->max_mr = 1 << 20;
	a->max_pd = 1 << 16;
	a->max_qp_rd_atom = 16;
	a->max_qp_init_rd_atom = 16;
	a->phys_port_cnt = 1;
	return 0;
}

int (ibv_query_port)(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *pa) {
	struct fctx *c = (struct fctx *)ctx;
	if (port != 1) return EINVAL;
	struct ibv_port_attr *a = (struct ibv_port_attr *)pa;
	memset(a, 0, sizeof(*a));
	int up = atomic_load(&c->d->port_up);
	a->state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
	a->phys_state = up ? 5 : 3;
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = IBV_MTU_4096;
	a->gid_tbl_len = ngids;
	a->max_msg_sz = 1u << 30;
	a->pkey_tbl_len = 1;
	a->lid = 0;
	a->active_width = 2;  /* 4x */
	a->active_speed = 64; /* HDR: 50 Gb/s per lane -> 200 Gb/s */
	a->link_layer = IBV_LINK_LAYER_ETHERNET;
	return 0;
}

int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid) {
	struct fctx *c = (struct fctx *)ctx;
	if (port != 1 || index < 0 || index >= ngids) return EINVAL;
	if (index == 0) {
		memset(gid, 0, sizeof(*gid));
	} else {
		*gid = c->gid;
		gid->raw[15] = (uint8_t)index; /* one port, several GIDs */
	}
	return 0;
}

int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *e,
                      uint32_t flags, size_t sz) {
	(void)flags;
	(void)sz;
	union ibv_gid g;
	int rc = ibv_query_gid(ctx, (uint8_t)port, (int)index, &g);
	if (rc) return rc;
	memset(e, 0, sizeof(*e));
	e->gid = g;
	e->gid_index = index;
	e->port_num = port;
	e->gid_type = IBV_GID_TYPE_ROCE_V2;
	return 0;
}

struct ibv_context *ibv_open_device(struct ibv_device *dev) {
	pthread_once(&once, init);
	struct fdev *d = (struct fdev *)dev;
	struct fctx *c = calloc(1, sizeof(*c));
	if (!c) return NULL;
	c->d = d;
	/* Let the peers' responders reach this process's memory. */
	prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
	c->gid.raw[0] = 0xfe;
	c->gid.raw[1] = 0x80;
	uint32_t pid = getpid();
	c->gid.raw[8] = pid >> 24;
	c->gid.raw[9] = pid >> 16;
	c->gid.raw[10] = pid >> 8;
	c->gid.raw[11] = pid;
	c->gid.raw[12] = d->idx;
	static atomic_uint opens;
	unsigned seq = atomic_fetch_add(&opens, 1);
	c->gid.raw[13] = seq >> 8; /* every opened context is its own port */
	c->gid.raw[14] = seq;
	c->gid.raw[15] = 1;
	int ap[2];
	if (pipe2(ap, O_CLOEXEC) != 0) { free(c); return NULL; }
	c->ctx.device = dev;
	c->ctx.cmd_fd = -1;
	c->ctx.async_fd = ap[0];
	c->async_w = ap[1];
	c->ctx.num_comp_vectors = 1;
	c->ctx.abi_compat = NULL; /* not an extended context: inline verbs use the exported calls */
	pthread_mutex_init(&c->ctx.mutex, NULL);
	c->ctx.ops.poll_cq = fake_poll_cq;
	c->ctx.ops.req_notify_cq = fake_req_notify_cq;
	c->ctx.ops.post_send = fake_post_send;
	c->ctx.ops.post_recv = fake_post_recv;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	c->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	sock_path(sa.sun_path, sizeof(sa.sun_path), c->gid.raw);
	snprintf(c->sock, sizeof(c->sock), "%s", sa.sun_path);
	unlink(c->sock);
	if (c->listen_fd < 0 || bind(c->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    listen(c->listen_fd, 128) != 0) {
		int e = errno;
		if (c->listen_fd >= 0) close(c->listen_fd);
		close(ap[0]);
		close(ap[1]);
		free(c);
		errno = e;
		return NULL;
	}
	pthread_create(&c->resp, NULL, resp_main, c);
	pthread_create(&c->req, NULL, req_main, c);
	pthread_mutex_lock(&G);
	c->next = ctxs;
	ctxs = c;
	pthread_mutex_unlock(&G);
	const char *v = getenv("FAKEVERBS_DELAY_US");
	if (v && *v) atomic_store(&d->delay_us, atoi(v));
	return &c->ctx;
}

int ibv_close_device(struct ibv_context *ctx) {
	struct fctx *c = (struct fctx *)ctx;
	pthread_mutex_lock(&G);
	for (struct fctx **p = &ctxs; *p; p = &(*p)->next)
		if (*p == c) { *p = c->next; break; }
	pthread_mutex_unlock(&G);
	shutdown(c->listen_fd, SHUT_RDWR);
	pthread_join(c->resp, NULL);
	close(c->listen_fd);
	unlink(c->sock);
	pthread_mutex_lock(&c->mu);
	c->stop = 1;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->req, NULL);
	close(c->ctx.async_fd);
	close(c->async_w);
	/* Connection threads may still hold c: it is kept (a test fixture). */
	return 0;
}

/* ---- fault injection (tests) ---- */

int fakeverbs_set_port(const char *dev, int up) {
	struct fdev *d = devof(dev);
	if (!d) return -1;
	int was = atomic_exchange(&d->port_up, up ? 1 : 0);
	if (was == (up ? 1 : 0)) return 0;
	pthread_mutex_lock(&G);
	for (struct fctx *c = ctxs; c; c = c->next)
		if (c->d == d) async_push(c, up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR, 1, NULL);
	pthread_mutex_unlock(&G);
	return 0;
}

int fakeverbs_fail_next(const char *dev, int count, int status) {
	struct fdev *d = devof(dev);
	if (!d) return -1;
	atomic_store(&d->fail_status, status);
	atomic_store(&d->fail_count, count);
	return 0;
}

int fakeverbs_set_delay_us(const char *dev, int us) {
	struct fdev *d = devof(dev);
	if (!d) return -1;
	atomic_store(&d->delay_us, us);
	return 0;
}

int fakeverbs_qp_error(uint32_t qpn) {
	pthread_mutex_lock(&G);
	struct fqp *q = NULL;
	for (struct fqp *x = qps; x; x = x->next)
		if (x->qp.qp_num == qpn) { q = x; break; }
	if (!q) { pthread_mutex_unlock(&G); return -1; }
	pthread_mutex_lock(&q->mu);
	qp_set_err_locked(q);
	pthread_mutex_unlock(&q->mu);
	async_push(q->c, IBV_EVENT_QP_FATAL, 0, &q->qp);
	struct fctx *c = q->c;
	pthread_mutex_unlock(&G);
	ctx_kick(c);
	return 0;
}

unsigned long long fakeverbs_bytes(const char *dev) {
	struct fdev *d = devof(dev);
	return d ? atomic_load(&d->bytes) : 0;
}
