/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Every byte multirail puts on the wire or hands out as a key, in one place:
 *   - the composite address (fi_getname, fi_av_insert, control messages);
 *   - control messages (tagged sends on the core, MRL_CTRL_TAG);
 *   - the 64-bit key of a registration (fi_mr_key);
 *   - the raw key (FI_MR_RAW) and the keys fi_mr_map_raw hands back;
 *   - the tag bits reserved from the application.
 * Fields are in host byte order: both peers of a multirail job run the same
 * build on the same architecture.  A peer speaking another version is
 * refused with a warning, never half understood.
 * This header needs no libfabric object: tests and tools include it alone.
 */
#ifndef MRL_PROTO_H
#define MRL_PROTO_H

#include <stdint.h>

#define MRL_MAX_RAILS		32

/* ---- reserved tag bits --------------------------------------------------- */

/* Tags with this bit are control messages: left out of mem_tag_format. */
#define MRL_CTRL_TAG		(1ULL << 63)
/*
 * A control message's other tag bits name the endpoint it is for: a hash
 * of that endpoint's core address on the rail it goes on
 * (mrl_ctrl_tag_for), and each endpoint's control receives take only its
 * own.  They are posted for any source, and libfabric 2.x's tcp matches
 * such a receive against the unexpected messages of every endpoint of the
 * domain: under one tag for all, an endpoint took its neighbour's
 * messages (test/neighbour_test.c).  The hash keeps to the low 48 bits
 * and to the core's tag width.  A peer known by rail 0's
 * address alone (MRL_ADDR_PARTIAL: those bytes may not be the ones its
 * fi_getname gives) is sent MRL_CTRL_TAG itself, which a few receives on
 * rail 0 take.
 */
#define MRL_CTRL_TAG_ANY	MRL_CTRL_TAG
#define MRL_CTRL_TAG_HASH	((1ULL << 48) - 1)

/* ---- composite address --------------------------------------------------- */

#define MRL_ADDR_MAGIC		0x4d524c41u	/* "MRLA" */
#define MRL_ADDR_VERSION	2	/* 2: MRL_ADDR_CTRL_DELTA */
#define MRL_ADDR_PARTIAL	0x1	/* rail 0 alone (fi_getinfo node, or a
					 * name cut to fit FI_NAME_MAX) */
#define MRL_ADDR_CTRL		0x2	/* after the rails' addresses, one more:
					 * the control endpoint's on rail 0's
					 * domain (cores without FI_TAGGED) */
/*
 * With MRL_ADDR_CTRL and MRL_ADDR_PARTIAL: the control endpoint's address
 * as its difference from rail 0's, a bitmap of rail_addrlen bits (bit i:
 * byte i differs; the last byte's unused bits clear), then the differing
 * bytes in order.  Two endpoints of one NIC differ in a few bytes (efa's
 * 32-byte addresses: the QP number and key), so a name cut to fit a
 * small buffer (aws-ofi-nccl's 56 bytes, efa-direct's two addresses)
 * still fits.  Only fi_getname writes it, only fi_av_insert reads it
 * (expanded first); a control message never carries it.
 */
#define MRL_ADDR_CTRL_DELTA	0x4
#define MRL_ADDR_DELTA_MAX	255	/* the largest rail_addrlen it takes */

struct mrl_addr_hdr {
	uint32_t magic;
	uint8_t version;
	uint8_t nrails;
	uint8_t flags;			/* MRL_ADDR_* */
	uint8_t reserved;
	uint16_t rail_addrlen;		/* every rail's core address: one size */
	uint16_t reserved2;
	/* then nrails * rail_addrlen bytes: rail i's core address, and
	 * with MRL_ADDR_CTRL rail_addrlen more: the control endpoint's */
};
_Static_assert(sizeof(struct mrl_addr_hdr) == 12, "address header: 12 bytes");

/* ---- control messages ----------------------------------------------------- */

#define MRL_CTRL_MAGIC		0x4d524c43u	/* "MRLC" */
#define MRL_CTRL_VERSION	6	/* 6: RAIL_ASK, RAIL_RESET */
/* the receive buffers' size, and so the largest message */
#define MRL_CTRL_BUF_SIZE	4096

enum mrl_ctrl_type {
	MRL_CTRL_HELLO = 1,	/* here is my full address, send me yours */
	MRL_CTRL_HELLO_ACK,	/* here is mine */
	MRL_CTRL_KEY_REQ,	/* give me your rails' keys for key */
	MRL_CTRL_KEY_RESP,	/* status, and the keys with their near rails */
	MRL_CTRL_RAIL_UP,	/* sent on a rail to connect it; no answer.
				 * On rail 0, to a RAIL_ASK: the rails in
				 * key are the asker's to connect */
	MRL_CTRL_WRITE_DATA,	/* a writedata's bytes have landed: raise
				 * its CQ entry (struct mrl_ctrl_data) */
	MRL_CTRL_RAIL_ASK,	/* on rail 0: send me a RAIL_UP on each rail
				 * of the mask in key (mrl_addr_connects) */
	MRL_CTRL_RAIL_RESET,	/* I reset my stalled connection to you on
				 * rail key: reset yours (mrl_reset.c) */
	MRL_CTRL_TYPE_MAX = MRL_CTRL_RAIL_RESET,
};

/*
 * Every message carries the sender's full composite address, so that the
 * receiver can answer a peer it was never told about and complete a
 * partial address it holds.
 */
struct mrl_ctrl_msg {
	uint32_t magic;
	uint8_t version;		/* MRL_CTRL_VERSION */
	uint8_t type;			/* enum mrl_ctrl_type */
	uint16_t addrlen;		/* sender's composite address */
	uint64_t key;			/* KEY_REQ/KEY_RESP: our 64-bit key;
					 * RAIL_ASK: the rails asked for;
					 * RAIL_RESET: the rail */
	int32_t status;			/* KEY_RESP: 0 or -FI_ENOKEY */
	uint16_t nkeys;			/* KEY_RESP: rail keys that follow */
	uint16_t reserved;
	uint32_t near_mask;		/* KEY_RESP: the target's rails nearest
					 * the registration; 0: no preference */
	uint32_t nonce;			/* KEY_REQ: the asker's, at random;
					 * KEY_RESP: the request's, echoed */
	/* then addrlen bytes of address, then nkeys uint64_t rail keys
	 * (KEY_RESP) or one struct mrl_ctrl_data (WRITE_DATA) */
	uint8_t payload[];
};
_Static_assert(sizeof(struct mrl_ctrl_msg) == 32, "control header: 32 bytes");

/*
 * WRITE_DATA: the target's CQ entry for one fi_writedata, sent once every
 * byte of it is visible at the target (see mrl_rma.c).  The CQ data is the
 * user's, whole: no bit of it is ours.
 */
struct mrl_ctrl_data {
	uint64_t len;			/* the bytes the writedata placed */
	uint64_t data;			/* the user's remote CQ data */
};
_Static_assert(sizeof(struct mrl_ctrl_data) == 16, "write data: 16 bytes");
/* a KEY_RESP for 32 rails of 64-byte core addresses fits one buffer */
_Static_assert(sizeof(struct mrl_ctrl_msg) + sizeof(struct mrl_addr_hdr) +
	       MRL_MAX_RAILS * (64 + sizeof(uint64_t)) <= MRL_CTRL_BUF_SIZE,
	       "a full KEY_RESP fits a control buffer");

/* fi_info's ep_attr->protocol_version: the address format's version in the
 * high byte, the control messages' in the low one. */
#define MRL_PROTO_VERSION	((MRL_ADDR_VERSION << 8) | MRL_CTRL_VERSION)

/* ---- parsers (mrl_proto.c: no libfabric object, fuzzed by test/fuzz_proto) */

#include <stdbool.h>
#include <stddef.h>

/* Why a received control message cannot be used. */
enum {
	MRL_CTRL_DROP_FOREIGN,
	MRL_CTRL_DROP_VERSION,
	MRL_CTRL_DROP_TYPE,
	MRL_CTRL_DROP_NKEYS,
	MRL_CTRL_DROP_SHORT,
	MRL_CTRL_DROP_NO_AV,		/* the endpoint's, not the message's */
	MRL_CTRL_DROP_RX_FAILED,	/* the core's receive failed (longer
					 * than the buffer, say) */
	MRL_CTRL_DROP_CLAIM,		/* a known sender claims another's
					 * address (FI_SOURCE) */
	MRL_CTRL_DROP_KINDS,
	MRL_CTRL_OK = MRL_CTRL_DROP_KINDS,
};

size_t mrl_addr_size(int nrails, size_t rail_addrlen);
/* 0 when len bytes at addr hold a whole composite address, else -1 */
int mrl_addr_check(const void *addr, size_t len);
/* The bytes of a checked address, as it lies in an array of them */
size_t mrl_addr_len(const void *addr);
const void *mrl_addr_rail(const void *addr, int rail);
/* The control endpoint's address, or NULL (none, or MRL_ADDR_CTRL_DELTA:
 * expand it first) */
const void *mrl_addr_ctrl(const void *addr);
/* A checked MRL_ADDR_CTRL_DELTA address as rail 0's and the control
 * endpoint's in full, into out (mrl_addr_size(2, rail_addrlen) bytes) */
void mrl_addr_expand(const void *addr, void *out);
/* A full address with a control endpoint, in MRL_ADDR_CTRL_DELTA form:
 * its size, written only if it fits in have; 0 where the form does not
 * apply (no control endpoint, or rail_addrlen > MRL_ADDR_DELTA_MAX) */
size_t mrl_addr_delta(const void *full, void *out, size_t have);
/*
 * Which end of a pair of endpoints opens their connections on rails 1 and
 * up: true for the one whose rail-0 address (of checked full addresses
 * ours and theirs) orders first.  Cores like tcp connect on the first
 * send to a peer, and when both ends send at once each opens a connection
 * and one is dropped; libfabric 2.x's tcp fails the sends queued on the
 * one it drops (FI_ECANCELED), 1.17's rxm refuses it and may leave an op
 * there without a completion.  So the other end asks (RAIL_ASK) instead
 * of sending first, and uses a rail once the peer's RAIL_UP came on it.
 */
bool mrl_addr_connects(const void *ours, const void *theirs);
/* FNV-1a over len bytes: core addresses differ in a port or a QP number,
 * not by design (control tags, the AV's index of peers) */
uint64_t mrl_fnv1a(const void *buf, size_t len);
/* The control tag of the endpoint whose core address is len bytes at
 * core_addr: MRL_CTRL_TAG and a hash within bits (those the core's tags
 * have), MRL_CTRL_TAG_ANY only where bits has none of MRL_CTRL_TAG_HASH */
uint64_t mrl_ctrl_tag_for(const void *core_addr, size_t len, uint64_t bits);
/* MRL_CTRL_OK when len bytes at msg hold a whole control message of ours,
 * its sender's address (not checked here) and keys included */
int mrl_ctrl_msg_check(const void *msg, size_t len);

/* ---- message packets -------------------------------------------------------- */

/*
 * User messages as multirail carries them over any rail (docs/messages.md):
 * tagged sends on the core with the receiving
 * endpoint's control tag and this bit, into packet buffers multirail posts
 * on every rail.  The user's tag, CQ data and length are in the header.
 */
#define MRL_PKT_TAG		(1ULL << 62)
#define MRL_PKT_VERSION		1
/* the largest eager message: a packet buffer less the headers, within
 * efa's 8928-byte MTU */
#define MRL_PKT_EAGER_MAX	8192
/* a message over the eager size goes in segments of MRL_PKT_EAGER_MAX, each
 * whole in one packet; the largest message sent that way (a receiver
 * holds an unexpected one whole) */
#define MRL_PKT_MEDIUM_MAX	(1ULL << 30)
#define MRL_PKT_RTS_IOV_MAX	4

enum mrl_pkt_type {
	MRL_PKT_EAGER = 1,	/* the whole message follows */
	MRL_PKT_MEDIUM,		/* struct mrl_pkt_seg, then one segment */
	MRL_PKT_RTS,		/* struct mrl_pkt_rts: pull the message */
	MRL_PKT_DONE,		/* struct mrl_pkt_done: a rendezvous pulled */
	MRL_PKT_ACK,		/* struct mrl_pkt_ack: cumulative */
	MRL_PKT_TYPE_MAX = MRL_PKT_ACK,
};

#define MRL_PKT_F_TAGGED	0x1	/* for the tagged queue */
#define MRL_PKT_F_DATA		0x2	/* data is the user's remote CQ data */
#define MRL_PKT_F_DC		0x4	/* the sender asked delivery-complete */
#define MRL_PKT_F_ALL		0x7

struct mrl_pkt_hdr {
	uint8_t version;		/* MRL_PKT_VERSION */
	uint8_t type;			/* enum mrl_pkt_type */
	uint16_t flags;			/* MRL_PKT_F_* */
	uint32_t seq;			/* the message's, per peer and direction;
					 * DONE, ACK: 0 */
	uint64_t src;			/* the sender's id: mrl_fnv1a of its
					 * rail-0 address (mrl_pkt_id) */
	uint64_t tag;			/* the user's (MRL_PKT_F_TAGGED) */
	uint64_t data;			/* the user's CQ data (MRL_PKT_F_DATA) */
	uint64_t len;			/* the whole message's bytes */
};
_Static_assert(sizeof(struct mrl_pkt_hdr) == 40, "packet header: 40 bytes");

/* MEDIUM: where this segment lies; a multiple of MRL_PKT_EAGER_MAX */
struct mrl_pkt_seg {
	uint64_t offset;
};
_Static_assert(sizeof(struct mrl_pkt_seg) == 8, "segment header: 8 bytes");

/* RTS: niov struct mrl_pkt_iov follow, then niov * nkeys uint64_t core
 * keys (iov 0's on every rail, then iov 1's, ...) */
struct mrl_pkt_rts {
	uint64_t send_id;		/* echoed by DONE */
	uint16_t niov;			/* 1..MRL_PKT_RTS_IOV_MAX */
	uint16_t nkeys;			/* the sender's rails: 1..MRL_MAX_RAILS */
	uint32_t reserved;
};
_Static_assert(sizeof(struct mrl_pkt_rts) == 16, "RTS header: 16 bytes");

struct mrl_pkt_iov {
	uint64_t addr;			/* as the sender's keys take it */
	uint64_t len;
};
_Static_assert(sizeof(struct mrl_pkt_iov) == 16, "RTS iov: 16 bytes");

struct mrl_pkt_done {
	uint64_t send_id;
	int32_t status;			/* 0, or -FI_E* of the receive */
	uint32_t reserved;
};
_Static_assert(sizeof(struct mrl_pkt_done) == 16, "DONE: 16 bytes");

struct mrl_pkt_ack {
	uint32_t next;			/* every message before it was matched */
	uint32_t window;		/* messages the sender may have beyond */
};
_Static_assert(sizeof(struct mrl_pkt_ack) == 8, "ACK: 8 bytes");

_Static_assert(sizeof(struct mrl_pkt_hdr) + sizeof(struct mrl_pkt_seg) +
	       MRL_PKT_EAGER_MAX <= 8928, "a packet fits efa's MTU");

/* Why a received packet cannot be used. */
enum {
	MRL_PKT_DROP_SHORT,		/* shorter than its headers */
	MRL_PKT_DROP_VERSION,
	MRL_PKT_DROP_TYPE,
	MRL_PKT_DROP_FLAGS,		/* unknown flags, or tagged on a reply */
	MRL_PKT_DROP_LENGTH,		/* payload and header disagree */
	MRL_PKT_DROP_SEGMENT,		/* a segment outside its message */
	MRL_PKT_DROP_IOV,		/* RTS iovs or keys do not add up */
	MRL_PKT_DROP_SENDER,		/* not from the peer it names (the
					 * core's source; mrl_pkt.c) */
	MRL_PKT_DROP_KINDS,
	MRL_PKT_OK = MRL_PKT_DROP_KINDS,
};

/* MRL_PKT_OK when len bytes at pkt hold a whole packet whose every length
 * agrees with the bytes that came (mrl_proto.c) */
int mrl_pkt_check(const void *pkt, size_t len);

/* ---- keys ------------------------------------------------------------------ */

/*
 * Our key names a registration: rail 0's core key.  Where the core's keys
 * are 32 bits and it chooses them (FI_MR_PROV_KEY), a per-domain generation
 * fills bits 32..61, so a key is not reused by a later registration while
 * an initiator still holds the other rails' keys learned for it.  Bit 62
 * marks keys fi_mr_map_raw handed out; bit 63 stays clear.
 */
#define MRL_KEY_GEN_SHIFT	32
#define MRL_KEY_GEN_MASK	0x3fffffffu
#define MRL_KEY_CORE_MASK	0xffffffffu
#define MRL_RAW_KEY_TAG		(1ULL << 62)

static inline uint64_t mrl_key_with_gen(uint32_t gen, uint64_t core_key)
{
	return ((uint64_t) (gen & MRL_KEY_GEN_MASK) << MRL_KEY_GEN_SHIFT) |
	       (core_key & MRL_KEY_CORE_MASK);
}

/* The raw key (FI_MR_RAW): every rail's core key. */
#define MRL_RAW_MAGIC		0x4d524c4bu	/* "MRLK" */

struct mrl_raw_key {
	uint32_t magic;
	uint16_t nrails;
	uint16_t reserved;
	uint64_t keys[];		/* nrails core keys, rail order */
};
_Static_assert(sizeof(struct mrl_raw_key) == 8, "raw key header: 8 bytes");

#endif /* MRL_PROTO_H */
