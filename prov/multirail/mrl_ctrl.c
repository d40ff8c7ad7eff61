/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Control channel: tagged messages with MRL_CTRL_TAG on rail 0, and a
 * RAIL_UP on each other rail at the first op to a peer.  A core without
 * FI_TAGGED (efa-direct) carries them as plain messages between control
 * endpoints of their own on rail 0's domain (mrl_ep.c), and no RAIL_UP
 * (such a core needs no connection set up).
 *
 * Every message carries the sender's full composite address, so the
 * receiver can answer a peer it has never been told about (it is added to
 * the AV as a hidden peer) and completes a partial address it holds.
 *   HELLO / HELLO_ACK   exchange full addresses (after a partial insert)
 *   KEY_REQ / KEY_RESP  the target's per-rail keys behind one of our keys
 *   RAIL_UP             on rails 1..n-1: connects them early (no answer)
 *   RAIL_ASK            asks the peer for RAIL_UPs: of a pair, one end
 *                       connects rails 1..n-1 (mrl_addr_connects)
 * Nothing waits on these: until an answer comes, RMA uses rail 0 alone.
 * While rail 0 is out of service for a peer, a key question goes on its
 * first rail in service and is answered there (mrl_question_rail), and the
 * ops to that key wait parked for the answer (mrl_ctrl_key_awaited).
 * A send the core refuses for now (-FI_EAGAIN: rxm is still connecting,
 * say) waits in a backlog that progress drains in order, so no answer is
 * lost; a question unanswered for MRL_KEY_REASK_NS is asked again.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "mrl.h"

/* Until the keys come, every op to the key goes on rail 0 alone: a lost
 * question must not cost long (the answer is a few ms on a busy host). */
#define MRL_KEY_REASK_NS	200000000ull
/* A rail asked for (RAIL_ASK) and not opened: the answer is a connection
 * setup away, tens of ms under rxm, seconds with hundreds starting. */
#define MRL_RAIL_REASK_MS	1000u
/* How long rails are asked for where FI_MULTIRAIL_CONNECT_TIMEOUT_MS is 0 */
#define MRL_RAIL_ASK_LIMIT_MS	30000u

/* The connections of these rails to the peer are up: ours to use. */
static void mrl_peer_rails_up(struct mrl_ep *ep, struct mrl_peer *peer,
			     uint32_t rails)
{
	if (!(peer->rails_closed & rails))
		return;
	peer->rails_closed &= ~rails;
	if (!peer->rails_closed)
		peer->asks = 0;
	peer->key_hint = NULL;	/* its rails may grow */
	mrl_rma_widen_pending(ep, peer);
}

static void *mrl_ctrl_desc(struct mrl_ep *ep, int rail)
{
	struct fid_mr *mr = ep->rails[rail].ctrl_mr;

	return mr ? fi_mr_desc(mr) : NULL;
}

/*
 * The rail a key question to peer goes on: rail 0, or while rail 0 is out
 * of service for the peer, its first rail in service.  A core with tagged
 * messages receives control on every rail; control endpoints (a core
 * without) and a peer known by rail 0's address alone have rail 0 only.
 */
static int mrl_question_rail(const struct mrl_ep *ep,
			     const struct mrl_peer *peer)
{
	uint32_t up;

	if (!(peer->rails_down & 1u) || ep->ctrl_ep || peer->partial)
		return 0;
	up = mrl_rail_mask(peer->nrails) & ~peer->rails_down;
	return up ? __builtin_ctz(up) : 0;
}

static int mrl_post_rx(struct mrl_ep *ep, struct mrl_ctrl_buf *buf)
{
	int ret;

	buf->hdr.kind = MRL_REQ_CTRL_RX;
	ret = ep->ctrl_ep ?
	      fi_recv(ep->ctrl_ep, buf->data, MRL_CTRL_BUF_SIZE,
		      mrl_ctrl_desc(ep, 0), FI_ADDR_UNSPEC, &buf->hdr) :
	      fi_trecv(ep->rails[buf->rail].ep, buf->data, MRL_CTRL_BUF_SIZE,
		       mrl_ctrl_desc(ep, buf->rail), FI_ADDR_UNSPEC, buf->tag,
		       0, &buf->hdr);
	if (ret)
		MRL_WARN_ONCE(FI_LOG_EP_CTRL, "rail %d: control receive: "
			      "%s\n", buf->rail, fi_strerror(-ret));
	return ret;
}

static int mrl_register_bufs(struct mrl_ep *ep)
{
	struct mrl_domain *dom = ep->domain;
	int r, ret;

	for (r = 0; r < ep->nrails; r++) {
		ret = fi_mr_reg(dom->rails[r].domain, ep->ctrl_bufs,
				ep->ctrl_nbufs * sizeof(*ep->ctrl_bufs),
				FI_SEND | FI_RECV | FI_WRITE, 0, ~0ULL - 1 - r,
				0, &ep->rails[r].ctrl_mr, NULL);
		if (ret) {
			MRL_WARN(FI_LOG_EP_CTRL, "rail %d: control buffers: "
				 "fi_mr_reg: %s\n", r, fi_strerror(-ret));
			return ret;
		}
	}
	return 0;
}

/*
 * The tag bits a control tag may use on this domain's core: its
 * mem_tag_format describes fields, not a mask (FI_TAG_GENERIC is
 * 0xaaaa...); the bits below its highest one are the tag's.
 */
static uint64_t mrl_ctrl_tag_bits(const struct mrl_ep *ep)
{
	uint64_t m = ep->domain->rails[0].info->ep_attr->mem_tag_format;
	int shift;

	for (shift = 1; shift < 64; shift <<= 1)
		m |= m >> shift;
	return m;
}

/*
 * Each rail's control tag for us (mrl_proto.h): from our address as peers
 * hold it, each rail's slot whole (a string address is padded there).
 */
static void mrl_ctrl_tags(const struct mrl_ep *ep, uint64_t *tags)
{
	const struct mrl_addr_hdr *hdr = ep->name;
	int r;

	for (r = 0; r < ep->nrails; r++)
		tags[r] = mrl_ctrl_tag_for(mrl_addr_rail(hdr, r),
					   hdr->rail_addrlen,
					   mrl_ctrl_tag_bits(ep));
}

/*
 * Receives: MRL_CTRL_RX_COUNT on rail 0, which carries every exchange, and
 * a few on each other rail for RAIL_UP (more queue in the core as
 * unexpected messages until one is reposted).  Of rail 0's, the first
 * MRL_CTRL_RX_ANY take MRL_CTRL_TAG_ANY (senders that know us by a
 * partial address), the rest our tag.  Then the send buffers.
 */
int mrl_ctrl_init(struct mrl_ep *ep)
{
	uint64_t tags[MRL_MAX_RAILS];
	struct mrl_domain *dom = ep->domain;
	size_t nrx = MRL_CTRL_RX_COUNT, i;
	int ret;

	/* a core without FI_TAGGED always has a control endpoint here */
	if (!ep->ctrl_ep)
		nrx += (size_t) (ep->nrails - 1) * MRL_CTRL_RAIL_RX_COUNT;
	ep->ctrl_nbufs = nrx + MRL_CTRL_TX_COUNT;
	ep->ctrl_bufs = calloc(ep->ctrl_nbufs, sizeof(*ep->ctrl_bufs));
	if (!ep->ctrl_bufs)
		return -FI_ENOMEM;
	mrl_ctrl_tags(ep, tags);
	if (dom->core_mr_local) {
		ret = mrl_register_bufs(ep);
		if (ret)
			return ret;
	}
	for (i = 0; i < nrx; i++) {
		ep->ctrl_bufs[i].rail = i < MRL_CTRL_RX_COUNT ? 0 :
			1 + (int) ((i - MRL_CTRL_RX_COUNT) /
				   MRL_CTRL_RAIL_RX_COUNT);
		ep->ctrl_bufs[i].tag = ep->ctrl_ep ? 0 :
			i < MRL_CTRL_RX_ANY ? MRL_CTRL_TAG_ANY :
			tags[ep->ctrl_bufs[i].rail];
		ret = mrl_post_rx(ep, &ep->ctrl_bufs[i]);
		if (ret)
			return ret;
	}
	for (; i < ep->ctrl_nbufs; i++) {
		ep->ctrl_bufs[i].hdr.kind = MRL_REQ_CTRL_TX;
		mrl_ctrl_buf_stack_push(&ep->ctrl_tx_free, &ep->ctrl_bufs[i]);
	}
	ep->ctrl_backlog = NULL;
	ep->ctrl_backlog_tail = &ep->ctrl_backlog;
	if (getrandom(&ep->ctrl_rng, sizeof(ep->ctrl_rng), GRND_NONBLOCK) !=
	    sizeof(ep->ctrl_rng))
		ep->ctrl_rng = mrl_clock_ns() ^ (uintptr_t) ep;
	ep->ctrl_rng |= 1;
	ep->ctrl_enabled = true;
	return 0;
}

/*
 * A KEY_RESP is taken only with the nonce its KEY_REQ carried, and the
 * request went to the peer's own address (on rail 0, or on the rail in
 * service it was asked on: mrl_question_rail): whoever else claims to be that
 * peer never saw it, so cannot answer for it (false keys, or "no such
 * key" to make our ops to it fail).
 */
static uint32_t mrl_new_nonce(struct mrl_ep *ep)
{
	uint64_t x = ep->ctrl_rng;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	ep->ctrl_rng = x;
	return (uint32_t) (x >> 16) ?: 1;
}

/*
 * The core endpoints are closed, with sends they never gave back: their
 * peers may be evicted now.  Domain locked (another endpoint may be
 * learning peers of the same AV).
 */
void mrl_ctrl_forget_sends(struct mrl_ep *ep)
{
	mrl_assert_locked(ep->domain);
	size_t i;

	for (i = 0; ep->ctrl_bufs && i < ep->ctrl_nbufs; i++) {
		if (ep->ctrl_bufs[i].peer)
			ep->ctrl_bufs[i].peer->ctrl_refs--;
		ep->ctrl_bufs[i].peer = NULL;
		ep->ctrl_bufs[i].write_data_op = NULL;	/* its op goes too */
	}
}

/* After the core endpoints are closed: nothing refers to the buffers. */
void mrl_ctrl_fini(struct mrl_ep *ep)
{
	int r;

	for (r = 0; r < ep->nrails; r++) {
		if (ep->rails[r].ctrl_mr)
			fi_close(&ep->rails[r].ctrl_mr->fid);
		ep->rails[r].ctrl_mr = NULL;
	}
	free(ep->ctrl_bufs);
	ep->ctrl_bufs = NULL;
	ep->ctrl_enabled = false;
}

/* The send's buffer is free, and its peer no longer named by it. */
void mrl_ctrl_tx_done(struct mrl_ep *ep, struct mrl_ctrl_buf *buf)
{
	if (buf->peer) {
		buf->peer->ctrl_refs--;
		buf->peer = NULL;
	}
	buf->hdr.kind = MRL_REQ_CTRL_TX;
	mrl_ctrl_buf_stack_push(&ep->ctrl_tx_free, buf);
}

/*
 * Where buf goes on rail: the peer's control endpoint, or its rail, with
 * the tag of the peer's endpoint there (MRL_CTRL_TAG_ANY while we know it
 * by a partial address).
 */
static void mrl_set_dest(struct mrl_ep *ep, struct mrl_ctrl_buf *buf, int rail)
{
	const struct mrl_peer *peer = buf->peer;

	buf->rail = rail;
	buf->dest = ep->ctrl_ep ? peer->ctrl_addr :
				  peer->rail[rail].core_addr;
	buf->tag = ep->ctrl_ep || peer->partial ? MRL_CTRL_TAG_ANY :
		   mrl_ctrl_tag_for(mrl_addr_rail(peer->addr, rail),
				    ((const struct mrl_addr_hdr *)
				     peer->addr)->rail_addrlen,
				    mrl_ctrl_tag_bits(ep));
}

static void mrl_backlog_add(struct mrl_ep *ep, struct mrl_ctrl_buf *buf)
{
	buf->next_free = NULL;
	*ep->ctrl_backlog_tail = buf;
	ep->ctrl_backlog_tail = &buf->next_free;
}

/*
 * Where the core has no FI_TAGGED, messages go to the peer's control
 * endpoint but leave from our rail 0's: the source the peer's core reports
 * is then an address it knows for us, and checks our claim against
 * (mrl_av_claim_from), where our control endpoint's may be unknown to it.
 */
static ssize_t mrl_post_data_flush(struct mrl_ep *ep, struct mrl_ctrl_buf *buf)
{
	ssize_t ret;

	buf->hdr.kind = MRL_REQ_DATA_FLUSH;
	ret = mrl_post_zero_rma(ep, buf->rail, buf->dest, &buf->hdr,
				buf->wd_addr, buf->flush_key,
				ep->domain->fence_by_read);
	if (ret)
		buf->hdr.kind = MRL_REQ_CTRL_TX;
	else
		mrl_nonchunk_posted(ep, buf->rail);
	return ret;
}

static ssize_t mrl_post_tx(struct mrl_ep *ep, struct mrl_ctrl_buf *buf)
{
	ssize_t ret;

	if (buf->flush)
		return mrl_post_data_flush(ep, buf);
	ret = ep->ctrl_ep ? fi_send(ep->rails[0].ep, buf->data, buf->len,
				    mrl_ctrl_desc(ep, 0), buf->dest, &buf->hdr)
			  : fi_tsend(ep->rails[buf->rail].ep, buf->data,
				     buf->len, mrl_ctrl_desc(ep, buf->rail),
				     buf->dest, buf->tag, &buf->hdr);
	if (!ret) {
		ep->rails[buf->rail].ctrl_sent++;
		mrl_nonchunk_posted(ep, ep->ctrl_ep ? 0 : buf->rail);
	}
	return ret;
}

/* Does a message before buf, refused by the core, go where buf goes? */
static bool mrl_behind_refused(struct mrl_ctrl_buf *const *refused, int n,
			       const struct mrl_ctrl_buf *buf)
{
	int i;

	for (i = 0; i < n; i++) {
		if (refused[i]->rail == buf->rail &&
		    refused[i]->dest == buf->dest)
			return true;
	}
	return false;
}

/*
 * A message for a rail out of service for its peer (mrl_health.c) leaves
 * the backlog: it would hold a buffer of the pool all peers share for as
 * long as the core refuses it, which for a dead peer may be for ever.
 * Logged the 1st, 2nd, 4th... time.
 */
static bool mrl_rail_down_for(const struct mrl_ctrl_buf *buf)
{
	return buf->peer->rails_down & (1u << buf->rail);
}

/*
 * A WRITE_DATA for a rail now out of service goes on the peer's rail in
 * service instead (it carries no bytes that the rail had to carry).
 */
static bool mrl_reroute(struct mrl_ep *ep, struct mrl_ctrl_buf *buf)
{
	int rail;

	if ((!buf->write_data_op && !buf->inject_data) || buf->flush)
		return false;	/* a flush belongs behind its message */
	rail = mrl_question_rail(ep, buf->peer);
	if (buf->peer->rails_down & (1u << rail))
		return false;
	mrl_set_dest(ep, buf, rail);
	return true;
}

static void mrl_drop_backlogged(struct mrl_ep *ep, struct mrl_ctrl_buf *buf)
{
	uint64_t n;

	mrl_ctrl_sent(ep, buf, -FI_EHOSTUNREACH);
	n = ++ep->ctrl_tx_dropped;
	if (!(n & (n - 1)))
		MRL_WARN(FI_LOG_EP_CTRL, "rail %d: a control message to a peer "
			 "this rail is out of service for dropped (%lu so "
			 "far)\n", buf->rail, (unsigned long) n);
}

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
void mrl_ctrl_conn_reset(struct mrl_ep *ep, struct mrl_peer *peer, int rail)
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
static int mrl_write_data_gate(struct mrl_ep *ep, struct mrl_ctrl_buf *buf)
{
	if (!(buf->write_data_op || buf->inject_data) || buf->flush)
		return 0;
	if (mrl_flush_elsewhere(ep, buf))
		return -FI_EAGAIN;
	return mrl_fence_lost_since(ep, buf->peer);
}

/*
 * Sends what the core refused before, in order per destination: a
 * connection still being made (or to a peer that never answers) holds back
 * its own messages, not those to the other peers on its rail.
 */
void mrl_ctrl_progress(struct mrl_ep *ep)
{
	struct mrl_ctrl_buf **pos = &ep->ctrl_backlog, *buf;
	struct mrl_ctrl_buf *refused[MRL_CTRL_TX_COUNT];
	int nrefused = 0;
	ssize_t ret;

	while ((buf = *pos)) {
		if (mrl_rail_down_for(buf) && !mrl_reroute(ep, buf)) {
			*pos = buf->next_free;
			mrl_drop_backlogged(ep, buf);
			continue;
		}
		ret = mrl_behind_refused(refused, nrefused, buf) ? -FI_EAGAIN :
		      mrl_write_data_gate(ep, buf);
		if (!ret)
			ret = mrl_post_tx(ep, buf);
		if (ret == -FI_EAGAIN) {
			if (nrefused < MRL_CTRL_TX_COUNT)
				refused[nrefused++] = buf;
			pos = &buf->next_free;
			continue;
		}
		*pos = buf->next_free;
		if (ret) {
			if (ret != -FI_EIO)	/* EIO: a loss, warned of */
				MRL_WARN_ONCE(FI_LOG_EP_CTRL, "rail %d: control "
					      "send: %s\n", buf->rail,
					      fi_strerror((int) -ret));
			mrl_ctrl_sent(ep, buf, (int) ret);
		}
	}
	ep->ctrl_backlog_tail = pos;
}

/*
 * A message of type to peer in buf (which the caller has taken), with our
 * address and extra bytes of room after it: its header, at the payload's
 * end; the caller fills the rest.
 */
static struct mrl_ctrl_msg *mrl_compose(struct mrl_ep *ep,
					struct mrl_ctrl_buf *buf,
					struct mrl_peer *peer, int rail,
					int type, size_t extra)
{
	struct mrl_ctrl_msg *msg = (struct mrl_ctrl_msg *) buf->data;

	memset(msg, 0, sizeof(*msg));
	msg->magic = MRL_CTRL_MAGIC;
	msg->version = MRL_CTRL_VERSION;
	msg->type = type;
	msg->addrlen = ep->namelen;
	memcpy(msg->payload, ep->name, ep->namelen);
	buf->len = sizeof(*msg) + ep->namelen + extra;
	buf->peer = peer;
	peer->ctrl_refs++;		/* it may not be evicted meanwhile */
	mrl_set_dest(ep, buf, rail);
	return msg;
}

/* Can a message of extra bytes after our address go to peer? */
static int mrl_can_send(const struct mrl_ep *ep, const struct mrl_peer *peer,
			size_t extra)
{
	if (!ep->ctrl_enabled)
		return -FI_ENOSYS;
	if (ep->ctrl_ep && peer->ctrl_addr == FI_ADDR_NOTAVAIL)
		return -FI_EADDRNOTAVAIL;	/* its address names none */
	if (sizeof(struct mrl_ctrl_msg) + ep->namelen + extra >
	    MRL_CTRL_BUF_SIZE)
		return -FI_EINVAL;
	return ep->ctrl_tx_free ? 0 : -FI_EAGAIN;
}

static struct mrl_ctrl_buf *mrl_take_tx(struct mrl_ep *ep)
{
	struct mrl_ctrl_buf *buf = mrl_ctrl_buf_stack_pop(&ep->ctrl_tx_free);

	buf->write_data_op = NULL;
	buf->inject_data = false;
	buf->flush = false;
	buf->loss_told = false;
	return buf;
}

/* Behind what still waits for its destination: each keeps its order. */
static void mrl_queue_tx(struct mrl_ep *ep, struct mrl_ctrl_buf *buf)
{
	mrl_backlog_add(ep, buf);
	mrl_ctrl_progress(ep);
}

/*
 * 0 when sent or queued (a core error is logged where the send is posted);
 * -FI_EAGAIN only when every buffer is taken.
 */
static int mrl_send_on(struct mrl_ep *ep, struct mrl_peer *peer, int rail,
		       int type, uint64_t key, int status, const uint64_t *keys,
		       int nkeys, uint32_t near_mask, uint32_t nonce)
{
	size_t extra = nkeys * sizeof(uint64_t);
	struct mrl_ctrl_buf *buf;
	struct mrl_ctrl_msg *msg;
	int ret = mrl_can_send(ep, peer, extra);

	if (ret)
		return ret;
	buf = mrl_take_tx(ep);
	msg = mrl_compose(ep, buf, peer, rail, type, extra);
	msg->key = key;
	msg->status = status;
	msg->nkeys = nkeys;
	msg->near_mask = near_mask;
	msg->nonce = nonce;
	if (nkeys)
		memcpy(msg->payload + ep->namelen, keys, extra);
	mrl_queue_tx(ep, buf);
	return 0;
}

/* Everything but RAIL_UP goes on rail 0. */
static int mrl_send_ctrl(struct mrl_ep *ep, struct mrl_peer *peer, int type,
			 uint64_t key, uint32_t nonce)
{
	return mrl_send_on(ep, peer, 0, type, key, 0, NULL, 0, 0, nonce);
}

/*
 * Writes len bytes of b's on rail 0, delivery-complete where flags say;
 * b is taken only when the core took the write.
 */
static ssize_t mrl_post_bounce(struct mrl_ep *ep, struct mrl_ctrl_buf *b,
			       size_t len, fi_addr_t dest, uint64_t addr,
			       uint64_t key, uint64_t flags)
{
	struct iovec iov = { b->data, len };
	void *desc = mrl_ctrl_desc(ep, 0);
	struct fi_rma_iov rma = { addr, len, key };
	struct fi_msg_rma msg = {
		.msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = dest,
		.rma_iov = &rma, .rma_iov_count = 1, .context = &b->hdr,
	};
	ssize_t ret;

	b->hdr.kind = MRL_REQ_BOUNCE;
	ret = fi_writemsg(ep->rails[0].ep, &msg, FI_COMPLETION | flags);
	if (ret) {
		b->hdr.kind = MRL_REQ_CTRL_TX;
		return ret;
	}
	mrl_nonchunk_posted(ep, 0);
	mrl_take_tx(ep);
	return 0;
}

/*
 * An inject the core cannot do (efa-direct has no RMA inject: -FI_ENOSYS):
 * the bytes are copied into a registered control send buffer, so that the
 * caller's buffer is free on return as FI_INJECT promises, and written on
 * rail 0 from there.  The buffer comes back, and the write counter counts
 * the inject, when the write completes (mrl_ctrl_bounce_done).
 * 0, -FI_EAGAIN while every buffer is in use, or the core's error.
 */
ssize_t mrl_ctrl_bounce_write(struct mrl_ep *ep, const void *buf, size_t len,
			      fi_addr_t dest, uint64_t addr, uint64_t key)
{
	struct mrl_ctrl_buf *b = ep->ctrl_tx_free;

	if (!ep->ctrl_enabled || len > MRL_CTRL_BUF_SIZE)
		return -FI_ENOSYS;
	if (!b)
		return -FI_EAGAIN;
	memcpy(b->data, buf, len);
	return mrl_post_bounce(ep, b, len, dest, addr, key, 0);
}

static void mrl_write_data_inject(struct mrl_ep *ep, struct mrl_ctrl_buf *buf);

void mrl_ctrl_bounce_done(struct mrl_ep *ep, struct mrl_ctrl_buf *buf,
			  int err)
{
	if (!err && buf->inject_data) {
		mrl_write_data_inject(ep, buf);
		return;
	}
	if (err) {
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "an inject's write failed: %s\n",
			      fi_strerror(err));
		mrl_cntr_inc_err(ep->cntr_write);
	} else {
		mrl_cntr_inc(ep->cntr_write);
	}
	mrl_ctrl_tx_done(ep, buf);
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
static bool mrl_flush_write_data(struct mrl_ep *ep, struct mrl_ctrl_buf *buf)
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
		mrl_rma_done(ep, &buf->write_data_op->op, 0);
		buf->write_data_op = NULL;
	} else if (buf->inject_data) {
		mrl_cntr_inc(ep->cntr_write);	/* injects are never DC */
		buf->inject_data = false;
	}
	mrl_queue_tx(ep, buf);
	return true;
}

/* The flush behind a WRITE_DATA came back: the op completes with it. */
void mrl_ctrl_data_flushed(struct mrl_ep *ep, struct mrl_ctrl_buf *buf,
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
struct mrl_peer *mrl_ctrl_flushing_peer(struct mrl_ep *ep, int rail,
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
 * A WRITE_DATA's send completed (err 0), failed, or cannot go: its op, or
 * its inject's counter, learns how.  Never sent again: a send that failed
 * may still have arrived, and the target must not raise the data twice.
 */
void mrl_ctrl_sent(struct mrl_ep *ep, struct mrl_ctrl_buf *buf, int err)
{
	const struct mrl_ctrl_msg *msg = (const void *) buf->data;

	/* a RAIL_UP of ours went: its rail's connection is up */
	if (!err && buf->rail && msg->type == MRL_CTRL_RAIL_UP)
		mrl_peer_rails_up(ep, buf->peer, 1u << buf->rail);
	if (buf->flush) {
		ep->rails[buf->rail].fences--;
		ep->rails[buf->rail].fences_done++;
		/* a core cancels what it held on a connection torn down */
		if (err && !buf->write_data_op && !buf->loss_told)
			mrl_fence_data_lost(ep, buf->peer, buf->rail);
	} else if (!err && (buf->write_data_op || buf->inject_data) &&
		   mrl_flush_write_data(ep, buf)) {
		return;			/* the op completes with the flush */
	}
	if (err && err != -FI_ECANCELED && (buf->write_data_op || buf->inject_data))
		MRL_WARN(FI_LOG_EP_DATA, "rail %d: a writedata's CQ data %s "
			 "(%s): the op fails\n", buf->rail, buf->flush ?
			 "was sent but not seen to arrive" :
			 "could not be sent", fi_strerror(-err));
	if (buf->write_data_op) {
		mrl_rma_done(ep, &buf->write_data_op->op, err);
	} else if (buf->inject_data) {
		if (err)
			mrl_cntr_inc_err(ep->cntr_write);
		else
			mrl_cntr_inc(ep->cntr_write);
	}
	mrl_ctrl_tx_done(ep, buf);
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

	msg = mrl_compose(ep, buf, peer, mrl_question_rail(ep, peer),
			  MRL_CTRL_WRITE_DATA, sizeof(d));
	memcpy(msg->payload + ep->namelen, &d, sizeof(d));
}

/* 0 when sent or queued; -FI_EAGAIN while every buffer is taken. */
int mrl_ctrl_write_data(struct mrl_ep *ep, struct mrl_rma_req *req)
{
	struct mrl_peer *peer = req->op.peer;
	struct mrl_ctrl_buf *buf;
	int ret = mrl_can_send(ep, peer, sizeof(struct mrl_ctrl_data));

	if (ret)
		return ret;
	buf = mrl_take_tx(ep);
	mrl_compose_write_data(ep, buf, peer, req->op.len, req->op.data);
	buf->write_data_op = req;
	buf->wd_addr = req->op.raddr;
	buf->wd_key = mrl_rma_req_key(req);
	mrl_queue_tx(ep, buf);
	return 0;
}

/* An inject's bytes landed from buf: buf now carries its WRITE_DATA. */
static void mrl_write_data_inject(struct mrl_ep *ep, struct mrl_ctrl_buf *buf)
{
	struct mrl_peer *peer = buf->peer;

	peer->ctrl_refs--;		/* compose names it again */
	buf->hdr.kind = MRL_REQ_CTRL_TX;
	mrl_compose_write_data(ep, buf, peer, buf->data_len, buf->cq_data);
	mrl_queue_tx(ep, buf);
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
	       !mrl_question_rail(ep, peer);
}

/*
 * fi_inject_writedata: the core's inject of the bytes, and a WRITE_DATA
 * behind it, where rail 0 keeps them in order; elsewhere the bytes go
 * from a control buffer (the caller's is free on return) and the
 * WRITE_DATA once that write completed.  The write counter counts it when
 * the WRITE_DATA was sent.  0, -FI_EAGAIN while every buffer is taken, or
 * the core's error.
 */
ssize_t mrl_ctrl_inject_data(struct mrl_ep *ep, struct mrl_peer *peer,
			     const void *buf, size_t len, uint64_t data,
			     fi_addr_t dest, uint64_t addr, uint64_t key)
{
	struct mrl_ctrl_buf *b;
	ssize_t ret = mrl_can_send(ep, peer, sizeof(struct mrl_ctrl_data));

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
		ret = mrl_post_bounce(ep, b, len, dest, addr, key,
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
	mrl_take_tx(ep);
	mrl_compose_write_data(ep, b, peer, len, data);
	b->inject_data = true;
	b->wd_addr = addr;
	b->wd_key = key;
	mrl_queue_tx(ep, b);
	return 0;
}

/* The target: a writedata's bytes are all here; its entry, once. */
static void mrl_write_data_arrived(struct mrl_ep *ep, struct mrl_peer *peer,
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

/*
 * Bring a peer's rails up before chunks need them.  A core like rxm
 * connects on the first send to a peer and sets up an endpoint's transmit
 * buffers on its first transmit: tens of milliseconds per rail.  Left to
 * the chunks, that happens rail after rail once the target's keys are
 * known, while the op waits.  A RAIL_UP on every rail the op may use, sent
 * with the op's first chunk on rail 0, lets the rails connect in parallel
 * with the key exchange.  One endpoint per peer does this (the one that
 * first reached it); others connect as their chunks arrive.
 *
 * A core without FI_TAGGED has no connection to set up, but a peer that
 * knows us by a partial address without our control endpoint's (fi_getinfo
 * with a node gives one) cannot ask us for keys: our first op to it tells
 * it our full address (a HELLO_ACK, which asks for nothing).  So does our
 * first message: fabtests' server only sends to its client, which knows
 * it by fi_getinfo's node.
 */
void mrl_ctrl_introduce(struct mrl_ep *ep, struct mrl_peer *peer)
{
	if (!ep->ctrl_ep || !ep->ctrl_enabled || (peer->rails_up & 1u) ||
	    peer->partial ||
	    (peer->rails_up_ep && peer->rails_up_ep != ep))
		return;
	if (mrl_send_ctrl(ep, peer, MRL_CTRL_HELLO_ACK, 0, 0) == -FI_EAGAIN)
		return;			/* no buffer now: the next op retries */
	peer->rails_up |= 1u;
	peer->rails_up_ep = ep;
}

/* A RAIL_UP on each rail of todo (1 and up) while buffers last: the rails
 * it went on. */
static uint32_t mrl_send_rails_up(struct mrl_ep *ep, struct mrl_peer *peer,
				  uint32_t todo)
{
	uint32_t sent = 0;
	int r;

	for (r = 1; todo >> r && r < peer->nrails; r++) {
		if (!(todo & (1u << r)) ||
		    peer->rail[r].core_addr == FI_ADDR_NOTAVAIL)
			continue;
		if (mrl_send_on(ep, peer, r, MRL_CTRL_RAIL_UP, 0, 0, NULL, 0, 0, 0))
			break;		/* no buffer now: the next op retries */
		sent |= 1u << r;
	}
	return sent;
}

/* The clock itself, not the health tick's: an op may wait on it. */
static uint32_t mrl_now_ms(void)
{
	return (uint32_t) (mrl_clock_ns() / 1000000u);
}

/*
 * The peer opens these rails to us (mrl_addr_connects): ask it to, and
 * post nothing there until its RAIL_UP comes (mrl_ctrl_open_rails).  The
 * rails asked for, or 0 when no buffer was free (the next op asks).
 */
static uint32_t mrl_ask_rails(struct mrl_ep *ep, struct mrl_peer *peer,
			      uint32_t todo)
{
	if (mrl_send_ctrl(ep, peer, MRL_CTRL_RAIL_ASK, todo, 0))
		return 0;
	peer->rails_closed |= todo;
	peer->key_hint = NULL;		/* its rails may be closed ones */
	peer->asked_ms = mrl_now_ms();
	if (peer->asks < UINT8_MAX)
		peer->asks++;
	return todo;
}

void mrl_ctrl_rails_up(struct mrl_ep *ep, struct mrl_peer *peer,
		       uint32_t rails)
{
	uint32_t todo = rails & ~peer->rails_up & ~1u, done;

	if (ep->ctrl_ep) {
		mrl_ctrl_introduce(ep, peer);
		return;
	}

	if (!todo || !ep->ctrl_enabled || peer->partial ||
	    (peer->rails_up_ep && peer->rails_up_ep != ep))
		return;
	done = mrl_addr_connects(ep->name, peer->addr)
		       ? mrl_send_rails_up(ep, peer, todo)
		       : mrl_ask_rails(ep, peer, todo);
	if (done) {
		peer->rails_up |= done;
		peer->rails_up_ep = ep;
	}
}

/*
 * We reset our connection to peer on rail (mrl_reset.c); its end of it
 * may still be open, holding what arrived, and its core would refuse our
 * core's next connection there as a duplicate of it.  Told on a rail in
 * service, it resets its end too.  Best effort: a peer we cannot tell
 * learns when its end next sends.
 */
void mrl_ctrl_reset_rail(struct mrl_ep *ep, struct mrl_peer *peer, int rail)
{
	uint32_t usable = mrl_rail_mask(peer->nrails) & ~peer->rails_down &
			  ~mrl_rail_bit(rail);

	if (!ep->ctrl_enabled || ep->ctrl_ep || !usable)
		return;
	mrl_send_on(ep, peer, (usable & 1u) ? 0 : __builtin_ctz(usable),
		    MRL_CTRL_RAIL_RESET, (uint64_t) rail, 0, NULL, 0, 0, 0);
}

/*
 * Rails asked for and not opened are asked for again every
 * MRL_RAIL_REASK_MS (the question or its answer may have been lost with a
 * rail); after FI_MULTIRAIL_CONNECT_TIMEOUT_MS of asking, a peer that may
 * never start, they are ours to open.
 */
static void mrl_reask_rails(struct mrl_ep *ep, struct mrl_peer *peer)
{
	uint32_t limit_ms = mrl_params.connect_timeout_ms > 0 ?
			    (uint32_t) mrl_params.connect_timeout_ms :
			    MRL_RAIL_ASK_LIMIT_MS;

	if (!peer->rails_closed || !ep->ctrl_enabled ||
	    mrl_now_ms() - peer->asked_ms < MRL_RAIL_REASK_MS)
		return;
	if ((uint32_t) peer->asks * MRL_RAIL_REASK_MS < limit_ms) {
		mrl_ask_rails(ep, peer, peer->rails_closed);
		return;
	}
	MRL_WARN_ONCE(FI_LOG_EP_CTRL, "rails 0x%x: the peer did not open them "
		      "when asked for %u ms: opened from here\n",
		      peer->rails_closed, limit_ms);
	mrl_peer_rails_up(ep, peer, peer->rails_closed);
}

/*
 * Of rails, those we may post on: the open ones; else rail 0 where it
 * works (it carried our questions, so it is connected or ours to
 * connect); else rails as they are, connecting them ourselves rather than
 * failing the op.
 */
uint32_t mrl_ctrl_open_rails(struct mrl_ep *ep, struct mrl_peer *peer,
			     uint32_t rails)
{
	uint32_t open;

	mrl_reask_rails(ep, peer);
	open = rails & ~peer->rails_closed;
	if (open)
		return open;
	return peer->rails_down & 1u ? rails : 1u;
}

/*
 * An op waits (true: the caller answers -FI_EAGAIN) while a rail near its
 * buffers is still to be opened by the peer, as its chunks would have
 * waited there for the connection: striped from the start, not on rail 0
 * alone until the peer's RAIL_UPs come.  It waits until the first question
 * is due again: a peer slow to answer (or gone) holds no op longer; the
 * op then takes the open rails, and widens as the others open.
 */
bool mrl_ctrl_await_rails(struct mrl_ep *ep, struct mrl_peer *peer,
			  uint32_t rails)
{
	mrl_reask_rails(ep, peer);
	return (rails & peer->rails_closed) && peer->asks <= 1 &&
	       mrl_now_ms() - peer->asked_ms < MRL_RAIL_REASK_MS;
}

int mrl_ctrl_hello(struct mrl_ep *ep, struct mrl_peer *peer)
{
	uint32_t nonce;
	int ret;

	if (peer->hello_sent)
		return 0;
	nonce = mrl_new_nonce(ep);
	ret = mrl_send_ctrl(ep, peer, MRL_CTRL_HELLO, 0, nonce);
	if (ret == -FI_EAGAIN)
		return ret;
	if (!ret)
		peer->hello_nonce = nonce;
	/* sent, or never possible: a partial address without a control
	 * endpoint's; the peer's own messages may still complete it */
	peer->hello_sent = true;
	return 0;
}

/* A HELLO to every peer known by rail 0 alone; again later if one fails. */
void mrl_ctrl_hello_partial(struct mrl_ep *ep)
{
	struct mrl_av *av = ep->av;
	size_t i;

	if (!av)
		return;
	av->hello_due = false;
	for (i = 0; i < av->nall; i++) {
		if (av->all[i]->partial && mrl_ctrl_hello(ep, av->all[i]))
			av->hello_due = true;
	}
}

/* ep is closing: another endpoint may bring this peer's rails up. */
void mrl_ctrl_forget_ep(struct mrl_ep *ep, struct mrl_peer *peer)
{
	if (peer->rails_up_ep == ep) {
		peer->rails_up_ep = NULL;
		peer->rails_up = 0;
	}
}

static struct mrl_key_entry **mrl_bucket(struct mrl_key_table *t,
					 uint64_t key)
{
	return &t->bucket[mrl_mix64(key) & (t->nbuckets - 1)];
}

/*
 * Room for one more key at two a bucket on average.  The table comes with
 * the peer's first key (most peers have none) and doubles from 4 buckets.
 */
static int mrl_key_room(struct mrl_peer *peer)
{
	struct mrl_key_table *old = peer->keys, *t;
	uint32_t n = old ? 2 * old->nbuckets : 4, i;
	struct mrl_key_entry *e, *next, **b;

	if (old && old->count + 1 <= 2 * old->nbuckets)
		return 0;
	t = calloc(1, sizeof(*t) + n * sizeof(t->bucket[0]));
	if (!t)
		return -FI_ENOMEM;
	t->nbuckets = n;
	t->count = old ? old->count : 0;
	for (i = 0; old && i < old->nbuckets; i++) {
		for (e = old->bucket[i]; e; e = next) {
			next = e->next;
			b = mrl_bucket(t, e->key);
			e->next = *b;
			*b = e;
		}
	}
	free(old);
	peer->keys = t;
	return 0;
}

static struct mrl_key_entry *mrl_find_key(struct mrl_peer *peer, uint64_t key)
{
	struct mrl_key_entry *e;

	if (!peer->keys)
		return NULL;
	for (e = *mrl_bucket(peer->keys, key); e; e = e->next)
		if (e->key == key)
			return e;
	return NULL;
}

/*
 * e's question, due on the peer's question rail from now on (a new rail
 * starts its wait anew), goes there now, sent or queued.  One that cannot
 * go (every control buffer taken) stays due: the next lookup, an op's or
 * the health tick's for a parked op, asks again, and the ops to the key
 * wait for it as for one sent.
 */
static void mrl_ask(struct mrl_ep *ep, struct mrl_peer *peer,
		    struct mrl_key_entry *e)
{
	int rail = mrl_question_rail(ep, peer);
	uint64_t t = mrl_clock_ns();

	if (rail != e->asked_rail || !e->since_ns) {
		e->asked_rail = rail;
		e->since_ns = t;
	}
	e->unsent = mrl_send_on(ep, peer, rail, MRL_CTRL_KEY_REQ, e->key, 0,
				NULL, 0, 0, e->nonce) != 0;
	if (!e->unsent)
		e->asked_ns = t;
}

/*
 * An op to a key whose target keys are still asked for goes on rail 0
 * meanwhile.  While rail 0 is out of service for the peer it has no rail:
 * it waits parked (mrl_rma_park) for the answer, which comes on a rail in
 * service, for the rails' deadline from the question there; then it fails
 * as an op with no rail does.
 */
bool mrl_ctrl_key_awaited(const struct mrl_ep *ep,
			  const struct mrl_peer *peer,
			  const struct mrl_key_entry *e)
{
	if (!mrl_question_rail(ep, peer) || e->state != MRL_KEY_PENDING ||
	    e->asked_rail != mrl_question_rail(ep, peer))
		return false;
	return !mrl_params.rail_timeout_ms ||
	       mrl_clock_ns() - e->since_ns <
	       (uint64_t) mrl_params.rail_timeout_ms * 1000000ull;
}

/* Initiator: what we know of key at peer; asks the peer once. */
const struct mrl_key_entry *mrl_ctrl_key_lookup(struct mrl_ep *ep,
						struct mrl_peer *peer,
						uint64_t key)
{
	struct mrl_key_entry *e = mrl_find_key(peer, key), **b;

	if (!ep->ctrl_enabled)
		return e;
	if (e) {
		if (e->state != MRL_KEY_PENDING)
			return e;
		/*
		 * A question the core refused waits in the backlog, which
		 * progress tries once a call, at the same point of each; the
		 * ops to its key are posted in between.  A core refusing in a
		 * fixed pattern (the test provider's bursts) can then refuse
		 * that one try every time while the ops pass, and the question
		 * waits for the re-ask.  So each op to the key tries it first.
		 */
		if (ep->ctrl_backlog)
			mrl_ctrl_progress(ep);
		/* a question on a rail now out went nowhere: ask at once */
		if (e->unsent ||
		    mrl_clock_ns() - e->asked_ns > MRL_KEY_REASK_NS ||
		    mrl_question_rail(ep, peer) != e->asked_rail)
			mrl_ask(ep, peer, e);
		return e;
	}
	if (peer->partial) {
		mrl_ctrl_hello(ep, peer);
		return NULL;
	}
	if (mrl_key_room(peer))
		return NULL;
	e = calloc(1, sizeof(*e) + (size_t) ep->nrails * sizeof(e->keys[0]));
	if (!e)
		return NULL;
	e->nonce = mrl_new_nonce(ep);
	e->key = key;
	e->state = MRL_KEY_PENDING;
	b = mrl_bucket(peer->keys, key);
	e->next = *b;
	*b = e;
	peer->keys->count++;
	mrl_ask(ep, peer, e);
	return e;
}

/*
 * The rails' keys behind one of ours, only for a registration that peers
 * may access (FI_REMOTE_READ or FI_REMOTE_WRITE): any process that reaches
 * rail 0 can ask.
 */
static void mrl_answer_key(struct mrl_ep *ep, struct mrl_peer *peer,
			   uint64_t key, uint32_t nonce, int rail)
{
	struct mrl_mr *mr = mrl_mr_find(ep->domain, key);
	uint64_t keys[MRL_MAX_RAILS];
	int r, n = 0;

	if (mr && !(mr->access & (FI_REMOTE_READ | FI_REMOTE_WRITE)))
		mr = NULL;

	if (mr) {
		n = ep->domain->nrails;
		for (r = 0; r < n; r++)
			keys[r] = fi_mr_key(mr->core[r]);
	}
	/* back the way the question came: rail 0 may be out for the asker */
	if (rail >= peer->nrails || ep->ctrl_ep)
		rail = 0;
	mrl_send_on(ep, peer, rail, MRL_CTRL_KEY_RESP, key, mr ? 0 : -FI_ENOKEY,
		    keys, n, mr ? mr->near_mask : 0, nonce);
}

/* The keys learned, or NULL. */
static const struct mrl_key_entry *mrl_take_keys(struct mrl_ep *ep,
						 struct mrl_peer *peer,
						 const struct mrl_ctrl_msg *msg)
{
	struct mrl_key_entry *e = mrl_find_key(peer, msg->key);
	const uint8_t *p = msg->payload + msg->addrlen;
	int r, n;

	if (!e || msg->nonce != e->nonce) {
		MRL_WARN_ONCE(FI_LOG_EP_CTRL, "a KEY_RESP that answers no "
			      "request of ours (or not with its nonce): "
			      "ignored\n");
		return NULL;
	}
	/* a question asked again (mrl_ask) may be answered twice */
	if (e->state != MRL_KEY_PENDING)
		return NULL;
	n = msg->nkeys;
	if (msg->status || !n) {
		e->state = MRL_KEY_INVALID;
		return NULL;
	}
	e->near_mask = msg->near_mask;
	e->nrails = n < ep->nrails ? n : ep->nrails;	/* the rest we
							 * cannot reach */
	for (r = 0; r < e->nrails; r++)
		memcpy(&e->keys[r], p + r * sizeof(uint64_t), sizeof(uint64_t));
	e->state = MRL_KEY_VALID;
	return e;
}

/*
 * A RAIL_UP on each rail asked for.  A peer we only learned from its
 * messages is in rail 0's AV alone: we never send to it on the others,
 * so it may open them itself without a race, and a RAIL_UP on rail 0
 * naming them (in key) says so.
 */
static void mrl_answer_rail_ask(struct mrl_ep *ep, struct mrl_peer *peer,
				uint32_t asked)
{
	uint32_t reachable = 0;
	int r;

	for (r = 1; r < peer->nrails; r++)
		if (peer->rail[r].core_addr != FI_ADDR_NOTAVAIL)
			reachable |= 1u << r;
	mrl_send_rails_up(ep, peer, asked & reachable);
	if (asked & ~reachable)
		mrl_send_on(ep, peer, 0, MRL_CTRL_RAIL_UP, asked & ~reachable,
			    0, NULL, 0, 0, 0);
}

static const char *const drop_reason[MRL_CTRL_DROP_KINDS] = {
	[MRL_CTRL_DROP_FOREIGN] = "not a multirail control message",
	[MRL_CTRL_DROP_VERSION] = "another version of multirail's control "
				  "protocol",
	[MRL_CTRL_DROP_TYPE] = "unknown message type",
	[MRL_CTRL_DROP_NKEYS] = "more keys than rails",
	[MRL_CTRL_DROP_SHORT] = "shorter than its contents",
	[MRL_CTRL_DROP_NO_AV] = "no AV bound",
	[MRL_CTRL_DROP_RX_FAILED] = "the core's receive failed (longer than "
				    "a control buffer?)",
	[MRL_CTRL_DROP_CLAIM] = "it claims a known peer's address, and the "
				"core says it came from elsewhere",
};

/* Why a received message cannot be used, or MRL_CTRL_OK. */
static int mrl_malformed(const struct mrl_ep *ep,
			 const struct mrl_ctrl_msg *msg, size_t len)
{
	int why = mrl_ctrl_msg_check(msg, len);

	if (why == MRL_CTRL_OK && !ep->av)
		return MRL_CTRL_DROP_NO_AV;
	return why;
}

/* Logged the 1st, 2nd, 4th, 8th... time for each reason: anyone who can
 * reach rail 0 can send these, and must not flood the log. */
static void mrl_dropped(struct mrl_ep *ep, int why,
			const struct mrl_ctrl_msg *msg)
{
	uint64_t n = ++ep->ctrl_dropped[why];

	if (n & (n - 1))
		return;
	MRL_WARN(FI_LOG_EP_CTRL, "control message dropped: %s (version %d, "
		 "ours %d; %lu such so far)\n", drop_reason[why], msg->version,
		 MRL_CTRL_VERSION, (unsigned long) n);
}

static void mrl_ctrl_dispatch(struct mrl_ep *ep, const struct mrl_ctrl_msg *msg,
		       size_t len, const struct mrl_ctrl_from *from,
		       struct mrl_ctrl_learned *learned)
{
	int why = mrl_malformed(ep, msg, len);
	struct mrl_peer *peer;

	if (why == MRL_CTRL_OK &&
	    !mrl_av_claim_from(ep->av, msg->payload, msg->addrlen, from))
		why = MRL_CTRL_DROP_CLAIM;
	if (why != MRL_CTRL_OK) {
		mrl_dropped(ep, why, msg);
		return;
	}
	peer = mrl_av_learn(ep->av, msg->payload, msg->addrlen, from);
	if (!peer) {
		MRL_WARN_ONCE(FI_LOG_EP_CTRL, "control message from an unusable "
			      "address dropped\n");
		return;
	}
	learned->peer = peer;
	mrl_health_answered(peer);
	switch (msg->type) {
	case MRL_CTRL_HELLO:
		mrl_send_ctrl(ep, peer, MRL_CTRL_HELLO_ACK, 0, msg->nonce);
		break;
	case MRL_CTRL_HELLO_ACK:
		break;
	case MRL_CTRL_KEY_REQ:
		mrl_answer_key(ep, peer, msg->key, msg->nonce, from->rail);
		break;
	case MRL_CTRL_KEY_RESP:
		learned->keys = mrl_take_keys(ep, peer, msg);
		break;
	case MRL_CTRL_RAIL_UP:
		if (from->rail) {
			mrl_peer_rails_up(ep, peer, 1u << from->rail);
			break;
		}
		/* left to us: ours to use, and to open now, as our first op
		 * would have (its chunks wait in the core for connections) */
		mrl_peer_rails_up(ep, peer, (uint32_t) msg->key);
		mrl_send_rails_up(ep, peer, (uint32_t) msg->key &
				  mrl_rail_mask(peer->nrails) & ~1u);
		break;
	case MRL_CTRL_RAIL_ASK:
		mrl_answer_rail_ask(ep, peer, (uint32_t) msg->key &
				    mrl_rail_mask(peer->nrails) & ~1u);
		break;
	case MRL_CTRL_WRITE_DATA:
		mrl_write_data_arrived(ep, peer, msg);
		break;
	case MRL_CTRL_RAIL_RESET:
		if (msg->key < (uint64_t) peer->nrails)
			mrl_health_reset_asked(ep, peer, (int) msg->key);
		break;
	}
}

static uint32_t mrl_hello_ack_nonce(const struct mrl_ctrl_buf *buf)
{
	const struct mrl_ctrl_msg *msg = (const void *) buf->data;

	return msg->type == MRL_CTRL_HELLO_ACK ? msg->nonce : 0;
}

/*
 * A control message arrived, or its receive failed; the buffer is posted
 * again whatever happened, but for cancellation at close: anyone who can
 * reach rail 0 can send what fails a receive (a message longer than the
 * buffer), and each buffer lost would be a question never answered.
 * Keys learned are returned (learned->keys), for progress to hand to RMA.
 */
void mrl_ctrl_rx(struct mrl_ep *ep, struct mrl_ctrl_buf *buf, size_t len,
		 fi_addr_t src, int err, struct mrl_ctrl_learned *learned)
{
	learned->peer = NULL;
	learned->keys = NULL;
	if (err == -FI_ECANCELED || !ep->ctrl_enabled)
		return;
	ep->rails[buf->rail].ctrl_received++;
	if (err) {
		memset(buf->data, 0, sizeof(struct mrl_ctrl_msg));
		mrl_dropped(ep, MRL_CTRL_DROP_RX_FAILED,
			    (const struct mrl_ctrl_msg *) buf->data);
	} else {
		struct mrl_ctrl_from from = {
			.src = src,
			.checked = ep->domain->src0 && !buf->rail,
			.ack_nonce = mrl_hello_ack_nonce(buf),
			.rail = buf->rail,
		};

		mrl_ctrl_dispatch(ep, (const struct mrl_ctrl_msg *) buf->data, len,
			   &from, learned);
	}
	mrl_post_rx(ep, buf);
}
