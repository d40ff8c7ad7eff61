/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Scatter-gather RMA and many-iov sends, two processes (fork) over
 * multirail (over the core FI_PROVIDER names, if it does), addresses and
 * keys over a socketpair.
 *
 * Each round draws 1..256 local iovs and 1..256 remote iovs of odd sizes
 * at odd offsets (the two lists cut the same bytes differently), and
 *   write:     one fi_writemsg; its one completion, then an fi_send: the
 *              target checks every region and every gap between them
 *              when the message arrives;
 *   writedata: the same with FI_REMOTE_CQ_DATA: the target checks every
 *              byte when the entry arrives, its len (the total), flags
 *              and data, and that no second entry comes;
 *   read:      one fi_readmsg of regions the target filled; the bytes
 *              checked at its completion;
 *   send:      one fi_sendmsg of the local iovs into one receive buffer.
 * Random data each round, destinations poisoned first.  fi_info must say
 * rma_iov_limit and iov_limit >= 256, and 0 or 257 iovs get -FI_EINVAL.
 *
 *   sg_test [-r rounds] [-s seed]
 */
#include <errno.h>
#include <poll.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

#define MAX_IOV		256
#define MAX_PIECE	5000		/* bytes of one local iov, at most */
#define BUF_SIZE	(MAX_IOV * (MAX_PIECE + 64) + 4096)
#define MSG_SIZE	(MAX_IOV * MAX_PIECE)
#define ALLOC_SIZE	((BUF_SIZE + MSG_SIZE + 4095) & ~(size_t) 4095)
#define POISON		0xdb
#define TIMEOUT_S	60.0

enum op { OP_WRITE, OP_WRITEDATA, OP_READ, OP_SEND, OP_COUNT };
static const char *const op_name[] = { "write", "writedata", "read", "send" };

static const char *role = "?";
static int sock;
static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_av *av;
static struct fid_cq *cq;
static struct fid_ep *ep;
static struct fid_mr *mr;
static uint8_t *buf;		/* initiator: local iovs; target: regions */
static uint8_t *msgbuf;		/* the sync messages and the send's target */
static fi_addr_t peer;
static uint64_t peer_addr, peer_key, data_mask = ~0ULL;

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "[%s] FAIL: ", role);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(1);
}

#define CHK(x) do { int _r = (int) (x); \
	if (_r) die("%s: %d (%s)", #x, _r, fi_strerror(-_r)); } while (0)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void xsend(const void *p, size_t len)
{
	if (send(sock, p, len, 0) != (ssize_t) len)
		die("oob send");
}

static void xrecv(void *p, size_t len)
{
	if (recv(sock, p, len, MSG_WAITALL) != (ssize_t) len)
		die("oob recv");
}

/* A small deterministic generator: both sides draw the same round. */
static uint64_t rng;

static uint32_t draw(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t) (rng % n);
}

static uint8_t byte_at(uint64_t seed, size_t i)
{
	uint64_t x = (seed + i) * 0x9e3779b97f4a7c15ULL;

	return (uint8_t) (x >> 56) ^ (uint8_t) i;
}

/* One round's shape: the same on both sides. */
struct round {
	enum op op;
	size_t nl, nr, total;
	struct iovec liov[MAX_IOV];	/* offsets into buf as iov_base */
	struct fi_rma_iov riov[MAX_IOV];	/* addr: offset into buf */
	uint64_t seed, data;
};

/*
 * nl local iovs of 1..MAX_PIECE bytes with gaps of 0..63, then the same
 * total cut into nr remote pieces (some of 0 bytes) with gaps of 1..64.
 */
static void draw_round(struct round *r, enum op op)
{
	size_t i, off = draw(64), left, cut;

	r->op = op;
	r->nl = 1 + draw(MAX_IOV);
	r->nr = 1 + draw(MAX_IOV);
	r->total = 0;
	for (i = 0; i < r->nl; i++) {
		r->liov[i].iov_base = (void *) (uintptr_t) off;
		r->liov[i].iov_len = 1 + draw(MAX_PIECE);
		off += r->liov[i].iov_len + draw(64);
		r->total += r->liov[i].iov_len;
	}
	left = r->total;
	off = 1 + draw(64);
	for (i = 0; i < r->nr; i++) {
		cut = i == r->nr - 1 ? left :
		      draw(4) ? draw((uint32_t) (2 * r->total / r->nr + 1)) : 0;
		if (cut > left)
			cut = left;
		r->riov[i].addr = off;
		r->riov[i].len = cut;
		off += cut + 1 + draw(64);
		left -= cut;
	}
	r->seed = ((uint64_t) draw(1u << 30) << 20) ^ draw(1u << 20);
	r->data = (r->seed * 7 + 1) & data_mask;
}

/* The byte the round puts at the k-th byte of the whole transfer. */
static uint8_t want_byte(const struct round *r, size_t k)
{
	return byte_at(r->seed, k);
}

static void fill_local(const struct round *r)
{
	size_t i, j, k = 0;

	memset(buf, POISON, BUF_SIZE);
	for (i = 0; i < r->nl; i++)
		for (j = 0; j < r->liov[i].iov_len; j++)
			buf[(uintptr_t) r->liov[i].iov_base + j] =
				want_byte(r, k++);
}

static void fill_remote(const struct round *r)
{
	size_t i, j, k = 0;

	memset(buf, POISON, BUF_SIZE);
	for (i = 0; i < r->nr; i++)
		for (j = 0; j < r->riov[i].len; j++)
			buf[r->riov[i].addr + j] = want_byte(r, k++);
}

/* Wrong bytes in the regions of list (remote: riov; local: liov), and
 * in the gaps, which must still be poison. */
static size_t bad_bytes(const struct round *r, int remote)
{
	uint8_t *want = malloc(BUF_SIZE);
	size_t i, j, k = 0, bad = 0;

	memset(want, POISON, BUF_SIZE);
	if (remote) {
		for (i = 0; i < r->nr; i++)
			for (j = 0; j < r->riov[i].len; j++)
				want[r->riov[i].addr + j] = want_byte(r, k++);
	} else {
		for (i = 0; i < r->nl; i++)
			for (j = 0; j < r->liov[i].iov_len; j++)
				want[(uintptr_t) r->liov[i].iov_base + j] =
					want_byte(r, k++);
	}
	for (i = 0; i < BUF_SIZE; i++)
		bad += buf[i] != want[i];
	free(want);
	return bad;
}

static void setup(void)
{
	struct fi_info *hints = fi_allocinfo();
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_DATA };
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	char name[1024], pname[1024];
	size_t len = sizeof(name), plen;
	uint64_t k[2];

	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_RMA;
	hints->mode = FI_CONTEXT;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
				      FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup("multirail");
	CHK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	fi_freeinfo(hints);
	if (info->tx_attr->rma_iov_limit < MAX_IOV ||
	    info->tx_attr->iov_limit < MAX_IOV)
		die("%s: rma_iov_limit %zu, iov_limit %zu: want >= %d",
		    info->fabric_attr->prov_name, info->tx_attr->rma_iov_limit,
		    info->tx_attr->iov_limit, MAX_IOV);
	if (info->domain_attr->cq_data_size < 8)
		data_mask = (1ULL << (8 * info->domain_attr->cq_data_size)) - 1;
	CHK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHK(fi_domain(fabric, info, &domain, NULL));
	CHK(fi_av_open(domain, &av_attr, &av, NULL));
	CHK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHK(fi_endpoint(domain, info, &ep, NULL));
	CHK(fi_ep_bind(ep, &av->fid, 0));
	CHK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHK(fi_enable(ep));
	CHK(fi_getname(&ep->fid, name, &len));
	xsend(&len, sizeof(len));
	xsend(name, len);
	xrecv(&plen, sizeof(plen));
	if (plen > sizeof(pname))
		die("peer name of %zu bytes", plen);
	xrecv(pname, plen);
	if (fi_av_insert(av, pname, 1, &peer, 0, NULL) != 1)
		die("fi_av_insert");
	buf = aligned_alloc(4096, ALLOC_SIZE);
	msgbuf = buf + BUF_SIZE;
	CHK(fi_mr_reg(domain, buf, ALLOC_SIZE,
		      FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE |
		      FI_SEND | FI_RECV, 0, 1, 0, &mr, NULL));
	k[0] = (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ?
	       (uintptr_t) buf : 0;
	k[1] = fi_mr_key(mr);
	xsend(k, sizeof(k));
	xrecv(k, sizeof(k));
	peer_addr = k[0];
	peer_key = k[1];
}

/* One completion (or none within ms, when none is wanted). */
static int take(struct fi_cq_data_entry *e, double ms)
{
	struct fi_cq_err_entry err = { 0 };
	double end = now() + ms / 1000;
	ssize_t r;

	do {
		r = fi_cq_read(cq, e, 1);
		if (r == 1)
			return 1;
		if (r == -FI_EAVAIL) {
			fi_cq_readerr(cq, &err, 0);
			die("error completion: %s", fi_strerror(err.err));
		}
		if (r != -FI_EAGAIN)
			die("fi_cq_read: %zd", r);
	} while (now() < end);
	return 0;
}

static void must_take(struct fi_cq_data_entry *e, const char *what)
{
	if (!take(e, TIMEOUT_S * 1000))
		die("timeout waiting for %s", what);
}

static ssize_t retry(ssize_t (*post)(const void *), const void *arg)
{
	struct fi_cq_data_entry e;
	double end = now() + TIMEOUT_S;
	ssize_t r;

	while ((r = post(arg)) == -FI_EAGAIN && now() < end)
		if (fi_cq_read(cq, &e, 0) == 1)
			die("completion while posting");
	return r;
}

/*
 * A byte from the peer over the socket; the provider progresses meanwhile
 * (its peer's reads and writes need ours, over a core like rxm).
 */
static char wait_oob(void)
{
	struct pollfd pfd = { .fd = sock, .events = POLLIN };
	double end = now() + TIMEOUT_S;
	char c;

	while (poll(&pfd, 1, 0) == 0) {
		if (fi_cq_read(cq, NULL, 0) == 1)
			die("a completion while waiting for the peer");
		if (now() > end)
			die("timeout waiting for the peer");
	}
	xrecv(&c, 1);
	return c;
}

static struct round cur;
static struct iovec liov[MAX_IOV];
static void *ldesc[MAX_IOV];
static struct fi_rma_iov riov[MAX_IOV];

static ssize_t post_rma(const void *arg)
{
	const struct round *r = arg;
	struct fi_msg_rma m = {
		.msg_iov = liov, .desc = ldesc, .iov_count = r->nl,
		.addr = peer, .rma_iov = riov, .rma_iov_count = r->nr,
		.context = &cur, .data = r->data,
	};

	if (r->op == OP_READ)
		return fi_readmsg(ep, &m, FI_COMPLETION);
	return fi_writemsg(ep, &m, FI_COMPLETION |
			   (r->op == OP_WRITEDATA ? FI_REMOTE_CQ_DATA : 0));
}

static ssize_t post_sendv(const void *arg)
{
	const struct round *r = arg;
	struct fi_msg m = {
		.msg_iov = liov, .desc = ldesc, .iov_count = r->nl,
		.addr = peer, .context = &cur,
	};

	return fi_sendmsg(ep, &m, FI_COMPLETION);
}

static ssize_t post_sync(const void *arg)
{
	(void) arg;
	return fi_send(ep, msgbuf, 4, fi_mr_desc(mr), peer, msgbuf);
}

static void to_real(const struct round *r)
{
	size_t i;

	for (i = 0; i < r->nl; i++) {
		liov[i].iov_base = buf + (uintptr_t) r->liov[i].iov_base;
		liov[i].iov_len = r->liov[i].iov_len;
		ldesc[i] = fi_mr_desc(mr);
	}
	for (i = 0; i < r->nr; i++) {
		riov[i] = r->riov[i];
		riov[i].addr += peer_addr;
		riov[i].key = peer_key;
	}
}

static void initiator_round(struct round *r)
{
	struct fi_cq_data_entry e;
	char go;

	if (r->op == OP_READ)
		memset(buf, POISON, BUF_SIZE);
	else
		fill_local(r);
	to_real(r);
	if (wait_oob() != 'r')		/* the target is ready */
		die("the target is not ready");
	CHK(retry(r->op == OP_SEND ? post_sendv : post_rma, r));
	must_take(&e, "the op's completion");
	if (e.op_context != &cur || e.len != (r->op == OP_SEND ? r->total :
					       r->total))
		die("%s: completion context %p len %zu, want %p len %zu",
		    op_name[r->op], e.op_context, e.len, (void *) &cur,
		    r->total);
	if (r->op == OP_READ && bad_bytes(r, 0))
		die("read of %zu local, %zu remote iovs: %zu bytes wrong at "
		    "its completion", r->nl, r->nr, bad_bytes(r, 0));
	if (r->op == OP_WRITE) {	/* the message that says they landed */
		CHK(retry(post_sync, NULL));
		must_take(&e, "the sync send's completion");
	}
	if (take(&e, 20))
		die("%s: a second completion", op_name[r->op]);
	xsend("d", 1);
	go = wait_oob();		/* the target's verdict */
	if (go != 'k')
		die("the target failed");
}

static void target_round(struct round *r)
{
	struct fi_cq_data_entry e;
	uint64_t want = FI_REMOTE_CQ_DATA | FI_RMA | FI_REMOTE_WRITE;
	size_t bad;
	char ok = 'k';

	if (r->op == OP_READ)
		fill_remote(r);
	else
		memset(buf, POISON, BUF_SIZE);
	if (r->op == OP_WRITE || r->op == OP_SEND) {
		memset(msgbuf, POISON, r->total);
		CHK(fi_recv(ep, msgbuf, r->op == OP_SEND ? r->total : 4,
			    fi_mr_desc(mr), FI_ADDR_UNSPEC, msgbuf));
	}
	xsend("r", 1);
	if (r->op == OP_WRITE || r->op == OP_SEND) {
		must_take(&e, "the message");
		if (!(e.flags & FI_RECV))
			die("%s: entry flags 0x%" PRIx64 ", want a receive",
			    op_name[r->op], (uint64_t) e.flags);
	}
	if (r->op == OP_WRITE && (bad = bad_bytes(r, 1)))
		die("write of %zu local, %zu remote iovs: %zu bytes wrong when "
		    "the message came", r->nl, r->nr, bad);
	if (r->op == OP_SEND) {
		size_t k;

		if (e.len != r->total)
			die("send of %zu iovs: received %zu bytes, want %zu",
			    r->nl, e.len, r->total);
		for (k = 0; k < r->total; k++)
			if (msgbuf[k] != want_byte(r, k))
				die("send of %zu iovs: byte %zu wrong", r->nl,
				    k);
	}
	if (r->op == OP_WRITEDATA) {
		must_take(&e, "the writedata's entry");
		bad = bad_bytes(r, 1);
		if (bad)
			die("writedata of %zu local, %zu remote iovs: the entry "
			    "came with %zu bytes wrong", r->nl, r->nr, bad);
		if ((e.flags & want) != want || e.len != r->total ||
		    e.data != r->data)
			die("writedata entry: flags 0x%" PRIx64 " len %zu data "
			    "0x%" PRIx64 ", want len %zu data 0x%" PRIx64,
			    (uint64_t) e.flags, e.len, (uint64_t) e.data,
			    r->total, r->data);
	}
	if (wait_oob() != 'd')
		die("expected the initiator's 'd'");
	if (r->op == OP_WRITEDATA && take(&e, 50))
		die("writedata: a second entry (flags 0x%" PRIx64 ")",
		    (uint64_t) e.flags);
	xsend(&ok, 1);
}

/* 0 and 257 iovs, local or remote: -FI_EINVAL, nothing posted. */
static void bad_counts(void)
{
	static struct iovec many[MAX_IOV + 1];
	static void *descs[MAX_IOV + 1];
	static struct fi_rma_iov many_rma[MAX_IOV + 1];
	struct fi_rma_iov one = { peer_addr, 8, peer_key };
	struct fi_msg_rma m = {
		.msg_iov = many, .desc = descs, .iov_count = 1, .addr = peer,
		.rma_iov = riov, .rma_iov_count = 0,
	};
	size_t i;
	ssize_t r;

	for (i = 0; i <= MAX_IOV; i++) {
		many[i] = (struct iovec) { buf, 1 };
		descs[i] = fi_mr_desc(mr);
		riov[i % MAX_IOV] = one;
		many_rma[i] = one;
	}
	r = fi_writemsg(ep, &m, 0);
	if (r != -FI_EINVAL)
		die("fi_writemsg of 0 remote iovs: %zd, want -FI_EINVAL", r);
	m.iov_count = MAX_IOV + 1;
	m.rma_iov_count = 1;
	r = fi_writemsg(ep, &m, 0);
	if (r != -FI_EINVAL)
		die("fi_writemsg of %d iovs: %zd, want -FI_EINVAL", MAX_IOV + 1,
		    r);
	m.iov_count = 1;
	m.rma_iov = many_rma;
	m.rma_iov_count = MAX_IOV + 1;
	r = fi_readmsg(ep, &m, 0);
	if (r != -FI_EINVAL)
		die("fi_readmsg of %d remote iovs: %zd, want -FI_EINVAL",
		    MAX_IOV + 1, r);
	printf("ok: 0 remote iovs, %d local and %d remote refused "
	       "(-FI_EINVAL)\n", MAX_IOV + 1, MAX_IOV + 1);
}

static void run(int initiator, int rounds, uint64_t seed)
{
	struct round *r = &cur;
	int i;

	setup();
	if (initiator)
		bad_counts();
	rng = seed | 1;
	for (i = 0; i < rounds; i++) {
		draw_round(r, (enum op) (i % OP_COUNT));
		if (initiator)
			initiator_round(r);
		else
			target_round(r);
		if (initiator)
			printf("ok %s: %zu local iovs, %zu remote, %zu bytes\n",
			       op_name[r->op], r->nl, r->nr, r->total);
	}
	fi_close(&ep->fid);
	fi_close(&mr->fid);
	fi_close(&cq->fid);
	fi_close(&av->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	free(buf);
}

int main(int argc, char **argv)
{
	int sv[2], opt, rounds = 24, status;
	uint64_t seed = (uint64_t) time(NULL);
	pid_t pid;

	while ((opt = getopt(argc, argv, "r:s:")) != -1) {
		if (opt == 'r')
			rounds = atoi(optarg);
		else if (opt == 's')
			seed = strtoull(optarg, NULL, 0);
		else
			die("usage: sg_test [-r rounds] [-s seed]");
	}
	printf("seed %" PRIu64 "\n", seed);
	fflush(stdout);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		die("socketpair: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		die("fork");
	if (!pid) {
		role = "target";
		close(sv[0]);
		sock = sv[1];
		run(0, rounds, seed);
		exit(0);
	}
	role = "initiator";
	close(sv[1]);
	sock = sv[0];
	run(1, rounds, seed);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status))
		die("the target failed");
	printf("PASS\n");
	return 0;
}
