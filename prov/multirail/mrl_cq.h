/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The completion queue's object and the one way into it.  Progress
 * (mrl_progress.c) and the ops' completion paths write entries through
 * the functions below and never touch a field; the CQ (mrl_cq.c) calls
 * progress through mrl_ep_progress, mrl_ep_lease_offer and
 * mrl_ep_progress_found alone.
 */
#ifndef MRL_CQ_H
#define MRL_CQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "mrl_list.h"

struct mrl_domain;
struct mrl_ep;
struct mrl_ep_rail;

struct mrl_cq_entry {
	struct fi_cq_tagged_entry e;
	fi_addr_t src;
};

/* Endpoints one CQ or counter serves (a bind beyond is refused). */
#define MRL_EPS_PER_CQ		16

struct mrl_cq_err {
	struct fi_cq_err_entry e;
	struct mrl_list link;
};

/*
 * Core completions read per call: with MRL_CQ_ROUNDS calls per rail per
 * progress (mrl_progress.c), a rail that keeps completing cannot hold the
 * others (and our caller) forever.
 */
#define MRL_CQ_BATCH		32

/*
 * The quiet poll's lease (the aim: a poll that finds nothing costs no
 * more than the core's poll + 10%).  A poll of a lean CQ (one endpoint,
 * no lock) that leaves its endpoint quiet (nothing in flight, nothing
 * due, its CQs empty) may be granted a lease by progress
 * (mrl_ep_lease_offer): the CQ's next polls do the least a poll can, one
 * idle rail's core CQ read, by rotation, and nothing else.  Whatever
 * could end the quiet (any call on the endpoint, progress of any kind)
 * ends the leases first (mrl_ep_lease_end), so none outlives it; a poll
 * that finds something hands the batch to progress
 * (mrl_ep_progress_found).  A lease's polls count for the health tick: it
 * runs out where the tick falls due.  The core is read with
 * fi_cq_readfrom whatever the rail (fi_cq(3): where no source is known it
 * gives FI_ADDR_NOTAVAIL), which saves a branch here and, in most cores,
 * their read's call to it.  Its fields are the CQ's own.
 */
struct mrl_lease {
	/* the rails of its polls in turn, in the endpoint's idle_cycle:
	 * at == end when no poll is left (or none was granted) */
	struct mrl_ep_rail **at, **end;
	/* the poll that found something: what progress then needs */
	void *buf;
	size_t count;
	fi_addr_t *src_addr;
	/* the core's batch: off the stack, so that the empty poll sets up no
	 * frame for it */
	struct fi_cq_tagged_entry e[MRL_CQ_BATCH];
	fi_addr_t src[MRL_CQ_BATCH];
};

struct mrl_cq {
	struct fid_cq cq_fid;
	struct mrl_domain *domain;
	enum fi_cq_format format;
	struct mrl_cq_entry *ring;
	size_t size, head, tail;	/* size: 2^n; head: next to read */
	struct mrl_list errs;
	struct mrl_ep *eps[MRL_EPS_PER_CQ];	/* endpoints to progress */
	int neps;
	struct mrl_ep *lean_ep;		/* eps[0] when alone, unlocked */
	struct mrl_lease lease;		/* lean_ep's, for this CQ */
	uint64_t overflow;
	/*
	 * While fi_cq_read(from) progresses an empty queue, completions go
	 * straight into the reader's buffer, in the CQ's format: one copy
	 * instead of two.  What does not fit goes to the ring, after them.
	 */
	char *out;
	bool reading;			/* a read progresses (mrl_cq_out_begin) */
	size_t out_left;		/* 0: not reading, or buffer full */
	size_t out_size;		/* one entry of the CQ's format */
	fi_addr_t *out_src;
};

int mrl_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
		struct fid_cq **cq, void *context);
int mrl_cq_attach(struct mrl_cq *cq, struct mrl_ep *ep);
void mrl_cq_detach(struct mrl_cq *cq, struct mrl_ep *ep);
int mrl_cq_write_grow(struct mrl_cq *cq, void *context, uint64_t flags,
		      size_t len, void *buf, uint64_t data, uint64_t tag,
		      fi_addr_t src);
/* Domain locked.  An error entry, whole (err positive or negative). */
int mrl_cq_write_err_entry(struct mrl_cq *cq, const struct fi_cq_err_entry *e);

#ifdef MRL_DEBUG
void mrl_cq_assert_locked(const struct mrl_cq *cq);
#else
#define mrl_cq_assert_locked(cq)	do { (void) (cq); } while (0)
#endif

/*
 * One entry of format at out: the formats share their leading fields, so
 * each writes the fields it has.  Inline, so that a caller with a constant
 * format (progress's whole_out) tests nothing.
 */
static inline __attribute__((always_inline))
void mrl_cq_entry_fill(void *out, enum fi_cq_format format, void *context,
		       uint64_t flags, size_t len, void *buf, uint64_t data,
		       uint64_t tag)
{
	struct fi_cq_tagged_entry *e = out;

	e->op_context = context;
	if (format >= FI_CQ_FORMAT_MSG) {
		e->flags = flags;
		e->len = len;
		if (format >= FI_CQ_FORMAT_DATA) {
			e->buf = buf;
			e->data = data;
			if (format == FI_CQ_FORMAT_TAGGED)
				e->tag = tag;
		}
	}
}

/* Into the reader's buffer (see struct mrl_cq). */
static inline void mrl_cq_write_out(struct mrl_cq *cq, void *context,
				    uint64_t flags, size_t len, void *buf,
				    uint64_t data, uint64_t tag, fi_addr_t src)
{
	mrl_cq_entry_fill(cq->out, cq->format, context, flags, len, buf, data,
			  tag);
	if (cq->out_src)
		*cq->out_src++ = src;
	cq->out += cq->out_size;
	cq->out_left--;
}

/* Domain locked.  Every completion comes here: the ring grows elsewhere. */
static inline int mrl_cq_write(struct mrl_cq *cq, void *context,
			       uint64_t flags, size_t len, void *buf,
			       uint64_t data, uint64_t tag, fi_addr_t src)
{
	struct mrl_cq_entry *ce;

	mrl_cq_assert_locked(cq);
	if (cq->out_left) {
		mrl_cq_write_out(cq, context, flags, len, buf, data, tag, src);
		return 0;
	}
	if (cq->tail - cq->head == cq->size)
		return mrl_cq_write_grow(cq, context, flags, len, buf, data,
					 tag, src);
	ce = &cq->ring[cq->tail++ & (cq->size - 1)];
	ce->e.op_context = context;
	ce->e.flags = flags;
	ce->e.len = len;
	ce->e.buf = buf;
	ce->e.data = data;
	ce->e.tag = tag;
	ce->src = src;
	return 0;
}

/* Domain locked.  An error entry of the common fields. */
static inline int mrl_cq_write_err(struct mrl_cq *cq, void *context,
				   uint64_t flags, int err, int prov_errno,
				   uint64_t data, uint64_t tag)
{
	struct fi_cq_err_entry e = {
		.op_context = context, .flags = flags, .err = err,
		.prov_errno = prov_errno, .data = data, .tag = tag,
	};

	return mrl_cq_write_err_entry(cq, &e);
}

/*
 * Domain locked.  Room for entries written straight into a reader's
 * buffer, with no source asked (a tx entry has none): 0 when no read
 * progresses.  The caller fills up to that many entries of mrl_cq_format
 * at mrl_cq_direct_at, then says how many (mrl_cq_direct_commit).
 */
static inline size_t mrl_cq_direct_room(const struct mrl_cq *cq)
{
	return cq->out_src ? 0 : cq->out_left;
}

static inline char *mrl_cq_direct_at(const struct mrl_cq *cq)
{
	return cq->out;
}

static inline enum fi_cq_format mrl_cq_format(const struct mrl_cq *cq)
{
	return cq->format;
}

static inline void mrl_cq_direct_commit(struct mrl_cq *cq, char *end,
					size_t n)
{
	mrl_cq_assert_locked(cq);
	cq->out = end;
	cq->out_left -= n;
}

/* A read progresses with room left in the reader's buffer. */
static inline bool mrl_cq_reader_room(const struct mrl_cq *cq)
{
	return cq && cq->out_left;
}

/* A read progresses (NULL: no CQ). */
static inline bool mrl_cq_being_read(const struct mrl_cq *cq)
{
	return cq && cq->reading;
}

/* No entry and no error waiting (NULL: no CQ). */
static inline bool mrl_cq_is_empty(const struct mrl_cq *cq)
{
	return !cq || (cq->head == cq->tail && mrl_list_empty(&cq->errs));
}

/* The endpoint the CQ polls alone and unlocked, else NULL. */
static inline struct mrl_ep *mrl_cq_lean_ep(const struct mrl_cq *cq)
{
	return cq->lean_ep;
}

/* A lease of n polls, the rails' turn from at on. */
static inline void mrl_cq_lease_grant(struct mrl_cq *cq,
				      struct mrl_ep_rail **at, int n)
{
	cq->lease.at = at;
	cq->lease.end = at + n;
}

/*
 * The lease ends: the polls it had left (0 when none was granted), and in
 * *next the rail its next poll would have read.
 */
static inline int mrl_cq_lease_take_back(struct mrl_cq *cq,
					 struct mrl_ep_rail **next)
{
	int left = (int) (cq->lease.end - cq->lease.at);

	if (cq->lease.at)
		*next = *cq->lease.at;
	cq->lease.end = cq->lease.at;
	return left;
}

#endif /* MRL_CQ_H */
