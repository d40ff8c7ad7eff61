/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Unit tests of the sequence windows (prov/multirail/mrl_order.c): early
 * messages held and matched in order, duplicates and numbers past the
 * window refused, the wrap of 32-bit numbers, the sender's window and
 * its ACKs; and a long run of shuffled arrivals with resends, in which
 * every message must be matched exactly once and in the sender's order.
 */
#include <stdlib.h>

#include "check.h"
#include "mrl_order.h"

static int items[8];

static void test_in_and_out_of_order(void)
{
	struct mrl_order_rx rx;

	mrl_order_rx_init(&rx);
	check(mrl_order_arrive(&rx, 0, &items[0]) == MRL_ORDER_NEXT,
	      "0 first: matched now");
	check(!mrl_order_advance(&rx) && rx.next == 1, "nothing held after 0");
	check(mrl_order_arrive(&rx, 3, &items[3]) == MRL_ORDER_HELD &&
	      mrl_order_arrive(&rx, 2, &items[2]) == MRL_ORDER_HELD,
	      "3 and 2 early: held");
	check(mrl_order_arrive(&rx, 3, &items[7]) == MRL_ORDER_DUP,
	      "3 again while held: duplicate");
	check(mrl_order_arrive(&rx, 1, &items[1]) == MRL_ORDER_NEXT,
	      "1: matched now");
	check(mrl_order_advance(&rx) == &items[2] &&
	      mrl_order_advance(&rx) == &items[3] && !mrl_order_advance(&rx),
	      "then 2 and 3 in order, and nothing more");
	check(rx.next == 4 && !rx.held, "next 4, none held");
	check(mrl_order_arrive(&rx, 1, &items[1]) == MRL_ORDER_DUP &&
	      mrl_order_arrive(&rx, 0, &items[0]) == MRL_ORDER_DUP,
	      "numbers behind next: duplicates");
	check(mrl_order_arrive(&rx, 4 + MRL_ORDER_WINDOW, &items[0]) ==
	      MRL_ORDER_BEYOND, "next + window: beyond");
	check(mrl_order_arrive(&rx, 4 + MRL_ORDER_WINDOW - 1, &items[0]) ==
	      MRL_ORDER_HELD, "next + window - 1: held");
	mrl_order_rx_fini(&rx, NULL, NULL);
}

static void count_drop(void *msg, void *arg)
{
	(*(int *) arg)++;
}

static void test_fini_drops_held(void)
{
	struct mrl_order_rx rx;
	int dropped = 0;

	mrl_order_rx_init(&rx);
	mrl_order_arrive(&rx, 5, &items[5]);
	mrl_order_arrive(&rx, 6, &items[6]);
	mrl_order_rx_fini(&rx, count_drop, &dropped);
	check(dropped == 2 && !rx.slot, "fini hands back the 2 held");
}

static void test_wrap(void)
{
	struct mrl_order_rx rx;
	uint32_t base = UINT32_MAX - 2;

	mrl_order_rx_init(&rx);
	rx.next = rx.acked = base;
	check(mrl_order_arrive(&rx, base + 4, &items[4]) == MRL_ORDER_HELD &&
	      mrl_order_arrive(&rx, base + 2, &items[2]) == MRL_ORDER_HELD &&
	      mrl_order_arrive(&rx, base + 3, &items[3]) == MRL_ORDER_HELD &&
	      mrl_order_arrive(&rx, base + 1, &items[1]) == MRL_ORDER_HELD,
	      "held across the wrap of 2^32");
	check(mrl_order_arrive(&rx, base, &items[0]) == MRL_ORDER_NEXT &&
	      mrl_order_advance(&rx) == &items[1] &&
	      mrl_order_advance(&rx) == &items[2] &&
	      mrl_order_advance(&rx) == &items[3] &&
	      mrl_order_advance(&rx) == &items[4] && !mrl_order_advance(&rx),
	      "matched in order across the wrap");
	check(rx.next == 2 && mrl_order_arrive(&rx, base + 1, NULL) ==
	      MRL_ORDER_DUP, "next 2; a number before the wrap: duplicate");
	mrl_order_rx_fini(&rx, NULL, NULL);
}

static void test_sender_window(void)
{
	struct mrl_order_tx tx;
	uint32_t i;

	mrl_order_tx_init(&tx);
	for (i = 0; mrl_order_tx_open(&tx) && i < 1000; i++)
		mrl_order_tx_take(&tx);
	check(i == MRL_ORDER_WINDOW, "the window admits %u messages (%u)",
	      MRL_ORDER_WINDOW, i);
	check(mrl_order_tx_unacked(&tx, 0) &&
	      mrl_order_tx_unacked(&tx, MRL_ORDER_WINDOW - 1) &&
	      !mrl_order_tx_unacked(&tx, MRL_ORDER_WINDOW),
	      "every message sent is unacknowledged, none after");
	check(mrl_order_tx_ack(&tx, MRL_ORDER_WINDOW + 1, MRL_ORDER_WINDOW),
	      "an ACK past what was sent is refused");
	check(mrl_order_tx_ack(&tx, 10, MRL_ORDER_WINDOW + 1),
	      "an ACK granting more than the window is refused");
	check(!mrl_order_tx_ack(&tx, 100, MRL_ORDER_WINDOW) &&
	      !mrl_order_tx_unacked(&tx, 99) && mrl_order_tx_unacked(&tx, 100),
	      "an ACK of 100 frees 0..99");
	check(mrl_order_tx_ack(&tx, 50, MRL_ORDER_WINDOW),
	      "an ACK behind the last is refused (stale or replayed)");
	for (i = 0; mrl_order_tx_open(&tx) && i < 1000; i++)
		mrl_order_tx_take(&tx);
	check(i == 100, "100 more may go (%u)", i);
	check(!mrl_order_tx_ack(&tx, tx.next, 4) && mrl_order_tx_open(&tx),
	      "all acknowledged, window 4: open");
}

static void test_ack_due(void)
{
	struct mrl_order_rx rx;
	uint32_t i;

	mrl_order_rx_init(&rx);
	for (i = 0; i < MRL_ORDER_WINDOW / 2 - 1; i++) {
		mrl_order_arrive(&rx, i, NULL);
		mrl_order_advance(&rx);
	}
	check(!mrl_order_rx_ack_due(&rx), "no ACK due before half a window");
	mrl_order_arrive(&rx, i, NULL);
	mrl_order_advance(&rx);
	check(mrl_order_rx_ack_due(&rx), "an ACK due at half a window");
	mrl_order_rx_acked(&rx);
	check(!mrl_order_rx_ack_due(&rx), "none after it was sent");
	mrl_order_rx_fini(&rx, NULL, NULL);
}

/*
 * Each block of a window's numbers arrives shuffled, some twice, with
 * resends of earlier blocks mixed in: what a receiver sees when packets
 * of several rails overtake each other and a failed rail's messages are
 * sent again.  Matched must be 0, 1, 2, ... each once.
 */
#define RUN_MSGS	200000u

static void test_shuffled_run(void)
{
	static uint32_t slot_seq[RUN_MSGS];
	static uint32_t arrivals[3 * MRL_ORDER_WINDOW];
	struct mrl_order_rx rx;
	uint32_t base, expect = 0, wrong = 0, dups = 0, n, i;

	srand(777);
	mrl_order_rx_init(&rx);
	for (base = 0; base < RUN_MSGS; base += MRL_ORDER_WINDOW) {
		n = 0;
		for (i = 0; i < MRL_ORDER_WINDOW && base + i < RUN_MSGS; i++) {
			arrivals[n++] = base + i;
			if (rand() % 8 == 0)
				arrivals[n++] = base + i;	/* resent */
			if (base && rand() % 8 == 0)
				arrivals[n++] = (uint32_t) rand() % base;
		}
		for (i = n; i > 1; i--) {
			uint32_t j = (uint32_t) rand() % i, x = arrivals[i - 1];

			arrivals[i - 1] = arrivals[j];
			arrivals[j] = x;
		}
		for (i = 0; i < n; i++) {
			uint32_t seq = arrivals[i];
			void *msg = &slot_seq[seq];

			slot_seq[seq] = seq;
			switch (mrl_order_arrive(&rx, seq, msg)) {
			case MRL_ORDER_NEXT:
				for (; msg; msg = mrl_order_advance(&rx))
					wrong += *(uint32_t *) msg != expect++;
				break;
			case MRL_ORDER_DUP:
				dups++;
				break;
			case MRL_ORDER_HELD:
				break;
			default:
				wrong++;
			}
		}
	}
	check(!wrong && expect == RUN_MSGS && !rx.held,
	      "%u messages, %u duplicates dropped: matched %u in order, "
	      "%u wrong", RUN_MSGS, dups, expect, wrong);
	mrl_order_rx_fini(&rx, NULL, NULL);
}

int main(void)
{
	test_in_and_out_of_order();
	test_fini_drops_held();
	test_wrap();
	test_sender_window();
	test_ack_due();
	test_shuffled_run();
	return check_failures ? 1 : 0;
}
