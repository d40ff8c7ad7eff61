/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * A multirail endpoint's rails after a test's ops (fi_multirail_rail_stats):
 * none may have failed or gone out of service, since failover would carry
 * the op over the others unseen by its bytes.  Dies otherwise (util.h).
 */
#ifndef MRL_TEST_RAILS_H
#define MRL_TEST_RAILS_H

#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_ext_multirail.h>

#include "util.h"

struct rails_sum {
	int n;			/* rails */
	uint64_t ctrl_sent;	/* control messages, every rail's */
	uint64_t min_tx_bytes;	/* RMA bytes of the rail that carried fewest */
};

static inline struct rails_sum rails_clean(struct fid_ep *ep)
{
	struct fi_multirail_ep_ops *ops;
	struct fi_multirail_rail_stats st;
	struct rails_sum sum = { .min_tx_bytes = UINT64_MAX };
	int r;

	CHK(fi_open_ops(&ep->fid, FI_MULTIRAIL_EP_OPS, 0, (void **) &ops,
			NULL));
	sum.n = ops->rail_count(ep);
	for (r = 0; r < sum.n; r++) {
		CHK(ops->rail_stats(ep, r, &st));
		if (st.errors || st.downs)
			die("rail %d: %lu errors, %lu times out of service", r,
			    (unsigned long) st.errors,
			    (unsigned long) st.downs);
		sum.ctrl_sent += st.ctrl_sent;
		if (st.tx_bytes < sum.min_tx_bytes)
			sum.min_tx_bytes = st.tx_bytes;
	}
	return sum;
}

#endif
