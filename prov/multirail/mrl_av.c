/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Address vector and the composite address.
 *
 * fi_getname returns every rail's core address behind a small versioned
 * header (struct mrl_addr_hdr).  fi_getinfo with a node and no FI_SOURCE can
 * only know the peer's rail 0: it returns a "partial" address, and the
 * endpoint learns the rest with a HELLO over the control channel.  A peer
 * with fewer rails than we have is reached on the rails both sides have.
 *
 * Peers live as long as the AV.  The user's fi_addr_t indexes a table of
 * peer pointers; peers that contacted us before the user inserted them
 * ("hidden", learned from control messages) are kept too, and become
 * visible when the user inserts the same address.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/socket.h>

#include "mrl.h"

/* Room for any address an AV keeps of a name in MRL_ADDR_CTRL_DELTA form */
#define MRL_EXPANDED_MAX	(sizeof(struct mrl_addr_hdr) + 2 * MRL_ADDR_DELTA_MAX)

/* A checked address as the AV keeps it: the delta form expanded in buf. */
static const void *mrl_kept_form(const void *addr, uint8_t *buf)
{
	const struct mrl_addr_hdr *hdr = addr;

	if (!(hdr->flags & MRL_ADDR_CTRL_DELTA))
		return addr;
	mrl_addr_expand(addr, buf);
	return buf;
}

static struct mrl_av *mrl_to_av(struct fid_av *av)
{
	return mrl_container_of(av, struct mrl_av, av_fid);
}

/* Each part goes with its owner's call; the AV's own parts last. */
void mrl_peer_free(struct mrl_peer *peer)
{
	mrl_keys_forget_peer(peer);
	mrl_fence_forget_peer(peer);
	free(peer->health);	/* its endpoint's counts went before */
	if (peer->addr_own)
		free(peer->addr);
	free(peer);
}

static int mrl_grow(void **arr, size_t *size, size_t need, size_t elem)
{
	size_t n = *size ? *size : 16;
	void *p;

	if (need <= *size)
		return 0;
	while (n < need)
		n *= 2;
	p = realloc(*arr, n * elem);
	if (!p)
		return -FI_ENOMEM;
	memset((char *) p + *size * elem, 0, (n - *size) * elem);
	*arr = p;
	*size = n;
	return 0;
}

/*
 * Entry a of rail 0's core AV (the peer's own or its control endpoint's)
 * is peer's: the core names a message's sender by it, and every control
 * message's claim is checked against it (mrl_av_claim_from).
 */
static int mrl_av_own_core0(struct mrl_av *av, fi_addr_t a,
			    struct mrl_peer *peer)
{
	if (a == FI_ADDR_NOTAVAIL)
		return 0;
	if (mrl_grow((void **) &av->by_core0, &av->nby_core0, a + 1,
		     sizeof(*av->by_core0)))
		return -FI_ENOMEM;
	av->by_core0[a] = peer;
	return 0;
}

static void mrl_av_drop_core0(struct mrl_av *av, fi_addr_t a,
			      const struct mrl_peer *peer)
{
	if (a != FI_ADDR_NOTAVAIL && a < av->nby_core0 &&
	    av->by_core0[a] == peer)
		av->by_core0[a] = NULL;
}

/*
 * String addresses vary in length (shm's grow with the endpoint's index):
 * each sits zero-padded in a slot of the longest one's size, and must end
 * there, or the core would read past it.
 */
static int mrl_check_string_rails(const void *addr)
{
	const struct mrl_addr_hdr *hdr = addr;
	int naddrs = hdr->nrails + !!(hdr->flags & MRL_ADDR_CTRL), r;

	for (r = 0; r < naddrs; r++) {
		if (!memchr(mrl_addr_rail(addr, r), '\0', hdr->rail_addrlen)) {
			MRL_WARN(FI_LOG_AV, "rail %d: string address not "
				 "terminated in its %u bytes\n", r,
				 hdr->rail_addrlen);
			return -FI_EINVAL;
		}
	}
	return 0;
}

/*
 * What the header cannot say: that each rail's address is one our core
 * can take.  Lengths must equal the core's, and socket addresses must be
 * of our own family: libfabric 1.17's IP AV sets its address length to 0
 * on an unknown family, and every later insert then fails.
 */
static int mrl_check_rails(struct mrl_av *av, const void *addr)
{
	const struct mrl_addr_hdr *hdr = addr;
	const struct fi_info *core = av->domain->rails[0].info;
	const struct sockaddr *own = core->src_addr, *sa;
	int r;

	if (core->addr_format == FI_ADDR_STR)
		return mrl_check_string_rails(addr);
	if (core->src_addrlen && hdr->rail_addrlen != core->src_addrlen) {
		MRL_WARN(FI_LOG_AV, "rail addresses of %u bytes, the core's "
			 "are %zu\n", hdr->rail_addrlen, core->src_addrlen);
		return -FI_EINVAL;
	}
	if (!own || (core->addr_format != FI_SOCKADDR &&
		     core->addr_format != FI_SOCKADDR_IN &&
		     core->addr_format != FI_SOCKADDR_IN6))
		return 0;
	for (r = 0; r < hdr->nrails && r < av->nrails; r++) {
		sa = mrl_addr_rail(addr, r);
		if (sa->sa_family != own->sa_family) {
			MRL_WARN(FI_LOG_AV, "rail %d: address family %u, the "
				 "core's is %u\n", r, sa->sa_family,
				 own->sa_family);
			return -FI_EINVAL;
		}
	}
	return 0;
}

/* An address from a control message: whole, never a cut name's form. */
static int mrl_av_check(struct mrl_av *av, const void *addr, size_t len)
{
	if (mrl_addr_check(addr, len) ||
	    (((const struct mrl_addr_hdr *) addr)->flags & MRL_ADDR_CTRL_DELTA))
		return -FI_EINVAL;
	return mrl_check_rails(av, addr);
}

/* Take the peer's rails [from, to) out of the rails' core AVs. */
static void mrl_remove_core(struct mrl_av *av, struct mrl_peer *peer, int from,
			    int to)
{
	int r;

	for (r = from; r < to; r++) {
		if (!r)
			mrl_av_drop_core0(av, peer->rail[0].core_addr, peer);
		if (peer->rail[r].core_addr != FI_ADDR_NOTAVAIL)
			fi_av_remove(av->core[r], &peer->rail[r].core_addr, 1,
				     0);
		peer->rail[r].core_addr = FI_ADDR_NOTAVAIL;
	}
}

/*
 * Insert the peer's rails [from, nrails) into the rails' core AVs, those
 * not there yet; on failure none of them stays.  A learned peer is only
 * ever answered, on rail 0: its other rails wait until the user inserts it.
 */
int mrl_av_insert_core(struct mrl_av *av, struct mrl_peer *peer, int from)
{
	int to = peer->learned ? 1 : peer->nrails, r, ret;

	for (r = from; r < to; r++) {
		if (peer->rail[r].core_addr != FI_ADDR_NOTAVAIL)
			continue;
		ret = fi_av_insert(av->core[r], mrl_addr_rail(peer->addr, r), 1,
				   &peer->rail[r].core_addr, 0, NULL);
		if (ret == 1 && !r &&
		    mrl_av_own_core0(av, peer->rail[0].core_addr, peer))
			ret = -FI_ENOMEM;
		if (ret != 1) {
			MRL_WARN(FI_LOG_AV, "rail %d: core fi_av_insert: %d\n",
				 r, ret);
			mrl_remove_core(av, peer, from, r + 1);
			return ret < 0 ? ret : -FI_EINVAL;
		}
	}
	return 0;
}

/*
 * The peer's control endpoint, where the core has no FI_TAGGED and the
 * address names one; it shares rail 0's core AV.  Without it the peer gets
 * no control message and ops to it stay on rail 0.
 */
static void mrl_insert_ctrl(struct mrl_av *av, struct mrl_peer *peer)
{
	const void *ctrl = mrl_addr_ctrl(peer->addr);
	int ret;

	if (!av->domain->ctrl_own_ep || !ctrl ||
	    peer->ctrl_addr != FI_ADDR_NOTAVAIL)
		return;
	ret = fi_av_insert(av->core[0], ctrl, 1, &peer->ctrl_addr, 0, NULL);
	if (ret == 1 && !mrl_av_own_core0(av, peer->ctrl_addr, peer))
		return;
	MRL_WARN(FI_LOG_AV, "a peer's control endpoint: core fi_av_insert: "
		 "%d; ops to it stay on rail 0\n", ret);
	if (ret == 1)
		fi_av_remove(av->core[0], &peer->ctrl_addr, 1, 0);
	peer->ctrl_addr = FI_ADDR_NOTAVAIL;
}

/*
 * Peers are found by their rail-0 address, the same in every form of a
 * peer's address (partial or full).  The index is open-addressed (linear
 * probing) and holds each peer's hash with its place in av->all, so a
 * probe reads one array and touches a peer only when the hashes agree: an
 * insert into an AV of many peers costs no cache miss per peer it passes.
 */
static uint32_t mrl_av_hash(const void *addr)
{
	const struct mrl_addr_hdr *hdr = addr;
	uint64_t h = mrl_fnv1a(mrl_addr_rail(addr, 0), hdr->rail_addrlen);

	return (uint32_t) (h ^ (h >> 32));
}

static bool mrl_same_rail0(const void *a, const void *b)
{
	const struct mrl_addr_hdr *ha = a, *hb = b;

	return ha->rail_addrlen == hb->rail_addrlen &&
	       !memcmp(mrl_addr_rail(a, 0), mrl_addr_rail(b, 0),
		       ha->rail_addrlen);
}

/* The slot holding av->all[i], found from its hash. */
static size_t mrl_av_slot_of(const struct mrl_av *av, uint32_t hash, size_t i)
{
	size_t mask = av->nslots - 1, s = hash & mask;

	while (av->slots[s].pos != i + 1)
		s = (s + 1) & mask;
	return s;
}

static void mrl_av_index_put(struct mrl_av *av, uint32_t hash, size_t i)
{
	size_t mask = av->nslots - 1, s = hash & mask;

	while (av->slots[s].pos)
		s = (s + 1) & mask;
	av->slots[s].hash = hash;
	av->slots[s].pos = (uint32_t) (i + 1);
}

/* Empty slot s, moving later members of its run back so that every
 * member stays reachable from its home slot (no tombstones). */
static void mrl_av_index_empty(struct mrl_av *av, size_t s)
{
	size_t mask = av->nslots - 1, next = s, home;

	for (;;) {
		next = (next + 1) & mask;
		if (!av->slots[next].pos)
			break;
		home = av->slots[next].hash & mask;
		/* may it move back to s?  Only if its home is not in
		 * (s, next], cyclically */
		if (s <= next ? (home > s && home <= next)
			      : (home > s || home <= next))
			continue;
		av->slots[s] = av->slots[next];
		s = next;
	}
	av->slots[s].pos = 0;
}

/* av->all[i] leaves the index. */
static void mrl_av_index_take(struct mrl_av *av, size_t i)
{
	mrl_av_index_empty(av, mrl_av_slot_of(av, mrl_av_hash(av->all[i]->addr),
					      i));
}

/* Room for more peers at a load of at most 3/4. */
static int mrl_av_index_reserve(struct mrl_av *av, size_t more)
{
	struct mrl_av_slot *old = av->slots;
	size_t nold = av->nslots, n = nold ? nold : 64, i;

	if (4 * (av->nall + more) <= 3 * nold)
		return 0;
	while (4 * (av->nall + more) > 3 * n)
		n *= 2;
	if (n > UINT32_MAX)
		return -FI_ENOMEM;
	av->slots = calloc(n, sizeof(*av->slots));
	if (!av->slots) {
		av->slots = old;
		return -FI_ENOMEM;
	}
	av->nslots = n;
	for (i = 0; i < nold; i++) {
		if (old[i].pos)
			mrl_av_index_put(av, old[i].hash, old[i].pos - 1);
	}
	free(old);
	return 0;
}

static struct mrl_peer *mrl_find_peer(struct mrl_av *av, const void *addr)
{
	uint32_t hash;
	size_t mask, s;
	struct mrl_peer *p;

	if (!av->nslots)
		return NULL;
	hash = mrl_av_hash(addr);
	mask = av->nslots - 1;
	for (s = hash & mask; av->slots[s].pos; s = (s + 1) & mask) {
		if (av->slots[s].hash != hash)
			continue;
		p = av->all[av->slots[s].pos - 1];
		if (mrl_same_rail0(p->addr, addr))
			return p;
	}
	return NULL;
}

/*
 * The peer whose rail-0 address hashes to id (mrl_fnv1a, as message
 * packets name their sender: mrl_pkt_id), user's or hidden; NULL for none.
 * The index's hash folds the same sum, so one probe sequence finds it.
 */
uint64_t mrl_av_peer_id(struct mrl_peer *peer)
{
	const struct mrl_addr_hdr *hdr = peer->addr;

	/* rail 0's address is the same in every form of the peer's */
	if (!peer->id)
		peer->id = mrl_fnv1a(mrl_addr_rail(peer->addr, 0),
				     hdr->rail_addrlen);
	return peer->id;
}

struct mrl_peer *mrl_av_peer_by_id(struct mrl_av *av, uint64_t id)
{
	uint32_t hash = (uint32_t) (id ^ (id >> 32));
	size_t mask, s;
	struct mrl_peer *p;

	if (!av || !av->nslots)
		return NULL;
	mask = av->nslots - 1;
	for (s = hash & mask; av->slots[s].pos; s = (s + 1) & mask) {
		if (av->slots[s].hash != hash)
			continue;
		p = av->all[av->slots[s].pos - 1];
		if (mrl_av_peer_id(p) == id)
			return p;
	}
	return NULL;
}

/*
 * addr, a full address, becomes the peer's: its rails from 1 on join the
 * cores' AVs (rail 0's entry, the same in any address of it, stays).
 */
static int mrl_take_full_addr(struct mrl_av *av, struct mrl_peer *peer,
			      const void *addr, size_t len)
{
	const struct mrl_addr_hdr *hdr = addr;
	void *copy = malloc(len);
	int ret;

	if (!copy)
		return -FI_ENOMEM;
	memcpy(copy, addr, len);
	if (peer->addr_own)
		free(peer->addr);
	peer->addr = copy;
	peer->addr_own = true;
	peer->addrlen = len;	/* rail 0, the index's key, stays */
	peer->peer_nrails = hdr->nrails;
	peer->nrails = hdr->nrails < av->nrails ? hdr->nrails : av->nrails;
	mrl_rma_forget_hint(peer);	/* its rails were for the old nrails */
	ret = mrl_av_insert_core(av, peer, 1);
	if (ret) {
		peer->nrails = 1;
		return ret;
	}
	mrl_insert_ctrl(av, peer);
	peer->partial = false;
	return 0;
}

/* A full address for a partial peer: reach its other rails too. */
static int mrl_upgrade_peer(struct mrl_av *av, struct mrl_peer *peer,
			    const void *addr, size_t len)
{
	const struct mrl_addr_hdr *hdr = addr;
	int ret;

	if (!peer->partial || (hdr->flags & MRL_ADDR_PARTIAL))
		return 0;
	ret = mrl_take_full_addr(av, peer, addr, len);
	if (!ret)
		MRL_INFO(FI_LOG_AV, "peer learned: %d common rail(s)\n",
			 peer->nrails);
	return ret;
}

/*
 * The user inserts a full address for a peer so far known only from
 * control messages (hidden).  Anyone who reaches rail 0 can claim a peer's
 * rail-0 address with other rails of its own, so what fi_av_insert is given
 * wins over what was learned: the learned rails are dropped for the user's.
 */
static int mrl_adopt_inserted(struct mrl_av *av, struct mrl_peer *peer,
			      const void *addr, size_t len)
{
	const struct mrl_addr_hdr *hdr = addr;

	if (peer->visible || (hdr->flags & MRL_ADDR_PARTIAL) ||
	    (len == peer->addrlen && !memcmp(addr, peer->addr, len)))
		return mrl_upgrade_peer(av, peer, addr, len);
	MRL_WARN(FI_LOG_AV, "a peer learned from control messages had another "
		 "address than the one inserted for it: the inserted one is "
		 "used\n");
	mrl_remove_core(av, peer, 1, peer->nrails);
	mrl_av_drop_core0(av, peer->ctrl_addr, peer);
	if (peer->ctrl_addr != FI_ADDR_NOTAVAIL)
		fi_av_remove(av->core[0], &peer->ctrl_addr, 1, 0);
	peer->ctrl_addr = FI_ADDR_NOTAVAIL;
	mrl_connect_rails_added(peer);
	return mrl_take_full_addr(av, peer, addr, len);
}

/* A peer for addr, in no core AV yet; room in av->all and the index is
 * the caller's to make. */
static struct mrl_peer *mrl_alloc_peer(struct mrl_av *av, const void *addr,
				       size_t len, bool learned)
{
	const struct mrl_addr_hdr *hdr = addr;
	struct mrl_peer *peer;
	int r;

	/* its address in the same allocation, after its rails: one malloc
	 * less per peer (a full address learned later gets its own) */
	peer = calloc(1, sizeof(*peer) + (size_t) av->nrails *
		      sizeof(peer->rail[0]) + len);
	if (!peer)
		return NULL;
	peer->addr = &peer->rail[av->nrails];
	memcpy(peer->addr, addr, len);
	peer->addrlen = len;
	peer->partial = !!(hdr->flags & MRL_ADDR_PARTIAL);
	peer->peer_nrails = hdr->nrails;
	peer->nrails = hdr->nrails < av->nrails ? hdr->nrails : av->nrails;
	peer->fi_addr = FI_ADDR_NOTAVAIL;
	peer->learned = learned;
	for (r = 0; r < av->nrails; r++)
		peer->rail[r].core_addr = FI_ADDR_NOTAVAIL;
	peer->ctrl_addr = FI_ADDR_NOTAVAIL;
	return peer;
}

static void mrl_av_add_peer(struct mrl_av *av, struct mrl_peer *peer)
{
	mrl_av_index_put(av, mrl_av_hash(peer->addr), av->nall);
	av->all[av->nall++] = peer;
}

/* Peers av->all[keep..] go: in the index, and nowhere else yet. */
static void mrl_av_drop_peers(struct mrl_av *av, size_t keep)
{
	struct mrl_peer *peer;

	while (av->nall > keep) {
		peer = av->all[av->nall - 1];
		mrl_av_index_take(av, av->nall - 1);
		mrl_peer_free(peer);
		av->nall--;
	}
}

static struct mrl_peer *mrl_new_peer(struct mrl_av *av, const void *addr,
				     size_t len, bool learned, int *err)
{
	struct mrl_peer *peer;

	*err = -FI_ENOMEM;
	if (mrl_grow((void **) &av->all, &av->sizeall, av->nall + 1,
		     sizeof(*av->all)) ||
	    mrl_av_index_reserve(av, 1))
		return NULL;
	peer = mrl_alloc_peer(av, addr, len, learned);
	if (!peer)
		return NULL;
	*err = mrl_av_insert_core(av, peer, 0);
	if (*err) {
		mrl_peer_free(peer);
		return NULL;
	}
	mrl_insert_ctrl(av, peer);
	mrl_av_add_peer(av, peer);
	return peer;
}

/* Did the core say that this message came from the peer's own rail 0? */
static bool mrl_from_rail0(const struct mrl_peer *peer,
			   const struct mrl_ctrl_from *from)
{
	return from->checked && from->src == peer->rail[0].core_addr;
}

/*
 * May a full address from a control message complete a peer we know by
 * rail 0 alone?  Any process that reaches rail 0 can claim that rail with
 * others of its own, so only the HELLO_ACK echoing our HELLO's nonce (sent
 * to the peer's own rail 0) may.  Where no HELLO can be sent (a partial
 * address without the peer's control endpoint, efa-direct), the peer's own
 * message may: one the core says came from its rail 0 (control messages
 * leave from there, mrl_ctrl.c); with no sources to check, the first.
 */
static bool mrl_may_complete(const struct mrl_av *av,
			     const struct mrl_peer *peer,
			     const struct mrl_ctrl_from *from)
{
	if (av->domain->ctrl_own_ep && !mrl_addr_ctrl(peer->addr))
		return !from->checked || mrl_from_rail0(peer, from);
	return peer->hello_nonce && from->ack_nonce == peer->hello_nonce;
}

/* The peer whose entry in rail 0's core AV core0 is, or NULL. */
static struct mrl_peer *mrl_peer_at(const struct mrl_av *av, fi_addr_t core0)
{
	return core0 < av->nby_core0 ? av->by_core0[core0] : NULL;
}

/*
 * May a control message claiming to come from addr have come from where the
 * core says (from->src, in rail 0's AV)?  Rail 0's core reports sources
 * whenever it can (from->checked; mrl_core_getinfo_rail asks it to), and a
 * peer we know sends its control messages from its rail 0, so:
 *   - a sender we know must claim its own address;
 *   - a peer the user inserted speaks from its own rail 0: a claim of its
 *     address from a sender the core does not know is a lie;
 *   - an unknown sender claiming an unknown address, or a learned one, may
 *     be learned, provisionally (mrl_av_learn: bounded, and replaced by
 *     what the user inserts; answers go to the claimed address anyway).
 */
bool mrl_av_claim_from(struct mrl_av *av, const void *addr, size_t len,
		       const struct mrl_ctrl_from *from)
{
	struct mrl_peer *claimed, *sender;

	if (!from->checked || mrl_av_check(av, addr, len))
		return true;	/* no source to check, or learn refuses it */
	claimed = mrl_find_peer(av, addr);
	sender = from->src == FI_ADDR_NOTAVAIL ? NULL
					       : mrl_peer_at(av, from->src);
	if (sender)
		return sender == claimed;
	return !claimed || !claimed->visible;
}

/*
 * A learned peer nothing refers to: no control message of ours to it posted
 * or waiting, no probe or fence in flight, no endpoint greeting its rails.
 * We only ever answer such a peer, so if it speaks again it is learned
 * again.
 */
static bool mrl_evictable(const struct mrl_peer *peer)
{
	return peer->learned && !peer->ctrl_refs && !peer->rails_up_ep &&
	       mrl_fence_idle(peer) &&
	       (peer->health ? !peer->health->probing : !peer->rails_down);
}

/*
 * Its rail-0 entry stays in the core's AV: a peer that writes to us without
 * being in the user's AV has connections the core ties to that entry, and
 * removing it would cut them under its operations.  So a made-up sender
 * costs the core one AV entry; a real one, nothing the core did not hold
 * already for its connection.
 */
static void mrl_evict(struct mrl_av *av, size_t i)
{
	struct mrl_peer *peer = av->all[i], *last;
	size_t end = av->nall - 1;

	mrl_health_forget_peer(peer);
	mrl_av_index_take(av, i);
	mrl_av_drop_core0(av, peer->rail[0].core_addr, peer);
	mrl_av_drop_core0(av, peer->ctrl_addr, peer);
	mrl_peer_free(peer);
	if (i != end) {	/* the last peer takes its place */
		last = av->all[end];
		av->slots[mrl_av_slot_of(av, mrl_av_hash(last->addr),
					 end)].pos = (uint32_t) (i + 1);
		av->all[i] = last;
	}
	av->nall = end;
	av->nlearned--;
	av->evicted++;
}

/*
 * The table of learned peers is full: the one heard from least recently
 * that nothing refers to makes room.  A bound that refused newcomers would
 * let anyone who reaches rail 0 fill it with made-up senders and lock
 * every later peer out of its keys (onto rail 0 for good).  Warned the
 * 1st, 2nd, 4th... time.
 */
static bool mrl_make_room(struct mrl_av *av)
{
	size_t i, victim = av->nall;

	for (i = 0; i < av->nall; i++) {
		if (mrl_evictable(av->all[i]) &&
		    (victim == av->nall ||
		     av->all[i]->heard < av->all[victim]->heard))
			victim = i;
	}
	if (victim == av->nall) {
		MRL_WARN_ONCE(FI_LOG_AV, "learned-peer table full (%d, "
			      "FI_MULTIRAIL_MAX_LEARNED_PEERS) and every entry "
			      "in use: a control message from a peer not in "
			      "the AV dropped\n", mrl_params.max_learned);
		return false;
	}
	mrl_evict(av, victim);
	if (!(av->evicted & (av->evicted - 1)))
		MRL_WARN(FI_LOG_AV, "learned-peer table full (%d, "
			 "FI_MULTIRAIL_MAX_LEARNED_PEERS): the peer heard from "
			 "least recently was forgotten (%lu so far)\n",
			 mrl_params.max_learned, (unsigned long) av->evicted);
	return true;
}

static struct mrl_peer *mrl_learn_new(struct mrl_av *av, const void *addr,
				      size_t len)
{
	struct mrl_peer *peer;
	int ret;

	if (av->nlearned >= mrl_params.max_learned && !mrl_make_room(av))
		return NULL;
	peer = mrl_new_peer(av, addr, len, true, &ret);
	av->nlearned += !!peer;
	return peer;
}

/*
 * A peer from a control message: known, upgraded, or new and hidden.  Any
 * process that reaches rail 0 can claim any address, so hidden peers are
 * bounded (FI_MULTIRAIL_MAX_LEARNED_PEERS, least recently heard from
 * evicted).
 */
struct mrl_peer *mrl_av_learn(struct mrl_av *av, const void *addr, size_t len,
			      const struct mrl_ctrl_from *from)
{
	struct mrl_peer *peer;

	if (mrl_av_check(av, addr, len))
		return NULL;
	len = mrl_addr_len(addr);
	peer = mrl_find_peer(av, addr);
	if (!peer)
		peer = mrl_learn_new(av, addr, len);
	if (!peer)
		return NULL;
	peer->heard = ++av->clock;
	if (peer->partial && !mrl_may_complete(av, peer, from)) {
		/*
		 * Two partial peers' HELLOs cross (aws-ofi-nccl's 56-byte
		 * names make every peer partial): the peer's own, from its
		 * rail 0, waits for its answer without a word.  So does what
		 * the peer sends on its other rails once our answer to its
		 * HELLO reached it (RAIL_UP, a KEY_REQ), ahead of its answer
		 * to ours: no core vouches for a sender there, so nothing
		 * says it is a liar's.  A liar is one the core names.
		 */
		if (from->checked ? !mrl_from_rail0(peer, from) : !from->rail)
			MRL_WARN_ONCE(FI_LOG_AV, "a full address for a peer "
				      "known by rail 0 alone, not in answer "
				      "to our HELLO: not taken\n");
		return peer;
	}
	if (mrl_upgrade_peer(av, peer, addr, len))
		MRL_WARN(FI_LOG_AV, "could not reach a peer's other rails\n");
	return peer;
}

/* A learned peer the user inserts is the user's for good, on all its rails. */
static void mrl_adopt_learned(struct mrl_av *av, struct mrl_peer *peer)
{
	peer->learned = false;
	av->nlearned--;
	if (mrl_av_insert_core(av, peer, 1)) {
		MRL_WARN(FI_LOG_AV, "could not reach a peer's other rails: "
			 "ops to it stay on rail 0\n");
		peer->nrails = 1;
		mrl_rma_forget_hint(peer);
	}
}

/* The user's handle for peer: the next in the table. */
static int mrl_publish(struct mrl_av *av, struct mrl_peer *peer,
		       fi_addr_t *out)
{
	int ret;

	ret = mrl_grow((void **) &av->table, &av->size, av->count + 1,
		       sizeof(*av->table));
	if (ret)
		return ret;
	if (!peer->visible) {
		if (peer->learned)
			mrl_adopt_learned(av, peer);
		peer->visible = true;
		peer->fi_addr = av->count;
	}
	av->table[av->count] = peer;
	*out = av->count++;
	/* the bound endpoint's next progress asks for the full address */
	if (peer->partial)
		av->hello_due = true;
	return 0;
}

static int mrl_insert_one(struct mrl_av *av, const void *addr, fi_addr_t *out)
{
	size_t len = mrl_addr_len(addr);
	struct mrl_peer *peer;
	int ret;

	peer = mrl_find_peer(av, addr);
	if (peer) {
		ret = mrl_adopt_inserted(av, peer, addr, len);
		if (ret)
			return ret;
	} else {
		peer = mrl_new_peer(av, addr, len, false, &ret);
		if (!peer)
			return ret;
	}
	return mrl_publish(av, peer, out);
}

/* The new peers av->all[first..] out of rails [0, to)'s core AVs. */
static void mrl_remove_new(struct mrl_av *av, size_t first, int to)
{
	size_t i;

	for (i = first; i < av->nall; i++)
		mrl_remove_core(av, av->all[i], 0, to);
}

/*
 * Rail r of the new peers av->all[first..] into its core AV with one
 * fi_av_insert, as a program inserting many peers expects of the core;
 * false, and none of them in any core AV, if the core took fewer.
 */
static bool mrl_insert_rail_batch(struct mrl_av *av, size_t first, int r,
				  uint8_t *buf, fi_addr_t *out)
{
	size_t alen =
		((struct mrl_addr_hdr *) av->all[first]->addr)->rail_addrlen;
	size_t i, n = 0;
	int ret;

	for (i = first; i < av->nall; i++) {
		if (av->all[i]->nrails > r)
			memcpy(buf + n++ * alen,
			       mrl_addr_rail(av->all[i]->addr, r), alen);
	}
	if (!n)
		return true;
	for (i = 0; i < n; i++)
		out[i] = FI_ADDR_NOTAVAIL;	/* what the core fills in */
	ret = fi_av_insert(av->core[r], buf, n, out, 0, NULL);
	for (i = first, n = 0; i < av->nall; i++) {
		if (av->all[i]->nrails > r)
			av->all[i]->rail[r].core_addr = out[n++];
		if (!r && mrl_av_own_core0(av, av->all[i]->rail[0].core_addr,
					   av->all[i]))
			ret = -FI_ENOMEM;
	}
	if (ret == (int) n)
		return true;
	mrl_remove_new(av, first, r + 1);
	return false;
}

/*
 * count addresses of peers new to the AV, all distinct and of one rail
 * address length: each rail's core inserts them in one call.  -FI_EAGAIN
 * (nothing inserted) where that does not hold or a core refused: the
 * caller inserts them one at a time, which says which one failed.
 */
static int mrl_insert_batch(struct mrl_av *av, const char *p, size_t count,
			    fi_addr_t *fi_addr)
{
	size_t first = av->nall, alen = 0, i, off;
	uint8_t expanded[MRL_EXPANDED_MAX], *buf = NULL;
	fi_addr_t *out = NULL, dummy;
	const void *a;
	struct mrl_peer *peer;
	int r;

	if (mrl_grow((void **) &av->all, &av->sizeall, av->nall + count,
		     sizeof(*av->all)) ||
	    mrl_av_index_reserve(av, count) ||
	    mrl_grow((void **) &av->table, &av->size, av->count + count,
		     sizeof(*av->table)))
		return -FI_EAGAIN;
	for (i = 0, off = 0; i < count; i++, off += mrl_addr_len(p + off)) {
		a = mrl_kept_form(p + off, expanded);
		if (!i)
			alen = ((const struct mrl_addr_hdr *) a)->rail_addrlen;
		if (((const struct mrl_addr_hdr *) a)->rail_addrlen != alen ||
		    mrl_find_peer(av, a))
			goto undo;
		peer = mrl_alloc_peer(av, a, mrl_addr_len(a), false);
		if (!peer)
			goto undo;
		mrl_av_add_peer(av, peer);
	}
	buf = malloc(count * alen);
	out = malloc(count * sizeof(*out));
	if (!buf || !out)
		goto undo;
	for (r = 0; r < av->nrails; r++) {
		if (!mrl_insert_rail_batch(av, first, r, buf, out))
			goto undo;
	}
	for (i = 0; i < count; i++) {
		peer = av->all[first + i];
		mrl_insert_ctrl(av, peer);
		/* the table has room already: this cannot fail */
		mrl_publish(av, peer, fi_addr ? &fi_addr[i] : &dummy);
	}
	free(buf);
	free(out);
	return (int) count;
undo:
	mrl_av_drop_peers(av, first);
	free(buf);
	free(out);
	return -FI_EAGAIN;
}

static int mrl_av_insert(struct fid_av *av_fid, const void *addr,
			 size_t count, fi_addr_t *fi_addr, uint64_t flags,
			 void *context)
{
	struct mrl_av *av = mrl_to_av(av_fid);
	uint8_t expanded[MRL_EXPANDED_MAX];
	const char *p = addr;
	fi_addr_t dummy;
	size_t i, off = 0;
	int ret = 0;

	/* Check every address first: a bad one inserts nothing. */
	for (i = 0; i < count; i++) {
		if (mrl_addr_check(p + off, SIZE_MAX)) {
			MRL_WARN(FI_LOG_AV, "fi_av_insert: address %zu is not "
				 "a multirail address (bad magic, version or "
				 "rail count)\n", i);
			return -FI_EINVAL;
		}
		if (mrl_check_rails(av, mrl_kept_form(p + off, expanded)))
			return -FI_EINVAL;
		off += mrl_addr_len(p + off);
	}
	mrl_lock(av->domain);
	if (count > 1) {
		ret = mrl_insert_batch(av, p, count, fi_addr);
		if (ret != -FI_EAGAIN) {
			mrl_unlock(av->domain);
			return ret;
		}
		ret = 0;
	}
	for (i = 0, off = 0; i < count; i++) {
		ret = mrl_insert_one(av, mrl_kept_form(p + off, expanded),
				     fi_addr ? &fi_addr[i] : &dummy);
		if (ret)
			break;
		off += mrl_addr_len(p + off);
	}
	mrl_unlock(av->domain);
	return ret ? ret : (int) count;
}

static int mrl_av_insertsvc(struct fid_av *av, const char *node,
			    const char *service, fi_addr_t *fi_addr,
			    uint64_t flags, void *context)
{
	MRL_WARN(FI_LOG_AV, "fi_av_insertsvc: multirail addresses come from "
		 "fi_getname or fi_getinfo\n");
	return -FI_ENOSYS;
}

/*
 * The user's handle goes; the peer stays, hidden, with its core entries:
 * chunks or control messages may still be in flight, and a later insert
 * of the same address gives it a new handle.
 */
static void mrl_unpublish(struct mrl_peer *peer)
{
	peer->visible = false;
	peer->fi_addr = FI_ADDR_NOTAVAIL;
}

static int mrl_av_remove(struct fid_av *av_fid, fi_addr_t *fi_addr,
			 size_t count, uint64_t flags)
{
	struct mrl_av *av = mrl_to_av(av_fid);
	size_t i;
	int ret = 0;

	mrl_lock(av->domain);
	for (i = 0; i < count; i++) {
		if (fi_addr[i] >= av->count || !av->table[fi_addr[i]]) {
			ret = -FI_EINVAL;
			continue;
		}
		mrl_unpublish(av->table[fi_addr[i]]);
		av->table[fi_addr[i]] = NULL;
	}
	mrl_unlock(av->domain);
	return ret;
}

/* The user's handle for the peer whose rail 0 is core0 in its core AV. */
fi_addr_t mrl_av_src_addr(struct mrl_av *av, fi_addr_t core0)
{
	const struct mrl_peer *peer = mrl_peer_at(av, core0);

	return peer && peer->visible && peer->rail[0].core_addr == core0 ?
	       peer->fi_addr : FI_ADDR_NOTAVAIL;
}

static int mrl_av_lookup(struct fid_av *av_fid, fi_addr_t fi_addr, void *addr,
			 size_t *addrlen)
{
	struct mrl_av *av = mrl_to_av(av_fid);
	struct mrl_peer *peer;
	size_t len;

	mrl_lock(av->domain);
	peer = mrl_av_peer(av, fi_addr);
	if (!peer) {
		mrl_unlock(av->domain);
		return -FI_EINVAL;
	}
	len = *addrlen < peer->addrlen ? *addrlen : peer->addrlen;
	memcpy(addr, peer->addr, len);
	*addrlen = peer->addrlen;
	mrl_unlock(av->domain);
	return 0;
}

static const char *mrl_av_straddr(struct fid_av *av_fid, const void *addr,
				  char *buf, size_t *len)
{
	struct mrl_av *av = mrl_to_av(av_fid);
	const struct mrl_addr_hdr *hdr = addr;
	char one[128];
	size_t n, used, cap = *len;
	int r;

	if (mrl_addr_check(addr, SIZE_MAX)) {
		n = snprintf(buf, cap, "multirail://invalid");
		*len = n + 1;
		return buf;
	}
	used = snprintf(buf, cap, "multirail://v%d/%d%s", hdr->version,
			hdr->nrails, hdr->flags & MRL_ADDR_PARTIAL ?
			"-partial" : "");
	for (r = 0; r < hdr->nrails; r++) {
		size_t olen = sizeof(one);

		if (r < av->nrails)
			fi_av_straddr(av->core[r], mrl_addr_rail(addr, r), one,
				      &olen);
		else
			snprintf(one, sizeof(one), "?");
		n = snprintf(used < cap ? buf + used : NULL,
			     used < cap ? cap - used : 0, "%s%s",
			     r ? "," : "/", one);
		used += n;
	}
	*len = used + 1;
	return buf;
}

static void mrl_av_free(struct mrl_av *av)
{
	size_t i;
	int r;

	for (i = 0; i < av->nall; i++)
		mrl_peer_free(av->all[i]);
	for (r = 0; r < av->nrails; r++)
		if (av->core[r])
			fi_close(&av->core[r]->fid);
	free(av->all);
	free(av->slots);
	free(av->table);
	free(av->by_core0);
	free(av);
}

static int mrl_av_close(struct fid *fid)
{
	struct mrl_av *av = mrl_container_of(fid, struct mrl_av, av_fid.fid);

	/* its peers are what a bound endpoint reads, up to its own close */
	if (av->nbound) {
		MRL_WARN(FI_LOG_AV, "AV closed while an endpoint is bound to "
			 "it\n");
		return -FI_EBUSY;
	}
	mrl_domain_release(av->domain);
	mrl_av_free(av);
	return 0;
}

static struct fi_ops mrl_av_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = mrl_av_close,
	.bind = mrl_no_bind,
	.control = mrl_no_control,
	.ops_open = mrl_no_ops_open,
};

static struct fi_ops_av mrl_av_ops = {
	.size = sizeof(struct fi_ops_av),
	.insert = mrl_av_insert,
	.insertsvc = mrl_av_insertsvc,
	.insertsym = mrl_no_insertsym,
	.remove = mrl_av_remove,
	.lookup = mrl_av_lookup,
	.straddr = mrl_av_straddr,
};

int mrl_av_open(struct fid_domain *domain_fid, struct fi_av_attr *attr,
		struct fid_av **av_out, void *context)
{
	struct mrl_domain *dom = mrl_container_of(domain_fid, struct mrl_domain,
						  domain_fid);
	struct fi_av_attr core_attr = { .type = FI_AV_TABLE };
	struct mrl_av *av;
	int r, ret;

	if (attr && attr->type != FI_AV_UNSPEC && attr->type != FI_AV_TABLE &&
	    attr->type != FI_AV_MAP) {
		MRL_WARN(FI_LOG_AV, "AV type %d not supported\n", attr->type);
		return -FI_EINVAL;
	}
	if (attr && (attr->flags & (FI_EVENT | FI_READ | FI_SYMMETRIC))) {
		MRL_WARN(FI_LOG_AV, "AV flags 0x%lx not supported\n",
			 (unsigned long) attr->flags);
		return -FI_ENOSYS;
	}
	av = calloc(1, sizeof(*av));
	if (!av)
		return -FI_ENOMEM;
	av->domain = dom;
	/* FI_AV_MAP handles are our table indices too: both are opaque. */
	av->type = attr && attr->type == FI_AV_MAP ? FI_AV_MAP : FI_AV_TABLE;
	av->nrails = dom->nrails;
	core_attr.count = attr ? attr->count : 0;
	for (r = 0; r < dom->nrails; r++) {
		ret = fi_av_open(dom->rails[r].domain, &core_attr, &av->core[r],
				 NULL);
		if (ret) {
			MRL_WARN(FI_LOG_AV, "rail %d: fi_av_open: %s\n", r,
				 fi_strerror(-ret));
			mrl_av_free(av);
			return ret;
		}
	}
	av->av_fid.fid.fclass = FI_CLASS_AV;
	av->av_fid.fid.context = context;
	av->av_fid.fid.ops = &mrl_av_fi_ops;
	av->av_fid.ops = &mrl_av_ops;
	mrl_domain_hold(dom);
	*av_out = &av->av_fid;
	return 0;
}
