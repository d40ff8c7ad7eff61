/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The control channel's transport: its buffers, posting, the backlog of
 * sends a core refused for now, and the checks and dispatch of what
 * arrives.  What the messages do is in mrl_connect.c (HELLO, RAIL_UP,
 * RAIL_ASK, RAIL_RESET), mrl_keys.c (KEY_REQ, KEY_RESP) and
 * mrl_write_data.c (WRITE_DATA); their interface to this file is
 * mrl_ctrl.h.
 *
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
 * first rail in service and is answered there (mrl_ctrl_question_rail), and the
 * ops to that key wait parked for the answer (mrl_keys_awaited).
 * A send the core refuses for now (-FI_EAGAIN: rxm is still connecting,
 * say) waits in a backlog that progress drains in order, so no answer is
 * lost; a question unanswered for MRL_KEY_REASK_NS is asked again.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "mrl.h"
#include "mrl_ctrl.h"

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
int mrl_ctrl_question_rail(const struct mrl_ep *ep,
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

/* The control tag of the endpoint at addr (a full address) on rail. */
uint64_t mrl_ctrl_tag_of(const struct mrl_ep *ep, const void *addr, int rail)
{
	return mrl_ctrl_tag_for(mrl_addr_rail(addr, rail),
				((const struct mrl_addr_hdr *) addr)->rail_addrlen,
				mrl_ctrl_tag_bits(ep));
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
 * service it was asked on: mrl_ctrl_question_rail): whoever else claims
 * to be that peer never saw it, so cannot answer for it (false keys, or
 * "no such key" to make our ops to it fail).
 */
uint32_t mrl_ctrl_new_nonce(struct mrl_ep *ep)
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
	rail = mrl_ctrl_question_rail(ep, buf->peer);
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
struct mrl_ctrl_msg *mrl_ctrl_compose(struct mrl_ep *ep,
				      struct mrl_ctrl_buf *buf,
				      struct mrl_peer *peer, int rail, int type,
				      size_t extra)
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
int mrl_ctrl_can_send(const struct mrl_ep *ep, const struct mrl_peer *peer,
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

struct mrl_ctrl_buf *mrl_ctrl_take_tx(struct mrl_ep *ep)
{
	struct mrl_ctrl_buf *buf = mrl_ctrl_buf_stack_pop(&ep->ctrl_tx_free);

	buf->write_data_op = NULL;
	buf->inject_data = false;
	buf->flush = false;
	buf->loss_told = false;
	return buf;
}

/* Behind what still waits for its destination: each keeps its order. */
void mrl_ctrl_queue_tx(struct mrl_ep *ep, struct mrl_ctrl_buf *buf)
{
	mrl_backlog_add(ep, buf);
	mrl_ctrl_progress(ep);
}

/*
 * 0 when sent or queued (a core error is logged where the send is posted);
 * -FI_EAGAIN only when every buffer is taken.
 */
int mrl_ctrl_send_on(struct mrl_ep *ep, struct mrl_peer *peer, int rail,
		     int type, uint64_t key, int status, const uint64_t *keys,
		     int nkeys, uint32_t near_mask, uint32_t nonce)
{
	size_t extra = nkeys * sizeof(uint64_t);
	struct mrl_ctrl_buf *buf;
	struct mrl_ctrl_msg *msg;
	int ret = mrl_ctrl_can_send(ep, peer, extra);

	if (ret)
		return ret;
	buf = mrl_ctrl_take_tx(ep);
	msg = mrl_ctrl_compose(ep, buf, peer, rail, type, extra);
	msg->key = key;
	msg->status = status;
	msg->nkeys = nkeys;
	msg->near_mask = near_mask;
	msg->nonce = nonce;
	if (nkeys)
		memcpy(msg->payload + ep->namelen, keys, extra);
	mrl_ctrl_queue_tx(ep, buf);
	return 0;
}

/* Everything but RAIL_UP goes on rail 0. */
int mrl_ctrl_send(struct mrl_ep *ep, struct mrl_peer *peer, int type,
		  uint64_t key, uint32_t nonce)
{
	return mrl_ctrl_send_on(ep, peer, 0, type, key, 0, NULL, 0, 0, nonce);
}

/*
 * Writes len bytes of b's on rail 0, delivery-complete where flags say;
 * b is taken only when the core took the write.
 */
ssize_t mrl_ctrl_post_bounce(struct mrl_ep *ep, struct mrl_ctrl_buf *b,
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
	mrl_ctrl_take_tx(ep);
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
	return mrl_ctrl_post_bounce(ep, b, len, dest, addr, key, 0);
}

void mrl_ctrl_bounce_done(struct mrl_ep *ep, struct mrl_ctrl_buf *buf,
			  int err)
{
	if (!err && buf->inject_data) {
		mrl_write_data_after_bounce(ep, buf);
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
 * A WRITE_DATA's send completed (err 0), failed, or cannot go: its op, or
 * its inject's counter, learns how.  Never sent again: a send that failed
 * may still have arrived, and the target must not raise the data twice.
 */
void mrl_ctrl_sent(struct mrl_ep *ep, struct mrl_ctrl_buf *buf, int err)
{
	const struct mrl_ctrl_msg *msg = (const void *) buf->data;

	/* a RAIL_UP of ours went: its rail's connection is up */
	if (!err && buf->rail && msg->type == MRL_CTRL_RAIL_UP)
		mrl_connect_rails_opened(ep, buf->peer, 1u << buf->rail);
	if (buf->flush) {
		ep->rails[buf->rail].fences--;
		ep->rails[buf->rail].fences_done++;
		/* a core cancels what it held on a connection torn down */
		if (err && !buf->write_data_op && !buf->loss_told)
			mrl_fence_data_lost(ep, buf->peer, buf->rail);
	} else if (!err && (buf->write_data_op || buf->inject_data) &&
		   mrl_write_data_flush(ep, buf)) {
		return;			/* the op completes with the flush */
	}
	if (err && err != -FI_ECANCELED && (buf->write_data_op || buf->inject_data))
		MRL_WARN(FI_LOG_EP_DATA, "rail %d: a writedata's CQ data %s "
			 "(%s): the op fails\n", buf->rail, buf->flush ?
			 "was sent but not seen to arrive" :
			 "could not be sent", fi_strerror(-err));
	if (buf->write_data_op) {
		mrl_rma_write_data_done(ep, buf->write_data_op, err);
	} else if (buf->inject_data) {
		if (err)
			mrl_cntr_inc_err(ep->cntr_write);
		else
			mrl_cntr_inc(ep->cntr_write);
	}
	mrl_ctrl_tx_done(ep, buf);
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
		mrl_ctrl_send(ep, peer, MRL_CTRL_HELLO_ACK, 0, msg->nonce);
		break;
	case MRL_CTRL_HELLO_ACK:
		break;
	case MRL_CTRL_KEY_REQ:
		mrl_keys_answer(ep, peer, msg->key, msg->nonce, from->rail);
		break;
	case MRL_CTRL_KEY_RESP:
		learned->keys = mrl_keys_take(ep, peer, msg);
		break;
	case MRL_CTRL_RAIL_UP:
		if (from->rail) {
			mrl_connect_rails_opened(ep, peer, 1u << from->rail);
			break;
		}
		/* left to us: ours to use, and to open now, as our first op
		 * would have (its chunks wait in the core for connections) */
		mrl_connect_rails_opened(ep, peer, (uint32_t) msg->key);
		mrl_connect_send_rails_up(ep, peer, (uint32_t) msg->key &
					  mrl_rail_mask(peer->nrails) & ~1u);
		break;
	case MRL_CTRL_RAIL_ASK:
		mrl_connect_answer_ask(ep, peer, (uint32_t) msg->key &
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

