/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * multirail provider extensions, reached with fi_open_ops() on an endpoint:
 *
 *	struct fi_multirail_ep_ops *ops;
 *	fi_open_ops(&ep->fid, FI_MULTIRAIL_EP_OPS, 0, (void **) &ops, NULL);
 *	for (i = 0; i < ops->rail_count(ep); i++)
 *		ops->rail_stats(ep, i, &stats);
 *	if (ops->size >= offsetof(struct fi_multirail_ep_ops, ep_stats) +
 *			sizeof(ops->ep_stats))
 *		ops->ep_stats(ep, &ep_stats, sizeof(ep_stats));
 */
#ifndef FI_EXT_MULTIRAIL_H
#define FI_EXT_MULTIRAIL_H

#include <stddef.h>
#include <stdint.h>
#include <rdma/fabric.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FI_MULTIRAIL_EP_OPS "multirail_ep_ops_v3"

/* fi_multirail_rail_stats.state */
enum {
	FI_MULTIRAIL_RAIL_UP,
	FI_MULTIRAIL_RAIL_DOWN,		/* out of service for some peer */
	FI_MULTIRAIL_RAIL_PROBING,	/* and a probe is in flight */
};

struct fi_multirail_rail_stats {
	char domain[64];	/* the core domain (NIC) of this rail */
	uint64_t tx_ops;	/* RMA chunks posted on this rail */
	uint64_t tx_bytes;	/* RMA bytes posted on this rail */
	uint64_t bytes_completed;
	uint64_t errors;
	uint64_t ctrl_sent;	/* control messages sent on this rail */
	uint64_t ctrl_received;
	/* v3: health */
	int state;		/* FI_MULTIRAIL_RAIL_* */
	int peers_down;		/* peers it is out of service for */
	uint64_t downs;		/* times taken out of service */
	uint64_t rejoins;	/* times a probe brought it back */
	uint64_t probes;	/* probes posted */
	uint64_t reissued;	/* chunks that failed or stuck here and
				 * went to other rails */
};

/*
 * The endpoint's own counts.  Fields are only ever added at the end:
 * ep_stats fills the first size bytes (at most the provider's structure).
 */
struct fi_multirail_ep_stats {
	/* RMA ops that took the general way: those split over rails, and
	 * those the small op's fast path declined (a key whose keys on the
	 * other rails are not known yet, device memory, delivery complete,
	 * a core's refusal, no room); the rest took the fast path */
	uint64_t rma_general;
	/* sends (messages, injects, ops on rail 0) that failed with
	 * -FI_EIO because writes before them completed on a rail that then
	 * failed before they were seen to land; each such loss also counts
	 * in that rail's errors */
	uint64_t lost_sends;
	/* connections to a peer reset from under a socket core: they held
	 * chunks or a flush a deadline after their rail went out for the
	 * peer (docs/reliability.md); counts both ends' resets */
	uint64_t conn_resets;
};

/*
 * One rail's share of the striped message path (FI_MULTIRAIL_MESSAGES=
 * striped).  Fields are only ever added at the end: msg_stats fills the
 * first size bytes.
 */
struct fi_multirail_msg_stats {
	uint64_t packets_sent;		/* message packets and ACKs */
	uint64_t bytes_sent;		/* their bytes, headers included */
	uint64_t packets_received;
	uint64_t dropped;		/* received, failed the checks (the
					 * endpoint's, on every rail) */
	uint64_t duplicates;		/* messages that came twice (the
					 * endpoint's) */
};

struct fi_multirail_ep_ops {
	size_t size;
	int (*rail_count)(struct fid_ep *ep);
	int (*rail_stats)(struct fid_ep *ep, int rail,
			  struct fi_multirail_rail_stats *stats);
	/* since 2026-11: size says whether it is there (see above) */
	int (*ep_stats)(struct fid_ep *ep, struct fi_multirail_ep_stats *stats,
			size_t size);
	/* since 2026-12: size says whether it is there */
	int (*msg_stats)(struct fid_ep *ep, int rail,
			 struct fi_multirail_msg_stats *stats, size_t size);
};

#ifdef __cplusplus
}
#endif

#endif /* FI_EXT_MULTIRAIL_H */
