/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The message path's packets (docs/messages.md): their
 * buffers, posted for receiving on every rail whatever the user posted, and
 * the pool sends take from; each pair of endpoints' connection (the
 * sequence numbers of mrl_order.c, found by the peer's id); what arrives,
 * checked (mrl_pkt_check) and handed to mrl_eager.c; cumulative ACKs.
 *
 * A packet is a tagged send on a rail's core with the receiving
 * endpoint's control tag there and MRL_PKT_TAG, so the core never matches
 * it against a user's receive: multirail matches every message itself.
 */
#include <stdlib.h>
#include <string.h>

#include "mrl_msg.h"

/*
 * FI_MULTIRAIL_MESSAGES: striped, where the core has FI_TAGGED (packets
 * are tagged sends); a core without keeps messages on rail 0.
 */
bool mrl_msg_striped_wanted(const struct mrl_domain *dom)
{
	const char *v = mrl_params.messages;

	if (!v || !*v || !strcmp(v, "rail0"))
		return false;
	if (strcmp(v, "striped")) {
		MRL_WARN_ONCE(FI_LOG_CORE, "FI_MULTIRAIL_MESSAGES=%s: rail0 or "
			      "striped; rail0 taken\n", v);
		return false;
	}
	if (dom->ctrl_own_ep) {
		MRL_WARN_ONCE(FI_LOG_CORE, "FI_MULTIRAIL_MESSAGES=striped: the "
			      "core has no FI_TAGGED: messages stay on rail "
			      "0\n");
		return false;
	}
	return true;
}

uint64_t mrl_pkt_id(const void *addr)
{
	const struct mrl_addr_hdr *hdr = addr;

	return mrl_fnv1a(mrl_addr_rail(addr, 0), hdr->rail_addrlen);
}

/* ---- connections -------------------------------------------------------- */

static struct mrl_conn **mrl_conn_bucket(struct mrl_ep *ep, uint64_t id)
{
	return &ep->conns[mrl_mix64(id) & (MRL_CONN_BUCKETS - 1)];
}

/* The connection with the peer of id; created if asked and room is left. */
struct mrl_conn *mrl_conn_get(struct mrl_ep *ep, uint64_t id, bool create)
{
	struct mrl_conn **bucket, *c = ep->last_conn;

	if (c && c->id == id)
		return c;
	bucket = mrl_conn_bucket(ep, id);
	for (c = *bucket; c; c = c->next) {
		if (c->id == id)
			return ep->last_conn = c;
	}
	if (!create)
		return NULL;
	if (ep->nconns >= MRL_CONN_MAX) {
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "messages from more than %d "
			      "peers: the others' are dropped\n", MRL_CONN_MAX);
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->id = id;
	mrl_order_tx_init(&c->tx);
	mrl_order_rx_init(&c->rx);
	mrl_list_init(&c->partial);
	mrl_list_init(&c->unacked);
	mrl_list_init(&c->ack_link);
	c->next = *bucket;
	*bucket = c;
	ep->nconns++;
	return ep->last_conn = c;
}

/* The peer at the other end, if the AV knows it (user's or learned). */
struct mrl_peer *mrl_conn_peer(struct mrl_ep *ep, const struct mrl_conn *conn)
{
	return mrl_av_peer_by_id(ep->av, conn->id);
}

/* ---- buffers ------------------------------------------------------------ */

static void *mrl_pkt_desc(struct mrl_ep *ep, int rail)
{
	struct fid_mr *mr = ep->rails[rail].pkt_mr;

	return mr ? fi_mr_desc(mr) : NULL;
}

static int mrl_pkt_post_rx(struct mrl_ep *ep, struct mrl_pkt_buf *buf)
{
	int ret;

	buf->hdr.kind = MRL_REQ_PKT_RX;
	ret = fi_trecv(ep->rails[buf->rail].ep, buf->data, MRL_PKT_BUF_SIZE,
		       mrl_pkt_desc(ep, buf->rail), FI_ADDR_UNSPEC,
		       ep->pkt_tag[buf->rail], 0, &buf->hdr);
	if (ret)
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "rail %d: packet receive: %s\n",
			      buf->rail, fi_strerror(-ret));
	return ret;
}

/*
 * A receive buffer back to its rail's core.  One the core refuses (a NIC
 * failing) waits for the health tick, so that the rail, once back in
 * service, still has its receives: without them what a peer sends there
 * is never taken.
 */
static void mrl_pkt_repost_rx(struct mrl_ep *ep, struct mrl_pkt_buf *buf)
{
	if (!mrl_pkt_post_rx(ep, buf))
		return;
	buf->next_free = ep->pkt_rx_unposted;
	ep->pkt_rx_unposted = buf;
}

static void mrl_pkt_retry_rx(struct mrl_ep *ep)
{
	struct mrl_pkt_buf *buf = ep->pkt_rx_unposted;

	ep->pkt_rx_unposted = NULL;
	while (buf) {
		struct mrl_pkt_buf *next = buf->next_free;

		mrl_pkt_repost_rx(ep, buf);
		buf = next;
	}
}

/* A send buffer; the last MRL_PKT_ACK_RESERVE only for an ACK. */
struct mrl_pkt_buf *mrl_pkt_take_tx(struct mrl_ep *ep, bool for_ack)
{
	struct mrl_pkt_buf *buf;

	if (!for_ack && ep->pkt_tx_nfree <= MRL_PKT_ACK_RESERVE)
		return NULL;
	buf = mrl_pkt_buf_stack_pop(&ep->pkt_tx_free);
	if (buf) {
		ep->pkt_tx_nfree--;
		buf->hdr.kind = MRL_REQ_PKT_TX;
		buf->send = NULL;
		buf->conn = NULL;
		buf->probe = false;
	}
	return buf;
}

void mrl_pkt_put_tx(struct mrl_ep *ep, struct mrl_pkt_buf *buf)
{
	mrl_pkt_buf_stack_push(&ep->pkt_tx_free, buf);
	ep->pkt_tx_nfree++;
}

static int mrl_pkt_register(struct mrl_ep *ep)
{
	int r, ret;

	for (r = 0; r < ep->nrails; r++) {
		ret = fi_mr_reg(ep->domain->rails[r].domain, ep->pkt_bufs,
				ep->pkt_nbufs * sizeof(*ep->pkt_bufs),
				FI_SEND | FI_RECV, 0,
				~0ULL - 1 - MRL_MAX_RAILS - r, 0,
				&ep->rails[r].pkt_mr, NULL);
		if (ret) {
			MRL_WARN(FI_LOG_EP_DATA, "rail %d: packet buffers: "
				 "fi_mr_reg: %s\n", r, fi_strerror(-ret));
			return ret;
		}
	}
	return 0;
}

/* At enable, after the control channel: buffers, posted, and queues. */
int mrl_pkt_init(struct mrl_ep *ep)
{
	size_t i, optlen = sizeof(ep->min_multi_recv);
	int ret;

	mrl_match_queue_init(&ep->mq_msg, false);
	mrl_match_queue_init(&ep->mq_tagged, true);
	mrl_list_init(&ep->msg_sending);
	mrl_list_init(&ep->msg_acks);
	mrl_list_init(&ep->msg_acks_later);
	ep->pkt_backlog = NULL;
	ep->pkt_backlog_tail = &ep->pkt_backlog;
	if (!ep->msg_striped)
		return 0;
	if (!ep->min_multi_recv &&
	    fi_getopt(&ep->rails[0].ep->fid, FI_OPT_ENDPOINT,
		      FI_OPT_MIN_MULTI_RECV, &ep->min_multi_recv, &optlen))
		ep->min_multi_recv = MRL_PKT_EAGER_MAX;
	ep->pkt_id = mrl_pkt_id(ep->name);
	for (i = 0; i < (size_t) ep->nrails; i++)
		ep->pkt_tag[i] = mrl_ctrl_tag_of(ep, ep->name, (int) i) |
				 MRL_PKT_TAG;
	ep->conns = calloc(MRL_CONN_BUCKETS, sizeof(*ep->conns));
	ep->msg_sends = calloc(MRL_MSG_SENDS, sizeof(*ep->msg_sends));
	ep->pkt_nrx = (size_t) ep->nrails * MRL_PKT_RX_PER_RAIL;
	ep->pkt_nbufs = ep->pkt_nrx + MRL_PKT_TX_COUNT;
	ep->pkt_bufs = calloc(ep->pkt_nbufs, sizeof(*ep->pkt_bufs));
	if (!ep->conns || !ep->msg_sends || !ep->pkt_bufs)
		return -FI_ENOMEM;
	for (i = MRL_MSG_SENDS; i-- > 0;)
		mrl_send_stack_push(&ep->msg_send_free, &ep->msg_sends[i]);
	if (ep->domain->core_mr_local) {
		ret = mrl_pkt_register(ep);
		if (ret)
			return ret;
	}
	for (i = 0; i < ep->pkt_nrx; i++) {
		ep->pkt_bufs[i].rail = (int) (i / MRL_PKT_RX_PER_RAIL);
		ret = mrl_pkt_post_rx(ep, &ep->pkt_bufs[i]);
		if (ret)
			return ret;
	}
	for (i = ep->pkt_nbufs; i-- > ep->pkt_nrx;)
		mrl_pkt_put_tx(ep, &ep->pkt_bufs[i]);
	return 0;
}

/* ---- sending ------------------------------------------------------------ */

void mrl_pkt_fill_hdr(struct mrl_ep *ep, struct mrl_pkt_buf *buf, int type,
		      uint16_t flags, uint32_t seq, uint64_t tag,
		      uint64_t data, uint64_t len)
{
	struct mrl_pkt_hdr hdr = {
		.version = MRL_PKT_VERSION, .type = (uint8_t) type,
		.flags = flags, .seq = seq, .src = ep->pkt_id, .tag = tag,
		.data = data, .len = len,
	};

	memcpy(buf->data, &hdr, sizeof(hdr));
}

/*
 * The rail a packet to peer goes on: of its rails in service and open,
 * the one with the fewest of our packets in flight (in turn among equals),
 * so that a window of messages spreads by what each rail drains; -1 when
 * the peer has none left.
 */
int mrl_pkt_rail(struct mrl_ep *ep, struct mrl_peer *peer)
{
	uint32_t up = mrl_rail_mask(peer->nrails) & ~peer->rails_down, open;
	int best = -1, r, i, n = peer->nrails;

	if (!up)
		return -1;
	/* rails the peer is yet to open (RAIL_ASK) wait, asked again */
	open = peer->rails_closed ? mrl_connect_open_rails(ep, peer, up) & up
				  : up;
	if (!open)
		open = up;
	for (i = 0; i < n; i++) {
		r = (ep->pkt_rr + i) % n;
		if (!(open & (1u << r)) ||
		    peer->rail[r].core_addr == FI_ADDR_NOTAVAIL)
			continue;
		if (best < 0 || ep->rails[r].pkt_out < ep->rails[best].pkt_out)
			best = r;
	}
	ep->pkt_rr = (ep->pkt_rr + 1) % n;
	return best;
}

/* The packet tag of conn's peer on rail: its control tag's, kept. */
static uint64_t mrl_pkt_peer_tag(struct mrl_ep *ep, struct mrl_conn *conn,
				 const struct mrl_peer *peer, int rail)
{
	if (!conn->tag[rail])
		conn->tag[rail] = mrl_ctrl_tag_of(ep, peer->addr, rail) |
				  MRL_PKT_TAG;
	return conn->tag[rail];
}

/* buf (its conn set) to peer on rail. */
ssize_t mrl_pkt_post(struct mrl_ep *ep, struct mrl_peer *peer,
		     struct mrl_pkt_buf *buf, int rail)
{
	ssize_t ret;

	buf->rail = rail;
	buf->hdr.kind = MRL_REQ_PKT_TX;
	ret = fi_tsend(ep->rails[rail].ep, buf->data, buf->len,
		       mrl_pkt_desc(ep, rail), peer->rail[rail].core_addr,
		       mrl_pkt_peer_tag(ep, buf->conn, peer, rail), &buf->hdr);
	if (!ret) {
		buf->in_core = true;
		buf->conn->rail_out[rail]++;
		ep->rails[rail].pkt_out++;
		ep->rails[rail].pkts_sent++;
		ep->rails[rail].pkt_bytes_sent += buf->len;
		mrl_nonchunk_posted(ep, rail);
	}
	return ret;
}

/*
 * The core failed a packet to conn's peer on rail (at its post or its
 * completion): true when the path failed, so that the rail is out for the
 * peer and what our messages had there goes again (mrl_pkt_rail_down),
 * or went when the rail went out.
 */
bool mrl_pkt_path_failed(struct mrl_ep *ep, struct mrl_conn *conn, int rail,
			 int err)
{
	struct mrl_peer *peer = mrl_conn_peer(ep, conn);

	if (!peer)
		return false;
	if (peer->rails_down & mrl_rail_bit(rail))
		return true;
	return mrl_health_post_failed(ep, peer, rail, err);
}

/* A packet the core refused for now: it goes again from progress. */
void mrl_pkt_backlog_add(struct mrl_ep *ep, struct mrl_pkt_buf *buf)
{
	buf->next_free = NULL;
	*ep->pkt_backlog_tail = buf;
	ep->pkt_backlog_tail = &buf->next_free;
}

/* Packets the core refused, in order, until it refuses again. */
static void mrl_pkt_drain_backlog(struct mrl_ep *ep)
{
	struct mrl_pkt_buf *buf;
	struct mrl_peer *peer;
	ssize_t ret;
	int rail;

	while ((buf = ep->pkt_backlog)) {
		peer = mrl_conn_peer(ep, buf->conn);
		rail = peer ? mrl_pkt_rail(ep, peer) : -1;
		/* a rail that fails sends again what its messages had there */
		if (rail >= 0 && buf->send)
			buf->send->rails |= mrl_rail_bit(rail);
		ret = rail < 0 ? -FI_EHOSTUNREACH :
				 mrl_pkt_post(ep, peer, buf, rail);
		if (ret == -FI_EAGAIN)
			return;
		ep->pkt_backlog = buf->next_free;
		if (!ep->pkt_backlog)
			ep->pkt_backlog_tail = &ep->pkt_backlog;
		if (ret && rail >= 0 && mrl_pkt_path_failed(ep, buf->conn, rail,
							    (int) ret))
			ret = MRL_PKT_VOID;
		if (ret)
			mrl_eager_sent(ep, buf, (int) ret);
	}
}

/* ---- ACKs --------------------------------------------------------------- */

/*
 * An ACK is due to conn's peer: now (a long message is whole, and its
 * sender's completion waits for the ACK; a duplicate came, so an ACK may
 * have been lost; half a window arrived), or at the next health tick (a
 * window of small messages would otherwise send one ACK each).
 */
void mrl_pkt_ack_due(struct mrl_ep *ep, struct mrl_conn *conn, bool now)
{
	if (conn->ack_state == MRL_ACK_NOW ||
	    (conn->ack_state == MRL_ACK_LATER && !now))
		return;
	if (conn->ack_state == MRL_ACK_LATER)
		mrl_list_del(&conn->ack_link);
	conn->ack_state = now ? MRL_ACK_NOW : MRL_ACK_LATER;
	mrl_list_add_tail(now ? &ep->msg_acks : &ep->msg_acks_later,
			  &conn->ack_link);
}

/*
 * What an ACK says: every message before it arrived whole (the sender
 * may forget it), so the first of the matched ones that is not whole yet,
 * else the next to match.
 */
static uint32_t mrl_pkt_ack_next(const struct mrl_conn *conn)
{
	uint32_t next = conn->rx.next;
	const struct mrl_list *e;

	for (e = conn->partial.next; e != &conn->partial; e = e->next) {
		const struct mrl_rmsg *m = mrl_container_of(e, struct mrl_rmsg,
							    plink);

		if (m->state != MRL_RMSG_HELD &&
		    (int32_t) (m->seq - next) < 0)
			next = m->seq;
	}
	return next;
}

/*
 * An ACK goes on the rail the peer's latest packet came on while that rail
 * serves the peer: a rail whose link died carries nothing more of the
 * peer's once it took the rail out (its end may not know yet), so the ACK
 * of what it sent again does not follow the lost ones.
 */
static int mrl_pkt_ack_rail(struct mrl_ep *ep, struct mrl_peer *peer,
			    const struct mrl_conn *conn)
{
	int r = conn->heard_rail;

	if (r < peer->nrails && !(peer->rails_down & mrl_rail_bit(r)) &&
	    peer->rail[r].core_addr != FI_ADDR_NOTAVAIL)
		return r;
	return mrl_pkt_rail(ep, peer);
}

/* An ACK of what came from conn's peer, on rail: 0 or the core's error. */
static ssize_t mrl_pkt_ack_on(struct mrl_ep *ep, struct mrl_conn *conn,
			      struct mrl_peer *peer, int rail, bool probe)
{
	struct mrl_pkt_ack ack = { .next = mrl_pkt_ack_next(conn),
				   .window = MRL_ORDER_WINDOW };
	struct mrl_pkt_buf *buf;
	ssize_t ret;

	buf = mrl_pkt_take_tx(ep, true);
	if (!buf)
		return -FI_EAGAIN;
	mrl_pkt_fill_hdr(ep, buf, MRL_PKT_ACK, 0, 0, 0, 0, 0);
	memcpy(buf->data + sizeof(struct mrl_pkt_hdr), &ack, sizeof(ack));
	buf->len = sizeof(struct mrl_pkt_hdr) + sizeof(ack);
	buf->conn = conn;
	buf->probe = probe;
	ret = mrl_pkt_post(ep, peer, buf, rail);
	if (ret) {
		mrl_pkt_put_tx(ep, buf);
		return ret;
	}
	conn->rx.acked = conn->rx.next;
	return 0;
}

/* 0 once sent (or not to be: a peer the AV does not know, whose next
 * message asks again), -FI_EAGAIN to try later. */
static int mrl_pkt_send_ack(struct mrl_ep *ep, struct mrl_conn *conn)
{
	struct mrl_peer *peer = mrl_conn_peer(ep, conn);
	int rail;

	rail = peer && !peer->partial ? mrl_pkt_ack_rail(ep, peer, conn) : -1;
	if (rail < 0)
		return 0;
	return mrl_pkt_ack_on(ep, conn, peer, rail, false) == -FI_EAGAIN ?
	       -FI_EAGAIN : 0;
}

/*
 * The health watch's probe of rail, out of service for peer, when no RMA
 * target of the peer is known: an ACK, which the peer takes as any other
 * (one that says less than an earlier one says nothing).  Its completion
 * answers the probe (mrl_pkt_sent).
 */
ssize_t mrl_pkt_probe(struct mrl_ep *ep, struct mrl_peer *peer, int rail)
{
	struct mrl_conn *conn;

	if (peer->partial || !ep->conns ||
	    peer->rail[rail].core_addr == FI_ADDR_NOTAVAIL)
		return -FI_EHOSTUNREACH;
	conn = mrl_conn_get(ep, mrl_av_peer_id(peer), false);
	return conn ? mrl_pkt_ack_on(ep, conn, peer, rail, true) :
		      -FI_EHOSTUNREACH;
}

/*
 * The ACKs due, each tried once: one the core refuses for now (a peer
 * that went away, whose connection the core keeps trying) waits for the
 * next round without holding back the others' (their sends wait for
 * them).
 */
static void mrl_pkt_send_acks(struct mrl_ep *ep)
{
	struct mrl_list *e, *next;
	struct mrl_conn *conn;

	for (e = ep->msg_acks.next; e != &ep->msg_acks; e = next) {
		next = e->next;
		conn = mrl_container_of(e, struct mrl_conn, ack_link);
		if (mrl_pkt_send_ack(ep, conn))
			continue;
		mrl_list_del(&conn->ack_link);
		conn->ack_state = MRL_ACK_NONE;
	}
}

/*
 * The ACK watch: a conn whose ACK has not moved for a deadline while our
 * sends wait for it has the rails those sends went on checked by the
 * health watch (mrl_health_acks_stalled: a socket core's dead link holds
 * completed packets, which the stall watch cannot see).  With none to
 * blame, the peer may have everything and its ACK be lost in a dead
 * link's socket at its end: a duplicate makes it ACK again.
 */
static void mrl_pkt_watch_conn(struct mrl_ep *ep, struct mrl_conn *conn,
			       uint64_t deadline_ns)
{
	const struct mrl_list *e;
	struct mrl_peer *peer;
	uint32_t rails = 0;

	if (mrl_list_empty(&conn->unacked)) {
		conn->ack_wait_ns = 0;
		return;
	}
	if (!conn->ack_wait_ns || conn->ack_seen != conn->tx.acked) {
		conn->ack_seen = conn->tx.acked;
		conn->ack_wait_ns = ep->now_ns;
		return;
	}
	if (ep->now_ns - conn->ack_wait_ns <= deadline_ns)
		return;
	conn->ack_wait_ns = ep->now_ns;		/* once per deadline */
	peer = mrl_conn_peer(ep, conn);
	if (!peer || peer->partial)
		return;
	for (e = conn->unacked.next; e != &conn->unacked; e = e->next)
		rails |= mrl_container_of(e, const struct mrl_send,
					  ulink)->rails;
	if (!mrl_health_acks_stalled(ep, peer, rails & ~peer->rails_down))
		mrl_eager_nudge(ep, conn, peer);
}

static void mrl_pkt_watch_acks(struct mrl_ep *ep)
{
	uint64_t deadline_ns = (uint64_t) mrl_params.rail_timeout_ms *
			       1000000;
	struct mrl_conn *c;
	size_t b;

	/* a look every quarter deadline: a conn waits 1 to 1.25 of them */
	if (!deadline_ns || ep->now_ns < ep->pkt_watch_ns)
		return;
	ep->pkt_watch_ns = ep->now_ns + deadline_ns / 4;
	for (b = 0; b < MRL_CONN_BUCKETS; b++)
		for (c = ep->conns[b]; c; c = c->next)
			mrl_pkt_watch_conn(ep, c, deadline_ns);
}

/* The health tick: the ACKs left for later go now; the ACK watch. */
void mrl_pkt_tick(struct mrl_ep *ep)
{
	struct mrl_conn *conn;

	while (!mrl_list_empty(&ep->msg_acks_later)) {
		conn = mrl_container_of(ep->msg_acks_later.next,
					struct mrl_conn, ack_link);
		mrl_pkt_ack_due(ep, conn, true);
	}
	if (ep->conns)
		mrl_pkt_watch_acks(ep);
	if (ep->pkt_rx_unposted)
		mrl_pkt_retry_rx(ep);
}

/* ---- rails that fail ---------------------------------------------------- */

/*
 * rail went out of service for peer (mrl_health.c): what our messages to
 * it had there goes again on its other rails, and an ACK of ours that was
 * there is sent again.
 */
void mrl_pkt_rail_down(struct mrl_ep *ep, struct mrl_peer *peer, int rail)
{
	struct mrl_conn *conn;

	if (!ep->msg_striped || !ep->conns || peer->partial)
		return;
	conn = mrl_conn_get(ep, mrl_av_peer_id(peer), false);
	if (!conn)
		return;
	mrl_eager_resend(ep, conn, rail);
	if (conn->rx.next)
		mrl_pkt_ack_due(ep, conn, true);
}

/*
 * Each peer with our packets in flight on rail, for fn (the stall watch
 * and the connection resets of mrl_health.c); fn returns false to stop.
 */
void mrl_pkt_for_each_busy_peer(struct mrl_ep *ep, int rail,
				bool (*fn)(struct mrl_peer *, void *),
				void *arg)
{
	struct mrl_peer *peer;
	struct mrl_conn *c;
	size_t b;

	if (!ep->msg_striped || !ep->conns || !ep->rails[rail].pkt_out)
		return;
	for (b = 0; b < MRL_CONN_BUCKETS; b++) {
		for (c = ep->conns[b]; c; c = c->next) {
			if (!c->rail_out[rail])
				continue;
			peer = mrl_conn_peer(ep, c);
			if (peer && !fn(peer, arg))
				return;
		}
	}
}

/* Progress's share: refused packets, segments still to go, ACKs due. */
void mrl_pkt_progress(struct mrl_ep *ep)
{
	if (ep->pkt_backlog)
		mrl_pkt_drain_backlog(ep);
	if (!mrl_list_empty(&ep->msg_sending))
		mrl_eager_push(ep);
	if (!mrl_list_empty(&ep->msg_acks))
		mrl_pkt_send_acks(ep);
}

/* ---- what arrives ------------------------------------------------------- */

static const char *const mrl_pkt_drop_reason[MRL_PKT_DROP_KINDS] = {
	[MRL_PKT_DROP_SHORT] = "shorter than its headers",
	[MRL_PKT_DROP_VERSION] = "an unknown version",
	[MRL_PKT_DROP_TYPE] = "an unknown type",
	[MRL_PKT_DROP_FLAGS] = "unknown flags",
	[MRL_PKT_DROP_LENGTH] = "lengths that disagree",
	[MRL_PKT_DROP_SEGMENT] = "a segment outside its message",
	[MRL_PKT_DROP_IOV] = "iovs that do not add up",
	[MRL_PKT_DROP_SENDER] = "another sender's name",
};

/*
 * Does a packet claiming to be from peer id come from it?  Where the
 * rail's core names senders (FI_SOURCE), a peer in our AV sends from its
 * entry in that rail's core AV (a learned one, not inserted on that rail:
 * from none), so a claim from elsewhere is another process's, or a
 * forgery.  A sender we do not know is taken at its word: it speaks for
 * itself only, in an order of its own, and gets no ACK until inserted.
 */
static bool mrl_pkt_sender_ok(struct mrl_ep *ep, int rail, uint64_t id,
			      fi_addr_t core_src)
{
	struct mrl_peer *peer;

	if (!ep->rails[rail].names_src || !ep->rails[rail].reads_src)
		return true;
	peer = mrl_av_peer_by_id(ep->av, id);
	if (!peer || peer->rail[rail].core_addr == core_src)
		return true;
	ep->pkt_dropped[MRL_PKT_DROP_SENDER]++;
	MRL_WARN_ONCE(FI_LOG_EP_DATA, "rail %d: a message packet in the name "
		      "of a peer it did not come from: dropped\n", rail);
	return false;
}

static void mrl_pkt_ack_arrived(struct mrl_ep *ep,
				const struct mrl_pkt_hdr *hdr,
				const uint8_t *body)
{
	struct mrl_conn *conn = mrl_conn_get(ep, hdr->src, false);
	struct mrl_pkt_ack ack;

	memcpy(&ack, body, sizeof(ack));
	/* a peer we never sent to may ACK nothing (a health probe) */
	if (!conn && !ack.next)
		return;
	/* an ACK that an earlier one overtook on a faster rail says less */
	if (conn && (int32_t) (ack.next - conn->tx.acked) < 0)
		return;
	if (!conn || mrl_order_tx_ack(&conn->tx, ack.next, ack.window)) {
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "an ACK for messages never sent: "
			      "dropped\n");
		ep->pkt_dropped[MRL_PKT_DROP_SEGMENT]++;
		return;
	}
	mrl_eager_acked(ep, conn, ack.next);
}

static void mrl_pkt_data_arrived(struct mrl_ep *ep, int rail,
				 const struct mrl_pkt_hdr *hdr,
				 const uint8_t *body, size_t len)
{
	struct mrl_conn *conn = mrl_conn_get(ep, hdr->src, true);
	struct mrl_pkt_seg seg = { 0 };

	if (!conn)
		return;
	conn->heard_rail = rail;
	if (hdr->type == MRL_PKT_MEDIUM) {
		memcpy(&seg, body, sizeof(seg));
		body += sizeof(seg);
		len -= sizeof(seg);
	}
	mrl_eager_arrived(ep, conn, hdr, body, seg.offset, len);
}

static void mrl_pkt_received(struct mrl_ep *ep, struct mrl_pkt_buf *buf,
			     size_t len, fi_addr_t core_src)
{
	int verdict = mrl_pkt_check(buf->data, len);
	const uint8_t *body = buf->data + sizeof(struct mrl_pkt_hdr);
	struct mrl_pkt_hdr hdr;

	if (verdict != MRL_PKT_OK) {
		ep->pkt_dropped[verdict]++;
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "rail %d: a message packet with "
			      "%s: dropped\n", buf->rail,
			      mrl_pkt_drop_reason[verdict]);
		return;
	}
	memcpy(&hdr, buf->data, sizeof(hdr));
	if (!mrl_pkt_sender_ok(ep, buf->rail, hdr.src, core_src))
		return;
	switch (hdr.type) {
	case MRL_PKT_EAGER:
	case MRL_PKT_MEDIUM:
		mrl_pkt_data_arrived(ep, buf->rail, &hdr, body,
				     len - sizeof(hdr));
		break;
	case MRL_PKT_ACK:
		mrl_pkt_ack_arrived(ep, &hdr, body);
		break;
	default:
		ep->pkt_dropped[MRL_PKT_DROP_TYPE]++;
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "a rendezvous packet: this "
			      "version sends none: dropped\n");
	}
}

/*
 * A packet of ours completed.  One the path failed takes its rail out for
 * the peer (mrl_health.c), which sends again what was there
 * (mrl_pkt_rail_down); a rail already out sent it again when it went.
 */
static void mrl_pkt_sent(struct mrl_ep *ep, struct mrl_pkt_buf *buf, int err)
{
	struct mrl_conn *conn = buf->conn;
	int rail = buf->rail;

	buf->in_core = false;
	ep->rails[rail].pkt_out--;
	ep->rails[rail].pkts_done++;
	mrl_nonchunk_done(ep, rail);
	if (conn)
		conn->rail_out[rail]--;
	if (buf->probe && conn) {
		struct mrl_peer *peer = mrl_conn_peer(ep, conn);

		if (peer)
			mrl_health_pkt_probe_done(ep, peer, rail, err);
	}
	/* a reset connection's core may cancel what it still held */
	if (err && conn && mrl_pkt_path_failed(ep, conn, rail, err))
		err = MRL_PKT_VOID;	/* it goes again on the other rails */
	mrl_eager_sent(ep, buf, err);
}

/* Progress hands every packet buffer's completion here. */
void mrl_pkt_completed(struct mrl_ep *ep, struct mrl_pkt_buf *buf, size_t len,
		       fi_addr_t core_src, int err)
{
	if (buf->hdr.kind == MRL_REQ_PKT_TX) {
		mrl_pkt_sent(ep, buf, err);
		return;
	}
	if (err == -FI_ECANCELED)	/* closing */
		return;
	if (err)
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "rail %d: a packet receive "
			      "failed: %s\n", buf->rail, fi_strerror(-err));
	else
		mrl_pkt_received(ep, buf, len, core_src);
	ep->rails[buf->rail].pkts_received++;
	mrl_pkt_repost_rx(ep, buf);
}

/* ---- teardown ----------------------------------------------------------- */

static void mrl_pkt_keep_held(void *msg, void *arg)
{
	(void) msg;	/* held messages are on their conn's partial list */
	(void) arg;
}

/* After the core endpoints are closed: nothing is in flight. */
void mrl_pkt_fini(struct mrl_ep *ep)
{
	struct mrl_conn *c, *next;
	size_t b;
	int r;

	if (!ep->msg_striped || !ep->conns)
		return;
	mrl_eager_fini(ep);
	for (b = 0; ep->conns && b < MRL_CONN_BUCKETS; b++) {
		for (c = ep->conns[b]; c; c = next) {
			next = c->next;
			mrl_order_rx_fini(&c->rx, mrl_pkt_keep_held, NULL);
			free(c);
		}
	}
	for (r = 0; r < ep->nrails; r++) {
		if (ep->rails[r].pkt_mr)
			fi_close(&ep->rails[r].pkt_mr->fid);
		ep->rails[r].pkt_mr = NULL;
	}
	free(ep->conns);
	free(ep->msg_sends);
	free(ep->pkt_bufs);
	ep->conns = NULL;
	ep->msg_sends = NULL;
	ep->pkt_bufs = NULL;
}
