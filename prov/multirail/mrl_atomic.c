/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Atomics pass through whole on rail 0: an atomic is indivisible, so it
 * cannot be striped, and keeping every atomic on one rail keeps them
 * atomic with respect to each other (the core serialises them per
 * target).  Completions are routed like passed-through messages.
 */
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_atomic.h>

#include "mrl.h"

enum mrl_atomic_kind { MRL_ATOMIC_WRITE, MRL_ATOMIC_FETCH, MRL_ATOMIC_COMPARE };

/* The ioc arrays of one atomic, in the user's descriptors or the core's. */
struct mrl_atomic_iocs {
	const struct fi_ioc *iov;
	void **desc;
	size_t count;
};

static int mrl_check_iocs(const char *what, const struct mrl_atomic_iocs *a,
			  bool local_mr)
{
	size_t i;

	if (a->count > MRL_IOV_LIMIT || (a->count && !a->iov)) {
		MRL_WARN(FI_LOG_EP_DATA, "%s: %zu iocs, at most %d\n", what,
			 a->count, MRL_IOV_LIMIT);
		return -FI_EINVAL;
	}
	for (i = 0; local_mr && i < a->count; i++) {
		if (a->iov[i].count && (!a->desc || !a->desc[i])) {
			MRL_WARN(FI_LOG_EP_DATA, "FI_MR_LOCAL: %s ioc %zu has "
				 "no descriptor\n", what, i);
			return -FI_EINVAL;
		}
	}
	return 0;
}

static void mrl_core_descs(const struct mrl_atomic_iocs *a, void **out)
{
	size_t i;

	for (i = 0; i < a->count; i++)
		out[i] = mrl_desc_rail(a->desc ? a->desc[i] : NULL, 0);
}

static uint64_t mrl_completion_flags(enum mrl_atomic_kind kind)
{
	return FI_ATOMIC | (kind == MRL_ATOMIC_WRITE ? FI_WRITE : FI_READ);
}

/* Rail 0's address and keys for the target side of msg. */
static int mrl_core_target(struct mrl_ep *ep, const struct fi_msg_atomic *msg,
			   fi_addr_t *addr, struct fi_rma_ioc *rma)
{
	size_t i;
	int ret;

	if (!msg->rma_iov_count || msg->rma_iov_count > MRL_IOV_LIMIT ||
	    !msg->rma_iov) {
		MRL_WARN(FI_LOG_EP_DATA, "%zu remote iocs, 1 to %d\n",
			 msg->rma_iov_count, MRL_IOV_LIMIT);
		return -FI_EINVAL;
	}
	for (i = 0; i < msg->rma_iov_count; i++) {
		rma[i] = msg->rma_iov[i];
		ret = mrl_rail0_target(ep, msg->addr, msg->rma_iov[i].key,
				       addr, &rma[i].key);
		if (ret)
			return ret;
	}
	return 0;
}

static ssize_t mrl_atomic_post(struct mrl_ep *ep, enum mrl_atomic_kind kind,
			       const struct fi_msg_atomic *msg,
			       const struct mrl_atomic_iocs *cmp,
			       const struct mrl_atomic_iocs *res,
			       uint64_t flags)
{
	struct mrl_atomic_iocs src = { msg->msg_iov, msg->desc,
				       msg->iov_count };
	bool local_mr = ep->domain->core_mr_local;
	void *src_desc[MRL_IOV_LIMIT], *cmp_desc[MRL_IOV_LIMIT];
	void *res_desc[MRL_IOV_LIMIT];
	struct fi_rma_ioc rma[MRL_IOV_LIMIT];
	struct fi_msg_atomic m = *msg;
	struct mrl_msg_req *req;
	ssize_t ret;

	mrl_ep_lock(ep);
	ret = mrl_check_iocs("source", &src, local_mr && !(flags & FI_INJECT));
	if (!ret && cmp)
		ret = mrl_check_iocs("compare", cmp, local_mr);
	if (!ret && res)
		ret = mrl_check_iocs("result", res, local_mr);
	if (!ret)
		ret = mrl_core_target(ep, msg, &m.addr, rma);
	if (ret)
		goto out;
	req = mrl_msg_req_start(ep, msg->context, flags | ep->tx_op_flags,
				mrl_completion_flags(kind), 0, &flags);
	if (!req) {
		ret = -FI_EAGAIN;
		goto out;
	}

	mrl_core_descs(&src, src_desc);
	m.desc = src_desc;
	m.rma_iov = rma;
	m.context = &req->hdr;
	switch (kind) {
	case MRL_ATOMIC_WRITE:
		ret = fi_atomicmsg(ep->rails[0].ep, &m, flags);
		break;
	case MRL_ATOMIC_FETCH:
		mrl_core_descs(res, res_desc);
		ret = fi_fetch_atomicmsg(ep->rails[0].ep, &m,
					 (struct fi_ioc *) res->iov,
					 res_desc, res->count, flags);
		break;
	default:
		mrl_core_descs(cmp, cmp_desc);
		mrl_core_descs(res, res_desc);
		ret = fi_compare_atomicmsg(ep->rails[0].ep, &m, cmp->iov,
					   cmp_desc, cmp->count,
					   (struct fi_ioc *) res->iov, res_desc,
					   res->count, flags);
	}
	ret = mrl_msg_req_posted(ep, req, ret);
out:
	mrl_unlock(ep->domain);
	return ret;
}

static size_t mrl_ioc_count(const struct fi_ioc *iov, size_t count)
{
	size_t n = 0, i;

	for (i = 0; iov && i < count; i++)
		n += iov[i].count;
	return n;
}

/*
 * The non-msg calls: one remote ioc, as many elements as the result
 * (FI_ATOMIC_READ has no source), else as the source holds.
 */
static ssize_t mrl_post_simple(struct fid_ep *ep, enum mrl_atomic_kind kind,
			       const struct fi_ioc *iov, void **desc,
			       size_t count, const struct mrl_atomic_iocs *cmp,
			       const struct mrl_atomic_iocs *res,
			       fi_addr_t dest, uint64_t addr, uint64_t key,
			       enum fi_datatype datatype, enum fi_op op,
			       void *context)
{
	struct fi_rma_ioc rma = {
		addr, res ? mrl_ioc_count(res->iov, res->count) :
			    mrl_ioc_count(iov, count), key
	};
	struct fi_msg_atomic msg = {
		.msg_iov = iov, .desc = desc, .iov_count = count,
		.addr = dest, .rma_iov = &rma, .rma_iov_count = 1,
		.datatype = datatype, .op = op, .context = context,
	};

	return mrl_atomic_post(mrl_ep_of(ep), kind, &msg, cmp, res, 0);
}

/* ---- write ------------------------------------------------------------- */

static ssize_t mrl_atomicmsg(struct fid_ep *ep, const struct fi_msg_atomic *msg,
			     uint64_t flags)
{
	return mrl_atomic_post(mrl_ep_of(ep), MRL_ATOMIC_WRITE, msg, NULL, NULL,
			       flags);
}

static ssize_t mrl_atomicv(struct fid_ep *ep, const struct fi_ioc *iov,
			   void **desc, size_t count, fi_addr_t dest,
			   uint64_t addr, uint64_t key,
			   enum fi_datatype datatype, enum fi_op op,
			   void *context)
{
	return mrl_post_simple(ep, MRL_ATOMIC_WRITE, iov, desc, count, NULL,
			       NULL, dest, addr, key, datatype, op, context);
}

static ssize_t mrl_atomic(struct fid_ep *ep, const void *buf, size_t count,
			  void *desc, fi_addr_t dest, uint64_t addr,
			  uint64_t key, enum fi_datatype datatype,
			  enum fi_op op, void *context)
{
	struct fi_ioc iov = { (void *) buf, count };

	return mrl_atomicv(ep, &iov, &desc, 1, dest, addr, key, datatype, op,
			   context);
}

/* Injects go straight to the core: no completion to route. */
static ssize_t mrl_atomic_inject(struct fid_ep *ep_fid, const void *buf,
				 size_t count, fi_addr_t dest, uint64_t addr,
				 uint64_t key, enum fi_datatype datatype,
				 enum fi_op op)
{
	struct mrl_ep *ep = mrl_ep_of(ep_fid);
	fi_addr_t caddr;
	uint64_t key0;
	ssize_t ret;

	mrl_ep_lock(ep);
	ret = mrl_rail0_target(ep, dest, key, &caddr, &key0);
	if (ret)
		goto out;
	ret = fi_inject_atomic(ep->rails[0].ep, buf, count, caddr, addr, key0,
			       datatype, op);
	mrl_inject_posted(ep, ep->cntr_write, ret);
out:
	mrl_unlock(ep->domain);
	return ret;
}

/* ---- fetch ------------------------------------------------------------- */

static ssize_t mrl_fetch_atomicmsg(struct fid_ep *ep,
				   const struct fi_msg_atomic *msg,
				   struct fi_ioc *resultv, void **result_desc,
				   size_t result_count, uint64_t flags)
{
	struct mrl_atomic_iocs res = { resultv, result_desc, result_count };

	return mrl_atomic_post(mrl_ep_of(ep), MRL_ATOMIC_FETCH, msg, NULL, &res,
			       flags);
}

static ssize_t mrl_fetch_atomicv(struct fid_ep *ep, const struct fi_ioc *iov,
				 void **desc, size_t count,
				 struct fi_ioc *resultv, void **result_desc,
				 size_t result_count, fi_addr_t dest,
				 uint64_t addr, uint64_t key,
				 enum fi_datatype datatype, enum fi_op op,
				 void *context)
{
	struct mrl_atomic_iocs res = { resultv, result_desc, result_count };

	return mrl_post_simple(ep, MRL_ATOMIC_FETCH, iov, desc, count, NULL,
			       &res, dest, addr, key, datatype, op, context);
}

static ssize_t mrl_fetch_atomic(struct fid_ep *ep, const void *buf,
				size_t count, void *desc, void *result,
				void *result_desc, fi_addr_t dest,
				uint64_t addr, uint64_t key,
				enum fi_datatype datatype, enum fi_op op,
				void *context)
{
	struct fi_ioc iov = { (void *) buf, count };
	struct fi_ioc resv = { result, count };

	return mrl_fetch_atomicv(ep, &iov, &desc, 1, &resv, &result_desc, 1,
				 dest, addr, key, datatype, op, context);
}

/* ---- compare ------------------------------------------------------------- */

static ssize_t mrl_compare_atomicmsg(struct fid_ep *ep,
				     const struct fi_msg_atomic *msg,
				     const struct fi_ioc *comparev,
				     void **compare_desc, size_t compare_count,
				     struct fi_ioc *resultv,
				     void **result_desc, size_t result_count,
				     uint64_t flags)
{
	struct mrl_atomic_iocs cmp = { comparev, compare_desc, compare_count };
	struct mrl_atomic_iocs res = { resultv, result_desc, result_count };

	return mrl_atomic_post(mrl_ep_of(ep), MRL_ATOMIC_COMPARE, msg, &cmp,
			       &res, flags);
}

static ssize_t mrl_compare_atomicv(struct fid_ep *ep,
				   const struct fi_ioc *iov, void **desc,
				   size_t count, const struct fi_ioc *comparev,
				   void **compare_desc, size_t compare_count,
				   struct fi_ioc *resultv, void **result_desc,
				   size_t result_count, fi_addr_t dest,
				   uint64_t addr, uint64_t key,
				   enum fi_datatype datatype, enum fi_op op,
				   void *context)
{
	struct mrl_atomic_iocs cmp = { comparev, compare_desc, compare_count };
	struct mrl_atomic_iocs res = { resultv, result_desc, result_count };

	return mrl_post_simple(ep, MRL_ATOMIC_COMPARE, iov, desc, count, &cmp,
			       &res, dest, addr, key, datatype, op, context);
}

static ssize_t mrl_compare_atomic(struct fid_ep *ep, const void *buf,
				  size_t count, void *desc,
				  const void *compare, void *compare_desc,
				  void *result, void *result_desc,
				  fi_addr_t dest, uint64_t addr, uint64_t key,
				  enum fi_datatype datatype, enum fi_op op,
				  void *context)
{
	struct fi_ioc iov = { (void *) buf, count };
	struct fi_ioc cmpv = { (void *) compare, count };
	struct fi_ioc resv = { result, count };

	return mrl_compare_atomicv(ep, &iov, &desc, 1, &cmpv, &compare_desc,
				   1, &resv, &result_desc, 1, dest, addr, key,
				   datatype, op, context);
}

/* ---- valid ------------------------------------------------------------------ */

static int mrl_atomic_writevalid(struct fid_ep *ep, enum fi_datatype datatype,
				 enum fi_op op, size_t *count)
{
	return fi_atomicvalid(mrl_ep_of(ep)->rails[0].ep, datatype, op, count);
}

static int mrl_atomic_readwritevalid(struct fid_ep *ep,
				     enum fi_datatype datatype, enum fi_op op,
				     size_t *count)
{
	return fi_fetch_atomicvalid(mrl_ep_of(ep)->rails[0].ep, datatype, op,
				    count);
}

static int mrl_atomic_compwritevalid(struct fid_ep *ep,
				     enum fi_datatype datatype, enum fi_op op,
				     size_t *count)
{
	return fi_compare_atomicvalid(mrl_ep_of(ep)->rails[0].ep, datatype, op,
				      count);
}

struct fi_ops_atomic mrl_atomic_ops = {
	.size = sizeof(struct fi_ops_atomic),
	.write = mrl_atomic,
	.writev = mrl_atomicv,
	.writemsg = mrl_atomicmsg,
	.inject = mrl_atomic_inject,
	.readwrite = mrl_fetch_atomic,
	.readwritev = mrl_fetch_atomicv,
	.readwritemsg = mrl_fetch_atomicmsg,
	.compwrite = mrl_compare_atomic,
	.compwritev = mrl_compare_atomicv,
	.compwritemsg = mrl_compare_atomicmsg,
	.writevalid = mrl_atomic_writevalid,
	.readwritevalid = mrl_atomic_readwritevalid,
	.compwritevalid = mrl_atomic_compwritevalid,
};

/* fi_query_atomic: what rail 0, which carries every atomic, supports. */
int mrl_query_atomic(struct fid_domain *domain_fid, enum fi_datatype datatype,
		     enum fi_op op, struct fi_atomic_attr *attr,
		     uint64_t flags)
{
	struct mrl_domain *dom = mrl_container_of(domain_fid,
						  struct mrl_domain,
						  domain_fid);

	return fi_query_atomic(dom->rails[0].domain, datatype, op, attr,
			       flags);
}
