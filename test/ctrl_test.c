/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The control channel against a peer that is not multirail, or speaks
 * another version of it.  A plain core endpoint sends tagged messages on
 * the control tag to a multirail endpoint's rail 0: garbage, short ones,
 * another protocol version, an unknown type, too many keys, an address
 * longer than the message, one longer than a receive buffer.  Each must be dropped (ctrl.sh checks the
 * warning naming the version), every receive buffer re-posted (more
 * messages are sent than rail 0 has buffers, several times over), and the
 * channel must still work after: a new registration's keys are learned and
 * a striped write to it lands on both rails, every byte checked.  Then:
 * a user send or receive on the control tag is refused, a receive that
 * ignores every tag bit leaves control messages alone, and a key request is
 * answered with keys only for a registration with remote access.
 * Environment: FI_PROVIDER_PATH, FI_MULTIRAIL_RAILS=lo,lo (ctrl.sh).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include "side.h"
#include "util.h"

#include "mrl_proto.h"
#include "rdma/fi_ext_multirail.h"

#define LEN		(256 * 1024)	/* striped: over FI_MULTIRAIL_STRIPE_MIN */
#define ROUNDS		6		/* each sends every bad kind once */
#define TIMEOUT_S	10

static struct side mr_side, core_side;
static struct fi_multirail_ep_ops *ops;
static const char *core_name;		/* the core under multirail */
static const void *rail0_name;		/* the target's rail 0 address */
static uint64_t target_tag;		/* its control tag there */

static struct fi_multirail_rail_stats stats(int rail)
{
	struct fi_multirail_rail_stats st;

	CHK(ops->rail_stats(mr_side.ep, rail, &st));
	return st;
}

/*
 * The control tag of the multirail endpoint whose rail address this is
 * (mrl_proto.h), within the core's tag width as mrl_ctrl.c takes it.
 * Answers to our plain endpoints come with their own: those receives
 * ignore the hash.
 */
static uint64_t control_tag(const void *rail_addr, size_t len)
{
	uint64_t m = core_side.info->ep_attr->mem_tag_format;
	int shift;

	for (shift = 1; shift < 64; shift <<= 1)
		m |= m >> shift;
	return mrl_ctrl_tag_for(rail_addr, len, m);
}

/* The control tag of multirail side s on its rail 0. */
static uint64_t side_tag(struct side *s)
{
	uint8_t name[4096];
	size_t len = sizeof(name);

	CHK(fi_getname(&s->ep->fid, name, &len));
	return control_tag((struct mrl_addr_hdr *) name + 1,
			   ((struct mrl_addr_hdr *) name)->rail_addrlen);
}

/* One bad message of kind k into buf; returns its length. */
#define BAD_MAX		(MRL_CTRL_BUF_SIZE + 2048)

static size_t bad_message(int k, uint8_t *buf, const void *name,
			  size_t namelen)
{
	struct mrl_ctrl_msg *m = (struct mrl_ctrl_msg *) buf;
	size_t i;

	memset(buf, 0, BAD_MAX);
	m->magic = MRL_CTRL_MAGIC;
	m->version = MRL_CTRL_VERSION;
	m->type = MRL_CTRL_HELLO;
	m->addrlen = namelen;
	memcpy(m->payload, name, namelen);
	switch (k) {
	case 0:		/* not ours at all */
		for (i = 0; i < 64; i++)
			buf[i] = (uint8_t) (i * 37 + 11);
		return 64;
	case 1:		/* shorter than a header */
		return 8;
	case 2:		/* the version before this one */
		m->version = MRL_CTRL_VERSION - 1;
		return sizeof(*m) + namelen;
	case 3:		/* a type nobody defined */
		m->type = 99;
		return sizeof(*m) + namelen;
	case 4:		/* more keys than rails */
		m->type = MRL_CTRL_KEY_RESP;
		m->nkeys = 200;
		return sizeof(*m) + namelen;
	default:	/* an address longer than the message */
		m->addrlen = 4000;
		return sizeof(*m) + namelen;
	}
}

#define NKINDS 6

/* n sends of side s complete, the target progressing meanwhile */
static void drain_sends_of(struct side *s, int n)
{
	struct fi_cq_tagged_entry e;
	double end = now() + TIMEOUT_S;
	ssize_t r;

	while (n > 0 && now() < end) {
		fi_cq_read(mr_side.cq, NULL, 0);	/* the target progresses */
		r = fi_cq_read(s->cq, &e, 1);
		if (r == 1)
			n--;
		else if (r != -FI_EAGAIN)
			die("core send completion: %zd", r);
	}
	if (n)
		die("%d core sends did not complete", n);
}

static void drain_core_sends(int n)
{
	drain_sends_of(&core_side, n);
}

/*
 * A tagged send from side s, posted again while the core refuses it for
 * now (it connects on a first send), s and also progressing meanwhile.
 */
static void tsend_from(struct side *s, struct side *also, const void *buf,
		       size_t len, fi_addr_t dest, uint64_t tag, void *ctx)
{
	double end = now() + TIMEOUT_S;
	ssize_t r;

	while ((r = fi_tsend(s->ep, buf, len, NULL, dest, tag, ctx)) ==
	       -FI_EAGAIN && now() < end) {
		fi_cq_read(s->cq, NULL, 0);
		fi_cq_read(also->cq, NULL, 0);
	}
	CHK(r);
}

static void send_bad_messages(fi_addr_t target, const void *name,
			      size_t namelen)
{
	static uint8_t msgs[NKINDS][BAD_MAX];
	uint64_t before = stats(0).ctrl_received, got = 0;
	double end;
	int round, k;

	for (round = 0; round < ROUNDS; round++) {
		for (k = 0; k < NKINDS; k++) {
			size_t len = bad_message(k, msgs[k], name, namelen);

			tsend_from(&core_side, &mr_side, msgs[k], len, target,
				   target_tag, NULL);
		}
		drain_core_sends(NKINDS);
	}
	for (end = now() + TIMEOUT_S;
	     got < ROUNDS * NKINDS && now() < end;) {
		fi_cq_read(mr_side.cq, NULL, 0);
		got = stats(0).ctrl_received - before;
	}
	if (got != ROUNDS * NKINDS)
		die("rail 0 received %lu control messages, %d sent: a "
		    "receive not re-posted, or one answered",
		    (unsigned long) got, ROUNDS * NKINDS);
	printf("ok %d bad control messages received and dropped\n",
	       ROUNDS * NKINDS);
}

/*
 * Messages longer than a control buffer fail the target's receives (rxm
 * reports the truncation and drops that connection, so each comes from an
 * endpoint of its own): more of them than rail 0 has buffers.  Each failed
 * receive must be counted and its buffer posted again, else the last ones
 * find no buffer and are never seen.
 */
static void send_oversized(const char *core, const void *rail0)
{
	static uint8_t msg[BAD_MAX];
	uint64_t before = stats(0).ctrl_received, got = 0;
	struct fi_cq_err_entry err;
	struct fi_cq_tagged_entry e;
	struct side rogue;
	fi_addr_t target;
	int n = 12, i, done;
	double end;
	ssize_t r;

	memset(msg, 0x5a, sizeof(msg));
	for (i = 0; i < n; i++) {
		open_side(&rogue, core, NULL, "lo", FI_MSG | FI_TAGGED);
		if (fi_av_insert(rogue.av, rail0, 1, &target, 0, NULL) != 1)
			die("core fi_av_insert of rail 0's address");
		tsend_from(&rogue, &mr_side, msg, sizeof(msg), target,
			   target_tag, NULL);
		for (done = 0, end = now() + TIMEOUT_S; !done && now() < end;) {
			fi_cq_read(mr_side.cq, NULL, 0);
			r = fi_cq_read(rogue.cq, &e, 1);
			if (r == -FI_EAVAIL)
				r = fi_cq_readerr(rogue.cq, &err, 0);
			done = r == 1;
		}
		for (end = now() + TIMEOUT_S; got <= (uint64_t) i &&
		     now() < end;) {
			fi_cq_read(mr_side.cq, NULL, 0);
			got = stats(0).ctrl_received - before;
		}
		if (got <= (uint64_t) i)
			die("rail 0 saw %lu of %d oversized messages: a "
			    "receive not re-posted", (unsigned long) got, i + 1);
		close_side(&rogue);
	}
	printf("ok %d oversized control messages failed their receives, "
	       "every buffer re-posted\n", n);
}

/* Progress both multirail endpoints until fi_write's completions come. */
static void write_to(struct side *peer_side, fi_addr_t peer, struct fid_mr *mr,
		     const uint8_t *src, uint64_t raddr, uint64_t key, int n)
{
	struct fi_cq_tagged_entry e;
	double end;
	int i, done = 0;
	ssize_t ret;

	for (i = 0; i < n; i++) {
		end = now() + TIMEOUT_S;
		while ((ret = fi_write(mr_side.ep, src, LEN, fi_mr_desc(mr),
				       peer, raddr, key, NULL)) == -FI_EAGAIN &&
		       now() < end) {
			fi_cq_read(mr_side.cq, NULL, 0);
			fi_cq_read(peer_side->cq, NULL, 0);
		}
		CHK(ret);
		for (end = now() + TIMEOUT_S; done <= i && now() < end;) {
			ssize_t r = fi_cq_read(mr_side.cq, &e, 1);

			fi_cq_read(peer_side->cq, NULL, 0);
			if (r == 1)
				done++;
			else if (r != -FI_EAGAIN)
				die("write completion: %zd", r);
		}
	}
	if (done != n)
		die("%d of %d writes completed", done, n);
}

/*
 * A write completes on the initiator when the core says so, which over
 * tcp is once its bytes were sent: the target places them as it
 * progresses.  True once dst holds src, false after TIMEOUT_S.
 */
static bool landed(struct side *target, const uint8_t *src,
		   const uint8_t *dst)
{
	double end = now() + TIMEOUT_S;

	while (memcmp(src, dst, LEN) && now() < end) {
		fi_cq_read(target->cq, NULL, 0);
		fi_cq_read(mr_side.cq, NULL, 0);
	}
	return !memcmp(src, dst, LEN);
}

/* After the flood, keys are still exchanged: a new key's write stripes. */
static void channel_still_works(void)
{
	struct fid_mr *mr;
	uint8_t *buf = aligned_alloc(4096, 2 * LEN), *dst = buf + LEN;
	uint64_t rail1 = stats(1).tx_bytes, key, raddr;
	fi_addr_t self;
	size_t i;

	for (i = 0; i < LEN; i++) {
		buf[i] = (uint8_t) rand();
		dst[i] = 0xA5;
	}
	CHK(fi_mr_reg(mr_side.domain, buf, 2 * LEN, FI_WRITE | FI_REMOTE_WRITE,
		      0, 7, 0, &mr, NULL));
	key = fi_mr_key(mr);
	raddr = (mr_side.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ?
		(uintptr_t) dst : LEN;
	{
		uint8_t name[4096];
		size_t len = sizeof(name);

		CHK(fi_getname(&mr_side.ep->fid, name, &len));
		if (fi_av_insert(mr_side.av, name, 1, &self, 0, NULL) != 1)
			die("fi_av_insert of ourselves");
	}
	/* several writes: the first ones go on rail 0 until the keys come */
	write_to(&mr_side, self, mr, buf, raddr, key, 20);
	if (!landed(&mr_side, buf, dst))
		die("bytes wrong after the writes");
	if (stats(1).tx_bytes == rail1)
		die("rail 1 carried nothing: the keys never came back");
	printf("ok keys learned after the flood: rail 1 carried %lu bytes, "
	       "every byte in place\n",
	       (unsigned long) (stats(1).tx_bytes - rail1));
	CHK(fi_close(&mr->fid));
	free(buf);
}

/*
 * Tag bit 63 is the control channel's: fi_getinfo's mem_tag_format leaves
 * it out, and a user send or receive naming it is refused.
 */
static void reserved_tag_refused(void)
{
	static char ubuf[64];
	uint64_t format = mr_side.info->ep_attr->mem_tag_format;
	long r;

	if (format & MRL_CTRL_TAG)
		die("mem_tag_format 0x%lx has bit 63", (unsigned long) format);
	printf("ok mem_tag_format 0x%lx leaves bit 63 out\n",
	       (unsigned long) format);
	r = fi_trecv(mr_side.ep, ubuf, sizeof(ubuf), NULL, FI_ADDR_UNSPEC,
		     MRL_CTRL_TAG, 0, NULL);
	if (r != -FI_EINVAL)
		die("fi_trecv with tag bit 63: %ld, -FI_EINVAL due", r);
	printf("ok fi_trecv with tag bit 63 refused: %ld\n", r);
	r = fi_tsend(mr_side.ep, ubuf, sizeof(ubuf), NULL, 0, MRL_CTRL_TAG | 1,
		     NULL);
	if (r != -FI_EINVAL)
		die("fi_tsend with tag bit 63: %ld, -FI_EINVAL due", r);
	printf("ok fi_tsend with tag bit 63 refused: %ld\n", r);
}

static void core_tsend(fi_addr_t target, const void *buf, size_t len,
		       uint64_t tag)
{
	tsend_from(&core_side, &mr_side, buf, len, target, tag, NULL);
	drain_core_sends(1);
}

/*
 * A user receive that ignores every tag bit still matches bit 63 as 0.
 * Control messages that arrive faster than the channel re-posts its
 * receives would be the user's to take: 2 * RX_BUFS of them are sent
 * while the target does not progress, then it reads them.  All must go to
 * the channel, and the receive then takes the user's message that follows.
 */
#define RX_BUFS		64	/* MRL_CTRL_RX_COUNT */

static void wildcard_recv_spares_control(fi_addr_t target, const void *name,
					 size_t namelen)
{
	static uint8_t ubuf[MRL_CTRL_BUF_SIZE], msg[BAD_MAX];
	static const char user[] = "user";
	uint64_t want = stats(0).ctrl_received + 2 * RX_BUFS;
	size_t len = bad_message(0, msg, name, namelen);
	struct fi_cq_tagged_entry e;
	int i, sent = 0;
	double end;
	ssize_t r;
	char uctx;

	CHK(fi_trecv(mr_side.ep, ubuf, sizeof(ubuf), NULL, FI_ADDR_UNSPEC, 0,
		     ~0ULL, &uctx));
	for (i = 0; i < 2 * RX_BUFS; i++) {
		end = now() + TIMEOUT_S;
		while ((r = fi_tsend(core_side.ep, msg, len, NULL, target,
				     target_tag, NULL)) == -FI_EAGAIN &&
		       now() < end)
			sent += fi_cq_read(core_side.cq, &e, 1) == 1;
		CHK(r);
	}
	for (end = now() + 1; sent < 2 * RX_BUFS && now() < end;)
		sent += fi_cq_read(core_side.cq, &e, 1) == 1;
	drain_core_sends(2 * RX_BUFS - sent);
	for (end = now() + TIMEOUT_S; now() < end &&
	     stats(0).ctrl_received < want;) {
		r = fi_cq_read(mr_side.cq, &e, 1);
		if (r == 1)
			die("a control message taken by a receive with ignore "
			    "~0 (tag 0x%lx, %zu bytes)", (unsigned long) e.tag,
			    e.len);
	}
	if (stats(0).ctrl_received < want)
		die("%lu of %d control messages reached the channel",
		    (unsigned long) (want - stats(0).ctrl_received),
		    2 * RX_BUFS);
	core_tsend(target, user, sizeof(user), 5);
	for (end = now() + TIMEOUT_S;
	     (r = fi_cq_read(mr_side.cq, &e, 1)) == -FI_EAGAIN &&
	     now() < end;)
		;
	if (r != 1 || e.op_context != &uctx || e.tag != 5 ||
	    e.len != sizeof(user) || memcmp(ubuf, user, sizeof(user)))
		die("the receive with ignore ~0: %zd, tag 0x%lx, %zu bytes; "
		    "the user's tag 5 message due", r, (unsigned long) e.tag,
		    e.len);
	printf("ok a receive with ignore ~0 left the control message to the "
	       "channel and took the user's\n");
}

/*
 * Ask, as the plain core endpoint of side s, for the rails' keys behind a
 * key: the answer's status and key count.  Its own composite address (one
 * rail) rides in the request, as a multirail peer's would.
 */
static void ask_keys_from(struct side *s, fi_addr_t target, uint64_t key,
			  int32_t *status, int *nkeys)
{
	static uint8_t req[MRL_CTRL_BUF_SIZE], resp[MRL_CTRL_BUF_SIZE];
	struct mrl_ctrl_msg *m = (struct mrl_ctrl_msg *) req;
	const struct mrl_ctrl_msg *a = (const void *) resp;
	struct mrl_addr_hdr *hdr = (struct mrl_addr_hdr *) m->payload;
	struct fi_cq_tagged_entry e;
	size_t alen = MRL_CTRL_BUF_SIZE - sizeof(*m) - sizeof(*hdr);
	int got_send = 0, got_recv = 0;
	double end;
	ssize_t r;

	memset(req, 0, sizeof(req));
	CHK(fi_getname(&s->ep->fid, hdr + 1, &alen));
	hdr->magic = MRL_ADDR_MAGIC;
	hdr->version = MRL_ADDR_VERSION;
	hdr->nrails = 1;
	hdr->rail_addrlen = alen;
	m->magic = MRL_CTRL_MAGIC;
	m->version = MRL_CTRL_VERSION;
	m->type = MRL_CTRL_KEY_REQ;
	m->key = key;
	m->addrlen = sizeof(*hdr) + alen;
	CHK(fi_trecv(s->ep, resp, sizeof(resp), NULL, FI_ADDR_UNSPEC,
		     MRL_CTRL_TAG, MRL_CTRL_TAG_HASH, resp));
	tsend_from(s, &mr_side, req, sizeof(*m) + m->addrlen, target,
		   target_tag, req);
	for (end = now() + TIMEOUT_S; !(got_send && got_recv) && now() < end;) {
		fi_cq_read(mr_side.cq, NULL, 0);
		r = fi_cq_read(s->cq, &e, 1);
		if (r == 1) {
			got_send |= e.op_context == req;
			got_recv |= e.op_context == resp;
		} else if (r != -FI_EAGAIN) {
			die("core completion: %zd", r);
		}
	}
	if (!got_recv || a->magic != MRL_CTRL_MAGIC ||
	    a->type != MRL_CTRL_KEY_RESP || a->key != key)
		die("no KEY_RESP for key 0x%lx", (unsigned long) key);
	*status = a->status;
	*nkeys = a->nkeys;
}

static void ask_keys(fi_addr_t target, uint64_t key, int32_t *status,
		     int *nkeys)
{
	ask_keys_from(&core_side, target, key, status, nkeys);
}

static void learned_peers_bounded(fi_addr_t target, uint64_t remote_key);

/* Keys only for registrations peers may access, and then every rail's. */
static void keys_for_remote_access_only(fi_addr_t target)
{
	static uint8_t mem[2][4096];
	struct fid_mr *local, *remote;
	int32_t status;
	int n;

	CHK(fi_mr_reg(mr_side.domain, mem[0], sizeof(mem[0]),
		      FI_READ | FI_WRITE, 0, 11, 0, &local, NULL));
	CHK(fi_mr_reg(mr_side.domain, mem[1], sizeof(mem[1]),
		      FI_REMOTE_WRITE, 0, 12, 0, &remote, NULL));
	ask_keys(target, fi_mr_key(local), &status, &n);
	if (status != -FI_ENOKEY || n)
		die("keys of a registration without remote access: status "
		    "%d, %d keys", status, n);
	printf("ok no keys for a registration without remote access\n");
	ask_keys(target, fi_mr_key(remote), &status, &n);
	if (status || n != ops->rail_count(mr_side.ep))
		die("keys of a remote-write registration: status %d, %d keys",
		    status, n);
	printf("ok a remote-write registration: %d rails' keys\n", n);
	learned_peers_bounded(target, fi_mr_key(remote));
	CHK(fi_close(&local->fid));
	CHK(fi_close(&remote->fid));
}

/*
 * A peer the target has never heard of asks for keys after the flood: the
 * table is full of made-up senders, and the least recent must make room.
 * The old bound refused every newcomer once full, so a few messages locked
 * each later peer onto rail 0.
 */
static void a_newcomer_is_answered(const char *core, uint64_t remote_key,
				   const void *rail0)
{
	struct side fresh;
	fi_addr_t target;
	int32_t status;
	int n;

	open_side(&fresh, core, NULL, "lo", FI_MSG | FI_TAGGED);
	if (fi_av_insert(fresh.av, rail0, 1, &target, 0, NULL) != 1)
		die("core fi_av_insert of rail 0's address");
	ask_keys_from(&fresh, target, remote_key, &status, &n);
	if (status || n != ops->rail_count(mr_side.ep))
		die("a new peer after the claims: status %d, %d keys", status,
		    n);
	close_side(&fresh);
	printf("ok a peer new to the full table is answered\n");
}

/*
 * Control messages claiming many senders that are not in the AV, from an
 * endpoint the target does not know (a known one claiming others is
 * dropped outright): the endpoint keeps at most
 * FI_MULTIRAIL_MAX_LEARNED_PEERS of them (ctrl.sh sets 4 and checks the
 * warning), the least recently heard from making room; peers it knew, and
 * peers new to it, still get answers.
 */
static void learned_peers_bounded(fi_addr_t target, uint64_t remote_key)
{
	static uint8_t msgs[12][256];
	uint64_t before = stats(0).ctrl_received;
	struct side liar;
	fi_addr_t liar_to_target;
	struct sockaddr_in *sin;
	struct mrl_addr_hdr *hdr;
	struct mrl_ctrl_msg *m;
	int32_t status;
	double end;
	int i, n;

	open_side(&liar, core_name, NULL, "lo", FI_MSG | FI_TAGGED);
	if (fi_av_insert(liar.av, rail0_name, 1, &liar_to_target, 0,
			 NULL) != 1)
		die("core fi_av_insert of rail 0's address");
	for (i = 0; i < 12; i++) {
		m = (struct mrl_ctrl_msg *) msgs[i];
		hdr = (struct mrl_addr_hdr *) m->payload;
		sin = (struct sockaddr_in *) (hdr + 1);
		m->magic = MRL_CTRL_MAGIC;
		m->version = MRL_CTRL_VERSION;
		m->type = MRL_CTRL_RAIL_UP;	/* asks for no answer */
		m->addrlen = sizeof(*hdr) + sizeof(*sin);
		hdr->magic = MRL_ADDR_MAGIC;
		hdr->version = MRL_ADDR_VERSION;
		hdr->nrails = 1;
		hdr->rail_addrlen = sizeof(*sin);
		sin->sin_family = AF_INET;
		sin->sin_port = htons(47900 + i);	/* nobody listens there */
		sin->sin_addr.s_addr = htonl(0x7f000001);
		tsend_from(&liar, &mr_side, m, sizeof(*m) + m->addrlen,
			   liar_to_target, target_tag, NULL);
		/*
		 * A few at a time, each batch received before the next:
		 * libfabric 2.1's rxm crashes in fi_av_insert (which
		 * learning a peer calls) while messages it holds as
		 * unexpected wait (rxm_get_addr, under util_foreach_unspec).
		 */
		if (i % 4 == 3) {
			drain_sends_of(&liar, 4);
			for (end = now() + TIMEOUT_S;
			     stats(0).ctrl_received - before < (uint64_t) i + 1 &&
			     now() < end;)
				fi_cq_read(mr_side.cq, NULL, 0);
		}
	}
	if (stats(0).ctrl_received - before != 12)
		die("%lu of 12 claims received",
		    (unsigned long) (stats(0).ctrl_received - before));
	close_side(&liar);
	ask_keys(target, remote_key, &status, &n);
	if (status || n != ops->rail_count(mr_side.ep))
		die("a known peer after the claims: status %d, %d keys",
		    status, n);
	printf("ok 12 claimed senders; a known peer is still answered\n");
	a_newcomer_is_answered(core_name, remote_key, rail0_name);
}

/*
 * From the plain endpoint to target (on side s, which progresses too: the
 * core connects to it on the first send): a control message of type, as
 * from claimed.
 */
static void claim_to(struct side *s, fi_addr_t target, int type,
		     const void *claimed, size_t len, uint64_t key,
		     int32_t status)
{
	static uint8_t msg[MRL_CTRL_BUF_SIZE];
	struct mrl_ctrl_msg *m = (struct mrl_ctrl_msg *) msg;

	memset(msg, 0, sizeof(msg));
	m->magic = MRL_CTRL_MAGIC;
	m->version = MRL_CTRL_VERSION;
	m->type = type;
	m->addrlen = len;
	m->key = key;
	m->status = status;
	memcpy(m->payload, claimed, len);
	tsend_from(&core_side, s, msg, sizeof(*m) + len, target,
		   side_tag(s), NULL);
}

/* The same to mr_side, once it arrived there. */
static void send_claim(fi_addr_t target, int type, const void *claimed,
		       size_t len, uint64_t key, int32_t status)
{
	uint64_t got = stats(0).ctrl_received;
	double end;

	claim_to(&mr_side, target, type, claimed, len, key, status);
	drain_core_sends(1);
	for (end = now() + TIMEOUT_S;
	     stats(0).ctrl_received == got && now() < end;)
		fi_cq_read(mr_side.cq, NULL, 0);
	if (stats(0).ctrl_received == got)
		die("a claim of type %d never arrived", type);
}

/* A source here and a destination at peer side a, registered. */
struct bufs {
	uint8_t *src, *dst;
	struct fid_mr *smr, *dmr;
	uint64_t raddr, key;
};

static void bufs_open(struct bufs *b, struct side *a)
{
	size_t i;

	b->src = aligned_alloc(4096, LEN);
	b->dst = aligned_alloc(4096, LEN);
	for (i = 0; i < LEN; i++)
		b->src[i] = (uint8_t) rand();
	CHK(fi_mr_reg(mr_side.domain, b->src, LEN, FI_WRITE, 0, 11, 0,
		      &b->smr, NULL));
	CHK(fi_mr_reg(a->domain, b->dst, LEN, FI_REMOTE_WRITE, 0, 12, 0,
		      &b->dmr, NULL));
	b->raddr = (a->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ?
		   (uintptr_t) b->dst : 0;
	b->key = fi_mr_key(b->dmr);
}

static void bufs_close(struct bufs *b)
{
	CHK(fi_close(&b->smr->fid));
	CHK(fi_close(&b->dmr->fid));
	free(b->src);
	free(b->dst);
}

/*
 * n writes to peer (side a) land, every byte, and rail 1 carried some of
 * them without an error or a re-issue: the peer's own rail 1 was used.
 * (The liar's would fail, and its chunks be re-issued on rail 0: the bytes
 * would still land, the rail would not.)
 */
static void writes_land_on_peer_rails(struct bufs *b, struct side *a,
				      fi_addr_t peer, int n, const char *who)
{
	struct fi_multirail_rail_stats before, after;
	uint64_t start = stats(1).tx_bytes;
	double end;

	/* until the peer's address is complete and its keys known (a few
	 * round trips, and connections), ops go on rail 0 alone */
	for (end = now() + TIMEOUT_S;
	     stats(1).tx_bytes == start && now() < end;)
		write_to(a, peer, b->smr, b->src, b->raddr, b->key, 1);
	memset(b->dst, 0xA5, LEN);
	CHK(ops->rail_stats(mr_side.ep, 1, &before));
	write_to(a, peer, b->smr, b->src, b->raddr, b->key, n);
	CHK(ops->rail_stats(mr_side.ep, 1, &after));
	if (!landed(a, b->src, b->dst))
		die("%s: bytes wrong at the peer", who);
	if (after.tx_bytes == before.tx_bytes)
		die("%s: rail 1 carried nothing to the peer", who);
	if (after.errors != before.errors || after.reissued != before.reissued)
		die("%s: rail 1 to the peer: %lu errors, %lu chunks "
		    "re-issued: the liar's rail was used", who,
		    (unsigned long) (after.errors - before.errors),
		    (unsigned long) (after.reissued - before.reissued));
	printf("ok %s: rail 1 carried %lu bytes to the peer, none failed\n",
	       who, (unsigned long) (after.tx_bytes - before.tx_bytes));
}

/* A multirail peer's address, and the liar's claim of it: its rail 1. */
static size_t claim_of(struct side *a, uint8_t *real, uint8_t *fake)
{
	size_t rlen = 4096, llen = 256;
	struct mrl_addr_hdr *hdr = (struct mrl_addr_hdr *) real;
	uint8_t liar[256];

	open_side(a, "multirail", NULL, NULL, FI_MSG | FI_TAGGED | FI_RMA);
	CHK(fi_getname(&a->ep->fid, real, &rlen));
	CHK(fi_getname(&core_side.ep->fid, liar, &llen));
	if (hdr->nrails < 2 || llen != hdr->rail_addrlen)
		die("a peer of %u rails, rail addresses of %u bytes, the "
		    "liar's of %zu", hdr->nrails, hdr->rail_addrlen, llen);
	memcpy(fake, real, rlen);
	memcpy(fake + sizeof(*hdr) + hdr->rail_addrlen, liar, llen);
	return rlen;
}

/*
 * A liar claims another multirail peer's rail-0 address with a rail 1 of
 * its own (this plain endpoint's), before the user inserts that peer: the
 * inserted address must win.  Then the liar answers, as that peer, a key
 * request never made to it: "no such key".  Taken, our next write to the
 * peer would be refused.
 */
static void inserted_address_beats_a_claim(fi_addr_t target)
{
	static uint8_t real[4096], fake[4096];
	size_t rlen;
	struct bufs b;
	struct side a;
	fi_addr_t peer;

	rlen = claim_of(&a, real, fake);
	send_claim(target, MRL_CTRL_HELLO, fake, rlen, 0, 0);
	if (fi_av_insert(mr_side.av, real, 1, &peer, 0, NULL) != 1)
		die("fi_av_insert of the claimed peer");
	bufs_open(&b, &a);
	writes_land_on_peer_rails(&b, &a, peer, 20,
				  "a claimed address lost to the inserted one");
	send_claim(target, MRL_CTRL_KEY_RESP, real, rlen, b.key, -FI_ENOKEY);
	writes_land_on_peer_rails(&b, &a, peer, 1,
				  "a KEY_RESP for no request of ours ignored");
	bufs_close(&b);
	close_side(&a);
}

/*
 * A peer the user knows by rail 0 alone (a partial address, as fi_getinfo's
 * node gives): the liar answers first, as that peer, with a rail 1 of its
 * own.  Only the answer to our own HELLO (echoing its nonce) may complete
 * the peer.
 */
static void partial_peer_completed_by_its_answer(fi_addr_t target)
{
	static uint8_t real[4096], fake[4096], part[4096];
	struct mrl_addr_hdr *hdr = (struct mrl_addr_hdr *) part;
	size_t rlen, plen;
	struct bufs b;
	struct side a;
	fi_addr_t peer;

	rlen = claim_of(&a, real, fake);
	plen = sizeof(*hdr) + ((struct mrl_addr_hdr *) real)->rail_addrlen;
	memcpy(part, real, plen);
	hdr->nrails = 1;
	hdr->flags = MRL_ADDR_PARTIAL;
	if (fi_av_insert(mr_side.av, part, 1, &peer, 0, NULL) != 1)
		die("fi_av_insert of a partial peer");
	send_claim(target, MRL_CTRL_HELLO_ACK, fake, rlen, 0, 0);
	bufs_open(&b, &a);
	writes_land_on_peer_rails(&b, &a, peer, 20,
				  "a partial peer completed by its own answer");
	bufs_close(&b);
	close_side(&a);
}

/* Our plain endpoint's address as a one-rail multirail peer's. */
static size_t liar_address(uint8_t *buf, size_t size)
{
	struct mrl_addr_hdr *hdr = (struct mrl_addr_hdr *) buf;
	size_t alen = size - sizeof(*hdr);

	memset(hdr, 0, sizeof(*hdr));
	CHK(fi_getname(&core_side.ep->fid, hdr + 1, &alen));
	hdr->magic = MRL_ADDR_MAGIC;
	hdr->version = MRL_ADDR_VERSION;
	hdr->nrails = 1;
	hdr->rail_addrlen = alen;
	return sizeof(*hdr) + alen;
}

/*
 * A HELLO from the plain endpoint claiming addr, to s: the control messages
 * s sent.  to_us: the answer is due here (addr is ours), and must be a
 * HELLO_ACK (taken, so that no later receive on the tag finds it); else
 * the claimed peer's side progresses, so that an answer to it would go.
 */
static uint64_t hello_answers(struct side *s, struct side *claimed,
			      fi_addr_t target, const void *addr, size_t len,
			      bool to_us)
{
	static uint8_t ack[MRL_CTRL_BUF_SIZE];
	const struct mrl_ctrl_msg *a = (const void *) ack;
	struct fi_multirail_rail_stats st;
	struct fi_cq_tagged_entry e;
	bool acked = false;
	uint64_t got, sent;
	double end;

	CHK(ops->rail_stats(s->ep, 0, &st));
	got = st.ctrl_received;
	sent = st.ctrl_sent;
	if (to_us)
		CHK(fi_trecv(core_side.ep, ack, sizeof(ack), NULL,
			     FI_ADDR_UNSPEC, MRL_CTRL_TAG, MRL_CTRL_TAG_HASH, ack));
	claim_to(s, target, MRL_CTRL_HELLO, addr, len, 0, 0);
	for (end = now() + TIMEOUT_S; st.ctrl_received == got && now() < end;) {
		fi_cq_read(s->cq, NULL, 0);
		fi_cq_read(core_side.cq, NULL, 0);
		CHK(ops->rail_stats(s->ep, 0, &st));
	}
	if (st.ctrl_received == got)
		die("a HELLO never arrived");
	/* its answer, if any */
	for (end = now() + (to_us ? TIMEOUT_S : 0.5); now() < end && !acked;) {
		fi_cq_read(s->cq, NULL, 0);
		if (claimed)
			fi_cq_read(claimed->cq, NULL, 0);
		acked = fi_cq_read(core_side.cq, &e, 1) == 1 &&
			e.op_context == ack;
	}
	if (to_us && (!acked || a->magic != MRL_CTRL_MAGIC ||
		      a->type != MRL_CTRL_HELLO_ACK))
		die("no HELLO_ACK came back");
	CHK(ops->rail_stats(s->ep, 0, &st));
	return st.ctrl_sent - sent;
}

/*
 * Rail 0's core reports where each message came from (multirail asks it
 * for sources whether or not the user did: caps with or without
 * FI_SOURCE).  To a multirail endpoint that inserted another multirail
 * peer: the plain endpoint, unknown to it, claims to be that peer (a HELLO
 * with its address): dropped, nothing answered; then, inserted as a peer
 * itself, claims it again: dropped.  A HELLO with its own address is
 * answered.  Before the core was asked for sources, the first was answered
 * with or without FI_SOURCE, the second without.
 */
static void claims_checked_by_source(uint64_t caps, const char *how)
{
	static uint8_t name[4096], liar[512], other[4096];
	size_t namelen = sizeof(name), olen = sizeof(other), llen;
	fi_addr_t target, as_peer, other_peer;
	struct side s, a;
	uint64_t n;

	open_side(&s, "multirail", NULL, NULL, FI_MSG | FI_TAGGED | FI_RMA | caps);
	open_side(&a, "multirail", NULL, NULL, FI_MSG | FI_TAGGED | FI_RMA);
	CHK(fi_getname(&s.ep->fid, name, &namelen));
	CHK(fi_getname(&a.ep->fid, other, &olen));
	if (fi_av_insert(core_side.av, (struct mrl_addr_hdr *) name + 1, 1,
			 &target, 0, NULL) != 1)
		die("core fi_av_insert of the multirail side's rail 0");
	if (fi_av_insert(s.av, other, 1, &other_peer, 0, NULL) != 1)
		die("fi_av_insert of the other multirail peer");
	n = hello_answers(&s, &a, target, other, olen, false);
	if (n)
		die("%s: an unknown sender claiming an inserted peer's address "
		    "was answered (%lu control message(s) sent)", how,
		    (unsigned long) n);
	llen = liar_address(liar, sizeof(liar));
	if (fi_av_insert(s.av, liar, 1, &as_peer, 0, NULL) != 1)
		die("fi_av_insert of the plain endpoint as a peer");
	n = hello_answers(&s, &a, target, other, olen, false);
	if (n)
		die("%s: a known peer claiming another's address was answered "
		    "(%lu control message(s) sent)", how, (unsigned long) n);
	n = hello_answers(&s, NULL, target, liar, llen, true);
	if (n != 1)
		die("%s: a known peer's HELLO as itself: %lu answers, 1 due",
		    how, (unsigned long) n);
	printf("ok %s: a claim of an inserted peer's address from an unknown "
	       "sender, or from another known peer, is dropped; as itself, "
	       "answered\n", how);
	close_side(&a);
	close_side(&s);
}

static void known_peer_cannot_claim_another(void)
{
	claims_checked_by_source(FI_SOURCE, "with FI_SOURCE");
	claims_checked_by_source(0, "without FI_SOURCE");
}

/* A TCP port that takes connections into its backlog and never answers. */
static int silent_listener(struct sockaddr_in *sin)
{
	socklen_t len = sizeof(*sin);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		die("socket");
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *) sin, sizeof(*sin)) ||
	    listen(fd, 1) || getsockname(fd, (struct sockaddr *) sin, &len))
		die("silent listener");
	return fd;
}

/*
 * A peer that never answers (its rails connect to a port that never
 * accepts): our key request and RAIL_UP to it wait in the backlog, the
 * core refusing them while it connects.  They must not hold back the
 * control messages to the other peers on those rails: a new peer's keys
 * are still learned and rail 1 still carries its writes.  Then the silent
 * peer's write fails once the refusals outlast the deadline (ctrl.sh: 3 s,
 * FI_MULTIRAIL_RAIL_TIMEOUT_MS and FI_MULTIRAIL_CONNECT_TIMEOUT_MS alike)
 * and rail 0 goes out of service for it, and its key request leaves the
 * backlog (ctrl.sh checks the warning).
 */
/* mr_side's own address with every rail pointing at sin: a silent peer. */
static fi_addr_t insert_silent_peer(const struct sockaddr_in *sin)
{
	static uint8_t silent[4096];
	struct mrl_addr_hdr *hdr = (struct mrl_addr_hdr *) silent;
	size_t len = sizeof(silent);
	fi_addr_t peer;
	int i;

	CHK(fi_getname(&mr_side.ep->fid, silent, &len));
	if (hdr->nrails < 2 || hdr->rail_addrlen != sizeof(*sin) ||
	    hdr->flags)
		die("a peer of %u rails, rail addresses of %u bytes, flags %u: "
		    "sockaddr_in rails expected", hdr->nrails,
		    hdr->rail_addrlen, hdr->flags);
	for (i = 0; i < hdr->nrails; i++)
		memcpy((uint8_t *) (hdr + 1) + i * sizeof(*sin), sin,
		       sizeof(*sin));
	if (fi_av_insert(mr_side.av, silent, 1, &peer, 0, NULL) != 1)
		die("fi_av_insert of the silent peer");
	return peer;
}

/* Wait for the op posted with ctx to complete with an error: its errno. */
static int failed_op(void *ctx, struct side *also)
{
	struct fi_cq_err_entry err = { 0 };
	struct fi_cq_tagged_entry e;
	ssize_t r = -FI_EAGAIN;
	double end;

	for (end = now() + 3 * TIMEOUT_S; r == -FI_EAGAIN && now() < end;) {
		r = fi_cq_read(mr_side.cq, &e, 1);
		fi_cq_read(also->cq, NULL, 0);
	}
	if (r != -FI_EAVAIL || fi_cq_readerr(mr_side.cq, &err, 0) != 1 ||
	    err.op_context != ctx)
		die("the op did not fail: fi_cq_read %zd", r);
	return err.err;
}

static void a_silent_peer_holds_back_only_its_own(void)
{
	static uint8_t src[64], real[4096];
	size_t rlen = sizeof(real);
	struct sockaddr_in sin;
	fi_addr_t silent, peer;
	struct fid_mr *mr;
	struct bufs b;
	struct side a;
	double end;
	ssize_t r;
	int fd;
	char ctx;

	fd = silent_listener(&sin);
	silent = insert_silent_peer(&sin);
	CHK(fi_mr_reg(mr_side.domain, src, sizeof(src), FI_WRITE, 0, 13, 0,
		      &mr, NULL));
	/* -FI_EAGAIN while the peer is asked to open its rails (a second) */
	for (end = now() + 5; (r = fi_write(mr_side.ep, src, sizeof(src),
				fi_mr_desc(mr), silent, 0, 0x1234, &ctx)) ==
			      -FI_EAGAIN && now() < end;)
		fi_cq_read(mr_side.cq, NULL, 0);
	if (r)
		die("fi_write to the silent peer: %zd", r);
	for (end = now() + 0.5; now() < end;)
		fi_cq_read(mr_side.cq, NULL, 0);	/* its requests refused */

	open_side(&a, "multirail", NULL, NULL, FI_MSG | FI_TAGGED | FI_RMA);
	CHK(fi_getname(&a.ep->fid, real, &rlen));
	if (fi_av_insert(mr_side.av, real, 1, &peer, 0, NULL) != 1)
		die("fi_av_insert of the second peer");
	bufs_open(&b, &a);
	writes_land_on_peer_rails(&b, &a, peer, 4, "a peer behind a silent one");
	bufs_close(&b);
	printf("ok the write to the silent peer failed: %s\n",
	       fi_strerror(failed_op(&ctx, &a)));
	CHK(fi_close(&mr->fid));
	close_side(&a);
	close(fd);
}

int main(void)
{
	uint8_t name[4096];
	size_t namelen = sizeof(name);
	fi_addr_t target;
	char core[128];
	const char *fab;

	setvbuf(stdout, NULL, _IONBF, 0);
	open_side(&mr_side, "multirail", NULL, NULL, FI_MSG | FI_TAGGED | FI_RMA);
	CHK(fi_open_ops(&mr_side.ep->fid, FI_MULTIRAIL_EP_OPS, 0,
			(void **) &ops, NULL));
	if (ops->rail_count(mr_side.ep) < 2)
		die("needs 2 rails (FI_MULTIRAIL_RAILS=lo,lo)");
	CHK(fi_getname(&mr_side.ep->fid, name, &namelen));
	/* the core under "multirail/<core>", opened plainly */
	fab = strchr(mr_side.info->fabric_attr->name, '/');
	snprintf(core, sizeof(core), "%s", fab ? fab + 1 : "tcp;ofi_rxm");
	open_side(&core_side, core, NULL, "lo", FI_MSG | FI_TAGGED);
	core_name = core;
	rail0_name = (struct mrl_addr_hdr *) name + 1;
	target_tag = control_tag(rail0_name,
				 ((struct mrl_addr_hdr *) name)->rail_addrlen);
	printf("multirail over %s, and a plain %s endpoint\n", core,
	       core_side.info->fabric_attr->prov_name);
	/* the target's rail 0, as a plain core peer */
	if (fi_av_insert(core_side.av, (struct mrl_addr_hdr *) name + 1, 1,
			 &target, 0, NULL) != 1)
		die("core fi_av_insert of rail 0's address");
	/* first: later cases fill the learned-peer table on purpose */
	inserted_address_beats_a_claim(target);
	partial_peer_completed_by_its_answer(target);
	known_peer_cannot_claim_another();
	send_bad_messages(target, name, namelen);
	send_oversized(core, (struct mrl_addr_hdr *) name + 1);
	channel_still_works();
	reserved_tag_refused();
	wildcard_recv_spares_control(target, name, namelen);
	keys_for_remote_access_only(target);
	a_silent_peer_holds_back_only_its_own();
	close_side(&core_side);
	close_side(&mr_side);
	printf("PASS\n");
	return 0;
}
