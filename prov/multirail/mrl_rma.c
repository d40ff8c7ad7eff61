/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Striped RMA: each user operation becomes an engine op (mrl_stripe.c), and
 * each of its chunks a core RMA on one rail.
 *
 * Completion semantics.  A write completes when the core completed all its
 * chunks, with the core's own semantics.  A message the user sends next
 * goes on rail 0 and could overtake chunks still travelling on the other
 * rails: mrl_fence.c makes such a send wait until those rails are flushed.
 *
 * An fi_writedata is cut over the rails as a write is, but carries no CQ
 * data to the core: its chunks are posted FI_DELIVERY_COMPLETE on every
 * core (efa's RDM protocol may complete a plain write before placing it;
 * efa-direct ignores the flag, its completion being the NIC's), and once all of them
 * completed a WRITE_DATA control message raises the target's one CQ entry,
 * with the whole length and the user's data (mrl_ctrl.c).  The op
 * completes when that message was sent.  Like a send, a writedata first
 * waits for earlier writes on other rails to land (mrl_fence.c).
 */
#include <stdlib.h>
#include <string.h>

#include "mrl.h"

struct mrl_rma_args {
	enum mrl_op_kind kind;
	const struct iovec *iov;
	void **desc;
	size_t count;
	size_t len;			/* of iov */
	fi_addr_t addr;
	const struct fi_rma_iov *rma_iov;
	size_t rma_count;
	void *context;
	uint64_t data;
	uint64_t flags;
};

/* What a step of an op's set-up says besides 0 (go on) and -FI_E*. */
enum {
	MRL_RMA_DECLINED = 1,	/* the fast path leaves it to the general */
	MRL_RMA_REPORTED,	/* it failed, and its error entry is written */
};

/*
 * What one rail holds in flight: at most MRL_RAIL_DEPTH chunks and
 * MRL_RAIL_BYTES bytes, so that a rail's next chunk goes to whichever
 * drains first (2 MiB keeps a 100 Gbit/s NIC busy over a 100 us round
 * trip).  Ops under the stripe size fill the first rail with room up to
 * MRL_FILL_OPS ops and MRL_FILL_BYTES bytes before the next takes any
 * (fewer rails to poll, less CPU per op), each rail earning its byte level
 * by keeping up (mrl_stripe.c, fill_adapt): docs/perf.md has the runs
 * behind these.
 */
#define MRL_RAIL_DEPTH		64
#define MRL_RAIL_BYTES		(2 * 1024 * 1024)
#define MRL_FILL_OPS		16
#define MRL_FILL_BYTES		(64 * 1024)

/* RMA requests per endpoint: the core's tx size, and at least this. */
#define MRL_RMA_MIN_REQS	1024

static const struct mrl_engine_ops engine_ops = {
	.post_chunk = mrl_rma_post_chunk,
	.op_done = mrl_rma_done,
};

/* Per-op rail keys live beside the request, in the same pool slot. */
struct mrl_rma_slot {
	struct mrl_rma_req req;
	uint64_t key;			/* the user's key */
	int key_rails;			/* rails keyv[] covers */
	const uint64_t *keyv;		/* keys[], or the target's entry's
					 * (which lives as long as the peer):
					 * not copied per op */
	uint64_t keys[MRL_MAX_RAILS];
	uint32_t local_near;		/* rails nearest our buffer; 0: any */
};

static struct mrl_rma_slot *mrl_slot_of(struct mrl_op *op)
{
	return mrl_container_of(op, struct mrl_rma_slot, req.op);
}

int mrl_rma_init(struct mrl_ep *ep)
{
	struct mrl_engine_attr attr = {
		.nrails = ep->nrails,
		.max_chunks_per_rail = MRL_RAIL_DEPTH,
		.max_bytes_per_rail = MRL_RAIL_BYTES,
		.fill_chunks = MRL_FILL_OPS,
		.fill_bytes = MRL_FILL_BYTES,
		.fill_adapt = true,
	};
	struct mrl_rma_slot *slots;
	size_t i, n = ep->domain->rails[0].info->tx_attr->size;
	int ret;

	if (n < MRL_RMA_MIN_REQS)
		n = MRL_RMA_MIN_REQS;
	ret = mrl_engine_init(&ep->engine, &attr, &engine_ops, ep);
	if (ret)
		return ret;
	/* a chunk's context says so for good: the core uses only its
	 * fi_context2, and nothing else writes there */
	for (i = 0; i < ep->engine.pool_size; i++)
		mrl_chunk_hdr(&ep->engine.chunk_pool[i])->kind = MRL_REQ_CHUNK;
	slots = calloc(n, sizeof(*slots));
	if (!slots) {
		mrl_engine_fini(&ep->engine);
		return -FI_ENOMEM;
	}
	for (i = 0; i < n; i++) {
		mrl_op_clean(&slots[i].req.op);
		mrl_rma_req_stack_push(&ep->rma_free, &slots[i].req);
	}
	ep->rma_reqs = &slots[0].req;
	ep->rma_pool_size = n;
	ep->write_data_wait = NULL;
	ep->write_data_wait_tail = &ep->write_data_wait;
	mrl_rma_sched_init(ep);
	return 0;
}

/*
 * The endpoint's transmit flags, and with them the fast path's size: none
 * where every op asks for delivery completion or carries CQ data (the
 * fast path's core call is its entry point's alone), so that it tests the
 * size alone.
 */
void mrl_rma_tx_flags_set(struct mrl_ep *ep, uint64_t flags)
{
	ep->tx_op_flags = flags;
	ep->whole_max = (flags & (FI_DELIVERY_COMPLETE | FI_REMOTE_CQ_DATA)) ?
			0 : ep->whole_limit;
}

/* Host and device memory are cut by their own rules (mrl_sched_device). */
void mrl_rma_sched_init(struct mrl_ep *ep)
{
	const struct fi_info *core = ep->domain->rails[0].info;

	ep->sched = (struct mrl_sched_params) {
		.policy = ep->domain->policy,
		.stripe_min = mrl_params.stripe_min,
		.chunk_size = mrl_params.chunk_size,
		.max_chunk = ep->domain->core_max_msg,
	};
	/* the fast path's ops: under the stripe size, one chunk (len - 1 <
	 * whole_max); none where another policy decides */
	ep->whole_limit = 0;
	if (ep->sched.policy == MRL_POLICY_AUTO && ep->sched.stripe_min &&
	    !(ep->domain->mr_mode & FI_MR_RAW)) {
		ep->whole_limit = ep->sched.stripe_min - 1;
		if (ep->whole_limit > ep->sched.max_chunk)
			ep->whole_limit = ep->sched.max_chunk;
		if (ep->whole_limit > ep->info->ep_attr->max_msg_size)
			ep->whole_limit = ep->info->ep_attr->max_msg_size;
	}
	mrl_rma_tx_flags_set(ep, ep->tx_op_flags);
	mrl_sched_device(&ep->sched,
			 !strcmp(core->fabric_attr->prov_name, "shm"),
			 &ep->sched_device);
}

void mrl_rma_fini(struct mrl_ep *ep)
{
	mrl_engine_fini(&ep->engine);
	free(ep->rma_reqs);
	ep->rma_reqs = NULL;
	ep->rma_free = NULL;
}

/* What this chunk asks of the core: see mrl_sched_chunk. */
static unsigned int mrl_chunk_needs(struct mrl_ep *ep,
				    const struct mrl_chunk *chunk)
{
	const struct mrl_op *op = chunk->op;
	struct mrl_sched_chunk c = {
		.write = op->kind == MRL_OP_WRITE,
		.delivery_asked = !!(op->flags & FI_DELIVERY_COMPLETE),
		.writedata = mrl_slot_of((struct mrl_op *) op)->req.write_data ||
			     (op->flags & FI_REMOTE_CQ_DATA),
		.rail = chunk->rail,
	};

	if (c.write && c.rail)
		c.fence_elsewhere = mrl_fence_owned_elsewhere(ep, op->peer);
	return mrl_sched_chunk(&c);
}

/*
 * A whole op from one buffer, asking nothing of the core but a completion:
 * the core's plain call, which costs it less than the msg form.
 */
static inline __attribute__((always_inline))
ssize_t mrl_post_plain(struct mrl_ep *ep, const struct mrl_chunk *chunk,
		       uint64_t key)
{
	const struct mrl_op *op = chunk->op;
	const struct mrl_peer *peer = op->peer;
	const struct mrl_mr *mr = op->desc[0];
	struct fid_ep *core = ep->rails[chunk->rail].ep;
	void *desc = mr ? mr->core_desc[chunk->rail] : NULL;
	void *ctx = mrl_chunk_hdr((struct mrl_chunk *) chunk);
	fi_addr_t dest = peer->rail[chunk->rail].core_addr;

	if (op->kind == MRL_OP_READ)
		return fi_read(core, op->iov[0].iov_base, op->len, desc, dest,
			       op->raddr, key, ctx);
	return fi_write(core, op->iov[0].iov_base, op->len, desc, dest,
			op->raddr, key, ctx);
}

static ssize_t mrl_post_msg(struct mrl_ep *ep, const struct mrl_chunk *chunk,
			    uint64_t key, unsigned int needs)
{
	const struct mrl_op *op = chunk->op;
	const struct mrl_peer *peer = op->peer;
	struct iovec iov[MRL_IOV_LIMIT];
	void *desc[MRL_IOV_LIMIT], *const *user_desc = desc;
	struct fi_rma_iov rma = {
		.addr = op->raddr + chunk->offset,
		.len = chunk->len,
		.key = key,
	};
	struct fi_msg_rma msg = {
		.msg_iov = iov, .desc = desc, .rma_iov = &rma,
		.rma_iov_count = 1, .addr = peer->rail[chunk->rail].core_addr,
		.context = mrl_chunk_hdr((struct mrl_chunk *) chunk),
	};
	struct fid_ep *core = ep->rails[chunk->rail].ep;
	uint64_t flags = FI_COMPLETION;
	size_t i;

	/* the whole op: its own iovs (unless empty ones sit among them) */
	if (chunk->len == op->len && (!op->one_iov || op->iov_count == 1)) {
		msg.msg_iov = op->iov;
		msg.iov_count = op->iov_count;
		user_desc = op->desc;
	} else {
		msg.iov_count = mrl_iov_slice(op->iov, op->desc, op->iov_count,
					      chunk->offset, chunk->len, iov,
					      desc);
	}
	for (i = 0; i < msg.iov_count; i++)
		desc[i] = mrl_desc_rail(user_desc[i], chunk->rail);
	if (needs & MRL_SCHED_DELIVERY)
		flags |= FI_DELIVERY_COMPLETE;
	if (op->flags & FI_REMOTE_CQ_DATA) {	/* mrl_write_data_direct */
		flags |= FI_REMOTE_CQ_DATA;
		msg.data = op->data;
	}
	return op->kind == MRL_OP_WRITE ? fi_writemsg(core, &msg, flags) :
					  fi_readmsg(core, &msg, flags);
}

int mrl_rma_post_chunk(void *owner, struct mrl_chunk *chunk)
{
	struct mrl_ep *ep = owner;
	struct mrl_op *op = chunk->op;
	struct mrl_peer *peer = op->peer;
	uint64_t key = mrl_slot_of(op)->keyv[chunk->rail];
	unsigned int needs = mrl_chunk_needs(ep, chunk);
	ssize_t ret;

	if (chunk->len == op->len && op->iov_count == 1 &&
	    !(needs & MRL_SCHED_DELIVERY))
		ret = mrl_post_plain(ep, chunk, key);
	else
		ret = mrl_post_msg(ep, chunk, key, needs);

	if (!ret) {
		mrl_health_posted(peer, chunk->rail);
		if (needs & MRL_SCHED_FENCE)
			mrl_fence_write_posted(ep, peer, chunk->rail,
					       op->raddr + chunk->offset, key);
	} else if (ret == -FI_EAGAIN) {
		mrl_health_refused(ep, peer, chunk->rail);
	} else if (mrl_health_post_failed(ep, peer, chunk->rail, (int) ret)) {
		ret = -FI_EAGAIN;	/* the engine tries the rails left */
	} else {
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "rail %d: core %s failed: "
			      "%s\n", chunk->rail, op->kind == MRL_OP_WRITE ?
			      "write" : "read", fi_strerror((int) -ret));
	}
	return (int) ret;
}

/*
 * The rails' keys for (peer, key) in *keyv (keys, or the entry's own) and
 * how many rails can use them.
 */
static int mrl_resolve_keys(struct mrl_ep *ep, struct mrl_peer *peer,
			    uint64_t key, uint64_t *keys, const uint64_t **keyv,
			    uint32_t *remote_near)
{
	struct mrl_domain *dom = ep->domain;
	const struct mrl_key_entry *entry;
	const struct mrl_raw_map *map;
	int r, n;

	*keyv = keys;
	if (dom->mr_mode & FI_MR_RAW) {
		map = mrl_raw_lookup(dom, key);
		if (!map) {
			MRL_WARN(FI_LOG_EP_DATA, "key 0x%lx was not mapped with "
				 "fi_mr_map_raw\n", (unsigned long) key);
			return -FI_EINVAL;
		}
		n = map->nrails < peer->nrails ? map->nrails : peer->nrails;
		for (r = 0; r < n; r++)
			keys[r] = map->keys[r];
		return n;
	}
	/*
	 * A peer reached on one rail has nothing to tell: rail 0's key is in
	 * the user's key.  Not asking also spares the target its first send,
	 * which costs a core like rxm tens of ms of buffer setup mid-transfer.
	 */
	if (peer->nrails == 1 && !peer->partial)
		goto rail0;
	entry = mrl_keys_lookup(ep, peer, key);
	if (entry && entry->state == MRL_KEY_INVALID) {
		MRL_WARN(FI_LOG_EP_DATA, "key 0x%lx: the target has no such "
			 "registration\n", (unsigned long) key);
		return -FI_EINVAL;
	}
	if (entry && entry->state == MRL_KEY_VALID && !peer->partial) {
		*keyv = entry->keys;
		if (remote_near)
			*remote_near = entry->near_mask;
		return entry->nrails < peer->nrails ? entry->nrails :
						      peer->nrails;
	}
	/* Until the target told us its other keys: rail 0 alone. */
rail0:
	keys[0] = key & dom->key0_mask;
	return 1;
}

/*
 * Rail 0's address for dest and rail 0's key for key: what ops sent whole
 * on rail 0 (injects, atomics) use.  Like a send, such an op may tell of
 * writes that completed on other rails (a flag, CQ data), so it first
 * waits for them to land (mrl_fence.c): -FI_EAGAIN until then.
 * Domain locked.
 */
int mrl_rail0_target(struct mrl_ep *ep, fi_addr_t dest, uint64_t key,
		     fi_addr_t *addr, uint64_t *key0)
{
	mrl_assert_locked(ep->domain);
	uint64_t keys[MRL_MAX_RAILS];
	const uint64_t *keyv;
	struct mrl_peer *peer;
	int ret;

	if (!ep->enabled) {
		MRL_WARN(FI_LOG_EP_DATA, "endpoint not enabled\n");
		return -FI_EOPBADSTATE;
	}
	peer = mrl_av_peer(ep->av, dest);
	if (!peer) {
		MRL_WARN(FI_LOG_EP_DATA, "fi_addr %lu not in the AV\n",
			 (unsigned long) dest);
		return -FI_EINVAL;
	}
	ret = mrl_resolve_keys(ep, peer, key, keys, &keyv, NULL);
	if (ret < 0)
		return ret;
	ret = mrl_fence_progress(ep, peer);
	if (ret)
		return ret;
	mrl_fence_note_write(peer);	/* an inject or atomic writes too */
	*addr = peer->rail[0].core_addr;
	*key0 = keyv[0];
	return 0;
}

static size_t mrl_rma_iov_len(const struct fi_rma_iov *rma, size_t count)
{
	size_t i, len = 0;

	for (i = 0; i < count; i++)
		len += rma[i].len;
	return len;
}

static int mrl_check_rma(struct mrl_ep *ep, const struct mrl_rma_args *a)
{
	size_t len = a->len;
	size_t i;

	if (!ep->enabled) {
		MRL_WARN(FI_LOG_EP_DATA, "endpoint not enabled\n");
		return -FI_EOPBADSTATE;
	}
	if (a->count > ep->tx_iov_limit || (a->count && !a->iov)) {
		MRL_WARN(FI_LOG_EP_DATA, "%zu iovs, at most %zu\n", a->count,
			 ep->tx_iov_limit);
		return -FI_EINVAL;
	}
	if (!a->rma_count || a->rma_count > MRL_SG_IOV_MAX || !a->rma_iov) {
		MRL_WARN(FI_LOG_EP_DATA, "%zu remote iovs: 1 to %d\n",
			 a->rma_count, MRL_SG_IOV_MAX);
		return -FI_EINVAL;
	}
	if (mrl_rma_iov_len(a->rma_iov, a->rma_count) < len) {
		MRL_WARN(FI_LOG_EP_DATA, "remote iovs of %zu bytes for %zu\n",
			 mrl_rma_iov_len(a->rma_iov, a->rma_count), len);
		return -FI_EINVAL;
	}
	if (len > ep->info->ep_attr->max_msg_size) {
		MRL_WARN(FI_LOG_EP_DATA, "%zu bytes > max_msg_size\n", len);
		return -FI_EMSGSIZE;
	}
	if (ep->domain->core_mr_local) {
		for (i = 0; i < a->count; i++) {
			if (a->iov[i].iov_len && (!a->desc || !a->desc[i])) {
				MRL_WARN(FI_LOG_EP_DATA, "FI_MR_LOCAL: iov %zu "
					 "has no descriptor\n", i);
				return -FI_EINVAL;
			}
		}
	}
	return 0;
}

/* Rails an op to peer may stripe over once the peer's keys are known. */
static int mrl_stripe_rails(struct mrl_ep *ep, struct mrl_peer *peer, int known)
{
	if ((ep->domain->mr_mode & FI_MR_RAW) || peer->partial ||
	    known > peer->nrails)
		return known;	/* the raw key or the address decides */
	return peer->nrails;
}

static uint32_t mrl_local_near(const struct mrl_rma_args *a)
{
	const struct mrl_mr *mr = a->count && a->desc ? a->desc[0] : NULL;

	return mr ? mr->near_mask : 0;
}

/* Device memory is cut by its own rule (mrl_rma_sched_init). */
static const struct mrl_sched_params *mrl_op_sched(const struct mrl_ep *ep,
						   const struct mrl_rma_args *a)
{
	const struct mrl_mr *mr = a->count && a->desc ? a->desc[0] : NULL;

	return mr && mr->iface != FI_HMEM_SYSTEM ? &ep->sched_device :
	       &ep->sched;
}

/*
 * A peer with rails out of service (mrl_health.c): the op's rails that are
 * left, else any other rail to it we have a key for; 0 when none is.
 * The op also tells probes where the peer's memory is now.
 */
static uint32_t mrl_usable_rails(struct mrl_peer *peer, uint32_t rails,
				 const struct mrl_rma_slot *slot,
				 const struct mrl_rma_args *a)
{
	uint32_t keyed = mrl_rail_mask(slot->key_rails) & ~peer->rails_down;

	mrl_health_note_target(peer, slot->key_rails, slot->keyv,
			       a->rma_iov->addr, a->kind == MRL_OP_READ);
	rails &= ~peer->rails_down;
	return rails ? rails : keyed;
}

/* The engine's op, every field it reads set here (no memset: hot path). */
static void mrl_op_init(struct mrl_ep *ep, struct mrl_op *op,
			const struct mrl_rma_args *a, struct mrl_peer *peer,
			const struct mrl_sched_params *sched)
{
	size_t i;

	op->kind = a->kind;
	/* the CQ data goes in a message of ours, not in a chunk */
	op->flags = (a->flags | ep->tx_op_flags) & ~FI_REMOTE_CQ_DATA;
	mrl_slot_of(op)->req.write_data = a->kind == MRL_OP_WRITE &&
		((a->flags | ep->tx_op_flags) & FI_REMOTE_CQ_DATA);
	op->context = a->context;
	op->data = a->data;
	op->len = a->len;
	for (i = 0; i < a->count; i++) {
		op->iov[i] = a->iov[i];
		op->desc[i] = a->desc ? a->desc[i] : NULL;
	}
	op->iov_count = a->count;
	if (!a->count)
		op->desc[0] = NULL;
	op->raddr = a->rma_iov->addr;
	op->peer = peer;
	if (op->kind == MRL_OP_WRITE)
		mrl_fence_note_write(peer);
	op->one_iov = ep->domain->rma_one_iov;
	op->unmetered = sched->unmetered;
	op->parked = false;
	op->once = false;
	op->final_posted = false;
}

/*
 * The rails the op may use: near both buffers among those we have keys
 * for, less the rails out of service and those the peer is yet to open to
 * us; and the peer told of the rails it is about to receive on.
 */
static uint32_t mrl_op_rails(struct mrl_ep *ep, struct mrl_peer *peer,
			     struct mrl_rma_slot *slot,
			     const struct mrl_rma_args *a, uint32_t remote_near)
{
	uint32_t rails;

	rails = mrl_sched_near(
		slot->local_near, remote_near,
		mrl_rail_mask(mrl_stripe_rails(ep, peer, slot->key_rails)));
	if (ep->ctrl_ep || (rails & ~peer->rails_up & ~1u))
		mrl_connect_rails_up(ep, peer, rails);
	if (peer->rails_down)
		rails = mrl_usable_rails(peer, rails, slot, a);
	if (peer->rails_closed && rails)
		rails = mrl_connect_open_rails(ep, peer, rails);
	return rails;
}

/*
 * The peer is asked to open its rails before the op takes a request
 * (mrl_connect_rails_up), and where every rail near the op's buffers is still
 * to be opened the op waits (mrl_connect_await_rails).
 */
static bool mrl_wait_for_rails(struct mrl_ep *ep, struct mrl_peer *peer,
			       const struct mrl_rma_slot *slot,
			       uint32_t remote_near)
{
	uint32_t rails;

	rails = mrl_sched_near(
		slot->local_near, remote_near,
		mrl_rail_mask(mrl_stripe_rails(ep, peer, slot->key_rails)));
	if (ep->ctrl_ep || (rails & ~peer->rails_up & ~1u))
		mrl_connect_rails_up(ep, peer, rails);
	return peer->rails_closed &&
	       mrl_connect_await_rails(ep, peer, rails & ~peer->rails_down);
}

/*
 * A writedata tells, like a send, of the writes before it: those still
 * unflushed on other rails land first (-FI_EAGAIN until they did).  Where
 * they were lost with a failed rail it completes with -FI_EIO instead of
 * being raised without them, as a send does.  Returns 0 to go on;
 * MRL_RMA_REPORTED where it failed, its error reported; or a negative
 * error to return.  Domain locked.
 */
static ssize_t mrl_write_data_fence(struct mrl_ep *ep,
				    const struct mrl_rma_args *a,
				    struct mrl_peer *peer)
{
	ssize_t ret;

	mrl_assert_locked(ep->domain);

	mrl_fence_note_write(peer);	/* its own bytes too */
	ret = mrl_fence_progress(ep, peer);

	if (ret != -FI_EIO)
		return ret;
	mrl_cntr_inc_err(ep->cntr_write);
	if (ep->tx_cq) {
		ret = mrl_cq_write_err(ep->tx_cq, a->context,
				       FI_RMA | FI_WRITE, -FI_EIO, 0, a->data,
				       0);
		if (ret)
			return ret;
	}
	return MRL_RMA_REPORTED;
}

/*
 * The core key of the user's key on rail of peer (a flush behind a
 * writedata's WRITE_DATA, mrl_ctrl.c): 0, or -FI_ENOKEY where the target's
 * keys for that rail are not known.
 */
int mrl_rma_rail_key(struct mrl_ep *ep, struct mrl_peer *peer, uint64_t key,
		     int rail, uint64_t *rail_key)
{
	uint64_t keys[MRL_MAX_RAILS];
	const uint64_t *keyv;
	int n = mrl_resolve_keys(ep, peer, key, keys, &keyv, NULL);

	if (n <= rail)
		return -FI_ENOKEY;
	*rail_key = keyv[rail];
	return 0;
}

/* The user's key of a request (a writedata's, for the flush behind its
 * WRITE_DATA) */
uint64_t mrl_rma_req_key(struct mrl_rma_req *req)
{
	return mrl_slot_of(&req->op)->key;
}

/* A writedata of no bytes: its WRITE_DATA at once. */
static void mrl_write_data_now(struct mrl_ep *ep, struct mrl_rma_req *req)
{
	req->write_data = false;
	mrl_rma_send_write_data(ep, req);
	ep->rma_general++;
}

/* A writedata's WRITE_DATA went (or failed): its op completes, once, by
 * the one RMA completion (the control channel calls no inline of it). */
void mrl_rma_write_data_done(struct mrl_ep *ep, struct mrl_rma_req *req,
			     int err)
{
	mrl_rma_done(ep, &req->op, err);
}

void mrl_rma_send_write_data(struct mrl_ep *ep, struct mrl_rma_req *req)
{
	int ret = mrl_write_data_send(ep, req);

	if (ret == -FI_EAGAIN) {	/* every control buffer is taken */
		req->next_free = NULL;
		*ep->write_data_wait_tail = req;
		ep->write_data_wait_tail = &req->next_free;
	} else if (ret) {
		MRL_WARN_ONCE(FI_LOG_EP_DATA, "a writedata's CQ data cannot "
			      "be sent: %s\n", fi_strerror(-ret));
		mrl_rma_done(ep, &req->op, ret);
	}
}

/* Writedata waiting for a control buffer, in order, while there are some. */
void mrl_rma_write_data_waiting(struct mrl_ep *ep)
{
	struct mrl_rma_req *req;
	int ret;

	while ((req = ep->write_data_wait)) {
		ret = mrl_write_data_send(ep, req);
		if (ret == -FI_EAGAIN)
			return;
		ep->write_data_wait = req->next_free;
		if (!ep->write_data_wait)
			ep->write_data_wait_tail = &ep->write_data_wait;
		if (ret)
			mrl_rma_done(ep, &req->op, ret);
	}
}

/*
 * A writedata of one chunk (of one iov where the core's RMA takes one),
 * where the core's own writedata raises the target's entry with the
 * write's length once its bytes are there (mrl_domain.core_writedata):
 * that chunk carries the user's CQ data,
 * and no WRITE_DATA follows, so the entry comes a round trip sooner.
 * It is posted once, delivery-complete: a chunk that fails or is lost
 * with its rail may have raised the entry, so it is not sent again; the
 * op fails instead (as a WRITE_DATA that fails fails its op), and one
 * that completed cannot be lost.  A user that wants sources gets them on
 * rail 0 only (mrl_user_src), so the op stays there.  The rails the op
 * may use are returned.
 */
static uint32_t mrl_write_data_direct(struct mrl_ep *ep,
				      struct mrl_rma_req *req, size_t len,
				      uint32_t rails, size_t chunk)
{
	if (!ep->domain->core_writedata || !len || len > chunk ||
	    (req->op.one_iov && req->op.iov_count > 1) || req->parent ||
	    (ep->want_src && !(rails & 1u)))
		return rails;
	req->write_data = false;
	req->op.once = true;
	req->op.flags |= FI_REMOTE_CQ_DATA;
	return ep->want_src ? 1u : rails;
}

/* An op checked, to a peer found: into the engine. */
static ssize_t mrl_submit_to(struct mrl_ep *ep, const struct mrl_rma_args *a,
			     struct mrl_peer *peer)
{
	const struct mrl_sched_params *sched;
	struct mrl_rma_req *req;
	uint32_t rails, remote_near = 0;
	struct mrl_rma_slot *slot;
	size_t chunk;
	int nrails;

	if (a->kind == MRL_OP_WRITE &&
	    ((a->flags | ep->tx_op_flags) & FI_REMOTE_CQ_DATA)) {
		ssize_t ret = mrl_write_data_fence(ep, a, peer);

		if (ret)
			return ret == MRL_RMA_REPORTED ? 0 : ret;
	}
	req = ep->rma_free;
	if (!req) {
		mrl_ep_progress(ep);
		return -FI_EAGAIN;
	}
	slot = mrl_container_of(req, struct mrl_rma_slot, req);
	nrails = mrl_resolve_keys(ep, peer, a->rma_iov->key, slot->keys,
				  &slot->keyv, &remote_near);
	if (nrails < 0)
		return nrails;
	slot->local_near = mrl_local_near(a);
	slot->key = a->rma_iov->key;
	slot->key_rails = nrails;
	/* a scatter-gather piece (its request reserved) never waits */
	if (!req->parent && mrl_wait_for_rails(ep, peer, slot, remote_near)) {
		mrl_ep_progress(ep);
		return -FI_EAGAIN;
	}
	mrl_rma_req_stack_pop(&ep->rma_free);	/* req */

	sched = mrl_op_sched(ep, a);
	mrl_op_init(ep, &req->op, a, peer, sched);

	/*
	 * Chunk as if every common rail could be used.  Until the target's
	 * other keys arrive only the rails we have keys for carry chunks;
	 * mrl_rma_keys_learned then opens the rest to the chunks not yet
	 * posted, so an op started early does not stay on one rail.
	 */
	rails = mrl_op_rails(ep, peer, slot, a, remote_near);
	rails = mrl_sched_rails(sched, rails, a->len, ep->engine.busy,
				&ep->rr_next, &chunk) & mrl_rail_mask(nrails);
	if (!a->len && req->write_data) {
		mrl_write_data_now(ep, req);	/* no byte to land first */
		return 0;
	}
	if (!rails && !peer->rails_down)
		rails = 1u;	/* rail 0's key until the others are known */
	if (req->write_data)
		rails = mrl_write_data_direct(ep, req, a->len, rails, chunk);
	mrl_op_prepare(&ep->engine, &req->op, rails, chunk);
	/* with no rail left the engine fails the op (-FI_EHOSTUNREACH),
	 * unless it waits parked for keys asked on a rail in service */
	if (!rails)
		mrl_rma_park(ep, &req->op);
	mrl_engine_submit(&ep->engine, &req->op);
	ep->rma_general++;
	return 0;
}

/*
 * Scatter-gather.  An op of more local iovs than an engine op holds
 * (MRL_IOV_LIMIT), or of several remote iovs (each its own key and
 * address), is cut into pieces: each a range of one remote iov and at
 * most MRL_IOV_LIMIT local iovs, posted the general way and striped as
 * any op is.  A head request, which never enters the engine, holds the
 * user's context, length and CQ data: it completes once, when the last
 * piece has (a writedata's pieces are delivery-complete, and the head
 * then sends the one WRITE_DATA, with the whole length).  Every request
 * is reserved before the first piece goes, so the op is posted whole or
 * not at all.
 */
/* Where a walk over the local iovs stands. */
struct mrl_sg_cursor {
	size_t iov;
	size_t off;
};

/*
 * The next piece of remote range [.., left bytes) from the local iovs at
 * cur: its iovs in iov/desc (at most MRL_IOV_LIMIT), its length returned.
 */
static size_t mrl_sg_next_piece(const struct mrl_rma_args *a,
				struct mrl_sg_cursor *cur, size_t left,
				struct iovec *iov, void **desc, size_t *n)
{
	size_t len = 0, avail, take;

	*n = 0;
	while (*n < MRL_IOV_LIMIT && cur->iov < a->count && len < left) {
		avail = a->iov[cur->iov].iov_len - cur->off;
		if (!avail) {
			cur->iov++;
			cur->off = 0;
			continue;
		}
		take = avail < left - len ? avail : left - len;
		iov[*n].iov_base = (char *) a->iov[cur->iov].iov_base +
				   cur->off;
		iov[*n].iov_len = take;
		desc[*n] = a->desc ? a->desc[cur->iov] : NULL;
		(*n)++;
		len += take;
		cur->off += take;
	}
	return len;
}

/* Pieces of a (sg NULL: counted only), or posted to peer for sg. */
static size_t mrl_sg_walk(struct mrl_ep *ep, const struct mrl_rma_args *a,
			  struct mrl_peer *peer, struct mrl_rma_req *sg,
			  uint64_t piece_flags)
{
	struct mrl_sg_cursor cur = { 0, 0 };
	struct iovec iov[MRL_IOV_LIMIT];
	void *desc[MRL_IOV_LIMIT];
	struct fi_rma_iov rma;
	struct mrl_rma_args p;
	size_t r, n, len, off, pieces = 0, left = a->len;
	struct mrl_rma_req *req;

	for (r = 0; r < a->rma_count && left; r++) {
		for (off = 0; off < a->rma_iov[r].len && left; off += len) {
			len = mrl_sg_next_piece(a, &cur,
						a->rma_iov[r].len - off, iov,
						desc, &n);
			if (!len)
				break;
			left -= len;
			pieces++;
			if (!sg)
				continue;
			rma = (struct fi_rma_iov) { a->rma_iov[r].addr + off,
						    len, a->rma_iov[r].key };
			p = (struct mrl_rma_args) {
				.kind = a->kind, .iov = iov, .desc = desc,
				.count = n, .len = len, .addr = a->addr,
				.rma_iov = &rma, .rma_count = 1,
				.flags = piece_flags,
			};
			/* the piece may fail at once (no rail): it must
			 * know its parent first */
			req = ep->rma_free;
			req->parent = sg;
			sg->pieces_out++;
			if (mrl_submit_to(ep, &p, peer)) {
				req->parent = NULL;
				sg->pieces_out--;
				if (!sg->pieces_err)
					sg->pieces_err = -FI_EIO;
			}
		}
	}
	return pieces;
}

/* Are n requests free (the pieces and the head)? */
static bool mrl_reqs_free(const struct mrl_ep *ep, size_t n)
{
	const struct mrl_rma_req *req = ep->rma_free;

	for (; req && n; n--)
		req = req->next_free;
	return !n;
}

/* The head's pieces are all back: the op completes (or sends its WRITE_DATA) once. */
static void mrl_sg_finish(struct mrl_ep *ep, struct mrl_rma_req *head)
{
	int err = head->pieces_err;

	head->pieces_err = 0;
	head->pieces_all_posted = false;
	if (err)
		head->write_data = false;
	mrl_rma_done(ep, &head->op, err);
}

void mrl_rma_piece_done(struct mrl_ep *ep, struct mrl_rma_req *req, int err)
{
	struct mrl_rma_req *head = req->parent;

	req->parent = NULL;
	if (err && !head->pieces_err) {
		head->pieces_err = err;
		head->prov_errno = req->prov_errno;
	}
	req->prov_errno = 0;
	mrl_rma_req_stack_push(&ep->rma_free, req);
	if (!--head->pieces_out && head->pieces_all_posted)
		mrl_sg_finish(ep, head);
}

/*
 * Every remote iov's key is checked (and asked for) before any piece
 * goes: a bad one fails the whole op, not its tail.
 */
static int mrl_sg_check_keys(struct mrl_ep *ep, const struct mrl_rma_args *a,
			     struct mrl_peer *peer)
{
	uint64_t keys[MRL_MAX_RAILS];
	const uint64_t *keyv;
	size_t r;
	int ret;

	for (r = 0; r < a->rma_count; r++) {
		if (r && a->rma_iov[r].key == a->rma_iov[r - 1].key)
			continue;
		ret = mrl_resolve_keys(ep, peer, a->rma_iov[r].key, keys, &keyv,
				       NULL);
		if (ret < 0)
			return ret;
	}
	return 0;
}

static ssize_t mrl_sg_submit(struct mrl_ep *ep, const struct mrl_rma_args *a,
			     struct mrl_peer *peer)
{
	uint64_t flags = a->flags | ep->tx_op_flags;
	bool with_write_data = a->kind == MRL_OP_WRITE &&
			       (flags & FI_REMOTE_CQ_DATA);
	struct mrl_rma_req *head;
	size_t pieces = mrl_sg_walk(ep, a, peer, NULL, 0);
	ssize_t ret;

	ret = mrl_sg_check_keys(ep, a, peer);
	if (ret)
		return ret;
	if (with_write_data) {
		ret = mrl_write_data_fence(ep, a, peer);
		if (ret)
			return ret == MRL_RMA_REPORTED ? 0 : ret;
	}
	if (!mrl_reqs_free(ep, pieces + 1)) {
		mrl_ep_progress(ep);
		return -FI_EAGAIN;
	}
	head = mrl_rma_req_stack_pop(&ep->rma_free);
	head->op.kind = a->kind;
	head->op.flags = flags & ~FI_REMOTE_CQ_DATA;
	head->op.context = a->context;
	head->op.data = a->data;
	head->op.len = a->len;
	head->op.peer = peer;
	head->write_data = with_write_data;
	/* the target a flush behind its WRITE_DATA aims at (mrl_ctrl.c) */
	head->op.raddr = a->rma_iov[0].addr;
	mrl_slot_of(&head->op)->key = a->rma_iov[0].key;
	flags &= ~(FI_REMOTE_CQ_DATA | FI_INJECT);
	if (with_write_data)
		flags |= FI_DELIVERY_COMPLETE;
	mrl_sg_walk(ep, a, peer, head, flags);
	head->pieces_all_posted = true;
	if (!head->pieces_out)
		mrl_sg_finish(ep, head);	/* every piece done, or none posted */
	ep->rma_general++;
	return 0;
}

/* One engine op holds it: one remote iov, MRL_IOV_LIMIT local ones. */
static bool mrl_fits_one_op(const struct mrl_rma_args *a)
{
	return a->rma_count == 1 && a->count <= MRL_IOV_LIMIT;
}

/*
 * The general way: any op, checked here (a warning for bad input), cut
 * over the rails by the engine.  Domain locked.
 */
static ssize_t mrl_rma_general(struct mrl_ep *ep, const struct mrl_rma_args *a)
{
	struct mrl_peer *peer;
	ssize_t ret;

	mrl_assert_locked(ep->domain);
	ret = mrl_check_rma(ep, a);
	if (ret)
		return ret;
	peer = mrl_av_peer(ep->av, a->addr);
	if (!peer) {
		MRL_WARN(FI_LOG_EP_DATA, "fi_addr %lu not in the AV\n",
			 (unsigned long) a->addr);
		return -FI_EINVAL;
	}
	if (!mrl_fits_one_op(a) && a->len)
		return mrl_sg_submit(ep, a, peer);
	if (!mrl_fits_one_op(a)) {		/* no byte: nothing to cut */
		struct mrl_rma_args none = *a;

		none.count = 0;
		none.rma_count = 1;
		return mrl_submit_to(ep, &none, peer);
	}
	return mrl_submit_to(ep, a, peer);
}

/*
 * The fast path's keys for every rail to peer (rail 0's from the user's
 * key alone, into slot, or the target's, from the peer's key hint), with
 * slot's key_rails set (slot is the free list's first, not in use, so a
 * declined op loses nothing), and in *rails those nearest both buffers
 * (never none: mrl_sched_near gives every rail to the peer where locality
 * says nothing); NULL for a key other than the hint's.
 * *tell: the peer is yet to hear of rails (mrl_connect_rails_up; with a
 * control endpoint, of that alone).
 */
static inline __attribute__((always_inline))
const uint64_t *mrl_fast_keys(struct mrl_ep *ep, struct mrl_peer *peer,
			      uint64_t key, struct mrl_rma_slot *slot,
			      const struct mrl_mr *mr, uint32_t *rails,
			      bool *tell)
{
	const struct mrl_key_entry *entry;
	bool ctrl_ep_new = ep->ctrl_ep && !(peer->rails_up & 1u);

	slot->key_rails = peer->nrails;
	if (peer->nrails == 1) {
		slot->keys[0] = key & ep->domain->key0_mask;
		*rails = 1u;
		*tell = ctrl_ep_new;
		return slot->keys;
	}
	entry = peer->key_hint;
	if (!entry || entry->key != key ||
	    peer->hint_local != (mr ? mr->near_mask : 0))
		return NULL;
	*rails = peer->hint_rails;
	*tell = ep->ctrl_ep ? ctrl_ep_new :
		(*rails & ~peer->rails_up & ~1u) != 0;
	return entry->keys;
}

/*
 * The target's keys for every rail to peer are entry's: the next small ops
 * with its key, from a buffer near local, take the fast path.  Entries
 * live as long as the peer, and a valid one stays so.
 */
static void mrl_set_key_hint(struct mrl_peer *peer,
			     const struct mrl_key_entry *entry, uint32_t local)
{
	uint32_t rails, open;

	if (entry->state != MRL_KEY_VALID || entry->nrails < peer->nrails ||
	    peer->partial)
		return;
	peer->key_hint = entry;
	peer->hint_local = local;
	rails = mrl_sched_near(local, entry->near_mask,
			       mrl_rail_mask(peer->nrails));
	open = rails & ~peer->rails_closed;
	/* as mrl_connect_open_rails does */
	peer->hint_rails = open ? open : 1u;
}

/*
 * The peer's key hint missed (a program that writes to several of the
 * target's registrations in turn, or a key new to the fast path): the
 * key's entry becomes the hint once its keys are known for every rail.
 */
static void mrl_fast_rekey(struct mrl_ep *ep, struct mrl_peer *peer,
			   uint64_t key, const struct mrl_mr *mr)
{
	const struct mrl_key_entry *entry = mrl_keys_lookup(ep, peer, key);

	if (entry)
		mrl_set_key_hint(peer, entry, mr ? mr->near_mask : 0);
}

/*
 * The fast path's chunk was not posted (the core refused it, or a rule
 * the general way keeps applies): all it took goes back, and the op goes
 * the general way.  A refusal counts in the rail's streak
 * (mrl_health_refused; the general way's retry may add another).
 */
static ssize_t mrl_fast_undo(struct mrl_ep *ep, struct mrl_chunk *chunk,
			     ssize_t ret)
{
	struct mrl_op *op = chunk->op;

	if (ret == -FI_EAGAIN)
		mrl_health_refused(ep, op->peer, chunk->rail);
	mrl_engine_whole_untake(&ep->engine, chunk);
	mrl_rma_req_stack_push(&ep->rma_free,
			 mrl_container_of(op, struct mrl_rma_req, op));
	return MRL_RMA_DECLINED;
}

/*
 * The fast path: one buffer of host memory under the stripe size, asking
 * nothing but a completion (fi_write, fi_read, their one-iov forms), to a
 * peer whose keys we know and whose rails all work: posted whole on one
 * rail with the core's plain call.  Anything else, MRL_RMA_DECLINED:
 * mrl_rma_general takes it (a writedata always: its entry needs a
 * WRITE_DATA after every byte).  The op's state is the general way's, so
 * failover, fences and completion treat both alike.  Domain locked.
 */
static inline __attribute__((always_inline))
ssize_t mrl_rma_fast(struct mrl_ep *ep, const struct mrl_rma_args *a)
{
	struct mrl_rma_req *req = ep->rma_free;	/* none before fi_enable */
	const struct mrl_mr *mr;
	const uint64_t *keyv;
	struct mrl_chunk *chunk;
	struct mrl_peer *peer;
	struct mrl_op *op;
	uint32_t rails;
	uint64_t key;
	ssize_t ret;
	bool tell;

	mrl_assert_locked(ep->domain);
	/* fi_writemsg's arguments are checked by the general way */
	if (a->flags || a->count != 1 || a->rma_count != 1 || !a->iov ||
	    !a->rma_iov || !req || a->len - 1 >= ep->whole_max ||
	    a->rma_iov->len < a->len)
		return MRL_RMA_DECLINED;
	key = a->rma_iov->key;
	mr = a->desc ? a->desc[0] : NULL;
	if (mr ? mr->iface != FI_HMEM_SYSTEM : ep->domain->core_mr_local)
		return MRL_RMA_DECLINED;
	peer = mrl_av_peer(ep->av, a->addr);
	if (!peer || peer->fast_off || peer->rails_closed)
		return MRL_RMA_DECLINED;
	keyv = mrl_fast_keys(ep, peer, key, mrl_slot_of(&req->op), mr, &rails,
			     &tell);
	if (!keyv) {
		mrl_fast_rekey(ep, peer, key, mr);
		keyv = mrl_fast_keys(ep, peer, key, mrl_slot_of(&req->op), mr,
				     &rails, &tell);
		if (!keyv)
			return MRL_RMA_DECLINED;
	}
	op = &req->op;
	op->kind = a->kind;
	op->flags = ep->tx_op_flags;
	op->context = a->context;
	op->data = 0;
	op->len = a->len;
	op->iov[0] = a->iov[0];
	op->desc[0] = (void *) mr;
	op->raddr = a->rma_iov->addr;
	op->peer = peer;
	if (a->kind == MRL_OP_WRITE)
		mrl_fence_note_write(peer);
	/* for a post again elsewhere (every rail's key: never widened) */
	mrl_slot_of(op)->key = key;
	mrl_slot_of(op)->keyv = keyv;

	chunk = mrl_engine_whole_take(&ep->engine, op, rails);
	if (!chunk)
		return MRL_RMA_DECLINED;
	mrl_rma_req_stack_pop(&ep->rma_free);	/* req */
	if (__builtin_expect(tell, 0))
		mrl_connect_rails_up(ep, peer, rails);
	if (a->kind == MRL_OP_WRITE && chunk->rail) {
		if (mrl_fence_owned_elsewhere(ep, peer))
			return mrl_fast_undo(ep, chunk, 0); /* a flush of its own */
		/* ours: a send flushes the rail (marked though the core may
		 * refuse: a flush more, never one less) */
		mrl_fence_mark(ep, peer, chunk->rail, op->raddr,
			       keyv[chunk->rail]);
	}
	ret = mrl_post_plain(ep, chunk, keyv[chunk->rail]);
	if (ret)
		return mrl_fast_undo(ep, chunk, ret);
	return 0;
}

/*
 * Every RMA op but an inject comes here: under the domain's lock (which
 * also ends a quiet poll's lease, struct mrl_lease), the fast path, and
 * where it declines, the general way.
 */
static inline __attribute__((always_inline))
ssize_t mrl_rma_post(struct fid_ep *ep_fid, const struct mrl_rma_args *a)
{
	struct mrl_ep *ep = mrl_ep_of(ep_fid);
	ssize_t ret;

	mrl_ep_lock(ep);
	ret = mrl_rma_fast(ep, a);
	if (ret == MRL_RMA_DECLINED)
		ret = mrl_rma_general(ep, a);
	mrl_unlock(ep->domain);
	return ret;
}

/* The iovs' length; 0 for iovs mrl_check_rma refuses anyway. */
static size_t mrl_local_len(const struct iovec *iov, size_t count)
{
	return count <= MRL_SG_IOV_MAX && iov ? mrl_iov_len(iov, count) : 0;
}

static ssize_t mrl_rma_msg(struct fid_ep *ep, enum mrl_op_kind kind,
			   const struct fi_msg_rma *msg, uint64_t flags)
{
	struct mrl_rma_args a = {
		.kind = kind, .iov = msg->msg_iov, .desc = msg->desc,
		.count = msg->iov_count, .addr = msg->addr,
		.rma_iov = msg->rma_iov, .rma_count = msg->rma_iov_count,
		.context = msg->context, .data = msg->data, .flags = flags,
	};

	a.len = mrl_local_len(a.iov, a.count);
	return mrl_rma_post(ep, &a);
}

/* fi_writev and fi_readv: local iovs that fill one remote range. */
static ssize_t mrl_rma_iov(struct fid_ep *ep, enum mrl_op_kind kind,
			   const struct iovec *iov, void **desc, size_t count,
			   fi_addr_t peer, uint64_t addr, uint64_t key,
			   void *context)
{
	size_t len = mrl_local_len(iov, count);
	struct fi_rma_iov rma = { addr, len, key };
	struct mrl_rma_args a = {
		.kind = kind, .iov = iov, .desc = desc, .count = count,
		.len = len, .addr = peer, .rma_iov = &rma, .rma_count = 1,
		.context = context,
	};

	return mrl_rma_post(ep, &a);
}

/* fi_write, fi_writedata and fi_read: one buffer. */
static inline __attribute__((always_inline))
ssize_t mrl_rma_buf(struct fid_ep *ep, enum mrl_op_kind kind, void *buf,
		    size_t len, void *desc, fi_addr_t peer, uint64_t addr,
		    uint64_t key, void *context, uint64_t data, uint64_t flags)
{
	struct iovec iov = { buf, len };
	struct fi_rma_iov rma = { addr, len, key };
	struct mrl_rma_args a = {
		.kind = kind, .iov = &iov, .desc = &desc, .count = 1,
		.len = len, .addr = peer, .rma_iov = &rma, .rma_count = 1,
		.context = context, .data = data, .flags = flags,
	};

	return mrl_rma_post(ep, &a);
}

static ssize_t mrl_writemsg(struct fid_ep *ep, const struct fi_msg_rma *msg,
			    uint64_t flags)
{
	if (flags & FI_INJECT) {
		MRL_WARN(FI_LOG_EP_DATA, "FI_INJECT on fi_writemsg: use "
			 "fi_inject_write\n");
		return -FI_EINVAL;
	}
	return mrl_rma_msg(ep, MRL_OP_WRITE, msg, flags);
}

static ssize_t mrl_writev(struct fid_ep *ep, const struct iovec *iov,
			  void **desc, size_t count, fi_addr_t dest,
			  uint64_t addr, uint64_t key, void *context)
{
	return mrl_rma_iov(ep, MRL_OP_WRITE, iov, desc, count, dest, addr, key,
			   context);
}

static ssize_t mrl_write(struct fid_ep *ep, const void *buf, size_t len,
			 void *desc, fi_addr_t dest, uint64_t addr,
			 uint64_t key, void *context)
{
	return mrl_rma_buf(ep, MRL_OP_WRITE, (void *) buf, len, desc, dest,
			   addr, key, context, 0, 0);
}

static ssize_t mrl_writedata(struct fid_ep *ep, const void *buf, size_t len,
			     void *desc, uint64_t data, fi_addr_t dest,
			     uint64_t addr, uint64_t key, void *context)
{
	return mrl_rma_buf(ep, MRL_OP_WRITE, (void *) buf, len, desc, dest,
			   addr, key, context, data, FI_REMOTE_CQ_DATA);
}

static ssize_t mrl_readmsg(struct fid_ep *ep, const struct fi_msg_rma *msg,
			   uint64_t flags)
{
	return mrl_rma_msg(ep, MRL_OP_READ, msg, flags & ~FI_REMOTE_CQ_DATA);
}

static ssize_t mrl_readv(struct fid_ep *ep, const struct iovec *iov,
			 void **desc, size_t count, fi_addr_t src,
			 uint64_t addr, uint64_t key, void *context)
{
	return mrl_rma_iov(ep, MRL_OP_READ, iov, desc, count, src, addr, key,
			   context);
}

static ssize_t mrl_read(struct fid_ep *ep, void *buf, size_t len, void *desc,
			fi_addr_t src, uint64_t addr, uint64_t key,
			void *context)
{
	return mrl_rma_buf(ep, MRL_OP_READ, buf, len, desc, src, addr, key,
			   context, 0, 0);
}

/*
 * Injects are small: they go whole on rail 0 through the core's inject, so
 * the buffer is free on return and they stay ordered with our messages.
 * A core without RMA inject (efa-direct) says -FI_ENOSYS once; from then
 * on the bytes are copied to a registered buffer and written from there.
 * An inject with CQ data is the core's own where the core raises the
 * target's entry with the write's length (as a one-chunk writedata is,
 * mrl_write_data_direct); elsewhere a WRITE_DATA behind its bytes raises
 * it (mrl_write_data_inject).
 */
static ssize_t mrl_rma_inject_write(struct fid_ep *ep_fid, const void *buf,
				    size_t len, uint64_t data, bool with_data,
				    fi_addr_t dest, uint64_t addr, uint64_t key)
{
	struct mrl_ep *ep = mrl_ep_of(ep_fid);
	fi_addr_t caddr;
	uint64_t key0;
	ssize_t ret;

	if (!mrl_inject_fits(ep, len))
		return -FI_EINVAL;
	mrl_ep_lock(ep);
	/* its WRITE_DATA tells of its bytes, as a send would */
	if (with_data && mrl_av_peer(ep->av, dest))
		mrl_fence_note_write(mrl_av_peer(ep->av, dest));
	ret = mrl_rail0_target(ep, dest, key, &caddr, &key0);
	if (ret)
		goto out;
	if (with_data && len && ep->domain->core_writedata &&
	    !ep->no_rma_inject) {
		/* the core raises the entry, with the length, after the
		 * bytes (mrl_core_writedata): its own inject, as a write's */
		ret = fi_inject_writedata(ep->rails[0].ep, buf, len, data,
					  caddr, addr, key0);
		if (ret != -FI_ENOSYS) {
			mrl_inject_posted(ep, ep->cntr_write, ret);
			goto out;
		}
	}
	if (with_data) {
		ret = mrl_write_data_inject(ep, mrl_av_peer(ep->av, dest), buf,
					    len, data, caddr, addr, key0);
		if (ret == -FI_EAGAIN)
			mrl_ep_progress(ep);
		goto out;
	}
	if (!ep->no_rma_inject) {
		ret = fi_inject_write(ep->rails[0].ep, buf, len, caddr, addr,
				      key0);
		if (ret != -FI_ENOSYS || !ep->ctrl_enabled) {
			mrl_inject_posted(ep, ep->cntr_write, ret);
			goto out;
		}
		MRL_INFO(FI_LOG_EP_DATA, "the core has no RMA inject: injects "
			 "are copied to a registered buffer and written\n");
		ep->no_rma_inject = true;
	}
	ret = mrl_ctrl_bounce_write(ep, buf, len, caddr, addr, key0);
	if (ret == -FI_EAGAIN)
		mrl_ep_progress(ep);
out:
	mrl_unlock(ep->domain);
	return ret;
}

static ssize_t mrl_inject_write(struct fid_ep *ep, const void *buf, size_t len,
				fi_addr_t dest, uint64_t addr, uint64_t key)
{
	return mrl_rma_inject_write(ep, buf, len, 0, false, dest, addr, key);
}

static ssize_t mrl_inject_writedata(struct fid_ep *ep, const void *buf,
				    size_t len, uint64_t data, fi_addr_t dest,
				    uint64_t addr, uint64_t key)
{
	return mrl_rma_inject_write(ep, buf, len, data, true, dest, addr, key);
}

struct fi_ops_rma mrl_rma_ops = {
	.size = sizeof(struct fi_ops_rma),
	.read = mrl_read,
	.readv = mrl_readv,
	.readmsg = mrl_readmsg,
	.write = mrl_write,
	.writev = mrl_writev,
	.writemsg = mrl_writemsg,
	.inject = mrl_inject_write,
	.writedata = mrl_writedata,
	.injectdata = mrl_inject_writedata,
};

struct mrl_keys_learned {
	struct mrl_peer *peer;
	const struct mrl_key_entry *entry;
};

static int mrl_rails_of_entry(const struct mrl_peer *peer,
			      const struct mrl_key_entry *entry)
{
	return entry->nrails < peer->nrails ? entry->nrails : peer->nrails;
}

/*
 * op's keys are entry's from now on.  The rails they reach that are in
 * service, those nearest both buffers if any: never one out of service (a
 * chunk stuck there would wait for the core's verdict, the stall watch
 * passing it by).
 */
static uint32_t mrl_keyed_rails(struct mrl_op *op, const struct mrl_peer *peer,
				const struct mrl_key_entry *entry)
{
	struct mrl_rma_slot *slot = mrl_slot_of(op);
	int n = mrl_rails_of_entry(peer, entry);
	uint32_t in_service = mrl_rail_mask(n) & ~peer->rails_down;
	uint32_t open = in_service & ~peer->rails_closed;
	uint32_t near;

	if (open)	/* a rail the peer is yet to open waits for it */
		in_service = open;
	near = mrl_sched_near(slot->local_near, entry->near_mask,
			      mrl_rail_mask(n)) & in_service;

	slot->keyv = entry->keys;
	slot->key_rails = n;
	return near ? near : in_service;
}

static void mrl_widen_op(struct mrl_op *op, void *arg)
{
	const struct mrl_keys_learned *kl = arg;
	struct mrl_rma_slot *slot = mrl_slot_of(op);
	uint32_t rails;

	if (op->peer != kl->peer || slot->key != kl->entry->key ||
	    mrl_rails_of_entry(kl->peer, kl->entry) <= slot->key_rails)
		return;
	rails = mrl_keyed_rails(op, kl->peer, kl->entry);
	/* a striped op was cut for all rails; a single-rail op keeps its rail */
	if (op->chunk_size < op->len && rails)
		op->rail_mask = rails;
}

struct mrl_widen_arg {
	struct mrl_ep *ep;
	struct mrl_peer *peer;
};

static void mrl_widen_to_opened(struct mrl_op *op, void *arg)
{
	const struct mrl_widen_arg *ro = arg;
	struct mrl_rma_slot *slot = mrl_slot_of(op);
	const struct mrl_key_entry *entry;
	uint32_t rails;

	/* a striped op was cut for all rails; a single-rail op keeps its rail */
	if (op->peer != ro->peer || op->chunk_size >= op->len ||
	    slot->key_rails < 2)
		return;
	entry = mrl_keys_lookup(ro->ep, ro->peer, slot->key);
	if (!entry || entry->state != MRL_KEY_VALID)
		return;
	rails = mrl_keyed_rails(op, ro->peer, entry);
	if (rails)
		op->rail_mask = rails;
}

/*
 * The peer opened rails to us (mrl_ctrl.c, RAIL_UP): the chunks not yet
 * posted of striped ops to it may go there too, those nearest their
 * buffers first, as if the rails had been open when the op came.
 */
void mrl_rma_widen_pending(struct mrl_ep *ep, struct mrl_peer *peer)
{
	struct mrl_widen_arg ro = { ep, peer };

	mrl_engine_for_each_pending(&ep->engine, mrl_widen_to_opened, &ro);
}

/*
 * A parked op's wait is over: it goes on with rails, or with none the
 * engine fails it (no rail it could wait for is left).
 */
static void mrl_unpark(struct mrl_op *op, uint32_t rails)
{
	op->rail_mask = rails;
	op->parked = false;
}

static void mrl_unpark_op(struct mrl_op *op, void *arg)
{
	const struct mrl_keys_learned *kl = arg;

	if (op->parked && op->peer == kl->peer &&
	    mrl_slot_of(op)->key == kl->entry->key)
		mrl_unpark(op, mrl_keyed_rails(op, kl->peer, kl->entry));
}

/* The target's keys behind one of ours arrived: ops waiting may spread. */
void mrl_rma_keys_learned(struct mrl_ep *ep, struct mrl_peer *peer,
			  const struct mrl_key_entry *entry)
{
	struct mrl_keys_learned kl = { peer, entry };

	MRL_DBG(FI_LOG_EP_DATA, "key 0x%lx reaches %d rail(s)\n",
		(unsigned long) entry->key, entry->nrails);
	mrl_engine_for_each_pending(&ep->engine, mrl_widen_op, &kl);
	/* parked ops with chunks still in flight too: not on the list */
	if (ep->parked_ops)
		mrl_engine_for_each_op(&ep->engine, mrl_unpark_op, &kl);
}

/*
 * Rail 0 is out for op's peer (it went out under op, or op came after)
 * while op has no key for another rail (the key's question not answered
 * yet).  Where the answer can come on a rail in service
 * (mrl_keys_awaited), op waits for it parked instead of failing, and
 * the question goes there now.  One wait for both: the user's call takes
 * a new op as it does any other, and its completion says how it ended.
 * Domain locked.
 */
bool mrl_rma_park(struct mrl_ep *ep, struct mrl_op *op)
{
	mrl_assert_locked(ep->domain);
	struct mrl_rma_slot *slot = mrl_slot_of(op);
	struct mrl_peer *peer = op->peer;
	const struct mrl_key_entry *e;

	if (op->err || slot->key_rails > 1 || peer->nrails < 2 ||
	    (ep->domain->mr_mode & FI_MR_RAW))
		return false;
	e = mrl_keys_lookup(ep, peer, slot->key);
	if (!e || !mrl_keys_awaited(ep, peer, e))
		return false;
	op->parked = true;
	ep->parked_ops = true;
	return true;
}

struct mrl_park_review {
	struct mrl_ep *ep;
	bool any;
};

/*
 * A parked op: rail 0 back, or its keys in, gives it rails; past the
 * wait, it has none and the engine fails it.  The lookup asks again a
 * question still due (mrl_keys_lookup).
 */
static void mrl_review_parked(struct mrl_op *op, void *arg)
{
	struct mrl_park_review *pr = arg;
	struct mrl_peer *peer = op->peer;
	const struct mrl_key_entry *e;

	if (!op->parked)
		return;
	if (!(peer->rails_down & 1u)) {
		mrl_unpark(op, 1u);		/* rail 0's key is the user's */
		return;
	}
	e = mrl_keys_lookup(pr->ep, peer, mrl_slot_of(op)->key);
	if (e && e->state == MRL_KEY_VALID)
		mrl_unpark(op, mrl_keyed_rails(op, peer, e));
	else if (!e || !mrl_keys_awaited(pr->ep, peer, e))
		mrl_unpark(op, 0);
	pr->any |= op->parked;
}

/* The health tick, while ops are parked. */
void mrl_rma_parked_tick(struct mrl_ep *ep)
{
	struct mrl_park_review pr = { ep, false };

	mrl_engine_for_each_op(&ep->engine, mrl_review_parked, &pr);
	ep->parked_ops = pr.any;
}
