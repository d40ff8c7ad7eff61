/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Many initiators on one target that has none of them in its AV, as a
 * KV-cache server written to by its clients.  The target (this process)
 * forks -p initiator processes of -e endpoints each (one domain, each
 * endpoint its own AV and CQ); every endpoint writes -r rounds of one
 * striped fi_writedata of -s random bytes into a slot of its own.  The
 * target learns each initiator from its key question, and checks every
 * byte of a slot when that writedata's entry arrives (its CQ data names
 * the endpoint and the round); each entry must come exactly once.
 *
 * -g G: the endpoints write in turns, G of each process at a time, round
 * after round: with FI_MULTIRAIL_MAX_LEARNED_PEERS below the number of
 * initiators, the target forgets peers and learns them again each round
 * (crowd.sh checks the warning), and none of it may lose a key answer or
 * stall: every writedata after the first round (which connects)
 * completes within MAX_OP_S, and the target's memory after the last round
 * is within GROWTH_MB of what it was after the first.
 *
 * -f N: the target first inserts N made-up peers into its AV (its own
 * address with other ports on every rail; nothing connects to them), as a
 * server's AV holding a cluster: a control message's sender must still be
 * found at once (no writedata after the first round slower than MAX_OP_S).
 *
 *   crowd_test [-p procs] [-e endpoints] [-r rounds] [-s size] [-g G]
 *              [-f N]
 *   crowd_test -v: libfabric's version
 *
 * Environment: FI_PROVIDER_PATH, FI_MULTIRAIL_RAILS,
 * FI_MULTIRAIL_MAX_LEARNED_PEERS, MRL_TEST_PROV (the provider asked for;
 * default multirail).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_rma.h>

#include "check.h"
#include "side.h"
#include "mrl_proto.h"	/* struct mrl_addr_hdr: rails follow it */

#define MAX_PROCS	4
#define MAX_EPS		64
#define NAME_LEN	1024
#define TIMEOUT_S	120.0
#define MAX_OP_S	1.0
#define GROWTH_MB	16

static int procs = 2, eps = 32, rounds = 2, group, made_up;
static size_t size = 256 * 1024;

/* What the target tells each initiator. */
struct target_info {
	uint8_t name[NAME_LEN];
	size_t namelen;
	uint64_t key, base;	/* base: the buffer's address, or 0 (offsets) */
};

/* The provider asked for: multirail, or the core alone to compare. */
static const char *prov(void)
{
	return getenv("MRL_TEST_PROV") ? getenv("MRL_TEST_PROV") :
	       "multirail";
}

/* n made-up peers in the target's AV: its own address, port 1024 + i on
 * every rail, another host part past 60000. */
static void add_made_up_peers(struct side *s, int n)
{
	uint8_t self[1024], *peers, *a;
	size_t len = sizeof(self);
	const struct mrl_addr_hdr *hdr = (const void *) self;
	int ours, i, r, nr;

	CHK(fi_getname(&s->ep->fid, self, &len));
	ours = hdr->magic == MRL_ADDR_MAGIC;
	nr = ours ? hdr->nrails : 1;
	peers = malloc((size_t) n * len);
	if (!peers)
		die("no memory");
	for (i = 0; i < n; i++) {
		uint16_t port = (uint16_t) (1024 + i % 60000);

		memcpy(peers + (size_t) i * len, self, len);
		for (r = 0; r < nr; r++) {
			a = peers + (size_t) i * len + (ours ? sizeof(*hdr) +
			    (size_t) r * hdr->rail_addrlen : 0);
			a[2] = (uint8_t) (port >> 8);
			a[3] = (uint8_t) port;
			a[4] ^= (uint8_t) (i / 60000);
		}
	}
	if (fi_av_insert(s->av, peers, (size_t) n, NULL, 0, NULL) != n)
		die("fi_av_insert of %d made-up peers", n);
	free(peers);
}

static size_t slot_of(int idx, int round)
{
	return ((size_t) idx * (size_t) rounds + (size_t) round) * size;
}

/* The bytes of endpoint idx's round: the target computes them again. */
static void fill(uint8_t *p, int idx, int round)
{
	uint32_t x = 2654435761u * (uint32_t) (idx * 1000 + round + 1);
	size_t i;

	for (i = 0; i < size; i++) {
		x = x * 1103515245u + 12345u;
		p[i] = (uint8_t) (x >> 16);
	}
}

static void xfer(int fd, void *buf, size_t len, int out)
{
	size_t done = 0;
	ssize_t n;

	while (done < len) {
		n = out ? write(fd, (char *) buf + done, len - done) :
			  read(fd, (char *) buf + done, len - done);
		if (n <= 0)
			die("socketpair %s", out ? "write" : "read");
		done += (size_t) n;
	}
}

/* ---- an initiator process: endpoints first .. first + eps - 1 ---------- */

struct init_ep {
	struct fid_ep *ep;
	struct fid_av *av;
	struct fid_cq *cq;
	fi_addr_t target;
	int busy;
	double posted;
};

/* Until endpoints lo..hi-1 have all completed, progressing each. */
static void await(struct init_ep *e, int lo, int hi, double *worst)
{
	struct fi_cq_tagged_entry c;
	struct fi_cq_err_entry err = { 0 };
	double t0 = now();
	int i, busy = 1;
	ssize_t n;

	while (busy && now() - t0 < TIMEOUT_S) {
		for (busy = 0, i = lo; i < hi; i++) {
			n = fi_cq_read(e[i].cq, &c, 1);
			if (n == -FI_EAVAIL) {
				fi_cq_readerr(e[i].cq, &err, 0);
				die("initiator: writedata failed: %s",
				    fi_strerror(err.err));
			}
			if (n == 1) {
				e[i].busy = 0;
				if (now() - e[i].posted > *worst)
					*worst = now() - e[i].posted;
			}
			busy |= e[i].busy;
		}
	}
	if (busy)
		die("initiator: a writedata not completed in %.0f s",
		    TIMEOUT_S);
}

static int initiator(int fd, int first)
{
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED };
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	struct init_ep e[MAX_EPS];
	struct target_info t;
	struct fid_mr *mr;
	struct side s;
	double worst = 0, first_worst = 0;
	uint8_t *src;
	int i, r, g, step = group ? group : eps;
	ssize_t ret;
	char ok = 1;

	xfer(fd, &t, sizeof(t), 0);
	open_side(&s, prov(), NULL, NULL, FI_RMA | FI_MSG | FI_TAGGED);
	src = malloc(size * (size_t) eps * (size_t) rounds);
	if (!src)
		die("no memory");
	for (i = 0; i < eps; i++)
		for (r = 0; r < rounds; r++)
			fill(src + ((size_t) i * rounds + r) * size, first + i,
			     r);
	CHK(fi_mr_reg(s.domain, src, size * (size_t) eps * (size_t) rounds,
		      FI_WRITE, 0, 0, 0, &mr, NULL));
	for (i = 0; i < eps; i++) {
		CHK(fi_endpoint(s.domain, s.info, &e[i].ep, NULL));
		CHK(fi_av_open(s.domain, &av_attr, &e[i].av, NULL));
		CHK(fi_cq_open(s.domain, &cq_attr, &e[i].cq, NULL));
		CHK(fi_ep_bind(e[i].ep, &e[i].av->fid, 0));
		CHK(fi_ep_bind(e[i].ep, &e[i].cq->fid, FI_TRANSMIT | FI_RECV));
		CHK(fi_enable(e[i].ep));
		if (fi_av_insert(e[i].av, t.name, 1, &e[i].target, 0, NULL) != 1)
			die("initiator: fi_av_insert of the target");
		e[i].busy = 0;
	}
	/* round after round; in each, the endpoints in groups of step */
	for (r = 0; r < rounds; r++) {
		for (g = 0; g < eps; g += step) {
			for (i = g; i < g + step && i < eps; i++) {
				double t0 = now();

				e[i].posted = t0;
				do {
					ret = fi_writedata(e[i].ep,
						src + ((size_t) i * rounds + r) * size,
						size, fi_mr_desc(mr),
						((uint64_t) (first + i) << 16) |
						(uint64_t) r, e[i].target,
						t.base + slot_of(first + i, r), t.key,
						NULL);
					if (ret == -FI_EAGAIN)
						fi_cq_read(e[i].cq, NULL, 0);
				} while (ret == -FI_EAGAIN && now() - t0 < TIMEOUT_S);
				CHK(ret);
				e[i].busy = 1;
			}
			await(e, g, g + step < eps ? g + step : eps,
			      r ? &worst : &first_worst);
		}
	}
	printf("initiator %d-%d: %d writedata, the slowest %.3f s in the "
	       "first round (connections), %.3f s after\n", first,
	       first + eps - 1, eps * rounds, first_worst, worst);
	if (worst > MAX_OP_S) {
		printf("FAIL: a writedata took %.3f s (> %.1f s): a key answer "
		       "lost, or a stall\n", worst, MAX_OP_S);
		ok = 0;
	}
	/* stay until the target has checked everything */
	xfer(fd, &ok, 1, 1);
	xfer(fd, &ok, 1, 0);
	for (i = 0; i < eps; i++) {
		CHK(fi_close(&e[i].ep->fid));
		CHK(fi_close(&e[i].av->fid));
		CHK(fi_close(&e[i].cq->fid));
	}
	CHK(fi_close(&mr->fid));
	close_side(&s);
	free(src);
	return worst > MAX_OP_S;
}

/* ---- the target ----------------------------------------------------------- */

/*
 * An initiator process that ended before the target let it go: how, so
 * that a run that fails says whether one died (a signal) or gave up (its
 * own message above), and the target stops waiting for its entries.
 */
static int initiator_ended(const pid_t *pids, int *status_of, int n)
{
	int i, status;

	for (i = 0; i < n; i++) {
		if (waitpid(pids[i], &status, WNOHANG) != pids[i])
			continue;
		status_of[i] = status;
		if (WIFSIGNALED(status))
			check(0, "initiator process %d killed by signal %d", i,
			      WTERMSIG(status));
		else
			check(0, "initiator process %d exited (status %d) "
			      "before the target was done", i,
			      WEXITSTATUS(status));
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int fds[MAX_PROCS][2], total, got = 0, c, i, bad = 0;
	pid_t pids[MAX_PROCS];
	int status_of[MAX_PROCS];
	struct target_info t = { .namelen = NAME_LEN };
	struct fi_cq_tagged_entry e[16];
	struct fi_cq_err_entry err = { 0 };
	uint8_t *buf, *want, *seen;
	long rss_first = 0, rss_last;
	struct fid_mr *mr;
	struct side s;
	double t0, t_check;
	ssize_t n, k;
	char ok;

	setvbuf(stdout, NULL, _IONBF, 0);
	while ((c = getopt(argc, argv, "p:e:r:s:g:f:v")) != -1) {
		switch (c) {
		case 'v':
			printf("%u.%u\n", FI_MAJOR(fi_version()),
			       FI_MINOR(fi_version()));
			return 0;
		case 'p': procs = atoi(optarg); break;
		case 'e': eps = atoi(optarg); break;
		case 'r': rounds = atoi(optarg); break;
		case 's': size = strtoul(optarg, NULL, 0); break;
		case 'g': group = atoi(optarg); break;
		case 'f': made_up = atoi(optarg); break;
		default:
			die("usage: crowd_test [-p procs] [-e endpoints] "
			    "[-r rounds] [-s size] [-g G] [-f N]");
		}
	}
	if (procs < 1 || procs > MAX_PROCS || eps < 1 || eps > MAX_EPS ||
	    rounds < 1 || rounds > 0xffff || !size)
		die("bad arguments");
	total = procs * eps * rounds;
	/* the initiators are forked before libfabric starts here */
	for (i = 0; i < procs; i++) {
		status_of[i] = -1;
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds[i]))
			die("socketpair");
		pids[i] = fork();
		if (pids[i] < 0)
			die("fork");
		if (!pids[i]) {
			close(fds[i][0]);
			exit(initiator(fds[i][1], i * eps));
		}
		close(fds[i][1]);
	}
	open_side(&s, prov(), NULL, NULL, FI_RMA | FI_MSG | FI_TAGGED);
	if (made_up > 0)
		add_made_up_peers(&s, made_up);
	buf = malloc(slot_of(procs * eps, 0));
	want = malloc(size);
	seen = calloc((size_t) total, 1);
	if (!buf || !want || !seen)
		die("no memory");
	memset(buf, 0xa5, slot_of(procs * eps, 0));
	CHK(fi_mr_reg(s.domain, buf, slot_of(procs * eps, 0),
		      FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
	CHK(fi_getname(&s.ep->fid, t.name, &t.namelen));
	t.key = fi_mr_key(mr);
	t.base = s.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR ?
		 (uint64_t) (uintptr_t) buf : 0;
	printf("%s: %d initiators (%d processes of %d endpoints), none in "
	       "the target's AV (%d made-up peers there), %d rounds of %zu "
	       "bytes%s\n", s.info->fabric_attr->name, procs * eps, procs,
	       eps, made_up, rounds, size, group ? ", in turns" : "");
	for (i = 0; i < procs; i++)
		xfer(fds[i][0], &t, sizeof(t), 1);

	for (t0 = now(), t_check = t0; got < total && now() - t0 < TIMEOUT_S;) {
		if (now() - t_check > 1.0) {
			t_check = now();
			if (initiator_ended(pids, status_of, procs))
				break;
		}
		n = fi_cq_read(s.cq, e, 16);
		if (n == -FI_EAVAIL) {
			fi_cq_readerr(s.cq, &err, 0);
			die("target: CQ error %s", fi_strerror(err.err));
		}
		for (k = 0; k < n; k++) {
			int idx = (int) (e[k].data >> 16), r = e[k].data & 0xffff;

			if (idx >= procs * eps || r >= rounds ||
			    seen[idx * rounds + r]++) {
				bad++;
				check(0, "an entry with data %#lx: unknown, or "
				      "twice", (unsigned long) e[k].data);
				continue;
			}
			fill(want, idx, r);
			if (e[k].len != size ||
			    memcmp(buf + slot_of(idx, r), want, size)) {
				bad++;
				check(0, "endpoint %d round %d: len %zu, its "
				      "bytes %s at its entry", idx, r,
				      e[k].len, memcmp(buf + slot_of(idx, r),
						       want, size) ?
				      "wrong" : "right");
			}
			got++;
			if (got == procs * eps)
				rss_first = (rss_bytes() / 1024);
		}
	}
	rss_last = (rss_bytes() / 1024);
	check(got == total && !bad, "target: %d of %d entries, %d wrong, "
	      "in %.1f s", got, total, bad, now() - t0);
	if (rounds > 1 && rss_first)	/* the first round came */
		check(rss_last - rss_first < GROWTH_MB * 1024, "target: "
		      "memory grew %ld KB from the first round's end to the "
		      "last's", rss_last - rss_first);
	for (i = 0; i < procs; i++) {
		int status;

		if (status_of[i] != -1)
			continue;	/* ended early: said above */
		xfer(fds[i][0], &ok, 1, 0);
		xfer(fds[i][0], &ok, 1, 1);
		if (waitpid(pids[i], &status, 0) != pids[i] ||
		    !WIFEXITED(status) || WEXITSTATUS(status))
			check(0, "initiator process %d failed", i);
	}
	t0 = now();
	CHK(fi_close(&mr->fid));
	close_side(&s);
	printf("target: closed in %.1f s\n", now() - t0);
	free(buf);
	free(want);
	free(seen);
	printf("%s\n", check_failures ? "FAIL" : "PASS");
	return check_failures ? 1 : 0;
}
