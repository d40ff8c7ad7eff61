/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Parsers of what arrives from the wire (mrl_proto.h): every length and
 * count is checked against the bytes that arrived before anything is read.
 * No libfabric object: test/fuzz_proto feeds them arbitrary bytes.
 */
#include <stdint.h>
#include <string.h>

#include "mrl_proto.h"

size_t mrl_addr_size(int nrails, size_t rail_addrlen)
{
	return sizeof(struct mrl_addr_hdr) + (size_t) nrails * rail_addrlen;
}

static size_t mrl_bitmap_len(size_t rail_addrlen)
{
	return (rail_addrlen + 7) / 8;
}

/* The bitmap and differing bytes after rail 0's address (delta form). */
static size_t mrl_delta_len(const uint8_t *bitmap, size_t rail_addrlen)
{
	size_t n = mrl_bitmap_len(rail_addrlen), len = n, i;

	for (i = 0; i < n; i++)
		len += (size_t) __builtin_popcount(bitmap[i]);
	return len;
}

static int mrl_delta_check(const struct mrl_addr_hdr *hdr, size_t len)
{
	size_t alen = hdr->rail_addrlen;
	const uint8_t *bitmap = mrl_addr_rail(hdr, 1);

	if ((hdr->flags & (MRL_ADDR_CTRL | MRL_ADDR_PARTIAL)) !=
	    (MRL_ADDR_CTRL | MRL_ADDR_PARTIAL) || alen > MRL_ADDR_DELTA_MAX ||
	    len < mrl_addr_size(1, alen) + mrl_bitmap_len(alen))
		return -1;
	if ((alen % 8) && (bitmap[alen / 8] >> (alen % 8)))
		return -1;
	return len < mrl_addr_size(1, alen) + mrl_delta_len(bitmap, alen) ? -1
									  : 0;
}

int mrl_addr_check(const void *addr, size_t len)
{
	const struct mrl_addr_hdr *hdr = addr;

	if (!addr || len < sizeof(*hdr))
		return -1;
	if (hdr->magic != MRL_ADDR_MAGIC || hdr->version != MRL_ADDR_VERSION ||
	    !hdr->nrails || hdr->nrails > MRL_MAX_RAILS ||
	    !hdr->rail_addrlen ||
	    (hdr->flags & MRL_ADDR_PARTIAL && hdr->nrails != 1))
		return -1;
	if (hdr->flags & MRL_ADDR_CTRL_DELTA)
		return mrl_delta_check(hdr, len);
	return len < mrl_addr_len(addr) ? -1 : 0;
}

size_t mrl_addr_len(const void *addr)
{
	const struct mrl_addr_hdr *hdr = addr;

	if (hdr->flags & MRL_ADDR_CTRL_DELTA)
		return mrl_addr_size(1, hdr->rail_addrlen) +
		       mrl_delta_len(mrl_addr_rail(addr, 1), hdr->rail_addrlen);
	return mrl_addr_size(hdr->nrails + !!(hdr->flags & MRL_ADDR_CTRL),
			     hdr->rail_addrlen);
}

/* The control endpoint's address, or NULL: the core has FI_TAGGED. */
const void *mrl_addr_ctrl(const void *addr)
{
	const struct mrl_addr_hdr *hdr = addr;

	if (hdr->flags & MRL_ADDR_CTRL_DELTA)
		return NULL;
	return hdr->flags & MRL_ADDR_CTRL ? mrl_addr_rail(addr, hdr->nrails) :
					    NULL;
}

void mrl_addr_expand(const void *addr, void *out)
{
	const struct mrl_addr_hdr *hdr = addr;
	size_t alen = hdr->rail_addrlen, i;
	const uint8_t *rail0 = mrl_addr_rail(addr, 0);
	const uint8_t *bitmap = rail0 + alen;
	const uint8_t *diff = bitmap + mrl_bitmap_len(alen);
	struct mrl_addr_hdr *full = out;
	uint8_t *ctrl = (uint8_t *) (full + 1) + alen;

	*full = *hdr;
	full->flags &= (uint8_t) ~MRL_ADDR_CTRL_DELTA;
	memcpy(full + 1, rail0, alen);
	for (i = 0; i < alen; i++)
		ctrl[i] = (bitmap[i / 8] >> (i % 8)) & 1 ? *diff++ : rail0[i];
}

size_t mrl_addr_delta(const void *full, void *out, size_t have)
{
	const struct mrl_addr_hdr *hdr = full;
	size_t alen = hdr->rail_addrlen, size, i;
	const uint8_t *rail0 = mrl_addr_rail(full, 0), *ctrl;
	struct mrl_addr_hdr *o = out;
	uint8_t *bitmap, *diff;

	ctrl = mrl_addr_ctrl(full);
	if (!ctrl || alen > MRL_ADDR_DELTA_MAX)
		return 0;
	size = mrl_addr_size(1, alen) + mrl_bitmap_len(alen);
	for (i = 0; i < alen; i++)
		size += ctrl[i] != rail0[i];
	if (have < size)
		return size;
	*o = *hdr;
	o->nrails = 1;
	o->flags |= MRL_ADDR_PARTIAL | MRL_ADDR_CTRL_DELTA;
	memcpy(o + 1, rail0, alen);
	bitmap = (uint8_t *) (o + 1) + alen;
	memset(bitmap, 0, mrl_bitmap_len(alen));
	diff = bitmap + mrl_bitmap_len(alen);
	for (i = 0; i < alen; i++) {
		if (ctrl[i] == rail0[i])
			continue;
		bitmap[i / 8] |= (uint8_t) (1u << (i % 8));
		*diff++ = ctrl[i];
	}
	return size;
}

const void *mrl_addr_rail(const void *addr, int rail)
{
	const struct mrl_addr_hdr *hdr = addr;

	return (const char *) (hdr + 1) + (size_t) rail * hdr->rail_addrlen;
}

/* Both ends must agree: the same bytes ordered the same way (a tie, an
 * endpoint writing to itself, connects). */
bool mrl_addr_connects(const void *ours, const void *theirs)
{
	const struct mrl_addr_hdr *a = ours, *b = theirs;
	size_t len = a->rail_addrlen < b->rail_addrlen ? a->rail_addrlen :
							b->rail_addrlen;
	int cmp = memcmp(mrl_addr_rail(ours, 0), mrl_addr_rail(theirs, 0), len);

	return cmp ? cmp < 0 : a->rail_addrlen <= b->rail_addrlen;
}

uint64_t mrl_fnv1a(const void *buf, size_t len)
{
	const uint8_t *b = buf;
	uint64_t h = 0xcbf29ce484222325ULL;
	size_t i;

	for (i = 0; i < len; i++)
		h = (h ^ b[i]) * 0x100000001b3ULL;
	return h;
}

uint64_t mrl_ctrl_tag_for(const void *core_addr, size_t len, uint64_t bits)
{
	uint64_t h = mrl_fnv1a(core_addr, len);

	bits &= MRL_CTRL_TAG_HASH;
	h ^= h >> 48;		/* the high bits mixed into those kept */
	h &= bits;
	return MRL_CTRL_TAG | (h ? h : bits & -bits);
}

int mrl_ctrl_msg_check(const void *buf, size_t len)
{
	struct mrl_ctrl_msg msg;

	if (len < sizeof(msg))
		return MRL_CTRL_DROP_FOREIGN;
	memcpy(&msg, buf, sizeof(msg));		/* buf may be unaligned */
	if (msg.magic != MRL_CTRL_MAGIC)
		return MRL_CTRL_DROP_FOREIGN;
	if (msg.version != MRL_CTRL_VERSION)
		return MRL_CTRL_DROP_VERSION;
	if (!msg.type || msg.type > MRL_CTRL_TYPE_MAX)
		return MRL_CTRL_DROP_TYPE;
	if (msg.nkeys > MRL_MAX_RAILS)
		return MRL_CTRL_DROP_NKEYS;
	if (len < sizeof(msg) + msg.addrlen +
			  (size_t) msg.nkeys * sizeof(uint64_t) +
			  (msg.type == MRL_CTRL_WRITE_DATA
				   ? sizeof(struct mrl_ctrl_data)
				   : 0))
		return MRL_CTRL_DROP_SHORT;
	return MRL_CTRL_OK;
}

/* ---- message packets ---------------------------------------------------- */

static int mrl_pkt_check_eager(const struct mrl_pkt_hdr *hdr, size_t len)
{
	if (hdr->len > MRL_PKT_EAGER_MAX || len - sizeof(*hdr) != hdr->len)
		return MRL_PKT_DROP_LENGTH;
	return MRL_PKT_OK;
}

/* A segment starts at a multiple of the segment size and holds the whole
 * of its part, so that each segment is one bit of the receive's map and a
 * segment sent again is seen as the same. */
static int mrl_pkt_check_medium(const struct mrl_pkt_hdr *hdr,
				const uint8_t *pkt, size_t len)
{
	struct mrl_pkt_seg seg;
	size_t payload;
	uint64_t part;

	if (len < sizeof(*hdr) + sizeof(seg))
		return MRL_PKT_DROP_SHORT;
	if (hdr->len <= MRL_PKT_EAGER_MAX || hdr->len > MRL_PKT_MEDIUM_MAX)
		return MRL_PKT_DROP_LENGTH;
	memcpy(&seg, pkt + sizeof(*hdr), sizeof(seg));
	if (seg.offset >= hdr->len || seg.offset % MRL_PKT_EAGER_MAX)
		return MRL_PKT_DROP_SEGMENT;
	payload = len - sizeof(*hdr) - sizeof(seg);
	part = hdr->len - seg.offset;
	if (part > MRL_PKT_EAGER_MAX)
		part = MRL_PKT_EAGER_MAX;
	return payload == part ? MRL_PKT_OK : MRL_PKT_DROP_SEGMENT;
}

/* The iovs must lie in the address space and add up to the message. */
static int mrl_pkt_check_iovs(const struct mrl_pkt_hdr *hdr,
			      const uint8_t *iovs, uint16_t niov)
{
	struct mrl_pkt_iov iov;
	uint64_t left = hdr->len;
	uint16_t i;

	for (i = 0; i < niov; i++) {
		memcpy(&iov, iovs + i * sizeof(iov), sizeof(iov));
		if (iov.len > left || iov.addr + iov.len < iov.addr)
			return MRL_PKT_DROP_IOV;
		left -= iov.len;
	}
	return left ? MRL_PKT_DROP_IOV : MRL_PKT_OK;
}

static int mrl_pkt_check_rts(const struct mrl_pkt_hdr *hdr,
			     const uint8_t *pkt, size_t len)
{
	struct mrl_pkt_rts rts;
	size_t need;

	if (len < sizeof(*hdr) + sizeof(rts))
		return MRL_PKT_DROP_SHORT;
	memcpy(&rts, pkt + sizeof(*hdr), sizeof(rts));
	if (!rts.niov || rts.niov > MRL_PKT_RTS_IOV_MAX || !rts.nkeys ||
	    rts.nkeys > MRL_MAX_RAILS)
		return MRL_PKT_DROP_IOV;
	need = sizeof(*hdr) + sizeof(rts) +
	       (size_t) rts.niov * sizeof(struct mrl_pkt_iov) +
	       (size_t) rts.niov * rts.nkeys * sizeof(uint64_t);
	if (len != need)
		return len < need ? MRL_PKT_DROP_SHORT : MRL_PKT_DROP_LENGTH;
	return mrl_pkt_check_iovs(hdr, pkt + sizeof(*hdr) + sizeof(rts),
				  rts.niov);
}

/* A reply is about no message of its own: no tag, no data, no length. */
static int mrl_pkt_check_reply(const struct mrl_pkt_hdr *hdr, size_t len,
			       size_t body)
{
	if (hdr->flags || hdr->seq || hdr->len)
		return MRL_PKT_DROP_FLAGS;
	if (len < sizeof(*hdr) + body)
		return MRL_PKT_DROP_SHORT;
	return len == sizeof(*hdr) + body ? MRL_PKT_OK : MRL_PKT_DROP_LENGTH;
}

int mrl_pkt_check(const void *buf, size_t len)
{
	struct mrl_pkt_hdr hdr;

	if (len < sizeof(hdr))
		return MRL_PKT_DROP_SHORT;
	memcpy(&hdr, buf, sizeof(hdr));		/* buf may be unaligned */
	if (hdr.version != MRL_PKT_VERSION)
		return MRL_PKT_DROP_VERSION;
	if (hdr.flags & ~MRL_PKT_F_ALL)
		return MRL_PKT_DROP_FLAGS;
	switch (hdr.type) {
	case MRL_PKT_EAGER:
		return mrl_pkt_check_eager(&hdr, len);
	case MRL_PKT_MEDIUM:
		return mrl_pkt_check_medium(&hdr, buf, len);
	case MRL_PKT_RTS:
		return mrl_pkt_check_rts(&hdr, buf, len);
	case MRL_PKT_DONE:
		return mrl_pkt_check_reply(&hdr, len,
					   sizeof(struct mrl_pkt_done));
	case MRL_PKT_ACK:
		return mrl_pkt_check_reply(&hdr, len,
					   sizeof(struct mrl_pkt_ack));
	default:
		return MRL_PKT_DROP_TYPE;
	}
}
