/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Locality glue between the provider and mrl_topo: where the rails are,
 * and which of them to prefer for a buffer, a GPU or this process.
 *
 * One topology per process, loaded at first use (hwloc's I/O discovery is
 * slow) and kept until the provider is unloaded: the struct mrl_loc of
 * every domain points into it.  FI_MULTIRAIL_TOPO_XML loads a file instead
 * of this host.  A rail named "core@topo" (FI_MULTIRAIL_RAILS=lo@rdmap79s0)
 * opens core's domain and is placed where the topology has topo: tests map
 * loopback rails onto a fixture's NICs so.
 *
 * A mask of 0 means "no preference": the caller uses every rail.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrl.h"
#include "mrl_hmem.h"
#include "mrl_topo.h"

static pthread_mutex_t topo_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mrl_topo *topo;
static bool topo_tried;
static bool unknown_said;	/* the "every rail" line, once */

struct mrl_topo *mrl_locality_topo(void)
{
	const char *xml = mrl_params.topo_xml && *mrl_params.topo_xml ?
			  mrl_params.topo_xml : NULL;
	int ret;

	pthread_mutex_lock(&topo_lock);
	if (!topo_tried) {
		topo_tried = true;
		ret = mrl_topo_open(&topo, xml);
		if (ret)
			MRL_WARN(FI_LOG_CORE, "topology of %s unavailable (%s): "
				 "every rail is used for all memory\n",
				 xml ? xml : "this host", fi_strerror(-ret));
		else if (xml)
			MRL_INFO(FI_LOG_CORE, "topology loaded from %s\n", xml);
	}
	pthread_mutex_unlock(&topo_lock);
	return topo;
}

void mrl_locality_fini(void)
{
	pthread_mutex_lock(&topo_lock);
	mrl_topo_close(topo);
	topo = NULL;
	topo_tried = false;
	pthread_mutex_unlock(&topo_lock);
}

/*
 * "core@topo": the core domain to open, and the name the topology knows
 * the rail by.  Without '@' they are the same.
 */
const char *mrl_rail_topo_name(const char *rail)
{
	const char *at = strchr(rail, '@');

	return at ? at + 1 : rail;
}

void mrl_rail_core_name(const char *rail, char *out, size_t len)
{
	size_t n = strcspn(rail, "@");

	if (n >= len)
		n = len - 1;
	memcpy(out, rail, n);
	out[n] = '\0';
}

/* Locations of rails named "core[@topo]"; returns how many are known. */
int mrl_locality_rails(char *const *rails, int n, struct mrl_loc *locs)
{
	struct mrl_topo *t = mrl_locality_topo();
	int i, known = 0;

	for (i = 0; i < n; i++) {
		mrl_topo_loc_unknown(&locs[i]);
		if (t &&
		    !mrl_topo_rail_locality(t, mrl_rail_topo_name(rails[i]),
					    &locs[i]) &&
		    (locs[i].obj || locs[i].numa >= 0))
			known++;
	}
	return known;
}

static uint32_t mrl_choose(const struct mrl_loc *target,
			   const struct mrl_loc *locs, int n, int max,
			   const char *what)
{
	const char *why;
	uint64_t mask = 0;
	int got;

	got = mrl_topo_choose(mrl_locality_topo(), target, locs, n, max, &mask,
			      &why);
	if (got <= 0)
		return 0;
	if (!strcmp(why, mrl_topo_class_name(MRL_TOPO_UNKNOWN))) {
		if (!unknown_said) {
			unknown_said = true;
			MRL_INFO(FI_LOG_MR, "%s: no rail's distance is known "
				 "(no NUMA or PCI placement, as in VMs): every "
				 "rail\n", what);
		}
		return 0;
	}
	MRL_DBG(FI_LOG_MR, "%s: %d of %d rail(s) (%s), mask 0x%lx\n", what,
		got, n, why, (unsigned long) mask);
	return got == n ? 0 : (uint32_t) mask;
}

static uint32_t mrl_gpu_mask(int dev, const struct mrl_loc *locs, int n)
{
	char busid[MRL_TOPO_BUSID_LEN], what[64];
	struct mrl_loc loc;

	if (mrl_hmem_cuda_pci_bus_id(dev, busid, sizeof(busid)) ||
	    mrl_topo_gpu_locality(mrl_locality_topo(), busid, &loc)) {
		MRL_INFO(FI_LOG_MR, "GPU %d: not placed in the topology; every "
			 "rail\n", dev);
		return 0;
	}
	snprintf(what, sizeof(what), "GPU %d (%s)", dev, busid);
	return mrl_choose(&loc, locs, n, mrl_params.rails_per_gpu, what);
}

static uint32_t mrl_numa_mask(int node, const struct mrl_loc *locs, int n)
{
	char what[64];
	struct mrl_loc loc;

	if (mrl_topo_numa_locality(mrl_locality_topo(), node, &loc))
		return 0;
	snprintf(what, sizeof(what), "NUMA node %d", node);
	return mrl_choose(&loc, locs, n, 0, what);
}

/* The rails nearest a registration: its GPU, else its NUMA node. */
uint32_t mrl_locality_mem_mask(const struct mrl_loc *locs, int n, int known,
			       enum fi_hmem_iface iface, int cuda_dev,
			       const void *buf, size_t len)
{
	struct mrl_topo *t = mrl_locality_topo();
	int node;

	if (!t || !known || n < 2)
		return 0;
	if (iface == FI_HMEM_CUDA)
		return mrl_gpu_mask(cuda_dev, locs, n);
	if (iface != FI_HMEM_SYSTEM)
		return 0;
	/* the buffer's pages, else where this thread is bound */
	node = buf ? mrl_topo_buffer_numa(t, buf, len) : -1;
	if (node < 0)
		node = mrl_topo_thread_numa(t);
	if (node < 0) {
		MRL_DBG(FI_LOG_MR, "buffer %p: NUMA node unknown; every rail\n",
			buf);
		return 0;
	}
	return mrl_numa_mask(node, locs, n);
}

/*
 * The rails nearest this process, for getinfo: FI_MULTIRAIL_GPU, else
 * CUDA's current device when the program asked for FI_HMEM (a host-only
 * program must not be pinned to GPU 0's rails, nor pay for CUDA's
 * start-up), else the NUMA node the thread is bound to.
 */
uint32_t mrl_locality_process_mask(const struct mrl_loc *locs, int n,
				   int known, bool gpu_app, char *why,
				   size_t len)
{
	struct mrl_topo *t = mrl_locality_topo();
	int dev, node;

	if (!t || !known)
		return 0;
	if (!mrl_hmem_env_gpu(&dev) ||
	    (gpu_app && mrl_hmem_cuda_available() &&
	     !mrl_hmem_cuda_current_device(&dev))) {
		snprintf(why, len, "GPU %d", dev);
		return mrl_gpu_mask(dev, locs, n);
	}
	node = mrl_topo_thread_numa(t);
	if (node < 0)
		return 0;
	snprintf(why, len, "NUMA node %d", node);
	return mrl_numa_mask(node, locs, n);
}
