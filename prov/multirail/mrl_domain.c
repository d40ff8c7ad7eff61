/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * Domain: one core fabric and domain per rail.  The rails are named in our
 * fi_info's domain name ("vA0+vA1+..."), so an fi_info that went through
 * fi_dupinfo or the application's hands still opens the same rails.
 */
#include <stdlib.h>
#include <string.h>

#include "mrl.h"

static void mrl_domain_close_rails(struct mrl_domain *dom)
{
	int i;

	for (i = 0; i < dom->nrails; i++) {
		if (dom->rails[i].domain)
			fi_close(&dom->rails[i].domain->fid);
		if (dom->rails[i].fabric)
			fi_close(&dom->rails[i].fabric->fid);
		fi_freeinfo(dom->rails[i].info);
	}
}

static int mrl_domain_close(struct fid *fid)
{
	struct mrl_domain *dom = mrl_container_of(fid, struct mrl_domain,
						  domain_fid.fid);

	if (!mrl_list_empty(&dom->mrs) ||
	    __atomic_load_n(&dom->children, __ATOMIC_RELAXED)) {
		MRL_WARN(FI_LOG_DOMAIN, "domain closed with memory registered "
			 "or objects open on it\n");
		return -FI_EBUSY;
	}
	mrl_domain_close_rails(dom);
	fi_freeinfo(dom->info);
	free(dom->raw_maps);
	free(dom->mr_hash);
	pthread_mutex_destroy(&dom->lock);
	free(dom);
	return 0;
}

static int mrl_domain_control(struct fid *fid, int command, void *arg)
{
	struct mrl_domain *dom = mrl_container_of(fid, struct mrl_domain,
						  domain_fid.fid);
	struct fi_mr_map_raw *map = arg;

	switch (command) {
	case FI_MAP_RAW_MR:
		return mrl_mr_map_raw(&dom->domain_fid, map->base_addr,
				      map->raw_key, map->key_size, map->key,
				      map->flags);
	case FI_UNMAP_KEY:
		return mrl_mr_unmap_key(&dom->domain_fid, *(uint64_t *) arg);
	default:
		return -FI_ENOSYS;
	}
}

static struct fi_ops mrl_domain_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = mrl_domain_close,
	.bind = mrl_no_bind,
	.control = mrl_domain_control,
	.ops_open = mrl_no_ops_open,
};

static struct fi_ops_domain mrl_domain_ops = {
	.size = sizeof(struct fi_ops_domain),
	.av_open = mrl_av_open,
	.cq_open = mrl_cq_open,
	.endpoint = mrl_ep_open,
	.scalable_ep = mrl_no_scalable_ep,
	.cntr_open = mrl_cntr_open,
	.poll_open = mrl_poll_open,
	.stx_ctx = mrl_no_stx_ctx,
	.srx_ctx = mrl_no_srx_ctx,
	.query_atomic = mrl_query_atomic,
	.query_collective = mrl_no_query_collective,
};

static struct fi_ops_mr mrl_mr_ops = {
	.size = sizeof(struct fi_ops_mr),
	.reg = mrl_mr_reg,
	.regv = mrl_mr_regv,
	.regattr = mrl_mr_regattr,
};

static enum mrl_policy mrl_parse_policy(const char *s)
{
	if (!s || !*s || !strcmp(s, "auto"))
		return MRL_POLICY_AUTO;
	if (!strcmp(s, "split"))
		return MRL_POLICY_SPLIT;
	if (!strcmp(s, "roundrobin"))
		return MRL_POLICY_ROUNDROBIN;
	MRL_WARN(FI_LOG_DOMAIN, "FI_MULTIRAIL_POLICY=%s unknown; using auto\n",
		 s);
	return MRL_POLICY_AUTO;
}

static int mrl_domain_open_rail(struct mrl_domain *dom, int i, const char *name)
{
	struct mrl_rail *rail = &dom->rails[i];
	int ret;

	/* sources on rail 0 for control claims; on every rail for the
	 * striped message path's packets (mrl_pkt_sender_ok) */
	ret = mrl_core_getinfo_rail(dom->fabric->version,
				    dom->fabric->core_name,
				    dom->fabric->core_fabric, name, dom->info,
				    i == 0 || mrl_msg_striped_wanted(dom),
				    &rail->info);
	if (ret)
		return ret;
	ret = fi_fabric(rail->info->fabric_attr, &rail->fabric, NULL);
	if (ret) {
		MRL_WARN(FI_LOG_DOMAIN, "rail %d (%s): fi_fabric: %s\n", i,
			 name, fi_strerror(-ret));
		return ret;
	}
	MRL_INFO(FI_LOG_DOMAIN, "rail %d (%s): progress %d/%d threading %d "
		 "mr_mode 0x%lx max_msg %zu inject %zu\n", i, name,
		 rail->info->domain_attr->control_progress,
		 rail->info->domain_attr->data_progress,
		 rail->info->domain_attr->threading,
		 (unsigned long) rail->info->domain_attr->mr_mode,
		 rail->info->ep_attr->max_msg_size,
		 rail->info->tx_attr->inject_size);
	ret = fi_domain(rail->fabric, rail->info, &rail->domain, NULL);
	if (ret)
		MRL_WARN(FI_LOG_DOMAIN, "rail %d (%s): fi_domain: %s\n", i,
			 name, fi_strerror(-ret));
	return ret;
}

/*
 * Does the core's own writedata raise the target's entry with the write's
 * length, after its bytes?  libfabric 2.x's tcp and shm and efa do (their
 * target entry is the write's completion there); 1.x's rxm reports a
 * length of 0, and a core not named here is not relied on.
 */
static bool mrl_core_writedata(const struct fi_info *core)
{
	const char *name = core->fabric_attr->prov_name;

	return FI_MAJOR(fi_version()) >= 2 && core->domain_attr->cq_data_size &&
	       (!strcmp(name, "tcp") || !strcmp(name, "shm") ||
		!strcmp(name, "efa"));
}

static void mrl_domain_attrs(struct mrl_domain *dom)
{
	const struct fi_info *core = dom->rails[0].info;

	dom->mr_mode = dom->info->domain_attr->mr_mode;
	dom->core_mr_local = !!(core->domain_attr->mr_mode & FI_MR_LOCAL);
	dom->core_max_msg = core->ep_attr->max_msg_size;
	dom->inject_size = core->tx_attr->inject_size;
	dom->cq_data_size = core->domain_attr->cq_data_size;
	dom->key0_mask = core->domain_attr->mr_key_size &&
			 core->domain_attr->mr_key_size <= 4 ?
			 MRL_KEY_CORE_MASK : ~0ull;
	dom->ctrl_own_ep = !(core->caps & FI_TAGGED);
	dom->src0 = !!(core->caps & FI_SOURCE);
	/*
	 * fi_info says nothing of the local iovs one RMA may take.  efa-direct
	 * takes one (efa_io_defs.h); a core of one remote iov is taken to be
	 * such a device, and every chunk stays within one of the user's iovs.
	 */
	dom->rma_one_iov = core->tx_attr->rma_iov_limit <= 1;
	dom->fence_by_read = !strcmp(core->fabric_attr->prov_name, "shm") &&
			     (core->caps & FI_READ);
	/*
	 * efa completes a write (transmit complete, its only kind on
	 * efa-direct) once the peer's NIC acknowledged it; tcp once the bytes
	 * reached its socket (mrl_fence.c).
	 */
	dom->acked_writes = !strcmp(core->fabric_attr->prov_name, "efa");
	dom->core_writedata = mrl_core_writedata(core);
	dom->policy = mrl_parse_policy(mrl_params.policy);
}

/*
 * Where the rails are, so that registrations can name the rails nearest
 * their memory.  Rails that cannot be placed (lo, veths, a VM without PCI
 * information) leave every rail in use, which is said once.
 */
static void mrl_locate_rails(struct mrl_domain *dom, char **names)
{
	char busid[MRL_TOPO_BUSID_LEN];
	int i;

	dom->rails_located = mrl_locality_rails(names, dom->nrails,
						dom->rail_loc);
	if (!dom->rails_located) {
		MRL_INFO(FI_LOG_DOMAIN, "locality of the rails unknown (%s%s "
			 "not in the topology, or no PCI information): every "
			 "rail for all memory\n", mrl_rail_topo_name(names[0]),
			 dom->nrails > 1 ? ", ..." : "");
		return;
	}
	for (i = 0; i < dom->nrails; i++) {
		mrl_topo_loc_busid(&dom->rail_loc[i], busid, sizeof(busid));
		MRL_INFO(FI_LOG_DOMAIN, "rail %d (%s): PCI %s, NUMA node %d\n",
			 i, mrl_rail_topo_name(names[i]), busid,
			 dom->rail_loc[i].numa);
	}
}

int mrl_domain_open(struct fid_fabric *fabric, struct fi_info *info,
		    struct fid_domain **domain, void *context)
{
	struct mrl_domain *dom;
	char **names = NULL;
	int ret, i;

	if (!info || !info->domain_attr || !info->domain_attr->name) {
		MRL_WARN(FI_LOG_DOMAIN, "fi_domain needs a multirail fi_info\n");
		return -FI_EINVAL;
	}
	dom = calloc(1, sizeof(*dom));
	if (!dom)
		return -FI_ENOMEM;
	pthread_mutex_init(&dom->lock, NULL);
	dom->locking = info->domain_attr->threading != FI_THREAD_DOMAIN;
	mrl_list_init(&dom->mrs);
	dom->fabric = mrl_container_of(fabric, struct mrl_fabric, fabric_fid);
	dom->info = fi_dupinfo(info);
	ret = dom->info ? mrl_split_rails(info->domain_attr->name, &names) :
	      -FI_ENOMEM;
	if (ret)
		goto err;
	for (i = 0; names[i]; i++) {
		char core[256];

		dom->nrails = i + 1;
		mrl_rail_core_name(names[i], core, sizeof(core));
		ret = mrl_domain_open_rail(dom, i, core);
		if (ret)
			goto err;
	}
	mrl_locate_rails(dom, names);
	mrl_free_names(names);
	names = NULL;
	mrl_domain_attrs(dom);

	dom->domain_fid.fid.fclass = FI_CLASS_DOMAIN;
	dom->domain_fid.fid.context = context;
	dom->domain_fid.fid.ops = &mrl_domain_fi_ops;
	dom->domain_fid.ops = &mrl_domain_ops;
	dom->domain_fid.mr = &mrl_mr_ops;
	*domain = &dom->domain_fid;
	MRL_INFO(FI_LOG_DOMAIN, "domain %s: %d rail(s) over %s\n",
		 info->domain_attr->name, dom->nrails, dom->fabric->core_name);
	return 0;
err:
	mrl_free_names(names);
	mrl_domain_close_rails(dom);
	fi_freeinfo(dom->info);
	pthread_mutex_destroy(&dom->lock);
	free(dom);
	return ret;
}
