/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * A peer, as the AV (mrl_av.c) holds it: the parts of other owners
 * (mrl_fence.h, mrl_health.h, mrl_keys.h: each written only by its own
 * file, whose calls the others use) and the AV's own.  A part of mrl.h,
 * which includes it.
 */
#ifndef MRL_PEER_H
#define MRL_PEER_H

/* A peer's state on one rail: struct mrl_peer ends with one per AV rail. */
struct mrl_peer_rail {
	fi_addr_t core_addr;		/* in that rail's core AV */
	uint64_t fence_addr, fence_key;	/* a target of the last write there
					 * (mrl_fence.c flushes to it) */
	struct {
		uint32_t since_ms;	/* the streak's first refusal */
		uint32_t last_ms;	/* and its latest */
		uint32_t completions;	/* the rail's, then (low bits) */
	} refused;			/* mrl_health_refused */
};

/*
 * Each field is written by one file, named in brackets where it is not
 * the AV's; the others read it or call that file.  Fields are laid out by
 * size, not by owner, leaving no holes: a cluster's AV holds thousands of
 * peers.
 */
struct mrl_peer {
	/* what every op reads first, in one cache line [fence] */
	struct mrl_peer_fence fence;
	/* the fast path declines while either is set: one load tests both */
	union {
		struct {
			uint32_t rails_down;	/* out of service for this
						 * peer [health] */
			uint32_t partial;	/* 1: full address not learned
						 * yet */
		};
		uint64_t fast_off;
	};
	struct mrl_peer_health *health;	/* [health] */
	uint64_t answered_ns;		/* when a control message first came
					 * from the peer: it runs (0: none)
					 * [health] */
	struct mrl_ep *rails_up_ep;	/* [connect] */
	uint64_t heard;			/* learned: the AV's clock at its last
					 * message (the least recent goes) */
	fi_addr_t fi_addr;		/* user's handle, when visible */
	uint64_t id;			/* mrl_fnv1a of its rail-0 address, as
					 * message packets name their sender;
					 * 0 until asked (mrl_av_peer_id) */
	fi_addr_t ctrl_addr;		/* its control endpoint (rail 0's AV) */
	struct mrl_key_table *keys;	/* with the first key asked for
					 * [keys] */
	/* the entry the last small op used: programs write to one target
	 * key again and again (entries live as long as the peer), and the
	 * rails chosen for it from a buffer near hint_local.  A valid entry
	 * stays valid; a change of rails drops the hint
	 * (mrl_rma_forget_hint) [rma] */
	const struct mrl_key_entry *key_hint;
	uint32_t hint_local;
	uint32_t hint_rails;
	uint32_t refused_rails;		/* the core said -FI_EAGAIN to the
					 * last post there [health] */
	uint32_t rails_closed;		/* asked for (RAIL_ASK), no RAIL_UP
					 * came yet: not ours to connect
					 * [connect] */
	uint32_t hello_nonce;		/* our HELLO's: the HELLO_ACK that
					 * completes a partial peer echoes it
					 * [connect] */
	uint32_t rails_up;		/* rails rails_up_ep sent RAIL_UP on,
					 * or asked the peer to [connect] */
	uint32_t asked_ms;		/* the last RAIL_ASK (the clock, ms)
					 * [connect] */
	int ctrl_refs;			/* our control sends naming it, posted
					 * or in the backlog [control channel] */
	int nrails;			/* rails of the peer we can reach */
	int peer_nrails;		/* rails the peer has */
	uint8_t asks;			/* RAIL_ASKs since rails were closed
					 * [connect] */
	bool hello_sent;		/* [connect] */
	bool visible;			/* inserted by the user */
	bool learned;			/* from control messages alone, never
					 * inserted: may be evicted */
	bool addr_own;
	/* last, so that with the address after rail[] fi_av_lookup reads
	 * few lines of the peer */
	uint32_t addrlen;
	void *addr;			/* composite address: after rail[],
					 * or its own allocation (addr_own) */
	struct mrl_peer_rail rail[];	/* the AV's rails (mrl_av.c) */
};

#endif /* MRL_PEER_H */
