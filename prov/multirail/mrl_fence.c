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
 */
#include "mrl.h"

static uint32_t bit(int rail)
{
	return 1u << rail;
}

static int post_fence(struct mrl_ep *ep, struct mrl_peer *peer, int rail)
{
	struct mrl_peer_fence *f = &peer->fence;
	struct mrl_fence *req = &f->req[rail];
	struct fi_rma_iov rma = { .addr = f->addr[rail], .len = 0,
				  .key = f->key[rail] };
	struct fi_msg_rma msg = {
		.msg_iov = NULL, .desc = NULL, .iov_count = 0,
		.addr = peer->core_addr[rail], .rma_iov = &rma,
		.rma_iov_count = 1, .context = &req->hdr,
	};
	ssize_t ret;

	req->hdr.kind = MRL_REQ_FENCE;
	req->peer = peer;
	req->rail = rail;
	ret = ep->domain->fence_by_read ?
	      fi_readmsg(ep->rails[rail].ep, &msg, FI_COMPLETION) :
	      fi_writemsg(ep->rails[rail].ep, &msg,
			  FI_COMPLETION | FI_DELIVERY_COMPLETE);
	if (!ret) {
		mrl_side_posted(ep, rail);
		ep->rails[rail].fences++;
		f->dirty &= ~bit(rail);
		f->inflight |= bit(rail);
		mrl_health_posted(peer, rail);
	} else if (ret == -FI_EAGAIN) {
		/* a rail that refuses every flush is taken out after the
		 * deadline, as for chunks; then the send goes on */
		mrl_health_refused(ep, peer, rail);
	} else {
		/* the core cannot flush: the send goes on unordered */
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "rail %d: fence write: %s\n",
			      rail, fi_strerror((int) -ret));
		f->dirty &= ~bit(rail);
	}
	return (int) ret;
}

/*
 * 0: nothing of ep's is in flight on other rails to peer, send now.
 * -FI_EAGAIN: fences are posted or in flight; progress and retry.
 */
int mrl_fence_before_send(struct mrl_ep *ep, struct mrl_peer *peer)
{
	struct mrl_peer_fence *f = &peer->fence;
	int rail;

	if (f->owner != ep || !(f->dirty | f->inflight))
		return 0;
	for (rail = 1; rail < ep->nrails; rail++) {
		if ((f->dirty & bit(rail)) && !(f->inflight & bit(rail)))
			post_fence(ep, peer, rail);
	}
	return (f->dirty | f->inflight) ? -FI_EAGAIN : 0;
}

void mrl_fence_done(struct mrl_ep *ep, struct mrl_fence *fence, int err)
{
	if (err)
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "rail %d: fence failed: %s\n",
			      fence->rail, fi_strerror(-err));
	fence->peer->fence.inflight &= ~bit(fence->rail);
	ep->rails[fence->rail].fences--;
	ep->rails[fence->rail].fences_done++;
}

/* ep is closing: its fences were flushed or cancelled with its rails. */
void mrl_fence_forget_ep(struct mrl_ep *ep, struct mrl_peer *peer)
{
	if (peer->fence.owner == ep)
		memset(&peer->fence, 0, sizeof(peer->fence));
}
