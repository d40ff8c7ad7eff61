/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Unit tests of the striping engine over a fake rail layer: chunking,
 * exactly-once completion, error propagation, -FI_EAGAIN queueing, the
 * ordering of the CQ-data chunk, and adaptive scheduling.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/fi_errno.h>

#include "mrl_stripe.h"

static int failures;

#define CHECK(cond, ...) do {						\
	if (!(cond)) {							\
		failures++;						\
		printf("FAIL %s:%d: ", __func__, __LINE__);		\
		printf(__VA_ARGS__);					\
		printf("\n");						\
	}								\
} while (0)

#define MAX_POSTED 4096

struct fake {
	struct mrl_chunk *posted[MAX_POSTED];	/* in flight */
	int nposted;
	int eagain[MRL_MAX_RAILS];	/* say -FI_EAGAIN this many times */
	int fail_post_at;		/* fail the Nth post (1-based) */
	int post_count;
	unsigned char *covered;		/* times each byte was posted */
	size_t covered_len;
	int done_calls;
	int done_err;
	size_t max_chunk_seen;
	int rail_chunks[MRL_MAX_RAILS];
	int spans_iovs;			/* one_iov chunks across two iovs */
	unsigned char *placed;		/* times each byte completed */
	struct mrl_engine *eng;		/* for dead rails' walks */
	uint32_t dead;			/* rails that refuse every post */
	int dead_tries;			/* posts tried on them */
};

/* Does [off, off + len) lie within one of the op's iovs? */
static int within_one_iov(const struct mrl_op *op, size_t off, size_t len)
{
	size_t i;

	for (i = 0; i < op->iov_count; i++) {
		if (off < op->iov[i].iov_len)
			return off + len <= op->iov[i].iov_len;
		off -= op->iov[i].iov_len;
	}
	return len == 0;
}

static void fake_narrow(struct mrl_op *op, void *arg)
{
	op->rail_mask &= ~*(const uint32_t *) arg;
}

/*
 * A dead rail, as the rail layer handles one: the first refusal takes it
 * out of every op's mask (mrl_rail_down's walk), later ones change
 * nothing; the core refuses every post there.
 */
static int fake_refuse_dead(struct fake *f, int rail)
{
	uint32_t bit = 1u << rail;

	if (!f->dead_tries++)
		mrl_engine_for_each_op(f->eng, fake_narrow, &bit);
	return -FI_EAGAIN;
}

static int fake_post(void *owner, struct mrl_chunk *c)
{
	struct fake *f = owner;
	size_t i;

	if (f->dead & (1u << c->rail))
		return fake_refuse_dead(f, c->rail);
	if (f->eagain[c->rail] > 0) {
		f->eagain[c->rail]--;
		return -FI_EAGAIN;
	}
	f->post_count++;
	if (f->fail_post_at && f->post_count == f->fail_post_at)
		return -FI_EIO;
	for (i = 0; i < c->len && f->covered; i++)
		f->covered[c->offset + i]++;
	if (c->len > f->max_chunk_seen)
		f->max_chunk_seen = c->len;
	if (c->op->one_iov && !within_one_iov(c->op, c->offset, c->len))
		f->spans_iovs++;
	f->rail_chunks[c->rail]++;
	f->posted[f->nposted++] = c;
	return 0;
}

static void fake_done(void *owner, struct mrl_op *op, int err)
{
	struct fake *f = owner;

	f->done_calls++;
	f->done_err = err;
}

static const struct mrl_engine_ops fake_ops = {
	.post_chunk = fake_post,
	.op_done = fake_done,
};

static void complete_at(struct mrl_engine *eng, struct fake *f, int idx,
			int err)
{
	struct mrl_chunk *c = f->posted[idx];

	size_t i;

	f->posted[idx] = f->posted[--f->nposted];
	for (i = 0; !err && f->placed && i < c->len; i++)
		f->placed[c->offset + i]++;
	mrl_engine_chunk_done(eng, c, err);
}

static void drain(struct mrl_engine *eng, struct fake *f, unsigned seed)
{
	int guard = 100000;

	srand(seed);
	while ((f->nposted || !mrl_engine_idle(eng)) && guard--) {
		if (f->nposted)
			complete_at(eng, f, rand() % f->nposted, 0);
		mrl_engine_progress(eng);
	}
}

static void setup_attr(struct mrl_engine *eng, struct fake *f,
		       const struct mrl_engine_attr *attr)
{
	memset(f, 0, sizeof(*f));
	if (mrl_engine_init(eng, attr, &fake_ops, f))
		abort();
}

static void setup(struct mrl_engine *eng, struct fake *f, int nrails,
		  uint32_t chunks, size_t bytes)
{
	struct mrl_engine_attr attr = {
		.nrails = nrails,
		.max_chunks_per_rail = chunks,
		.max_bytes_per_rail = bytes,
	};

	setup_attr(eng, f, &attr);
}

/* An engine whose whole ops fill each rail to fill_chunks (or bytes). */
static void setup_fill(struct mrl_engine *eng, struct fake *f, int nrails,
		       uint32_t depth, uint32_t fill_chunks, size_t fill_bytes)
{
	struct mrl_engine_attr attr = {
		.nrails = nrails, .max_chunks_per_rail = depth,
		.max_bytes_per_rail = 1 << 20,
		.fill_chunks = fill_chunks, .fill_bytes = fill_bytes,
	};

	setup_attr(eng, f, &attr);
}

static void init_op(struct mrl_op *op, size_t len, uint64_t flags)
{
	memset(op, 0, sizeof(*op));
	op->kind = MRL_OP_WRITE;
	op->len = len;
	op->flags = flags;
}

static void check_coverage(struct fake *f, size_t len)
{
	size_t i, bad = 0;

	for (i = 0; i < len; i++)
		bad += f->covered[i] != 1;
	CHECK(!bad, "%zu bytes not posted exactly once", bad);
}

/* An op the engine finished is clean again (mrl_op_clean). */
static void check_clean(const struct mrl_op *op, const char *what)
{
	CHECK(op->body_len == 0 && op->next_off == 0 && op->final_posted &&
	      op->inflight == 0 && op->orphans == 0 && op->err == 0 &&
	      op->iov_count == 1 && !op->unmetered &&
	      mrl_list_empty(&op->link) && mrl_list_empty(&op->redo),
	      "%s: not clean (body %zu next %zu final %d inflight %u "
	      "orphans %u err %d)", what, op->body_len, op->next_off,
	      op->final_posted, op->inflight, op->orphans, op->err);
}

static void test_chunking(void)
{
	struct mrl_engine eng;
	struct mrl_op op;
	struct fake f;
	size_t len = 10 * 1024 * 1024 + 12345, chunk = 1 << 20;
	int r;

	setup(&eng, &f, 4, 4, 4 * chunk);
	f.covered = calloc(1, len);
	init_op(&op, len, 0);
	mrl_op_prepare(&eng, &op, 0xf, chunk);
	mrl_engine_submit(&eng, &op);
	CHECK(f.done_calls == 0, "completed before any chunk did");
	drain(&eng, &f, 1);
	check_coverage(&f, len);
	CHECK(f.max_chunk_seen <= chunk, "chunk of %zu > %zu",
	      f.max_chunk_seen, chunk);
	for (r = 0; r < 4; r++)
		CHECK(f.rail_chunks[r] > 0, "rail %d unused", r);
	CHECK(f.done_calls == 1 && f.done_err == 0, "done %d err %d",
	      f.done_calls, f.done_err);
	free(f.covered);
	mrl_engine_fini(&eng);
}

static void test_exactly_once_many_ops(void)
{
	struct mrl_engine eng;
	struct mrl_op ops[64];
	struct fake f;
	size_t sizes[] = { 0, 1, 7, 4096, 65537, 1 << 20, (3 << 20) + 1 };
	int i;

	setup(&eng, &f, 3, 8, 1 << 20);
	for (i = 0; i < 64; i++) {
		init_op(&ops[i], sizes[i % 7], i & 1 ? FI_DELIVERY_COMPLETE : 0);
		mrl_op_prepare(&eng, &ops[i], 0x7, 256 * 1024);
		mrl_engine_submit(&eng, &ops[i]);
	}
	drain(&eng, &f, 2);
	CHECK(f.done_calls == 64, "%d completions for 64 ops", f.done_calls);
	mrl_engine_fini(&eng);
}

/* A core whose RMA takes one local iov: chunks end where iovs end. */
static void test_one_iov(void)
{
	size_t lens[] = { 3000, 0, 100000, 50 }, len = 103050;
	struct mrl_engine eng;
	struct mrl_op op;
	struct fake f;
	int i;

	setup(&eng, &f, 2, 16, 64 << 20);
	f.covered = calloc(1, len);
	init_op(&op, len, 0);
	op.one_iov = true;
	op.iov_count = 4;
	for (i = 0; i < 4; i++)
		op.iov[i].iov_len = lens[i];
	mrl_op_prepare(&eng, &op, 0x3, 65536);
	mrl_engine_submit(&eng, &op);
	drain(&eng, &f, 9);
	check_coverage(&f, len);
	CHECK(!f.spans_iovs, "%d chunks across iovs", f.spans_iovs);
	CHECK(f.done_calls == 1, "done %d", f.done_calls);

	/* two iovs smaller than a chunk: two chunks, at once */
	free(f.covered);
	memset(&f, 0, sizeof(f));
	f.covered = calloc(1, 200);
	init_op(&op, 200, 0);
	op.one_iov = true;
	op.iov_count = 2;
	op.iov[0].iov_len = op.iov[1].iov_len = 100;
	mrl_op_prepare(&eng, &op, 0x3, 65536);
	mrl_engine_submit(&eng, &op);
	CHECK(f.nposted == 2, "%d posted before the first completed",
	      f.nposted);
	drain(&eng, &f, 10);
	check_coverage(&f, 200);
	CHECK(!f.spans_iovs, "%d chunks across iovs", f.spans_iovs);
	CHECK(f.done_calls == 1, "done %d", f.done_calls);
	free(f.covered);
	mrl_engine_fini(&eng);
}

static void test_error_propagation(void)
{
	struct mrl_engine eng;
	struct mrl_op op, op2;
	struct fake f;
	int posted_before;

	setup(&eng, &f, 4, 2, 1 << 30);
	init_op(&op, 64 << 20, 0);
	mrl_op_prepare(&eng, &op, 0xf, 1 << 20);
	mrl_engine_submit(&eng, &op);
	complete_at(&eng, &f, 0, -FI_EIO);
	CHECK(f.done_calls == 0, "error completed op with chunks in flight");
	posted_before = f.post_count;
	mrl_engine_progress(&eng);
	CHECK(f.post_count == posted_before, "posted after the op failed");
	while (f.nposted)
		complete_at(&eng, &f, 0, 0);
	CHECK(f.done_calls == 1 && f.done_err == -FI_EIO,
	      "done %d err %d", f.done_calls, f.done_err);
	check_clean(&op, "a failed op of many chunks");

	/* A post that fails with nothing in flight completes at once. */
	f.fail_post_at = f.post_count + 1;
	init_op(&op2, 10, 0);
	mrl_op_prepare(&eng, &op2, 0x1, 1 << 20);
	mrl_engine_submit(&eng, &op2);
	CHECK(f.done_calls == 2 && f.done_err == -FI_EIO, "done %d err %d",
	      f.done_calls, f.done_err);
	check_clean(&op2, "an op its post failed");
	CHECK(mrl_engine_idle(&eng), "engine not idle");
	mrl_engine_fini(&eng);
}

static void test_eagain_queueing(void)
{
	struct mrl_engine eng;
	struct mrl_op op;
	struct fake f;
	size_t len = 8 << 20;

	setup(&eng, &f, 2, 4, 1 << 30);
	f.covered = calloc(1, len);
	f.eagain[0] = f.eagain[1] = 1000;	/* every rail busy */
	init_op(&op, len, 0);
	mrl_op_prepare(&eng, &op, 0x3, 1 << 20);
	mrl_engine_submit(&eng, &op);
	CHECK(f.nposted == 0, "posted while rails said EAGAIN");
	CHECK(f.done_calls == 0, "completed without posting");
	f.eagain[0] = f.eagain[1] = 0;
	f.eagain[1] = 3;
	mrl_engine_progress(&eng);
	CHECK(f.nposted > 0, "queued chunks not posted from progress");
	drain(&eng, &f, 5);
	check_coverage(&f, len);
	CHECK(f.done_calls == 1 && !f.done_err, "done %d", f.done_calls);
	free(f.covered);
	mrl_engine_fini(&eng);
}

/* Rail 0 drains three times as often as rail 1: it must carry more. */
static void test_adaptive(void)
{
	struct mrl_engine eng;
	struct mrl_op op;
	struct fake f;
	int step = 0, i, guard = 100000;

	setup(&eng, &f, 2, 2, 2 << 20);
	init_op(&op, 64 << 20, 0);
	mrl_op_prepare(&eng, &op, 0x3, 1 << 20);
	mrl_engine_submit(&eng, &op);
	while (f.done_calls == 0 && guard--) {
		int want = (step++ % 4 == 3) ? 1 : 0;

		for (i = 0; i < f.nposted; i++) {
			if (f.posted[i]->rail == want) {
				complete_at(&eng, &f, i, 0);
				break;
			}
		}
		mrl_engine_progress(&eng);
	}
	CHECK(f.done_calls == 1, "not done");
	CHECK(f.rail_chunks[0] > 2 * f.rail_chunks[1],
	      "fast rail %d chunks, slow rail %d", f.rail_chunks[0],
	      f.rail_chunks[1]);
	mrl_engine_fini(&eng);
}

/*
 * Pacing (mrl_engine_pace) over simulated links: rails 0-1 twice as fast
 * as rails 2-3 (1000 and 500 Mbit/s, in bytes per us), each serving its
 * chunks in the order posted; 16 MiB ops one at a time, as one writedata
 * at a time waits for its last byte.  With equal budgets the fast rails
 * finish the op early and idle while the slow ones drain theirs; paced,
 * the rails drain together and an op takes within a few percent of its
 * bytes over the rails' sum.
 */
#define PACE_RAILS	4
#define PACE_STEP_US	50

struct pace_sim {
	struct mrl_chunk *q[PACE_RAILS][64];	/* per rail, in post order */
	int head[PACE_RAILS], tail[PACE_RAILS];
	size_t served[PACE_RAILS];	/* of the head chunk */
	int done;
};

static int pace_post(void *owner, struct mrl_chunk *c)
{
	struct pace_sim *s = owner;

	if (s->tail[c->rail] - s->head[c->rail] >= 64)
		return -FI_EAGAIN;
	s->q[c->rail][s->tail[c->rail]++ % 64] = c;
	return 0;
}

static void pace_done(void *owner, struct mrl_op *op, int err)
{
	(void) op;
	(void) err;
	((struct pace_sim *) owner)->done++;
}

static const struct mrl_engine_ops pace_ops = {
	.post_chunk = pace_post,
	.op_done = pace_done,
};

/* One step of every link: bytes served in post order, chunks completed. */
static void pace_serve(struct mrl_engine *eng, struct pace_sim *s)
{
	static const size_t per_step[PACE_RAILS] = {
		125 * PACE_STEP_US, 125 * PACE_STEP_US,
		62 * PACE_STEP_US, 62 * PACE_STEP_US,
	};
	struct mrl_chunk *c;
	size_t left;
	int r;

	for (r = 0; r < PACE_RAILS; r++) {
		left = per_step[r];
		while (left && s->head[r] < s->tail[r]) {
			c = s->q[r][s->head[r] % 64];
			if (c->len - s->served[r] > left) {
				s->served[r] += left;
				break;
			}
			left -= c->len - s->served[r];
			s->served[r] = 0;
			s->head[r]++;
			mrl_engine_chunk_done(eng, c, 0);
		}
	}
}

/* us per op of the last half of nops ops, paced or not. */
static uint64_t pace_run(bool paced, int nops, size_t *slow_budget)
{
	size_t len = 16 << 20;
	struct pace_sim *s = calloc(1, sizeof(*s));
	struct mrl_engine_attr attr = {
		.nrails = PACE_RAILS, .max_chunks_per_rail = 16,
		.max_bytes_per_rail = 2 << 20,
	};
	struct mrl_engine eng;
	struct mrl_op op;
	uint64_t now_us = 0, half_us = 0;
	int i, guard;

	if (!s || mrl_engine_init(&eng, &attr, &pace_ops, s))
		abort();
	for (i = 0; i < nops; i++) {
		if (i == nops / 2)
			half_us = now_us;
		init_op(&op, len, 0);
		mrl_op_prepare(&eng, &op, 0xf, 256 << 10);
		mrl_engine_submit(&eng, &op);
		for (guard = 100000; s->done == i && guard--;) {
			now_us += PACE_STEP_US;
			pace_serve(&eng, s);
			if (paced)
				mrl_engine_pace(&eng, now_us * 1000);
			mrl_engine_progress(&eng);
		}
	}
	*slow_budget = eng.rail[3].max_bytes;
	mrl_engine_fini(&eng);
	free(s);
	return (now_us - half_us) / (nops - nops / 2);
}

static void test_pace(void)
{
	/* the ideal: the op's bytes over the links' sum (374 bytes/us) */
	uint64_t ideal = (16 << 20) / (125 + 125 + 62 + 62);
	size_t budget;
	uint64_t even = pace_run(false, 20, &budget);
	uint64_t paced = pace_run(true, 20, &budget);

	CHECK(even * 100 > ideal * 110, "unpaced %lu us per op, ideal %lu: "
	      "the simulation shows no tail", (unsigned long) even,
	      (unsigned long) ideal);
	CHECK(paced * 100 <= ideal * 104, "paced %lu us per op, ideal %lu "
	      "(unpaced %lu)", (unsigned long) paced, (unsigned long) ideal,
	      (unsigned long) even);
	CHECK(budget >= (1 << 20) * 9 / 10 && budget <= (1 << 20) * 11 / 10,
	      "a rail half as fast has %zu bytes' budget, not about 1 MiB",
	      budget);
}

/* Busy means every rail of the mask has a chunk in flight. */
static void test_rails_busy(void)
{
	struct mrl_engine eng;
	struct mrl_op a, b;
	struct fake f;

	setup(&eng, &f, 2, 4, 2 << 20);
	CHECK(!mrl_engine_rails_busy(&eng, 0x3), "idle engine busy");
	init_op(&a, 4096, 0);
	mrl_op_prepare(&eng, &a, 0x3, 4096);
	mrl_engine_submit(&eng, &a);
	CHECK(!mrl_engine_rails_busy(&eng, 0x3), "one rail idle, yet busy");
	CHECK(mrl_engine_rails_busy(&eng, 1u << f.posted[0]->rail),
	      "the loaded rail alone not busy");
	init_op(&b, 4096, 0);
	mrl_op_prepare(&eng, &b, 0x3, 4096);
	mrl_engine_submit(&eng, &b);
	CHECK(f.posted[0]->rail != f.posted[1]->rail,
	      "second whole op not on the idle rail");
	CHECK(mrl_engine_rails_busy(&eng, 0x3), "both loaded, not busy");
	drain(&eng, &f, 7);
	CHECK(!mrl_engine_rails_busy(&eng, 0x3), "drained engine busy");
	CHECK(f.done_calls == 2, "%d completions for 2 ops", f.done_calls);
	mrl_engine_fini(&eng);
}

static void test_iov_slice(void)
{
	char a[10], b[20], c[30];
	struct iovec iov[3] = { { a, 10 }, { b, 20 }, { c, 30 } };
	void *desc[3] = { (void *) 1, (void *) 2, (void *) 3 };
	struct iovec out[MRL_IOV_LIMIT];
	void *od[MRL_IOV_LIMIT];
	size_t n;

	n = mrl_iov_slice(iov, desc, 3, 5, 30, out, od);
	CHECK(n == 3, "n %zu", n);
	CHECK(out[0].iov_base == a + 5 && out[0].iov_len == 5, "seg0");
	CHECK(out[1].iov_base == b && out[1].iov_len == 20, "seg1");
	CHECK(out[2].iov_base == c && out[2].iov_len == 5, "seg2");
	CHECK(od[0] == desc[0] && od[2] == desc[2], "desc");
	n = mrl_iov_slice(iov, desc, 3, 30, 30, out, od);
	CHECK(n == 1 && out[0].iov_base == c && out[0].iov_len == 30, "tail");
}

/* Complete, with err, every chunk in flight on rail (in posting order). */
static int complete_rail(struct mrl_engine *eng, struct fake *f, int rail,
			 int err)
{
	int i, n = 0;

	for (i = 0; i < f->nposted;) {
		if (f->posted[i]->rail != rail) {
			i++;
			continue;
		}
		complete_at(eng, f, i, err);
		n++;
	}
	return n;
}

static void check_placed(struct fake *f, size_t len)
{
	size_t i, bad = 0;

	for (i = 0; i < len; i++)
		bad += !f->placed[i];
	CHECK(!bad, "%zu bytes never placed", bad);
}

/*
 * The rail layer takes a failed rail out of the op's mask: its chunks that
 * fail are posted again on the op's other rails, the op completes once,
 * without error, every byte placed, the CQ data posted once and last.
 */
static void test_rail_failure_reissue(void)
{
	struct mrl_engine eng;
	struct mrl_op op;
	struct fake f;
	size_t len = 8 << 20;
	int failed, before;

	setup(&eng, &f, 4, 4, 1 << 30);
	f.covered = calloc(1, len);
	f.placed = calloc(1, len);
	init_op(&op, len, 0);
	mrl_op_prepare(&eng, &op, 0xf, 256 << 10);
	mrl_engine_submit(&eng, &op);
	CHECK(f.rail_chunks[2] > 0, "rail 2 got no chunk");
	op.rail_mask &= ~(1u << 2);		/* the rail layer's verdict */
	before = f.rail_chunks[2];
	failed = complete_rail(&eng, &f, 2, -FI_EIO);
	CHECK(failed == before, "%d of %d failed", failed, before);
	CHECK(f.done_calls == 0, "op done after a rail failed");
	CHECK(eng.rail[2].reissued == (uint64_t) failed, "reissued %lu",
	      (unsigned long) eng.rail[2].reissued);
	drain(&eng, &f, 11);
	CHECK(f.rail_chunks[2] == before, "rail 2 used after it failed");
	CHECK(f.done_calls == 1 && f.done_err == 0, "done %d err %d",
	      f.done_calls, f.done_err);
	check_placed(&f, len);
	CHECK(mrl_engine_idle(&eng), "engine not idle");
	free(f.covered);
	free(f.placed);
	mrl_engine_fini(&eng);
}

/* An op whose every rail failed completes once, with an error. */
static void test_no_rail_left(void)
{
	struct mrl_engine eng;
	struct mrl_op op, op2;
	struct fake f;

	setup(&eng, &f, 2, 4, 1 << 30);
	init_op(&op, 1 << 20, 0);
	mrl_op_prepare(&eng, &op, 0x3, 256 << 10);
	mrl_engine_submit(&eng, &op);
	op.rail_mask = 0x1;
	complete_rail(&eng, &f, 1, -FI_EIO);
	op.rail_mask = 0;
	complete_rail(&eng, &f, 0, -FI_ECONNREFUSED);
	while (f.nposted)
		complete_at(&eng, &f, 0, 0);
	mrl_engine_progress(&eng);
	CHECK(f.done_calls == 1 && f.done_err, "done %d err %d",
	      f.done_calls, f.done_err);

	/* an op to a peer with no rail left fails at once */
	init_op(&op2, 100, 0);
	mrl_op_prepare(&eng, &op2, 0, 1 << 20);
	mrl_engine_submit(&eng, &op2);
	CHECK(f.done_calls == 2 && f.done_err == -FI_EHOSTUNREACH,
	      "done %d err %d", f.done_calls, f.done_err);
	CHECK(mrl_engine_idle(&eng), "engine not idle");
	mrl_engine_fini(&eng);
}

/*
 * A rail taken out by the refusal of an op's first post (the op submitted
 * to an empty queue): the walk that takes the rail out must see that op,
 * or it keeps a rail the rail layer no longer judges and is posted there
 * for good.  With no rail left it fails; with another, it goes there.
 */
static void test_rail_out_at_first_post(void)
{
	struct mrl_engine eng;
	struct mrl_op op, op2;
	struct fake f;
	int i;

	setup(&eng, &f, 2, 4, 1 << 30);
	f.eng = &eng;
	f.dead = 0x1;
	init_op(&op, 4096, 0);
	mrl_op_prepare(&eng, &op, 0x1, 4096);
	mrl_engine_submit(&eng, &op);
	for (i = 0; i < 10 && !f.done_calls; i++)
		mrl_engine_progress(&eng);
	CHECK(f.done_calls == 1 && f.done_err == -FI_EHOSTUNREACH &&
	      f.dead_tries == 1, "alone on the rail: done %d err %d, %d "
	      "posts tried there", f.done_calls, f.done_err, f.dead_tries);

	f.dead_tries = 0;
	init_op(&op2, 1 << 20, 0);
	mrl_op_prepare(&eng, &op2, 0x3, 256 << 10);
	eng.turn = 0;		/* rail 0 first */
	mrl_engine_submit(&eng, &op2);
	drain(&eng, &f, 7);
	CHECK(f.done_calls == 2 && !f.done_err && f.dead_tries == 1 &&
	      f.rail_chunks[1] == 4, "with rail 1: done %d err %d, %d posts "
	      "tried on rail 0, %d chunks on rail 1", f.done_calls,
	      f.done_err, f.dead_tries, f.rail_chunks[1]);
	CHECK(mrl_engine_idle(&eng), "engine not idle");
	mrl_engine_fini(&eng);
}

/*
 * A parked op (no rail for now, the rail layer waits for one): its chunk
 * that failed on the rail it lost waits, it is not failed, the ops behind
 * it go on; given a rail, the chunk goes there and the op completes.
 */
static void test_parked(void)
{
	struct mrl_engine eng;
	struct mrl_op op, op2;
	struct fake f;

	setup(&eng, &f, 3, 4, 1 << 30);
	init_op(&op, 4096, 0);
	mrl_op_prepare(&eng, &op, 0x1, 4096);
	mrl_engine_submit(&eng, &op);
	CHECK(f.nposted == 1 && f.posted[0]->rail == 0, "posted %d",
	      f.nposted);
	op.rail_mask = 0;
	op.parked = true;
	complete_rail(&eng, &f, 0, -FI_EIO);
	mrl_engine_progress(&eng);
	CHECK(f.done_calls == 0 && f.nposted == 0,
	      "parked: done %d, posted %d", f.done_calls, f.nposted);

	init_op(&op2, 4096, 0);
	mrl_op_prepare(&eng, &op2, 0x4, 4096);
	mrl_engine_submit(&eng, &op2);
	CHECK(f.nposted == 1 && f.posted[0]->rail == 2,
	      "the op behind: posted %d", f.nposted);
	complete_at(&eng, &f, 0, 0);
	CHECK(f.done_calls == 1 && !f.done_err, "the op behind: done %d "
	      "err %d", f.done_calls, f.done_err);

	op.rail_mask = 0x2;
	op.parked = false;
	mrl_engine_progress(&eng);
	CHECK(f.nposted == 1 && f.posted[0]->rail == 1 &&
	      f.posted[0]->offset == 0 && f.posted[0]->len == 4096,
	      "unparked: posted %d", f.nposted);
	complete_at(&eng, &f, 0, 0);
	CHECK(f.done_calls == 2 && !f.done_err, "unparked: done %d err %d",
	      f.done_calls, f.done_err);
	CHECK(mrl_engine_idle(&eng), "engine not idle");
	mrl_engine_fini(&eng);
}

/*
 * Chunks stuck on a rail: copied to the other rails, which place the
 * bytes; the op completes only when the core gave the originals back,
 * whatever their verdict.  An op of one chunk is copied as any.
 */
static void test_reissue_stuck(void)
{
	struct mrl_engine eng;
	struct mrl_op op, op1;
	struct fake f;
	size_t len = 4 << 20;
	int stuck, copies, i;

	setup(&eng, &f, 4, 4, 1 << 30);
	f.covered = calloc(1, len);
	f.placed = calloc(1, len);
	init_op(&op, len, 0);
	mrl_op_prepare(&eng, &op, 0xf, 128 << 10);
	mrl_engine_submit(&eng, &op);
	stuck = f.rail_chunks[1];
	op.rail_mask &= ~(1u << 1);
	copies = mrl_engine_reissue(&eng, 1);
	CHECK(copies == stuck, "%d copies of %d stuck", copies, stuck);
	CHECK(mrl_engine_reissue(&eng, 1) == 0, "copied twice");
	/* everything but rail 1 completes */
	for (i = 0; i < 10000; i++) {
		int j;

		for (j = 0; j < f.nposted; j++)
			if (f.posted[j]->rail != 1)
				break;
		if (j == f.nposted)
			break;
		complete_at(&eng, &f, j, 0);
		mrl_engine_progress(&eng);
	}
	for (i = 0; i < f.nposted; i++)
		if (f.posted[i]->rail != 1)
			complete_at(&eng, &f, i--, 0);
	check_placed(&f, len);
	CHECK(f.done_calls == 0, "op completed while the core holds chunks");
	complete_rail(&eng, &f, 1, -FI_EIO);	/* late verdicts: ignored */
	CHECK(f.done_calls == 1 && f.done_err == 0, "done %d err %d",
	      f.done_calls, f.done_err);

	/* an op of one chunk: copied to rail 0, done once the original came
	 * back */
	init_op(&op1, 100, 0);
	mrl_op_prepare(&eng, &op1, 0x2, 1 << 20);
	mrl_engine_submit(&eng, &op1);
	op1.rail_mask = 0x1;
	CHECK(mrl_engine_reissue(&eng, 1) == 1, "one-chunk op not copied");
	complete_rail(&eng, &f, 0, 0);
	CHECK(f.done_calls == 1, "op completed while the core holds its chunk");
	complete_rail(&eng, &f, 1, -FI_EIO);	/* the core's verdict */
	drain(&eng, &f, 12);
	CHECK(f.done_calls == 2 && f.done_err == 0, "done %d err %d",
	      f.done_calls, f.done_err);
	CHECK(mrl_engine_idle(&eng), "engine not idle");
	free(f.covered);
	free(f.placed);
	mrl_engine_fini(&eng);
}

/*
 * An op posted once (a chunk carrying remote CQ data): its chunk is never
 * copied when its rail goes out, nor posted again when it fails; the op
 * waits for the core's verdict and fails with it.  A refused post sent
 * nothing, so it may go elsewhere.
 */
static void test_once(void)
{
	struct mrl_engine eng;
	struct mrl_op op;
	struct fake f;

	setup(&eng, &f, 2, 4, 1 << 30);
	init_op(&op, 100, 0);
	op.once = true;
	mrl_op_prepare(&eng, &op, 0x2, 1 << 20);
	mrl_engine_submit(&eng, &op);
	CHECK(f.rail_chunks[1] == 1, "posted on rail 1: %d", f.rail_chunks[1]);
	op.rail_mask = 0x1;			/* rail 1 out for the peer */
	CHECK(mrl_engine_reissue(&eng, 1) == 0, "a once op's chunk copied");
	complete_rail(&eng, &f, 1, -FI_EIO);	/* the core's verdict */
	drain(&eng, &f, 13);
	CHECK(f.rail_chunks[0] == 0, "posted again on rail 0");
	CHECK(f.done_calls == 1 && f.done_err == -FI_EIO, "done %d err %d",
	      f.done_calls, f.done_err);

	/* refused at its post on a dead rail: posted on the rail left */
	init_op(&op, 100, 0);
	op.once = true;
	f.eng = &eng;
	f.dead = 0x2;
	mrl_op_prepare(&eng, &op, 0x3, 1 << 20);
	eng.turn = 1;
	mrl_engine_submit(&eng, &op);
	drain(&eng, &f, 14);
	CHECK(f.done_calls == 2 && f.done_err == 0 && f.rail_chunks[0] == 1,
	      "done %d err %d, rail 0 %d", f.done_calls, f.done_err,
	      f.rail_chunks[0]);
	CHECK(mrl_engine_idle(&eng), "engine not idle");
	mrl_engine_fini(&eng);
}

static bool match_any(const struct mrl_op *op, void *arg)
{
	(void) op;
	(void) arg;
	return true;
}

/*
 * After fail_ops failed the one op: the core gives back the n chunks it
 * held (half with an error), which changes nothing, and the pool is whole
 * again: a full window of a new op fits and completes.  Ends the engine.
 */
static void late_returns_change_nothing(struct mrl_engine *eng, struct fake *f,
					struct mrl_chunk **held, int n,
					unsigned seed)
{
	struct mrl_op op;
	int i;

	for (i = 0; i < n; i++)
		mrl_engine_chunk_done(eng, held[i], i & 1 ? -FI_EIO : 0);
	CHECK(f->done_calls == 1, "done %d after the late returns",
	      f->done_calls);
	init_op(&op, 8 << 20, 0);
	mrl_op_prepare(eng, &op, 0xf, 256 << 10);
	mrl_engine_submit(eng, &op);
	CHECK(f->nposted == 16, "%d posted after", f->nposted);
	drain(eng, f, seed);
	CHECK(f->done_calls == 2 && f->done_err == 0, "done %d err %d",
	      f->done_calls, f->done_err);
	mrl_engine_fini(eng);
}

/*
 * A peer that died: its ops fail at once although the core holds their
 * chunks; the rails get their credit back, and the chunks' late return
 * changes nothing.
 */
static void test_fail_ops_abandon(void)
{
	struct mrl_engine eng;
	struct mrl_op op;
	struct fake f;
	struct mrl_chunk *held[MAX_POSTED];
	int n;

	setup(&eng, &f, 4, 4, 1 << 30);
	init_op(&op, 8 << 20, 0);
	mrl_op_prepare(&eng, &op, 0xf, 256 << 10);
	mrl_engine_submit(&eng, &op);
	n = f.nposted;
	CHECK(n == 16, "%d chunks in flight", n);
	memcpy(held, f.posted, n * sizeof(held[0]));
	f.nposted = 0;
	mrl_engine_fail_ops(&eng, match_any, NULL, -FI_EHOSTUNREACH);
	CHECK(f.done_calls == 1 && f.done_err == -FI_EHOSTUNREACH,
	      "done %d err %d", f.done_calls, f.done_err);
	CHECK(!eng.busy && !eng.rail[0].inflight, "credit kept");
	CHECK(mrl_engine_idle(&eng), "engine not idle");
	late_returns_change_nothing(&eng, &f, held, n, 13);
}

/*
 * A peer that dies after chunks stuck on a rail were copied: the op is
 * pending (copies to post) and in flight (originals, now orphans, and the
 * rest).  It fails once, every chunk's credit comes back, and the late
 * returns, orphans included, change nothing.
 */
static void test_fail_ops_after_reissue(void)
{
	struct mrl_engine eng;
	struct mrl_op op;
	struct fake f;
	struct mrl_chunk *held[MAX_POSTED];
	int n, i, copies;

	setup(&eng, &f, 4, 4, 1 << 30);
	init_op(&op, 8 << 20, 0);
	mrl_op_prepare(&eng, &op, 0xf, 256 << 10);
	mrl_engine_submit(&eng, &op);
	op.rail_mask &= ~(1u << 1);
	copies = mrl_engine_reissue(&eng, 1);
	CHECK(copies == 4, "%d copies", copies);
	n = f.nposted;
	memcpy(held, f.posted, n * sizeof(held[0]));
	f.nposted = 0;
	mrl_engine_fail_ops(&eng, match_any, NULL, -FI_EHOSTUNREACH);
	CHECK(f.done_calls == 1 && f.done_err == -FI_EHOSTUNREACH,
	      "done %d err %d", f.done_calls, f.done_err);
	for (i = 0; i < 4; i++)
		CHECK(!eng.rail[i].inflight, "rail %d: %u in flight", i,
		      eng.rail[i].inflight);
	CHECK(!eng.busy && mrl_engine_idle(&eng), "engine not idle");
	late_returns_change_nothing(&eng, &f, held, n, 14);
}

/*
 * Whole 1 MiB ops to one rail of 2 MiB byte budget and depth 8: metered,
 * two go at a time; unmetered (device memory over a copy engine), as many
 * as the depth allows.
 */
static void test_unmetered(void)
{
	struct mrl_engine eng;
	struct mrl_op ops[8];
	struct fake f;
	int i, pass;

	for (pass = 0; pass < 2; pass++) {
		setup(&eng, &f, 1, 8, 2 << 20);
		for (i = 0; i < 8; i++) {
			init_op(&ops[i], 1 << 20, 0);
			ops[i].unmetered = pass;
			mrl_op_prepare(&eng, &ops[i], 0x1, 1 << 20);
			mrl_engine_submit(&eng, &ops[i]);
		}
		CHECK(f.nposted == (pass ? 8 : 2), "%s: %d of 8 ops in flight",
		      pass ? "unmetered" : "metered", f.nposted);
		drain(&eng, &f, 1);
		CHECK(f.done_calls == 8, "%d completions for 8 ops",
		      f.done_calls);
		mrl_engine_fini(&eng);
	}
}

static int last_rail(const struct fake *f)
{
	return f->nposted ? f->posted[f->nposted - 1]->rail : -1;
}

static int posted_on(const struct fake *f, int rail)
{
	int i;

	for (i = 0; i < f->nposted; i++)
		if (f->posted[i]->rail == rail)
			return i;
	return -1;
}

/* An op sent whole, submitted: posted at once when a rail takes it. */
static int submit_whole(struct mrl_engine *eng, struct fake *f,
			struct mrl_op *op, size_t len, uint32_t rails)
{
	int before = f->nposted;

	init_op(op, len, 0);
	mrl_op_prepare(eng, op, rails, len);
	mrl_engine_submit(eng, op);
	return f->nposted == before + 1 ? 0 : -FI_EAGAIN;
}

/*
 * Whole ops fill the lowest rail with room up to its fill level (chunks or
 * bytes), then the next; a slot freed low is filled first; with every rail
 * full the least loaded takes the op; an op queued before keeps its turn.
 */
static void test_fill(void)
{
	struct mrl_op ops[16], queued;
	struct mrl_engine eng;
	struct fake f;
	int i, ret;

	setup_fill(&eng, &f, 4, 8, 2, 1000);
	for (i = 0; i < 6; i++) {
		ret = submit_whole(&eng, &f, &ops[i], 8, 0xf);
		CHECK(!ret, "op %d: %d", i, ret);
	}
	CHECK(f.rail_chunks[0] == 2 && f.rail_chunks[1] == 2 &&
	      f.rail_chunks[2] == 2 && !f.rail_chunks[3],
	      "6 ops by 2: rails took %d %d %d %d", f.rail_chunks[0],
	      f.rail_chunks[1], f.rail_chunks[2], f.rail_chunks[3]);
	i = posted_on(&f, 0);
	CHECK(i >= 0, "rail 0 holds nothing");
	if (i < 0)
		return;
	complete_at(&eng, &f, i, 0);
	CHECK(!submit_whole(&eng, &f, &ops[6], 8, 0xf) && last_rail(&f) == 0,
	      "a slot freed on rail 0: the next op went to rail %d",
	      last_rail(&f));
	CHECK(!submit_whole(&eng, &f, &ops[7], 8, 0xe) && last_rail(&f) == 3,
	      "rails 1-3, 1 and 2 full: rail %d", last_rail(&f));
	CHECK(!submit_whole(&eng, &f, &ops[8], 8, 0xf) &&
	      !submit_whole(&eng, &f, &ops[9], 8, 0xf) && f.nposted == 9,
	      "every rail full: %d of 9 ops posted", f.nposted);
	/* bytes: one op of 1200 fills a rail whose level is 1000 */
	drain(&eng, &f, 3);
	CHECK(!submit_whole(&eng, &f, &ops[10], 600, 0x6) &&
	      last_rail(&f) == 1, "600 B: rail %d", last_rail(&f));
	i = posted_on(&f, 1);
	CHECK(i >= 0, "rail 1 holds nothing");
	if (i < 0)
		return;
	complete_at(&eng, &f, i, 0);
	CHECK(!submit_whole(&eng, &f, &ops[11], 1200, 0x6) &&
	      last_rail(&f) == 1, "1200 B: rail %d", last_rail(&f));
	CHECK(!submit_whole(&eng, &f, &ops[12], 8, 0x6) &&
	      last_rail(&f) == 2, "rail 1 holds 1200 B in 1 op: rail %d",
	      last_rail(&f));
	/* an op queued (every rail refuses it now) goes first */
	for (i = 0; i < 4; i++)
		f.eagain[i] = 1;
	CHECK(submit_whole(&eng, &f, &queued, 8, 0xf) == -FI_EAGAIN,
	      "refused by every rail, yet posted");
	submit_whole(&eng, &f, &ops[13], 8, 0xf);
	CHECK(f.nposted >= 2 && f.posted[f.nposted - 2]->op == &queued &&
	      f.posted[f.nposted - 1]->op == &ops[13],
	      "an op passed one queued before it");
	drain(&eng, &f, 4);
	CHECK(f.done_calls == 15, "%d completions for 15 ops", f.done_calls);
	CHECK(!eng.full && !eng.busy, "drained: full 0x%x busy 0x%x",
	      eng.full, eng.busy);
	mrl_engine_fini(&eng);
}

/* The fast path's post, as mrl_rma.c does it: its rail, or -1. */
static int post_fast(struct mrl_engine *eng, struct fake *f,
		     struct mrl_op *op, size_t len, uint32_t rails)
{
	struct mrl_chunk *c;

	init_op(op, len, 0);
	mrl_op_clean(op);	/* as the rail layer's pool keeps its ops */
	c = mrl_engine_whole_take(eng, op, rails);
	if (!c)
		return -1;
	if (fake_post(f, c)) {
		mrl_engine_whole_untake(eng, c);
		return -1;
	}
	return c->rail;
}

/*
 * The small op's fast path keeps the general way's rules and state: the
 * lowest rail below its fill level, then the rails in turn up to their
 * depth (the one rail of a one-rail mask too), none (the general way) when
 * that rail has no room or an op is queued; its op completes once, is
 * found by mrl_engine_fail_ops, and a failure on a rail it left is posted
 * again elsewhere.
 */
static void test_whole_fast_path(void)
{
	static const int want[] = { 0, 0, 1, 1, 0, 1, 1, -1, 0, -1 };
	static const uint32_t mask[] = { 3, 3, 3, 3, 3, 3, 2, 2, 3, 3 };
	struct mrl_op ops[12], queued;
	struct mrl_engine eng;
	struct fake f;
	int i, n = 0, rail;

	setup_fill(&eng, &f, 2, 4, 2, 1 << 20);
	/* fill 2 a rail, then turns; a one-rail mask up to the depth of 4 */
	for (i = 0; i < 10; i++) {
		rail = post_fast(&eng, &f, &ops[n], 64, mask[i]);
		CHECK(rail == want[i], "op %d (mask 0x%x): rail %d, not %d",
		      i, mask[i], rail, want[i]);
		n += rail >= 0;
	}
	CHECK(n == 8 && eng.rail[0].inflight == 4 &&
	      eng.rail[1].inflight == 4 && eng.busy == 0x3 && eng.full == 0x3,
	      "%d posted, %u and %u in flight, busy 0x%x full 0x%x", n,
	      eng.rail[0].inflight, eng.rail[1].inflight, eng.busy, eng.full);

	/* one op ends fine; one fails on the rail it left: posted again
	 * on rail 0 (ops[2] is on rail 1) */
	complete_at(&eng, &f, posted_on(&f, 0), 0);
	CHECK(f.done_calls == 1 && !f.done_err, "done %d err %d",
	      f.done_calls, f.done_err);
	for (i = 0; i < f.nposted && f.posted[i]->op != &ops[2]; i++)
		;
	CHECK(i < f.nposted && f.posted[i]->rail == 1, "op 2 not on rail 1");
	if (i == f.nposted || f.posted[i]->rail != 1)
		return;
	ops[2].rail_mask = 0x1;
	complete_at(&eng, &f, i, -FI_EIO);
	CHECK(f.done_calls == 1, "the op ended on a rail's failure");
	mrl_engine_progress(&eng);
	CHECK(last_rail(&f) == 0 && f.posted[f.nposted - 1]->op == &ops[2],
	      "not posted again on rail 0");

	/* an op queued before (no room on its rail): the fast path leaves
	 * it its turn */
	init_op(&queued, 64, 0);
	mrl_op_prepare(&eng, &queued, 0x1, 64);
	mrl_engine_submit(&eng, &queued);
	CHECK(!mrl_list_empty(&eng.pending), "op without room not queued");
	CHECK(post_fast(&eng, &f, &ops[9], 64, 0x2) == -1,
	      "the fast path passed a queued op");

	/* ops of a dead peer: failed at once, the fast path's included */
	mrl_engine_fail_ops(&eng, match_any, NULL, -FI_EHOSTUNREACH);
	CHECK(f.done_calls == 9 && f.done_err == -FI_EHOSTUNREACH,
	      "%d ops ended of 9", f.done_calls);
	while (f.nposted)
		complete_at(&eng, &f, 0, 0);
	CHECK(f.done_calls == 9, "%d completions for 9 ops", f.done_calls);
	CHECK(!eng.busy && !eng.full && mrl_engine_idle(&eng),
	      "drained: busy 0x%x full 0x%x", eng.busy, eng.full);

	/* completed the general way, exactly once each */
	f.done_calls = 0;
	for (i = 0; i < 4; i++)
		post_fast(&eng, &f, &ops[i], 100, 0x3);
	drain(&eng, &f, 5);
	CHECK(f.done_calls == 4 && !f.done_err,
	      "%d completions for 4 fast ops, err %d", f.done_calls,
	      f.done_err);
	mrl_engine_fini(&eng);
}

/* The engine's credit of rail, as a refused take must leave it. */
struct credit_seen {
	uint32_t inflight, busy, full;
	size_t bytes;
	uint64_t posted, posted_bytes;
	struct mrl_chunk *free_top;
};

static struct credit_seen credit_of(const struct mrl_engine *eng, int rail)
{
	struct credit_seen c = {
		.inflight = eng->rail[rail].inflight, .busy = eng->busy,
		.full = eng->full, .bytes = eng->rail[rail].inflight_bytes,
		.free_top = eng->free_top,
	};

	mrl_engine_rail_posted(eng, rail, &c.posted, &c.posted_bytes);
	return c;
}

/*
 * The fast path's take and its undoing: a chunk the core refuses gives
 * back all it took (credit, levels, the free chunk, the rail's counts); at
 * their levels the rails take turns from next_rail on, in masks with holes
 * too (rail 2 of 0xc after a turn on rail 0); after rail 31 the turn is
 * rail 0's, the general way's as well; what a rail posted is counted once.
 */
static void test_whole_take_back(void)
{
	struct mrl_op ops[40], refused, general;
	struct credit_seen before, after;
	struct mrl_engine eng;
	struct fake f;
	int i, rail;

	setup_fill(&eng, &f, 4, 4, 1, 1 << 20);
	for (i = 0; i < 4; i++)
		CHECK(post_fast(&eng, &f, &ops[i], 64, 0xf) == i,
		      "op %d below the levels: rail %d", i, last_rail(&f));
	CHECK(post_fast(&eng, &f, &ops[4], 64, 0x1) == 0 &&
	      post_fast(&eng, &f, &ops[5], 64, 0xc) == 2,
	      "turns at the levels: rail %d, mask 0xc", last_rail(&f));

	before = credit_of(&eng, 3);
	f.eagain[3] = 1;
	CHECK(post_fast(&eng, &f, &refused, 64, 0x8) == -1, "not refused");
	after = credit_of(&eng, 3);
	CHECK(!memcmp(&before, &after, sizeof(before)) && !refused.inflight,
	      "refused: inflight %u/%u busy 0x%x/0x%x full 0x%x/0x%x bytes "
	      "%zu/%zu posted %lu/%lu free chunk %p/%p, op holds %u",
	      before.inflight, after.inflight, before.busy, after.busy,
	      before.full, after.full, before.bytes, after.bytes,
	      (unsigned long) before.posted, (unsigned long) after.posted,
	      (void *) before.free_top, (void *) after.free_top,
	      refused.inflight);
	CHECK(post_fast(&eng, &f, &refused, 64, 0x8) == 3, "not posted after");
	drain(&eng, &f, 7);
	CHECK(f.done_calls == 7 && !f.done_err, "%d completions of 7",
	      f.done_calls);
	for (rail = 0; rail < 4; rail++) {
		after = credit_of(&eng, rail);
		CHECK(after.posted == (uint64_t) f.rail_chunks[rail] &&
		      after.posted_bytes == 64 * after.posted,
		      "rail %d: %lu posted (%lu bytes), the core took %d",
		      rail, (unsigned long) after.posted,
		      (unsigned long) after.posted_bytes, f.rail_chunks[rail]);
	}
	mrl_engine_fini(&eng);

	setup_fill(&eng, &f, 32, 4, 1, 1 << 20);
	for (i = 0; i < 32; i++)
		post_fast(&eng, &f, &ops[i], 8, ~0u);
	CHECK(last_rail(&f) == 31 && eng.full == ~0u,
	      "32 rails filled: last on rail %d, full 0x%x", last_rail(&f),
	      eng.full);
	init_op(&general, 8, 0);
	mrl_op_prepare(&eng, &general, ~0u, 8);
	mrl_engine_submit(&eng, &general);
	CHECK(last_rail(&f) == 0 && f.posted[f.nposted - 1]->op == &general,
	      "after rail 31 the general way went to rail %d",
	      last_rail(&f));
	CHECK(post_fast(&eng, &f, &ops[32], 8, ~0u) == 1,
	      "the turn after rail 0: rail %d", last_rail(&f));
	drain(&eng, &f, 8);
	CHECK(f.done_calls == 34, "%d completions of 34", f.done_calls);
	mrl_engine_fini(&eng);
}

/*
 * Byte levels that adapt (mrl_engine_rail_read): a rail starts one step
 * up, so whole ops of 4 KiB spread; reads that find completions raise a
 * rail's level to fill_bytes, and whole ops then fill it first; a read of
 * it, busy, that finds none halves the level, and the next op goes to the
 * next rail until it drains below; levels stay within [1, fill_bytes],
 * and a few tiny ops' empty reads leave them.  Without fill_adapt a level
 * never moves.
 */
static void test_fill_adapt(void)
{
	struct mrl_engine_attr attr = {
		.nrails = 4, .max_chunks_per_rail = 64,
		.max_bytes_per_rail = 1 << 20,
		.fill_chunks = 16, .fill_bytes = 65536, .fill_adapt = true,
	};
	struct mrl_op ops[32];
	struct mrl_engine eng;
	struct fake f;
	int i, rail, n = 0;

	setup_attr(&eng, &f, &attr);
	for (i = 0; i < 4; i++) {
		rail = post_fast(&eng, &f, &ops[n++], 4096, 0xf);
		CHECK(rail == i, "start: op %d on rail %d", i, rail);
	}
	drain(&eng, &f, 7);
	for (i = 0; i < MRL_FILL_STEPS; i++)
		mrl_engine_rail_read(&eng, 0, true);
	CHECK(eng.rail[0].fill_bytes == 65536 &&
	      eng.rail[1].fill_bytes < 4096,
	      "%d reads with completions: levels %zu and %zu",
	      MRL_FILL_STEPS, eng.rail[0].fill_bytes, eng.rail[1].fill_bytes);
	mrl_engine_rail_read(&eng, 0, true);
	CHECK(eng.rail[0].fill_bytes == 65536, "above fill_bytes: %zu",
	      eng.rail[0].fill_bytes);
	n = 0;
	for (i = 0; i < 16; i++) {
		rail = post_fast(&eng, &f, &ops[n++], 4096, 0xf);
		CHECK(rail == 0, "earned: op %d on rail %d", i, rail);
	}
	CHECK(post_fast(&eng, &f, &ops[n++], 4096, 0xf) == 1,
	      "rail 0 at 16 ops: rail %d", last_rail(&f));
	/* 14 of rail 0's ops back, then a read that finds nothing: 8 KiB
	 * left there is under 64 KiB, not under a level halved 3 times */
	for (i = 0; i < 14; i++)
		complete_at(&eng, &f, posted_on(&f, 0), 0);
	for (i = 0; i < 3; i++)
		mrl_engine_rail_read(&eng, 0, false);
	CHECK(eng.rail[0].fill_bytes == 8192 && (eng.full & 1),
	      "3 empty reads: level %zu, full 0x%x", eng.rail[0].fill_bytes,
	      eng.full);
	rail = post_fast(&eng, &f, &ops[n++], 4096, 0xf);
	CHECK(rail == 2, "rail 0 held back (rail 1 full at its start "
	      "level): op on rail %d", rail);
	complete_at(&eng, &f, posted_on(&f, 0), 0);
	/* rail 0, read below the top, makes the engine spread: the idle
	 * rail first, then rail 0, under its level again */
	rail = post_fast(&eng, &f, &ops[n++], 4096, 0xf);
	CHECK(rail == 3, "spreading, the idle rail first: op on rail %d", rail);
	rail = post_fast(&eng, &f, &ops[n++], 4096, 0xf);
	CHECK(rail == 0, "rail 0 under its level again: op on rail %d", rail);
	for (i = 0; i < 40; i++)
		mrl_engine_rail_read(&eng, 0, false);
	CHECK(eng.rail[0].fill_bytes == 1, "the floor: %zu",
	      eng.rail[0].fill_bytes);
	drain(&eng, &f, 8);
	mrl_engine_fini(&eng);

	/* a few tiny ops wait on latency: their empty reads leave the level */
	setup_attr(&eng, &f, &attr);
	for (i = 0; i < 4; i++)
		post_fast(&eng, &f, &ops[i], 8, 0xf);
	mrl_engine_rail_read(&eng, 0, false);
	CHECK(eng.rail[0].inflight == 4 &&
	      eng.rail[0].fill_bytes == eng.fill_step,
	      "4 ops of 8 B on rail 0 (%u), an empty read: level %zu",
	      eng.rail[0].inflight, eng.rail[0].fill_bytes);
	drain(&eng, &f, 9);
	mrl_engine_fini(&eng);

	attr.fill_adapt = false;
	setup_attr(&eng, &f, &attr);
	mrl_engine_rail_read(&eng, 2, false);
	mrl_engine_rail_read(&eng, 3, true);
	CHECK(eng.rail[0].fill_bytes == 65536 &&
	      eng.rail[2].fill_bytes == 65536 &&
	      eng.rail[3].fill_bytes == 65536,
	      "fixed levels moved: %zu %zu %zu", eng.rail[0].fill_bytes,
	      eng.rail[2].fill_bytes, eng.rail[3].fill_bytes);
	mrl_engine_fini(&eng);
}

/* 8 rails whose byte levels adapt, as the spreading tests take them. */
static const struct mrl_engine_attr spread_attr = {
	.nrails = 8, .max_chunks_per_rail = 64,
	.max_bytes_per_rail = 1 << 20,
	.fill_chunks = 16, .fill_bytes = 65536, .fill_adapt = true,
};

/* Rails 0 to n - 1 read with completions until at the top. */
static void reads_to_top(struct mrl_engine *eng, int n)
{
	int r, i;

	for (r = 0; r < n; r++)
		for (i = 0; i < MRL_FILL_STEPS; i++)
			mrl_engine_rail_read(eng, r, true);
}

/*
 * The engine spreads while a rail read is below the top (its link held it
 * back, or it has yet to earn its level): whole ops go to an idle rail of
 * the mask before a lower rail that is busy but under its level.  With
 * every rail read at the top (the reader the limit), they fill the lowest
 * rail first, as before; rails never read do not count; fixed levels never
 * spread.
 */
static void test_fill_spread(void)
{
	struct mrl_engine_attr attr = spread_attr;
	struct mrl_op ops[16];
	struct mrl_engine eng;
	struct fake f;
	int i, rail, n = 0;

	setup_attr(&eng, &f, &attr);
	reads_to_top(&eng, 4);
	CHECK(!eng.below_top, "rails 0-3 at the top, 4-7 never read: "
	      "below the top 0x%x", eng.below_top);
	for (i = 0; i < 4; i++) {
		rail = post_fast(&eng, &f, &ops[n++], 4096, 0xf);
		CHECK(rail == 0, "the reader the limit: op %d on rail %d", i,
		      rail);
	}
	/* rail 0's link holds it back: a read finds none of its 16 KiB */
	mrl_engine_rail_read(&eng, 0, false);
	CHECK(eng.below_top == 1 && eng.rail[0].fill_bytes == 32768,
	      "rail 0 halved: below the top 0x%x, level %zu", eng.below_top,
	      eng.rail[0].fill_bytes);
	for (i = 1; i < 4; i++) {
		rail = post_fast(&eng, &f, &ops[n++], 4096, 0xf);
		CHECK(rail == i, "spreading: op on rail %d, not %d", rail, i);
	}
	rail = post_fast(&eng, &f, &ops[n++], 4096, 0xf);
	CHECK(rail == 0, "no rail of the mask idle: op on rail %d", rail);
	/* rail 0 back at the top: the engine fills again */
	for (i = 0; i < MRL_FILL_STEPS; i++)
		mrl_engine_rail_read(&eng, 0, true);
	i = posted_on(&f, 3);
	CHECK(i >= 0, "nothing on rail 3");
	if (i >= 0)
		complete_at(&eng, &f, i, 0);
	rail = post_fast(&eng, &f, &ops[n++], 4096, 0xf);
	CHECK(!eng.below_top && rail == 0,
	      "back at the top (below 0x%x): op on rail %d", eng.below_top,
	      rail);
	drain(&eng, &f, 11);
	CHECK(f.done_calls == n, "%d completions of %d", f.done_calls, n);
	mrl_engine_fini(&eng);

	attr.fill_adapt = false;
	setup_attr(&eng, &f, &attr);
	post_fast(&eng, &f, &ops[0], 4096, 0xf);
	mrl_engine_rail_read(&eng, 0, false);
	rail = post_fast(&eng, &f, &ops[1], 4096, 0xf);
	CHECK(!eng.below_top && rail == 0,
	      "fixed levels: below the top 0x%x, op on rail %d",
	      eng.below_top, rail);
	drain(&eng, &f, 12);
	mrl_engine_fini(&eng);
}

/*
 * Only the rails an op may use decide whether it spreads.  A rail read
 * below the top that then left every op's mask (taken out of service for
 * the one peer, mrl_health.c) is read no more, so its level never climbs
 * back: had it counted, the engine would spread over the others for good
 * while the reader, not their links, is the limit.
 */
static void test_fill_spread_outside_mask(void)
{
	struct mrl_op ops[8];
	struct mrl_engine eng;
	struct fake f;
	int i, rail, n = 0;

	setup_attr(&eng, &f, &spread_attr);
	reads_to_top(&eng, 5);
	for (i = 0; i < 4; i++)
		post_fast(&eng, &f, &ops[n++], 4096, 0x10);
	mrl_engine_rail_read(&eng, 4, false);
	CHECK(eng.below_top == 0x10, "rail 4 halved: below the top 0x%x",
	      eng.below_top);
	/* rail 4 leaves the mask: rails 0-3, all at the top, fill */
	for (i = 0; i < 3; i++) {
		rail = post_fast(&eng, &f, &ops[n++], 4096, 0xf);
		CHECK(rail == 0, "rail 4 outside the mask spread op %d to "
		      "rail %d", i, rail);
	}
	/* within the mask it still counts: the idle rail first */
	rail = post_fast(&eng, &f, &ops[n++], 4096, 0x1f);
	CHECK(rail == 1, "rail 4 in the mask: op on rail %d, not 1", rail);
	drain(&eng, &f, 13);
	CHECK(f.done_calls == n, "%d completions of %d", f.done_calls, n);
	mrl_engine_fini(&eng);
}

/*
 * A fast-path op whose rail is taken from it while the core holds its
 * chunk: the chunk is copied to a rail it keeps, and then neither return
 * alone ends it early nor twice, in either order (the fast completion
 * must not take the copied chunk for its op's last).
 */
static void test_whole_reissued(void)
{
	struct mrl_chunk *first;
	struct mrl_engine eng;
	struct mrl_op ops[2];
	struct fake f;
	int i, round;

	setup_fill(&eng, &f, 2, 4, 1, 1 << 20);
	for (round = 0; round < 2; round++) {
		struct mrl_op *op = &ops[round];

		f.done_calls = 0;
		CHECK(post_fast(&eng, &f, op, 64, 0x2) == 1,
		      "round %d: not on rail 1", round);
		first = f.posted[f.nposted - 1];
		op->rail_mask = 0x1;
		CHECK(mrl_engine_reissue(&eng, 1) == 1, "round %d: not copied",
		      round);
		mrl_engine_progress(&eng);
		CHECK(f.nposted == 2 && last_rail(&f) == 0,
		      "round %d: copy not on rail 0", round);
		/* round 0: the copied chunk comes back first; 1: its copy */
		for (i = 0; i < f.nposted; i++)
			if ((f.posted[i] == first) == !round)
				break;
		complete_at(&eng, &f, i, 0);
		CHECK(f.done_calls == 0, "round %d: ended by one of two "
		      "chunks", round);
		complete_at(&eng, &f, 0, 0);
		CHECK(f.done_calls == 1 && !f.done_err,
		      "round %d: %d completions, err %d", round, f.done_calls,
		      f.done_err);
		check_clean(op, round ? "a copied op, copy back last" :
				 "a copied op, copy back first");
		CHECK(mrl_engine_idle(&eng) && !eng.busy,
		      "round %d: engine not idle", round);
	}
	mrl_engine_fini(&eng);
}

/*
 * Whole chunks back in one batch (as progress hands them on): each gives
 * its op at once, the rail's credit comes back once for all of them.
 */
static void test_whole_batch_returned(void)
{
	struct mrl_returns back = { 0, 0 };
	struct mrl_chunk *c;
	struct mrl_engine eng;
	struct mrl_op ops[4];
	struct fake f;
	int i, got = 0;

	setup_fill(&eng, &f, 2, 8, 4, 1 << 20);
	for (i = 0; i < 4; i++)
		CHECK(post_fast(&eng, &f, &ops[i], 100 + i, 0x1) == 0,
		      "op %d not on rail 0", i);
	CHECK(eng.full == 0x1 && eng.busy == 0x1, "full 0x%x busy 0x%x",
	      eng.full, eng.busy);
	while (f.nposted) {
		c = f.posted[--f.nposted];
		CHECK(c->whole, "a fast chunk not marked whole");
		got += mrl_engine_whole_back(&eng, c, &back) == c->op;
	}
	CHECK(got == 4 && back.chunks == 4 && back.bytes == 406,
	      "%d ops, %u chunks, %zu bytes back", got, back.chunks,
	      back.bytes);
	CHECK(eng.rail[0].inflight == 4, "credit back before the batch ended");
	mrl_engine_returned(&eng, 0, &back);
	CHECK(!eng.rail[0].inflight && !eng.rail[0].inflight_bytes &&
	      !eng.busy && !eng.full && eng.rail[0].completions == 4 &&
	      eng.rail[0].bytes_completed == 406 && !back.chunks,
	      "after the batch: %u in flight (%zu bytes), busy 0x%x full 0x%x",
	      eng.rail[0].inflight, eng.rail[0].inflight_bytes, eng.busy,
	      eng.full);
	CHECK(mrl_engine_idle(&eng), "engine not idle");
	mrl_engine_fini(&eng);
}

int main(void)
{
	test_chunking();
	test_fill();
	test_fill_adapt();
	test_fill_spread();
	test_fill_spread_outside_mask();
	test_whole_fast_path();
	test_whole_take_back();
	test_whole_reissued();
	test_whole_batch_returned();
	test_unmetered();
	test_exactly_once_many_ops();
	test_one_iov();
	test_error_propagation();
	test_eagain_queueing();
	test_adaptive();
	test_pace();
	test_rails_busy();
	test_iov_slice();
	test_rail_failure_reissue();
	test_no_rail_left();
	test_parked();
	test_rail_out_at_first_post();
	test_reissue_stuck();
	test_once();
	test_fail_ops_abandon();
	test_fail_ops_after_reissue();
	printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
	return failures ? 1 : 0;
}
