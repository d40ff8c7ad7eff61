/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Matching of user messages to user receives, as multirail does it for
 * every rail at once (docs/messages.md, "Matching"): a queue holds the
 * posted receives and the unexpected messages, each in the order they
 * came.  Messages are handed in in their peer's order (mrl_order.h), so
 * matching in arrival order keeps FI_ORDER_SAS across rails.
 * No libfabric object: test/match_test drives it alone.  The caller owns
 * every receive and message; a queue only links them.
 */
#ifndef MRL_MATCH_H
#define MRL_MATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mrl_list.h"

/* A receive's source when it takes any (FI_ADDR_UNSPEC's value) */
#define MRL_MATCH_ANY	UINT64_MAX

struct mrl_match_recv {
	struct mrl_list link;
	uint64_t src;		/* a peer's fi_addr, or MRL_MATCH_ANY */
	uint64_t tag, ignore;	/* tagged queues only */
	size_t size;		/* the buffer's bytes */
	size_t left;		/* what it still takes (FI_MULTI_RECV) */
	size_t min_left;	/* FI_MULTI_RECV: released below this */
	void *context;		/* the user's: fi_cancel finds it by it */
	bool multi;		/* FI_MULTI_RECV (untagged queues only) */
};

struct mrl_match_msg {
	struct mrl_list link;
	uint64_t src;		/* the sender's fi_addr, or FI_ADDR_NOTAVAIL */
	uint64_t tag;
	size_t len;		/* the message's bytes */
	void *claim;		/* FI_CLAIM's context, or NULL: free */
};

struct mrl_match_queue {
	struct mrl_list posted, unexpected;
	size_t unexpected_bytes;
	bool tagged;		/* false: tags and ignore bits play no part */
};

/* Where a matched message goes in its receive. */
struct mrl_match_take {
	struct mrl_match_recv *recv;
	size_t offset;		/* into the receive's buffer */
	size_t len;		/* bytes placed: the message's, or what fit */
	bool truncated;		/* the message was longer (FI_ETRUNC) */
	bool released;		/* the receive is off the queue now: its
				 * last completion (FI_MULTI_RECV too) */
};

void mrl_match_queue_init(struct mrl_match_queue *q, bool tagged);

/* True when r takes a message from src with tag. */
bool mrl_match_fits(const struct mrl_match_queue *q,
		    const struct mrl_match_recv *r, uint64_t src,
		    uint64_t tag);

/*
 * A message, next in its peer's order, arrived: true with *t filled when
 * a posted receive takes it; false when it joined the unexpected
 * messages (it is queued, the caller keeps its data).
 */
bool mrl_match_arrived(struct mrl_match_queue *q, struct mrl_match_msg *m,
		       struct mrl_match_take *t);

/*
 * A receive is being posted: the first unexpected message it takes,
 * unlinked, with *t filled; NULL when none.  A multi-receive may take
 * several: call again while !t->released.  Then mrl_match_post queues
 * what was not released.
 */
struct mrl_match_msg *mrl_match_take_unexpected(struct mrl_match_queue *q,
						struct mrl_match_recv *r,
						struct mrl_match_take *t);
void mrl_match_post(struct mrl_match_queue *q, struct mrl_match_recv *r);

/* FI_PEEK: the first unclaimed unexpected message r would take, left in
 * place; NULL when none. */
struct mrl_match_msg *mrl_match_peek(const struct mrl_match_queue *q,
				     const struct mrl_match_recv *r);
/* FI_CLAIM after a peek: no receive takes m but the claimer's (context
 * not NULL: NULL marks a free message). */
void mrl_match_claim(struct mrl_match_msg *m, void *context);
/* FI_CLAIM with a receive: the message claimed with context, unlinked and
 * with *t filled for r (r is not queued); NULL when none */
struct mrl_match_msg *mrl_match_take_claimed(struct mrl_match_queue *q,
					     struct mrl_match_recv *r,
					     void *context,
					     struct mrl_match_take *t);
/* FI_DISCARD, or an endpoint closing: m off the unexpected messages */
void mrl_match_unlink(struct mrl_match_queue *q, struct mrl_match_msg *m);

/* fi_cancel: the posted receive with context, unlinked; NULL when none */
struct mrl_match_recv *mrl_match_cancel(struct mrl_match_queue *q,
					void *context);

#endif /* MRL_MATCH_H */
