/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Counter.  Local operations are counted when the whole striped op
 * completes; remote events (FI_REMOTE_WRITE/READ) are counted by the cores,
 * one core counter per rail, and summed here.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sched.h>

#include "mrl.h"

static struct mrl_cntr *mrl_to_cntr(struct fid_cntr *c)
{
	return mrl_container_of(c, struct mrl_cntr, cntr_fid);
}

void mrl_cntr_inc_err(struct mrl_cntr *cntr)
{
	if (cntr)
		cntr->err++;
}

int mrl_cntr_attach(struct mrl_cntr *cntr, struct mrl_ep *ep)
{
	int i;

	for (i = 0; i < cntr->neps; i++)
		if (cntr->eps[i] == ep)
			return 0;
	if (cntr->neps == (int) (sizeof(cntr->eps) / sizeof(cntr->eps[0]))) {
		MRL_WARN(FI_LOG_CNTR, "too many endpoints on one counter\n");
		return -FI_ENOSPC;
	}
	cntr->eps[cntr->neps++] = ep;
	return 0;
}

void mrl_cntr_detach(struct mrl_cntr *cntr, struct mrl_ep *ep)
{
	int i;

	for (i = 0; i < cntr->neps; i++) {
		if (cntr->eps[i] == ep) {
			cntr->eps[i] = cntr->eps[--cntr->neps];
			return;
		}
	}
}

int mrl_cntr_open_core(struct mrl_cntr *cntr, int rail,
		       struct fid_domain *core_domain, struct fid_cntr **out)
{
	struct fi_cntr_attr attr = { .events = FI_CNTR_EVENTS_COMP,
				     .wait_obj = FI_WAIT_NONE };
	int ret;

	if (cntr->ncore == MRL_CNTR_MAX_CORE) {
		MRL_WARN(FI_LOG_CNTR, "too many rails on one counter\n");
		return -FI_ENOSPC;
	}
	ret = fi_cntr_open(core_domain, &attr, out, NULL);
	if (ret) {
		MRL_WARN(FI_LOG_CNTR, "rail %d: fi_cntr_open: %s\n", rail,
			 fi_strerror(-ret));
		return ret;
	}
	cntr->core[cntr->ncore++] = *out;
	return 0;
}

static void mrl_cntr_progress_all(struct mrl_cntr *cntr)
{
	int i;

	for (i = 0; i < cntr->neps; i++)
		mrl_ep_progress(cntr->eps[i]);
}

static uint64_t mrl_cntr_read(struct fid_cntr *cntr_fid)
{
	struct mrl_cntr *cntr = mrl_to_cntr(cntr_fid);
	uint64_t v;
	int i;

	mrl_lock(cntr->domain);
	mrl_cntr_progress_all(cntr);
	v = cntr->value;
	for (i = 0; i < cntr->ncore; i++)
		v += fi_cntr_read(cntr->core[i]);
	mrl_unlock(cntr->domain);
	return v - cntr->core_base;
}

static uint64_t mrl_cntr_readerr(struct fid_cntr *cntr_fid)
{
	struct mrl_cntr *cntr = mrl_to_cntr(cntr_fid);
	uint64_t v;
	int i;

	mrl_lock(cntr->domain);
	mrl_cntr_progress_all(cntr);
	v = cntr->err;
	for (i = 0; i < cntr->ncore; i++)
		v += fi_cntr_readerr(cntr->core[i]);
	mrl_unlock(cntr->domain);
	return v - cntr->err_base;
}

static int mrl_cntr_add(struct fid_cntr *cntr_fid, uint64_t value)
{
	struct mrl_cntr *cntr = mrl_to_cntr(cntr_fid);

	mrl_lock(cntr->domain);
	cntr->value += value;
	mrl_unlock(cntr->domain);
	return 0;
}

static int mrl_cntr_set(struct fid_cntr *cntr_fid, uint64_t value)
{
	uint64_t cur = mrl_cntr_read(cntr_fid);
	struct mrl_cntr *cntr = mrl_to_cntr(cntr_fid);

	/* Core counters can't be rewound; shift our part instead. */
	mrl_lock(cntr->domain);
	cntr->core_base += cur - value;
	mrl_unlock(cntr->domain);
	return 0;
}

static int mrl_cntr_adderr(struct fid_cntr *cntr_fid, uint64_t value)
{
	struct mrl_cntr *cntr = mrl_to_cntr(cntr_fid);

	mrl_lock(cntr->domain);
	cntr->err += value;
	mrl_unlock(cntr->domain);
	return 0;
}

static int mrl_cntr_seterr(struct fid_cntr *cntr_fid, uint64_t value)
{
	uint64_t cur = mrl_cntr_readerr(cntr_fid);
	struct mrl_cntr *cntr = mrl_to_cntr(cntr_fid);

	/* errors the cores counted are cleared too: shift our part */
	mrl_lock(cntr->domain);
	cntr->err_base += cur - value;
	mrl_unlock(cntr->domain);
	return 0;
}

static int mrl_cntr_wait(struct fid_cntr *cntr_fid, uint64_t threshold,
			 int timeout)
{
	double end = (mrl_clock_ns() / 1e6) + timeout;
	/* errors from before the wait, the cores' included, are not news */
	uint64_t errs = mrl_cntr_readerr(cntr_fid);

	for (;;) {
		if (mrl_cntr_read(cntr_fid) >= threshold)
			return 0;
		if (mrl_cntr_readerr(cntr_fid) > errs)
			return -FI_EAVAIL;
		if (timeout >= 0 && (mrl_clock_ns() / 1e6) >= end)
			return -FI_ETIMEDOUT;
		sched_yield();
	}
}

static int mrl_cntr_close(struct fid *fid)
{
	struct mrl_cntr *cntr = mrl_container_of(fid, struct mrl_cntr,
						 cntr_fid.fid);

	if (cntr->neps) {
		MRL_WARN(FI_LOG_CNTR, "counter closed while endpoints use it\n");
		return -FI_EBUSY;
	}
	mrl_domain_release(cntr->domain);
	free(cntr);
	return 0;
}

static struct fi_ops mrl_cntr_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = mrl_cntr_close,
	.bind = mrl_no_bind,
	.control = mrl_no_control,
	.ops_open = mrl_no_ops_open,
};

static struct fi_ops_cntr mrl_cntr_ops = {
	.size = sizeof(struct fi_ops_cntr),
	.read = mrl_cntr_read,
	.readerr = mrl_cntr_readerr,
	.add = mrl_cntr_add,
	.set = mrl_cntr_set,
	.wait = mrl_cntr_wait,
	.adderr = mrl_cntr_adderr,
	.seterr = mrl_cntr_seterr,
};

int mrl_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr,
		  struct fid_cntr **cntr_out, void *context)
{
	struct mrl_cntr *cntr;

	if (attr && attr->events != FI_CNTR_EVENTS_COMP) {
		MRL_WARN(FI_LOG_CNTR, "counter events %d not supported\n",
			 attr->events);
		return -FI_ENOSYS;
	}
	if (attr && attr->wait_obj != FI_WAIT_NONE &&
	    attr->wait_obj != FI_WAIT_UNSPEC) {
		MRL_WARN(FI_LOG_CNTR, "counter wait object %d not supported\n",
			 attr->wait_obj);
		return -FI_ENOSYS;
	}
	cntr = calloc(1, sizeof(*cntr));
	if (!cntr)
		return -FI_ENOMEM;
	cntr->domain = mrl_container_of(domain, struct mrl_domain, domain_fid);
	cntr->cntr_fid.fid.fclass = FI_CLASS_CNTR;
	cntr->cntr_fid.fid.context = context;
	cntr->cntr_fid.fid.ops = &mrl_cntr_fi_ops;
	cntr->cntr_fid.ops = &mrl_cntr_ops;
	mrl_domain_hold(cntr->domain);
	*cntr_out = &cntr->cntr_fid;
	return 0;
}
