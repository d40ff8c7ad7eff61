/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Typed -FI_ENOSYS stubs for the ops slots multirail leaves empty
 * (mrl_enosys.c): one per slot type.
 */
#ifndef MRL_ENOSYS_H
#define MRL_ENOSYS_H

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>

int mrl_no_bind(struct fid *fid, struct fid *bfid, uint64_t flags);
int mrl_no_control(struct fid *fid, int command, void *arg);
int mrl_no_ops_open(struct fid *fid, const char *name, uint64_t flags,
		    void **ops, void *context);
int mrl_no_passive_ep(struct fid_fabric *fabric, struct fi_info *info,
		      struct fid_pep **pep, void *context);
int mrl_no_wait_open(struct fid_fabric *fabric, struct fi_wait_attr *attr,
		     struct fid_wait **waitset);
int mrl_no_trywait(struct fid_fabric *fabric, struct fid **fids, int count);
int mrl_no_scalable_ep(struct fid_domain *domain, struct fi_info *info,
		       struct fid_ep **sep, void *context);
int mrl_no_stx_ctx(struct fid_domain *domain, struct fi_tx_attr *attr,
		   struct fid_stx **stx, void *context);
int mrl_no_srx_ctx(struct fid_domain *domain, struct fi_rx_attr *attr,
		   struct fid_ep **rx_ep, void *context);
int mrl_no_query_collective(struct fid_domain *domain,
			    enum fi_collective_op coll,
			    struct fi_collective_attr *attr, uint64_t flags);
int mrl_no_insertsym(struct fid_av *av, const char *node, size_t nodecnt,
		     const char *service, size_t svccnt, fi_addr_t *fi_addr,
		     uint64_t flags, void *context);
int mrl_no_cq_signal(struct fid_cq *cq);
int mrl_no_setname(fid_t fid, void *addr, size_t addrlen);
int mrl_no_getpeer(struct fid_ep *ep, void *addr, size_t *addrlen);
int mrl_no_connect(struct fid_ep *ep, const void *addr, const void *param,
		   size_t paramlen);
int mrl_no_listen(struct fid_pep *pep);
int mrl_no_accept(struct fid_ep *ep, const void *param, size_t paramlen);
int mrl_no_reject(struct fid_pep *pep, fid_t handle, const void *param,
		  size_t paramlen);
int mrl_no_shutdown(struct fid_ep *ep, uint64_t flags);
int mrl_no_join(struct fid_ep *ep, const void *addr, uint64_t flags,
		struct fid_mc **mc, void *context);
int mrl_no_tx_ctx(struct fid_ep *sep, int index, struct fi_tx_attr *attr,
		  struct fid_ep **tx_ep, void *context);
int mrl_no_rx_ctx(struct fid_ep *sep, int index, struct fi_rx_attr *attr,
		  struct fid_ep **rx_ep, void *context);
ssize_t mrl_no_size_left(struct fid_ep *ep);

#endif /* MRL_ENOSYS_H */
