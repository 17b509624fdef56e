/* The kvferry libibverbs shim: libibverbs.so.1 is opened at run time with
 * dlopen, never linked, and compiled against our own declaration of the
 * verbs ABI (verbs_abi.h), so no rdma-core header is needed to build. What
 * verbs.h makes static inline (post_send, post_recv, poll_cq, req_notify_cq,
 * the extended query_port, reg_mr's choice of entry point) is written out
 * in shim.c and reaches the provider through the context's ops table.
 * Every function is a thin translation of one verbs call: the only state is
 * the table of entry points filled once by kvf_ibv_load. */
#ifndef KVFERRY_IBV_SHIM_H
#define KVFERRY_IBV_SHIM_H

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "verbs_abi.h"

#pragma GCC visibility push(hidden)

/* One RDMA work request of a chain posted with one doorbell. */
struct kvf_wr {
	uint64_t wr_id;
	uint64_t local_addr;
	uint64_t remote_addr;
	uint32_t length;
	uint32_t lkey;
	uint32_t rkey;
	uint32_t imm;    /* WRITE_WITH_IMM and SEND_WITH_IMM: host order */
	uint8_t opcode;  /* enum ibv_wr_opcode */
	uint8_t signaled;
	uint8_t inline_data;
	uint8_t pad;
};

/* One receive work request (one scatter entry). */
struct kvf_recv {
	uint64_t wr_id;
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

/* One work completion, the fields kvferry reads. */
struct kvf_wc {
	uint64_t wr_id;
	uint32_t status;  /* enum ibv_wc_status */
	uint32_t opcode;  /* enum ibv_wc_opcode */
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t qp_num;
	uint32_t imm;     /* host order */
	uint32_t wc_flags;
	uint32_t src_qp;
};

/* INIT -> RTR attributes. */
struct kvf_rtr {
	uint8_t dgid[16];
	uint32_t dest_qp_num;
	uint32_t rq_psn;
	uint16_t dlid;
	uint8_t port_num;
	uint8_t sgid_index;
	uint8_t path_mtu;      /* enum ibv_mtu */
	uint8_t hop_limit;
	uint8_t traffic_class;
	uint8_t sl;
	uint8_t min_rnr_timer;
	uint8_t max_dest_rd_atomic;
	uint8_t is_global;
};

/* One asynchronous event, already acknowledged. */
struct kvf_async {
	uint32_t event_type;  /* enum ibv_event_type */
	uint32_t qp_num;      /* QP events */
	uint32_t port_num;    /* port events */
};

int kvf_ibv_load(const char *path, char *err, int errlen);
int kvf_ibv_has_dmabuf(void);
int kvf_ibv_has_gid_ex(void);
int kvf_ibv_device_names(char *buf, int buflen);
struct ibv_context *kvf_ibv_open(const char *name);
int kvf_ibv_close(struct ibv_context *ctx);
int kvf_ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr);
int kvf_ibv_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
int kvf_ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, uint8_t gid[16]);
int kvf_ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, int index, uint32_t *type, uint32_t *ifindex);
int kvf_ibv_async_fd(struct ibv_context *ctx);
int kvf_ibv_num_comp_vectors(struct ibv_context *ctx);
struct ibv_pd *kvf_ibv_alloc_pd(struct ibv_context *ctx);
int kvf_ibv_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *kvf_ibv_reg_mr(struct ibv_pd *pd, uint64_t addr, uint64_t length, int access);
struct ibv_mr *kvf_ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, uint64_t length, uint64_t iova, int fd, int access);
int kvf_ibv_dereg_mr(struct ibv_mr *mr);
uint32_t kvf_ibv_mr_lkey(struct ibv_mr *mr);
uint32_t kvf_ibv_mr_rkey(struct ibv_mr *mr);
struct ibv_comp_channel *kvf_ibv_create_comp_channel(struct ibv_context *ctx);
int kvf_ibv_destroy_comp_channel(struct ibv_comp_channel *ch);
int kvf_ibv_comp_channel_fd(struct ibv_comp_channel *ch);
struct ibv_cq *kvf_ibv_create_cq(struct ibv_context *ctx, int cqe, struct ibv_comp_channel *ch, int vector);
int kvf_ibv_destroy_cq(struct ibv_cq *cq);
int kvf_ibv_req_notify_cq(struct ibv_cq *cq);
int kvf_ibv_get_cq_event(struct ibv_comp_channel *ch);
int kvf_ibv_poll_cq(struct ibv_cq *cq, int n, struct kvf_wc *out);
struct ibv_qp *kvf_ibv_create_qp(struct ibv_pd *pd, struct ibv_cq *send_cq, struct ibv_cq *recv_cq,
                                 uint32_t max_send_wr, uint32_t max_recv_wr, uint32_t max_sge,
                                 uint32_t max_inline, uint32_t *inline_out);
int kvf_ibv_destroy_qp(struct ibv_qp *qp);
uint32_t kvf_ibv_qp_num(struct ibv_qp *qp);
int kvf_ibv_qp_to_init(struct ibv_qp *qp, uint8_t port, uint16_t pkey_index, int access);
int kvf_ibv_qp_to_rtr(struct ibv_qp *qp, const struct kvf_rtr *a);
int kvf_ibv_qp_to_rts(struct ibv_qp *qp, uint8_t timeout, uint8_t retry_cnt, uint8_t rnr_retry,
                      uint32_t sq_psn, uint8_t max_rd_atomic);
int kvf_ibv_qp_to_state(struct ibv_qp *qp, int state);
int kvf_ibv_qp_state(struct ibv_qp *qp);
int kvf_ibv_post_send(struct ibv_qp *qp, const struct kvf_wr *wrs, int n, int *bad);
int kvf_ibv_post_recv(struct ibv_qp *qp, const struct kvf_recv *wrs, int n, int *bad);
int kvf_ibv_get_async_event(struct ibv_context *ctx, struct kvf_async *out);

#pragma GCC visibility pop

#endif
