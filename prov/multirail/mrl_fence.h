/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * A peer's part that mrl_fence.c owns: the writes a send to the peer must
 * wait for.  A part of mrl.h (after struct mrl_req_hdr), which includes
 * it; others ask mrl_fence.c's calls (mrl.h), never these fields.
 */
#ifndef MRL_FENCE_H
#define MRL_FENCE_H

/* A zero-byte delivery-complete write that flushes one rail (mrl_fence.c). */
struct mrl_fence {
	struct mrl_req_hdr hdr;		/* must stay first */
	struct mrl_peer *peer;
	int rail;
};

/*
 * Writes on rails other than rail 0 that may not have landed yet, per
 * peer, so that a message to that peer (on rail 0) can wait for them.
 * One endpoint owns this state; another endpoint's writes to the peer are
 * posted delivery-complete instead.
 */
struct mrl_peer_fence {
	struct mrl_ep *owner;
	uint32_t dirty;			/* rails written since their last fence */
	uint32_t inflight;		/* rails with a fence posted */
	/*
	 * A rail that went out of service for the peer with writes not yet
	 * flushed is suspect: the next send's fence there decides whether
	 * they landed.  One that cannot say so within the deadline (a fence
	 * failed, stuck or refused) has lost them: the next send to the peer
	 * fails instead of arriving before bytes that may never come.
	 */
	uint32_t suspect;
	uint32_t lost;
	uint32_t abandoned;		/* fences in flight no send waits for */
	/*
	 * Lost bytes are not always gone: tcp holds them in the dead rail's
	 * socket and delivers them if the link comes back, over writes that
	 * went after them on other rails.  A lost rail stays stale until
	 * its abandoned fence completes either way (the bytes landed, or
	 * the connection died with them) or a probe passes there (behind
	 * them on the same connection).  Writes to the peer from the loss
	 * until then taint the next send: it fails too.
	 */
	uint32_t stale;
	bool tainted;
	bool taint_warned;		/* once per loss */
	uint64_t suspect_since_ns;	/* a send first waited on a suspect */
	struct mrl_fence *req;		/* one per rail of the AV, with the
					 * peer's first fence */
};

#endif /* MRL_FENCE_H */
