/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Integration test: two processes (fork) over multirail, addresses and keys
 * exchanged over a socketpair.  The initiator writes (write, writev,
 * writedata) or reads random data of many sizes at odd offsets, with a
 * window of outstanding ops; the target poisons its buffer first and checks
 * every byte afterwards, and for writedata checks, at the moment it reads
 * each CQ entry, that the whole op's bytes are already there.
 *
 *   rma_test [-o write|writev|writedata|read|injectdata|all] [-S max_size]
 *            [-W window] (injectdata: fi_inject_writedata of the sizes up to
 *            inject_size, the source poisoned once it returns)
 *            [-R] (ask for FI_MR_RAW) [-n iterations of the writedata check]
 *            [-A] (every rail must have carried RMA bytes by the end)
 *            [-N ns_init,ns_target] (each side enters that network
 *            namespace, e.g. the emulated testbed's, after the fork)
 *            [-C] (exchange names of at most FI_NAME_MAX bytes, as Open MPI
 *            does, or RMA_NAME_MAX (aws-ofi-nccl: 56): multirail then
 *            hands out rail 0's address alone, and the control
 *            endpoint's as its difference where the whole does not fit)
 *            [-E VAR=VALUE] (the target's environment only)
 *            [-I] (writedata: fi_writemsg of two iovs)
 *            (the target checks a writedata's CQ entry: the whole
 *            write's len, FI_RMA | FI_REMOTE_WRITE: see wdata_entry_ok)
 *            [-L mask] (the rails, as a hex mask, that must carry RMA
 *            bytes; every other rail must carry none)
 *            [-F] (write, writev: the writes' completion is announced by
 *            a 0-byte fi_inject_writedata on rail 0, and the target
 *            checks every byte when its CQ entry arrives)
 *            [-H rail[:rejoin][:fence][:refused]] (that rail fails,
 *            through the caller's fault knobs: by the end it must have
 *            been taken out of service and its chunks re-issued
 *            elsewhere (:fence: the fault began under a fence, no chunk
 *            there; :refused: the core refuses every post there, no
 *            chunk is taken), and with :rejoin be back in service;
 *            every op must still succeed)
 *            [-X count] (write or writedata: stream count ops of -S
 *            bytes, -W in flight, delivery complete, each verified by the
 *            target after its completion, writedata's at its CQ entry
 *            too, exactly once;
 *            prints the bytes completed per second, wall-clock stamped;
 *            with -o send or tsend: count messages of seeded sizes from
 *            1 B to -S, one tag, -W in flight, each checked when its
 *            receive completes: length, CQ data, every byte, and that
 *            the j-th receive holds message j)
 *            [-J ms] (with -X: the target sleeps that long before its
 *            first progress, so the initiator's first posts meet
 *            connections not yet accepted, for longer than a short
 *            FI_MULTIRAIL_RAIL_TIMEOUT_MS: a late peer, not a failed
 *            rail, and every op must still succeed)
 *            [-Y count] (count 8-byte fi_write to distinct words,
 *            -W in flight, each reposted as soon as its completion is
 *            read, 32 entries a read: small ops fill the lowest rails and
 *            the reader's buffer, so progress must read the rails in
 *            turns; every word checked at the target, and every rail
 *            must have carried ops and had them all completed)
 *            [-G regions] (with -Y: the target's words in that many
 *            registrations, 2 to 8, each its own key; op i writes to
 *            registration i % regions, so every op's key differs from
 *            the last one's; once a round of one op to each key takes
 *            the fast path (the keys came back), at most one op in 16
 *            may take the general way
 *            (fi_multirail_ep_stats): a key change keeps the fast path,
 *            and so do refusals on one rail for the others' ops)
 *            [-V] (with -Y and -G: rail 0 fails, through the
 *            caller's fault knobs, under the ops to every registration
 *            but the last; once it is out of service the rest go, the
 *            last registration's among them, whose key was never asked
 *            for: the question goes on another rail, and those ops wait
 *            (-FI_EAGAIN) for its answer; every op must succeed)
 *            [-M] (as -V, but no key learned first: rail 0 fails under
 *            the first ops, whose keys for the other rails are still
 *            asked for; they wait for the answer instead of failing)
 *            [-B] (with -Y: no rail carries more than twice its
 *            share: the target's keys for the other rails came back
 *            early, a question the core refused included)
 *            [-D] (with -Y: the initiator's transmit default, set
 *            after fi_enable (FI_SETOPSFLAG), asks for delivery
 *            complete: every op must take the general way, which
 *            posts it so (fi_multirail_ep_stats))
 *            [-Z c|s|cs] (with -Y: c, a counter of writes and reads
 *            bound: it counts every op, and the words are read back
 *            too and checked; s, the CQ bound with
 *            FI_SELECTIVE_COMPLETION: even ops fi_write (fi_read),
 *            odd ones fi_writemsg (fi_readmsg) with FI_COMPLETION, and
 *            the CQ must hold exactly the odd ones; every entry once)
 *            [-P rounds] (-o write: rounds of -W plain, transmit-
 *            complete writes of -S bytes, then a 4-byte fi_send saying
 *            "done"; the target checks every byte of the round when that
 *            message arrives, its buffer poisoned before each round.  A
 *            send may fail (a rail lost completed writes); then its
 *            message must never arrive.  -o writedata: no send, the
 *            target checks each op's bytes when its CQ data arrives,
 *            once; -o read: the initiator reads what the target wrote
 *            for the round into a poisoned buffer and checks it when
 *            each read completes.  Prints each round's outcome
 *            and the writes' time, wall-clock stamped.  With
 *            MRL_ROUND_FAULT="R:CMD" (one a line) in the environment the
 *            initiator runs CMD (sh -c, in its namespace) once round R's
 *            writes have completed, before its send: a link that fails
 *            while their bytes may still sit in a socket)
 *            [-K] (the target is killed with SIGKILL after one op: every
 *            write posted before and after must complete, with an error
 *            once the death is seen, or be refused, within a bound)
 *   rma_test -o atomic [-W window]: sums, fetch-and-add, compare-and-swap
 *            (hit and miss), inject and atomic read on an array of
 *            uint64, results and the target's memory checked.
 * Environment: FI_PROVIDER_PATH, FI_MULTIRAIL_RAILS (set by the caller).
 */
#define _GNU_SOURCE	/* setns */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_ext_multirail.h>

#define POISON	0xA5
#define SLACK	4096
#define TIMEOUT_S 60

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_av *av;
static struct fid_ep *ep;
static struct fid_cq *cq, *rx_cq;	/* rx_cq: -Z's initiator */
static struct fid_cntr *cntr;		/* -Z's initiator */
static int selective;			/* -Z */
static int selective_cq, selective_cntr;	/* -Z s, -Z c */
static struct fid_mr *mr, *cmr;
static uint32_t key_regions;		/* -G */
static int tx_delivery_complete;	/* -D */
static int rails_balanced;		/* -B */
static int rail0_lost;			/* -V; 2: -M */
static struct fid_mr *region_mr[8];
static uint64_t region_addr[8], region_key[8];
static char cbuf[64];
static char rctx, sctx;
static int rctx_done;	/* the sync message came with the CQ data */
static struct fi_info *info;
static fi_addr_t peer;
static int sock;
static char *buf;
static size_t buf_size;
static uint64_t peer_addr, peer_key;
static const char *role = "?";
static struct fi_multirail_ep_ops *mrl_ops;
/* writedata's CQ data: as wide as the domain carries (efa: 4 bytes) */
static uint64_t data_mask = ~0ULL;	/* NULL over a bare core */

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "[%s] FAIL: ", role);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

#define CHK(call) do {							\
	int _r = (int) (call);						\
	if (_r < 0)							\
		die("%s: %d (%s)", #call, _r, fi_strerror(-_r));	\
} while (0)

static void xsend(const void *p, size_t len)
{
	if (write(sock, &len, sizeof(len)) != sizeof(len) ||
	    write(sock, p, len) != (ssize_t) len)
		die("oob send");
}

static size_t xrecv(void *p, size_t max)
{
	size_t len, got = 0;
	ssize_t n;

	if (read(sock, &len, sizeof(len)) != sizeof(len) || len > max)
		die("oob recv header");
	while (got < len) {
		n = read(sock, (char *) p + got, len - got);
		if (n <= 0)
			die("oob recv");
		got += n;
	}
	return len;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Deterministic bytes for (seed, position). */
static void fill(char *p, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	size_t i;

	for (i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (char) x;
	}
}

static size_t check(const char *p, size_t len, uint64_t seed)
{
	char *want = malloc(len ? len : 1);
	size_t i, bad = 0;

	fill(want, len, seed);
	for (i = 0; i < len; i++)
		bad += p[i] != want[i];
	free(want);
	return bad;
}

static size_t check_poison(const char *p, size_t len)
{
	size_t i, bad = 0;

	for (i = 0; i < len; i++)
		bad += (unsigned char) p[i] != POISON;
	return bad;
}

static int compact_name;	/* -C: fi_getname into FI_NAME_MAX bytes */
static int msg_stream;		/* -X with -o send or tsend */
static int want_atomics;	/* -o atomic */
static int flag_mode;		/* -F */
static int wdata_iovs;		/* -I: writedata of two iovs */
/* -Q: the initiator's CQ format (the target's is FI_CQ_FORMAT_DATA) */
static enum fi_cq_format init_format = FI_CQ_FORMAT_DATA;
static unsigned long expect_rails;	/* -L */
/* -T: FI_THREAD_DOMAIN, no lock: multirail's CQ read takes its lean way */
static int thread_domain;
static unsigned int late_ms;	/* -J */

static void setup(int raw)
{
	struct fi_info *hints = fi_allocinfo();
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_DATA,
				      .size = 4096 };
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	char name[1024], pname[1024];
	size_t len = sizeof(name), plen;

	if (compact_name)
		len = getenv("RMA_NAME_MAX") ?
		      strtoul(getenv("RMA_NAME_MAX"), NULL, 0) : FI_NAME_MAX;
	if (len > sizeof(name))
		die("RMA_NAME_MAX %zu: at most %zu", len, sizeof(name));
	if (!strcmp(role, "initiator"))
		cq_attr.format = init_format;


	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_RMA | (want_atomics ? FI_ATOMIC : 0) |
		      (msg_stream ? FI_TAGGED : 0);
	hints->mode = FI_CONTEXT;
	if (thread_domain)
		hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
				      FI_MR_ALLOCATED | FI_MR_PROV_KEY |
				      (raw ? FI_MR_RAW : 0);
	hints->fabric_attr->prov_name = strdup(getenv("MRL_TEST_PROV") ?
			getenv("MRL_TEST_PROV") : "multirail");
	CHK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	fi_freeinfo(hints);
	if (!strstr(info->fabric_attr->prov_name, "multirail") &&
	    !getenv("MRL_TEST_PROV"))
		die("got provider %s", info->fabric_attr->prov_name);
	if (raw && !(info->domain_attr->mr_mode & FI_MR_RAW))
		die("FI_MR_RAW asked for and not given");

	if (info->domain_attr->cq_data_size < 8)
		data_mask = (1ULL << (8 * info->domain_attr->cq_data_size)) - 1;
	CHK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHK(fi_domain(fabric, info, &domain, NULL));
	CHK(fi_av_open(domain, &av_attr, &av, NULL));
	CHK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHK(fi_endpoint(domain, info, &ep, NULL));
	CHK(fi_ep_bind(ep, &av->fid, 0));
	if (selective && !strcmp(role, "initiator")) {
		struct fi_cntr_attr cntr_attr = { .events = FI_CNTR_EVENTS_COMP };

		CHK(fi_cq_open(domain, &cq_attr, &rx_cq, NULL));
		CHK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT |
			       (selective_cq ? FI_SELECTIVE_COMPLETION : 0)));
		CHK(fi_ep_bind(ep, &rx_cq->fid, FI_RECV));
		if (selective_cntr) {
			CHK(fi_cntr_open(domain, &cntr_attr, &cntr, NULL));
			CHK(fi_ep_bind(ep, &cntr->fid, FI_WRITE | FI_READ));
		}
	} else {
		CHK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	}
	CHK(fi_enable(ep));
	if (!getenv("MRL_TEST_PROV"))
		CHK(fi_open_ops(&ep->fid, FI_MULTIRAIL_EP_OPS, 0,
				(void **) &mrl_ops, NULL));
	CHK(fi_getname(&ep->fid, name, &len));
	xsend(name, len);
	plen = xrecv(pname, sizeof(pname));
	if (plen < 8 || fi_av_insert(av, pname, 1, &peer, 0, NULL) != 1)
		die("fi_av_insert");

	/* aligned_alloc wants a multiple of the alignment */
	buf = aligned_alloc(4096, (buf_size + SLACK + 4095) & ~(size_t) 4095);
	/* pages in place, so the provider can tell their NUMA node */
	if (expect_rails)
		memset(buf, 0, buf_size + SLACK);
	CHK(fi_mr_reg(domain, cbuf, sizeof(cbuf), FI_SEND | FI_RECV, 0, 2, 0,
		      &cmr, NULL));
	CHK(fi_mr_reg(domain, buf, buf_size + SLACK,
		      FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE |
		      (msg_stream ? FI_SEND | FI_RECV : 0), 0, 1, 0, &mr, NULL));
}

static void exchange_keys(int raw)
{
	uint8_t k[1024];
	uint64_t addr = (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ?
			(uintptr_t) buf : 0, base;
	size_t ksz = sizeof(k) - 8;

	memcpy(k, &addr, 8);
	if (raw) {
		CHK(fi_mr_raw_attr(mr, &base, k + 8, &ksz, 0));
	} else {
		uint64_t key = fi_mr_key(mr);

		memcpy(k + 8, &key, 8);
		ksz = 8;
	}
	xsend(k, ksz + 8);
	ksz = xrecv(k, sizeof(k)) - 8;
	memcpy(&peer_addr, k, 8);
	if (raw)
		CHK(fi_mr_map_raw(domain, 0, k + 8, ksz, &peer_key, 0));
	else
		memcpy(&peer_key, k + 8, 8);
}

static size_t format_size(enum fi_cq_format f)
{
	return f == FI_CQ_FORMAT_TAGGED ? sizeof(struct fi_cq_tagged_entry) :
	       f == FI_CQ_FORMAT_DATA ? sizeof(struct fi_cq_data_entry) :
	       f == FI_CQ_FORMAT_MSG ? sizeof(struct fi_cq_msg_entry) :
				       sizeof(struct fi_cq_entry);
}

#define GUARD	0xa5

/*
 * Wait for n completions; every context must come back exactly once, with
 * want_flags and, in the formats that carry them (multirail's own: a core
 * tested alone fills them its way), the op's length (want_len, unless
 * SIZE_MAX) and no buffer, CQ data or tag.
 * Entries are read in the initiator's CQ format, a random number at a
 * time (1 to 16: the provider's batch may not fit), into a buffer whose
 * bytes past the entries returned must stay untouched; every other read
 * is fi_cq_readfrom, which must write a source for each entry returned
 * and none past them (multirail's: none known for an RMA completion; a
 * core tested alone, MRL_TEST_PROV, may name the peer).
 */
static void wait_comps(int n, char *seen, uint64_t want_flags,
		       size_t want_len)
{
	size_t esz = format_size(init_format);
	unsigned char e[16 * sizeof(struct fi_cq_tagged_entry)];
	const fi_addr_t src_guard = 0x5a5a5a5a;
	fi_addr_t src[17];
	struct fi_cq_err_entry err = { 0 };
	int from = 0, alone = !!getenv("MRL_TEST_PROV");
	double end = now() + TIMEOUT_S;
	int got = 0, i, want;
	ssize_t r;
	size_t b;

	while (got < n) {
		want = 1 + rand() % 16;
		memset(e, GUARD, sizeof(e));
		for (i = 0; i < 17; i++)
			src[i] = src_guard;
		from = !from;
		r = from ? fi_cq_readfrom(cq, e, want, src) :
			   fi_cq_read(cq, e, want);
		if (r == -FI_EAVAIL) {
			fi_cq_readerr(cq, &err, 0);
			die("error completion: %s", fi_strerror(err.err));
		}
		if (r == -FI_EAGAIN) {
			if (now() > end)
				die("timeout: %d of %d completions", got, n);
			r = 0;
		}
		if (r < 0 || r > want)
			die("fi_cq_read of %d: %zd", want, r);
		for (b = r * esz; b < sizeof(e); b++)
			if (e[b] != GUARD)
				die("fi_cq_read of %d returned %zd entries of "
				    "%zu bytes and wrote byte %zu", want, r,
				    esz, b);
		for (i = 0; from && i < 17; i++)
			if (i < r ? src[i] == src_guard ||
				    (!alone && src[i] != FI_ADDR_NOTAVAIL) :
				    src[i] != src_guard)
				die("fi_cq_readfrom of %d returned %zd "
				    "entries, source %d is 0x%lx", want, r,
				    i, (unsigned long) src[i]);
		for (i = 0; i < r; i++) {
			struct fi_cq_tagged_entry m = { 0 };
			char *c;

			memcpy(&m, e + i * esz, esz);
			c = m.op_context;
			if (c < seen || c >= seen + n)
				die("completion with a foreign context");
			if (*c)
				die("op %ld completed twice", (long) (c - seen));
			if (init_format != FI_CQ_FORMAT_CONTEXT &&
			    (m.flags & want_flags) != want_flags)
				die("completion flags 0x%lx", (long) m.flags);
			if (!alone && init_format != FI_CQ_FORMAT_CONTEXT &&
			    want_len != SIZE_MAX && m.len != want_len)
				die("completion length %zu, op's %zu", m.len,
				    want_len);
			if (!alone && (m.buf || m.data || m.tag))
				die("completion buf %p data 0x%lx tag 0x%lx",
				    m.buf, (long) m.data, (long) m.tag);
			*c = 1;
		}
		got += r;
	}
	/* and nothing more */
	for (i = 0; i < 100; i++)
		if (fi_cq_read(cq, e, 1) != -FI_EAGAIN)
			die("extra completion");
}

static void wait_oob_progressing(void);
static void wait_ctx(void *ctx, ssize_t posted);
static ssize_t send_retrying(void *p, size_t len, void *ctx);

struct plan {
	int op;		/* 0 write 1 writev 2 writedata 3 read */
	size_t size, offset;
	int window;
	uint64_t seed;
	int flag;	/* -F: the writes' "done" is an inject_writedata */
};

/* Seeds have bit 31 set: 4 bytes of CQ data use every byte. */
static uint64_t cq_data(const struct plan *p, uint64_t i)
{
	return (p->seed + i) & data_mask;
}

#define FLAG_DATA	0xF1A6u	/* the CQ data of -F's flag */

static const char *op_name[] = { "write", "writev", "writedata", "read",
				  "atomic", "injectdata", "send", "tsend" };
#define OP_ATOMIC	4
#define OP_INJECT	5	/* fi_inject_writedata of inject_size or less */
#define OP_SEND		6	/* -X only: fi_senddata, a message stream */
#define OP_TSEND	7	/* -X only: fi_tsenddata, one tag */
#define ATOMIC_N	8	/* uint64 elements the atomics work on */

/* -I: the first iov's share of a writedata of size bytes */
static size_t first_iov_len(size_t size)
{
	return size / 2;
}

/*
 * Whether e is a writedata's target entry for size bytes: through
 * multirail, fi_cq(3)'s flags and the whole write's length, whatever the
 * core or the cut (aws-ofi-nccl adds these lengths up).  A core alone
 * (the test's reference runs) may give less: 1.17's rxm gives len 0 and
 * no FI_RMA.
 */
static int wdata_entry_ok(const struct fi_cq_tagged_entry *e, size_t size)
{
	uint64_t want = FI_REMOTE_CQ_DATA | FI_RMA | FI_REMOTE_WRITE;

	if (!mrl_ops)
		return e->len == size || !e->len;
	return e->len == size && (e->flags & want) == want;
}

static ssize_t writedata_2iov(char *local, size_t size, void *desc,
			      uint64_t data, uint64_t raddr, void *context)
{
	size_t h = first_iov_len(size);
	struct iovec iov[2] = { { local, h }, { local + h, size - h } };
	void *d[2] = { desc, desc };
	struct fi_rma_iov rma = { raddr, size, peer_key };
	struct fi_msg_rma m = {
		.msg_iov = iov, .desc = d, .iov_count = 2, .addr = peer,
		.rma_iov = &rma, .rma_iov_count = 1, .context = context,
		.data = data,
	};

	return fi_writemsg(ep, &m, FI_REMOTE_CQ_DATA | FI_COMPLETION);
}

static size_t slot(const struct plan *p)
{
	return (p->size + p->offset + 63) & ~(size_t) 63;
}

static int health_rail = -1, health_rejoin, health_fence;	/* -H */
static int health_refused;	/* -H ...:refused: the core refuses posts */
#define NO_RAILS_UP_CHECK	(~0ull)

/* Core RMA ops posted so far (sum over rails), with per-rail bytes. */
static uint64_t core_ops(uint64_t *rail_bytes, int *nrails)
{
	struct fi_multirail_rail_stats st;
	uint64_t ops = 0;
	int r, n;

	n = mrl_ops->rail_count(ep);
	for (r = 0; r < n; r++) {
		CHK(mrl_ops->rail_stats(ep, r, &st));
		ops += st.tx_ops;
		if (rail_bytes)
			rail_bytes[r] = st.tx_bytes;
	}
	if (nrails)
		*nrails = n;
	return ops;
}

/*
 * No op may turn into more core ops than 4 KiB chunks plus its held-back
 * final chunk, and one more per iov (a core whose RMA takes one local iov
 * cuts chunks where iovs end): this caught chunks of one byte.
 */
static void check_core_ops(const struct plan *p, uint64_t before)
{
	uint64_t max = (uint64_t) p->window *
		       (p->size / 4096 + 2 + (p->op == 1 ? 3 : 0));
	uint64_t ops;

	if (!mrl_ops)
		return;
	ops = core_ops(NULL, NULL) - before;
	if (health_rail >= 0)
		max += 64 * (uint64_t) p->window;	/* chunks posted again */
	if (ops > max)
		die("%s size %zu x %d: %lu core ops, at most %lu expected",
		    op_name[p->op], p->size, p->window, (unsigned long) ops,
		    (unsigned long) max);
}

/*
 * Initiator: the ops completed; sync through the provider, as applications
 * do (a send after RMA), then learn the target's verdict.
 */
static void sync_done(const struct plan *p)
{
	double end = now() + TIMEOUT_S;
	ssize_t r;
	char ack;

	if (p->flag && p->op != 3) {
		/* a 0-byte write with CQ data on rail 0 says "done" */
		while ((r = fi_inject_writedata(ep, NULL, 0, FLAG_DATA, peer,
						peer_addr, peer_key)) ==
		       -FI_EAGAIN && now() < end)
			fi_cq_read(cq, NULL, 0);
		if (r)
			die("fi_inject_writedata flag: %zd", r);
	}
	wait_ctx(&sctx, send_retrying(cbuf, 1, &sctx));
	xsend("d", 1);
	wait_oob_progressing();
	if (xrecv(&ack, 1) != 1 || ack != 'k')
		die("target reported a failure");
}

/* Target: buffer prepared; post the sync receive, tell the initiator. */
static void target_ready(void)
{
	CHK(fi_recv(ep, cbuf + 32, 8, fi_mr_desc(cmr), FI_ADDR_UNSPEC, &rctx));
	xsend("r", 1);
}

static size_t bad_bytes(const struct plan *p);

/*
 * -F: the flag's CQ entry says the writes completed; every byte of them
 * must be here at that moment, as it is over one core connection.
 */
static void target_wait_flag(const struct plan *p)
{
	struct fi_cq_tagged_entry e;
	double end = now() + TIMEOUT_S;
	size_t bad;
	ssize_t r;

	for (;;) {
		r = fi_cq_read(cq, &e, 1);
		if (r == 1 && (e.flags & FI_REMOTE_CQ_DATA) &&
		    e.data == FLAG_DATA)
			break;
		if (r == 1)
			die("unexpected completion before the flag");
		if (r != -FI_EAGAIN)
			die("target fi_cq_read %zd", r);
		if (now() > end)
			die("timeout waiting for the flag");
	}
	bad = bad_bytes(p);
	if (bad)
		die("%s size %zu: the flag overtook the writes: %zu bytes "
		    "missing when it arrived", op_name[p->op], p->size, bad);
}

/*
 * Target: the initiator's message and 'd' mean its ops completed: data is
 * visible.  Keep progressing meanwhile: the cores here need the target to.
 */
static void target_wait_done(const struct plan *p)
{
	char msg;

	if (p->flag && p->op != 3)
		target_wait_flag(p);
	if (!rctx_done)
		wait_ctx(&rctx, 0);
	rctx_done = 0;
	wait_oob_progressing();
	if (xrecv(&msg, 1) != 1 || msg != 'd')
		die("expected 'd'");
}

static void initiator_case(const struct plan *p)
{
	uint64_t ops_before = mrl_ops ? core_ops(NULL, NULL) : 0;
	char *seen = calloc(p->window, 1), ack;
	int i;

	xsend(p, sizeof(*p));
	wait_oob_progressing();
	if (xrecv(&ack, 1) != 1 || ack != 'r')
		die("target not ready");
	for (i = 0; i < p->window; i++) {
		char *local = buf + i * slot(p) + p->offset;
		uint64_t raddr = peer_addr + i * slot(p) + p->offset;
		void *desc = fi_mr_desc(mr);
		ssize_t r;

		if (p->op == 3)
			memset(local, POISON, p->size);
		else
			fill(local, p->size, p->seed + i);
		do {
			switch (p->op) {
			case 0:
				r = fi_write(ep, local, p->size, desc, peer,
					     raddr, peer_key, &seen[i]);
				break;
			case 1: {
				/* three iovs, or as many as the provider takes */
				size_t n = info->tx_attr->iov_limit < 3 ?
					   info->tx_attr->iov_limit : 3;
				size_t h = p->size / n;
				struct iovec iov[3] = {
					{ local, h }, { local + h, h },
					{ local + 2 * h, p->size - 2 * h } };
				void *d[3] = { desc, desc, desc };

				if (n == 2)
					iov[1].iov_len = p->size - h;
				r = fi_writev(ep, iov, d, n, peer, raddr,
					      peer_key, &seen[i]);
				break;
			}
			case 2:
				r = wdata_iovs ?
				    writedata_2iov(local, p->size, desc,
						   cq_data(p, i), raddr,
						   &seen[i]) :
				    fi_writedata(ep, local, p->size, desc,
						 cq_data(p, i), peer, raddr,
						 peer_key, &seen[i]);
				break;
			case OP_INJECT:
				r = fi_inject_writedata(ep, local, p->size,
							cq_data(p, i), peer,
							raddr, peer_key);
				/* the buffer is ours again: prove it */
				if (!r)
					memset(local, POISON, p->size);
				break;
			default:
				r = fi_read(ep, local, p->size, desc, peer,
					    raddr, peer_key, &seen[i]);
			}
			if (r == -FI_EAGAIN) {
				struct fi_cq_tagged_entry e;

				/* progress only; completions come below */
				(void) e;
				fi_cq_read(cq, NULL, 0);
			}
		} while (r == -FI_EAGAIN);
		if (r)
			die("%s post: %zd", op_name[p->op], r);
	}
	/* an inject has no completion: the target checks its CQ data */
	if (p->op != OP_INJECT)
		wait_comps(p->window, seen,
			   FI_RMA | (p->op == 3 ? FI_READ : FI_WRITE),
			   p->size);
	check_core_ops(p, ops_before);
	if (p->op == 3) {
		for (i = 0; i < p->window; i++) {
			size_t bad = check(buf + i * slot(p) + p->offset,
					   p->size, p->seed + i);
			if (bad)
				die("read size %zu op %d: %zu bad bytes",
				    p->size, i, bad);
		}
	}
	sync_done(p);
	free(seen);
}

static void wait_oob_progressing(void)
{
	struct pollfd pfd = { .fd = sock, .events = POLLIN };
	double end = now() + TIMEOUT_S;

	while (poll(&pfd, 1, 0) == 0) {
		fi_cq_read(cq, NULL, 0);
		if (now() > end)
			die("timeout waiting for the peer");
	}
}

/*
 * fi_send, retried while the provider says -FI_EAGAIN (multirail does
 * until the writes on its other rails have landed), progressing meanwhile.
 */
static ssize_t send_retrying(void *p, size_t len, void *ctx)
{
	double end = now() + TIMEOUT_S;
	ssize_t r;

	while ((r = fi_send(ep, p, len, fi_mr_desc(cmr), peer, ctx)) ==
	       -FI_EAGAIN && now() < end)
		fi_cq_read(cq, NULL, 0);
	return r;
}

/* Wait for the completion of one message op posted with ctx. */
static void wait_ctx(void *ctx, ssize_t posted)
{
	struct fi_cq_tagged_entry e;
	double end = now() + TIMEOUT_S;
	ssize_t r;

	if (posted)
		die("message post: %zd", posted);
	for (;;) {
		r = fi_cq_read(cq, &e, 1);
		if (r == 1 && e.op_context == ctx)
			return;
		if (r == 1)
			die("unexpected completion while syncing");
		if (r != -FI_EAGAIN)
			die("sync fi_cq_read %zd", r);
		if (now() > end)
			die("timeout syncing");
	}
}

/* ---- atomics (-o atomic) ------------------------------------------------ */

/* The target's array before the initiator's atomics. */
static void atomic_initial(const struct plan *p, uint64_t *v)
{
	int j;

	for (j = 0; j < ATOMIC_N; j++)
		v[j] = p->seed + 3 * j;
}

/* The array after every atomic of atomic_case() (it tracks it too). */
static void atomic_final(const struct plan *p, uint64_t *v)
{
	int i, j;

	atomic_initial(p, v);
	for (i = 0; i < p->window; i++)
		for (j = 0; j < ATOMIC_N; j++)
			v[j] += (uint64_t) (i + 1) * (j + 1);
	v[0] += 1000;		/* fetch-and-add */
	v[1] = 777;		/* compare-and-swap that hits */
	v[3] += 5;		/* inject */
}

#define RETRY(call)							\
	({ ssize_t r_; double end_ = now() + TIMEOUT_S;			\
	   while ((r_ = (call)) == -FI_EAGAIN && now() < end_)		\
		fi_cq_read(cq, NULL, 0);				\
	   if (r_) die(#call ": %zd", r_); })

/* One fetching atomic on element idx: returns the value it fetched. */
static uint64_t fetch_one(int idx, enum fi_op op, uint64_t operand,
			  const uint64_t *compare)
{
	uint64_t *l = (uint64_t *) buf;		/* operand, compare, result */
	uint64_t raddr = peer_addr + idx * sizeof(uint64_t);
	void *desc = fi_mr_desc(mr);
	char seen = 0;

	l[0] = operand;
	l[2] = 0xdeadbeefdeadbeefULL;
	if (compare) {
		l[1] = *compare;
		RETRY(fi_compare_atomic(ep, &l[0], 1, desc, &l[1], desc,
					&l[2], desc, peer, raddr, peer_key,
					FI_UINT64, op, &seen));
	} else {
		RETRY(fi_fetch_atomic(ep, &l[0], 1, desc, &l[2], desc, peer,
				      raddr, peer_key, FI_UINT64, op, &seen));
	}
	wait_comps(1, &seen, FI_ATOMIC | FI_READ, SIZE_MAX);
	return l[2];
}

static void atomic_case(const struct plan *p)
{
	uint64_t expect[ATOMIC_N], want[ATOMIC_N], got, miss;
	uint64_t *src = (uint64_t *) buf + 4, *res;
	char *seen = calloc(p->window, 1), ack;
	void *desc = fi_mr_desc(mr);
	double end;
	int i, j;

	xsend(p, sizeof(*p));
	wait_oob_progressing();
	if (xrecv(&ack, 1) != 1 || ack != 'r')
		die("target not ready");

	/* A window of sums to the same array: each must apply exactly once. */
	atomic_initial(p, expect);
	for (i = 0; i < p->window; i++) {
		uint64_t *s = src + i * ATOMIC_N;

		for (j = 0; j < ATOMIC_N; j++) {
			s[j] = (uint64_t) (i + 1) * (j + 1);
			expect[j] += s[j];
		}
		RETRY(fi_atomic(ep, s, ATOMIC_N, desc, peer, peer_addr,
				peer_key, FI_UINT64, FI_SUM, &seen[i]));
	}
	wait_comps(p->window, seen, FI_ATOMIC | FI_WRITE, SIZE_MAX);

	got = fetch_one(0, FI_SUM, 1000, NULL);
	if (got != expect[0])
		die("fetch-and-add fetched %lu, expected %lu",
		    (unsigned long) got, (unsigned long) expect[0]);
	got = fetch_one(1, FI_CSWAP, 777, &expect[1]);
	if (got != expect[1])
		die("cswap (hit) fetched %lu, expected %lu",
		    (unsigned long) got, (unsigned long) expect[1]);
	miss = expect[2] + 1;
	got = fetch_one(2, FI_CSWAP, 999, &miss);
	if (got != expect[2])
		die("cswap (miss) fetched %lu, expected %lu",
		    (unsigned long) got, (unsigned long) expect[2]);
	src[0] = 5;
	RETRY(fi_inject_atomic(ep, src, 1, peer, peer_addr + 3 * 8, peer_key,
			       FI_UINT64, FI_SUM));

	/* Atomic reads until the inject has landed (it has no completion). */
	atomic_final(p, want);
	res = src + p->window * ATOMIC_N;
	end = now() + TIMEOUT_S;
	do {
		memset(seen, 0, 1);
		memset(res, 0, ATOMIC_N * sizeof(*res));
		RETRY(fi_fetch_atomic(ep, src, ATOMIC_N, desc, res, desc, peer,
				      peer_addr, peer_key, FI_UINT64,
				      FI_ATOMIC_READ, &seen[0]));
		wait_comps(1, seen, FI_ATOMIC | FI_READ, SIZE_MAX);
	} while (res[3] != want[3] && now() < end);
	for (j = 0; j < ATOMIC_N; j++)
		if (res[j] != want[j])
			die("atomic read: element %d is %lu, expected %lu", j,
			    (unsigned long) res[j], (unsigned long) want[j]);

	sync_done(p);
	free(seen);
}

static void target_atomic_case(const struct plan *p)
{
	uint64_t want[ATOMIC_N];
	size_t bad = 0;
	int j;

	atomic_initial(p, (uint64_t *) buf);
	memset(buf + sizeof(want), POISON, SLACK);
	target_ready();
	target_wait_done(p);
	atomic_final(p, want);
	for (j = 0; j < ATOMIC_N; j++) {
		if (((uint64_t *) buf)[j] != want[j]) {
			fprintf(stderr, "[target] element %d is %lu, expected "
				"%lu\n", j, (unsigned long) ((uint64_t *) buf)[j],
				(unsigned long) want[j]);
			bad++;
		}
	}
	bad += check_poison(buf + sizeof(want), SLACK);
	xsend(bad ? "x" : "k", 1);
	if (bad)
		exit(1);
}

static void target_writedata(const struct plan *p)
{
	struct fi_cq_tagged_entry e;
	double end = now() + TIMEOUT_S;
	char *seen = calloc(p->window, 1);
	int got = 0;
	ssize_t r;

	while (got < p->window) {
		r = fi_cq_read(cq, &e, 1);
		if (r == -FI_EAGAIN) {
			if (now() > end)
				die("timeout waiting for CQ data");
			continue;
		}
		if (r != 1)
			die("target fi_cq_read %zd", r);
		/*
		 * The send that follows may complete first: nothing orders
		 * an inject before it (efa-direct: msg_order SAS only), and
		 * a writedata's entry comes from multirail's own message,
		 * which may wait for a receive buffer behind the send.  Its
		 * bytes are checked at its entry all the same.
		 */
		if (e.op_context == &rctx && !rctx_done) {
			rctx_done = 1;
			continue;
		}
		if (!(e.flags & FI_REMOTE_CQ_DATA))
			die("CQ entry without FI_REMOTE_CQ_DATA (flags 0x%lx, "
			    "context %p)", (unsigned long) e.flags,
			    e.op_context);
		if (!wdata_entry_ok(&e, p->size))
			die("writedata's CQ entry: len %zu, flags 0x%lx; "
			    "expected len %zu", e.len,
			    (unsigned long) e.flags, p->size);
		{
			uint64_t i = (e.data - p->seed) & data_mask;

			if (e.data != cq_data(p, i))
				die("CQ data 0x%lx wider than cq_data_size %zu",
				    (unsigned long) e.data,
				    info->domain_attr->cq_data_size);
			size_t bad;

			if (i >= (uint64_t) p->window || seen[i])
				die("CQ data %lu unexpected or repeated",
				    (unsigned long) e.data);
			seen[i] = 1;
			/* Every byte must be there when the data is. */
			bad = check(buf + i * slot(p) + p->offset, p->size,
				    p->seed + i);
			if (bad)
				die("CQ data seen with %zu of %zu bytes "
				    "missing (op %lu)", bad, p->size,
				    (unsigned long) i);
		}
		got++;
	}
	free(seen);
}

/* The target's buffer against what the initiator's writes put there. */
static size_t bad_bytes(const struct plan *p)
{
	size_t span = p->window * slot(p), bad = 0;
	int i;

	for (i = 0; i < p->window; i++) {
		char *s = buf + i * slot(p);

		bad += check_poison(s, p->offset);
		bad += check(s + p->offset, p->size, p->seed + i);
		bad += check_poison(s + p->offset + p->size,
				    slot(p) - p->offset - p->size);
	}
	return bad + check_poison(buf + span, SLACK);
}

static void target_case(const struct plan *p)
{
	size_t span = p->window * slot(p), bad = 0;
	int i;

	if (p->op == 3) {
		for (i = 0; i < p->window; i++)
			fill(buf + i * slot(p) + p->offset, p->size,
			     p->seed + i);
	} else {
		memset(buf, POISON, span + SLACK);
	}
	target_ready();
	if (p->op == 2 || p->op == OP_INJECT)
		target_writedata(p);
	target_wait_done(p);
	if (p->op != 3)
		bad = bad_bytes(p);
	if (bad)
		fprintf(stderr, "[target] %s size %zu: %zu bad bytes\n",
			op_name[p->op], p->size, bad);
	xsend(bad ? "x" : "k", 1);
	if (bad)
		exit(1);
}

/*
 * RAIL_UP: the initiator sends one control message on each rail r >= 1 an
 * op to us may use, at its first op, so those rails connect early.  It
 * reports the rails it sent on; each must have arrived here exactly once,
 * and no other.  (It may still be in the core: progress, bounded.)
 */
static void check_rails_up_received(uint64_t sent_mask)
{
	struct fi_multirail_rail_stats st;
	double end = now() + 5;
	int r, n, bad;

	if (!mrl_ops || sent_mask == NO_RAILS_UP_CHECK)
		return;
	n = mrl_ops->rail_count(ep);
	do {
		fi_cq_read(cq, NULL, 0);
		for (r = 1, bad = -1; r < n && bad < 0; r++) {
			CHK(mrl_ops->rail_stats(ep, r, &st));
			if (st.ctrl_received != !!(sent_mask & (1ull << r)) ||
			    !st.ctrl_sent != !(sent_mask & (1ull << (32 + r))))
				bad = r;
		}
	} while (bad >= 0 && now() < end);
	if (bad >= 0) {
		CHK(mrl_ops->rail_stats(ep, bad, &st));
		die("rail %d: %lu control messages received and %lu sent, "
		    "the initiator sent %d and received %d", bad,
		    (unsigned long) st.ctrl_received,
		    (unsigned long) st.ctrl_sent,
		    !!(sent_mask & (1ull << bad)),
		    !!(sent_mask & (1ull << (32 + bad))));
	}
	printf("rails up: 0x%lx from the initiator, 0x%lx from here\n",
	       (unsigned long) (sent_mask & 0xffffffffu),
	       (unsigned long) (sent_mask >> 32));
}

static void run_target(void)
{
	struct plan p;

	for (;;) {
		wait_oob_progressing();
		if (xrecv(&p, sizeof(p)) != sizeof(p) || !p.window)
			break;
		if (p.op == OP_ATOMIC)
			target_atomic_case(&p);
		else
			target_case(&p);
	}
	check_rails_up_received(p.seed);
}

/*
 * The rails brought up between us and our one peer: those we sent RAIL_UP
 * on (once each), in the low 32 bits, and those the peer sent it on, in
 * the high ones.  Of a pair one end opens a rail (mrl_addr_connects), so
 * no rail is in both, and every rail past 0 that carried RMA bytes is in
 * one.  A core without tagged messages (efa-direct) carries control on an
 * endpoint of its own and has no connections to bring up: no RAIL_UP at
 * all.
 */
static uint64_t rails_up_sent(void)
{
	struct fi_multirail_rail_stats st;
	uint64_t mask = 0;
	int r, n;

	if (!mrl_ops || strstr(info->fabric_attr->name, "/efa-direct"))
		return 0;
	n = mrl_ops->rail_count(ep);
	for (r = 1; r < n; r++) {
		CHK(mrl_ops->rail_stats(ep, r, &st));
		if (st.ctrl_sent > 1)
			die("rail %d: %lu RAIL_UP sent to one peer", r,
			    (unsigned long) st.ctrl_sent);
		if (st.tx_bytes && !st.ctrl_sent && !st.ctrl_received)
			die("rail %d carried RMA bytes but was never brought "
			    "up", r);
		if (st.ctrl_sent && st.ctrl_received)
			die("rail %d: both ends brought it up", r);
		if (st.ctrl_sent)
			mask |= 1ull << r;
		if (st.ctrl_received)
			mask |= 1ull << (32 + r);
	}
	return mask;
}

/*
 * -H: the failing rail was taken out of service, its chunks went to other
 * rails (not with :fence: a fault that began under a send's fence, with
 * no chunk on the rail), and (with :rejoin) a probe brought it back,
 * within 10 s of the last op (probes back off up to 32 x 200 ms,
 * mrl_health.c's MRL_PROBE_MS).
 */
static void check_health(void)
{
	struct fi_multirail_rail_stats st;
	double end = now() + 10;

	if (!mrl_ops)
		die("-H needs multirail");
	do {
		fi_cq_read(cq, NULL, 0);
		CHK(mrl_ops->rail_stats(ep, health_rail, &st));
	} while (health_rejoin && st.state != FI_MULTIRAIL_RAIL_UP &&
		 now() < end);
	printf("rail %d: state %d, %lu down(s), %lu rejoin(s), %lu probe(s), "
	       "%lu chunk(s) re-issued, %lu error(s), %d peer(s) down\n",
	       health_rail, st.state, (unsigned long) st.downs,
	       (unsigned long) st.rejoins, (unsigned long) st.probes,
	       (unsigned long) st.reissued, (unsigned long) st.errors,
	       st.peers_down);
	if (!st.downs || (!st.reissued && !health_fence && !health_refused))
		die("rail %d was never taken out of service", health_rail);
	if (health_rejoin && (st.state != FI_MULTIRAIL_RAIL_UP ||
			      !st.rejoins || st.peers_down))
		die("rail %d did not rejoin", health_rail);
	if (!health_rejoin && st.state == FI_MULTIRAIL_RAIL_UP)
		die("rail %d is up again, but its fault lasts", health_rail);
}

static void check_all_rails_used(void)
{
	uint64_t bytes[64] = { 0 };
	int r, n;

	if (!mrl_ops)
		return;
	core_ops(bytes, &n);
	for (r = 0; r < n; r++) {
		printf("rail %d: %lu bytes\n", r, (unsigned long) bytes[r]);
		if (!bytes[r])
			die("rail %d of %d carried no RMA bytes", r, n);
	}
}

/*
 * -L: exactly the rails of the mask carried bytes since the baseline.  The
 * first op with a key goes on rail 0 while the target's other keys (and
 * its near rails) are asked for: a one-byte write before the baseline.
 */
static uint64_t rail_base[64];

static void rails_baseline(void)
{
	struct plan p = { .op = 0, .size = 1, .window = 1 };

	if (!mrl_ops)
		die("-L needs multirail");
	p.seed = (uint64_t) rand() << 8 | 1ULL << 31;
	initiator_case(&p);
	core_ops(rail_base, NULL);
}

static void check_rails_used(unsigned long mask)
{
	uint64_t bytes[64] = { 0 };
	int r, n;

	core_ops(bytes, &n);
	for (r = 0; r < n; r++) {
		int want = !!(mask & (1ul << r));

		bytes[r] -= rail_base[r];
		printf("rail %d: %lu bytes (%s)\n", r, (unsigned long) bytes[r],
		       want ? "near" : "far");
		if (want && !bytes[r])
			die("near rail %d of %d carried no RMA bytes", r, n);
		if (!want && bytes[r])
			die("far rail %d of %d carried %lu RMA bytes", r, n,
			    (unsigned long) bytes[r]);
	}
	if (mask >> n)
		die("-L 0x%lx names rails beyond the %d opened", mask, n);
}

static void run_initiator(const int *ops, int nops, size_t max_size,
			  int window, int iters, int all_rails)
{
	static const size_t sizes[] = { 1, 7, 64, 4095, 4096, 65535, 65536,
		65537, 262144 + 13, 1 << 20, (1 << 20) + 4097, 4 << 20,
		(16 << 20) - 1, 64 << 20 };
	struct plan p = { 0 };
	size_t s;
	int o, it;
	double t0 = 0;

	if (expect_rails)
		rails_baseline();
	if (want_atomics) {
		p.op = OP_ATOMIC;
		p.window = window;
		p.seed = (uint64_t) rand() << 8 | 1ULL << 31;
		atomic_case(&p);
		printf("ok atomic: %d sums, fetch-add, cswap hit and miss, "
		       "inject, read\n", window);
		nops = 0;
	}
	for (o = 0; o < nops; o++) {
		for (s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			if (sizes[s] > max_size ||
			    (ops[o] == OP_INJECT &&
			     sizes[s] > info->tx_attr->inject_size))
				break;
			p.op = ops[o];
			/* writedata's own CQ data would meet the flag's */
			p.flag = flag_mode && (p.op == 0 || p.op == 1);
			p.size = sizes[s];
			p.offset = (s * 13) % 61;
			p.window = sizes[s] >= (4 << 20) ? 1 :
				   sizes[s] >= (1 << 20) ? 4 : window;
			for (it = 0; it < (p.op == 2 ? iters : 1); it++) {
				p.seed = (uint64_t) rand() << 8 | 1ULL << 31;
				t0 = now();
				initiator_case(&p);
			}
			printf("ok %s size %zu offset %zu window %d (%.3fs)\n",
			       op_name[p.op], p.size, p.offset, p.window,
			       now() - t0);
		}
	}
	/* while the target still progresses: probes need its answer */
	if (health_rail >= 0)
		check_health();
	memset(&p, 0, sizeof(p));
	/* a failing rail may lose its RAIL_UP */
	p.seed = health_rail >= 0 ? NO_RAILS_UP_CHECK : rails_up_sent();
	xsend(&p, sizeof(p));
	if (all_rails)
		check_all_rails_used();
	if (expect_rails)
		check_rails_used(expect_rails);
}

/* The socketpair stays connected; libfabric sees the namespace's NICs. */
static void enter_netns(const char *pair, int target)
{
	char name[256], path[300];
	const char *comma = strchr(pair, ',');
	int fd;

	if (!comma)
		die("-N wants ns_initiator,ns_target");
	if (target)
		snprintf(name, sizeof(name), "%s", comma + 1);
	else
		snprintf(name, sizeof(name), "%.*s", (int) (comma - pair), pair);
	snprintf(path, sizeof(path), "/var/run/netns/%s", name);
	fd = open(path, O_RDONLY);
	if (fd < 0 || setns(fd, CLONE_NEWNET))
		die("enter network namespace %s: %s", name, strerror(errno));
	close(fd);
}

/* Every close must succeed, after a failure too: nothing left held. */
static void close_or_die(struct fid *fid, const char *what)
{
	int ret = fi_close(fid);

	if (ret)
		die("fi_close(%s): %s", what, fi_strerror(-ret));
}

static void teardown(void)
{
	uint32_t r;

	close_or_die(&ep->fid, "endpoint");
	for (r = 0; r < key_regions; r++)
		if (region_mr[r])
			close_or_die(&region_mr[r]->fid, "a region's MR");
	close_or_die(&mr->fid, "MR");
	close_or_die(&cmr->fid, "control MR");
	close_or_die(&av->fid, "AV");
	close_or_die(&cq->fid, "CQ");
	if (rx_cq)
		close_or_die(&rx_cq->fid, "receive CQ");
	if (cntr)
		close_or_die(&cntr->fid, "counter");
	close_or_die(&domain->fid, "domain");
	close_or_die(&fabric->fid, "fabric");
	fi_freeinfo(info);
	free(buf);
}

/* ---- -X: a stream of verified ops ---------------------------------------- */

struct stream_msg {
	uint32_t index;			/* op; ~0: the end */
	uint32_t slot;
	uint64_t bad;			/* target's answer */
};

#define STREAM_END	0xffffffffu
#define STREAM_IDLE_S	180		/* no completion this long: a hang */

static size_t stream_slot;		/* bytes per window slot */
static uint32_t turns_count;		/* -Y */

/* 8 bytes per step: a 64 MiB op is filled and checked in milliseconds */
static uint64_t stream_word(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void stream_fill(char *p, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1, *w = (uint64_t *) p;
	size_t i;

	for (i = 0; i < len / 8; i++)
		w[i] = stream_word(&x);
	memset(p + len / 8 * 8, (int) seed, len % 8);
}

static uint64_t stream_check(const char *p, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1, bad = 0;
	const uint64_t *w = (const uint64_t *) p;
	size_t i;

	for (i = 0; i < len / 8; i++)
		bad += w[i] != stream_word(&x);
	for (i = len / 8 * 8; i < len; i++)
		bad += p[i] != (char) seed;
	return bad;
}

static double wall(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int oob_ready(void)
{
	struct pollfd pfd = { .fd = sock, .events = POLLIN };

	return poll(&pfd, 1, 0) > 0;
}

/*
 * Delivery complete: the completion says the bytes are at the target, so
 * the target checks them once.  (With transmit complete, bytes a failing
 * rail had accepted can still be lost after the op completed, as over the
 * core alone: docs/reliability.md.)
 */
static ssize_t stream_post(int op, char *local, size_t size, int s,
			   uint64_t data, void *ctx)
{
	struct iovec iov = { local, size };
	void *desc = fi_mr_desc(mr);
	struct fi_rma_iov rma = { peer_addr + s * stream_slot, size, peer_key };
	struct fi_msg_rma msg = {
		.msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = peer,
		.rma_iov = &rma, .rma_iov_count = 1, .context = ctx,
		.data = data,
	};

	return fi_writemsg(ep, &msg, FI_DELIVERY_COMPLETE | FI_COMPLETION |
			   (op == 2 ? FI_REMOTE_CQ_DATA : 0));
}

/* -Y: op i's word, written to the target's word i. */
/*
 * Up to 32 of the initiator's completions, in its CQ format: their
 * contexts into ctx, how many (0: none yet).  who names the caller.
 */
static ssize_t read_contexts(void **ctx, const char *who)
{
	size_t esz = format_size(init_format);
	unsigned char e[32 * sizeof(struct fi_cq_tagged_entry)];
	ssize_t n, k;

	n = fi_cq_read(cq, e, 32);
	if (n == -FI_EAGAIN)
		return 0;
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err = { 0 };

		fi_cq_readerr(cq, &err, 0);
		die("%s: an op failed: %s", who, fi_strerror(err.err));
	}
	if (n < 0)
		die("%s: fi_cq_read %zd", who, n);
	for (k = 0; k < n; k++)
		ctx[k] = ((struct fi_cq_entry *)
			  (e + (size_t) k * esz))->op_context;
	return n;
}

static uint64_t turns_word(uint64_t seed, uint32_t i)
{
	return (seed ^ ((uint64_t) i << 20)) * 0x9e3779b97f4a7c15ULL | 1;
}

/* -G: op i's word: registration i % regions, its word i / regions. */
static uint32_t turns_pos(uint32_t count, uint32_t i)
{
	if (!key_regions)
		return i;
	return (i % key_regions) * (count / key_regions) + i / key_regions;
}

/* -G, target: each region of the words registered alone, sent. */
static void regions_send(uint32_t count)
{
	size_t len = (size_t) count / key_regions * 8;
	uint64_t msg[16];
	uint32_t r;

	for (r = 0; r < key_regions; r++) {
		CHK(fi_mr_reg(domain, buf + r * len, len, FI_REMOTE_WRITE, 0,
			      10 + r, 0, &region_mr[r], NULL));
		msg[2 * r] = (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ?
			     (uintptr_t) (buf + r * len) : 0;
		msg[2 * r + 1] = fi_mr_key(region_mr[r]);
	}
	xsend(msg, key_regions * 16);
}

static void regions_recv(void)
{
	uint64_t msg[16];
	uint32_t r;

	if (xrecv(msg, sizeof(msg)) != key_regions * 16)
		die("-G: the target's keys");
	for (r = 0; r < key_regions; r++) {
		region_addr[r] = msg[2 * r];
		region_key[r] = msg[2 * r + 1];
	}
}

/* The RMA ops that took the general way so far. */
static uint64_t general_ops(void)
{
	struct fi_multirail_ep_stats es;

	if (mrl_ops->size < offsetof(struct fi_multirail_ep_ops, ep_stats) +
			    sizeof(mrl_ops->ep_stats))
		die("the provider has no ep_stats");
	CHK(mrl_ops->ep_stats(ep, &es, sizeof(es)));
	return es.rma_general;
}

/* -Y op i: to word i, or with -G to its registration's word. */
static ssize_t turns_post(uint64_t *src, uint32_t i)
{
	uint64_t addr = peer_addr + (uint64_t) i * 8, key = peer_key;
	uint32_t r;

	if (key_regions) {
		r = i % key_regions;
		addr = region_addr[r] + (uint64_t) (i / key_regions) * 8;
		key = region_key[r];
	}
	return fi_write(ep, src, 8, fi_mr_desc(mr), peer, addr, key, src);
}

/*
 * -G: the first op to each key written again (its word, its value), one at
 * a time, until a whole round takes the fast path: the target's keys for
 * the other rails came back (how long that takes depends on the machine's
 * load; the count starts after it).
 */
static void settle_keys(uint64_t *src, uint64_t seed)
{
	double end = now() + TIMEOUT_S;
	uint64_t before;
	void *ctx[32];
	uint32_t r;
	ssize_t n;

	do {
		before = general_ops();
		for (r = 0; r < key_regions; r++) {
			src[0] = turns_word(seed, r);
			while ((n = turns_post(&src[0], r)) == -FI_EAGAIN)
				read_contexts(ctx, "turns");
			if (n)
				die("turns: fi_write %zd", n);
			while (!read_contexts(ctx, "turns"))
				if (now() > end)
					die("turns: no completion");
		}
		if (now() > end)
			die("turns: the keys never took the fast path");
	} while (general_ops() != before);
}

/*
 * -Y, initiator: fi_multirail_bw's loop (post while the window has room,
 * read 32 completions, post again), each op's source word in the window
 * slot it holds until its completion.  Then every rail must have carried
 * an eighth of its share of the ops and completed them all: a rail
 * progress never reads keeps its few ops to the end, and the others
 * carry the rest.
 */
static void turns_initiator(uint32_t count, int window, uint64_t seed)
{
	uint64_t *src = (uint64_t *) buf;
	int *free_slots = malloc(window * sizeof(int)), nfree = window, s;
	struct fi_multirail_rail_stats st;
	void *ctx[32];
	uint32_t posted = 0, done = 0;
	double end = now() + TIMEOUT_S;
	uint64_t general_before = 0, general;	/* -G (+ 1 once read) */
	int r, nrails;
	ssize_t n, i;
	char msg;

	if (!mrl_ops)
		die("-Y needs multirail");
	if (tx_delivery_complete) {
		uint64_t flags = FI_TRANSMIT | FI_DELIVERY_COMPLETE;

		CHK(fi_control(&ep->fid, FI_SETOPSFLAG, &flags));
	}
	if (key_regions)
		regions_recv();
	if (xrecv(&msg, 1) != 1 || msg != 'r')	/* the target poisoned */
		die("turns: expected 'r'");
	for (s = 0; s < window; s++)
		free_slots[s] = s;
	while (done < count) {
		/* -G: the first op to each key learns its keys (the general
		 * way); the count starts once they are back */
		if (key_regions && done == key_regions && !general_before) {
			settle_keys(src, seed);
			general_before = general_ops() + 1;
		}
		while (nfree && posted < count &&
		       (!key_regions || posted < key_regions ||
			done >= key_regions)) {
			s = free_slots[nfree - 1];
			src[s] = turns_word(seed, posted);
			n = turns_post(&src[s], posted);
			if (n == -FI_EAGAIN)
				break;
			if (n)
				die("turns: fi_write %zd", n);
			posted++;
			nfree--;
		}
		n = read_contexts(ctx, "turns");
		if (!n) {
			if (now() > end)
				die("turns: no completion for %d s (%u of %u)",
				    TIMEOUT_S, done, count);
			continue;
		}
		for (i = 0; i < n; i++) {
			uint64_t *c = ctx[i];

			if (c < src || c >= src + window)
				die("turns: completion of an unknown op");
			free_slots[nfree++] = (int) (c - src);
		}
		done += (uint32_t) n;
		end = now() + TIMEOUT_S;
	}
	nrails = mrl_ops->rail_count(ep);
	for (r = 0; r < nrails; r++) {
		CHK(mrl_ops->rail_stats(ep, r, &st));
		printf("turns: rail %d: %lu ops, %lu of %lu bytes completed, "
		       "%lu down(s)\n", r, (unsigned long) st.tx_ops,
		       (unsigned long) st.bytes_completed,
		       (unsigned long) st.tx_bytes, (unsigned long) st.downs);
		/* the window fills every rail to its level, all the time */
		if (st.tx_ops < count / (8 * (uint32_t) nrails) ||
		    st.bytes_completed != st.tx_bytes)
			die("turns: rail %d carried %lu ops (an eighth of its "
			    "share is %u) and completed %lu of %lu bytes", r,
			    (unsigned long) st.tx_ops,
			    count / (8 * (uint32_t) nrails),
			    (unsigned long) st.bytes_completed,
			    (unsigned long) st.tx_bytes);
		if (rails_balanced &&
		    st.tx_ops > 2 * (uint64_t) count / (uint32_t) nrails)
			die("turns: rail %d carried %lu ops, more than twice "
			    "its share (%u): the other rails' keys came late",
			    r, (unsigned long) st.tx_ops, count / nrails);
	}
	if (key_regions) {
		general = general_ops() - (general_before - 1);
		printf("turns: %u keys in turn: %lu of %u ops after the keys "
		       "came back took the general way\n", key_regions,
		       (unsigned long) general, count - key_regions);
		if (general > (count - key_regions) / 16)
			die("turns: %lu ops took the general way (%u allowed): "
			    "a key change, or one rail's refusals, turned "
			    "ops from the fast path",
			    (unsigned long) general,
			    (count - key_regions) / 16);
	}
	if (tx_delivery_complete) {
		general = general_ops();
		printf("turns: delivery complete by default: %lu of %u ops "
		       "took the general way\n", (unsigned long) general,
		       count);
		if (general != count)
			die("turns: %lu of %u ops took the fast path, which "
			    "posts none delivery complete",
			    (unsigned long) (count - general), count);
	}
	xsend("d", 1);
	if (xrecv(&msg, 1) != 1 || msg != 'k')
		die("turns: the target found words missing");
	printf("turns: %u writes, every word at the target\n", count);
	free(free_slots);
}

/* -V: op order[k] (an op's window slot waits in *slot); -FI_EAGAIN counted. */
static ssize_t newkey_post(uint64_t *src, int slot, uint32_t i,
			   uint64_t seed, uint32_t *waits)
{
	ssize_t n;

	src[slot] = turns_word(seed, i);
	n = turns_post(&src[slot], i);
	if (n == -FI_EAGAIN)
		(*waits)++;
	else if (n)
		die("newkey: fi_write %zd", n);
	return n;
}

/* -V: progress for secs, nothing in flight. */
static void newkey_idle(double secs)
{
	double end = now() + secs;
	void *ctx[32];

	do {
		if (read_contexts(ctx, "newkey"))
			die("newkey: a completion with nothing in flight");
	} while (now() < end);
}

/* -V: every op of order[from .. to) posted, window in flight, and done. */
static void newkey_run(const uint32_t *order, uint32_t from, uint32_t to,
		       int window, uint64_t seed, uint32_t *waits)
{
	uint64_t *src = (uint64_t *) buf;
	int free_slots[256], nfree = window, s;
	double end = now() + TIMEOUT_S;
	uint32_t k = from, done = from;
	void *ctx[32];
	ssize_t n, i;

	for (s = 0; s < window; s++)
		free_slots[s] = s;
	while (done < to) {
		while (nfree && k < to &&
		       !newkey_post(src, free_slots[nfree - 1], order[k], seed,
				    waits)) {
			k++;
			nfree--;
		}
		n = read_contexts(ctx, "newkey");
		if (!n && now() > end)
			die("newkey: no completion for %d s (%u of %u)",
			    TIMEOUT_S, done, to);
		for (i = 0; i < n; i++) {
			uint64_t *c = ctx[i];

			if (c < src || c >= src + window)
				die("newkey: completion of an unknown op");
			free_slots[nfree++] = (int) (c - src);
		}
		if (n) {
			done += (uint32_t) n;
			end = now() + TIMEOUT_S;
		}
	}
}

/*
 * -V, initiator.  First each of the first regions' keys learned, one op at
 * a time until a round takes the fast path (few transmits: the fault must
 * not come before the answers); then those regions' ops of the first half
 * until rail 0 is out; then the rest, the last region's first.  -M: no
 * key learned first, so the fault meets ops on rail 0 alone.
 */
static void newkey_initiator(uint32_t count, int window, uint64_t seed)
{
	uint32_t *order = malloc(count * sizeof(*order));
	uint32_t last = key_regions - 1, n1 = 0, n = 0, i, waits = 0, round;
	struct fi_multirail_rail_stats st;
	uint64_t before;
	double end;
	char msg;

	if (!mrl_ops)
		die("-V needs multirail");
	if (!order || window > 256)
		die("newkey: window up to 256");
	for (i = 0; i < count / 2; i++)
		if (i % key_regions != last)
			order[n++] = i;
	n1 = n;
	for (i = 0; i < count; i++)
		if (i >= count / 2 || i % key_regions == last)
			order[n++] = i;
	regions_recv();
	if (xrecv(&msg, 1) != 1 || msg != 'r')	/* the target poisoned */
		die("newkey: expected 'r'");
	if (n1 < 40 * last)
		die("newkey: -Y too small");
	for (round = 0; rail0_lost == 1; round++) {
		if (round == 40) {
			CHK(mrl_ops->rail_stats(ep, 0, &st));
			die("newkey: the first keys never took the fast path "
			    "(%lu general ops; rail 0: %lu down(s))",
			    (unsigned long) general_ops(),
			    (unsigned long) st.downs);
		}
		before = general_ops();
		newkey_run(order, round * last, round * last + last, 1, seed,
			   &waits);
		if (round && general_ops() == before)
			break;
		newkey_idle(0.05);
	}
	newkey_run(order, 0, n1, window, seed, &waits);
	end = now() + TIMEOUT_S;
	do {
		CHK(mrl_ops->rail_stats(ep, 0, &st));
		if (now() > end)
			die("newkey: rail 0 never went out of service: the "
			    "fault knobs must fail it");
		newkey_idle(0.001);
	} while (!st.downs);
	waits = 0;
	newkey_run(order, n1, count, window, seed, &waits);
	printf("newkey: keys learned in %u round(s); rail 0 out after %u "
	       "ops%s; then %u post(s) refused (-FI_EAGAIN: the ops to the "
	       "new key wait parked, not refused)\n", round, n1,
	       rail0_lost == 2 ? " (no key learned before)" : "", waits);
	xsend("d", 1);
	if (xrecv(&msg, 1) != 1 || msg != 'k')
		die("newkey: the target found words missing");
	printf("newkey: %u writes, every word at the target\n", count);
	free(order);
}

/* -Z: op i of -Y's words, fi_write or fi_read (even i, or every i
 * without "s"), else the msg form with FI_COMPLETION; its context is its
 * local word. */
static ssize_t selective_post(int read, uint64_t *src, uint32_t i)
{
	struct iovec iov = { &src[i], 8 };
	void *desc = fi_mr_desc(mr);
	struct fi_rma_iov rma = { peer_addr + (uint64_t) i * 8, 8, peer_key };
	struct fi_msg_rma msg = {
		.msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = peer,
		.rma_iov = &rma, .rma_iov_count = 1, .context = &src[i],
	};

	if (!(i & 1) || !selective_cq)
		return read ? fi_read(ep, &src[i], 8, desc, peer, rma.addr,
				      peer_key, &src[i]) :
			      fi_write(ep, &src[i], 8, desc, peer, rma.addr,
				       peer_key, &src[i]);
	return read ? fi_readmsg(ep, &msg, FI_COMPLETION) :
		      fi_writemsg(ep, &msg, FI_COMPLETION);
}

/* -Z: the CQ's entries so far; each must be an op's that asked for one
 * (odd ones only with "s"), seen once. */
static void selective_reap(uint64_t *src, uint32_t count, char *seen,
			   uint32_t *entries)
{
	void *ctx[32];
	ssize_t n = read_contexts(ctx, "selective"), k;

	for (k = 0; k < n; k++) {
		uint64_t *c = ctx[k];
		size_t i = (size_t) (c - src);

		if (c < src || i >= count || (selective_cq && !(i & 1)) ||
		    seen[i]++)
			die("selective: entry for op %zd (%s)",
			    c < src ? (ssize_t) -1 : (ssize_t) i,
			    c < src || i >= count ? "unknown" :
			    selective_cq && !(i & 1) ?
			    "posted without FI_COMPLETION" : "twice");
	}
	*entries += (uint32_t) n;
}

/*
 * -Z: ops 0 .. count of one kind, window in flight as the counter (or,
 * without one, the entries) tell; with "s" and no counter only the core's
 * queue bounds them.  Then none more may come.
 */
static void selective_pass(int read, uint64_t *src, uint32_t count,
			   int window, uint64_t base)
{
	uint32_t want = selective_cq ? count / 2 : count;
	uint32_t posted = 0, entries = 0, done;
	char *seen = calloc(count, 1);
	double end = now() + TIMEOUT_S;
	ssize_t n;

	if (!seen)
		die("calloc");
	for (;;) {
		done = cntr ? (uint32_t) (fi_cntr_read(cntr) - base) :
		       !selective_cq ? entries : 0;
		if (posted == count && entries == want &&
		    (!cntr || done == count))
			break;
		if (now() > end)
			die("selective: %s: counter %u of %u, %u of %u "
			    "entries", read ? "read" : "write", done, count,
			    entries, want);
		if (posted < count &&
		    (posted - done < (uint32_t) window ||
		     (selective_cq && !cntr))) {
			n = selective_post(read, src, posted);
			if (!n)
				posted++;
			else if (n != -FI_EAGAIN)
				die("selective: post %zd", n);
			if (!n)
				continue;
		}
		selective_reap(src, count, seen, &entries);
	}
	for (n = 0; n < 1000; n++)	/* none more may come */
		selective_reap(src, count, seen, &entries);
	if (entries != want || (cntr && (fi_cntr_read(cntr) != base + count ||
					 fi_cntr_readerr(cntr))))
		die("selective: %s: %u entries, %u expected; counter %lu "
		    "of %lu, %lu errors", read ? "read" : "write", entries,
		    want, cntr ? (unsigned long) (fi_cntr_read(cntr) - base) :
				 0UL, (unsigned long) count,
		    cntr ? (unsigned long) fi_cntr_readerr(cntr) : 0UL);
	free(seen);
}

/*
 * -Y -Z, initiator: every word written, then (with a counter to tell when
 * every read is done) read back over the poisoned source and checked;
 * the target checks its words as for -Y.
 */
static void selective_initiator(uint32_t count, int window, uint64_t seed)
{
	uint64_t *src = (uint64_t *) buf;
	uint32_t i;
	char msg;

	if (xrecv(&msg, 1) != 1 || msg != 'r')	/* the target poisoned */
		die("selective: expected 'r'");
	for (i = 0; i < count; i++)
		src[i] = turns_word(seed, i);
	selective_pass(0, src, count, window, 0);
	if (cntr) {
		memset(src, POISON, (size_t) count * 8);
		selective_pass(1, src, count, window, count);
		for (i = 0; i < count; i++)
			if (src[i] != turns_word(seed, i))
				die("selective: word %u read back wrong", i);
	}
	xsend("d", 1);
	if (xrecv(&msg, 1) != 1 || msg != 'k')
		die("selective: the target found words missing");
	printf("selective (%s%s): %u writes%s, every word at the target%s\n",
	       cntr ? "counter" : "", selective_cq ? " selective" : "", count,
	       cntr ? " and reads" : "", cntr ? " and back" : "");
}

/* -Y, target: progress until every word landed (transmit complete). */
static void turns_target(uint32_t count, uint64_t seed)
{
	const uint64_t *words = (const uint64_t *) buf;
	pid_t initiator = getppid();
	uint32_t i = 0, polls = 0;
	double end;
	char msg;

	memset(buf, POISON, buf_size);
	if (key_regions)
		regions_send(count);
	xsend("r", 1);
	while (!oob_ready()) {
		fi_cq_read(cq, NULL, 0);
		/* both ends of the socket are ours too: no hang-up to see */
		if (!(++polls % 4096) && getppid() != initiator)
			die("turns: the initiator is gone");
	}
	if (xrecv(&msg, 1) != 1 || msg != 'd')
		die("turns: expected 'd'");
	for (end = now() + TIMEOUT_S; i < count && now() < end;) {
		if (words[turns_pos(count, i)] == turns_word(seed, i))
			i++;
		else
			fi_cq_read(cq, NULL, 0);
	}
	if (i < count)
		die("turns: word %u of %u missing", i, count);
	xsend("k", 1);
}

/* Initiator: post while slots are free, report completions, free slots on
 * the target's verdict. */
/* Once a wall-clock second: the bytes since the last line. */
static void stream_report(double *tick, uint64_t bytes, uint64_t *last)
{
	if (wall() < *tick)
		return;
	printf("stream %.3f %lu\n", wall(), (unsigned long) (bytes - *last));
	fflush(stdout);
	*last = bytes;
	*tick += 1;
}

/* The initiator's end of a stream: the target's count of what was wrong. */
static uint64_t stream_end(void)
{
	struct stream_msg m = { STREAM_END, 0, 0 };

	xsend(&m, sizeof(m));
	xrecv(&m, sizeof(m));
	return m.bad;
}

static void stream_initiator(int op, uint32_t count, size_t size, int window,
			     uint64_t seed)
{
	char *ctx = calloc(window, 1);		/* 1: posted */
	uint32_t *slot_op = calloc(window, sizeof(*slot_op));
	int *free_slots = malloc(window * sizeof(int)), nfree = window, s;
	uint32_t posted = 0, verified = 0;
	/* entries of the CQ's format, whatever -Q chose */
	size_t esz = format_size(init_format);
	unsigned char e[16 * sizeof(struct fi_cq_tagged_entry)];
	struct fi_cq_err_entry err;
	struct stream_msg m;
	double idle_end = now() + STREAM_IDLE_S, tick = wall() + 1;
	uint64_t bytes = 0, last = 0;
	ssize_t r, i;

	for (s = 0; s < window; s++)
		free_slots[s] = s;
	while (verified < count) {
		while (nfree && posted < count) {
			char *local = buf + (size_t) free_slots[nfree - 1] *
				      stream_slot;

			s = free_slots[nfree - 1];
			stream_fill(local, size, seed + posted);
			r = stream_post(op, local, size, s,
					((uint64_t) posted << 8 | s) & data_mask,
					&ctx[s]);
			if (r == -FI_EAGAIN)
				break;
			if (r)
				die("stream post: %zd", r);
			ctx[s] = 1;
			slot_op[s] = posted++;
			nfree--;
		}
		r = fi_cq_read(cq, e, 16);
		if (r == -FI_EAVAIL) {
			memset(&err, 0, sizeof(err));
			fi_cq_readerr(cq, &err, 0);
			die("stream: error completion: %s",
			    fi_strerror(err.err));
		}
		for (i = 0; i < r; i++) {
			char *c = ((struct fi_cq_entry *)
				   (e + (size_t) i * esz))->op_context;

			if (c < ctx || c >= ctx + window || *c != 1)
				die("stream: completion of an op not in flight");
			*c = 2;
			s = (int) (c - ctx);
			m = (struct stream_msg) { slot_op[s], (uint32_t) s, 0 };
			xsend(&m, sizeof(m));
			bytes += size;
			idle_end = now() + STREAM_IDLE_S;
		}
		while (oob_ready()) {
			xrecv(&m, sizeof(m));
			if (m.bad)
				die("stream: op %u: %lu bad words at the "
				    "target", m.index, (unsigned long) m.bad);
			ctx[m.slot] = 0;
			free_slots[nfree++] = (int) m.slot;
			verified++;
		}
		stream_report(&tick, bytes, &last);
		if (now() > idle_end)
			die("stream: no completion for %d s (%u of %u verified)",
			    STREAM_IDLE_S, verified, count);
	}
	if ((m.bad = stream_end()))
		die("stream: the target saw %lu CQ data errors",
		    (unsigned long) m.bad);
	printf("stream: %u ops of %zu bytes, every byte verified, %s\n", count,
	       size, op == 2 ? "CQ data exactly once" : "writes");
	free(ctx);
	free(slot_op);
	free(free_slots);
}

/* Target: one CQ entry, if any: writedata's, checked as it arrives. */
static void stream_take_cq(int op, uint32_t count, size_t size, uint64_t seed,
			   char *seen)
{
	struct fi_cq_tagged_entry e;
	uint32_t i, s;

	if (fi_cq_read(cq, &e, 1) != 1)
		return;
	if (op != 2 || !(e.flags & FI_REMOTE_CQ_DATA))
		die("stream: unexpected CQ entry");
	if (!wdata_entry_ok(&e, size))
		die("stream: writedata's CQ entry: len %zu, flags 0x%lx; "
		    "expected len %zu", e.len, (unsigned long) e.flags, size);
	i = (uint32_t) (e.data >> 8);
	s = (uint32_t) (e.data & 0xff);
	if (i >= count || seen[i])
		die("stream: CQ data of op %u unexpected or repeated", i);
	seen[i] = 1;
	if (stream_check(buf + s * stream_slot, size, seed + i))
		die("stream: op %u's CQ data before its bytes", i);
}

/* Target: every op checked after its initiator's completion, writedata's
 * CQ data at arrival too, exactly once each. */
static void stream_target(int op, uint32_t count, size_t size, uint64_t seed)
{
	char *seen = calloc(count, 1);
	struct stream_msg m;
	double end;
	uint32_t i;

	memset(buf, POISON, buf_size);
	if (late_ms)
		usleep(late_ms * 1000u);
	for (;;) {
		while (!oob_ready())
			stream_take_cq(op, count, size, seed, seen);
		xrecv(&m, sizeof(m));
		if (m.index == STREAM_END)
			break;
		/* the initiator may see its completion before our CQ entry */
		end = now() + TIMEOUT_S;
		while (op == 2 && m.index < count && !seen[m.index] &&
		       now() < end)
			stream_take_cq(op, count, size, seed, seen);
		m.bad = stream_check(buf + m.slot * stream_slot, size,
				     seed + m.index);
		if (op == 2 && (m.index >= count || !seen[m.index]))
			m.bad++;
		memset(buf + m.slot * stream_slot, POISON, size);
		xsend(&m, sizeof(m));
	}
	m.bad = 0;
	for (i = 0; op == 2 && i < count; i++)
		m.bad += !seen[i];
	xsend(&m, sizeof(m));
	free(seen);
}


/* ---- -X with -o send or tsend: a stream of messages --------------------- */

/*
 * Messages of seeded sizes from 1 byte to -S, one tag, W in flight, into
 * W receives the target keeps posted.  Receives take messages in the order
 * they were posted, so the j-th receive must hold message j: a message
 * lost, repeated or overtaken shifts every later one into the wrong
 * receive.  Each is checked when its completion is read: its length, its
 * CQ data, every byte and the poison after it.
 */
#define MSGS_TAG	0x5eedull

static size_t msgs_size(uint64_t seed, uint32_t i, size_t max)
{
	uint64_t x = (seed + i) * 0x9E3779B97F4A7C15ull | 1;
	size_t n;

	stream_word(&x);
	n = 1 + (size_t) ((x >> 8) % ((size_t) 1 << (x % 24)));
	return n < max ? n : max;
}

static ssize_t msgs_post(int op, char *p, size_t len, uint64_t data,
			 void *ctx)
{
	void *desc = fi_mr_desc(mr);

	return op == OP_TSEND ?
	       fi_tsenddata(ep, p, len, desc, data, peer, MSGS_TAG, ctx) :
	       fi_senddata(ep, p, len, desc, data, peer, ctx);
}

static void msgs_fail_entry(const char *who)
{
	struct fi_cq_err_entry err = { 0 };

	fi_cq_readerr(cq, &err, 0);
	die("%s: error completion: %s (len %zu, olen %zu)", who,
	    fi_strerror(err.err), err.len, err.olen);
}

static void msgs_initiator(int op, uint32_t count, size_t max, int window,
			   uint64_t seed)
{
	char *ctx = calloc(window, 1);
	int *free_slots = malloc(window * sizeof(int)), nfree = window, s;
	uint32_t posted = 0, done = 0;
	size_t esz = format_size(init_format), len;
	unsigned char e[16 * sizeof(struct fi_cq_tagged_entry)];
	double idle_end = now() + STREAM_IDLE_S, tick = wall() + 1;
	double last_done = now(), gap = 0;
	uint64_t last = 0, total = 0;
	struct stream_msg m;
	ssize_t r, i;

	for (s = 0; s < window; s++)
		free_slots[s] = s;
	while (done < count) {
		while (nfree && posted < count) {
			s = free_slots[nfree - 1];
			len = msgs_size(seed, posted, max);
			stream_fill(buf + (size_t) s * stream_slot, len,
				    seed + posted);
			r = msgs_post(op, buf + (size_t) s * stream_slot, len,
				      posted & data_mask, &ctx[s]);
			if (r == -FI_EAGAIN)
				break;
			if (r)
				die("msgs: post: %s", fi_strerror((int) -r));
			ctx[s] = 1;
			posted++;
			nfree--;
			total += len;
		}
		r = fi_cq_read(cq, e, 16);
		if (r == -FI_EAVAIL)
			msgs_fail_entry("msgs: a send");
		for (i = 0; i < r; i++) {
			char *c = ((struct fi_cq_entry *)
				   (e + (size_t) i * esz))->op_context;

			if (c < ctx || c >= ctx + window || *c != 1)
				die("msgs: completion of a send not in flight");
			*c = 0;
			free_slots[nfree++] = (int) (c - ctx);
			done++;
			if (now() - last_done > gap)
				gap = now() - last_done;
			last_done = now();
			idle_end = now() + STREAM_IDLE_S;
		}
		stream_report(&tick, total, &last);
		if (now() > idle_end)
			die("msgs: no completion for %d s (%u of %u sent)",
			    STREAM_IDLE_S, done, count);
	}
	if ((m.bad = stream_end()))
		die("msgs: the target found %lu wrong", (unsigned long) m.bad);
	printf("msgs: %u %ss of 1 B to %zu B (%lu bytes), each received once, "
	       "in order, every byte checked; longest wait for a send's "
	       "completion %.1f s\n", count, op_name[op], max,
	       (unsigned long) total, gap);
	free(ctx);
	free(free_slots);
}

/* Target: receive j (of slot s) posted. */
static void msgs_post_recv(int op, int s, char *ctx)
{
	void *desc = fi_mr_desc(mr);
	char *p = buf + (size_t) s * stream_slot;
	ssize_t r;
	double end = now() + TIMEOUT_S;

	do {
		r = op == OP_TSEND ?
		    fi_trecv(ep, p, stream_slot, desc, FI_ADDR_UNSPEC,
			     MSGS_TAG, 0, &ctx[s]) :
		    fi_recv(ep, p, stream_slot, desc, FI_ADDR_UNSPEC, &ctx[s]);
		if (r == -FI_EAGAIN)
			fi_cq_read(cq, NULL, 0);
	} while (r == -FI_EAGAIN && now() < end);
	if (r)
		die("msgs: receive: %s", fi_strerror((int) -r));
}

/* Target: the receive of slot s, the j-th posted, completed as e says. */
static uint64_t msgs_check(const struct fi_cq_data_entry *e, int s,
			   uint32_t j, size_t max, uint64_t seed)
{
	size_t want = msgs_size(seed, j, max);
	const char *p = buf + (size_t) s * stream_slot;
	size_t tail = stream_slot - want < 64 ? stream_slot - want : 64;
	uint64_t bad = 0;

	if (e->len != want || e->data != (j & data_mask) ||
	    !(e->flags & FI_REMOTE_CQ_DATA)) {
		fprintf(stderr, "FAIL: receive %u: len %zu data %lu, expected "
			"%zu and %u\n", j, e->len, (unsigned long) e->data,
			want, j);
		return 1;
	}
	bad = stream_check(p, want, seed + j) + check_poison(p + want, tail);
	if (bad)
		fprintf(stderr, "FAIL: receive %u: %lu bad words or poison\n",
			j, (unsigned long) bad);
	memset(buf + (size_t) s * stream_slot, POISON, want + tail);
	return bad;
}

static void msgs_target(int op, uint32_t count, size_t max, int window,
			uint64_t seed)
{
	char *ctx = calloc(window, 1);
	uint32_t *slot_j = calloc(window, sizeof(*slot_j)), next = 0, got = 0;
	struct fi_cq_data_entry e[16];
	double idle_end = now() + STREAM_IDLE_S;
	struct stream_msg m;
	uint64_t bad = 0;
	ssize_t r, i;
	int s;

	memset(buf, POISON, buf_size);
	for (s = 0; s < window && next < count; s++) {
		slot_j[s] = next++;
		msgs_post_recv(op, s, ctx);
	}
	while (got < count) {
		r = fi_cq_read(cq, e, 16);
		if (r == -FI_EAVAIL)
			msgs_fail_entry("msgs: a receive");
		for (i = 0; i < r; i++) {
			char *c = e[i].op_context;

			if (c < ctx || c >= ctx + window)
				die("msgs: completion of no receive of ours");
			s = (int) (c - ctx);
			bad += msgs_check(&e[i], s, slot_j[s], max, seed);
			got++;
			idle_end = now() + STREAM_IDLE_S;
			if (next < count) {
				slot_j[s] = next++;
				msgs_post_recv(op, s, ctx);
			}
		}
		if (now() > idle_end)
			die("msgs: nothing received for %d s (%u of %u)",
			    STREAM_IDLE_S, got, count);
	}
	xrecv(&m, sizeof(m));
	if (m.index != STREAM_END)
		die("msgs: the initiator said %u", m.index);
	m.bad = bad;
	xsend(&m, sizeof(m));
	free(ctx);
	free(slot_j);
}

/* ---- -P: rounds of plain writes, each announced by a send ---------------- */

/*
 * What an application does: W transmit-complete writes (the default), wait
 * for their completions, then a send saying "done"; the target checks every
 * byte when that send's message arrives.  A rail that fails may lose bytes
 * of writes that already completed; then the send must fail, not arrive.
 */
struct round_msg {
	uint32_t round;
	int32_t status;			/* ROUND_* (initiator), or ready */
	uint64_t bad;
};

enum { ROUND_SENT, ROUND_SEND_FAILED, ROUND_WRITE_FAILED, ROUND_READY,
       ROUND_END };

#define ROUND_TIMEOUT_S	120		/* one round's ops, at most */

static uint32_t rounds_count;		/* -P */
static int rounds_op;			/* -P's -o: 0 write, 2 writedata, 3 read */
/* the round in flight, for reads checked at their completion */
static uint32_t round_now;
static size_t round_size;
static uint64_t round_seed0;
#define ROUNDS_MAX	4096		/* -P with -o writedata */

static uint64_t round_seed(uint64_t seed, uint32_t round, int k, int window)
{
	return seed + (uint64_t) round * (uint64_t) window + (uint64_t) k;
}

/* Initiator, -o read: read k's bytes, checked when it completed. */
static void round_check_read(int k, int window)
{
	uint64_t bad = stream_check(buf + (size_t) k * stream_slot,
				    round_size, round_seed(round_seed0,
							   round_now, k,
							   window));

	if (bad)
		die("rounds: round %u: read %d completed with %lu words "
		    "wrong", round_now, k, (unsigned long) bad);
}

/*
 * Initiator: read the CQ once; done[k] = 1 for ctx[k]'s success, 2 for its
 * error; the send's context is sctx (its slot: window).  Returns entries.
 */
static int round_reap(char *ctx, char *done, int window)
{
	struct fi_cq_data_entry e[16];	/* -Q is not taken with -P */
	struct fi_cq_err_entry err;
	ssize_t n, i;
	char *c;

	n = fi_cq_read(cq, e, 16);
	if (n == -FI_EAVAIL) {
		memset(&err, 0, sizeof(err));
		if (fi_cq_readerr(cq, &err, 0) != 1)
			die("rounds: fi_cq_readerr");
		c = err.op_context;
		if (c == &sctx)
			done[window] = 2;
		else if (c >= ctx && c < ctx + window)
			done[c - ctx] = 2;
		else
			die("rounds: an error for no op of ours");
		printf("rounds: %s failed: %s\n", c == &sctx ? "the send" :
		       "a write", fi_strerror(err.err));
		return 1;
	}
	if (n == -FI_EAGAIN)
		return 0;
	if (n < 0)
		die("rounds: fi_cq_read %zd", n);
	for (i = 0; i < n; i++) {
		c = e[i].op_context;
		if (c == &sctx)
			done[window] = 1;
		else if (c >= ctx && c < ctx + window && !done[c - ctx]) {
			done[c - ctx] = 1;
			if (rounds_op == 3)
				round_check_read((int) (c - ctx), window);
		} else if (c >= ctx && c < ctx + window)
			die("rounds: write %d completed twice (%s first)",
			    (int) (c - ctx), done[c - ctx] == 1 ? "success" :
			    "an error");
		else
			die("rounds: a completion for no op in flight");
	}
	return (int) n;
}

static int round_all_done(const char *done, int n)
{
	int k;

	for (k = 0; k < n; k++)
		if (!done[k])
			return 0;
	return 1;
}

static int round_any_failed(const char *done, int n)
{
	int k;

	for (k = 0; k < n; k++)
		if (done[k] == 2)
			return 1;
	return 0;
}

/*
 * MRL_ROUND_FAULT="R:CMD" (lines of them): CMD runs once round R's writes
 * completed, before its send.
 */
static void round_fault(uint32_t round)
{
	const char *f = getenv("MRL_ROUND_FAULT");
	char line[512], *cmd;
	size_t n;

	while (f && *f) {
		n = strcspn(f, "\n");
		snprintf(line, sizeof(line), "%.*s", (int) n, f);
		f += n + (f[n] == '\n');
		if (strtoul(line, &cmd, 0) != round || *cmd != ':')
			continue;
		printf("round %u: %s\n", round, cmd + 1);
		fflush(stdout);
		if (system(cmd + 1))
			die("rounds: MRL_ROUND_FAULT's command failed");
	}
}

/* Initiator: one round; returns its status, *secs the writes' time. */
static int round_run(uint32_t round, size_t size, int window, uint64_t seed,
		     char *ctx, char *done, double *secs)
{
	double start = now(), end = start + ROUND_TIMEOUT_S;
	uint32_t word = round;
	int k = 0;
	ssize_t r;

	memset(done, 0, (size_t) window + 1);
	round_now = round;
	round_size = size;
	round_seed0 = seed;
	while (k < window) {
		char *local = buf + (size_t) k * stream_slot;
		uint64_t raddr = peer_addr + (uint64_t) k * stream_slot;

		if (rounds_op == 3)
			memset(local, POISON, size);
		else
			stream_fill(local, size,
				    round_seed(seed, round, k, window));
		r = rounds_op == 3 ?
		    fi_read(ep, local, size, fi_mr_desc(mr), peer, raddr,
			    peer_key, &ctx[k]) :
		    rounds_op == 2 ?
		    fi_writedata(ep, local, size, fi_mr_desc(mr),
				 (uint64_t) round << 8 | (uint64_t) k, peer,
				 raddr, peer_key, &ctx[k]) :
		    fi_write(ep, local, size, fi_mr_desc(mr), peer, raddr,
			     peer_key, &ctx[k]);
		if (r == -FI_EAGAIN) {
			round_reap(ctx, done, window);
			if (now() > end)
				die("rounds: round %u: a write refused for "
				    "%d s", round, ROUND_TIMEOUT_S);
			continue;
		}
		if (r)
			done[k] = 2;	/* refused at once: a failed op */
		k++;
	}
	while (!round_all_done(done, window)) {
		round_reap(ctx, done, window);
		if (now() > end)
			die("rounds: round %u: writes not completed in %d s",
			    round, ROUND_TIMEOUT_S);
	}
	*secs = now() - start;
	round_fault(round);
	if (round_any_failed(done, window))
		return ROUND_WRITE_FAILED;
	if (rounds_op)			/* their own completions said it */
		return ROUND_SENT;
	memcpy(cbuf, &word, sizeof(word));
	do {
		r = fi_send(ep, cbuf, sizeof(word), fi_mr_desc(cmr), peer,
			    &sctx);
		if (r == -FI_EAGAIN) {
			round_reap(ctx, done, window);
			if (now() > end)
				die("rounds: round %u: the send refused for "
				    "%d s", round, ROUND_TIMEOUT_S);
		}
	} while (r == -FI_EAGAIN);
	if (r) {
		printf("rounds: round %u: the send failed at once: %s\n",
		       round, fi_strerror((int) -r));
		return ROUND_SEND_FAILED;
	}
	while (!done[window]) {
		round_reap(ctx, done, window);
		if (now() > end)
			die("rounds: round %u: the send not completed in %d s",
			    round, ROUND_TIMEOUT_S);
	}
	return done[window] == 1 ? ROUND_SENT : ROUND_SEND_FAILED;
}

static void rounds_initiator(uint32_t count, size_t size, int window,
			     uint64_t seed)
{
	char *ctx = calloc((size_t) window, 1), *done = calloc(
		(size_t) window + 1, 1);
	uint32_t n[ROUND_READY] = { 0 }, round;
	struct fi_multirail_ep_stats st = { 0 };
	struct round_msg m;
	double secs, worst = 0;

	for (round = 0; round < count; round++) {
		xrecv(&m, sizeof(m));
		if (m.status != ROUND_READY || m.round != round)
			die("rounds: the target is not at round %u", round);
		m.status = round_run(round, size, window, seed, ctx, done,
				     &secs);
		n[m.status]++;
		if (secs > worst)
			worst = secs;
		printf("round %u %.3f %.2f %s\n", round, wall(), secs,
		       m.status == ROUND_SENT ? "sent" :
		       m.status == ROUND_SEND_FAILED ? "send-failed" :
		       "write-failed");
		fflush(stdout);
		m.round = round;
		xsend(&m, sizeof(m));
	}
	m = (struct round_msg) { count, ROUND_END, 0 };
	xsend(&m, sizeof(m));
	xrecv(&m, sizeof(m));
	if (mrl_ops)
		mrl_ops->ep_stats(ep, &st, sizeof(st));
	printf("rounds: %u of %u ops each, %zu bytes: %u sent and checked, "
	       "%u sends failed, %u with a write failed; slowest writes "
	       "%.2f s; lost_sends %lu; conn_resets %lu\n", count, window,
	       size, n[ROUND_SENT], n[ROUND_SEND_FAILED],
	       n[ROUND_WRITE_FAILED], worst, (unsigned long) st.lost_sends,
	       (unsigned long) st.conn_resets);
	free(ctx);
	free(done);
}

/* Target: the message of round r, if it came; its writes checked now. */
static int round_take_msg(uint32_t round, size_t size, int window,
			  uint64_t seed)
{
	struct fi_cq_data_entry e;
	uint32_t got;
	uint64_t bad = 0;
	int k;
	ssize_t n = fi_cq_read(cq, &e, 1);

	if (n == -FI_EAGAIN)
		return 0;
	if (n != 1)
		die("rounds: target fi_cq_read %zd", n);
	if (!(e.flags & FI_RECV) || e.op_context != &rctx)
		die("rounds: an unexpected CQ entry at the target");
	memcpy(&got, cbuf, sizeof(got));
	if (got != round)
		die("rounds: the message of round %u came in round %u", got,
		    round);
	for (k = 0; k < window; k++)
		bad += stream_check(buf + (size_t) k * stream_slot, size,
				    round_seed(seed, round, k, window));
	if (bad)
		die("rounds: round %u: the message arrived with %lu words of "
		    "its completed writes wrong", round, (unsigned long) bad);
	CHK(fi_recv(ep, cbuf, sizeof(cbuf), fi_mr_desc(cmr), peer, &rctx));
	return 1;
}

/*
 * Target, -o writedata: a CQ entry, if any, checked as it arrives: the CQ
 * data of this round's op k once, its bytes there.  One of an earlier
 * round may come late only where that round had an op fail (its data may
 * have arrived: docs/design.md), and never twice.
 */
static int round_take_data(uint32_t round, size_t size, int window,
			   uint64_t seed, char *got, char *failed)
{
	struct fi_cq_data_entry e;
	uint32_t r, k;
	ssize_t n = fi_cq_read(cq, &e, 1);

	if (n == -FI_EAGAIN)
		return 0;
	if (n != 1 || !(e.flags & FI_REMOTE_CQ_DATA))
		die("rounds: target fi_cq_read %zd, flags 0x%lx", n,
		    n == 1 ? (unsigned long) e.flags : 0ul);
	r = (uint32_t) (e.data >> 8);
	k = (uint32_t) (e.data & 0xff);
	if (k >= (uint32_t) window || r > round)
		die("rounds: CQ data 0x%lx in round %u",
		    (unsigned long) e.data, round);
	if (r < round) {
		if (!failed[r])
			die("rounds: round %u's CQ data (op %u) came late, in "
			    "round %u, though every op of it succeeded", r, k,
			    round);
		printf("rounds: round %u's failed op %u: its data came in "
		       "round %u\n", r, k, round);
		return 0;
	}
	if (got[k]++)
		die("rounds: round %u: op %u's CQ data came twice", round, k);
	if (stream_check(buf + (size_t) k * stream_slot, size,
			 round_seed(seed, round, (int) k, window)))
		die("rounds: round %u: op %u's CQ data came before its bytes",
		    round, k);
	return 1;
}

/*
 * Target, -o writedata: what ran while the initiator posted round r.  A
 * transmit-complete writedata completes when its data left: a rail that
 * fails then may lose it.  A round whose writedata all completed and whose
 * data did not all come is a loss, which the next round's first writedata
 * must report (it fails): a loss no later op reports fails the test.
 */
#define ROUND_DATA_WAIT_S	15

static void rounds_target_data(size_t size, int window, uint64_t seed)
{
	char *failed = calloc(ROUNDS_MAX, 1), got[256];
	struct round_msg m;
	uint32_t round = 0, owed = 0;
	int owing = 0;
	double end;

	for (;;) {
		memset(buf, POISON, stream_slot * (size_t) window);
		memset(got, 0, sizeof(got));
		m = (struct round_msg) { round, ROUND_READY, 0 };
		xsend(&m, sizeof(m));
		while (!oob_ready())
			round_take_data(round, size, window, seed, got, failed);
		xrecv(&m, sizeof(m));
		if (m.status == ROUND_END)
			break;
		if (round >= ROUNDS_MAX - 1)
			die("rounds: -o writedata: %d rounds at most",
			    ROUNDS_MAX - 1);
		failed[round] = m.status != ROUND_SENT;
		if (owing && m.status == ROUND_SENT)
			die("rounds: round %u's data never came, and round %u "
			    "reported no loss", owed, round);
		owing = 0;
		end = now() + ROUND_DATA_WAIT_S;
		while (m.status == ROUND_SENT && !round_all_done(got, window) &&
		       now() < end)
			round_take_data(round, size, window, seed, got, failed);
		if (m.status == ROUND_SENT && !round_all_done(got, window)) {
			printf("rounds: round %u: every writedata completed and "
			       "some data never came: the next round must fail\n",
			       round);
			failed[round] = 1;	/* what comes late is allowed */
			owed = round;
			owing = 1;
		}
		round++;
	}
	if (owing)
		die("rounds: round %u's data never came, and no op reported "
		    "the loss", owed);
	xsend(&m, sizeof(m));
	free(failed);
}

static void rounds_target(size_t size, int window, uint64_t seed)
{
	struct round_msg m;
	uint32_t round = 0;
	int got = 0, k;
	double end;

	if (rounds_op == 2) {
		rounds_target_data(size, window, seed);
		return;
	}
	CHK(fi_recv(ep, cbuf, sizeof(cbuf), fi_mr_desc(cmr), peer, &rctx));
	for (;;) {
		if (rounds_op == 3) {	/* what the initiator reads */
			for (k = 0; k < window; k++)
				stream_fill(buf + (size_t) k * stream_slot,
					    size, round_seed(seed, round, k,
							     window));
		} else {
			memset(buf, POISON, stream_slot * (size_t) window);
		}
		m = (struct round_msg) { round, ROUND_READY, 0 };
		xsend(&m, sizeof(m));
		got = 0;
		while (!oob_ready())
			got |= round_take_msg(round, size, window, seed);
		xrecv(&m, sizeof(m));
		if (m.status == ROUND_END)
			break;
		if (rounds_op == 3) {
			round++;
			continue;
		}
		end = now() + TIMEOUT_S;
		while (m.status == ROUND_SENT && !got && now() < end)
			got |= round_take_msg(round, size, window, seed);
		if (m.status == ROUND_SENT && !got)
			die("rounds: round %u: the send completed and its "
			    "message never came", round);
		if (m.status != ROUND_SENT && got)
			die("rounds: round %u: a message came for a send that "
			    "failed", round);
		round++;
	}
	xsend(&m, sizeof(m));
}

/*
 * -K: 16 writes in flight, the target killed, 16 more, then 16 more after
 * the first error completion.  Every op must come back exactly once within
 * PEER_DEATH_S of its post (an error, or success for what the core had
 * sent before it saw the death), and once an error was seen every later
 * post must fail or complete with an error.
 */
#define PEER_DEATH_S	20

static int post_write_or_fail(size_t size, void *ctx)
{
	double end = now() + PEER_DEATH_S;
	ssize_t r;

	do {
		r = fi_write(ep, buf, size, fi_mr_desc(mr), peer, peer_addr,
			     peer_key, ctx);
		if (r == -FI_EAGAIN)
			fi_cq_read(cq, NULL, 0);
	} while (r == -FI_EAGAIN && now() < end);
	if (r == -FI_EAGAIN)
		die("a write to a dead peer refused for %d s", PEER_DEATH_S);
	return r ? 0 : 1;	/* posted: a completion will come */
}

/* Reap until every posted op came back; returns errors seen. */
static int reap(char *seen, int n, int posted, int *errs_after, int first)
{
	double end = now() + PEER_DEATH_S;
	struct fi_cq_err_entry err;
	struct fi_cq_tagged_entry e;
	int got = 0, errs = 0;
	ssize_t r;
	char *c;

	while (got < posted) {
		r = fi_cq_read(cq, &e, 1);
		if (r == -FI_EAGAIN) {
			if (now() > end)
				die("%d of %d ops to a dead peer never "
				    "completed", posted - got, posted);
			continue;
		}
		if (r == -FI_EAVAIL) {
			memset(&err, 0, sizeof(err));
			CHK(fi_cq_readerr(cq, &err, 0) == 1 ? 0 : -1);
			c = err.op_context;
			errs++;
		} else if (r == 1) {
			c = e.op_context;
			if (first < 0 && errs_after)
				(*errs_after)++;	/* success after an error */
		} else {
			die("fi_cq_read %zd", r);
		}
		if (c < seen || c >= seen + n || *c)
			die("a completion with a foreign or repeated context");
		*c = 1;
		got++;
	}
	return errs;
}

static void run_peer_death(pid_t target)
{
	enum { N = 16 };
	static char seen[3 * N];
	int posted = 0, errs, late_ok = 0, i;
	size_t size = 1 << 20;
	double t0;

	for (i = 0; i < N; i++)
		posted += post_write_or_fail(size, &seen[i]);
	kill(target, SIGKILL);
	waitpid(target, NULL, 0);
	t0 = now();
	for (; i < 2 * N; i++)
		posted += post_write_or_fail(size, &seen[i]);
	errs = reap(seen, 2 * N, posted, NULL, 0);
	if (!errs)
		die("no error completion after the peer died");
	printf("peer killed: %d of %d writes posted, %d failed, all back in "
	       "%.2fs\n", posted, 2 * N, errs, now() - t0);
	/* the death is known now: later writes fail, none succeeds */
	t0 = now();
	posted = 0;
	for (; i < 3 * N; i++)
		posted += post_write_or_fail(size, &seen[i]);
	errs = reap(seen + 2 * N, N, posted, &late_ok, -1);
	if (late_ok)
		die("%d writes to a dead peer succeeded", late_ok);
	printf("after: %d of %d writes posted, all failed, in %.2fs\n",
	       posted, N, now() - t0);
}

int main(int argc, char **argv)
{
	int ops[5] = { 0, 1, 2, 3, OP_INJECT }, nops = 5, window = 16, raw = 0;
	int c;
	int iters = 1, sv[2], status, all_rails = 0, peer_death = 0;
	uint32_t stream_count = 0;
	uint64_t stream_seed;
	char *netns = NULL, *target_env[8];
	int ntarget_env = 0;
	size_t max_size = 64 << 20;
	pid_t pid;

	while ((c = getopt(argc, argv, "o:S:W:Rn:AN:CE:L:FH:IKX:Y:G:Z:Q:TDBVMJ:P:")) != -1) {
		switch (c) {
		case 'o':
			nops = 1;
			ops[0] = !strcmp(optarg, "write") ? 0 :
				 !strcmp(optarg, "writev") ? 1 :
				 !strcmp(optarg, "writedata") ? 2 :
				 !strcmp(optarg, "read") ? 3 :
				 !strcmp(optarg, "injectdata") ? OP_INJECT :
				 !strcmp(optarg, "send") ? OP_SEND :
				 !strcmp(optarg, "tsend") ? OP_TSEND : -1;
			if (!strcmp(optarg, "all"))
				nops = 5, ops[0] = 0;
			else if (!strcmp(optarg, "atomic"))
				want_atomics = 1, ops[0] = 0;
			else if (ops[0] < 0)
				die("unknown op %s", optarg);
			break;
		case 'S':
			max_size = strtoull(optarg, NULL, 0);
			break;
		case 'W':
			window = atoi(optarg);
			break;
		case 'R':
			raw = 1;
			break;
		case 'n':
			iters = atoi(optarg);
			break;
		case 'A':
			all_rails = 1;
			break;
		case 'N':
			netns = optarg;
			break;
		case 'C':
			compact_name = 1;
			break;
		case 'E':
			if (ntarget_env == 8 || !strchr(optarg, '='))
				die("-E VAR=VALUE, at most 8");
			target_env[ntarget_env++] = optarg;
			break;
		case 'F':
			flag_mode = 1;
			break;
		case 'I':
			wdata_iovs = 1;
			break;
		case 'K':
			peer_death = 1;
			break;
		case 'X':
			stream_count = strtoul(optarg, NULL, 0);
			break;
		case 'Y':
			turns_count = strtoul(optarg, NULL, 0);
			break;
		case 'P':
			rounds_count = strtoul(optarg, NULL, 0);
			break;
		case 'G':
			key_regions = strtoul(optarg, NULL, 0);
			break;
		case 'D':
			tx_delivery_complete = 1;
			break;
		case 'B':
			rails_balanced = 1;
			break;
		case 'V':
			rail0_lost = 1;
			break;
		case 'M':
			rail0_lost = 2;
			break;
		case 'Z':
			selective = 1;
			selective_cq = !!strchr(optarg, 's');
			selective_cntr = !!strchr(optarg, 'c');
			break;
		case 'H':
			health_rail = atoi(optarg);
			health_rejoin = !!strstr(optarg, ":rejoin");
			health_fence = !!strstr(optarg, ":fence");
			health_refused = !!strstr(optarg, ":refused");
			break;
		case 'Q':
			init_format = !strcmp(optarg, "context") ?
				      FI_CQ_FORMAT_CONTEXT :
				      !strcmp(optarg, "msg") ? FI_CQ_FORMAT_MSG :
				      !strcmp(optarg, "tagged") ?
				      FI_CQ_FORMAT_TAGGED : FI_CQ_FORMAT_DATA;
			break;
		case 'T':
			thread_domain = 1;
			break;
		case 'J':
			late_ms = strtoul(optarg, NULL, 0);
			if (late_ms > 10000)
				die("-J wants 10000 ms at most");
			break;
		case 'L':
			expect_rails = strtoul(optarg, NULL, 16);
			if (!expect_rails)
				die("-L wants a non-zero hex mask");
			break;
		default:
			die("usage: rma_test [-o op] [-S max] [-W win] [-R] [-n it] [-A] [-N ns_init,ns_target] [-C] [-E VAR=VALUE] [-L mask] [-F] [-H rail[:rejoin][:fence][:refused]] [-K] [-X count] [-Y count [-G regions [-V|-M]] [-B] [-D] [-Z c|s|cs]] [-Q context|msg|data|tagged] [-T] [-J ms] [-P rounds]");
		}
	}
	buf_size = (size_t) window * ((max_size < (1 << 20) ? max_size :
				      (1 << 20)) + 128) + (max_size + 128) * 4;
	if (stream_count) {
		msg_stream = ops[0] == OP_SEND || ops[0] == OP_TSEND;
		if (nops != 1 || (ops[0] != 0 && ops[0] != 2 && !msg_stream) ||
		    window > 256)
			die("-X streams -o write, writedata, send or tsend, "
			    "-W 256 at most");
		stream_slot = (max_size + 63) & ~(size_t) 63;
		buf_size = stream_slot * window;
	}
	if ((ops[0] == OP_SEND || ops[0] == OP_TSEND) && !stream_count)
		die("-o send and -o tsend go with -X");
	if (rounds_count) {
		if (nops != 1 || (ops[0] != 0 && ops[0] != 2 && ops[0] != 3) ||
		    window > 256 || stream_count ||
		    init_format != FI_CQ_FORMAT_DATA)
			die("-P rounds: -o write, writedata or read, -W 256 "
			    "at most, not -X or -Q");
		rounds_op = ops[0];
		stream_slot = (max_size + 63) & ~(size_t) 63;
		buf_size = stream_slot * window;
	}
	if (turns_count) {
		if (nops != 1 || ops[0] != 0 || window > 256 ||
		    turns_count > (1u << 24) || turns_count < (uint32_t) window)
			die("-Y writes (-o write), -W 256 and 2^24 ops at "
			    "most, -W at least");
		buf_size = (size_t) turns_count * 8;
	}
	if (selective && !turns_count)
		die("-Z goes with -Y");
	if (late_ms && !stream_count)
		die("-J goes with -X");
	if (key_regions && (!turns_count || selective || raw ||
			    key_regions < 2 || key_regions > 8 ||
			    turns_count % key_regions))
		die("-G regions: 2 to 8, with -Y (a multiple of them), "
		    "not -Z or -R");
	if (rail0_lost && !key_regions)
		die("-V and -M go with -Y and -G");
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		die("socketpair");
	srand(getpid());
	pid = fork();
	if (pid < 0)
		die("fork");
	sock = pid ? sv[0] : sv[1];
	/* each side's death is the other's EOF: no failed side left waiting */
	close(pid ? sv[1] : sv[0]);
	role = pid ? "initiator" : "target";
	if (netns)
		enter_netns(netns, !pid);
	/* before the first fi_getinfo: the provider reads its knobs then */
	for (c = 0; !pid && c < ntarget_env; c++)
		putenv(target_env[c]);
	alarm(600);
	setup(raw);
	exchange_keys(raw);
	if (turns_count || stream_count || rounds_count) {
		/* -Y, -X, -P: one seed, one run */
		if (pid) {
			stream_seed = (uint64_t) rand() << 8 | 1;
			xsend(&stream_seed, sizeof(stream_seed));
			if (rounds_count)
				rounds_initiator(rounds_count, max_size,
						 window, stream_seed);
			else if (selective)
				selective_initiator(turns_count, window,
						    stream_seed);
			else if (rail0_lost)
				newkey_initiator(turns_count, window,
						 stream_seed);
			else if (turns_count)
				turns_initiator(turns_count, window,
						stream_seed);
			else if (msg_stream)
				msgs_initiator(ops[0], stream_count, max_size,
					       window, stream_seed);
			else
				stream_initiator(ops[0], stream_count,
						 max_size, window, stream_seed);
		} else {
			xrecv(&stream_seed, sizeof(stream_seed));
			if (rounds_count)
				rounds_target(max_size, window, stream_seed);
			else if (turns_count)
				turns_target(turns_count, stream_seed);
			else if (msg_stream)
				msgs_target(ops[0], stream_count, max_size, window,
					    stream_seed);
			else
				stream_target(ops[0], stream_count, max_size,
					      stream_seed);
		}
		teardown();
		if (pid && (waitpid(pid, &status, 0) != pid ||
			    !WIFEXITED(status) || WEXITSTATUS(status)))
			die("target failed");
		if (pid)
			printf("PASS\n");
		return 0;
	}
	if (pid && peer_death) {
		struct plan p = { .op = 0, .size = 4096, .window = 1 };

		p.seed = (uint64_t) rand() << 8 | 1ULL << 31;
		initiator_case(&p);	/* the rails are up and keys known */
		run_peer_death(pid);
		teardown();
		printf("PASS\n");
		return 0;
	}
	if (pid) {
		run_initiator(ops, nops, max_size, window, iters, all_rails);
		teardown();
		if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
		    WEXITSTATUS(status))
			die("target failed");
		printf("PASS\n");
	} else {
		run_target();
		teardown();
	}
	return 0;
}
