/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The striped message path (FI_MULTIRAIL_MESSAGES=striped), two endpoints
 * of one process over the rails FI_MULTIRAIL_RAILS names: every receive is
 * checked when its completion arrives (length, every byte against the
 * seeded pattern of its message, the bytes past it still poison, CQ data,
 * tag, source), every send's completion is counted.
 *   - a stream of tagged sends of seeded sizes from 0 B to 1 MiB (eager
 *     and segmented), one tag, a window of receives: any loss, duplicate
 *     or reordering puts a message into the wrong receive;
 *   - the same sent before any receive is posted (unexpected);
 *   - iovs on both sides, cut differently, eager and segmented;
 *   - tags and ignore bits; truncation (FI_ETRUNC, olen); FI_PEEK,
 *     FI_CLAIM, FI_DISCARD; FI_MULTI_RECV; fi_cancel; injects;
 *   - a directed receive of a message that came before its sender was
 *     inserted;
 *   - the packets went over every rail (fi_multirail msg_stats).
 *
 *   msg_test [-n messages] [-s seed]
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "rdma/fi_ext_multirail.h"
#include "check.h"
#include "mrl_proto.h"
#include "side.h"

#define MAX_MSG		(1 << 20)
#define WINDOW		16
#define QLEN		4096
#define POISON		0xee
#define TIMEOUT_S	60

struct entry {
	struct fi_cq_tagged_entry e;
	fi_addr_t src;
	int err;		/* positive FI_E*, 0: a plain entry */
	size_t olen;
};

struct end {
	struct side s;
	fi_addr_t peer;		/* the other end in our AV */
	struct entry q[QLEN];
	int n;
};

static struct end a, b, c;	/* c: a third, opened by late_insert */
static bool c_open;
static uint64_t seed = 1;

static uint64_t xorshift(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* message i's byte j */
static uint8_t pattern(uint64_t i, size_t j)
{
	uint64_t x = (seed * 0x9e3779b97f4a7c15ULL) ^ (i << 20) ^ (j >> 3);

	xorshift(&x);
	return (uint8_t) (x >> ((j & 7) * 8));
}

static void fill(uint8_t *buf, uint64_t i, size_t len)
{
	for (size_t j = 0; j < len; j++)
		buf[j] = pattern(i, j);
}

/* 0 when buf holds message i's len bytes and poison up to room */
static long bad_byte(const uint8_t *buf, uint64_t i, size_t len, size_t room)
{
	for (size_t j = 0; j < len; j++)
		if (buf[j] != pattern(i, j))
			return (long) j + 1;
	for (size_t j = len; j < room; j++)
		if (buf[j] != POISON)
			return -(long) j - 1;
	return 0;
}

/* Reads what the end's CQ holds into its queue. */
static void drain(struct end *x)
{
	struct fi_cq_tagged_entry e[16];
	fi_addr_t src[16];
	ssize_t n, i;

	for (;;) {
		n = fi_cq_readfrom(x->s.cq, e, 16, src);
		if (n == -FI_EAGAIN)
			return;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry ee = { 0 };

			CHK(fi_cq_readerr(x->s.cq, &ee, 0) != 1);
			if (x->n == QLEN)
				die("CQ queue full");
			x->q[x->n++] = (struct entry) {
				.e = { .op_context = ee.op_context,
				       .flags = ee.flags, .len = ee.len,
				       .buf = ee.buf, .data = ee.data,
				       .tag = ee.tag },
				.src = FI_ADDR_NOTAVAIL, .err = ee.err,
				.olen = ee.olen,
			};
			continue;
		}
		if (n < 0)
			die("fi_cq_readfrom: %zd", n);
		for (i = 0; i < n; i++) {
			if (x->n == QLEN)
				die("CQ queue full");
			x->q[x->n++] = (struct entry) { .e = e[i],
							.src = src[i] };
		}
	}
}

static void pump(void)
{
	drain(&a);
	drain(&b);
	if (c_open)
		drain(&c);
}

/* The entry of ctx, taken off x's queue; dies after TIMEOUT_S. */
static struct entry wait_ctx(struct end *x, void *ctx)
{
	double end = now() + TIMEOUT_S;
	struct entry got;

	for (;;) {
		for (int i = 0; i < x->n; i++) {
			if (x->q[i].e.op_context != ctx)
				continue;
			got = x->q[i];
			memmove(&x->q[i], &x->q[i + 1],
				(size_t) (x->n - i - 1) * sizeof(x->q[0]));
			x->n--;
			return got;
		}
		if (now() > end)
			die("no completion for context %p in %d s", ctx,
			    TIMEOUT_S);
		pump();
	}
}

/* No entry of ctx arrives in secs. */
static bool none_for(struct end *x, void *ctx, double secs)
{
	double end = now() + secs;

	while (now() < end) {
		pump();
		for (int i = 0; i < x->n; i++)
			if (x->q[i].e.op_context == ctx)
				return false;
	}
	return true;
}

#define RETRY(call) do {						\
	ssize_t _r; double _end = now() + TIMEOUT_S;			\
	while ((_r = (call)) == -FI_EAGAIN && now() < _end)		\
		pump();							\
	if (_r)								\
		die("%s: %zd", #call, _r);				\
} while (0)

static void open_end(struct end *x)
{
	open_side(&x->s, getenv("MRL_TEST_PROV") ? getenv("MRL_TEST_PROV")
						 : "multirail", NULL, NULL,
		  FI_MSG | FI_TAGGED | FI_DIRECTED_RECV | FI_SOURCE |
		  (getenv("MRL_TEST_NO_MULTI_RECV") ? 0 : FI_MULTI_RECV));
}

static void connect_ends(void)
{
	char na[1024], nb[1024];
	size_t la = sizeof(na), lb = sizeof(nb);

	CHK(fi_getname(&a.s.ep->fid, na, &la));
	CHK(fi_getname(&b.s.ep->fid, nb, &lb));
	if (fi_av_insert(a.s.av, nb, 1, &a.peer, 0, NULL) != 1 ||
	    fi_av_insert(b.s.av, na, 1, &b.peer, 0, NULL) != 1)
		die("fi_av_insert");
}

/* ---- the stream --------------------------------------------------------- */

static size_t size_of(uint64_t *x)
{
	static const size_t sizes[] = { 0, 1, 7, 64, 4096, 8191, 8192, 8193,
					16384, 30000, 65536, 65537, 200000,
					MAX_MSG };
	uint64_t r = xorshift(x);

	return r % 3 ? sizes[r % 14] : (size_t) (r >> 20) % MAX_MSG;
}

struct slot {
	uint8_t *buf;
	uint64_t msg;
};

/*
 * n tagged sends of seeded sizes, window WINDOW; receives posted before
 * (prepost) or only once every send was posted (unexpected).
 */
static void stream(int n, bool unexpected)
{
	static struct slot rx[WINDOW], tx[WINDOW];
	uint64_t x = seed * 7 + unexpected, xs = x;
	int sent = 0, done_tx = 0, posted = 0, got = 0, bad = 0, i;
	size_t len;

	for (i = 0; i < WINDOW; i++) {
		rx[i].buf = malloc(MAX_MSG + 64);
		tx[i].buf = malloc(MAX_MSG);
	}
	/* receive k goes in rx slot k % WINDOW, send k from tx slot k % W */
	while (got < n) {
		while (!unexpected && posted < n && posted - got < WINDOW) {
			struct slot *s = &rx[posted % WINDOW];

			memset(s->buf, POISON, MAX_MSG + 64);
			s->msg = (uint64_t) posted;
			RETRY(fi_trecv(b.s.ep, s->buf, MAX_MSG, NULL,
				       FI_ADDR_UNSPEC, 0x5, 0, s));
			posted++;
		}
		while (sent < n && sent - done_tx < WINDOW) {
			struct slot *s = &tx[sent % WINDOW];

			len = size_of(&xs);
			fill(s->buf, (uint64_t) sent, len);
			s->msg = len;
			RETRY(fi_tsenddata(a.s.ep, s->buf, len, NULL,
					   (uint64_t) sent, a.peer, 0x5, s));
			sent++;
		}
		if (unexpected && sent == n && posted < n) {
			/* every send in flight or landed: now the receives */
			while (posted < n && posted - got < WINDOW) {
				struct slot *s = &rx[posted % WINDOW];

				memset(s->buf, POISON, MAX_MSG + 64);
				s->msg = (uint64_t) posted;
				RETRY(fi_trecv(b.s.ep, s->buf, MAX_MSG, NULL,
					       FI_ADDR_UNSPEC, 0x5, 0, s));
				posted++;
			}
		}
		if (done_tx < sent) {
			pump();
			for (i = 0; i < a.n; i++) {
				if (a.q[i].e.op_context ==
				    &tx[done_tx % WINDOW]) {
					struct entry e = wait_ctx(&a,
						&tx[done_tx % WINDOW]);

					if (e.err)
						die("send %d: error %d",
						    done_tx, e.err);
					done_tx++;
					i = -1;
				}
			}
		}
		if (got < posted) {
			struct slot *s = &rx[got % WINDOW];
			struct entry e;
			long where;

			pump();
			if (unexpected && sent < n)
				continue;
			e = wait_ctx(&b, s);
			len = size_of(&x);
			where = e.err ? 0 : bad_byte(s->buf, s->msg, len,
						     MAX_MSG + 64);
			if (e.err || e.e.len != len || e.e.data != s->msg ||
			    e.e.tag != 0x5 || where || e.src != b.peer ||
			    !(e.e.flags & FI_REMOTE_CQ_DATA)) {
				if (bad++ < 5)
					printf("receive %lu: err %d, len %zu "
					       "(of %zu), data %lu, tag %lx, "
					       "src %lu, byte %ld\n",
					       (unsigned long) s->msg, e.err,
					       e.e.len, len,
					       (unsigned long) e.e.data,
					       (unsigned long) e.e.tag,
					       (unsigned long) e.src, where);
			}
			got++;
		}
	}
	while (done_tx < n) {
		struct entry e = wait_ctx(&a, &tx[done_tx % WINDOW]);

		if (e.err)
			die("send %d: error %d", done_tx, e.err);
		done_tx++;
	}
	check(!bad, "%s stream of %d tagged sends, 0 B to 1 MiB: every "
	      "receive whole, in order, its data and source (%d bad)",
	      unexpected ? "unexpected" : "preposted", n, bad);
	check(done_tx == n, "%d send completions", done_tx);
	for (i = 0; i < WINDOW; i++) {
		free(rx[i].buf);
		free(tx[i].buf);
	}
}

/* ---- matching ----------------------------------------------------------- */

static void send_tagged(size_t len, uint64_t msg, uint64_t tag, void *ctx)
{
	static uint8_t buf[8][65536];
	static int turn;
	uint8_t *p = buf[turn++ % 8];

	fill(p, msg, len);
	RETRY(fi_tsenddata(a.s.ep, p, len, NULL, msg, a.peer, tag, ctx));
	if (wait_ctx(&a, ctx).err)
		die("send of message %lu failed", (unsigned long) msg);
}


/*
 * Sends of 3 iovs into receives of 4, cut elsewhere: eager (300 B) and
 * segmented (13000 B: 8 KiB segments end inside iovs), the receive posted
 * first and after (taken from the unexpected store); every byte checked
 * through the receive's iovs, and the poison past them.
 */
static void iov_one(uint64_t msg, size_t len, bool unexpected)
{
	static uint8_t sbuf[13000], rb[13000 + 64];
	size_t scut[3] = { len / 7, len / 2, len - len / 7 - len / 2 };
	size_t rcut[4] = { len / 3 + 1, 5, len / 4, 0 };
	struct iovec siov[3], riov[4];
	size_t off = 0, i;
	int sc, rc;
	struct entry e;

	rcut[3] = len + 32 - rcut[0] - rcut[1] - rcut[2];
	fill(sbuf, msg, len);
	for (i = 0; i < 3; off += scut[i], i++)
		siov[i] = (struct iovec) { sbuf + off, scut[i] };
	memset(rb, POISON, sizeof(rb));
	for (off = 0, i = 0; i < 4; off += rcut[i], i++)
		riov[i] = (struct iovec) { rb + off, rcut[i] };
	struct fi_msg_tagged sm = { .msg_iov = siov, .iov_count = 3,
				    .addr = a.peer, .tag = 0x50, .context = &sc,
				    .data = msg };
	struct fi_msg_tagged rm = { .msg_iov = riov, .iov_count = 4,
				    .addr = FI_ADDR_UNSPEC, .tag = 0x50,
				    .context = &rc };
	if (unexpected) {
		RETRY(fi_tsendmsg(a.s.ep, &sm, FI_REMOTE_CQ_DATA |
						FI_COMPLETION));
		check(!wait_ctx(&a, &sc).err, "iov send %lu", (unsigned long) msg);
	}
	RETRY(fi_trecvmsg(b.s.ep, &rm, FI_COMPLETION));
	if (!unexpected) {
		RETRY(fi_tsendmsg(a.s.ep, &sm, FI_REMOTE_CQ_DATA |
						FI_COMPLETION));
		check(!wait_ctx(&a, &sc).err, "iov send %lu", (unsigned long) msg);
	}
	e = wait_ctx(&b, &rc);
	long bad = bad_byte(rb, msg, len, len + 32);
	check(!e.err && e.e.len == len && e.e.data == msg && !bad,
	      "%zu B in 3 iovs into 4%s: len %zu, data %lu, bad byte %ld (0: none)",
	      len, unexpected ? ", unexpected" : "", e.e.len,
	      (unsigned long) e.e.data, bad);
}

static void iovs(void)
{
	iov_one(4001, 300, false);
	iov_one(4002, 13000, false);
	iov_one(4003, 300, true);
	iov_one(4004, 13000, true);
}

static uint8_t rbuf[4][70000];

static struct entry recv_tagged(int i, size_t room, uint64_t tag,
				uint64_t ignore, uint64_t flags, void *ctx)
{
	struct iovec iov = { rbuf[i], room };
	struct fi_msg_tagged m = { .msg_iov = &iov, .iov_count = 1,
				   .addr = FI_ADDR_UNSPEC, .tag = tag,
				   .ignore = ignore, .context = ctx };

	memset(rbuf[i], POISON, sizeof(rbuf[i]));
	RETRY(fi_trecvmsg(b.s.ep, &m, flags));
	return wait_ctx(&b, ctx);
}

static bool holds(const struct entry *e, int i, uint64_t msg, size_t len,
		  uint64_t tag)
{
	return !e->err && e->e.len == len && e->e.data == msg &&
	       e->e.tag == tag && !bad_byte(rbuf[i], msg, len, len + 16);
}

static void tags(void)
{
	int c1, c2, c3, r1, r2, r3;
	struct entry e;

	send_tagged(100, 1001, 0x1, &c1);
	send_tagged(20000, 1002, 0x2, &c2);
	e = recv_tagged(0, 65536, 0x2, 0, 0, &r2);
	check(holds(&e, 0, 1002, 20000, 0x2), "a receive of tag 2 takes the "
	      "later message of tag 2");
	e = recv_tagged(1, 65536, 0x1, 0, 0, &r1);
	check(holds(&e, 1, 1001, 100, 0x1), "then tag 1 the earlier one");
	send_tagged(300, 1003, 0x13, &c3);
	e = recv_tagged(2, 65536, 0x10, 0xf, 0, &r3);
	check(holds(&e, 2, 1003, 300, 0x13), "ignore bits: 0x10/0xf takes "
	      "tag 0x13");
}

static void truncation(void)
{
	int c1, c2, r1, r2;
	struct entry e;

	send_tagged(10000, 2001, 0x20, &c1);
	e = recv_tagged(0, 4000, 0x20, 0, 0, &r1);
	check(e.err == FI_ETRUNC && e.olen == 6000 && e.e.len == 4000 &&
	      !bad_byte(rbuf[0], 2001, 4000, 4000 + 16),
	      "10000 B into 4000: FI_ETRUNC, olen %zu, len %zu, the first "
	      "4000 bytes and no more", e.olen, e.e.len);
	send_tagged(100, 2002, 0x21, &c2);
	e = recv_tagged(1, 50, 0x21, 0, 0, &r2);
	check(e.err == FI_ETRUNC && e.olen == 50 && e.e.len == 50,
	      "100 B into 50: FI_ETRUNC, olen %zu", e.olen);
}

/* FI_PEEK until the message has arrived (a send's completion says the
 * core took it, not that it is here yet) */
static struct entry peek_arrived(int i, uint64_t tag, uint64_t flags,
				 void *ctx)
{
	double end = now() + TIMEOUT_S;
	struct entry e;

	do
		e = recv_tagged(i, 65536, tag, 0, FI_PEEK | flags, ctx);
	while (e.err == FI_ENOMSG && now() < end);
	return e;
}

static void peek_claim_discard(void)
{
	int c1, c2, c3, p1, p2, p3, p4, d1, r1;
	struct entry e;

	send_tagged(3000, 3001, 0x30, &c1);
	e = recv_tagged(0, 65536, 0x31, 0, FI_PEEK, &p1);
	check(e.err == FI_ENOMSG, "FI_PEEK of a tag not sent: FI_ENOMSG");
	e = peek_arrived(0, 0x30, 0, &p2);
	check(!e.err && e.e.len == 3000 && e.e.data == 3001,
	      "FI_PEEK finds it: len %zu, data %lu", e.e.len,
	      (unsigned long) e.e.data);
	e = recv_tagged(0, 65536, 0x30, 0, FI_PEEK | FI_CLAIM, &p3);
	check(!e.err && e.e.len == 3000, "FI_PEEK | FI_CLAIM");
	e = recv_tagged(1, 65536, 0x30, 0, FI_PEEK, &p4);
	check(e.err == FI_ENOMSG, "a claimed message is not peeked again");
	e = recv_tagged(0, 65536, 0x30, 0, FI_CLAIM, &p3);
	check(holds(&e, 0, 3001, 3000, 0x30), "FI_CLAIM takes the claimed "
	      "message");
	send_tagged(40000, 3002, 0x32, &c2);
	e = peek_arrived(0, 0x32, FI_DISCARD, &d1);
	check(!e.err && e.e.len == 40000, "FI_PEEK | FI_DISCARD");
	send_tagged(500, 3003, 0x32, &c3);
	e = recv_tagged(1, 65536, 0x32, 0, 0, &r1);
	check(holds(&e, 1, 3003, 500, 0x32), "the discarded message is gone: "
	      "the next of its tag comes");
}

static void multi_recv_run(void);

static void multi_recv(void)
{
	if (!(b.s.info->caps & FI_MULTI_RECV)) {
		printf("skip FI_MULTI_RECV: not offered here\n");
		return;
	}
	multi_recv_run();
}

static void multi_recv_run(void)
{
	static uint8_t buf[65536];
	size_t min = 16384, off;
	struct iovec iov = { buf, sizeof(buf) };
	struct fi_msg m = { .msg_iov = &iov, .iov_count = 1,
			    .addr = FI_ADDR_UNSPEC, .context = &min };
	static uint8_t out[5][10000];
	int ctx[5], bad = 0, i;
	struct entry e;

	CHK(fi_setopt(&b.s.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV,
		      &min, sizeof(min)));
	memset(buf, POISON, sizeof(buf));
	RETRY(fi_recvmsg(b.s.ep, &m, FI_MULTI_RECV));
	for (i = 0; i < 5; i++) {
		fill(out[i], 4000 + i, sizeof(out[i]));
		RETRY(fi_senddata(a.s.ep, out[i], sizeof(out[i]), NULL,
				  4000 + i, a.peer, &ctx[i]));
	}
	/* segmented messages complete as their last segment lands, not
	 * in the order they took their place: each is checked where its
	 * number says it lies, and the buffer's last completion says it
	 * is released */
	for (i = 0; i < 5; i++) {
		uint64_t k;

		e = wait_ctx(&b, &min);
		k = e.e.data - 4000;
		off = (size_t) k * sizeof(out[0]);
		if (e.err || k >= 5 || e.e.len != sizeof(out[0]) ||
		    e.e.buf != buf + off ||
		    bad_byte(buf + off, 4000 + k, sizeof(out[0]),
			     sizeof(out[0])) ||
		    !!(e.e.flags & FI_MULTI_RECV) != (i == 4)) {
			printf("multi-receive %d: err %d len %zu buf +%ld "
			       "data %lu flags %lx\n", i, e.err, e.e.len,
			       (long) ((uint8_t *) e.e.buf - buf),
			       (unsigned long) e.e.data,
			       (unsigned long) e.e.flags);
			bad++;
		}
	}
	for (i = 0; i < 5; i++)
		if (wait_ctx(&a, &ctx[i]).err)
			bad++;
	check(!bad, "FI_MULTI_RECV: 5 messages of 10000 B at their offsets, "
	      "FI_MULTI_RECV on the fifth (less than 16384 left)");
}

static void cancel(void)
{
	int r1;
	struct entry e;

	CHK(fi_trecv(b.s.ep, rbuf[0], 100, NULL, FI_ADDR_UNSPEC, 0x99, 0,
		     &r1));
	CHK(fi_cancel(&b.s.ep->fid, &r1));
	e = wait_ctx(&b, &r1);
	check(e.err == FI_ECANCELED, "fi_cancel: FI_ECANCELED (%d)", e.err);
	check(fi_cancel(&b.s.ep->fid, &r1) == -FI_ENOENT,
	      "fi_cancel again: -FI_ENOENT");
}

/*
 * A sender the receiver has not inserted (fi_unexpected_msg's exchange):
 * its first message goes to an undirected receive, with no source; the
 * second, unexpected by then, to a directed receive once the receiver has
 * inserted it (FI_DIRECTED_RECV names the sender from then on).
 */
static void late_insert(void)
{
	static uint8_t sbuf[2][256];
	char nb[1024], nc[1024];
	size_t lb = sizeof(nb), lc = sizeof(nc);
	fi_addr_t c_to_b, b_to_c;
	int s1, s2, r1, r2;
	struct entry e;
	struct iovec iov = { rbuf[1], 65536 };
	struct fi_msg_tagged m = { .msg_iov = &iov, .iov_count = 1,
				   .tag = 0x77, .context = &r2 };

	open_end(&c);
	c_open = true;
	CHK(fi_getname(&b.s.ep->fid, nb, &lb));
	CHK(fi_getname(&c.s.ep->fid, nc, &lc));
	if (fi_av_insert(c.s.av, nb, 1, &c_to_b, 0, NULL) != 1)
		die("fi_av_insert");
	fill(sbuf[0], 2001, 200);
	fill(sbuf[1], 2002, 200);
	RETRY(fi_tsenddata(c.s.ep, sbuf[0], 200, NULL, 2001, c_to_b, 0x77,
			   &s1));
	RETRY(fi_tsenddata(c.s.ep, sbuf[1], 200, NULL, 2002, c_to_b, 0x77,
			   &s2));
	e = recv_tagged(0, 65536, 0x77, 0, 0, &r1);
	check(holds(&e, 0, 2001, 200, 0x77) && e.src == FI_ADDR_NOTAVAIL,
	      "a sender not inserted: its message, no source (%lu)",
	      (unsigned long) e.src);
	none_for(&b, &r2, 0.3);		/* the second arrives, unexpected */
	if (fi_av_insert(b.s.av, nc, 1, &b_to_c, 0, NULL) != 1)
		die("fi_av_insert");
	m.addr = b_to_c;
	memset(rbuf[1], POISON, sizeof(rbuf[1]));
	RETRY(fi_trecvmsg(b.s.ep, &m, 0));
	if (none_for(&b, &r2, 5)) {
		check(false, "a directed receive for a message that came "
		      "before its sender was inserted: none in 5 s");
		CHK(fi_cancel(&b.s.ep->fid, &r2));
	}
	e = wait_ctx(&b, &r2);
	check(e.err || (holds(&e, 1, 2002, 200, 0x77) && e.src == b_to_c),
	      "then inserted: a directed receive takes its unexpected "
	      "message, source %lu", (unsigned long) e.src);
	check(!wait_ctx(&c, &s1).err && !wait_ctx(&c, &s2).err,
	      "both sends complete");
	c_open = false;
	close_side(&c.s);
}

/* A plain core endpoint's tagged send to rail 0 of multirail end x. */
static void core_send_to(struct side *core, const struct end *x,
			 const void *buf, size_t len, uint64_t tag_bits)
{
	uint8_t name[4096];
	size_t namelen = sizeof(name);
	const struct mrl_addr_hdr *h = (const struct mrl_addr_hdr *) name;
	uint64_t m = core->info->ep_attr->mem_tag_format, tag;
	fi_addr_t to;
	int ctx;

	CHK(fi_getname(&x->s.ep->fid, name, &namelen));
	if (fi_av_insert(core->av, h + 1, 1, &to, 0, NULL) != 1)
		die("core fi_av_insert");
	for (int shift = 1; shift < 64; shift <<= 1)
		m |= m >> shift;
	tag = mrl_ctrl_tag_for(h + 1, h->rail_addrlen, m) | tag_bits;
	RETRY(fi_tsend(core->ep, buf, len, NULL, to, tag, &ctx));
	for (double end = now() + TIMEOUT_S;;) {
		struct fi_cq_tagged_entry e;

		pump();
		if (fi_cq_read(core->cq, &e, 1) == 1)
			break;
		if (now() > end)
			die("the core's send did not complete");
	}
}

/*
 * A packet in another's name: a plain core endpoint sends b a message
 * packet that claims to come from c, a peer b has inserted (its id, the
 * sequence number b waits for next).  b's core names the real sender,
 * which is not c: dropped, no receive completes, and c's own message,
 * sent after, takes that number and arrives.  Over lo rails only (the
 * plain endpoint is the core under multirail).
 */
static void forged_sender(void)
{
	static uint8_t pkt[sizeof(struct mrl_pkt_hdr) + 16], real[16];
	struct fi_multirail_msg_stats before, after;
	struct fi_multirail_ep_ops *ops;
	char nb[1024], nc[1024], core[128];
	size_t lb = sizeof(nb), lc = sizeof(nc);
	const struct mrl_addr_hdr *h = (const struct mrl_addr_hdr *) nc;
	struct mrl_pkt_hdr hdr = {
		.version = MRL_PKT_VERSION, .type = MRL_PKT_EAGER,
		.flags = MRL_PKT_F_TAGGED | MRL_PKT_F_DATA, .seq = 0,
		.tag = 0x66, .data = 3001, .len = 16,
	};
	struct side x;
	const char *fab = strchr(b.s.info->fabric_attr->name, '/');
	fi_addr_t c_to_b, b_to_c;
	int r1, s1;
	struct entry e;

	if (getenv("FI_PROVIDER") || !fab)
		return;
	snprintf(core, sizeof(core), "%s", fab + 1);
	open_side(&x, core, NULL, "lo", FI_MSG | FI_TAGGED);
	open_end(&c);
	c_open = true;
	CHK(fi_getname(&c.s.ep->fid, nc, &lc));
	if (fi_av_insert(b.s.av, nc, 1, &b_to_c, 0, NULL) != 1)
		die("fi_av_insert");
	hdr.src = mrl_fnv1a(h + 1, h->rail_addrlen);
	memcpy(pkt, &hdr, sizeof(hdr));
	fill(pkt + sizeof(hdr), 3001, 16);
	CHK(fi_open_ops(&b.s.ep->fid, FI_MULTIRAIL_EP_OPS, 0, (void **) &ops,
			NULL));
	CHK(ops->msg_stats(b.s.ep, 0, &before, sizeof(before)));
	memset(rbuf[0], POISON, sizeof(rbuf[0]));
	CHK(fi_trecv(b.s.ep, rbuf[0], 65536, NULL, FI_ADDR_UNSPEC, 0x66, 0,
		     &r1));
	core_send_to(&x, &b, pkt, sizeof(pkt), MRL_PKT_TAG);
	check(none_for(&b, &r1, 1.0), "a packet in an inserted peer's name "
	      "from another sender: no receive completes");
	CHK(ops->msg_stats(b.s.ep, 0, &after, sizeof(after)));
	check(after.dropped > before.dropped, "and it is counted dropped "
	      "(%lu, %lu before)", (unsigned long) after.dropped,
	      (unsigned long) before.dropped);
	CHK(fi_getname(&b.s.ep->fid, nb, &lb));
	if (fi_av_insert(c.s.av, nb, 1, &c_to_b, 0, NULL) != 1)
		die("fi_av_insert");
	fill(real, 3002, 16);
	RETRY(fi_tsenddata(c.s.ep, real, 16, NULL, 3002, c_to_b, 0x66, &s1));
	e = wait_ctx(&b, &r1);
	check(!e.err && e.e.len == 16 && e.e.data == 3002 && e.src == b_to_c &&
	      !bad_byte(rbuf[0], 3002, 16, 32), "the peer's own message then "
	      "arrives in its place (data %lu, source %lu)",
	      (unsigned long) e.e.data, (unsigned long) e.src);
	check(!wait_ctx(&c, &s1).err, "and its send completes");
	c_open = false;
	close_side(&c.s);
	close_side(&x);
}

static void injects(void)
{
	static uint8_t big[20000];
	int r1, r2, r3, c3;
	struct entry e;
	uint8_t p[64];

	fill(p, 5001, sizeof(p));
	RETRY(fi_tinjectdata(a.s.ep, p, sizeof(p), 5001, a.peer, 0x50));
	memset(p, 0, sizeof(p));	/* the caller's bytes again */
	e = recv_tagged(0, 65536, 0x50, 0, 0, &r1);
	check(holds(&e, 0, 5001, sizeof(p), 0x50), "fi_tinjectdata: bytes "
	      "copied at the call, its data");
	fill(p, 5002, 8);
	RETRY(fi_tinject(a.s.ep, p, 8, a.peer, 0x51));
	e = recv_tagged(1, 65536, 0x51, 0, 0, &r2);
	check(!e.err && e.e.len == 8 && !bad_byte(rbuf[1], 5002, 8, 24),
	      "fi_tinject");
	check(none_for(&a, NULL, 0.2), "no completion for the injects");
	/* FI_INJECT on a send over the eager size */
	{
		struct iovec iov = { big, sizeof(big) };
		struct fi_msg_tagged m = { .msg_iov = &iov, .iov_count = 1,
					   .addr = a.peer, .tag = 0x52,
					   .data = 5003, .context = &c3 };

		fill(big, 5003, sizeof(big));
		RETRY(fi_tsendmsg(a.s.ep, &m, FI_INJECT | FI_REMOTE_CQ_DATA |
				  FI_COMPLETION));
		memset(big, 0, sizeof(big));
		e = recv_tagged(2, 65536, 0x52, 0, 0, &r3);
		check(holds(&e, 2, 5003, sizeof(big), 0x52), "FI_INJECT of "
		      "20000 B: sent from a copy");
		check(!wait_ctx(&a, &c3).err, "and its completion");
	}
}

static void rails_used(void)
{
	struct fi_multirail_ep_ops *ops = NULL;
	struct fi_multirail_msg_stats st;
	int n, r, used = 0;

	if (fi_open_ops(&a.s.ep->fid, FI_MULTIRAIL_EP_OPS, 0,
			(void **) &ops, NULL) || !ops ||
	    ops->size < offsetof(struct fi_multirail_ep_ops, msg_stats) +
			sizeof(ops->msg_stats)) {
		check(0, "fi_multirail msg_stats");
		return;
	}
	n = ops->rail_count(a.s.ep);
	for (r = 0; r < n; r++) {
		memset(&st, 0, sizeof(st));
		CHK(ops->msg_stats(a.s.ep, r, &st, sizeof(st)));
		printf("rail %d: %lu packets, %lu bytes sent\n", r,
		       (unsigned long) st.packets_sent,
		       (unsigned long) st.bytes_sent);
		used += st.packets_sent > 0;
	}
	check(used == n, "packets on every rail: %d of %d", used, n);
}

int main(int argc, char **argv)
{
	int n = 300, opt;

	while ((opt = getopt(argc, argv, "n:s:")) != -1) {
		switch (opt) {
		case 'n':
			n = atoi(optarg);
			break;
		case 's':
			seed = strtoull(optarg, NULL, 0);
			break;
		default:
			die("usage: msg_test [-n messages] [-s seed]");
		}
	}
	printf("seed %lu\n", (unsigned long) seed);
	open_end(&a);
	open_end(&b);
	connect_ends();
	stream(n, false);
	stream(n / 3, true);
	tags();
	truncation();
	iovs();
	peek_claim_discard();
	multi_recv();
	cancel();
	late_insert();
	forged_sender();
	injects();
	rails_used();
	close_side(&a.s);
	close_side(&b.s);
	printf("%s\n", check_failures ? "FAIL" : "PASS");
	return check_failures ? 1 : 0;
}
