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
	if (len < mrl_addr_size(hdr->nrails + !!(hdr->flags & MRL_ADDR_CTRL),
				hdr->rail_addrlen))
		return -1;
	return 0;
}

/* The control endpoint's address, or NULL: the core has FI_TAGGED. */
const void *mrl_addr_ctrl(const void *addr)
{
	const struct mrl_addr_hdr *hdr = addr;

	return hdr->flags & MRL_ADDR_CTRL ? mrl_addr_rail(addr, hdr->nrails) :
					    NULL;
}

const void *mrl_addr_rail(const void *addr, int rail)
{
	const struct mrl_addr_hdr *hdr = addr;

	return (const char *) (hdr + 1) + (size_t) rail * hdr->rail_addrlen;
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
		  (size_t) msg.nkeys * sizeof(uint64_t))
		return MRL_CTRL_DROP_SHORT;
	return MRL_CTRL_OK;
}
