/* kvferry's own declaration of the part of the libibverbs ABI that the
 * shim (shim.c) and the fake provider (tests/rdma/fakeverbs) use, so that
 * building needs no rdma-core headers: libibverbs.so.1 is opened at run
 * time and these declarations describe the objects it hands back.
 *
 * Names match rdma-core's <infiniband/verbs.h> so the C reads as verbs
 * code does; the text is ours. Only what we touch is named: a struct we
 * only pass by pointer, or only read a few members of, still has its full
 * size and every member at its place, with the members we never use kept
 * as reserved slots of the same size. Linux, LP64 (x86-64, aarch64).
 *
 * layout_test.go compiles testdata/verbs_layout.c once against this file
 * and once against rdma-core's verbs.h (where libibverbs-dev is installed,
 * as in CI) and compares every size, offset and constant below, and the
 * function types of the entry points the shim resolves with dlsym.
 *
 * With KVF_VERBS_FN_ONLY defined, only the function types (the first
 * section) are declared, over struct types someone else declared: the
 * layout test uses that to check them against rdma-core's prototypes. */
#ifndef KVF_VERBS_ABI_H
#define KVF_VERBS_ABI_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* ---- function types: the entry points the shim resolves with dlsym, and
 * the context entries it calls ---- */

struct ibv_device;
struct ibv_context;
struct ibv_device_attr;
struct ibv_port_attr;
struct _compat_ibv_port_attr;
struct ibv_gid_entry;
struct ibv_pd;
struct ibv_mr;
struct ibv_comp_channel;
struct ibv_cq;
struct ibv_qp;
struct ibv_qp_attr;
struct ibv_qp_init_attr;
struct ibv_async_event;
union ibv_gid;
struct ibv_wc;
struct ibv_send_wr;
struct ibv_recv_wr;
struct ibv_srq;
struct ibv_qp_init_attr_ex;

typedef struct ibv_device **(*kvf_ibv_get_device_list_fn)(int *num_devices);
typedef void (*kvf_ibv_free_device_list_fn)(struct ibv_device **list);
typedef const char *(*kvf_ibv_get_device_name_fn)(struct ibv_device *device);
typedef struct ibv_context *(*kvf_ibv_open_device_fn)(struct ibv_device *device);
typedef int (*kvf_ibv_close_device_fn)(struct ibv_context *context);
typedef int (*kvf_ibv_query_device_fn)(struct ibv_context *context, struct ibv_device_attr *attr);
typedef int (*kvf_ibv_query_port_fn)(struct ibv_context *context, uint8_t port_num,
                                     struct _compat_ibv_port_attr *attr);
typedef int (*kvf_ibv_query_gid_fn)(struct ibv_context *context, uint8_t port_num, int index,
                                    union ibv_gid *gid);
typedef int (*kvf_ibv_query_gid_ex_fn)(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
                                       struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size);
typedef struct ibv_pd *(*kvf_ibv_alloc_pd_fn)(struct ibv_context *context);
typedef int (*kvf_ibv_dealloc_pd_fn)(struct ibv_pd *pd);
typedef struct ibv_mr *(*kvf_ibv_reg_mr_fn)(struct ibv_pd *pd, void *addr, size_t length, int access);
typedef struct ibv_mr *(*kvf_ibv_reg_mr_iova2_fn)(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                                  unsigned int access);
typedef struct ibv_mr *(*kvf_ibv_reg_dmabuf_mr_fn)(struct ibv_pd *pd, uint64_t offset, size_t length,
                                                   uint64_t iova, int fd, int access);
typedef int (*kvf_ibv_dereg_mr_fn)(struct ibv_mr *mr);
typedef struct ibv_comp_channel *(*kvf_ibv_create_comp_channel_fn)(struct ibv_context *context);
typedef int (*kvf_ibv_destroy_comp_channel_fn)(struct ibv_comp_channel *channel);
typedef struct ibv_cq *(*kvf_ibv_create_cq_fn)(struct ibv_context *context, int cqe, void *cq_context,
                                               struct ibv_comp_channel *channel, int comp_vector);
typedef int (*kvf_ibv_destroy_cq_fn)(struct ibv_cq *cq);
typedef int (*kvf_ibv_get_cq_event_fn)(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context);
typedef void (*kvf_ibv_ack_cq_events_fn)(struct ibv_cq *cq, unsigned int nevents);
typedef struct ibv_qp *(*kvf_ibv_create_qp_fn)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
typedef int (*kvf_ibv_modify_qp_fn)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
typedef int (*kvf_ibv_query_qp_fn)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
                                   struct ibv_qp_init_attr *init_attr);
typedef int (*kvf_ibv_destroy_qp_fn)(struct ibv_qp *qp);
typedef int (*kvf_ibv_get_async_event_fn)(struct ibv_context *context, struct ibv_async_event *event);
typedef void (*kvf_ibv_ack_async_event_fn)(struct ibv_async_event *event);

/* The ops entries (struct ibv_context_ops, verbs_context). */
typedef int (*kvf_ibv_poll_cq_op)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
typedef int (*kvf_ibv_req_notify_cq_op)(struct ibv_cq *cq, int solicited_only);
typedef int (*kvf_ibv_post_send_op)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
typedef int (*kvf_ibv_post_recv_op)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);

typedef int (*kvf_ibv_post_srq_recv_op)(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);

typedef int (*kvf_ibv_query_port_ext_op)(struct ibv_context *context, uint8_t port_num,
                                         struct ibv_port_attr *port_attr, size_t port_attr_len);
typedef struct ibv_qp *(*kvf_ibv_create_qp_ex_op)(struct ibv_context *context,
                                                  struct ibv_qp_init_attr_ex *qp_init_attr_ex);

#ifndef KVF_VERBS_FN_ONLY

/* ---- constants ---- */

/* ibv_device's name buffers. */
enum {
	IBV_SYSFS_NAME_MAX = 64,
	IBV_SYSFS_PATH_MAX = 256,
};

/* The value of ibv_context.abi_compat when the context is the last member
 * of a struct verbs_context (an extended context). */
#define KVF_VERBS_ABI_IS_EXTENDED ((void *)UINTPTR_MAX)

enum ibv_node_type {
	IBV_NODE_UNKNOWN = -1,
	IBV_NODE_CA = 1,
	IBV_NODE_SWITCH = 2,
	IBV_NODE_ROUTER = 3,
	IBV_NODE_RNIC = 4,
	IBV_NODE_USNIC = 5,
	IBV_NODE_USNIC_UDP = 6,
	IBV_NODE_UNSPECIFIED = 7,
};

enum ibv_transport_type {
	IBV_TRANSPORT_UNKNOWN = -1,
	IBV_TRANSPORT_IB = 0,
	IBV_TRANSPORT_IWARP = 1,
	IBV_TRANSPORT_USNIC = 2,
	IBV_TRANSPORT_USNIC_UDP = 3,
	IBV_TRANSPORT_UNSPECIFIED = 4,
};

enum ibv_port_state {
	IBV_PORT_NOP = 0,
	IBV_PORT_DOWN = 1,
	IBV_PORT_INIT = 2,
	IBV_PORT_ARMED = 3,
	IBV_PORT_ACTIVE = 4,
	IBV_PORT_ACTIVE_DEFER = 5,
};

enum ibv_mtu {
	IBV_MTU_256 = 1,
	IBV_MTU_512 = 2,
	IBV_MTU_1024 = 3,
	IBV_MTU_2048 = 4,
	IBV_MTU_4096 = 5,
};

/* ibv_port_attr.link_layer. */
enum {
	IBV_LINK_LAYER_UNSPECIFIED = 0,
	IBV_LINK_LAYER_INFINIBAND = 1,
	IBV_LINK_LAYER_ETHERNET = 2,
};

enum ibv_gid_type {
	IBV_GID_TYPE_IB = 0,
	IBV_GID_TYPE_ROCE_V1 = 1,
	IBV_GID_TYPE_ROCE_V2 = 2,
};

enum ibv_atomic_cap {
	IBV_ATOMIC_NONE = 0,
	IBV_ATOMIC_HCA = 1,
	IBV_ATOMIC_GLOB = 2,
};

enum ibv_mig_state {
	IBV_MIG_MIGRATED = 0,
	IBV_MIG_REARM = 1,
	IBV_MIG_ARMED = 2,
};

enum ibv_event_type {
	IBV_EVENT_CQ_ERR = 0,
	IBV_EVENT_QP_FATAL = 1,
	IBV_EVENT_QP_REQ_ERR = 2,
	IBV_EVENT_QP_ACCESS_ERR = 3,
	IBV_EVENT_COMM_EST = 4,
	IBV_EVENT_SQ_DRAINED = 5,
	IBV_EVENT_PATH_MIG = 6,
	IBV_EVENT_PATH_MIG_ERR = 7,
	IBV_EVENT_DEVICE_FATAL = 8,
	IBV_EVENT_PORT_ACTIVE = 9,
	IBV_EVENT_PORT_ERR = 10,
	IBV_EVENT_LID_CHANGE = 11,
	IBV_EVENT_PKEY_CHANGE = 12,
	IBV_EVENT_SM_CHANGE = 13,
	IBV_EVENT_SRQ_ERR = 14,
	IBV_EVENT_SRQ_LIMIT_REACHED = 15,
	IBV_EVENT_QP_LAST_WQE_REACHED = 16,
	IBV_EVENT_CLIENT_REREGISTER = 17,
	IBV_EVENT_GID_CHANGE = 18,
	IBV_EVENT_WQ_FATAL = 19,
};

/* Memory region access bits. The optional range (bits 20..29) holds the
 * flags a provider may ignore; only ibv_reg_mr_iova2 accepts them. */
#define IBV_ACCESS_OPTIONAL_FIRST (1 << 20)
#define IBV_ACCESS_OPTIONAL_RANGE 0x3ff00000
enum ibv_access_flags {
	IBV_ACCESS_LOCAL_WRITE = 1 << 0,
	IBV_ACCESS_REMOTE_WRITE = 1 << 1,
	IBV_ACCESS_REMOTE_READ = 1 << 2,
	IBV_ACCESS_REMOTE_ATOMIC = 1 << 3,
	IBV_ACCESS_MW_BIND = 1 << 4,
	IBV_ACCESS_ZERO_BASED = 1 << 5,
	IBV_ACCESS_ON_DEMAND = 1 << 6,
	IBV_ACCESS_HUGETLB = 1 << 7,
	IBV_ACCESS_RELAXED_ORDERING = IBV_ACCESS_OPTIONAL_FIRST,
};

enum ibv_wc_status {
	IBV_WC_SUCCESS = 0,
	IBV_WC_LOC_LEN_ERR = 1,
	IBV_WC_LOC_QP_OP_ERR = 2,
	IBV_WC_LOC_EEC_OP_ERR = 3,
	IBV_WC_LOC_PROT_ERR = 4,
	IBV_WC_WR_FLUSH_ERR = 5,
	IBV_WC_MW_BIND_ERR = 6,
	IBV_WC_BAD_RESP_ERR = 7,
	IBV_WC_LOC_ACCESS_ERR = 8,
	IBV_WC_REM_INV_REQ_ERR = 9,
	IBV_WC_REM_ACCESS_ERR = 10,
	IBV_WC_REM_OP_ERR = 11,
	IBV_WC_RETRY_EXC_ERR = 12,
	IBV_WC_RNR_RETRY_EXC_ERR = 13,
	IBV_WC_LOC_RDD_VIOL_ERR = 14,
	IBV_WC_REM_INV_RD_REQ_ERR = 15,
	IBV_WC_REM_ABORT_ERR = 16,
	IBV_WC_INV_EECN_ERR = 17,
	IBV_WC_INV_EEC_STATE_ERR = 18,
	IBV_WC_FATAL_ERR = 19,
	IBV_WC_RESP_TIMEOUT_ERR = 20,
	IBV_WC_GENERAL_ERR = 21,
	IBV_WC_TM_ERR = 22,
	IBV_WC_TM_RNDV_INCOMPLETE = 23,
};

/* Completion opcodes: receive-side ones have bit 7 set. */
enum ibv_wc_opcode {
	IBV_WC_SEND = 0,
	IBV_WC_RDMA_WRITE = 1,
	IBV_WC_RDMA_READ = 2,
	IBV_WC_COMP_SWAP = 3,
	IBV_WC_FETCH_ADD = 4,
	IBV_WC_BIND_MW = 5,
	IBV_WC_LOCAL_INV = 6,
	IBV_WC_TSO = 7,
	IBV_WC_ATOMIC_WRITE = 9,
	IBV_WC_RECV = 128,
	IBV_WC_RECV_RDMA_WITH_IMM = 129,
};

enum ibv_wc_flags {
	IBV_WC_GRH = 1 << 0,
	IBV_WC_WITH_IMM = 1 << 1,
	IBV_WC_IP_CSUM_OK = 1 << 2,
	IBV_WC_WITH_INV = 1 << 3,
};

enum ibv_wr_opcode {
	IBV_WR_RDMA_WRITE = 0,
	IBV_WR_RDMA_WRITE_WITH_IMM = 1,
	IBV_WR_SEND = 2,
	IBV_WR_SEND_WITH_IMM = 3,
	IBV_WR_RDMA_READ = 4,
	IBV_WR_ATOMIC_CMP_AND_SWP = 5,
	IBV_WR_ATOMIC_FETCH_AND_ADD = 6,
	IBV_WR_LOCAL_INV = 7,
	IBV_WR_BIND_MW = 8,
	IBV_WR_SEND_WITH_INV = 9,
	IBV_WR_TSO = 10,
	IBV_WR_DRIVER1 = 11,
	IBV_WR_ATOMIC_WRITE = 15,
};

enum ibv_send_flags {
	IBV_SEND_FENCE = 1 << 0,
	IBV_SEND_SIGNALED = 1 << 1,
	IBV_SEND_SOLICITED = 1 << 2,
	IBV_SEND_INLINE = 1 << 3,
	IBV_SEND_IP_CSUM = 1 << 4,
};

enum ibv_qp_state {
	IBV_QPS_RESET = 0,
	IBV_QPS_INIT = 1,
	IBV_QPS_RTR = 2,
	IBV_QPS_RTS = 3,
	IBV_QPS_SQD = 4,
	IBV_QPS_SQE = 5,
	IBV_QPS_ERR = 6,
	IBV_QPS_UNKNOWN = 7,
};

enum ibv_qp_type {
	IBV_QPT_RC = 2,
	IBV_QPT_UC = 3,
	IBV_QPT_UD = 4,
	IBV_QPT_RAW_PACKET = 8,
	IBV_QPT_XRC_SEND = 9,
	IBV_QPT_XRC_RECV = 10,
	IBV_QPT_DRIVER = 0xff,
};

/* Which members of ibv_qp_attr an ibv_modify_qp call sets. */
enum ibv_qp_attr_mask {
	IBV_QP_STATE = 1 << 0,
	IBV_QP_CUR_STATE = 1 << 1,
	IBV_QP_EN_SQD_ASYNC_NOTIFY = 1 << 2,
	IBV_QP_ACCESS_FLAGS = 1 << 3,
	IBV_QP_PKEY_INDEX = 1 << 4,
	IBV_QP_PORT = 1 << 5,
	IBV_QP_QKEY = 1 << 6,
	IBV_QP_AV = 1 << 7,
	IBV_QP_PATH_MTU = 1 << 8,
	IBV_QP_TIMEOUT = 1 << 9,
	IBV_QP_RETRY_CNT = 1 << 10,
	IBV_QP_RNR_RETRY = 1 << 11,
	IBV_QP_RQ_PSN = 1 << 12,
	IBV_QP_MAX_QP_RD_ATOMIC = 1 << 13,
	IBV_QP_ALT_PATH = 1 << 14,
	IBV_QP_MIN_RNR_TIMER = 1 << 15,
	IBV_QP_SQ_PSN = 1 << 16,
	IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 17,
	IBV_QP_PATH_MIG_STATE = 1 << 18,
	IBV_QP_CAP = 1 << 19,
	IBV_QP_DEST_QPN = 1 << 20,
	IBV_QP_RATE_LIMIT = 1 << 25,
};

/* ibv_device_attr.device_cap_flags (the ones the fake provider reports). */
enum ibv_device_cap_flags {
	IBV_DEVICE_BAD_PKEY_CNTR = 1 << 1,
	IBV_DEVICE_BAD_QKEY_CNTR = 1 << 2,
	IBV_DEVICE_CHANGE_PHY_PORT = 1 << 5,
	IBV_DEVICE_CURR_QP_STATE_MOD = 1 << 7,
	IBV_DEVICE_PORT_ACTIVE_EVENT = 1 << 10,
	IBV_DEVICE_SYS_IMAGE_GUID = 1 << 11,
	IBV_DEVICE_RC_RNR_NAK_GEN = 1 << 12,
	IBV_DEVICE_SRQ_RESIZE = 1 << 13,
	IBV_DEVICE_N_NOTIFY_CQ = 1 << 14,
	IBV_DEVICE_MEM_MGT_EXTENSIONS = 1 << 21,
};

/* ibv_is_fork_initialized's answers. */
enum ibv_fork_status {
	IBV_FORK_DISABLED = 0,
	IBV_FORK_ENABLED = 1,
	IBV_FORK_UNNEEDED = 2,
};

/* Which members of ibv_srq_attr an ibv_modify_srq call sets. */
enum ibv_srq_attr_mask {
	IBV_SRQ_MAX_WR = 1 << 0,
	IBV_SRQ_LIMIT = 1 << 1,
};

/* Which members of ibv_qp_init_attr_ex past the ibv_qp_init_attr ones are
 * set (comp_mask). */
enum ibv_qp_init_attr_mask {
	IBV_QP_INIT_ATTR_PD = 1 << 0,
	IBV_QP_INIT_ATTR_XRCD = 1 << 1,
	IBV_QP_INIT_ATTR_CREATE_FLAGS = 1 << 2,
	IBV_QP_INIT_ATTR_MAX_TSO_HEADER = 1 << 3,
	IBV_QP_INIT_ATTR_IND_TABLE = 1 << 4,
	IBV_QP_INIT_ATTR_RX_HASH = 1 << 5,
	IBV_QP_INIT_ATTR_SEND_OPS_FLAGS = 1 << 6,
};

/* The work requests a QP posts through the ibv_wr_* calls of its
 * ibv_qp_ex (ibv_qp_init_attr_ex.send_ops_flags). */
enum ibv_qp_create_send_ops_flags {
	IBV_QP_EX_WITH_RDMA_WRITE = 1 << 0,
	IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM = 1 << 1,
	IBV_QP_EX_WITH_SEND = 1 << 2,
	IBV_QP_EX_WITH_SEND_WITH_IMM = 1 << 3,
	IBV_QP_EX_WITH_RDMA_READ = 1 << 4,
	IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP = 1 << 5,
	IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD = 1 << 6,
	IBV_QP_EX_WITH_LOCAL_INV = 1 << 7,
	IBV_QP_EX_WITH_BIND_MW = 1 << 8,
	IBV_QP_EX_WITH_SEND_WITH_INV = 1 << 9,
	IBV_QP_EX_WITH_TSO = 1 << 10,
	IBV_QP_EX_WITH_ATOMIC_WRITE = 1 << 12,
};

/* ---- objects ---- */

/* Objects we only ever hold pointers to. */
struct ibv_ah;
struct ibv_mw;
struct ibv_wq;
struct ibv_xrcd;
struct ibv_rwq_ind_table;
struct ibv_mw_bind_info;

/* The argument type of the exported ibv_query_port: the leading part of
 * struct ibv_port_attr that libibverbs before 1.1.8 knew. Never defined;
 * callers pass a zeroed struct ibv_port_attr. */
struct _compat_ibv_port_attr;

/* A 16-byte global identifier (big-endian halves). */
union ibv_gid {
	uint8_t raw[16];
	struct {
		uint64_t subnet_prefix; /* network order */
		uint64_t interface_id;  /* network order */
	} global;
};

/* An entry of the device list; providers embed it in their own. */
struct ibv_device {
	struct {
		void (*_reserved[2])(void); /* provider hooks of old libibverbs */
	} _ops;
	enum ibv_node_type node_type;
	enum ibv_transport_type transport_type;
	char name[IBV_SYSFS_NAME_MAX];
	char dev_name[IBV_SYSFS_NAME_MAX];
	char dev_path[IBV_SYSFS_PATH_MAX];
	char ibdev_path[IBV_SYSFS_PATH_MAX];
};

/* The data-path entry points of a context: verbs.h's static inline
 * ibv_poll_cq, ibv_req_notify_cq, ibv_post_send and ibv_post_recv are
 * calls through these four. The other slots hold entries we never call
 * (most are only kept for old binaries). */
struct ibv_context_ops {
	void (*_reserved_a[11])(void); /* query_device .. create_cq */
	kvf_ibv_poll_cq_op poll_cq;
	kvf_ibv_req_notify_cq_op req_notify_cq;
	void (*_reserved_b[7])(void); /* cq_event .. destroy_srq */
	kvf_ibv_post_srq_recv_op post_srq_recv;
	void (*_reserved_c[4])(void); /* create_qp .. destroy_qp */
	kvf_ibv_post_send_op post_send;
	kvf_ibv_post_recv_op post_recv;
	void (*_reserved_d[5])(void); /* create_ah .. async_event */
};

/* An open device. */
struct ibv_context {
	struct ibv_device *device;
	struct ibv_context_ops ops;
	int cmd_fd;
	int async_fd;
	int num_comp_vectors;
	pthread_mutex_t mutex;
	void *abi_compat; /* KVF_VERBS_ABI_IS_EXTENDED: see verbs_context */
};

/* The extended context a modern provider allocates: its ibv_context is the
 * last member, and newer entry points are added at the front, so an entry
 * is present when sz (the provider's size of this struct, counted back
 * from the end) reaches it and the pointer is set. The shim uses query_port
 * only: it fills the whole struct ibv_port_attr, whose size it is told. The
 * fake provider also sets create_qp_ex (verbs.h's inline ibv_create_qp_ex
 * calls it). */
struct verbs_context {
	kvf_ibv_query_port_ext_op query_port;
	void *_reserved_ops[32]; /* advise_mr .. open_qp */
	kvf_ibv_create_qp_ex_op create_qp_ex;
	void *_reserved_ops_b[4]; /* get_srq_num .. close_xrcd */
	uint64_t _reserved;
	size_t sz;
	struct ibv_context context;
};

struct ibv_device_attr {
	char fw_ver[64];
	uint64_t node_guid;      /* network order */
	uint64_t sys_image_guid; /* network order */
	uint64_t max_mr_size;
	uint64_t page_size_cap;
	uint32_t vendor_id;
	uint32_t vendor_part_id;
	uint32_t hw_ver;
	int max_qp;
	int max_qp_wr;
	unsigned int device_cap_flags;
	int max_sge;
	int max_sge_rd;
	int max_cq;
	int max_cqe;
	int max_mr;
	int max_pd;
	int max_qp_rd_atom;
	int max_ee_rd_atom;
	int max_res_rd_atom;
	int max_qp_init_rd_atom;
	int max_ee_init_rd_atom;
	enum ibv_atomic_cap atomic_cap;
	int max_ee;
	int max_rdd;
	int max_mw;
	int max_raw_ipv6_qp;
	int max_raw_ethy_qp;
	int max_mcast_grp;
	int max_mcast_qp_attach;
	int max_total_mcast_qp_attach;
	int max_ah;
	int max_fmr;
	int max_map_per_fmr;
	int max_srq;
	int max_srq_wr;
	int max_srq_sge;
	uint16_t max_pkeys;
	uint8_t local_ca_ack_delay;
	uint8_t phys_port_cnt;
};

struct ibv_port_attr {
	enum ibv_port_state state;
	enum ibv_mtu max_mtu;
	enum ibv_mtu active_mtu;
	int gid_tbl_len;
	uint32_t port_cap_flags;
	uint32_t max_msg_sz;
	uint32_t bad_pkey_cntr;
	uint32_t qkey_viol_cntr;
	uint16_t pkey_tbl_len;
	uint16_t lid;
	uint16_t sm_lid;
	uint8_t lmc;
	uint8_t max_vl_num;
	uint8_t sm_sl;
	uint8_t subnet_timeout;
	uint8_t init_type_reply;
	uint8_t active_width;
	uint8_t active_speed;
	uint8_t phys_state;
	uint8_t link_layer;
	uint8_t flags;
	uint16_t port_cap_flags2;
};

/* One GID table entry (_ibv_query_gid_ex). */
struct ibv_gid_entry {
	union ibv_gid gid;
	uint32_t gid_index;
	uint32_t port_num;
	uint32_t gid_type; /* enum ibv_gid_type */
	uint32_t ndev_ifindex;
};

struct ibv_async_event {
	union {
		struct ibv_cq *cq;
		struct ibv_qp *qp;
		struct ibv_srq *srq;
		struct ibv_wq *wq;
		int port_num;
	} element;
	enum ibv_event_type event_type;
};

struct ibv_pd {
	struct ibv_context *context;
	uint32_t handle;
};

struct ibv_mr {
	struct ibv_context *context;
	struct ibv_pd *pd;
	void *addr;
	size_t length;
	uint32_t handle;
	uint32_t lkey;
	uint32_t rkey;
};

struct ibv_comp_channel {
	struct ibv_context *context;
	int fd;
	int refcnt;
};

struct ibv_cq {
	struct ibv_context *context;
	struct ibv_comp_channel *channel;
	void *cq_context;
	uint32_t handle;
	int cqe;
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	uint32_t comp_events_completed;
	uint32_t async_events_completed;
};

struct ibv_qp {
	struct ibv_context *context;
	void *qp_context;
	struct ibv_pd *pd;
	struct ibv_cq *send_cq;
	struct ibv_cq *recv_cq;
	struct ibv_srq *srq;
	uint32_t handle;
	uint32_t qp_num;
	enum ibv_qp_state state;
	enum ibv_qp_type qp_type;
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	uint32_t events_completed;
};

struct ibv_qp_cap {
	uint32_t max_send_wr;
	uint32_t max_recv_wr;
	uint32_t max_send_sge;
	uint32_t max_recv_sge;
	uint32_t max_inline_data;
};

struct ibv_qp_init_attr {
	void *qp_context;
	struct ibv_cq *send_cq;
	struct ibv_cq *recv_cq;
	struct ibv_srq *srq;
	struct ibv_qp_cap cap;
	enum ibv_qp_type qp_type;
	int sq_sig_all;
};

struct ibv_global_route {
	union ibv_gid dgid;
	uint32_t flow_label;
	uint8_t sgid_index;
	uint8_t hop_limit;
	uint8_t traffic_class;
};

struct ibv_ah_attr {
	struct ibv_global_route grh;
	uint16_t dlid;
	uint8_t sl;
	uint8_t src_path_bits;
	uint8_t static_rate;
	uint8_t is_global;
	uint8_t port_num;
};

struct ibv_qp_attr {
	enum ibv_qp_state qp_state;
	enum ibv_qp_state cur_qp_state;
	enum ibv_mtu path_mtu;
	enum ibv_mig_state path_mig_state;
	uint32_t qkey;
	uint32_t rq_psn;
	uint32_t sq_psn;
	uint32_t dest_qp_num;
	unsigned int qp_access_flags;
	struct ibv_qp_cap cap;
	struct ibv_ah_attr ah_attr;
	struct ibv_ah_attr alt_ah_attr;
	uint16_t pkey_index;
	uint16_t alt_pkey_index;
	uint8_t en_sqd_async_notify;
	uint8_t sq_draining;
	uint8_t max_rd_atomic;
	uint8_t max_dest_rd_atomic;
	uint8_t min_rnr_timer;
	uint8_t port_num;
	uint8_t timeout;
	uint8_t retry_cnt;
	uint8_t rnr_retry;
	uint8_t alt_port_num;
	uint8_t alt_timeout;
	uint32_t rate_limit;
};

/* One scatter/gather entry. */
struct ibv_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

struct ibv_send_wr {
	uint64_t wr_id;
	struct ibv_send_wr *next;
	struct ibv_sge *sg_list;
	int num_sge;
	enum ibv_wr_opcode opcode;
	unsigned int send_flags;
	union {
		uint32_t imm_data; /* network order */
		uint32_t invalidate_rkey;
	};
	union {
		struct {
			uint64_t remote_addr;
			uint32_t rkey;
		} rdma;
		struct {
			uint64_t remote_addr;
			uint64_t compare_add;
			uint64_t swap;
			uint32_t rkey;
		} atomic;
		struct {
			struct ibv_ah *ah;
			uint32_t remote_qpn;
			uint32_t remote_qkey;
		} ud;
	} wr;
	union {
		struct {
			uint32_t remote_srqn;
		} xrc;
	} qp_type;
	union {
		struct {
			struct ibv_mw *mw;
			uint32_t rkey;
			struct {
				struct ibv_mr *mr;
				uint64_t addr;
				uint64_t length;
				unsigned int mw_access_flags;
			} bind_info;
		} bind_mw;
		struct {
			void *hdr;
			uint16_t hdr_sz;
			uint16_t mss;
		} tso;
	};
};

struct ibv_recv_wr {
	uint64_t wr_id;
	struct ibv_recv_wr *next;
	struct ibv_sge *sg_list;
	int num_sge;
};

/* One work completion. */
struct ibv_wc {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	union {
		uint32_t imm_data; /* network order */
		uint32_t invalidated_rkey;
	};
	uint32_t qp_num;
	uint32_t src_qp;
	unsigned int wc_flags;
	uint16_t pkey_index;
	uint16_t slid;
	uint8_t sl;
	uint8_t dlid_path_bits;
};

/* ---- objects only the fake provider implements (tests/rdma/fakeverbs):
 * shared receive queues and the extended QP of the ibv_wr_* calls ---- */

struct ibv_srq_attr {
	uint32_t max_wr;
	uint32_t max_sge;
	uint32_t srq_limit;
};

struct ibv_srq_init_attr {
	void *srq_context;
	struct ibv_srq_attr attr;
};

/* A shared receive queue; providers embed it in their own. */
struct ibv_srq {
	struct ibv_context *context;
	void *srq_context;
	struct ibv_pd *pd;
	uint32_t handle;
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	uint32_t events_completed;
};

struct ibv_rx_hash_conf {
	uint8_t rx_hash_function;
	uint8_t rx_hash_key_len;
	uint8_t *rx_hash_key;
	uint64_t rx_hash_fields_mask;
};

/* ibv_qp_init_attr, then the members comp_mask says are set. */
struct ibv_qp_init_attr_ex {
	void *qp_context;
	struct ibv_cq *send_cq;
	struct ibv_cq *recv_cq;
	struct ibv_srq *srq;
	struct ibv_qp_cap cap;
	enum ibv_qp_type qp_type;
	int sq_sig_all;
	uint32_t comp_mask; /* enum ibv_qp_init_attr_mask */
	struct ibv_pd *pd;
	struct ibv_xrcd *xrcd;
	uint32_t create_flags;
	uint16_t max_tso_header;
	struct ibv_rwq_ind_table *rwq_ind_tbl;
	struct ibv_rx_hash_conf rx_hash_conf;
	uint32_t source_qpn;
	uint64_t send_ops_flags; /* enum ibv_qp_create_send_ops_flags */
};

/* One buffer of inline data (ibv_wr_set_inline_data_list). */
struct ibv_data_buf {
	void *addr;
	size_t length;
};

/* The QP a provider hands back when asked for send_ops_flags: verbs.h's
 * inline ibv_wr_* calls are calls through these members, between
 * ibv_wr_start and ibv_wr_complete (or ibv_wr_abort); wr_id and wr_flags
 * are set by the caller before each work request's opcode call. */
struct ibv_qp_ex {
	struct ibv_qp qp_base;
	uint64_t comp_mask;
	uint64_t wr_id;
	unsigned int wr_flags; /* enum ibv_send_flags */
	void (*wr_atomic_cmp_swp)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, uint64_t compare,
	                          uint64_t swap);
	void (*wr_atomic_fetch_add)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, uint64_t add);
	void (*wr_bind_mw)(struct ibv_qp_ex *qp, struct ibv_mw *mw, uint32_t rkey,
	                   const struct ibv_mw_bind_info *bind_info);
	void (*wr_local_inv)(struct ibv_qp_ex *qp, uint32_t invalidate_rkey);
	void (*wr_rdma_read)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr);
	void (*wr_rdma_write)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr);
	void (*wr_rdma_write_imm)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, uint32_t imm_data);
	void (*wr_send)(struct ibv_qp_ex *qp);
	void (*wr_send_imm)(struct ibv_qp_ex *qp, uint32_t imm_data);
	void (*wr_send_inv)(struct ibv_qp_ex *qp, uint32_t invalidate_rkey);
	void (*wr_send_tso)(struct ibv_qp_ex *qp, void *hdr, uint16_t hdr_sz, uint16_t mss);
	void (*wr_set_ud_addr)(struct ibv_qp_ex *qp, struct ibv_ah *ah, uint32_t remote_qpn, uint32_t remote_qkey);
	void (*wr_set_xrc_srqn)(struct ibv_qp_ex *qp, uint32_t remote_srqn);
	void (*wr_set_inline_data)(struct ibv_qp_ex *qp, void *addr, size_t length);
	void (*wr_set_inline_data_list)(struct ibv_qp_ex *qp, size_t num_buf, const struct ibv_data_buf *buf_list);
	void (*wr_set_sge)(struct ibv_qp_ex *qp, uint32_t lkey, uint64_t addr, uint32_t length);
	void (*wr_set_sge_list)(struct ibv_qp_ex *qp, size_t num_sge, const struct ibv_sge *sg_list);
	void (*wr_start)(struct ibv_qp_ex *qp);
	int (*wr_complete)(struct ibv_qp_ex *qp);
	void (*wr_abort)(struct ibv_qp_ex *qp);
	void (*wr_atomic_write)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, const void *atomic_wr);
};

#endif /* !KVF_VERBS_FN_ONLY */

#endif /* KVF_VERBS_ABI_H */
