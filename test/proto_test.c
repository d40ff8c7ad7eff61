/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The composite address's cut form (mrl_proto.c, MRL_ADDR_CTRL_DELTA):
 * rail 0's address, and the control endpoint's as its difference.
 *   - efa's 32-byte addresses of two endpoints on one NIC (the QP number
 *     and key differ) fit aws-ofi-nccl's 56 bytes, and expand back to the
 *     very bytes;
 *   - the extremes: no byte differs, every byte differs, an address too
 *     long for the form;
 *   - the checks refuse what the form forbids: stray bitmap bits, the
 *     form without a control endpoint or not partial, a cut tail;
 * and the message packets (mrl_pkt_check): every length of each family
 * against the bytes that came, at and around each bound.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mrl_proto.h"

#define EFA_ADDRLEN	32	/* struct efa_ep_addr */
#define NRAILS		4

static uint8_t full[sizeof(struct mrl_addr_hdr) +
		    (NRAILS + 1) * (MRL_ADDR_DELTA_MAX + 1)];

/* A full address of NRAILS rails and a control endpoint, alen bytes each;
 * the control endpoint's is rail 0's with the bytes of differ changed. */
static void make_full(size_t alen, const int *differ, int ndiffer)
{
	struct mrl_addr_hdr *hdr = (struct mrl_addr_hdr *) full;
	uint8_t *a = (uint8_t *) (hdr + 1), *ctrl;
	size_t i;
	int r;

	memset(full, 0, sizeof(full));
	*hdr = (struct mrl_addr_hdr) {
		.magic = MRL_ADDR_MAGIC, .version = MRL_ADDR_VERSION,
		.nrails = NRAILS, .flags = MRL_ADDR_CTRL,
		.rail_addrlen = (uint16_t) alen,
	};
	for (r = 0; r < NRAILS; r++)
		for (i = 0; i < alen; i++)
			a[r * alen + i] = (uint8_t) (17 * i + 31 * r + 5);
	ctrl = a + NRAILS * alen;
	memcpy(ctrl, a, alen);
	for (r = 0; r < ndiffer; r++)
		ctrl[differ[r]] ^= 0x5a;
}

/* Cut into have bytes, checked, expanded: rail 0's and the control's. */
static size_t cut_and_expand(size_t alen, size_t have)
{
	uint8_t cut[sizeof(full)], back[sizeof(full)];
	size_t len = mrl_addr_delta(full, cut, have);
	const struct mrl_addr_hdr *hdr = (const void *) back;

	if (!len || len > have)
		return len;
	check(!mrl_addr_check(cut, len) && mrl_addr_len(cut) == len,
	      "%zu-byte cut form checked, its length %zu", len,
	      mrl_addr_len(cut));
	check(mrl_addr_check(cut, len - 1) != 0,
	      "one byte short: refused");
	check(!mrl_addr_ctrl(cut), "the cut form names no control address "
	      "before it is expanded");
	mrl_addr_expand(cut, back);
	check(!mrl_addr_check(back, mrl_addr_size(2, alen)) &&
	      hdr->nrails == 1 &&
	      hdr->flags == (MRL_ADDR_CTRL | MRL_ADDR_PARTIAL),
	      "expanded: rail 0 and a control endpoint, partial");
	check(!memcmp(mrl_addr_rail(back, 0), mrl_addr_rail(full, 0), alen) &&
	      !memcmp(mrl_addr_ctrl(back), mrl_addr_ctrl(full), alen),
	      "expanded: the very bytes of rail 0 and the control endpoint");
	return len;
}

static void efa_fits_56_bytes(void)
{
	/* qpn (bytes 16-17) and qkey (20-23) differ, gid and pad do not */
	const int differ[] = { 16, 17, 20, 21, 22, 23 };
	size_t len;

	make_full(EFA_ADDRLEN, differ, 6);
	len = cut_and_expand(EFA_ADDRLEN, 56);
	check(len == 12 + 32 + 4 + 6, "efa: %zu bytes, in aws-ofi-nccl's 56",
	      len);
	check(mrl_addr_delta(full, NULL, 53) == len,
	      "too small a buffer: the size asked, nothing written");
}

static void extremes(void)
{
	int all[16], i;
	uint8_t cut[sizeof(full)];

	make_full(16, NULL, 0);
	check(cut_and_expand(16, 64) == 12 + 16 + 2,
	      "no byte differs: the bitmap alone");
	for (i = 0; i < 16; i++)
		all[i] = i;
	make_full(16, all, 16);
	check(cut_and_expand(16, 64) == 12 + 16 + 2 + 16,
	      "every byte differs");
	make_full(MRL_ADDR_DELTA_MAX + 1, NULL, 0);
	check(mrl_addr_delta(full, cut, sizeof(cut)) == 0,
	      "a %d-byte address: no cut form", MRL_ADDR_DELTA_MAX + 1);
}

static void refused(void)
{
	const int differ[] = { 3 };
	uint8_t cut[sizeof(full)];
	struct mrl_addr_hdr *hdr = (struct mrl_addr_hdr *) cut;
	uint8_t *bitmap;
	size_t len;

	make_full(12, differ, 1);	/* 12 bytes: 4 unused bitmap bits */
	len = mrl_addr_delta(full, cut, sizeof(cut));
	check(!mrl_addr_check(cut, len), "12-byte addresses: checked");
	bitmap = (uint8_t *) (hdr + 1) + 12;
	bitmap[1] |= 0x10;
	check(mrl_addr_check(cut, sizeof(cut)) != 0,
	      "a bit past the address's bytes: refused");
	bitmap[1] &= (uint8_t) ~0x10;
	hdr->flags &= (uint8_t) ~MRL_ADDR_PARTIAL;
	check(mrl_addr_check(cut, sizeof(cut)) != 0,
	      "the cut form not marked partial: refused");
	hdr->flags |= MRL_ADDR_PARTIAL;
	hdr->flags &= (uint8_t) ~MRL_ADDR_CTRL;
	check(mrl_addr_check(cut, sizeof(cut)) != 0,
	      "the cut form without a control endpoint: refused");
}

/*
 * Control tags: two endpoints of one NIC differ only in the port (tcp) or
 * the QP number (efa), and must not share a tag; none is the tag of
 * senders that know a peer by a partial address.
 */
static void ctrl_tags(void)
{
	uint8_t a[16] = { 2, 0, 0x9c, 0x40, 127, 0, 0, 1 }, b[16];
	uint64_t ta, tb;
	int i, same = 0, any = 0;

	memcpy(b, a, sizeof(b));
	ta = mrl_ctrl_tag_for(a, sizeof(a), ~0ULL);
	tb = mrl_ctrl_tag_for(b, sizeof(b), ~0ULL);
	check((ta & MRL_CTRL_TAG) && ta == tb,
	      "a control tag has MRL_CTRL_TAG, and the same bytes give it");
	tb = mrl_ctrl_tag_for(b, sizeof(b), 0xffffull << 8);
	check((tb & ~MRL_CTRL_TAG) && !(tb & ~(MRL_CTRL_TAG | 0xffffull << 8)),
	      "and keeps to the bits the core offers (%#llx)",
	      (unsigned long long) tb);
	for (i = 0; i < 65536; i++) {
		b[2] = (uint8_t) (i >> 8);
		b[3] = (uint8_t) i;
		tb = mrl_ctrl_tag_for(b, sizeof(b), ~0ULL);
		same += tb == ta && (b[2] != a[2] || b[3] != a[3]);
		any += tb == MRL_CTRL_TAG_ANY || !(tb & MRL_CTRL_TAG);
	}
	check(!same && !any, "65536 ports of one address: no other port's "
	      "tag is this one's (%d), none is MRL_CTRL_TAG_ANY (%d)", same,
	      any);
}

/* Of two endpoints exactly one opens their rails; rail 0's bytes decide. */
static void one_end_connects(void)
{
	uint8_t a[64], b[64];
	struct mrl_addr_hdr *ha = (struct mrl_addr_hdr *) a;
	struct mrl_addr_hdr *hb = (struct mrl_addr_hdr *) b;
	int i, both = 0, neither = 0;

	memset(a, 0, sizeof(a));
	*ha = (struct mrl_addr_hdr) {
		.magic = MRL_ADDR_MAGIC, .version = MRL_ADDR_VERSION,
		.nrails = 2, .rail_addrlen = 16,
	};
	memcpy(b, a, sizeof(b));
	for (i = 0; i < 65536; i++) {
		a[12 + 2] = (uint8_t) (i >> 8);	/* rail 0's port */
		b[12 + 3] = (uint8_t) i;
		a[12 + 16] = (uint8_t) i;	/* rail 1's: not asked */
		if (!memcmp(a + 12, b + 12, 16))
			continue;
		both += mrl_addr_connects(a, b) && mrl_addr_connects(b, a);
		neither += !mrl_addr_connects(a, b) && !mrl_addr_connects(b, a);
	}
	check(!both && !neither, "of two endpoints one opens the rails "
	      "(both: %d, neither: %d)", both, neither);
	check(mrl_addr_connects(a, a), "an endpoint writing to itself opens "
	      "its own");
	hb->rail_addrlen = 20;
	memcpy(b + 12, a + 12, 16);
	check(mrl_addr_connects(a, b) && !mrl_addr_connects(b, a),
	      "a shorter address that is a prefix of the other's orders first");
}

/* ---- message packets (mrl_pkt_check) -------------------------------------- */

static uint8_t pkt[sizeof(struct mrl_pkt_hdr) + sizeof(struct mrl_pkt_rts) +
		   MRL_PKT_RTS_IOV_MAX * (sizeof(struct mrl_pkt_iov) +
					  MRL_MAX_RAILS * sizeof(uint64_t)) +
		   MRL_PKT_EAGER_MAX + 64];

static struct mrl_pkt_hdr *pkt_hdr(uint8_t type, uint64_t len)
{
	struct mrl_pkt_hdr *h = (struct mrl_pkt_hdr *) pkt;

	memset(pkt, 0, sizeof(pkt));
	*h = (struct mrl_pkt_hdr) { .version = MRL_PKT_VERSION, .type = type,
				    .seq = 7, .tag = 1, .len = len };
	return h;
}

static void packets_eager_medium(void)
{
	size_t h = sizeof(struct mrl_pkt_hdr), s = sizeof(struct mrl_pkt_seg);
	struct mrl_pkt_seg *seg = (struct mrl_pkt_seg *) (pkt + h);
	struct mrl_pkt_hdr *hdr;

	hdr = pkt_hdr(MRL_PKT_EAGER, 100);
	check(mrl_pkt_check(pkt, h + 100) == MRL_PKT_OK, "eager of 100: ok");
	check(mrl_pkt_check(pkt, h + 99) == MRL_PKT_DROP_LENGTH,
	      "eager cut by a byte: refused");
	check(mrl_pkt_check(pkt, h + 101) == MRL_PKT_DROP_LENGTH,
	      "eager a byte long: refused");
	check(mrl_pkt_check(pkt, h - 1) == MRL_PKT_DROP_SHORT,
	      "shorter than the header: refused");
	hdr->version = MRL_PKT_VERSION + 1;
	check(mrl_pkt_check(pkt, h + 100) == MRL_PKT_DROP_VERSION,
	      "another version: refused");
	hdr->version = MRL_PKT_VERSION;
	hdr->flags = 0x100;
	check(mrl_pkt_check(pkt, h + 100) == MRL_PKT_DROP_FLAGS,
	      "an unknown flag: refused");
	hdr->flags = 0;
	hdr->type = MRL_PKT_TYPE_MAX + 1;
	check(mrl_pkt_check(pkt, h + 100) == MRL_PKT_DROP_TYPE,
	      "an unknown type: refused");
	hdr = pkt_hdr(MRL_PKT_EAGER, MRL_PKT_EAGER_MAX + 1);
	check(mrl_pkt_check(pkt, h + MRL_PKT_EAGER_MAX + 1) ==
	      MRL_PKT_DROP_LENGTH, "eager over the eager size: refused");

	hdr = pkt_hdr(MRL_PKT_MEDIUM, 20000);
	seg->offset = 2 * MRL_PKT_EAGER_MAX;
	check(mrl_pkt_check(pkt, h + s + 20000 - 2 * MRL_PKT_EAGER_MAX) ==
	      MRL_PKT_OK, "the last segment of 20000 bytes: ok");
	check(mrl_pkt_check(pkt, h + s + MRL_PKT_EAGER_MAX) ==
	      MRL_PKT_DROP_SEGMENT, "the last segment past the message: "
	      "refused");
	seg->offset = MRL_PKT_EAGER_MAX;
	check(mrl_pkt_check(pkt, h + s + MRL_PKT_EAGER_MAX) == MRL_PKT_OK,
	      "a middle segment, whole: ok");
	seg->offset = MRL_PKT_EAGER_MAX + 1;
	check(mrl_pkt_check(pkt, h + s + MRL_PKT_EAGER_MAX) ==
	      MRL_PKT_DROP_SEGMENT, "a segment off the segment grid: refused");
	seg->offset = 3 * MRL_PKT_EAGER_MAX;
	check(mrl_pkt_check(pkt, h + s + 100) == MRL_PKT_DROP_SEGMENT,
	      "a segment beyond the message: refused");
	hdr->len = MRL_PKT_MEDIUM_MAX + 1;
	seg->offset = 0;
	check(mrl_pkt_check(pkt, h + s + MRL_PKT_EAGER_MAX) ==
	      MRL_PKT_DROP_LENGTH, "a medium message over the bound: refused");
	hdr->len = 100;
	check(mrl_pkt_check(pkt, h + s + 100) == MRL_PKT_DROP_LENGTH,
	      "a medium message of an eager size: refused");
}

/* An RTS of niov iovs of len bytes each over nkeys rails: its size. */
static size_t make_rts(uint16_t niov, uint16_t nkeys, uint64_t len)
{
	size_t h = sizeof(struct mrl_pkt_hdr);
	struct mrl_pkt_rts *rts = (struct mrl_pkt_rts *) (pkt + h);
	struct mrl_pkt_iov *iov = (struct mrl_pkt_iov *) (rts + 1);
	uint16_t i;

	pkt_hdr(MRL_PKT_RTS, niov * len);
	*rts = (struct mrl_pkt_rts) { .send_id = 9, .niov = niov,
				      .nkeys = nkeys };
	for (i = 0; i < niov; i++)
		iov[i] = (struct mrl_pkt_iov) { .addr = 0x10000 * (i + 1),
						 .len = len };
	return h + sizeof(*rts) + niov * sizeof(*iov) +
	       (size_t) niov * nkeys * sizeof(uint64_t);
}

static void packets_rts_and_replies(void)
{
	size_t h = sizeof(struct mrl_pkt_hdr), n;
	struct mrl_pkt_rts *rts = (struct mrl_pkt_rts *) (pkt + h);
	struct mrl_pkt_iov *iov = (struct mrl_pkt_iov *) (rts + 1);
	struct mrl_pkt_hdr *hdr;

	n = make_rts(2, 4, 1 << 20);
	check(mrl_pkt_check(pkt, n) == MRL_PKT_OK, "RTS of 2 iovs, 4 rails: ok");
	check(mrl_pkt_check(pkt, n - 1) == MRL_PKT_DROP_SHORT,
	      "an RTS a key byte short: refused");
	check(mrl_pkt_check(pkt, n + 8) == MRL_PKT_DROP_LENGTH,
	      "an RTS with a key too many: refused");
	iov[1].len++;
	check(mrl_pkt_check(pkt, n) == MRL_PKT_DROP_IOV,
	      "iovs longer than the message: refused");
	iov[1].len -= 2;
	check(mrl_pkt_check(pkt, n) == MRL_PKT_DROP_IOV,
	      "iovs shorter than the message: refused");
	n = make_rts(1, 1, 4096);
	iov[0].addr = UINT64_MAX - 100;
	check(mrl_pkt_check(pkt, n) == MRL_PKT_DROP_IOV,
	      "an iov wrapping the address space: refused");
	n = make_rts(MRL_PKT_RTS_IOV_MAX, MRL_MAX_RAILS, 1);
	check(mrl_pkt_check(pkt, n) == MRL_PKT_OK,
	      "the largest RTS (%zu bytes): ok", n);
	rts->niov = MRL_PKT_RTS_IOV_MAX + 1;
	check(mrl_pkt_check(pkt, n) == MRL_PKT_DROP_IOV,
	      "too many iovs: refused");
	rts->niov = 1;
	rts->nkeys = MRL_MAX_RAILS + 1;
	check(mrl_pkt_check(pkt, n) == MRL_PKT_DROP_IOV,
	      "too many rails' keys: refused");

	hdr = pkt_hdr(MRL_PKT_ACK, 0);
	hdr->seq = 0;
	hdr->tag = 0;
	n = h + sizeof(struct mrl_pkt_ack);
	check(mrl_pkt_check(pkt, n) == MRL_PKT_OK, "ACK: ok");
	check(mrl_pkt_check(pkt, n - 1) == MRL_PKT_DROP_SHORT,
	      "ACK cut: refused");
	check(mrl_pkt_check(pkt, n + 1) == MRL_PKT_DROP_LENGTH,
	      "ACK with a stray byte: refused");
	hdr->type = MRL_PKT_DONE;
	check(mrl_pkt_check(pkt, h + sizeof(struct mrl_pkt_done)) == MRL_PKT_OK,
	      "DONE: ok");
	hdr->flags = MRL_PKT_F_TAGGED;
	check(mrl_pkt_check(pkt, h + sizeof(struct mrl_pkt_done)) ==
	      MRL_PKT_DROP_FLAGS, "a tagged DONE: refused");
	hdr->flags = 0;
	hdr->len = 5;
	check(mrl_pkt_check(pkt, h + sizeof(struct mrl_pkt_done)) ==
	      MRL_PKT_DROP_FLAGS, "a DONE with a length: refused");
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	efa_fits_56_bytes();
	extremes();
	refused();
	ctrl_tags();
	one_end_connects();
	packets_eager_medium();
	packets_rts_and_replies();
	printf("%s: %d failure(s)\n", check_failures ? "FAIL" : "PASS",
	       check_failures);
	return check_failures ? 1 : 0;
}
