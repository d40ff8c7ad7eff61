/*
 * multirail provider extensions, reached with fi_open_ops() on an endpoint:
 *
 *	struct fi_multirail_ep_ops *ops;
 *	fi_open_ops(&ep->fid, FI_MULTIRAIL_EP_OPS, 0, (void **) &ops, NULL);
 *	for (i = 0; i < ops->rail_count(ep); i++)
 *		ops->rail_stats(ep, i, &stats);
 */
#ifndef FI_EXT_MULTIRAIL_H
#define FI_EXT_MULTIRAIL_H

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

struct fi_multirail_ep_ops {
	size_t size;
	int (*rail_count)(struct fid_ep *ep);
	int (*rail_stats)(struct fid_ep *ep, int rail,
			  struct fi_multirail_rail_stats *stats);
};

#ifdef __cplusplus
}
#endif

#endif /* FI_EXT_MULTIRAIL_H */
