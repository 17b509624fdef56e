/* kvferry's own declaration of the part of the libfabric ABI that the shim
 * (shim.c) uses, so that building needs no libfabric headers:
 * libfabric.so.1 is opened at run time and these declarations describe the
 * objects it hands back.
 *
 * Names match libfabric's <rdma/fabric.h> and its companions so that the C
 * reads as libfabric code does; the text is ours. Only what the shim touches
 * is named: a struct the library allocates and we only read keeps every
 * member up to the last one we read at its place, and an ops table keeps
 * every entry up to the last one we call. Linux, LP64 (x86-64, aarch64),
 * the layout of libfabric 1.x (API 1.3 symbol versions and later; the
 * library appends members to its structs, never moves them).
 *
 * layout_test.go compiles testdata/fabric_layout.c once against this file
 * and once against libfabric's headers (where libfabric-dev is installed, as
 * here and in CI) and compares every size, offset and constant below. */
#ifndef KVF_FABRIC_ABI_H
#define KVF_FABRIC_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* ---- constants ---- */

#define KVF_FI_VERSION(major, minor) (((major) << 16) | (minor))

/* Capability and operation flags (uint64_t bit masks). */
#define FI_MSG           (1ULL << 1)
#define FI_RMA           (1ULL << 2)
#define FI_READ          (1ULL << 8)
#define FI_WRITE         (1ULL << 9)
#define FI_RECV          (1ULL << 10)
#define FI_SEND          (1ULL << 11)
#define FI_TRANSMIT      FI_SEND
#define FI_REMOTE_READ   (1ULL << 12)
#define FI_REMOTE_WRITE  (1ULL << 13)
#define FI_COMPLETION    (1ULL << 24)
#define FI_INJECT_COMPLETE   (1ULL << 26)
#define FI_TRANSMIT_COMPLETE (1ULL << 27)
#define FI_DELIVERY_COMPLETE (1ULL << 28)
#define FI_HMEM          (1ULL << 47)
#define FI_CONTEXT       (1ULL << 59)
#define FI_CONTEXT2      (1ULL << 52)

/* Memory registration modes (domain_attr->mr_mode bits). */
#define FI_MR_LOCAL      (1 << 2)
#define FI_MR_RAW        (1 << 3)
#define FI_MR_VIRT_ADDR  (1 << 4)
#define FI_MR_ALLOCATED  (1 << 5)
#define FI_MR_PROV_KEY   (1 << 6)
#define FI_MR_MMU_NOTIFY (1 << 7)
#define FI_MR_RMA_EVENT  (1 << 8)
#define FI_MR_ENDPOINT   (1 << 9)
#define FI_MR_HMEM       (1 << 10)

#define FI_ADDR_UNSPEC ((uint64_t)-1)

/* fi_control commands. */
#define FI_ENABLE 6

/* Error numbers beyond errno's. */
#define FI_EAVAIL 259

typedef uint64_t fi_addr_t;

enum fi_ep_type { FI_EP_UNSPEC, FI_EP_MSG, FI_EP_DGRAM, FI_EP_RDM };
enum fi_av_type { FI_AV_UNSPEC, FI_AV_MAP, FI_AV_TABLE };
enum fi_threading { FI_THREAD_UNSPEC, FI_THREAD_SAFE, FI_THREAD_FID, FI_THREAD_DOMAIN };
enum fi_progress { FI_PROGRESS_UNSPEC, FI_PROGRESS_AUTO, FI_PROGRESS_MANUAL };
enum fi_resource_mgmt { FI_RM_UNSPEC, FI_RM_DISABLED, FI_RM_ENABLED };
enum fi_cq_format { FI_CQ_FORMAT_UNSPEC, FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_DATA };
enum fi_wait_obj { FI_WAIT_NONE, FI_WAIT_UNSPEC, FI_WAIT_SET, FI_WAIT_FD };
enum fi_cq_wait_cond { FI_CQ_COND_NONE };
enum fi_hmem_iface { FI_HMEM_SYSTEM = 0, FI_HMEM_CUDA };

/* ---- objects ---- */

struct fid;
struct fid_fabric;
struct fid_domain;
struct fid_av;
struct fid_cq;
struct fid_ep;
struct fid_mr;
struct fi_info;

/* Every object starts with a fid whose ops table holds the calls common
 * to all objects (fi_close, fi_ep_bind, fi_enable are these). */
struct fi_ops {
	size_t size;
	int (*close)(struct fid *fid);
	int (*bind)(struct fid *fid, struct fid *bfid, uint64_t flags);
	int (*control)(struct fid *fid, int command, void *arg);
	void *ops_open;
	void *tostr;
	void *ops_set;
};

struct fid {
	size_t fclass;
	void *context;
	struct fi_ops *ops;
};

struct fi_tx_attr {
	uint64_t caps;
	uint64_t mode;
	uint64_t op_flags;
	uint64_t msg_order;
	uint64_t comp_order;
	size_t inject_size;
	size_t size;
	size_t iov_limit;
	size_t rma_iov_limit;
	uint32_t tclass;
};

struct fi_rx_attr {
	uint64_t caps;
	uint64_t mode;
	uint64_t op_flags;
	uint64_t msg_order;
	uint64_t comp_order;
	size_t total_buffered_recv;
	size_t size;
	size_t iov_limit;
};

struct fi_ep_attr {
	enum fi_ep_type type;
	uint32_t protocol;
	uint32_t protocol_version;
	size_t max_msg_size;
	size_t msg_prefix_size;
	size_t max_order_raw_size;
	size_t max_order_war_size;
	size_t max_order_waw_size;
	uint64_t mem_tag_format;
	size_t tx_ctx_cnt;
	size_t rx_ctx_cnt;
	size_t auth_key_size;
	uint8_t *auth_key;
};

struct fi_domain_attr {
	struct fid_domain *domain;
	char *name;
	enum fi_threading threading;
	enum fi_progress control_progress;
	enum fi_progress data_progress;
	enum fi_resource_mgmt resource_mgmt;
	enum fi_av_type av_type;
	int mr_mode;
	size_t mr_key_size;
	size_t cq_data_size;
	size_t cq_cnt;
	size_t ep_cnt;
	size_t tx_ctx_cnt;
	size_t rx_ctx_cnt;
	size_t max_ep_tx_ctx;
	size_t max_ep_rx_ctx;
	size_t max_ep_stx_ctx;
	size_t max_ep_srx_ctx;
	size_t cntr_cnt;
	size_t mr_iov_limit;
	uint64_t caps;
	uint64_t mode;
	uint8_t *auth_key;
	size_t auth_key_size;
	size_t max_err_data;
	size_t mr_cnt;
	uint32_t tclass;
};

struct fi_fabric_attr {
	struct fid_fabric *fabric;
	char *name;
	char *prov_name;
	uint32_t prov_version;
	uint32_t api_version;
};

struct fi_info {
	struct fi_info *next;
	uint64_t caps;
	uint64_t mode;
	uint32_t addr_format;
	size_t src_addrlen;
	size_t dest_addrlen;
	void *src_addr;
	void *dest_addr;
	struct fid *handle;
	struct fi_tx_attr *tx_attr;
	struct fi_rx_attr *rx_attr;
	struct fi_ep_attr *ep_attr;
	struct fi_domain_attr *domain_attr;
	struct fi_fabric_attr *fabric_attr;
	void *nic;
};

struct fi_ops_fabric {
	size_t size;
	int (*domain)(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **dom, void *context);
};

struct fid_fabric {
	struct fid fid;
	struct fi_ops_fabric *ops;
	uint32_t api_version;
};

struct fi_av_attr {
	enum fi_av_type type;
	int rx_ctx_bits;
	size_t count;
	size_t ep_per_node;
	const char *name;
	void *map_addr;
	uint64_t flags;
};

struct fi_cq_attr {
	size_t size;
	uint64_t flags;
	enum fi_cq_format format;
	enum fi_wait_obj wait_obj;
	int signaling_vector;
	enum fi_cq_wait_cond wait_cond;
	void *wait_set;
};

struct fi_ops_domain {
	size_t size;
	int (*av_open)(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av, void *context);
	int (*cq_open)(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq, void *context);
	int (*endpoint)(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep, void *context);
};

/* fi_mr_regattr's attributes, as of API 1.17. Newer libraries read members
 * appended after device when the application asked for a newer API; the
 * shim passes this struct followed by zeroed space (struct kvf_mr_attr). */
struct fi_mr_attr {
	const struct iovec *mr_iov;
	size_t iov_count;
	uint64_t access;
	uint64_t offset;
	uint64_t requested_key;
	void *context;
	size_t auth_key_size;
	uint8_t *auth_key;
	enum fi_hmem_iface iface;
	union {
		uint64_t reserved;
		int cuda;
	} device;
};

struct fi_ops_mr {
	size_t size;
	int (*reg)(struct fid *fid, const void *buf, size_t len, uint64_t access, uint64_t offset,
	           uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context);
	void *regv;
	int (*regattr)(struct fid *fid, const struct fi_mr_attr *attr, uint64_t flags, struct fid_mr **mr);
};

struct fid_domain {
	struct fid fid;
	struct fi_ops_domain *ops;
	struct fi_ops_mr *mr;
};

struct fid_mr {
	struct fid fid;
	void *mem_desc;
	uint64_t key;
};

struct fi_ops_av {
	size_t size;
	int (*insert)(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr, uint64_t flags,
	              void *context);
	void *insertsvc;
	void *insertsym;
	int (*remove)(struct fid_av *av, fi_addr_t *fi_addr, size_t count, uint64_t flags);
};

struct fid_av {
	struct fid fid;
	struct fi_ops_av *ops;
};

struct fi_cq_data_entry {
	void *op_context;
	uint64_t flags;
	size_t len;
	void *buf;
	uint64_t data;
};

struct fi_cq_err_entry {
	void *op_context;
	uint64_t flags;
	size_t len;
	void *buf;
	uint64_t data;
	uint64_t tag;
	size_t olen;
	int err;
	int prov_errno;
	void *err_data;
	size_t err_data_size;
};

struct fi_ops_cq {
	size_t size;
	ssize_t (*read)(struct fid_cq *cq, void *buf, size_t count);
	void *readfrom;
	ssize_t (*readerr)(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags);
	ssize_t (*sread)(struct fid_cq *cq, void *buf, size_t count, const void *cond, int timeout);
	void *sreadfrom;
	int (*signal)(struct fid_cq *cq);
	const char *(*strerror)(struct fid_cq *cq, int prov_errno, const void *err_data, char *buf, size_t len);
};

struct fid_cq {
	struct fid fid;
	struct fi_ops_cq *ops;
};

struct fi_ops_ep {
	size_t size;
	void *cancel;
	void *getopt;
	void *setopt;
	void *tx_ctx;
	void *rx_ctx;
	void *rx_size_left;
	void *tx_size_left;
};

struct fi_ops_cm {
	size_t size;
	void *setname;
	int (*getname)(struct fid *fid, void *addr, size_t *addrlen);
};

struct fi_ops_rma {
	size_t size;
	ssize_t (*read)(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src_addr, uint64_t addr,
	                uint64_t key, void *context);
	void *readv;
	void *readmsg;
	ssize_t (*write)(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest_addr,
	                 uint64_t addr, uint64_t key, void *context);
	void *writev;
	void *writemsg;
	void *inject;
	ssize_t (*writedata)(struct fid_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
	                     fi_addr_t dest_addr, uint64_t addr, uint64_t key, void *context);
};

struct fid_ep {
	struct fid fid;
	struct fi_ops_ep *ops;
	struct fi_ops_cm *cm;
	void *msg;
	struct fi_ops_rma *rma;
	void *tagged;
	void *atomic;
	void *collective;
};

/* ---- exported entry points, resolved with dlvsym/dlsym ---- */

typedef int (*kvf_fi_getinfo_fn)(uint32_t version, const char *node, const char *service, uint64_t flags,
                                 const struct fi_info *hints, struct fi_info **info);
typedef void (*kvf_fi_freeinfo_fn)(struct fi_info *info);
typedef struct fi_info *(*kvf_fi_dupinfo_fn)(const struct fi_info *info);
typedef int (*kvf_fi_fabric_fn)(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
typedef const char *(*kvf_fi_strerror_fn)(int errnum);
typedef uint32_t (*kvf_fi_version_fn)(void);

#endif
