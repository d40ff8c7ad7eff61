/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The striping engine (mrl_stripe.h): ops cut into chunks, handed to the
 * rails with credit, and completed once when their last chunk is back.
 * No libfabric object beyond its error numbers: test/stripe_test drives it
 * over fake rails.
 */
#include <stdlib.h>
#include <string.h>
#include <rdma/fi_errno.h>

#include "mrl_stripe.h"

/*
 * An op joined or left the pending list: while any waits there, the fast
 * path's take (mrl_engine_whole_take) finds every rail at its depth, so
 * that a new op does not pass those queued first.
 */
static void mrl_pending_moved(struct mrl_engine *eng)
{
	eng->whole_depth = mrl_list_empty(&eng->pending) ?
			   eng->max_chunks_per_rail : 0;
}

int mrl_engine_init(struct mrl_engine *eng, const struct mrl_engine_attr *attr,
		    const struct mrl_engine_ops *ops, void *owner)
{
	size_t i;

	if (attr->nrails < 1 || attr->nrails > MRL_MAX_RAILS ||
	    !attr->max_chunks_per_rail || !attr->max_bytes_per_rail)
		return -FI_EINVAL;

	memset(eng, 0, sizeof(*eng));
	eng->nrails = attr->nrails;
	eng->max_chunks_per_rail = attr->max_chunks_per_rail;
	eng->max_bytes_per_rail = attr->max_bytes_per_rail;
	eng->fill_chunks = attr->fill_chunks < attr->max_chunks_per_rail ?
			   attr->fill_chunks : attr->max_chunks_per_rail;
	eng->fill_bytes = attr->fill_bytes &&
			  attr->fill_bytes < attr->max_bytes_per_rail ?
			  attr->fill_bytes : attr->max_bytes_per_rail;
	/* adapting, a rail starts one step up and earns the rest */
	eng->fill_step = eng->fill_bytes / MRL_FILL_STEPS + 1;
	eng->fill_floor = attr->fill_adapt ? 1 : eng->fill_bytes;
	for (i = 0; i < MRL_MAX_RAILS; i++) {
		eng->rail[i].fill_bytes = attr->fill_adapt ? eng->fill_step :
							      eng->fill_bytes;
		eng->rail[i].max_bytes = eng->max_bytes_per_rail;
	}
	eng->ops = ops;
	eng->owner = owner;
	mrl_list_init(&eng->pending);
	mrl_pending_moved(eng);
	mrl_list_init(&eng->abandoned);

	/*
	 * Credit bounds the chunks in flight; as many again are for copies of
	 * chunks stuck on a failed rail.  A copy is only an optimisation: with
	 * the pool dry the original keeps its place and its verdict counts.
	 */
	eng->pool_size = 2 * (size_t) attr->nrails * attr->max_chunks_per_rail;
	eng->chunk_pool = calloc(eng->pool_size, sizeof(*eng->chunk_pool));
	if (!eng->chunk_pool)
		return -FI_ENOMEM;
	for (i = eng->pool_size; i-- > 0;) {	/* the pool's start on top */
		mrl_list_init(&eng->chunk_pool[i].link);
		mrl_chunk_push(eng, &eng->chunk_pool[i]);
	}
	return 0;
}

void mrl_engine_fini(struct mrl_engine *eng)
{
	free(eng->chunk_pool);
	eng->chunk_pool = NULL;
}

/* Bytes from off to the end of the iov that holds it. */
static size_t mrl_iov_room(const struct mrl_op *op, uint64_t off)
{
	size_t i;

	for (i = 0; i < op->iov_count; i++) {
		if (off < op->iov[i].iov_len)
			return op->iov[i].iov_len - off;
		off -= op->iov[i].iov_len;
	}
	return 0;
}

/* The length of the last iov that holds bytes; 0 for an empty op. */
static size_t mrl_last_iov_len(const struct mrl_op *op)
{
	size_t i = op->iov_count;

	while (i-- > 0)
		if (op->iov[i].iov_len)
			return op->iov[i].iov_len;
	return 0;
}

void mrl_op_prepare(struct mrl_engine *eng, struct mrl_op *op,
		    uint32_t rail_mask, size_t chunk_size)
{
	(void) eng;
	op->rail_mask = rail_mask;
	op->chunk_size = chunk_size;
	op->next_off = 0;
	op->inflight = 0;
	op->orphans = 0;
	op->err = 0;
	op->final_posted = false;
	mrl_list_init(&op->link);
	mrl_list_init(&op->redo);

	/* An op of one chunk (of no byte, too) is posted as its final chunk */
	if (op->len <= chunk_size &&
	    (!op->one_iov || mrl_last_iov_len(op) == op->len)) {
		op->body_len = 0;
		return;
	}
	op->body_len = op->len;
	op->final_posted = true;
}


/* ---- pacing (mrl_stripe.h) ---------------------------------------------- */

#define MRL_PACE_SPAN_NS	2000000		/* a rate sample: 2 ms at least */
#define MRL_PACE_CHUNKS		4	/* and chunks completed (a rate of
						 * one or two is mostly rounding) */
#define MRL_PACE_STALE_NS	100000000	/* a rate counts for 100 ms */

/* The rail holds half its budget: its link, not its supply, paces it. */
static bool mrl_rail_fed(const struct mrl_rail_credit *rc)
{
	return rc->inflight_bytes >= rc->max_bytes / 2;
}

static void mrl_rail_sample_begin(struct mrl_rail_credit *rc, uint64_t now_ns)
{
	rc->pace_since_ns = now_ns;
	rc->pace_since_bytes = rc->bytes_completed;
	rc->pace_since_chunks = rc->completions;
}

/*
 * A rate sample of rail ended now: true when one was taken.  A sample spans
 * a time in which the rail stayed fed; the clock is monotonic.
 */
static bool mrl_rail_sample(struct mrl_rail_credit *rc, uint64_t now_ns)
{
	uint64_t span, sample;

	if (!mrl_rail_fed(rc)) {
		rc->pace_since_ns = 0;
		return false;
	}
	if (!rc->pace_since_ns) {
		mrl_rail_sample_begin(rc, now_ns);
		return false;
	}
	span = now_ns - rc->pace_since_ns;
	if (span < MRL_PACE_SPAN_NS ||
	    rc->completions - rc->pace_since_chunks < MRL_PACE_CHUNKS)
		return false;
	sample = (rc->bytes_completed - rc->pace_since_bytes) * 1000 /
		 (span / 1000);
	mrl_rail_sample_begin(rc, now_ns);
	rc->rate_at_ns = now_ns;
	/* a smoothed rate: one sample moves it a quarter of the way */
	rc->rate = rc->rate ? (3 * rc->rate + sample) / 4 : sample;
	return true;
}

void mrl_engine_pace(struct mrl_engine *eng, uint64_t now_ns)
{
	size_t floor = eng->max_bytes_per_rail / 4;
	uint64_t top = 0, share;
	bool sampled = false;
	int r;

	for (r = 0; r < eng->nrails; r++)
		sampled |= mrl_rail_sample(&eng->rail[r], now_ns);
	if (!sampled)
		return;
	for (r = 0; r < eng->nrails; r++) {
		struct mrl_rail_credit *rc = &eng->rail[r];

		if (rc->rate && now_ns - rc->rate_at_ns > MRL_PACE_STALE_NS)
			rc->rate = 0;
		if (rc->rate > top)
			top = rc->rate;
	}
	for (r = 0; r < eng->nrails; r++) {
		struct mrl_rail_credit *rc = &eng->rail[r];

		if (!rc->rate) {	/* not measured: the full budget */
			rc->max_bytes = eng->max_bytes_per_rail;
			continue;
		}
		share = eng->max_bytes_per_rail * rc->rate / top;
		rc->max_bytes = share > floor ? (size_t) share : floor;
	}
}

/* Room, and the rail did not refuse a chunk this pass. */
static bool mrl_rail_has_credit(const struct mrl_engine *eng, int rail,
				const struct mrl_op *op, size_t len)
{
	return !(eng->blocked & (1u << rail)) &&
	       mrl_rail_has_room(eng, rail, op, len);
}

/* Where the turn is: past the last rail, rail 0. */
static int mrl_turn_rail(const struct mrl_engine *eng)
{
	int r = eng->turn ? __builtin_ctz(eng->turn) : 0;

	return r < eng->nrails ? r : 0;
}

/*
 * The rail for a chunk of len bytes.  An op sent whole fills the lowest of
 * its rails below the fill level first (a find-first-set, no loop), so a
 * few small ops in flight keep to a few rails, and the polls that reap
 * them do not grow with the rails there are.  Else, and with every such
 * rail full, the least loaded rail with credit; ties rotate so idle rails
 * share.
 */
static int mrl_pick_rail(struct mrl_engine *eng, const struct mrl_op *op,
			 size_t len)
{
	uint32_t open = op->rail_mask & ~eng->full & ~eng->blocked;
	int best = -1, i, r = mrl_turn_rail(eng);

	if (eng->fill_chunks && op->chunk_size >= op->len && open) {
		r = __builtin_ctz(open);
		if (mrl_rail_has_credit(eng, r, op, len))
			return r;
		r = mrl_turn_rail(eng);
	}
	for (i = 0; i < eng->nrails; i++, r = r + 1 < eng->nrails ? r + 1 : 0) {
		if (!(op->rail_mask & (1u << r)) ||
		    !mrl_rail_has_credit(eng, r, op, len))
			continue;
		if (best < 0 || eng->rail[r].inflight_bytes <
					eng->rail[best].inflight_bytes)
			best = r;
	}
	if (best >= 0)
		eng->turn = ~1u << best;
	return best;
}

static bool mrl_op_finished(const struct mrl_op *op)
{
	if (op->inflight)
		return false;
	return op->err || (op->next_off >= op->body_len && op->final_posted &&
			   mrl_list_empty(&op->redo));
}


static void mrl_finish_op(struct mrl_engine *eng, struct mrl_op *op)
{
	struct mrl_chunk *chunk;
	int err;

	while (!mrl_list_empty(&op->redo)) {	/* an op that failed */
		chunk = mrl_first_chunk(&op->redo);
		mrl_list_del(&chunk->link);
		mrl_chunk_push(eng, chunk);
	}
	mrl_list_del(&op->link);
	mrl_pending_moved(eng);
	err = op->err;
	mrl_op_clean(op);
	eng->ops->op_done(eng->owner, op, err);
}

/* The op has chunks to post again: back to the pending list. */
static void mrl_requeue(struct mrl_engine *eng, struct mrl_op *op)
{
	mrl_list_del(&op->link);
	mrl_list_add_tail(&eng->pending, &op->link);
}

/*
 * Post chunk (from the free list or the op's redo list) on the op's best
 * rail: 0, -FI_EAGAIN when no rail takes it now, or the core's error.
 * mrl_post_chunk may narrow the op's rails (a rail that refuses for too long).
 */
static int mrl_post_chunk(struct mrl_engine *eng, struct mrl_op *op,
			  struct mrl_chunk *chunk)
{
	struct mrl_rail_credit *rc;
	int rail, ret;

	for (;;) {
		rail = mrl_pick_rail(eng, op, chunk->len);
		if (rail < 0)
			return -FI_EAGAIN;
		chunk->rail = rail;
		ret = eng->ops->post_chunk(eng->owner, chunk);
		if (ret == -FI_EAGAIN) {
			eng->blocked |= 1u << rail;
			continue;
		}
		rc = &eng->rail[rail];
		if (ret) {
			rc->errors++;
			op->err = ret;
			return ret;
		}
		mrl_list_del(&chunk->link);	/* a redo chunk leaves its list */
		mrl_rail_take(eng, chunk);
		return 0;
	}
}

/* Returns 0 when posted, -FI_EAGAIN when no rail or chunk is available. */
static int mrl_post_one(struct mrl_engine *eng, struct mrl_op *op, uint64_t off,
			size_t len)
{
	struct mrl_chunk *chunk = mrl_chunk_pop(eng);
	int ret;

	if (!chunk)
		return -FI_EAGAIN;
	chunk->op = op;
	chunk->offset = off;
	chunk->len = len;
	chunk->orphan = false;
	chunk->whole = false;
	ret = mrl_post_chunk(eng, op, chunk);
	if (ret)
		mrl_chunk_push(eng, chunk);	/* not taken */
	return ret;
}

/* Post what the op's rails accept; true when nothing is left to post. */
static bool mrl_progress_op(struct mrl_engine *eng, struct mrl_op *op)
{
	size_t len;

	if (!op->rail_mask && !op->err) {
		if (op->parked)
			return false;		/* its failed chunks wait */
		op->err = -FI_EHOSTUNREACH;	/* every rail it had failed */
	}
	while (!op->err && !mrl_list_empty(&op->redo)) {
		if (mrl_post_chunk(eng, op, mrl_first_chunk(&op->redo)))
			return !!op->err;
	}
	while (!op->err && op->next_off < op->body_len) {
		len = op->body_len - op->next_off;
		if (len > op->chunk_size)
			len = op->chunk_size;
		if (op->one_iov && len > mrl_iov_room(op, op->next_off))
			len = mrl_iov_room(op, op->next_off);
		if (mrl_post_one(eng, op, op->next_off, len))
			return !!op->err;
		op->next_off += len;
	}
	if (op->err || op->final_posted)
		return true;
	if (mrl_post_one(eng, op, op->body_len, op->len - op->body_len))
		return !!op->err;
	op->final_posted = true;
	return true;
}

/* Every chunk of op was handed out: it waits for them, or ends now. */
static void mrl_op_posted(struct mrl_engine *eng, struct mrl_op *op)
{
	if (mrl_op_finished(op)) {
		mrl_finish_op(eng, op);
		return;
	}
	mrl_list_del(&op->link);	/* off the pending list */
	mrl_pending_moved(eng);
}

void mrl_engine_post_pending(struct mrl_engine *eng)
{
	struct mrl_list *cur, *next;
	struct mrl_op *op;

	eng->blocked = 0;
	for (cur = eng->pending.next; cur != &eng->pending; cur = next) {
		next = cur->next;
		op = mrl_container_of(cur, struct mrl_op, link);
		if (mrl_progress_op(eng, op))
			mrl_op_posted(eng, op);
	}
}

void mrl_engine_submit(struct mrl_engine *eng, struct mrl_op *op)
{
	if (!mrl_list_empty(&eng->pending)) {	/* behind those queued first */
		mrl_list_add_tail(&eng->pending, &op->link);
		mrl_engine_post_pending(eng);
		return;
	}
	/*
	 * The common case, a small op and nothing queued: no list walk.  The
	 * op is on the list while its chunks are posted: a rail taken out by
	 * a post (mrl_engine_for_each_op) must narrow it too, or it would
	 * stay on that rail for good.
	 */
	eng->blocked = 0;
	mrl_list_add_tail(&eng->pending, &op->link);
	if (mrl_progress_op(eng, op))
		mrl_op_posted(eng, op);
	mrl_pending_moved(eng);
}




void mrl_engine_whole_untake(struct mrl_engine *eng, struct mrl_chunk *chunk)
{
	chunk->in_flight = false;
	mrl_rail_release(eng, chunk);
	chunk->op->inflight--;
	mrl_chunk_push(eng, chunk);
}

void mrl_engine_rail_posted(const struct mrl_engine *eng, int rail,
			    uint64_t *chunks, uint64_t *bytes)
{
	const struct mrl_rail_credit *rc = &eng->rail[rail];

	*chunks = rc->completions + rc->inflight + rc->chunks_abandoned;
	*bytes = rc->bytes_completed + rc->inflight_bytes +
		 rc->bytes_uncounted;
}

void mrl_engine_chunk_done_any(struct mrl_engine *eng,
			       struct mrl_chunk *chunk, int err)
{
	struct mrl_rail_credit *rc = &eng->rail[chunk->rail];
	struct mrl_op *op = chunk->op;
	bool rail_left;

	chunk->whole = false;	/* a failure's redo goes the general way */
	if (!op) {			/* abandoned: only its memory was kept */
		chunk->in_flight = false;
		mrl_list_del(&chunk->link);
		mrl_chunk_push(eng, chunk);
		return;
	}
	rail_left = !(op->rail_mask & (1u << chunk->rail));
	mrl_rail_release(eng, chunk);
	chunk->in_flight = false;
	rc->completions++;
	op->inflight--;
	if (err)
		rc->errors++;
	if (err || chunk->orphan)
		rc->bytes_uncounted += chunk->len;
	else
		rc->bytes_completed += chunk->len;

	if (chunk->orphan) {
		op->orphans--;		/* its copy carries its bytes */
	} else if (err && rail_left && (op->rail_mask || op->parked) &&
		   !op->err && !op->once) {
		/* failed on a rail the op has left: post it on another (a
		 * parked op's, once it has one) */
		rc->reissued++;
		mrl_list_add_tail(&op->redo, &chunk->link);
		mrl_requeue(eng, op);
		return;
	} else if (err && !op->err) {
		op->err = err;
	}
	mrl_chunk_push(eng, chunk);
	if (mrl_op_finished(op))
		mrl_finish_op(eng, op);
}

/* The chunk in flight for an op (not abandoned) on rail, or on any (-1). */
static bool mrl_flying_on(const struct mrl_chunk *chunk, int rail)
{
	return chunk->in_flight && chunk->op &&
	       (rail < 0 || chunk->rail == rail);
}

int mrl_engine_reissue(struct mrl_engine *eng, int rail)
{
	struct mrl_chunk *chunk, *copy;
	struct mrl_op *op;
	size_t i;
	int n = 0;

	for (i = 0; i < eng->pool_size; i++) {
		chunk = &eng->chunk_pool[i];
		if (!mrl_flying_on(chunk, rail))
			continue;
		op = chunk->op;
		/* an op posted once waits for the core's verdict */
		if (chunk->orphan || op->err || op->once ||
		    (op->rail_mask & (1u << rail)) || !op->rail_mask)
			continue;
		copy = mrl_chunk_pop(eng);
		if (!copy)
			break;
		copy->op = op;
		copy->offset = chunk->offset;
		copy->len = chunk->len;
		copy->orphan = false;
		copy->whole = false;
		mrl_list_add_tail(&op->redo, &copy->link);
		chunk->orphan = true;
		chunk->whole = false;
		op->orphans++;
		eng->rail[rail].reissued++;
		mrl_requeue(eng, op);
		n++;
	}
	return n;
}

/*
 * The core keeps chunk, whose op fails now: its credit comes back, its
 * memory waits for the core's verdict.
 */
static void mrl_abandon(struct mrl_engine *eng, struct mrl_chunk *chunk)
{
	struct mrl_rail_credit *rc = &eng->rail[chunk->rail];

	rc->chunks_abandoned++;
	rc->bytes_uncounted += chunk->len;
	mrl_rail_release(eng, chunk);
	chunk->op->inflight--;
	chunk->op = NULL;
	chunk->whole = false;
	mrl_list_add_tail(&eng->abandoned, &chunk->link);
}

/*
 * One walk of the pool abandons every chunk of the matching ops, finishing
 * each op as its last chunk goes; then the matching ops that had nothing
 * in flight.
 */
void mrl_engine_fail_ops(struct mrl_engine *eng,
			 bool (*match)(const struct mrl_op *op, void *arg),
			 void *arg, int err)
{
	struct mrl_list *cur, *next;
	struct mrl_chunk *chunk;
	struct mrl_op *op;
	size_t i;

	for (i = 0; i < eng->pool_size; i++) {
		chunk = &eng->chunk_pool[i];
		if (!mrl_flying_on(chunk, -1) || !match(chunk->op, arg))
			continue;
		op = chunk->op;
		mrl_abandon(eng, chunk);
		if (!op->err)
			op->err = err;
		if (!op->inflight) {
			op->orphans = 0;
			mrl_finish_op(eng, op);
		}
	}
	for (cur = eng->pending.next; cur != &eng->pending; cur = next) {
		next = cur->next;
		op = mrl_container_of(cur, struct mrl_op, link);
		if (!match(op, arg))
			continue;
		if (!op->err)
			op->err = err;
		mrl_finish_op(eng, op);
	}
}

void mrl_engine_for_each_op(struct mrl_engine *eng,
			    void (*fn)(struct mrl_op *op, void *arg),
			    void *arg)
{
	struct mrl_list *cur;
	size_t i;

	for (cur = eng->pending.next; cur != &eng->pending; cur = cur->next)
		fn(mrl_container_of(cur, struct mrl_op, link), arg);
	for (i = 0; i < eng->pool_size; i++)
		if (mrl_flying_on(&eng->chunk_pool[i], -1))
			fn(eng->chunk_pool[i].op, arg);
}

struct mrl_chunk *mrl_engine_find_chunk(struct mrl_engine *eng, int rail,
					bool (*match)(const struct mrl_chunk *c,
						      void *arg),
					void *arg)
{
	size_t i;

	for (i = 0; i < eng->pool_size; i++)
		if (mrl_flying_on(&eng->chunk_pool[i], rail) &&
		    match(&eng->chunk_pool[i], arg))
			return &eng->chunk_pool[i];
	return NULL;
}

void mrl_engine_for_each_pending(struct mrl_engine *eng,
				 void (*fn)(struct mrl_op *op, void *arg),
				 void *arg)
{
	struct mrl_list *cur;

	for (cur = eng->pending.next; cur != &eng->pending; cur = cur->next)
		fn(mrl_container_of(cur, struct mrl_op, link), arg);
}

bool mrl_engine_idle(const struct mrl_engine *eng)
{
	return mrl_list_empty(&eng->pending) && !eng->busy;
}

size_t mrl_iov_slice(const struct iovec *iov, void *const *desc, size_t count,
		     uint64_t off, size_t len, struct iovec *out,
		     void **out_desc)
{
	size_t i, n = 0, take;

	for (i = 0; i < count && off >= iov[i].iov_len; i++)
		off -= iov[i].iov_len;

	for (; i < count && n < MRL_IOV_LIMIT && (len || !n); i++) {
		take = iov[i].iov_len - off;
		if (take > len)
			take = len;
		out[n].iov_base = (char *) iov[i].iov_base + off;
		out[n].iov_len = take;
		out_desc[n] = desc ? desc[i] : NULL;
		n++;
		len -= take;
		off = 0;
	}
	return n;
}
