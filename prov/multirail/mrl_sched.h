/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The scheduling policy: functions from an operation and the rails' state
 * to a choice, with no libfabric object and no state of their own (the one
 * thing they change is the round-robin turn their caller hands them), so
 * that every rule is unit-tested alone (test/sched_test.c).
 *   mrl_sched_near    which rails an op may use (locality of both buffers)
 *   mrl_sched_rails   whole op or striped, on which rails, in what chunks
 *   mrl_sched_device  the rules for device memory, from the host's
 *   mrl_sched_chunk   what a chunk must ask of the core: delivery-complete,
 *                     or a fence before the next send
 * The striping engine (mrl_stripe.c) then hands the chunks to the rails
 * with credit.
 */
#ifndef MRL_SCHED_H
#define MRL_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Chunks are cut at multiples of this, but for the op's last one. */
#define MRL_CHUNK_ALIGN		4096

enum mrl_policy {
	MRL_POLICY_AUTO,	/* small ops to the least busy rail, large split */
	MRL_POLICY_SPLIT,	/* every op over all its rails */
	MRL_POLICY_ROUNDROBIN,	/* whole ops rotate over rails */
};

struct mrl_sched_params {
	enum mrl_policy policy;
	size_t stripe_min;	/* AUTO: smaller ops go whole */
	size_t chunk_size;	/* largest chunk of a striped op */
	size_t max_chunk;	/* the core's max_msg_size */
	bool unmetered;		/* no byte budget per rail, only its depth */
};

/*
 * The rails nearest both our buffer and the target's, else nearest ours
 * (the local PCIe path is the one we control), else the target's; always
 * within reach (the rails that reach the peer), and all of those when
 * locality says nothing.  A mask of 0 means "no preference".
 */
static inline uint32_t mrl_sched_near(uint32_t local, uint32_t remote,
				      uint32_t reach)
{
	uint32_t use = local & remote & reach;

	if (!use)
		use = local & reach;
	if (!use)
		use = remote & reach;
	return use ? use : reach;
}

/*
 * For an op of len bytes that may use the rails in use (not 0), with busy
 * the rails that have a chunk in flight: the rails to give it and, in
 * *chunk, the size to cut it at (len itself when it goes whole, capped by
 * max_chunk).  *rr_next is ROUNDROBIN's turn, advanced when used.
 */
uint32_t mrl_sched_rails_any(const struct mrl_sched_params *p, uint32_t use,
			     size_t len, uint32_t busy, uint32_t *rr_next,
			     size_t *chunk);

static inline uint32_t mrl_sched_rails(const struct mrl_sched_params *p,
				       uint32_t use, size_t len, uint32_t busy,
				       uint32_t *rr_next, size_t *chunk)
{
	/* the small op of AUTO, every op's first question: inline */
	if (p->policy == MRL_POLICY_AUTO && len < p->stripe_min && len &&
	    len <= p->max_chunk) {
		*chunk = len;
		return use;
	}
	return mrl_sched_rails_any(p, use, len, busy, rr_next, chunk);
}

/*
 * The rule for device memory, from the host's.  Where the core moves it
 * with one GPU copy per operation (copy_engine: shm's CUDA IPC copy by the
 * peer), a chunk costs a copy's launch and every rail shares one copy
 * engine: such ops go whole to the least busy rail, and a rail takes as
 * many as its depth allows whatever their bytes (unmetered): the bytes in
 * flight that pace a NIC do not pace a copy engine, whose launches need a
 * deep queue to overlap.  Over a NIC (efa with GPUDirect) the host rule
 * holds.  Chunks are the host's size.
 */
void mrl_sched_device(const struct mrl_sched_params *host, bool copy_engine,
		      struct mrl_sched_params *device);

/* One chunk, as mrl_sched_chunk sees it. */
struct mrl_sched_chunk {
	bool write;		/* a write (reads need neither) */
	bool delivery_asked;	/* the user asked FI_DELIVERY_COMPLETE */
	bool writedata;		/* a writedata's: its target entry (our
				 * WRITE_DATA, or the core's own) tells of
				 * its bytes, so the chunk completes only
				 * once they landed */
	int rail;
	bool fence_elsewhere;	/* another endpoint tracks this peer's rails
				 * for fences, so ours cannot */
};

#define MRL_SCHED_DELIVERY	0x1	/* post with FI_DELIVERY_COMPLETE */
#define MRL_SCHED_FENCE		0x2	/* track: flush before the next send */

/*
 * Rail 0 carries messages, so only writes on other rails can be overtaken
 * by a later send.  A writedata's bytes must be at the target before its
 * entry is there, so they complete on delivery.
 */
static inline unsigned int mrl_sched_chunk(const struct mrl_sched_chunk *c)
{
	if (!c->write)
		return 0;
	if (c->delivery_asked || c->writedata)
		return MRL_SCHED_DELIVERY;
	if (!c->rail)
		return 0;
	return c->fence_elsewhere ? MRL_SCHED_DELIVERY : MRL_SCHED_FENCE;
}

#endif /* MRL_SCHED_H */
