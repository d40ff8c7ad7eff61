/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Poll set: which of a set of our CQs and counters have something new.
 * fi_poll drives progress through them (manual progress), then reports a
 * CQ with an entry or an error waiting, and a counter whose value or
 * error count moved since the last fi_poll reported it.
 */
#include <stdlib.h>

#include "mrl.h"

#define MRL_POLL_MAX	64

struct mrl_poll_item {
	struct fid *fid;
	uint64_t seen;		/* counters: value + errors last reported */
};

struct mrl_poll {
	struct fid_poll poll_fid;
	struct mrl_domain *domain;
	struct mrl_poll_item items[MRL_POLL_MAX];
	int n;
};

static struct mrl_poll *mrl_to_poll(struct fid_poll *p)
{
	return mrl_container_of(p, struct mrl_poll, poll_fid);
}

static uint64_t mrl_cntr_total(struct fid *fid)
{
	struct fid_cntr *cntr = mrl_container_of(fid, struct fid_cntr, fid);

	return fi_cntr_read(cntr) + fi_cntr_readerr(cntr);
}

static bool mrl_cq_ready(struct fid *fid)
{
	struct mrl_cq *cq = mrl_container_of(fid, struct mrl_cq, cq_fid.fid);
	bool ready;

	fi_cq_read(&cq->cq_fid, NULL, 0);	/* progress only */
	mrl_lock(cq->domain);
	ready = !mrl_cq_is_empty(cq);
	mrl_unlock(cq->domain);
	return ready;
}

static int mrl_poll_poll(struct fid_poll *pollset, void **context, int count)
{
	struct mrl_poll *ps = mrl_to_poll(pollset);
	struct mrl_poll_item *it;
	uint64_t total;
	int i, n = 0;

	for (i = 0; i < ps->n && n < count; i++) {
		it = &ps->items[i];
		if (it->fid->fclass == FI_CLASS_CQ) {
			if (mrl_cq_ready(it->fid))
				context[n++] = it->fid->context;
			continue;
		}
		total = mrl_cntr_total(it->fid);
		if (total != it->seen) {
			it->seen = total;
			context[n++] = it->fid->context;
		}
	}
	return n;
}

static int mrl_poll_add(struct fid_poll *pollset, struct fid *event_fid,
			uint64_t flags)
{
	struct mrl_poll *ps = mrl_to_poll(pollset);

	(void) flags;
	if (!event_fid || (event_fid->fclass != FI_CLASS_CQ &&
			   event_fid->fclass != FI_CLASS_CNTR)) {
		MRL_WARN(FI_LOG_DOMAIN, "fi_poll_add: only CQs and counters\n");
		return -FI_EINVAL;
	}
	if (ps->n == MRL_POLL_MAX) {
		MRL_WARN(FI_LOG_DOMAIN, "fi_poll_add: more than %d objects\n",
			 MRL_POLL_MAX);
		return -FI_ENOSPC;
	}
	ps->items[ps->n].fid = event_fid;
	ps->items[ps->n].seen = event_fid->fclass == FI_CLASS_CNTR ?
				mrl_cntr_total(event_fid) : 0;
	ps->n++;
	return 0;
}

static int mrl_poll_del(struct fid_poll *pollset, struct fid *event_fid,
			uint64_t flags)
{
	struct mrl_poll *ps = mrl_to_poll(pollset);
	int i;

	(void) flags;
	for (i = 0; i < ps->n; i++) {
		if (ps->items[i].fid == event_fid) {
			ps->items[i] = ps->items[--ps->n];
			return 0;
		}
	}
	return -FI_EINVAL;
}

static int mrl_poll_close(struct fid *fid)
{
	struct mrl_poll *ps = mrl_container_of(fid, struct mrl_poll,
					       poll_fid.fid);

	mrl_domain_release(ps->domain);
	free(ps);
	return 0;
}

static struct fi_ops mrl_poll_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = mrl_poll_close,
	.bind = mrl_no_bind,
	.control = mrl_no_control,
	.ops_open = mrl_no_ops_open,
};

static struct fi_ops_poll mrl_poll_ops = {
	.size = sizeof(struct fi_ops_poll),
	.poll = mrl_poll_poll,
	.poll_add = mrl_poll_add,
	.poll_del = mrl_poll_del,
};

int mrl_poll_open(struct fid_domain *domain, struct fi_poll_attr *attr,
		  struct fid_poll **pollset)
{
	struct mrl_poll *ps;

	if (attr && attr->flags) {
		MRL_WARN(FI_LOG_DOMAIN, "fi_poll_open: no flags supported\n");
		return -FI_EINVAL;
	}
	ps = calloc(1, sizeof(*ps));
	if (!ps)
		return -FI_ENOMEM;
	ps->domain = mrl_container_of(domain, struct mrl_domain, domain_fid);
	ps->poll_fid.fid.fclass = FI_CLASS_POLL;
	ps->poll_fid.fid.ops = &mrl_poll_fi_ops;
	ps->poll_fid.ops = &mrl_poll_ops;
	mrl_domain_hold(ps->domain);
	*pollset = &ps->poll_fid;
	return 0;
}
