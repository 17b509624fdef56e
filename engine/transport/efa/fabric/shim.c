// The libfabric shim (see shim.h). Compiled by cgo into the library.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "shim.h"

#pragma GCC visibility push(hidden)

// The exported entry points, resolved once by kvf_fi_load (Go serializes
// the call). fi_getinfo, fi_freeinfo and fi_dupinfo are taken at their
// FABRIC_1.3 version, fi_fabric at FABRIC_1.1: the ABI fabric_abi.h
// declares; a library without symbol versions gets the default ones.
static struct {
	void *handle;
	kvf_fi_getinfo_fn getinfo;
	kvf_fi_freeinfo_fn freeinfo;
	kvf_fi_dupinfo_fn dupinfo;
	kvf_fi_fabric_fn fabric;
	kvf_fi_strerror_fn strerror;
	kvf_fi_version_fn version;
} T;

#pragma GCC visibility pop

static void *vsym(const char *name, const char *version) {
	void *p = dlvsym(T.handle, name, version);
	return p ? p : dlsym(T.handle, name);
}

int kvf_fi_load(const char *path, char *err, int errlen) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(err, errlen, "%s", dlerror());
		return -1;
	}
	T.handle = h;
#define REQ(field, name, version)                                         \
	do {                                                                  \
		*(void **)&T.field = vsym(name, version);                         \
		if (!T.field) {                                                   \
			snprintf(err, errlen, "%s: missing symbol %s", path, name);  \
			return -1;                                                    \
		}                                                                 \
	} while (0)
	REQ(getinfo, "fi_getinfo", "FABRIC_1.3");
	REQ(freeinfo, "fi_freeinfo", "FABRIC_1.3");
	REQ(dupinfo, "fi_dupinfo", "FABRIC_1.3");
	REQ(fabric, "fi_fabric", "FABRIC_1.1");
	REQ(strerror, "fi_strerror", "FABRIC_1.0");
	REQ(version, "fi_version", "FABRIC_1.0");
#undef REQ
	return 0;
}

uint32_t kvf_fi_lib_version(void) { return T.version(); }

const char *kvf_fi_strerror(int errnum) { return T.strerror(errnum); }

// fi_allocinfo is fi_dupinfo(NULL) in the headers.
int kvf_fi_getinfo(uint32_t version, const char *prov, const char *domain, uint64_t caps, uint64_t mode,
                   int mr_mode, uint64_t tx_op_flags, struct fi_info **out) {
	struct fi_info *hints = T.dupinfo(NULL);
	if (!hints) return -ENOMEM;
	hints->caps = caps;
	hints->mode = mode;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->mr_mode = mr_mode;
	hints->domain_attr->threading = FI_THREAD_SAFE;
	hints->tx_attr->op_flags = tx_op_flags;
	if (prov && *prov) hints->fabric_attr->prov_name = strdup(prov);
	if (domain && *domain) hints->domain_attr->name = strdup(domain);
	int rc = T.getinfo(version, NULL, NULL, 0, hints, out);
	T.freeinfo(hints); // frees the strdup'd names too
	return rc;
}

void kvf_fi_freeinfo(struct fi_info *info) { T.freeinfo(info); }

static int fclose_(struct fid *f) { return f ? f->ops->close(f) : 0; }

void kvf_fi_dev_close(struct kvf_fi_dev *d) {
	if (!d) return;
	// The endpoint goes before the AV and CQ it is bound to.
	fclose_(d->ep ? &d->ep->fid : NULL);
	fclose_(d->av ? &d->av->fid : NULL);
	fclose_(d->cq ? &d->cq->fid : NULL);
	fclose_(d->domain ? &d->domain->fid : NULL);
	fclose_(d->fabric ? &d->fabric->fid : NULL);
	if (d->info) T.freeinfo(d->info);
	free(d->slots);
	free(d);
}

#define FAIL(what)                                                               \
	do {                                                                         \
		snprintf(err, errlen, "%s: %s", what, T.strerror(rc < 0 ? -rc : rc));    \
		kvf_fi_dev_close(d);                                                     \
		return rc < 0 ? rc : -rc;                                                \
	} while (0)

int kvf_fi_dev_open(struct fi_info *info, size_t av_count, size_t cq_size, uint32_t nslots,
                    struct kvf_fi_dev **out, char *err, int errlen) {
	int rc = 0;
	struct kvf_fi_dev *d = calloc(1, sizeof(*d));
	if (!d) return -ENOMEM;
	d->slots = calloc(nslots, KVF_FI_SLOT_BYTES);
	if (!d->slots) {
		free(d);
		return -ENOMEM;
	}
	d->nslots = nslots;
	d->info = T.dupinfo(info);
	if (!d->info) {
		rc = -ENOMEM;
		FAIL("fi_dupinfo");
	}
	if ((rc = T.fabric(d->info->fabric_attr, &d->fabric, NULL))) FAIL("fi_fabric");
	if ((rc = d->fabric->ops->domain(d->fabric, d->info, &d->domain, NULL))) FAIL("fi_domain");
	struct fi_av_attr av = {0};
	av.type = FI_AV_TABLE;
	av.count = av_count;
	if ((rc = d->domain->ops->av_open(d->domain, &av, &d->av, NULL))) FAIL("fi_av_open");
	struct fi_cq_attr cq = {0};
	cq.size = cq_size;
	cq.format = FI_CQ_FORMAT_DATA;
	cq.wait_obj = FI_WAIT_UNSPEC;
	cq.wait_cond = FI_CQ_COND_NONE;
	d->wait = 1;
	rc = d->domain->ops->cq_open(d->domain, &cq, &d->cq, NULL);
	if (rc) { // a provider without wait objects: poll only
		cq.wait_obj = FI_WAIT_NONE;
		d->wait = 0;
		rc = d->domain->ops->cq_open(d->domain, &cq, &d->cq, NULL);
	}
	if (rc) FAIL("fi_cq_open");
	if ((rc = d->domain->ops->endpoint(d->domain, d->info, &d->ep, NULL))) FAIL("fi_endpoint");
	if ((rc = d->ep->fid.ops->bind(&d->ep->fid, &d->av->fid, 0))) FAIL("fi_ep_bind av");
	if ((rc = d->ep->fid.ops->bind(&d->ep->fid, &d->cq->fid, FI_TRANSMIT | FI_RECV))) FAIL("fi_ep_bind cq");
	if ((rc = d->ep->fid.ops->control(&d->ep->fid, FI_ENABLE, NULL))) FAIL("fi_enable");
	d->addrlen = sizeof(d->addr);
	if ((rc = d->ep->cm->getname(&d->ep->fid, d->addr, &d->addrlen))) FAIL("fi_getname");
	*out = d;
	return 0;
}

#undef FAIL

int kvf_fi_av_insert(struct kvf_fi_dev *d, const void *addr, uint64_t *out) {
	fi_addr_t a = FI_ADDR_UNSPEC;
	int rc = d->av->ops->insert(d->av, addr, 1, &a, 0, NULL);
	if (rc == 1) {
		*out = a;
		return 0;
	}
	return rc < 0 ? rc : -EINVAL;
}

int kvf_fi_av_remove(struct kvf_fi_dev *d, uint64_t addr) {
	fi_addr_t a = addr;
	return d->av->ops->remove(d->av, &a, 1, 0);
}

// fi_mr_regattr with room after the 1.17 attributes, zeroed, for newer
// libraries that read members appended since.
struct kvf_mr_attr {
	struct fi_mr_attr attr;
	uint8_t tail[128];
};

int kvf_fi_mr_reg(struct kvf_fi_dev *d, uint64_t addr, uint64_t length, uint64_t access, uint64_t requested_key,
                  int iface, int device, struct fid_mr **out) {
	struct iovec iov = {.iov_base = (void *)(uintptr_t)addr, .iov_len = length};
	struct kvf_mr_attr a;
	memset(&a, 0, sizeof(a));
	a.attr.mr_iov = &iov;
	a.attr.iov_count = 1;
	a.attr.access = access;
	a.attr.requested_key = requested_key;
	a.attr.iface = (enum fi_hmem_iface)iface;
	a.attr.device.cuda = device;
	return d->domain->mr->regattr(&d->domain->fid, &a.attr, 0, out);
}

int kvf_fi_mr_close(struct fid_mr *mr) { return mr->fid.ops->close(&mr->fid); }

// Posts ops in order until one fails; returns how many were posted and
// leaves the failure (-FI_EAGAIN when the queue is full) in *rc.
int kvf_fi_post(struct kvf_fi_dev *d, const struct kvf_fi_op *ops, int n, int *rc) {
	struct fi_ops_rma *rma = d->ep->rma;
	*rc = 0;
	for (int i = 0; i < n; i++) {
		const struct kvf_fi_op *o = &ops[i];
		void *ctx = d->slots + (size_t)o->slot * KVF_FI_SLOT_BYTES;
		ssize_t r;
		if (o->write)
			r = rma->write(d->ep, (const void *)(uintptr_t)o->local, o->length, (void *)(uintptr_t)o->desc, o->peer, o->raddr,
			               o->key, ctx);
		else
			r = rma->read(d->ep, (void *)(uintptr_t)o->local, o->length, (void *)(uintptr_t)o->desc, o->peer, o->raddr, o->key,
			              ctx);
		if (r) {
			*rc = (int)r;
			return i;
		}
	}
	return n;
}

static uint32_t slot_of(struct kvf_fi_dev *d, void *ctx) {
	if (!ctx) return UINT32_MAX;
	size_t off = (size_t)((char *)ctx - d->slots);
	if ((char *)ctx < d->slots || off / KVF_FI_SLOT_BYTES >= d->nslots) return UINT32_MAX;
	return (uint32_t)(off / KVF_FI_SLOT_BYTES);
}

// Reads up to n completions, waiting up to timeout_ms (0: not at all) for
// the first when the CQ has a wait object; an error completion is read
// with fi_cq_readerr and returned on its own. Returns the count (0 when
// none came) or a negative error.
int kvf_fi_poll(struct kvf_fi_dev *d, struct kvf_fi_comp *out, int n, int timeout_ms) {
	struct fi_cq_data_entry e[64];
	if (n > 64) n = 64;
	ssize_t r = d->cq->ops->read(d->cq, e, (size_t)n);
	if (r == -EAGAIN && timeout_ms > 0 && d->wait)
		r = d->cq->ops->sread(d->cq, e, (size_t)n, NULL, timeout_ms);
	if (r > 0) {
		for (ssize_t i = 0; i < r; i++) {
			out[i].slot = slot_of(d, e[i].op_context);
			out[i].err = 0;
			out[i].prov_errno = 0;
		}
		return (int)r;
	}
	if (r == -FI_EAVAIL) {
		struct fi_cq_err_entry ee;
		memset(&ee, 0, sizeof(ee));
		ssize_t q = d->cq->ops->readerr(d->cq, &ee, 0);
		if (q == 1) {
			out[0].slot = slot_of(d, ee.op_context);
			out[0].err = ee.err ? ee.err : EIO;
			out[0].prov_errno = ee.prov_errno;
			return 1;
		}
		return q == -EAGAIN ? 0 : (int)q;
	}
	if (r == -EAGAIN || r == -ETIMEDOUT || r == -EINTR || r == 0) return 0;
	return (int)r;
}

int kvf_fi_signal(struct kvf_fi_dev *d) { return d->wait ? d->cq->ops->signal(d->cq) : 0; }
