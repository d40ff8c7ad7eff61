/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Endpoint options (fi_setopt, fi_getopt).  One multirail endpoint is a
 * core endpoint per rail (and, where the core has no FI_TAGGED, a control
 * endpoint), so an option goes where what it shapes happens:
 * - how a core moves data (CUDA calls, shared memory, device RDMA, RNR
 *   retries, RMA sizes, and every option we do not know): every core
 *   endpoint takes it, or none keeps it;
 * - messages and atomics, which travel on rail 0 alone: rail 0;
 * - a promise striping breaks (efa's 128-byte write ordering: a write's
 *   chunks, and writes on different rails, land in any order): refused.
 * Reading one back gives what the endpoint as a whole does: a promise only
 * if every rail keeps it, a permission if any rail has it.
 */
#include <stdbool.h>
#include <string.h>

#include <rdma/fi_ext.h>

#include "mrl.h"
#include "mrl_proto.h"

/*
 * Option names by value: libfabric 1.17's headers stop at
 * FI_OPT_XPU_TRIGGER, and efa's beyond FI_OPT_EFA_RNR_RETRY came later.
 */
enum {
	MRL_OPT_CUDA_API_PERMITTED = 10,
	MRL_OPT_SHARED_MEMORY_PERMITTED = 11,
	MRL_OPT_MAX_MSG_SIZE = 12,
	MRL_OPT_MAX_TAGGED_SIZE = 13,
	MRL_OPT_MAX_RMA_SIZE = 14,
	MRL_OPT_MAX_ATOMIC_SIZE = 15,
	MRL_OPT_INJECT_MSG_SIZE = 16,
	MRL_OPT_INJECT_TAGGED_SIZE = 17,
	MRL_OPT_INJECT_RMA_SIZE = 18,
	MRL_OPT_INJECT_ATOMIC_SIZE = 19,
	MRL_OPT_EFA_RNR_RETRY = -FI_PROV_SPECIFIC_EFA,
	MRL_OPT_EFA_EMULATED_READ,
	MRL_OPT_EFA_EMULATED_WRITE,
	MRL_OPT_EFA_EMULATED_ATOMICS,
	MRL_OPT_EFA_USE_DEVICE_RDMA,
	MRL_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES,
	MRL_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES,
	MRL_OPT_EFA_HOMOGENEOUS_PEERS,
};

#if FI_MAJOR_VERSION >= 2
_Static_assert((int) MRL_OPT_CUDA_API_PERMITTED ==
	       (int) FI_OPT_CUDA_API_PERMITTED &&
	       (int) MRL_OPT_INJECT_ATOMIC_SIZE ==
	       (int) FI_OPT_INJECT_ATOMIC_SIZE &&
	       (int) MRL_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES ==
	       (int) FI_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES,
	       "option values as libfabric's headers give them");
#endif

/* The largest value of an option saved to be set back (a size_t, a bool). */
#define MRL_OPT_SAVE_MAX	16

enum mrl_opt_scope {
	MRL_OPT_EVERY_RAIL,
	MRL_OPT_RAIL0,
	MRL_OPT_STRIPING_BREAKS
};

static enum mrl_opt_scope mrl_opt_scope(const struct mrl_ep *ep, int name,
					const void *val, size_t len)
{
	switch (name) {
	case FI_OPT_MIN_MULTI_RECV:
	case FI_OPT_CM_DATA_SIZE:
	case FI_OPT_BUFFERED_MIN:
	case FI_OPT_BUFFERED_LIMIT:
	case MRL_OPT_MAX_MSG_SIZE:
	case MRL_OPT_MAX_TAGGED_SIZE:
	case MRL_OPT_MAX_ATOMIC_SIZE:
	case MRL_OPT_INJECT_MSG_SIZE:
	case MRL_OPT_INJECT_TAGGED_SIZE:
	case MRL_OPT_INJECT_ATOMIC_SIZE:
	case MRL_OPT_EFA_EMULATED_ATOMICS:
	case MRL_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES:
		return MRL_OPT_RAIL0;
	case MRL_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES:
		return ep->nrails > 1 && len == sizeof(bool) && val &&
		       *(const bool *) val ? MRL_OPT_STRIPING_BREAKS :
		       MRL_OPT_EVERY_RAIL;
	default:
		return MRL_OPT_EVERY_RAIL;
	}
}

/*
 * Our control messages leave from rail 0's endpoint too (untagged where
 * the core has no FI_TAGGED, else tagged, as on every rail): a size limit
 * the user sets on those sends must leave room for them.
 */
static size_t mrl_ctrl_floor(const struct mrl_ep *ep, int name)
{
	int ctrl_sends = ep->ctrl_ep ? MRL_OPT_MAX_MSG_SIZE :
				       MRL_OPT_MAX_TAGGED_SIZE;

	return name == ctrl_sends ? MRL_CTRL_BUF_SIZE : 0;
}

static int mrl_set_rail0(struct mrl_ep *ep, int name, const void *val,
			 size_t len)
{
	size_t floor = mrl_ctrl_floor(ep, name), raised;

	if (floor && len == sizeof(size_t) && *(const size_t *) val < floor) {
		raised = floor;
		MRL_INFO(FI_LOG_EP_CTRL, "option %d: %zu raised to %zu on rail "
			 "0 (our control messages)\n", name,
			 *(const size_t *) val, raised);
		val = &raised;
	}
	return fi_setopt(&ep->rails[0].ep->fid, FI_OPT_ENDPOINT, name, val,
			 len);
}

/*
 * Every core endpoint, rail 0 first: where rail 0 refuses (the usual
 * answer of a core without the option), nothing changed.  Where a later
 * one refuses, those before it get their former value back, so the rails
 * never disagree on what the user was told failed.
 */
static int mrl_set_every_rail(struct mrl_ep *ep, int name, const void *val,
			      size_t len)
{
	uint8_t old[MRL_MAX_RAILS + 1][MRL_OPT_SAVE_MAX];
	size_t oldlen[MRL_MAX_RAILS + 1];
	int n = mrl_ep_ncore(ep), i, j, ret = 0;

	for (i = 0; i < n; i++) {
		fid_t core = &mrl_ep_core(ep, i)->fid;

		oldlen[i] = sizeof(old[i]);
		if (len > sizeof(old[i]) ||
		    fi_getopt(core, FI_OPT_ENDPOINT, name, old[i], &oldlen[i]))
			oldlen[i] = 0;
		ret = fi_setopt(core, FI_OPT_ENDPOINT, name, val, len);
		if (ret)
			break;
	}
	if (!ret || !i)
		return ret;
	if (i < ep->nrails)
		MRL_WARN(FI_LOG_EP_CTRL, "rail %d refused endpoint option %d "
			 "(%s) that rail 0 took: set on no rail\n", i, name,
			 fi_strerror(-ret));
	else
		MRL_WARN(FI_LOG_EP_CTRL, "the control endpoint refused "
			 "endpoint option %d (%s) that rail 0 took: set on no "
			 "rail\n", name, fi_strerror(-ret));
	for (j = 0; j < i; j++) {
		if (oldlen[j] && !fi_setopt(&mrl_ep_core(ep, j)->fid,
					    FI_OPT_ENDPOINT, name, old[j],
					    oldlen[j]))
			continue;
		MRL_WARN(FI_LOG_EP_CTRL, "rail %d keeps option %d: its former "
			 "value could not be set back\n", j, name);
	}
	return ret;
}

int mrl_ep_setopt(fid_t fid, int level, int name, const void *val,
		  size_t len)
{
	struct mrl_ep *ep = mrl_container_of(fid, struct mrl_ep, ep_fid.fid);
	int ret;

	if (level != FI_OPT_ENDPOINT)
		return -FI_ENOPROTOOPT;
	mrl_ep_lock(ep);
	switch (mrl_opt_scope(ep, name, val, len)) {
	case MRL_OPT_RAIL0:
		ret = mrl_set_rail0(ep, name, val, len);
		break;
	case MRL_OPT_STRIPING_BREAKS:
		MRL_WARN_ONCE(FI_LOG_EP_CTRL, "FI_OPT_EFA_WRITE_IN_ORDER_"
			      "ALIGNED_128_BYTES: writes striped over %d rails "
			      "land in no order\n", ep->nrails);
		ret = -FI_EOPNOTSUPP;
		break;
	default:
		ret = mrl_set_every_rail(ep, name, val, len);
		break;
	}
	/* the striped path places multi-receives itself */
	if (!ret && name == FI_OPT_MIN_MULTI_RECV && len == sizeof(size_t))
		ep->min_multi_recv = *(const size_t *) val;
	mrl_unlock(ep->domain);
	return ret;
}

/* A bool option's value for the endpoint from every rail's, by its kind. */
enum mrl_bool_kind { MRL_BOOL_NOT_BOOL, MRL_BOOL_PROMISE, MRL_BOOL_PERMISSION };

static enum mrl_bool_kind mrl_bool_kind(int name)
{
	switch (name) {
	case MRL_OPT_EFA_USE_DEVICE_RDMA:
	case MRL_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES:
	case MRL_OPT_EFA_HOMOGENEOUS_PEERS:
		return MRL_BOOL_PROMISE;
	case MRL_OPT_CUDA_API_PERMITTED:
	case MRL_OPT_SHARED_MEMORY_PERMITTED:
	case MRL_OPT_EFA_EMULATED_READ:
	case MRL_OPT_EFA_EMULATED_WRITE:
		return MRL_BOOL_PERMISSION;
	default:
		return MRL_BOOL_NOT_BOOL;
	}
}

static int mrl_get_combined(struct mrl_ep *ep, int name, bool *val)
{
	bool promise = mrl_bool_kind(name) == MRL_BOOL_PROMISE, one;
	size_t len;
	int i, ret;

	for (i = 1; i < mrl_ep_ncore(ep) && *val == promise; i++) {
		len = sizeof(one);
		ret = fi_getopt(&mrl_ep_core(ep, i)->fid, FI_OPT_ENDPOINT, name,
				&one, &len);
		if (ret)
			return ret;
		*val = one;
	}
	return 0;
}

int mrl_ep_getopt(fid_t fid, int level, int name, void *val, size_t *len)
{
	struct mrl_ep *ep = mrl_container_of(fid, struct mrl_ep, ep_fid.fid);
	int ret;

	if (level != FI_OPT_ENDPOINT)
		return -FI_ENOPROTOOPT;
	mrl_ep_lock(ep);
	ret = fi_getopt(&ep->rails[0].ep->fid, level, name, val, len);
	if (!ret && *len == sizeof(bool) &&
	    mrl_bool_kind(name) != MRL_BOOL_NOT_BOOL &&
	    mrl_opt_scope(ep, name, NULL, 0) == MRL_OPT_EVERY_RAIL)
		ret = mrl_get_combined(ep, name, val);
	if (!ret && name == MRL_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES &&
	    *len == sizeof(bool) && ep->nrails > 1)
		*(bool *) val = false;
	mrl_unlock(ep->domain);
	return ret;
}
