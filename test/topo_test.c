/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Rail selection on generated hwloc topologies (test/topo/gen-fixtures.sh).
 * The expected rails come from the generator's naming, not from the code
 * under test.  Usage: topo_test [FIXTURE_DIR]; without one, the fixtures
 * are generated into a temporary directory from $srcdir.
 * Exit 0 pass, 1 fail, 77 skip.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/fi_errno.h>

#include "mrl_hmem.h"
#include "mrl_topo.h"
#include "check.h"

#define P5_GPUS		8
#define P5_NICS_PER_GPU	4
#define P5_RAILS	(P5_GPUS * P5_NICS_PER_GPU)

static char fixture_dir[256];

static int make_fixtures(void)
{
	const char *srcdir = getenv("srcdir");
	char cmd[1024];

	snprintf(fixture_dir, sizeof(fixture_dir), "/tmp/mrl-topo-XXXXXX");
	if (!mkdtemp(fixture_dir))
		return -1;
	snprintf(cmd, sizeof(cmd), "sh '%s/test/topo/gen-fixtures.sh' '%s'",
		 srcdir ? srcdir : ".", fixture_dir);
	return system(cmd) ? -1 : 0;
}

static void remove_fixtures(void)
{
	static const char *const names[] = { "p5.xml", "2gpu.xml", "flat.xml" };
	char path[512];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", fixture_dir, names[i]);
		unlink(path);
	}
	rmdir(fixture_dir);
}

static struct mrl_topo *open_fixture(const char *name)
{
	struct mrl_topo *topo;
	char path[512];
	int ret;

	snprintf(path, sizeof(path), "%s/%s", fixture_dir, name);
	ret = mrl_topo_open(&topo, path);
	check(ret == 0, "%s: open -> %d", name, ret);
	return ret ? NULL : topo;
}

/* Fixture contract: GPU g on bus 0x53 + 0x11 g, its NICs on the 4 below. */
static int p5_gpu_bus(int g)
{
	return 0x53 + 0x11 * g;
}

static void p5_gpu_busid(int g, char *buf, size_t len)
{
	snprintf(buf, len, "0000:%02x:00.0", p5_gpu_bus(g));
}

/* Rail 4g+j, named as efa names domains, suffix varied on purpose. */
static void p5_rail_name(int g, int j, char *buf, size_t len)
{
	static const char *const suffix[] = { "", "-rdm", "-dgrm" };
	int i = g * P5_NICS_PER_GPU + j;

	snprintf(buf, len, "rdmap%ds0%s", p5_gpu_bus(g) - 4 + j,
		 suffix[i % 3]);
}

static int load_rails(struct mrl_topo *topo, char names[][32], int n,
		      struct mrl_loc *locs)
{
	int found = 0;

	for (int i = 0; i < n; i++) {
		if (!mrl_topo_rail_locality(topo, names[i], &locs[i]))
			found++;
	}
	return found;
}

static void check_choice(struct mrl_topo *topo, const char *what,
			 const struct mrl_loc *target,
			 const struct mrl_loc *rails, int nrails, int max,
			 uint64_t want_mask, const char *want_why)
{
	uint64_t mask;
	const char *why;
	int n;

	n = mrl_topo_choose(topo, target, rails, nrails, max, &mask, &why);
	check(n == __builtin_popcountll(want_mask) && mask == want_mask &&
	      !strcmp(why, want_why),
	      "%s: %d rails mask 0x%llx (%s), want 0x%llx (%s)", what, n,
	      (unsigned long long) mask, why, (unsigned long long) want_mask,
	      want_why);
}

static void check_dist(const char *what, const struct mrl_loc *a,
		       const struct mrl_loc *b, int want)
{
	int d = mrl_topo_distance(a, b);

	check(d == want, "%s: distance %d (%s), want %d", what, d,
	      mrl_topo_class_name(d), want);
}

static void p5_gpu_list(struct mrl_topo *topo)
{
	char ids[P5_GPUS + 2][MRL_TOPO_BUSID_LEN], want[MRL_TOPO_BUSID_LEN];
	int n = mrl_topo_gpu_list(topo, ids, P5_GPUS + 2), ok = n == P5_GPUS;

	for (int g = 0; ok && g < P5_GPUS; g++) {
		p5_gpu_busid(g, want, sizeof(want));
		ok = !strcmp(ids[g], want);
	}
	check(ok, "p5: gpu_list has the 8 GPUs in bus order (n=%d)", n);
}

static void p5_default_rails(struct mrl_topo *topo)
{
	char **names, want[32];
	int n = mrl_topo_rail_names(topo, &names), ok = n == P5_RAILS;

	for (int i = 0; ok && i < P5_RAILS; i++) {
		p5_rail_name(i / 4, i % 4, want, sizeof(want));
		want[strcspn(want, "-")] = '\0';
		ok = !strcmp(names[i], want);
	}
	check(ok, "p5: default rails are the 32 OpenFabrics devices (n=%d)",
	      n);
	mrl_topo_free_names(names);
}

/* GPU g's bus ids come through the FI_MULTIRAIL_GPU_PCI override. */
static void p5_gpus(struct mrl_topo *topo, const struct mrl_loc *rails,
		    int nrails)
{
	char list[P5_GPUS * MRL_TOPO_BUSID_LEN] = "", id[MRL_TOPO_BUSID_LEN];
	struct mrl_loc gpu;
	char what[64];
	int count = 0, ret;

	for (int g = 0; g < P5_GPUS; g++) {
		p5_gpu_busid(g, id, sizeof(id));
		strcat(list, g ? "," : "");
		strcat(list, id);
	}
	setenv("FI_MULTIRAIL_GPU_PCI", list, 1);
	ret = mrl_hmem_cuda_device_count(&count);
	check(!ret && count == P5_GPUS, "p5: FI_MULTIRAIL_GPU_PCI lists %d GPUs",
	      count);
	for (int g = 0; g < P5_GPUS; g++) {
		mrl_hmem_cuda_pci_bus_id(g, id, sizeof(id));
		ret = mrl_topo_gpu_locality(topo, id, &gpu);
		check(!ret && gpu.numa == g / 4, "p5: GPU%d %s on node %d", g,
		      id, gpu.numa);
		snprintf(what, sizeof(what), "p5: GPU%d rails", g);
		check_choice(topo, what, &gpu, rails, nrails, 0,
			     0xfULL << (4 * g), "same PCIe switch");
		snprintf(what, sizeof(what), "p5: GPU%d rails, at most 2", g);
		check_choice(topo, what, &gpu, rails, nrails, 2,
			     0x3ULL << (4 * g), "same PCIe switch");
	}
	unsetenv("FI_MULTIRAIL_GPU_PCI");
}

static void p5_numa(struct mrl_topo *topo, const struct mrl_loc *rails,
		    int nrails)
{
	struct mrl_loc node;
	char what[64];

	check(mrl_topo_numa_count(topo) == 2, "p5: 2 NUMA nodes");
	for (int n = 0; n < 2; n++) {
		check(!mrl_topo_numa_locality(topo, n, &node),
		      "p5: node %d found", n);
		snprintf(what, sizeof(what), "p5: node %d rails", n);
		check_choice(topo, what, &node, rails, nrails, 0,
			     0xffffULL << (16 * n), "same NUMA node");
	}
	check(mrl_topo_numa_locality(topo, 2, &node) == -FI_ENOENT &&
	      node.numa == -1, "p5: node 2 -> -FI_ENOENT");
}

static void p5_pairs(struct mrl_topo *topo, const struct mrl_loc *rails)
{
	struct mrl_loc gpu0, gpu1, node0, node1, eth0, none;
	char busid[MRL_TOPO_BUSID_LEN];
	int ret;

	mrl_topo_gpu_locality(topo, "00000000:53:00.0", &gpu0);
	mrl_topo_gpu_locality(topo, "0000:64:00.0", &gpu1);
	mrl_topo_numa_locality(topo, 0, &node0);
	mrl_topo_numa_locality(topo, 1, &node1);
	check(gpu0.obj != NULL, "p5: NVML-style bus id 00000000:53:00.0");
	check_dist("p5: GPU0-rdmap79s0", &gpu0, &rails[0], MRL_TOPO_SWITCH);
	check_dist("p5: GPU0-rdmap96s0", &gpu0, &rails[4], MRL_TOPO_NUMA);
	check_dist("p5: GPU0-rdmap147s0", &gpu0, &rails[16], MRL_TOPO_REMOTE);
	check_dist("p5: GPU0-GPU1", &gpu0, &gpu1, MRL_TOPO_NUMA);
	check_dist("p5: node0-rdmap79s0", &node0, &rails[0], MRL_TOPO_NUMA);
	check_dist("p5: node1-rdmap79s0", &node1, &rails[0],
		   MRL_TOPO_REMOTE);
	check_dist("p5: GPU0-lo", &gpu0, &rails[P5_RAILS], MRL_TOPO_UNKNOWN);
	ret = mrl_topo_rail_locality(topo, "eth0", &eth0);
	check(!ret && eth0.numa == 0, "p5: ENA eth0 on node 0");
	check_dist("p5: rdmap147s0-eth0", &rails[16], &eth0,
		   MRL_TOPO_REMOTE);
	mrl_topo_loc_busid(&rails[0], busid, sizeof(busid));
	check(!strcmp(busid, "0000:4f:00.0"), "p5: rdmap79s0 at %s", busid);
	check(mrl_topo_gpu_locality(topo, "0000:01:00.0", &none) ==
	      -FI_ENOENT, "p5: unknown GPU -> -FI_ENOENT");
	check(mrl_topo_gpu_locality(topo, "junk", &none) == -FI_EINVAL,
	      "p5: bad bus id -> -FI_EINVAL");
	check_choice(topo, "p5: unknown GPU", &none, rails, P5_RAILS + 1, 4,
		     (1ULL << (P5_RAILS + 1)) - 1, "no locality information");
}

static void test_p5(void)
{
	char names[P5_RAILS + 1][32];
	struct mrl_loc rails[P5_RAILS + 1];
	struct mrl_topo *topo = open_fixture("p5.xml");
	int found;

	if (!topo)
		return;
	for (int i = 0; i < P5_RAILS; i++)
		p5_rail_name(i / 4, i % 4, names[i], sizeof(names[i]));
	strcpy(names[P5_RAILS], "lo");
	found = load_rails(topo, names, P5_RAILS + 1, rails);
	check(found == P5_RAILS, "p5: %d of 33 rails found (lo is not)",
	      found);
	p5_gpu_list(topo);
	p5_default_rails(topo);
	p5_gpus(topo, rails, P5_RAILS + 1);
	p5_numa(topo, rails, P5_RAILS + 1);
	p5_pairs(topo, rails);
	check(mrl_topo_thread_numa(topo) == -1,
	      "p5: thread_numa on an XML topology is unknown");
	mrl_topo_close(topo);
}

static void test_2gpu(void)
{
	char names[2][32] = { "eth1", "eth2" };
	struct mrl_loc rails[2], gpu0, gpu1, node0, node1;
	struct mrl_topo *topo = open_fixture("2gpu.xml");
	char ids[4][MRL_TOPO_BUSID_LEN];

	if (!topo)
		return;
	check(load_rails(topo, names, 2, rails) == 2 &&
	      rails[0].numa == 0 && rails[1].numa == 0,
	      "2gpu: eth1 eth2 on node 0");
	check(mrl_topo_gpu_list(topo, ids, 4) == 2 &&
	      !strcmp(ids[0], "0000:17:00.0") &&
	      !strcmp(ids[1], "0000:b1:00.0"), "2gpu: gpu_list");
	mrl_topo_gpu_locality(topo, "0000:17:00.0", &gpu0);
	mrl_topo_gpu_locality(topo, "0000:B1:00.0", &gpu1);
	mrl_topo_numa_locality(topo, 0, &node0);
	mrl_topo_numa_locality(topo, 1, &node1);
	check(gpu0.numa == 0 && gpu1.numa == 1, "2gpu: GPUs on nodes 0, 1");
	check_dist("2gpu: GPU0-eth1", &gpu0, &rails[0], MRL_TOPO_HOSTBRIDGE);
	check_dist("2gpu: GPU1-eth2", &gpu1, &rails[1], MRL_TOPO_REMOTE);
	check_choice(topo, "2gpu: GPU0", &gpu0, rails, 2, 0, 0x3,
		     "same host bridge");
	check_choice(topo, "2gpu: GPU1 falls back", &gpu1, rails, 2, 0, 0x3,
		     "other NUMA node");
	check_choice(topo, "2gpu: GPU1 at most 1", &gpu1, rails, 2, 1, 0x1,
		     "other NUMA node");
	check_choice(topo, "2gpu: node 0", &node0, rails, 2, 0, 0x3,
		     "same NUMA node");
	check_choice(topo, "2gpu: node 1", &node1, rails, 2, 0, 0x3,
		     "other NUMA node");
	mrl_topo_close(topo);
}

static void test_flat(void)
{
	char names[4][32] = { "eth1", "eth2", "eth3", "eth4" }, **dflt;
	char ids[2][MRL_TOPO_BUSID_LEN], what[64];
	struct mrl_loc rails[4], loc;
	struct mrl_topo *topo = open_fixture("flat.xml");
	int n;

	if (!topo)
		return;
	check(load_rails(topo, names, 4, rails) == 4 &&
	      rails[0].numa == -1, "flat: 4 NICs found, no NUMA node");
	n = mrl_topo_rail_names(topo, &dflt);
	check(n == 4 && !strcmp(dflt[0], "eth1") && !strcmp(dflt[3], "eth4"),
	      "flat: default rails eth1..eth4 (n=%d)", n);
	mrl_topo_free_names(dflt);
	check(mrl_topo_gpu_list(topo, ids, 2) == 2, "flat: 2 GPUs");
	for (int g = 0; g < 2; g++) {
		mrl_topo_gpu_locality(topo, ids[g], &loc);
		snprintf(what, sizeof(what), "flat: GPU%d", g);
		check_choice(topo, what, &loc, rails, 4, 2, 0xf,
			     "no locality information");
		check_dist("flat: GPU-eth1", &loc, &rails[0],
			   MRL_TOPO_UNKNOWN);
	}
	for (int node = 0; node < 2; node++) {
		mrl_topo_numa_locality(topo, node, &loc);
		snprintf(what, sizeof(what), "flat: node %d", node);
		check_choice(topo, what, &loc, rails, 4, 0, 0xf,
			     "no locality information");
	}
	mrl_topo_close(topo);
}

/* This host: only that the calls work and give sane answers. */
static void test_live(void)
{
	struct mrl_topo *topo;
	size_t len = 1 << 20;
	char *buf;
	int ret, node, nnodes;

	ret = mrl_topo_open(&topo, NULL);
	check(ret == 0, "live: open -> %d", ret);
	if (ret)
		return;
	nnodes = mrl_topo_numa_count(topo);
	buf = malloc(len);
	memset(buf, 1, len);
	node = mrl_topo_buffer_numa(topo, buf, len);
	check(node >= -1 && node < 1024, "live: buffer on node %d (of %d)",
	      node, nnodes);
	node = mrl_topo_thread_numa(topo);
	check(node >= -1 && (nnodes != 1 || node == 0),
	      "live: thread on node %d", node);
	free(buf);
	mrl_topo_close(topo);
	check(mrl_topo_open(&topo, "/nonexistent.xml") < 0 && !topo,
	      "missing XML -> error");
}

static void test_hmem(void)
{
	char id[MRL_TOPO_BUSID_LEN];
	int dev = -1, count, ret;

	setenv("FI_MULTIRAIL_GPU_PCI", "0000:53:00.0,0000:64:00.0", 1);
	ret = mrl_hmem_cuda_device_count(&count);
	check(!ret && count == 2, "hmem: override count %d", count);
	ret = mrl_hmem_cuda_pci_bus_id(1, id, sizeof(id));
	check(!ret && !strcmp(id, "0000:64:00.0"),
	      "hmem: override device 1 %s", id);
	check(mrl_hmem_cuda_pci_bus_id(2, id, sizeof(id)) == -FI_ENODEV,
	      "hmem: override device 2 -> -FI_ENODEV");
	unsetenv("FI_MULTIRAIL_GPU_PCI");

	setenv("FI_MULTIRAIL_GPU", "3", 1);
	ret = mrl_hmem_env_gpu(&dev);
	check(!ret && dev == 3, "hmem: FI_MULTIRAIL_GPU=3");
	setenv("FI_MULTIRAIL_GPU", "x", 1);
	check(mrl_hmem_env_gpu(&dev) == -FI_EINVAL, "hmem: FI_MULTIRAIL_GPU=x");
	unsetenv("FI_MULTIRAIL_GPU");

	if (!mrl_hmem_cuda_available()) {
		check(mrl_hmem_cuda_ptr_device(&dev, &dev) == -FI_ENOSYS &&
		      mrl_hmem_cuda_device_count(&count) == -FI_ENOSYS,
		      "hmem: no CUDA device: calls say -FI_ENOSYS");
		return;
	}
	ret = mrl_hmem_cuda_pci_bus_id(0, id, sizeof(id));
	check(!ret, "hmem: CUDA device 0 at %s (%d)", id, ret);
	check(mrl_hmem_cuda_ptr_device(&dev, &dev) == -FI_ENODEV,
	      "hmem: stack memory is not a GPU's");
}

int main(int argc, char **argv)
{
	int made = 0;

	if (argc > 1) {
		snprintf(fixture_dir, sizeof(fixture_dir), "%s", argv[1]);
	} else if (make_fixtures()) {
		printf("FAIL: cannot generate fixtures (srcdir=%s)\n",
		       getenv("srcdir") ? getenv("srcdir") : ".");
		return 1;
	} else {
		made = 1;
	}
	test_p5();
	test_2gpu();
	test_flat();
	test_live();
	test_hmem();
	if (made)
		remove_fixtures();
	printf("%s: %d failure(s)\n", check_failures ? "FAIL" : "PASS",
	       check_failures);
	return check_failures ? 1 : 0;
}
