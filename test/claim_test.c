/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Over efa-direct (no tagged messages: multirail's control messages arrive
 * at a control endpoint of their own), a peer the client knows by rail 0
 * alone -- a partial address, as fi_getinfo's node gives, without the
 * peer's control endpoint -- is completed only by a message the core says
 * its own rail 0 sent.  A plain efa-direct endpoint (the liar) tells the
 * client first that the target has rails, and a control endpoint, of the
 * liar's: the client must keep the target partial.  Then the target's own
 * introduction (with its first message) completes it: the client's writes
 * stripe over the target's real rails, every byte landing.
 * Environment (efa.sh): FI_PROVIDER unset, FI_PROVIDER_PATH with the test
 * provider, FI_MULTIRAIL_CORE_FABRIC=efa-direct.
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
#include <rdma/fi_rma.h>

#include "side.h"
#include "util.h"

#include "mrl_proto.h"
#include "rdma/fi_ext_multirail.h"

#define LEN		(1024 * 1024)	/* striped */
#define TIMEOUT_S	10

/* A side and the name fi_getname gave its endpoint. */
struct named {
	struct side s;
	uint8_t name[4096];
	size_t namelen;
};

static struct named target, client, liar;
static struct fi_multirail_ep_ops *ops;

static void open_named(struct named *n, const char *prov, const char *fabric,
		       const char *domain)
{
	open_side(&n->s, prov, fabric, domain, FI_MSG | FI_RMA);
	n->namelen = sizeof(n->name);
	CHK(fi_getname(&n->s.ep->fid, n->name, &n->namelen));
}

/* Everyone progresses; the client's completions (n of them) are counted. */
static int progress(void)
{
	struct fi_cq_tagged_entry e[8];
	ssize_t n;

	fi_cq_read(target.s.cq, NULL, 0);
	fi_cq_read(liar.s.cq, e, 8);
	n = fi_cq_read(client.s.cq, e, 8);
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err = { 0 };

		fi_cq_readerr(client.s.cq, &err, 0);
		die("client completion error: %s", fi_strerror(err.err));
	}
	return n > 0 ? (int) n : 0;
}

static struct fi_multirail_rail_stats stats(struct named *n, int rail)
{
	struct fi_multirail_rail_stats st;

	CHK(ops->rail_stats(n->s.ep, rail, &st));
	return st;
}

static void wait_client_ctrl(uint64_t received, const char *what)
{
	double end = now() + TIMEOUT_S;

	while (stats(&client, 0).ctrl_received == received && now() < end)
		progress();
	if (stats(&client, 0).ctrl_received == received)
		die("%s never reached the client", what);
}

/* What the client holds for the target, as fi_av_lookup says. */
static const struct mrl_addr_hdr *held(fi_addr_t peer)
{
	static uint8_t addr[4096];
	size_t len = sizeof(addr);

	CHK(fi_av_lookup(client.s.av, peer, addr, &len));
	return (const struct mrl_addr_hdr *) addr;
}

/*
 * The liar's claim: the target's address with every other rail, and the
 * control endpoint, the liar's own.  Sent plainly to the client's control
 * endpoint, as a multirail peer's introduction (a HELLO_ACK).
 */
static void lie_to_client(void)
{
	static uint8_t msg[MRL_CTRL_BUF_SIZE];
	const struct mrl_addr_hdr *c = (const void *) client.name;
	struct mrl_ctrl_msg *m = (struct mrl_ctrl_msg *) msg;
	struct mrl_addr_hdr *claim = (struct mrl_addr_hdr *) m->payload;
	uint64_t received = stats(&client, 0).ctrl_received;
	struct fid_mr *mr;
	fi_addr_t dest;
	double end;
	ssize_t r;
	int i;

	if (!(c->flags & MRL_ADDR_CTRL) || liar.namelen != c->rail_addrlen)
		die("the client's address names no control endpoint of the "
		    "liar's size (flags 0x%x, %u vs %zu bytes)", c->flags,
		    c->rail_addrlen, liar.namelen);
	if (fi_av_insert(liar.s.av, mrl_addr_ctrl(client.name), 1, &dest, 0,
			 NULL) != 1)
		die("liar: fi_av_insert of the client's control endpoint");
	m->magic = MRL_CTRL_MAGIC;
	m->version = MRL_CTRL_VERSION;
	m->type = MRL_CTRL_HELLO_ACK;
	m->addrlen = target.namelen;
	memcpy(claim, target.name, target.namelen);
	for (i = 1; i <= claim->nrails; i++)	/* the last: its control ep */
		memcpy((void *) mrl_addr_rail(claim, i), liar.name,
		       liar.namelen);
	CHK(fi_mr_reg(liar.s.domain, msg, sizeof(msg), FI_SEND, 0, 1, 0, &mr,
		      NULL));
	end = now() + TIMEOUT_S;
	while ((r = fi_send(liar.s.ep, msg, sizeof(*m) + m->addrlen,
			    fi_mr_desc(mr), dest, NULL)) == -FI_EAGAIN &&
	       now() < end)
		progress();
	CHK(r);
	wait_client_ctrl(received, "the liar's claim");
	CHK(fi_close(&mr->fid));
}

/* The target's first message to the client carries its introduction. */
static void target_says_hello(fi_addr_t to_client)
{
	static uint8_t in[64], out[64] = "hello";
	struct fid_mr *rmr, *smr;
	double end = now() + TIMEOUT_S;
	int got = 0;
	ssize_t r;

	CHK(fi_mr_reg(client.s.domain, in, sizeof(in), FI_RECV, 0, 2, 0, &rmr,
		      NULL));
	CHK(fi_mr_reg(target.s.domain, out, sizeof(out), FI_SEND, 0, 3, 0,
		      &smr, NULL));
	CHK(fi_recv(client.s.ep, in, sizeof(in), fi_mr_desc(rmr),
		    FI_ADDR_UNSPEC, in));
	while ((r = fi_send(target.s.ep, out, sizeof(out), fi_mr_desc(smr),
			    to_client, out)) == -FI_EAGAIN && now() < end)
		progress();
	CHK(r);
	while (!got && now() < end)
		got = progress();
	if (!got || strcmp((char *) in, "hello"))
		die("the target's message did not reach the client");
	CHK(fi_close(&rmr->fid));
	CHK(fi_close(&smr->fid));
}

/* n writes of LEN from the client; the client's completions awaited. */
static void write_n(fi_addr_t peer, void *src, void *desc, uint64_t raddr,
		    uint64_t key, int n)
{
	double end = now() + TIMEOUT_S;
	int posted = 0, done = 0;
	ssize_t r;

	while (done < n && now() < end) {
		if (posted < n) {
			r = fi_write(client.s.ep, src, LEN, desc, peer, raddr,
				     key, NULL);
			if (r && r != -FI_EAGAIN)
				die("fi_write: %zd", r);
			posted += !r;
		}
		done += progress();
	}
	if (done < n)
		die("%d of %d writes completed", done, n);
}

static void stripes_to_target(fi_addr_t peer)
{
	uint8_t *src = aligned_alloc(4096, LEN), *dst = aligned_alloc(4096, LEN);
	struct fid_mr *smr, *dmr;
	uint64_t start = stats(&client, 1).tx_bytes, raddr;
	double end;
	size_t i;

	for (i = 0; i < LEN; i++)
		src[i] = (uint8_t) rand();
	memset(dst, 0xA5, LEN);
	CHK(fi_mr_reg(client.s.domain, src, LEN, FI_WRITE, 0, 4, 0, &smr, NULL));
	CHK(fi_mr_reg(target.s.domain, dst, LEN, FI_REMOTE_WRITE, 0, 5, 0, &dmr,
		      NULL));
	raddr = (target.s.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ?
		(uintptr_t) dst : 0;
	/* until the target's keys come: rail 0 alone */
	for (end = now() + TIMEOUT_S;
	     stats(&client, 1).tx_bytes == start && now() < end;)
		write_n(peer, src, fi_mr_desc(smr), raddr, fi_mr_key(dmr), 1);
	if (stats(&client, 1).tx_bytes == start)
		die("the completed target: rail 1 never carried a byte");
	for (end = now() + TIMEOUT_S; memcmp(src, dst, LEN) && now() < end;)
		progress();
	if (memcmp(src, dst, LEN))
		die("the completed target: bytes wrong");
	if (stats(&client, 1).errors || stats(&client, 1).reissued)
		die("rail 1 to the target failed or re-issued: the liar's?");
	printf("ok the target completed by its own introduction: rail 1 "
	       "carried %lu bytes, every byte in place\n",
	       (unsigned long) (stats(&client, 1).tx_bytes - start));
	CHK(fi_close(&smr->fid));
	CHK(fi_close(&dmr->fid));
	free(src);
	free(dst);
}

int main(void)
{
	static uint8_t part[4096];
	struct mrl_addr_hdr *p = (struct mrl_addr_hdr *) part;
	const struct mrl_addr_hdr *t;
	fi_addr_t to_target, to_client;
	size_t plen;
	double end;

	setvbuf(stdout, NULL, _IONBF, 0);
	open_named(&target, "efa;multirail", NULL, NULL);
	open_named(&client, "efa;multirail", NULL, NULL);
	CHK(fi_open_ops(&client.s.ep->fid, FI_MULTIRAIL_EP_OPS, 0,
			(void **) &ops, NULL));
	if (ops->rail_count(client.s.ep) < 2)
		die("needs 2 rails or more");
	open_named(&liar, "efa", "efa-direct", stats(&client, 0).domain);
	t = (const void *) target.name;
	if (!(t->flags & MRL_ADDR_CTRL))
		die("not over efa-direct: the target has no control endpoint");

	/* the client knows the target by rail 0 alone */
	plen = sizeof(*p) + t->rail_addrlen;
	memcpy(part, target.name, plen);
	p->nrails = 1;
	p->flags = MRL_ADDR_PARTIAL;
	if (fi_av_insert(client.s.av, part, 1, &to_target, 0, NULL) != 1)
		die("fi_av_insert of the partial target");
	if (fi_av_insert(target.s.av, client.name, 1, &to_client, 0, NULL) != 1)
		die("fi_av_insert of the client");

	lie_to_client();
	if (!(held(to_target)->flags & MRL_ADDR_PARTIAL))
		die("the liar's claim completed the partial target "
		    "(%d rails)", held(to_target)->nrails);
	printf("ok the liar's claim of the partial target was not taken\n");

	target_says_hello(to_client);
	for (end = now() + TIMEOUT_S;
	     memcmp(held(to_target), target.name, target.namelen) &&
	     now() < end;)
		progress();
	if (memcmp(held(to_target), target.name, target.namelen))
		die("the target's own introduction did not complete it");
	printf("ok the target's own introduction completed it\n");
	stripes_to_target(to_target);

	close_side(&liar.s);
	close_side(&client.s);
	close_side(&target.s);
	printf("PASS\n");
	return 0;
}
