/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Progress: the data path's one loop.  Each rail's private core CQ is read
 * here and every completion goes to its owner, found by the struct
 * mrl_req_hdr that starts every context we give a core:
 *   MRL_REQ_CHUNK    a piece of a striped op: the striping engine
 *   MRL_REQ_MSG      a message passed through on rail 0: mrl_msg.c
 *   MRL_REQ_CTRL_*   the control channel: mrl_ctrl.c
 *   MRL_REQ_FENCE    a rail flush before a send: mrl_fence.c
 *   MRL_REQ_PROBE    is a failed rail back: mrl_health.c
 * and no context at all is a remote event (CQ data of a peer's write).
 * Only rails with requests of ours in flight are read on every call, and
 * one other by rotation (see mrl_rails_due), so a call costs the same with 1
 * or 32 rails.  Then the control backlog and the engine get their turn:
 * chunks waiting for credit go out as the completions above return it.
 * User operations
 * are reported to our CQs and counters from here (RMA ops through
 * mrl_rma_complete, errors through mrl_ep_report_err).
 * Called with the domain locked, from CQ and counter reads and from posts
 * the core refused.
 */
#include <stdlib.h>
#include <string.h>

#include "mrl.h"

/*
 * Domain locked: an op's error to its CQ and counter; prov_errno is the
 * core's where the error was the core's (fi_cq_strerror decodes it with
 * the core's), else 0.
 */
void mrl_ep_report_err(struct mrl_ep *ep, struct mrl_cq *cq, void *context,
		       uint64_t flags, int err, int prov_errno, uint64_t data)
{
	mrl_assert_locked(ep->domain);
	mrl_cntr_inc_err(mrl_ep_local_cntr(ep, flags));
	if (cq)
		mrl_cq_write_err(cq, context, flags & ~FI_COMPLETION, err,
				 prov_errno, data, 0);
}

/* A remote write with CQ data (or another event without our context). */
void mrl_remote_event(struct mrl_ep *ep, const struct fi_cq_tagged_entry *e,
		      fi_addr_t src)
{
	uint64_t flags = e->flags;

	if (!ep->rx_cq)
		return;
	/*
	 * A remote write's entry names FI_RMA and FI_REMOTE_WRITE: 2.x's tcp
	 * leaves out the first, its shm the second (CQ data comes only with
	 * a write here: our messages carry their own).
	 */
	if (!(flags & FI_ATOMIC))
		flags |= FI_RMA;
	if ((flags & FI_REMOTE_CQ_DATA) && !(flags & FI_ATOMIC))
		flags |= FI_REMOTE_WRITE;
	mrl_cq_write(ep->rx_cq, NULL, flags, e->len, e->buf, e->data,
		     e->tag, src);
}

/*
 * The target's keys, once learned, let waiting ops spread over its rails.
 * The source (FI_SOURCE) checks a message's claimed sender: rail 0's only,
 * the AV the claims are looked up in (mrl_ctrl_rx knows whether the core
 * reports sources there).
 */
static void mrl_progress_ctrl_rx(struct mrl_ep *ep, struct mrl_ctrl_buf *buf,
				 size_t len, int rail, fi_addr_t core_src,
				 int err)
{
	struct mrl_ctrl_learned learned;

	mrl_ctrl_rx(ep, buf, len, rail ? FI_ADDR_NOTAVAIL : core_src, err,
		    &learned);
	if (learned.keys)
		mrl_rma_keys_learned(ep, learned.peer, learned.keys);
}

/*
 * The user's fi_addr of a rail-0 completion's source, if asked for (rail
 * 0's are read for control claims too, and a core may leave a transmit's
 * or a remote event's untouched).
 */
static fi_addr_t mrl_user_src(struct mrl_ep *ep, int rail, fi_addr_t core_src)
{
	if (rail || !ep->want_src || !ep->av || core_src == FI_ADDR_NOTAVAIL)
		return FI_ADDR_NOTAVAIL;
	return mrl_av_src_addr(ep->av, core_src);
}

/* Every completion but a chunk's: messages, control, fences, probes. */
static void mrl_dispatch_side(struct mrl_ep *ep, int rail,
			      struct mrl_req_hdr *hdr,
			      const struct fi_cq_tagged_entry *e,
			      fi_addr_t core_src, int err,
			      const struct fi_cq_err_entry *err_entry)
{
	/* requests other than chunks back: progress reads their rail while
	 * others are out */
	switch (hdr->kind) {
	case MRL_REQ_MSG:
		mrl_msg_complete(ep, (struct mrl_msg_req *) hdr, e,
				 mrl_user_src(ep, rail, core_src), err,
				 err_entry);
		break;
	case MRL_REQ_CTRL_RX:
		mrl_progress_ctrl_rx(ep, (struct mrl_ctrl_buf *) hdr,
				     err ? 0 : e->len, rail, core_src, err);
		break;
	case MRL_REQ_CTRL_TX:
		mrl_nonchunk_done(ep, rail);
		mrl_ctrl_sent(ep, (struct mrl_ctrl_buf *) hdr, err);
		break;
	case MRL_REQ_BOUNCE:
		mrl_nonchunk_done(ep, rail);
		mrl_ctrl_bounce_done(ep, (struct mrl_ctrl_buf *) hdr, err);
		break;
	case MRL_REQ_DATA_FLUSH:
		mrl_nonchunk_done(ep, rail);
		mrl_write_data_flushed(ep, (struct mrl_ctrl_buf *) hdr, err);
		break;
	case MRL_REQ_FENCE:
		mrl_nonchunk_done(ep, rail);
		mrl_fence_done(ep, (struct mrl_fence *) hdr, err);
		break;
	case MRL_REQ_PROBE:
		mrl_nonchunk_done(ep, rail);
		mrl_health_probe_done(ep, (struct mrl_fence *) hdr, err);
		break;
	case MRL_REQ_PKT_RX:
	case MRL_REQ_PKT_TX:
		mrl_pkt_completed(ep, (struct mrl_pkt_buf *) hdr,
				  err ? 0 : e->len, core_src, err);
		break;
	default:
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "rail %d: completion with "
			      "unknown context %p\n", rail, (void *) hdr);
	}
}

/*
 * A chunk the core failed: its op keeps the core's provider errno (the
 * first), which the op's error entry carries if the op fails.
 */
static void mrl_note_core_errno(const struct mrl_chunk *chunk,
				const struct fi_cq_err_entry *e)
{
	struct mrl_rma_req *req;

	if (!chunk->op || !e || !e->prov_errno)
		return;
	req = mrl_container_of(chunk->op, struct mrl_rma_req, op);
	if (!req->prov_errno)
		req->prov_errno = e->prov_errno;
}

/* Inline in mrl_dispatch_all: a chunk back, nearly every entry, tested first. */
static inline __attribute__((always_inline))
void mrl_dispatch(struct mrl_ep *ep, int rail,
		  const struct fi_cq_tagged_entry *e, fi_addr_t core_src,
		  int err, const struct fi_cq_err_entry *err_entry)
{
	struct mrl_req_hdr *hdr = e->op_context;
	struct mrl_op *op;

	/*
	 * A remote write's event has no context of ours; libfabric 1.17's
	 * shm leaves its own message id there, so the flags decide.
	 */
	if (!hdr || (e->flags & (FI_REMOTE_WRITE | FI_REMOTE_READ))) {
		if (!err)
			mrl_remote_event(ep, e,
					 mrl_user_src(ep, rail, core_src));
		else
			MRL_WARN_ONCE(FI_LOG_EP_DATA, "rail %d: remote event "
				      "error %d\n", rail, err);
		return;
	}
	if (hdr->kind != MRL_REQ_CHUNK) {
		mrl_dispatch_side(ep, rail, hdr, e, core_src, err, err_entry);
		return;
	}
	if (err) {
		mrl_note_core_errno((struct mrl_chunk *) hdr, err_entry);
		mrl_health_chunk_failed(ep, (struct mrl_chunk *) hdr, err);
	}
	op = mrl_engine_chunk_back(&ep->engine, (struct mrl_chunk *) hdr, err);
	if (op)
		mrl_rma_done(ep, op, 0);
}

static void mrl_read_err(struct mrl_ep *ep, int rail)
{
	struct fi_cq_err_entry err = { 0 };
	struct fi_cq_tagged_entry e = { 0 };

	if (fi_cq_readerr(ep->rails[rail].cq, &err, 0) != 1)
		return;
	e.op_context = err.op_context;
	e.flags = err.flags;
	e.len = err.len;
	e.buf = err.buf;
	e.data = err.data;
	e.tag = err.tag;
	mrl_dispatch(ep, rail, &e, FI_ADDR_NOTAVAIL,
		     err.err ? -err.err : -FI_EIO, &err);
}

/* Calls per rail per progress (MRL_CQ_BATCH entries each, mrl_cq.h). */
#define MRL_CQ_ROUNDS		8

/*
 * A reader's buffer is full: a CQ of the endpoint is being read
 * (fi_cq_read progresses) and no CQ of it takes more entries there.
 * Progress then reads no further: what the reader could not take would
 * wait in our ring, to be copied a second time at the next read, while the
 * core holds it as well as we do.
 */
static inline bool mrl_reader_full(const struct mrl_ep *ep)
{
	if (mrl_cq_reader_room(ep->tx_cq) || mrl_cq_reader_room(ep->rx_cq))
		return false;
	return mrl_cq_being_read(ep->tx_cq) || mrl_cq_being_read(ep->rx_cq);
}

/*
 * After batch n: is the rail read again?  After an error entry, and after
 * a full batch unless the reader is full; drain: whatever the reader
 * (see mrl_rail0_batches).
 */
static inline bool mrl_read_on(const struct mrl_ep *ep, ssize_t n, bool drain)
{
	if (n < 0)		/* an error entry handed on: read again */
		return true;
	return n == MRL_CQ_BATCH && (drain || !mrl_reader_full(ep));
}

/* Are rail's sources read: the user's FI_SOURCE, or rail 0's claims. */
static inline bool mrl_reads_src(const struct mrl_ep *ep, int rail)
{
	return ep->rails[rail].reads_src;
}

/*
 * One batch of rail's core completions into e and src: how many, 0 when
 * none, -FI_EAGAIN after handing on an error entry (read again).
 * Sources where mrl_reads_src says.  A core without FI_SOURCE leaves src
 * untouched, hence NOTAVAIL first for the user's; rail 0's own (control
 * claims) come from a core with FI_SOURCE, which sets a receive's.
 */
static inline __attribute__((always_inline))
ssize_t mrl_read_core(struct mrl_ep *ep, int rail, struct fi_cq_tagged_entry *e,
		      fi_addr_t *src)
{
	ssize_t i;

	if (ep->want_src) {
		for (i = 0; i < MRL_CQ_BATCH; i++)
			src[i] = FI_ADDR_NOTAVAIL;
	}
	if (mrl_reads_src(ep, rail))
		return fi_cq_readfrom(ep->rails[rail].cq, e, MRL_CQ_BATCH, src);
	return fi_cq_read(ep->rails[rail].cq, e, MRL_CQ_BATCH);
}

/* mrl_read_core's outcome n as mrl_read_rail gives it. */
static inline ssize_t mrl_read_outcome(struct mrl_ep *ep, int rail, ssize_t n)
{
	if (n == -FI_EAVAIL) {
		mrl_read_err(ep, rail);
		return -FI_EAGAIN;
	}
	return n > 0 ? n : 0;
}

/*
 * A busy read: whether it found anything (an error entry counts) tells
 * the engine who the limit is.
 */
static inline __attribute__((always_inline))
ssize_t mrl_read_rail(struct mrl_ep *ep, int rail, struct fi_cq_tagged_entry *e,
		      fi_addr_t *src)
{
	bool busy = ep->engine.busy & (1u << rail);
	ssize_t n = mrl_read_outcome(ep, rail, mrl_read_core(ep, rail, e, src));

	if (busy)
		mrl_engine_rail_read(&ep->engine, rail, n != 0);
	return n;
}

/* The fast path's chunk, back fine: nearly every entry of a busy rail. */
static inline struct mrl_chunk *
mrl_whole_chunk(const struct fi_cq_tagged_entry *e)
{
	struct mrl_req_hdr *hdr = e->op_context;

	if (!hdr || (e->flags & (FI_REMOTE_WRITE | FI_REMOTE_READ)) ||
	    hdr->kind != MRL_REQ_CHUNK || !((struct mrl_chunk *) hdr)->whole)
		return NULL;
	return (struct mrl_chunk *) hdr;
}

/*
 * mrl_whole_to_reader's loop, the CQ's format a constant in each copy:
 * each entry's chunk back to the engine, its op completed into the
 * reader's buffer.  Nothing else takes or gives requests or chunks
 * meanwhile: both free stacks' tops stay in registers (the runs).
 */
static inline __attribute__((always_inline))
ssize_t mrl_whole_out(struct mrl_ep *ep, struct mrl_cq *cq,
		      const struct fi_cq_tagged_entry *e, ssize_t n,
		      struct mrl_returns *back, enum fi_cq_format format,
		      size_t size)
{
	struct mrl_engine_run chunks;
	struct mrl_rma_run ops;
	struct mrl_chunk *chunk;
	ssize_t i;

	if (n > (ssize_t) mrl_cq_direct_room(cq))
		n = mrl_cq_direct_room(cq);
	mrl_engine_run_begin(&ep->engine, &chunks);
	mrl_rma_run_begin(ep, cq, &ops, format, size);
	for (i = 0; i < n; i++) {
		chunk = mrl_whole_chunk(&e[i]);
		if (!chunk)
			break;
		mrl_rma_complete(ep, mrl_engine_run_back(&chunks, chunk, back),
				 0, &ops);
	}
	mrl_engine_run_end(&ep->engine, &chunks);
	mrl_rma_run_end(ep, cq, &ops, i);
	return i;
}

/*
 * The fast path's completions straight to the user's read:
 * from e on, while each entry is a whole chunk back fine and the reader's
 * buffer has room, its op's entry goes there.  What mrl_rma_complete and
 * mrl_cq_write ask of each entry is asked once for the run: an RMA op's
 * completion is a tx CQ entry alone (rma_cq_only), that CQ is being read,
 * and no source is asked for (a tx entry has none: the general way writes
 * FI_ADDR_NOTAVAIL).  How many entries it took, in order; the rest go the
 * general way, the credit of these in back as theirs.
 */
static inline __attribute__((always_inline))
ssize_t mrl_whole_to_reader(struct mrl_ep *ep,
			    const struct fi_cq_tagged_entry *e, ssize_t n,
			    struct mrl_returns *back)
{
	struct mrl_cq *cq = ep->tx_cq;

	if (!ep->rma_cq_only || !mrl_cq_direct_room(cq))
		return 0;
	switch (mrl_cq_format(cq)) {
	case FI_CQ_FORMAT_CONTEXT:
		return mrl_whole_out(ep, cq, e, n, back, FI_CQ_FORMAT_CONTEXT,
				     sizeof(struct fi_cq_entry));
	case FI_CQ_FORMAT_MSG:
		return mrl_whole_out(ep, cq, e, n, back, FI_CQ_FORMAT_MSG,
				     sizeof(struct fi_cq_msg_entry));
	case FI_CQ_FORMAT_DATA:
		return mrl_whole_out(ep, cq, e, n, back, FI_CQ_FORMAT_DATA,
				     sizeof(struct fi_cq_data_entry));
	default:
		return mrl_whole_out(ep, cq, e, n, back, FI_CQ_FORMAT_TAGGED,
				     sizeof(struct fi_cq_tagged_entry));
	}
}

static void mrl_drain_others(struct mrl_ep *ep);

/*
 * A batch of rail's completions handed on in order.  The whole chunks'
 * ops complete as they come; their rail's credit comes back once, before
 * any other entry (which may read or move it) and at the end.  With
 * msg_last (rail 0's batches), a message waits for every other rail: see
 * mrl_rail0_batches.
 */
static void mrl_dispatch_all(struct mrl_ep *ep, int rail,
			     struct fi_cq_tagged_entry *e, fi_addr_t *src,
			     ssize_t n, bool msg_last)
{
	struct mrl_returns back = { 0, 0 };
	bool with_src = mrl_reads_src(ep, rail);
	struct mrl_chunk *chunk;
	ssize_t i;

	for (i = 0; i < n; i++) {
		i += mrl_whole_to_reader(ep, &e[i], n - i, &back);
		if (i == n)
			break;
		chunk = mrl_whole_chunk(&e[i]);
		if (chunk) {
			mrl_rma_done(ep, mrl_engine_whole_back(&ep->engine,
							       chunk, &back),
				     0);
			continue;
		}
		mrl_engine_returned(&ep->engine, rail, &back);
		if (msg_last && (e[i].flags & FI_RECV)) {
			mrl_drain_others(ep);
			msg_last = false;
		}
		mrl_dispatch(ep, rail, &e[i],
			     with_src ? src[i] : FI_ADDR_NOTAVAIL, 0, NULL);
	}
	mrl_engine_returned(&ep->engine, rail, &back);
}

static void mrl_progress_rail(struct mrl_ep *ep, int rail, bool drain)
{
	struct fi_cq_tagged_entry e[MRL_CQ_BATCH];
	fi_addr_t src[MRL_CQ_BATCH];
	int rounds = MRL_CQ_ROUNDS;
	ssize_t n;

	while (rounds--) {
		n = mrl_read_rail(ep, rail, e, src);
		mrl_dispatch_all(ep, rail, e, src, n, false);
		if (!mrl_read_on(ep, n, drain))
			return;
	}
}

/* Every how many calls with work due one idle rail is read too. */
#define MRL_IDLE_READ_EVERY	8
/* Calls that read rail 0 after an inject (the core may hold it queued). */
#define MRL_RAIL0_READS_AFTER_INJECT		16

void mrl_ep_read_rail0_soon(struct mrl_ep *ep)
{
	ep->rail0_reads_due = MRL_RAIL0_READS_AFTER_INJECT;
}

/* The idle rail whose turn it is. */
static inline int mrl_idle_turn(struct mrl_ep *ep)
{
	int rail = ep->poll_next;

	ep->poll_next = rail + 1 == ep->nrails ? 0 : rail + 1;
	return rail;
}

static inline uint32_t mrl_idle_rail(struct mrl_ep *ep)
{
	return 1u << mrl_idle_turn(ep);
}

/* mrl_rails_due after an inject, or while rails connect: off the empty poll. */
static uint32_t
mrl_rails_due_rare(struct mrl_ep *ep, uint32_t due)
{
	if (ep->ctrl_backlog)		/* rails still connecting */
		return mrl_rail_mask(ep->nrails);
	ep->rail0_reads_due--;
	due |= 1u;
	if (!(++ep->poll_calls % MRL_IDLE_READ_EVERY))
		due |= mrl_idle_rail(ep);
	return due;
}

/*
 * The rails this call reads: those the engine or other requests (fences,
 * probes, control sends, and on rail 0 messages) wait on, rail 0 after an
 * inject, every rail while control sends wait for connections, and one
 * more by rotation: remote events, a peer's messages and its connections
 * arrive unasked.  An idle endpoint reads one rail per call; a busy
 * one an idle rail every MRL_IDLE_READ_EVERY calls.
 */
static inline uint32_t mrl_rails_due(struct mrl_ep *ep)
{
	uint32_t due = ep->engine.busy | ep->nonchunk_busy;

	if (ep->rail0_reads_due || ep->ctrl_backlog)
		return mrl_rails_due_rare(ep, due);
	if (!due || !(++ep->poll_calls % MRL_IDLE_READ_EVERY))
		due |= mrl_idle_rail(ep);
	return due;
}

/* Every other rail to the end, before a message on rail 0: see below. */
static void mrl_drain_others(struct mrl_ep *ep)
{
	uint32_t rails = mrl_rail_mask(ep->nrails) & ~1u;

	for (; rails; rails &= rails - 1)
		mrl_progress_rail(ep, __builtin_ctz(rails), true);
}

/*
 * Rail 0's batch e (n), then its next ones.  Rail 0 carries the messages,
 * and a message sent after writes on other rails waits for them to land
 * (mrl_fence.c): their remote CQ data was in those rails' core CQs before
 * the message was in rail 0's.  So when rail 0's batch holds a message,
 * every other rail is read to the end (as far as MRL_CQ_ROUNDS goes) and
 * handed on before the message, whether or not the reader takes it all:
 * the user sees the data before the message, also where the core
 * progresses on its own between our reads.  (The batch's entries before
 * the message, rail 0's own, may go first.)
 */
static void mrl_rail0_batches(struct mrl_ep *ep, struct fi_cq_tagged_entry *e,
			      fi_addr_t *src, ssize_t n)
{
	int rounds = MRL_CQ_ROUNDS;

	for (;;) {
		mrl_dispatch_all(ep, 0, e, src, n, true);
		if (!mrl_read_on(ep, n, false) || !--rounds)
			return;
		n = mrl_read_rail(ep, 0, e, src);
	}
}

/*
 * Several rails due: each read in turn, from the one after the rail where
 * a full reader stopped the last call, so that no rail waits behind others
 * that keep filling the reader (rail 0 included: its batch is read where
 * its turn comes).
 */
static void mrl_read_due(struct mrl_ep *ep, uint32_t due,
			 struct fi_cq_tagged_entry *e, fi_addr_t *src)
{
	uint32_t idle = due & ~(ep->engine.busy | ep->nonchunk_busy) & ~1u;
	uint32_t first, rails;
	int pass, r;

	/*
	 * An idle rail first: its turn comes once in many calls, and what it
	 * holds (a peer's RAIL_UP, its connection) must not wait behind busy
	 * rails that fill the reader every time.
	 */
	for (; idle; idle &= idle - 1) {
		r = __builtin_ctz(idle);
		mrl_progress_rail(ep, r, false);
		due &= ~(1u << r);
	}
	first = due & (~0u << ep->read_turn);
	for (pass = 0; pass < 2; pass++) {
		for (rails = pass ? due & ~first : first; rails;
		     rails &= rails - 1) {
			r = __builtin_ctz(rails);
			if (r)
				mrl_progress_rail(ep, r, false);
			else
				mrl_rail0_batches(ep, e, src,
						  mrl_read_rail(ep, 0, e, src));
			if (mrl_reader_full(ep)) {
				ep->read_turn = r + 1 < ep->nrails ? r + 1 : 0;
				return;
			}
		}
	}
}

/*
 * A first batch (n, or -FI_EAGAIN after an error entry) read from the one
 * rail due: handed on, and the rail read on while it gives full batches.
 */
static void mrl_rail_batches(struct mrl_ep *ep, int rail,
			     struct fi_cq_tagged_entry *e, fi_addr_t *src,
			     ssize_t n)
{
	if (!rail) {
		mrl_rail0_batches(ep, e, src, n);
		return;
	}
	mrl_dispatch_all(ep, rail, e, src, n, false);
	if (mrl_read_on(ep, n, false))
		mrl_progress_rail(ep, rail, false);
}

/* The rare work is due: see mrl_progress_end. */
static inline bool mrl_rest_due(const struct mrl_ep *ep)
{
	return ep->health_left <= 0 || ep->ctrl_backlog || ep->write_data_wait ||
	       !mrl_list_empty(&ep->engine.pending) || ep->unreachable_due ||
	       mrl_pkt_work_due(ep);
}

/* What progress does less often than every call: see mrl_progress_end. */
static void mrl_progress_rest(struct mrl_ep *ep)
{
	if (ep->health_left <= 0)
		mrl_health_tick(ep);
	if (ep->av && ep->av->hello_due)
		mrl_connect_hello_partial(ep);
	if (ep->ctrl_backlog)
		mrl_ctrl_progress(ep);
	if (ep->write_data_wait)
		mrl_rma_write_data_waiting(ep);
	mrl_engine_progress(&ep->engine);
	if (ep->unreachable_due)
		mrl_health_fail_unreachable(ep);
	if (mrl_pkt_work_due(ep))
		mrl_pkt_progress(ep);
}

/*
 * Every progress call ends here, the call counted for the health tick: the
 * rare work when due (a HELLO due waits for the tick: off the empty poll).
 */
static inline void mrl_progress_end(struct mrl_ep *ep)
{
	if (mrl_rest_due(ep))
		mrl_progress_rest(ep);
	ep->progress_held = false;
}

/*
 * Domain locked.  Reads the rails due and hands on what they hold; the
 * common case reads one rail.  A quiet endpoint's polls do the same in
 * fewer steps, under a lease (struct mrl_lease), which ends here.
 */
void mrl_ep_progress(struct mrl_ep *ep)
{
	mrl_assert_locked(ep->domain);
	struct fi_cq_tagged_entry e[MRL_CQ_BATCH];
	fi_addr_t src[MRL_CQ_BATCH];
	uint32_t due;
	ssize_t n;
	int rail;

	mrl_ep_lease_end(ep);
	if (ep->progress_held)
		return;
	ep->progress_held = true;
	due = mrl_rails_due(ep);
	if (!(due & (due - 1))) {
		rail = __builtin_ctz(due);
		n = mrl_read_rail(ep, rail, e, src);
		if (n)
			mrl_rail_batches(ep, rail, e, src, n);
	} else {
		mrl_read_due(ep, due, e, src);
	}
	ep->health_left--;
	mrl_progress_end(ep);
}

/*
 * Nothing of ours in flight on any rail and nothing due, so a progress
 * call would only read one idle rail by rotation (mrl_rails_due); the health
 * tick is not due either.
 */
static inline bool mrl_quiet(const struct mrl_ep *ep)
{
	return !(ep->engine.busy | ep->nonchunk_busy) && !ep->rail0_reads_due &&
	       !ep->progress_held && ep->health_left > 1 && !mrl_rest_due(ep);
}

/* ep's CQs that it feeds alone, unlocked (mrl_cq.c's lean CQs). */
static int mrl_lean_cqs(struct mrl_ep *ep, struct mrl_cq *cqs[2])
{
	int n = 0;

	if (ep->tx_cq && mrl_cq_lean_ep(ep->tx_cq) == ep)
		cqs[n++] = ep->tx_cq;
	if (ep->rx_cq && ep->rx_cq != ep->tx_cq &&
	    mrl_cq_lean_ep(ep->rx_cq) == ep)
		cqs[n++] = ep->rx_cq;
	return n;
}

/*
 * A lean CQ's poll found nothing: if ep is quiet, its lean CQs' next
 * polls, to the health tick, are leased (struct mrl_lease).  The tick's
 * count waits in the leases meanwhile: mrl_ep_lease_give_back.
 */
void mrl_ep_lease_offer(struct mrl_ep *ep)
{
	struct mrl_cq *cqs[2];
	int i, n;

	if (!mrl_quiet(ep) || ep->want_src || ep->lease_off ||
	    !mrl_cq_is_empty(ep->tx_cq) || !mrl_cq_is_empty(ep->rx_cq))
		return;
	n = mrl_lean_cqs(ep, cqs);
	if (!n)
		return;
	for (i = 0; i < n; i++)
		mrl_cq_lease_grant(cqs[i], &ep->idle_cycle[ep->poll_next],
				   ep->health_left - 1);
	ep->health_left = 1;
	ep->leased = true;
}

/*
 * The leases end: the tick's count and the idle turn come back from them
 * (with two CQs leased, the one polled more counts).
 */
void mrl_ep_lease_give_back(struct mrl_ep *ep)
{
	struct mrl_cq *cqs[2];
	int i, n = mrl_lean_cqs(ep, cqs), left = -1, l;
	struct mrl_ep_rail *next = NULL;

	for (i = 0; i < n; i++) {
		l = mrl_cq_lease_take_back(cqs[i], &next);
		if (left < 0 || l < left) {
			left = l;
			if (next)
				ep->poll_next = (int) (next - ep->rails);
		}
	}
	if (left > 0)
		ep->health_left += left;
	ep->leased = false;
}

/*
 * A leased poll's core read of rail found something (n: entries, or an
 * error): the lease has ended, and the batch is handed on as progress
 * would.  The leased poll counted for the tick.
 */
void mrl_ep_progress_found(struct mrl_ep *ep, struct mrl_ep_rail *r,
			   struct fi_cq_tagged_entry *e, fi_addr_t *src,
			   ssize_t n)
{
	int rail = (int) (r - ep->rails);

	mrl_assert_locked(ep->domain);
	if (n == -FI_ENOSYS) {
		MRL_WARN(FI_LOG_CQ, "rail %d's core has no fi_cq_readfrom: "
			 "no leased polls for this endpoint\n", rail);
		ep->lease_off = true;
		mrl_ep_progress(ep);
		return;
	}
	ep->progress_held = true;
	n = mrl_read_outcome(ep, rail, n);
	if (n)
		mrl_rail_batches(ep, rail, e, src, n);
	mrl_progress_end(ep);
}

/* ---- injects, passed whole to rail 0 ------------------------------------ */

bool mrl_inject_fits(const struct mrl_ep *ep, size_t len)
{
	if (len <= ep->domain->inject_size)
		return true;
	MRL_WARN(FI_LOG_EP_DATA, "inject of %zu bytes > inject_size %zu\n",
		 len, ep->domain->inject_size);
	return false;
}

/*
 * After the core's inject: no completion will follow, so the counter
 * counts it now; a refusal progresses so that the caller's retry can pass.
 * Domain locked.
 */
ssize_t mrl_inject_posted(struct mrl_ep *ep, struct mrl_cntr *cntr,
			  ssize_t ret)
{
	mrl_assert_locked(ep->domain);
	if (!ret) {
		mrl_cntr_inc(cntr);
		mrl_ep_read_rail0_soon(ep);
	} else if (ret == -FI_EAGAIN)
		mrl_ep_progress(ep);
	return ret;
}

/*
 * A send, or an op sent whole on rail 0, waits for the user's writes still
 * travelling on other rails to the same peer (mrl_fence.c), so "write,
 * complete, send" keeps its meaning across rails; while it waits, progress
 * runs so that the caller's retry can pass.  Domain locked.
 */
int mrl_fence_progress(struct mrl_ep *ep, struct mrl_peer *peer)
{
	mrl_assert_locked(ep->domain);
	int ret = peer ? mrl_fence_before_send(ep, peer) : 0;

	if (ret == -FI_EAGAIN)
		mrl_ep_progress(ep);
	return ret;
}
