/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The matching queues (mrl_match.h).  Lists in arrival order: a message
 * takes the first receive that fits, a receive the first message; both
 * lists are short in practice (MPI and NCCL post a window, not thousands).
 */
#include "mrl_match.h"

void mrl_match_queue_init(struct mrl_match_queue *q, bool tagged)
{
	mrl_list_init(&q->posted);
	mrl_list_init(&q->unexpected);
	q->unexpected_bytes = 0;
	q->tagged = tagged;
}

bool mrl_match_fits(const struct mrl_match_queue *q,
		    const struct mrl_match_recv *r, uint64_t src,
		    uint64_t tag)
{
	if (r->src != MRL_MATCH_ANY && r->src != src)
		return false;
	return !q->tagged || ((tag | r->ignore) == (r->tag | r->ignore));
}

/*
 * m goes into r: at the next free bytes of a multi-receive, truncated to
 * what is left.  A receive is released once used, a multi-receive once
 * less than its minimum is left.
 */
static void mrl_match_place(struct mrl_match_recv *r,
			    const struct mrl_match_msg *m,
			    struct mrl_match_take *t)
{
	t->recv = r;
	t->offset = r->size - r->left;
	t->truncated = m->len > r->left;
	t->len = t->truncated ? r->left : m->len;
	r->left -= t->len;
	t->released = !r->multi || r->left < r->min_left;
}

bool mrl_match_arrived(struct mrl_match_queue *q, struct mrl_match_msg *m,
		       struct mrl_match_take *t)
{
	struct mrl_list *e;

	for (e = q->posted.next; e != &q->posted; e = e->next) {
		struct mrl_match_recv *r =
			mrl_container_of(e, struct mrl_match_recv, link);

		if (!mrl_match_fits(q, r, m->src, m->tag))
			continue;
		mrl_match_place(r, m, t);
		if (t->released)
			mrl_list_del(&r->link);
		return true;
	}
	m->claim = NULL;
	mrl_list_add_tail(&q->unexpected, &m->link);
	q->unexpected_bytes += m->len;
	return false;
}

void mrl_match_unlink(struct mrl_match_queue *q, struct mrl_match_msg *m)
{
	mrl_list_del(&m->link);
	q->unexpected_bytes -= m->len;
}

static struct mrl_match_msg *mrl_match_first(const struct mrl_match_queue *q,
					     const struct mrl_match_recv *r)
{
	const struct mrl_list *e;

	for (e = q->unexpected.next; e != &q->unexpected; e = e->next) {
		struct mrl_match_msg *m =
			mrl_container_of(e, struct mrl_match_msg, link);

		if (!m->claim && mrl_match_fits(q, r, m->src, m->tag))
			return m;
	}
	return NULL;
}

struct mrl_match_msg *mrl_match_take_unexpected(struct mrl_match_queue *q,
						struct mrl_match_recv *r,
						struct mrl_match_take *t)
{
	struct mrl_match_msg *m = mrl_match_first(q, r);

	if (!m)
		return NULL;
	mrl_match_unlink(q, m);
	mrl_match_place(r, m, t);
	return m;
}

void mrl_match_post(struct mrl_match_queue *q, struct mrl_match_recv *r)
{
	mrl_list_add_tail(&q->posted, &r->link);
}

struct mrl_match_msg *mrl_match_peek(const struct mrl_match_queue *q,
				     const struct mrl_match_recv *r)
{
	return mrl_match_first(q, r);
}

void mrl_match_claim(struct mrl_match_msg *m, void *context)
{
	m->claim = context;
}

struct mrl_match_msg *mrl_match_take_claimed(struct mrl_match_queue *q,
					     struct mrl_match_recv *r,
					     void *context,
					     struct mrl_match_take *t)
{
	struct mrl_list *e;

	if (!context)		/* NULL marks a free message */
		return NULL;
	for (e = q->unexpected.next; e != &q->unexpected; e = e->next) {
		struct mrl_match_msg *m =
			mrl_container_of(e, struct mrl_match_msg, link);

		if (m->claim != context)
			continue;
		mrl_match_unlink(q, m);
		mrl_match_place(r, m, t);
		return m;
	}
	return NULL;
}

struct mrl_match_recv *mrl_match_cancel(struct mrl_match_queue *q,
					void *context)
{
	struct mrl_list *e;

	for (e = q->posted.next; e != &q->posted; e = e->next) {
		struct mrl_match_recv *r =
			mrl_container_of(e, struct mrl_match_recv, link);

		if (r->context == context) {
			mrl_list_del(&r->link);
			return r;
		}
	}
	return NULL;
}
