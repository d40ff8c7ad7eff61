/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Rail locality from hwloc.  See mrl_topo.h and docs/topology.md.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include <hwloc.h>
#include <rdma/fi_errno.h>

#include "mrl_topo.h"

struct mrl_topo {
	hwloc_topology_t topo;
	bool from_xml;
};

static int mrl_errno_ret(void)
{
	return errno > 0 ? -errno : -FI_EOTHER;
}

int mrl_topo_open(struct mrl_topo **out, const char *xml_path)
{
	struct mrl_topo *t;
	int ret;

	*out = NULL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -FI_ENOMEM;
	if (hwloc_topology_init(&t->topo)) {
		free(t);
		return -FI_ENOMEM;
	}
	/*
	 * hwloc drops all I/O objects by default.  An XML file keeps only
	 * what its exporter kept, so take all of it; on this machine the
	 * important ones (NICs, GPUs, bridges leading to them) are enough.
	 */
	if (xml_path) {
		errno = 0;
		if (hwloc_topology_set_xml(t->topo, xml_path)) {
			ret = mrl_errno_ret();
			goto err;
		}
		hwloc_topology_set_io_types_filter(t->topo,
						   HWLOC_TYPE_FILTER_KEEP_ALL);
		/*
		 * The file stands for this host: where a buffer's pages or
		 * this thread are is still asked of the kernel, and read as
		 * the file's NUMA node of the same number.
		 */
		hwloc_topology_set_flags(t->topo,
					 HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM);
	} else {
		hwloc_topology_set_io_types_filter(
			t->topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
	}
	t->from_xml = xml_path != NULL;
	errno = 0;
	if (hwloc_topology_load(t->topo)) {
		ret = mrl_errno_ret();
		goto err;
	}
	*out = t;
	return 0;
err:
	hwloc_topology_destroy(t->topo);
	free(t);
	return ret;
}

void mrl_topo_close(struct mrl_topo *topo)
{
	if (!topo)
		return;
	hwloc_topology_destroy(topo->topo);
	free(topo);
}

void mrl_topo_loc_unknown(struct mrl_loc *loc)
{
	loc->obj = NULL;
	loc->numa = -1;
}

/* OS index of the one NUMA node the object is local to, else -1. */
static int mrl_obj_numa(struct mrl_topo *t, hwloc_obj_t obj)
{
	hwloc_obj_t cpu_side = hwloc_get_non_io_ancestor_obj(t->topo, obj);

	if (!cpu_side || !cpu_side->nodeset ||
	    hwloc_bitmap_weight(cpu_side->nodeset) != 1)
		return -1;
	return hwloc_bitmap_first(cpu_side->nodeset);
}

static void mrl_set_loc(struct mrl_topo *t, hwloc_obj_t obj,
			struct mrl_loc *loc)
{
	loc->obj = obj;
	loc->numa = mrl_obj_numa(t, obj);
}

static hwloc_obj_t mrl_pci_ancestor(hwloc_obj_t obj)
{
	for (hwloc_obj_t o = obj; o; o = o->parent) {
		if (o->type == HWLOC_OBJ_PCI_DEVICE)
			return o;
	}
	return NULL;
}

/* "rdmap16s27-rdm" -> "rdmap16s27": efa names its domains after the NIC. */
static void mrl_strip_domain_suffix(const char *name, char *dev, size_t len)
{
	static const char *const suffixes[] = { "-rdm", "-dgrm" };
	size_t n;

	snprintf(dev, len, "%s", name);
	n = strlen(dev);
	for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
		size_t s = strlen(suffixes[i]);

		if (n > s && !strcmp(dev + n - s, suffixes[i])) {
			dev[n - s] = '\0';
			return;
		}
	}
}

static hwloc_obj_t mrl_find_osdev(struct mrl_topo *t, const char *name)
{
	hwloc_obj_t obj = NULL;

	while ((obj = hwloc_get_next_osdev(t->topo, obj))) {
		if (obj->name && !strcmp(obj->name, name))
			return obj;
	}
	return NULL;
}

int mrl_topo_rail_locality(struct mrl_topo *topo, const char *domain_name,
			   struct mrl_loc *loc)
{
	char dev[128];
	hwloc_obj_t osdev, pci;

	mrl_topo_loc_unknown(loc);
	if (!domain_name)
		return -FI_EINVAL;
	mrl_strip_domain_suffix(domain_name, dev, sizeof(dev));
	osdev = mrl_find_osdev(topo, dev);
	if (!osdev)
		return -FI_ENOENT;
	pci = mrl_pci_ancestor(osdev);
	mrl_set_loc(topo, pci ? pci : osdev, loc);
	return 0;
}

int mrl_topo_normalize_busid(const char *in, char *out, size_t len)
{
	unsigned dom = 0, bus, dev, fn;
	int n;

	if (sscanf(in, "%x:%x:%x.%x%n", &dom, &bus, &dev, &fn, &n) != 4 ||
	    in[n]) {
		dom = 0;
		if (sscanf(in, "%x:%x.%x%n", &bus, &dev, &fn, &n) != 3 ||
		    in[n])
			return -FI_EINVAL;
	}
	if (dom > 0xffff || bus > 0xff || dev > 0x1f || fn > 7)
		return -FI_EINVAL;
	if ((size_t) snprintf(out, len, "%04x:%02x:%02x.%x",
			      dom, bus, dev, fn) >= len)
		return -FI_ETOOSMALL;
	return 0;
}

int mrl_topo_gpu_locality(struct mrl_topo *topo, const char *pci_bus_id,
			  struct mrl_loc *loc)
{
	char busid[MRL_TOPO_BUSID_LEN];
	hwloc_obj_t pci;
	int ret;

	mrl_topo_loc_unknown(loc);
	ret = mrl_topo_normalize_busid(pci_bus_id, busid, sizeof(busid));
	if (ret)
		return ret;
	pci = hwloc_get_pcidev_by_busidstring(topo->topo, busid);
	if (!pci)
		return -FI_ENOENT;
	mrl_set_loc(topo, pci, loc);
	return 0;
}

int mrl_topo_numa_locality(struct mrl_topo *topo, int numa_node,
			   struct mrl_loc *loc)
{
	mrl_topo_loc_unknown(loc);
	if (numa_node < 0 ||
	    !hwloc_get_numanode_obj_by_os_index(topo->topo, numa_node))
		return -FI_ENOENT;
	loc->numa = numa_node;
	return 0;
}

int mrl_topo_numa_count(struct mrl_topo *topo)
{
	return hwloc_get_nbobjs_by_type(topo->topo, HWLOC_OBJ_NUMANODE);
}

int mrl_topo_numa_os_index(struct mrl_topo *topo, int idx)
{
	hwloc_obj_t node;

	node = hwloc_get_obj_by_type(topo->topo, HWLOC_OBJ_NUMANODE, idx);
	return node ? (int) node->os_index : -FI_ENOENT;
}

static int mrl_is_gpu(hwloc_obj_t pci)
{
	return pci->attr->pcidev.vendor_id == 0x10de &&
	       (pci->attr->pcidev.class_id == 0x0302 ||
		pci->attr->pcidev.class_id == 0x0300);
}

static uint64_t mrl_pci_key(hwloc_obj_t pci)
{
	const struct hwloc_pcidev_attr_s *a = &pci->attr->pcidev;

	return ((uint64_t) a->domain << 24) | (a->bus << 16) |
	       (a->dev << 8) | a->func;
}

static int mrl_cmp_pci(const void *a, const void *b)
{
	uint64_t ka = mrl_pci_key(*(const hwloc_obj_t *) a);
	uint64_t kb = mrl_pci_key(*(const hwloc_obj_t *) b);

	return ka < kb ? -1 : ka > kb;
}

static int mrl_format_busid(hwloc_obj_t pci, char *buf, size_t len)
{
	const struct hwloc_pcidev_attr_s *a = &pci->attr->pcidev;

	if ((size_t) snprintf(buf, len, "%04x:%02x:%02x.%x", a->domain,
			      a->bus, a->dev, a->func) >= len)
		return -FI_ETOOSMALL;
	return 0;
}

/* Fills up to max bus ids in bus order; returns how many GPUs there are. */
int mrl_topo_gpu_list(struct mrl_topo *topo,
		      char (*bus_ids)[MRL_TOPO_BUSID_LEN], int max)
{
	hwloc_obj_t obj = NULL, *gpus;
	int n = 0, npci;

	npci = hwloc_get_nbobjs_by_type(topo->topo, HWLOC_OBJ_PCI_DEVICE);
	gpus = calloc(npci ? npci : 1, sizeof(*gpus));
	if (!gpus)
		return -FI_ENOMEM;
	while ((obj = hwloc_get_next_pcidev(topo->topo, obj)) && n < npci) {
		if (mrl_is_gpu(obj))
			gpus[n++] = obj;
	}
	qsort(gpus, n, sizeof(*gpus), mrl_cmp_pci);
	for (int i = 0; i < n && i < max; i++)
		mrl_format_busid(gpus[i], bus_ids[i], MRL_TOPO_BUSID_LEN);
	free(gpus);
	return n;
}

void mrl_topo_free_names(char **names)
{
	if (!names)
		return;
	for (char **p = names; *p; p++)
		free(*p);
	free(names);
}

static int mrl_collect_osdevs(struct mrl_topo *t, hwloc_obj_osdev_type_t type,
			      char **names)
{
	hwloc_obj_t obj = NULL;
	int n = 0;

	while ((obj = hwloc_get_next_osdev(t->topo, obj))) {
		if (obj->attr->osdev.type != type || !obj->name ||
		    !strcmp(obj->name, "lo"))
			continue;
		if (names) {
			names[n] = strdup(obj->name);
			if (!names[n])
				return -FI_ENOMEM;
		}
		n++;
	}
	return n;
}

/*
 * The rails a user would have on this topology when naming none: the
 * OpenFabrics devices (efa, verbs), else the network interfaces but lo.
 * *names is NULL-terminated; returns the count.
 */
int mrl_topo_rail_names(struct mrl_topo *topo, char ***names)
{
	hwloc_obj_osdev_type_t type = HWLOC_OBJ_OSDEV_OPENFABRICS;
	int n, ret;

	*names = NULL;
	n = mrl_collect_osdevs(topo, type, NULL);
	if (n <= 0) {
		type = HWLOC_OBJ_OSDEV_NETWORK;
		n = mrl_collect_osdevs(topo, type, NULL);
	}
	*names = calloc(n + 1, sizeof(**names));
	if (!*names)
		return -FI_ENOMEM;
	ret = mrl_collect_osdevs(topo, type, *names);
	if (ret < 0) {
		mrl_topo_free_names(*names);
		*names = NULL;
		return ret;
	}
	return n;
}

int mrl_topo_loc_busid(const struct mrl_loc *loc, char *buf, size_t len)
{
	hwloc_obj_t obj = loc->obj;

	if (!obj || obj->type != HWLOC_OBJ_PCI_DEVICE) {
		snprintf(buf, len, "-");
		return -FI_ENOENT;
	}
	return mrl_format_busid(obj, buf, len);
}

/* Walks parents: hwloc_get_common_ancestor_obj crashed on mixed depths. */
static hwloc_obj_t mrl_common_ancestor(hwloc_obj_t a, hwloc_obj_t b)
{
	for (hwloc_obj_t x = a; x; x = x->parent) {
		for (hwloc_obj_t y = b; y; y = y->parent) {
			if (x == y)
				return x;
		}
	}
	return NULL;
}

/*
 * A host bridge hwloc could not place on one NUMA node hangs from the
 * machine (a VM's flat bus, or firmware without locality); sharing it
 * says nothing about distance.
 */
static int mrl_hostbridge_is_local(hwloc_obj_t bridge)
{
	hwloc_obj_t p = bridge->parent;

	while (p && hwloc_obj_type_is_io(p->type))
		p = p->parent;
	return p && p->nodeset && hwloc_bitmap_weight(p->nodeset) == 1;
}

static int mrl_pci_class(hwloc_obj_t common)
{
	switch (common->type) {
	case HWLOC_OBJ_PCI_DEVICE:
	case HWLOC_OBJ_OS_DEVICE:
		return MRL_TOPO_SWITCH;
	case HWLOC_OBJ_BRIDGE:
		if (common->attr->bridge.upstream_type !=
		    HWLOC_OBJ_BRIDGE_HOST)
			return MRL_TOPO_SWITCH;
		return mrl_hostbridge_is_local(common) ? MRL_TOPO_HOSTBRIDGE :
						     MRL_TOPO_UNKNOWN;
	default:
		return MRL_TOPO_UNKNOWN;
	}
}

int mrl_topo_distance(const struct mrl_loc *a, const struct mrl_loc *b)
{
	hwloc_obj_t common;
	int d;

	if (a->obj && b->obj) {
		common = mrl_common_ancestor(a->obj, b->obj);
		if (common) {
			d = mrl_pci_class(common);
			if (d != MRL_TOPO_UNKNOWN)
				return d;
		}
	}
	if (a->numa < 0 || b->numa < 0)
		return MRL_TOPO_UNKNOWN;
	return a->numa == b->numa ? MRL_TOPO_NUMA : MRL_TOPO_REMOTE;
}

const char *mrl_topo_class_name(int dist)
{
	switch (dist) {
	case MRL_TOPO_SWITCH:
		return "same PCIe switch";
	case MRL_TOPO_HOSTBRIDGE:
		return "same host bridge";
	case MRL_TOPO_NUMA:
		return "same NUMA node";
	case MRL_TOPO_REMOTE:
		return "other NUMA node";
	default:
		return "no locality information";
	}
}

/* Column labels in the spirit of nvidia-smi topo -m. */
const char *mrl_topo_class_short(int dist)
{
	static const char *const names[] = { "PIX", "PHB", "NODE", "SYS" };

	return dist >= 0 && dist <= MRL_TOPO_REMOTE ? names[dist] : "-";
}

/*
 * Keeps the rails of the closest class (in index order, at most max_rails
 * when > 0); with no class known at all, every rail.  Returns the count.
 */
int mrl_topo_choose(struct mrl_topo *topo, const struct mrl_loc *target,
		    const struct mrl_loc *rails, int nrails, int max_rails,
		    uint64_t *chosen_mask, const char **why)
{
	int best = INT_MAX, d, n = 0;

	*chosen_mask = 0;
	*why = mrl_topo_class_name(MRL_TOPO_UNKNOWN);
	if (nrails <= 0 || nrails > MRL_TOPO_MAX_RAILS)
		return -FI_EINVAL;
	for (int i = 0; i < nrails; i++) {
		d = mrl_topo_distance(target, &rails[i]);
		if (d >= 0 && d < best)
			best = d;
	}
	for (int i = 0; i < nrails; i++) {
		if (best != INT_MAX) {
			if (mrl_topo_distance(target, &rails[i]) != best)
				continue;
			if (max_rails > 0 && n == max_rails)
				break;
		}
		*chosen_mask |= 1ULL << i;
		n++;
	}
	if (best != INT_MAX)
		*why = mrl_topo_class_name(best);
	return n;
}

static int mrl_single_node(hwloc_const_nodeset_t set)
{
	return hwloc_bitmap_weight(set) == 1 ? hwloc_bitmap_first(set) : -1;
}

/*
 * -1 unless the area's pages are on one node (untouched: unknown).  Asking
 * for every page would make the kernel walk a many-GiB registration page
 * by page; a few pages spread over the area tell the node as well.
 */
#define MRL_TOPO_PAGE_SAMPLES	16

int mrl_topo_buffer_numa(struct mrl_topo *topo, const void *buf, size_t len)
{
	hwloc_nodeset_t set = hwloc_bitmap_alloc();
	hwloc_nodeset_t page = hwloc_bitmap_alloc();
	size_t step = len / MRL_TOPO_PAGE_SAMPLES, off = 0;
	int node = -1;

	if (!set || !page)
		goto out;
	do {
		hwloc_bitmap_zero(page);
		if (hwloc_get_area_memlocation(topo->topo, (const char *) buf +
					       off, 1, page,
					       HWLOC_MEMBIND_BYNODESET))
			goto out;
		hwloc_bitmap_or(set, set, page);
		off += step;
	} while (step && off < len);
	node = mrl_single_node(set);
out:
	hwloc_bitmap_free(page);
	hwloc_bitmap_free(set);
	return node;
}

/* -1 when not bound inside one node, or the topology is not this host's. */
int mrl_topo_thread_numa(struct mrl_topo *topo)
{
	hwloc_cpuset_t cpus = hwloc_bitmap_alloc();
	hwloc_nodeset_t nodes = hwloc_bitmap_alloc();
	int node = -1;

	/*
	 * On a file's topology an unbound thread (every CPU of this host)
	 * would read as bound to whichever node holds those CPU numbers.
	 */
	if (cpus && nodes &&
	    !hwloc_get_cpubind(topo->topo, cpus, HWLOC_CPUBIND_THREAD) &&
	    !(topo->from_xml &&
	      hwloc_bitmap_weight(cpus) >= sysconf(_SC_NPROCESSORS_ONLN))) {
		hwloc_cpuset_to_nodeset(topo->topo, cpus, nodes);
		node = mrl_single_node(nodes);
	}
	hwloc_bitmap_free(cpus);
	hwloc_bitmap_free(nodes);
	return node;
}
