/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * A pair's connections over the control channel: RAIL_UP brings a rail's
 * connection up before chunks need it, RAIL_ASK has the one end of a pair
 * that opens rails 1 and up (mrl_addr_connects) open them, RAIL_RESET has
 * the peer reset its end of a connection we reset (mrl_reset.c), and
 * HELLO / HELLO_ACK complete a peer known by a partial address.
 */
#include <stdlib.h>
#include <string.h>

#include "mrl.h"
#include "mrl_ctrl.h"

/* A rail asked for (RAIL_ASK) and not opened: the answer is a connection
 * setup away, tens of ms under rxm, seconds with hundreds starting. */
#define MRL_RAIL_REASK_MS	1000u
/* How long rails are asked for where FI_MULTIRAIL_CONNECT_TIMEOUT_MS is 0 */
#define MRL_RAIL_ASK_LIMIT_MS	30000u

/* The connections of these rails to the peer are up: ours to use. */
void mrl_connect_rails_opened(struct mrl_ep *ep, struct mrl_peer *peer,
			      uint32_t rails)
{
	if (!(peer->rails_closed & rails))
		return;
	peer->rails_closed &= ~rails;
	if (!peer->rails_closed)
		peer->asks = 0;
	mrl_rma_forget_hint(peer);	/* its rails may grow */
	mrl_rma_widen_pending(ep, peer);
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
void mrl_connect_introduce(struct mrl_ep *ep, struct mrl_peer *peer)
{
	if (!ep->ctrl_ep || !ep->ctrl_enabled || (peer->rails_up & 1u) ||
	    peer->partial ||
	    (peer->rails_up_ep && peer->rails_up_ep != ep))
		return;
	if (mrl_ctrl_send(ep, peer, MRL_CTRL_HELLO_ACK, 0, 0) == -FI_EAGAIN)
		return;			/* no buffer now: the next op retries */
	peer->rails_up |= 1u;
	peer->rails_up_ep = ep;
}

/* A RAIL_UP on each rail of todo (1 and up) while buffers last: the rails
 * it went on. */
uint32_t mrl_connect_send_rails_up(struct mrl_ep *ep, struct mrl_peer *peer,
				   uint32_t todo)
{
	uint32_t sent = 0;
	int r;

	for (r = 1; todo >> r && r < peer->nrails; r++) {
		if (!(todo & (1u << r)) ||
		    peer->rail[r].core_addr == FI_ADDR_NOTAVAIL)
			continue;
		if (mrl_ctrl_send_on(ep, peer, r, MRL_CTRL_RAIL_UP, 0, 0, NULL, 0, 0, 0))
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
 * post nothing there until its RAIL_UP comes (mrl_connect_open_rails).  The
 * rails asked for, or 0 when no buffer was free (the next op asks).
 */
static uint32_t mrl_ask_rails(struct mrl_ep *ep, struct mrl_peer *peer,
			      uint32_t todo)
{
	if (mrl_ctrl_send(ep, peer, MRL_CTRL_RAIL_ASK, todo, 0))
		return 0;
	peer->rails_closed |= todo;
	mrl_rma_forget_hint(peer);	/* its rails may be closed ones */
	peer->asked_ms = mrl_now_ms();
	if (peer->asks < UINT8_MAX)
		peer->asks++;
	return todo;
}

void mrl_connect_rails_up(struct mrl_ep *ep, struct mrl_peer *peer,
			  uint32_t rails)
{
	uint32_t todo = rails & ~peer->rails_up & ~1u, done;

	if (ep->ctrl_ep) {
		mrl_connect_introduce(ep, peer);
		return;
	}

	if (!todo || !ep->ctrl_enabled || peer->partial ||
	    (peer->rails_up_ep && peer->rails_up_ep != ep))
		return;
	done = mrl_addr_connects(ep->name, peer->addr)
		       ? mrl_connect_send_rails_up(ep, peer, todo)
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
void mrl_connect_reset_rail(struct mrl_ep *ep, struct mrl_peer *peer, int rail)
{
	uint32_t usable = mrl_rail_mask(peer->nrails) & ~peer->rails_down &
			  ~mrl_rail_bit(rail);

	if (!ep->ctrl_enabled || ep->ctrl_ep || !usable)
		return;
	mrl_ctrl_send_on(ep, peer, (usable & 1u) ? 0 : __builtin_ctz(usable),
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
	mrl_connect_rails_opened(ep, peer, peer->rails_closed);
}

/*
 * Of rails, those we may post on: the open ones; else rail 0 where it
 * works (it carried our questions, so it is connected or ours to
 * connect); else rails as they are, connecting them ourselves rather than
 * failing the op.
 */
uint32_t mrl_connect_open_rails(struct mrl_ep *ep, struct mrl_peer *peer,
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
bool mrl_connect_await_rails(struct mrl_ep *ep, struct mrl_peer *peer,
			     uint32_t rails)
{
	mrl_reask_rails(ep, peer);
	return (rails & peer->rails_closed) && peer->asks <= 1 &&
	       mrl_now_ms() - peer->asked_ms < MRL_RAIL_REASK_MS;
}

int mrl_connect_hello(struct mrl_ep *ep, struct mrl_peer *peer)
{
	uint32_t nonce;
	int ret;

	if (peer->hello_sent)
		return 0;
	nonce = mrl_ctrl_new_nonce(ep);
	ret = mrl_ctrl_send(ep, peer, MRL_CTRL_HELLO, 0, nonce);
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
void mrl_connect_hello_partial(struct mrl_ep *ep)
{
	struct mrl_av *av = ep->av;
	size_t i;

	if (!av)
		return;
	av->hello_due = false;
	for (i = 0; i < av->nall; i++) {
		if (av->all[i]->partial && mrl_connect_hello(ep, av->all[i]))
			av->hello_due = true;
	}
}

/* ep is closing: another endpoint may bring this peer's rails up. */
void mrl_connect_forget_ep(struct mrl_ep *ep, struct mrl_peer *peer)
{
	if (peer->rails_up_ep == ep) {
		peer->rails_up_ep = NULL;
		peer->rails_up = 0;
	}
}

/*
 * A RAIL_UP on each rail asked for.  A peer we only learned from its
 * messages is in rail 0's AV alone: we never send to it on the others,
 * so it may open them itself without a race, and a RAIL_UP on rail 0
 * naming them (in key) says so.
 */
void mrl_connect_answer_ask(struct mrl_ep *ep, struct mrl_peer *peer,
			    uint32_t asked)
{
	uint32_t reachable = 0;
	int r;

	for (r = 1; r < peer->nrails; r++)
		if (peer->rail[r].core_addr != FI_ADDR_NOTAVAIL)
			reachable |= 1u << r;
	mrl_connect_send_rails_up(ep, peer, asked & reachable);
	if (asked & ~reachable)
		mrl_ctrl_send_on(ep, peer, 0, MRL_CTRL_RAIL_UP, asked & ~reachable,
				 0, NULL, 0, 0, 0);
}
