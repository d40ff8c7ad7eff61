/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Both ends connect at once, on many endpoints of several domains, each
 * domain driven by its own thread: the pattern of NCCL's RDMA protocol
 * through aws-ofi-nccl, where two ranks open an endpoint per communicator
 * and each writes to the other before any connection exists.
 * Two processes (fork), names and keys exchanged over a socketpair; each
 * opens -d domains (threads) of -e endpoints (each its own CQ and AV) and,
 * for every endpoint at once, both sides run -r rounds of: a write of -s
 * random bytes into the peer's slot for that endpoint, then, once it
 * completed, a 4-byte send
 * "round r written"; the receiver checks every byte of its slot when that
 * message arrives, then sends "round r checked", and the next round waits
 * for it.  Every completion must succeed.  At the end, over multirail,
 * each rail 1 and up of a pair must have been opened (RAIL_UP) from one
 * end only.
 *
 *   xconn_test [-d domains] [-e endpoints] [-r rounds] [-s size] [-x]
 *              [-n bytes]
 *
 * -x: each domain on its own NIC (fi_getinfo's entries of one fabric in
 * turn), where a provider offers several.
 * -n: the room fi_getname is given for a name (aws-ofi-nccl gives 56
 * bytes, too few for multirail's every rail: then each end knows the
 * other by rail 0 alone, and both learn the rest at once).
 *
 * Environment: FI_PROVIDER_PATH, FI_PROVIDER, MRL_TEST_PROV (the provider
 * asked for; default multirail), MRL_TEST_FABRIC (the fabric's name).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "rdma/fi_ext_multirail.h"
#include "util.h"

#define MAX_EPS		32
#define MAX_GROUPS	8
#define NAME_MAX_LEN	1024
#define TIMEOUT_S	60

enum { MSG_WRITTEN = 1, MSG_CHECKED = 2 };

#define TX_RING		8

struct xc_ep {
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	fi_addr_t peer;
	uint64_t peer_addr, peer_key;
	uint32_t round;		/* the round this endpoint is in */
	int write_done, sends_out;
	/* the rounds whose WRITTEN (checked here) and CHECKED came, + 1 */
	uint32_t peer_written, peer_checked;
	uint32_t rx, tx[TX_RING];	/* a message: kind << 24 | round */
	unsigned int tx_next;
	struct fi_context2 wctx, rctx, sctx[TX_RING];
};

/* One domain and its endpoints, driven by one thread (-d: several). */
struct group {
	int sock;
	struct fid_domain *domain;
	struct xc_ep eps[MAX_EPS];
	uint8_t *mine, *theirs;		/* written by us / by the peer */
	struct fid_mr *mr, *mr_msg;
	struct fi_info *info;
	int index;
};

static struct fi_info *info;
static struct fid_fabric *fabric;
static int side, neps = 8, nrounds = 20, ngroups = 1, spread;
static size_t size = 256 * 1024, name_room = NAME_MAX_LEN;

static void oob_send(struct group *g, const void *p, size_t len)
{
	if (write(g->sock, p, len) != (ssize_t) len)
		die("oob send");
}

static void oob_recv(struct group *g, void *p, size_t len)
{
	size_t got = 0;
	ssize_t n;

	while (got < len) {
		n = read(g->sock, (char *) p + got, len - got);
		if (n <= 0)
			die("oob recv");
		got += (size_t) n;
	}
}

/* A refused post waits for every endpoint's progress, as the peer's
 * posts may be waiting for ours (nothing is reaped here). */
static void progress_all(struct group *g)
{
	int e;

	for (e = 0; e < neps; e++)
		(void) fi_cq_read(g->eps[e].cq, NULL, 0);
}

static uint8_t pattern(int from, int grp, int e, uint32_t round, size_t i)
{
	uint64_t x = ((uint64_t) from << 48) ^ ((uint64_t) grp << 40) ^
		     ((uint64_t) e << 32) ^ ((uint64_t) round << 20) ^ i;

	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return (uint8_t) x;
}

static void *msg_desc(struct group *g)
{
	return g->mr_msg ? fi_mr_desc(g->mr_msg) : NULL;
}

static void post_recv(struct group *g, struct xc_ep *x)
{
	CHK(fi_recv(x->ep, &x->rx, sizeof(x->rx), msg_desc(g), x->peer,
		    &x->rctx));
}

static void post_send(struct group *g, struct xc_ep *x, uint32_t kind,
		      uint32_t round)
{
	unsigned int i = x->tx_next++ % TX_RING;
	double end = now() + TIMEOUT_S;
	ssize_t r;

	if (x->sends_out >= TX_RING)
		die("more than %d sends in flight on one endpoint", TX_RING);
	x->tx[i] = kind << 24 | round;
	do {
		r = fi_send(x->ep, &x->tx[i], sizeof(x->tx[i]), msg_desc(g),
			    x->peer, &x->sctx[i]);
		if (r == -FI_EAGAIN)
			progress_all(g);
	} while (r == -FI_EAGAIN && now() < end);
	if (r)
		die("fi_send: %zd (%s)", r, fi_strerror((int) -r));
	x->sends_out++;
}

static void post_write(struct group *g, int e)
{
	struct xc_ep *x = &g->eps[e];
	uint8_t *src = g->mine + (size_t) e * size;
	double end = now() + TIMEOUT_S;
	size_t i;
	ssize_t r;

	for (i = 0; i < size; i++)
		src[i] = pattern(side, g->index, e, x->round, i);
	do {
		r = fi_write(x->ep, src, size, fi_mr_desc(g->mr), x->peer,
			     x->peer_addr + (uint64_t) e * size, x->peer_key,
			     &x->wctx);
		if (r == -FI_EAGAIN)
			progress_all(g);
	} while (r == -FI_EAGAIN && now() < end);
	if (r)
		die("fi_write: %zd (%s)", r, fi_strerror((int) -r));
}

static void check_slot(struct group *g, int e, uint32_t round)
{
	const uint8_t *slot = g->theirs + (size_t) e * size;
	size_t i, bad = 0;

	for (i = 0; i < size; i++)
		bad += slot[i] != pattern(!side, g->index, e, round, i);
	if (bad)
		die("domain %d, endpoint %d, round %u: the message arrived "
		    "with %zu bytes of the write wrong", g->index, e, round,
		    bad);
}

/*
 * A message from the peer on endpoint e.  Its WRITTEN of the next round
 * may come before this side has left the round (its last send not yet
 * reaped): the peer wrote only after our CHECKED of this one.
 */
static void on_message(struct group *g, int e)
{
	struct xc_ep *x = &g->eps[e];
	uint32_t m = x->rx, kind = m >> 24, round = m & 0xffffff;

	post_recv(g, x);
	if (kind == MSG_WRITTEN && round == x->peer_written &&
	    round <= x->round + 1) {
		check_slot(g, e, round);
		x->peer_written++;
		post_send(g, x, MSG_CHECKED, round);
	} else if (kind == MSG_CHECKED && round == x->peer_checked &&
		   round == x->round) {
		x->peer_checked++;
	} else {
		die("domain %d, endpoint %d, round %u: unexpected message "
		    "0x%x", g->index, e, x->round, m);
	}
}

/* One completion of endpoint e; 0 when there was none. */
static int reap(struct group *g, int e)
{
	struct xc_ep *x = &g->eps[e];
	struct fi_cq_err_entry err = { 0 };
	struct fi_cq_entry c;
	ssize_t n = fi_cq_read(x->cq, &c, 1);

	if (n == -FI_EAGAIN)
		return 0;
	if (n == -FI_EAVAIL) {
		fi_cq_readerr(x->cq, &err, 0);
		die("domain %d, endpoint %d, round %u: error completion: %s "
		    "(prov_errno %d: %s)", g->index, e, x->round,
		    fi_strerror(err.err), err.prov_errno,
		    fi_cq_strerror(x->cq, err.prov_errno, err.err_data, NULL,
				   0));
	}
	if (n != 1)
		die("endpoint %d: fi_cq_read %zd", e, n);
	if (c.op_context == &x->wctx) {
		x->write_done = 1;
		post_send(g, x, MSG_WRITTEN, x->round);
	} else if ((struct fi_context2 *) c.op_context >= x->sctx &&
		   (struct fi_context2 *) c.op_context < x->sctx + TX_RING) {
		x->sends_out--;
	} else if (c.op_context == &x->rctx) {
		on_message(g, e);
	} else {
		die("endpoint %d: a completion for nothing posted", e);
	}
	return 1;
}

/* Every endpoint's rounds at once; returns when all are done. */
static void run_rounds(struct group *g)
{
	double end = now() + TIMEOUT_S * 2;
	int e, busy;

	for (e = 0; e < neps; e++) {
		post_recv(g, &g->eps[e]);
		post_write(g, e);
	}
	do {
		busy = 0;
		for (e = 0; e < neps; e++) {
			struct xc_ep *x = &g->eps[e];

			while (reap(g, e))
				;
			/* a round ends with our write announced and checked
			 * there, and the peer's checked here */
			if (x->round < (uint32_t) nrounds && x->write_done &&
			    x->peer_written > x->round &&
			    x->peer_checked > x->round) {
				x->round++;
				x->write_done = 0;
				if (x->round < (uint32_t) nrounds)
					post_write(g, e);
			}
			busy |= x->round < (uint32_t) nrounds;
		}
		if (now() > end)
			die("rounds not done in %d s", TIMEOUT_S * 2);
	} while (busy);
}

/* Our last CHECKED sends complete only with the peer's progress: both
 * sides reap until theirs did. */
static void drain_sends(struct group *g)
{
	double end = now() + TIMEOUT_S;
	int e, out;

	do {
		out = 0;
		for (e = 0; e < neps; e++) {
			while (reap(g, e))
				;
			out += g->eps[e].sends_out;
		}
		if (now() > end)
			die("sends not completed in %d s", TIMEOUT_S);
	} while (out);
}

static void open_info(void)
{
	struct fi_info *hints = fi_allocinfo();

	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_RMA;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
				      FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->domain_attr->threading = FI_THREAD_SAFE;
	hints->fabric_attr->prov_name = strdup(getenv("MRL_TEST_PROV") ?
			getenv("MRL_TEST_PROV") : "multirail");
	if (getenv("MRL_TEST_FABRIC"))
		hints->fabric_attr->name = strdup(getenv("MRL_TEST_FABRIC"));
	CHK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	fi_freeinfo(hints);
	CHK(fi_fabric(info->fabric_attr, &fabric, NULL));
}

/* The entry a group opens its domain from: the first, or with -x the
 * group's own among the entries of the first's fabric (another NIC). */
static struct fi_info *group_info(const struct group *g)
{
	struct fi_info *fi = info;
	int i;

	for (i = 0; spread && i < g->index; i++) {
		do
			fi = fi->next ? fi->next : info;
		while (strcmp(fi->fabric_attr->name, info->fabric_attr->name));
	}
	return fi;
}

static void open_group(struct group *g)
{
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT };
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	uint8_t name[NAME_MAX_LEN];
	size_t len;
	uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
	int e;

	g->info = group_info(g);
	CHK(fi_domain(fabric, g->info, &g->domain, NULL));
	g->mine = aligned_alloc(4096, (size_t) neps * size);
	g->theirs = aligned_alloc(4096, (size_t) neps * size);
	if (!g->mine || !g->theirs)
		die("out of memory");
	memset(g->theirs, 0xa5, (size_t) neps * size);
	/* distinct requested keys, for cores without FI_MR_PROV_KEY */
	CHK(fi_mr_reg(g->domain, g->mine, (size_t) neps * size, access, 0,
		      3 * g->index + 1, 0, &g->mr, NULL));
	for (e = 0; e < neps; e++) {
		struct xc_ep *x = &g->eps[e];

		CHK(fi_av_open(g->domain, &av_attr, &x->av, NULL));
		CHK(fi_cq_open(g->domain, &cq_attr, &x->cq, NULL));
		CHK(fi_endpoint(g->domain, g->info, &x->ep, NULL));
		CHK(fi_ep_bind(x->ep, &x->av->fid, 0));
		CHK(fi_ep_bind(x->ep, &x->cq->fid, FI_TRANSMIT | FI_RECV));
		CHK(fi_enable(x->ep));
		len = name_room;
		CHK(fi_getname(&x->ep->fid, name, &len));
		oob_send(g, &len, sizeof(len));
		oob_send(g, name, len);
	}
	for (e = 0; e < neps; e++) {
		struct xc_ep *x = &g->eps[e];

		oob_recv(g, &len, sizeof(len));
		if (len > sizeof(name))
			die("a name of %zu bytes", len);
		oob_recv(g, name, len);
		if (fi_av_insert(x->av, name, 1, &x->peer, 0, NULL) != 1)
			die("fi_av_insert");
	}
}

/* The messages' buffers (in eps[]) and the slots, registered. */
static void register_and_exchange(struct group *g)
{
	uint64_t addr, key, base = (info->domain_attr->mr_mode &
				    FI_MR_VIRT_ADDR) ? (uintptr_t) g->theirs : 0;
	struct fid_mr *slots;
	int e;

	CHK(fi_mr_reg(g->domain, g->eps, sizeof(g->eps), FI_SEND | FI_RECV,
		      0, 3 * g->index + 2, 0, &g->mr_msg, NULL));
	CHK(fi_mr_reg(g->domain, g->theirs, (size_t) neps * size,
		      FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 3 * g->index + 3, 0,
		      &slots, NULL));
	key = fi_mr_key(slots);
	oob_send(g, &base, sizeof(base));
	oob_send(g, &key, sizeof(key));
	oob_recv(g, &addr, sizeof(addr));
	oob_recv(g, &key, sizeof(key));
	for (e = 0; e < neps; e++) {
		g->eps[e].peer_addr = addr;
		g->eps[e].peer_key = key;
	}
}

/*
 * What rails 1 and up did for this endpoint: which it sent control
 * messages on (*greeted) and the RMA bytes it posted there (*bytes).
 * Returns its rail count: 0 over a provider other than multirail.
 */
static int rails_beyond_0(struct xc_ep *x, uint32_t *greeted,
			  uint64_t *bytes)
{
	struct fi_multirail_ep_ops *ops;
	struct fi_multirail_rail_stats st;
	int r, n;

	*greeted = 0;
	*bytes = 0;
	if (fi_open_ops(&x->ep->fid, FI_MULTIRAIL_EP_OPS, 0, (void **) &ops,
			NULL))
		return 0;
	n = ops->rail_count(x->ep);
	for (r = 1; r < n && r < 32; r++) {
		CHK(ops->rail_stats(x->ep, r, &st));
		if (st.ctrl_sent)
			*greeted |= 1u << r;
		*bytes += st.tx_bytes;
	}
	return n;
}

/* Writes of this many bytes are striped unless FI_MULTIRAIL_STRIPE_MIN
 * says otherwise (its default). */
#define STRIPED_FROM	(64 * 1024)

/*
 * Where multirail opens a pair's rails from one end (RAIL_UP), the two
 * ends' greeted masks share no rail; both ends opening one is a
 * simultaneous connection, which 2.x's tcp resolves by cancelling the
 * sends of the one it drops.  And striped writes must leave rail 0 once
 * the peer is known on every rail, whichever way it came to be known
 * (-n: from rail 0's address alone).
 */
static void check_rails(struct group *g)
{
	uint32_t mine[MAX_EPS], theirs[MAX_EPS];
	bool striped = size >= STRIPED_FROM &&
		       !getenv("FI_MULTIRAIL_STRIPE_MIN");
	uint64_t bytes;
	int e;

	for (e = 0; e < neps; e++) {
		if (rails_beyond_0(&g->eps[e], &mine[e], &bytes) > 1 &&
		    striped && !bytes)
			die("domain %d, endpoint %d: every write went on "
			    "rail 0", g->index, e);
	}
	oob_send(g, mine, sizeof(mine[0]) * neps);
	oob_recv(g, theirs, sizeof(theirs[0]) * neps);
	for (e = 0; e < neps; e++)
		if (mine[e] & theirs[e])
			die("domain %d, endpoint %d: both ends opened rails "
			    "0x%x", g->index, e, mine[e] & theirs[e]);
}

/* One domain's run, in its own thread where there are several. */
static void *run_group(void *arg)
{
	struct group *g = arg;
	char go = 'g';
	int e;

	open_group(g);
	register_and_exchange(g);
	/* both start at once: every connection is asked for from both ends */
	oob_send(g, &go, 1);
	oob_recv(g, &go, 1);
	run_rounds(g);
	drain_sends(g);
	check_rails(g);
	oob_send(g, &go, 1);
	oob_recv(g, &go, 1);
	for (e = 0; e < neps; e++)
		fi_close(&g->eps[e].ep->fid);
	return NULL;
}

static struct group groups[MAX_GROUPS];

static int run_side(void)
{
	pthread_t t[MAX_GROUPS];
	int i;

	open_info();
	for (i = 0; i < ngroups; i++)
		if (pthread_create(&t[i], NULL, run_group, &groups[i]))
			die("pthread_create");
	for (i = 0; i < ngroups; i++)
		pthread_join(t[i], NULL);
	printf("side %d: %d domain(s) x %d endpoints x %d rounds of %zu "
	       "bytes each way, every byte checked\n", side, ngroups, neps,
	       nrounds, size);
	return 0;
}

int main(int argc, char **argv)
{
	int sv[MAX_GROUPS][2], c, i, status;
	pid_t pid;

	while ((c = getopt(argc, argv, "d:e:r:s:xn:")) != -1) {
		switch (c) {
		case 'x': spread = 1; break;
		case 'd': ngroups = atoi(optarg); break;
		case 'e': neps = atoi(optarg); break;
		case 'r': nrounds = atoi(optarg); break;
		case 's': size = strtoul(optarg, NULL, 0); break;
		case 'n': name_room = strtoul(optarg, NULL, 0); break;
		default:
			die("usage: xconn_test [-d domains] [-e endpoints] "
			    "[-r rounds] [-s size] [-x] [-n bytes]");
		}
	}
	if (ngroups < 1 || ngroups > MAX_GROUPS || neps < 1 ||
	    neps > MAX_EPS || nrounds < 1 || !size || !name_room ||
	    name_room > NAME_MAX_LEN)
		die("bad arguments");
	for (i = 0; i < ngroups; i++)
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv[i]))
			die("socketpair");
	pid = fork();
	if (pid < 0)
		die("fork");
	side = pid == 0;
	for (i = 0; i < ngroups; i++) {
		groups[i].index = i;
		groups[i].sock = sv[i][side];
		close(sv[i][!side]);
	}
	if (side)
		return run_side();
	run_side();
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status))
		die("the other side failed");
	printf("PASS\n");
	return 0;
}
