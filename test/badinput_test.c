/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Bad input: one multirail endpoint over loopback rails, writing to itself,
 * is handed garbage.  Each bad call must return a negative FI_E* value (not
 * -FI_EAGAIN, which is no verdict) or, for a bad remote key, give an error
 * completion: never success, a crash or a hang.  Covered:
 *   - fi_av_insert of random bytes, a changed magic byte, another version,
 *     a header with no rails, a rail count over MRL_MAX_RAILS, a partial
 *     address with several rails, a good address followed by a bad one, a
 *     NULL pointer: nothing may enter the AV, and the first good insert
 *     then gets index 0.  Headers that pass with bogus rails behind them
 *     (one byte short, twice the core's length, random bytes) each go to a
 *     scratch AV, which must still take a good address afterwards.
 *     fi_av_straddr of good and bad addresses, and into 8 bytes.
 *   - fi_write/fi_read to an unknown fi_addr; to an unknown remote key
 *     (an error at post, or an error completion within 10 s), also with
 *     FI_DELIVERY_COMPLETE;
 *   - zero-length fi_write/fi_read: no crash, and once posted exactly one
 *     completion, no byte moved;
 *   - an op over max_msg_size, a remote iov shorter than the local data,
 *     iov_limit + 1 local iovs, rma_iov_limit + 1 remote iovs, a NULL desc
 *     when FI_MR_LOCAL is required, NULL iov arrays (in a child process);
 *   - fi_mr_reg of 0 bytes or of a NULL buffer: reported, not judged;
 *   - fi_write, fi_writedata, fi_read on an endpoint bound but not
 *     enabled: -FI_EOPBADSTATE.
 * An error entry is read into the room an API 1.17 application has for
 * one (no src_addr, which libfabric 1.20's headers added), with a guard
 * behind it that must stay untouched.
 * No stray completion may follow a refused call, a valid fi_write of random
 * bytes into a poisoned buffer must land intact before and after the bad
 * cases, and every fi_close must return 0.  Prints one line per case,
 * "ok <case>: <ret> <fi_strerror>", and exits 1 at the first failure.
 * One limitation is reported, not failed: "LIMITATION <case>" (below).
 * BADINPUT_SEED replays a run.
 * Environment: FI_PROVIDER_PATH, FI_MULTIRAIL_RAILS (badinput.sh sets them).
 */
#include <ctype.h>
#include <stddef.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_atomic.h>

#include "util.h"

#include "mrl.h"	/* struct mrl_addr_hdr, MRL_ADDR_*, MRL_MAX_RAILS */

#define POISON		0xA5
#define TIMEOUT_S	10
#define HALF		65536	/* buf: local data, then the target */
#define MAX_IOVS	64

static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_av *av;
static struct fid_cq *cq;
static struct fid_ep *ep;
static struct fid_mr *mr;
static char *buf;
static void *desc;
static uint64_t key, raddr;	/* the target half, as the peer names it */
static fi_addr_t self;
static uint8_t name[1024];
static size_t namelen;
static char ctx;
static uint64_t rng;

/* A provider bug: the test fails. */
static void known_bug(const char *what, const char *fmt, ...)
{
	va_list ap;

	printf("FAIL: %s: ", what);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	exit(1);
}

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void fill_random(void *p, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		((uint8_t *) p)[i] = (uint8_t) rnd();
}

static void ok(const char *what, long ret)
{
	printf("ok %s: %ld %s\n", what, ret,
	       ret > 0 ? "" : fi_strerror((int) -ret));
	fflush(stdout);
}

/* A refused call leaves nothing in the CQ: 50 ms of progress, no entry. */
static void quiet(const char *what)
{
	struct fi_cq_data_entry e;
	struct fi_cq_err_entry err = { 0 };
	double end = now() + 0.05;
	ssize_t r;

	while (now() < end) {
		r = fi_cq_read(cq, &e, 1);
		if (r == -FI_EAVAIL) {
			fi_cq_readerr(cq, &err, 0);
			die("%s: stray error completion %d (%s)", what,
			    err.err, fi_strerror(err.err));
		}
		if (r != -FI_EAGAIN)
			die("%s: stray completion (fi_cq_read %zd)", what, r);
	}
}

/* The call must be refused with a negative FI_E* value, and that only. */
static void expect_neg(const char *what, ssize_t ret)
{
	if (ret >= 0)
		die("%s: returned %zd, a negative FI_E* value was due", what,
		    ret);
	if (ret == -FI_EAGAIN)
		die("%s: -FI_EAGAIN, no verdict on bad input", what);
	quiet(what);
	ok(what, ret);
}

/*
 * Wait for the completion of the op posted with c: 1 success, -1 error
 * completion (in *err), 0 nothing within TIMEOUT_S.
 */
/*
 * The room an application of API 1.17 (what open_objects asks), built
 * with that version's headers, has for an error entry: libfabric 1.20's
 * headers added src_addr after it.
 */
static size_t err_entry_room(void)
{
#if FI_MAJOR_VERSION > 1 || (FI_MAJOR_VERSION == 1 && FI_MINOR_VERSION >= 20)
	return offsetof(struct fi_cq_err_entry, src_addr);
#else
	return sizeof(struct fi_cq_err_entry);
#endif
}

/* fi_cq_readerr into an entry of that size, with a guard behind it. */
static ssize_t readerr_guarded(struct fi_cq_err_entry *err)
{
	union {
		struct fi_cq_err_entry e;
		unsigned char b[sizeof(struct fi_cq_err_entry) + 32];
	} u;
	size_t room = err_entry_room(), i;
	ssize_t r;

	memset(&u, 0x5A, sizeof(u));
	u.e.err_data = NULL;
	u.e.err_data_size = 0;
	/* the provider's readerr as an application built with 1.17's
	 * headers reaches it: their fi_cq_readerr sets no src_addr */
	r = cq->ops->readerr(cq, &u.e, 0);
	for (i = room; i < sizeof(u); i++)
		if (u.b[i] != 0x5A)
			die("fi_cq_readerr wrote byte %zu of an API 1.17 "
			    "entry of %zu bytes", i, room);
	memset(err, 0, sizeof(*err));
	memcpy(err, &u.e, room);
	return r;
}

static int wait_comp(void *c, struct fi_cq_err_entry *err)
{
	struct fi_cq_data_entry e;
	double end = now() + TIMEOUT_S;
	ssize_t r;

	for (;;) {
		r = fi_cq_read(cq, &e, 1);
		if (r == 1) {
			if (e.op_context != c)
				die("completion of a foreign context %p",
				    e.op_context);
			return 1;
		}
		if (r == -FI_EAVAIL) {
			r = readerr_guarded(err);
			if (r != 1)
				die("fi_cq_readerr: %zd", r);
			if (err->op_context != c)
				die("error completion of a foreign context");
			return -1;
		}
		if (r != -FI_EAGAIN)
			die("fi_cq_read: %zd", r);
		if (now() > end)
			return 0;
	}
}

/* Post, retrying -FI_EAGAIN (resources) with progress for TIMEOUT_S. */
#define POST(call) ({							\
	double _end = now() + TIMEOUT_S;				\
	ssize_t _r;							\
	while ((_r = (call)) == -FI_EAGAIN && now() < _end)		\
		fi_cq_read(cq, NULL, 0);				\
	_r;								\
})

static void open_objects(void)
{
	struct fi_info *hints = fi_allocinfo();
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_DATA,
				      .size = 1024 };
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE, .count = 1 };

	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_RMA | FI_ATOMIC;
	hints->mode = FI_CONTEXT;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
				      FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup("multirail");
	/* atomics pass through to the core: efa's are not emulated */
	if (fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info)) {
		hints->caps &= ~FI_ATOMIC;
		CHK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints,
			       &info));
		printf("the core has no atomics: atomic cases skipped\n");
	}
	fi_freeinfo(hints);
	if (!strstr(info->fabric_attr->prov_name, "multirail"))
		die("got provider %s", info->fabric_attr->prov_name);
	/* fabtests take FI_AV_TABLE as "my one peer is fi_addr 0" */
	if (info->domain_attr->av_type != FI_AV_UNSPEC)
		die("av_type %d offered unasked, FI_AV_UNSPEC due",
		    info->domain_attr->av_type);
	CHK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHK(fi_domain(fabric, info, &domain, NULL));
	CHK(fi_av_open(domain, &av_attr, &av, NULL));
	CHK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHK(fi_endpoint(domain, info, &ep, NULL));
	CHK(fi_ep_bind(ep, &av->fid, 0));
	CHK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHK(fi_enable(ep));
	namelen = sizeof(name);
	CHK(fi_getname(&ep->fid, name, &namelen));
	if (namelen < sizeof(struct mrl_addr_hdr))
		die("fi_getname: %zu bytes", namelen);
}

static void register_buf(void)
{
	buf = aligned_alloc(4096, 2 * HALF);
	CHK(fi_mr_reg(domain, buf, 2 * HALF, FI_READ | FI_WRITE |
		      FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 1, 0, &mr, NULL));
	desc = fi_mr_desc(mr);
	key = fi_mr_key(mr);
	raddr = (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ?
		(uintptr_t) (buf + HALF) : HALF;
	printf("%s rails, addr %zu bytes, tx iov_limit %zu rma_iov_limit %zu "
	       "max_msg_size %zu mr_mode 0x%lx\n",
	       getenv("FI_MULTIRAIL_RAILS") ? getenv("FI_MULTIRAIL_RAILS") :
	       "default", namelen, info->tx_attr->iov_limit,
	       info->tx_attr->rma_iov_limit, info->ep_attr->max_msg_size,
	       (unsigned long) info->domain_attr->mr_mode);
}

/* ---- address vector ---------------------------------------------------- */

static void av_must_be_empty(struct fid_av *a, const char *what)
{
	uint8_t tmp[1024];
	size_t len = sizeof(tmp);

	if (fi_av_lookup(a, 0, tmp, &len) >= 0)
		die("%s: the AV holds an entry after a refused insert", what);
}

/* Returns 0 (fi_addr FI_ADDR_NOTAVAIL) or < 0, and the AV stays empty. */
static void av_refused(struct fid_av *a, const char *what, int ret,
		       fi_addr_t fa)
{
	if (ret > 0)
		die("%s: fi_av_insert inserted %d (fi_addr %lu)", what, ret,
		    (unsigned long) fa);
	if (ret == 0 && fa != FI_ADDR_NOTAVAIL)
		die("%s: 0 inserted but fi_addr %lu", what,
		    (unsigned long) fa);
	if (ret == -FI_EAGAIN)
		die("%s: -FI_EAGAIN, no verdict on bad input", what);
	av_must_be_empty(a, what);
	ok(what, ret);
}

static void av_bad(const char *what, const void *addr, size_t count)
{
	fi_addr_t fa[2] = { 777, 777 };

	av_refused(av, what, fi_av_insert(av, addr, count, fa, 0, NULL),
		   fa[0]);
}

/*
 * A header that passes with bogus rail addresses behind it reaches the
 * rails' core AVs.  Each goes to a scratch AV of its own, where a valid
 * address must still go in afterwards, at index 0.  An insert that
 * succeeds, or a valid one refused after it (the refused address spoiled
 * a rail's core AV), is a known bug.
 */
static void av_bad_rails(const char *what, const void *addr)
{
	struct fi_av_attr attr = { .type = FI_AV_TABLE };
	struct fid_av *scratch;
	fi_addr_t fa = 777;
	char then[256];
	int ret;

	CHK(fi_av_open(domain, &attr, &scratch, NULL));
	ret = fi_av_insert(scratch, addr, 1, &fa, 0, NULL);
	if (ret > 0)
		known_bug(what, "inserted %d (fi_addr %lu)", ret,
			  (unsigned long) fa);
	else
		av_refused(scratch, what, ret, fa);
	snprintf(then, sizeof(then), "%s, then a valid insert", what);
	fa = 777;
	ret = fi_av_insert(scratch, name, 1, &fa, 0, NULL);
	if (ret == 1 && fa == 0)
		ok(then, ret);
	else
		known_bug(then, "%d%s%s, fi_addr %lu: index 0 was due", ret,
			  ret < 0 ? " " : "", ret < 0 ? fi_strerror(-ret) : "",
			  (unsigned long) fa);
	CHK(fi_close(&scratch->fid));
}

/* A heap copy of our name, len bytes (zero padded), to be spoiled. */
static uint8_t *name_copy(size_t len)
{
	uint8_t *p = calloc(1, len);

	memcpy(p, name, len < namelen ? len : namelen);
	return p;
}

static struct mrl_addr_hdr *hdr_of(void *p)
{
	return p;
}

static void av_garbage(void)
{
	uint8_t *p = malloc(namelen);

	fill_random(p, namelen);
	if (hdr_of(p)->magic == MRL_ADDR_MAGIC)
		p[0] ^= 0xff;
	av_bad("av_insert random bytes", p, 1);
	free(p);

	p = name_copy(namelen);
	((uint8_t *) &hdr_of(p)->magic)[1] ^= 0x20;
	av_bad("av_insert magic byte changed", p, 1);
	free(p);

	p = name_copy(namelen);
	hdr_of(p)->version++;
	av_bad("av_insert other version", p, 1);
	free(p);
}

static void av_truncated(void)
{
	size_t hlen = sizeof(struct mrl_addr_hdr);
	uint8_t *p = name_copy(hlen);

	hdr_of(p)->nrails = 0;
	av_bad("av_insert header only (0 rails)", p, 1);
	free(p);

	p = name_copy(hlen);
	hdr_of(p)->rail_addrlen = 0;
	av_bad("av_insert header only (rail_addrlen 0)", p, 1);
	free(p);

	/* every rail address one byte short of the core's */
	p = name_copy(namelen);
	hdr_of(p)->rail_addrlen--;
	av_bad_rails("av_insert rail addresses truncated by 1", p);
	free(p);
}

static void av_bad_counts(void)
{
	struct mrl_addr_hdr *h = (void *) name;
	size_t len;
	uint8_t *p;

	p = name_copy(namelen);
	hdr_of(p)->nrails = MRL_MAX_RAILS + 1;
	av_bad("av_insert nrails MRL_MAX_RAILS+1", p, 1);
	free(p);

	p = name_copy(namelen);
	hdr_of(p)->nrails = 255;
	av_bad("av_insert nrails 255", p, 1);
	free(p);

	/* rails twice the core's length: rail 1 on is read from zeros */
	len = sizeof(*h) + (size_t) h->nrails * h->rail_addrlen * 2;
	p = name_copy(len);
	hdr_of(p)->rail_addrlen *= 2;
	av_bad_rails("av_insert rail_addrlen doubled (zero rails)", p);
	free(p);

	if (h->nrails < 2) {
		printf("skip av_insert random rail 1, partial with 2 rails: "
		       "1 rail here\n");
		return;
	}
	/* a right-sized rail 1 of random bytes: only the core can tell */
	p = name_copy(namelen);
	fill_random(p + sizeof(*h) + h->rail_addrlen, h->rail_addrlen);
	av_bad_rails("av_insert rail 1 address random bytes", p);
	free(p);

	p = name_copy(namelen);
	hdr_of(p)->flags |= MRL_ADDR_PARTIAL;
	av_bad("av_insert partial flag with 2+ rails", p, 1);
	free(p);
}

static void av_mixed(void)
{
	uint8_t *p = malloc(2 * namelen);

	memcpy(p, name, namelen);
	fill_random(p + namelen, namelen);
	if (hdr_of(p + namelen)->magic == MRL_ADDR_MAGIC)
		p[namelen] ^= 0xff;
	av_bad("av_insert good then bad (count 2)", p, 2);
	free(p);

	av_bad("av_insert NULL address, count 1", NULL, 1);
}

static void check_str(const char *what, const char *s, size_t len)
{
	size_t i;

	if (!s || !*s)
		die("%s: no string", what);
	for (i = 0; s[i]; i++)
		if (!isprint((unsigned char) s[i]))
			die("%s: unprintable byte %zu", what, i);
	printf("ok %s: \"%s\" (%zu bytes wanted)\n", what, s, len);
}

static void av_straddr(void)
{
	char str[1024], small[16];
	uint8_t junk[64];
	const char *s;
	size_t len = sizeof(str);

	s = fi_av_straddr(av, name, str, &len);
	check_str("av_straddr valid address", s, len);

	fill_random(junk, sizeof(junk));
	junk[0] ^= 0xff;
	len = sizeof(str);
	s = fi_av_straddr(av, junk, str, &len);
	check_str("av_straddr garbage", s, len);

	memset(small, 'Z', sizeof(small));
	len = 8;
	s = fi_av_straddr(av, name, small, &len);
	if (memchr(small, '\0', 8) == NULL || small[8] != 'Z' ||
	    small[15] != 'Z')
		die("av_straddr into 8 bytes: wrote past them or no NUL");
	if (len <= 8)
		die("av_straddr into 8 bytes: *len %zu, the size due", len);
	check_str("av_straddr into 8 bytes", s, len);
}

static void av_insert_self(void)
{
	uint8_t tmp[1024];
	size_t len = sizeof(tmp);
	int ret;

	self = 777;
	ret = fi_av_insert(av, name, 1, &self, 0, NULL);
	if (ret != 1 || self != 0)
		die("valid av_insert after the bad ones: %d, fi_addr %lu "
		    "(index 0 due)", ret, (unsigned long) self);
	ok("av_insert valid (index 0)", ret);
	if (fi_av_lookup(av, 1, tmp, &len) >= 0)
		die("fi_av_lookup(1) found an entry: the AV holds 2");
	len = sizeof(tmp);
	CHK(fi_av_lookup(av, 0, tmp, &len));
	if (len != namelen || memcmp(tmp, name, len))
		die("fi_av_lookup(0) gives another address");
}

static void av_cases(void)
{
	av_garbage();
	av_truncated();
	av_bad_counts();
	av_mixed();
	av_straddr();
	av_insert_self();
}

/* ---- RMA ---------------------------------------------------------------- */

static size_t count_not(const char *p, size_t len, uint8_t v)
{
	size_t i, n = 0;

	for (i = 0; i < len; i++)
		n += (uint8_t) p[i] != v;
	return n;
}

/* Random bytes into the poisoned target, at an odd offset; all checked. */
static void valid_write(const char *what)
{
	size_t off = 61, len = HALF - 200, bad;
	struct fi_cq_err_entry err;
	char *tgt = buf + HALF;
	ssize_t ret;
	int c;

	memset(tgt, POISON, HALF);
	fill_random(buf, len);
	ret = POST(fi_write(ep, buf, len, desc, self, raddr + off, key, &ctx));
	if (ret)
		die("%s: fi_write %zd (%s)", what, ret, fi_strerror(-ret));
	c = wait_comp(&ctx, &err);
	if (c != 1)
		die("%s: %s", what, c ? fi_strerror(err.err) : "timeout");
	bad = count_not(tgt, off, POISON) +
	      count_not(tgt + off + len, HALF - off - len, POISON);
	if (memcmp(tgt + off, buf, len))
		die("%s: the bytes written differ", what);
	if (bad)
		die("%s: %zu bytes outside the target changed", what, bad);
	quiet(what);
	ok(what, ret);
}

/*
 * Found by stock fabtests: fi_av_xfer removes and re-inserts a peer (the
 * old handle must be refused, the new one must work); fi_poll closes an
 * endpoint that never had an AV (libfabric 1.17's rxm crashed under it).
 */
static void av_reinsert(void)
{
	fi_addr_t again = 777, old = self;
	int ret;

	CHK(fi_av_remove(av, &self, 1, 0));
	expect_neg("write to a removed fi_addr",
		   fi_write(ep, buf, 64, desc, old, raddr, key, &ctx));
	ret = fi_av_insert(av, name, 1, &again, 0, NULL);
	if (ret != 1 || again == FI_ADDR_NOTAVAIL || again == old)
		die("re-insert after remove: %d, fi_addr %lu", ret,
		    (unsigned long) again);
	ok("av_insert again after fi_av_remove", ret);
	self = again;
	valid_write("valid write to the re-inserted fi_addr");
}

/*
 * fi_poll reports the CQ once a completion waits there (fabtests' fi_poll).
 * libfabric 2.x deprecates poll sets but keeps them; we still serve them.
 */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void poll_set(void)
{
	struct fi_poll_attr attr = { 0 };
	struct fi_cq_err_entry err;
	struct fid_poll *ps;
	void *got[4];
	double end;
	int n = 0;

	CHK(fi_poll_open(domain, &attr, &ps));
	CHK(fi_poll_add(ps, &cq->fid, 0));
	expect_neg("fi_poll_add of an endpoint", fi_poll_add(ps, &ep->fid, 0));
	if (fi_poll(ps, got, 4) != 0)
		die("fi_poll on an idle CQ reported it");
	CHK(POST(fi_write(ep, buf, 64, desc, self, raddr, key, &ctx)));
	for (end = now() + 10; n == 0 && now() < end;)
		n = fi_poll(ps, got, 4);
	if (n != 1 || got[0] != cq->fid.context)
		die("fi_poll: %d, context %p (the CQ's is %p)", n,
		    n > 0 ? got[0] : NULL, cq->fid.context);
	if (wait_comp(&ctx, &err) != 1)
		die("fi_poll said ready, the completion did not come");
	CHK(fi_poll_del(ps, &cq->fid, 0));
	CHK(fi_close(&ps->fid));
	ok("fi_poll reports the CQ with a completion", n);
}
#pragma GCC diagnostic pop

struct eq_writer {
	struct fid_eq *eq;
	int delay_ms;
};

static void *write_later(void *arg)
{
	struct eq_writer *w = arg;
	struct fi_eq_entry entry = { .context = w };

	usleep(w->delay_ms * 1000);
	fi_eq_write(w->eq, FI_NOTIFY, &entry, sizeof(entry), 0);
	return NULL;
}

/* fi_eq_sread waits: its timeout on an empty EQ, an event written later. */
static void eq_sread(void)
{
	struct fi_eq_attr attr = { .wait_obj = FI_WAIT_UNSPEC };
	struct eq_writer w = { .delay_ms = 100 };
	struct fi_eq_entry entry;
	pthread_t thread;
	uint32_t event;
	double t0, dt;
	ssize_t r;

	CHK(fi_eq_open(fabric, &attr, &w.eq, NULL));
	t0 = now();
	r = fi_eq_sread(w.eq, &event, &entry, sizeof(entry), 300, 0);
	dt = now() - t0;
	if (r != -FI_EAGAIN || dt < 0.25 || dt > 5)
		die("fi_eq_sread on an empty EQ, 300 ms: %zd after %.3f s", r,
		    dt);
	ok("fi_eq_sread waits its timeout on an empty EQ", r);
	if (pthread_create(&thread, NULL, write_later, &w))
		die("pthread_create");
	t0 = now();
	r = fi_eq_sread(w.eq, &event, &entry, sizeof(entry), 5000, 0);
	dt = now() - t0;
	pthread_join(thread, NULL);
	if (r != sizeof(entry) || event != FI_NOTIFY || entry.context != &w ||
	    dt < 0.05 || dt > 4)
		die("fi_eq_sread of an event written 100 ms later: %zd after "
		    "%.3f s", r, dt);
	ok("fi_eq_sread wakes for an event written later", r);
	CHK(fi_close(&w.eq->fid));
}

/* ssize_t ops multirail lacks (fi_rx_size_left is deprecated on 2.x):
 * negative, not 2^32 - 38. */
static void size_left(void)
{
	expect_neg("rx_size_left", ep->ops->rx_size_left(ep));
	expect_neg("tx_size_left", ep->ops->tx_size_left(ep));
}

static void close_unbound_ep(void)
{
	struct fid_ep *lone;

	CHK(fi_endpoint(domain, info, &lone, NULL));
	CHK(fi_close(&lone->fid));
	ok("close an endpoint never bound to an AV", 0);
}

/* An endpoint not enabled: -FI_EOPBADSTATE, as libfabric's providers
 * answer, and nothing reaches the CQ. */
static void expect_badstate(const char *what, ssize_t ret)
{
	expect_neg(what, ret);
	if (ret != -FI_EOPBADSTATE)
		die("%s: %zd, -FI_EOPBADSTATE was due", what, ret);
}

/* Before fi_enable the small ops' fast path has nothing to post with;
 * the general way refuses the calls. */
static void ops_before_enable(void)
{
	struct fid_ep *lone;
	char *src = buf;

	CHK(fi_endpoint(domain, info, &lone, NULL));
	CHK(fi_ep_bind(lone, &av->fid, 0));
	CHK(fi_ep_bind(lone, &cq->fid, FI_TRANSMIT | FI_RECV));
	expect_badstate("fi_write before fi_enable",
			fi_write(lone, src, 8, desc, 0, raddr, key, &ctx));
	expect_badstate("fi_writedata before fi_enable",
			fi_writedata(lone, src, 8, desc, 7, 0, raddr, key,
				     &ctx));
	expect_badstate("fi_read before fi_enable",
			fi_read(lone, src, 8, desc, 0, raddr, key, &ctx));
	CHK(fi_close(&lone->fid));
}

static void unknown_addr(void)
{
	char *src = buf;

	expect_neg("write to unknown fi_addr 12345",
		   fi_write(ep, src, 64, desc, 12345, raddr, key, &ctx));
	expect_neg("read from unknown fi_addr 12345",
		   fi_read(ep, src, 64, desc, 12345, raddr, key, &ctx));
	expect_neg("write to FI_ADDR_NOTAVAIL",
		   fi_write(ep, src, 64, desc, FI_ADDR_NOTAVAIL, raddr, key,
			    &ctx));
	if (!(info->caps & FI_ATOMIC))
		return;
	expect_neg("atomic to unknown fi_addr 12345",
		   fi_atomic(ep, src, 1, desc, 12345, raddr, key, FI_UINT64,
			     FI_SUM, &ctx));
	expect_neg("fetch atomic from FI_ADDR_NOTAVAIL",
		   fi_fetch_atomic(ep, src, 1, desc, src + 8, desc,
				   FI_ADDR_NOTAVAIL, raddr, key, FI_UINT64,
				   FI_SUM, &ctx));
	expect_neg("inject atomic to unknown fi_addr 12345",
		   fi_inject_atomic(ep, src, 1, 12345, raddr, key, FI_UINT64,
				    FI_SUM));
	expect_neg("atomicv with 1 ioc and a NULL array",
		   fi_atomicv(ep, NULL, &desc, 1, self, raddr, key, FI_UINT64,
			      FI_SUM, &ctx));
	expect_neg("compare atomic with 99 result iocs",
		   fi_compare_atomicv(ep, NULL, NULL, 0, NULL, NULL, 0,
				      (struct fi_ioc *) src, &desc, 99, self,
				      raddr, key, FI_UINT64, FI_CSWAP, &ctx));
}

enum { KEY_WRITE, KEY_READ, KEY_WRITE_DC };

static ssize_t post_with_key(int how, uint64_t k)
{
	struct iovec iov = { buf, 4096 };
	struct fi_rma_iov rma = { raddr, 4096, k };
	struct fi_msg_rma msg = {
		.msg_iov = &iov, .desc = &desc, .iov_count = 1,
		.addr = self, .rma_iov = &rma, .rma_iov_count = 1,
		.context = &ctx,
	};

	switch (how) {
	case KEY_WRITE:
		return POST(fi_write(ep, buf, 4096, desc, self, raddr, k,
				     &ctx));
	case KEY_READ:
		return POST(fi_read(ep, buf, 4096, desc, self, raddr, k, &ctx));
	default:
		return POST(fi_writemsg(ep, &msg, FI_COMPLETION |
					FI_DELIVERY_COMPLETE));
	}
}

/*
 * A plain write completes, with the core's default semantics, once its
 * bytes left: tcp says success before the target refuses the key, and
 * multirail posts the first op with a key before the target has told it
 * whether the key exists.  That is reported as a limitation as long as
 * the target's bytes stay untouched; reads and delivery-complete writes
 * must give an error.
 */
static void key_success(const char *what, int how, uint64_t k)
{
	quiet(what);	/* the target's verdict, meanwhile */
	if (count_not(buf + HALF, HALF, POISON))
		die("%s (key 0x%lx): success, and the target's bytes changed",
		    what, (unsigned long) k);
	if (how != KEY_WRITE)
		die("%s (key 0x%lx): success completion", what,
		    (unsigned long) k);
	printf("LIMITATION %s: 0 posted, success completion (target bytes "
	       "untouched)\n", what);
}

/* An error at post, or an error completion: never a hang. */
static void bad_key(const char *what, int how, uint64_t k)
{
	struct fi_cq_err_entry err;
	const char *pstr;
	char pbuf[128];
	ssize_t ret;
	int c;

	memset(buf + HALF, POISON, HALF);
	fill_random(buf, 4096);
	ret = post_with_key(how, k);
	if (ret) {
		expect_neg(what, ret);
		return;
	}
	c = wait_comp(&ctx, &err);
	if (!c)
		die("%s (key 0x%lx): no completion in %d s", what,
		    (unsigned long) k, TIMEOUT_S);
	if (c == 1) {
		key_success(what, how, k);
		return;
	}
	if (!err.err)
		die("%s: error completion with err 0", what);
	if (how != KEY_READ && count_not(buf + HALF, HALF, POISON))
		die("%s: the target's bytes changed", what);
	quiet(what);
	/* the core's errno, decoded by the core; 0 where the error is ours */
	pstr = fi_cq_strerror(cq, err.prov_errno, err.err_data, pbuf,
			      sizeof(pbuf));
	if (!pstr || (err.prov_errno &&
		      !strcmp(pstr, "no provider-specific error")))
		die("%s: prov_errno %d decoded as \"%s\"", what,
		    err.prov_errno, pstr ? pstr : "(null)");
	printf("ok %s: 0 posted, error completion err %d %s (prov_errno "
	       "%d: %s)\n", what, err.err, fi_strerror(err.err),
	       err.prov_errno, pstr);
}

/* Atomics go whole to rail 0: an error at post or an error completion. */
static void bad_atomic_key(const char *what, uint64_t k)
{
	struct fi_cq_err_entry err;
	ssize_t ret;
	int c;

	memset(buf + HALF, POISON, HALF);
	memset(buf, 1, 8);
	ret = POST(fi_atomic(ep, buf, 1, desc, self, raddr, k, FI_UINT64,
			     FI_SUM, &ctx));
	if (ret) {
		expect_neg(what, ret);
		return;
	}
	c = wait_comp(&ctx, &err);
	if (c != -1)
		die("%s (key 0x%lx): %s", what, (unsigned long) k,
		    c ? "success completion" : "no completion");
	if (count_not(buf + HALF, HALF, POISON))
		die("%s: the target's bytes changed", what);
	quiet(what);
	printf("ok %s: 0 posted, error completion err %d %s\n", what,
	       err.err, fi_strerror(err.err));
}

static void unknown_keys(void)
{
	uint64_t k = rnd();

	if (k == key)
		k++;
	bad_key("write with key+777", KEY_WRITE, key + 777);
	bad_key("write with key+777 again", KEY_WRITE, key + 777);
	bad_key("read with key+777", KEY_READ, key + 777);
	bad_key("writemsg FI_DELIVERY_COMPLETE with key+777", KEY_WRITE_DC,
		key + 777);
	bad_key("write with a random key", KEY_WRITE, k);
	bad_key("read with a random key", KEY_READ, k);
	bad_key("writemsg FI_DELIVERY_COMPLETE with a random key",
		KEY_WRITE_DC, k);
	if (!(info->caps & FI_ATOMIC))
		return;
	bad_atomic_key("atomic with key+777", key + 777);
	bad_atomic_key("atomic with a random key", k);
}

/* Refused, or posted with exactly one completion; no byte moves. */
static void zero_len(const char *what, int read)
{
	struct fi_cq_err_entry err;
	ssize_t ret;
	int c;

	memset(buf, 0x11, HALF);
	memset(buf + HALF, POISON, HALF);
	ret = read ? POST(fi_read(ep, buf, 0, desc, self, raddr, key, &ctx)) :
		     POST(fi_write(ep, buf, 0, desc, self, raddr, key, &ctx));
	if (ret) {
		expect_neg(what, ret);
		return;
	}
	c = wait_comp(&ctx, &err);
	if (!c)
		die("%s: posted, no completion in %d s", what, TIMEOUT_S);
	quiet(what);
	if (count_not(buf + HALF, HALF, POISON) || count_not(buf, HALF, 0x11))
		die("%s: bytes changed", what);
	printf("ok %s: 0 posted, one %s completion%s%s\n", what,
	       c == 1 ? "success" : "error", c == 1 ? "" : " ",
	       c == 1 ? "" : fi_strerror(err.err));
}

static void oversized(void)
{
	size_t max = info->ep_attr->max_msg_size;
	struct iovec iov = { buf, 64 };
	struct fi_rma_iov rma = { raddr, 63, key };
	struct fi_msg_rma msg = {
		.msg_iov = &iov, .desc = &desc, .iov_count = 1,
		.addr = self, .rma_iov = &rma, .rma_iov_count = 1,
		.context = &ctx,
	};

	if (max < SIZE_MAX)
		expect_neg("write of max_msg_size + 1 bytes",
			   fi_write(ep, buf, max + 1, desc, self, raddr, key,
				    &ctx));
	else
		printf("skip write over max_msg_size: it is SIZE_MAX\n");
	expect_neg("writemsg 64 bytes into a 63-byte rma_iov",
		   fi_writemsg(ep, &msg, FI_COMPLETION));
	rma.len = 0;
	expect_neg("writemsg 64 bytes into a 0-byte rma_iov",
		   fi_writemsg(ep, &msg, FI_COMPLETION));
}

static void too_many_iovs(void)
{
	size_t n = info->tx_attr->iov_limit + 1, m =
		   info->tx_attr->rma_iov_limit + 1, i;
	struct iovec iov[MAX_IOVS];
	struct fi_rma_iov rma[MAX_IOVS];
	void *d[MAX_IOVS];
	struct fi_msg_rma msg = {
		.msg_iov = iov, .desc = d, .iov_count = 1,
		.addr = self, .rma_iov = rma, .context = &ctx,
	};

	for (i = 0; i < MAX_IOVS; i++) {
		iov[i] = (struct iovec) { buf + 8 * i, 8 };
		rma[i] = (struct fi_rma_iov) { raddr + 8 * i, 8, key };
		d[i] = desc;
	}
	if (n > MAX_IOVS)
		printf("skip writev of iov_limit + 1: iov_limit %zu\n", n - 1);
	else
		expect_neg("writev with iov_limit + 1 iovs",
			   fi_writev(ep, iov, d, n, self, raddr, key, &ctx));
	if (m > MAX_IOVS) {
		printf("skip writemsg of rma_iov_limit + 1: %zu\n", m - 1);
		return;
	}
	iov[0].iov_len = 8 * m;
	msg.rma_iov_count = m;
	expect_neg("writemsg with rma_iov_limit + 1 rma_iovs",
		   fi_writemsg(ep, &msg, FI_COMPLETION));
}

static void null_desc(void)
{
	if (!(info->domain_attr->mr_mode & FI_MR_LOCAL)) {
		printf("skip write with NULL desc: no FI_MR_LOCAL\n");
		return;
	}
	expect_neg("write with NULL desc under FI_MR_LOCAL",
		   fi_write(ep, buf, 64, NULL, self, raddr, key, &ctx));
	expect_neg("read with NULL desc under FI_MR_LOCAL",
		   fi_read(ep, buf, 64, NULL, self, raddr, key, &ctx));
}

/*
 * A NULL iov array with a count of 1.  The provider may crash on it, so
 * the call runs in a child, which neither progresses nor closes anything
 * (it shares the parent's sockets): death by a signal is a crash and
 * fails the test; a return is judged as any other.
 */
enum { NULL_WRITEV, NULL_READV, NULL_WRITEMSG, NULL_RMA_IOV };

static ssize_t post_null(int how)
{
	struct iovec iov = { buf, 64 };
	struct fi_rma_iov rma = { raddr, 64, key };
	struct fi_msg_rma msg = {
		.msg_iov = NULL, .desc = &desc, .iov_count = 1,
		.addr = self, .rma_iov = &rma, .rma_iov_count = 1,
		.context = &ctx,
	};

	switch (how) {
	case NULL_WRITEV:
		return fi_writev(ep, NULL, &desc, 1, self, raddr, key, &ctx);
	case NULL_READV:
		return fi_readv(ep, NULL, &desc, 1, self, raddr, key, &ctx);
	case NULL_WRITEMSG:
		return fi_writemsg(ep, &msg, FI_COMPLETION);
	default:
		msg.msg_iov = &iov;
		msg.rma_iov = NULL;
		return fi_writemsg(ep, &msg, FI_COMPLETION);
	}
}

/* The child's return value comes back through a pipe, not its exit code,
 * which valgrind's --error-exitcode may replace. */
static void null_iov_child(int fd, int how)
{
	ssize_t ret;

	signal(SIGSEGV, SIG_DFL);
	signal(SIGBUS, SIG_DFL);
	signal(SIGABRT, SIG_DFL);
	alarm(TIMEOUT_S);
	ret = post_null(how);
	if (write(fd, &ret, sizeof(ret)) != sizeof(ret))
		_exit(3);
	_exit(0);
}

static void null_iov(const char *what, int how)
{
	int fds[2], status, sig;
	ssize_t ret;
	pid_t pid;

	fflush(stdout);
	if (pipe(fds))
		die("pipe");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (!pid)
		null_iov_child(fds[1], how);
	close(fds[1]);
	if (read(fds[0], &ret, sizeof(ret)) == sizeof(ret)) {
		close(fds[0]);
		waitpid(pid, &status, 0);
		expect_neg(what, ret);
		return;
	}
	close(fds[0]);
	if (waitpid(pid, &status, 0) != pid)
		die("waitpid");
	if (!WIFSIGNALED(status))
		die("%s: the child exited with %d and no answer", what,
		    WEXITSTATUS(status));
	sig = WTERMSIG(status);
	if (sig == SIGALRM)
		die("%s: hang", what);
	known_bug(what, "crash, signal %d (%s)", sig, strsignal(sig));
}

static void null_iovs(void)
{
	null_iov("writev with a NULL iov array, count 1", NULL_WRITEV);
	null_iov("readv with a NULL iov array, count 1", NULL_READV);
	null_iov("writemsg with a NULL msg_iov, iov_count 1", NULL_WRITEMSG);
	null_iov("writemsg with a NULL rma_iov, rma_iov_count 1",
		 NULL_RMA_IOV);
}

static void rma_cases(void)
{
	unknown_addr();
	oversized();
	too_many_iovs();
	null_desc();
	null_iovs();
	unknown_keys();
	zero_len("write of 0 bytes", 0);
	zero_len("read of 0 bytes", 1);
}

/* ---- memory registration ------------------------------------------------ */

/* Either outcome is allowed; a registration made must close with 0. */
static void mr_odd(const char *what, const void *p, size_t len)
{
	struct fid_mr *m = NULL;
	int ret;

	ret = fi_mr_reg(domain, p, len, FI_READ | FI_WRITE | FI_REMOTE_READ |
			FI_REMOTE_WRITE, 0, 2, 0, &m, NULL);
	if (!ret && !m)
		die("%s: 0 returned and no MR", what);
	if (!ret)
		CHK(fi_close(&m->fid));
	printf("ok %s: %d %s%s\n", what, ret, fi_strerror(-ret),
	       ret ? "" : " (registered, closed)");
}

static void mr_cases(void)
{
	mr_odd("mr_reg 0 bytes", buf, 0);
	mr_odd("mr_reg NULL buffer, 4096 bytes", NULL, 4096);
	mr_odd("mr_reg NULL buffer, 0 bytes", NULL, 0);
}

static void expect_busy(const char *what, int ret)
{
	if (ret != -FI_EBUSY)
		die("%s: %d (%s), -FI_EBUSY was due", what, ret,
		    fi_strerror(-ret));
	ok(what, ret);
}

/*
 * Closing what is still in use is refused and changes nothing: the AV an
 * endpoint reads its peers from, the CQ it reports to, the domain under
 * all of them.  Then the right order closes everything.
 */
static void close_all(void)
{
	expect_busy("close an AV still bound", fi_close(&av->fid));
	expect_busy("close a CQ still bound", fi_close(&cq->fid));
	expect_busy("close a domain with objects open",
		    fi_close(&domain->fid));
	valid_write("valid write after the refused closes");
	CHK(fi_close(&ep->fid));
	CHK(fi_close(&mr->fid));
	expect_busy("close a domain with an AV and a CQ open",
		    fi_close(&domain->fid));
	CHK(fi_close(&av->fid));
	CHK(fi_close(&cq->fid));
	CHK(fi_close(&domain->fid));
	CHK(fi_close(&fabric->fid));
	fi_freeinfo(info);
	free(buf);
	printf("ok close ep, mr, av, cq, domain, fabric: 0\n");
}

int main(void)
{
	rng = (uint64_t) time(NULL) * 0x9E3779B97F4A7C15ull ^ getpid();
	if (getenv("BADINPUT_SEED"))
		rng = strtoull(getenv("BADINPUT_SEED"), NULL, 0);
	if (!rng)
		rng = 1;
	printf("seed 0x%lx (BADINPUT_SEED)\n", (unsigned long) rng);
	open_objects();
	register_buf();
	av_cases();
	valid_write("valid write before the bad cases");
	rma_cases();
	mr_cases();
	valid_write("valid write after the bad cases");
	av_reinsert();
	poll_set();
	eq_sread();
	size_left();
	close_unbound_ep();
	ops_before_enable();
	close_all();
	printf("PASS\n");
	return 0;
}
