/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * A peer's part that mrl_health.c owns: probes of its rails out of
 * service.  A part of mrl.h (after mrl_fence.h), which includes it.
 */
#ifndef MRL_HEALTH_H
#define MRL_HEALTH_H

/* Probing one rail of a peer while it is out of service (mrl_health.c). */
struct mrl_probe_rail {
	uint64_t at_ns;			/* when the next probe may go */
	uint64_t addr, key;		/* where: the peer's latest op */
	bool read, set;
	uint8_t shift;			/* back-off doublings */
	struct mrl_fence req;
};

/* A peer with a rail out of service (mrl_health.c); NULL while healthy. */
struct mrl_peer_health {
	struct mrl_ep *ep;		/* probes, and keeps the counts */
	uint32_t probing;		/* rails with a probe in flight */
	struct mrl_probe_rail rail[];	/* one per rail of the endpoint */
};

#endif /* MRL_HEALTH_H */
