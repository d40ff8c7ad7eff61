/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * libFuzzer target for the parsers of what peers send (mrl_proto.c): a
 * composite address (fi_av_insert, control messages), a control message
 * and a message packet.
 * Whatever the parsers accept is read to its last byte from a copy of
 * exactly the input's size, so an accepted length beyond the input is an
 * ASan report; the invariants are also checked by hand.  Run by
 * test/fuzz.sh for a bounded time, from the seeds in test/fuzz/seeds.hex.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mrl_proto.h"

static volatile uint8_t sink;

static void touch(const uint8_t *p, size_t n)
{
	uint8_t x = 0;

	while (n--)
		x ^= *p++;
	sink ^= x;
}

static void check(int ok)
{
	if (!ok)
		abort();
}

/* Every address an accepted composite address names lies within len. */
static void read_addr(const uint8_t *buf, size_t len)
{
	struct mrl_addr_hdr hdr;
	const uint8_t *ctrl;
	int r;

	if (mrl_addr_check(buf, len))
		return;
	memcpy(&hdr, buf, sizeof(hdr));
	check(mrl_addr_len(buf) <= len);
	if (hdr.flags & MRL_ADDR_CTRL_DELTA) {
		static uint8_t full[sizeof(hdr) + 2 * MRL_ADDR_DELTA_MAX];

		check(hdr.rail_addrlen <= MRL_ADDR_DELTA_MAX);
		touch(buf + sizeof(hdr), mrl_addr_len(buf) - sizeof(hdr));
		mrl_addr_expand(buf, full);
		buf = full;
		len = mrl_addr_size(2, hdr.rail_addrlen);
		check(!mrl_addr_check(buf, len));
		memcpy(&hdr, buf, sizeof(hdr));
	}
	for (r = 0; r < hdr.nrails; r++) {
		const uint8_t *a = mrl_addr_rail(buf, r);

		check(a + hdr.rail_addrlen <= buf + len);
		touch(a, hdr.rail_addrlen);
	}
	ctrl = mrl_addr_ctrl(buf);
	check(!ctrl || ctrl + hdr.rail_addrlen <= buf + len);
	if (ctrl)
		touch(ctrl, hdr.rail_addrlen);
}

static void read_ctrl(const uint8_t *buf, size_t len)
{
	struct mrl_ctrl_msg msg;
	const uint8_t *keys;

	if (mrl_ctrl_msg_check(buf, len) != MRL_CTRL_OK)
		return;
	memcpy(&msg, buf, sizeof(msg));
	check(msg.nkeys <= MRL_MAX_RAILS);
	keys = buf + sizeof(msg) + msg.addrlen;
	check(keys + msg.nkeys * sizeof(uint64_t) <= buf + len);
	touch(keys, msg.nkeys * sizeof(uint64_t));
	/* the sender's address, as mrl_av_learn takes it */
	read_addr(buf + sizeof(msg), msg.addrlen);
}

/* What a receiver of an accepted packet reads: the payload, a segment, an
 * RTS's iovs and keys, all within len. */
static void read_pkt(const uint8_t *buf, size_t len)
{
	struct mrl_pkt_hdr hdr;
	struct mrl_pkt_seg seg;
	struct mrl_pkt_rts rts;
	size_t body = sizeof(hdr), n;

	if (mrl_pkt_check(buf, len) != MRL_PKT_OK)
		return;
	memcpy(&hdr, buf, sizeof(hdr));
	switch (hdr.type) {
	case MRL_PKT_EAGER:
		check(hdr.len <= MRL_PKT_EAGER_MAX && body + hdr.len == len);
		touch(buf + body, hdr.len);
		break;
	case MRL_PKT_MEDIUM:
		memcpy(&seg, buf + body, sizeof(seg));
		n = len - body - sizeof(seg);
		check(hdr.len <= MRL_PKT_MEDIUM_MAX && seg.offset < hdr.len &&
		      n <= hdr.len - seg.offset && n <= MRL_PKT_EAGER_MAX);
		touch(buf + body + sizeof(seg), n);
		break;
	case MRL_PKT_RTS:
		memcpy(&rts, buf + body, sizeof(rts));
		n = rts.niov * (sizeof(struct mrl_pkt_iov) +
				(size_t) rts.nkeys * sizeof(uint64_t));
		check(rts.niov <= MRL_PKT_RTS_IOV_MAX &&
		      rts.nkeys <= MRL_MAX_RAILS &&
		      body + sizeof(rts) + n <= len);
		touch(buf + body + sizeof(rts), n);
		break;
	default:
		check(hdr.type == MRL_PKT_DONE || hdr.type == MRL_PKT_ACK);
		touch(buf + body, len - body);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *copy = malloc(size ? size : 1);

	if (!copy)
		return 0;
	memcpy(copy, data, size);
	read_addr(copy, size);
	read_ctrl(copy, size);
	read_pkt(copy, size);
	free(copy);
	return 0;
}
