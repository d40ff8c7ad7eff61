/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Provider entry, run-time knobs and fi_getinfo.
 *
 * How we are selected (libfabric 1.17 to 2.x, src/fabric.c):
 *  - FI_PROVIDER=multirail: only we are enabled; the cores are hidden and we
 *    reach them with MRL_GETINFO_HIDDEN.  Our entries are named "multirail".
 *  - FI_PROVIDER="multirail;tcp": libfabric enables only "multirail" and then
 *    keeps the entries whose prov_name equals that string or starts with
 *    "multirail;tcp;".  So our entries say "multirail;tcp" (libfabric appends
 *    ";multirail") and "tcp" is the core we ask.
 *  - hints prov_name "tcp;ofi_rxm;multirail" (fabtests -p): libfabric asks
 *    only us; the part before ";multirail" is the core.
 */
#define _GNU_SOURCE	/* strverscmp */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>

#include "mrl.h"
#include "mrl_hmem.h"

/* Set from mrl_param_defs at provider init: defaults, then the variables. */
struct mrl_params mrl_params;

static __thread int mrl_in_getinfo;

size_t mrl_iov_len(const struct iovec *iov, size_t count)
{
	size_t i, len = 0;

	/* a NULL array is refused by the caller's checks, not read here */
	for (i = 0; iov && i < count; i++)
		len += iov[i].iov_len;
	return len;
}

/*
 * Copies len bytes between a flat buffer and the iovs' bytes from offset
 * on: into the iovs when to_iov, else out of them.  Stops at the iovs' end.
 * The iovs may be device memory's (iface, from mrl_desc_iface): CUDA's go
 * through its runtime, one call per iov; another device's is
 * -FI_EOPNOTSUPP.
 */
int mrl_iov_copy_iface(enum fi_hmem_iface iface, const struct iovec *iov,
		       size_t count, size_t offset, void *buf, size_t len,
		       bool to_iov)
{
	uint8_t *flat = buf, *at;
	size_t i, n;
	int ret;

	if (iface != FI_HMEM_SYSTEM && iface != FI_HMEM_CUDA)
		return -FI_EOPNOTSUPP;
	for (i = 0; i < count && len; i++) {
		if (offset >= iov[i].iov_len) {
			offset -= iov[i].iov_len;
			continue;
		}
		n = iov[i].iov_len - offset < len ? iov[i].iov_len - offset
						  : len;
		at = (uint8_t *) iov[i].iov_base + offset;
		if (iface == FI_HMEM_SYSTEM) {
			memcpy(to_iov ? at : flat, to_iov ? flat : at, n);
		} else {
			ret = mrl_hmem_cuda_copy(to_iov ? at : flat,
						 to_iov ? flat : at, n);
			if (ret)
				return ret;
		}
		flat += n;
		len -= n;
		offset = 0;
	}
	return 0;
}

/* mrl_iov_copy_iface for host memory, which cannot fail. */
void mrl_iov_copy(const struct iovec *iov, size_t count, size_t offset,
		  void *buf, size_t len, bool to_iov)
{
	(void) mrl_iov_copy_iface(FI_HMEM_SYSTEM, iov, count, offset, buf, len,
				  to_iov);
}

/* The first device interface among count descriptors, else system's. */
enum fi_hmem_iface mrl_desc_iface(void **desc, size_t count)
{
	const struct mrl_mr *mr;
	size_t i;

	for (i = 0; desc && i < count; i++) {
		mr = desc[i];
		if (mr && mr->iface != FI_HMEM_SYSTEM)
			return mr->iface;
	}
	return FI_HMEM_SYSTEM;
}

/* Whether any of count descriptors (may be NULL) is device memory's. */
bool mrl_desc_any_device(void **desc, size_t count)
{
	return mrl_desc_iface(desc, count) != FI_HMEM_SYSTEM;
}

/* The FI_PROVIDER entry that names us with a core ("multirail;tcp"). */
static char *mrl_env_entry(void)
{
	const char *env = getenv("FI_PROVIDER");
	char *copy, *tok, *save, *found = NULL;

	if (!env)
		return NULL;
	copy = strdup(env);
	if (!copy)
		return NULL;
	for (tok = strtok_r(copy, ",", &save); tok && !found;
	     tok = strtok_r(NULL, ",", &save)) {
		if (!strncmp(tok, MRL_PROV_NAME ";", strlen(MRL_PROV_NAME) + 1))
			found = strdup(tok);
	}
	free(copy);
	return found;
}

/* Which core to ask: hints' layered name, FI_PROVIDER, or the knob. */
static char *mrl_pick_core(const struct fi_info *hints, const char *entry)
{
	const char *pn = hints && hints->fabric_attr ?
			 hints->fabric_attr->prov_name : NULL;
	size_t n, suffix = strlen(";" MRL_PROV_NAME);
	char fab_core[128], fab[128];

	if (pn && (n = strlen(pn)) > suffix &&
	    !strcmp(pn + n - suffix, ";" MRL_PROV_NAME)) {
		/* our own entry fed back as hints: "multirail;tcp;multirail" */
		if (n > 2 * suffix && !strncmp(pn, MRL_PROV_NAME ";", suffix))
			return strndup(pn + suffix, n - 2 * suffix);
		return strndup(pn, n - suffix);
	}
	if (hints && hints->fabric_attr && hints->fabric_attr->name &&
	    !mrl_parse_fabric_name(hints->fabric_attr->name, fab_core,
				   sizeof(fab_core), fab, sizeof(fab)))
		return strdup(fab_core);
	if (entry)
		return strdup(entry + strlen(MRL_PROV_NAME) + 1);
	if (mrl_params.core && *mrl_params.core)
		return strdup(mrl_params.core);
	return NULL;
}

static bool mrl_is_ours(const struct fi_info *fi)
{
	const char *pn = fi->fabric_attr ? fi->fabric_attr->prov_name : NULL;

	return pn && strstr(pn, MRL_PROV_NAME);
}

static const char *mrl_dom_name(const struct fi_info *fi)
{
	return fi->domain_attr && fi->domain_attr->name ?
	       fi->domain_attr->name : "";
}

/*
 * Keep the entries of one core provider: the one named exactly, else the
 * provider of the best (first) entry ("tcp" asked gives "tcp;ofi_rxm").
 * *core_name becomes that exact name, which the rails open with later.
 */
static int mrl_filter_core(struct fi_info **list, char **core_name)
{
	struct fi_info *fi, *keep = NULL, **tail = &keep, *next;
	char *want = NULL;

	for (fi = *list; fi && !want; fi = fi->next) {
		if (*core_name && !strcmp(fi->fabric_attr->prov_name,
					  *core_name))
			want = *core_name;
	}
	for (fi = *list; fi && !want; fi = fi->next) {
		if (!mrl_is_ours(fi))
			want = fi->fabric_attr->prov_name;
	}
	if (!want)
		return -FI_ENODATA;
	want = strdup(want);
	if (!want)
		return -FI_ENOMEM;
	for (fi = *list; fi; fi = next) {
		next = fi->next;
		fi->next = NULL;
		if (!strcmp(want, fi->fabric_attr->prov_name)) {
			*tail = fi;
			tail = &fi->next;
		} else {
			fi_freeinfo(fi);
		}
	}
	*list = keep;
	free(*core_name);
	*core_name = want;
	return 0;
}

static int mrl_core_getinfo(uint32_t version, const char *node,
			    const char *service, uint64_t flags,
			    const struct fi_info *core_hints,
			    struct fi_info **out)
{
	int ret;

	mrl_in_getinfo++;
	ret = fi_getinfo(version, node, service, flags | MRL_GETINFO_HIDDEN,
			 core_hints, out);
	mrl_in_getinfo--;
	return ret;
}

/*
 * Under FI_PROVIDER="multirail;tcp" (or "multirail") libfabric hides the
 * core providers; we reach them with MRL_GETINFO_HIDDEN, but a utility
 * provider such as ofi_rxm looks its own core up again when its fabric
 * and domain open, without that flag (1.17: util_attr.c), and fails.  So
 * a layered core whose base is hidden cannot carry rails.
 */
static bool mrl_layered_core_hidden(uint32_t version, const char *core_name)
{
	struct fi_info *hints, *found = NULL;
	const char *semi = strchr(core_name, ';');
	int ret;

	if (!semi)
		return false;
	hints = fi_allocinfo();
	if (!hints)
		return false;
	hints->fabric_attr->prov_name = strndup(core_name, semi - core_name);
	mrl_in_getinfo++;
	ret = fi_getinfo(version, NULL, NULL, MRL_GETINFO_CORE_ONLY, hints,
			 &found);
	mrl_in_getinfo--;
	fi_freeinfo(found);
	fi_freeinfo(hints);
	return ret == -FI_ENODATA;
}

/* A core that gives RDM itself in place of "<base>;ofi_rxm". */
static const char *mrl_native_alternative(const char *core_name)
{
	/* libfabric 1.16-1.17: "net" is the tcp provider's own RDM */
	if (!strncmp(core_name, "tcp;", 4))
		return "net";
	return NULL;
}

/*
 * Swap a layered core that cannot open for a native one; the caller's
 * list and name are replaced.  Returns 0 when nothing needed doing or the
 * swap was made, -FI_ENODATA when no core can open.
 */
static int mrl_avoid_hidden_layering(uint32_t version,
				     struct fi_info *core_hints,
				     struct fi_info **all, char **core_name)
{
	const char *found = (*all)->fabric_attr->prov_name;
	const char *alt = mrl_native_alternative(found);
	struct fi_info *alt_all = NULL;
	char *saved = core_hints->fabric_attr->prov_name, *alt_name;
	int ret;

	if (!mrl_layered_core_hidden(version, found))
		return 0;
	alt_name = alt ? strdup(alt) : NULL;
	if (alt_name) {
		core_hints->fabric_attr->prov_name = alt_name;
		ret = mrl_core_getinfo(version, NULL, NULL, 0, core_hints,
				       &alt_all);
		core_hints->fabric_attr->prov_name = saved;
		if (!ret)
			ret = mrl_filter_core(&alt_all, &alt_name);
	}
	if (!alt_name || ret || strcmp(alt_name, alt)) {
		/* an entry whose fi_domain must fail is no answer */
		MRL_INFO(FI_LOG_CORE, "core %s sits on a provider that "
			 "FI_PROVIDER hides, so it cannot open; name it with "
			 "fi_getinfo hints (\"%s;multirail\") instead\n",
			 found, found);
		fi_freeinfo(alt_all);
		free(alt_name);
		return -FI_ENODATA;
	}
	MRL_INFO(FI_LOG_CORE, "core %s cannot open while FI_PROVIDER hides "
		 "its base; using %s, the same transport without the "
		 "layer\n", found, alt);
	fi_freeinfo(*all);
	*all = alt_all;
	free(*core_name);
	*core_name = alt_name;
	return 0;
}

static const struct fi_info *mrl_find_domain(const struct fi_info *list,
					     const char *name, uint32_t format)
{
	for (; list; list = list->next) {
		if (!strcmp(mrl_dom_name(list), name) &&
		    (!format || list->addr_format == format))
			return list;
	}
	return NULL;
}

static bool mrl_joined_has(const char *joined, const char *name)
{
	size_t n = strlen(name);
	const char *p;

	for (p = joined; (p = strstr(p, name)); p += n) {
		if ((p == joined || p[-1] == '+') && (!p[n] || p[n] == '+'))
			return true;
	}
	return false;
}

static int mrl_cmp_names(const void *a, const void *b)
{
	return strverscmp(*(const char *const *) a, *(const char *const *) b);
}

/*
 * Rail domain names: explicit (knob or hints), else every NIC but lo, in
 * natural order (eth2 before eth10) so that both peers number their rails
 * alike and rail i meets rail i.  With FI_SOURCE the addressed NIC leads:
 * a peer that knows only that address reaches our rail 0 there.
 */
static int mrl_rail_names(const struct fi_info *all, const struct fi_info *lead,
			  const struct fi_info *hints, char ***names)
{
	const char *list[MRL_MAX_RAILS * 4], *explicit = NULL;
	const struct fi_info *fi;
	char buf[4096] = "";
	size_t len = 0, n = 0, i;
	bool others = false;

	if (hints && hints->domain_attr && hints->domain_attr->name)
		explicit = hints->domain_attr->name;
	else if (mrl_params.rails && *mrl_params.rails)
		explicit = mrl_params.rails;
	if (explicit)
		return mrl_split_rails(explicit, names);

	for (fi = all; fi; fi = fi->next)
		others |= strcmp(mrl_dom_name(fi), "lo") != 0;
	for (fi = all; fi && n < sizeof(list) / sizeof(list[0]);
	     fi = fi->next) {
		if (others && !strcmp(mrl_dom_name(fi), "lo"))
			continue;
		for (i = 0; i < n && strcmp(list[i], mrl_dom_name(fi)); i++)
			;
		if (i == n)
			list[n++] = mrl_dom_name(fi);
	}
	qsort(list, n, sizeof(list[0]), mrl_cmp_names);
	/* a wildcard source (FI_SOURCE with a port only) names no NIC */
	if (lead && mrl_find_domain(all, mrl_dom_name(lead), 0) &&
	    !(others && !strcmp(mrl_dom_name(lead), "lo")))
		len = snprintf(buf, sizeof(buf), "%s", mrl_dom_name(lead));
	for (i = 0; i < n && len < sizeof(buf) - 256; i++) {
		if (mrl_joined_has(buf, list[i]))
			continue;
		len += snprintf(buf + len, sizeof(buf) - len, "%s%s",
				len ? "+" : "", list[i]);
	}
	if (!len)
		return -FI_ENODATA;
	return mrl_split_rails(buf, names);
}

static uint16_t *mrl_port_of(void *addr, uint32_t format)
{
	if (format == FI_SOCKADDR_IN)
		return &((struct sockaddr_in *) addr)->sin_port;
	if (format == FI_SOCKADDR_IN6)
		return &((struct sockaddr_in6 *) addr)->sin6_port;
	return NULL;
}

static void mrl_set_port(void *addr, uint32_t format, uint16_t port)
{
	uint16_t *p = mrl_port_of(addr, format);

	if (p)
		*p = port;
}

/*
 * Rail 0's source address for an FI_SOURCE query: the address asked for
 * when it is rail 0's NIC, else rail 0's own with the port asked for (a
 * wildcard such as 0.0.0.0:9228, or a NIC that is not rail 0).
 */
static void mrl_rail0_source(void *dst, const struct fi_info *rail0,
			     const struct fi_info *addressed, size_t alen)
{
	uint16_t *port;

	if (!strcmp(mrl_dom_name(addressed), mrl_dom_name(rail0)) ||
	    !rail0->src_addr) {
		memcpy(dst, addressed->src_addr, alen);
		return;
	}
	memcpy(dst, rail0->src_addr, alen);
	port = mrl_port_of(addressed->src_addr, addressed->addr_format);
	mrl_set_port(dst, rail0->addr_format, port ? *port : 0);
}

static void *mrl_build_addr(const struct fi_info **rails, int n,
			    const struct fi_info *addressed, bool dest,
			    size_t *len)
{
	struct mrl_addr_hdr *hdr;
	size_t alen = dest ? addressed->dest_addrlen :
		      rails[0]->src_addrlen;
	int i, nr = dest ? 1 : n;

	*len = mrl_addr_size(nr, alen);
	hdr = calloc(1, *len);
	if (!hdr)
		return NULL;
	hdr->magic = MRL_ADDR_MAGIC;
	hdr->version = MRL_ADDR_VERSION;
	hdr->nrails = nr;
	hdr->rail_addrlen = alen;
	if (dest) {
		hdr->flags = MRL_ADDR_PARTIAL;
		memcpy(hdr + 1, addressed->dest_addr, alen);
		return hdr;
	}
	for (i = 0; i < n; i++) {
		void *dst = (char *) (hdr + 1) + i * alen;

		if (!i && addressed && addressed->src_addr &&
		    addressed->src_addrlen == alen) {
			mrl_rail0_source(dst, rails[0], addressed, alen);
			continue;
		}
		if (rails[i]->src_addr)
			memcpy(dst, rails[i]->src_addr, alen);
		mrl_set_port(dst, rails[i]->addr_format, 0);
	}
	return hdr;
}

/* The rails of one fi_info: the core entries and our names for them. */
struct mrl_rail_set {
	int n;
	const struct fi_info *core[MRL_MAX_RAILS];
	/* rail 0's unaddressed entry: an addressed query's may show fewer
	 * caps (1.17 net drops FI_LOCAL_COMM), and our attributes must not
	 * change with the node asked for */
	const struct fi_info *attr;
	char name[MRL_MAX_RAILS][256];		/* "core[@topo]" */
};

static int mrl_collect_rails(const struct fi_info *all,
			     const struct fi_info *first,
			     const struct fi_info *hints, const char *core_name,
			     uint64_t flags, struct mrl_rail_set *set)
{
	char **names = NULL, core[256];
	uint32_t format;
	int i, ret;

	ret = mrl_rail_names(all, (flags & FI_SOURCE) ? first : NULL, hints,
			     &names);
	if (ret)
		return ret;
	format = first ? first->addr_format : all->addr_format;
	set->n = 0;
	for (i = 0; names[i] && set->n < MRL_MAX_RAILS; i++) {
		const struct fi_info *fi;

		mrl_rail_core_name(names[i], core, sizeof(core));
		fi = (!set->n && first && !strcmp(mrl_dom_name(first), core)) ?
		     first : mrl_find_domain(all, core, format);
		if (!fi) {
			MRL_WARN(FI_LOG_CORE, "rail '%s': no %s domain of that "
				 "name with RDM and RMA\n", core, core_name);
			mrl_free_names(names);
			return -FI_ENODATA;
		}
		if (set->n && fi->src_addrlen != set->core[0]->src_addrlen) {
			MRL_WARN(FI_LOG_CORE, "rail '%s' skipped: address length "
				 "differs from rail 0\n", core);
			continue;
		}
		if (!set->n)
			set->attr = mrl_find_domain(all, core, format) ?: fi;
		set->core[set->n] = fi;
		snprintf(set->name[set->n], sizeof(set->name[0]), "%s",
			 names[i]);
		set->n++;
	}
	mrl_free_names(names);
	if (!set->n)
		return -FI_ENODATA;
	return 0;
}

/* One fi_info over the rails of set that are in mask. */
static int mrl_make_entry(const struct mrl_rail_set *set, uint32_t mask,
			  const struct fi_info *first,
			  const struct fi_info *hints, const char *core_name,
			  const char *entry, uint64_t flags,
			  struct fi_info **info)
{
	const struct fi_info *rails[MRL_MAX_RAILS];
	char dom[MRL_MAX_RAILS * 260] = "";
	struct fi_info *fi;
	size_t len = 0;
	int n = 0, i;

	for (i = 0; i < set->n; i++) {
		if (!(mask & (1u << i)))
			continue;
		rails[n++] = set->core[i];
		len += snprintf(dom + len, sizeof(dom) - len, "%s%s",
				len ? "+" : "", set->name[i]);
	}
	fi = fi_allocinfo();
	if (!fi)
		return -FI_ENOMEM;
	mrl_fill_info(fi, set->attr, hints);
	fi->domain_attr->name = strdup(dom);
	len = strlen(MRL_FABRIC_PREFIX) + strlen(core_name) + 1;
	fi->fabric_attr->name = malloc(len);
	if (fi->fabric_attr->name)
		snprintf(fi->fabric_attr->name, len, "%s%s",
			 MRL_FABRIC_PREFIX, core_name);
	fi->fabric_attr->prov_name = entry ? strdup(entry) : NULL;

	/*
	 * The entry's first rail is its nearest: its NIC is the one a
	 * topology-aware client (aws-ofi-nccl) places the entry by.
	 */
	if (rails[0]->nic &&
	    fi_control(&rails[0]->nic->fid, FI_DUP, &fi->nic))
		fi->nic = NULL;
	fi->src_addr =
		mrl_build_addr(rails, n, (flags & FI_SOURCE) ? first : NULL,
			       false, &fi->src_addrlen);
	if (first && !(flags & FI_SOURCE) && first->dest_addr)
		fi->dest_addr = mrl_build_addr(rails, n, first, true,
					       &fi->dest_addrlen);
	if (!fi->domain_attr->name || !fi->fabric_attr->name || !fi->src_addr) {
		fi_freeinfo(fi);
		return -FI_ENOMEM;
	}
	*info = fi;
	return 0;
}

/*
 * The rails nearest this process (its GPU or NUMA node), when they are
 * fewer than all: that entry goes first, so a program that takes the
 * first fi_info gets the right NICs.  Not for addressed queries, whose
 * rail 0 is the NIC the address names.
 */
static uint32_t mrl_near_process(const struct mrl_rail_set *set,
				 const struct fi_info *first,
				 const struct fi_info *hints)
{
	char *names[MRL_MAX_RAILS + 1] = { NULL };
	struct mrl_loc locs[MRL_MAX_RAILS];
	char why[64] = "";
	uint32_t mask;
	int i, known;

	if (first)
		return 0;
	for (i = 0; i < set->n; i++)
		names[i] = (char *) set->name[i];
	known = mrl_locality_rails(names, set->n, locs);
	mask = mrl_locality_process_mask(locs, set->n, known,
					 hints && (hints->caps & FI_HMEM),
					 why, sizeof(why));
	if (mask)
		MRL_INFO(FI_LOG_CORE, "first entry: the rails nearest %s "
			 "(mask 0x%x of %d)\n", why, mask, set->n);
	return mask;
}

static int mrl_build_set(const struct fi_info *all, const struct fi_info *first,
			 const struct fi_info *hints, const char *core_name,
			 const char *entry, uint64_t flags,
			 struct fi_info **info)
{
	struct mrl_rail_set *set = calloc(1, sizeof(*set));
	struct fi_info *near = NULL;
	uint32_t mask;
	int ret;

	if (!set)
		return -FI_ENOMEM;
	ret = mrl_collect_rails(all, first, hints, core_name, flags, set);
	if (ret)
		goto out;
	ret = mrl_make_entry(set, set->n >= 32 ? ~0u : (1u << set->n) - 1,
			     first, hints, core_name, entry, flags, info);
	if (ret)
		goto out;
	mask = mrl_near_process(set, first, hints);
	if (mask && !mrl_make_entry(set, mask, first, hints, core_name, entry,
				    flags, &near)) {
		near->next = *info;
		*info = near;
	}
out:
	free(set);
	return ret;
}

static const char *mrl_fab_name(const struct fi_info *fi)
{
	return fi->fabric_attr && fi->fabric_attr->name ?
	       fi->fabric_attr->name : "";
}

/* Is name one of the first n of names? */
static bool mrl_listed(const char *const *names, int n, const char *name)
{
	while (n-- > 0)
		if (!strcmp(names[n], name))
			return true;
	return false;
}

/*
 * The core's fabrics, in its order, when one domain appears in several of
 * them as different things (efa: efa-direct, then efa, with other caps and
 * modes); 0 otherwise.  tcp lists a NIC once per subnet it is on, alike
 * in each: its rails may span subnets.
 */
static int mrl_shared_fabrics(const struct fi_info *all, const char **names,
			      int max)
{
	const struct fi_info *a, *b;
	bool shared = false;
	int n = 0;

	for (a = all; a; a = a->next) {
		for (b = a->next; b && !shared; b = b->next)
			shared = !strcmp(mrl_dom_name(a), mrl_dom_name(b)) &&
				 a->addr_format == b->addr_format &&
				 strcmp(mrl_fab_name(a), mrl_fab_name(b)) &&
				 (a->caps != b->caps || a->mode != b->mode);
		if (n < max && !mrl_listed(names, n, mrl_fab_name(a)))
			names[n++] = mrl_fab_name(a);
	}
	return shared ? n : 0;
}

/* Copies of the entries of one fabric; NULL when there are none. */
static struct fi_info *mrl_only_fabric(const struct fi_info *list,
				       const char *fabric, int *err)
{
	struct fi_info *keep = NULL, **tail = &keep;

	*err = 0;
	for (; list; list = list->next) {
		if (strcmp(mrl_fab_name(list), fabric))
			continue;
		*tail = fi_dupinfo(list);
		if (!*tail) {
			*err = -FI_ENOMEM;
			break;
		}
		tail = &(*tail)->next;
	}
	return keep;
}

static struct fi_info **mrl_list_tail(struct fi_info **list)
{
	while (*list)
		list = &(*list)->next;
	return list;
}

/*
 * Entries over each of the core's fabrics that share domains, in the
 * core's order, each named "multirail/<core>/<fabric>" (hints or
 * FI_MULTIRAIL_CORE_FABRIC naming one keep that one); otherwise one set
 * over every domain.
 */
static int mrl_build_info(const struct fi_info *all,
			  const struct fi_info *first,
			  const struct fi_info *hints, const char *core_name,
			  const char *entry, uint64_t flags,
			  struct fi_info **info)
{
	const char *fabrics[8], *want = "";
	char label[256], hcore[128], hfab[128] = "";
	struct fi_info *sub_all, *sub_first, **tail = info;
	int n, i, ret = -FI_ENODATA, err, err2;

	n = mrl_shared_fabrics(all, fabrics, 8);
	if (!n)
		return mrl_build_set(all, first, hints, core_name, entry, flags,
				     info);
	if (hints && hints->fabric_attr && hints->fabric_attr->name &&
	    !mrl_parse_fabric_name(hints->fabric_attr->name, hcore,
				   sizeof(hcore), hfab, sizeof(hfab)))
		want = hfab;
	if (!*want && mrl_params.core_fabric)
		want = mrl_params.core_fabric;
	for (i = 0; i < n; i++) {
		if (*want && strcmp(want, fabrics[i]))
			continue;
		sub_all = mrl_only_fabric(all, fabrics[i], &err);
		sub_first = mrl_only_fabric(first, fabrics[i], &err2);
		snprintf(label, sizeof(label), "%s/%s", core_name, fabrics[i]);
		if (sub_all && (!first || sub_first) &&
		    !mrl_build_set(sub_all, sub_first, hints, label, entry,
				   flags, tail)) {
			ret = 0;
			tail = mrl_list_tail(tail);
		}
		fi_freeinfo(sub_all);
		fi_freeinfo(sub_first);
		if (err || err2) {
			ret = -FI_ENOMEM;
			break;
		}
	}
	return ret;
}

static bool mrl_same_entry(const struct fi_info *a, const struct fi_info *b)
{
	return a->addr_format == b->addr_format &&
	       !strcmp(mrl_dom_name(a), mrl_dom_name(b)) &&
	       !strcmp(mrl_fab_name(a), mrl_fab_name(b)) &&
	       a->fabric_attr->prov_name && b->fabric_attr->prov_name &&
	       !strcmp(a->fabric_attr->prov_name, b->fabric_attr->prov_name);
}

/*
 * The core's entries as asked (without FI_TAGGED unless the application
 * wants it, so that a fabric without, efa-direct, is listed too), each
 * replaced by the same one with FI_TAGGED where the core has it there:
 * tagged messages carry our control channel, and a provider that answers
 * with the caps asked for (rxm) would otherwise leave them out.
 */
static int mrl_prefer_tagged(uint32_t version, const struct fi_info *core_hints,
			     struct fi_info **all)
{
	struct fi_info *hints, *tagged = NULL, **pos, *t, **tp;

	if (core_hints->caps & FI_TAGGED)
		return 0;
	hints = fi_dupinfo(core_hints);
	if (!hints)
		return -FI_ENOMEM;
	hints->caps |= FI_TAGGED;
	if (mrl_core_getinfo(version, NULL, NULL, 0, hints, &tagged))
		tagged = NULL;
	fi_freeinfo(hints);
	for (pos = all; *pos; pos = &(*pos)->next) {
		for (tp = &tagged; (t = *tp) && !mrl_same_entry(t, *pos);
		     tp = &t->next)
			;
		if (!t)
			continue;
		*tp = t->next;		/* out of tagged, into all */
		t->next = (*pos)->next;
		(*pos)->next = NULL;
		fi_freeinfo(*pos);
		*pos = t;
	}
	fi_freeinfo(tagged);
	return 0;
}

static bool mrl_hints_ok(const struct fi_info *hints)
{
	if (!hints)
		return true;
	if (hints->ep_attr && hints->ep_attr->type != FI_EP_UNSPEC &&
	    hints->ep_attr->type != FI_EP_RDM)
		return false;
	if (hints->caps & ~(FI_MSG | FI_TAGGED | FI_RMA | FI_READ | FI_WRITE |
			    FI_SEND | FI_RECV | FI_REMOTE_READ |
			    FI_REMOTE_WRITE | FI_MULTI_RECV | FI_SOURCE |
			    FI_LOCAL_COMM | FI_REMOTE_COMM | FI_DIRECTED_RECV |
			    FI_HMEM | FI_ATOMIC))
		return false;
	return true;
}

/* Drop the entries that do not honour the hints; -FI_ENODATA if none is left. */
static int mrl_keep_honouring(struct fi_info **info,
			      const struct fi_info *hints)
{
	struct fi_info *fi, *next, *keep = NULL, **tail = &keep;
	const char *miss = NULL, *why;

	for (fi = *info; fi; fi = next) {
		next = fi->next;
		fi->next = NULL;
		why = mrl_hints_miss(fi, hints);
		if (why) {
			miss = why;
			fi_freeinfo(fi);
			continue;
		}
		*tail = fi;
		tail = &fi->next;
	}
	*info = keep;
	if (keep)
		return 0;
	MRL_INFO(FI_LOG_CORE, "the hints ask for %s beyond what multirail "
		 "over this core offers\n", miss);
	return -FI_ENODATA;
}

/*
 * Device memory goes through the rails' cores untouched, so FI_HMEM is
 * offered only where every rail's core offers it: when that is what
 * failed, say so rather than that no core exists.
 */
static void mrl_say_why_none(uint32_t version, struct fi_info *core_hints,
			     const char *core_name)
{
	struct fi_info *host = NULL;
	const char *name = core_name ? core_name : "any";

	if (core_hints->caps & FI_HMEM) {
		core_hints->caps &= ~FI_HMEM;
		if (!mrl_core_getinfo(version, NULL, NULL, 0, core_hints,
				      &host)) {
			MRL_INFO(FI_LOG_CORE, "FI_HMEM asked, but the core (%s) "
				 "does not carry device memory: no entry\n",
				 name);
			fi_freeinfo(host);
			core_hints->caps |= FI_HMEM;
			return;
		}
		core_hints->caps |= FI_HMEM;
	}
	MRL_INFO(FI_LOG_CORE, "no RDM+RMA core provider found (%s)\n", name);
}

int mrl_getinfo(uint32_t version, const char *node, const char *service,
		uint64_t flags, const struct fi_info *hints,
		struct fi_info **info)
{
	struct fi_info *core_hints = NULL, *all = NULL, *addressed = NULL;
	char *core_name = NULL, *entry = NULL;
	int ret;

	*info = NULL;
	if (mrl_in_getinfo || !mrl_hints_ok(hints))
		return -FI_ENODATA;
	/* before 1.5, mr_mode meant BASIC or SCALABLE: neither is ours */
	if (FI_VERSION_LT(version, FI_VERSION(1, 5))) {
		MRL_INFO(FI_LOG_CORE, "API version %u.%u: multirail needs 1.5 "
			 "or later\n", FI_MAJOR(version), FI_MINOR(version));
		return -FI_ENODATA;
	}

	entry = mrl_env_entry();
	core_name = mrl_pick_core(hints, entry);
	core_hints = mrl_core_hints(hints, core_name);
	if (!core_hints) {
		ret = -FI_ENOMEM;
		goto out;
	}
	ret = mrl_core_getinfo(version, NULL, NULL, 0, core_hints, &all);
	if (!ret)
		ret = mrl_prefer_tagged(version, core_hints, &all);
	if (!ret)
		ret = mrl_filter_core(&all, &core_name);
	if (!ret)
		ret = mrl_avoid_hidden_layering(version, core_hints, &all,
						&core_name);
	if (ret) {
		mrl_say_why_none(version, core_hints, core_name);
		goto out;
	}
	if (node || service || (flags & FI_SOURCE)) {
		free(core_hints->fabric_attr->prov_name);
		core_hints->fabric_attr->prov_name = strdup(core_name);
		ret = mrl_core_getinfo(version, node, service, flags,
				       core_hints, &addressed);
		if (!ret)
			ret = mrl_filter_core(&addressed, &core_name);
		if (ret)
			goto out;
	}
	ret = mrl_build_info(all, addressed, hints, core_name, entry, flags,
			     info);
	if (!ret)
		ret = mrl_keep_honouring(info, hints);
out:
	fi_freeinfo(addressed);
	fi_freeinfo(all);
	fi_freeinfo(core_hints);
	free(core_name);
	free(entry);
	return ret;
}

/*
 * Every FI_MULTIRAIL_* variable, defined (for fi_info -e), given its
 * default and read from one table.  value NULL: read elsewhere (mrl_hmem.c,
 * which the libfabric-free tools link too, reads the GPU ones with getenv).
 * Numbers below min are refused with a warning and the default kept.
 */
struct mrl_param_def {
	const char *name;
	enum fi_param_type type;
	void *value;
	long def;			/* numbers; strings default to none */
	long min;
	const char *help;
};

static const struct mrl_param_def mrl_param_defs[] = {
	{ "rails", FI_PARAM_STRING, &mrl_params.rails, 0, 0,
	  "Comma list of core domain names to use as rails, in order; a "
	  "name may repeat (lo,lo,lo,lo: four rails on loopback), and "
	  "lo@NIC places a rail where the topology has NIC. "
	  "Default: every domain of the core except lo." },
	{ "core", FI_PARAM_STRING, &mrl_params.core, 0, 0,
	  "Core provider to stripe over when none is named by FI_PROVIDER "
	  "or hints (e.g. \"tcp;ofi_rxm\", \"efa\")." },
	{ "core_fabric", FI_PARAM_STRING, &mrl_params.core_fabric, 0, 0,
	  "Where the core offers its NICs in several fabrics (efa: "
	  "efa-direct, then efa), stripe over this one only; default: "
	  "entries over each, in the core's order." },
	{ "chunk_size", FI_PARAM_SIZE_T, &mrl_params.chunk_size,
	  256 * 1024, 4096,
	  "Largest piece of a striped operation on one rail, at least 4096" },
	{ "stripe_min", FI_PARAM_SIZE_T, &mrl_params.stripe_min,
	  64 * 1024, 0, "Operations smaller than this go whole on one rail" },
	{ "policy", FI_PARAM_STRING, &mrl_params.policy, 0, 0,
	  "auto (small ops fill a rail, then the next; large ops split), "
	  "split (every op over all rails) or roundrobin (whole ops "
	  "rotate)." },
	{ "topo_xml", FI_PARAM_STRING, &mrl_params.topo_xml, 0, 0,
	  "hwloc XML topology to place rails, GPUs and NUMA nodes in, "
	  "instead of this host's (testing without the hardware)." },
	{ "rails_per_gpu", FI_PARAM_INT, &mrl_params.rails_per_gpu, 0, 0,
	  "Most rails for memory on one GPU; 0: every rail of the closest "
	  "class" },
	{ "max_learned_peers", FI_PARAM_INT, &mrl_params.max_learned,
	  1024, 0,
	  "Most peers an endpoint's AV learns from control messages alone "
	  "(peers that were not inserted; about 11 KB each): at the bound, "
	  "the one heard from least recently is forgotten" },
	{ "rail_timeout_ms", FI_PARAM_INT, &mrl_params.rail_timeout_ms,
	  3000, 0,
	  "A rail that holds chunks or fences and completes none, or "
	  "refuses every post to a peer, for this long is taken out of "
	  "service for that peer and its chunks go to the other rails; "
	  "0: only the core's errors take a rail out" },
	{ "connect_timeout_ms", FI_PARAM_INT, &mrl_params.connect_timeout_ms,
	  30000, 0,
	  "FI_MULTIRAIL_RAIL_TIMEOUT_MS for a peer that has not answered "
	  "yet (it may start late, or be silent): its rails are taken out "
	  "once they refuse or complete nothing for this long; 0 (or "
	  "FI_MULTIRAIL_RAIL_TIMEOUT_MS=0): only the core's errors" },
	{ "messages", FI_PARAM_STRING, &mrl_params.messages, 0, 0,
	  "rail0 (default): sends and tagged sends pass through to rail "
	  "0's core, which matches them; striped: multirail matches them "
	  "and carries them over every rail, through a rail's loss (host "
	  "memory only, no rendezvous yet: docs/limits.md)" },
	{ "gpu", FI_PARAM_INT, NULL, 0, 0,
	  "The GPU this process uses, for the order of fi_getinfo's "
	  "entries (default: CUDA's current device, for FI_HMEM users)." },
	{ "gpu_pci", FI_PARAM_STRING, NULL, 0, 0,
	  "Comma list of GPU PCI bus ids replacing CUDA's devices "
	  "(device i is the i-th; testing without GPUs)." },
};

#define MRL_NPARAMS (sizeof(mrl_param_defs) / sizeof(mrl_param_defs[0]))

static void mrl_define_params(void)
{
	size_t i;

	/* numbers read here carry their default in the help */
	for (i = 0; i < MRL_NPARAMS; i++) {
		const struct mrl_param_def *d = &mrl_param_defs[i];

		if (d->value && d->type != FI_PARAM_STRING)
			fi_param_define(&mrl_prov, d->name, d->type,
					"%s (default %ld).", d->help, d->def);
		else
			fi_param_define(&mrl_prov, d->name, d->type, "%s",
					d->help);
	}
}

static void mrl_too_small(const struct mrl_param_def *d, long long got)
{
	char upper[32];
	size_t i;

	for (i = 0; d->name[i] && i < sizeof(upper) - 1; i++)
		upper[i] = toupper((unsigned char) d->name[i]);
	upper[i] = '\0';
	MRL_WARN(FI_LOG_CORE, "FI_MULTIRAIL_%s=%lld is below %ld: ignored\n",
		 upper, got, d->min);
}

static void mrl_read_param(const struct mrl_param_def *d)
{
	size_t sz;
	int i;

	switch (d->type) {
	case FI_PARAM_STRING:
		fi_param_get_str(&mrl_prov, d->name, d->value);
		break;
	case FI_PARAM_INT:
		if (fi_param_get_int(&mrl_prov, d->name, &i))
			break;
		if (i < d->min)
			mrl_too_small(d, i);
		else
			*(int *) d->value = i;
		break;
	case FI_PARAM_SIZE_T:
		if (fi_param_get_size_t(&mrl_prov, d->name, &sz))
			break;
		if (sz < (size_t) d->min)
			mrl_too_small(d, (long long) sz);
		else
			*(size_t *) d->value = sz;
		break;
	default:
		break;
	}
}

static void mrl_set_default(const struct mrl_param_def *d)
{
	if (d->type == FI_PARAM_INT)
		*(int *) d->value = (int) d->def;
	else if (d->type == FI_PARAM_SIZE_T)
		*(size_t *) d->value = (size_t) d->def;
}

static void mrl_read_params(void)
{
	size_t i;

	for (i = 0; i < MRL_NPARAMS; i++) {
		if (!mrl_param_defs[i].value)
			continue;
		mrl_set_default(&mrl_param_defs[i]);
		mrl_read_param(&mrl_param_defs[i]);
	}
}

static void mrl_cleanup(void)
{
	mrl_locality_fini();
}

struct fi_provider mrl_prov = {
	.name = MRL_PROV_NAME,
	.version = MRL_VERSION,
	/* libfabric 2.x skips providers older than the app's API version. */
	.fi_version = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION),
	.getinfo = mrl_getinfo,
	.fabric = mrl_fabric_open,
	.cleanup = mrl_cleanup,
};

FI_EXT_INI
{
	mrl_define_params();
	mrl_read_params();
	return &mrl_prov;
}
