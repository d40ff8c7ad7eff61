/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The striping engine: turns one RMA operation into chunks on rails and the
 * chunks' completions back into exactly one completion of the operation.
 *
 * It knows nothing of libfabric objects.  The rail layer hands it operations,
 * and it calls back to post a chunk on a rail and to report a finished
 * operation.  Chunks are handed out lazily: a rail gets the next chunk when
 * it has credit (chunks and bytes in flight below its limits), so a rail
 * that drains faster is given more of the operation (adaptive scheduling),
 * and a rail that said -FI_EAGAIN is simply retried on the next progress.
 *
 * Failure.  The rail layer decides which rails an op may still use (its
 * rail_mask) and takes a failed rail out of it.  A chunk that fails on a
 * rail the op may no longer use is posted again on another; only an op
 * with no rail left fails.  A chunk stuck on such a rail is copied to
 * another (mrl_engine_reissue): the copy places the bytes, and the op
 * still completes only once the core gave back every chunk it was handed,
 * because until then the core may read or write the user's buffer.
 *
 * What is in flight is on no list: posting and completing a chunk touch
 * counters only.  The rare events (a failed rail, a dead peer) find the
 * chunks in flight by a walk of the chunk pool.
 */
#ifndef MRL_STRIPE_H
#define MRL_STRIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <rdma/fabric.h>

#include "mrl_list.h"
#include "mrl_proto.h"	/* MRL_MAX_RAILS */

#define MRL_IOV_LIMIT	4

enum mrl_op_kind {
	MRL_OP_WRITE,
	MRL_OP_READ,
};

struct mrl_op;

/*
 * Room for the rail layer's per-chunk context at the start of every chunk
 * (what it hands the core as the operation's context); the engine never
 * reads or writes it.
 */
#define MRL_CHUNK_CTX_WORDS	10

struct mrl_chunk {
	void *rail_ctx[MRL_CHUNK_CTX_WORDS];	/* must stay first */
	struct mrl_op *op;
	uint64_t offset;		/* within the operation's byte stream */
	size_t len;
	int rail;
	bool orphan;			/* copied elsewhere: its outcome no
					 * longer counts, only its return */
	bool in_flight;			/* the core holds it (for its op,
					 * or abandoned) */
	bool whole;			/* its op's one chunk, from the fast
					 * path, untouched since: its return
					 * finishes the op */
	struct mrl_list link;		/* its op's redo list or the abandoned
					 * list; else none (self-linked) */
	struct mrl_chunk *next_free;	/* the engine's free stack */
};

struct mrl_op {
	enum mrl_op_kind kind;
	uint64_t flags;			/* user flags: FI_DELIVERY_COMPLETE, ... */
	void *context;
	uint64_t data;
	size_t len;
	struct iovec iov[MRL_IOV_LIMIT];
	void *desc[MRL_IOV_LIMIT];
	size_t iov_count;
	uint64_t raddr;
	void *peer;			/* owned by the rail layer */
	uint32_t rail_mask;		/* rails this op may use */
	size_t chunk_size;
	bool one_iov;			/* no chunk spans two of iov[] (a core
					 * whose RMA takes one local iov) */
	bool unmetered;			/* rails' byte budget does not apply
					 * (mrl_sched_params.unmetered) */
	bool parked;			/* no rail (rail_mask 0), yet not
					 * failed for it: the rail layer gives
					 * it rails later, or fails it */
	bool once;			/* no byte of it goes twice: a chunk
					 * that failed, or whose rail went out,
					 * is not posted elsewhere, and the op
					 * fails with it (a chunk that raises
					 * an entry at the target) */

	/*
	 * An op of one chunk (or of no byte) is posted as its final chunk,
	 * the whole of it; a larger one is all body, cut at chunk_size.
	 * A writedata's target entry comes from mrl_rma.c's WRITE_DATA once
	 * every chunk completed, or, for one chunk where the core reports a
	 * write's length, from that chunk (posted once).
	 */
	size_t body_len;		/* 0 for an op of one chunk, else len */
	bool final_posted;

	size_t next_off;		/* next body byte to hand out */
	uint32_t inflight;		/* chunks the core holds, orphans too */
	uint32_t orphans;
	struct mrl_list redo;		/* chunks to post again elsewhere */
	int err;
	struct mrl_list link;		/* pending list while chunks wait */
};

struct mrl_rail_credit {
	uint32_t inflight;
	size_t inflight_bytes;
	size_t fill_bytes;		/* its byte level: see
					 * mrl_engine_rail_read */
	uint64_t bytes_completed;
	/* what left the rail uncounted above (posting counts nothing:
	 * mrl_engine_rail_posted) */
	uint64_t chunks_abandoned;
	uint64_t bytes_uncounted;	/* failed, orphaned or abandoned */
	uint64_t errors;
	uint64_t completions;		/* chunks returned, for stall watch */
	uint64_t reissued;		/* chunks posted again elsewhere */
	/* the rail's byte budget, paced by its rate (mrl_engine_pace) */
	size_t max_bytes;
	uint64_t rate;			/* bytes per ms; 0: not measured */
	uint64_t rate_at_ns;		/* its last sample */
	uint64_t pace_since_ns;		/* 0: no sample under way */
	uint64_t pace_since_bytes;	/* bytes_completed then */
	uint64_t pace_since_chunks;	/* completions then */
};

struct mrl_engine_ops {
	/* 0: posted; -FI_EAGAIN: retry later; other: the op fails. */
	int (*post_chunk)(void *owner, struct mrl_chunk *chunk);
	/* Called exactly once per op, after its last chunk completed. */
	void (*op_done)(void *owner, struct mrl_op *op, int err);
};

struct mrl_engine {
	int nrails;
	struct mrl_rail_credit rail[MRL_MAX_RAILS];
	uint32_t max_chunks_per_rail;
	size_t max_bytes_per_rail;
	uint32_t turn;			/* the rails from the turn's on
					 * (rotates ties among idle rails);
					 * 0: past the last, from rail 0 */
	uint32_t blocked;		/* said -FI_EAGAIN this pass */
	uint32_t busy;			/* rails with a chunk in flight */
	uint32_t below_top;		/* rails read below fill_bytes: while
					 * any, idle rails take whole ops
					 * first */
	uint32_t full;			/* rails at their fill level: */
	uint32_t fill_chunks;		/* ops sent whole fill one rail to */
	size_t fill_bytes;		/* this level before the next (bytes:
					 * the most a rail may earn) */
	size_t fill_floor;		/* the least: 1, or fill_bytes where
					 * levels do not adapt */
	size_t fill_step;		/* one step up: fill_bytes /
					 * MRL_FILL_STEPS */
	struct mrl_list pending;	/* ops with chunks still to post */
	uint32_t whole_depth;		/* a rail's depth for the fast path:
					 * 0 while ops are pending */
	struct mrl_chunk *free_top;	/* free chunks, last freed first (its
					 * memory is the warmest) */
	struct mrl_list abandoned;	/* chunks of ops failed while the core
					 * held them: free when it returns them */
	struct mrl_chunk *chunk_pool;
	size_t pool_size;
	const struct mrl_engine_ops *ops;
	void *owner;
};

struct mrl_engine_attr {
	int nrails;
	uint32_t max_chunks_per_rail;
	size_t max_bytes_per_rail;
	uint32_t fill_chunks;		/* 0: no fill level, whole ops go
					 * to the least loaded rail */
	size_t fill_bytes;		/* 0: no byte level */
	bool fill_adapt;		/* each rail earns its byte level:
					 * mrl_engine_rail_read */
};

int mrl_engine_init(struct mrl_engine *eng, const struct mrl_engine_attr *attr,
		    const struct mrl_engine_ops *ops, void *owner);
void mrl_engine_fini(struct mrl_engine *eng);

/* Prepare op for submission: cut at chunk_size over the rails in rail_mask. */
void mrl_op_prepare(struct mrl_engine *eng, struct mrl_op *op,
		    uint32_t rail_mask, size_t chunk_size);
/*
 * Queue the op and post what credit allows.  Never fails; an op whose
 * rail_mask is 0 completes at once with -FI_EHOSTUNREACH.
 */
void mrl_engine_submit(struct mrl_engine *eng, struct mrl_op *op);
void mrl_engine_post_pending(struct mrl_engine *eng);

/* Post queued chunks while rails have credit. */
static inline void mrl_engine_progress(struct mrl_engine *eng)
{
	if (!mrl_list_empty(&eng->pending))	/* every poll comes here */
		mrl_engine_post_pending(eng);
}
/* ---- the engine's own, inline for the data path ------------------------ */

static inline struct mrl_chunk *mrl_first_chunk(struct mrl_list *l)
{
	return mrl_container_of(l->next, struct mrl_chunk, link);
}

MRL_DECLARE_FREE_STACK(struct mrl_chunk, mrl_chunk_stack)

/* A free chunk's link is self-linked: it leaves no list when taken. */
static inline struct mrl_chunk *mrl_chunk_pop(struct mrl_engine *eng)
{
	return mrl_chunk_stack_pop(&eng->free_top);
}

static inline void mrl_chunk_push(struct mrl_engine *eng,
				  struct mrl_chunk *chunk)
{
	mrl_chunk_stack_push(&eng->free_top, chunk);
}

/* The rail's credit moved: is it at its fill level now? */
static inline void mrl_rail_level(struct mrl_engine *eng, int rail)
{
	const struct mrl_rail_credit *rc = &eng->rail[rail];

	if (rc->inflight >= eng->fill_chunks ||
	    rc->inflight_bytes >= rc->fill_bytes)
		eng->full |= 1u << rail;
	else
		eng->full &= ~(1u << rail);
}

static inline bool mrl_rail_has_room(const struct mrl_engine *eng, int rail,
				     const struct mrl_op *op, size_t len)
{
	const struct mrl_rail_credit *rc = &eng->rail[rail];

	if (rc->inflight >= eng->max_chunks_per_rail)
		return false;
	return op->unmetered || !rc->inflight_bytes ||
	       rc->inflight_bytes + len <= rc->max_bytes;
}

/* A chunk the core took: the rail's credit goes to it. */
static inline void mrl_rail_take(struct mrl_engine *eng,
				 struct mrl_chunk *chunk)
{
	struct mrl_rail_credit *rc = &eng->rail[chunk->rail];

	chunk->in_flight = true;
	eng->busy |= 1u << chunk->rail;
	rc->inflight++;
	rc->inflight_bytes += chunk->len;
	mrl_rail_level(eng, chunk->rail);
	chunk->op->inflight++;
}

/* A chunk leaves its rail: the rail's credit comes back. */
static inline void mrl_rail_release(struct mrl_engine *eng,
				    struct mrl_chunk *chunk)
{
	struct mrl_rail_credit *rc = &eng->rail[chunk->rail];

	if (!--rc->inflight)
		eng->busy &= ~(1u << chunk->rail);
	rc->inflight_bytes -= chunk->len;
	mrl_rail_level(eng, chunk->rail);
}

/*
 * An op as the fast path wants it (nothing posted,
 * failed or queued): the rail layer's free ops are kept so, from its pool's
 * start (it calls this) and after every op the engine finished the general
 * way (the engine calls it), so mrl_engine_whole_take sets only what
 * differs per op.
 */
static inline void mrl_op_clean(struct mrl_op *op)
{
	op->iov_count = 1;
	op->unmetered = false;
	op->parked = false;
	op->once = false;
	op->body_len = 0;
	op->next_off = 0;
	op->final_posted = true;
	op->inflight = 0;
	op->orphans = 0;
	op->err = 0;
	mrl_list_init(&op->link);
	mrl_list_init(&op->redo);
}

/*
 * The small op's fast path (mrl_rma.c): an op of one buffer that
 * goes whole, as its own final chunk, on one rail, without the queue.
 * mrl_engine_whole_take gives its chunk on the lowest rail of rail_mask
 * (within the engine's rails, not 0) below its fill level, an idle one
 * first while the engine spreads (see mrl_engine_rail_read); with every
 * one at its level, on the first from the turn's rail on (no loop over
 * the rails, as the general way's least loaded), up to its depth.  The op,
 * clean (see mrl_op_clean), is set as mrl_op_prepare would.  NULL when
 * that rail is at its depth, no chunk is free or ops are queued before it:
 * the op goes the general way.  A rail's refusal in an earlier pass does
 * not count here: this is a new one.
 *
 * The chunk is taken, its rail's credit with it, before the core sees it:
 * after the core's call the caller needs nothing but the chunk, in case
 * the core refused; then mrl_engine_whole_untake gives all back, and the
 * general way retries the op.
 */
static inline __attribute__((always_inline)) struct mrl_chunk *
mrl_engine_whole_take(struct mrl_engine *eng, struct mrl_op *op,
		      uint32_t rail_mask)
{
	uint32_t open = rail_mask & ~eng->full;
	struct mrl_chunk *chunk;
	int rail;

	/* only the op's rails say whether to spread: a rail out of its
	 * mask for good (out of service) is read no more, its level stuck */
	if ((eng->below_top & rail_mask) && (open & ~eng->busy))
		open &= ~eng->busy;
	/* every rail at its level: they take turns, up to their depth, from
	 * the turn's rail on */
	if (!open) {
		open = rail_mask & eng->turn;
		if (!open)
			open = rail_mask;
	}
	chunk = eng->free_top;
	if (!chunk)
		return NULL;
	rail = __builtin_ctz(open);
	/* the rail's depth bounds what the core holds (none while ops are
	 * pending: see whole_depth); its byte budget, there to share a large
	 * op's bytes, is not a small op's concern */
	if (eng->rail[rail].inflight >= eng->whole_depth)
		return NULL;
	eng->turn = ~1u << rail;	/* 0 after rail 31 */
	mrl_chunk_pop(eng);	/* chunk */
	op->rail_mask = rail_mask;
	op->chunk_size = op->len;
	chunk->op = op;
	chunk->offset = 0;
	chunk->len = op->len;
	chunk->rail = rail;
	chunk->orphan = false;
	chunk->whole = true;
	mrl_rail_take(eng, chunk);
	return chunk;
}

/*
 * Pacing, from the rail layer's clock (its health tick, every few dozen
 * polls): each rail's byte budget in proportion to its rate, the fastest
 * rail's the engine's max_bytes_per_rail.  A large op's chunks go to
 * whichever rail has room, so every rail holds its budget until the op's
 * last chunks; with equal budgets a rail half as fast takes twice as long
 * to drain its share, and the op (a writedata, delivery-complete, or a
 * write at window 1) waits for it while the fast rails idle.  Budgets in
 * proportion drain together.  A rate is measured only over a span in
 * which the rail held at least half its budget (its link, not the
 * supply, the limit), so budgets stay above what keeps a link busy; never
 * below a quarter of the engine's, which still keeps a rail a quarter as
 * fast busy, so that a rail slowed for a while is measured again at its
 * own pace.  A rate not measured for a while (the rail idle, or out)
 * counts no more: its rail has the full budget again.
 */
void mrl_engine_pace(struct mrl_engine *eng, uint64_t now_ns);

/* The chunks and bytes ever posted on rail. */
void mrl_engine_rail_posted(const struct mrl_engine *eng, int rail,
			    uint64_t *chunks, uint64_t *bytes);

/* The chunk mrl_engine_whole_take gave was not posted: all back. */
void mrl_engine_whole_untake(struct mrl_engine *eng, struct mrl_chunk *chunk);

/* A chunk completed (err 0) or failed; may finish its op. */
void mrl_engine_chunk_done_any(struct mrl_engine *eng,
			       struct mrl_chunk *chunk, int err);

/*
 * A chunk came back (err 0) or failed.  The common case inline: the last
 * chunk of an op back fine, nothing to post again, nothing stuck
 * elsewhere (the fast path's ops, and every op's last chunk): the op is
 * returned, finished, for the caller to hand to the engine's op_done
 * itself (progress calls it directly, inline).  Otherwise NULL, and the
 * engine calls op_done if the op finished.
 */
static inline struct mrl_op *mrl_engine_chunk_back(struct mrl_engine *eng,
						   struct mrl_chunk *chunk,
						   int err)
{
	struct mrl_op *op = chunk->op;
	struct mrl_rail_credit *rc;

	if (err || (!chunk->whole &&
		    (!op || chunk->orphan || op->inflight != 1 || op->err ||
		     op->next_off < op->body_len || !op->final_posted ||
		     !mrl_list_empty(&op->redo)))) {
		mrl_engine_chunk_done_any(eng, chunk, err);
		return NULL;
	}
	rc = &eng->rail[chunk->rail];
	mrl_rail_release(eng, chunk);
	rc->completions++;
	rc->bytes_completed += chunk->len;
	chunk->in_flight = false;
	mrl_chunk_push(eng, chunk);
	mrl_op_clean(op);	/* back to the pool as the fast path wants it */
	return op;
}

/*
 * Whole chunks back from one rail in one batch of the core's completions:
 * their credit is returned once for the batch (mrl_engine_returned), not
 * per chunk.
 */
struct mrl_returns {
	uint32_t chunks;
	size_t bytes;
};

/*
 * A chunk marked whole came back fine: its op is finished, returned for
 * its completion; the rail's credit waits for mrl_engine_returned, which
 * must come before anything else reads or moves that rail's credit.  The
 * chunk goes onto free_top: the engine's free stack (eng->free_top), or
 * its top held by a caller that takes back a run of whole chunks, nothing
 * else taking or giving chunks meanwhile, and stores it back after.
 */
static inline __attribute__((always_inline)) struct mrl_op *
mrl_engine_whole_back_to(struct mrl_chunk *chunk, struct mrl_returns *back,
			 struct mrl_chunk **free_top)
{
	struct mrl_op *op = chunk->op;

	back->chunks++;
	back->bytes += chunk->len;
	op->inflight = 0;
	chunk->in_flight = false;
	mrl_chunk_stack_push(free_top, chunk);
	return op;
}

/* The same, onto the engine's free stack. */
static inline struct mrl_op *mrl_engine_whole_back(struct mrl_engine *eng,
						   struct mrl_chunk *chunk,
						   struct mrl_returns *back)
{
	return mrl_engine_whole_back_to(chunk, back, &eng->free_top);
}

/*
 * A run of whole chunks back (progress's fast path): the free stack's top
 * kept in the run (a register) until mrl_engine_run_end puts it back.
 * Nothing else may take or free chunks between begin and end.
 */
struct mrl_engine_run {
	struct mrl_chunk *free_top;
};

static inline void mrl_engine_run_begin(const struct mrl_engine *eng,
					struct mrl_engine_run *run)
{
	run->free_top = eng->free_top;
}

static inline struct mrl_op *mrl_engine_run_back(struct mrl_engine_run *run,
						 struct mrl_chunk *chunk,
						 struct mrl_returns *back)
{
	return mrl_engine_whole_back_to(chunk, back, &run->free_top);
}

static inline void mrl_engine_run_end(struct mrl_engine *eng,
				      const struct mrl_engine_run *run)
{
	eng->free_top = run->free_top;
}

/* The credit of the whole chunks back from rail since the last call. */
static inline void mrl_engine_returned(struct mrl_engine *eng, int rail,
				       struct mrl_returns *back)
{
	struct mrl_rail_credit *rc = &eng->rail[rail];

	if (!back->chunks)
		return;
	rc->inflight -= back->chunks;
	if (!rc->inflight)
		eng->busy &= ~(1u << rail);
	rc->inflight_bytes -= back->bytes;
	rc->completions += back->chunks;
	rc->bytes_completed += back->bytes;
	mrl_rail_level(eng, rail);
	back->chunks = 0;
	back->bytes = 0;
}

/*
 * The rail layer read rail's completions while chunks were in flight
 * there, and found some or none.  Where the reader is the limit (CPU),
 * completions wait for every read: a rail keeps its byte level, whole ops
 * fill few rails and each read reaps many.  Where the rail is (its link),
 * reads come back empty: each, while the rail holds more than a step's
 * bytes (a few tiny ops wait on latency, not on a link), halves the
 * rail's byte level, down to fill_floor, and the next whole ops go to the
 * other rails; each read that finds some takes a step back up, to
 * fill_bytes.  Adapting (fill_adapt), a rail starts one step up: it earns
 * its level by keeping up.  Over a kernel socket (tcp) this matters
 * twice: a rail given more than its link takes queues in the kernel,
 * which then spends more per byte, and the reader, slowed, no longer
 * finds a read empty; starting low, the rails that keep up are the ones
 * that fill.
 *
 * Until every rail read is at the top, the engine spreads: whole ops go to
 * idle rails first.  Where links are the limit a rail left idle is
 * bandwidth lost: on the testbed's 8 rails with 4 KiB ops, unspread, the
 * window's ops fill the low rails and the high ones wait, often long
 * enough for the low rails alone to hold the window.  Where the reader is
 * the limit every rail is soon at the top, and filling few rails saves
 * reads.  Only the op's own rails count: one never read, or read no more
 * (out of its mask, out of service), does not.
 */
#define MRL_FILL_STEPS	64	/* steps from nothing to fill_bytes */

static inline void mrl_engine_rail_read(struct mrl_engine *eng, int rail,
					bool found)
{
	struct mrl_rail_credit *rc = &eng->rail[rail];
	uint32_t bit = 1u << rail;

	if (found) {
		if (rc->fill_bytes >= eng->fill_bytes)
			return;		/* the reader is the limit: as ever */
		rc->fill_bytes += eng->fill_step;
		if (rc->fill_bytes > eng->fill_bytes)
			rc->fill_bytes = eng->fill_bytes;
	} else if (rc->fill_bytes > eng->fill_floor &&
		   rc->inflight_bytes > eng->fill_step) {
		/* (tiny ops wait on no link: a byte level is not theirs) */
		rc->fill_bytes /= 2;
		if (rc->fill_bytes < eng->fill_floor)
			rc->fill_bytes = eng->fill_floor;
	}
	if (rc->fill_bytes < eng->fill_bytes)
		eng->below_top |= bit;
	else
		eng->below_top &= ~bit;
	mrl_rail_level(eng, rail);
}

/* A chunk completed (err 0) or failed; may finish its op. */
static inline void mrl_engine_chunk_done(struct mrl_engine *eng,
					 struct mrl_chunk *chunk, int err)
{
	struct mrl_op *op = mrl_engine_chunk_back(eng, chunk, err);

	if (op)
		eng->ops->op_done(eng->owner, op, 0);
}
bool mrl_engine_idle(const struct mrl_engine *eng);

/*
 * Call fn on every op not finished yet (pending or in flight), once or
 * more (an op with several chunks in flight); fn may narrow
 * op->rail_mask, to take failed rails away from it.
 */
void mrl_engine_for_each_op(struct mrl_engine *eng,
			    void (*fn)(struct mrl_op *op, void *arg),
			    void *arg);
/*
 * Fail every op for which match says so, now, even with chunks the core
 * still holds (a peer that died, whose core may never return them): those
 * chunks are abandoned, their credit returned, and their memory kept until
 * the core gives them back.  For ops that must not wait forever.
 */
void mrl_engine_fail_ops(struct mrl_engine *eng,
			 bool (*match)(const struct mrl_op *op, void *arg),
			 void *arg, int err);
/* The first chunk in flight on rail that match accepts, or NULL. */
struct mrl_chunk *mrl_engine_find_chunk(struct mrl_engine *eng, int rail,
					bool (*match)(const struct mrl_chunk *c,
						      void *arg),
					void *arg);
/*
 * The chunks in flight on rail whose op may no longer use it are copied
 * to the op's other rails; the originals become orphans.  Those of an op
 * posted once (a chunk carrying remote CQ data: the target would see the
 * data twice if the original landed after all) are not copied: they wait
 * for the core's verdict.
 * Returns the number copied.
 */
int mrl_engine_reissue(struct mrl_engine *eng, int rail);

/* True when every rail of mask already has a chunk in flight. */
static inline bool mrl_engine_rails_busy(const struct mrl_engine *eng,
					 uint32_t mask)
{
	return (eng->busy & mask) == mask;
}

/*
 * Call fn on every op that still has chunks to post (its rail_mask may be
 * changed: later chunks then follow the new mask).
 */
void mrl_engine_for_each_pending(struct mrl_engine *eng,
				 void (*fn)(struct mrl_op *op, void *arg),
				 void *arg);

/* Slice [off, off + len) of an iov array into out (at most MRL_IOV_LIMIT). */
size_t mrl_iov_slice(const struct iovec *iov, void *const *desc, size_t count,
		     uint64_t off, size_t len, struct iovec *out,
		     void **out_desc);

#endif /* MRL_STRIPE_H */
