/* The kvferry libfabric shim: libfabric.so.1 is opened at run time with
 * dlopen, never linked, and compiled against our own declaration of the
 * libfabric ABI (fabric_abi.h), so no libfabric header is needed to build.
 * What libfabric's headers make static inline (fi_domain, fi_av_open,
 * fi_cq_open, fi_endpoint, fi_ep_bind, fi_enable, fi_getname, fi_mr_regattr,
 * fi_read, fi_write, fi_cq_read, fi_cq_sread, fi_cq_readerr, fi_cq_signal,
 * fi_close, fi_av_insert, fi_av_remove) is written out in shim.c and
 * reaches the provider through the objects' ops tables. The only state is
 * the table of exported entry points filled once by kvf_fi_load. */
#ifndef KVFERRY_FABRIC_SHIM_H
#define KVFERRY_FABRIC_SHIM_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fabric_abi.h"

#pragma GCC visibility push(hidden)

/* Bytes of an operation context slot: room for struct fi_context2 (eight
 * pointers), which covers providers asking for FI_CONTEXT or FI_CONTEXT2. */
#define KVF_FI_SLOT_BYTES 64

/* One opened endpoint with its fabric, domain, address vector and
 * completion queue (one "device"), and the context slots its operations
 * carry. */
struct kvf_fi_dev {
	struct fi_info *info; /* our copy (fi_dupinfo) */
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	uint8_t addr[256];
	size_t addrlen;
	char *slots;
	uint32_t nslots;
	int wait; /* the CQ has a wait object: sread and signal work */
};

/* One RMA operation of a batch posted by kvf_fi_post. */
struct kvf_fi_op {
	uint64_t local;  /* local address */
	uint64_t length; /* bytes */
	uint64_t desc;   /* fi_mr_desc of the local memory, or 0 */
	uint64_t raddr;  /* remote address (or offset when the mode lacks FI_MR_VIRT_ADDR) */
	uint64_t key;    /* remote key */
	uint64_t peer;   /* fi_addr_t of the target */
	uint32_t slot;   /* context slot, returned with the completion */
	uint32_t write;  /* 1: fi_write, 0: fi_read */
};

/* One completion read by kvf_fi_poll. */
struct kvf_fi_comp {
	uint32_t slot;
	int32_t err;        /* 0, or a positive errno (fi_cq_err_entry.err) */
	int32_t prov_errno; /* the provider's own code */
	uint32_t pad;
};

int kvf_fi_load(const char *path, char *err, int errlen);
uint32_t kvf_fi_lib_version(void);
const char *kvf_fi_strerror(int errnum);
int kvf_fi_getinfo(uint32_t version, const char *prov, const char *domain, uint64_t caps, uint64_t mode,
                   int mr_mode, uint64_t tx_op_flags, struct fi_info **out);
void kvf_fi_freeinfo(struct fi_info *info);
int kvf_fi_dev_open(struct fi_info *info, size_t av_count, size_t cq_size, uint32_t nslots,
                    struct kvf_fi_dev **out, char *err, int errlen);
void kvf_fi_dev_close(struct kvf_fi_dev *d);
int kvf_fi_av_insert(struct kvf_fi_dev *d, const void *addr, uint64_t *out);
int kvf_fi_av_remove(struct kvf_fi_dev *d, uint64_t addr);
int kvf_fi_mr_reg(struct kvf_fi_dev *d, uint64_t addr, uint64_t length, uint64_t access, uint64_t requested_key,
                  int iface, int device, struct fid_mr **out);
int kvf_fi_mr_close(struct fid_mr *mr);
int kvf_fi_post(struct kvf_fi_dev *d, const struct kvf_fi_op *ops, int n, int *rc);
int kvf_fi_poll(struct kvf_fi_dev *d, struct kvf_fi_comp *out, int n, int timeout_ms);
int kvf_fi_signal(struct kvf_fi_dev *d);

#pragma GCC visibility pop

#endif
