/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Two endpoints of one domain, X and Y, each written to by P (another
 * domain) with striped fi_writedata: each one's target entry comes from a
 * control message (MRL_CTRL_WRITE_DATA) on rail 0.  Y is read only every
 * quarter of a second, so Y's control receives run out and the rest of its
 * messages wait in the core as unexpected ones, while X keeps posting
 * receives of its own.  libfabric 2.x's tcp matches a receive posted for any source
 * against the unexpected messages of every endpoint in the domain, so
 * with one control tag for all, X took messages meant for Y: X raised
 * Y's entries and Y never got them.  Control receives and sends now carry
 * a tag that names the endpoint they are for (mrl_proto.h).
 *
 * Checked: X and Y each get exactly their N entries and none of the
 * other's, with flags, len and every byte checked at each entry.
 *
 * Usage: neighbour_test [-n N] [-s SIZE] [-v: print libfabric's version]
 * Environment: MRL_TEST_PROV (the provider to ask; default "multirail"),
 * FI_MULTIRAIL_RAILS.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_rma.h>

#include "check.h"
#include "side.h"

#define DATA_X		0x20000000u
#define DATA_Y		0x10000000u
#define POISON		0xa5
#define WAIT_S		60.0
#define Y_EVERY_S	0.25

struct target {
	struct fid_ep *ep;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_mr *mr;
	char *buf;
	uint64_t key;
	fi_addr_t from_p;	/* P in its AV */
	fi_addr_t at_p;		/* it in P's AV */
	int got;
	int foreign;		/* entries with the other target's data */
};

static struct side p;
static int n = 100;
static size_t size = 65536 + 4096;
static char *src;
static struct fid_mr *src_mr;

static void open_target(struct side *d, struct target *t, uint64_t key)
{
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED };
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	char name[4096];
	size_t len = sizeof(name);

	CHK(fi_av_open(d->domain, &av_attr, &t->av, NULL));
	CHK(fi_cq_open(d->domain, &cq_attr, &t->cq, NULL));
	CHK(fi_endpoint(d->domain, d->info, &t->ep, NULL));
	CHK(fi_ep_bind(t->ep, &t->av->fid, 0));
	CHK(fi_ep_bind(t->ep, &t->cq->fid, FI_TRANSMIT | FI_RECV));
	CHK(fi_enable(t->ep));
	t->buf = malloc((size_t) n * size);
	if (!t->buf)
		die("no memory");
	memset(t->buf, POISON, (size_t) n * size);
	CHK(fi_mr_reg(d->domain, t->buf, (size_t) n * size, FI_REMOTE_WRITE,
		      0, key, 0, &t->mr, NULL));
	t->key = fi_mr_key(t->mr);
	CHK(fi_getname(&t->ep->fid, name, &len));
	if (fi_av_insert(p.av, name, 1, &t->at_p, 0, NULL) != 1)
		die("P's fi_av_insert failed");
	len = sizeof(name);
	CHK(fi_getname(&p.ep->fid, name, &len));
	if (fi_av_insert(t->av, name, 1, &t->from_p, 0, NULL) != 1)
		die("the target's fi_av_insert failed");
}

static void close_target(struct target *t)
{
	CHK(fi_close(&t->ep->fid));
	CHK(fi_close(&t->mr->fid));
	CHK(fi_close(&t->av->fid));
	CHK(fi_close(&t->cq->fid));
	free(t->buf);
}

/* The entry for writedata i: its bytes must be there now. */
static void check_entry(struct target *t, const char *who, uint32_t base,
			const struct fi_cq_tagged_entry *e)
{
	uint32_t i = (uint32_t) e->data - base;
	uint64_t want = FI_REMOTE_CQ_DATA | FI_RMA | FI_REMOTE_WRITE;

	if ((uint32_t) e->data - base >= (uint32_t) n) {
		t->foreign++;
		check(0, "%s: an entry with data %#lx, not one of its own",
		      who, (unsigned long) e->data);
		return;
	}
	t->got++;
	if ((e->flags & want) != want || e->len != size)
		check(0, "%s: entry %u: flags %#lx len %zu (want %zu)", who,
		      i, (unsigned long) e->flags, e->len, size);
	if (memcmp(t->buf + (size_t) i * size, src + (size_t) i * size, size))
		check(0, "%s: entry %u came before its bytes", who, i);
}

/* Reads what is there; a CQ error fails the test. */
static void drain(struct fid_cq *cq, struct target *t, const char *who,
		  uint32_t base)
{
	struct fi_cq_tagged_entry e[16];
	struct fi_cq_err_entry err = { 0 };
	ssize_t k, i;

	k = fi_cq_read(cq, e, 16);
	if (k == -FI_EAVAIL) {
		fi_cq_readerr(cq, &err, 0);
		die("%s: CQ error %d (%s)", who, err.err, fi_strerror(err.err));
	}
	for (i = 0; t && i < k; i++)
		check_entry(t, who, base, &e[i]);
}

static int p_done;

static void p_progress(void)
{
	struct fi_cq_tagged_entry e[16];
	struct fi_cq_err_entry err = { 0 };
	ssize_t k = fi_cq_read(p.cq, e, 16);

	if (k == -FI_EAVAIL) {
		fi_cq_readerr(p.cq, &err, 0);
		die("P: CQ error %d (%s)", err.err, fi_strerror(err.err));
	}
	if (k > 0)
		p_done += (int) k;
}

/* Where writedata i lands in t, as the key's mode addresses it. */
static uint64_t remote_addr(const struct target *t, int i)
{
	size_t off = (size_t) i * size;

	return p.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR ?
	       (uint64_t) (uintptr_t) (t->buf + off) : off;
}

/*
 * One turn of everyone's progress: P and X each time, Y only every
 * Y_EVERY_S (its receives run out in between, where a core needs its
 * progress for connections or completions it still gets it).
 */
static double y_last;

static void turn(struct target *x, struct target *y)
{
	p_progress();
	drain(x->cq, x, "X", DATA_X);
	if (now() - y_last >= Y_EVERY_S) {
		drain(y->cq, y, "Y", DATA_Y);
		y_last = now();
	}
}

/* P's writedata i to t, retried while the provider says -FI_EAGAIN. */
static void post(struct target *t, uint32_t base, int i, struct target *x,
		 struct target *y)
{
	double t0 = now();
	ssize_t ret;

	do {
		ret = fi_writedata(p.ep, src + (size_t) i * size, size,
				   fi_mr_desc(src_mr), base + (uint32_t) i,
				   t->at_p, remote_addr(t, i), t->key, NULL);
		if (ret == -FI_EAGAIN)
			turn(x, y);
	} while (ret == -FI_EAGAIN && now() - t0 < WAIT_S);
	CHK(ret);
}

int main(int argc, char **argv)
{
	const char *prov = getenv("MRL_TEST_PROV") ? getenv("MRL_TEST_PROV") :
			   "multirail";
	struct target x = { 0 }, y = { 0 };
	struct side d;
	double t0;
	size_t k;
	int c, i;

	setvbuf(stdout, NULL, _IONBF, 0);
	while ((c = getopt(argc, argv, "n:s:v")) != -1) {
		switch (c) {
		case 'n': n = atoi(optarg); break;
		case 's': size = strtoul(optarg, NULL, 0); break;
		case 'v':
			printf("%u.%u\n", FI_MAJOR(fi_version()),
			       FI_MINOR(fi_version()));
			return 0;
		default: die("usage: neighbour_test [-n N] [-s SIZE] [-v]");
		}
	}
	open_side(&p, prov, NULL, NULL, FI_RMA | FI_MSG | FI_TAGGED);
	/* the two targets share one domain of their own */
	open_side(&d, prov, NULL, NULL, FI_RMA | FI_MSG | FI_TAGGED);
	open_target(&d, &x, 1);
	open_target(&d, &y, 2);
	src = malloc((size_t) n * size);
	if (!src)
		die("no memory");
	srand(7);
	for (k = 0; k < (size_t) n * size; k++)
		src[k] = (char) rand();
	CHK(fi_mr_reg(p.domain, src, (size_t) n * size, FI_WRITE, 0, 0, 0,
		      &src_mr, NULL));
	printf("%s: %d writedata of %zu bytes to each of two endpoints of "
	       "one domain, the second read every %.2f s\n",
	       p.info->fabric_attr->name, n, size, Y_EVERY_S);

	/* Y's first: its receives run out while X still posts its own */
	y_last = now();
	for (i = 0; i < n; i++)
		post(&y, DATA_Y, i, &x, &y);
	for (i = 0; i < n; i++)
		post(&x, DATA_X, i, &x, &y);
	t0 = now();
	while ((p_done < 2 * n || x.got + x.foreign < n ||
		y.got + y.foreign < n) && now() - t0 < WAIT_S)
		turn(&x, &y);
	check(p_done == 2 * n, "P: %d of %d writedata completed", p_done,
	      2 * n);
	check(x.got == n && !x.foreign, "X: %d of its %d entries, %d of Y's",
	      x.got, n, x.foreign);
	check(y.got == n && !y.foreign, "Y: %d of its %d entries, %d of X's",
	      y.got, n, y.foreign);

	CHK(fi_close(&src_mr->fid));
	close_target(&x);
	close_target(&y);
	close_side(&d);
	close_side(&p);
	free(src);
	printf("%s\n", check_failures ? "FAIL" : "PASS");
	return check_failures ? 1 : 0;
}
