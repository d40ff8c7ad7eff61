/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Completion queue: a software queue the endpoints fill while they
 * progress their rails.  Reading it drives progress of every endpoint bound
 * to it (manual progress).  It grows instead of dropping completions.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sched.h>

#include <stddef.h>

#include "mrl.h"

#define MRL_CQ_DEFAULT_SIZE	1024	/* entries, when fi_cq_attr says none */
#define MRL_CQ_MIN_SIZE		64

#define MRL_CQ_MAX_SIZE	(1 << 24)

static struct mrl_cq *mrl_to_cq(struct fid_cq *cq)
{
	return mrl_container_of(cq, struct mrl_cq, cq_fid);
}

static size_t mrl_entry_size(enum fi_cq_format format)
{
	switch (format) {
	case FI_CQ_FORMAT_MSG:
		return sizeof(struct fi_cq_msg_entry);
	case FI_CQ_FORMAT_DATA:
		return sizeof(struct fi_cq_data_entry);
	case FI_CQ_FORMAT_TAGGED:
		return sizeof(struct fi_cq_tagged_entry);
	default:
		return sizeof(struct fi_cq_entry);
	}
}

static size_t mrl_cq_count(const struct mrl_cq *cq)
{
	return cq->tail - cq->head;
}

static int mrl_cq_grow(struct mrl_cq *cq)
{
	struct mrl_cq_entry *ring;
	size_t i, n = mrl_cq_count(cq);

	ring = malloc(2 * cq->size * sizeof(*ring));
	if (!ring)
		return -FI_ENOMEM;
	for (i = 0; i < n; i++)
		ring[i] = cq->ring[(cq->head + i) & (cq->size - 1)];
	free(cq->ring);
	cq->ring = ring;
	cq->head = 0;
	cq->tail = n;
	cq->size *= 2;
	return 0;
}

/* Domain locked.  The ring is full: twice as large, then the entry. */
int mrl_cq_write_grow(struct mrl_cq *cq, void *context, uint64_t flags,
		      size_t len, void *buf, uint64_t data, uint64_t tag,
		      fi_addr_t src)
{
	mrl_assert_locked(cq->domain);
	if (mrl_cq_grow(cq)) {
		cq->overflow++;
		MRL_WARN(FI_LOG_CQ, "completion lost: out of memory\n");
		return -FI_ENOMEM;
	}
	return mrl_cq_write(cq, context, flags, len, buf, data, tag, src);
}

#ifdef MRL_DEBUG
void mrl_cq_assert_locked(const struct mrl_cq *cq)
{
	mrl_assert_locked(cq->domain);
}
#endif

/* Domain locked. */
int mrl_cq_write_err_entry(struct mrl_cq *cq, const struct fi_cq_err_entry *e)
{
	mrl_assert_locked(cq->domain);
	struct mrl_cq_err *ce = calloc(1, sizeof(*ce));

	if (!ce) {
		MRL_WARN(FI_LOG_CQ, "error completion lost: out of memory\n");
		return -FI_ENOMEM;
	}
	ce->e = *e;
	ce->e.err = e->err < 0 ? -e->err : e->err;
	mrl_list_add_tail(&cq->errs, &ce->link);
	return 0;
}

/* A read of count entries into buf begins: progress writes there. */
static void mrl_cq_out_begin(struct mrl_cq *cq, char *buf, size_t count,
			     fi_addr_t *src_addr)
{
	cq->out = buf;
	cq->out_left = count;
	cq->out_src = src_addr;
	cq->reading = true;
}

/*
 * The read of count entries ends, completions going to the ring again:
 * how many progress wrote, else an error waiting (-FI_EAVAIL) or nothing
 * (-FI_EAGAIN).
 */
static ssize_t mrl_cq_out_end(struct mrl_cq *cq, size_t count)
{
	size_t n = count - cq->out_left;

	cq->out_left = 0;
	cq->reading = false;
	if (n)
		return (ssize_t) n;
	return mrl_list_empty(&cq->errs) ? -FI_EAGAIN : -FI_EAVAIL;
}

/* The endpoint mrl_read_lean progresses: the only one, on an unlocked domain. */
static void mrl_set_lean_ep(struct mrl_cq *cq)
{
	cq->lean_ep = cq->neps == 1 && !cq->domain->locking ? cq->eps[0] :
							      NULL;
	cq->lease.end = cq->lease.at;	/* a lease, if any, ends here */
}

int mrl_cq_attach(struct mrl_cq *cq, struct mrl_ep *ep)
{
	int i;

	for (i = 0; i < cq->neps; i++)
		if (cq->eps[i] == ep)
			return 0;
	if (cq->neps == (int) (sizeof(cq->eps) / sizeof(cq->eps[0]))) {
		MRL_WARN(FI_LOG_CQ, "too many endpoints bound to one CQ\n");
		return -FI_ENOSPC;
	}
	cq->eps[cq->neps++] = ep;
	mrl_set_lean_ep(cq);
	return 0;
}

void mrl_cq_detach(struct mrl_cq *cq, struct mrl_ep *ep)
{
	int i;

	for (i = 0; i < cq->neps; i++) {
		if (cq->eps[i] == ep) {
			cq->eps[i] = cq->eps[--cq->neps];
			mrl_set_lean_ep(cq);
			return;
		}
	}
}

static void mrl_copy_entry(const struct mrl_cq *cq,
			   const struct mrl_cq_entry *ce, void *out)
{
	switch (cq->format) {
	case FI_CQ_FORMAT_TAGGED:
		*(struct fi_cq_tagged_entry *) out = ce->e;
		break;
	case FI_CQ_FORMAT_DATA: {
		struct fi_cq_data_entry *d = out;

		d->op_context = ce->e.op_context;
		d->flags = ce->e.flags;
		d->len = ce->e.len;
		d->buf = ce->e.buf;
		d->data = ce->e.data;
		break;
	}
	case FI_CQ_FORMAT_MSG: {
		struct fi_cq_msg_entry *m = out;

		m->op_context = ce->e.op_context;
		m->flags = ce->e.flags;
		m->len = ce->e.len;
		break;
	}
	default:
		((struct fi_cq_entry *) out)->op_context = ce->e.op_context;
	}
}

static void mrl_cq_progress_all(struct mrl_cq *cq)
{
	int i;

	for (i = 0; i < cq->neps; i++)
		mrl_ep_progress(cq->eps[i]);
}

/* Domain locked.  Up to count entries from the ring into buf. */
static size_t mrl_take_ring(struct mrl_cq *cq, void *buf, size_t count,
			    fi_addr_t *src_addr)
{
	mrl_assert_locked(cq->domain);
	size_t n;

	if (count > mrl_cq_count(cq))
		count = mrl_cq_count(cq);
	for (n = 0; n < count; n++) {
		struct mrl_cq_entry *ce =
			&cq->ring[cq->head++ & (cq->size - 1)];

		mrl_copy_entry(cq, ce, (char *) buf + n * cq->out_size);
		if (src_addr)
			src_addr[n] = ce->src;
	}
	return n;
}

/*
 * Domain locked; unlocks.  The n entries in buf so far, then what progress
 * writes straight after them (see struct mrl_cq): the ring takes only
 * what does not fit.  An error waiting is reported once buf holds none.
 */
static ssize_t mrl_read_progress(struct mrl_cq *cq, char *buf, size_t count,
				 fi_addr_t *src_addr, size_t n)
{
	mrl_assert_locked(cq->domain);
	ssize_t ret;

	mrl_cq_out_begin(cq, buf + n * cq->out_size, count - n,
			 src_addr ? src_addr + n : NULL);
	mrl_cq_progress_all(cq);
	ret = mrl_cq_out_end(cq, count);
	mrl_unlock(cq->domain);
	return ret;
}

/*
 * Any read: errors first (a success cannot be reported behind an error
 * entry the reader has not seen), then the entries queued before this
 * read, then what progress finds.  With buf filled from the ring,
 * progress waits for the next read; a read of no entries only progresses.
 */
static ssize_t mrl_read_any(struct mrl_cq *cq, void *buf, size_t count,
			    fi_addr_t *src_addr)
{
	size_t n;

	mrl_lock(cq->domain);
	if (!mrl_list_empty(&cq->errs)) {
		mrl_unlock(cq->domain);
		return -FI_EAVAIL;
	}
	n = mrl_take_ring(cq, buf, count, src_addr);
	if (n && n == count) {
		mrl_unlock(cq->domain);
		return (ssize_t) n;
	}
	return mrl_read_progress(cq, buf, count, src_addr, n);
}

/*
 * One endpoint, no lock: the common case, where progress writes straight
 * into buf, and a poll that leaves the endpoint quiet may be granted a
 * lease (struct mrl_lease).
 */
static ssize_t
mrl_read_lean(struct mrl_cq *cq, void *buf, size_t count, fi_addr_t *src_addr)
{
	struct mrl_ep *ep = cq->lean_ep;
	ssize_t ret;

	if (!ep || cq->head != cq->tail || !mrl_list_empty(&cq->errs) ||
	    !count)
		return mrl_read_any(cq, buf, count, src_addr);
	mrl_cq_out_begin(cq, buf, count, src_addr);
	mrl_ep_progress(ep);
	ret = mrl_cq_out_end(cq, count);
	if (ret == -FI_EAGAIN)
		mrl_ep_lease_offer(ep);
	return ret;
}

/*
 * A leased poll's core read found something (n: entries, or an error):
 * the lease ends, and progress takes the batch, writing into the
 * reader's buffer.
 */
static ssize_t mrl_lease_found(struct mrl_cq *cq, ssize_t n,
			       fi_addr_t *src_addr)
{
	struct mrl_ep *ep = cq->lean_ep;
	struct mrl_ep_rail *rail = cq->lease.at[-1];	/* the one read */

	mrl_ep_lease_end(ep);
	mrl_cq_out_begin(cq, cq->lease.buf, cq->lease.count, src_addr);
	mrl_ep_progress_found(ep, rail, cq->lease.e, cq->lease.src, n);
	return mrl_cq_out_end(cq, cq->lease.count);
}

/*
 * Every poll of an empty CQ comes here (the aim: the core's poll + 10%).
 * Under a lease (struct mrl_lease): one idle rail's core CQ read, and what
 * it found, if anything, handed to progress with the reader's buffer.
 * Nothing of the reader's needs to outlive the core's call but cq.
 */
static inline __attribute__((always_inline))
ssize_t mrl_read_leased(struct fid_cq *cq_fid, void *buf, size_t count,
			fi_addr_t *src_addr, bool from)
{
	struct mrl_cq *cq = mrl_to_cq(cq_fid);
	struct mrl_ep_rail **at = cq->lease.at;
	ssize_t n;

	if (at >= cq->lease.end)
		return mrl_read_lean(cq, buf, count, src_addr);
	cq->lease.at = at + 1;
	cq->lease.buf = buf;
	cq->lease.count = count;
	if (from)
		cq->lease.src_addr = src_addr;
	n = fi_cq_readfrom((*at)->cq, cq->lease.e, MRL_CQ_BATCH,
			   cq->lease.src);
	if (__builtin_expect(n != -FI_EAGAIN, 0))
		return mrl_lease_found(cq, n, from ? cq->lease.src_addr : NULL);
	return n;
}

static ssize_t
mrl_cq_readfrom(struct fid_cq *cq, void *buf, size_t count,
		fi_addr_t *src_addr)
{
	return mrl_read_leased(cq, buf, count, src_addr, true);
}

static ssize_t
mrl_cq_read(struct fid_cq *cq, void *buf, size_t count)
{
	return mrl_read_leased(cq, buf, count, NULL, false);
}

/*
 * How much of an error entry the application's API version gave it room
 * for (fi_cq(3)): the entry ends before err_data below 1.5, and before
 * src_addr (libfabric 1.20's headers on) below 1.20.  Writing ours whole
 * into an older one overran it.
 */
static size_t mrl_cq_err_size(uint32_t api)
{
	if (api < FI_VERSION(1, 5))
		return offsetof(struct fi_cq_err_entry, err_data);
#if FI_MAJOR_VERSION > 1 || (FI_MAJOR_VERSION == 1 && FI_MINOR_VERSION >= 20)
	if (api < FI_VERSION(1, 20))
		return offsetof(struct fi_cq_err_entry, src_addr);
#endif
	return sizeof(struct fi_cq_err_entry);
}

static ssize_t mrl_cq_readerr(struct fid_cq *cq_fid,
			      struct fi_cq_err_entry *buf, uint64_t flags)
{
	struct mrl_cq *cq = mrl_to_cq(cq_fid);
	size_t size = mrl_cq_err_size(cq->domain->fabric->version);
	struct mrl_cq_err *ce;
	void *err_data = NULL;

	mrl_lock(cq->domain);
	if (mrl_list_empty(&cq->errs)) {
		mrl_unlock(cq->domain);
		return -FI_EAGAIN;
	}
	ce = mrl_container_of(cq->errs.next, struct mrl_cq_err, link);
	mrl_list_del(&ce->link);
	mrl_unlock(cq->domain);

	/* Keep the caller's err_data buffer (API >= 1.5); we have none. */
	if (size > offsetof(struct fi_cq_err_entry, err_data))
		err_data = buf->err_data;
	memcpy(buf, &ce->e, size);
	if (size > offsetof(struct fi_cq_err_entry, err_data)) {
		buf->err_data = err_data;
		buf->err_data_size = 0;
	}
	free(ce);
	return 1;
}

static ssize_t mrl_cq_sreadfrom(struct fid_cq *cq, void *buf, size_t count,
				fi_addr_t *src_addr, const void *cond,
				int timeout)
{
	double end = (mrl_clock_ns() / 1e6) + timeout;
	ssize_t ret;

	for (;;) {
		ret = mrl_cq_readfrom(cq, buf, count, src_addr);
		if (ret != -FI_EAGAIN)
			return ret;
		if (timeout >= 0 && (mrl_clock_ns() / 1e6) >= end)
			return -FI_EAGAIN;
		sched_yield();
	}
}

static ssize_t mrl_cq_sread(struct fid_cq *cq, void *buf, size_t count,
			    const void *cond, int timeout)
{
	return mrl_cq_sreadfrom(cq, buf, count, NULL, cond, timeout);
}

/*
 * An error entry's prov_errno is the core's (a chunk or message the core
 * failed) or 0 (an error of ours: err says it): the core's is decoded by
 * the core, through a rail of an endpoint bound here (every rail runs the
 * same core provider).
 */
static const char *mrl_cq_strerror(struct fid_cq *cq_fid, int prov_errno,
				   const void *err_data, char *buf, size_t len)
{
	struct mrl_cq *cq = mrl_to_cq(cq_fid);
	const char *s = "no provider-specific error";

	if (prov_errno && cq->neps && cq->eps[0]->rails[0].cq)
		return fi_cq_strerror(cq->eps[0]->rails[0].cq, prov_errno,
				      err_data, buf, len);
	if (buf && len) {
		strncpy(buf, s, len - 1);
		buf[len - 1] = '\0';
	}
	return s;
}

static int mrl_cq_close(struct fid *fid)
{
	struct mrl_cq *cq = mrl_container_of(fid, struct mrl_cq, cq_fid.fid);
	struct mrl_cq_err *ce;

	if (cq->neps) {
		MRL_WARN(FI_LOG_CQ, "CQ closed while endpoints use it\n");
		return -FI_EBUSY;
	}
	while (!mrl_list_empty(&cq->errs)) {
		ce = mrl_container_of(cq->errs.next, struct mrl_cq_err, link);
		mrl_list_del(&ce->link);
		free(ce);
	}
	mrl_domain_release(cq->domain);
	free(cq->ring);
	free(cq);
	return 0;
}

static struct fi_ops mrl_cq_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = mrl_cq_close,
	.bind = mrl_no_bind,
	.control = mrl_no_control,
	.ops_open = mrl_no_ops_open,
};

static struct fi_ops_cq mrl_cq_ops = {
	.size = sizeof(struct fi_ops_cq),
	.read = mrl_cq_read,
	.readfrom = mrl_cq_readfrom,
	.readerr = mrl_cq_readerr,
	.sread = mrl_cq_sread,
	.sreadfrom = mrl_cq_sreadfrom,
	.signal = mrl_no_cq_signal,
	.strerror = mrl_cq_strerror,
};

int mrl_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
		struct fid_cq **cq_out, void *context)
{
	size_t want = attr && attr->size ? attr->size : MRL_CQ_DEFAULT_SIZE;
	struct mrl_cq *cq;

	if (attr && attr->wait_obj != FI_WAIT_NONE &&
	    attr->wait_obj != FI_WAIT_UNSPEC) {
		MRL_WARN(FI_LOG_CQ, "CQ wait object %d not supported\n",
			 attr->wait_obj);
		return -FI_ENOSYS;
	}
	if (attr && attr->format > FI_CQ_FORMAT_TAGGED) {
		MRL_WARN(FI_LOG_CQ, "CQ format %d unknown\n", attr->format);
		return -FI_EINVAL;
	}
	if (want > MRL_CQ_MAX_SIZE) {
		MRL_WARN(FI_LOG_CQ, "CQ size %zu > %d\n", want,
			 MRL_CQ_MAX_SIZE);
		return -FI_EINVAL;
	}
	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -FI_ENOMEM;
	cq->domain = mrl_container_of(domain, struct mrl_domain, domain_fid);
	cq->format = attr && attr->format ? attr->format :
					      FI_CQ_FORMAT_CONTEXT;
	cq->out_size = mrl_entry_size(cq->format);
	/* a power of two, so a ring index is a mask, not a division */
	for (cq->size = MRL_CQ_MIN_SIZE; cq->size < want; cq->size *= 2)
		;
	cq->ring = calloc(cq->size, sizeof(*cq->ring));
	if (!cq->ring) {
		free(cq);
		return -FI_ENOMEM;
	}
	mrl_list_init(&cq->errs);
	cq->cq_fid.fid.fclass = FI_CLASS_CQ;
	cq->cq_fid.fid.context = context;
	cq->cq_fid.fid.ops = &mrl_cq_fi_ops;
	cq->cq_fid.ops = &mrl_cq_ops;
	mrl_domain_hold(cq->domain);
	*cq_out = &cq->cq_fid;
	return 0;
}
