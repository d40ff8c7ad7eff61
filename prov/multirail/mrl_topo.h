/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Rail locality: where each rail (NIC) sits relative to a GPU or a NUMA
 * node, from hwloc, and which rails to use for a buffer there.
 *
 * No libfabric objects here: functions return 0 or a negative FI_E* code
 * and the caller logs.  Locations are only comparable within one
 * struct mrl_topo.
 */
#ifndef MRL_TOPO_H
#define MRL_TOPO_H

#include <stddef.h>
#include <stdint.h>

/* Distance classes, closest first. */
enum {
	MRL_TOPO_UNKNOWN = -1,
	MRL_TOPO_SWITCH = 0,	/* behind the same PCIe switch (bridge) */
	MRL_TOPO_HOSTBRIDGE = 1,
	MRL_TOPO_NUMA = 2,	/* same NUMA node, different host bridges */
	MRL_TOPO_REMOTE = 3,	/* other NUMA node */
};

#define MRL_TOPO_BUSID_LEN	16	/* "0000:53:00.0" and a NUL */
#define MRL_TOPO_MAX_RAILS	64	/* bits in a chosen mask */

struct mrl_topo;

struct mrl_loc {
	void *obj;	/* hwloc_obj_t: PCI device, else OS device; NULL unknown */
	int numa;	/* OS index of the NUMA node, -1 unknown */
};

int mrl_topo_open(struct mrl_topo **out, const char *xml_path);
void mrl_topo_close(struct mrl_topo *topo);

void mrl_topo_loc_unknown(struct mrl_loc *loc);
int mrl_topo_rail_locality(struct mrl_topo *topo, const char *domain_name,
			   struct mrl_loc *loc);
int mrl_topo_gpu_locality(struct mrl_topo *topo, const char *pci_bus_id,
			  struct mrl_loc *loc);
int mrl_topo_numa_locality(struct mrl_topo *topo, int numa_node,
			   struct mrl_loc *loc);

int mrl_topo_gpu_list(struct mrl_topo *topo,
		      char (*bus_ids)[MRL_TOPO_BUSID_LEN], int max);
int mrl_topo_rail_names(struct mrl_topo *topo, char ***names);
void mrl_topo_free_names(char **names);
int mrl_topo_numa_count(struct mrl_topo *topo);
int mrl_topo_numa_os_index(struct mrl_topo *topo, int idx);

int mrl_topo_loc_busid(const struct mrl_loc *loc, char *buf, size_t len);
int mrl_topo_normalize_busid(const char *in, char *out, size_t len);

int mrl_topo_distance(const struct mrl_loc *a, const struct mrl_loc *b);
const char *mrl_topo_class_name(int dist);
const char *mrl_topo_class_short(int dist);

int mrl_topo_choose(struct mrl_topo *topo, const struct mrl_loc *target,
		    const struct mrl_loc *rails, int nrails, int max_rails,
		    uint64_t *chosen_mask, const char **why);

int mrl_topo_buffer_numa(struct mrl_topo *topo, const void *buf, size_t len);
int mrl_topo_thread_numa(struct mrl_topo *topo);

#endif /* MRL_TOPO_H */
