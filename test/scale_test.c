/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The cost of a peer in the AV, as a cluster's all-to-all or a KV-cache
 * server puts thousands in one endpoint's AV: fi_av_insert one at a time
 * into an FI_AV_TABLE of distinct peers made from the endpoint's own address
 * with other ports on every rail (nothing connects: no op is posted).
 *
 *   scale_test [-n peers] [-b batch] [-x us] [-B]
 *
 * Prints, per batch of -b inserts (default 1024), the microseconds of
 * the thread's CPU time per insert (not the wall clock: make check runs
 * tests side by side) and the resident memory per peer so far
 * (/proc/self/statm), then "mean us/insert" over all the batches and
 * "tail us/insert": the median of the last three
 * batches.  -x: fail when that is over this many microseconds (test/scale.sh
 * sets it from the core's own tail: the core's time grows with its AV too,
 * as its hash tables outgrow the caches, so only a ratio to it is a test).
 * -B: each batch is one fi_av_insert of -b addresses.  After the inserts,
 * every peer is looked up (fi_av_lookup) and then removed one at a time
 * (fi_av_remove), each timed: "lookup us/peer", "remove us/peer"; then
 * every looked-up address is compared with the one inserted (not timed).
 * Last, what the timing cannot see: a batch of new peers with the
 * endpoint's own address in the middle, and a batch that repeats it, then
 * a striped fi_write to itself through each handle, its bytes checked: a
 * rail's core entry given to the wrong peer sends it elsewhere.
 * Environment: FI_PROVIDER_PATH, FI_MULTIRAIL_RAILS; MRL_TEST_PROV names
 * the provider (default multirail; a core's name measures the core alone,
 * whose address is one sockaddr).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "util.h"
#include "rails.h"
#include "mrl_proto.h"	/* struct mrl_addr_hdr: rails follow it */

static double median3(const double *v)
{
	double a = v[0], b = v[1], c = v[2];

	if (a > b) { double t = a; a = b; b = t; }
	if (b > c) { double t = b; b = c; c = t; }
	return a > b ? a : b;
}

/* Peer i: every rail's sockaddr with port 1024 + i (sin_port and
 * sin6_port sit at the same offset). */
static void make_peer(uint8_t *out, const uint8_t *self, size_t len,
		      int ours, uint32_t i)
{
	const struct mrl_addr_hdr *hdr = (const void *) self;
	uint16_t port = (uint16_t) (1024 + i % 60000);
	uint8_t hi = (uint8_t) (port >> 8), lo = (uint8_t) port;
	int r, n = ours ? hdr->nrails : 1;
	uint8_t *a;

	memcpy(out, self, len);
	for (r = 0; r < n; r++) {
		a = ours ? out + sizeof(*hdr) + (size_t) r * hdr->rail_addrlen :
			   out;
		a[2] = hi;
		a[3] = lo;
		if (i >= 60000)		/* past the ports: another address */
			a[4] ^= (uint8_t) (i / 60000);
	}
}

/* Every peer looked up, then removed one at a time: CPU us per peer each;
 * the addresses looked up must be those inserted. */
static void time_lookup_remove(struct fid_av *av, uint32_t npeers,
			       const uint8_t *self, size_t len, int ours)
{
	uint8_t *out = malloc((size_t) npeers * len), want[1024];
	size_t olen;
	double t0 = cpu_now(), t;
	uint32_t i;

	if (!out)
		die("out of memory");
	/* the buffer's first touch is the test's cost, not the lookup's */
	memset(out, 0, (size_t) npeers * len);
	t0 = cpu_now();
	for (i = 0; i < npeers; i++) {
		olen = len;
		if (fi_av_lookup(av, i, out + (size_t) i * len, &olen) ||
		    olen != len)
			die("fi_av_lookup of peer %u: %zu bytes", i, olen);
	}
	t = cpu_now();
	printf("lookup us/peer %.3f\n", (t - t0) * 1e6 / npeers);
	for (i = 0; i < npeers; i++) {
		make_peer(want, self, len, ours, i);
		if (memcmp(out + (size_t) i * len, want, len))
			die("fi_av_lookup of peer %u: not the address inserted",
			    i);
	}
	free(out);
	t0 = cpu_now();
	for (i = 0; i < npeers; i++) {
		fi_addr_t fa = i;

		if (fi_av_remove(av, &fa, 1, 0))
			die("fi_av_remove of peer %u", i);
	}
	t = cpu_now();
	printf("remove us/peer %.3f\n", (t - t0) * 1e6 / npeers);
}

static int virt_addr;	/* FI_MR_VIRT_ADDR: target addresses are virtual */

struct self_buf {
	uint8_t *src, *dst;
	size_t n;
	struct fid_mr *smr, *dmr;
};

/* A striped delivery-complete write to the endpoint itself through handle
 * fa, its bytes checked when its completion comes (bounded: 10 s). */
static void write_to_self(struct fid_ep *ep, struct fid_cq *cq,
			  struct self_buf *b, fi_addr_t fa, uint32_t seed)
{
	struct fi_cq_entry e;
	struct iovec iov = { .iov_base = b->src, .iov_len = b->n };
	void *desc = fi_mr_desc(b->smr);
	struct fi_rma_iov rma = {
		.addr = virt_addr ? (uint64_t) (uintptr_t) b->dst : 0,
		.len = b->n, .key = fi_mr_key(b->dmr) };
	struct fi_msg_rma msg = { .msg_iov = &iov, .desc = &desc,
				  .iov_count = 1, .addr = fa, .rma_iov = &rma,
				  .rma_iov_count = 1 };
	double end = now() + 10;
	size_t i;
	ssize_t ret;

	srand(seed);
	for (i = 0; i < b->n; i++)
		b->src[i] = (uint8_t) rand();
	memset(b->dst, 0xa5, b->n);
	do {
		ret = fi_writemsg(ep, &msg, FI_DELIVERY_COMPLETE |
				  FI_COMPLETION);
		if (ret == -FI_EAGAIN)
			fi_cq_read(cq, &e, 0);
	} while (ret == -FI_EAGAIN && now() < end);
	if (ret)
		die("fi_write to itself through handle %lu: %zd",
		    (unsigned long) fa, ret);
	while ((ret = fi_cq_read(cq, &e, 1)) == -FI_EAGAIN && now() < end)
		;
	if (ret == -FI_EAVAIL) {
		struct fi_cq_err_entry err = { 0 };

		fi_cq_readerr(cq, &err, 0);
		die("fi_write to itself through handle %lu: %s",
		    (unsigned long) fa, fi_strerror(err.err));
	}
	if (ret != 1)
		die("fi_write to itself through handle %lu: no completion "
		    "(%zd)", (unsigned long) fa, ret);
	if (memcmp(b->src, b->dst, b->n))
		die("fi_write to itself through handle %lu: bytes wrong",
		    (unsigned long) fa);
}

/* Batches mixing new peers and the endpoint itself reach it: writes
 * through its handles, striped once the keys of every rail are known. */
static void check_batches(struct fid_domain *domain, struct fid_ep *ep,
			  struct fid_cq *cq, struct fid_av *av,
			  const uint8_t *self, size_t len, int ours,
			  uint32_t next)
{
	struct self_buf b = { .n = 1 << 20 };
	uint8_t batch[5 * 1024];
	fi_addr_t fa[5];
	int i;

	if (len > 1024)
		die("address of %zu bytes", len);
	b.src = malloc(b.n);
	b.dst = malloc(b.n);
	if (!b.src || !b.dst)
		die("out of memory");
	CHK(fi_mr_reg(domain, b.src, b.n, FI_WRITE, 0, 1, 0, &b.smr, NULL));
	CHK(fi_mr_reg(domain, b.dst, b.n, FI_REMOTE_WRITE, 0, 2, 0, &b.dmr,
		      NULL));
	/* new, new, itself, new, new: one call per rail's core */
	make_peer(batch, self, len, ours, next);
	make_peer(batch + len, self, len, ours, next + 1);
	memcpy(batch + 2 * len, self, len);
	make_peer(batch + 3 * len, self, len, ours, next + 2);
	make_peer(batch + 4 * len, self, len, ours, next + 3);
	if (fi_av_insert(av, batch, 5, fa, 0, NULL) != 5)
		die("fi_av_insert of a batch with itself");
	for (i = 0; i < 4; i++)		/* the first learns the keys */
		write_to_self(ep, cq, &b, fa[2], (uint32_t) i + 1);
	/* itself again and a new peer twice: one at a time */
	memcpy(batch, self, len);
	make_peer(batch + len, self, len, ours, next + 4);
	make_peer(batch + 2 * len, self, len, ours, next + 4);
	if (fi_av_insert(av, batch, 3, fa, 0, NULL) != 3)
		die("fi_av_insert of a batch repeating addresses");
	write_to_self(ep, cq, &b, fa[0], 9);
	/* a rail's core entry naming another peer would have failed its
	 * chunks over to the other rails, unseen by the bytes, or carried
	 * none (its connection never made) */
	if (ours && !rails_clean(ep).min_tx_bytes)
		die("a rail carried none of the writes");
	fi_close(&b.smr->fid);
	fi_close(&b.dmr->fid);
	free(b.src);
	free(b.dst);
	printf("batches with the endpoint itself: writes to it checked\n");
}

int main(int argc, char **argv)
{
	const char *prov = getenv("MRL_TEST_PROV") ? getenv("MRL_TEST_PROV") :
			   "multirail";
	uint32_t npeers = 16384, batch = 1024, i;
	int ours = !strcmp(prov, "multirail") || strstr(prov, ";multirail"),
	    c;
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT };
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	uint8_t self[1024], peer[1024], *many = NULL;
	fi_addr_t *fas = NULL;
	int batched = 0;
	size_t len = sizeof(self);
	double t0, t, per_us = 0, per[64], limit_us = 0;
	int nb = 0;
	long rss0;
	fi_addr_t fa;

	while ((c = getopt(argc, argv, "n:b:x:B")) != -1) {
		switch (c) {
		case 'n': npeers = (uint32_t) strtoul(optarg, NULL, 0); break;
		case 'b': batch = (uint32_t) strtoul(optarg, NULL, 0); break;
		case 'x': limit_us = strtod(optarg, NULL); break;
		case 'B': batched = 1; break;
		default:
			die("usage: scale_test [-n peers] [-b batch] [-x us] [-B]");
		}
	}
	if (!batch || npeers < 6 * batch || npeers / batch > 64)
		die("-n must be 6 to 64 times -b");
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_RMA;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
				      FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(prov);
	CHK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	virt_addr = !!(info->domain_attr->mr_mode & FI_MR_VIRT_ADDR);
	CHK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHK(fi_domain(fabric, info, &domain, NULL));
	CHK(fi_av_open(domain, &av_attr, &av, NULL));
	CHK(fi_endpoint(domain, info, &ep, NULL));
	CHK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHK(fi_ep_bind(ep, &av->fid, 0));
	CHK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHK(fi_enable(ep));
	CHK(fi_getname(&ep->fid, self, &len));
	printf("%s, domain %s, address %zu bytes\n",
	       info->fabric_attr->prov_name,
	       info->domain_attr->name, len);
	printf("%8s %12s %12s\n", "peers", "us/insert", "B/peer");
	if (batched) {
		many = malloc((size_t) batch * len);
		fas = malloc(batch * sizeof(*fas));
		if (!many || !fas)
			die("out of memory");
	}
	rss0 = rss_bytes();
	t0 = cpu_now();
	for (i = 0; i < npeers; i++) {
		if (batched) {
			uint32_t j;

			if ((i + 1) % batch)
				continue;
			t = cpu_now();		/* making them is not timed */
			for (j = 0; j < batch; j++)
				make_peer(many + (size_t) j * len, self, len,
					  ours, i + 1 - batch + j);
			t0 += cpu_now() - t;
			if (fi_av_insert(av, many, batch, fas, 0, NULL) !=
			    (int) batch || fas[0] != i + 1 - batch)
				die("fi_av_insert of peers %u..%u",
				    i + 1 - batch, i);
		} else {
			make_peer(peer, self, len, ours, i);
			if (fi_av_insert(av, peer, 1, &fa, 0, NULL) != 1 ||
			    fa != i)
				die("fi_av_insert of peer %u", i);
			if ((i + 1) % batch)
				continue;
		}
		t = cpu_now();
		per_us = (t - t0) * 1e6 / batch;
		printf("%8u %12.2f %12ld\n", i + 1, per_us,
		       (rss_bytes() - rss0) / (long) (i + 1));
		if (nb < 64)
			per[nb++] = per_us;
		t0 = cpu_now();
	}
	time_lookup_remove(av, npeers, self, len, ours);
	check_batches(domain, ep, cq, av, self, len, ours, npeers);
	free(many);
	free(fas);
	for (i = 0, t = 0; i < (uint32_t) nb; i++)
		t += per[i];
	printf("mean us/insert %.2f\n", t / nb);
	per_us = median3(per + nb - 3);
	printf("tail us/insert %.2f\n", per_us);
	if (limit_us > 0 && per_us > limit_us)
		die("%.2f us per insert at %u peers, over the limit of %.2f",
		    per_us, npeers, limit_us);
	fi_close(&ep->fid);
	fi_close(&cq->fid);
	fi_close(&av->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	printf("PASS\n");
	return 0;
}
