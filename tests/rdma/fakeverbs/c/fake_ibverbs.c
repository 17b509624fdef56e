// A fake libibverbs provider for kvferry's tests: a test fixture, never a
// transport users can pick. Built by the tests into libibverbs.so.1 with
// the version script libibverbs.map beside this file, which gives every
// entry point the symbol version Debian 12's libibverbs 44 gives it, so
// the same file is loaded by the shim in engine/transport/rdma/ibv
// (KVFERRY_IBVERBS_LIB) and, through LD_LIBRARY_PATH, by unmodified
// programs linked against the real library: rdma-core's ibv_devinfo,
// ibv_rc_pingpong and ibv_srq_pingpong, perftest's ib_write_bw,
// ib_read_bw and ib_write_lat (tests/rdma/thirdparty runs them). Every
// symbol Debian's libibverbs exports is defined: what the fake implements
// behaves as below, the rest fails clearly (ENOSYS, EOPNOTSUPP or NULL,
// with one line on stderr the first time it is called), and the provider
// drivers that perftest links (libmlx5, libefa) may register themselves
// with verbs_register_driver_34, which does nothing: no device is theirs.
// Compiled against the shim's own declaration of the verbs ABI
// (engine/transport/rdma/ibv/verbs_abi.h, checked against rdma-core's
// verbs.h by its layout test), so no rdma-core header is needed.
//
// Contexts are extended ones (struct verbs_context, abi_compat ==
// __VERBS_ABI_IS_EXTENDED) with query_port and create_qp_ex set; their ops
// table (post_send, post_recv, post_srq_recv, poll_cq, req_notify_cq) is
// what verbs.h's inline functions call. A QP created with send_ops_flags
// is an ibv_qp_ex whose ibv_wr_* members post work requests.
//
// Model: every process that opens a device is a host with that NIC. Its
// GID encodes the process id, the device index and the context's sequence
// number (two engines in one process are two hosts). On the default RoCE
// port (link layer Ethernet, LID 0) GID index 0 is a null entry and every
// other index a RoCE v2 GID; RTR needs a GRH. With FAKEVERBS_LINK_LAYER=ib
// the port is InfiniBand: every index holds an IB GID, the port has a LID
// unique among the processes sharing FAKEVERBS_DIR, and a QP may be
// addressed by LID alone. Each opened device context runs
//   - a responder: a small per-device broker listening on a Unix socket
//     FAKEVERBS_DIR/<pid>-<dev>-<n>.s (and lid-<lid>.s on an IB port); it
//     receives requests from peers' QPs, checks the destination QP (state
//     RTR/RTS, connected to the sender), the rkey (same PD, access rights,
//     bounds: else IBV_WC_REM_ACCESS_ERR) and moves the bytes with
//     process_vm_readv/process_vm_writev between the requester's memory
//     and its own registered memory; SENDs take a receive from the QP's
//     receive queue or its shared receive queue (SRQ);
//   - a requester thread that executes each QP's send queue in order, as a
//     NIC would, and writes completions (signaled ones, and every error or
//     flush) to the CQ, raising a completion event when the CQ is armed.
// RC READ, WRITE, WRITE_WITH_IMM, SEND (with/without immediate, inline or
// not) and RECV are implemented; the QP state machine (RESET/INIT/RTR/RTS/
// ERR) is enforced as the verbs specify. Objects in use cannot be
// destroyed (EBUSY), as the kernel refuses it.
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
// There is no sysfs: ibv_read_sysfs_file answers for the fake devices'
// ibdev_path (/sys/class/infiniband/<name>: node_type, node_guid,
// sys_image_guid, fw_ver, hca_type, hw_rev, board_id, ports/1/state,
// ports/1/link_layer, ports/1/gid_attrs/types/<i>; not the LID and GIDs,
// which belong to each opened context) and reads the real file for any
// other directory.
//
// Where third-party programs showed the fake diverging from real verbs,
// and what changed, is listed in docs/reports/fakes.md. In short: no
// symbol versions and missing entry points (the loader refused every
// program, and perftest's provider libraries need rdma-core's private
// interface); no extended context (ibv_create_qp_ex failed, so perftest
// could not create a QP); no ibv_qp_ex and ibv_wr_* calls, no SRQ; inline
// data neither granted nor copied at post time; ibv_query_qp answering
// zeroes; the empty GID entry answered by _ibv_query_gid_ex instead of
// ENODATA, and ibv_query_gid failing with a positive errno instead of -1;
// node GUIDs in host order; no sysfs answers; no LID addressing; an absent
// peer failing the sender at once instead of after the transport's
// retries, and the ACK sent only after the receive's completion; a busy
// ibv_poll_cq starving the fake's threads; objects in use destroyed
// without EBUSY (which hid kvferry deallocating PDs before their MRs).
//
// Environment: FAKEVERBS_DEVICES (comma list, default "fake_mlx5_0"; empty:
// no device), FAKEVERBS_DIR (socket directory, default /tmp),
// FAKEVERBS_LINK_LAYER (ethernet, the default, or ib),
// FAKEVERBS_LIST_ERRNO (make ibv_get_device_list fail with that errno),
// FAKEVERBS_DMABUF=0 (ibv_reg_dmabuf_mr fails with EOPNOTSUPP, as on a
// kernel or provider without dma-buf support), FAKEVERBS_PEERMEM=<libcuda>
// (a peer-memory client: ibv_reg_mr of memory the CPU cannot touch asks
// that already loaded fake libcuda's fakecuda_backing for the bytes, as
// nvidia-peermem asks the GPU driver), FAKEVERBS_MAX_MR_SIZE (the device's
// max_mr_size; larger registrations fail with EINVAL), FAKEVERBS_GIDS (GID
// table length, default 2), FAKEVERBS_RTR_EINVAL_GIDS (comma list of source
// GID indexes whose INIT->RTR fails with EINVAL, as a stale GID entry does).
// Fault injection (exported for tests, and through FAKEVERBS_* variables
// read at open): fakeverbs_set_port (port down/up with PORT_ERR/ACTIVE
// events), fakeverbs_fail_next (next completions with an error status),
// fakeverbs_qp_error (force a QP to ERROR with a QP_FATAL event),
// fakeverbs_set_delay_us (a slow device), fakeverbs_hold and fakeverbs_held
// (work requests past a count wait at the device until released);
// FAKEVERBS_DOWN_AFTER=N kills each device's link when its N+1-th work
// request of the process arrives: that one and every later one complete with
// IBV_WC_RETRY_EXC_ERR and the port goes down (a NIC that dies mid-batch in
// a process no test can reach into). fakeverbs_bytes reports the bytes
// a device moved as requester.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* The shim's declaration of the verbs ABI, by a path relative to this file,
 * so every builder (fakeverbs.Build, tests/python) needs no -I. */
#include "../../../../engine/transport/rdma/ibv/verbs_abi.h"

#define MAXDEV 8
#define MAXSGE 4
#define MAXINLINE 256 /* the device's max_inline_data */
#define MININLINE 64  /* what every QP gets */
#define MAXWR 16384
#define DROP (-1) /* responder silently dropped the packet */
#define RNR (-2)  /* responder had no receive posted */

/* rdma-core's enum ibv_gid_type_sysfs (its driver.h, not installed). */
enum { GID_TYPE_SYSFS_IB_ROCE_V1 = 0, GID_TYPE_SYSFS_ROCE_V2 = 1 };

struct fdev {
	struct ibv_device dev;
	int idx;
	atomic_int port_up;
	atomic_int delay_us;
	atomic_int fail_count;
	atomic_int fail_status;
	atomic_int hold_on;   /* fakeverbs_hold: WRs past hold_pass wait */
	atomic_int hold_pass; /* WRs still let through while held */
	atomic_int held;      /* WRs waiting at the hold now */
	atomic_int down_after; /* FAKEVERBS_DOWN_AFTER: WRs left before the port goes down; < 0: never */
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
static int ib_link;                /* FAKEVERBS_LINK_LAYER=ib */
static uint32_t rtr_einval_gids;   /* bit i: RTR from source GID i fails */
static uint64_t max_mr_size = 1ull << 40;
static int dmabuf_enabled = 1;
static char peermem_lib[512];

/* stub_note tells, once per entry point, that a program called something
 * the fake does not implement. */
static void stub_note(const char *name, atomic_int *said, int err) {
	if (atomic_exchange(said, 1) == 0)
		fprintf(stderr, "fakeverbs: %s is not implemented by the fake provider (%s)\n", name, strerror(err));
}

struct fctx;
struct fqp;

struct fpd {
	struct ibv_pd pd;
	atomic_int users; /* MRs, QPs and SRQs */
};

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
	int armed; /* 1: next completion, 2: next solicited one */
	int overflow;
	atomic_int users; /* QPs */
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
	uint32_t inl_len; /* IBV_SEND_INLINE: the bytes, copied at post time */
	uint8_t inl[MAXINLINE];
};

struct frecv {
	uint64_t wr_id;
	int nsge;
	struct ibv_sge sge[MAXSGE];
};

struct fsrq {
	struct ibv_srq srq;
	pthread_mutex_t mu;
	struct frecv *rq;
	uint32_t head, n, max, max_sge, limit;
	atomic_int users; /* QPs */
};

struct fqp {
	union {
		struct ibv_qp qp;
		struct ibv_qp_ex qpx; /* its first member is the ibv_qp */
	};
	int is_ex;
	uint64_t send_ops; /* IBV_QP_EX_WITH_* granted */
	struct fctx *c;
	pthread_mutex_t mu;
	struct fsrq *srq;
	/* ibv_wr_* batch, between wr_start and wr_complete/abort (q->mu held) */
	uint32_t wr_n;
	int wr_err;
	struct fwr *wr_cur;
	/* attributes, as ibv_query_qp reports them */
	int access;
	uint8_t port;
	uint8_t sgid_index;
	uint8_t is_global;
	uint16_t dlid;
	uint32_t dest_qpn;
	union ibv_gid dgid;
	struct ibv_qp_attr attr;
	int timeout, retry_cnt, rnr_retry;
	int sig_all;
	uint32_t max_send, max_recv, max_sge, max_recv_sge, max_inline;
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
	struct verbs_context vctx; /* vctx.context is the ibv_context */
	struct fdev *d;
	union ibv_gid gid;
	uint16_t lid; /* IB port only */
	char lidlink[108];
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

static struct fctx *CTX(struct ibv_context *ctx) {
	return (struct fctx *)((char *)ctx - offsetof(struct fctx, vctx.context));
}

struct req {
	uint32_t op, dst_qpn, src_qpn, rkey, len, imm, nsge, flags;
	int32_t pid;
	uint16_t src_lid;
	uint8_t grh, pad;
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
		const char *da = getenv("FAKEVERBS_DOWN_AFTER");
		atomic_store(&f->down_after, da && *da ? atoi(da) : -1);
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
	const char *ll = getenv("FAKEVERBS_LINK_LAYER");
	if (ll && (strcmp(ll, "ib") == 0 || strcmp(ll, "infiniband") == 0)) ib_link = 1;
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

static struct fdev *devofpath(const char *ibdev_path) {
	pthread_once(&once, init);
	for (int i = 0; i < ndev; i++)
		if (strcmp(devs[i].dev.ibdev_path, ibdev_path) == 0) return &devs[i];
	return NULL;
}

/* The node GUID of device d in this process, in host order: a Mellanox OUI,
 * the process id and the device index. */
static uint64_t node_guid(const struct fdev *d) {
	return 0x0002c90300000000ull | ((uint64_t)getpid() & 0xffffff) << 8 | (uint64_t)d->idx;
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
uint64_t ibv_get_device_guid(struct ibv_device *d) { return htobe64(node_guid((struct fdev *)d)); }
int ibv_get_device_index(struct ibv_device *d) { return ((struct fdev *)d)->idx; }

/* ---- completion queues ---- */

static void async_push(struct fctx *c, int type, int port, void *obj);

static void cq_push(struct fcq *q, const struct ibv_wc *wc, int solicited) {
	pthread_mutex_lock(&q->mu);
	int lost = 0;
	if (q->n == q->cap) {
		lost = !q->overflow;
		q->overflow = 1;
	} else {
		q->ring[(q->head + q->n) % q->cap] = *wc;
		q->n++;
	}
	int notify = q->cq.channel && (q->armed == 1 || (q->armed == 2 && (solicited || wc->status != IBV_WC_SUCCESS)));
	if (notify) q->armed = 0;
	pthread_mutex_unlock(&q->mu);
	if (lost) async_push(CTX(q->cq.context), IBV_EVENT_CQ_ERR, 0, &q->cq); /* a CQ overrun */
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
	/* A program polling an empty CQ in a loop would keep the CPU from the
	 * fake's own threads, which do the NIC's work: give it up. */
	if (got == 0) sched_yield();
	return got;
}

static int fake_req_notify_cq(struct ibv_cq *cq, int solicited_only) {
	struct fcq *q = (struct fcq *)cq;
	pthread_mutex_lock(&q->mu);
	/* Like hardware: only entries added after arming raise an event. */
	if (q->armed != 1) q->armed = solicited_only ? 2 : 1;
	pthread_mutex_unlock(&q->mu);
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
	pthread_mutex_lock(&G);
	int busy = c->refcnt > 0;
	pthread_mutex_unlock(&G);
	if (busy) return EBUSY; /* CQs still use it */
	close(ch->ch.fd);
	close(ch->wfd);
	free(ch);
	return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context, struct ibv_comp_channel *ch, int vec) {
	if (cqe <= 0 || cqe > (1 << 20) || vec < 0 || vec >= ctx->num_comp_vectors) { errno = EINVAL; return NULL; }
	struct fcq *q = calloc(1, sizeof(*q));
	if (!q) return NULL;
	q->ring = calloc(cqe, sizeof(struct ibv_wc));
	if (!q->ring) { free(q); return NULL; }
	q->cap = cqe;
	pthread_mutex_init(&q->mu, NULL);
	pthread_mutex_init(&q->cq.mutex, NULL);
	pthread_cond_init(&q->cq.cond, NULL);
	q->cq.context = ctx;
	q->cq.channel = ch;
	q->cq.cq_context = cq_context;
	q->cq.cqe = cqe;
	if (ch) {
		pthread_mutex_lock(&G);
		ch->refcnt++;
		pthread_mutex_unlock(&G);
	}
	return &q->cq;
}

int ibv_resize_cq(struct ibv_cq *cq, int cqe) {
	struct fcq *q = (struct fcq *)cq;
	if (cqe <= 0 || cqe > (1 << 20)) return EINVAL;
	pthread_mutex_lock(&q->mu);
	if (cqe < q->n) { pthread_mutex_unlock(&q->mu); return EINVAL; }
	struct ibv_wc *r = calloc(cqe, sizeof(*r));
	if (!r) { pthread_mutex_unlock(&q->mu); return ENOMEM; }
	for (int i = 0; i < q->n; i++) r[i] = q->ring[(q->head + i) % q->cap];
	free(q->ring);
	q->ring = r;
	q->head = 0;
	q->cap = cqe;
	cq->cqe = cqe;
	pthread_mutex_unlock(&q->mu);
	return 0;
}

int ibv_destroy_cq(struct ibv_cq *cq) {
	struct fcq *q = (struct fcq *)cq;
	if (atomic_load(&q->users) > 0) return EBUSY; /* QPs still use it */
	if (cq->channel) {
		pthread_mutex_lock(&G);
		cq->channel->refcnt--;
		pthread_mutex_unlock(&G);
	}
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

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n) {
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += n;
	pthread_mutex_unlock(&cq->mutex);
}

/* ---- async events ---- */

struct aev { int type; int port; void *obj; };

static void async_push(struct fctx *c, int type, int port, void *obj) {
	struct aev e = {type, port, obj};
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
	switch (e.type) {
	case IBV_EVENT_CQ_ERR: ev->element.cq = e.obj; break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED: ev->element.srq = e.obj; break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR: ev->element.port_num = e.port; break;
	default: ev->element.qp = e.obj;
	}
	return 0;
}

void ibv_ack_async_event(struct ibv_async_event *ev) { (void)ev; }

/* ---- QPs ---- */

/* With q->mu held: to ERROR, flushing the receive queue (a shared receive
 * queue keeps its receives: the QP reports its last WQE instead). */
static void qp_set_err_locked(struct fqp *q) {
	int was = q->qp.state;
	q->qp.state = IBV_QPS_ERR;
	while (q->rq_n > 0) {
		struct frecv *r = &q->rq[q->rq_head];
		struct ibv_wc wc;
		memset(&wc, 0, sizeof(wc));
		wc.wr_id = r->wr_id;
		wc.status = IBV_WC_WR_FLUSH_ERR;
		wc.opcode = IBV_WC_RECV;
		wc.qp_num = q->qp.qp_num;
		cq_push((struct fcq *)q->qp.recv_cq, &wc, 0);
		q->rq_head = (q->rq_head + 1) % q->max_recv;
		q->rq_n--;
	}
	if (q->srq && was != IBV_QPS_ERR) async_push(q->c, IBV_EVENT_QP_LAST_WQE_REACHED, 0, &q->qp);
}

static void ctx_kick(struct fctx *c) {
	pthread_mutex_lock(&c->mu);
	c->work++;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static void wrx_init(struct fqp *q);

#define SEND_OPS (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND | \
                  IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ)

/* create_qp makes an RC QP of pd from the ibv_qp_init_attr part of a (the
 * caps are written back: what the device granted). */
static struct ibv_qp *create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a, uint64_t send_ops, int is_ex) {
	struct fsrq *srq = (struct fsrq *)a->srq;
	if (a->qp_type != IBV_QPT_RC) { errno = EOPNOTSUPP; return NULL; } /* an RC-only device */
	if (!a->send_cq || !a->recv_cq || a->cap.max_send_wr == 0 || a->cap.max_send_wr > MAXWR ||
	    (!srq && a->cap.max_recv_wr > MAXWR) || a->cap.max_send_sge > MAXSGE ||
	    (!srq && a->cap.max_recv_sge > MAXSGE) || a->cap.max_inline_data > MAXINLINE ||
	    (srq && srq->srq.pd->context != pd->context)) {
		errno = EINVAL;
		return NULL;
	}
	struct fqp *q = calloc(1, sizeof(*q));
	if (!q) return NULL;
	q->max_send = a->cap.max_send_wr;
	q->max_recv = srq ? 1 : (a->cap.max_recv_wr ? a->cap.max_recv_wr : 1);
	q->max_sge = a->cap.max_send_sge ? a->cap.max_send_sge : 1;
	q->max_recv_sge = srq ? 0 : (a->cap.max_recv_sge ? a->cap.max_recv_sge : 1);
	/* Like a real provider, the grant covers what its send WQEs hold
	 * anyway, even when less (or none) was asked for. */
	q->max_inline = a->cap.max_inline_data > MININLINE ? a->cap.max_inline_data : MININLINE;
	q->sq = calloc(q->max_send, sizeof(struct fwr));
	q->rq = calloc(q->max_recv, sizeof(struct frecv));
	if (!q->sq || !q->rq) {
		free(q->sq);
		free(q->rq);
		free(q);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&q->mu, NULL);
	pthread_cond_init(&q->idle, NULL);
	pthread_mutex_init(&q->qp.mutex, NULL);
	pthread_cond_init(&q->qp.cond, NULL);
	q->c = CTX(pd->context);
	q->sig_all = a->sq_sig_all;
	q->remote_fd = -1;
	q->srq = srq;
	q->qp.context = pd->context;
	q->qp.qp_context = a->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = a->send_cq;
	q->qp.recv_cq = a->recv_cq;
	q->qp.srq = a->srq;
	q->qp.qp_type = IBV_QPT_RC;
	q->qp.state = IBV_QPS_RESET;
	q->is_ex = is_ex;
	q->send_ops = send_ops;
	if (is_ex) wrx_init(q);
	a->cap.max_inline_data = q->max_inline;
	a->cap.max_recv_wr = srq ? 0 : q->max_recv;
	a->cap.max_recv_sge = q->max_recv_sge;
	a->cap.max_send_sge = q->max_sge;
	atomic_fetch_add(&((struct fcq *)a->send_cq)->users, 1);
	atomic_fetch_add(&((struct fcq *)a->recv_cq)->users, 1);
	atomic_fetch_add(&((struct fpd *)pd)->users, 1);
	if (srq) atomic_fetch_add(&srq->users, 1);
	pthread_mutex_lock(&G);
	q->qp.qp_num = (next_qpn++) & 0xffffff;
	q->qp.handle = q->qp.qp_num;
	q->next = qps;
	qps = q;
	pthread_mutex_unlock(&G);
	return &q->qp;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a) { return create_qp(pd, a, 0, 0); }

/* The extended context's create_qp_ex (verbs.h's inline ibv_create_qp_ex). */
static struct ibv_qp *fake_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a) {
	uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	if ((a->comp_mask & ~known) || !(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd || a->pd->context != ctx) {
		errno = a->comp_mask & ~known ? EOPNOTSUPP : EINVAL;
		return NULL;
	}
	if ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags) { errno = EOPNOTSUPP; return NULL; }
	uint64_t ops = a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS ? a->send_ops_flags : 0;
	if (ops & ~(uint64_t)SEND_OPS) { errno = EOPNOTSUPP; return NULL; } /* no atomics, binds, TSO */
	struct ibv_qp_init_attr b;
	memcpy(&b, a, sizeof(b)); /* the leading members are an ibv_qp_init_attr */
	struct ibv_qp *qp = create_qp(a->pd, &b, ops, (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0);
	if (qp) a->cap = b.cap;
	return qp;
}

struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp) {
	struct fqp *q = (struct fqp *)qp;
	return q->is_ex ? &q->qpx : NULL;
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
	q->remote_fd = -1;
	pthread_mutex_unlock(&q->mu);
	atomic_fetch_sub(&((struct fcq *)qp->send_cq)->users, 1);
	atomic_fetch_sub(&((struct fcq *)qp->recv_cq)->users, 1);
	atomic_fetch_sub(&((struct fpd *)qp->pd)->users, 1);
	if (q->srq) atomic_fetch_sub(&q->srq->users, 1);
	/* The requester may still see q in a snapshot: it checks q->dead under
	 * q->mu, so the memory is kept (a test fixture may leak). */
	return 0;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init) {
	(void)mask; /* like most providers, every attribute is reported */
	struct fqp *q = (struct fqp *)qp;
	pthread_mutex_lock(&q->mu);
	*attr = q->attr;
	attr->qp_state = qp->state;
	attr->cur_qp_state = qp->state;
	attr->dest_qp_num = q->dest_qpn;
	attr->port_num = q->port;
	attr->qp_access_flags = q->access;
	attr->timeout = q->timeout;
	attr->retry_cnt = q->retry_cnt;
	attr->rnr_retry = q->rnr_retry;
	attr->cap.max_send_wr = q->max_send;
	attr->cap.max_recv_wr = q->srq ? 0 : q->max_recv;
	attr->cap.max_send_sge = q->max_sge;
	attr->cap.max_recv_sge = q->max_recv_sge;
	attr->cap.max_inline_data = q->max_inline;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = qp->qp_context;
		init->send_cq = qp->send_cq;
		init->recv_cq = qp->recv_cq;
		init->srq = qp->srq;
		init->cap = attr->cap;
		init->qp_type = qp->qp_type;
		init->sq_sig_all = q->sig_all;
	}
	pthread_mutex_unlock(&q->mu);
	return 0;
}

#define NEED(m) (((mask) & (m)) == (m))

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
	struct fqp *q = (struct fqp *)qp;
	if (!(mask & IBV_QP_STATE)) return EINVAL;
	pthread_mutex_lock(&q->mu);
	int cur = qp->state, next = a->qp_state, rc = 0;
	if ((mask & IBV_QP_CUR_STATE) && (int)a->cur_qp_state != cur) rc = EINVAL;
	switch (rc ? -1 : next) {
	case -1:
		break;
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
		if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0) { rc = EINVAL; break; } /* one P_Key */
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
		int global = a->ah_attr.is_global;
		if (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096) { rc = EINVAL; break; }
		if (!global && (!ib_link || a->ah_attr.dlid == 0)) {
			rc = EINVAL; /* RoCE needs a GRH; IB without one needs the peer's LID */
			break;
		}
		if (global && (memcmp(&a->ah_attr.grh.dgid, &zero, sizeof(zero)) == 0 || sgid < (ib_link ? 0 : 1) ||
		               sgid >= ngids || (rtr_einval_gids & (1u << sgid)))) {
			rc = EINVAL; /* a GRH needs a real (and valid) source GID */
			break;
		}
		if (mask & IBV_QP_ACCESS_FLAGS) q->access = a->qp_access_flags;
		q->is_global = (uint8_t)global;
		q->sgid_index = global ? (uint8_t)sgid : 0;
		q->dlid = a->ah_attr.dlid;
		q->dest_qpn = a->dest_qp_num;
		q->dgid = global ? a->ah_attr.grh.dgid : zero;
		q->attr.ah_attr = a->ah_attr;
		q->attr.path_mtu = a->path_mtu;
		q->attr.rq_psn = a->rq_psn;
		q->attr.max_dest_rd_atomic = a->max_dest_rd_atomic;
		q->attr.min_rnr_timer = a->min_rnr_timer;
		qp->state = IBV_QPS_RTR;
		break;
	}
	case IBV_QPS_RTS:
		if (cur != IBV_QPS_RTR && cur != IBV_QPS_RTS) { rc = EINVAL; break; }
		if (cur == IBV_QPS_RTR && !NEED(IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		                                IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)) { rc = EINVAL; break; }
		if (mask & IBV_QP_TIMEOUT) q->timeout = a->timeout;
		if (mask & IBV_QP_RETRY_CNT) q->retry_cnt = a->retry_cnt;
		if (mask & IBV_QP_RNR_RETRY) q->rnr_retry = a->rnr_retry;
		if (mask & IBV_QP_SQ_PSN) q->attr.sq_psn = a->sq_psn;
		if (mask & IBV_QP_MAX_QP_RD_ATOMIC) q->attr.max_rd_atomic = a->max_rd_atomic;
		qp->state = IBV_QPS_RTS;
		break;
	default:
		rc = EINVAL;
	}
	pthread_mutex_unlock(&q->mu);
	if (rc == 0 && next == IBV_QPS_ERR) ctx_kick(q->c); /* flush the send queue */
	return rc;
}

/* fill_wr checks one send work request against q (q->mu held) and writes
 * it to w: 0, or the errno ibv_post_send answers. Inline data is copied
 * now, so the caller may reuse its buffer at once. */
static int fill_wr(struct fqp *q, struct fwr *w, const struct ibv_send_wr *wr) {
	if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR) return EINVAL;
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->max_sge) return EINVAL;
	if (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM &&
	    wr->opcode != IBV_WR_RDMA_READ && wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM)
		return EINVAL;
	w->wr_id = wr->wr_id;
	w->opcode = wr->opcode;
	w->flags = wr->send_flags;
	w->imm = wr->imm_data;
	w->raddr = wr->wr.rdma.remote_addr;
	w->rkey = wr->wr.rdma.rkey;
	w->inl_len = 0;
	if (wr->send_flags & IBV_SEND_INLINE) {
		if (wr->opcode == IBV_WR_RDMA_READ) return EINVAL;
		uint64_t n = 0;
		for (int i = 0; i < wr->num_sge; i++) n += wr->sg_list[i].length;
		if (n > q->max_inline) return EINVAL;
		for (int i = 0; i < wr->num_sge; i++) {
			memcpy(w->inl + w->inl_len, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
			w->inl_len += wr->sg_list[i].length;
		}
		w->nsge = 0;
		return 0;
	}
	w->nsge = wr->num_sge;
	memcpy(w->sge, wr->sg_list, sizeof(struct ibv_sge) * wr->num_sge);
	return 0;
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
	struct fqp *q = (struct fqp *)qp;
	int rc = 0, queued = 0;
	pthread_mutex_lock(&q->mu);
	for (; wr; wr = wr->next) {
		if (q->sq_n == q->max_send) { rc = ENOMEM; break; }
		rc = fill_wr(q, &q->sq[(q->sq_head + q->sq_n) % q->max_send], wr);
		if (rc) break;
		q->sq_n++;
		queued++;
	}
	pthread_mutex_unlock(&q->mu);
	if (rc) *bad = wr;
	if (queued) ctx_kick(q->c);
	return rc;
}

/* post_recvs appends wr to the receive ring rq (head, n, max): 0 or the
 * errno ibv_post_recv answers, *bad the request that failed. */
static int post_recvs(struct frecv *rq, uint32_t head, uint32_t *n, uint32_t max, uint32_t max_sge,
                      struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
	for (; wr; wr = wr->next) {
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > max_sge) { *bad = wr; return EINVAL; }
		if (*n == max) { *bad = wr; return ENOMEM; }
		struct frecv *r = &rq[(head + *n) % max];
		r->wr_id = wr->wr_id;
		r->nsge = wr->num_sge;
		memcpy(r->sge, wr->sg_list, sizeof(struct ibv_sge) * wr->num_sge);
		(*n)++;
	}
	return 0;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
	struct fqp *q = (struct fqp *)qp;
	if (q->srq) { *bad = wr; return EINVAL; } /* its receives go to the SRQ */
	pthread_mutex_lock(&q->mu);
	int rc = qp->state == IBV_QPS_RESET ? EINVAL : 0;
	if (rc) *bad = wr;
	else rc = post_recvs(q->rq, q->rq_head, &q->rq_n, q->max_recv, q->max_recv_sge, wr, bad);
	if (qp->state == IBV_QPS_ERR) qp_set_err_locked(q);
	pthread_mutex_unlock(&q->mu);
	return rc;
}

/* ---- the ibv_wr_* calls of an ibv_qp_ex ---- */

static struct fqp *QX(struct ibv_qp_ex *x) { return (struct fqp *)x; }

static void wrx_start(struct ibv_qp_ex *x) {
	struct fqp *q = QX(x);
	pthread_mutex_lock(&q->mu); /* held until wr_complete or wr_abort, as a provider holds its SQ lock */
	q->wr_n = 0;
	q->wr_err = 0;
	q->wr_cur = NULL;
}

/* wrx_new opens the next work request of the batch. */
static struct fwr *wrx_new(struct fqp *q, int opcode, uint64_t op_flag) {
	q->wr_cur = NULL;
	if (q->wr_err) return NULL;
	if (!(q->send_ops & op_flag)) { q->wr_err = EOPNOTSUPP; return NULL; } /* not asked for at create */
	if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR) { q->wr_err = EINVAL; return NULL; }
	if (q->sq_n + q->wr_n == q->max_send) { q->wr_err = ENOMEM; return NULL; }
	struct fwr *w = &q->sq[(q->sq_head + q->sq_n + q->wr_n) % q->max_send];
	memset(w, 0, offsetof(struct fwr, inl));
	w->wr_id = q->qpx.wr_id;
	w->flags = q->qpx.wr_flags & ~IBV_SEND_INLINE;
	w->opcode = opcode;
	q->wr_n++;
	q->wr_cur = w;
	return w;
}

static void wrx_rdma_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr) {
	struct fwr *w = wrx_new(QX(x), IBV_WR_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE);
	if (w) { w->rkey = rkey; w->raddr = raddr; }
}

static void wrx_rdma_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr, uint32_t imm) {
	struct fwr *w = wrx_new(QX(x), IBV_WR_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM);
	if (w) { w->rkey = rkey; w->raddr = raddr; w->imm = imm; }
}

static void wrx_rdma_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr) {
	struct fwr *w = wrx_new(QX(x), IBV_WR_RDMA_READ, IBV_QP_EX_WITH_RDMA_READ);
	if (w) { w->rkey = rkey; w->raddr = raddr; }
}

static void wrx_send(struct ibv_qp_ex *x) { wrx_new(QX(x), IBV_WR_SEND, IBV_QP_EX_WITH_SEND); }

static void wrx_send_imm(struct ibv_qp_ex *x, uint32_t imm) {
	struct fwr *w = wrx_new(QX(x), IBV_WR_SEND_WITH_IMM, IBV_QP_EX_WITH_SEND_WITH_IMM);
	if (w) w->imm = imm;
}

static void wrx_set_sge_list(struct ibv_qp_ex *x, size_t n, const struct ibv_sge *sg) {
	struct fqp *q = QX(x);
	if (!q->wr_cur) { if (!q->wr_err) q->wr_err = EINVAL; return; }
	if (n > q->max_sge) { q->wr_err = EINVAL; return; }
	q->wr_cur->nsge = (int)n;
	memcpy(q->wr_cur->sge, sg, n * sizeof(*sg));
	q->wr_cur->inl_len = 0;
	q->wr_cur->flags &= ~IBV_SEND_INLINE;
}

static void wrx_set_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr, uint32_t len) {
	struct ibv_sge s = {addr, len, lkey};
	wrx_set_sge_list(x, 1, &s);
}

static void wrx_set_inline_data_list(struct ibv_qp_ex *x, size_t n, const struct ibv_data_buf *b) {
	struct fqp *q = QX(x);
	struct fwr *w = q->wr_cur;
	if (!w) { if (!q->wr_err) q->wr_err = EINVAL; return; }
	if (w->opcode == IBV_WR_RDMA_READ) { q->wr_err = EINVAL; return; }
	size_t total = 0;
	for (size_t i = 0; i < n; i++) total += b[i].length;
	if (total > q->max_inline) { q->wr_err = ENOMEM; return; }
	w->inl_len = 0;
	for (size_t i = 0; i < n; i++) {
		memcpy(w->inl + w->inl_len, b[i].addr, b[i].length);
		w->inl_len += (uint32_t)b[i].length;
	}
	w->nsge = 0;
	w->flags |= IBV_SEND_INLINE;
}

static void wrx_set_inline_data(struct ibv_qp_ex *x, void *addr, size_t len) {
	struct ibv_data_buf b = {addr, len};
	wrx_set_inline_data_list(x, 1, &b);
}

static int wrx_complete(struct ibv_qp_ex *x) {
	struct fqp *q = QX(x);
	int rc = q->wr_err, n = (int)q->wr_n;
	if (rc == 0) q->sq_n += q->wr_n; /* else nothing of the batch is posted */
	q->wr_n = 0;
	q->wr_cur = NULL;
	pthread_mutex_unlock(&q->mu);
	if (rc == 0 && n > 0) ctx_kick(q->c);
	return rc;
}

static void wrx_abort(struct ibv_qp_ex *x) {
	struct fqp *q = QX(x);
	q->wr_n = 0;
	q->wr_cur = NULL;
	pthread_mutex_unlock(&q->mu);
}

/* The work requests an RC QP of the fake cannot post: the batch fails. */
static void wrx_unsupported(struct fqp *q) {
	q->wr_cur = NULL;
	if (!q->wr_err) q->wr_err = EOPNOTSUPP;
}
static void wrx_atomic_cmp_swp(struct ibv_qp_ex *x, uint32_t k, uint64_t a, uint64_t c, uint64_t s) {
	(void)k, (void)a, (void)c, (void)s;
	wrx_unsupported(QX(x));
}
static void wrx_atomic_fetch_add(struct ibv_qp_ex *x, uint32_t k, uint64_t a, uint64_t v) {
	(void)k, (void)a, (void)v;
	wrx_unsupported(QX(x));
}
static void wrx_bind_mw(struct ibv_qp_ex *x, struct ibv_mw *mw, uint32_t k, const struct ibv_mw_bind_info *b) {
	(void)mw, (void)k, (void)b;
	wrx_unsupported(QX(x));
}
static void wrx_local_inv(struct ibv_qp_ex *x, uint32_t k) { (void)k; wrx_unsupported(QX(x)); }
static void wrx_send_inv(struct ibv_qp_ex *x, uint32_t k) { (void)k; wrx_unsupported(QX(x)); }
static void wrx_send_tso(struct ibv_qp_ex *x, void *h, uint16_t hs, uint16_t mss) {
	(void)h, (void)hs, (void)mss;
	wrx_unsupported(QX(x));
}
static void wrx_set_ud_addr(struct ibv_qp_ex *x, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey) {
	(void)ah, (void)qpn, (void)qkey;
	wrx_unsupported(QX(x));
}
static void wrx_set_xrc_srqn(struct ibv_qp_ex *x, uint32_t n) { (void)n; wrx_unsupported(QX(x)); }
static void wrx_atomic_write(struct ibv_qp_ex *x, uint32_t k, uint64_t a, const void *v) {
	(void)k, (void)a, (void)v;
	wrx_unsupported(QX(x));
}

static void wrx_init(struct fqp *q) {
	struct ibv_qp_ex *x = &q->qpx;
	x->wr_atomic_cmp_swp = wrx_atomic_cmp_swp;
	x->wr_atomic_fetch_add = wrx_atomic_fetch_add;
	x->wr_bind_mw = wrx_bind_mw;
	x->wr_local_inv = wrx_local_inv;
	x->wr_rdma_read = wrx_rdma_read;
	x->wr_rdma_write = wrx_rdma_write;
	x->wr_rdma_write_imm = wrx_rdma_write_imm;
	x->wr_send = wrx_send;
	x->wr_send_imm = wrx_send_imm;
	x->wr_send_inv = wrx_send_inv;
	x->wr_send_tso = wrx_send_tso;
	x->wr_set_ud_addr = wrx_set_ud_addr;
	x->wr_set_xrc_srqn = wrx_set_xrc_srqn;
	x->wr_set_inline_data = wrx_set_inline_data;
	x->wr_set_inline_data_list = wrx_set_inline_data_list;
	x->wr_set_sge = wrx_set_sge;
	x->wr_set_sge_list = wrx_set_sge_list;
	x->wr_start = wrx_start;
	x->wr_complete = wrx_complete;
	x->wr_abort = wrx_abort;
	x->wr_atomic_write = wrx_atomic_write;
}

/* ---- shared receive queues ---- */

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a) {
	if (a->attr.max_wr == 0 || a->attr.max_wr > MAXWR || a->attr.max_sge == 0 || a->attr.max_sge > MAXSGE) {
		errno = EINVAL;
		return NULL;
	}
	struct fsrq *s = calloc(1, sizeof(*s));
	if (!s) return NULL;
	s->rq = calloc(a->attr.max_wr, sizeof(struct frecv));
	if (!s->rq) { free(s); errno = ENOMEM; return NULL; }
	s->max = a->attr.max_wr;
	s->max_sge = a->attr.max_sge;
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	s->srq.context = pd->context;
	s->srq.srq_context = a->srq_context;
	s->srq.pd = pd;
	atomic_fetch_add(&((struct fpd *)pd)->users, 1);
	a->attr.srq_limit = 0;
	return &s->srq;
}

int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *a, int mask) {
	struct fsrq *s = (struct fsrq *)srq;
	if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
	pthread_mutex_lock(&s->mu);
	int rc = 0;
	if (mask & IBV_SRQ_MAX_WR) {
		if (a->max_wr == 0 || a->max_wr > MAXWR || a->max_wr < s->n) {
			rc = EINVAL;
		} else {
			struct frecv *r = calloc(a->max_wr, sizeof(*r));
			if (!r) {
				rc = ENOMEM;
			} else {
				for (uint32_t i = 0; i < s->n; i++) r[i] = s->rq[(s->head + i) % s->max];
				free(s->rq);
				s->rq = r;
				s->head = 0;
				s->max = a->max_wr;
			}
		}
	}
	if (rc == 0 && (mask & IBV_SRQ_LIMIT)) {
		if (a->srq_limit > s->max) rc = EINVAL;
		else s->limit = a->srq_limit; /* armed: an event when fewer receives are left */
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *a) {
	struct fsrq *s = (struct fsrq *)srq;
	pthread_mutex_lock(&s->mu);
	a->max_wr = s->max;
	a->max_sge = s->max_sge;
	a->srq_limit = s->limit;
	pthread_mutex_unlock(&s->mu);
	return 0;
}

int ibv_destroy_srq(struct ibv_srq *srq) {
	struct fsrq *s = (struct fsrq *)srq;
	if (atomic_load(&s->users) > 0) return EBUSY; /* QPs still use it */
	atomic_fetch_sub(&((struct fpd *)srq->pd)->users, 1);
	free(s->rq);
	free(s);
	return 0;
}

static int fake_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
	struct fsrq *s = (struct fsrq *)srq;
	pthread_mutex_lock(&s->mu);
	int rc = post_recvs(s->rq, s->head, &s->n, s->max, s->max_sge, wr, bad);
	pthread_mutex_unlock(&s->mu);
	return rc;
}
/* ---- memory regions ---- */

struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx) {
	static atomic_uint handles;
	struct fpd *p = calloc(1, sizeof(*p));
	if (!p) return NULL;
	p->pd.context = ctx;
	p->pd.handle = atomic_fetch_add(&handles, 1);
	return &p->pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd) {
	struct fpd *p = (struct fpd *)pd;
	if (atomic_load(&p->users) > 0) return EBUSY; /* MRs, QPs or SRQs still use it */
	free(p);
	return 0;
}

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
	struct fctx *c = CTX(pd->context);
	atomic_fetch_add(&((struct fpd *)pd)->users, 1);
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

struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, int access) {
	if (iova != (uintptr_t)addr) { errno = EOPNOTSUPP; return NULL; }
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
			atomic_fetch_sub(&((struct fpd *)m->mr.pd)->users, 1);
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
			if (r == 0) errno = ECONNRESET; /* the peer closed */
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

/* take_recv takes the next receive for q (q->mu held): from its shared
 * receive queue or its own; 0 when none is posted. */
static int take_recv(struct fqp *q, struct frecv *out) {
	if (q->srq) {
		struct fsrq *s = q->srq;
		pthread_mutex_lock(&s->mu);
		int got = s->n > 0;
		if (got) {
			*out = s->rq[s->head];
			s->head = (s->head + 1) % s->max;
			s->n--;
		}
		int limit = got && s->limit > 0 && s->n < s->limit;
		if (limit) s->limit = 0; /* the limit event disarms it */
		pthread_mutex_unlock(&s->mu);
		if (limit) async_push(q->c, IBV_EVENT_SRQ_LIMIT_REACHED, 0, &s->srq);
		return got;
	}
	if (q->rq_n == 0) return 0;
	*out = q->rq[q->rq_head];
	q->rq_head = (q->rq_head + 1) % q->max_recv;
	q->rq_n--;
	return 1;
}

/* serve executes request r from a peer's QP on this context: the
 * completion status for the requester (or DROP, RNR). When the request
 * consumes a receive, the status is sent on fd (the ACK) before the
 * receive's completion is written, as a NIC acknowledges what it placed
 * without waiting for the program: a peer that exits as soon as it sees
 * its last receive must not leave the sender's last SEND unacknowledged.
 * *acked tells whether it was sent. */
static int serve(struct fctx *c, const struct req *r, int fd, int *acked) {
	*acked = 0;
	if (!atomic_load(&c->d->port_up)) return DROP;
	pthread_mutex_lock(&G);
	struct fqp *q = NULL;
	for (struct fqp *x = qps; x; x = x->next)
		if (x->c == c && x->qp.qp_num == r->dst_qpn) { q = x; break; }
	if (!q) { pthread_mutex_unlock(&G); return DROP; }
	pthread_mutex_lock(&q->mu);
	int st = q->qp.state;
	int from_peer = q->is_global ? r->grh && memcmp(q->dgid.raw, r->src_gid, 16) == 0 : r->src_lid == q->dlid;
	if ((st != IBV_QPS_RTR && st != IBV_QPS_RTS) || q->dest_qpn != r->src_qpn || !from_peer) {
		pthread_mutex_unlock(&q->mu);
		pthread_mutex_unlock(&G);
		return DROP;
	}
	struct iovec remote[MAXSGE], local[MAXSGE];
	int nlocal = 0;
	for (uint32_t i = 0; i < r->nsge; i++) {
		remote[i].iov_base = (void *)(uintptr_t)r->sge[i].addr;
		remote[i].iov_len = r->sge[i].len;
	}
	int status = IBV_WC_SUCCESS, rstatus = IBV_WC_SUCCESS;
	struct frecv rv;
	memset(&rv, 0, sizeof(rv));
	int is_send = r->op == IBV_WR_SEND || r->op == IBV_WR_SEND_WITH_IMM;
	int use_recv = is_send || r->op == IBV_WR_RDMA_WRITE_WITH_IMM;
	if (!is_send) {
		int need = r->op == IBV_WR_RDMA_READ ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
		struct fmr *m = mr_find(q->qp.pd, r->rkey, 1, r->raddr, r->len);
		if (!m || !(m->access & need) || !(q->access & need)) {
			status = IBV_WC_REM_ACCESS_ERR;
		} else if (r->len > 0) {
			local[0].iov_base = (void *)(uintptr_t)mr_host(m, r->raddr);
			local[0].iov_len = r->len;
			nlocal = 1;
		}
	}
	if (status == IBV_WC_SUCCESS && use_recv) {
		if (!take_recv(q, &rv)) {
			pthread_mutex_unlock(&q->mu);
			pthread_mutex_unlock(&G);
			return RNR;
		}
		if (is_send) { /* scatter over the receive's buffers */
			uint64_t left = r->len;
			for (int i = 0; i < rv.nsge && left > 0 && rstatus == IBV_WC_SUCCESS; i++) {
				uint32_t n = rv.sge[i].length < left ? rv.sge[i].length : (uint32_t)left;
				if (n == 0) continue;
				struct fmr *rm = mr_find(q->qp.pd, rv.sge[i].lkey, 0, rv.sge[i].addr, n);
				if (!rm || !(rm->access & IBV_ACCESS_LOCAL_WRITE)) {
					rstatus = IBV_WC_LOC_PROT_ERR;
					status = IBV_WC_REM_OP_ERR;
					break;
				}
				local[nlocal].iov_base = (void *)(uintptr_t)mr_host(rm, rv.sge[i].addr);
				local[nlocal].iov_len = n;
				nlocal++;
				left -= n;
			}
			if (rstatus == IBV_WC_SUCCESS && left > 0) {
				rstatus = IBV_WC_LOC_LEN_ERR; /* the message is longer than the receive */
				status = IBV_WC_REM_INV_REQ_ERR;
			}
		}
	}
	if (status == IBV_WC_SUCCESS && r->len > 0) {
		ssize_t moved;
		if (r->op == IBV_WR_RDMA_READ)
			moved = process_vm_writev(r->pid, local, nlocal, remote, r->nsge, 0);
		else
			moved = process_vm_readv(r->pid, local, nlocal, remote, r->nsge, 0);
		if (moved != (ssize_t)r->len) {
			status = IBV_WC_REM_OP_ERR;
			rstatus = IBV_WC_GENERAL_ERR;
		}
	}
	if (use_recv && (status == IBV_WC_SUCCESS || rstatus != IBV_WC_SUCCESS)) {
		int32_t ack = status;
		*acked = 1;
		if (wr_full(fd, &ack, sizeof(ack)) != 0) *acked = -1;
		struct ibv_wc wc;
		memset(&wc, 0, sizeof(wc));
		wc.wr_id = rv.wr_id;
		wc.status = rstatus;
		wc.opcode = r->op == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
		wc.byte_len = r->len;
		wc.qp_num = q->qp.qp_num;
		wc.src_qp = r->src_qpn;
		wc.slid = r->src_lid;
		if (r->op != IBV_WR_SEND) {
			wc.wc_flags = IBV_WC_WITH_IMM;
			wc.imm_data = r->imm;
		}
		if (r->grh) wc.wc_flags |= IBV_WC_GRH;
		cq_push((struct fcq *)q->qp.recv_cq, &wc, (r->flags & IBV_SEND_SOLICITED) != 0);
		if (rstatus != IBV_WC_SUCCESS) qp_set_err_locked(q);
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
		int acked = 0;
		int32_t st = r.nsge > MAXSGE ? IBV_WC_REM_INV_REQ_ERR : serve(k->c, &r, k->fd, &acked);
		if (acked < 0 || (!acked && wr_full(k->fd, &st, sizeof(st)) != 0)) break;
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

/* The responder socket of the context whose GID is gid. */
static void sock_path(char *out, size_t n, const uint8_t gid[16]) {
	uint32_t pid = ((uint32_t)gid[8] << 24) | ((uint32_t)gid[9] << 16) | ((uint32_t)gid[10] << 8) | gid[11];
	snprintf(out, n, "%s/%u-%u-%u.s", sockdir, pid, gid[12], ((unsigned)gid[13] << 8) | gid[14]);
}

/* The same socket, by the LID of an IB port (a symbolic link). */
static void lid_path(char *out, size_t n, unsigned lid) { snprintf(out, n, "%s/lid-%u.s", sockdir, lid); }

static void msleep(int ms) {
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* no_ack waits what q's transport would wait for an ACK that never comes
 * (timeout and retries, us microseconds), or until q is destroyed, then
 * returns the completion status of a request that was never acknowledged:
 * as on a real fabric, a peer that went away (its QP destroyed, its
 * process gone) fails the sender only after the retries. */
static int no_ack(struct fqp *q, long us) {
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		pthread_mutex_lock(&q->mu);
		int dead = q->dead;
		pthread_mutex_unlock(&q->mu);
		clock_gettime(CLOCK_MONOTONIC, &now);
		long el = (now.tv_sec - start.tv_sec) * 1000000L + (now.tv_nsec - start.tv_nsec) / 1000;
		if (dead || el >= us) return IBV_WC_RETRY_EXC_ERR;
		msleep(us - el < 5000 ? (int)((us - el + 999) / 1000) : 5);
	}
}

int fakeverbs_set_port(const char *dev, int up);

/* The longest a WR waits at a hold (fakeverbs_hold), in milliseconds of
 * sleep: a test that never releases it does not hang. */
#define HOLD_MAX_MS 60000

/* hold_wait lets d's next hold_pass WRs through and makes every later one
 * wait while d is held (at most HOLD_MAX_MS), counted in d->held: a test
 * sees WRs in flight at the device, takes its port down, releases them and
 * knows they meet the port down, whatever the machine's load. */
static void hold_wait(struct fdev *d) {
	int p = atomic_load(&d->hold_pass);
	while (p > 0)
		if (atomic_compare_exchange_weak(&d->hold_pass, &p, p - 1)) return;
	atomic_fetch_add(&d->held, 1);
	for (int ms = 0; atomic_load(&d->hold_on) && ms < HOLD_MAX_MS; ms++) msleep(1);
	atomic_fetch_sub(&d->held, 1);
}

/* Runs one WR of q (not holding any lock); returns its completion status. */
static int execute(struct fqp *q, const struct fwr *w, int fd_in, int *fd_out) {
	struct fctx *c = q->c;
	struct fdev *d = c->d;
	*fd_out = fd_in;
	int us = atomic_load(&d->delay_us);
	if (us > 0) usleep(us);
	if (atomic_load(&d->hold_on)) hold_wait(d);
	if (atomic_load(&d->down_after) >= 0 && atomic_fetch_sub(&d->down_after, 1) == 0) {
		/* The link dies: this WR and every later one complete at once with
		 * the error a dead link gives (not after the port-down wait each,
		 * which would serialize the batch's remaining WRs past its
		 * deadline), and the port goes down. */
		atomic_store(&d->fail_status, IBV_WC_RETRY_EXC_ERR);
		atomic_store(&d->fail_count, 1 << 30);
		fakeverbs_set_port(d->dev.name, 0);
	}
	int fc = atomic_load(&d->fail_count);
	while (fc > 0) {
		if (atomic_compare_exchange_weak(&d->fail_count, &fc, fc - 1)) return atomic_load(&d->fail_status);
	}
	if (!atomic_load(&d->port_up)) {
		msleep(20); /* the transport timeout, shortened */
		return IBV_WC_RETRY_EXC_ERR;
	}
	struct req r;
	memset(&r, 0, sizeof(r));
	uint64_t len = 0;
	if (w->flags & IBV_SEND_INLINE) { /* the bytes were copied at post time */
		r.nsge = w->inl_len ? 1 : 0;
		r.sge[0].addr = (uintptr_t)w->inl;
		r.sge[0].len = w->inl_len;
		len = w->inl_len;
	} else {
		pthread_mutex_lock(&G);
		for (int i = 0; i < w->nsge; i++) {
			int need = w->opcode == IBV_WR_RDMA_READ ? IBV_ACCESS_LOCAL_WRITE : 0;
			struct fmr *m = mr_find(q->qp.pd, w->sge[i].lkey, 0, w->sge[i].addr, w->sge[i].length);
			if (!m || (m->access & need) != need) { pthread_mutex_unlock(&G); return IBV_WC_LOC_PROT_ERR; }
			r.sge[i].addr = mr_host(m, w->sge[i].addr);
			r.sge[i].len = w->sge[i].length;
			len += w->sge[i].length;
		}
		pthread_mutex_unlock(&G);
		r.nsge = w->nsge;
	}
	r.op = w->opcode;
	r.flags = w->flags;
	r.dst_qpn = q->dest_qpn;
	r.src_qpn = q->qp.qp_num;
	r.src_lid = c->lid;
	r.grh = q->is_global;
	if (q->is_global) {
		memcpy(r.src_gid, c->gid.raw, 16);
		r.src_gid[15] = q->sgid_index; /* the source GID the QP was brought up with */
	}
	r.rkey = w->rkey;
	r.raddr = w->raddr;
	r.len = (uint32_t)len;
	r.imm = w->imm;
	r.pid = getpid();
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
			if (q->is_global) sock_path(sa.sun_path, sizeof(sa.sun_path), q->dgid.raw);
			else lid_path(sa.sun_path, sizeof(sa.sun_path), q->dlid);
			if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
				if (fd >= 0) close(fd);
				*fd_out = -1;
				return no_ack(q, tmo_us); /* no such port on the fabric */
			}
			struct timeval tv = {tmo_us / 1000000, tmo_us % 1000000};
			setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		}
		int32_t st;
		if (wr_full(fd, &r, sizeof(r)) != 0 || rd_full(fd, &st, sizeof(st)) != 0) {
			/* The peer went away (or, past SO_RCVTIMEO, stopped answering). */
			int timed_out = errno == EAGAIN || errno == EWOULDBLOCK;
			close(fd);
			*fd_out = -1;
			return timed_out ? IBV_WC_RETRY_EXC_ERR : no_ack(q, tmo_us);
		}
		*fd_out = fd;
		if (st == DROP) return no_ack(q, tmo_us); /* no QP there to acknowledge */
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
					cq_push((struct fcq *)q->qp.send_cq, &wc, 0);
				}
				progress = 1;
			}
		}
	}
}

/* ---- contexts ---- */

int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *a) {
	struct fctx *c = CTX(ctx);
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "fake-1.0");
	a->node_guid = htobe64(node_guid(c->d)); /* network order, as every GUID */
	a->sys_image_guid = a->node_guid;
	a->max_mr_size = max_mr_size;
	a->page_size_cap = ~(uint64_t)(sysconf(_SC_PAGESIZE) - 1);
	a->vendor_id = 0x02c9;
	a->vendor_part_id = 4123;
	a->hw_ver = 0;
	a->max_qp = 1 << 16;
	a->max_qp_wr = MAXWR;
	a->device_cap_flags = IBV_DEVICE_BAD_PKEY_CNTR | IBV_DEVICE_BAD_QKEY_CNTR | IBV_DEVICE_CHANGE_PHY_PORT |
	                      IBV_DEVICE_CURR_QP_STATE_MOD | IBV_DEVICE_PORT_ACTIVE_EVENT |
	                      IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE |
	                      IBV_DEVICE_N_NOTIFY_CQ;
	a->max_sge = MAXSGE;
	a->max_sge_rd = MAXSGE;
	a->max_cq = 1 << 16;
	a->max_cqe = 1 << 20;
	a->max_mr = 1 << 20;
	a->max_pd = 1 << 16;
	a->max_qp_rd_atom = 16;
	a->max_res_rd_atom = 16 << 16;
	a->max_qp_init_rd_atom = 16;
	a->atomic_cap = IBV_ATOMIC_NONE;
	a->max_srq = 1 << 16;
	a->max_srq_wr = MAXWR;
	a->max_srq_sge = MAXSGE;
	a->max_pkeys = 1;
	a->local_ca_ack_delay = 16;
	a->phys_port_cnt = 1;
	return 0;
}

static void port_attr(struct fctx *c, struct ibv_port_attr *a) {
	memset(a, 0, sizeof(*a));
	int up = atomic_load(&c->d->port_up);
	a->state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
	a->phys_state = up ? 5 : 3; /* LinkUp, Disabled */
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = IBV_MTU_4096;
	a->gid_tbl_len = ngids;
	a->max_msg_sz = 1u << 30;
	a->pkey_tbl_len = 1;
	a->max_vl_num = 4;
	a->active_width = 2;  /* 4x */
	a->active_speed = 64; /* HDR: 50 Gb/s per lane -> 200 Gb/s */
	if (ib_link) {
		a->link_layer = IBV_LINK_LAYER_INFINIBAND;
		a->lid = c->lid;
		a->sm_lid = 1;
		a->subnet_timeout = 18;
	} else {
		a->link_layer = IBV_LINK_LAYER_ETHERNET;
		a->lid = 0;
	}
}

/* The exported ibv_query_port: the caller's struct may be the short one of
 * old libibverbs, so only its leading part is written. */
int(ibv_query_port)(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *pa) {
	if (port != 1) return EINVAL;
	struct ibv_port_attr a;
	port_attr(CTX(ctx), &a);
	memcpy(pa, &a, offsetof(struct ibv_port_attr, link_layer) + 1);
	return 0;
}

/* The extended context's query_port: verbs.h's inline ibv_query_port,
 * told the caller's size. */
static int fake_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *pa, size_t len) {
	if (port != 1) return EINVAL;
	struct ibv_port_attr a;
	port_attr(CTX(ctx), &a);
	memset(pa, 0, len);
	memcpy(pa, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

/* gid_entry is entry index of the port's GID table: 0, or ENODATA for an
 * empty entry (index 0 of a RoCE port), EINVAL past the table. */
static int gid_entry(struct fctx *c, uint32_t port, uint32_t index, union ibv_gid *gid, int *type) {
	if (port != 1 || index >= (uint32_t)ngids) return EINVAL;
	memset(gid, 0, sizeof(*gid));
	if (index == 0 && !ib_link) return ENODATA;
	*gid = c->gid;
	gid->raw[15] = (uint8_t)index; /* one port, several GIDs */
	*type = ib_link ? IBV_GID_TYPE_IB : IBV_GID_TYPE_ROCE_V2;
	return 0;
}

int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid) {
	int type, rc = index < 0 ? EINVAL : gid_entry(CTX(ctx), port, (uint32_t)index, gid, &type);
	if (rc == ENODATA) return 0; /* an empty entry reads as zeroes */
	if (rc) {
		errno = rc;
		return -1;
	}
	return 0;
}

int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *e,
                      uint32_t flags, size_t sz) {
	if (flags) return EINVAL;
	if (sz < sizeof(*e)) return EINVAL;
	union ibv_gid g;
	int type;
	int rc = gid_entry(CTX(ctx), port, index, &g, &type);
	if (rc) return rc;
	memset(e, 0, sz);
	e->gid = g;
	e->gid_index = index;
	e->port_num = port;
	e->gid_type = type;
	return 0;
}

ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries, size_t max, uint32_t flags,
                             size_t sz) {
	if (flags || sz < sizeof(*entries)) return -EINVAL;
	size_t n = 0;
	for (uint32_t i = 0; i < (uint32_t)ngids; i++) {
		struct ibv_gid_entry e;
		if (_ibv_query_gid_ex(ctx, 1, i, &e, 0, sizeof(e)) != 0) continue;
		if (n == max) return -EINVAL;
		memset((char *)entries + n * sz, 0, sz);
		memcpy((char *)entries + n * sz, &e, sizeof(e));
		n++;
	}
	return (ssize_t)n;
}

/* rdma-core's private ibv_query_gid_type (ibv_devinfo calls it). */
int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index, int *type) {
	union ibv_gid g;
	int t;
	int rc = gid_entry(CTX(ctx), port, index, &g, &t);
	if (rc == ENODATA) rc = 0, t = IBV_GID_TYPE_ROCE_V2; /* the type of an empty RoCE entry */
	if (rc) {
		errno = rc;
		return -1;
	}
	*type = t == IBV_GID_TYPE_ROCE_V2 ? GID_TYPE_SYSFS_ROCE_V2 : GID_TYPE_SYSFS_IB_ROCE_V1;
	return 0;
}

/* One P_Key, the default full-membership 0xffff, at index 0. */
int ibv_query_pkey(struct ibv_context *ctx, uint8_t port, int index, uint16_t *pkey) {
	(void)ctx;
	if (port != 1 || index != 0) {
		errno = EINVAL;
		return -1;
	}
	*pkey = htobe16(0xffff);
	return 0;
}

int ibv_get_pkey_index(struct ibv_context *ctx, uint8_t port, uint16_t pkey) {
	(void)ctx;
	if (port != 1) return -EINVAL;
	return (be16toh(pkey) & 0x7fff) == 0x7fff ? 0 : -ENOENT;
}

/* open_lid gives c a LID no other process sharing FAKEVERBS_DIR has: the
 * link lid-<lid>.s to its socket, made exclusively. */
static int open_lid(struct fctx *c) {
	unsigned start = ((unsigned)getpid() * 40503u + (unsigned)c->gid.raw[14]) % 0xbffe;
	for (unsigned i = 0; i < 0xbffe; i++) {
		unsigned lid = 1 + (start + i) % 0xbffe;
		lid_path(c->lidlink, sizeof(c->lidlink), lid);
		for (int again = 0; again < 2; again++) {
			if (symlink(c->sock, c->lidlink) == 0) {
				c->lid = (uint16_t)lid;
				return 0;
			}
			if (errno != EEXIST) return -1;
			struct stat st;
			if (stat(c->lidlink, &st) == 0 || errno != ENOENT) break; /* taken */
			unlink(c->lidlink); /* a stale link: its process is gone */
		}
	}
	errno = EADDRINUSE;
	return -1;
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
	struct ibv_context *ctx = &c->vctx.context;
	ctx->device = dev;
	ctx->cmd_fd = -1;
	ctx->async_fd = ap[0];
	c->async_w = ap[1];
	ctx->num_comp_vectors = 1;
	ctx->abi_compat = KVF_VERBS_ABI_IS_EXTENDED; /* an extended context: see verbs_context */
	c->vctx.sz = sizeof(c->vctx);
	c->vctx.query_port = fake_query_port;
	c->vctx.create_qp_ex = fake_create_qp_ex;
	pthread_mutex_init(&ctx->mutex, NULL);
	ctx->ops.poll_cq = fake_poll_cq;
	ctx->ops.req_notify_cq = fake_req_notify_cq;
	ctx->ops.post_send = fake_post_send;
	ctx->ops.post_recv = fake_post_recv;
	ctx->ops.post_srq_recv = fake_post_srq_recv;
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
	    listen(c->listen_fd, 128) != 0 || (ib_link && open_lid(c) != 0)) {
		int e = errno;
		if (c->listen_fd >= 0) close(c->listen_fd);
		unlink(c->sock);
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
	return ctx;
}

int ibv_close_device(struct ibv_context *ctx) {
	struct fctx *c = CTX(ctx);
	pthread_mutex_lock(&G);
	for (struct fctx **p = &ctxs; *p; p = &(*p)->next)
		if (*p == c) { *p = c->next; break; }
	pthread_mutex_unlock(&G);
	shutdown(c->listen_fd, SHUT_RDWR);
	pthread_join(c->resp, NULL);
	close(c->listen_fd);
	unlink(c->sock);
	if (c->lid) unlink(c->lidlink);
	pthread_mutex_lock(&c->mu);
	c->stop = 1;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->req, NULL);
	close(ctx->async_fd);
	close(c->async_w);
	/* Connection threads may still hold c: it is kept (a test fixture). */
	return 0;
}

/* ---- sysfs ---- */

/* sysfs_value is what file of fake device d's sysfs directory reads: the
 * length written to buf, or -1 when there is no such file. */
static int sysfs_value(struct fdev *d, const char *file, char *buf, size_t size) {
	char v[128];
	unsigned idx;
	uint64_t g = node_guid(d);
	char guid[24];
	snprintf(guid, sizeof(guid), "%04x:%04x:%04x:%04x", (unsigned)(g >> 48) & 0xffff, (unsigned)(g >> 32) & 0xffff,
	         (unsigned)(g >> 16) & 0xffff, (unsigned)g & 0xffff);
	v[0] = 0;
	if (strcmp(file, "node_type") == 0) snprintf(v, sizeof(v), "1: CA");
	else if (strcmp(file, "node_guid") == 0 || strcmp(file, "sys_image_guid") == 0) snprintf(v, sizeof(v), "%s", guid);
	else if (strcmp(file, "fw_ver") == 0) snprintf(v, sizeof(v), "fake-1.0");
	else if (strcmp(file, "hca_type") == 0) snprintf(v, sizeof(v), "fakeverbs");
	else if (strcmp(file, "hw_rev") == 0) snprintf(v, sizeof(v), "0");
	else if (strcmp(file, "board_id") == 0) snprintf(v, sizeof(v), "FAKEVERBS_%04d", d->idx);
	else if (strcmp(file, "ports/1/state") == 0)
		snprintf(v, sizeof(v), atomic_load(&d->port_up) ? "4: ACTIVE" : "1: DOWN");
	else if (strcmp(file, "ports/1/link_layer") == 0) snprintf(v, sizeof(v), ib_link ? "InfiniBand" : "Ethernet");
	else if (sscanf(file, "ports/1/gid_attrs/types/%u", &idx) == 1 && idx < (unsigned)ngids)
		snprintf(v, sizeof(v), ib_link ? "IB/RoCE v1" : "RoCE v2");
	else return -1; /* per-context values (LID, GIDs) have no device-wide file */
	size_t n = strlen(v);
	if (size == 0) return 0;
	if (n >= size) n = size - 1;
	memcpy(buf, v, n);
	buf[n] = 0;
	return (int)n;
}

/* As rdma-core's: reads dir/file into buf (NUL-terminated, without the
 * trailing newline) and returns its length, -1 on error. The fake devices'
 * directories are answered from sysfs_value. */
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size) {
	struct fdev *d = devofpath(dir);
	if (d) {
		int n = sysfs_value(d, file, buf, size);
		if (n < 0) errno = ENOENT;
		return n;
	}
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) return -1;
	ssize_t n = read(fd, buf, size);
	close(fd);
	if (n < 0) return -1;
	if (n > 0 && (size_t)n == size) n--;
	if (n > 0 && buf[n - 1] == '\n') n--;
	if (size) buf[n] = 0;
	return (int)n;
}

int ibv_get_sysfs_path(char *buf, size_t size) {
	const char *p = getenv("SYSFS_PATH");
	if (!p || !*p) p = "/sys";
	snprintf(buf, size, "%s", p);
	return 0;
}

/* ---- strings and rates ---- */

/* The names of the enums, in the fake's own words. */
const char *ibv_wc_status_str(enum ibv_wc_status s) {
	static const char *const names[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "work request flushed",
		[IBV_WC_MW_BIND_ERR] = "memory window bind error",
		[IBV_WC_BAD_RESP_ERR] = "bad response",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retries exhausted",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "receiver-not-ready retries exhausted",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "remote abort",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "tag matching error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "tag matching rendezvous incomplete",
	};
	if ((unsigned)s >= sizeof(names) / sizeof(names[0]) || !names[s]) return "unknown";
	return names[s];
}

const char *ibv_event_type_str(enum ibv_event_type e) {
	static const char *const names[] = {
		[IBV_EVENT_CQ_ERR] = "CQ overrun",
		[IBV_EVENT_QP_FATAL] = "QP fatal error",
		[IBV_EVENT_QP_REQ_ERR] = "QP invalid request",
		[IBV_EVENT_QP_ACCESS_ERR] = "QP access violation",
		[IBV_EVENT_COMM_EST] = "communication established",
		[IBV_EVENT_SQ_DRAINED] = "send queue drained",
		[IBV_EVENT_PATH_MIG] = "path migrated",
		[IBV_EVENT_PATH_MIG_ERR] = "path migration failed",
		[IBV_EVENT_DEVICE_FATAL] = "device fatal error",
		[IBV_EVENT_PORT_ACTIVE] = "port active",
		[IBV_EVENT_PORT_ERR] = "port down",
		[IBV_EVENT_LID_CHANGE] = "LID changed",
		[IBV_EVENT_PKEY_CHANGE] = "P_Key table changed",
		[IBV_EVENT_SM_CHANGE] = "subnet manager changed",
		[IBV_EVENT_SRQ_ERR] = "SRQ fatal error",
		[IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
		[IBV_EVENT_QP_LAST_WQE_REACHED] = "QP last WQE reached",
		[IBV_EVENT_CLIENT_REREGISTER] = "client reregistration requested",
		[IBV_EVENT_GID_CHANGE] = "GID table changed",
		[IBV_EVENT_WQ_FATAL] = "WQ fatal error",
	};
	if ((unsigned)e >= sizeof(names) / sizeof(names[0]) || !names[e]) return "unknown";
	return names[e];
}

const char *ibv_node_type_str(enum ibv_node_type t) {
	switch (t) {
	case IBV_NODE_CA: return "channel adapter";
	case IBV_NODE_SWITCH: return "switch";
	case IBV_NODE_ROUTER: return "router";
	case IBV_NODE_RNIC: return "iWARP RNIC";
	case IBV_NODE_USNIC: return "usNIC";
	case IBV_NODE_USNIC_UDP: return "usNIC UDP";
	case IBV_NODE_UNSPECIFIED: return "unspecified";
	default: return "unknown";
	}
}

const char *ibv_port_state_str(enum ibv_port_state s) {
	switch (s) {
	case IBV_PORT_NOP: return "nop";
	case IBV_PORT_DOWN: return "down";
	case IBV_PORT_INIT: return "init";
	case IBV_PORT_ARMED: return "armed";
	case IBV_PORT_ACTIVE: return "active";
	case IBV_PORT_ACTIVE_DEFER: return "active (deferred)";
	default: return "unknown";
	}
}

/* enum ibv_rate: each value's speed in Mb/s (0: not a rate). */
static const int rate_mbps[] = {
	[2] = 2500, [5] = 5000, [3] = 10000, [6] = 20000, [4] = 30000, [7] = 40000, [8] = 60000,
	[9] = 80000, [10] = 120000, [11] = 14062, [12] = 56250, [13] = 112500, [14] = 168750,
	[15] = 25781, [16] = 103125, [17] = 206250, [18] = 309375, [19] = 28125, [20] = 53125,
	[21] = 425000, [22] = 637500, [23] = 850000, [24] = 1275000,
};
#define NRATES ((int)(sizeof(rate_mbps) / sizeof(rate_mbps[0])))
/* The rates that are multiples of 2.5 Gb/s (ibv_rate_to_mult). */
static const int rate_mult[] = {[2] = 1, [5] = 2, [3] = 4, [6] = 8, [4] = 12, [7] = 16, [8] = 24, [9] = 32,
                                [10] = 48};
#define NMULT ((int)(sizeof(rate_mult) / sizeof(rate_mult[0])))

int ibv_rate_to_mult(int rate) { return rate > 0 && rate < NMULT && rate_mult[rate] ? rate_mult[rate] : -1; }

int mult_to_ibv_rate(int mult) {
	for (int r = 1; r < NMULT; r++)
		if (rate_mult[r] == mult) return r;
	return 0; /* IBV_RATE_MAX */
}

int ibv_rate_to_mbps(int rate) { return rate > 0 && rate < NRATES && rate_mbps[rate] ? rate_mbps[rate] : -1; }

int mbps_to_ibv_rate(int mbps) {
	for (int r = 1; r < NRATES; r++)
		if (rate_mbps[r] == mbps) return r;
	return 0; /* IBV_RATE_MAX */
}

/* ---- fork support: the fake pins nothing, so fork needs no care ---- */

int ibv_fork_init(void) { return 0; }
int ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }
int ibv_dontfork_range(void *base, size_t size) { (void)base, (void)size; return 0; }
int ibv_dofork_range(void *base, size_t size) { (void)base, (void)size; return 0; }

/* No ordering promise beyond the verbs' own. */
int ibv_query_qp_data_in_order(struct ibv_qp *qp, int op, uint32_t flags) {
	(void)qp, (void)op, (void)flags;
	return 0;
}

/* ---- rdma-core's private interface of provider drivers ---- */

/* Drivers (libmlx5, libefa, linked by perftest) register from their
 * constructors; the fake's devices are its own, so nothing matches them. */
void verbs_register_driver_34(const void *ops) { (void)ops; }
void __verbs_log(void *ctx, uint32_t level, const char *fmt, ...) { (void)ctx, (void)level, (void)fmt; }
bool verbs_allow_disassociate_destroy;

/* ---- what the fake does not implement ---- */

/* Each fails as rdma-core's would on a device without the feature: ENOSYS
 * as a return value (ret), through errno with -1 (neg) or NULL (ptr), or,
 * for functions with no result, by doing nothing (void). The argument
 * lists are not declared: the callers' arguments are ignored. */
#define STUB_RET(name, err) \
	int name(void) { static atomic_int said; stub_note(#name, &said, err); return err; }
#define STUB_NEG(name, err) \
	int name(void) { static atomic_int said; stub_note(#name, &said, err); errno = err; return -1; }
#define STUB_PTR(name, err) \
	void *name(void) { static atomic_int said; stub_note(#name, &said, err); errno = err; return NULL; }
#define STUB_VOID(name) \
	void name(void) { static atomic_int said; stub_note(#name, &said, ENOSYS); }

/* Address handles (UD), multicast, ECE, memory windows: an RC-only device. */
STUB_PTR(ibv_create_ah, EOPNOTSUPP)
STUB_PTR(ibv_create_ah_from_wc, EOPNOTSUPP)
STUB_RET(ibv_destroy_ah, EOPNOTSUPP)
STUB_NEG(ibv_init_ah_from_wc, EOPNOTSUPP)
STUB_RET(ibv_resolve_eth_l2_from_gid, EOPNOTSUPP)
STUB_RET(ibv_attach_mcast, EOPNOTSUPP)
STUB_RET(ibv_detach_mcast, EOPNOTSUPP)
STUB_RET(ibv_query_ece, EOPNOTSUPP)
STUB_RET(ibv_set_ece, EOPNOTSUPP)
STUB_RET(ibv_rereg_mr, EOPNOTSUPP)
/* Sharing objects between processes by their kernel handles. */
STUB_PTR(ibv_import_device, EOPNOTSUPP)
STUB_PTR(ibv_import_pd, EOPNOTSUPP)
STUB_PTR(ibv_import_mr, EOPNOTSUPP)
STUB_PTR(ibv_import_dm, EOPNOTSUPP)
STUB_VOID(ibv_unimport_pd)
STUB_VOID(ibv_unimport_mr)
STUB_VOID(ibv_unimport_dm)
/* The kernel ABI's copies (librdmacm's). */
STUB_VOID(ibv_copy_path_rec_from_kern)
STUB_VOID(ibv_copy_path_rec_to_kern)
STUB_VOID(ibv_copy_qp_attr_from_kern)
STUB_VOID(ibv_copy_ah_attr_from_kern)
/* The provider interface: a driver never gets a device here. */
STUB_PTR(_verbs_init_and_alloc_context, ENOSYS)
STUB_PTR(verbs_open_device, ENOSYS)
STUB_VOID(verbs_set_ops)
STUB_VOID(verbs_uninit_context)
STUB_RET(verbs_init_cq, ENOSYS)
STUB_RET(execute_ioctl, ENOSYS)
STUB_RET(__ioctl_final_num_attrs, 0)
STUB_NEG(ibv_read_ibdev_sysfs_file, ENOSYS)
STUB_RET(ibv_cmd_advise_mr, ENOSYS)
STUB_RET(ibv_cmd_alloc_dm, ENOSYS)
STUB_RET(ibv_cmd_alloc_mw, ENOSYS)
STUB_RET(ibv_cmd_alloc_pd, ENOSYS)
STUB_RET(ibv_cmd_attach_mcast, ENOSYS)
STUB_RET(ibv_cmd_close_xrcd, ENOSYS)
STUB_RET(ibv_cmd_create_ah, ENOSYS)
STUB_RET(ibv_cmd_create_counters, ENOSYS)
STUB_RET(ibv_cmd_create_cq, ENOSYS)
STUB_RET(ibv_cmd_create_cq_ex, ENOSYS)
STUB_RET(ibv_cmd_create_flow, ENOSYS)
STUB_RET(ibv_cmd_create_flow_action_esp, ENOSYS)
STUB_RET(ibv_cmd_create_qp, ENOSYS)
STUB_RET(ibv_cmd_create_qp_ex, ENOSYS)
STUB_RET(ibv_cmd_create_qp_ex2, ENOSYS)
STUB_RET(ibv_cmd_create_rwq_ind_table, ENOSYS)
STUB_RET(ibv_cmd_create_srq, ENOSYS)
STUB_RET(ibv_cmd_create_srq_ex, ENOSYS)
STUB_RET(ibv_cmd_create_wq, ENOSYS)
STUB_RET(ibv_cmd_dealloc_mw, ENOSYS)
STUB_RET(ibv_cmd_dealloc_pd, ENOSYS)
STUB_RET(ibv_cmd_dereg_mr, ENOSYS)
STUB_RET(ibv_cmd_destroy_ah, ENOSYS)
STUB_RET(ibv_cmd_destroy_counters, ENOSYS)
STUB_RET(ibv_cmd_destroy_cq, ENOSYS)
STUB_RET(ibv_cmd_destroy_flow, ENOSYS)
STUB_RET(ibv_cmd_destroy_flow_action, ENOSYS)
STUB_RET(ibv_cmd_destroy_qp, ENOSYS)
STUB_RET(ibv_cmd_destroy_rwq_ind_table, ENOSYS)
STUB_RET(ibv_cmd_destroy_srq, ENOSYS)
STUB_RET(ibv_cmd_destroy_wq, ENOSYS)
STUB_RET(ibv_cmd_detach_mcast, ENOSYS)
STUB_RET(ibv_cmd_free_dm, ENOSYS)
STUB_RET(ibv_cmd_get_context, ENOSYS)
STUB_RET(ibv_cmd_modify_cq, ENOSYS)
STUB_RET(ibv_cmd_modify_flow_action_esp, ENOSYS)
STUB_RET(ibv_cmd_modify_qp, ENOSYS)
STUB_RET(ibv_cmd_modify_qp_ex, ENOSYS)
STUB_RET(ibv_cmd_modify_srq, ENOSYS)
STUB_RET(ibv_cmd_modify_wq, ENOSYS)
STUB_RET(ibv_cmd_open_qp, ENOSYS)
STUB_RET(ibv_cmd_open_xrcd, ENOSYS)
STUB_RET(ibv_cmd_poll_cq, ENOSYS)
STUB_RET(ibv_cmd_post_recv, ENOSYS)
STUB_RET(ibv_cmd_post_send, ENOSYS)
STUB_RET(ibv_cmd_post_srq_recv, ENOSYS)
STUB_RET(ibv_cmd_query_context, ENOSYS)
STUB_RET(ibv_cmd_query_device_any, ENOSYS)
STUB_RET(ibv_cmd_query_mr, ENOSYS)
STUB_RET(ibv_cmd_query_port, ENOSYS)
STUB_RET(ibv_cmd_query_qp, ENOSYS)
STUB_RET(ibv_cmd_query_srq, ENOSYS)
STUB_RET(ibv_cmd_read_counters, ENOSYS)
STUB_RET(ibv_cmd_reg_dm_mr, ENOSYS)
STUB_RET(ibv_cmd_reg_dmabuf_mr, ENOSYS)
STUB_RET(ibv_cmd_reg_mr, ENOSYS)
STUB_RET(ibv_cmd_req_notify_cq, ENOSYS)
STUB_RET(ibv_cmd_rereg_mr, ENOSYS)
STUB_RET(ibv_cmd_resize_cq, ENOSYS)

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

/* fakeverbs_hold holds dev after pass more WRs (pass >= 0): later WRs wait
 * at the device until released (pass < 0), then run as the device then is
 * (a port taken down meanwhile fails them). */
int fakeverbs_hold(const char *dev, int pass) {
	struct fdev *d = devof(dev);
	if (!d) return -1;
	if (pass < 0) {
		atomic_store(&d->hold_on, 0);
		atomic_store(&d->hold_pass, 0);
		return 0;
	}
	atomic_store(&d->hold_pass, pass);
	atomic_store(&d->hold_on, 1);
	return 0;
}

/* fakeverbs_held is the number of dev's WRs waiting at its hold now (-1:
 * no such device). */
int fakeverbs_held(const char *dev) {
	struct fdev *d = devof(dev);
	if (!d) return -1;
	return atomic_load(&d->held);
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
