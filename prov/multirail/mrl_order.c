/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Sequence windows (mrl_order.h).  Within the receiver's window each slot
 * stands for exactly one number (seq % MRL_ORDER_WINDOW), so a full slot
 * means that very number is held: a second copy is a duplicate.
 */
#include <stdlib.h>

#include "mrl_order.h"

void mrl_order_tx_init(struct mrl_order_tx *tx)
{
	tx->next = tx->acked = 0;
	tx->window = MRL_ORDER_WINDOW;
}

int mrl_order_tx_ack(struct mrl_order_tx *tx, uint32_t next, uint32_t window)
{
	uint32_t sent = tx->next - tx->acked;

	if (window > MRL_ORDER_WINDOW || (uint32_t) (next - tx->acked) > sent)
		return -1;
	tx->acked = next;
	tx->window = window;
	return 0;
}

void mrl_order_rx_init(struct mrl_order_rx *rx)
{
	rx->next = rx->acked = rx->held = 0;
	rx->slot = NULL;
}

void mrl_order_rx_fini(struct mrl_order_rx *rx, void (*drop)(void *, void *),
		       void *arg)
{
	uint32_t i;

	for (i = 0; rx->slot && i < MRL_ORDER_WINDOW; i++)
		if (rx->slot[i] && drop)
			drop(rx->slot[i], arg);
	free(rx->slot);
	mrl_order_rx_init(rx);
}

enum mrl_order_verdict mrl_order_arrive(struct mrl_order_rx *rx, uint32_t seq,
					void *msg)
{
	uint32_t ahead = seq - rx->next;
	void **slot;

	if (!ahead)
		return MRL_ORDER_NEXT;
	/* within the last half of the number space behind next: matched
	 * already; beyond the window ahead: not a number a sender that keeps
	 * to flow control can send yet */
	if (ahead >= 1u << 31)
		return MRL_ORDER_DUP;
	if (ahead >= MRL_ORDER_WINDOW)
		return MRL_ORDER_BEYOND;
	if (!rx->slot) {
		rx->slot = calloc(MRL_ORDER_WINDOW, sizeof(*rx->slot));
		if (!rx->slot)
			return MRL_ORDER_NOMEM;
	}
	slot = &rx->slot[seq & MRL_ORDER_MASK];
	if (*slot)
		return MRL_ORDER_DUP;
	*slot = msg;
	rx->held++;
	return MRL_ORDER_HELD;
}

void *mrl_order_advance(struct mrl_order_rx *rx)
{
	void **slot, *msg;

	rx->next++;
	if (!rx->held)
		return NULL;
	slot = &rx->slot[rx->next & MRL_ORDER_MASK];
	msg = *slot;
	if (msg) {
		*slot = NULL;
		rx->held--;
	}
	return msg;
}
