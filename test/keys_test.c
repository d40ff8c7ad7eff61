/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * An initiator's key cache with many keys of one peer, as a client writing
 * to a KV-cache server's registrations has: one endpoint writes to itself
 * (over FI_MULTIRAIL_RAILS), to each of -k registrations of 8 bytes in
 * turn, for three passes.  The first pass asks the target for every key's
 * rails; the others find each key in the cache.  Each pass's writes (a new
 * value each pass, completions counted) are followed by a message to
 * itself, and every key's 8 bytes are checked when it arrives (a message
 * never overtakes the writes before it); no rail may fail, and passes 1
 * and 2 may send almost no control message (each rail's ctrl_sent): a key
 * the cache lost would be asked again.  A write whose
 * key is not the last one used looks its key up in the peer's cache
 * (mrl_find_key), so passes 1 and 2 do that 10000 times each.
 *
 *   keys_test [-k keys] [-w window]
 *
 * Prints the CPU microseconds per write of each pass.  Environment:
 * FI_PROVIDER_PATH, FI_MULTIRAIL_RAILS.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "util.h"
#include "rails.h"

struct keys {
	struct fid_domain *domain;
	struct fid_ep *ep;
	struct fid_cq *cq;
	fi_addr_t self;
	uint32_t n, window;
	int virt_addr;
	uint64_t *src, *dst;	/* one 8-byte slot per key */
	struct fid_mr *smr, **dmr;
};

static uint64_t value(uint32_t pass, uint32_t i)
{
	return 0x5eed000000000000ull ^ ((uint64_t) pass << 32) ^ i;
}

static void post(struct keys *k, uint32_t i)
{
	struct fi_cq_entry e;
	double end = now() + 10;
	ssize_t ret;

	while ((ret = fi_write(k->ep, &k->src[i], 8, fi_mr_desc(k->smr),
			       k->self, k->virt_addr ?
			       (uint64_t) (uintptr_t) &k->dst[i] : 0,
			       fi_mr_key(k->dmr[i]),
			       (void *) (uintptr_t) (i + 3))) == -FI_EAGAIN &&
	       now() < end)
		fi_cq_read(k->cq, &e, 0);
	if (ret)
		die("fi_write to key %u: %zd", i, ret);
}

/* One completion of ours; an error or none in 10 s fails. */
static uintptr_t reap(struct keys *k, uint32_t pass)
{
	struct fi_cq_entry e;
	double end = now() + 10;
	ssize_t ret;

	while ((ret = fi_cq_read(k->cq, &e, 1)) == -FI_EAGAIN && now() < end)
		;
	if (ret == -FI_EAVAIL) {
		struct fi_cq_err_entry err = { 0 };

		fi_cq_readerr(k->cq, &err, 0);
		die("pass %u: an op failed: %s", pass, fi_strerror(err.err));
	}
	if (ret != 1)
		die("pass %u: no completion in 10 s (%zd)", pass, ret);
	return (uintptr_t) e.op_context;
}

/* The message after a pass's writes: every key's bytes are there. */
static void check_pass(struct keys *k, uint32_t pass)
{
	uint32_t msg = pass, got = ~0u, i;
	int sent = 0, arrived = 0;
	double end = now() + 10;
	uintptr_t c;
	ssize_t ret;

	CHK(fi_recv(k->ep, &got, sizeof(got), NULL, k->self, (void *) 1));
	/* -FI_EAGAIN while the rails the writes took are flushed */
	while ((ret = fi_send(k->ep, &msg, sizeof(msg), NULL, k->self,
			      (void *) 2)) == -FI_EAGAIN && now() < end)
		fi_cq_read(k->cq, NULL, 0);
	if (ret)
		die("pass %u: fi_send after the writes: %zd", pass, ret);
	while (!sent || !arrived) {
		c = reap(k, pass);
		if (c == 1)
			arrived = 1;
		else if (c == 2)
			sent = 1;
		else
			die("pass %u: a completion with context %lu", pass,
			    (unsigned long) c);
	}
	if (got != pass)
		die("pass %u: the message carried %u", pass, got);
	for (i = 0; i < k->n; i++) {
		if (k->dst[i] != value(pass, i))
			die("pass %u: key %u's bytes are 0x%llx when the "
			    "message after them arrived", pass, i,
			    (unsigned long long) k->dst[i]);
	}
}

/* Every key once, window writes in flight: CPU us per write. */
static double run_pass(struct keys *k, uint32_t pass)
{
	uint32_t i, posted = 0, reaped = 0;
	uint8_t *seen = calloc(k->n, 1);
	double t0 = cpu_now(), t;
	uintptr_t c;

	if (!seen)
		die("out of memory");
	for (i = 0; i < k->n; i++)
		k->src[i] = value(pass, i);
	while (reaped < k->n) {
		while (posted < k->n && posted - reaped < k->window)
			post(k, posted++);
		c = reap(k, pass);
		if (c < 3 || c - 3 >= k->n || seen[c - 3]++)
			die("pass %u: a completion with context %lu", pass,
			    (unsigned long) c);
		reaped++;
	}
	t = (cpu_now() - t0) * 1e6 / k->n;
	free(seen);
	check_pass(k, pass);
	return t;
}

int main(int argc, char **argv)
{
	struct keys k = { .n = 10000, .window = 16 };
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT };
	struct fid_fabric *fabric;
	struct fid_av *av;
	uint8_t name[1024];
	size_t len = sizeof(name);
	uint32_t i, pass;
	uint64_t asked = 0;
	int c;

	while ((c = getopt(argc, argv, "k:w:")) != -1) {
		switch (c) {
		case 'k': k.n = (uint32_t) strtoul(optarg, NULL, 0); break;
		case 'w': k.window = (uint32_t) strtoul(optarg, NULL, 0); break;
		default: die("usage: keys_test [-k keys] [-w window]");
		}
	}
	if (!k.n || !k.window)
		die("-k and -w must be above 0");
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_RMA;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
				      FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup("multirail");
	CHK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	k.virt_addr = !!(info->domain_attr->mr_mode & FI_MR_VIRT_ADDR);
	CHK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHK(fi_domain(fabric, info, &k.domain, NULL));
	CHK(fi_av_open(k.domain, &av_attr, &av, NULL));
	CHK(fi_endpoint(k.domain, info, &k.ep, NULL));
	CHK(fi_cq_open(k.domain, &cq_attr, &k.cq, NULL));
	CHK(fi_ep_bind(k.ep, &av->fid, 0));
	CHK(fi_ep_bind(k.ep, &k.cq->fid, FI_TRANSMIT | FI_RECV));
	CHK(fi_enable(k.ep));
	CHK(fi_getname(&k.ep->fid, name, &len));
	if (fi_av_insert(av, name, 1, &k.self, 0, NULL) != 1)
		die("fi_av_insert of itself");
	k.src = calloc(k.n, sizeof(*k.src));
	k.dst = calloc(k.n, sizeof(*k.dst));
	k.dmr = calloc(k.n, sizeof(*k.dmr));
	if (!k.src || !k.dst || !k.dmr)
		die("out of memory");
	CHK(fi_mr_reg(k.domain, k.src, k.n * sizeof(*k.src), FI_WRITE, 0,
		      k.n + 1, 0, &k.smr, NULL));
	for (i = 0; i < k.n; i++)	/* a registration per 8 bytes */
		CHK(fi_mr_reg(k.domain, &k.dst[i], sizeof(k.dst[i]),
			      FI_REMOTE_WRITE, 0, i + 1, 0, &k.dmr[i], NULL));
	printf("%u keys of one peer, %u writes in flight\n", k.n, k.window);
	for (pass = 0; pass < 3; pass++) {
		printf("pass %u (%s): %.2f us per write, bytes checked\n",
		       pass, pass ? "keys cached" : "keys asked",
		       run_pass(&k, pass));
		/* the first pass asked for every key (and answered, being
		 * its own target); the cache must spare the others that */
		if (!pass)
			asked = rails_clean(k.ep).ctrl_sent;
	}
	asked = rails_clean(k.ep).ctrl_sent - asked;
	printf("control messages sent in passes 1-2: %lu\n",
	       (unsigned long) asked);
	if (asked > k.n / 100)
		die("passes 1-2 sent %lu control messages for %u cached keys",
		    (unsigned long) asked, k.n);
	for (i = 0; i < k.n; i++)
		fi_close(&k.dmr[i]->fid);
	fi_close(&k.smr->fid);
	fi_close(&k.ep->fid);
	fi_close(&k.cq->fid);
	fi_close(&av->fid);
	fi_close(&k.domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	free(k.src);
	free(k.dst);
	free(k.dmr);
	printf("PASS\n");
	return 0;
}
