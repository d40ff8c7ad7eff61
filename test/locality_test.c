/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The provider's locality glue (prov/multirail/mrl_locality.c) on the p5
 * fixture, for what test/locality.sh cannot reach without a CUDA-capable
 * core: which rails an FI_HMEM_CUDA registration on GPU g gets.  GPUs
 * come from FI_MULTIRAIL_GPU_PCI, so no CUDA is needed.
 *
 * Fixture contract (test/topo/gen-fixtures.sh): GPU g on bus 0x53 + 0x11 g,
 * its NICs rdmap<bus>s0 on the 4 buses below; GPUs 0-3 on node 0.
 * Exit 0 pass, 1 fail.
 */
#define _GNU_SOURCE	/* sched_getaffinity */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mrl.h"
#include "check.h"

struct fi_provider mrl_prov = { .name = "multirail" };
struct mrl_params mrl_params;

/* Rails 0-3: GPU0's NICs (node 0); rails 4-7: GPU4's (node 1). */
static char *rails[9];

static void name_rails(void)
{
	static char buf[8][32];
	int r, bus;

	for (r = 0; r < 8; r++) {
		bus = (r < 4 ? 0x53 - 4 : 0x97 - 4) + r % 4;
		snprintf(buf[r], sizeof(buf[r]), "lo@rdmap%ds0", bus);
		rails[r] = buf[r];
	}
}

static void set_gpus(void)
{
	char list[256] = "";
	size_t len = 0;
	int g;

	for (g = 0; g < 8; g++)
		len += snprintf(list + len, sizeof(list) - len, "%s0000:%02x:00.0",
				g ? "," : "", 0x53 + 0x11 * g);
	setenv("FI_MULTIRAIL_GPU_PCI", list, 1);
}

static int bound(void)
{
	cpu_set_t set;

	return !sched_getaffinity(0, sizeof(set), &set) &&
	       CPU_COUNT(&set) < sysconf(_SC_NPROCESSORS_ONLN);
}

static uint32_t cuda_mask(const struct mrl_loc *locs, int known, int dev)
{
	return mrl_locality_mem_mask(locs, 8, known, FI_HMEM_CUDA, dev, NULL,
				     0);
}

int main(void)
{
	const char *srcdir = getenv("srcdir");
	char dir[] = "/tmp/mrl-loct-XXXXXX", cmd[512], path[300], why[64];
	struct mrl_loc locs[8];
	uint32_t mask;
	char *buf;
	int known;

	if (!mkdtemp(dir))
		return 1;
	snprintf(cmd, sizeof(cmd), "sh '%s/test/topo/gen-fixtures.sh' '%s'",
		 srcdir ? srcdir : ".", dir);
	if (system(cmd)) {
		printf("FAIL: cannot generate fixtures\n");
		return 1;
	}
	snprintf(path, sizeof(path), "%s/p5.xml", dir);
	mrl_params.topo_xml = path;
	name_rails();
	set_gpus();

	known = mrl_locality_rails(rails, 8, locs);
	check(known == 8, "8 rails placed (%d)", known);
	check(!strcmp(mrl_rail_topo_name(rails[5]), "rdmap148s0"),
	      "core@NIC: topology name %s", mrl_rail_topo_name(rails[5]));

	mask = cuda_mask(locs, known, 4);
	check(mask == 0xf0, "CUDA memory on GPU4: rails 0x%x, want 0xf0", mask);
	mask = cuda_mask(locs, known, 0);
	check(mask == 0x0f, "CUDA memory on GPU0: rails 0x%x, want 0x0f", mask);
	/* GPU1's own NICs are not rails: its node's (GPU0's) are nearest */
	mask = cuda_mask(locs, known, 1);
	check(mask == 0x0f, "CUDA memory on GPU1: rails 0x%x, want 0x0f", mask);
	mrl_params.rails_per_gpu = 2;
	mask = cuda_mask(locs, known, 4);
	check(mask == 0x30, "GPU4, 2 rails per GPU: 0x%x, want 0x30", mask);
	mrl_params.rails_per_gpu = 0;
	mask = cuda_mask(locs, known, 9);
	check(mask == 0, "GPU 9 (not listed): 0x%x, want 0 (every rail)",
	      mask);
	mask = cuda_mask(locs, 0, 4);
	check(mask == 0, "rails not placed: 0x%x, want 0", mask);

	buf = malloc(1 << 20);
	memset(buf, 1, 1 << 20);
	mask = mrl_locality_mem_mask(locs, 8, known, FI_HMEM_SYSTEM, -1, buf,
				     1 << 20);
	check(mask == 0x0f || mask == 0,
	      "host memory on this host's node 0: 0x%x (0x0f, or 0 where the "
	      "kernel cannot tell)", mask);
	free(buf);

	setenv("FI_MULTIRAIL_GPU", "4", 1);
	mask = mrl_locality_process_mask(locs, 8, known, false, why,
					 sizeof(why));
	check(mask == 0xf0 && !strcmp(why, "GPU 4"),
	      "FI_MULTIRAIL_GPU=4: first entry 0x%x (%s)", mask, why);
	unsetenv("FI_MULTIRAIL_GPU");
	mask = mrl_locality_process_mask(locs, 8, known, false, why,
					 sizeof(why));
	/* a container's cpuset reads as a binding: node 0 then */
	check(mask == 0 || (bound() && mask == 0x0f),
	      "nothing known of the process: 0x%x", mask);

	mrl_locality_fini();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		printf("cannot remove %s\n", dir);
	printf("%s: %d failure(s)\n", check_failures ? "FAIL" : "PASS",
	       check_failures);
	return check_failures ? 1 : 0;
}
