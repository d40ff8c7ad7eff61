/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The ops we do not offer, each with its slot's own type: a call through a
 * pointer of another function type is undefined, however alike the stubs
 * look.  Every one answers -FI_ENOSYS.
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "mrl_enosys.h"

int mrl_no_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	(void) fid; (void) bfid; (void) flags;
	return -FI_ENOSYS;
}

int mrl_no_control(struct fid *fid, int command, void *arg)
{
	(void) fid; (void) command; (void) arg;
	return -FI_ENOSYS;
}

int mrl_no_ops_open(struct fid *fid, const char *name, uint64_t flags,
		    void **ops, void *context)
{
	(void) fid; (void) name; (void) flags; (void) ops; (void) context;
	return -FI_ENOSYS;
}

int mrl_no_passive_ep(struct fid_fabric *fabric, struct fi_info *info,
		      struct fid_pep **pep, void *context)
{
	(void) fabric; (void) info; (void) pep; (void) context;
	return -FI_ENOSYS;
}

int mrl_no_wait_open(struct fid_fabric *fabric, struct fi_wait_attr *attr,
		     struct fid_wait **waitset)
{
	(void) fabric; (void) attr; (void) waitset;
	return -FI_ENOSYS;
}

int mrl_no_trywait(struct fid_fabric *fabric, struct fid **fids, int count)
{
	(void) fabric; (void) fids; (void) count;
	return -FI_ENOSYS;
}

int mrl_no_scalable_ep(struct fid_domain *domain, struct fi_info *info,
		       struct fid_ep **sep, void *context)
{
	(void) domain; (void) info; (void) sep; (void) context;
	return -FI_ENOSYS;
}

int mrl_no_stx_ctx(struct fid_domain *domain, struct fi_tx_attr *attr,
		   struct fid_stx **stx, void *context)
{
	(void) domain; (void) attr; (void) stx; (void) context;
	return -FI_ENOSYS;
}

int mrl_no_srx_ctx(struct fid_domain *domain, struct fi_rx_attr *attr,
		   struct fid_ep **rx_ep, void *context)
{
	(void) domain; (void) attr; (void) rx_ep; (void) context;
	return -FI_ENOSYS;
}

int mrl_no_query_collective(struct fid_domain *domain,
			    enum fi_collective_op coll,
			    struct fi_collective_attr *attr, uint64_t flags)
{
	(void) domain; (void) coll; (void) attr; (void) flags;
	return -FI_ENOSYS;
}

int mrl_no_insertsym(struct fid_av *av, const char *node, size_t nodecnt,
		     const char *service, size_t svccnt, fi_addr_t *fi_addr,
		     uint64_t flags, void *context)
{
	(void) av; (void) node; (void) nodecnt; (void) service; (void) svccnt;
	(void) fi_addr; (void) flags; (void) context;
	return -FI_ENOSYS;
}

int mrl_no_cq_signal(struct fid_cq *cq)
{
	(void) cq;
	return -FI_ENOSYS;
}

int mrl_no_setname(fid_t fid, void *addr, size_t addrlen)
{
	(void) fid; (void) addr; (void) addrlen;
	return -FI_ENOSYS;
}

int mrl_no_getpeer(struct fid_ep *ep, void *addr, size_t *addrlen)
{
	(void) ep; (void) addr; (void) addrlen;
	return -FI_ENOSYS;
}

int mrl_no_connect(struct fid_ep *ep, const void *addr, const void *param,
		   size_t paramlen)
{
	(void) ep; (void) addr; (void) param; (void) paramlen;
	return -FI_ENOSYS;
}

int mrl_no_listen(struct fid_pep *pep)
{
	(void) pep;
	return -FI_ENOSYS;
}

int mrl_no_accept(struct fid_ep *ep, const void *param, size_t paramlen)
{
	(void) ep; (void) param; (void) paramlen;
	return -FI_ENOSYS;
}

int mrl_no_reject(struct fid_pep *pep, fid_t handle, const void *param,
		  size_t paramlen)
{
	(void) pep; (void) handle; (void) param; (void) paramlen;
	return -FI_ENOSYS;
}

int mrl_no_shutdown(struct fid_ep *ep, uint64_t flags)
{
	(void) ep; (void) flags;
	return -FI_ENOSYS;
}

int mrl_no_join(struct fid_ep *ep, const void *addr, uint64_t flags,
		struct fid_mc **mc, void *context)
{
	(void) ep; (void) addr; (void) flags; (void) mc; (void) context;
	return -FI_ENOSYS;
}

int mrl_no_tx_ctx(struct fid_ep *sep, int index, struct fi_tx_attr *attr,
		  struct fid_ep **tx_ep, void *context)
{
	(void) sep; (void) index; (void) attr; (void) tx_ep; (void) context;
	return -FI_ENOSYS;
}

int mrl_no_rx_ctx(struct fid_ep *sep, int index, struct fi_rx_attr *attr,
		  struct fid_ep **rx_ep, void *context)
{
	(void) sep; (void) index; (void) attr; (void) rx_ep; (void) context;
	return -FI_ENOSYS;
}

ssize_t mrl_no_size_left(struct fid_ep *ep)
{
	(void) ep;
	return -FI_ENOSYS;
}
