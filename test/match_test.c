/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Unit tests of the matching queues (prov/multirail/mrl_match.c): which
 * message lands in which receive, at which offset, truncated or not,
 * when a receive is released; peek, claim, discard, cancel, multi-
 * receive; and a random run judged against a model written apart from
 * the code (arrays scanned in order).
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mrl_match.h"

static struct mrl_match_recv recv_of(uint64_t src, uint64_t tag,
				     uint64_t ignore, size_t size, void *ctx)
{
	struct mrl_match_recv r = {
		.src = src, .tag = tag, .ignore = ignore, .size = size,
		.left = size, .context = ctx,
	};

	return r;
}

static struct mrl_match_msg msg_of(uint64_t src, uint64_t tag, size_t len)
{
	struct mrl_match_msg m = { .src = src, .tag = tag, .len = len };

	return m;
}

static void test_tags_and_sources(void)
{
	struct mrl_match_queue q;
	struct mrl_match_recv r1 = recv_of(MRL_MATCH_ANY, 1, 0, 64, NULL),
			      r2 = recv_of(MRL_MATCH_ANY, 2, 0, 64, NULL),
			      r3 = recv_of(5, 0x10, 0x0f, 64, NULL),
			      r4 = recv_of(MRL_MATCH_ANY, 0x10, 0x0f, 64, NULL);
	struct mrl_match_msg a = msg_of(9, 2, 8), b = msg_of(9, 1, 8),
			     c = msg_of(6, 0x13, 8), d = msg_of(5, 0x13, 8),
			     e = msg_of(5, 0x23, 8);
	struct mrl_match_take t;

	mrl_match_queue_init(&q, true);
	mrl_match_post(&q, &r1);
	mrl_match_post(&q, &r2);
	mrl_match_post(&q, &r3);
	mrl_match_post(&q, &r4);
	check(mrl_match_arrived(&q, &a, &t) && t.recv == &r2,
	      "tag 2 takes the receive for tag 2, not the first posted");
	check(t.released && t.offset == 0 && t.len == 8 && !t.truncated,
	      "a plain receive is released with the whole message at 0");
	check(mrl_match_arrived(&q, &b, &t) && t.recv == &r1,
	      "tag 1 takes the receive for tag 1");
	check(mrl_match_arrived(&q, &c, &t) && t.recv == &r4,
	      "a directed receive for source 5 passes over source 6");
	check(mrl_match_arrived(&q, &d, &t) && t.recv == &r3,
	      "source 5 takes the directed receive; ignore bits 0x0f apply");
	check(!mrl_match_arrived(&q, &e, &t) &&
	      q.unexpected_bytes == 8,
	      "tag 0x23 differs outside the ignore bits: unexpected");
}

static void test_unexpected_order(void)
{
	struct mrl_match_queue q;
	struct mrl_match_msg m[3] = { msg_of(1, 7, 10), msg_of(2, 7, 20),
				      msg_of(1, 8, 30) };
	struct mrl_match_recv r1 = recv_of(MRL_MATCH_ANY, 7, 0, 64, NULL),
			      r2 = recv_of(MRL_MATCH_ANY, 7, 0, 64, NULL),
			      r3 = recv_of(2, 8, 0, 64, NULL);
	struct mrl_match_take t;
	int i;

	mrl_match_queue_init(&q, true);
	for (i = 0; i < 3; i++)
		check(!mrl_match_arrived(&q, &m[i], &t),
		      "message %d is unexpected", i);
	check(q.unexpected_bytes == 60, "60 unexpected bytes held (%zu)",
	      q.unexpected_bytes);
	check(mrl_match_take_unexpected(&q, &r1, &t) == &m[0] &&
	      t.recv == &r1 && t.len == 10,
	      "a receive takes the first message that came");
	check(mrl_match_take_unexpected(&q, &r2, &t) == &m[1],
	      "the next receive the second");
	check(!mrl_match_take_unexpected(&q, &r3, &t),
	      "a receive directed at source 2 does not take source 1's");
	check(q.unexpected_bytes == 30, "30 bytes left unexpected (%zu)",
	      q.unexpected_bytes);
}

static void test_untagged_ignores_tags(void)
{
	struct mrl_match_queue q;
	struct mrl_match_recv r = recv_of(MRL_MATCH_ANY, 1, 0, 64, NULL);
	struct mrl_match_msg m = msg_of(3, 99, 4);
	struct mrl_match_take t;

	mrl_match_queue_init(&q, false);
	mrl_match_post(&q, &r);
	check(mrl_match_arrived(&q, &m, &t) && t.recv == &r,
	      "an untagged queue matches whatever the tag");
}

static void test_truncation(void)
{
	struct mrl_match_queue q;
	struct mrl_match_recv r = recv_of(MRL_MATCH_ANY, 0, 0, 10, NULL);
	struct mrl_match_msg m = msg_of(3, 0, 25);
	struct mrl_match_take t;

	mrl_match_queue_init(&q, false);
	mrl_match_post(&q, &r);
	check(mrl_match_arrived(&q, &m, &t) && t.truncated && t.len == 10 &&
	      t.released, "25 bytes into 10: 10 placed, truncated, released");
}

static void test_multi_recv(void)
{
	struct mrl_match_queue q;
	struct mrl_match_recv r = recv_of(MRL_MATCH_ANY, 0, 0, 100, NULL),
			      r2 = recv_of(MRL_MATCH_ANY, 0, 0, 100, NULL);
	struct mrl_match_msg m[4] = { msg_of(1, 0, 40), msg_of(1, 0, 40),
				      msg_of(1, 0, 5), msg_of(1, 0, 50) };
	struct mrl_match_take t;
	int n;

	r.multi = true;
	r.min_left = 30;
	mrl_match_queue_init(&q, false);
	mrl_match_post(&q, &r);
	check(mrl_match_arrived(&q, &m[0], &t) && t.offset == 0 &&
	      t.len == 40 && !t.released,
	      "multi-receive: first message at 0, buffer kept");
	check(mrl_match_arrived(&q, &m[1], &t) && t.recv == &r &&
	      t.offset == 40 && t.released,
	      "second at 40; 20 left < 30: released");
	check(!mrl_match_arrived(&q, &m[2], &t),
	      "after release a message is unexpected");
	check(!mrl_match_arrived(&q, &m[3], &t), "and so is the next");
	/* posting a multi-receive takes what waits, in order */
	r2.multi = true;
	r2.min_left = 30;
	for (n = 0; mrl_match_take_unexpected(&q, &r2, &t); n++) {
		check(t.offset == (n ? 5u : 0u),
		      "unexpected %d placed at %zu", n, t.offset);
		if (t.released)
			break;
	}
	check(n == 2 && !t.released && r2.left == 45,
	      "5 then 50 bytes: 45 left, kept (n %d, left %zu)", n, r2.left);
	check(mrl_list_empty(&q.unexpected) && !q.unexpected_bytes,
	      "nothing unexpected left");
	mrl_match_post(&q, &r2);
	check(mrl_match_arrived(&q, &m[0], &t) && t.recv == &r2 &&
	      t.offset == 55 && t.released && r2.left == 5,
	      "the kept buffer takes the next at 55, then is released");
}

static void test_peek_claim_discard(void)
{
	struct mrl_match_queue q;
	struct mrl_match_msg m1 = msg_of(1, 5, 8), m2 = msg_of(1, 5, 16);
	struct mrl_match_recv probe = recv_of(MRL_MATCH_ANY, 5, 0, 0, NULL),
			      r = recv_of(MRL_MATCH_ANY, 5, 0, 64, NULL),
			      rc = recv_of(MRL_MATCH_ANY, 5, 0, 64, NULL);
	struct mrl_match_take t;
	int ctx, other;

	mrl_match_queue_init(&q, true);
	mrl_match_arrived(&q, &m1, &t);
	mrl_match_arrived(&q, &m2, &t);
	check(mrl_match_peek(&q, &probe) == &m1 && q.unexpected_bytes == 24,
	      "peek finds the first and leaves it");
	mrl_match_claim(&m1, &ctx);
	check(mrl_match_peek(&q, &probe) == &m2, "a claimed message is not "
	      "peeked again");
	check(mrl_match_take_unexpected(&q, &r, &t) == &m2,
	      "a plain receive passes over the claimed message");
	check(!mrl_match_take_claimed(&q, &rc, &other, &t),
	      "another context's claim takes nothing");
	check(!mrl_match_take_claimed(&q, &rc, NULL, &t),
	      "a NULL context takes nothing");
	check(mrl_match_take_claimed(&q, &rc, &ctx, &t) == &m1 &&
	      t.recv == &rc && t.len == 8, "the claimer takes its message");
	mrl_match_arrived(&q, &m1, &t);
	check(!m1.claim, "a message queued again is free");
	mrl_match_unlink(&q, mrl_match_peek(&q, &probe));
	check(mrl_list_empty(&q.unexpected) && !q.unexpected_bytes,
	      "discard leaves the queue empty");
}

static void test_cancel(void)
{
	struct mrl_match_queue q;
	int c1, c2;
	struct mrl_match_recv r1 = recv_of(MRL_MATCH_ANY, 0, 0, 8, &c1),
			      r2 = recv_of(MRL_MATCH_ANY, 0, 0, 8, &c2);
	struct mrl_match_msg m = msg_of(1, 0, 8);
	struct mrl_match_take t;

	mrl_match_queue_init(&q, false);
	mrl_match_post(&q, &r1);
	mrl_match_post(&q, &r2);
	check(mrl_match_cancel(&q, &c1) == &r1, "cancel finds its receive");
	check(!mrl_match_cancel(&q, &c1), "a second cancel finds nothing");
	check(mrl_match_arrived(&q, &m, &t) && t.recv == &r2,
	      "the message goes to the receive left");
}

/* ---- a random run against a model ---------------------------------------- */

#define RUN_OPS		20000
#define RUN_MAX		RUN_OPS

struct model_item {
	uint64_t src, tag, ignore;
	int id;
	bool live;
};

static bool model_fits(const struct model_item *r, uint64_t src, uint64_t tag)
{
	return (r->src == MRL_MATCH_ANY || r->src == src) &&
	       (tag & ~r->ignore) == (r->tag & ~r->ignore);
}

static void test_random_against_model(void)
{
	static struct mrl_match_recv recvs[RUN_MAX];
	static struct mrl_match_msg msgs[RUN_MAX];
	static struct model_item mposted[RUN_MAX], munexp[RUN_MAX];
	int nposted = 0, nunexp = 0, nr = 0, nm = 0, i, j, wrong = 0;
	int matched = 0;
	struct mrl_match_queue q;
	struct mrl_match_take t;

	srand(12345);
	mrl_match_queue_init(&q, true);
	for (i = 0; i < RUN_OPS; i++) {
		uint64_t src = (uint64_t) (rand() % 4), tag = (uint64_t) (rand() % 8);
		int want = -1;

		if (rand() % 2) {	/* a receive */
			uint64_t ignore = rand() % 4 ? 0 : 3;
			struct mrl_match_recv *r = &recvs[nr];
			struct mrl_match_msg *got;

			if (rand() % 3 == 0)
				src = MRL_MATCH_ANY;
			*r = recv_of(src, tag, ignore, 8, NULL);
			for (j = 0; j < nunexp; j++)
				if (munexp[j].live &&
				    model_fits(&(struct model_item){ .src = src,
					.tag = tag, .ignore = ignore },
					munexp[j].src, munexp[j].tag)) {
					want = munexp[j].id;
					munexp[j].live = false;
					break;
				}
			got = mrl_match_take_unexpected(&q, r, &t);
			if ((got ? (int) (got - msgs) : -1) != want)
				wrong++;
			if (!got) {
				mrl_match_post(&q, r);
				mposted[nposted++] = (struct model_item){
					src, tag, ignore, nr, true };
			} else {
				matched++;
			}
			nr++;
		} else {		/* a message */
			struct mrl_match_msg *m = &msgs[nm];
			bool got;

			*m = msg_of(src, tag, 8);
			for (j = 0; j < nposted; j++)
				if (mposted[j].live &&
				    model_fits(&mposted[j], src, tag)) {
					want = mposted[j].id;
					mposted[j].live = false;
					break;
				}
			got = mrl_match_arrived(&q, m, &t);
			if ((got ? (int) (t.recv - recvs) : -1) != want)
				wrong++;
			if (!got)
				munexp[nunexp++] = (struct model_item){
					src, tag, 0, nm, true };
			else
				matched++;
			nm++;
		}
	}
	check(!wrong && matched > RUN_OPS / 4,
	      "random run: %d matches, %d differ from the model", matched,
	      wrong);
}

int main(void)
{
	test_tags_and_sources();
	test_unexpected_order();
	test_untagged_ignores_tags();
	test_truncation();
	test_multi_recv();
	test_peek_claim_discard();
	test_cancel();
	test_random_against_model();
	return check_failures ? 1 : 0;
}
