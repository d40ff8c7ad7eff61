/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * FI_THREAD_SAFE: several threads on one multirail domain.
 *   shared: THREADS threads post fi_writedata on ONE endpoint and reap ONE
 *           CQ (each takes whatever completion comes, its own or another's);
 *   per-ep: one endpoint and CQ per thread, all on one domain and AV.
 * Every endpoint writes to itself over the rails (FI_MULTIRAIL_RAILS), so
 * the CQ data arrive in the same CQ.  Sizes are random (1 B to 256 KiB, so
 * both whole and striped ops), each op writes random bytes into its own
 * poisoned slot with CQ data naming it.  At the end: every op completed
 * exactly once at the initiator, every CQ data value arrived exactly once,
 * and every byte of every slot is right.
 *   registrations: THREADS threads register MR_EACH buffers each on the
 *           domain at once; every key must differ.  Over cores with 32-bit
 *           keys (efa) our keys carry a per-domain generation, which the
 *           threads advance together (ThreadSanitizer: docs/reliability.md).
 * Environment: FI_PROVIDER_PATH, FI_MULTIRAIL_RAILS (mt.sh); MRL_MT_ROUNDS
 * repeats both (a soak), each round with other sizes and bytes.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "util.h"

#define THREADS		4
#define OPS		32		/* per thread */
#define WINDOW		6		/* per thread */
#define MAX_LEN		(256 << 10)
#define SLOT		(MAX_LEN + 64)
#define POISON		0xA5
#define TIMEOUT_S	60

struct side {
	struct fid_ep *ep;
	struct fid_cq *cq;
	fi_addr_t self;
};

static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_av *av;
static struct fid_mr *mr;
static uint8_t *src, *dst;		/* THREADS * OPS slots each */
static size_t len_of[THREADS][OPS];
static unsigned int round_no;		/* a soak varies sizes and bytes */
static atomic_int local_done[THREADS][OPS];
static atomic_int data_seen[THREADS][OPS];
static struct side sides[THREADS];
static int nsides;
static double deadline;
static const char *mode_now;

static size_t slot(int t, int i)
{
	return ((size_t) t * OPS + i) * SLOT;
}

/* One completion taken from cq, whoever posted it. */
static void reap(struct fid_cq *cq)
{
	struct fi_cq_data_entry e;
	struct fi_cq_err_entry err;
	ssize_t r = fi_cq_read(cq, &e, 1);
	uint64_t t, i;

	if (r == -FI_EAGAIN)
		return;
	if (r == -FI_EAVAIL) {
		memset(&err, 0, sizeof(err));
		fi_cq_readerr(cq, &err, 0);
		die("%s: error completion: %d (%s), prov_errno %d, context %p",
		    mode_now, err.err, fi_strerror(err.err), err.prov_errno,
		    err.op_context);
	}
	if (r != 1)
		die("fi_cq_read: %zd", r);
	if (e.flags & FI_REMOTE_CQ_DATA) {
		t = e.data >> 16;
		i = e.data & 0xffff;
		if (t >= THREADS || i >= OPS)
			die("CQ data 0x%lx names no op", (unsigned long) e.data);
		atomic_fetch_add(&data_seen[t][i], 1);
		return;
	}
	t = ((uintptr_t) e.op_context >> 16) - 1;
	i = (uintptr_t) e.op_context & 0xffff;
	if (t >= THREADS || i >= OPS)
		die("completion with context %p", e.op_context);
	atomic_fetch_add(&local_done[t][i], 1);
}

/* Before a timeout's die(): which ops lack a completion or their CQ data. */
static void missing(void)
{
	int t, i, n = 0;

	for (t = 0; t < THREADS; t++)
		for (i = 0; i < OPS; i++) {
			int l = atomic_load(&local_done[t][i]);
			int d = atomic_load(&data_seen[t][i]);

			if ((l != 1 || d != 1) && n++ < 16)
				fprintf(stderr, "op %d.%d (%zu bytes): %d "
					"completions, %d CQ data\n", t, i,
					len_of[t][i], l, d);
		}
	fprintf(stderr, "%d ops incomplete\n", n);
}

static void timed_out(const char *what, int t)
{
	static atomic_flag told = ATOMIC_FLAG_INIT;

	if (!atomic_flag_test_and_set(&told))
		missing();
	die("%s: thread %d: %s", mode_now, t, what);
}

static int done_by(int t, int upto)
{
	int i, n = 0;

	for (i = 0; i < upto; i++)
		n += atomic_load(&local_done[t][i]) > 0;
	return n;
}

static void *run(void *arg)
{
	int t = (int) (uintptr_t) arg, i;
	struct side *s = &sides[nsides == 1 ? 0 : t];
	unsigned int seed = 7919 * (t + 1) + round_no;
	void *desc = fi_mr_desc(mr);
	uint64_t base = (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ?
			(uintptr_t) dst : (uintptr_t) (dst - src);
	ssize_t r;

	for (i = 0; i < OPS; i++) {
		size_t len = 1 + rand_r(&seed) % (rand_r(&seed) % 4 ?
						  64 * 1024 : MAX_LEN);
		void *ctx = (void *) (((uintptr_t) t + 1) << 16 | i);

		len_of[t][i] = len;
		while (i - done_by(t, i) >= WINDOW) {
			reap(s->cq);
			if (now() > deadline)
				timed_out("window never drained", t);
		}
		while ((r = fi_writedata(s->ep, src + slot(t, i), len, desc,
					 (uint64_t) t << 16 | i, s->self,
					 base + slot(t, i), fi_mr_key(mr),
					 ctx)) == -FI_EAGAIN) {
			reap(s->cq);
			if (now() > deadline)
				timed_out("post never accepted", t);
		}
		if (r)
			die("thread %d op %d: fi_writedata %zd", t, i, r);
	}
	/* reap until every op of every thread is in: others' too */
	for (;;) {
		int all = 1, u, j;

		for (u = 0; u < THREADS && all; u++)
			for (j = 0; j < OPS && all; j++)
				all = atomic_load(&local_done[u][j]) &&
				      atomic_load(&data_seen[u][j]);
		if (all)
			break;
		reap(s->cq);
		if (now() > deadline)
			timed_out("completions missing at the end", t);
	}
	return NULL;
}

static void open_side(struct side *s, struct fid_cq *shared_cq)
{
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_DATA,
				      .size = 4096 };
	uint8_t name[4096];
	size_t len = sizeof(name);

	if (shared_cq)
		s->cq = shared_cq;
	else
		CHK(fi_cq_open(domain, &cq_attr, &s->cq, NULL));
	CHK(fi_endpoint(domain, info, &s->ep, NULL));
	CHK(fi_ep_bind(s->ep, &av->fid, 0));
	CHK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
	CHK(fi_enable(s->ep));
	CHK(fi_getname(&s->ep->fid, name, &len));
	if (fi_av_insert(av, name, 1, &s->self, 0, NULL) != 1)
		die("fi_av_insert of an endpoint's own name");
}

static void verify(const char *mode)
{
	size_t bad = 0, k;
	int t, i;

	for (t = 0; t < THREADS; t++) {
		for (i = 0; i < OPS; i++) {
			const uint8_t *d = dst + slot(t, i);

			if (atomic_load(&local_done[t][i]) != 1)
				die("%s: op %d.%d completed %d times", mode, t,
				    i, atomic_load(&local_done[t][i]));
			if (atomic_load(&data_seen[t][i]) != 1)
				die("%s: CQ data of op %d.%d arrived %d times",
				    mode, t, i, atomic_load(&data_seen[t][i]));
			if (memcmp(d, src + slot(t, i), len_of[t][i]))
				die("%s: op %d.%d (%zu bytes): bytes wrong",
				    mode, t, i, len_of[t][i]);
			for (k = len_of[t][i]; k < SLOT; k++)
				bad += d[k] != POISON;
		}
	}
	if (bad)
		die("%s: %zu bytes written outside the ops", mode, bad);
	printf("ok %s: %d threads x %d writedata, each completed once, each "
	       "CQ data once, every byte right\n", mode, THREADS, OPS);
}

static void round_of(const char *mode, int per_ep)
{
	pthread_t th[THREADS];
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_DATA,
				      .size = 4096 };
	struct fid_cq *shared = NULL;
	size_t k, total = (size_t) THREADS * OPS * SLOT;
	unsigned int seed = 12345 + round_no;
	int t;

	for (k = 0; k < total; k++)
		src[k] = (uint8_t) rand_r(&seed);
	memset(dst, POISON, total);
	memset(local_done, 0, sizeof(local_done));
	memset(data_seen, 0, sizeof(data_seen));
	if (!per_ep)
		CHK(fi_cq_open(domain, &cq_attr, &shared, NULL));
	nsides = per_ep ? THREADS : 1;
	mode_now = mode;
	for (t = 0; t < nsides; t++)
		open_side(&sides[t], shared);
	deadline = now() + TIMEOUT_S;
	for (t = 0; t < THREADS; t++)
		if (pthread_create(&th[t], NULL, run, (void *) (uintptr_t) t))
			die("pthread_create");
	for (t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	verify(mode);
	for (t = 0; t < nsides; t++) {
		CHK(fi_close(&sides[t].ep->fid));
		if (per_ep)
			CHK(fi_close(&sides[t].cq->fid));
	}
	if (shared)
		CHK(fi_close(&shared->fid));
}

#define MR_EACH		64

static struct fid_mr *regs[THREADS][MR_EACH];

static void *register_many(void *arg)
{
	int t = (int) (uintptr_t) arg, i;

	for (i = 0; i < MR_EACH; i++)
		CHK(fi_mr_reg(domain, src + ((size_t) t * MR_EACH + i) * 64, 64,
			      FI_REMOTE_WRITE, 0, 1000 + t * MR_EACH + i, 0,
			      &regs[t][i], NULL));
	return NULL;
}

static int cmp_key(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

	return x < y ? -1 : x > y;
}

/* Registrations from every thread at once: keys all different. */
static void registrations(void)
{
	static uint64_t keys[THREADS * MR_EACH];
	pthread_t th[THREADS];
	int t, i, n = 0;

	for (t = 0; t < THREADS; t++)
		if (pthread_create(&th[t], NULL, register_many,
				   (void *) (uintptr_t) t))
			die("pthread_create");
	for (t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	for (t = 0; t < THREADS; t++)
		for (i = 0; i < MR_EACH; i++)
			keys[n++] = fi_mr_key(regs[t][i]);
	qsort(keys, n, sizeof(keys[0]), cmp_key);
	for (i = 1; i < n; i++)
		if (keys[i] == keys[i - 1])
			die("two registrations with key 0x%lx",
			    (unsigned long) keys[i]);
	for (t = 0; t < THREADS; t++)
		for (i = 0; i < MR_EACH; i++)
			CHK(fi_close(&regs[t][i]->fid));
	printf("ok registrations: %d from %d threads at once, every key "
	       "different\n", n, THREADS);
}

int main(void)
{
	struct fi_info *hints = fi_allocinfo();
	struct fi_av_attr av_attr = { .type = FI_AV_UNSPEC };
	size_t total = (size_t) THREADS * OPS * SLOT;
	int rounds;

	setvbuf(stdout, NULL, _IONBF, 0);
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_RMA;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->domain_attr->threading = FI_THREAD_SAFE;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
				      FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup("multirail");
	CHK(fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL,
		       NULL, 0, hints, &info));
	fi_freeinfo(hints);
	if (info->domain_attr->threading != FI_THREAD_SAFE)
		die("threading %d, FI_THREAD_SAFE asked",
		    info->domain_attr->threading);
	CHK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHK(fi_domain(fabric, info, &domain, NULL));
	CHK(fi_av_open(domain, &av_attr, &av, NULL));
	src = aligned_alloc(4096, 2 * total);
	if (!src)
		die("out of memory");
	dst = src + total;
	CHK(fi_mr_reg(domain, src, 2 * total, FI_WRITE | FI_REMOTE_WRITE, 0, 3,
		      0, &mr, NULL));
	/* MRL_MT_ROUNDS: a soak, e.g. under helgrind (docs/reliability.md) */
	rounds = getenv("MRL_MT_ROUNDS") ? atoi(getenv("MRL_MT_ROUNDS")) : 1;
	for (round_no = 0; round_no < (unsigned int) rounds; round_no++) {
		round_of("shared endpoint and CQ", 0);
		round_of("one endpoint per thread", 1);
		registrations();
	}
	CHK(fi_close(&mr->fid));
	CHK(fi_close(&av->fid));
	CHK(fi_close(&domain->fid));
	CHK(fi_close(&fabric->fid));
	fi_freeinfo(info);
	free(src);
	printf("PASS\n");
	return 0;
}
