/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Message order across rails (docs/messages.md, "Order" and "Flow
 * control"): each direction of a peer pair numbers its messages.  The
 * sender keeps at most a window of them unacknowledged; the receiver
 * matches them in that order, holding the ones that came early on a
 * faster rail, and admits each number once, so a message sent again
 * after a rail failed is never delivered twice.  Numbers are 32 bits,
 * compared modulo 2^32.
 * The receiver's window judges a message's first packet only: the later
 * segments of a medium message already matched are the message layer's.
 * No libfabric object: test/order_test drives it alone.
 */
#ifndef MRL_ORDER_H
#define MRL_ORDER_H

#include <stdbool.h>
#include <stdint.h>

/* the most messages a sender may have unacknowledged; a power of 2 */
#define MRL_ORDER_WINDOW	256
#define MRL_ORDER_MASK	(MRL_ORDER_WINDOW - 1)
_Static_assert((MRL_ORDER_WINDOW & MRL_ORDER_MASK) == 0,
	       "the window is a power of 2");

/* ---- the sender's side -------------------------------------------------- */

struct mrl_order_tx {
	uint32_t next;		/* the number of the next message */
	uint32_t acked;		/* every message before it was matched */
	uint32_t window;	/* the receiver's grant, <= MRL_ORDER_WINDOW */
};

void mrl_order_tx_init(struct mrl_order_tx *tx);

/* True when one more message may go (else the send returns -FI_EAGAIN). */
static inline bool mrl_order_tx_open(const struct mrl_order_tx *tx)
{
	return (uint32_t) (tx->next - tx->acked) < tx->window;
}

static inline uint32_t mrl_order_tx_take(struct mrl_order_tx *tx)
{
	return tx->next++;
}

/* An ACK: 0, or -1 when it names a number not sent or behind an earlier
 * ACK, or a window over MRL_ORDER_WINDOW (forged or stale: ignored). */
int mrl_order_tx_ack(struct mrl_order_tx *tx, uint32_t next,
		     uint32_t window);

/* True while message seq is unacknowledged (kept, to be sent again). */
static inline bool mrl_order_tx_unacked(const struct mrl_order_tx *tx,
					uint32_t seq)
{
	return (uint32_t) (seq - tx->acked) < (uint32_t) (tx->next - tx->acked);
}

/* ---- the receiver's side ------------------------------------------------ */

struct mrl_order_rx {
	uint32_t next;		/* the number it matches next */
	uint32_t acked;		/* next, as the last ACK sent told it */
	uint32_t held;		/* early messages in slot */
	void **slot;		/* MRL_ORDER_WINDOW, by number; allocated at
				 * the first early message */
};

enum mrl_order_verdict {
	MRL_ORDER_NEXT,		/* match it now, then mrl_order_advance */
	MRL_ORDER_HELD,		/* early: kept until the ones before came */
	MRL_ORDER_DUP,		/* matched or held already: drop it */
	MRL_ORDER_BEYOND,	/* past the window: a sender breaking flow
				 * control, or a forged number: drop it */
	MRL_ORDER_NOMEM,	/* early, and no memory to hold it */
};

void mrl_order_rx_init(struct mrl_order_rx *rx);
/* Frees the slots; drop is called on each message still held. */
void mrl_order_rx_fini(struct mrl_order_rx *rx, void (*drop)(void *, void *),
		       void *arg);

enum mrl_order_verdict mrl_order_arrive(struct mrl_order_rx *rx, uint32_t seq,
					void *msg);
/* The next message was matched: the one after it, if it was held (taken
 * out, to be matched now and advanced past in turn), else NULL. */
void *mrl_order_advance(struct mrl_order_rx *rx);

/* True when an ACK is due: half a window matched since the last one. */
static inline bool mrl_order_rx_ack_due(const struct mrl_order_rx *rx)
{
	return (uint32_t) (rx->next - rx->acked) >= MRL_ORDER_WINDOW / 2;
}

/* An ACK naming rx->next was sent. */
static inline void mrl_order_rx_acked(struct mrl_order_rx *rx)
{
	rx->acked = rx->next;
}

#endif /* MRL_ORDER_H */
