/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * A writedata's WRITE_DATA: the control message that raises the target's
 * CQ entry once every byte of the write is visible there (docs/design.md
 * says why it cannot come early on any core), the flush behind it where a
 * core's send completion does not mean delivery, fi_inject_writedata, and
 * the target's side, which writes the entry.
 */
#include <stdlib.h>
#include <string.h>

#include "mrl.h"
#include "mrl_ctrl.h"

/*
 * A transmit-complete writedata's flush whose loss is now certain: its
 * connection was reset, or its rail has been out for the peer longer
 * than the deadline (a core may hold it for minutes).  The next send or
 * writedata to the peer fails, once: the flush's own failure, when the
 * core returns it, is not reported again.
 */
static void mrl_flush_lost(struct mrl_ep *ep, struct mrl_ctrl_buf *b)
{
	b->loss_told = true;
	mrl_fence_data_lost(ep, b->peer, b->rail);
}

/* A transmit-complete writedata's flush to peer, posted or still queued
 * (a free buffer names no peer), whose loss is not yet told */
static bool mrl_tc_flush_to(const struct mrl_ctrl_buf *b,
			    const struct mrl_peer *peer)
{
	return b->flush && b->peer == peer && !b->write_data_op && !b->loss_told;
}

/*
 * rail's connection to peer was reset (mrl_reset.c): a WRITE_DATA whose
 * flush is in flight there went down with it.  Reported now, not when
 * the core fails the flush: the core learns of the reset only when
 * progress next reaches that connection, and a send posted before that
 * would go on a new connection, as if nothing were lost.
 */
void mrl_write_data_conn_reset(struct mrl_ep *ep, struct mrl_peer *peer, int rail)
{
	struct mrl_ctrl_buf *b;
	size_t i;

	for (i = 0; i < ep->ctrl_nbufs; i++) {
		b = &ep->ctrl_bufs[i];
		if (b->rail == rail && mrl_tc_flush_to(b, peer))
			mrl_flush_lost(ep, b);
	}
}

/*
 * Is an earlier writedata's CQ data to buf's peer still unconfirmed on a
 * rail other than buf's?  Over one connection a message cannot arrive
 * after an earlier one was lost; over two it can, so a WRITE_DATA moved
 * to another rail (its own rail out of service) waits for the flushes
 * behind the earlier ones.  One out longer than the deadline counts as
 * lost (on a rail out for the peer, its reset, where the core has
 * sockets, comes sooner), so the wait is bounded; with the deadline off
 * (FI_MULTIRAIL_RAIL_TIMEOUT_MS=0) the core's verdict is awaited.
 */
static bool mrl_flush_elsewhere(struct mrl_ep *ep,
				const struct mrl_ctrl_buf *buf)
{
	uint64_t deadline = (uint64_t) mrl_params.rail_timeout_ms * 1000000u;
	struct mrl_peer *peer = buf->peer;
	struct mrl_ctrl_buf *b;
	bool wait = false;
	size_t i;
	int r;

	for (r = 0; r < ep->nrails; r++)
		if (r != buf->rail && ep->rails[r].fences)
			break;
	if (r == ep->nrails)
		return false;		/* the common case: none elsewhere */
	for (i = 0; i < ep->ctrl_nbufs; i++) {
		b = &ep->ctrl_bufs[i];
		if (b->rail == buf->rail || !mrl_tc_flush_to(b, peer))
			continue;
		if (deadline && ep->now_ns - b->flush_ns > deadline)
			mrl_flush_lost(ep, b);
		else
			wait = true;
	}
	return wait;
}

/*
 * Before a WRITE_DATA goes: 0 to send it; -FI_EAGAIN while an earlier
 * one's flush elsewhere is out (mrl_flush_elsewhere); -FI_EIO where
 * writes or CQ data to the peer were lost since the writedata was posted
 * (its check then passed), as that check would have failed it.
 */
int mrl_write_data_gate(struct mrl_ep *ep, struct mrl_ctrl_buf *buf)
{
	if (!(buf->write_data_op || buf->inject_data) || buf->flush)
		return 0;
	if (mrl_flush_elsewhere(ep, buf))
		return -FI_EAGAIN;
	return mrl_fence_lost_since(ep, buf->peer);
}

/*
 * A WRITE_DATA's send completed.  Over efa that means the peer took it;
 * over tcp only that it reached the socket, and a rail that fails then
 * loses it: the writedata completed, and its entry never comes.  So a
 * zero-byte flush follows it on its rail, to the writedata's own target
 * (a delivery-complete write, or a read where that is how the core
 * flushes), which completes once the target's core took everything
 * before it on that connection.  A writedata asked to be
 * delivery-complete completes with the flush, or fails with it.  One
 * that is transmit-complete (the default) completes now, as over the core
 * alone (its target may have taken the data and gone); if its flush then
 * fails, the message may be lost: as for a write lost with its rail, the
 * next send or writedata to the peer fails (mrl_fence.c).  The flush is
 * watched as a fence is (mrl_health.c).  False where no flush is needed,
 * or none can be aimed (no key for the rail).
 */
bool mrl_write_data_flush(struct mrl_ep *ep, struct mrl_ctrl_buf *buf)
{
	if (ep->domain->acked_writes || ep->ctrl_ep)
		return false;
	if (mrl_rma_rail_key(ep, buf->peer, buf->wd_key, buf->rail,
			     &buf->flush_key)) {
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "rail %d: no key to flush a "
			      "writedata's CQ data behind: its op completes "
			      "when the core sent it\n", buf->rail);
		return false;
	}
	buf->flush = true;
	buf->flush_ns = ep->now_ns;
	ep->rails[buf->rail].fences++;		/* the rail's watch runs */
	if (buf->write_data_op &&
	    !(buf->write_data_op->op.flags & FI_DELIVERY_COMPLETE)) {
		mrl_rma_write_data_done(ep, buf->write_data_op, 0);
		buf->write_data_op = NULL;
	} else if (buf->inject_data) {
		mrl_cntr_inc(ep->cntr_write);	/* injects are never DC */
		buf->inject_data = false;
	}
	mrl_ctrl_queue_tx(ep, buf);
	return true;
}

/* The flush behind a WRITE_DATA came back: the op completes with it. */
void mrl_write_data_flushed(struct mrl_ep *ep, struct mrl_ctrl_buf *buf,
			    int err)
{
	buf->hdr.kind = MRL_REQ_CTRL_TX;
	mrl_ctrl_sent(ep, buf, err);
}

/*
 * The peers with a writedata's flush in flight on rail, one a call from
 * *iter (0 to start); NULL after the last.  waited: only those an op
 * waits for (delivery-complete writedata): only those take a rail out of
 * service when stuck; any is reset with its rail's connection.
 */
struct mrl_peer *mrl_write_data_flushing_peer(struct mrl_ep *ep, int rail,
					      bool waited, size_t *iter)
{
	struct mrl_ctrl_buf *b;

	while (*iter < ep->ctrl_nbufs) {
		b = &ep->ctrl_bufs[(*iter)++];
		if (b->hdr.kind == MRL_REQ_DATA_FLUSH && b->rail == rail &&
		    (b->write_data_op || !waited))
			return b->peer;
	}
	return NULL;
}

/*
 * Writedata.  The target's CQ entry for an fi_writedata comes from a
 * WRITE_DATA that the initiator sends once every byte of the write is
 * visible at the target (its chunks completed delivery-complete; over
 * efa-direct, which ignores that flag, RDMA completions): so the entry
 * cannot come before any byte, on a core with no ordering at all, and
 * carries the whole write's length and the user's data, whatever the
 * core would report.  It is sent once: a send that fails fails the op.
 */
static void mrl_compose_write_data(struct mrl_ep *ep, struct mrl_ctrl_buf *buf,
				   struct mrl_peer *peer, size_t len,
				   uint64_t data)
{
	struct mrl_ctrl_data d = { .len = len, .data = data };
	struct mrl_ctrl_msg *msg;

	msg = mrl_ctrl_compose(ep, buf, peer, mrl_ctrl_question_rail(ep, peer),
			       MRL_CTRL_WRITE_DATA, sizeof(d));
	memcpy(msg->payload + ep->namelen, &d, sizeof(d));
}

/* 0 when sent or queued; -FI_EAGAIN while every buffer is taken. */
int mrl_write_data_send(struct mrl_ep *ep, struct mrl_rma_req *req)
{
	struct mrl_peer *peer = req->op.peer;
	struct mrl_ctrl_buf *buf;
	int ret = mrl_ctrl_can_send(ep, peer, sizeof(struct mrl_ctrl_data));

	if (ret)
		return ret;
	buf = mrl_ctrl_take_tx(ep);
	mrl_compose_write_data(ep, buf, peer, req->op.len, req->op.data);
	buf->write_data_op = req;
	buf->wd_addr = req->op.raddr;
	buf->wd_key = mrl_rma_req_key(req);
	mrl_ctrl_queue_tx(ep, buf);
	return 0;
}

/* An inject's bytes landed from buf: buf now carries its WRITE_DATA. */
void mrl_write_data_after_bounce(struct mrl_ep *ep, struct mrl_ctrl_buf *buf)
{
	struct mrl_peer *peer = buf->peer;

	peer->ctrl_refs--;		/* compose names it again */
	buf->hdr.kind = MRL_REQ_CTRL_TX;
	mrl_compose_write_data(ep, buf, peer, buf->data_len, buf->cq_data);
	mrl_ctrl_queue_tx(ep, buf);
}

/*
 * Does a message to peer on rail 0 arrive after a write posted there
 * before it?  Over one tcp connection (rxm, tcp) and shm's command queue
 * it does; efa has no such order, and a control endpoint is another
 * queue.
 */
static bool mrl_rail0_ordered(const struct mrl_ep *ep,
			      const struct mrl_peer *peer)
{
	return !ep->domain->acked_writes && !ep->ctrl_ep &&
	       !mrl_ctrl_question_rail(ep, peer);
}

/*
 * fi_inject_writedata: the core's inject of the bytes, and a WRITE_DATA
 * behind it, where rail 0 keeps them in order; elsewhere the bytes go
 * from a control buffer (the caller's is free on return) and the
 * WRITE_DATA once that write completed.  The write counter counts it when
 * the WRITE_DATA was sent.  0, -FI_EAGAIN while every buffer is taken, or
 * the core's error.
 */
ssize_t mrl_write_data_inject(struct mrl_ep *ep, struct mrl_peer *peer,
			      const void *buf, size_t len, uint64_t data,
			      fi_addr_t dest, uint64_t addr, uint64_t key)
{
	struct mrl_ctrl_buf *b;
	ssize_t ret = mrl_ctrl_can_send(ep, peer, sizeof(struct mrl_ctrl_data));

	if (ret)
		return ret;
	b = ep->ctrl_tx_free;
	if (len && mrl_rail0_ordered(ep, peer) && !ep->no_rma_inject) {
		ret = fi_inject_write(ep->rails[0].ep, buf, len, dest, addr,
				      key);
		if (ret)
			return ret;
	} else if (len) {
		if (len > MRL_CTRL_BUF_SIZE)
			return -FI_EMSGSIZE;
		memcpy(b->data, buf, len);
		ret = mrl_ctrl_post_bounce(ep, b, len, dest, addr, key,
					   FI_DELIVERY_COMPLETE);
		if (ret)
			return ret;
		b->inject_data = true;
		b->peer = peer;
		peer->ctrl_refs++;
		b->cq_data = data;
		b->data_len = len;
		b->wd_addr = addr;
		b->wd_key = key;
		return 0;
	}
	mrl_ctrl_take_tx(ep);
	mrl_compose_write_data(ep, b, peer, len, data);
	b->inject_data = true;
	b->wd_addr = addr;
	b->wd_key = key;
	mrl_ctrl_queue_tx(ep, b);
	return 0;
}

/* The target: a writedata's bytes are all here; its entry, once. */
void mrl_write_data_arrived(struct mrl_ep *ep, struct mrl_peer *peer,
			    const struct mrl_ctrl_msg *msg)
{
	struct mrl_ctrl_data d;
	fi_addr_t src = FI_ADDR_NOTAVAIL;

	memcpy(&d, msg->payload + msg->addrlen, sizeof(d));
	if (!ep->rx_cq) {
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "a writedata arrived, and no CQ "
			      "is bound for receives: its data is dropped\n");
		return;
	}
	if (ep->want_src && peer->visible)
		src = peer->fi_addr;
	mrl_cq_write(ep->rx_cq, NULL,
		     FI_REMOTE_CQ_DATA | FI_RMA | FI_REMOTE_WRITE, d.len, NULL,
		     d.data, 0, src);
}
