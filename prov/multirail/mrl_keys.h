/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * A peer's part that mrl_keys.c owns: what the initiator knows of the
 * target's registrations.  A part of mrl.h, which includes it; no other
 * file writes these.
 */
#ifndef MRL_KEYS_H
#define MRL_KEYS_H

/* What the initiator knows of one target registration. */
struct mrl_key_entry {
	uint64_t key;
	int state;			/* MRL_KEY_* */
	uint64_t asked_ns;		/* PENDING: when we last sent it */
	uint64_t since_ns;		/* PENDING: due on asked_rail since */
	int asked_rail;			/* PENDING: the rail it is due on */
	bool unsent;			/* PENDING: no buffer took it yet */
	int nrails;
	uint32_t near_mask;		/* target's rails nearest it; 0: any */
	uint32_t nonce;			/* PENDING: the answer must echo it */
	struct mrl_key_entry *next;
	uint64_t keys[];		/* one per rail of the endpoint */
};
enum { MRL_KEY_PENDING = 1, MRL_KEY_VALID, MRL_KEY_INVALID };

/* A peer's keys by a hash of ours (mrl_keys.c): its buckets double as
 * they fill, as a client may write to thousands of a server's keys. */
struct mrl_key_table {
	uint32_t nbuckets;		/* a power of two */
	uint32_t count;
	struct mrl_key_entry *bucket[];
};

#endif /* MRL_KEYS_H */
