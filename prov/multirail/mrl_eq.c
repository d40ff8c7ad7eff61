/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Event queue.  An RDM endpoint over our cores raises no connection events,
 * so this queue holds only what the application writes into it; it exists
 * because applications (fabtests among them) open and bind one anyway.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mrl.h"

struct mrl_eq_event {
	uint32_t event;
	struct fi_eq_entry entry;
	size_t len;
};

#define MRL_EQ_SIZE 64

struct mrl_eq_impl {
	struct mrl_eq eq;
	pthread_mutex_t lock;
	pthread_cond_t written;		/* fi_eq_write wakes fi_eq_sread */
	bool can_wait;			/* not opened with FI_WAIT_NONE */
	struct mrl_eq_event ev[MRL_EQ_SIZE];
	size_t head, count;
};

static struct mrl_eq_impl *mrl_to_impl(struct fid_eq *eq)
{
	return mrl_container_of(eq, struct mrl_eq_impl, eq.eq_fid);
}

static ssize_t mrl_eq_read(struct fid_eq *eq_fid, uint32_t *event, void *buf,
			   size_t len, uint64_t flags)
{
	struct mrl_eq_impl *eq = mrl_to_impl(eq_fid);
	struct mrl_eq_event *ev;
	ssize_t ret;

	pthread_mutex_lock(&eq->lock);
	if (!eq->count) {
		ret = -FI_EAGAIN;
		goto out;
	}
	ev = &eq->ev[eq->head];
	if (len < ev->len) {
		ret = -FI_ETOOSMALL;
		goto out;
	}
	*event = ev->event;
	memcpy(buf, &ev->entry, ev->len);
	ret = ev->len;
	if (!(flags & FI_PEEK)) {
		eq->head = (eq->head + 1) % MRL_EQ_SIZE;
		eq->count--;
	}
out:
	pthread_mutex_unlock(&eq->lock);
	return ret;
}

static ssize_t mrl_eq_readerr(struct fid_eq *eq, struct fi_eq_err_entry *buf,
			      uint64_t flags)
{
	return -FI_EAGAIN;
}

static ssize_t mrl_eq_write(struct fid_eq *eq_fid, uint32_t event,
			    const void *buf, size_t len, uint64_t flags)
{
	struct mrl_eq_impl *eq = mrl_to_impl(eq_fid);
	struct mrl_eq_event *ev;

	if (len > sizeof(ev->entry))
		return -FI_EINVAL;
	pthread_mutex_lock(&eq->lock);
	if (eq->count == MRL_EQ_SIZE) {
		pthread_mutex_unlock(&eq->lock);
		return -FI_EAGAIN;
	}
	ev = &eq->ev[(eq->head + eq->count++) % MRL_EQ_SIZE];
	ev->event = event;
	ev->len = len;
	memcpy(&ev->entry, buf, len);
	pthread_cond_broadcast(&eq->written);
	pthread_mutex_unlock(&eq->lock);
	return len;
}

/* Waits up to timeout ms (< 0: for ever) for an event, then reads it. */
static ssize_t mrl_eq_sread(struct fid_eq *eq_fid, uint32_t *event, void *buf,
			    size_t len, int timeout, uint64_t flags)
{
	struct mrl_eq_impl *eq = mrl_to_impl(eq_fid);
	struct timespec end;
	int ret = 0;

	if (!eq->can_wait) {
		MRL_WARN(FI_LOG_EQ, "fi_eq_sread on an EQ opened with "
			 "FI_WAIT_NONE\n");
		return -FI_ENOSYS;
	}
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += timeout / 1000;
	end.tv_nsec += (long) (timeout % 1000) * 1000000;
	if (end.tv_nsec >= 1000000000) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&eq->lock);
	while (!eq->count && ret != ETIMEDOUT) {
		if (timeout < 0)
			pthread_cond_wait(&eq->written, &eq->lock);
		else
			ret = pthread_cond_timedwait(&eq->written, &eq->lock,
						     &end);
	}
	pthread_mutex_unlock(&eq->lock);
	return mrl_eq_read(eq_fid, event, buf, len, flags);
}

static const char *mrl_eq_strerror(struct fid_eq *eq, int prov_errno,
				   const void *err_data, char *buf, size_t len)
{
	return fi_strerror(prov_errno);
}

static int mrl_eq_close(struct fid *fid)
{
	struct mrl_eq_impl *eq =
		mrl_to_impl(mrl_container_of(fid, struct fid_eq, fid));

	pthread_cond_destroy(&eq->written);
	pthread_mutex_destroy(&eq->lock);
	free(eq);
	return 0;
}

static struct fi_ops mrl_eq_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = mrl_eq_close,
	.bind = mrl_no_bind,
	.control = mrl_no_control,
	.ops_open = mrl_no_ops_open,
};

static struct fi_ops_eq mrl_eq_ops = {
	.size = sizeof(struct fi_ops_eq),
	.read = mrl_eq_read,
	.readerr = mrl_eq_readerr,
	.write = mrl_eq_write,
	.sread = mrl_eq_sread,
	.strerror = mrl_eq_strerror,
};

int mrl_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr,
		struct fid_eq **eq_out, void *context)
{
	struct mrl_eq_impl *eq;
	pthread_condattr_t ca;

	if (attr && attr->wait_obj != FI_WAIT_NONE &&
	    attr->wait_obj != FI_WAIT_UNSPEC) {
		MRL_WARN(FI_LOG_EQ, "EQ wait object %d not supported\n",
			 attr->wait_obj);
		return -FI_ENOSYS;
	}
	eq = calloc(1, sizeof(*eq));
	if (!eq)
		return -FI_ENOMEM;
	pthread_mutex_init(&eq->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&eq->written, &ca);
	pthread_condattr_destroy(&ca);
	eq->can_wait = !attr || attr->wait_obj != FI_WAIT_NONE;
	eq->eq.fabric = mrl_container_of(fabric, struct mrl_fabric, fabric_fid);
	eq->eq.eq_fid.fid.fclass = FI_CLASS_EQ;
	eq->eq.eq_fid.fid.context = context;
	eq->eq.eq_fid.fid.ops = &mrl_eq_fi_ops;
	eq->eq.eq_fid.ops = &mrl_eq_ops;
	*eq_out = &eq->eq.eq_fid;
	return 0;
}
