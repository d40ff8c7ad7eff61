/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Rail and peer health: which rails to a peer carry chunks.
 *
 * A rail is taken out of service for one peer (peer->rails_down) when
 *   - the core completes a chunk to that peer with an error that is the
 *     path's (mrl_rail_error), or
 *   - the rail holds chunks or fences and completes none for the
 *     deadline (FI_MULTIRAIL_RAIL_TIMEOUT_MS), or
 *   - the core refuses every post to the peer on the rail (-FI_EAGAIN)
 *     for the deadline.
 * Until the peer answers, the deadline is FI_MULTIRAIL_CONNECT_TIMEOUT_MS
 * (mrl_past_deadline).
 * Per peer, because a peer that dies fails on every rail while the others
 * keep theirs.  The peer's ops lose the rail from their masks, so the
 * engine posts their failed chunks on the rails left and copies the stuck
 * ones (mrl_stripe.h says why the op still waits for the core's verdict).
 * A peer with no rail left is unreachable: its ops fail (-FI_EHOSTUNREACH).
 *
 * The endpoint that saw the failure probes the rail after a back-off (a
 * zero-byte RMA to where the peer's last op went, doubling up to 32 times
 * MRL_PROBE_MS, 200 ms); when the core completes one, the rail rejoins.
 *
 * Time is read every MRL_HEALTH_TICK progress calls, not per op.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mrl.h"
#include "rdma/fi_ext_multirail.h"

/* a failed rail's first probe, after its failure; a tuning constant */
#define MRL_PROBE_MS		200
#define MRL_PROBE_MAX_SHIFT	5

static uint64_t mrl_ms_ns(int ms)
{
	return (uint64_t) ms * 1000000ull;
}

/*
 * The errors of a path (link, NIC, connection, peer process), as opposed
 * to those of the op itself (a bad key, a short buffer), which another
 * rail would only repeat, and to cancellation at close.
 */
static bool mrl_rail_error(int err)
{
	switch (err) {
	case -FI_EACCES:
	case -FI_EINVAL:
	case -FI_ENOKEY:
	case -FI_EKEYREJECTED:
	case -FI_EMSGSIZE:
	case -FI_ETRUNC:
	case -FI_ECANCELED:
	case -FI_EOPNOTSUPP:
	case -FI_ENOSYS:
	case -FI_EFAULT:
	case -FI_EPERM:
		return false;
	default:
		return true;
	}
}

static const char *mrl_rail_name(struct mrl_ep *ep, int rail)
{
	return ep->domain->rails[rail].info->domain_attr->name;
}

static struct mrl_peer_health *mrl_health_of(struct mrl_ep *ep,
					     struct mrl_peer *peer)
{
	if (!peer->health) {
		peer->health = calloc(1, sizeof(*peer->health) +
				      (size_t) ep->nrails *
				      sizeof(peer->health->rail[0]));
		if (!peer->health)
			return NULL;
		peer->health->ep = ep;
	}
	return peer->health;
}

struct mrl_narrow_arg {
	struct mrl_ep *ep;
	struct mrl_peer *peer;
	uint32_t keep;
};

/* An op left with no rail fails, unless it can wait for keys (parked). */
static void mrl_narrow_op(struct mrl_op *op, void *arg)
{
	const struct mrl_narrow_arg *n = arg;

	if (op->peer != n->peer)
		return;
	op->rail_mask &= n->keep;
	if (!op->rail_mask && !op->parked)
		mrl_rma_park(n->ep, op);
}

static uint32_t mrl_all_rails(const struct mrl_peer *peer)
{
	return mrl_rail_mask(peer->nrails);
}

static bool mrl_op_unreachable(const struct mrl_op *op, void *arg)
{
	(void) arg;
	return mrl_peer_unreachable(op->peer);
}

/* Ops to peers left without a rail fail now, whatever the core holds. */
void mrl_health_fail_unreachable(struct mrl_ep *ep)
{
	ep->unreachable_due = false;
	mrl_engine_fail_ops(&ep->engine, mrl_op_unreachable, NULL,
			    -FI_EHOSTUNREACH);
}

static uint64_t mrl_backoff_ns(const struct mrl_peer_health *h, int rail)
{
	return mrl_ms_ns(MRL_PROBE_MS) << h->rail[rail].shift;
}

/* Take rail out of service for peer; what was there goes elsewhere. */
static void mrl_rail_down(struct mrl_ep *ep, struct mrl_peer *peer, int rail,
			  const char *why)
{
	struct mrl_narrow_arg n = { ep, peer, ~mrl_rail_bit(rail) };
	struct mrl_peer_health *h = mrl_health_of(ep, peer);
	uint32_t all = mrl_all_rails(peer);
	/* the endpoint that probes the peer keeps the counts */
	struct mrl_ep *owner = h ? h->ep : ep;

	if (peer->rails_down & mrl_rail_bit(rail))
		return;
	if (!peer->rails_down)
		owner->sick_peers++;
	peer->rails_down |= mrl_rail_bit(rail);
	mrl_fence_rail_down(ep, peer, rail);	/* what it may have lost */
	owner->rails[rail].downs++;
	owner->rails[rail].peers_down++;
	if (h) {
		h->rail[rail].shift = 0;
		h->rail[rail].at_ns = ep->now_ns + mrl_backoff_ns(h, rail);
	}
	mrl_engine_for_each_op(&ep->engine, mrl_narrow_op, &n);

	if ((peer->rails_down & all) == all) {
		MRL_WARN(FI_LOG_EP_DATA, "rail %d (%s): %s; the peer has no "
			 "rail left: its operations fail until a probe "
			 "answers\n", rail, mrl_rail_name(ep, rail), why);
		/* a core may never give back what it holds for a dead peer:
		 * its ops fail after this progress pass (we may be inside the
		 * engine's own walk of them here) */
		ep->unreachable_due = true;
	} else
		MRL_INFO(FI_LOG_EP_DATA, "rail %d (%s): %s; out of service "
			 "for this peer, its chunks go to rails 0x%x\n", rail,
			 mrl_rail_name(ep, rail), why, all & ~peer->rails_down);
	mrl_pkt_rail_down(ep, peer, rail);	/* messages there go again */
}

static void mrl_rail_up(struct mrl_ep *ep, struct mrl_peer *peer, int rail)
{
	if (!(peer->rails_down & mrl_rail_bit(rail)))
		return;
	peer->rails_down &= ~mrl_rail_bit(rail);
	if (!peer->rails_down)
		ep->sick_peers--;
	ep->rails[rail].peers_down--;
	ep->rails[rail].rejoins++;
	MRL_INFO(FI_LOG_EP_DATA, "rail %d (%s): a probe answered; back in "
		 "service for this peer\n", rail, mrl_rail_name(ep, rail));
}

void mrl_health_chunk_failed(struct mrl_ep *ep, struct mrl_chunk *chunk,
			     int err)
{
	char why[96];

	if (chunk->op && mrl_rail_error(err))	/* its connection died */
		mrl_fence_settled(chunk->op->peer, chunk->rail);
	if (!chunk->op || chunk->orphan || !mrl_rail_error(err))
		return;
	snprintf(why, sizeof(why), "the core failed a chunk: %s",
		 fi_strerror(-err));
	mrl_rail_down(ep, chunk->op->peer, chunk->rail, why);
}

/*
 * The core failed a post to peer on rail at once (2.x tcp: -FI_ENETUNREACH
 * while the link is down).  True when that is the path's fault: the rail
 * is out for the peer, and the chunk goes elsewhere.
 */
bool mrl_health_post_failed(struct mrl_ep *ep, struct mrl_peer *peer,
			    int rail, int err)
{
	char why[96];

	if (!mrl_rail_error(err))
		return false;
	snprintf(why, sizeof(why), "the core refused a post: %s",
		 fi_strerror(-err));
	mrl_rail_down(ep, peer, rail, why);
	return true;
}

/*
 * Has the peer shown it runs?  A peer that starts late is not a failed
 * rail: a core like rxm refuses every post to it until its progress
 * accepts the connections, and one like efa takes the posts and completes
 * none until then.  Before the peer's keys come, rail 0 is all its ops
 * have: taking it out at the rails' deadline failed them
 * (-FI_EHOSTUNREACH) with the peer's other rails fine.  So until the peer
 * answers, its rails have FI_MULTIRAIL_CONNECT_TIMEOUT_MS, and the rails'
 * deadline counts from the answer (the refusals or the quiet before it
 * were the peer's lateness, and a rail needs a moment to get going).  A
 * control message from the peer is its answer (mrl_health_answered: the
 * first op to a peer of several rails asks for its keys).  A rail that
 * completed anything needs no answer, whose ever it was (the fast path
 * records nothing per peer; a peer of one rail is asked nothing).
 */
static bool mrl_answered(const struct mrl_ep *ep, const struct mrl_peer *peer,
			 int rail)
{
	return peer->answered_ns || ep->engine.rail[rail].completions;
}

/*
 * rail has been stuck for peer (refusing, or completing nothing) this long:
 * past the deadline?  FI_MULTIRAIL_RAIL_TIMEOUT_MS=0 turns both off (only
 * the core's errors take a rail out), as its users were told.
 */
static bool mrl_past_deadline(const struct mrl_ep *ep,
			      const struct mrl_peer *peer, int rail,
			      uint64_t stuck_ns)
{
	uint64_t since_answer;

	if (!mrl_params.rail_timeout_ms)
		return false;
	if (!mrl_answered(ep, peer, rail))
		return mrl_params.connect_timeout_ms &&
		       stuck_ns > mrl_ms_ns(mrl_params.connect_timeout_ms);
	if (!ep->engine.rail[rail].completions) {
		since_answer = ep->now_ns > peer->answered_ns ?
			       ep->now_ns - peer->answered_ns : 0;
		if (stuck_ns > since_answer)
			stuck_ns = since_answer;
	}
	return stuck_ns > mrl_ms_ns(mrl_params.rail_timeout_ms);
}

void mrl_health_answered(struct mrl_peer *peer)
{
	if (!peer->answered_ns)
		peer->answered_ns = mrl_clock_ns();
}

/*
 * The core refused a post to peer on rail (-FI_EAGAIN).  A rail is taken
 * out once it has refused every post there for longer than the deadline.
 * Its streak begins with a refusal after a general-way post or a flush
 * there passed (mrl_health_posted), after the rail completed
 * anything (the fast path's posts clear nothing: a rail that completes is
 * not stuck), or after a gap longer than the deadline in which nothing
 * was tried there (a rail left alone proves nothing).  Each rail is judged
 * by its own streak, so a rail that refused once and then carried nothing
 * is not taken out with one refusing now.  Until the peer answers, the
 * deadline is FI_MULTIRAIL_CONNECT_TIMEOUT_MS (mrl_past_deadline).
 */
void mrl_health_refused(struct mrl_ep *ep, struct mrl_peer *peer, int rail)
{
	bool late = !mrl_answered(ep, peer, rail);
	uint32_t gap = (uint32_t) (late ? mrl_params.connect_timeout_ms :
				   mrl_params.rail_timeout_ms);
	uint32_t done = (uint32_t) ep->engine.rail[rail].completions;
	uint32_t now_ms, streak_ms;

	if (!ep->now_ns)
		ep->now_ns = mrl_clock_ns();
	now_ms = (uint32_t) (ep->now_ns / 1000000);	/* differences wrap */
	if (!(peer->refused_rails & mrl_rail_bit(rail)) ||
	    peer->rail[rail].refused.completions != done ||
	    now_ms - peer->rail[rail].refused.last_ms > gap)
		peer->rail[rail].refused.since_ms = now_ms;
	peer->rail[rail].refused.last_ms = now_ms;
	peer->rail[rail].refused.completions = done;
	peer->refused_rails |= mrl_rail_bit(rail);
	streak_ms = now_ms - peer->rail[rail].refused.since_ms;
	if (!mrl_past_deadline(ep, peer, rail, streak_ms * 1000000ull))
		return;
	peer->refused_rails &= ~mrl_rail_bit(rail);
	mrl_rail_down(ep, peer, rail, late ? "the peer has not answered within "
		  "FI_MULTIRAIL_CONNECT_TIMEOUT_MS" : "the core refused every "
		  "post for longer than FI_MULTIRAIL_RAIL_TIMEOUT_MS");
}

/* Where probes go: the peer's latest op, refreshed while it is sick. */
void mrl_health_note_target(struct mrl_peer *peer, int nrails,
			    const uint64_t *keys, uint64_t addr, bool read)
{
	struct mrl_peer_health *h = peer->health;
	int r;

	for (r = 0; h && r < nrails; r++) {
		h->rail[r].addr = addr;
		h->rail[r].key = keys[r];
		h->rail[r].read = read;
		h->rail[r].set = true;
	}
}

struct mrl_stall {
	struct mrl_ep *ep;
	int rail;
	uint64_t quiet_ns;	/* since the rail's last completion */
};

/* Has peer been silent on the stalled rail past its deadline? */
static bool mrl_stalled_for(const struct mrl_stall *s,
			    const struct mrl_peer *peer)
{
	return !(peer->rails_down & mrl_rail_bit(s->rail)) &&
	       mrl_past_deadline(s->ep, peer, s->rail, s->quiet_ns);
}

/* A chunk stuck on a rail still in service for its peer. */
static bool mrl_stuck_chunk(const struct mrl_chunk *chunk, void *arg)
{
	return !chunk->orphan && mrl_stalled_for(arg, chunk->op->peer);
}

/* mrl_rail_down's reason for a stall: what did not complete, by which rule */
static void mrl_stall_down(const struct mrl_stall *s, struct mrl_peer *peer,
			   const char *what)
{
	char why[128];

	snprintf(why, sizeof(why), mrl_answered(s->ep, peer, s->rail) ?
		 "%s for longer than FI_MULTIRAIL_RAIL_TIMEOUT_MS" :
		 "%s, and the peer has not answered, for longer than "
		 "FI_MULTIRAIL_CONNECT_TIMEOUT_MS", what);
	mrl_rail_down(s->ep, peer, s->rail, why);
}

/*
 * A fence stuck on a rail still in service for its peer: the rail goes out
 * for that peer, so later writes avoid it.  The send behind the fence keeps
 * waiting for the core's verdict on it: the writes it flushes completed
 * (their bytes left), and a message that overtook them could tell the
 * target to read bytes not yet there.
 */
static void mrl_fences_stuck(const struct mrl_stall *s)
{
	struct mrl_av *av = s->ep->av;
	struct mrl_peer *peer;
	size_t i;

	for (i = 0; av && i < av->nall; i++) {
		peer = av->all[i];
		if (mrl_fence_flushing(s->ep, peer, s->rail) &&
		    mrl_stalled_for(s, peer))
			mrl_stall_down(s, peer, "a fence has not completed");
	}
}

/*
 * The peers that still hold chunks or fences on a rail that went out for
 * them at an earlier watch, a deadline or more ago: the core is waiting
 * for the kernel's verdict on a dead connection.  Their connections there
 * are reset (mrl_reset.c), so that the core gives back what it held (the
 * op completes, its copies elsewhere placed the bytes) and nothing of it
 * lands later.  Fences and writedata flushes count as chunks: a send or
 * an op waits behind them.
 */
#define MRL_RESETS_PER_WATCH	16

struct mrl_reset_pass {
	struct mrl_ep *ep;
	int rail;
	int n;
	const struct mrl_peer *done[MRL_RESETS_PER_WATCH];
};

static bool mrl_reset_due(const struct mrl_reset_pass *p,
			  const struct mrl_peer *peer)
{
	int i;

	if (!(peer->rails_down & mrl_rail_bit(p->rail)))
		return false;
	for (i = 0; i < p->n; i++)
		if (p->done[i] == peer)
			return false;
	return true;
}

/* copied elsewhere (an orphan) or not, the op waits for its return */
static bool mrl_held_on_down(const struct mrl_chunk *chunk, void *arg)
{
	return mrl_reset_due(arg, chunk->op->peer);
}

/* 1 where the connection was reset: the writes on it are gone */
static int mrl_reset_conn(struct mrl_ep *ep, struct mrl_peer *peer, int rail,
			  bool holding)
{
	int n = mrl_reset_peer_rail(ep, peer, rail,
				    mrl_params.rail_timeout_ms, holding);

	if (n <= 0)
		return 0;
	ep->rails[rail].resets += n;
	mrl_fence_conn_reset(ep, peer, rail);
	mrl_write_data_conn_reset(ep, peer, rail);
	return 1;
}

static void mrl_reset_peer(struct mrl_reset_pass *p, struct mrl_peer *peer)
{
	p->done[p->n++] = peer;
	if (!mrl_reset_conn(p->ep, peer, p->rail, false))
		return;
	MRL_WARN(FI_LOG_EP_DATA, "rail %d (%s): connection to a peer reset: "
		 "it stalled for longer than FI_MULTIRAIL_RAIL_TIMEOUT_MS "
		 "after the rail went out; what the core held there fails "
		 "over\n", p->rail, mrl_rail_name(p->ep, p->rail));
	mrl_connect_reset_rail(p->ep, peer, p->rail);
}

/*
 * The peer reset its stalled connection to us on rail and asks us to
 * reset ours, which may still hold what arrived before the link failed.
 * Only a socket the kernel finds stalled is reset (mrl_reset.c).
 */
void mrl_health_reset_asked(struct mrl_ep *ep, struct mrl_peer *peer,
			    int rail)
{
	mrl_assert_locked(ep->domain);
	if (rail >= ep->nrails || !mrl_reset_conn(ep, peer, rail, false))
		return;
	MRL_INFO(FI_LOG_EP_DATA, "rail %d (%s): connection to a peer reset "
		 "at its request\n", rail, mrl_rail_name(ep, rail));
}

static bool mrl_reset_packets(struct mrl_peer *peer, void *arg)
{
	struct mrl_reset_pass *p = arg;

	if (mrl_reset_due(p, peer))
		mrl_reset_peer(p, peer);
	return p->n < MRL_RESETS_PER_WATCH;
}

static void mrl_reset_held(struct mrl_ep *ep, int rail)
{
	struct mrl_reset_pass p = { .ep = ep, .rail = rail };
	struct mrl_av *av = ep->av;
	struct mrl_chunk *chunk;
	struct mrl_peer *peer;
	size_t i, it = 0;

	while (p.n < MRL_RESETS_PER_WATCH &&
	       (chunk = mrl_engine_find_chunk(&ep->engine, rail,
					      mrl_held_on_down, &p)))
		mrl_reset_peer(&p, chunk->op->peer);
	for (i = 0; av && i < av->nall && p.n < MRL_RESETS_PER_WATCH; i++) {
		if (mrl_fence_flushing(ep, av->all[i], rail) &&
		    mrl_reset_due(&p, av->all[i]))
			mrl_reset_peer(&p, av->all[i]);
	}
	while (p.n < MRL_RESETS_PER_WATCH &&
	       (peer = mrl_write_data_flushing_peer(ep, rail, false, &it)))
		if (mrl_reset_due(&p, peer))
			mrl_reset_peer(&p, peer);
	if (p.n < MRL_RESETS_PER_WATCH)
		mrl_pkt_for_each_busy_peer(ep, rail, mrl_reset_packets, &p);
}

/*
 * Our messages to peer have waited a deadline for an ACK that did not move,
 * their packets completed on rails (mrl_pkt.c's ACK watch).  A socket
 * core completes a send once its bytes are in the socket: a link that died
 * holds them, and nothing of ours stays in flight for the stall watch to
 * see.  The kernel knows: a rail whose connection to the peer holds bytes
 * unacknowledged for the deadline is reset (nothing of it can land later)
 * and taken out for the peer, and the messages go again on the others.
 * True when a rail went out.
 */
bool mrl_health_acks_stalled(struct mrl_ep *ep, struct mrl_peer *peer,
			     uint32_t rails)
{
	bool found = false;
	int r;

	mrl_assert_locked(ep->domain);
	for (; rails; rails &= rails - 1) {
		r = __builtin_ctz(rails);
		if (r >= ep->nrails || (peer->rails_down & mrl_rail_bit(r)) ||
		    !mrl_reset_conn(ep, peer, r, true))
			continue;
		mrl_rail_down(ep, peer, r, "messages had no ACK, and the "
			      "connection held bytes its peer did not "
			      "acknowledge, for longer than "
			      "FI_MULTIRAIL_RAIL_TIMEOUT_MS");
		mrl_connect_reset_rail(ep, peer, r);
		found = true;
	}
	return found;
}

/* Message packets stuck there: as chunks (mrl_pkt.c sends them again). */
static bool mrl_packets_stuck(struct mrl_peer *peer, void *arg)
{
	const struct mrl_stall *s = arg;

	if (mrl_stalled_for(s, peer))
		mrl_stall_down(s, peer, "no message packet completed");
	return true;
}

/* A flush behind a writedata's WRITE_DATA stuck there: as a fence. */
static void mrl_flushes_stuck(const struct mrl_stall *s)
{
	struct mrl_peer *peer;
	size_t it = 0;

	while ((peer = mrl_write_data_flushing_peer(s->ep, s->rail, true,
						    &it))) {
		if (mrl_stalled_for(s, peer))
			mrl_stall_down(s, peer, "a writedata's flush has not "
				       "completed");
	}
}

/*
 * A rail holding chunks or fences that completed none for the deadline.
 * Fences count: a stall that begins under a send's fence (nothing else on
 * the rail) would otherwise leave the rail in service, and every later
 * send to the peer waiting on it.
 */
static void mrl_watch_rail(struct mrl_ep *ep, int rail)
{
	struct mrl_ep_rail *r = &ep->rails[rail];
	const struct mrl_rail_credit *rc = &ep->engine.rail[rail];
	uint64_t done = rc->completions + r->fences_done + r->pkts_done;
	struct mrl_stall s = { ep, rail, 0 };
	struct mrl_chunk *chunk;

	if (!(rc->inflight || r->fences || r->pkt_out)) {
		r->watch_since_ns = 0;	/* a fresh start when work comes */
		return;
	}
	if (done != r->watch_completions || !r->watch_since_ns) {
		r->watch_completions = done;
		r->watch_since_ns = ep->now_ns;
		r->quiet_since_ns = ep->now_ns;
		return;
	}
	if (ep->now_ns - r->watch_since_ns <=
	    mrl_ms_ns(mrl_params.rail_timeout_ms))
		return;
	r->watch_since_ns = ep->now_ns;	/* once per deadline */
	s.quiet_ns = ep->now_ns - r->quiet_since_ns;
	mrl_reset_held(ep, rail);	/* before more peers go out */
	/* one peer at a time: a peer left without rails loses its chunks */
	while ((chunk = mrl_engine_find_chunk(&ep->engine, rail, mrl_stuck_chunk,
					      &s)))
		mrl_stall_down(&s, chunk->op->peer, "no chunk completed");
	if (r->fences) {
		mrl_fences_stuck(&s);
		mrl_flushes_stuck(&s);
	}
	mrl_pkt_for_each_busy_peer(ep, rail, mrl_packets_stuck, &s);
	mrl_engine_reissue(&ep->engine, rail);
}

static void mrl_post_probe(struct mrl_ep *ep, struct mrl_peer *peer, int rail)
{
	struct mrl_peer_health *h = peer->health;
	struct mrl_fence *req = &h->rail[rail].req;
	ssize_t ret;

	ret = mrl_fence_post_zero(ep, peer, rail, req, MRL_REQ_PROBE,
				  h->rail[rail].addr, h->rail[rail].key,
				  h->rail[rail].read);
	if (ret == -FI_EAGAIN)
		return;			/* the next tick tries again */
	if (ret) {
		mrl_health_probe_done(ep, req, (int) ret);
		return;
	}
	mrl_nonchunk_posted(ep, rail);
	h->probing |= mrl_rail_bit(rail);
	ep->rails[rail].probes++;
}

/*
 * A peer with no RMA target known (only messages between us) is probed
 * with a message packet (mrl_pkt.c): over a socket core it completes once
 * a connection carries it again (the one that stalled was reset when the
 * rail went out).
 */
static void mrl_probe_answered(struct mrl_ep *ep, struct mrl_peer *peer,
			       int rail, int err);

static void mrl_post_pkt_probe(struct mrl_ep *ep, struct mrl_peer *peer,
			       int rail)
{
	ssize_t ret = mrl_pkt_probe(ep, peer, rail);

	if (ret == -FI_EAGAIN)
		return;			/* the next tick tries again */
	if (ret) {
		mrl_probe_answered(ep, peer, rail, (int) ret);
		return;
	}
	peer->health->probing |= mrl_rail_bit(rail);
	ep->rails[rail].probes++;
}

static void mrl_probe_peer(struct mrl_ep *ep, struct mrl_peer *peer)
{
	struct mrl_peer_health *h = peer->health;
	uint32_t due = peer->rails_down & ~h->probing;
	int r;

	for (r = 0; due && r < ep->nrails; r++) {
		if (!(due & mrl_rail_bit(r)) || ep->now_ns < h->rail[r].at_ns)
			continue;
		if (h->rail[r].set)
			mrl_post_probe(ep, peer, r);
		else if (ep->msg_striped)
			mrl_post_pkt_probe(ep, peer, r);
	}
}

/* A probe answered (err 0: the rail is back for peer) or failed. */
static void mrl_probe_answered(struct mrl_ep *ep, struct mrl_peer *peer,
			       int rail, int err)
{
	struct mrl_peer_health *h = peer->health;

	h->probing &= ~mrl_rail_bit(rail);
	if (!err) {
		h->rail[rail].shift = 0;
		mrl_fence_settled(peer, rail);	/* behind what was held */
		mrl_rail_up(ep, peer, rail);
		return;
	}
	if (h->rail[rail].shift < MRL_PROBE_MAX_SHIFT)
		h->rail[rail].shift++;
	h->rail[rail].at_ns = ep->now_ns + mrl_backoff_ns(h, rail);
	MRL_DBG(FI_LOG_EP_DATA, "rail %d: probe failed (%s); next in %lu ms\n",
		rail, fi_strerror(-err),
		(unsigned long) (mrl_backoff_ns(h, rail) / 1000000));
}

void mrl_health_probe_done(struct mrl_ep *ep, struct mrl_fence *probe,
			   int err)
{
	mrl_probe_answered(ep, probe->peer, probe->rail, err);
}

void mrl_health_pkt_probe_done(struct mrl_ep *ep, struct mrl_peer *peer,
			       int rail, int err)
{
	mrl_assert_locked(ep->domain);
	if (peer->health && (peer->health->probing & mrl_rail_bit(rail)))
		mrl_probe_answered(ep, peer, rail, err);
}

static void mrl_probe_all(struct mrl_ep *ep)
{
	struct mrl_av *av = ep->av;
	size_t i;

	for (i = 0; av && i < av->nall; i++) {
		if (av->all[i]->rails_down && av->all[i]->health &&
		    av->all[i]->health->ep == ep)
			mrl_probe_peer(ep, av->all[i]);
	}
}

/*
 * From progress, every MRL_HEALTH_TICK calls: the clock, the rails' pacing
 * (mrl_engine_pace) and the checks.
 */
void mrl_health_tick(struct mrl_ep *ep)
{
	mrl_assert_locked(ep->domain);
	uint32_t rails, watch;
	int r;

	ep->health_left = MRL_HEALTH_TICK;
	ep->now_ns = mrl_clock_ns();
	if (ep->engine.busy)
		mrl_engine_pace(&ep->engine, ep->now_ns);
	if (mrl_params.rail_timeout_ms) {
		/*
		 * The rails with chunks or other requests (fences among them),
		 * and those that had some at the last tick, to reset their
		 * watch: an idle rail costs nothing per tick.
		 */
		rails = ep->engine.busy | ep->nonchunk_busy;
		watch = rails | ep->watched_rails;
		ep->watched_rails = rails;
		for (; watch; watch &= watch - 1) {
			r = __builtin_ctz(watch);
			if (r < ep->nrails)
				mrl_watch_rail(ep, r);
		}
	}
	if (ep->sick_peers)
		mrl_probe_all(ep);
	if (ep->parked_ops)
		mrl_rma_parked_tick(ep);
	if (ep->msg_striped)
		mrl_pkt_tick(ep);
}

/* 0 up, 1 down (for some peer), 2 probing: fi_multirail_rail_stats. */
int mrl_health_rail_state(const struct mrl_ep *ep, int rail)
{
	const struct mrl_av *av = ep->av;
	size_t i;

	if (!ep->rails[rail].peers_down)
		return FI_MULTIRAIL_RAIL_UP;
	for (i = 0; av && i < av->nall; i++) {
		if (av->all[i]->health && av->all[i]->health->ep == ep &&
		    (av->all[i]->health->probing & mrl_rail_bit(rail)))
			return FI_MULTIRAIL_RAIL_PROBING;
	}
	return FI_MULTIRAIL_RAIL_DOWN;
}

/* ep is closing: its probes were cancelled with its rails. */
void mrl_health_forget_ep(struct mrl_ep *ep, struct mrl_peer *peer)
{
	if (!peer->health || peer->health->ep != ep)
		return;
	mrl_health_forget_peer(peer);
	peer->refused_rails = 0;
	peer->answered_ns = 0;
}

/* The peer's health goes, and the counts its rails out of service held. */
void mrl_health_forget_peer(struct mrl_peer *peer)
{
	struct mrl_peer_health *h = peer->health;
	int r;

	if (!h)
		return;
	if (peer->rails_down)
		h->ep->sick_peers--;
	for (r = 0; r < MRL_MAX_RAILS; r++)
		if (peer->rails_down & mrl_rail_bit(r))
			h->ep->rails[r].peers_down--;
	free(h);
	peer->health = NULL;
	peer->rails_down = 0;
}
