/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The scheduling policy (prov/multirail/mrl_sched.c), table by table: an
 * op and the rails' state in, the expected choice out.  No libfabric.
 */
#include <stdio.h>

#include "check.h"
#include "mrl_sched.h"

#define KiB	1024ul
#define MiB	(1024ul * 1024)

/* Locality: rails nearest both buffers, else ours, else theirs, in reach. */
static void test_near(void)
{
	static const struct {
		uint32_t local, remote, reach, want;
		const char *why;
	} t[] = {
		{ 0x0f, 0x0c, 0xff, 0x0c, "nearest both" },
		{ 0x03, 0x0c, 0xff, 0x03, "nothing in common: ours" },
		{ 0x00, 0x0c, 0xff, 0x0c, "ours unknown: theirs" },
		{ 0x00, 0x00, 0x0f, 0x0f, "no locality: every rail in reach" },
		{ 0xf0, 0x00, 0x0f, 0x0f, "ours out of reach: every rail" },
		{ 0x30, 0xf0, 0x1f, 0x10, "nearest both, within reach" },
		{ 0x03, 0x0c, 0x01, 0x01, "one rail reaches the peer" },
	};
	size_t i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		uint32_t got = mrl_sched_near(t[i].local, t[i].remote,
					      t[i].reach);

		check(got == t[i].want, "near: %s: 0x%x (want 0x%x)", t[i].why,
		      got, t[i].want);
	}
}

/* Whole or striped, which rails, what chunk. */
static void test_rails(void)
{
	static const struct {
		enum mrl_policy policy;
		uint32_t use, busy;
		size_t len, max_chunk;
		uint32_t want_rails;
		size_t want_chunk;
		const char *why;
	} t[] = {
		/* one rail: never cut, whatever the size */
		{ MRL_POLICY_AUTO, 0x1, 0, 16 * MiB, ~0ul, 0x1, 16 * MiB,
		  "one rail: the op whole" },
		{ MRL_POLICY_SPLIT, 0x4, 0, 16 * MiB, ~0ul, 0x4, 16 * MiB,
		  "one rail, SPLIT: still whole" },
		{ MRL_POLICY_AUTO, 0x1, 0, 16 * MiB, 1 * MiB, 0x1, 1 * MiB,
		  "one rail: capped by the core's max_msg_size" },
		{ MRL_POLICY_AUTO, 0x1, 0, 0, ~0ul, 0x1, 1,
		  "zero bytes: one chunk" },
		/* AUTO, small ops whole to the least busy rail */
		{ MRL_POLICY_AUTO, 0xf, 0, 8, ~0ul, 0xf, 8,
		  "8 B on 4 rails: whole" },
		{ MRL_POLICY_AUTO, 0xf, 0, 64 * KiB - 1, ~0ul, 0xf, 64 * KiB - 1,
		  "just under stripe_min: whole" },
		{ MRL_POLICY_AUTO, 0xf, 0, 64 * KiB, ~0ul, 0xf, 16 * KiB,
		  "stripe_min on 4 idle rails: a quarter each" },
		{ MRL_POLICY_AUTO, 0xf, 0xf, 512 * KiB, ~0ul, 0xf, 512 * KiB,
		  "mid-size, every rail busy: whole" },
		{ MRL_POLICY_AUTO, 0xf, 0x7, 512 * KiB, ~0ul, 0xf, 512 * KiB,
		  "mid-size, one rail idle: whole (the engine picks it)" },
		{ MRL_POLICY_AUTO, 0xf, 0x5, 512 * KiB, ~0ul, 0xa, 256 * KiB,
		  "mid-size, two rails idle: split over those two" },
		{ MRL_POLICY_AUTO, 0xff, 0x1, 64 * KiB, ~0ul, 0xfe, 12 * KiB,
		  "stripe_min, 7 of 8 idle: over the 7, 4 KiB multiples" },
		{ MRL_POLICY_AUTO, 0xf, 0xf, 1 * MiB, ~0ul, 0xf, 256 * KiB,
		  "a chunk per rail or more: split though busy" },
		{ MRL_POLICY_AUTO, 0xf, 0, 64 * MiB, ~0ul, 0xf, 256 * KiB,
		  "large: chunks of chunk_size" },
		{ MRL_POLICY_AUTO, 0x3, 0, 100 * KiB + 1, ~0ul, 0x3, 52 * KiB,
		  "chunks rounded up to 4 KiB" },
		{ MRL_POLICY_AUTO, 0xf, 0, 64 * MiB, 64 * KiB, 0xf, 64 * KiB,
		  "chunks capped by the core's max_msg_size" },
		/* SPLIT: every op over every rail */
		{ MRL_POLICY_SPLIT, 0xf, 0, 8 * KiB, ~0ul, 0xf, 4 * KiB,
		  "SPLIT: even small ops" },
		{ MRL_POLICY_SPLIT, 0xf, 0xf, 512 * KiB, ~0ul, 0xf, 128 * KiB,
		  "SPLIT: busy or not" },
	};
	size_t i, chunk;
	uint32_t rr = 0, got;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct mrl_sched_params p = {
			.policy = t[i].policy, .stripe_min = 64 * KiB,
			.chunk_size = 256 * KiB, .max_chunk = t[i].max_chunk,
		};

		chunk = 0;
		got = mrl_sched_rails(&p, t[i].use, t[i].len, t[i].busy, &rr,
				      &chunk);
		check(got == t[i].want_rails && chunk == t[i].want_chunk,
		      "rails: %s: 0x%x, chunk %zu (want 0x%x, %zu)", t[i].why,
		      got, chunk, t[i].want_rails, t[i].want_chunk);
	}
}

/* ROUNDROBIN: whole ops, one rail each, in turn over the mask's rails. */
static void test_roundrobin(void)
{
	struct mrl_sched_params p = {
		.policy = MRL_POLICY_ROUNDROBIN, .stripe_min = 64 * KiB,
		.chunk_size = 256 * KiB, .max_chunk = ~0ul,
	};
	static const uint32_t want[] = { 0x2, 0x8, 0x20, 0x2, 0x8 };
	uint32_t rr = 0, got;
	size_t i, chunk;

	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		got = mrl_sched_rails(&p, 0x2a, 4 * MiB, 0, &rr, &chunk);
		check(got == want[i] && chunk == 4 * MiB,
		      "roundrobin turn %zu: 0x%x, chunk %zu (want 0x%x, whole)",
		      i, got, chunk, want[i]);
	}
}

/* Delivery-complete and fences, chunk by chunk. */
static void test_chunk_needs(void)
{
	static const struct {
		struct mrl_sched_chunk c;
		unsigned int want;
		const char *why;
	} t[] = {
		{ { .write = false, .rail = 2, .delivery_asked = true }, 0,
		  "a read: nothing" },
		{ { .write = true, .rail = 0 }, 0,
		  "a write on rail 0: messages follow it there" },
		{ { .write = true, .rail = 1 }, MRL_SCHED_FENCE,
		  "a write off rail 0: fenced before the next send" },
		{ { .write = true, .rail = 1, .fence_elsewhere = true },
		  MRL_SCHED_DELIVERY,
		  "off rail 0, fence tracked elsewhere: delivery-complete" },
		{ { .write = true, .rail = 0, .delivery_asked = true },
		  MRL_SCHED_DELIVERY, "asked by the user" },
		{ { .write = true, .rail = 0, .writedata = true },
		  MRL_SCHED_DELIVERY,
		  "writedata on rail 0: delivered before its message" },
		{ { .write = true, .rail = 3, .writedata = true },
		  MRL_SCHED_DELIVERY, "writedata off rail 0: the same" },
	};
	size_t i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		unsigned int got = mrl_sched_chunk(&t[i].c);

		check(got == t[i].want, "chunk: %s: 0x%x (want 0x%x)",
		      t[i].why, got, t[i].want);
	}
}

/*
 * Device memory over shm (one GPU copy per piece, one copy engine): never
 * cut by default, SPLIT included; over a NIC as host memory; the user's
 * knobs win, a chunk under 4 KiB is ignored.
 */
static void test_device(void)
{
	const struct mrl_sched_params host = {
		.policy = MRL_POLICY_AUTO, .stripe_min = 64 * KiB,
		.chunk_size = 256 * KiB, .max_chunk = ~0ul,
	};
	struct mrl_sched_params dev, split = host;
	uint32_t rr = 0, rails;
	size_t chunk;

	mrl_sched_device(&host, true, &dev);
	rails = mrl_sched_rails(&dev, 0xf, 16 * MiB, 0, &rr, &chunk);
	check(rails == 0xf && chunk == 16 * MiB,
	      "device over shm: 16 MiB whole to the least busy of 0xf "
	      "(0x%x, chunk %zu)", rails, chunk);
	split.policy = MRL_POLICY_SPLIT;
	mrl_sched_device(&split, true, &dev);
	rails = mrl_sched_rails(&dev, 0xf, 16 * MiB, 0, &rr, &chunk);
	check(chunk == 16 * MiB, "device over shm, SPLIT: still whole "
	      "(chunk %zu)", chunk);
	check(dev.unmetered, "device over shm: no byte budget per rail");
	mrl_sched_device(&host, false, &dev);
	rails = mrl_sched_rails(&dev, 0xf, 16 * MiB, 0, &rr, &chunk);
	check(chunk == 256 * KiB, "device over a NIC: the host's 256 KiB "
	      "chunks (chunk %zu)", chunk);
	check(!dev.unmetered && !host.unmetered, "a NIC's byte budget holds "
	      "for device memory, and for host memory everywhere");
	(void) rails;
}

int main(void)
{
	test_near();
	test_rails();
	test_roundrobin();
	test_chunk_needs();
	test_device();
	printf("%s: %d failure(s)\n", check_failures ? "FAIL" : "PASS",
	       check_failures);
	return check_failures ? 1 : 0;
}
