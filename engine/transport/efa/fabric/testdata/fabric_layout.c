// Prints the size of every struct fabric_abi.h declares, the offset and
// size of every member it names, and every constant: built once against
// fabric_abi.h (-DKVF_LAYOUT_OURS) and once with libfabric's headers
// force-included from the command line (cc -include, layout_test.go: no
// file of ours names them, so nothing of the build needs libfabric-dev);
// the two outputs must be equal.
#include <stdio.h>
#include <stddef.h>
#ifdef KVF_LAYOUT_OURS
#include "fabric_abi.h"
#endif

#define S(t) printf("sizeof %s %zu align %zu\n", #t, sizeof(struct t), _Alignof(struct t))
#define M(t, m) printf("%s.%s %zu %zu\n", #t, #m, offsetof(struct t, m), sizeof(((struct t *)0)->m))
#define K(c) printf("const %s %llu\n", #c, (unsigned long long)(c))

int main(void) {
	/* Structs whose every member we declare. */
	S(fid); M(fid, fclass); M(fid, context); M(fid, ops);
	S(fi_tx_attr); M(fi_tx_attr, caps); M(fi_tx_attr, mode); M(fi_tx_attr, op_flags); M(fi_tx_attr, msg_order);
	M(fi_tx_attr, comp_order); M(fi_tx_attr, inject_size); M(fi_tx_attr, size); M(fi_tx_attr, iov_limit);
	M(fi_tx_attr, rma_iov_limit); M(fi_tx_attr, tclass);
	S(fi_rx_attr); M(fi_rx_attr, caps); M(fi_rx_attr, mode); M(fi_rx_attr, op_flags); M(fi_rx_attr, msg_order);
	M(fi_rx_attr, comp_order); M(fi_rx_attr, total_buffered_recv); M(fi_rx_attr, size); M(fi_rx_attr, iov_limit);
	S(fi_ep_attr); M(fi_ep_attr, type); M(fi_ep_attr, protocol); M(fi_ep_attr, protocol_version);
	M(fi_ep_attr, max_msg_size); M(fi_ep_attr, msg_prefix_size); M(fi_ep_attr, max_order_raw_size);
	M(fi_ep_attr, max_order_war_size); M(fi_ep_attr, max_order_waw_size); M(fi_ep_attr, mem_tag_format);
	M(fi_ep_attr, tx_ctx_cnt); M(fi_ep_attr, rx_ctx_cnt); M(fi_ep_attr, auth_key_size); M(fi_ep_attr, auth_key);
	S(fi_domain_attr); M(fi_domain_attr, domain); M(fi_domain_attr, name); M(fi_domain_attr, threading);
	M(fi_domain_attr, control_progress); M(fi_domain_attr, data_progress); M(fi_domain_attr, resource_mgmt);
	M(fi_domain_attr, av_type); M(fi_domain_attr, mr_mode); M(fi_domain_attr, mr_key_size);
	M(fi_domain_attr, cq_data_size); M(fi_domain_attr, cq_cnt); M(fi_domain_attr, ep_cnt);
	M(fi_domain_attr, tx_ctx_cnt); M(fi_domain_attr, rx_ctx_cnt); M(fi_domain_attr, max_ep_tx_ctx);
	M(fi_domain_attr, max_ep_rx_ctx); M(fi_domain_attr, max_ep_stx_ctx); M(fi_domain_attr, max_ep_srx_ctx);
	M(fi_domain_attr, cntr_cnt); M(fi_domain_attr, mr_iov_limit); M(fi_domain_attr, caps); M(fi_domain_attr, mode);
	M(fi_domain_attr, auth_key); M(fi_domain_attr, auth_key_size); M(fi_domain_attr, max_err_data);
	M(fi_domain_attr, mr_cnt); M(fi_domain_attr, tclass);
	S(fi_fabric_attr); M(fi_fabric_attr, fabric); M(fi_fabric_attr, name); M(fi_fabric_attr, prov_name);
	M(fi_fabric_attr, prov_version); M(fi_fabric_attr, api_version);
	S(fi_info); M(fi_info, next); M(fi_info, caps); M(fi_info, mode); M(fi_info, addr_format);
	M(fi_info, src_addrlen); M(fi_info, dest_addrlen); M(fi_info, src_addr); M(fi_info, dest_addr);
	M(fi_info, handle); M(fi_info, tx_attr); M(fi_info, rx_attr); M(fi_info, ep_attr); M(fi_info, domain_attr);
	M(fi_info, fabric_attr); M(fi_info, nic);
	S(fid_fabric); M(fid_fabric, fid); M(fid_fabric, ops); M(fid_fabric, api_version);
	S(fi_av_attr); M(fi_av_attr, type); M(fi_av_attr, rx_ctx_bits); M(fi_av_attr, count); M(fi_av_attr, ep_per_node);
	M(fi_av_attr, name); M(fi_av_attr, map_addr); M(fi_av_attr, flags);
	S(fi_cq_attr); M(fi_cq_attr, size); M(fi_cq_attr, flags); M(fi_cq_attr, format); M(fi_cq_attr, wait_obj);
	M(fi_cq_attr, signaling_vector); M(fi_cq_attr, wait_cond); M(fi_cq_attr, wait_set);
	S(fi_mr_attr); M(fi_mr_attr, mr_iov); M(fi_mr_attr, iov_count); M(fi_mr_attr, access); M(fi_mr_attr, offset);
	M(fi_mr_attr, requested_key); M(fi_mr_attr, context); M(fi_mr_attr, auth_key_size); M(fi_mr_attr, auth_key);
	M(fi_mr_attr, iface); M(fi_mr_attr, device); M(fi_mr_attr, device.cuda);
	S(fid_domain); M(fid_domain, fid); M(fid_domain, ops); M(fid_domain, mr);
	S(fid_mr); M(fid_mr, fid); M(fid_mr, mem_desc); M(fid_mr, key);
	S(fid_av); M(fid_av, fid); M(fid_av, ops);
	S(fi_cq_data_entry); M(fi_cq_data_entry, op_context); M(fi_cq_data_entry, flags); M(fi_cq_data_entry, len);
	M(fi_cq_data_entry, buf); M(fi_cq_data_entry, data);
	S(fi_cq_err_entry); M(fi_cq_err_entry, op_context); M(fi_cq_err_entry, flags); M(fi_cq_err_entry, len);
	M(fi_cq_err_entry, buf); M(fi_cq_err_entry, data); M(fi_cq_err_entry, tag); M(fi_cq_err_entry, olen);
	M(fi_cq_err_entry, err); M(fi_cq_err_entry, prov_errno); M(fi_cq_err_entry, err_data);
	M(fi_cq_err_entry, err_data_size);
	S(fid_cq); M(fid_cq, fid); M(fid_cq, ops);
	S(fid_ep); M(fid_ep, fid); M(fid_ep, ops); M(fid_ep, cm); M(fid_ep, msg); M(fid_ep, rma); M(fid_ep, tagged);
	M(fid_ep, atomic); M(fid_ep, collective);
	S(fi_ops_ep);
	/* Ops tables: the entries we call, at their places (ours end early). */
	M(fi_ops, size); M(fi_ops, close); M(fi_ops, bind); M(fi_ops, control); M(fi_ops, ops_open); M(fi_ops, tostr);
	M(fi_ops, ops_set);
	M(fi_ops_fabric, size); M(fi_ops_fabric, domain);
	M(fi_ops_domain, size); M(fi_ops_domain, av_open); M(fi_ops_domain, cq_open); M(fi_ops_domain, endpoint);
	M(fi_ops_mr, size); M(fi_ops_mr, reg); M(fi_ops_mr, regv); M(fi_ops_mr, regattr);
	M(fi_ops_av, size); M(fi_ops_av, insert); M(fi_ops_av, insertsvc); M(fi_ops_av, insertsym); M(fi_ops_av, remove);
	M(fi_ops_cq, size); M(fi_ops_cq, read); M(fi_ops_cq, readfrom); M(fi_ops_cq, readerr); M(fi_ops_cq, sread);
	M(fi_ops_cq, sreadfrom); M(fi_ops_cq, signal); M(fi_ops_cq, strerror);
	M(fi_ops_cm, size); M(fi_ops_cm, setname); M(fi_ops_cm, getname);
	M(fi_ops_rma, size); M(fi_ops_rma, read); M(fi_ops_rma, readv); M(fi_ops_rma, readmsg); M(fi_ops_rma, write);
	M(fi_ops_rma, writev); M(fi_ops_rma, writemsg); M(fi_ops_rma, inject); M(fi_ops_rma, writedata);
	/* Constants. */
	K(FI_MSG); K(FI_RMA); K(FI_READ); K(FI_WRITE); K(FI_RECV); K(FI_SEND); K(FI_TRANSMIT); K(FI_REMOTE_READ);
	K(FI_REMOTE_WRITE); K(FI_COMPLETION); K(FI_INJECT_COMPLETE); K(FI_TRANSMIT_COMPLETE); K(FI_DELIVERY_COMPLETE);
	K(FI_HMEM); K(FI_CONTEXT); K(FI_CONTEXT2);
	K(FI_MR_LOCAL); K(FI_MR_RAW); K(FI_MR_VIRT_ADDR); K(FI_MR_ALLOCATED); K(FI_MR_PROV_KEY); K(FI_MR_MMU_NOTIFY);
	K(FI_MR_RMA_EVENT); K(FI_MR_ENDPOINT); K(FI_MR_HMEM); K(FI_ADDR_UNSPEC); K(FI_ENABLE); K(FI_EAVAIL);
	K(FI_EP_UNSPEC); K(FI_EP_MSG); K(FI_EP_DGRAM); K(FI_EP_RDM); K(FI_AV_UNSPEC); K(FI_AV_MAP); K(FI_AV_TABLE);
	K(FI_THREAD_UNSPEC); K(FI_THREAD_SAFE); K(FI_THREAD_FID); K(FI_THREAD_DOMAIN);
	K(FI_PROGRESS_UNSPEC); K(FI_PROGRESS_AUTO); K(FI_PROGRESS_MANUAL); K(FI_RM_UNSPEC); K(FI_RM_DISABLED);
	K(FI_RM_ENABLED); K(FI_CQ_FORMAT_UNSPEC); K(FI_CQ_FORMAT_CONTEXT); K(FI_CQ_FORMAT_MSG); K(FI_CQ_FORMAT_DATA);
	K(FI_WAIT_NONE); K(FI_WAIT_UNSPEC); K(FI_WAIT_SET); K(FI_WAIT_FD); K(FI_CQ_COND_NONE);
	K(FI_HMEM_SYSTEM); K(FI_HMEM_CUDA);
	return 0;
}
