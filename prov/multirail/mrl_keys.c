/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The target's keys on each rail behind one of our keys: an initiator's
 * cache per peer (a table of buckets that doubles), its questions
 * (KEY_REQ, asked again when unanswered, on the peer's question rail) and
 * their answers (KEY_RESP, which must echo the question's random nonce);
 * and the target's side, which answers for registrations peers may access.
 */
#include <stdlib.h>
#include <string.h>

#include "mrl.h"
#include "mrl_ctrl.h"

/* Until the keys come, every op to the key goes on rail 0 alone: a lost
 * question must not cost long (the answer is a few ms on a busy host). */
#define MRL_KEY_REASK_NS	200000000ull

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
	int rail = mrl_ctrl_question_rail(ep, peer);
	uint64_t t = mrl_clock_ns();

	if (rail != e->asked_rail || !e->since_ns) {
		e->asked_rail = rail;
		e->since_ns = t;
	}
	e->unsent = mrl_ctrl_send_on(ep, peer, rail, MRL_CTRL_KEY_REQ, e->key, 0,
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
bool mrl_keys_awaited(const struct mrl_ep *ep,
		      const struct mrl_peer *peer,
		      const struct mrl_key_entry *e)
{
	if (!mrl_ctrl_question_rail(ep, peer) || e->state != MRL_KEY_PENDING ||
	    e->asked_rail != mrl_ctrl_question_rail(ep, peer))
		return false;
	return !mrl_params.rail_timeout_ms ||
	       mrl_clock_ns() - e->since_ns <
	       (uint64_t) mrl_params.rail_timeout_ms * 1000000ull;
}

/* Initiator: what we know of key at peer; asks the peer once. */
const struct mrl_key_entry *mrl_keys_lookup(struct mrl_ep *ep,
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
		    mrl_ctrl_question_rail(ep, peer) != e->asked_rail)
			mrl_ask(ep, peer, e);
		return e;
	}
	if (peer->partial) {
		mrl_connect_hello(ep, peer);
		return NULL;
	}
	if (mrl_key_room(peer))
		return NULL;
	e = calloc(1, sizeof(*e) + (size_t) ep->nrails * sizeof(e->keys[0]));
	if (!e)
		return NULL;
	e->nonce = mrl_ctrl_new_nonce(ep);
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
void mrl_keys_answer(struct mrl_ep *ep, struct mrl_peer *peer, uint64_t key,
		     uint32_t nonce, int rail)
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
	mrl_ctrl_send_on(ep, peer, rail, MRL_CTRL_KEY_RESP, key, mr ? 0 : -FI_ENOKEY,
			 keys, n, mr ? mr->near_mask : 0, nonce);
}

/* The keys learned, or NULL. */
const struct mrl_key_entry *mrl_keys_take(struct mrl_ep *ep,
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

/* The peer goes (mrl_av.c): its keys with it. */
void mrl_keys_forget_peer(struct mrl_peer *peer)
{
	struct mrl_key_entry *e, *next;
	uint32_t b;

	for (b = 0; peer->keys && b < peer->keys->nbuckets; b++) {
		for (e = peer->keys->bucket[b]; e; e = next) {
			next = e->next;
			free(e);
		}
	}
	free(peer->keys);
	peer->keys = NULL;
}
