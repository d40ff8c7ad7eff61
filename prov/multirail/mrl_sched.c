/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The scheduling policy's rules that are not inline in mrl_sched.h: which
 * rails and chunks an op gets, and the rule for device memory.
 */
#include "mrl_sched.h"

/* The k-th rail (counting from 0) of mask. */
static int mrl_nth_rail(uint32_t mask, unsigned int k)
{
	int r;

	for (r = 0; r < 32; r++) {
		if ((mask & (1u << r)) && !k--)
			return r;
	}
	return 0;
}

/* An op sent whole: one chunk, unless the core caps it. */
static size_t mrl_whole(const struct mrl_sched_params *p, size_t len)
{
	if (len > p->max_chunk)
		return p->max_chunk;
	return len ? len : 1;
}

uint32_t mrl_sched_rails_any(const struct mrl_sched_params *p, uint32_t use,
			     size_t len, uint32_t busy, uint32_t *rr_next,
			     size_t *chunk)
{
	size_t per_rail;
	int nrails;

	if (!(use & (use - 1))) {		/* one rail */
		*chunk = mrl_whole(p, len);
		return use;
	}
	nrails = __builtin_popcount(use);
	if (p->policy == MRL_POLICY_ROUNDROBIN) {
		*chunk = mrl_whole(p, len);
		return 1u << mrl_nth_rail(use, (*rr_next)++ % nrails);
	}
	/*
	 * A small op goes whole to the rail with the fewest bytes in flight
	 * (the engine picks it): cutting it would add per-chunk cost, and a
	 * fixed rotation would hold every rail to the pace of the slowest.
	 * A mid-size op is cut over the idle rails alone: a busy rail has
	 * work, and a piece there is one more core call for nothing (where
	 * the CPU is the limit, eight calls for a 64 KiB op on eight rails).
	 * With one rail idle or none, it goes whole.  Ops of a chunk per rail
	 * or more are cut over every rail.
	 */
	if (p->policy == MRL_POLICY_AUTO && len < p->stripe_min) {
		*chunk = mrl_whole(p, len);
		return use;
	}
	if (p->policy == MRL_POLICY_AUTO && len < nrails * p->chunk_size) {
		uint32_t idle = use & ~busy;

		if (!(idle & (idle - 1))) {
			*chunk = mrl_whole(p, len);
			return use;
		}
		use = idle;
		nrails = __builtin_popcount(use);
	}
	/* Enough chunks that every rail gets some, none over chunk_size. */
	per_rail = (len + nrails - 1) / nrails;
	per_rail = (per_rail + MRL_CHUNK_ALIGN - 1) &
		   ~(size_t) (MRL_CHUNK_ALIGN - 1);
	*chunk = per_rail < p->chunk_size ? per_rail : p->chunk_size;
	if (*chunk > p->max_chunk)
		*chunk = p->max_chunk;
	return use;
}

void mrl_sched_device(const struct mrl_sched_params *host, bool copy_engine,
		      struct mrl_sched_params *device)
{
	*device = *host;
	if (!copy_engine)
		return;
	device->unmetered = true;
	device->stripe_min = SIZE_MAX;
	if (device->policy == MRL_POLICY_SPLIT)
		device->policy = MRL_POLICY_AUTO;
}
