/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Messages as eager packets and segments (docs/messages.md, "The protocol by
 * size"): a message up to MRL_PKT_EAGER_MAX goes whole in one packet,
 * copied at the post; a longer one in segments of that size, each on the
 * rail with the fewest packets in flight, pushed as packet buffers free.
 * At the receiver a message is matched when its first packet arrives in
 * its peer's order (mrl_order.c), whatever segment that is; segments land
 * in the matched receive, or in the message's store until one is posted.
 *
 * Ownership: a send is the user's until its last packet completes; a
 * receive is ours from its post until its last completion; a message
 * (struct mrl_rmsg) is its connection's until matched and whole.
 */
#include <stdlib.h>
#include <string.h>

#include "mrl_msg.h"

/* ---- sending ------------------------------------------------------------ */

/* The user's completion of s, once: err 0, or what failed it. */
static void mrl_send_report(struct mrl_ep *ep, struct mrl_send *s, int err)
{
	uint64_t kind = s->flags & (FI_SEND | FI_MSG | FI_TAGGED);
	bool want = !(ep->tx_cq_flags & FI_SELECTIVE_COMPLETION) ||
		    (s->flags & FI_COMPLETION);

	if (s->reported)
		return;
	s->reported = true;
	if (err) {
		mrl_cntr_inc_err(ep->cntr_send);
		if (ep->tx_cq)
			mrl_cq_write_err(ep->tx_cq, s->context, kind, err, 0,
					 s->data, s->tag);
	} else if (!(s->flags & FI_INJECT) || s->context) {
		mrl_cntr_inc(ep->cntr_send);
		if (ep->tx_cq && want)
			mrl_cq_write(ep->tx_cq, s->context, kind, s->len, NULL,
				     0, 0, FI_ADDR_NOTAVAIL);
	}
}

static void mrl_send_unqueue(struct mrl_send *s)
{
	if (s->queued) {
		mrl_list_del(&s->link);
		s->queued = false;
	}
}

/*
 * s is over (acknowledged, or failed) and no packet of it is in a core's
 * hands: its eager packet and its slot go back.
 */
static void mrl_send_release(struct mrl_ep *ep, struct mrl_send *s)
{
	mrl_send_unqueue(s);
	if (s->ulink.next) {
		mrl_list_del(&s->ulink);
		s->ulink.next = NULL;
	}
	if (s->eager) {
		s->eager->send = NULL;
		if (!s->eager->in_core)
			mrl_pkt_put_tx(ep, s->eager);
		s->eager = NULL;
	}
	free(s->copy);
	s->copy = NULL;
	mrl_send_stack_push(&ep->msg_send_free, s);
}

static bool mrl_send_over(const struct mrl_send *s)
{
	return (s->acked || s->err) && !s->out;
}

/* s cannot go (the core failed it, the peer has no rail left): its error
 * now, and nothing of it is sent again. */
void mrl_eager_fail(struct mrl_ep *ep, struct mrl_send *s, int err)
{
	if (s->err || s->acked)
		return;
	s->err = err < 0 ? -err : err;
	mrl_send_unqueue(s);
	mrl_send_report(ep, s, s->err);
	if (mrl_send_over(s))
		mrl_send_release(ep, s);
}

/*
 * A packet of ours completed at the core (err 0), failed, or did not go
 * (MRL_PKT_VOID: its message goes again on other rails).  An eager
 * message's send completes with its packet's first completion.
 */
void mrl_eager_sent(struct mrl_ep *ep, struct mrl_pkt_buf *buf, int err)
{
	struct mrl_send *s = buf->send;

	buf->in_core = false;
	if (!s) {		/* an ACK, or a released send's packet */
		mrl_pkt_put_tx(ep, buf);
		return;
	}
	if (buf != s->eager)
		mrl_pkt_put_tx(ep, buf);
	s->out--;
	if (!err && s->eager)
		mrl_send_report(ep, s, 0);
	else if (err && err != MRL_PKT_VOID)
		mrl_eager_fail(ep, s, err);
	if (mrl_send_over(s))
		mrl_send_release(ep, s);
}

/* The next packet of s into buf: its header and its part of the bytes. */
static void mrl_fill_packet(struct mrl_ep *ep, struct mrl_send *s,
			    struct mrl_pkt_buf *buf)
{
	const struct iovec *iov = s->copy ? &(struct iovec) { s->copy, s->len }
					  : s->iov;
	size_t count = s->copy ? 1 : s->count;
	size_t hlen = sizeof(struct mrl_pkt_hdr), part;
	struct mrl_pkt_seg seg = { .offset = s->sent };

	if (s->len <= MRL_PKT_EAGER_MAX) {
		mrl_pkt_fill_hdr(ep, buf, MRL_PKT_EAGER, s->pkt_flags, s->seq,
				 s->tag, s->data, s->len);
		part = s->len;
	} else {
		mrl_pkt_fill_hdr(ep, buf, MRL_PKT_MEDIUM, s->pkt_flags, s->seq,
				 s->tag, s->data, s->len);
		memcpy(buf->data + hlen, &seg, sizeof(seg));
		hlen += sizeof(seg);
		part = s->len - s->sent;
		if (part > MRL_PKT_EAGER_MAX)
			part = MRL_PKT_EAGER_MAX;
	}
	mrl_iov_copy(iov, count, s->sent, buf->data + hlen, part, false);
	buf->len = hlen + part;
	s->sent += part;
}

/*
 * One more packet of s: 0 when posted or queued behind refused ones,
 * -FI_EAGAIN when no buffer is free, -FI_EHOSTUNREACH when the peer has no
 * rail left.  An eager message's first packet is kept for resends; a
 * resend of it is a copy.
 */
static int mrl_send_packet(struct mrl_ep *ep, struct mrl_peer *peer,
			   struct mrl_send *s)
{
	struct mrl_pkt_buf *buf;
	int rail = mrl_pkt_rail(ep, peer);
	ssize_t ret;

	if (rail < 0)
		return -FI_EHOSTUNREACH;
	buf = mrl_pkt_take_tx(ep, false);
	if (!buf)
		return -FI_EAGAIN;
	if (s->eager) {
		memcpy(buf->data, s->eager->data, s->eager->len);
		buf->len = s->eager->len;
	} else {
		mrl_fill_packet(ep, s, buf);
		if (s->len <= MRL_PKT_EAGER_MAX)
			s->eager = buf;
	}
	s->posted_all = s->len <= MRL_PKT_EAGER_MAX || s->sent == s->len;
	buf->send = s;
	buf->conn = s->conn;
	s->out++;
	s->rails |= mrl_rail_bit(rail);
	ret = ep->pkt_backlog ? -FI_EAGAIN : mrl_pkt_post(ep, peer, buf, rail);
	if (ret == -FI_EAGAIN) {
		mrl_pkt_backlog_add(ep, buf);
		return 0;
	}
	if (ret)	/* the rail goes out for the peer, or the send fails */
		mrl_eager_sent(ep, buf, mrl_pkt_path_failed(ep, s->conn, rail,
							    (int) ret) ?
					MRL_PKT_VOID : (int) ret);
	return 0;
}

/* s's packets (again, after a rail failed) from progress, in order. */
static void mrl_send_queue(struct mrl_ep *ep, struct mrl_send *s)
{
	s->sent = 0;
	s->posted_all = false;
	if (!s->queued) {
		s->queued = true;
		mrl_list_add_tail(&ep->msg_sending, &s->link);
	}
}

/* Packets of the sends in progress, in order, while buffers last. */
void mrl_eager_push(struct mrl_ep *ep)
{
	struct mrl_send *s;
	struct mrl_peer *peer;
	int ret = 0;

	while (!mrl_list_empty(&ep->msg_sending)) {
		s = mrl_container_of(ep->msg_sending.next, struct mrl_send,
				     link);
		peer = mrl_conn_peer(ep, s->conn);
		while (!s->posted_all && !s->err && !s->acked) {
			ret = peer ? mrl_send_packet(ep, peer, s)
				   : -FI_EHOSTUNREACH;
			if (ret == -FI_EAGAIN)
				return;
			if (ret) {
				mrl_eager_fail(ep, s, ret);
				break;	/* s may be free */
			}
		}
		if (!ret)
			mrl_send_unqueue(s);
	}
}

/*
 * rail went out for conn's peer: every send not acknowledged that had
 * packets there goes again, whole, on the other rails (the receiver drops
 * what it has already: by sequence number, a segment by its bit).
 */
void mrl_eager_resend(struct mrl_ep *ep, struct mrl_conn *conn, int rail)
{
	struct mrl_list *e;

	for (e = conn->unacked.next; e != &conn->unacked; e = e->next) {
		struct mrl_send *s = mrl_container_of(e, struct mrl_send,
						      ulink);

		if (s->acked || s->err || !(s->rails & mrl_rail_bit(rail)))
			continue;
		s->rails = 0;
		mrl_send_queue(ep, s);	/* progress pushes it */
	}
}

/*
 * The first packet of conn's oldest unacknowledged send, once more, when
 * every packet of it went and completed (mrl_pkt.c's ACK watch): a peer
 * that has the message whole takes it for a duplicate and ACKs at once,
 * on the rail it came on.  The copy is nobody's send: its completion only
 * frees it.
 */
void mrl_eager_nudge(struct mrl_ep *ep, struct mrl_conn *conn,
		     struct mrl_peer *peer)
{
	struct mrl_pkt_buf *buf;
	struct mrl_send *s;
	size_t sent;
	int rail;

	if (mrl_list_empty(&conn->unacked))
		return;
	s = mrl_container_of(conn->unacked.next, struct mrl_send, ulink);
	if (s->queued || s->out || s->err || s->acked)
		return;
	rail = mrl_pkt_rail(ep, peer);
	buf = rail < 0 ? NULL : mrl_pkt_take_tx(ep, false);
	if (!buf)
		return;			/* the next deadline tries again */
	if (s->eager) {
		memcpy(buf->data, s->eager->data, s->eager->len);
		buf->len = s->eager->len;
	} else {
		sent = s->sent;
		s->sent = 0;
		mrl_fill_packet(ep, s, buf);
		s->sent = sent;
	}
	buf->conn = conn;
	if (mrl_pkt_post(ep, peer, buf, rail))
		mrl_pkt_put_tx(ep, buf);
}

/* An ACK from conn's peer: every message before next is home. */
void mrl_eager_acked(struct mrl_ep *ep, struct mrl_conn *conn, uint32_t next)
{
	struct mrl_send *s;

	while (!mrl_list_empty(&conn->unacked)) {
		s = mrl_container_of(conn->unacked.next, struct mrl_send,
				     ulink);
		if ((int32_t) (s->seq - next) >= 0)
			break;
		mrl_list_del(&s->ulink);
		s->ulink.next = NULL;
		s->acked = true;
		mrl_send_unqueue(s);
		mrl_send_report(ep, s, 0);
		if (mrl_send_over(s))
			mrl_send_release(ep, s);
	}
}

/*
 * The bytes of s, copied now into host memory of its own: an inject's
 * over the eager size (the caller's buffer is its own again on return),
 * and device memory's, in one call of the device's runtime rather than
 * one a packet.
 */
static int mrl_send_take_copy(struct mrl_send *s, enum fi_hmem_iface iface)
{
	int ret;

	s->copy = malloc(s->len);
	if (!s->copy)
		return -FI_ENOMEM;
	ret = mrl_iov_copy_iface(iface, s->iov, s->count, 0, s->copy, s->len,
				 false);
	if (ret) {
		MRL_WARN(FI_LOG_EP_DATA, "a send from device memory: its "
			 "copy to the host failed: %s\n", fi_strerror(-ret));
		free(s->copy);
		s->copy = NULL;
	}
	return ret;
}

/*
 * A send, checked, its slot filled: it takes its number and goes.  An
 * eager message is copied now (an inject's bytes are the caller's again
 * on return); a longer one from the user's buffer as buffers free (an
 * inject's and device memory's from a copy), and completes at the peer's
 * ACK.
 */
ssize_t mrl_eager_send(struct mrl_ep *ep, struct mrl_peer *peer,
		       struct mrl_send *s, bool inject,
		       enum fi_hmem_iface iface)
{
	int ret;

	if (s->len && ((inject && s->len > MRL_PKT_EAGER_MAX) ||
		       iface != FI_HMEM_SYSTEM)) {
		ret = mrl_send_take_copy(s, iface);
		if (ret)
			return ret;
	}
	s->seq = mrl_order_tx_take(&s->conn->tx);
	mrl_list_add_tail(&s->conn->unacked, &s->ulink);
	if (s->len > MRL_PKT_EAGER_MAX) {
		mrl_send_queue(ep, s);
		mrl_eager_push(ep);
		return 0;
	}
	/* refused before anything went (no buffer, no rail): undone */
	ret = mrl_send_packet(ep, peer, s);
	if (ret) {
		mrl_list_del(&s->ulink);
		s->ulink.next = NULL;
		s->conn->tx.next--;
		free(s->copy);
		s->copy = NULL;
	}
	return ret;
}

/* ---- arriving ----------------------------------------------------------- */

static struct mrl_match_queue *mrl_queue_of(struct mrl_ep *ep,
					    uint16_t pkt_flags)
{
	return pkt_flags & MRL_PKT_F_TAGGED ? &ep->mq_tagged : &ep->mq_msg;
}

/*
 * Freed receives and arriving messages are kept for the next ones, up to
 * MRL_MSG_CACHE of each: a steady stream allocates nothing.  A cached
 * object's first bytes link it to the next.
 */
#define MRL_MSG_CACHE	256

static void *mrl_cache_take(void **cache, unsigned int *n, size_t size)
{
	void *obj = *cache;

	if (!obj)
		return calloc(1, size);
	*cache = *(void **) obj;
	(*n)--;
	memset(obj, 0, size);
	return obj;
}

static void mrl_cache_put(void **cache, unsigned int *n, void *obj)
{
	if (*n >= MRL_MSG_CACHE) {
		free(obj);
		return;
	}
	*(void **) obj = *cache;
	*cache = obj;
	(*n)++;
}

static void mrl_cache_empty(void **cache, unsigned int *n)
{
	void *obj;

	while ((obj = *cache)) {
		*cache = *(void **) obj;
		free(obj);
	}
	*n = 0;
}

static void mrl_rmsg_free(struct mrl_ep *ep, struct mrl_rmsg *m)
{
	free(m->segs);
	free(m->store);
	mrl_cache_put(&ep->msg_rmsg_cache, &ep->msg_nrmsg_cache, m);
}

/* Segment offset of m arrives: false when it had already (a resend). */
static bool mrl_rmsg_seg_new(struct mrl_rmsg *m, size_t offset)
{
	size_t bit = offset / MRL_PKT_EAGER_MAX;
	uint8_t mask = (uint8_t) (1u << (bit & 7));

	if (!m->segs)
		return true;	/* an eager message: its one packet */
	if (m->segs[bit / 8] & mask)
		return false;
	m->segs[bit / 8] |= mask;
	return true;
}

static void mrl_recv_free(struct mrl_ep *ep, struct mrl_recv *r)
{
	mrl_cache_put(&ep->msg_recv_cache, &ep->msg_nrecv_cache, r);
}

/* A receive, zeroed: for mrl_eager_recv, which owns it from then on. */
struct mrl_recv *mrl_recv_new(struct mrl_ep *ep)
{
	return mrl_cache_take(&ep->msg_recv_cache, &ep->msg_nrecv_cache,
			      sizeof(struct mrl_recv));
}

static void mrl_partial_leave(struct mrl_rmsg *m)
{
	struct mrl_rmsg **at = &m->conn->partial_at[m->seq & MRL_ORDER_MASK];

	if (m->plink.next) {
		mrl_list_del(&m->plink);
		m->plink.next = NULL;
		if (*at == m)
			*at = NULL;
	}
}

static bool mrl_rmsg_whole(const struct mrl_rmsg *m)
{
	return m->got == m->m.len;
}

static void *mrl_recv_buf(const struct mrl_recv *r, size_t offset)
{
	return r->count ? (uint8_t *) r->iov[0].iov_base + offset : NULL;
}

/*
 * A device receive's message, whole in its store: into the receive in
 * one copy.  0, or the error its completion reports.
 */
static int mrl_rmsg_unstage(struct mrl_rmsg *m)
{
	struct mrl_recv *r = m->recv;
	int ret;

	if (m->err || !m->store || !m->take.len)
		return m->err;
	ret = mrl_iov_copy_iface(r->iface, r->iov, r->count, m->take.offset,
				 m->store, m->take.len, true);
	if (ret)
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "a receive into device memory: "
			      "the copy failed: %s\n", fi_strerror(-ret));
	return ret ? FI_EIO : 0;
}

/* A matched message is whole: its receive's completion. */
static void mrl_rmsg_complete(struct mrl_ep *ep, struct mrl_rmsg *m)
{
	struct mrl_recv *r = m->recv;
	uint64_t flags = (r->flags & (FI_RECV | FI_MSG | FI_TAGGED)) |
			 (m->pkt_flags & MRL_PKT_F_DATA ? FI_REMOTE_CQ_DATA : 0);
	void *buf = r->m.multi ? mrl_recv_buf(r, m->take.offset) : NULL;
	int err = r->iface != FI_HMEM_SYSTEM ? mrl_rmsg_unstage(m) : 0;
	bool last;

	r->placing--;
	last = r->released && !r->placing;
	if (r->m.multi && last && !r->cancelled)
		flags |= FI_MULTI_RECV;
	if (m->take.truncated || err) {
		struct fi_cq_err_entry e = {
			.op_context = r->context, .flags = flags,
			.len = err ? 0 : m->take.len, .buf = buf,
			.data = m->data, .tag = m->m.tag,
			.olen = err ? 0 : m->m.len - m->take.len,
			.err = err ? err : FI_ETRUNC,
		};

		mrl_cntr_inc_err(ep->cntr_recv);
		if (ep->rx_cq)
			mrl_cq_write_err_entry(ep->rx_cq, &e);
	} else {
		mrl_cntr_inc(ep->cntr_recv);
		if (ep->rx_cq)
			mrl_cq_write(ep->rx_cq, r->context, flags, m->take.len,
				     buf, m->data, m->m.tag, m->m.src);
	}
	if (last)
		mrl_recv_free(ep, r);
	mrl_partial_leave(m);
	mrl_rmsg_free(ep, m);
}

static int mrl_rmsg_keep(struct mrl_rmsg *m)
{
	if (m->store || !m->m.len)
		return 0;
	m->store = malloc(m->m.len);
	return m->store ? 0 : -FI_ENOMEM;
}

/*
 * m goes into r at t: what came so far moves from its store.  A device
 * receive's message stays in its store until whole (one copy to the
 * device, not one a packet).
 */
static void mrl_rmsg_matched(struct mrl_ep *ep, struct mrl_rmsg *m,
			     const struct mrl_match_take *t)
{
	struct mrl_recv *r = mrl_container_of(t->recv, struct mrl_recv, m);

	m->state = MRL_RMSG_MATCHED;
	m->recv = r;
	m->take = *t;
	r->placing++;
	if (t->released)
		r->released = true;
	if (r->iface != FI_HMEM_SYSTEM) {
		if (mrl_rmsg_keep(m)) {
			MRL_WARN_ONCE(FI_LOG_EP_DATA, "no memory to stage a "
				      "receive into device memory\n");
			m->err = FI_ENOMEM;
		}
	} else if (m->store) {
		mrl_iov_copy(r->iov, r->count, t->offset, m->store, t->len,
			     true);
		free(m->store);
		m->store = NULL;
	}
	if (mrl_rmsg_whole(m))
		mrl_rmsg_complete(ep, m);
}

/* The user's fi_addr of m's sender, FI_ADDR_NOTAVAIL where it has none. */
static uint64_t mrl_rmsg_src(struct mrl_ep *ep, const struct mrl_rmsg *m)
{
	struct mrl_peer *peer = mrl_conn_peer(ep, m->conn);

	return peer && peer->visible ? peer->fi_addr : FI_ADDR_NOTAVAIL;
}

/* m is next in its peer's order: matched now, or unexpected. */
static void mrl_rmsg_deliver(struct mrl_ep *ep, struct mrl_rmsg *m)
{
	struct mrl_match_take t;

	m->m.src = mrl_rmsg_src(ep, m);
	if (mrl_match_arrived(mrl_queue_of(ep, m->pkt_flags), &m->m, &t)) {
		mrl_rmsg_matched(ep, m, &t);
		return;
	}
	m->state = MRL_RMSG_UNEXPECTED;
	if (mrl_rmsg_whole(m))
		mrl_partial_leave(m);
}

/* A segment of m: into its receive, or its store. */
static void mrl_rmsg_place(struct mrl_ep *ep, struct mrl_rmsg *m,
			   size_t offset, const uint8_t *bytes, size_t len)
{
	size_t n;

	switch (m->state) {
	case MRL_RMSG_MATCHED:
		if (offset >= m->take.len)
			break;
		n = m->take.len - offset < len ? m->take.len - offset : len;
		if (m->recv->iface != FI_HMEM_SYSTEM) {
			if (m->store)
				memcpy(m->store + offset, bytes, n);
			break;
		}
		mrl_iov_copy(m->recv->iov, m->recv->count,
			     m->take.offset + offset, (void *) bytes, n, true);
		break;
	case MRL_RMSG_DISCARDED:
		break;
	default:
		if (len && !mrl_rmsg_keep(m))
			memcpy(m->store + offset, bytes, len);
	}
	m->got += len;
	if (!mrl_rmsg_whole(m))
		return;
	/* a long message's sender completes at the ACK: it goes now */
	if (m->m.len > MRL_PKT_EAGER_MAX && m->state != MRL_RMSG_HELD)
		mrl_pkt_ack_due(ep, m->conn, true);
	switch (m->state) {
	case MRL_RMSG_MATCHED:
		mrl_rmsg_complete(ep, m);
		break;
	case MRL_RMSG_DISCARDED:
		mrl_partial_leave(m);
		mrl_rmsg_free(ep, m);
		break;
	case MRL_RMSG_UNEXPECTED:
		mrl_partial_leave(m);
		break;
	case MRL_RMSG_HELD:
		break;
	}
}

static struct mrl_rmsg *mrl_partial_find(struct mrl_conn *conn, uint32_t seq)
{
	struct mrl_rmsg *m = conn->partial_at[seq & MRL_ORDER_MASK];

	return m && m->seq == seq ? m : NULL;
}

static struct mrl_rmsg *mrl_rmsg_new(struct mrl_ep *ep, struct mrl_conn *conn,
				     const struct mrl_pkt_hdr *hdr)
{
	struct mrl_rmsg **at = &conn->partial_at[hdr->seq & MRL_ORDER_MASK];
	struct mrl_rmsg *m;

	if (*at) {
		/* a number a window away from a message still partial: no
		 * sender that keeps to its window sends it */
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "a message numbered a window "
			      "past one not whole yet: dropped\n");
		ep->pkt_dropped[MRL_PKT_DROP_SEGMENT]++;
		return NULL;
	}
	m = mrl_cache_take(&ep->msg_rmsg_cache, &ep->msg_nrmsg_cache,
			   sizeof(*m));
	if (!m)
		return NULL;
	m->conn = conn;
	m->seq = hdr->seq;
	m->pkt_flags = hdr->flags;
	m->data = hdr->data;
	m->m.tag = hdr->flags & MRL_PKT_F_TAGGED ? hdr->tag : 0;
	m->m.len = hdr->len;
	m->state = MRL_RMSG_HELD;
	if (hdr->len > MRL_PKT_EAGER_MAX) {
		m->segs = calloc((hdr->len / MRL_PKT_EAGER_MAX + 8) / 8, 1);
		if (!m->segs) {
			mrl_rmsg_free(ep, m);
			return NULL;
		}
	}
	mrl_list_add_tail(&conn->partial, &m->plink);
	*at = m;
	return m;
}

/* m, next in order, and the early ones behind it. */
static void mrl_deliver_in_order(struct mrl_ep *ep, struct mrl_conn *conn,
				 struct mrl_rmsg *m)
{
	bool now = false;

	while (m) {
		now |= m->m.len > MRL_PKT_EAGER_MAX && mrl_rmsg_whole(m);
		mrl_rmsg_deliver(ep, m);
		m = mrl_order_advance(&conn->rx);
	}
	if (now)
		mrl_pkt_ack_due(ep, conn, true);
	mrl_pkt_ack_due(ep, conn, mrl_order_rx_ack_due(&conn->rx));
}

/*
 * A packet of message hdr->seq from conn's peer, len bytes at offset of
 * it.  Its first packet to arrive decides its order (held, next, or a
 * duplicate); the rest find it among the partial ones.
 */
void mrl_eager_arrived(struct mrl_ep *ep, struct mrl_conn *conn,
		       const struct mrl_pkt_hdr *hdr, const uint8_t *payload,
		       size_t offset, size_t len)
{
	struct mrl_rmsg *m = mrl_partial_find(conn, hdr->seq);

	if (m) {
		/* each segment counts once (its bit): one sent again may
		 * come after the rest, so only its place is checked here;
		 * an eager message's one packet came already */
		if (m->m.len != hdr->len || offset + len > m->m.len) {
			MRL_WARN_ONCE(FI_LOG_EP_DATA, "a segment that does "
				      "not belong to its message: dropped\n");
			return;
		}
		if (m->segs && mrl_rmsg_seg_new(m, offset))
			mrl_rmsg_place(ep, m, offset, payload, len);
		else
			ep->msg_dups++;
		return;
	}
	m = mrl_rmsg_new(ep, conn, hdr);
	if (!m)
		return;
	mrl_rmsg_seg_new(m, offset);
	/* only the next message, whole in this packet, may skip the store */
	if ((hdr->seq != conn->rx.next || len < m->m.len) && mrl_rmsg_keep(m)) {
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "no memory for an arriving "
			      "message: dropped\n");
		mrl_partial_leave(m);
		mrl_rmsg_free(ep, m);
		return;
	}
	switch (mrl_order_arrive(&conn->rx, hdr->seq, m)) {
	case MRL_ORDER_NEXT:
		/* a message of 0 bytes is whole, and done, once delivered */
		mrl_rmsg_deliver(ep, m);
		if (hdr->len)
			mrl_rmsg_place(ep, m, offset, payload, len);
		mrl_deliver_in_order(ep, conn, mrl_order_advance(&conn->rx));
		return;
	case MRL_ORDER_HELD:
		mrl_rmsg_place(ep, m, offset, payload, len);
		return;
	case MRL_ORDER_DUP:	/* sent again: our ACK may have been lost */
		ep->msg_dups++;
		mrl_pkt_ack_due(ep, conn, true);
		break;
	case MRL_ORDER_BEYOND:
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "a message beyond its sender's "
			      "window: dropped\n");
		ep->pkt_dropped[MRL_PKT_DROP_SEGMENT]++;
		break;
	case MRL_ORDER_NOMEM:
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "no memory to hold an early "
			      "message: dropped\n");
		break;
	}
	mrl_partial_leave(m);
	mrl_rmsg_free(ep, m);
}

/* ---- the user's receives ------------------------------------------------ */

/* FI_DISCARD of a message taken off its queue. */
static void mrl_rmsg_discard(struct mrl_ep *ep, struct mrl_rmsg *m)
{
	free(m->store);
	m->store = NULL;
	if (mrl_rmsg_whole(m)) {
		mrl_partial_leave(m);
		mrl_rmsg_free(ep, m);
		return;
	}
	m->state = MRL_RMSG_DISCARDED;	/* its conn frees it once whole */
}

static void mrl_recv_entry(struct mrl_ep *ep, struct mrl_recv *r,
			   const struct mrl_rmsg *m, size_t len)
{
	uint64_t flags = (r->flags & (FI_RECV | FI_MSG | FI_TAGGED)) |
			 (m && (m->pkt_flags & MRL_PKT_F_DATA) ?
			  FI_REMOTE_CQ_DATA : 0);

	mrl_cntr_inc(ep->cntr_recv);
	if (ep->rx_cq)
		mrl_cq_write(ep->rx_cq, r->context, flags, len, NULL,
			     m ? m->data : 0, m ? m->m.tag : 0,
			     m ? m->m.src : FI_ADDR_NOTAVAIL);
}

static void mrl_queue_name(struct mrl_ep *ep, struct mrl_match_queue *q)
{
	struct mrl_list *l;
	struct mrl_rmsg *m;

	for (l = q->unexpected.next; l != &q->unexpected; l = l->next) {
		m = (struct mrl_rmsg *) l;	/* the link comes first */
		if (m->m.src == FI_ADDR_NOTAVAIL)
			m->m.src = mrl_rmsg_src(ep, m);
	}
}

/*
 * A directed receive (FI_DIRECTED_RECV) may be for messages that came
 * before their sender was inserted: once the AV has grown, the unexpected
 * ones that had no name learn it (as fi_unexpected_msg's second message).
 */
static void mrl_unexpected_name(struct mrl_ep *ep, const struct mrl_recv *r)
{
	if (r->m.src == MRL_MATCH_ANY || !ep->av ||
	    ep->msg_named_at == ep->av->count)
		return;
	mrl_queue_name(ep, &ep->mq_msg);
	mrl_queue_name(ep, &ep->mq_tagged);
	ep->msg_named_at = ep->av->count;
}

/* FI_PEEK, with FI_CLAIM or FI_DISCARD: an entry either way. */
static ssize_t mrl_recv_peek(struct mrl_ep *ep, struct mrl_match_queue *q,
			     struct mrl_recv *r)
{
	struct mrl_match_msg *mm;
	struct mrl_rmsg *m;

	mrl_unexpected_name(ep, r);
	mm = mrl_match_peek(q, &r->m);

	/* a program that peeks in a loop may progress only through us */
	if (!mm) {
		mrl_ep_progress(ep);
		mm = mrl_match_peek(q, &r->m);
	}
	m = (struct mrl_rmsg *) mm;
	if (!m) {
		if (ep->rx_cq)
			mrl_cq_write_err(ep->rx_cq, r->context,
					 r->flags & (FI_RECV | FI_MSG |
						     FI_TAGGED),
					 FI_ENOMSG, 0, 0, r->m.tag);
	} else {
		mrl_recv_entry(ep, r, m, m->m.len);
		if (r->flags & FI_DISCARD) {
			mrl_match_unlink(q, mm);
			mrl_rmsg_discard(ep, m);
		} else if (r->flags & FI_CLAIM) {
			mrl_match_claim(mm, r->context);
		}
	}
	mrl_recv_free(ep, r);
	return 0;
}

/* FI_CLAIM: the message a peek claimed with this context. */
static ssize_t mrl_recv_claimed(struct mrl_ep *ep, struct mrl_match_queue *q,
				struct mrl_recv *r)
{
	struct mrl_match_take t;
	struct mrl_match_msg *mm = mrl_match_take_claimed(q, &r->m, r->context,
							  &t);
	struct mrl_rmsg *m = (struct mrl_rmsg *) mm;

	if (!m) {
		MRL_WARN(FI_LOG_EP_DATA, "FI_CLAIM: no message claimed with "
			 "this context\n");
		mrl_recv_free(ep, r);
		return -FI_EINVAL;
	}
	if (r->flags & FI_DISCARD) {
		mrl_recv_entry(ep, r, m, 0);
		mrl_rmsg_discard(ep, m);
		mrl_recv_free(ep, r);
		return 0;
	}
	mrl_rmsg_matched(ep, m, &t);
	return 0;
}

/*
 * A user's receive, checked and filled: unexpected messages it takes
 * first (a multi-receive may take several), then it waits on its queue.
 */
ssize_t mrl_eager_recv(struct mrl_ep *ep, struct mrl_recv *r)
{
	struct mrl_match_queue *q = r->flags & FI_TAGGED ? &ep->mq_tagged
							 : &ep->mq_msg;
	struct mrl_match_take t;
	struct mrl_match_msg *mm;

	if (r->flags & FI_PEEK)
		return mrl_recv_peek(ep, q, r);
	if (r->flags & FI_CLAIM)
		return mrl_recv_claimed(ep, q, r);
	mrl_unexpected_name(ep, r);
	while ((mm = mrl_match_take_unexpected(q, &r->m, &t))) {
		bool released = t.released;

		mrl_rmsg_matched(ep, (struct mrl_rmsg *) mm, &t);
		if (released)
			return 0;	/* r may be gone */
	}
	mrl_match_post(q, &r->m);
	return 0;
}

/* fi_cancel of a posted receive: -FI_ENOENT where none has context. */
ssize_t mrl_eager_cancel(struct mrl_ep *ep, void *context)
{
	struct mrl_match_recv *mr = mrl_match_cancel(&ep->mq_msg, context);
	struct mrl_recv *r;

	if (!mr)
		mr = mrl_match_cancel(&ep->mq_tagged, context);
	if (!mr)
		return -FI_ENOENT;
	r = mrl_container_of(mr, struct mrl_recv, m);
	if (ep->rx_cq)
		mrl_cq_write_err(ep->rx_cq, r->context,
				 r->flags & (FI_RECV | FI_MSG | FI_TAGGED),
				 FI_ECANCELED, 0, 0, r->m.tag);
	r->cancelled = true;
	r->released = true;
	if (!r->placing)
		mrl_recv_free(ep, r);
	return 0;
}

/* ---- teardown ----------------------------------------------------------- */

static void mrl_free_posted(struct mrl_ep *ep, struct mrl_match_queue *q)
{
	while (!mrl_list_empty(&q->posted)) {
		struct mrl_recv *r = mrl_container_of(q->posted.next,
						      struct mrl_recv, m.link);

		mrl_list_del(&r->m.link);
		r->released = true;
		if (!r->placing)
			mrl_recv_free(ep, r);
	}
}

static void mrl_free_rmsg_at_close(struct mrl_ep *ep, struct mrl_rmsg *m)
{
	struct mrl_recv *r = m->state == MRL_RMSG_MATCHED ? m->recv : NULL;

	mrl_partial_leave(m);
	mrl_rmsg_free(ep, m);
	if (r && --r->placing == 0 && r->released)
		mrl_recv_free(ep, r);
}

static void mrl_free_unexpected(struct mrl_ep *ep,
				struct mrl_match_queue *q)
{
	while (!mrl_list_empty(&q->unexpected)) {
		struct mrl_rmsg *m = mrl_container_of(q->unexpected.next,
						      struct mrl_rmsg, m.link);

		mrl_match_unlink(q, &m->m);
		mrl_free_rmsg_at_close(ep, m);
	}
}

/* Receives, messages and sends still held, at close. */
void mrl_eager_fini(struct mrl_ep *ep)
{
	struct mrl_conn *c;
	size_t b, i;

	mrl_free_posted(ep, &ep->mq_msg);
	mrl_free_posted(ep, &ep->mq_tagged);
	mrl_free_unexpected(ep, &ep->mq_msg);
	mrl_free_unexpected(ep, &ep->mq_tagged);
	for (b = 0; ep->conns && b < MRL_CONN_BUCKETS; b++) {
		for (c = ep->conns[b]; c; c = c->next) {
			while (!mrl_list_empty(&c->partial))
				mrl_free_rmsg_at_close(ep, mrl_container_of(
					c->partial.next, struct mrl_rmsg,
					plink));
		}
	}
	for (i = 0; ep->msg_sends && i < MRL_MSG_SENDS; i++) {
		free(ep->msg_sends[i].copy);
		ep->msg_sends[i].copy = NULL;
	}
	mrl_cache_empty(&ep->msg_recv_cache, &ep->msg_nrecv_cache);
	mrl_cache_empty(&ep->msg_rmsg_cache, &ep->msg_nrmsg_cache);
}
