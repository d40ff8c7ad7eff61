/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * fi_multirail_topo: which rails multirail would use for memory of each GPU
 * and each NUMA node, and why; a distance matrix in the manner of
 * nvidia-smi topo -m.  Uses the provider's own locality code.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_errno.h>

#include "mrl_hmem.h"
#include "mrl_topo.h"

#define MAX_GPUS	64
#define MAX_NODES	64

struct target {
	char label[16];
	char busid[MRL_TOPO_BUSID_LEN];
	struct mrl_loc loc;
	int is_gpu;
};

struct view {
	struct mrl_topo *topo;
	const char *xml;
	char **rails;
	int nrails;
	struct mrl_loc *rail_locs;
	struct target targets[MAX_GPUS + MAX_NODES];
	int ngpus, ntargets;
	const char *gpu_source;
	int max_rails;
	int name_width;
};

static void usage(const char *prog)
{
	printf("Usage: %s [--xml FILE] [--rails A,B,...] [--max-rails N]\n"
	       "  --xml FILE       hwloc XML topology (default: "
	       "$FI_MULTIRAIL_TOPO_XML, else this host)\n"
	       "  --rails LIST     rail domain names (default: the "
	       "OpenFabrics devices,\n"
	       "                   else the network interfaces but lo)\n"
	       "  --max-rails N    rails per GPU at most (default: "
	       "$FI_MULTIRAIL_RAILS_PER_GPU, 0: all)\n"
	       "GPUs: $FI_MULTIRAIL_GPU_PCI, else CUDA's devices on this "
	       "host, else the NVIDIA\nPCI devices of the topology.\n", prog);
}

static int split_list(const char *list, char ***out)
{
	char *copy = strdup(list), *tok, *save = NULL;
	char **names;
	int n = 0;

	names = calloc(strlen(list) + 2, sizeof(*names));
	if (!copy || !names) {
		free(copy);
		free(names);
		return -FI_ENOMEM;
	}
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save))
		names[n++] = strdup(tok);
	free(copy);
	*out = names;
	return n;
}

static int load_rails(struct view *v, const char *list)
{
	int ret;

	v->nrails = list ? split_list(list, &v->rails) :
			   mrl_topo_rail_names(v->topo, &v->rails);
	if (v->nrails <= 0 || v->nrails > MRL_TOPO_MAX_RAILS) {
		fprintf(stderr, "need 1 to %d rails, have %d\n",
			MRL_TOPO_MAX_RAILS, v->nrails);
		return -FI_EINVAL;
	}
	v->rail_locs = calloc(v->nrails, sizeof(*v->rail_locs));
	if (!v->rail_locs)
		return -FI_ENOMEM;
	v->name_width = 4;
	for (int i = 0; i < v->nrails; i++) {
		ret = mrl_topo_rail_locality(v->topo, v->rails[i],
					     &v->rail_locs[i]);
		if (ret)
			fprintf(stderr, "rail %s: not in the topology (%d)\n",
				v->rails[i], ret);
		if ((int) strlen(v->rails[i]) > v->name_width)
			v->name_width = strlen(v->rails[i]);
	}
	return 0;
}

static int gpu_ids(struct view *v, char (*ids)[MRL_TOPO_BUSID_LEN])
{
	int n = 0;

	if (getenv("FI_MULTIRAIL_GPU_PCI") || (!v->xml &&
	    mrl_hmem_cuda_available())) {
		v->gpu_source = getenv("FI_MULTIRAIL_GPU_PCI") ?
				"FI_MULTIRAIL_GPU_PCI" : "CUDA";
		mrl_hmem_cuda_device_count(&n);
		n = n > MAX_GPUS ? MAX_GPUS : n;
		for (int i = 0; i < n; i++) {
			if (mrl_hmem_cuda_pci_bus_id(i, ids[i],
						     MRL_TOPO_BUSID_LEN))
				snprintf(ids[i], MRL_TOPO_BUSID_LEN, "?");
		}
		return n;
	}
	v->gpu_source = "NVIDIA PCI devices in the topology";
	n = mrl_topo_gpu_list(v->topo, ids, MAX_GPUS);
	return n > MAX_GPUS ? MAX_GPUS : n;
}

static void load_targets(struct view *v)
{
	char ids[MAX_GPUS][MRL_TOPO_BUSID_LEN];
	int nnodes = mrl_topo_numa_count(v->topo), node;
	struct target *t;

	v->ngpus = gpu_ids(v, ids);
	for (int i = 0; i < v->ngpus; i++) {
		t = &v->targets[v->ntargets++];
		snprintf(t->label, sizeof(t->label), "GPU%d", i);
		t->is_gpu = 1;
		mrl_topo_normalize_busid(ids[i], t->busid, sizeof(t->busid));
		if (mrl_topo_gpu_locality(v->topo, ids[i], &t->loc))
			fprintf(stderr, "GPU%d %s: not in the topology\n", i,
				ids[i]);
	}
	for (int i = 0; i < nnodes && i < MAX_NODES; i++) {
		node = mrl_topo_numa_os_index(v->topo, i);
		t = &v->targets[v->ntargets++];
		snprintf(t->label, sizeof(t->label), "NODE%d", node);
		snprintf(t->busid, sizeof(t->busid), "-");
		mrl_topo_numa_locality(v->topo, node, &t->loc);
	}
}

/* Cells padded to 5, but none after the last column. */
static void print_cell(const struct view *v, int t, const char *s)
{
	printf(t == v->ntargets - 1 ? "  %s" : "  %-5s", s);
}

static void print_matrix(const struct view *v)
{
	char busid[MRL_TOPO_BUSID_LEN];
	int d;

	printf("%-*s  %-12s  %4s", v->name_width, "Rail", "PCI", "NUMA");
	for (int t = 0; t < v->ntargets; t++)
		print_cell(v, t, v->targets[t].label);
	printf("\n");
	for (int r = 0; r < v->nrails; r++) {
		mrl_topo_loc_busid(&v->rail_locs[r], busid, sizeof(busid));
		printf("%-*s  %-12s  %4d", v->name_width, v->rails[r], busid,
		       v->rail_locs[r].numa);
		for (int t = 0; t < v->ntargets; t++) {
			d = mrl_topo_distance(&v->targets[t].loc,
					      &v->rail_locs[r]);
			print_cell(v, t, mrl_topo_class_short(d));
		}
		printf("\n");
	}
	printf("\nLegend: PIX = same PCIe switch, PHB = same host bridge, "
	       "NODE = same NUMA node,\n        SYS = other NUMA node, "
	       "- = unknown\n");
}

static void print_choice(const struct view *v, const struct target *t)
{
	const char *why;
	uint64_t mask;
	int n;

	/* The cap is per GPU; host memory may use all of its node's rails. */
	n = mrl_topo_choose(v->topo, &t->loc, v->rail_locs, v->nrails,
			    t->is_gpu ? v->max_rails : 0, &mask, &why);
	printf("%-6s %-12s %4d  %2d  %-23s", t->label, t->busid, t->loc.numa,
	       n, why);
	for (int r = 0; r < v->nrails; r++) {
		if (mask & (1ULL << r))
			printf(" %s", v->rails[r]);
	}
	printf("\n");
}

static void print_view(const struct view *v)
{
	printf("topology: %s\n", v->xml ? v->xml : "this host");
	printf("GPUs: %d (%s); rails: %d; rails per GPU at most: ",
	       v->ngpus, v->gpu_source, v->nrails);
	if (v->max_rails > 0)
		printf("%d\n\n", v->max_rails);
	else
		printf("all of the closest class\n\n");
	print_matrix(v);
	printf("\nRails multirail would use for memory on each GPU and "
	       "NUMA node:\n");
	printf("%-6s %-12s %4s  %2s  %-23s %s\n", "Target", "PCI", "NUMA",
	       "#", "why", "rails");
	for (int t = 0; t < v->ntargets; t++)
		print_choice(v, &v->targets[t]);
}

static void free_view(struct view *v)
{
	if (v->rails) {
		for (int i = 0; i < v->nrails; i++)
			free(v->rails[i]);
		free(v->rails);
	}
	free(v->rail_locs);
	mrl_topo_close(v->topo);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "xml", required_argument, NULL, 'x' },
		{ "rails", required_argument, NULL, 'r' },
		{ "max-rails", required_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct view v = { .xml = getenv("FI_MULTIRAIL_TOPO_XML") };
	const char *rails = NULL, *max = getenv("FI_MULTIRAIL_RAILS_PER_GPU");
	int c, ret;

	while ((c = getopt_long(argc, argv, "x:r:m:h", opts, NULL)) != -1) {
		switch (c) {
		case 'x':
			v.xml = optarg;
			break;
		case 'r':
			rails = optarg;
			break;
		case 'm':
			max = optarg;
			break;
		case 'h':
			usage(argv[0]);
			return 0;
		default:
			usage(argv[0]);
			return 1;
		}
	}
	if (v.xml && !*v.xml)
		v.xml = NULL;
	v.max_rails = max ? atoi(max) : 0;
	ret = mrl_topo_open(&v.topo, v.xml);
	if (ret) {
		fprintf(stderr, "cannot load topology %s: %s\n",
			v.xml ? v.xml : "of this host", strerror(-ret));
		return 1;
	}
	ret = load_rails(&v, rails);
	if (!ret) {
		load_targets(&v);
		print_view(&v);
	}
	free_view(&v);
	return ret ? 1 : 0;
}
