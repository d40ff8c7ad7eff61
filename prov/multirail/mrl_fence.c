/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Send-after-write fences.
 *
 * Applications write, wait for the writes' completions, and then send a
 * message saying "done".  Over one core connection the message cannot
 * overtake the writes; over several rails it can: the message goes on
 * rail 0, the writes went on every rail.  Instead of making every chunk
 * on rails 1..n delivery-complete (a round trip per chunk, which a small
 * window cannot hide), writes complete as the core completes them, each
 * rail written to a peer is marked dirty, and a send to that peer first
 * flushes the dirty rails: a zero-byte FI_DELIVERY_COMPLETE write behind
 * the data on each (the core keeps one rail's operations to a peer in
 * order), and the send answers -FI_EAGAIN until they completed.
 *
 * shm carries a delivery-complete write in its segmented (SAR) protocol,
 * which in libfabric 1.17 never completes one of zero bytes.  shm runs a
 * peer's commands in order (FI_ORDER_RAW in its fi_info, though its util
 * layer echoes only the orders a hint asked for), so there the flush is a
 * zero-byte read, which completes once the writes before it ran.
 *
 * Writes with CQ data do not rely on this: their body chunks are
 * delivery-complete (mrl_rma.c).
 *
 * A rail that fails may take completed writes with it: a transmit-complete
 * write over tcp has only reached the socket.  The send that follows them
 * must then not arrive as if they had landed.  When a rail goes out of
 * service for a peer with writes unflushed, the next send's fence there
 * decides: it completes (they landed; the send goes), or it fails, stays
 * stuck past FI_MULTIRAIL_RAIL_TIMEOUT_MS from when the rail went out or
 * the fence was posted, whichever is later, or cannot be posted (they are
 * lost: the send fails with -FI_EIO, the loss is warned of and counted,
 * and the sends after it go on).  A rail taken out for being slow (32
 * connections starting on a loaded host) still completes its fence: no
 * send fails for it.
 */
#include <stdlib.h>

#include "mrl.h"

/* A peer's fence requests, one per rail, come with its first fence. */
static struct mrl_fence *mrl_fence_req(struct mrl_ep *ep, struct mrl_peer *peer,
				       int rail)
{
	if (!peer->fence.req)
		peer->fence.req = calloc(ep->nrails, sizeof(*peer->fence.req));
	return peer->fence.req ? &peer->fence.req[rail] : NULL;
}

/*
 * A zero-byte flush of rail to dest, ctx its context: a delivery-complete
 * write to addr/key, or a read where a write cannot flush (read).  Fences,
 * health probes and the flush behind a writedata's WRITE_DATA send one.
 */
ssize_t mrl_post_zero_rma(struct mrl_ep *ep, int rail, fi_addr_t dest,
			  struct mrl_req_hdr *ctx, uint64_t addr, uint64_t key,
			  bool read)
{
	struct fi_rma_iov rma = { .addr = addr, .len = 0, .key = key };
	struct fi_msg_rma msg = {
		.addr = dest, .rma_iov = &rma, .rma_iov_count = 1,
		.context = ctx,
	};

	return read ? fi_readmsg(ep->rails[rail].ep, &msg, FI_COMPLETION) :
		      fi_writemsg(ep->rails[rail].ep, &msg,
				  FI_COMPLETION | FI_DELIVERY_COMPLETE);
}

ssize_t mrl_fence_post_zero(struct mrl_ep *ep, struct mrl_peer *peer,
			    int rail, struct mrl_fence *req,
			    enum mrl_req_kind kind, uint64_t addr,
			    uint64_t key, bool read)
{
	req->hdr.kind = kind;
	req->peer = peer;
	req->rail = rail;
	return mrl_post_zero_rma(ep, rail, peer->rail[rail].core_addr,
				 &req->hdr, addr, key, read);
}

static int mrl_post_fence(struct mrl_ep *ep, struct mrl_peer *peer, int rail)
{
	struct mrl_peer_fence *f = &peer->fence;
	struct mrl_fence *req = mrl_fence_req(ep, peer, rail);
	bool path;
	ssize_t ret;

	if (!req)
		return -FI_EAGAIN;	/* no memory: the send tries again */
	ret = mrl_fence_post_zero(ep, peer, rail, req, MRL_REQ_FENCE,
				  peer->rail[rail].fence_addr,
				  peer->rail[rail].fence_key,
				  ep->domain->fence_by_read);
	if (!ret) {
		mrl_nonchunk_posted(ep, rail);
		ep->rails[rail].fences++;
		f->dirty &= ~mrl_rail_bit(rail);
		f->inflight |= mrl_rail_bit(rail);
		if (f->suspect & mrl_rail_bit(rail))	/* its deadline starts now */
			f->suspect_since_ns = ep->now_ns;
		mrl_health_posted(peer, rail);
	} else if (ret == -FI_EAGAIN) {
		/* a rail that refuses every flush is taken out after the
		 * deadline, as for chunks; a suspect one is lost then */
		mrl_health_refused(ep, peer, rail);
	} else if (((path = mrl_health_post_failed(ep, peer, rail,
						   (int) ret)) ||
		    (f->suspect & mrl_rail_bit(rail))) &&
		   !ep->domain->acked_writes) {
		/* a path error: the connection is gone, and its bytes */
		mrl_fence_lost(peer, rail, !path);
	} else {
		/* the core cannot flush: the send goes on unordered */
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "rail %d: fence write: %s\n",
			      rail, fi_strerror((int) -ret));
		f->dirty &= ~mrl_rail_bit(rail);
	}
	return (int) ret;
}

/*
 * Writes on rail to peer completed and may not have landed: the next send
 * to peer fails.  A fence still in flight there is left to the core; no
 * send waits for it.  may_land: the connection may still deliver them
 * (a deadline passed; not a core's error), so the rail turns stale.
 */
void mrl_fence_lost(struct mrl_peer *peer, int rail, bool may_land)
{
	struct mrl_peer_fence *f = &peer->fence;
	uint32_t b = mrl_rail_bit(rail);

	if (may_land)
		f->stale |= b;
	if (f->lost & b)
		return;
	f->lost |= b;
	f->abandoned |= f->inflight & b;
	f->suspect &= ~b;
	f->dirty &= ~b;
	if (!f->suspect)
		f->suspect_since_ns = 0;
	if (f->owner)
		f->owner->rails[rail].losses++;
}

/*
 * rail went out of service for peer.  Unflushed writes there, and those a
 * fence in flight covers, become suspect (see the top).  Where a completed
 * write has landed (efa), none is lost and no send waits for the rail.
 */
void mrl_fence_rail_down(struct mrl_ep *ep, struct mrl_peer *peer, int rail)
{
	struct mrl_peer_fence *f = &peer->fence;
	uint32_t b = mrl_rail_bit(rail);

	if (ep->domain->acked_writes) {
		f->abandoned |= f->inflight & b;
		f->dirty &= ~b;
	} else if ((f->dirty | f->inflight) & b & ~f->abandoned) {
		f->suspect |= b;
		f->suspect_since_ns = ep->now_ns;
	}
}

/*
 * rail's connection to peer was reset (mrl_reset.c): its socket's queue
 * is gone, so writes there not yet seen to land never will.  The fence
 * in flight there comes back failed from the core.
 */
void mrl_fence_conn_reset(struct mrl_ep *ep, struct mrl_peer *peer, int rail)
{
	struct mrl_peer_fence *f = &peer->fence;
	uint32_t b = mrl_rail_bit(rail);

	if ((f->owner == ep || !f->owner) &&
	    ((f->dirty | f->suspect | f->inflight) & b & ~f->abandoned))
		mrl_fence_lost(peer, rail, false);
}

/*
 * A transmit-complete writedata's WRITE_DATA went on rail and its flush
 * failed: the message may be lost with the rail.  The next send or
 * writedata to peer fails, as for a write lost there.
 */
void mrl_fence_data_lost(struct mrl_ep *ep, struct mrl_peer *peer, int rail)
{
	struct mrl_peer_fence *f = &peer->fence;

	if (f->owner && f->owner != ep)
		return;		/* another endpoint's sends: not ours to fail */
	f->owner = ep;
	mrl_fence_lost(peer, rail, false);
	MRL_WARN(FI_LOG_EP_DATA, "rail %d: a writedata's CQ data went and was "
		 "not seen to arrive: the next send or writedata to the peer "
		 "fails\n", rail);
}

/* The send that learns of a loss fails; the sends after it go on. */
static int mrl_fence_report_loss(struct mrl_ep *ep, struct mrl_peer *peer)
{
	MRL_WARN(FI_LOG_EP_DATA, "writes to this peer completed on rails "
		 "0x%x, which failed before the writes were seen to land: "
		 "the send that follows them fails (-FI_EIO) instead of "
		 "arriving without them\n", peer->fence.lost);
	peer->fence.lost = 0;
	peer->fence.tainted = false;	/* this failure covers them */
	ep->lost_sends++;
	return -FI_EIO;
}

/*
 * A writedata's WRITE_DATA about to go: where writes or CQ data to the
 * peer were lost after its post-time check passed, it fails (-FI_EIO) as
 * that check would have; else 0.  The loss stays to be reported by the
 * next send or writedata posted: it may be of writes posted after this
 * one, whose landing that op's message tells.
 */
int mrl_fence_lost_since(struct mrl_ep *ep, const struct mrl_peer *peer)
{
	return peer->fence.owner == ep && peer->fence.lost ? -FI_EIO : 0;
}

/*
 * Writes went to the peer while bytes of a failed rail could still land
 * over them: the send that would tell of them fails as well.  Warned at
 * the first such send after each loss; each counts in lost_sends.
 */
static int mrl_fence_report_taint(struct mrl_ep *ep, struct mrl_peer *peer)
{
	struct mrl_peer_fence *f = &peer->fence;

	if (!f->taint_warned) {
		MRL_WARN(FI_LOG_EP_DATA, "writes to this peer went out while "
			 "bytes lost with a failed rail could still land over "
			 "them: the sends that follow such writes fail "
			 "(-FI_EIO) until that rail answers or its connection "
			 "dies\n");
		f->taint_warned = true;
	}
	f->tainted = false;
	ep->lost_sends++;
	return -FI_EIO;
}

/*
 * Nothing lost on rail to peer can land any more: a probe passed there
 * (behind those bytes on the same connection), the core failed an op
 * there (the connection died with them), or the abandoned fence came back.
 */
static void mrl_fence_unstale(struct mrl_peer_fence *f, int rail)
{
	f->stale &= ~mrl_rail_bit(rail);
	if (!f->stale)
		f->taint_warned = false;
}

void mrl_fence_settled(struct mrl_peer *peer, int rail)
{
	mrl_fence_unstale(&peer->fence, rail);
}

/*
 * Suspect rails whose fences have not answered within the deadline (from
 * the latest of: a rail going out, a fence posted on a suspect rail, or
 * the send's first wait) have lost their writes.  With the deadline off
 * (FI_MULTIRAIL_RAIL_TIMEOUT_MS=0) the core's verdict is awaited.
 */
static void mrl_fence_suspects_due(struct mrl_ep *ep, struct mrl_peer *peer)
{
	struct mrl_peer_fence *f = &peer->fence;
	uint64_t now = ep->now_ns;	/* the health tick's: a waiting send
					 * progresses, so it moves */
	uint32_t due;

	if (!mrl_params.rail_timeout_ms)
		return;
	if (!f->suspect_since_ns) {
		f->suspect_since_ns = now;
		return;
	}
	if (now - f->suspect_since_ns <=
	    (uint64_t) mrl_params.rail_timeout_ms * 1000000ull)
		return;
	for (due = f->suspect; due; due &= due - 1)
		mrl_fence_lost(peer, __builtin_ctz(due), true);
}

/*
 * A rail written again while a fence no send waits for is still in flight
 * there: its request is the rail's one, so the new writes' fence waits for
 * it; the rail turns suspect, so that a fence the core never returns fails
 * the send after the deadline instead of holding it for ever.
 */
static void mrl_fence_behind_abandoned(struct mrl_ep *ep,
				       struct mrl_peer_fence *f)
{
	uint32_t held = f->dirty & f->inflight & f->abandoned & ~f->suspect;

	if (!held)
		return;
	if (!f->suspect)
		f->suspect_since_ns = ep->now_ns;
	f->suspect |= held;
}

/*
 * 0: nothing of ep's is in flight on other rails to peer, send now.
 * -FI_EAGAIN: fences are posted or in flight; progress and retry.
 */
int mrl_fence_before_send(struct mrl_ep *ep, struct mrl_peer *peer)
{
	struct mrl_peer_fence *f = &peer->fence;
	int rail;

	mrl_assert_locked(ep->domain);
	if (f->owner != ep || !(f->dirty | f->inflight | f->lost | f->tainted))
		return 0;
	if (f->tainted && !f->lost)
		return mrl_fence_report_taint(ep, peer);
	for (rail = 1; !f->lost && rail < ep->nrails; rail++) {
		if ((f->dirty & mrl_rail_bit(rail)) &&
		    !(f->inflight & mrl_rail_bit(rail)))
			mrl_post_fence(ep, peer, rail);
	}
	mrl_fence_behind_abandoned(ep, f);
	if (f->suspect && !f->lost)
		mrl_fence_suspects_due(ep, peer);
	if (f->lost)
		return mrl_fence_report_loss(ep, peer);
	/* a rail dirty again behind an abandoned fence waits for it: its
	 * request is the rail's one */
	return (f->dirty | (f->inflight & ~f->abandoned)) ? -FI_EAGAIN : 0;
}

void mrl_fence_done(struct mrl_ep *ep, struct mrl_fence *fence, int err)
{
	struct mrl_peer_fence *f = &fence->peer->fence;
	uint32_t b = mrl_rail_bit(fence->rail);

	f->inflight &= ~b;
	ep->rails[fence->rail].fences--;
	ep->rails[fence->rail].fences_done++;
	if (f->abandoned & b) {
		/* no send waits for it; either way, nothing it followed can
		 * land any more: it did, or the connection died with it */
		f->abandoned &= ~b;
		mrl_fence_unstale(f, fence->rail);
		return;
	}
	if (!err) {
		f->suspect &= ~b;	/* they landed */
		if (!f->suspect)
			f->suspect_since_ns = 0;
		return;
	}
	MRL_WARN_ONCE(FI_LOG_EP_DATA, "rail %d: fence failed: %s\n",
		      fence->rail, fi_strerror(-err));
	if (err != -FI_ECANCELED && !ep->domain->acked_writes)
		mrl_fence_lost(fence->peer, fence->rail, false);
}

/* ep is closing: its fences were flushed or cancelled with its rails. */
void mrl_fence_forget_ep(struct mrl_ep *ep, struct mrl_peer *peer)
{
	struct mrl_fence *req = peer->fence.req;

	if (peer->fence.owner == ep) {
		memset(&peer->fence, 0, sizeof(peer->fence));
		peer->fence.req = req;	/* the peer's, kept for the next */
	}
}

/* The peer goes (mrl_av.c): its flush requests with it. */
void mrl_fence_forget_peer(struct mrl_peer *peer)
{
	free(peer->fence.req);
	peer->fence.req = NULL;
}
